//! The clients' measurement for the gateway benchmark: one stream read to its end and
//! scanned for its content events, a level of C concurrent streams (its percentiles and the
//! watched process's memory), a saturation run, the request bodies and paced plans they
//! send, and the per-level table rows printed as the levels finish.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::StreamExt;
use memchr::memmem;
use serde_json::json;

use super::{GatewayArgs, Level, Pace};
use crate::procs;
use crate::stats::percentile_sorted;
use crate::upstream::{Plan, now_ns};

/// What a stream's reads are scanned for.
#[derive(Clone, Copy, PartialEq)]
pub(super) enum Scan {
    /// Content events carrying their send time.
    Stamps,
    /// Content events of the unpaced body (`tok `), counted.
    Count,
}

#[derive(Default)]
struct StreamOut {
    /// Request sent to the first whole `data:` event read, µs.
    ttfd_us: Option<f64>,
    ttfc_us: Option<f64>,
    delays_us: Vec<f64>,
    events: u64,
    ok: bool,
}

/// The position after `"content":` and optional spaces and the opening quote, if the value
/// is a non-empty string.
fn content_at(buf: &[u8], after_key: usize) -> Option<usize> {
    let mut i = after_key;
    while i < buf.len() && buf[i] == b' ' {
        i += 1;
    }
    (i + 1 < buf.len() && buf[i] == b'"' && buf[i + 1] != b'"').then_some(i + 1)
}

/// Scans complete events in `buf` (up to its last blank line), returning how much was used.
fn scan(buf: &[u8], how: Scan, now_ns: u64, out: &mut StreamOut, on_first: &mut dyn FnMut()) {
    let finder = memmem::Finder::new(b"\"content\":");
    for at in finder.find_iter(buf) {
        let Some(start) = content_at(buf, at + 10) else {
            continue;
        };
        match how {
            Scan::Stamps => {
                let digits = buf[start..]
                    .iter()
                    .take_while(|b| b.is_ascii_digit())
                    .fold(0u64, |v, b| v * 10 + u64::from(b - b'0'));
                if digits == 0 {
                    continue;
                }
                out.delays_us
                    .push(now_ns.saturating_sub(digits) as f64 / 1000.0);
            }
            Scan::Count => {}
        }
        if out.events == 0 {
            on_first();
        }
        out.events += 1;
    }
}

/// One streamed request, read to its end.
async fn one_stream(client: &reqwest::Client, url: &str, body: Bytes, how: Scan) -> StreamOut {
    let mut out = StreamOut::default();
    let t0 = Instant::now();
    let Ok(resp) = client
        .post(url)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
    else {
        return out;
    };
    if !resp.status().is_success() {
        return out;
    }
    let mut reads = resp.bytes_stream();
    let mut carry: Vec<u8> = Vec::new();
    let mut done = false;
    while let Some(read) = reads.next().await {
        let Ok(read) = read else { return out };
        let now = Instant::now();
        let ns = now_ns();
        carry.extend_from_slice(&read);
        let Some(end) = memmem::rfind(&carry, b"\n\n") else {
            continue;
        };
        if out.ttfd_us.is_none() && memmem::find(&carry[..end + 2], b"data:").is_some() {
            out.ttfd_us = Some(now.duration_since(t0).as_secs_f64() * 1e6);
        }
        let mut ttfc = None;
        scan(&carry[..end + 2], how, ns, &mut out, &mut || {
            ttfc = Some(now.duration_since(t0).as_secs_f64() * 1e6);
        });
        if out.ttfc_us.is_none() {
            out.ttfc_us = ttfc;
        }
        if memmem::find(&carry[..end + 2], b"[DONE]").is_some() {
            done = true;
        }
        carry.drain(..end + 2);
    }
    out.ok = done;
    out
}

pub(super) struct LevelSpec<'a> {
    pub(super) url: &'a str,
    pub(super) body: Bytes,
    pub(super) concurrency: usize,
    pub(super) secs: f64,
    pub(super) min_streams: usize,
    pub(super) ramp: Duration,
    pub(super) how: Scan,
    /// The process whose resident memory is sampled.
    pub(super) watch: Option<u32>,
    /// Longest any stream may take.
    pub(super) stream_timeout: Duration,
}

pub(super) async fn level(client: &reqwest::Client, spec: LevelSpec<'_>) -> Level {
    let start = Instant::now();
    let counted_from = start + spec.ramp;
    let deadline = counted_from + Duration::from_secs_f64(spec.secs);
    let counted = Arc::new(AtomicUsize::new(0));
    let open = Arc::new(AtomicUsize::new(0));
    let events = Arc::new(AtomicU64::new(0));
    let finished = Arc::new(AtomicBool::new(false));
    let rss_before = spec.watch.map_or(0, procs::tree_rss_kib);
    let full = (spec.concurrency * 95).div_ceil(100);
    let sampler = spec.watch.map(|pid| {
        let (open, finished) = (open.clone(), finished.clone());
        tokio::spawn(async move {
            let mut peak = (0u64, 0usize);
            while !finished.load(Relaxed) {
                let rss = procs::tree_rss_kib(pid);
                let now_open = open.load(Relaxed);
                if now_open >= full && rss > peak.0 {
                    peak = (rss, now_open);
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            peak
        })
    });
    let mut tasks = Vec::new();
    for i in 0..spec.concurrency {
        let client = client.clone();
        let url = spec.url.to_string();
        let body = spec.body.clone();
        let (counted, open, events) = (counted.clone(), open.clone(), events.clone());
        let (how, min_streams, timeout) = (spec.how, spec.min_streams, spec.stream_timeout);
        let offset = spec.ramp.mul_f64(i as f64 / spec.concurrency as f64);
        tasks.push(tokio::spawn(async move {
            tokio::time::sleep(offset).await;
            let (mut ttfd, mut ttfc) = (Vec::new(), Vec::new());
            let mut delays = Vec::new();
            let (mut streams, mut errors) = (0usize, 0usize);
            loop {
                let now = Instant::now();
                if now >= deadline && counted.load(Relaxed) >= min_streams {
                    break;
                }
                open.fetch_add(1, Relaxed);
                let out =
                    tokio::time::timeout(timeout, one_stream(&client, &url, body.clone(), how))
                        .await
                        .unwrap_or_default();
                open.fetch_sub(1, Relaxed);
                events.fetch_add(out.events, Relaxed);
                if now < counted_from {
                    continue;
                }
                counted.fetch_add(1, Relaxed);
                streams += 1;
                if !out.ok {
                    errors += 1;
                    continue;
                }
                ttfd.extend(out.ttfd_us);
                ttfc.extend(out.ttfc_us);
                delays.extend(out.delays_us);
            }
            (ttfd, ttfc, delays, streams, errors)
        }));
    }
    let (mut ttfd, mut ttfc) = (Vec::new(), Vec::new());
    let mut delays = Vec::new();
    let mut result = Level {
        rss_before_kib: rss_before,
        ..Level::default()
    };
    for task in tasks {
        let Ok((f, t, d, s, e)) = task.await else {
            result.errors += 1;
            continue;
        };
        ttfd.extend(f);
        ttfc.extend(t);
        delays.extend(d);
        result.streams += s;
        result.errors += e;
    }
    let elapsed = start.elapsed().as_secs_f64();
    finished.store(true, Relaxed);
    if let Some(sampler) = sampler {
        let (rss, open) = sampler.await.unwrap_or_default();
        result.peak_rss_kib = rss;
        result.open_at_peak = open;
    }
    ttfd.sort_by(f64::total_cmp);
    ttfc.sort_by(f64::total_cmp);
    delays.sort_by(f64::total_cmp);
    result.ttfd_p50_ms = percentile_sorted(&ttfd, 50.0) / 1000.0;
    result.ttfd_p99_ms = percentile_sorted(&ttfd, 99.0) / 1000.0;
    result.ttfc_p50_ms = percentile_sorted(&ttfc, 50.0) / 1000.0;
    result.ttfc_p99_ms = percentile_sorted(&ttfc, 99.0) / 1000.0;
    result.delay_p50_ms = percentile_sorted(&delays, 50.0) / 1000.0;
    result.delay_p99_ms = percentile_sorted(&delays, 99.0) / 1000.0;
    result.events_per_s = events.load(Relaxed) as f64 / elapsed;
    result.requests_per_s = result.streams.saturating_sub(result.errors) as f64 / elapsed;
    result
}

pub(super) fn request(model: &str, n: u32, plan: &Plan, extra: Option<serde_json::Value>) -> Bytes {
    let mut body = json!({
        "model": model,
        "n": n,
        "stream": true,
        "messages": [{"role": "user", "content": plan.message()}],
    });
    if let Some(extra) = extra {
        body["choicewise"] = extra;
    }
    Bytes::from(body.to_string())
}

pub(super) fn paced_plan(args: &Pace) -> Plan {
    Plan {
        tag: 0,
        ticks: args.ticks,
        spread: 0,
        first_us: (args.first_ms * 1000.0) as u64,
        interval_us: (args.interval_ms * 1000.0) as u64,
        stamp: true,
        fault: crate::upstream::Fault::None,
        tick_writes: false,
    }
}

pub(super) fn stream_length(args: &Pace) -> Duration {
    Duration::from_secs_f64(
        (args.first_ms + args.interval_ms * f64::from(args.ticks.saturating_sub(1))) / 1000.0,
    )
}

pub(super) fn print_level(name: &str, c: usize, l: &Level) {
    println!(
        "| {name:<22} | {c:>5} | {:>7} | {:>4} | {:>9.2} | {:>9.2} | {:>9.2} | {:>9.2} | {:>9.0} |",
        l.streams,
        l.errors,
        l.ttfc_p50_ms,
        l.ttfc_p99_ms,
        l.delay_p50_ms,
        l.delay_p99_ms,
        l.events_per_s
    );
}

pub(super) fn level_header() {
    println!(
        "| {:<22} | {:>5} | {:>7} | {:>4} | {:>9} | {:>9} | {:>9} | {:>9} | {:>9} |",
        "", "C", "streams", "err", "TTFC p50", "TTFC p99", "chunk p50", "chunk p99", "events/s"
    );
    println!(
        "|{:-<24}|{:->7}|{:->9}|{:->6}|{:->11}|{:->11}|{:->11}|{:->11}|{:->11}|",
        "", "", "", "", "", "", "", "", ""
    );
}

/// Saturation: content events per second through `url`.
pub(super) async fn saturation(
    client: &reqwest::Client,
    url: &str,
    model: &str,
    args: &GatewayArgs,
    tick_writes: bool,
) -> f64 {
    let plan = Plan {
        ticks: args.sat_ticks,
        tick_writes,
        ..Plan::default()
    };
    let body = request(model, 4, &plan, None);
    // A short warm-up, then the timed run.
    let _ = level(
        client,
        LevelSpec {
            url,
            body: body.clone(),
            concurrency: args.sat_streams.min(4),
            secs: 0.3,
            min_streams: 1,
            ramp: Duration::ZERO,
            how: Scan::Count,
            watch: None,
            stream_timeout: Duration::from_secs(60),
        },
    )
    .await;
    level(
        client,
        LevelSpec {
            url,
            body,
            concurrency: args.sat_streams,
            secs: args.sat_secs,
            min_streams: 1,
            ramp: Duration::ZERO,
            how: Scan::Count,
            watch: None,
            stream_timeout: Duration::from_secs(120),
        },
    )
    .await
    .events_per_s
}
