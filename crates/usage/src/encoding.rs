//! Which BPE table a model uses, and the lazily loaded, process-wide tables.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::bpe::Bpe;

/// The tiktoken encodings this crate counts with.
///
/// Both tables are embedded in the `tiktoken-rs` crate (no download at run
/// time) and are read once per process, on first use, into a shared
/// tokenizer (see [`preload`]).
///
/// ```
/// use choicewise_usage::EncodingName;
///
/// assert_eq!(EncodingName::O200kBase.as_str(), "o200k_base");
/// assert_eq!(EncodingName::Cl100kBase.to_string(), "cl100k_base");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EncodingName {
    /// `o200k_base`: GPT-4o, GPT-4.1, GPT-4.5, GPT-5 and the o-series
    /// reasoning models (o1, o3, o4-mini).
    O200kBase,
    /// `cl100k_base`: GPT-4 (non-o), GPT-4 Turbo, GPT-3.5 Turbo and the
    /// `text-embedding-3-*` / `text-embedding-ada-002` embedding models.
    Cl100kBase,
}

/// The encoding assumed for a model name this crate does not recognise.
///
/// `o200k_base` is the encoding of every current OpenAI chat model, so it is
/// the better guess for an unknown (often newer, or aliased) model name; the
/// OpenAI cookbook's `num_tokens_from_messages` falls back to it as well.
///
/// ```
/// use choicewise_usage::{encoding_for_model, DEFAULT_ENCODING};
///
/// let choice = encoding_for_model("my-azure-deployment");
/// assert_eq!(choice.name, DEFAULT_ENCODING);
/// assert!(!choice.known);
/// ```
pub const DEFAULT_ENCODING: EncodingName = EncodingName::O200kBase;

impl EncodingName {
    /// The name tiktoken uses for this encoding.
    ///
    /// ```
    /// use choicewise_usage::EncodingName;
    ///
    /// assert_eq!(EncodingName::Cl100kBase.as_str(), "cl100k_base");
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            EncodingName::O200kBase => "o200k_base",
            EncodingName::Cl100kBase => "cl100k_base",
        }
    }

    /// The shared tokenizer for this encoding, loading its table on the first
    /// call in the process (the ranks the build script wrote from tiktoken-rs's
    /// table read into a map, the pre-tokenizer built; later calls are a pointer
    /// read).
    pub(crate) fn bpe(self) -> &'static Bpe {
        let bpe = match self {
            EncodingName::O200kBase => Bpe::o200k_base(),
            EncodingName::Cl100kBase => Bpe::cl100k_base(),
        };
        self.loaded_flag().store(true, Ordering::Release);
        bpe
    }

    fn loaded_flag(self) -> &'static AtomicBool {
        static O200K: AtomicBool = AtomicBool::new(false);
        static CL100K: AtomicBool = AtomicBool::new(false);
        match self {
            EncodingName::O200kBase => &O200K,
            EncodingName::Cl100kBase => &CL100K,
        }
    }

    /// Whether this encoding's table is loaded in this process: a count with it takes no
    /// time beyond its own (see [`counts_quickly`]).
    ///
    /// ```
    /// use choicewise_usage::{preload, EncodingName};
    ///
    /// preload(EncodingName::O200kBase);
    /// assert!(EncodingName::O200kBase.loaded());
    /// ```
    pub fn loaded(self) -> bool {
        self.loaded_flag().load(Ordering::Acquire)
    }
}

/// Texts of at most this many bytes in all are small enough to count on an async runtime's
/// worker rather than hand them to a blocking thread (a short answer, a short prompt;
/// docs/usage.md has the counting speed): see [`counts_quickly`].
pub const QUICK_COUNT_BYTES: usize = 512;

/// Whether counting `bytes` of text with `name` is quick enough for the calling thread,
/// even an async runtime's worker: the table is loaded and the text at most
/// [`QUICK_COUNT_BYTES`]. Otherwise a caller on a runtime counts on a blocking thread.
///
/// ```
/// use choicewise_usage::{counts_quickly, preload, EncodingName, QUICK_COUNT_BYTES};
///
/// preload(EncodingName::O200kBase);
/// assert!(counts_quickly(EncodingName::O200kBase, 100));
/// assert!(!counts_quickly(EncodingName::O200kBase, QUICK_COUNT_BYTES + 1));
/// ```
pub fn counts_quickly(name: EncodingName, bytes: usize) -> bool {
    bytes <= QUICK_COUNT_BYTES && name.loaded()
}

impl fmt::Display for EncodingName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The outcome of [`encoding_for_model`]: the encoding to count with, and
/// whether the model name was recognised.
///
/// ```
/// use choicewise_usage::{encoding_for_model, EncodingChoice, EncodingName};
///
/// assert_eq!(
///     encoding_for_model("gpt-4o-mini"),
///     EncodingChoice { name: EncodingName::O200kBase, known: true }
/// );
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EncodingChoice {
    /// The encoding to count with.
    pub name: EncodingName,
    /// `false` when the model name was not recognised and [`DEFAULT_ENCODING`]
    /// was chosen; callers should say so next to the estimate.
    pub known: bool,
}

/// Model-name prefixes that use `o200k_base`, checked before the
/// `cl100k_base` ones (so `gpt-4o`/`gpt-4.1` never match `gpt-4`).
const O200K_PREFIXES: &[&str] = &[
    "gpt-4o",
    "chatgpt-4o",
    "gpt-4.1",
    "gpt-4.5",
    "gpt-5",
    "o1",
    "o3",
    "o4",
    // gpt-oss uses o200k_harmony, which has o200k_base's ordinary ranks (it only
    // adds special tokens), so ordinary-text counts are identical.
    "gpt-oss",
];

/// Model-name prefixes that use `cl100k_base`.
const CL100K_PREFIXES: &[&str] = &[
    "gpt-4",
    "gpt-3.5",
    // Azure's spelling of gpt-3.5 model names.
    "gpt-35",
    "text-embedding-3",
    "text-embedding-ada-002",
    "davinci-002",
    "babbage-002",
];

/// Picks the encoding for an OpenAI model name.
///
/// The name is normalised first: trimmed, lower-cased, any routing prefix up
/// to the last `/` dropped (`openai/gpt-4o`, `azure/gpt-4o`), and a
/// fine-tune id reduced to its base model (`ft:gpt-4o-mini:org::id` →
/// `gpt-4o-mini`). A prefix then matches when it is followed by the end of
/// the name or by `-`, `:`, `@` or `.` (never `.` for `gpt-4`, so that an
/// unknown `gpt-4.x` is not taken for GPT-4):
///
/// * `o200k_base`: `gpt-4o*`, `chatgpt-4o*`, `gpt-4.1*`, `gpt-4.5*`,
///   `gpt-5*`, `o1*`, `o3*`, `o4*`, `gpt-oss*`;
/// * `cl100k_base`: `gpt-4*` (not 4o/4.1/4.5), `gpt-3.5*`, `gpt-35*`
///   (Azure), `text-embedding-3*`, `text-embedding-ada-002`,
///   `davinci-002`, `babbage-002`.
///
/// Anything else returns [`DEFAULT_ENCODING`] with `known: false`.
///
/// ```
/// use choicewise_usage::{encoding_for_model, EncodingName};
///
/// assert_eq!(encoding_for_model("gpt-4o-2024-08-06").name, EncodingName::O200kBase);
/// assert_eq!(encoding_for_model("ft:gpt-4o-mini:acme::abc123").name, EncodingName::O200kBase);
/// assert_eq!(encoding_for_model("openai/o3-mini").name, EncodingName::O200kBase);
/// assert_eq!(encoding_for_model("gpt-4-turbo").name, EncodingName::Cl100kBase);
/// assert_eq!(encoding_for_model("gpt-3.5-turbo-0125").name, EncodingName::Cl100kBase);
/// assert!(!encoding_for_model("llama-3-70b").known);
/// ```
pub fn encoding_for_model(model: &str) -> EncodingChoice {
    let normalized = normalize_model(model);
    let name = normalized.as_str();
    for prefix in O200K_PREFIXES {
        if matches_prefix(name, prefix, true) {
            return EncodingChoice {
                name: EncodingName::O200kBase,
                known: true,
            };
        }
    }
    for prefix in CL100K_PREFIXES {
        if matches_prefix(name, prefix, *prefix != "gpt-4") {
            return EncodingChoice {
                name: EncodingName::Cl100kBase,
                known: true,
            };
        }
    }
    EncodingChoice {
        name: DEFAULT_ENCODING,
        known: false,
    }
}

fn normalize_model(model: &str) -> String {
    let lower = model.trim().to_ascii_lowercase();
    let mut name = lower.rsplit('/').next().unwrap_or_default();
    if let Some(rest) = name.strip_prefix("ft:") {
        name = rest.split(':').next().unwrap_or_default();
    }
    name.to_owned()
}

fn matches_prefix(name: &str, prefix: &str, dot_ok: bool) -> bool {
    match name.strip_prefix(prefix) {
        None => false,
        Some(rest) => match rest.chars().next() {
            None | Some('-' | ':' | '@') => true,
            Some('.') => dot_ok,
            Some(_) => false,
        },
    }
}

/// Loads an encoding's table now (a no-op when already loaded), so that the
/// first count does not pay for it; see `examples/load_time.rs` for the cost.
///
/// ```
/// use choicewise_usage::{preload, EncodingName};
///
/// preload(EncodingName::Cl100kBase);
/// ```
pub fn preload(name: EncodingName) {
    let _ = name.bpe();
}

/// Whitespace runs longer than this many characters are counted in pieces.
///
/// tiktoken-rs 0.12's own `encode_ordinary` matches the pre-tokenizer's
/// `\s+(?!\S)` with fancy-regex, whose backtracking costs time quadratic in
/// the run's length and overflows its stack on a run of about 1,000,000
/// whitespace characters (it then panics). This crate's pre-tokenizer has no
/// lookahead and no such limit, but cuts the same runs, so that its counts
/// stay the ones it gave with tiktoken-rs's and one piece's merges stay
/// short. The cut is a multiple of the longest whitespace tokens (128
/// spaces; 16 newlines or ideographic spaces), so runs of one of those count
/// exactly; other runs may be a token or two off per cut.
const MAX_WHITESPACE_RUN: usize = 1 << 12;

/// Texts longer than this many bytes are estimated from [`WINDOWS`] windows
/// of [`WINDOW`] bytes, evenly spaced, each counted as a text of its own and
/// scaled to the whole length: the time and memory of a count are bounded
/// whatever the length of the text.
const EXACT_UP_TO: usize = 256 << 10;
const WINDOWS: usize = 16;
const WINDOW: usize = 16 << 10;

/// Counts the tokens of `text` as ordinary text (special-token spellings
/// such as `<|endoftext|>` are split like any other text, never rejected).
///
/// Equals `encode_ordinary(text).len()` of tiktoken for every text of at
/// most 256 KiB without a run of more than 4,096 whitespace characters (runs
/// of spaces or of newlines alone may be longer) and without a pre-tokenizer
/// piece of more than 64 KiB: every language's text, CJK and Thai without
/// spaces, runs of emoji or symbols included. Longer whitespace runs are cut
/// and counted in pieces (a token or two off per cut); a longer piece (a flood
/// of one letter or symbol) is counted as one token per four bytes, since
/// merging it costs memory in proportion to it; a longer text is estimated
/// from 16 windows of 16 KiB spread over it, each counted so, and scaled to
/// its length. Either way the count takes bounded time and memory and never
/// panics.
///
/// ```
/// use choicewise_usage::{count_text, EncodingName};
///
/// assert_eq!(count_text(EncodingName::Cl100kBase, "tiktoken is great!"), 6);
/// assert_eq!(count_text(EncodingName::O200kBase, ""), 0);
/// // A piece of 100,000 letters: counted at once, by the linear rule.
/// assert_eq!(count_text(EncodingName::O200kBase, &"a".repeat(100_000)), 25_000);
/// ```
pub fn count_text(name: EncodingName, text: &str) -> u64 {
    if text.len() <= EXACT_UP_TO {
        return count_runs(name, text);
    }
    // Each window starts and ends on a character boundary.
    let floor = |mut i: usize| {
        while !text.is_char_boundary(i) {
            i -= 1;
        }
        i
    };
    let step = (text.len() - WINDOW) / (WINDOWS - 1);
    let (mut tokens, mut bytes) = (0u64, 0usize);
    for w in 0..WINDOWS {
        let start = floor(w * step);
        let end = floor((w * step + WINDOW).min(text.len()));
        tokens += count_runs(name, &text[start..end]);
        bytes += end - start;
    }
    ((tokens as u128 * text.len() as u128).div_ceil(bytes.max(1) as u128)) as u64
}

/// [`count_text`] of a text of any length, in time linear in it: whitespace runs over
/// [`MAX_WHITESPACE_RUN`] characters cut, every piece merged (or, past
/// `bpe::LONG_PIECE` bytes, estimated).
fn count_runs(name: EncodingName, text: &str) -> u64 {
    if text.is_empty() {
        return 0;
    }
    let bpe = name.bpe();
    if text.len() <= MAX_WHITESPACE_RUN {
        // Too short to hold an over-long whitespace run (a character is at least a byte).
        return bpe.count(text);
    }
    let mut total = 0u64;
    // Where the text not yet counted starts, and the whitespace run's length in characters.
    let mut start = 0;
    let mut run_chars = 0usize;
    for (i, c) in text.char_indices() {
        if !c.is_whitespace() {
            run_chars = 0;
            continue;
        }
        run_chars += 1;
        if run_chars > MAX_WHITESPACE_RUN {
            total += bpe.count(&text[start..i]);
            start = i;
            run_chars = 1;
        }
    }
    total + bpe.count(&text[start..])
}
