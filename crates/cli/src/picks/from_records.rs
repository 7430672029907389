//! `choicewise picks record --from-records URL --model NAME [--since WHEN] --out DIR`: the
//! samples a gateway recorded (`[records] samples = true`) written as a set of recorded
//! samples, one item per request that ran several, for `picks report` to measure the picks
//! on production traffic.
//!
//! An item's prompt is its request's id (the prompts are never recorded): the trace upstream
//! of `picks report` knows each item by it. It has no answer: `report` then measures each pick
//! against the vote of all of the item's samples, and says so.

use std::path::Path;

use choicewise_picks::traces::{Problem, TraceSet, write_atomically};
use choicewise_records::{RecordsQuery, SampleRecord, Store, parse_since};
use serde::Deserialize;
use serde_json::json;

use super::record::{Entry, Streamed, Vocab, logprob_of};
use crate::Exit;

/// Chat's `logprobs` object, as a record keeps it.
#[derive(Deserialize)]
struct Logprobs {
    #[serde(default)]
    content: Option<Vec<Token>>,
}

#[derive(Deserialize)]
struct Token {
    #[serde(default)]
    token: String,
    #[serde(default)]
    logprob: Option<f64>,
    #[serde(default)]
    top_logprobs: Option<Vec<Top>>,
}

#[derive(Deserialize)]
struct Top {
    #[serde(default)]
    token: String,
    #[serde(default)]
    logprob: Option<f64>,
}

/// A recorded sample as it streamed: its log-probabilities' tokens where it has them, else
/// its content in pieces (each a word with the space before it), without log-probabilities.
fn streamed(s: &SampleRecord) -> Streamed {
    let content = s.content.clone().unwrap_or_default();
    let logprobs: Vec<Entry> = (s.logprobs.as_deref())
        .and_then(|l| serde_json::from_str::<Logprobs>(l).ok())
        .and_then(|l| l.content)
        .unwrap_or_default()
        .into_iter()
        .map(|t| {
            let top = (t.top_logprobs.into_iter().flatten())
                .map(|top| (top.token, logprob_of(top.logprob)))
                .collect();
            (t.token, logprob_of(t.logprob), top)
        })
        .collect();
    let mut pieces = Vec::new();
    let mut start = 0;
    for (i, c) in content.char_indices() {
        if c.is_whitespace() && i > start {
            pieces.push(content[start..i].to_string());
            start = i;
        }
    }
    if start < content.len() {
        pieces.push(content[start..].to_string());
    }
    let mut streamed = Streamed::default();
    streamed.pieces = pieces;
    streamed.logprobs = logprobs;
    streamed.finish = Some(s.finish.clone());
    streamed
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
    let records = store
        .records(&RecordsQuery::since(since_ms).model(model).with_samples())
        .await
        .map_err(|e| Exit::from(e.to_string()))?;
    store.close().await;
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot make {}: {e}", dir.display()))?;
    if choicewise_picks::traces::npz_files(dir).is_ok_and(|f| !f.is_empty()) {
        return Err(usage_error(format!(
            "{}: holds a set already; give an empty --out",
            dir.display()
        )));
    }
    let mut vocab = Vocab::load(dir)?;
    let mut problems = Vec::new();
    let (mut requests, mut single) = (0usize, 0usize);
    for r in &records {
        requests += 1;
        // The samples that ended of themselves: a cancelled one's text is cut short, a
        // failed one's is not an answer.
        let ran: Vec<&SampleRecord> = (r.samples.iter())
            .filter(|s| !matches!(s.finish.as_str(), "error" | "cancelled"))
            .filter(|s| s.content.as_deref().is_some_and(|c| !c.is_empty()))
            .collect();
        if ran.len() < 2 {
            single += 1;
            continue;
        }
        let samples = ran.iter().map(|s| streamed(s).sample(&mut vocab)).collect();
        problems.push(Problem {
            id: problems.len() as i64,
            prompt: r.request_id.clone(),
            name: Some(r.request_id.clone()),
            samples,
            ..Problem::default()
        });
    }
    if problems.is_empty() {
        return Err(Exit::from(format!(
            "no request of model {model:?} with two samples or more in {} ({requests} requests{}; the samples are kept with [records] samples = true)",
            choicewise_records::shown_url(url),
            if single > 0 {
                format!(", {single} of them with fewer")
            } else {
                String::new()
            }
        )));
    }
    let set = TraceSet {
        vocab: vocab.tokens.clone(),
        eos: 0,
        problems: Vec::new(),
    };
    set.write_vocab(dir).map_err(|e| e.to_string())?;
    for (i, p) in problems.iter().enumerate() {
        set.write_npz(
            &dir.join(format!("traces_{i}.npz")),
            std::slice::from_ref(p),
        )
        .map_err(|e| e.to_string())?;
    }
    let samples: usize = problems.iter().map(|p| p.samples.len()).sum();
    let logprobs = TraceSet {
        problems: problems.clone(),
        ..TraceSet::default()
    }
    .has_logprobs();
    let meta = json!({
        "recorded_by": format!("choicewise {} picks record --from-records", env!("CARGO_PKG_VERSION")),
        "format": "arith-traces (traces_*.npz, vocab.json): one traces_I.npz per recorded request",
        "records": choicewise_records::shown_url(url),
        "model": model,
        "since_ms": since_ms,
        "items": problems.len(),
        "samples_recorded": samples,
        "logprobs": logprobs,
        "answers": "none: production traffic has no known answer; picks report measures each pick against the vote of all of an item's samples",
        "problem_ids": "the item's number (from 0); item_ids: the request's x-request-id, which is also its prompt",
    });
    write_atomically(
        &dir.join("meta.json"),
        serde_json::to_string_pretty(&meta)
            .unwrap_or_default()
            .as_bytes(),
    )
    .map_err(|e| e.to_string())?;
    eprintln!(
        "{} requests of {model:?} with several samples written to {} ({samples} samples{}); {single} with fewer left out",
        problems.len(),
        dir.display(),
        if logprobs {
            ", with their log-probabilities"
        } else {
            ", without log-probabilities"
        }
    );
    Ok(())
}
