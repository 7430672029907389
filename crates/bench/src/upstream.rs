//! The synthetic upstream of the gateway benchmark and soak: an OpenAI-style Chat Completions
//! server on 127.0.0.1 that streams each request's choices at a fixed pace, as the request's
//! last message asks (a [`Plan`]), and counts what it generated.
//!
//! It runs as a process of its own (`choicewise-bench gateway-upstream`, one worker thread),
//! on the same HTTP stack as the gateway (axum on hyper), and answers:
//!
//! - `POST /v1/chat/completions`: `n` choices (the body's `n`, default 1), each its own
//!   events, one write per tick: after `first_ms`, then every `interval_us`. Choice `i` of a
//!   native request is sample `i`; a request with `n = 1` is sample `k` where `k` counts the
//!   requests of its `tag` so far (the samples of a fan-out). Sample `s` runs `ticks + spread
//!   × s` ticks, one content event per tick, then its `finish_reason: "stop"`. The content is
//!   the send time in nanoseconds since the epoch (`stamp=1`, the benchmark's per-chunk
//!   delay), or words naming the request, sample and tick, the last `Answer: K` (K is 42 for
//!   samples 0 to 2, 40 + s after: a vote has a winner). Faults: `fault=cut:K` cuts the
//!   connection at tick K, `fault=stall:K` sends nothing from tick K on (the connection held
//!   open), `fault=status:C` answers status C before any byte.
//! - `GET /stats`: the counters ([`Snapshot`]); `GET /completed`: the text of every choice it
//!   wrote to its end, by tag; `POST /reset` forgets those texts.
//!
//! With `interval_us=0` and no stamps it writes a body built once, in 64 KiB writes, as fast
//! as it is read (the throughput runs).

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};

/// What one request asks of the upstream: `cwbench key=value ...` in its last message.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// Names the request (the soak's checks, the fan-out's sample count).
    pub tag: u64,
    /// Ticks of sample 0.
    pub ticks: u32,
    /// Extra ticks per sample number.
    pub spread: u32,
    /// Wait before the first tick.
    pub first_us: u64,
    /// Between ticks; 0: no pacing.
    pub interval_us: u64,
    /// Content is the send time (ns since the epoch) rather than words.
    pub stamp: bool,
    pub fault: Fault,
    /// Unpaced: each tick's events are a write of their own (as a model server sends each
    /// token as it is generated), rather than 64 KiB writes.
    pub tick_writes: bool,
}

/// An upstream fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    None,
    /// The connection is cut at this tick (after the wait for it).
    Cut(u32),
    /// Nothing more from this tick on, the connection held open.
    Stall(u32),
    /// This status before any byte.
    Status(u16),
}

impl Default for Plan {
    fn default() -> Self {
        Plan {
            tag: 0,
            ticks: 16,
            spread: 0,
            first_us: 0,
            interval_us: 0,
            stamp: false,
            fault: Fault::None,
            tick_writes: false,
        }
    }
}

impl Plan {
    /// The message asking for this plan.
    pub fn message(&self) -> String {
        let fault = match self.fault {
            Fault::None => "none".to_string(),
            Fault::Cut(k) => format!("cut:{k}"),
            Fault::Stall(k) => format!("stall:{k}"),
            Fault::Status(c) => format!("status:{c}"),
        };
        format!(
            "cwbench tag={} ticks={} spread={} first_us={} interval_us={} stamp={} fault={fault} tick_writes={}",
            self.tag,
            self.ticks,
            self.spread,
            self.first_us,
            self.interval_us,
            u8::from(self.stamp),
            u8::from(self.tick_writes)
        )
    }

    /// Reads a plan from a message (defaults for what it does not say).
    pub fn parse(message: &str) -> Plan {
        let mut plan = Plan::default();
        for (key, value) in message
            .split_whitespace()
            .filter_map(|kv| kv.split_once('='))
        {
            let num = || value.parse::<u64>().unwrap_or(0);
            match key {
                "tag" => plan.tag = num(),
                "ticks" => plan.ticks = num() as u32,
                "spread" => plan.spread = num() as u32,
                "first_us" => plan.first_us = num(),
                "interval_us" => plan.interval_us = num(),
                "stamp" => plan.stamp = value == "1",
                "tick_writes" => plan.tick_writes = value == "1",
                "fault" => {
                    let (kind, k) = value.split_once(':').unwrap_or((value, "0"));
                    let k: u32 = k.parse().unwrap_or(0);
                    plan.fault = match kind {
                        "cut" => Fault::Cut(k),
                        "stall" => Fault::Stall(k),
                        "status" => Fault::Status(k as u16),
                        _ => Fault::None,
                    };
                }
                _ => {}
            }
        }
        plan
    }

    /// Ticks of sample `s`.
    pub fn length(&self, s: u32) -> u32 {
        self.ticks + self.spread * s
    }
}

/// The words of sample `s` of request `tag` at tick `t` of `len` (not stamped).
pub fn word(tag: u64, s: u32, t: u32, len: u32) -> String {
    if t + 1 == len {
        format!("Answer: {}", answer_key(s))
    } else {
        format!("r{tag}s{s}w{t} ")
    }
}

/// The answer of sample `s`: samples 0 to 2 agree.
pub fn answer_key(s: u32) -> u32 {
    if s < 3 { 42 } else { 40 + s }
}

/// The whole text of sample `s` of a plan (not stamped).
pub fn text(plan: &Plan, s: u32) -> String {
    let len = plan.length(s);
    (0..len).map(|t| word(plan.tag, s, t, len)).collect()
}

/// The upstream's counters.
#[derive(Debug, Default)]
struct Counters {
    requests: AtomicU64,
    open_connections: AtomicI64,
    connections: AtomicU64,
    open_responses: AtomicI64,
    /// Content events written (tokens generated).
    content_events: AtomicU64,
    /// Choices written to their finish.
    completed_choices: AtomicU64,
    /// Responses dropped before their end (the client went away, or a stall was closed).
    abandoned: AtomicU64,
    cuts: AtomicU64,
    stalls: AtomicU64,
    statuses: AtomicU64,
}

/// The counters at one instant (`GET /stats`).
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub struct Snapshot {
    pub requests: u64,
    pub open_connections: i64,
    pub connections: u64,
    pub open_responses: i64,
    pub content_events: u64,
    pub completed_choices: u64,
    pub abandoned: u64,
    pub cuts: u64,
    pub stalls: u64,
    pub statuses: u64,
}

struct Upstream {
    counters: Counters,
    /// Requests seen per tag (the sample number of a fan-out request).
    arrivals: Mutex<HashMap<u64, u32>>,
    /// Texts of the choices written to their end, per tag (words only).
    completed: Mutex<HashMap<u64, Vec<String>>>,
    /// Bodies of the unpaced runs, per (n, ticks, usage reported).
    bursts: Mutex<HashMap<(u32, u32, bool), Bytes>>,
    /// Answer `Connection: close` (one request per connection).
    close: bool,
    /// Report no `usage`, even when a request asks for it (`stream_options.include_usage`):
    /// an upstream whose tokens the gateway must count itself.
    no_usage: bool,
    /// Requests to `/flaky/v1/chat/completions`, of which 3 in 10 are answered 503.
    flaky: AtomicU64,
}

impl Upstream {
    fn snapshot(&self) -> Snapshot {
        let c = &self.counters;
        Snapshot {
            requests: c.requests.load(Relaxed),
            open_connections: c.open_connections.load(Relaxed),
            connections: c.connections.load(Relaxed),
            open_responses: c.open_responses.load(Relaxed),
            content_events: c.content_events.load(Relaxed),
            completed_choices: c.completed_choices.load(Relaxed),
            abandoned: c.abandoned.load(Relaxed),
            cuts: c.cuts.load(Relaxed),
            stalls: c.stalls.load(Relaxed),
            statuses: c.statuses.load(Relaxed),
        }
    }
}

/// Nanoseconds since the epoch (the clock every process here reads).
pub fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

fn event(id: &str, index: u32, delta: &str, finish: Option<&str>) -> String {
    let finish = finish.map_or("null".to_string(), |f| format!("\"{f}\""));
    format!(
        "data: {{\"id\":\"{id}\",\"object\":\"chat.completion.chunk\",\"created\":0,\"model\":\"m\",\"choices\":[{{\"index\":{index},\"delta\":{delta},\"finish_reason\":{finish}}}]}}\n\n"
    )
}

fn content_delta(first: bool, content: &str) -> String {
    let content = serde_json::to_string(content).unwrap_or_default();
    if first {
        format!("{{\"role\":\"assistant\",\"content\":{content}}}")
    } else {
        format!("{{\"content\":{content}}}")
    }
}

fn usage(id: &str, completion: u64) -> String {
    format!(
        "data: {{\"id\":\"{id}\",\"object\":\"chat.completion.chunk\",\"created\":0,\"model\":\"m\",\"choices\":[],\"usage\":{{\"prompt_tokens\":10,\"completion_tokens\":{completion},\"total_tokens\":{}}}}}\n\n",
        completion + 10
    )
}

/// Decrements a counter when dropped.
struct Open<'a>(&'a AtomicI64);

impl<'a> Open<'a> {
    fn new(c: &'a AtomicI64) -> Self {
        c.fetch_add(1, Relaxed);
        Open(c)
    }
}

impl Drop for Open<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Relaxed);
    }
}

/// Marks a response abandoned unless it reached its end.
struct Ending<'a> {
    counters: &'a Counters,
    done: bool,
}

impl Drop for Ending<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.counters.abandoned.fetch_add(1, Relaxed);
        }
    }
}

/// The text of the Responses answer (`/responses/v1/responses`): about 200 KB, far more than
/// the gateway's back-pressure allowance (256 KiB counting the closing events, which repeat
/// it three times).
pub fn long_text() -> String {
    (0..25_000).map(|i| format!("w{} ", i % 97)).collect()
}

/// `/responses/v1/responses`: a Responses-API stream of [`long_text`] in 2,000-byte deltas,
/// with the closing events a real one sends, each repeating the whole text (the soak's
/// check that every such answer ends).
async fn responses(State(up): State<Arc<Upstream>>) -> Response {
    up.counters.requests.fetch_add(1, Relaxed);
    let text = long_text();
    let mut sse = String::new();
    let mut seq = 0u64;
    let mut event = |name: &str, mut data: Value| {
        data["type"] = json!(name);
        data["sequence_number"] = json!(seq);
        seq += 1;
        sse.push_str(&format!("event: {name}\ndata: {data}\n\n"));
    };
    let response = |status: &str, output: Value, usage: Value| {
        json!({"id": "resp_soak", "object": "response", "created_at": 1, "status": status,
               "model": "m", "output": output, "usage": usage})
    };
    event(
        "response.created",
        json!({"response": response("in_progress", json!([]), Value::Null)}),
    );
    event(
        "response.output_item.added",
        json!({"output_index": 0,
        "item": {"id": "msg_1", "type": "message", "role": "assistant", "content": []}}),
    );
    event(
        "response.content_part.added",
        json!({"item_id": "msg_1", "output_index": 0,
        "content_index": 0, "part": {"type": "output_text", "text": ""}}),
    );
    let mut rest = text.as_str();
    while !rest.is_empty() {
        let mut cut = rest.len().min(2_000);
        while !rest.is_char_boundary(cut) {
            cut -= 1;
        }
        let (piece, tail) = rest.split_at(cut);
        event(
            "response.output_text.delta",
            json!({"item_id": "msg_1", "output_index": 0,
            "content_index": 0, "delta": piece}),
        );
        rest = tail;
    }
    event(
        "response.output_text.done",
        json!({"item_id": "msg_1", "output_index": 0,
        "content_index": 0, "text": text}),
    );
    event(
        "response.content_part.done",
        json!({"item_id": "msg_1", "output_index": 0,
        "content_index": 0, "part": {"type": "output_text", "text": text}}),
    );
    let item = json!({"id": "msg_1", "type": "message", "status": "completed", "role": "assistant",
                      "content": [{"type": "output_text", "text": text}]});
    event(
        "response.output_item.done",
        json!({"output_index": 0, "item": item}),
    );
    event(
        "response.completed",
        json!({"response": response("completed", json!([item]),
        json!({"input_tokens": 5, "output_tokens": 6_000, "total_tokens": 6_005}))}),
    );
    let response = Response::builder()
        .header(header::CONTENT_TYPE, "text/event-stream")
        .body(Body::from(sse))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response());
    with_close(&up, response)
}

/// `/flaky/v1/chat/completions`: the same upstream, failing 3 tries in 10 with a 503 before
/// any byte (the soak's resilience run: an upstream that fails 30% of its tries).
async fn flaky_chat(State(up): State<Arc<Upstream>>, body: Bytes) -> Response {
    let k = up.flaky.fetch_add(1, Relaxed);
    if k % 10 < 3 {
        up.counters.statuses.fetch_add(1, Relaxed);
        let body = "{\"error\":{\"message\":\"synthetic flaky 503\",\"type\":\"server_error\"}}";
        let response = (
            StatusCode::SERVICE_UNAVAILABLE,
            [(header::CONTENT_TYPE, "application/json")],
            body,
        )
            .into_response();
        return with_close(&up, response);
    }
    chat(State(up), body).await
}

async fn chat(State(up): State<Arc<Upstream>>, body: Bytes) -> Response {
    up.counters.requests.fetch_add(1, Relaxed);
    let Ok(req) = serde_json::from_slice::<Value>(&body) else {
        return (StatusCode::BAD_REQUEST, "not JSON").into_response();
    };
    let n = req.get("n").and_then(Value::as_u64).unwrap_or(1).max(1) as u32;
    let include_usage = !up.no_usage
        && req
            .pointer("/stream_options/include_usage")
            .and_then(Value::as_bool)
            .unwrap_or(false);
    let message = req
        .get("messages")
        .and_then(Value::as_array)
        .and_then(|m| m.last())
        .and_then(|m| m.get("content"))
        .and_then(Value::as_str)
        .unwrap_or_default();
    let plan = Plan::parse(message);
    let response = if let Fault::Status(code) = plan.fault {
        up.counters.statuses.fetch_add(1, Relaxed);
        let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let body = format!(
            "{{\"error\":{{\"message\":\"synthetic {code}\",\"type\":\"server_error\",\"code\":\"synthetic\"}}}}"
        );
        (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
    } else {
        let samples: Vec<u32> = if n > 1 {
            (0..n).collect()
        } else {
            let mut arrivals = up.arrivals.lock().unwrap_or_else(|p| p.into_inner());
            let k = arrivals.entry(plan.tag).or_insert(0);
            *k += 1;
            vec![*k - 1]
        };
        let body = if plan.interval_us == 0 && !plan.stamp && plan.fault == Fault::None {
            burst(up.clone(), n, plan.ticks, plan.tick_writes, include_usage)
        } else {
            paced(up.clone(), plan, samples, include_usage)
        };
        Response::builder()
            .header(header::CONTENT_TYPE, "text/event-stream")
            .body(body)
            .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
    };
    with_close(&up, response)
}

fn with_close(up: &Upstream, mut response: Response) -> Response {
    if up.close {
        response.headers_mut().insert(
            header::CONNECTION,
            header::HeaderValue::from_static("close"),
        );
    }
    response
}

/// The paced stream of one request.
fn paced(up: Arc<Upstream>, plan: Plan, samples: Vec<u32>, include_usage: bool) -> Body {
    let stream = async_stream::stream! {
        let _open = Open::new(&up.counters.open_responses);
        let mut ending = Ending { counters: &up.counters, done: false };
        let id = format!("chatcmpl-{}", plan.tag);
        let lengths: Vec<u32> = samples.iter().map(|&s| plan.length(s)).collect();
        let longest = lengths.iter().copied().max().unwrap_or(0);
        let mut texts: Vec<String> = vec![String::new(); samples.len()];
        let start = tokio::time::Instant::now() + Duration::from_micros(plan.first_us);
        let mut written = 0u64;
        for t in 0..longest {
            if plan.interval_us > 0 || t == 0 {
                tokio::time::sleep_until(start + Duration::from_micros(plan.interval_us * u64::from(t))).await;
            }
            match plan.fault {
                Fault::Cut(k) if k == t => {
                    // hyper drops what it holds unwritten when a body fails: one pending poll
                    // first, so that it writes out the ticks already yielded (a runtime that
                    // ran late may have yielded several in one go), which were counted sent.
                    tokio::task::yield_now().await;
                    up.counters.cuts.fetch_add(1, Relaxed);
                    ending.done = true;
                    yield Err(std::io::Error::other("synthetic cut"));
                    return;
                }
                Fault::Stall(k) if k == t => {
                    up.counters.stalls.fetch_add(1, Relaxed);
                    ending.done = true;
                    std::future::pending::<()>().await;
                }
                _ => {}
            }
            let mut write = String::new();
            let mut finished = Vec::new();
            for (i, (&s, &len)) in samples.iter().zip(&lengths).enumerate() {
                if t >= len {
                    continue;
                }
                let content = if plan.stamp {
                    format!("{} ", now_ns())
                } else {
                    word(plan.tag, s, t, len)
                };
                write.push_str(&event(&id, i as u32, &content_delta(t == 0, &content), None));
                written += 1;
                if !plan.stamp {
                    texts[i].push_str(&content);
                }
                if t + 1 == len {
                    write.push_str(&event(&id, i as u32, "{}", Some("stop")));
                    finished.push(i);
                }
            }
            if t + 1 == longest {
                if include_usage {
                    write.push_str(&usage(&id, written));
                }
                write.push_str("data: [DONE]\n\n");
            }
            up.counters.content_events.fetch_add(written, Relaxed);
            written = 0;
            up.counters.completed_choices.fetch_add(finished.len() as u64, Relaxed);
            if !plan.stamp && !finished.is_empty() {
                let mut completed = up.completed.lock().unwrap_or_else(|p| p.into_inner());
                let entry = completed.entry(plan.tag).or_default();
                for i in finished {
                    entry.push(std::mem::take(&mut texts[i]));
                }
            }
            yield Ok::<_, std::io::Error>(Bytes::from(write));
        }
        ending.done = true;
    };
    Body::from_stream(stream)
}

/// The unpaced stream of one request: `n` choices of `ticks` content events each, then their
/// usage when `include_usage` (as the paced streams and a model server report it when asked);
/// a body built once per (n, ticks, usage), in 64 KiB writes, or one write per tick (the
/// stream yields between them, so that hyper writes each alone).
fn burst(up: Arc<Upstream>, n: u32, ticks: u32, tick_writes: bool, include_usage: bool) -> Body {
    let bytes = {
        let mut bursts = up.bursts.lock().unwrap_or_else(|p| p.into_inner());
        bursts
            .entry((n, ticks, include_usage))
            .or_insert_with(|| {
                let mut s = String::new();
                for t in 0..ticks {
                    for i in 0..n {
                        s.push_str(&event(
                            "chatcmpl-burst",
                            i,
                            &content_delta(t == 0, "tok "),
                            None,
                        ));
                    }
                }
                for i in 0..n {
                    s.push_str(&event("chatcmpl-burst", i, "{}", Some("stop")));
                }
                if include_usage {
                    s.push_str(&usage("chatcmpl-burst", u64::from(n * ticks)));
                }
                s.push_str("data: [DONE]\n\n");
                Bytes::from(s)
            })
            .clone()
    };
    let stream = async_stream::stream! {
        let _open = Open::new(&up.counters.open_responses);
        let mut ending = Ending { counters: &up.counters, done: false };
        let mut at = 0;
        // Every tick's events are the same length, but the first tick's (the role).
        let first_tick = event("chatcmpl-burst", 0, &content_delta(true, "tok "), None).len() * n as usize;
        let tick = event("chatcmpl-burst", 0, &content_delta(false, "tok "), None).len() * n as usize;
        while at < bytes.len() {
            let size = match (tick_writes, at) {
                (false, _) => 64 * 1024,
                (true, 0) => first_tick,
                (true, _) => tick,
            };
            let end = (at + size).min(bytes.len());
            yield Ok::<_, std::io::Error>(bytes.slice(at..end));
            if tick_writes {
                tokio::task::yield_now().await;
            }
            at = end;
        }
        up.counters.content_events.fetch_add(u64::from(n * ticks), Relaxed);
        up.counters.completed_choices.fetch_add(u64::from(n), Relaxed);
        ending.done = true;
    };
    Body::from_stream(stream)
}

/// A listener counting its open connections, with `TCP_NODELAY` on each.
struct Counting {
    listener: TcpListener,
    up: Arc<Upstream>,
}

/// A connection that is counted open until dropped.
struct CountedIo {
    io: TcpStream,
    up: Arc<Upstream>,
}

impl Drop for CountedIo {
    fn drop(&mut self) {
        self.up.counters.open_connections.fetch_sub(1, Relaxed);
    }
}

impl AsyncRead for CountedIo {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl AsyncWrite for CountedIo {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

impl axum::serve::Listener for Counting {
    type Io = CountedIo;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            match self.listener.accept().await {
                Ok((io, addr)) => {
                    let _ = io.set_nodelay(true);
                    let c = &self.up.counters;
                    c.open_connections.fetch_add(1, Relaxed);
                    c.connections.fetch_add(1, Relaxed);
                    return (
                        CountedIo {
                            io,
                            up: self.up.clone(),
                        },
                        addr,
                    );
                }
                // Out of descriptors and the like: wait, as axum's own listener does.
                Err(_) => tokio::time::sleep(Duration::from_millis(5)).await,
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.listener.local_addr()
    }
}

/// Serves the upstream on `listen` until the process ends, saying `listening on
/// http://ADDR` on stderr once it accepts connections.
pub fn serve(listen: &str, close: bool, no_usage: bool) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("a Tokio runtime");
    rt.block_on(async {
        let up = Arc::new(Upstream {
            counters: Counters::default(),
            arrivals: Mutex::new(HashMap::new()),
            completed: Mutex::new(HashMap::new()),
            bursts: Mutex::new(HashMap::new()),
            close,
            no_usage,
            flaky: AtomicU64::new(0),
        });
        let app = axum::Router::new()
            .route("/v1/chat/completions", post(chat))
            .route("/flaky/v1/chat/completions", post(flaky_chat))
            .route("/responses/v1/responses", post(responses))
            .route(
                "/stats",
                get(|State(up): State<Arc<Upstream>>| async move {
                    axum::Json(up.snapshot()).into_response()
                }),
            )
            .route(
                "/completed",
                get(|State(up): State<Arc<Upstream>>| async move {
                    let completed = up.completed.lock().unwrap_or_else(|p| p.into_inner());
                    let map: HashMap<String, &Vec<String>> =
                        completed.iter().map(|(k, v)| (k.to_string(), v)).collect();
                    serde_json::to_string(&map).unwrap_or_default()
                }),
            )
            .route(
                "/reset",
                post(|State(up): State<Arc<Upstream>>| async move {
                    up.completed
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .clear();
                    up.arrivals
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .clear();
                    "ok"
                }),
            )
            .with_state(up.clone());
        let listener = TcpListener::bind(listen).await.expect("bind the upstream");
        let addr = listener.local_addr().expect("its address");
        eprintln!("listening on http://{addr}");
        axum::serve(Counting { listener, up }, app)
            .await
            .expect("serve the upstream");
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_round_trip_and_texts_differ_by_sample() {
        let plan = Plan {
            tag: 7,
            ticks: 3,
            spread: 2,
            first_us: 10,
            interval_us: 500,
            stamp: false,
            fault: Fault::Stall(2),
            tick_writes: true,
        };
        assert_eq!(Plan::parse(&plan.message()), plan);
        assert_eq!(
            Plan::parse("cwbench fault=status:429").fault,
            Fault::Status(429)
        );
        assert_eq!(text(&plan, 0), "r7s0w0 r7s0w1 Answer: 42");
        assert_eq!(plan.length(2), 7);
        assert!(text(&plan, 4).ends_with("Answer: 44"));
    }
}
