//! The gateway's soak with faults (`choicewise-bench soak`): `--requests` requests at
//! `--concurrency` through `choicewise serve` to the synthetic upstream (`upstream.rs`, one
//! request per connection, so that its open connections are its open answers), loopback only.
//!
//! Each request is drawn from its number (deterministic for a seed): model `native` or
//! `fanout`; `n` from 1 to 4 with every sample returned (streamed, or 1 in 10 not), or a
//! selection (`first_finished` of 4 samples, `vote` of 5, `first_token` of 3). Sample `s`
//! runs 4 + 3s content events, 3 ms apart. Faults, about 10% each:
//!
//! - upstream: the connection cut mid-stream, a stall past `upstream_idle_timeout_s` (1 s
//!   here), a 500 or a 429 before any byte (2.5% each);
//! - the client disconnects after its first 1 to 4 events;
//! - the client reads slowly (10 ms between reads).
//!
//! About 3% of the requests ask model `responses` instead: the upstream's Responses-API answer
//! of about 200 KB, whose closing events repeat the whole text (more than the back-pressure
//! allowance): each must end whole. Beside the load, one hostile upload per 20 requests (a
//! declared body over `max_body_bytes`, a `text/plain` POST, a body that never comes) must be
//! answered 413, 415 and 408 from the keyless gateway; and no byte any client reads may hold
//! the upstreams' key (`api_key_env`).
//!
//! Checked at the end, each failing the run (exit status 1) when not 0:
//!
//! - **panics**: `panicked` in the gateway's output, and the harness's own client tasks;
//! - **not intact**: choices the upstream wrote to their finish (its own record, by request)
//!   that a client reading to the end did not receive with the same text and `finish_reason:
//!   "stop"` (every sample returned: each one; a selection: its choice must be one of them);
//!   and any choice text, cut short or not, that is not a prefix of what the upstream sends;
//! - **cut short**: a 200 streamed answer read to the end without `data: [DONE]`, or with a
//!   choice that has no `finish_reason`;
//! - **hung**: a request unanswered after 30 s;
//! - **upstream connections left open** 5 s after the last request (the upstream's count).
//!
//! Reported beside them: the gateway's VmRSS before and after, error answers by kind (HTTP
//! status and code; in the stream, each choice's `choicewise.error`).
//!
//! `--resilience`: the run of issue 40. Each model has three upstreams, one refusing
//! connections and one failing 3 tries in 10 with a 503 before any byte; the requests carry
//! no upstream fault of their own (the clients' faults stay). Checked besides the above:
//! **client-visible failures** (an error status, or a choice ended with `choicewise.error`)
//! must be 0, as long as one upstream is healthy. Reported: tries per request (from
//! `x-choicewise-tries`) and the time to the answer's headers of the requests that needed a
//! retry beside those that did not (p50, p99).

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::{Value, json};

use crate::procs;
use crate::upstream::{Fault, Plan, Snapshot, text};
use crate::{Report, Target, runtime};

#[derive(Debug, Clone, clap::Args)]
pub struct SoakArgs {
    /// Requests in all.
    #[arg(long, default_value_t = 10_000)]
    pub requests: usize,
    /// Requests at once.
    #[arg(long, default_value_t = 200)]
    pub concurrency: usize,
    /// The gateway's `upstream_idle_timeout_s` (the stalls last longer).
    #[arg(long, default_value_t = 1.0)]
    pub idle_timeout_s: f64,
    /// Seed of the mix.
    #[arg(long, default_value_t = 29)]
    pub seed: u64,
    /// The `choicewise` binary (default: next to this harness).
    #[arg(long)]
    pub choicewise: Option<PathBuf>,
    /// Worker threads of the clients' runtime.
    #[arg(long, default_value_t = 2)]
    pub workers: usize,
    /// Three upstreams per model, one down and one failing 30% of its tries; no upstream
    /// fault in the requests: no client may see a failure.
    #[arg(long)]
    pub resilience: bool,
}

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Select {
    All,
    FirstFinished,
    Vote,
    FirstToken,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum ClientFault {
    None,
    /// Goes away after this many events.
    Disconnect(usize),
    Slow,
}

#[derive(Debug, Clone)]
struct Case {
    plan: Plan,
    model: &'static str,
    n: u32,
    samples: u32,
    select: Select,
    stream: bool,
    client: ClientFault,
}

fn case(seed: u64, k: usize) -> Case {
    let r = |salt: u64| splitmix(seed ^ (k as u64).wrapping_mul(0x1000_0001) ^ (salt << 56));
    let fault_draw = r(1) % 1000;
    let tick = 2 + (r(2) % 5) as u32;
    let (fault, mut client) = match fault_draw {
        0..25 => (Fault::Cut(tick), ClientFault::None),
        25..50 => (Fault::Stall(tick), ClientFault::None),
        50..75 => (Fault::Status(500), ClientFault::None),
        75..100 => (Fault::Status(429), ClientFault::None),
        100..200 => (
            Fault::None,
            ClientFault::Disconnect(1 + (r(3) % 4) as usize),
        ),
        200..300 => (Fault::None, ClientFault::Slow),
        _ => (Fault::None, ClientFault::None),
    };
    let (select, n, samples, stream) = match r(4) % 100 {
        0..50 => {
            let n = 1 + (r(5) % 4) as u32;
            (Select::All, n, n, true)
        }
        50..65 => (Select::FirstFinished, 1, 4, true),
        65..80 => (Select::Vote, 1, 5, true),
        80..90 => (Select::FirstToken, 1, 3, true),
        _ => {
            let n = 1 + (r(5) % 4) as u32;
            (Select::All, n, n, false)
        }
    };
    if !stream {
        client = ClientFault::None;
    }
    Case {
        plan: Plan {
            tag: k as u64,
            ticks: 4,
            spread: 3,
            first_us: 2_000,
            interval_us: 3_000,
            stamp: false,
            fault,
            tick_writes: false,
        },
        model: if r(6) % 2 == 0 { "native" } else { "fanout" },
        n,
        samples,
        select,
        stream,
        client,
    }
    .or_responses(r(7) % 100 < 3)
}

impl Case {
    /// This case as a request for model `responses` instead (the upstream's long
    /// Responses-API answer): one choice, streamed, every sample returned.
    fn or_responses(mut self, yes: bool) -> Case {
        if yes {
            self.model = "responses";
            self.n = 1;
            self.samples = 1;
            self.select = Select::All;
            self.stream = true;
            self.plan.fault = Fault::None;
        }
        self
    }
}

fn body(c: &Case) -> String {
    let mut b = json!({
        "model": c.model,
        "n": c.n,
        "stream": c.stream,
        "messages": [{"role": "user", "content": c.plan.message()}],
    });
    match c.select {
        Select::All => {}
        Select::FirstFinished => {
            b["choicewise"] = json!({"samples": c.samples, "select": "first_finished"})
        }
        Select::Vote => {
            b["choicewise"] =
                json!({"samples": c.samples, "select": "vote", "vote_by": "Answer: (\\d+)"})
        }
        Select::FirstToken => {
            b["choicewise"] = json!({"samples": c.samples, "select": "first_token"})
        }
    }
    b.to_string()
}

/// What a client received.
#[derive(Debug, Default)]
struct Outcome {
    status: u16,
    /// The error answer's code, or a transport error.
    error: Option<String>,
    read_to_end: bool,
    done: bool,
    /// Per output choice: its text, its finish_reason, its `choicewise.error`.
    choices: BTreeMap<u64, (String, Option<String>, Option<String>)>,
    hung: bool,
    /// A byte read held the upstreams' key.
    leaked: bool,
    /// `x-choicewise-tries`, and the time to the answer's headers.
    tries: Option<u64>,
    headers_after: Duration,
}

fn apply_choice(out: &mut Outcome, element: &Value, message: bool) {
    let index = element.get("index").and_then(Value::as_u64).unwrap_or(999);
    let entry = out.choices.entry(index).or_default();
    let content = if message {
        element.pointer("/message/content")
    } else {
        element.pointer("/delta/content")
    };
    if let Some(t) = content.and_then(Value::as_str) {
        entry.0.push_str(t);
    }
    if let Some(f) = element.get("finish_reason").and_then(Value::as_str) {
        entry.1 = Some(f.to_string());
    }
    if let Some(e) = element.pointer("/choicewise/error").and_then(Value::as_str) {
        entry.2 = Some(e.to_string());
    }
}

async fn one(client: &reqwest::Client, url: &str, c: &Case) -> Outcome {
    let mut out = Outcome::default();
    let sent = Instant::now();
    let resp = match client
        .post(url)
        .header("content-type", "application/json")
        .body(body(c))
        .send()
        .await
    {
        Ok(r) => r,
        Err(e) => {
            out.error = Some(format!("transport: {e}"));
            return out;
        }
    };
    out.status = resp.status().as_u16();
    out.headers_after = sent.elapsed();
    out.tries = (resp.headers().get("x-choicewise-tries"))
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok());
    if out.status != 200 {
        let text = resp.text().await.unwrap_or_default();
        out.leaked |= text.contains(procs::SOAK_KEY);
        let code = serde_json::from_str::<Value>(&text)
            .ok()
            .and_then(|v| {
                v.pointer("/error/code")
                    .and_then(Value::as_str)
                    .map(str::to_string)
            })
            .unwrap_or_else(|| "-".into());
        out.error = Some(code);
        return out;
    }
    if !c.stream {
        match resp.bytes().await {
            Ok(b) => {
                out.leaked |= memchr::memmem::find(&b, procs::SOAK_KEY.as_bytes()).is_some();
                out.read_to_end = true;
                out.done = true;
                if let Ok(v) = serde_json::from_slice::<Value>(&b) {
                    for ch in v["choices"].as_array().into_iter().flatten() {
                        apply_choice(&mut out, ch, true);
                    }
                }
            }
            Err(e) => out.error = Some(format!("transport: {e}")),
        }
        return out;
    }
    let mut reads = resp.bytes_stream();
    let mut carry: Vec<u8> = Vec::new();
    let mut events = 0usize;
    while let Some(read) = reads.next().await {
        let read = match read {
            Ok(r) => r,
            Err(e) => {
                out.error = Some(format!("transport mid-stream: {e}"));
                return out;
            }
        };
        carry.extend_from_slice(&read);
        out.leaked |= memchr::memmem::find(&carry, procs::SOAK_KEY.as_bytes()).is_some();
        while let Some(end) = memchr::memmem::find(&carry, b"\n\n") {
            let event: Vec<u8> = carry.drain(..end + 2).collect();
            let Some(data) = event.strip_prefix(b"data: ") else {
                continue;
            };
            let data = &data[..data.len() - 2];
            if data == b"[DONE]" {
                out.done = true;
                continue;
            }
            events += 1;
            match serde_json::from_slice::<Value>(data) {
                Ok(v) => {
                    for ch in v["choices"].as_array().into_iter().flatten() {
                        apply_choice(&mut out, ch, false);
                    }
                }
                Err(_) => out.error = Some("an event that is not JSON".into()),
            }
        }
        match c.client {
            ClientFault::Disconnect(after) if events >= after => return out,
            ClientFault::Slow => tokio::time::sleep(Duration::from_millis(10)).await,
            _ => {}
        }
    }
    out.read_to_end = true;
    out
}

/// One hostile upload to the keyless gateway at `addr` (`host:port`), of kind `k % 3`: a
/// declared body over `max_body_bytes` (413 at once), a `text/plain` POST (415), a body that
/// never arrives (408 after `body_read_timeout_s`). `None` when answered so, else what came.
async fn hostile(addr: &str, k: usize) -> Option<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (head, body, expect) = match k % 3 {
        0 => (
            "content-type: application/json\r\ncontent-length: 9000000",
            "",
            "413",
        ),
        1 => ("content-type: text/plain\r\ncontent-length: 2", "{}", "415"),
        _ => (
            "content-type: application/json\r\ncontent-length: 1000",
            "{\"model\":",
            "408",
        ),
    };
    let request =
        format!("POST /v1/chat/completions HTTP/1.1\r\nhost: {addr}\r\n{head}\r\n\r\n{body}");
    let answer = async {
        let mut tcp = tokio::net::TcpStream::connect(addr).await.ok()?;
        tcp.write_all(request.as_bytes()).await.ok()?;
        let mut buf = vec![0; 512];
        let n = tcp.read(&mut buf).await.ok()?;
        Some(String::from_utf8_lossy(&buf[..n]).to_string())
    };
    match tokio::time::timeout(Duration::from_secs(8), answer).await {
        Ok(Some(a)) if a.starts_with(&format!("HTTP/1.1 {expect}")) => None,
        Ok(Some(a)) => Some(format!(
            "expected {expect}, got {:?}",
            a.lines().next().unwrap_or("")
        )),
        Ok(None) => Some(format!("expected {expect}, the connection failed")),
        Err(_) => Some(format!("expected {expect}, nothing within 8 s")),
    }
}

/// Digits masked, cut at 70 characters: an error message as a kind.
fn kind(message: &str) -> String {
    let masked: String = message
        .chars()
        .map(|c| if c.is_ascii_digit() { '#' } else { c })
        .collect();
    masked.chars().take(70).collect()
}

async fn upstream_stats(client: &reqwest::Client, upstream: &str) -> Snapshot {
    match client.get(format!("{upstream}/stats")).send().await {
        Ok(r) => r.json().await.unwrap_or_default(),
        Err(_) => Snapshot::default(),
    }
}

async fn gateway_gauge(client: &reqwest::Client, gateway: &str, name: &str) -> Option<f64> {
    let text = client
        .get(format!("{gateway}/metrics"))
        .send()
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    text.lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
}

pub fn run(args: &SoakArgs) -> Report {
    let mut report = Report::default();
    let fail = |report: &mut Report, e: String| {
        println!("soak could not run: {e}");
        report.targets.push(Target {
            name: "soak_ran",
            measured: 0.0,
            target: 1.0,
            at_least: true,
            unit: "",
        });
    };
    let dir = procs::work_dir("soak");
    let upstream = match procs::upstream(&dir, true) {
        Ok(u) => u,
        Err(e) => {
            fail(&mut report, e);
            return report;
        }
    };
    let bin = procs::choicewise_bin(args.choicewise.as_deref());
    let config = match args.resilience {
        true => {
            // A port nothing listens on: the upstream that is down.
            let down = std::net::TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .map(|a| format!("http://{a}"))
                .unwrap_or_else(|_| "http://127.0.0.1:9".into());
            procs::resilient_gateway_config(&upstream.url, &down, args.idle_timeout_s)
        }
        false => procs::soak_gateway_config(&upstream.url, args.idle_timeout_s),
    };
    let gateway = match procs::gateway(&dir, &bin, &config) {
        Ok(g) => g,
        Err(e) => {
            fail(&mut report, e);
            return report;
        }
    };
    std::thread::sleep(Duration::from_millis(300));
    let rss_before = gateway.rss_kib();
    let rt = runtime(args.workers);
    let client = reqwest::Client::new();
    let url = format!("{}/v1/chat/completions", gateway.url);
    let started = Instant::now();
    let hostile_addr = gateway.url.trim_start_matches("http://").to_string();
    let hostile_count = if args.resilience {
        0
    } else {
        args.requests / 20
    };
    let (outcomes, client_panics, misanswered) = rt.block_on(async {
        // Hostile uploads beside the load: a keyless gateway answers them from their heads.
        let uploads: Vec<_> = (0..hostile_count)
            .map(|k| {
                let addr = hostile_addr.clone();
                tokio::spawn(async move { hostile(&addr, k).await })
            })
            .collect();
        let next = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for _ in 0..args.concurrency {
            let (client, url, next) = (client.clone(), url.clone(), next.clone());
            let (seed, total, resilience) = (args.seed, args.requests, args.resilience);
            tasks.push(tokio::spawn(async move {
                let mut outcomes = Vec::new();
                loop {
                    let k = next.fetch_add(1, Relaxed);
                    if k >= total {
                        break;
                    }
                    let mut c = case(seed, k);
                    if resilience {
                        c.plan.fault = Fault::None;
                        if c.model == "responses" {
                            c.model = "native";
                        }
                    }
                    let out = tokio::time::timeout(Duration::from_secs(30), one(&client, &url, &c))
                        .await
                        .unwrap_or_else(|_| Outcome {
                            hung: true,
                            ..Outcome::default()
                        });
                    outcomes.push((c, out));
                }
                outcomes
            }));
        }
        let mut all = Vec::new();
        let mut panics = 0;
        for t in tasks {
            match t.await {
                Ok(o) => all.extend(o),
                Err(_) => panics += 1,
            }
        }
        let mut misanswered = Vec::new();
        for u in uploads {
            match u.await {
                Ok(None) => {}
                Ok(Some(what)) => misanswered.push(what),
                Err(_) => panics += 1,
            }
        }
        (all, panics, misanswered)
    });
    let took = started.elapsed();
    // Open upstream connections: the stalls end at the idle timeout, the rest at once.
    let (after, completed, open_streams, open_upstreams) = rt.block_on(async {
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut s = upstream_stats(&client, &upstream.url).await;
        while s.open_connections > 1 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
            s = upstream_stats(&client, &upstream.url).await;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        let s = upstream_stats(&client, &upstream.url).await;
        let completed: HashMap<String, Vec<String>> = match client
            .get(format!("{}/completed", upstream.url))
            .send()
            .await
        {
            Ok(r) => r.json().await.unwrap_or_default(),
            Err(_) => HashMap::new(),
        };
        let streams = gateway_gauge(&client, &gateway.url, "choicewise_open_streams").await;
        let ups = gateway_gauge(
            &client,
            &gateway.url,
            "choicewise_open_upstream_connections",
        )
        .await;
        (s, completed, streams, ups)
    });
    std::thread::sleep(Duration::from_secs(1));
    let rss_after = gateway.rss_kib();
    // The stats request itself holds one connection to the upstream while it is counted.
    let left_open = (after.open_connections - 1).max(0);

    let mut kinds: BTreeMap<String, usize> = BTreeMap::new();
    // An error status, or a choice ended with an error: what a client sees of a failure.
    let visible = (outcomes.iter())
        .filter(|(_, o)| !o.hung && (o.status != 200 || o.choices.values().any(|c| c.2.is_some())))
        .count();
    let (mut not_intact, mut corrupt, mut cut_short, mut hung) = (0usize, 0usize, 0, 0);
    let mut examples: Vec<String> = Vec::new();
    let mut statuses: BTreeMap<u16, usize> = BTreeMap::new();
    for (c, out) in &outcomes {
        if out.hung {
            hung += 1;
            *kinds.entry("hung (no answer in 30 s)".into()).or_default() += 1;
            continue;
        }
        *statuses.entry(out.status).or_default() += 1;
        if out.status != 200 {
            *kinds
                .entry(format!(
                    "HTTP {} {}",
                    out.status,
                    kind(out.error.as_deref().unwrap_or("-"))
                ))
                .or_default() += 1;
            continue;
        }
        if let Some(e) = &out.error {
            *kinds.entry(format!("client: {}", kind(e))).or_default() += 1;
        }
        for (_, (_, finish, error)) in out.choices.iter() {
            if let Some(e) = error {
                *kinds
                    .entry(format!(
                        "choice finish_reason {}: {}",
                        finish.as_deref().unwrap_or("-"),
                        kind(e)
                    ))
                    .or_default() += 1;
            }
        }
        if c.model == "responses" {
            // The long Responses answer: read to its end, it is whole and ends with [DONE].
            if out.read_to_end {
                let whole = out.choices.get(&0).is_some_and(|ch| {
                    ch.0 == crate::upstream::long_text() && ch.1.as_deref() == Some("stop")
                });
                if !(out.done && whole && out.choices.len() == 1) {
                    cut_short += 1;
                    if examples.len() < 5 {
                        examples.push(format!(
                            "request {} (responses): done {}, {} choices, finish {:?}, {} bytes",
                            c.plan.tag,
                            out.done,
                            out.choices.len(),
                            out.choices.get(&0).map(|ch| ch.1.clone()),
                            out.choices.get(&0).map_or(0, |ch| ch.0.len())
                        ));
                    }
                }
            }
            continue;
        }
        // Every text, whole or cut short, is a prefix of what the upstream sends.
        let planned: Vec<String> = (0..16).map(|s| text(&c.plan, s)).collect();
        for (i, (t, _, _)) in &out.choices {
            if !planned.iter().any(|p| p.starts_with(t.as_str())) {
                corrupt += 1;
                if examples.len() < 5 {
                    examples.push(format!(
                        "request {} choice {i}: {t:?} is no prefix",
                        c.plan.tag
                    ));
                }
            }
        }
        if !out.read_to_end {
            continue;
        }
        let unfinished = out.choices.values().filter(|ch| ch.1.is_none()).count();
        let expected_choices = c.n as usize;
        if !out.done || unfinished > 0 || out.choices.len() != expected_choices {
            cut_short += 1;
            if examples.len() < 5 {
                examples.push(format!(
                    "request {} ({:?}, {}, n {}): done {}, {} choices, {} without finish",
                    c.plan.tag,
                    c.select,
                    c.model,
                    c.n,
                    out.done,
                    out.choices.len(),
                    unfinished
                ));
            }
        }
        let done_texts = completed
            .get(&c.plan.tag.to_string())
            .cloned()
            .unwrap_or_default();
        let stopped: Vec<&String> = out
            .choices
            .values()
            .filter(|ch| ch.1.as_deref() == Some("stop"))
            .map(|ch| &ch.0)
            .collect();
        match c.select {
            Select::All => {
                let mut left = stopped.clone();
                for t in &done_texts {
                    match left.iter().position(|s| *s == t) {
                        Some(p) => {
                            left.swap_remove(p);
                        }
                        None => {
                            not_intact += 1;
                            if examples.len() < 5 {
                                examples.push(format!(
                                    "request {} ({}, n {}, {:?}): the upstream finished {t:?}, the client got {:?}",
                                    c.plan.tag, c.model, c.n, c.plan.fault, out.choices
                                ));
                            }
                        }
                    }
                }
            }
            Select::FirstFinished | Select::Vote | Select::FirstToken => {
                for (i, (t, finish, _)) in &out.choices {
                    let must_stop = c.select != Select::FirstToken && !done_texts.is_empty();
                    let stopped_here = finish.as_deref() == Some("stop");
                    if (stopped_here && !done_texts.contains(t)) || (must_stop && !stopped_here) {
                        not_intact += 1;
                        if examples.len() < 5 {
                            examples.push(format!(
                                "request {} ({:?}, {}, {:?}): choice {i} {t:?} finish {finish:?}; the upstream finished {done_texts:?}",
                                c.plan.tag, c.select, c.model, c.plan.fault
                            ));
                        }
                    }
                }
            }
        }
    }
    let panics = gateway.panics() + client_panics;
    println!(
        "\n### soak: {} requests at {} concurrent in {:.1} s ({:.0} requests/s), idle timeout {} s\n",
        outcomes.len(),
        args.concurrency,
        took.as_secs_f64(),
        outcomes.len() as f64 / took.as_secs_f64(),
        args.idle_timeout_s
    );
    let count = |f: &dyn Fn(&Case) -> bool| outcomes.iter().filter(|(c, _)| f(c)).count();
    println!(
        "mix: upstream cut {}, stall {}, 500 {}, 429 {}; client disconnects {}, slow readers {}; \
         native {}, fan-out {}, responses (200 KB answers) {}; selections: all {} (not streamed {}), first_finished {}, vote {}, first_token {}",
        count(&|c| matches!(c.plan.fault, Fault::Cut(_))),
        count(&|c| matches!(c.plan.fault, Fault::Stall(_))),
        count(&|c| c.plan.fault == Fault::Status(500)),
        count(&|c| c.plan.fault == Fault::Status(429)),
        count(&|c| matches!(c.client, ClientFault::Disconnect(_))),
        count(&|c| c.client == ClientFault::Slow),
        count(&|c| c.model == "native"),
        count(&|c| c.model == "fanout"),
        count(&|c| c.model == "responses"),
        count(&|c| c.select == Select::All),
        count(&|c| !c.stream),
        count(&|c| c.select == Select::FirstFinished),
        count(&|c| c.select == Select::Vote),
        count(&|c| c.select == Select::FirstToken),
    );
    println!(
        "upstream: {} requests on {} connections, {} content events, {} choices written to their finish, \
         {} answers abandoned by the gateway, {} cut, {} stalled, {} error statuses",
        after.requests,
        after.connections,
        after.content_events,
        after.completed_choices,
        after.abandoned,
        after.cuts,
        after.stalls,
        after.statuses
    );
    println!("statuses: {statuses:?}");
    println!("error answers by kind:");
    for (k, n) in &kinds {
        println!("  {n:>6}  {k}");
    }
    println!(
        "gateway VmRSS: before {rss_before} KiB, after {rss_after} KiB ({:+.1}%); its gauges at the end: \
         open streams {open_streams:?}, open upstream connections {open_upstreams:?}",
        100.0 * (rss_after as f64 / rss_before.max(1) as f64 - 1.0)
    );
    for e in &examples {
        println!("example: {e}");
    }
    if hostile_count > 0 {
        println!(
            "hostile uploads beside the load: {hostile_count} (oversize, text/plain, a body that never comes), {} misanswered{}",
            misanswered.len(),
            misanswered
                .first()
                .map(|m| format!(", e.g. {m}"))
                .unwrap_or_default()
        );
    }
    if args.resilience {
        let planned = |c: &Case| match c.model {
            "native" => 1,
            _ => c.samples as u64,
        };
        let tries: u64 = outcomes.iter().filter_map(|(_, o)| o.tries).sum();
        let answered = outcomes.iter().filter(|(_, o)| o.tries.is_some()).count();
        let (mut retried, mut first): (Vec<f64>, Vec<f64>) = (Vec::new(), Vec::new());
        for (c, o) in &outcomes {
            // Samples started later (hedges, windows) are not in the headers' count.
            if c.select != Select::All || o.tries.is_none() {
                continue;
            }
            let ms = o.headers_after.as_secs_f64() * 1e3;
            match o.tries.unwrap_or(0) > planned(c) {
                true => retried.push(ms),
                false => first.push(ms),
            }
        }
        let pct = |v: &mut Vec<f64>, p: f64| {
            v.sort_by(f64::total_cmp);
            v.get(((v.len() as f64 - 1.0) * p).round().max(0.0) as usize)
                .copied()
                .unwrap_or(f64::NAN)
        };
        println!(
            "resilience: {:.2} tries per request ({tries} tries over {answered} answers); time to headers, \
             requests that needed a retry ({}): p50 {:.1} ms, p99 {:.1} ms; first try enough ({}): p50 {:.1} ms, p99 {:.1} ms",
            tries as f64 / answered.max(1) as f64,
            retried.len(),
            pct(&mut retried, 0.5),
            pct(&mut retried, 0.99),
            first.len(),
            pct(&mut first, 0.5),
            pct(&mut first, 0.99),
        );
        report.targets.push(Target {
            name: "soak_client_visible_failures",
            measured: visible as f64,
            target: 0.0,
            at_least: false,
            unit: "",
        });
    }
    for (name, measured) in [
        ("soak_panics", panics as f64),
        (
            "soak_choices_completed_not_received_intact",
            not_intact as f64,
        ),
        ("soak_texts_not_a_prefix_of_the_upstreams", corrupt as f64),
        ("soak_answers_cut_short", cut_short as f64),
        ("soak_requests_hung", hung as f64),
        ("soak_upstream_connections_left_open", left_open as f64),
        (
            "soak_keys_leaked",
            outcomes.iter().filter(|(_, o)| o.leaked).count() as f64,
        ),
        ("soak_hostile_uploads_misanswered", misanswered.len() as f64),
    ] {
        report.targets.push(Target {
            name,
            measured,
            target: 0.0,
            at_least: false,
            unit: "",
        });
    }
    report.info.push(format!(
        "INFO soak gateway VmRSS before {rss_before} KiB after {rss_after} KiB; {} requests in {:.1} s",
        outcomes.len(),
        took.as_secs_f64()
    ));
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mix_has_each_fault_near_its_share() {
        let cases: Vec<Case> = (0..10_000).map(|k| case(29, k)).collect();
        let share = |f: &dyn Fn(&Case) -> bool| cases.iter().filter(|c| f(c)).count();
        let upstream = share(&|c| c.plan.fault != Fault::None);
        let disconnects = share(&|c| matches!(c.client, ClientFault::Disconnect(_)));
        let slow = share(&|c| c.client == ClientFault::Slow);
        assert!((800..1200).contains(&upstream), "{upstream}");
        // Non-streamed requests read whole: their client faults are dropped.
        assert!((700..1100).contains(&disconnects), "{disconnects}");
        assert!((700..1100).contains(&slow), "{slow}");
        assert!(share(&|c| c.model == "native") > 4000);
        assert!(share(&|c| c.select == Select::Vote) > 1000);
    }
}
