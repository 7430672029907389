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

use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use choicewise_picks::traces::{
    Problem, Sample, TOP_K, TraceSet, npz_files, read_vocab, write_atomically,
};
use clap::Args;
use futures::StreamExt;
use serde_json::{Value, json};

use crate::Exit;

#[derive(Debug, Args)]
pub struct RecordArgs {
    /// The items, one JSON object a line: `{"id": "...", "prompt": "..." or "messages":
    /// [...], "answer": "..."}`.
    #[arg(long, value_name = "ITEMS.jsonl")]
    input: PathBuf,
    /// Samples of each item.
    #[arg(long, value_name = "K")]
    samples: usize,
    /// The directory of the set (made if missing; a run with the same DIR resumes).
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
    /// The endpoint's base URL, to which `/chat/completions` is added (e.g.
    /// `http://127.0.0.1:8080/v1`).
    #[arg(long, value_name = "URL")]
    base_url: String,
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
}

/// One line of ITEMS.jsonl.
#[derive(Debug, Clone)]
struct Item {
    id: String,
    /// The conversation, when the item gave `messages`.
    messages: Option<Vec<Value>>,
    /// The prompt, or the last user message's text.
    prompt: String,
    answer: String,
}

impl Item {
    fn messages(&self) -> Vec<Value> {
        self.messages
            .clone()
            .unwrap_or_else(|| vec![json!({"role": "user", "content": self.prompt})])
    }
}

fn scalar(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

fn read_items(path: &Path) -> Result<Vec<Item>, Exit> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let mut items = Vec::new();
    let mut seen = HashMap::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let at = |why: &str| format!("{}:{}: {why}", path.display(), n + 1);
        let v: Value = serde_json::from_str(line).map_err(|e| at(&format!("not JSON: {e}")))?;
        let id = v
            .get("id")
            .and_then(scalar)
            .unwrap_or_else(|| n.to_string());
        let answer = (v.get("answer").and_then(scalar))
            .ok_or_else(|| at("no \"answer\""))?
            .trim()
            .to_string();
        let (messages, prompt) = match (v.get("messages"), v.get("prompt")) {
            (Some(Value::Array(m)), _) if !m.is_empty() => {
                let last_user = (m.iter().rev())
                    .find(|m| m["role"] == "user")
                    .and_then(|m| m["content"].as_str())
                    .unwrap_or("")
                    .to_string();
                (Some(m.clone()), last_user)
            }
            (_, Some(Value::String(p))) => (None, p.clone()),
            _ => return Err(at("no \"prompt\" (a string) or \"messages\" (an array)").into()),
        };
        if let Some(first) = seen.insert(id.clone(), n + 1) {
            return Err(at(&format!("id {id:?} is also on line {first}")).into());
        }
        items.push(Item {
            id,
            messages,
            prompt,
            answer,
        });
    }
    if items.is_empty() {
        return Err(format!("{}: no item", path.display()).into());
    }
    Ok(items)
}

/// Token text → id, in the order first seen; id 0 is `<eos>`.
struct Vocab {
    tokens: Vec<String>,
    ids: HashMap<String, u32>,
}

impl Vocab {
    fn load(dir: &Path) -> Result<Vocab, Exit> {
        let tokens = if dir.join("vocab.json").exists() {
            read_vocab(dir).map_err(|e| e.to_string())?
        } else {
            vec!["<eos>".to_string()]
        };
        if tokens.first().map(String::as_str) != Some("<eos>") {
            return Err(format!(
                "{}: not a set this command recorded (its token 0 is not <eos>)",
                dir.join("vocab.json").display()
            )
            .into());
        }
        let mut ids = HashMap::new();
        for (i, t) in tokens.iter().enumerate().skip(1) {
            ids.entry(t.clone()).or_insert(i as u32);
        }
        Ok(Vocab { tokens, ids })
    }

    fn id(&mut self, token: &str) -> u32 {
        if let Some(&id) = self.ids.get(token) {
            return id;
        }
        let id = self.tokens.len() as u32;
        self.tokens.push(token.to_string());
        self.ids.insert(token.to_string(), id);
        id
    }
}

/// One `logprobs.content` entry: the token, its log-probability, the top alternatives.
type Entry = (String, f32, Vec<(String, f32)>);

/// One sample as it streamed.
#[derive(Debug, Default)]
struct Streamed {
    pieces: Vec<String>,
    logprobs: Vec<Entry>,
    finish: Option<String>,
}

fn logprob_of(v: &Value) -> f32 {
    // A server may write -inf as null: the least a half-precision value holds.
    v.as_f64().map_or(-65504.0, |x| x.max(-65504.0) as f32)
}

impl Streamed {
    /// One `data:` payload.
    fn event(&mut self, v: &Value) -> Result<(), String> {
        if let Some(e) = v.get("error") {
            return Err(format!("the stream failed: {e}"));
        }
        for c in v["choices"].as_array().into_iter().flatten() {
            if c["index"].as_u64().unwrap_or(0) != 0 {
                continue;
            }
            if let Some(t) = c["delta"]["content"].as_str()
                && !t.is_empty()
            {
                self.pieces.push(t.to_string());
            }
            for e in c["logprobs"]["content"].as_array().into_iter().flatten() {
                let top = (e["top_logprobs"].as_array().into_iter().flatten())
                    .map(|t| {
                        (
                            t["token"].as_str().unwrap_or("").to_string(),
                            logprob_of(&t["logprob"]),
                        )
                    })
                    .collect();
                self.logprobs.push((
                    e["token"].as_str().unwrap_or("").to_string(),
                    logprob_of(&e["logprob"]),
                    top,
                ));
            }
            if let Some(f) = c["finish_reason"].as_str() {
                self.finish = Some(f.to_string());
            }
        }
        Ok(())
    }

    /// The sample, its tokens given ids in `vocab`.
    fn sample(self, vocab: &mut Vocab) -> Sample {
        let content: String = self.pieces.concat();
        let joined: String = self.logprobs.iter().map(|(t, _, _)| t.as_str()).collect();
        let finished = self.finish.as_deref() == Some("stop");
        let mut s = Sample {
            finished,
            ..Sample::default()
        };
        if !self.logprobs.is_empty() && joined == content {
            for (token, lp, top) in self.logprobs {
                let id = vocab.id(&token);
                let mut ids = [id; TOP_K];
                let mut lps = [lp; TOP_K];
                for k in 0..TOP_K {
                    // Fewer than TOP_K alternatives: the last one again.
                    if let Some((t, l)) = top.get(k.min(top.len().saturating_sub(1))) {
                        ids[k] = vocab.id(t);
                        lps[k] = *l;
                    }
                }
                s.tokens.push(id);
                s.logprob.push(lp);
                s.top_ids.push(ids);
                s.top_logprobs.push(lps);
            }
            return s;
        }
        for piece in &self.pieces {
            let id = vocab.id(piece);
            s.tokens.push(id);
            s.logprob.push(0.0);
            s.top_ids.push([id; TOP_K]);
            s.top_logprobs.push([0.0; TOP_K]);
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

    /// One sample, with a few tries when the server fails for a moment.
    async fn sample(&self, messages: &[Value]) -> Result<Streamed, String> {
        let mut last = String::new();
        for attempt in 0..6u32 {
            if attempt > 0 {
                tokio::time::sleep(Duration::from_millis(250 << attempt.min(4))).await;
            }
            let logprobs = !self.refused.load(Ordering::Relaxed);
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
            match read_stream(response).await {
                Ok(s) => return Ok(s),
                Err(e) => last = e,
            }
        }
        Err(last)
    }
}

fn response_status(status: u16) -> String {
    reqwest::StatusCode::from_u16(status).map_or(status.to_string(), |s| s.to_string())
}

async fn read_stream(response: reqwest::Response) -> Result<Streamed, String> {
    let mut out = Streamed::default();
    let mut buf: Vec<u8> = Vec::new();
    let mut body = response.bytes_stream();
    let mut done = false;
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(|e| format!("the stream broke: {e}"))?;
        buf.extend_from_slice(&chunk);
        while let Some(at) = buf.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = buf.drain(..=at).collect();
            let line = String::from_utf8_lossy(&line);
            let Some(data) = line.trim_end().strip_prefix("data:") else {
                continue;
            };
            let data = data.trim_start();
            if data == "[DONE]" {
                done = true;
                continue;
            }
            let v: Value = serde_json::from_str(data)
                .map_err(|e| format!("an event is not JSON ({e}): {data}"))?;
            out.event(&v)?;
        }
    }
    if out.finish.is_none() && !done {
        return Err("the stream ended before the sample did".into());
    }
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
fn meta(args: &RecordArgs, items: usize, recorded: &[Option<Problem>]) -> Value {
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
        "input": args.input.display().to_string(),
        "base_url": args.base_url,
        "model": args.model,
        "samples_per_item": args.samples,
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
    })
}

pub async fn run(args: RecordArgs) -> Result<(), Exit> {
    if args.samples == 0 {
        return Err(Exit::from("--samples: at least 1".to_string()));
    }
    let items = read_items(&args.input)?;
    let extra = match &args.extra_body {
        None => serde_json::Map::new(),
        Some(text) => match serde_json::from_str::<Value>(text) {
            Ok(Value::Object(m)) => m,
            _ => return Err(format!("--extra-body: not a JSON object: {text}").into()),
        },
    };
    let dir = &args.out;
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot make {}: {e}", dir.display()))?;
    let mut vocab = Vocab::load(dir)?;
    // What an earlier run recorded, item by item.
    let mut recorded: Vec<Option<Problem>> = vec![None; items.len()];
    for (i, file) in npz_files(dir).map_err(|e| e.to_string())? {
        let i = i as usize;
        let Some(item) = items.get(i) else {
            return Err(format!(
                "{}: {} holds item {i}, and {} has {} items: another set?",
                dir.display(),
                file.display(),
                args.input.display(),
                items.len()
            )
            .into());
        };
        let mut problems =
            TraceSet::read_npz(&file, vocab.tokens.len()).map_err(|e| e.to_string())?;
        let Some(p) = problems.pop() else { continue };
        if p.name.as_deref() != Some(item.id.as_str()) {
            return Err(format!(
                "{} is item {:?}, and line {} of {} is {:?}: another set? (give another --out)",
                file.display(),
                p.name.unwrap_or_default(),
                i + 1,
                args.input.display(),
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
        url: format!("{}/chat/completions", args.base_url.trim_end_matches('/')),
        key,
        body,
        refused: AtomicBool::new(false),
    };

    let have = |r: &Option<Problem>| r.as_ref().map_or(0, |p| p.samples.len().min(args.samples));
    let mut progress = Progress {
        on: std::io::stderr().is_terminal(),
        total: items.len() * args.samples,
        done: recorded.iter().map(have).sum(),
        items: items.len(),
        items_done: recorded.iter().filter(|r| have(r) >= args.samples).count(),
        started: Instant::now(),
    };
    let started = Instant::now();
    let mut new_samples = 0usize;
    progress.draw();
    for (i, item) in items.iter().enumerate() {
        let already = have(&recorded[i]);
        if already >= args.samples {
            continue;
        }
        let messages = item.messages();
        let mut streams = futures::stream::iter(already..args.samples)
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
            problem.samples.push(s.sample(&mut vocab));
            new_samples += 1;
        }
        recorded[i] = Some(problem);
        // The vocabulary and meta.json first: a crash before the item's own file leaves
        // tokens no file uses, never a file with tokens the vocabulary lacks.
        let set = TraceSet {
            vocab: vocab.tokens.clone(),
            eos: 0,
            problems: Vec::new(),
        };
        set.write_vocab(dir).map_err(|e| e.to_string())?;
        let m = meta(&args, items.len(), &recorded);
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
    let m = meta(&args, items.len(), &recorded);
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
        args.samples,
        if m["logprobs"] == true {
            ", with their log-probabilities"
        } else {
            ", without log-probabilities"
        }
    );
    Ok(())
}
