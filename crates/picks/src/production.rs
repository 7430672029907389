//! Production traffic as a set: the samples a gateway recorded (`[records] samples = true`),
//! one item per request that ran several, and the grades given to those requests since
//! (`POST /v1/feedback`).
//!
//! An item's prompt is its request's id (prompts are never recorded). It has no answer: its
//! picks are measured against its grade where it has one ([`Against::Feedback`]) and against
//! the vote of all of its samples elsewhere ([`Against::Vote`]), apart ([`parts`]). A grade
//! speaks of the sample that became the answer's first choice; a grade whose answer is not
//! among the samples kept (it failed, was cancelled or empty) cannot be attached, and is
//! counted.
//!
//! `choicewise picks record --from-records` writes the items to a directory one at a time;
//! the console's picks page reads them into memory ([`read`]) up to a bound, and measures the
//! picks offline ([`crate::offline_summary`]).
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use choicewise_picks::production::{Against, parts, read};
//! use choicewise_records::{RecordsQuery, RequestRecord, SampleRecord, Store};
//! let dir = tempfile::tempdir()?;
//! let store = Store::connect(&format!("sqlite://{}", dir.path().join("r.db").display())).await?;
//! let mut r = RequestRecord::new(1, "req-1", "m");
//! for (n, text) in ["#### 4", "#### 4", "#### 5"].into_iter().enumerate() {
//!     let mut s = SampleRecord::new(n as i64, "stop");
//!     s.content = Some(text.into());
//!     r.samples.push(s);
//! }
//! store.write(&[r]).await?;
//! let recorded = read(&store, RecordsQuery::since(0).model("m").with_samples()).await?;
//! assert_eq!((recorded.counts.items, recorded.counts.samples), (1, 3));
//! let (parts, _) = parts(recorded.set, &recorded.grades)?;
//! assert_eq!(parts[0].0, Against::Vote);
//! # Ok(()) }
//! ```

use std::borrow::Cow;
use std::collections::{BTreeSet, HashMap};

use choicewise_records::{
    Grade, RecordsError, RecordsQuery, RequestRecord, SampleRecord, Skipped, Store,
};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::reference::majority;
use crate::traces::{Problem, Sample, TOP_K, TraceSet};
use crate::vocab::{Vocab, logprob_of, push_piece, push_token};

/// Chat's `logprobs` object, as a record keeps it: its tokens borrowed from the record's
/// text where they need no unescaping.
#[derive(Deserialize)]
struct Logprobs<'a> {
    #[serde(default, borrow)]
    content: Option<Vec<Token<'a>>>,
}

#[derive(Deserialize)]
struct Token<'a> {
    #[serde(default, borrow)]
    token: Cow<'a, str>,
    #[serde(default)]
    logprob: Option<f64>,
    #[serde(default, borrow)]
    top_logprobs: Option<Vec<Top<'a>>>,
}

#[derive(Deserialize)]
struct Top<'a> {
    #[serde(default, borrow)]
    token: Cow<'a, str>,
    #[serde(default)]
    logprob: Option<f64>,
}

/// `content` in pieces as it streamed, each a word with the whitespace before it (a run of
/// whitespace: one piece a character): slices of it.
fn pieces(content: &str) -> impl Iterator<Item = &str> {
    let mut start = 0;
    let mut chars = content.char_indices();
    std::iter::from_fn(move || {
        for (i, c) in chars.by_ref() {
            if c.is_whitespace() && i > start {
                let piece = &content[start..i];
                start = i;
                return Some(piece);
            }
        }
        if start < content.len() {
            let piece = &content[start..];
            start = content.len();
            return Some(piece);
        }
        None
    })
}

/// The tokens, one after the other, spell `content` exactly.
fn spell(tokens: &[Token<'_>], content: &str) -> bool {
    let mut rest = content;
    for t in tokens {
        match rest.strip_prefix(t.token.as_ref()) {
            Some(after) => rest = after,
            None => return false,
        }
    }
    rest.is_empty()
}

/// A recorded sample as a set's sample: its log-probabilities' tokens where they spell its
/// content, else its content in pieces (words with the whitespace before them), without
/// log-probabilities.
///
/// ```
/// use choicewise_picks::production::sample_of;
/// use choicewise_picks::vocab::Vocab;
/// let mut s = choicewise_records::SampleRecord::new(0, "stop");
/// s.content = Some("So 4".into());
/// let mut vocab = Vocab::new();
/// let sample = sample_of(&s, &mut vocab);
/// assert!(sample.finished);
/// assert_eq!(vocab.tokens()[1..], ["So", " 4"]);
/// ```
pub fn sample_of(s: &SampleRecord, vocab: &mut Vocab) -> Sample {
    let content = s.content.as_deref().unwrap_or_default();
    let mut sample = Sample {
        finished: s.finish == "stop",
        ..Sample::default()
    };
    let tokens = (s.logprobs.as_deref())
        .and_then(|l| serde_json::from_str::<Logprobs<'_>>(l).ok())
        .and_then(|l| l.content)
        .unwrap_or_default();
    if !tokens.is_empty() && spell(&tokens, content) {
        let mut top: Vec<(&str, f32)> = Vec::with_capacity(TOP_K);
        for t in &tokens {
            top.clear();
            top.extend(
                (t.top_logprobs.iter().flatten())
                    .map(|alt| (alt.token.as_ref(), logprob_of(alt.logprob))),
            );
            push_token(&mut sample, vocab, &t.token, logprob_of(t.logprob), &top);
        }
        return sample;
    }
    for piece in pieces(content) {
        push_piece(&mut sample, vocab, piece);
    }
    sample
}

/// A sample's log-probabilities are there (a sample without has all its `top_logprobs`
/// zero).
///
/// ```
/// use choicewise_picks::production::has_logprobs;
/// use choicewise_picks::traces::Sample;
/// assert!(has_logprobs(&Sample::default()));
/// let s = Sample { tokens: vec![1], top_logprobs: vec![[0.0; 5]], ..Sample::default() };
/// assert!(!has_logprobs(&s));
/// ```
pub fn has_logprobs(s: &Sample) -> bool {
    s.is_empty()
        || s.top_logprobs
            .iter()
            .any(|top| top.iter().any(|&l| l != 0.0))
}

/// A sample that ended of itself with some text: a cancelled one's text is cut short, a
/// failed one's is not an answer.
fn kept(s: &SampleRecord) -> bool {
    !matches!(s.finish.as_str(), "error" | "cancelled")
        && s.content.as_deref().is_some_and(|c| !c.is_empty())
}

/// The place, among the samples kept, of the one that became the answer's first choice
/// (`output == Some(0)`): the answer a grade of the request speaks of. `None` when it was
/// not kept, or no sample became it.
fn answer_place(r: &RequestRecord) -> Option<usize> {
    (r.samples.iter().filter(|s| kept(s))).position(|s| s.output == Some(0))
}

/// What one recorded request gives a set ([`take`]).
#[derive(Debug)]
pub enum Taken {
    /// Its samples' texts were cut to the record's bound: its answers may be cut off.
    Cut,
    /// Fewer than two samples that ended of themselves with some text.
    Fewer,
    /// An item.
    Item {
        /// Its samples, in the order they were recorded.
        samples: Vec<Sample>,
        /// The place among them of the answer's first choice ([`Taken`]'s docs): where a
        /// grade of the request goes.
        answer: Option<usize>,
    },
}

/// Request `r` as an item: its samples that ended of themselves with some text, their
/// tokens given ids in `vocab`.
///
/// ```
/// use choicewise_picks::production::{Taken, take};
/// use choicewise_picks::vocab::Vocab;
/// use choicewise_records::{RequestRecord, SampleRecord};
/// let mut r = RequestRecord::new(0, "req", "m");
/// let sample = |n, finish: &str, text: &str, output| {
///     let mut s = SampleRecord::new(n, finish);
///     s.content = Some(text.into());
///     s.output = output;
///     s
/// };
/// r.samples = vec![sample(0, "cancelled", "cut sh", None), sample(1, "stop", "a", None)];
/// assert!(matches!(take(&r, &mut Vocab::new()), Taken::Fewer));
/// r.samples.push(sample(2, "stop", "b", Some(0)));
/// let Taken::Item { samples, answer } = take(&r, &mut Vocab::new()) else { panic!() };
/// assert_eq!((samples.len(), answer), (2, Some(1)));
/// ```
pub fn take(r: &RequestRecord, vocab: &mut Vocab) -> Taken {
    if r.samples_cut {
        return Taken::Cut;
    }
    if r.samples.iter().filter(|s| kept(s)).count() < 2 {
        return Taken::Fewer;
    }
    Taken::Item {
        samples: (r.samples.iter())
            .filter(|s| kept(s))
            .map(|s| sample_of(s, vocab))
            .collect(),
        answer: answer_place(r),
    }
}

/// A grade as a set keeps it (`grades.json`), of the item's sample `sample`.
///
/// ```
/// use choicewise_records::Grade;
/// let g = Grade::new(0.75, "score", "team-a", 7).source("ci");
/// assert_eq!(
///     choicewise_picks::production::grade_json(2, &g),
///     serde_json::json!({"sample": 2, "outcome": "score", "score": 0.75, "source": "ci", "by": "team-a", "at_ms": 7})
/// );
/// ```
pub fn grade_json(sample: usize, g: &Grade) -> Value {
    json!({
        "sample": sample,
        "outcome": g.outcome,
        "score": g.score,
        "source": g.source,
        "by": g.by,
        "at_ms": g.at_ms,
    })
}

/// An item's grade: the item's sample it speaks of (the answer's first choice) and its
/// score (1 right, 0 wrong). `grades.json` holds one per graded item's name.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
pub struct ItemGrade {
    /// The item's sample the grade speaks of.
    pub sample: usize,
    /// Its score, from 0 to 1.
    pub score: f64,
}

/// A score from this up counts right.
pub const RIGHT_FROM: f64 = 0.5;

/// The grades given to a set's items ([`apply_grades`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Graded {
    /// Items graded right.
    pub right: usize,
    /// Items graded wrong.
    pub wrong: usize,
    /// Items graded right whose graded sample has no answer the answer rule reads: no pick
    /// counts right on them.
    pub unread: usize,
}

/// Gives each item with a grade in `grades` its [`graded`] answers: the vote key of the
/// sample the grade speaks of when its score is [`RIGHT_FROM`] or more, none when less (a
/// pick that answers otherwise on an item graded wrong counts wrong: a lower bound). The
/// others are left as they are. A grade of a sample the item does not have is an error.
/// The samples' answers are read first ([`TraceSet::read_answers`]).
///
/// ```
/// use std::collections::HashMap;
/// use choicewise_picks::production::{ItemGrade, apply_grades};
/// use choicewise_picks::traces::{Problem, Sample, TraceSet};
/// let sample = |a: &str| Sample { answer: a.into(), ..Sample::default() };
/// let mut set = TraceSet {
///     problems: vec![Problem { name: Some("a".into()), samples: vec![sample("4"), sample("5")], ..Problem::default() }],
///     ..TraceSet::default()
/// };
/// let grades = HashMap::from([("a".to_string(), ItemGrade { sample: 1, score: 1.0 })]);
/// let counts = apply_grades(&mut set, &grades).unwrap();
/// assert_eq!(counts.right, 1);
/// assert!(set.problems[0].is_right("5") && !set.problems[0].is_right("4"));
/// ```
///
/// [`graded`]: crate::traces::Problem::graded
pub fn apply_grades(
    set: &mut TraceSet,
    grades: &HashMap<String, ItemGrade>,
) -> Result<Graded, String> {
    let mut counts = Graded::default();
    for p in &mut set.problems {
        let Some(g) = p.name.as_deref().and_then(|name| grades.get(name)) else {
            continue;
        };
        let Some(sample) = p.samples.get(g.sample) else {
            return Err(format!(
                "grades.json: item {:?} has {} samples, not a sample {} (grades of another set?)",
                p.name.as_deref().unwrap_or_default(),
                p.samples.len(),
                g.sample
            ));
        };
        let mut right = BTreeSet::new();
        if g.score >= RIGHT_FROM {
            counts.right += 1;
            if sample.answer.is_empty() {
                counts.unread += 1;
            } else {
                right.insert(sample.answer.clone());
            }
        } else {
            counts.wrong += 1;
        }
        p.graded = Some(right);
    }
    Ok(counts)
}

/// What a part of a set's items is measured against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Against {
    /// Their answers, or the grades of a command.
    Answers,
    /// Their grades from production (`POST /v1/feedback`).
    Feedback,
    /// The vote of all of each item's samples (no answer, no grade).
    Vote,
}

impl Against {
    /// The word for what an accuracy measures.
    ///
    /// ```
    /// use choicewise_picks::production::Against;
    /// assert_eq!(Against::Vote.measured(), "agreement");
    /// ```
    pub fn measured(self) -> &'static str {
        match self {
            Against::Answers => "right",
            Against::Feedback => "right by feedback",
            Against::Vote => "agreement",
        }
    }

    /// What a summary's `measured_against` says of it (`None`: the answers, unsaid).
    ///
    /// ```
    /// use choicewise_picks::production::Against;
    /// assert_eq!(Against::Feedback.label(), Some("feedback"));
    /// assert_eq!(Against::Answers.label(), None);
    /// ```
    pub fn label(self) -> Option<&'static str> {
        match self {
            Against::Answers => None,
            Against::Feedback => Some("feedback"),
            Against::Vote => Some(BY_VOTE),
        }
    }
}

/// What `measured_against` says of a set measured against the vote of its samples.
pub const BY_VOTE: &str = "the vote of all of each item's samples (no answers in the set)";

/// A set without answers (production traffic), its samples' answers read, in the parts
/// measured apart: the items graded (`grades`, by item name) against their grades, the
/// others against the vote of all of each item's samples (the set's plurality rule, ties to
/// the answer drawn first); never in one figure. Either part is left out when it has no
/// item. Also: the counts of the grades given.
///
/// ```
/// use std::collections::HashMap;
/// use choicewise_picks::production::{Against, parts};
/// use choicewise_picks::traces::{Problem, Sample, TraceSet};
/// let sample = |a: &str| Sample { answer: a.into(), ..Sample::default() };
/// let set = TraceSet {
///     problems: vec![Problem { samples: vec![sample("4"), sample("4"), sample("5")], ..Problem::default() }],
///     ..TraceSet::default()
/// };
/// let (parts, graded) = parts(set, &HashMap::new()).unwrap();
/// assert_eq!((parts.len(), parts[0].0, graded.right), (1, Against::Vote, 0));
/// assert!(parts[0].1.problems[0].is_right("4"));
/// ```
pub fn parts(
    mut set: TraceSet,
    grades: &HashMap<String, ItemGrade>,
) -> Result<(Vec<(Against, TraceSet)>, Graded), String> {
    let graded = apply_grades(&mut set, grades)?;
    let (with, without): (Vec<_>, Vec<_>) =
        (set.problems.into_iter()).partition(|p| p.graded.is_some());
    let subset = |problems| TraceSet {
        vocab: set.vocab.clone(),
        eos: set.eos,
        problems,
    };
    let mut parts = Vec::new();
    if !with.is_empty() {
        parts.push((Against::Feedback, subset(with)));
    }
    if !without.is_empty() {
        let mut rest = subset(without);
        for p in &mut rest.problems {
            let vote = majority(p.samples.iter().map(|s| s.answer.as_str()));
            p.graded = Some((!vote.is_empty()).then_some(vote).into_iter().collect());
        }
        parts.push((Against::Vote, rest));
    }
    Ok((parts, graded))
}

/// What reading the records gave, and left out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    /// Items: requests that ran two samples or more.
    pub items: usize,
    /// Their samples.
    pub samples: usize,
    /// Every sample has its log-probabilities.
    pub logprobs: bool,
    /// The requests read.
    pub requests: usize,
    /// Of them, with fewer than two samples that ended of themselves.
    pub single: usize,
    /// Of them, with their samples' texts cut to the record's bound (`samples_cut`).
    pub cut: usize,
    /// Items graded.
    pub graded: usize,
    /// Items whose request was graded but whose answer is not among the samples kept:
    /// left ungraded.
    pub unplaced: usize,
}

impl Default for Counts {
    /// As [`Counts::new`]: every sample (none yet) has its log-probabilities.
    fn default() -> Self {
        Counts::new()
    }
}

impl Counts {
    /// Nothing read yet.
    ///
    /// ```
    /// assert!(choicewise_picks::production::Counts::new().logprobs);
    /// ```
    pub fn new() -> Counts {
        Counts {
            items: 0,
            samples: 0,
            logprobs: true,
            requests: 0,
            single: 0,
            cut: 0,
            graded: 0,
            unplaced: 0,
        }
    }

    /// Counts what one request gave: an item's samples (`Taken::Item`) are counted by
    /// [`item`](Self::item).
    ///
    /// ```
    /// use choicewise_picks::production::{Counts, Taken};
    /// let mut c = Counts::new();
    /// c.request(&Taken::Cut);
    /// c.request(&Taken::Fewer);
    /// assert_eq!((c.requests, c.cut, c.single), (2, 1, 1));
    /// ```
    pub fn request(&mut self, taken: &Taken) {
        self.requests += 1;
        match taken {
            Taken::Cut => self.cut += 1,
            Taken::Fewer => self.single += 1,
            Taken::Item { .. } => {}
        }
    }

    /// Counts an item's samples, and its grade: `Some(true)` attached, `Some(false)` graded
    /// but not placed among its samples.
    ///
    /// ```
    /// let mut c = choicewise_picks::production::Counts::new();
    /// c.item(&[Default::default(), Default::default()], Some(false));
    /// assert_eq!((c.items, c.samples, c.unplaced), (1, 2, 1));
    /// ```
    pub fn item(&mut self, samples: &[Sample], grade: Option<bool>) {
        self.items += 1;
        self.samples += samples.len();
        self.logprobs &= samples.iter().all(has_logprobs);
        match grade {
            Some(true) => self.graded += 1,
            Some(false) => self.unplaced += 1,
            None => {}
        }
    }
}

/// The records read into memory as a set ([`read`]).
#[derive(Debug, Clone)]
pub struct Recorded {
    /// One item per request with two samples or more, named and prompted by its request id.
    pub set: TraceSet,
    /// The grades attached, by item name.
    pub grades: HashMap<String, ItemGrade>,
    /// What was read, and left out.
    pub counts: Counts,
    /// The rows that could not be read.
    pub skipped: Skipped,
    /// The reading stopped at [`read_at_most`]'s bound, before the query's end.
    pub stopped: bool,
}

/// An item of `request_id`, its number `id`.
pub fn item(id: usize, request_id: String, samples: Vec<Sample>) -> Problem {
    Problem {
        id: id as i64,
        prompt: request_id.clone(),
        name: Some(request_id),
        samples,
        ..Problem::default()
    }
}

/// The records `query` reads (it should ask for the samples, and bound the requests: all
/// of them are held), as a set in memory, with the latest grade of each item's request.
/// See the module's example, and [`read_at_most`] for a bound on what is held.
pub async fn read(store: &Store, query: RecordsQuery) -> Result<Recorded, RecordsError> {
    read_at_most(store, query, usize::MAX).await
}

/// As [`read`], but no more requests are read once the items hold `tokens` tokens (each
/// about 50 bytes with its alternatives): a bound on memory whatever the records hold (a
/// sample's text may be megabytes). [`Recorded::stopped`] says whether it was reached.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use choicewise_picks::production::read_at_most;
/// use choicewise_records::{RecordsQuery, RequestRecord, SampleRecord, Store};
/// let dir = tempfile::tempdir()?;
/// let store = Store::connect(&format!("sqlite://{}", dir.path().join("r.db").display())).await?;
/// for k in 0..3 {
///     let mut r = RequestRecord::new(k, format!("req-{k}"), "m");
///     for n in 0..2 {
///         let mut s = SampleRecord::new(n, "stop");
///         s.content = Some("one two three".into());
///         r.samples.push(s);
///     }
///     store.write(&[r]).await?;
/// }
/// let query = || RecordsQuery::since(0).model("m").with_samples();
/// let all = read_at_most(&store, query(), 1_000).await?;
/// assert_eq!((all.counts.items, all.stopped), (3, false));
/// // Six tokens an item: the second item reaches 10.
/// let some = read_at_most(&store, query(), 10).await?;
/// assert_eq!((some.counts.items, some.stopped), (2, true));
/// # Ok(()) }
/// ```
pub async fn read_at_most(
    store: &Store,
    query: RecordsQuery,
    tokens: usize,
) -> Result<Recorded, RecordsError> {
    let mut reader = store.record_reader(query);
    let mut held = 0usize;
    let mut stopped = false;
    let mut vocab = Vocab::new();
    let mut counts = Counts::new();
    let mut problems = Vec::new();
    let mut grades = HashMap::new();
    // Each item with the place of its answer among its samples.
    let mut places = Vec::new();
    while let Some(r) = reader.next().await? {
        if held >= tokens {
            stopped = true;
            break;
        }
        let taken = take(&r, &mut vocab);
        counts.request(&taken);
        let Taken::Item { samples, answer } = taken else {
            continue;
        };
        held += samples.iter().map(Sample::len).sum::<usize>();
        places.push(answer);
        problems.push(item(problems.len(), r.request_id, samples));
    }
    let ids: Vec<&str> = (problems.iter())
        .map(|p: &Problem| p.prompt.as_str())
        .collect();
    let given = store.grades(&ids).await?;
    for (p, answer) in problems.iter().zip(places) {
        let grade = match (given.get(&p.prompt), answer) {
            (Some(g), Some(sample)) => {
                grades.insert(
                    p.prompt.clone(),
                    ItemGrade {
                        sample,
                        score: g.score,
                    },
                );
                Some(true)
            }
            (Some(_), None) => Some(false),
            (None, _) => None,
        };
        counts.item(&p.samples, grade);
    }
    Ok(Recorded {
        set: TraceSet {
            vocab: vocab.into_tokens(),
            eos: 0,
            problems,
        },
        grades,
        counts,
        skipped: reader.skipped().clone(),
        stopped,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_are_words_with_the_space_before_them() {
        fn all(s: &str) -> Vec<&str> {
            pieces(s).collect()
        }
        assert_eq!(all("So it is  4"), ["So", " it", " is", " ", " 4"]);
        assert_eq!(all(" a\nb "), [" a", "\nb", " "]);
        assert_eq!(all(""), Vec::<&str>::new());
        assert_eq!(all("éé ü"), ["éé", " ü"]);
    }

    #[test]
    fn log_probabilities_are_read_where_they_spell_the_content() {
        let mut vocab = Vocab::new();
        let mut s = SampleRecord::new(0, "stop");
        s.content = Some("4\n2".into());
        s.logprobs = Some(
            r#"{"content": [{"token": "4", "logprob": -0.5, "top_logprobs": [{"token": "4", "logprob": -0.5}, {"token": "5", "logprob": -1.5}]},
                {"token": "\n2", "logprob": -0.25, "top_logprobs": []}]}"#
                .into(),
        );
        let sample = sample_of(&s, &mut vocab);
        assert!(sample.finished);
        assert_eq!(vocab.tokens(), ["<eos>", "4", "5", "\n2"]);
        assert_eq!(sample.tokens, [1, 3]);
        assert_eq!(sample.top_ids[0], [1, 2, 2, 2, 2]);
        assert_eq!(sample.top_logprobs[0], [-0.5, -1.5, -1.5, -1.5, -1.5]);
        assert_eq!(sample.top_ids[1], [3; TOP_K]);
        assert!(has_logprobs(&sample));
        // Tokens that do not spell the content: its words, without log-probabilities.
        s.content = Some("4 2".into());
        let sample = sample_of(&s, &mut vocab);
        assert_eq!(vocab.tokens()[4..], [" 2"]);
        assert_eq!(sample.tokens, [1, 4]);
        assert!(!has_logprobs(&sample));
    }

    #[test]
    fn a_grade_speaks_of_the_kept_sample_that_became_the_first_choice() {
        let sample = |n: i64, finish: &str, content: &str, output: Option<i64>| {
            let mut s = SampleRecord::new(n, finish);
            s.content = (!content.is_empty()).then(|| content.to_string());
            s.output = output;
            s
        };
        let mut r = RequestRecord::new(0, "req", "m");
        r.samples = vec![
            sample(0, "error", "", None),
            sample(1, "stop", "a", Some(1)),
            sample(2, "cancelled", "cut sh", None),
            sample(3, "stop", "b", Some(0)),
        ];
        // Sample 3 is the second of those kept.
        assert_eq!(answer_place(&r), Some(1));
        // Its first choice failed, or had no text: the grade has no sample to go to.
        r.samples[3].finish = "error".into();
        assert_eq!(answer_place(&r), None);
        r.samples[3] = sample(3, "stop", "", Some(0));
        assert_eq!(answer_place(&r), None);
        // No sample became an output (a record from before they were kept).
        r.samples[3] = sample(3, "stop", "b", None);
        assert_eq!(answer_place(&r), None);
    }

    fn item_of(name: &str, answers: &[&str]) -> Problem {
        Problem {
            name: Some(name.into()),
            samples: (answers.iter())
                .map(|a| Sample {
                    answer: a.to_string(),
                    ..Sample::default()
                })
                .collect(),
            ..Problem::default()
        }
    }

    #[test]
    fn a_grade_makes_its_samples_answer_right_or_none() {
        let mut set = TraceSet {
            problems: vec![
                item_of("right", &["4", "5"]),
                item_of("wrong", &["4", "5"]),
                item_of("scored", &["4", "5"]),
                item_of("unread", &["", "5"]),
                item_of("ungraded", &["4", "5"]),
            ],
            ..TraceSet::default()
        };
        let grades: HashMap<String, ItemGrade> = serde_json::from_value(json!({
            "right": {"sample": 1, "outcome": "right", "score": 1.0, "source": null},
            "wrong": {"sample": 0, "outcome": "wrong", "score": 0.0, "source": "ci"},
            "scored": {"sample": 0, "outcome": "score", "score": 0.5, "source": null},
            "unread": {"sample": 0, "outcome": "right", "score": 1.0, "source": null},
            "elsewhere": {"sample": 0, "outcome": "right", "score": 1.0, "source": null},
        }))
        .unwrap();
        let counts = apply_grades(&mut set, &grades).unwrap();
        assert_eq!(
            counts,
            Graded {
                right: 3,
                wrong: 1,
                unread: 1
            }
        );
        let graded: Vec<_> = set.problems.iter().map(|p| p.graded.clone()).collect();
        let keys = |k: &[&str]| Some(k.iter().map(|k| k.to_string()).collect());
        assert_eq!(
            graded,
            [keys(&["5"]), keys(&[]), keys(&["4"]), keys(&[]), None]
        );
        // Item "wrong": a pick answering 5 counts wrong too, a lower bound.
        assert!(!set.problems[1].is_right("5") && !set.problems[1].is_right("4"));
        // A sample the item does not have: grades of another set.
        let grades: HashMap<String, ItemGrade> =
            serde_json::from_value(json!({"right": {"sample": 2, "score": 1.0}})).unwrap();
        let e = apply_grades(&mut set, &grades).unwrap_err();
        assert!(e.contains("not a sample 2"), "{e}");
    }

    #[test]
    fn graded_items_and_the_others_are_measured_apart() {
        let set = TraceSet {
            problems: vec![
                item_of("graded", &["4", "5", "5"]),
                item_of("free", &["7", "7", "8"]),
            ],
            ..TraceSet::default()
        };
        let grades = HashMap::from([(
            "graded".to_string(),
            ItemGrade {
                sample: 0,
                score: 1.0,
            },
        )]);
        let (parts, graded) = parts(set, &grades).unwrap();
        assert_eq!(graded.right, 1);
        let against: Vec<_> = parts.iter().map(|(a, s)| (*a, s.problems.len())).collect();
        assert_eq!(against, [(Against::Feedback, 1), (Against::Vote, 1)]);
        // Graded right on "4" though the samples' vote says 5; the other by its vote.
        assert!(parts[0].1.problems[0].is_right("4") && !parts[0].1.problems[0].is_right("5"));
        assert!(parts[1].1.problems[0].is_right("7"));
    }
}
