//! `choicewise picks record --from-records URL --model NAME [--since WHEN] --out DIR`: the
//! samples a gateway recorded (`[records] samples = true`) written as a set of recorded
//! samples, one item per request that ran several, for `picks report` to measure the picks
//! on production traffic.
//!
//! An item's prompt is its request's id (the prompts are never recorded): the trace upstream
//! of `picks report` knows each item by it. It has no answer: `report` then measures each pick
//! against the vote of all of the item's samples, and says so.
//!
//! A request graded since (`POST /v1/feedback`, [`Store::grade`]: its latest grade) carries
//! its grade to its item, in `grades.json`: which of the item's samples the grade speaks of
//! (the one that became the answer's first choice) and its score. `report` measures accuracy
//! on the graded items and agreement on the rest, apart. A grade whose answer is not among
//! the samples kept (it failed, was cancelled or empty) cannot be attached: the item is left
//! ungraded, and counted.
//!
//! The records are read one request at a time ([`Store::record_reader`]) and each item is
//! written as it comes: what the command holds is the request in hand (its samples and their
//! tokens) and the vocabulary, whatever the number of records. A sample's words are read as
//! slices of its text, never a string each. A row that cannot be read is left out and named
//! on stderr.

use std::borrow::Cow;
use std::io::Write;
use std::path::Path;

use choicewise_picks::traces::{Problem, Sample, TOP_K, TraceSet, write_atomically};
use choicewise_records::{Grade, RecordsQuery, RequestRecord, SampleRecord, Store, parse_since};
use serde::Deserialize;
use serde_json::{Value, json};

use super::record::{Vocab, logprob_of, push_piece, push_token};
use crate::Exit;

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
/// content, else its content in pieces ([`pieces`]), without log-probabilities.
fn sample_of(s: &SampleRecord, vocab: &mut Vocab) -> Sample {
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

/// What a run wrote, and left out.
struct Exported {
    /// Items written: `traces_0.npz` to `traces_{items - 1}.npz`.
    items: usize,
    samples: usize,
    /// Every sample written has its log-probabilities.
    logprobs: bool,
    /// The requests read, and those of them with fewer than two samples that ended of
    /// themselves.
    requests: usize,
    single: usize,
    /// Requests whose samples' texts the gateway cut to its bound (`samples_cut`): their
    /// answers may be cut off.
    cut: usize,
    /// The items graded (their entries written to `grades.json` as they came).
    graded: usize,
    /// Items whose request was graded but whose answer is not among the samples kept: left
    /// ungraded.
    unplaced: usize,
}

/// A sample's log-probabilities are there (a sample without has all its `top_logprobs` zero).
fn has_logprobs(s: &Sample) -> bool {
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

/// Request `r`'s samples [`kept`], as a set's samples.
fn ran(r: &RequestRecord, vocab: &mut Vocab) -> Vec<Sample> {
    (r.samples.iter())
        .filter(|s| kept(s))
        .map(|s| sample_of(s, vocab))
        .collect()
}

/// The place, among the samples [`ran`] keeps, of the one that became the answer's first
/// choice (`output == Some(0)`): the answer a grade of the request speaks of. `None` when it
/// was not kept, or no sample became it.
fn answer_place(r: &RequestRecord) -> Option<usize> {
    (r.samples.iter().filter(|s| kept(s))).position(|s| s.output == Some(0))
}

/// A grade as `grades.json` keeps it, of the item's sample `sample`.
fn grade_json(sample: usize, g: &Grade) -> Value {
    json!({
        "sample": sample,
        "outcome": g.outcome,
        "score": g.score,
        "source": g.source,
        "by": g.by,
        "at_ms": g.at_ms,
    })
}

/// `grades.json` written as the items come, an entry per graded item, never all held at
/// once (as the items themselves): into `grades.json.tmp`, renamed when the run is over.
struct Grades {
    file: std::io::BufWriter<std::fs::File>,
    tmp: std::path::PathBuf,
    path: std::path::PathBuf,
    entries: usize,
}

impl Grades {
    fn create(dir: &Path) -> Result<Grades, Exit> {
        let path = dir.join("grades.json");
        let tmp = dir.join("grades.json.tmp");
        let file = std::fs::File::create(&tmp)
            .map_err(|e| format!("cannot write {}: {e}", tmp.display()))?;
        Ok(Grades {
            file: std::io::BufWriter::new(file),
            tmp,
            path,
            entries: 0,
        })
    }

    fn write(&mut self, bytes: &[u8]) -> Result<(), Exit> {
        (self.file.write_all(bytes))
            .map_err(|e| Exit::from(format!("cannot write {}: {e}", self.tmp.display())))
    }

    /// The grade of item `name`.
    fn add(&mut self, name: &str, grade: &Value) -> Result<(), Exit> {
        let open: &[u8] = if self.entries == 0 { b"{\n" } else { b",\n" };
        self.write(open)?;
        self.write(json!(name).to_string().as_bytes())?;
        self.write(b": ")?;
        self.write(grade.to_string().as_bytes())?;
        self.entries += 1;
        Ok(())
    }

    /// The file closed, synced and put in place.
    fn finish(mut self) -> Result<(), Exit> {
        let close: &[u8] = if self.entries == 0 { b"{}\n" } else { b"\n}\n" };
        self.write(close)?;
        let shown =
            |e: std::io::Error| Exit::from(format!("cannot write {}: {e}", self.path.display()));
        let file = self.file.into_inner().map_err(|e| shown(e.into_error()))?;
        file.sync_all().map_err(shown)?;
        std::fs::rename(&self.tmp, &self.path).map_err(shown)
    }

    /// A run that failed leaves no grades behind.
    fn abandon(self) {
        let _ = std::fs::remove_file(&self.tmp);
    }
}

/// Writes the request `request_id`'s samples as the next item of `dir`.
fn write_item(
    dir: &Path,
    request_id: String,
    samples: Vec<Sample>,
    out: &mut Exported,
) -> Result<(), Exit> {
    out.logprobs &= samples.iter().all(has_logprobs);
    out.samples += samples.len();
    let problem = Problem {
        id: out.items as i64,
        prompt: request_id.clone(),
        name: Some(request_id),
        samples,
        ..Problem::default()
    };
    let path = dir.join(format!("traces_{}.npz", out.items));
    TraceSet::default()
        .write_npz(&path, std::slice::from_ref(&problem))
        .map_err(|e| e.to_string())?;
    out.items += 1;
    Ok(())
}

pub(super) async fn run(
    model: &str,
    url: &str,
    since: Option<&str>,
    dir: &Path,
) -> Result<(), Exit> {
    let usage_error = |message: String| Exit { message, code: 2 };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    let since_ms = match since {
        Some(s) => parse_since(s, now).map_err(|e| usage_error(e.to_string()))?,
        None => 0,
    };
    let store = Store::open_existing(url)
        .await
        .map_err(|e| Exit::from(e.to_string()))?;
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot make {}: {e}", dir.display()))?;
    if choicewise_picks::traces::npz_files(dir).is_ok_and(|f| !f.is_empty()) {
        return Err(usage_error(format!(
            "{}: holds a set already; give an empty --out",
            dir.display()
        )));
    }
    let mut vocab = Vocab::load(dir)?;
    let mut reader = store.record_reader(RecordsQuery::since(since_ms).model(model).with_samples());
    let mut out = Exported {
        items: 0,
        samples: 0,
        logprobs: true,
        requests: 0,
        single: 0,
        cut: 0,
        graded: 0,
        unplaced: 0,
    };
    let mut grades = Grades::create(dir)?;
    let exported: Result<(), Exit> = async {
        while let Some(r) = reader.next().await.map_err(|e| Exit::from(e.to_string()))? {
            out.requests += 1;
            if r.samples_cut {
                out.cut += 1;
                continue;
            }
            let samples = ran(&r, &mut vocab);
            if samples.len() < 2 {
                out.single += 1;
                continue;
            }
            let place = answer_place(&r);
            // Its texts are read: only their tokens are kept while the item is written.
            let request_id = r.request_id.clone();
            drop(r);
            let graded = (store.grade(&request_id).await).map_err(|e| Exit::from(e.to_string()))?;
            match (graded, place) {
                (Some(g), Some(k)) => {
                    grades.add(&request_id, &grade_json(k, &g))?;
                    out.graded += 1;
                }
                (Some(_), None) => out.unplaced += 1,
                (None, _) => {}
            }
            write_item(dir, request_id, samples, &mut out)?;
        }
        Ok(())
    }
    .await;
    let skipped = reader.skipped().clone();
    drop(reader);
    store.close().await;
    let mut stderr = std::io::stderr().lock();
    if !skipped.is_empty() {
        for line in skipped.to_string().lines() {
            let _ = writeln!(stderr, "choicewise: picks record: {line}");
        }
    }
    if let Err(e) = exported {
        // No half-written set: the items written so far go with the run that failed.
        for i in 0..out.items {
            let _ = std::fs::remove_file(dir.join(format!("traces_{i}.npz")));
        }
        grades.abandon();
        return Err(e);
    }
    if out.items == 0 {
        grades.abandon();
        return Err(Exit::from(format!(
            "no request of model {model:?} with two samples or more in {} ({} requests{}{}; the samples are kept with [records] samples = true)",
            choicewise_records::shown_url(url),
            out.requests,
            if out.single > 0 {
                format!(", {} of them with fewer", out.single)
            } else {
                String::new()
            },
            if out.cut > 0 {
                format!(", {} with their texts cut", out.cut)
            } else {
                String::new()
            }
        )));
    }
    let set = TraceSet {
        vocab: std::mem::take(&mut vocab.tokens),
        eos: 0,
        problems: Vec::new(),
    };
    set.write_vocab(dir).map_err(|e| e.to_string())?;
    let meta = json!({
        "recorded_by": format!("choicewise {} picks record --from-records", env!("CARGO_PKG_VERSION")),
        "format": "arith-traces (traces_*.npz, vocab.json): one traces_I.npz per recorded request",
        "records": choicewise_records::shown_url(url),
        "model": model,
        "since_ms": since_ms,
        "items": out.items,
        "samples_recorded": out.samples,
        "logprobs": out.logprobs,
        "requests_cut_left_out": out.cut,
        "rows_left_out": skipped.count,
        "answers": "none: production traffic has no known answer; picks report measures each pick against the grades where there are (grades.json) and against the vote of all of an item's samples elsewhere",
        "graded_items": out.graded,
        "graded_answer_not_among_samples": out.unplaced,
        "grades": "grades.json: per graded item's name, the latest grade of its request (POST /v1/feedback): `sample`, the item's sample it speaks of (the answer's first choice), `outcome`, `score` (1 right, 0 wrong), `source`, `by`, `at_ms`",
        "problem_ids": "the item's number (from 0); item_ids: the request's x-request-id, which is also its prompt",
    });
    let graded = out.graded;
    grades.finish()?;
    write_atomically(
        &dir.join("meta.json"),
        serde_json::to_string_pretty(&meta)
            .unwrap_or_default()
            .as_bytes(),
    )
    .map_err(|e| e.to_string())?;
    let _ = writeln!(
        stderr,
        "{} requests of {model:?} with several samples written to {} ({} samples{}); {} with fewer left out{}, {graded} graded (POST /v1/feedback){}",
        out.items,
        dir.display(),
        out.samples,
        if out.logprobs {
            ", with their log-probabilities"
        } else {
            ", without log-probabilities"
        },
        out.single,
        match out.cut {
            0 => String::new(),
            n => format!(", {n} with their texts cut to the record's bound"),
        },
        match out.unplaced {
            0 => String::new(),
            n => format!(
                ", {n} graded but their answer not among the samples (failed, cancelled or empty): left ungraded"
            ),
        }
    );
    Ok(())
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
        let mut vocab = Vocab::load(Path::new("/nonexistent")).unwrap();
        let mut s = SampleRecord::new(0, "stop");
        s.content = Some("4\n2".into());
        s.logprobs = Some(
            r#"{"content": [{"token": "4", "logprob": -0.5, "top_logprobs": [{"token": "4", "logprob": -0.5}, {"token": "5", "logprob": -1.5}]},
                {"token": "\n2", "logprob": -0.25, "top_logprobs": []}]}"#
                .into(),
        );
        let sample = sample_of(&s, &mut vocab);
        assert!(sample.finished);
        assert_eq!(vocab.tokens, ["<eos>", "4", "5", "\n2"]);
        assert_eq!(sample.tokens, [1, 3]);
        assert_eq!(sample.top_ids[0], [1, 2, 2, 2, 2]);
        assert_eq!(sample.top_logprobs[0], [-0.5, -1.5, -1.5, -1.5, -1.5]);
        assert_eq!(sample.top_ids[1], [3; TOP_K]);
        assert!(has_logprobs(&sample));
        // Tokens that do not spell the content: its words, without log-probabilities.
        s.content = Some("4 2".into());
        let sample = sample_of(&s, &mut vocab);
        assert_eq!(vocab.tokens[4..], [" 2"]);
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
        let g = Grade::new(0.75, "score", "team-a", 7).source("ci");
        assert_eq!(
            grade_json(2, &g),
            json!({"sample": 2, "outcome": "score", "score": 0.75, "source": "ci", "by": "team-a", "at_ms": 7})
        );
    }
}
