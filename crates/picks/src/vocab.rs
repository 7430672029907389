//! A set's samples built token by token: the vocabulary that gives each token text its id,
//! and a token (with its log-probabilities) or a piece of text appended to a sample.
//!
//! ```
//! use choicewise_picks::vocab::{Vocab, push_piece, push_token};
//! use choicewise_picks::traces::Sample;
//! let mut vocab = Vocab::new();
//! let mut s = Sample::default();
//! push_token(&mut s, &mut vocab, "4", -0.5, &[("4", -0.5), ("5", -1.5)]);
//! push_piece(&mut s, &mut vocab, " ok");
//! assert_eq!(vocab.tokens(), ["<eos>", "4", "5", " ok"]);
//! assert_eq!(s.tokens, [1, 3]);
//! assert_eq!(s.top_ids[0], [1, 2, 2, 2, 2]);
//! ```

use std::collections::HashMap;

use crate::traces::{Sample, TOP_K};

/// Token text → id, in the order first seen; id 0 is `<eos>`.
#[derive(Debug, Clone)]
pub struct Vocab {
    tokens: Vec<String>,
    ids: HashMap<String, u32>,
}

impl Default for Vocab {
    fn default() -> Self {
        Vocab::new()
    }
}

impl Vocab {
    /// A vocabulary of `<eos>` alone.
    ///
    /// ```
    /// assert_eq!(choicewise_picks::vocab::Vocab::new().tokens(), ["<eos>"]);
    /// ```
    pub fn new() -> Vocab {
        Vocab {
            tokens: vec!["<eos>".to_string()],
            ids: HashMap::new(),
        }
    }

    /// A vocabulary read back (a set's `vocab.json`), to go on with: its token 0 must be
    /// `<eos>`, else the error says so.
    ///
    /// ```
    /// use choicewise_picks::vocab::Vocab;
    /// let mut v = Vocab::from_tokens(vec!["<eos>".into(), "a".into()]).unwrap();
    /// assert_eq!((v.id("a"), v.id("b")), (1, 2));
    /// assert!(Vocab::from_tokens(vec!["a".into()]).is_err());
    /// ```
    pub fn from_tokens(tokens: Vec<String>) -> Result<Vocab, String> {
        if tokens.first().map(String::as_str) != Some("<eos>") {
            return Err("not a set choicewise recorded (its token 0 is not <eos>)".into());
        }
        let mut ids = HashMap::new();
        for (i, t) in tokens.iter().enumerate().skip(1) {
            ids.entry(t.clone()).or_insert(i as u32);
        }
        Ok(Vocab { tokens, ids })
    }

    /// The id of `token`, given it when it is new.
    ///
    /// ```
    /// let mut v = choicewise_picks::vocab::Vocab::new();
    /// assert_eq!((v.id("x"), v.id("y"), v.id("x")), (1, 2, 1));
    /// ```
    pub fn id(&mut self, token: &str) -> u32 {
        if let Some(&id) = self.ids.get(token) {
            return id;
        }
        let id = self.tokens.len() as u32;
        self.tokens.push(token.to_string());
        self.ids.insert(token.to_string(), id);
        id
    }

    /// Token text by id.
    ///
    /// ```
    /// assert_eq!(choicewise_picks::vocab::Vocab::new().tokens().len(), 1);
    /// ```
    pub fn tokens(&self) -> &[String] {
        &self.tokens
    }

    /// Token text by id, as a [`TraceSet`](crate::traces::TraceSet)'s `vocab`.
    ///
    /// ```
    /// let mut v = choicewise_picks::vocab::Vocab::new();
    /// v.id("a");
    /// assert_eq!(v.into_tokens(), ["<eos>", "a"]);
    /// ```
    pub fn into_tokens(self) -> Vec<String> {
        self.tokens
    }
}

/// A log-probability as recorded: a server may write -inf as null; the least a
/// half-precision value holds.
///
/// ```
/// use choicewise_picks::vocab::logprob_of;
/// assert_eq!(logprob_of(Some(-0.5)), -0.5);
/// assert_eq!(logprob_of(None), -65504.0);
/// assert_eq!(logprob_of(Some(-1e9)), -65504.0);
/// ```
pub fn logprob_of(v: Option<f64>) -> f32 {
    v.map_or(-65504.0, |x| x.max(-65504.0) as f32)
}

/// A token with its log-probability and its top alternatives appended to `s` (fewer than
/// `TOP_K` alternatives: the last one again; none: the token itself).
///
/// ```
/// use choicewise_picks::vocab::{Vocab, push_token};
/// let (mut s, mut v) = (Default::default(), Vocab::new());
/// push_token::<&str>(&mut s, &mut v, "a", -0.1, &[]);
/// assert_eq!(s.top_ids[0], [1; 5]);
/// ```
pub fn push_token<T: AsRef<str>>(
    s: &mut Sample,
    vocab: &mut Vocab,
    token: &str,
    lp: f32,
    top: &[(T, f32)],
) {
    let id = vocab.id(token);
    let mut ids = [id; TOP_K];
    let mut lps = [lp; TOP_K];
    for k in 0..TOP_K {
        if let Some((t, l)) = top.get(k.min(top.len().saturating_sub(1))) {
            ids[k] = vocab.id(t.as_ref());
            lps[k] = *l;
        }
    }
    s.tokens.push(id);
    s.logprob.push(lp);
    s.top_ids.push(ids);
    s.top_logprobs.push(lps);
}

/// A piece of content, without log-probabilities, appended to `s` as a token.
///
/// ```
/// use choicewise_picks::vocab::{Vocab, push_piece};
/// let (mut s, mut v) = (Default::default(), Vocab::new());
/// push_piece(&mut s, &mut v, "hi");
/// assert_eq!((s.tokens[0], s.logprob[0]), (1, 0.0));
/// ```
pub fn push_piece(s: &mut Sample, vocab: &mut Vocab, piece: &str) {
    let id = vocab.id(piece);
    s.tokens.push(id);
    s.logprob.push(0.0);
    s.top_ids.push([id; TOP_K]);
    s.top_logprobs.push([0.0; TOP_K]);
}
