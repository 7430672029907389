//! The upstream of `picks`: an OpenAI-style Chat Completions server on 127.0.0.1 that serves
//! a set's recorded samples as streamed chat completions, as a model server would.
//!
//! - The request's messages are a problem's (its prompt as the user message, or the
//!   conversation it was recorded with), compared by role and text; a system message
//!   `picks-run TAG` among them names the run, so that every run counts its samples afresh.
//! - The k-th sample asked for a problem in a run is that problem's recorded sample k,
//!   whatever the order in which the requests arrive: a request for `n` choices takes the
//!   next `n` numbers (native `n` and fan-out alike). Past the recorded samples: 400.
//! - Each sample's tokens are paced, one content event per token `pace` apart (choice after
//!   choice in one request, at the same tick), on a clock of the problem's run (its first
//!   request's arrival) as [`schedule`](crate::schedule) says, and never sooner than `pace`
//!   a token from when its stream began (a sample started after held finishes does not
//!   burst to catch the clock up): a sample starts at the tick of
//!   the problem's latest finish (0 before any), and the problem's samples finish one a tick,
//!   in the order of (due tick, sample number), at least [`FINISH_GAP`] apart in real time; so the
//!   order the gateway reads their finishes in is a function of their lengths and numbers
//!   (and of when a pick started them), not a race between connections. With `"logprobs": true` each carries its
//!   `logprobs.content` entry in OpenAI's shape (`token`, `logprob`, `top_logprobs` of
//!   [`TOP_K`](crate::traces::TOP_K)); `<eos>` ends a sample with `finish_reason: "stop"` (at
//!   its tick: it is a generated token), a sample that ran out of room with `"length"`.
//! - It counts requests, samples started and tokens sent: a sample the gateway cancels (its
//!   connection closed) counts the tokens sent before the cancel.
//!
//! It runs on a runtime of its own (one worker thread) in the harness's process.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::Value;

use crate::schedule::Schedule;
use crate::traces::{Sample, TraceSet};

/// The system message that names a run.
pub const RUN_PREFIX: &str = "picks-run ";

/// What the upstream counted.
#[derive(Debug, Default)]
pub struct Counters {
    /// Requests received.
    pub requests: AtomicU64,
    /// Samples started.
    pub samples: AtomicU64,
    /// Tokens sent (`<eos>` included).
    pub tokens: AtomicU64,
    /// Samples whose stream was dropped before their last token.
    pub cancelled: AtomicU64,
    /// Requests refused (unknown prompt, no sample left, not JSON).
    pub refused: AtomicU64,
}

/// The counters at one instant.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Requests received.
    pub requests: u64,
    /// Samples started.
    pub samples: u64,
    /// Tokens sent.
    pub tokens: u64,
    /// Samples dropped before their end.
    pub cancelled: u64,
    /// Requests refused.
    pub refused: u64,
}

impl std::ops::Sub for Counts {
    type Output = Counts;
    fn sub(self, o: Counts) -> Counts {
        Counts {
            requests: self.requests - o.requests,
            samples: self.samples - o.samples,
            tokens: self.tokens - o.tokens,
            cancelled: self.cancelled - o.cancelled,
            refused: self.refused - o.refused,
        }
    }
}

impl Counters {
    /// The counts now.
    pub fn counts(&self) -> Counts {
        Counts {
            requests: self.requests.load(Relaxed),
            samples: self.samples.load(Relaxed),
            tokens: self.tokens.load(Relaxed),
            cancelled: self.cancelled.load(Relaxed),
            refused: self.refused.load(Relaxed),
        }
    }
}

/// One problem in one run: its clock and its schedule.
struct RunState {
    /// Tick 0: the arrival of the run's first request for the problem.
    origin: tokio::time::Instant,
    inner: Mutex<RunInner>,
}

struct RunInner {
    /// Samples handed out.
    next: usize,
    schedule: Schedule,
    /// When the latest finish was sent.
    last_sent: Option<tokio::time::Instant>,
}

impl RunState {
    fn lock(&self) -> std::sync::MutexGuard<'_, RunInner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The least real time between two finishes of a problem (in one run), whatever the pace. The
/// gateway reads a fan-out's samples over separate connections: two finishes closer than the
/// longest time it is kept off the CPU can be read in either order. On the loaded 2-core
/// machine of docs/picks.md, a millisecond apart left 13 of 100 `first-finished` problems of
/// set-b read out of order over three runs; 4 ms, fewer (27 of 400); 25 ms, 19 of 400; 100
/// ms, none of set-b's 400 for any vote or `adaptive`. So 100 ms: the replay's order is the
/// schedule's, and the reference's answers the gateway's. The schedule's ticks are unchanged:
/// only the wall time of the samples waiting stretches (a vote of 64 answers in seconds);
/// for times near a model server's, a smaller gap (`choicewise-bench picks
/// --finish-gap-ms 4`).
pub const FINISH_GAP: Duration = Duration::from_millis(100);

/// A slow upstream: some samples' first token comes late.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Slow {
    /// How late a slow sample's first token comes (zero: no sample is slow).
    pub first_token: Duration,
    /// One sample in `every` is slow, by a hash of its problem and number (0: none).
    pub every: u64,
}

impl Slow {
    /// Whether sample `k` of problem `problem` is slow: the same in every run.
    ///
    /// ```
    /// use choicewise_picks::upstream::Slow;
    /// let slow = Slow { first_token: std::time::Duration::from_millis(200), every: 4 };
    /// let n = (0..4000).filter(|k| slow.is_slow(k / 64, k % 64)).count();
    /// assert!((800..1200).contains(&n), "{n}");
    /// assert!(!Slow::default().is_slow(0, 0));
    /// ```
    pub fn is_slow(&self, problem: usize, k: usize) -> bool {
        if self.every == 0 || self.first_token.is_zero() {
            return false;
        }
        // SplitMix64 of (problem, k).
        let mut z = ((problem as u64) << 32 ^ k as u64).wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        (z ^ (z >> 31)).is_multiple_of(self.every)
    }

    /// The ticks of `pace` a slow sample's first token waits.
    fn ticks(&self, pace: Duration) -> u64 {
        match pace.as_nanos() {
            0 => 0,
            p => self.first_token.as_nanos().div_ceil(p) as u64,
        }
    }
}

struct Upstream {
    set: Arc<TraceSet>,
    slow: Slow,
    finish_gap: Duration,
    /// Problem by prompt.
    by_prompt: HashMap<String, usize>,
    /// Each (run, problem)'s samples handed out and their schedule.
    runs: Mutex<HashMap<(String, usize), Arc<RunState>>>,
    pace: Duration,
    counters: Arc<Counters>,
}

/// The running upstream: its address and counters; dropping it stops it.
pub struct TraceUpstream {
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    /// What it counted.
    pub counters: Arc<Counters>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for TraceUpstream {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Starts the upstream over `set` on 127.0.0.1, `pace` between a sample's tokens.
pub fn start(set: Arc<TraceSet>, pace: Duration) -> Result<TraceUpstream, String> {
    start_slow(set, pace, Slow::default(), FINISH_GAP)
}

/// [`start`], with some samples slow to their first token: a slow sample (in the schedule,
/// as if it had that many more tokens before its first) starts streaming `slow.first_token`
/// late, rounded up to ticks of `pace` (with `pace` zero: no wait); and a problem's finishes
/// at least `finish_gap` apart in real time (at least `pace`; [`FINISH_GAP`] by default).
pub fn start_slow(
    set: Arc<TraceSet>,
    pace: Duration,
    slow: Slow,
    finish_gap: Duration,
) -> Result<TraceUpstream, String> {
    let mut by_prompt = HashMap::new();
    for (i, p) in set.problems.iter().enumerate() {
        if by_prompt.insert(key(&p.messages()), i).is_some() {
            return Err(format!("two problems share the prompt {:?}", p.prompt));
        }
    }
    let counters = Arc::new(Counters::default());
    let up = Arc::new(Upstream {
        set,
        slow,
        finish_gap: finish_gap.max(pace),
        by_prompt,
        runs: Mutex::new(HashMap::new()),
        pace,
        counters: counters.clone(),
    });
    let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    listener.set_nonblocking(true).map_err(|e| e.to_string())?;
    let url = format!(
        "http://{}",
        listener.local_addr().map_err(|e| e.to_string())?
    );
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let thread = std::thread::Builder::new()
        .name("picks-upstream".into())
        .spawn(move || {
            rt.block_on(async move {
                let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
                    return;
                };
                let app = axum::Router::new()
                    .route("/v1/chat/completions", post(chat))
                    .with_state(up);
                // As a model server's (uvicorn's, vLLM's): each token's event leaves at once,
                // not held by Nagle's algorithm for the gateway's delayed ACK (40 ms, some
                // 40 tokens at the replay's pace, which a stop would then count).
                use axum::serve::ListenerExt;
                let listener = listener.tap_io(|tcp| {
                    let _ = tcp.set_nodelay(true);
                });
                let _ = axum::serve(listener, app)
                    .with_graceful_shutdown(async {
                        let _ = stopped.await;
                    })
                    .await;
            });
            rt.shutdown_background();
        })
        .map_err(|e| e.to_string())?;
    Ok(TraceUpstream {
        url,
        counters,
        stop: Some(stop),
        thread: Some(thread),
    })
}

/// A message's text: its content, or its text parts joined.
fn text(m: &Value) -> String {
    match m.get("content") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => (parts.iter())
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect(),
        _ => String::new(),
    }
}

/// What identifies a problem in a request: its messages' roles and texts, without the one
/// that names the run.
fn key(messages: &[Value]) -> String {
    let mut out = String::new();
    for m in messages {
        let role = m.get("role").and_then(Value::as_str).unwrap_or("");
        let text = text(m);
        if role == "system" && text.starts_with(RUN_PREFIX) {
            continue;
        }
        out.push_str(role);
        out.push('\u{1}');
        out.push_str(&text);
        out.push('\u{2}');
    }
    out
}

fn refuse(up: &Upstream, message: &str) -> Response {
    up.counters.refused.fetch_add(1, Relaxed);
    let body = serde_json::json!({"error": {"message": message, "type": "invalid_request_error"}});
    (
        StatusCode::BAD_REQUEST,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

async fn chat(State(up): State<Arc<Upstream>>, body: Bytes) -> Response {
    up.counters.requests.fetch_add(1, Relaxed);
    let Ok(req) = serde_json::from_slice::<Value>(&body) else {
        return refuse(&up, "the body is not JSON");
    };
    let n = req.get("n").and_then(Value::as_u64).unwrap_or(1).max(1) as usize;
    let logprobs = req
        .get("logprobs")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let messages = req.get("messages").and_then(Value::as_array);
    let run = (messages.into_iter().flatten())
        .filter(|m| m.get("role").and_then(Value::as_str) == Some("system"))
        .find_map(|m| text(m).strip_prefix(RUN_PREFIX).map(str::to_string))
        .unwrap_or_default();
    let asked = messages.map_or(String::new(), |m| key(m));
    let Some(&problem) = up.by_prompt.get(&asked) else {
        return refuse(&up, "the messages are no problem of the set");
    };
    let recorded = up.set.problems[problem].samples.len();
    let state = {
        let mut runs = up.runs.lock().unwrap_or_else(|p| p.into_inner());
        (runs.entry((run, problem)))
            .or_insert_with(|| {
                Arc::new(RunState {
                    origin: tokio::time::Instant::now(),
                    inner: Mutex::new(RunInner {
                        next: 0,
                        schedule: Schedule::new(),
                        last_sent: None,
                    }),
                })
            })
            .clone()
    };
    let (first, start, waits, dues) = {
        let mut inner = state.lock();
        if inner.next + n > recorded {
            drop(inner);
            return refuse(&up, &format!("the problem has {recorded} samples"));
        }
        let first = inner.next;
        inner.next += n;
        let samples = &up.set.problems[problem].samples;
        let start = inner.schedule.start_tick();
        let wait = up.slow.ticks(up.pace);
        let waits: Vec<u64> = (first..first + n)
            .map(|k| if up.slow.is_slow(problem, k) { wait } else { 0 })
            .collect();
        let dues: Vec<u64> = (first..first + n)
            .zip(&waits)
            .map(|(k, &w)| inner.schedule.start_waiting(k, samples[k].len(), w).1)
            .collect();
        (first, start, waits, dues)
    };
    up.counters.samples.fetch_add(n as u64, Relaxed);
    let stream = sse(up, state, problem, first, (start, waits), dues, logprobs);
    Response::builder()
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(Body::from_stream(stream))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

/// Counts the samples of a stream not sent to their end when it is dropped, and takes them
/// off the schedule.
struct Unfinished {
    counters: Arc<Counters>,
    state: Arc<RunState>,
    /// (sample, due tick) of those not finished.
    left: Vec<(usize, u64)>,
}

impl Drop for Unfinished {
    fn drop(&mut self) {
        self.counters
            .cancelled
            .fetch_add(self.left.len() as u64, Relaxed);
        if !self.left.is_empty() {
            let mut inner = self.state.lock();
            for &(k, due) in &self.left {
                inner.schedule.stop(k, due);
            }
        }
    }
}

impl Unfinished {
    /// Whether sample `k` (due at `due`) finishes by `tick`, its stream's tick: when it is its
    /// turn by the schedule, and once `gap` has passed since the problem's latest finish was
    /// sent, it is taken as finished (at the schedule's tick, however late the stream runs).
    async fn finish(&mut self, k: usize, due: u64, tick: u64, gap: Duration) -> bool {
        loop {
            let wait = {
                let mut inner = self.state.lock();
                let Some(at) = inner.schedule.turn(k, due).filter(|&at| at <= tick) else {
                    return false;
                };
                let now = tokio::time::Instant::now();
                match inner.last_sent.map(|at| at + gap).filter(|&at| at > now) {
                    Some(at) => at,
                    None => {
                        inner.schedule.finish(k, due, at);
                        inner.last_sent = Some(now);
                        self.left.retain(|&(j, _)| j != k);
                        return true;
                    }
                }
            };
            tokio::time::sleep_until(wait).await;
        }
    }
}

fn sse(
    up: Arc<Upstream>,
    state: Arc<RunState>,
    problem: usize,
    first: usize,
    (start, waits): (u64, Vec<u64>),
    dues: Vec<u64>,
    logprobs: bool,
) -> impl futures::Stream<Item = Result<Bytes, std::convert::Infallible>> {
    async_stream::stream! {
        let set = up.set.clone();
        let n = dues.len();
        let samples: Vec<&Sample> = set.problems[problem].samples[first..first + n].iter().collect();
        let id = format!("chatcmpl-p{problem}s{first}");
        let origin = state.origin;
        let mut unfinished = Unfinished {
            counters: up.counters.clone(),
            state,
            left: (first..first + n).zip(dues.iter().copied()).collect(),
        };
        let mut done = vec![false; n];
        let mut tick = start;
        // A sample's tokens come a pace apart from when its stream began, whatever the
        // run's clock says: the finishes held [`FINISH_GAP`] apart put that clock behind real
        // time, and a sample started late would otherwise send its tokens in one burst, so
        // that a stop for low confidence (which a model server's pace leaves a gateway time
        // to make token by token) would come after tokens it never asked for.
        let began = tokio::time::Instant::now();
        while done.iter().any(|d| !d) {
            tick += 1;
            let on_clock = origin + up.pace * tick as u32;
            let paced = began + up.pace * (tick - start) as u32;
            tokio::time::sleep_until(on_clock.max(paced)).await;
            let mut out = String::new();
            let mut sent = 0u64;
            for (i, s) in samples.iter().enumerate() {
                if done[i] {
                    continue;
                }
                // The token due at this tick (a slow sample's first comes `wait` ticks late);
                // the last one waits for its turn to finish.
                if tick <= start + waits[i] {
                    continue;
                }
                let t = (tick - start - waits[i] - 1) as usize;
                let last = t + 1 >= s.len();
                if last && !unfinished.finish(first + i, dues[i], tick, up.finish_gap).await {
                    continue;
                }
                let reason = if s.finished { "stop" } else { "length" };
                if s.is_empty() {
                    event(&mut out, &id, i, None, Some(reason));
                    done[i] = true;
                    continue;
                }
                let t = t.min(s.len() - 1);
                sent += 1;
                if s.tokens[t] == set.eos {
                    event(&mut out, &id, i, None, Some("stop"));
                } else {
                    let lp = logprobs.then(|| logprob_entry(&set, s, t));
                    event(&mut out, &id, i, Some((t == 0, set.token(s.tokens[t]), lp)), None);
                    if last {
                        event(&mut out, &id, i, None, Some(reason));
                    }
                }
                done[i] |= last;
            }
            up.counters.tokens.fetch_add(sent, Relaxed);
            if out.is_empty() {
                // Waiting for its turn to finish: let the samples before it run.
                tokio::task::yield_now().await;
            } else {
                yield Ok(Bytes::from(out));
            }
        }
        yield Ok(Bytes::from_static(b"data: [DONE]\n\n"));
    }
}

/// A finite log-probability as JSON (the sets' half-precision values are finite; a value
/// that is not is sent as the least a half can hold).
fn num(out: &mut String, v: f32) {
    let v = if v.is_finite() { v } else { -65504.0 };
    let _ = write!(out, "{v}");
}

fn json_str(out: &mut String, s: &str) {
    out.push_str(&serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into()));
}

/// The `logprobs` of one content token: `{"content": [{"token", "logprob", "top_logprobs"}]}`.
fn logprob_entry(set: &TraceSet, s: &Sample, t: usize) -> String {
    let mut out = String::from("{\"content\":[{\"token\":");
    json_str(&mut out, set.token(s.tokens[t]));
    out.push_str(",\"logprob\":");
    num(&mut out, s.logprob[t]);
    out.push_str(",\"top_logprobs\":[");
    for (k, (&id, &lp)) in s.top_ids[t].iter().zip(&s.top_logprobs[t]).enumerate() {
        if k > 0 {
            out.push(',');
        }
        out.push_str("{\"token\":");
        json_str(&mut out, set.token(id));
        out.push_str(",\"logprob\":");
        num(&mut out, lp);
        out.push('}');
    }
    out.push_str("]}]}");
    out
}

/// One `chat.completion.chunk` event of choice `index`: a content token (first: with the
/// role) and its log-probabilities, or a finish.
fn event(
    out: &mut String,
    id: &str,
    index: usize,
    token: Option<(bool, &str, Option<String>)>,
    finish: Option<&str>,
) {
    let _ = write!(
        out,
        "data: {{\"id\":\"{id}\",\"object\":\"chat.completion.chunk\",\"created\":0,\"model\":\"arith-6m\",\"choices\":[{{\"index\":{index},\"delta\":"
    );
    match &token {
        Some((first, text, _)) => {
            out.push_str(if *first {
                "{\"role\":\"assistant\",\"content\":"
            } else {
                "{\"content\":"
            });
            json_str(out, text);
            out.push('}');
        }
        None => out.push_str("{}"),
    }
    if let Some((_, _, Some(lp))) = &token {
        out.push_str(",\"logprobs\":");
        out.push_str(lp);
    }
    match finish {
        Some(f) => {
            let _ = write!(out, ",\"finish_reason\":\"{f}\"}}]}}\n\n");
        }
        None => out.push_str(",\"finish_reason\":null}]}\n\n"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::traces::{Problem, TOP_K};

    /// A set of one problem whose sample k is `k` repeated `2 + k` times, then `<eos>`;
    /// sample 3 is unfinished.
    fn set() -> TraceSet {
        let vocab: Vec<String> = ["<pad>", "<bos>", "<eos>", "0", "1", "2", "3"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let samples = (0..4u32)
            .map(|k| {
                let mut tokens = vec![3 + k; 2 + k as usize];
                let finished = k != 3;
                if finished {
                    tokens.push(2);
                }
                let len = tokens.len();
                Sample {
                    tokens,
                    logprob: vec![-0.5; len],
                    top_ids: vec![[3 + k, 3, 4, 5, 6]; len],
                    top_logprobs: vec![[-0.5, -1.0, -2.0, -3.0, -4.0]; len],
                    finished,
                    answer: String::new(),
                }
            })
            .collect();
        TraceSet {
            vocab,
            eos: 2,
            problems: vec![Problem {
                prompt: "1+1=\n".into(),
                answer: "2".into(),
                samples,
                ..Problem::default()
            }],
        }
    }

    async fn ask(url: &str, run: &str, n: usize, logprobs: bool) -> (u16, String) {
        let body = serde_json::json!({"model": "m", "n": n, "stream": true, "logprobs": logprobs,
            "messages": [{"role": "system", "content": format!("{RUN_PREFIX}{run}")},
                         {"role": "user", "content": "1+1=\n"}]});
        let r = reqwest::Client::new()
            .post(format!("{url}/v1/chat/completions"))
            .json(&body)
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.text().await.unwrap())
    }

    /// Each choice's text and finish reason, and every content token's logprobs entry.
    fn read(sse: &str) -> (HashMap<u64, (String, String)>, Vec<Value>) {
        let mut choices: HashMap<u64, (String, String)> = HashMap::new();
        let mut logprobs = Vec::new();
        for data in sse.lines().filter_map(|l| l.strip_prefix("data: ")) {
            let Ok(v) = serde_json::from_str::<Value>(data) else {
                continue;
            };
            for c in v["choices"].as_array().unwrap() {
                let e = choices.entry(c["index"].as_u64().unwrap()).or_default();
                if let Some(t) = c["delta"]["content"].as_str() {
                    e.0.push_str(t);
                }
                if let Some(f) = c["finish_reason"].as_str() {
                    e.1 = f.into();
                }
                if !c["logprobs"].is_null() {
                    logprobs.push(c["logprobs"].clone());
                }
            }
        }
        (choices, logprobs)
    }

    #[test]
    fn serves_sample_k_to_the_kth_ask_and_counts_its_tokens() {
        let up = start(Arc::new(set()), Duration::from_millis(1)).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            // Fan-out: one sample a request, in order of arrival.
            let (_, first) = ask(&up.url, "a", 1, false).await;
            let (choices, logprobs) = read(&first);
            assert_eq!(choices[&0], ("00".to_string(), "stop".to_string()));
            assert!(logprobs.is_empty());
            // Native n: the next two samples, as choices 0 and 1, with logprobs.
            let (_, both) = ask(&up.url, "a", 2, true).await;
            let (choices, logprobs) = read(&both);
            assert_eq!(choices[&0], ("111".to_string(), "stop".to_string()));
            assert_eq!(choices[&1], ("2222".to_string(), "stop".to_string()));
            assert_eq!(logprobs.len(), 3 + 4);
            let entry = &logprobs[0]["content"][0];
            assert_eq!(entry["token"], "1");
            assert_eq!(entry["logprob"], -0.5);
            assert_eq!(entry["top_logprobs"].as_array().unwrap().len(), TOP_K);
            assert_eq!(entry["top_logprobs"][1]["token"], "0");
            // The unfinished sample ends with `length`; then there is none left.
            let (_, last) = ask(&up.url, "a", 1, false).await;
            assert_eq!(
                read(&last).0[&0],
                ("33333".to_string(), "length".to_string())
            );
            assert_eq!(ask(&up.url, "a", 1, false).await.0, 400);
            // Another run starts again from sample 0.
            assert_eq!(read(&ask(&up.url, "b", 1, false).await.1).0[&0].0, "00");
        });
        let c = up.counters.counts();
        // Tokens with `<eos>`: 3 + (4 + 5) + 5 + 3.
        assert_eq!((c.requests, c.samples, c.tokens, c.refused), (5, 5, 20, 1));
        assert_eq!(c.cancelled, 0);
    }

    #[test]
    fn a_dropped_stream_counts_what_it_sent_and_its_cancel() {
        let up = start(Arc::new(set()), Duration::from_millis(200)).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let body = serde_json::json!({"model": "m", "n": 4, "stream": true,
                "messages": [{"role": "user", "content": "1+1=\n"}]});
            let mut r = reqwest::Client::new()
                .post(format!("{}/v1/chat/completions", up.url))
                .json(&body)
                .send()
                .await
                .unwrap();
            // The first tick: one token of each of the 4 samples; then the client goes.
            let first = r.chunk().await.unwrap().unwrap();
            assert_eq!(String::from_utf8_lossy(&first).matches("data: ").count(), 4);
            drop(r);
            tokio::time::sleep(Duration::from_millis(600)).await;
        });
        let c = up.counters.counts();
        // The first tick, and at most the one written as the close was being seen; not the
        // 20 of the whole answer.
        assert_eq!((c.samples, c.cancelled), (4, 4));
        assert!((4..=8).contains(&c.tokens), "{} tokens", c.tokens);
    }

    #[test]
    fn samples_due_at_one_tick_finish_a_gap_apart_in_number_order() {
        // Four samples of 4 tokens and <eos> each, asked over four connections at once.
        let mut set = set();
        for (k, s) in set.problems[0].samples.iter_mut().enumerate() {
            s.tokens = vec![3 + k as u32, 3 + k as u32, 3 + k as u32, 3 + k as u32, 2];
            s.finished = true;
        }
        let up = start(Arc::new(set), Duration::from_millis(1)).unwrap();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let finishes = rt.block_on(async {
            let asks = (0..4).map(|_| {
                let url = up.url.clone();
                async move {
                    let (_, sse) = ask(&url, "a", 1, false).await;
                    (tokio::time::Instant::now(), read(&sse).0[&0].0.clone())
                }
            });
            futures::future::join_all(asks).await
        });
        let mut finishes = finishes;
        finishes.sort_by_key(|f| f.0);
        let order: Vec<&str> = finishes.iter().map(|f| &f.1[..1]).collect();
        assert_eq!(order, ["0", "1", "2", "3"]);
        for w in finishes.windows(2) {
            assert!(
                w[1].0 - w[0].0 >= Duration::from_millis(3),
                "{:?}",
                w[1].0 - w[0].0
            );
        }
    }
}
