//! `choicewise picks record`: K samples of each item from an OpenAI-compatible Chat
//! Completions endpoint, written as a set of recorded samples (`choicewise_picks::traces`).
//!
//! - One streamed request per sample (`n` is not asked: not every server has it), with
//!   `"logprobs": true, "top_logprobs": 5`; a server that refuses them (400 or 422, then an
//!   answer without them) is asked without from then on, and the samples have none.
//! - A sample's tokens are its `logprobs.content` tokens when their text is the content's,
//!   else the content's streamed pieces (without log-probabilities). Token ids are given in
//!   the order tokens are first seen; id 0 is `<eos>`, never written: `finished` says that a
//!   sample ended with `finish_reason: "stop"`.
//! - Item i is `DIR/traces_i.npz` (its samples so far), written with `vocab.json` and
//!   `meta.json` once its samples are in, each through a temporary file and a rename: an
//!   interrupted run loses the item in flight at most, and a run with the same `--out`
//!   records only the samples missing.
//! - The answers are read at `report` time (`--answer REGEX`): `pred_answers` are empty and
//!   `correct` false here (`meta.json` says so).

use std::borrow::Cow;
use std::io::{IsTerminal, Write};
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use choicewise_picks::traces::{
    Problem, Sample, TOP_K, TraceSet, npz_files, read_vocab, write_atomically,
};
use choicewise_picks::vocab::{Vocab, logprob_of, push_piece, push_token};
use choicewise_sse::DEFAULT_MAX_EVENT_SIZE;
use clap::Args;
use futures::StreamExt;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};

use super::items::{quoted, read_items};
use crate::Exit;

#[derive(Debug, Args)]
pub struct RecordArgs {
    /// The items, one JSON object a line: `{"id": "...", "prompt": "..." or "messages":
    /// [...], "answer": "..."}`.
    #[arg(
        long,
        value_name = "ITEMS.jsonl",
        required_unless_present = "from_records"
    )]
    input: Option<PathBuf>,
    /// Samples of each item.
    #[arg(long, value_name = "K", required_unless_present = "from_records")]
    samples: Option<usize>,
    /// Instead of asking an endpoint: the samples a gateway recorded (`[records] samples =
    /// true`, docs/records.md) in this database, of the requests of --model that ran
    /// several, one item each (its name the request's id; no answer: `picks report` then
    /// measures each pick against the vote of all of an item's samples).
    #[arg(long, value_name = "URL", conflicts_with_all = ["input", "samples", "base_url"])]
    from_records: Option<String>,
    /// With --from-records: only the requests since then (`30m`, `12h`, `7d`, or a day
    /// `YYYY-MM-DD`, UTC).
    #[arg(long, value_name = "WHEN", requires = "from_records")]
    since: Option<String>,
    /// The directory of the set (made if missing; a run with the same DIR resumes).
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
    /// The endpoint's base URL, to which `/chat/completions` is added (e.g.
    /// `http://127.0.0.1:8080/v1`).
    #[arg(long, value_name = "URL", required_unless_present = "from_records")]
    base_url: Option<String>,
    /// The model asked.
    #[arg(long, value_name = "NAME")]
    model: String,
    /// The API key (sent as `Authorization: Bearer`; never printed). Default: the
    /// environment's CHOICEWISE_API_KEY, else OPENAI_API_KEY; none for a local server.
    #[arg(
        long,
        value_name = "KEY",
        env = "CHOICEWISE_API_KEY",
        hide_env_values = true
    )]
    api_key: Option<String>,
    /// The sampling temperature (default: the server's).
    #[arg(long, value_name = "T")]
    temperature: Option<f64>,
    /// The most tokens of a sample (`max_tokens`; default: the server's).
    #[arg(long, value_name = "N")]
    max_tokens: Option<u64>,
    /// More fields for every request, a JSON object (e.g. `{"top_k": 0}`).
    #[arg(long, value_name = "JSON")]
    extra_body: Option<String>,
    /// Samples asked at once.
    #[arg(long, value_name = "N", default_value_t = 4)]
    concurrency: usize,
    /// The most bytes of one sample's stream: a server that sends more (log-probabilities
    /// without end, content that never finishes) fails the sample with an error.
    #[arg(long, value_name = "BYTES", default_value_t = DEFAULT_MAX_SAMPLE_BYTES)]
    max_sample_bytes: usize,
    /// The most tokens of one sample (its log-probability entries, or its content pieces).
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_SAMPLE_TOKENS)]
    max_sample_tokens: usize,
    /// The most seconds one sample's stream may take, from its request to its finish.
    #[arg(long, value_name = "SECONDS", default_value_t = DEFAULT_SAMPLE_TIMEOUT_S)]
    sample_timeout: u64,
}

/// `--max-sample-bytes`'s default: 32 MiB, about 100,000 tokens with their top-5
/// log-probabilities; content without end at 1 MiB/s is stopped within 32 s.
const DEFAULT_MAX_SAMPLE_BYTES: usize = 32 << 20;
/// `--max-sample-tokens`'s default.
const DEFAULT_MAX_SAMPLE_TOKENS: usize = 131_072;
/// `--sample-timeout`'s default: 10 minutes.
const DEFAULT_SAMPLE_TIMEOUT_S: u64 = 600;

/// One sample's bounds.
#[derive(Debug, Clone, Copy)]
struct Bounds {
    bytes: usize,
    tokens: usize,
    timeout: Duration,
}

/// Why a sample failed: worth another try (the connection broke, the server was busy), or
/// not (the server broke a bound or sent what is not a stream of chunks).
#[derive(Debug)]
enum Failure {
    Retry(String),
    Fatal(String),
}

/// The vocabulary of the set in `dir` to go on with (`<eos>` alone when it has none yet).
pub(super) fn load_vocab(dir: &Path) -> Result<Vocab, Exit> {
    if !dir.join("vocab.json").exists() {
        return Ok(Vocab::new());
    }
    let tokens = read_vocab(dir).map_err(|e| e.to_string())?;
    Vocab::from_tokens(tokens)
        .map_err(|e| Exit::from(format!("{}: {e}", dir.join("vocab.json").display())))
}

/// One `logprobs.content` entry: the token, its log-probability, the top alternatives.
pub(super) type Entry = (String, f32, Vec<(String, f32)>);

/// One sample as it streamed.
#[derive(Debug, Default)]
pub(super) struct Streamed {
    pub(super) pieces: Vec<String>,
    pub(super) logprobs: Vec<Entry>,
    pub(super) finish: Option<String>,
    /// From its request to its first token, and to its finish, as the server gave them.
    first_token: Option<Duration>,
    total: Option<Duration>,
}

/// The parts of a `chat.completion.chunk` a recording reads; the rest is skipped unparsed.
#[derive(Deserialize)]
struct Chunk<'a> {
    #[serde(default, borrow)]
    choices: Vec<ChunkChoice<'a>>,
    #[serde(default, borrow)]
    error: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct ChunkChoice<'a> {
    #[serde(default)]
    index: u64,
    #[serde(default, borrow)]
    delta: Option<Delta<'a>>,
    #[serde(default)]
    logprobs: Option<ChunkLogprobs<'a>>,
    #[serde(default, borrow)]
    finish_reason: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct Delta<'a> {
    #[serde(default, borrow)]
    content: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct ChunkLogprobs<'a> {
    #[serde(default, borrow)]
    content: Option<Vec<ChunkToken<'a>>>,
}

#[derive(Deserialize)]
struct ChunkToken<'a> {
    #[serde(default, borrow)]
    token: Cow<'a, str>,
    #[serde(default)]
    logprob: Option<f64>,
    #[serde(default, borrow)]
    top_logprobs: Option<Vec<ChunkTop<'a>>>,
}

#[derive(Deserialize)]
struct ChunkTop<'a> {
    #[serde(default, borrow)]
    token: Cow<'a, str>,
    #[serde(default)]
    logprob: Option<f64>,
}

impl Streamed {
    /// Tokens so far: log-probability entries, or content pieces without them.
    fn tokens(&self) -> usize {
        self.logprobs.len().max(self.pieces.len())
    }

    /// One `data:` payload, read into typed parts (no JSON tree).
    fn event(&mut self, data: &str) -> Result<(), Failure> {
        let chunk: Chunk<'_> = serde_json::from_str(data).map_err(|e| {
            Failure::Fatal(format!(
                "an event is not a chat completion chunk ({e}): {}",
                quoted(data)
            ))
        })?;
        if let Some(e) = chunk.error {
            return Err(Failure::Retry(format!(
                "the stream failed: {}",
                quoted(e.get())
            )));
        }
        for c in chunk.choices {
            if c.index != 0 {
                continue;
            }
            if let Some(t) = c.delta.and_then(|d| d.content)
                && !t.is_empty()
            {
                self.pieces.push(t.into_owned());
            }
            for e in c.logprobs.and_then(|l| l.content).into_iter().flatten() {
                let top = (e.top_logprobs.into_iter().flatten())
                    .map(|t| (t.token.into_owned(), logprob_of(t.logprob)))
                    .collect();
                self.logprobs
                    .push((e.token.into_owned(), logprob_of(e.logprob), top));
            }
            if let Some(f) = c.finish_reason {
                self.finish = Some(f.into_owned());
            }
        }
        Ok(())
    }

    /// The sample, its tokens given ids in `vocab`.
    pub(super) fn sample(self, vocab: &mut Vocab) -> Sample {
        let content: String = self.pieces.concat();
        let joined: String = self.logprobs.iter().map(|(t, _, _)| t.as_str()).collect();
        let mut s = Sample {
            finished: self.finish.as_deref() == Some("stop"),
            ..Sample::default()
        };
        if !self.logprobs.is_empty() && joined == content {
            for (token, lp, top) in &self.logprobs {
                push_token(&mut s, vocab, token, *lp, top.as_slice());
            }
            return s;
        }
        for piece in &self.pieces {
            push_piece(&mut s, vocab, piece);
        }
        s
    }
}

/// What every request shares.
struct Asking {
    client: reqwest::Client,
    url: String,
    key: Option<String>,
    body: serde_json::Map<String, Value>,
    /// The server refused `logprobs`: not asked any more.
    refused: AtomicBool,
    bounds: Bounds,
}

/// Statuses worth another try: the server busy or failing for a moment.
fn retryable(status: u16) -> bool {
    status == 408 || status == 409 || status == 429 || status >= 500
}

impl Asking {
    async fn send(&self, messages: &[Value], logprobs: bool) -> Result<reqwest::Response, String> {
        let mut body = self.body.clone();
        body.insert("messages".into(), Value::Array(messages.to_vec()));
        body.insert("stream".into(), Value::Bool(true));
        if logprobs {
            body.insert("logprobs".into(), Value::Bool(true));
            body.insert("top_logprobs".into(), json!(TOP_K));
        }
        let mut req = self.client.post(&self.url).json(&body);
        if let Some(key) = &self.key {
            req = req.bearer_auth(key);
        }
        req.send().await.map_err(|e| e.to_string())
    }

    /// One sample, with a few tries when the server fails for a moment; a sample that
    /// breaks a bound fails at once.
    async fn sample(&self, messages: &[Value]) -> Result<Streamed, String> {
        let mut last = String::new();
        for attempt in 0..6u32 {
            if attempt > 0 {
                tokio::time::sleep(Duration::from_millis(250 << attempt.min(4))).await;
            }
            let logprobs = !self.refused.load(Ordering::Relaxed);
            let sent = Instant::now();
            let mut response = match self.send(messages, logprobs).await {
                Ok(r) => r,
                Err(e) => {
                    last = e;
                    continue;
                }
            };
            let status = response.status().as_u16();
            if logprobs && (status == 400 || status == 422) {
                // Refused with logprobs: asked again without; when that is answered, the
                // server does not give them.
                let why = response.text().await.unwrap_or_default();
                match self.send(messages, false).await {
                    Ok(r) if r.status().is_success() => {
                        if !self.refused.swap(true, Ordering::Relaxed) {
                            eprintln!(
                                "choicewise: the server refused logprobs ({status}: {}); recording without them",
                                why.trim()
                            );
                        }
                        response = r;
                    }
                    Ok(r) => {
                        let s = r.status();
                        let text = r.text().await.unwrap_or_default();
                        return Err(format!("{s}: {}", text.trim()));
                    }
                    Err(e) => {
                        last = e;
                        continue;
                    }
                }
            } else if !response.status().is_success() {
                let text = response.text().await.unwrap_or_default();
                last = format!("{}: {}", response_status(status), text.trim());
                if retryable(status) {
                    continue;
                }
                return Err(last);
            }
            match read_stream(response, self.bounds, sent).await {
                Ok(s) => return Ok(s),
                Err(Failure::Retry(e)) => last = e,
                Err(Failure::Fatal(e)) => return Err(e),
            }
        }
        Err(last)
    }
}

fn response_status(status: u16) -> String {
    reqwest::StatusCode::from_u16(status).map_or(status.to_string(), |s| s.to_string())
}

/// Reads one sample's stream: framed by `choicewise-sse` (an event larger than the sample's
/// bytes is an error, however its lines come), each event read into typed parts, stopped at
/// choice 0's finish or `[DONE]`, within `bounds` (bytes, tokens, time).
async fn read_stream(
    response: reqwest::Response,
    bounds: Bounds,
    sent: Instant,
) -> Result<Streamed, Failure> {
    let deadline = tokio::time::Instant::now() + bounds.timeout;
    let mut body = response.bytes_stream();
    read_events(
        async || match tokio::time::timeout_at(deadline, body.next()).await {
            Err(_) => Err(Failure::Fatal(format!(
                "no finish after {} s (--sample-timeout)",
                bounds.timeout.as_secs()
            ))),
            Ok(None) => Ok(None),
            Ok(Some(Ok(chunk))) => Ok(Some(chunk)),
            Ok(Some(Err(e))) => Err(Failure::Retry(format!("the stream broke: {e}"))),
        },
        bounds,
        sent,
    )
    .await
}

/// The framing and bounds of [`read_stream`], over any source of reads (`None`: the end).
async fn read_events<B: AsRef<[u8]>>(
    mut next: impl AsyncFnMut() -> Result<Option<B>, Failure>,
    bounds: Bounds,
    sent: Instant,
) -> Result<Streamed, Failure> {
    let mut out = Streamed::default();
    let mut framer =
        choicewise_sse::Framer::with_max_event_size(bounds.bytes.min(DEFAULT_MAX_EVENT_SIZE));
    let mut read = 0usize;
    let mut done = false;
    while let Some(chunk) = next().await? {
        let chunk = chunk.as_ref();
        read = read.saturating_add(chunk.len());
        if read > bounds.bytes {
            return Err(Failure::Fatal(format!(
                "more than {} bytes without a finish (--max-sample-bytes): stopped",
                bounds.bytes
            )));
        }
        let mut failed = None;
        let fed = framer.feed(chunk, |ev| {
            if ev.data == "[DONE]" {
                done = true;
                return ControlFlow::Break(());
            }
            if let Err(e) = out.event(ev.data) {
                failed = Some(e);
                return ControlFlow::Break(());
            }
            if out.first_token.is_none() && out.tokens() > 0 {
                out.first_token = Some(sent.elapsed());
            }
            if out.tokens() > bounds.tokens {
                failed = Some(Failure::Fatal(format!(
                    "more than {} tokens without a finish (--max-sample-tokens): stopped",
                    bounds.tokens
                )));
                return ControlFlow::Break(());
            }
            match out.finish {
                Some(_) => ControlFlow::Break(()),
                None => ControlFlow::Continue(()),
            }
        });
        let fed = fed.map_err(|e| Failure::Fatal(format!("not an event stream: {e}")))?;
        if let Some(e) = failed {
            return Err(e);
        }
        if matches!(fed, choicewise_sse::Feed::Stopped { .. }) {
            break;
        }
    }
    if out.finish.is_none() && !done {
        return Err(Failure::Retry(
            "the stream ended before the sample did".into(),
        ));
    }
    out.total = Some(sent.elapsed());
    Ok(out)
}

/// A progress bar on stderr, when it is a terminal.
struct Progress {
    on: bool,
    total: usize,
    done: usize,
    items: usize,
    items_done: usize,
    started: Instant,
}

impl Progress {
    fn draw(&self) {
        if !self.on {
            return;
        }
        let width = 30;
        let filled = (width * self.done).checked_div(self.total).unwrap_or(width);
        let mut err = std::io::stderr();
        let _ = write!(
            err,
            "\r[{}{}] {}/{} samples, {}/{} items, {:.0} s ",
            "#".repeat(filled),
            "-".repeat(width - filled),
            self.done,
            self.total,
            self.items_done,
            self.items,
            self.started.elapsed().as_secs_f64()
        );
        let _ = err.flush();
    }
}

/// `meta.json`: what was recorded, and how.
fn meta(args: &RecordArgs, asked: &Asked, items: usize, recorded: &[Option<Problem>]) -> Value {
    let problems: Vec<Problem> = recorded.iter().flatten().cloned().collect();
    let samples: usize = problems.iter().map(|p| p.samples.len()).sum();
    let logprobs = TraceSet {
        problems: problems.clone(),
        ..TraceSet::default()
    }
    .has_logprobs();
    json!({
        "recorded_by": format!("choicewise {} picks record", env!("CARGO_PKG_VERSION")),
        "format": "arith-traces (traces_*.npz, vocab.json): one traces_I.npz per item I of the input, in its order",
        "input": asked.input.display().to_string(),
        "base_url": asked.base_url,
        "model": args.model,
        "samples_per_item": asked.samples,
        "temperature": args.temperature,
        "max_tokens": args.max_tokens,
        "items": items,
        "items_recorded": problems.len(),
        "samples_recorded": samples,
        "logprobs": logprobs,
        "tokens": "each sample's logprobs.content tokens when their text is its content's; else its streamed content pieces, without log-probabilities (zeros)",
        "eos": "id 0 (<eos>) is never written: finished = the sample ended with finish_reason \"stop\"; lengths count content tokens",
        "pred_answers": "empty, and correct false: the answer's pattern is not known when recording; choicewise picks report --answer REGEX reads each sample's answer from its text",
        "problem_ids": "the item's line number among the items (from 0); item_ids: its id",
        "first_token_ms": "each sample's time from its request to its first token, as the server gave it (-1: not recorded)",
        "total_ms": "each sample's time from its request to its finish (-1: not recorded)",
    })
}

impl RecordArgs {
    /// With `--from-records URL`: the model, the URL, `--since` and `--out`.
    pub(super) fn recorded_traffic(&self) -> Option<(&str, &str, Option<&str>, &Path)> {
        let url = self.from_records.as_deref()?;
        Some((&self.model, url, self.since.as_deref(), &self.out))
    }
}

/// What a recording from an endpoint asks: `--input`, `--samples`, `--base-url`.
struct Asked {
    input: PathBuf,
    samples: usize,
    base_url: String,
}

pub async fn run(args: RecordArgs) -> Result<(), Exit> {
    let (Some(input), Some(samples), Some(base_url)) =
        (args.input.clone(), args.samples, args.base_url.clone())
    else {
        return Err(Exit {
            message: "--input, --samples and --base-url (or --from-records)".into(),
            code: 2,
        });
    };
    let asked = Asked {
        input,
        samples,
        base_url,
    };
    if asked.samples == 0 {
        return Err(Exit::from("--samples: at least 1".to_string()));
    }
    let items = read_items(&asked.input)?;
    let extra = match &args.extra_body {
        None => serde_json::Map::new(),
        Some(text) => match serde_json::from_str::<Value>(text) {
            Ok(Value::Object(m)) => m,
            _ => return Err(format!("--extra-body: not a JSON object: {text}").into()),
        },
    };
    let dir = &args.out;
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot make {}: {e}", dir.display()))?;
    let mut vocab = load_vocab(dir)?;
    // What an earlier run recorded, item by item.
    let mut recorded: Vec<Option<Problem>> = vec![None; items.len()];
    for (i, file) in npz_files(dir).map_err(|e| e.to_string())? {
        let i = i as usize;
        let Some(item) = items.get(i) else {
            return Err(format!(
                "{}: {} holds item {i}, and {} has {} items: another set?",
                dir.display(),
                file.display(),
                asked.input.display(),
                items.len()
            )
            .into());
        };
        let mut problems =
            TraceSet::read_npz(&file, vocab.tokens().len()).map_err(|e| e.to_string())?;
        let Some(p) = problems.pop() else { continue };
        if p.name.as_deref() != Some(item.id.as_str()) {
            return Err(format!(
                "{} is item {:?}, and line {} of {} is {:?}: another set? (give another --out)",
                file.display(),
                p.name.unwrap_or_default(),
                i + 1,
                asked.input.display(),
                item.id
            )
            .into());
        }
        recorded[i] = Some(p);
    }

    let mut body = extra;
    body.insert("model".into(), json!(args.model));
    if let Some(t) = args.temperature {
        body.insert("temperature".into(), json!(t));
    }
    if let Some(m) = args.max_tokens {
        body.insert("max_tokens".into(), json!(m));
    }
    let key = (args.api_key.clone())
        .or_else(|| std::env::var("OPENAI_API_KEY").ok())
        .filter(|k| !k.trim().is_empty());
    let asking = Asking {
        client: reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(30))
            .read_timeout(Duration::from_secs(300))
            .build()
            .map_err(|e| e.to_string())?,
        url: format!("{}/chat/completions", asked.base_url.trim_end_matches('/')),
        key,
        body,
        refused: AtomicBool::new(false),
        bounds: Bounds {
            bytes: args.max_sample_bytes.max(1),
            tokens: args.max_sample_tokens.max(1),
            timeout: Duration::from_secs(args.sample_timeout.max(1)),
        },
    };

    let have = |r: &Option<Problem>| r.as_ref().map_or(0, |p| p.samples.len().min(asked.samples));
    let mut progress = Progress {
        on: std::io::stderr().is_terminal(),
        total: items.len() * asked.samples,
        done: recorded.iter().map(have).sum(),
        items: items.len(),
        items_done: recorded.iter().filter(|r| have(r) >= asked.samples).count(),
        started: Instant::now(),
    };
    let started = Instant::now();
    let mut new_samples = 0usize;
    progress.draw();
    for (i, item) in items.iter().enumerate() {
        let already = have(&recorded[i]);
        if already >= asked.samples {
            continue;
        }
        let messages = item.messages();
        let mut streams = futures::stream::iter(already..asked.samples)
            .map(|k| {
                let (asking, messages) = (&asking, &messages);
                async move { (k, asking.sample(messages).await) }
            })
            .buffer_unordered(args.concurrency.max(1));
        let mut got: Vec<(usize, Streamed)> = Vec::new();
        while let Some((k, s)) = streams.next().await {
            let s = s.map_err(|e| {
                if progress.on {
                    eprintln!();
                }
                format!("item {:?} (line {}), sample {}: {e}", item.id, i + 1, k + 1)
            })?;
            got.push((k, s));
            progress.done += 1;
            progress.draw();
        }
        drop(streams);
        got.sort_by_key(|(k, _)| *k);
        let mut problem = recorded[i].take().unwrap_or_else(|| Problem {
            id: i as i64,
            prompt: item.prompt.clone(),
            messages: item
                .messages
                .as_ref()
                .map(|m| Value::Array(m.clone()).to_string()),
            name: Some(item.id.clone()),
            answer: item.answer.clone(),
            ..Problem::default()
        });
        for (_, s) in got {
            let ms =
                |d: Option<Duration>| d.map_or(-1, |d| d.as_millis().min(i32::MAX as u128) as i32);
            let times = [ms(s.first_token), ms(s.total)];
            // Samples recorded before times were kept have none (-1).
            let known = problem.times_ms.len();
            problem.times_ms.extend(std::iter::repeat_n(
                [-1, -1],
                problem.samples.len().saturating_sub(known),
            ));
            problem.times_ms.push(times);
            problem.samples.push(s.sample(&mut vocab));
            new_samples += 1;
        }
        recorded[i] = Some(problem);
        // The vocabulary and meta.json first: a crash before the item's own file leaves
        // tokens no file uses, never a file with tokens the vocabulary lacks.
        let set = TraceSet {
            vocab: vocab.tokens().to_vec(),
            eos: 0,
            problems: Vec::new(),
        };
        set.write_vocab(dir).map_err(|e| e.to_string())?;
        let m = meta(&args, &asked, items.len(), &recorded);
        write_atomically(
            &dir.join("meta.json"),
            serde_json::to_string_pretty(&m)
                .unwrap_or_default()
                .as_bytes(),
        )
        .map_err(|e| e.to_string())?;
        let file = dir.join(format!("traces_{i}.npz"));
        set.write_npz(
            &file,
            std::slice::from_ref(recorded[i].as_ref().unwrap_or(&Problem::default())),
        )
        .map_err(|e| e.to_string())?;
        progress.items_done += 1;
        progress.draw();
    }
    if progress.on {
        eprintln!();
    }
    let m = meta(&args, &asked, items.len(), &recorded);
    write_atomically(
        &dir.join("meta.json"),
        serde_json::to_string_pretty(&m)
            .unwrap_or_default()
            .as_bytes(),
    )
    .map_err(|e| e.to_string())?;
    eprintln!(
        "recorded {new_samples} new samples in {:.1} s; {} has {} items x {} samples{}",
        started.elapsed().as_secs_f64(),
        dir.display(),
        items.len(),
        asked.samples,
        if m["logprobs"] == true {
            ", with their log-probabilities"
        } else {
            ", without log-probabilities"
        }
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;

    const DEFAULTS: Bounds = Bounds {
        bytes: DEFAULT_MAX_SAMPLE_BYTES,
        tokens: DEFAULT_MAX_SAMPLE_TOKENS,
        timeout: Duration::from_secs(DEFAULT_SAMPLE_TIMEOUT_S),
    };

    /// `reads` one after the other, then the end.
    async fn read_all(reads: Vec<Vec<u8>>, bounds: Bounds) -> Result<Streamed, Failure> {
        let mut reads = reads.into_iter();
        read_events(async || Ok(reads.next()), bounds, Instant::now()).await
    }

    fn fatal(r: Result<Streamed, Failure>) -> String {
        match r {
            Err(Failure::Fatal(e)) => e,
            Err(Failure::Retry(e)) => panic!("retried: {e}"),
            Ok(s) => panic!("read: {s:?}"),
        }
    }

    fn content_event(text: &str) -> String {
        let chunk =
            json!({"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": null}]});
        format!("data: {chunk}\n\n")
    }

    #[tokio::test]
    async fn a_stream_is_read_to_its_finish_and_no_further() {
        let finish = json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop",
            "logprobs": {"content": [{"token": "!", "logprob": null, "top_logprobs": [{"token": "!", "logprob": -0.5}]}]}}]});
        let sse = format!(
            "{}{}data: {finish}\n\ndata: not JSON, never read\n\n",
            content_event("4"),
            content_event("2"),
        );
        // In reads of 3 bytes: lines and characters split anywhere.
        let reads = sse.as_bytes().chunks(3).map(<[u8]>::to_vec).collect();
        let s = read_all(reads, DEFAULTS).await.unwrap();
        assert_eq!(s.pieces, ["4", "2"]);
        assert_eq!(s.finish.as_deref(), Some("stop"));
        // A null log-probability: the least a half holds.
        assert_eq!(s.logprobs[0].1, -65504.0);
        assert_eq!(s.logprobs[0].2[0].1, -0.5);
        // [DONE] ends a stream too; data after it is never read.
        let sse = format!("{}data: [DONE]\n\ndata: oops\n\n", content_event("a"));
        let s = read_all(vec![sse.into_bytes()], DEFAULTS).await.unwrap();
        assert_eq!((s.pieces.len(), s.finish), (1, None));
        // Without either, a broken stream: worth another try.
        let r = read_all(vec![content_event("a").into_bytes()], DEFAULTS).await;
        assert!(matches!(r, Err(Failure::Retry(ref e)) if e.contains("ended before")));
    }

    #[tokio::test]
    async fn a_32_mib_line_is_refused_in_linear_time() {
        // One `data:` line of 32 MiB without its end, in reads of 64 KiB.
        let mut reads = vec![b"data: \"".to_vec()];
        reads.extend((0..512).map(|_| vec![b'a'; 64 << 10]));
        let started = Instant::now();
        let e = fatal(read_all(reads, DEFAULTS).await);
        let took = started.elapsed();
        assert!(e.contains("not an event stream"), "{e}");
        // 50 µs a KiB of the line at most (1.6 s for 32 MiB): the framer's work is linear.
        assert!(took < Duration::from_millis(1600), "{took:?}");
    }

    #[tokio::test]
    async fn endless_log_probabilities_stop_at_the_byte_cap() {
        // 170 MB of events, each one token with 5 top log-probabilities, never finishing.
        let token = json!({"token": "x", "logprob": -0.5, "top_logprobs": [
            {"token": "x", "logprob": -0.5}, {"token": "y", "logprob": -1.5}, {"token": "z", "logprob": -2.5},
            {"token": "w", "logprob": -3.5}, {"token": "v", "logprob": -4.5}]});
        let event = format!(
            "data: {}\n\n",
            json!({"choices": [{"index": 0, "delta": {"content": "x"},
                "logprobs": {"content": [token]}, "finish_reason": null}]})
        );
        let per_read = event.repeat(256);
        let total = 170_000_000 / per_read.len();
        let mut sent = 0usize;
        let started = Instant::now();
        let r = read_events(
            async || {
                sent += 1;
                Ok((sent <= total).then_some(per_read.as_bytes()))
            },
            DEFAULTS,
            Instant::now(),
        )
        .await;
        let e = fatal(r);
        assert!(e.contains("--max-sample-bytes"), "{e}");
        assert!(sent * per_read.len() <= DEFAULT_MAX_SAMPLE_BYTES + 2 * per_read.len());
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{:?}",
            started.elapsed()
        );
        // The token cap, when it comes first.
        let few = Bounds {
            tokens: 100,
            ..DEFAULTS
        };
        let e = fatal(read_all(vec![per_read.clone().into_bytes()], few).await);
        assert!(e.contains("more than 100 tokens"), "{e}");
    }

    #[tokio::test]
    async fn content_without_end_at_1_mib_a_second_is_stopped_within_60_s() {
        let event = content_event(&"y".repeat(1000));
        let read = event.repeat(64);
        // The time a server sending 1 MiB a second takes to send the reads so far.
        let mut clock = 0.0;
        let r = read_events(
            async || {
                clock += read.len() as f64 / f64::from(1 << 20);
                Ok(Some(read.as_bytes()))
            },
            DEFAULTS,
            Instant::now(),
        )
        .await;
        let e = fatal(r);
        assert!(e.contains("--max-sample-bytes"), "{e}");
        assert!(clock <= 60.0, "stopped after {clock} s");
    }

    #[tokio::test]
    async fn an_error_quotes_a_few_hundred_bytes_of_the_event() {
        let huge = format!("data: {{\"choices\": [{}\n\n", "7,".repeat(1 << 19));
        let e = fatal(read_all(vec![huge.into_bytes()], DEFAULTS).await);
        assert!(e.len() < 600, "{} bytes: {}", e.len(), &e[..600]);
        assert!(e.contains("bytes)"), "{e}");
        let e = quoted(&"é".repeat(300));
        assert!(e.ends_with("... (600 bytes)"), "{e}");
    }
}
