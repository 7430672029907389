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

use std::io::Write;
use std::path::Path;

use choicewise_picks::production::{Counts, Taken, grade_json, item, take};
use choicewise_picks::traces::{TraceSet, write_atomically};
use choicewise_records::{RecordsQuery, Store, parse_since};
use serde_json::{Value, json};

use super::record::load_vocab;
use crate::Exit;

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

/// Writes the request `request_id`'s samples as item `n` of `dir`.
fn write_item(
    dir: &Path,
    n: usize,
    request_id: String,
    samples: Vec<choicewise_picks::traces::Sample>,
) -> Result<(), Exit> {
    let path = dir.join(format!("traces_{n}.npz"));
    TraceSet::default()
        .write_npz(&path, &[item(n, request_id, samples)])
        .map_err(|e| e.to_string().into())
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
    let mut vocab = load_vocab(dir)?;
    let mut reader = store.record_reader(RecordsQuery::since(since_ms).model(model).with_samples());
    let mut out = Counts::new();
    let mut grades = Grades::create(dir)?;
    let exported: Result<(), Exit> = async {
        while let Some(r) = reader.next().await.map_err(|e| Exit::from(e.to_string()))? {
            let taken = take(&r, &mut vocab);
            out.request(&taken);
            let Taken::Item { samples, answer } = taken else {
                continue;
            };
            // Its texts are read: only their tokens are kept while the item is written.
            let request_id = r.request_id;
            let graded = (store.grade(&request_id).await).map_err(|e| Exit::from(e.to_string()))?;
            let placed = match (graded, answer) {
                (Some(g), Some(k)) => {
                    grades.add(&request_id, &grade_json(k, &g))?;
                    Some(true)
                }
                (Some(_), None) => Some(false),
                (None, _) => None,
            };
            out.item(&samples, placed);
            write_item(dir, out.items - 1, request_id, samples)?;
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
        vocab: vocab.into_tokens(),
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
