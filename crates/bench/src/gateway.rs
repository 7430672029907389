//! The gateway's benchmarks (`choicewise-bench gateway`): overhead, relay throughput, memory,
//! LiteLLM's proxy beside it, and the tokens a selection saves. Loopback only.
//!
//! One run starts three processes: the synthetic upstream (`upstream.rs`, one worker thread),
//! `choicewise serve` in front of it, and a byte-for-byte reverse proxy on the same HTTP stack
//! (`proxy.rs`). The clients run in this process (reqwest, `--workers` threads).
//!
//! - **Overhead.** Streams of n = 4 choices, each `--ticks` content events `--interval-ms`
//!   apart after `--first-ms`, every content its send time. Each level keeps C streams open
//!   (each client starts its next stream when one ends, the starts spread over one stream's
//!   length; streams started in that ramp are not counted) for `--secs`, and at least
//!   `--min-streams` streams. Measured per stream: time to first chunk (request sent to the
//!   first content event read); per content event: its delay (read time less send time).
//!   Direct to the upstream (one request with n = 4), through the byte-for-byte proxy (the
//!   HTTP stack's own share), through the gateway with n = 4 native (one upstream request),
//!   then by fan-out (four upstream requests of n = 1), at the same C. Overhead = the
//!   percentile through it less direct's, same run.
//! - **Throughput at saturation.** `--sat-streams` unpaced n = 4 streams at once for
//!   `--sat-secs`: content events per second read by the clients, direct, through the proxy,
//!   through the gateway; once with the upstream writing each tick's 4 events alone (a model
//!   server's framing), once in 64 KiB writes.
//! - **Memory.** The gateway's VmRSS when started and after the warm-up (the start); when the
//!   1,000-stream native level starts and at its peak while at least 95% of its streams are
//!   open (per stream: the difference over the streams open then); 1 s after the paced levels,
//!   then 1 s after their client closed its connections (the after-load target: the end of
//!   the load it measures); 1 s after the saturation runs, `--settle-secs` after the last
//!   load, and 1 s after the other client closed its connections (the upstream connections
//!   the gateway keeps for reuse still open, unless `--settle-secs` is at least two of their
//!   idle lifetimes and 5 s).
//! - **LiteLLM** (with `--litellm PATH`): its proxy, one worker, no database (a master key
//!   set: it refuses to start without one), on the same upstream, the same native levels
//!   (`--litellm-concurrency`) and saturation run.
//! - **Savings.** Five samples of lengths 8, 14, 20, 26 and 32 ticks (10 ms apart), three
//!   agreeing on the answer: the content events the upstream wrote for `select:
//!   first_finished` and `vote` against n = 5 with every sample to its end.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::StreamExt;
use memchr::memmem;
use serde_json::json;
use tokio::runtime::Runtime;

use crate::procs::{self, Server};
use crate::stats::{median, percentile_sorted};
use crate::upstream::{Plan, Snapshot, now_ns};
use crate::{Report, Target, load, runtime};

#[derive(Debug, Clone, clap::Args)]
pub struct GatewayArgs {
    /// Runs (each with fresh processes); medians of the runs are reported.
    #[arg(long, default_value_t = 3)]
    pub reps: usize,
    /// Seconds each level keeps its streams going (after the ramp).
    #[arg(long, default_value_t = 5.0)]
    pub secs: f64,
    /// Fewest streams counted per level.
    #[arg(long, default_value_t = 10)]
    pub min_streams: usize,
    /// Concurrent streams of the levels.
    #[arg(long, value_delimiter = ',', default_value = "1,100,1000")]
    pub concurrency: Vec<usize>,
    /// Content events per choice of a paced stream.
    #[arg(long, default_value_t = 8)]
    pub ticks: u32,
    /// Between a choice's content events, ms.
    #[arg(long, default_value_t = 200.0)]
    pub interval_ms: f64,
    /// The upstream's wait before its first event, ms.
    #[arg(long, default_value_t = 20.0)]
    pub first_ms: f64,
    /// Concurrent streams of the saturation runs.
    #[arg(long, default_value_t = 32)]
    pub sat_streams: usize,
    /// Seconds of each saturation run.
    #[arg(long, default_value_t = 3.0)]
    pub sat_secs: f64,
    /// Content events per choice of a saturation stream.
    #[arg(long, default_value_t = 2000)]
    pub sat_ticks: u32,
    /// The `choicewise` binary (default: next to this harness).
    #[arg(long)]
    pub choicewise: Option<PathBuf>,
    /// LiteLLM's `litellm` command (PyPI `litellm[proxy]`): measure its proxy beside ours.
    #[arg(long)]
    pub litellm: Option<PathBuf>,
    /// Concurrent streams of LiteLLM's levels (default: those of ours).
    #[arg(long, value_delimiter = ',')]
    pub litellm_concurrency: Option<Vec<usize>>,
    /// Worker threads of the clients' runtime.
    #[arg(long, default_value_t = 2)]
    pub workers: usize,
    /// Skip the savings runs.
    #[arg(long)]
    pub no_savings: bool,
    /// Seconds of quiet after the last load before the gateway's memory is read for the
    /// end-of-run figure. Its idle upstream connections close one to two idle lifetimes
    /// (`choicewise_client::IDLE_CONNECTION_LIFETIME`) after they went idle; from two
    /// lifetimes and 5 s on, the figure is named as read with them closed.
    #[arg(long, default_value_t = 2.0)]
    pub settle_secs: f64,
}

/// `--settle-secs` from which every upstream connection the gateway kept for reuse has
/// closed: two idle lifetimes (the pool's check runs once per lifetime), and a margin.
fn pool_closed_secs() -> f64 {
    2.0 * choicewise_client::IDLE_CONNECTION_LIFETIME.as_secs_f64() + 5.0
}

/// What a stream's reads are scanned for.
#[derive(Clone, Copy, PartialEq)]
enum Scan {
    /// Content events carrying their send time.
    Stamps,
    /// Content events of the unpaced body (`tok `), counted.
    Count,
}

#[derive(Default)]
struct StreamOut {
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

/// One level's figures.
#[derive(Debug, Clone, Copy, Default)]
pub struct Level {
    pub streams: usize,
    pub errors: usize,
    pub ttfc_p50_ms: f64,
    pub ttfc_p99_ms: f64,
    pub delay_p50_ms: f64,
    pub delay_p99_ms: f64,
    /// Content events per second read (all streams of the level, ramp included).
    pub events_per_s: f64,
    /// Peak VmRSS of the watched process while at least 95% of the level's streams were
    /// open, KiB, and the streams open then; its VmRSS when the level started.
    pub peak_rss_kib: u64,
    pub open_at_peak: usize,
    pub rss_before_kib: u64,
}

struct LevelSpec<'a> {
    url: &'a str,
    body: Bytes,
    concurrency: usize,
    secs: f64,
    min_streams: usize,
    ramp: Duration,
    how: Scan,
    /// The process whose resident memory is sampled.
    watch: Option<u32>,
    /// Longest any stream may take.
    stream_timeout: Duration,
}

async fn level(client: &reqwest::Client, spec: LevelSpec<'_>) -> Level {
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
            let mut ttfc = Vec::new();
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
                if let Some(t) = out.ttfc_us {
                    ttfc.push(t);
                }
                delays.extend(out.delays_us);
            }
            (ttfc, delays, streams, errors)
        }));
    }
    let mut ttfc = Vec::new();
    let mut delays = Vec::new();
    let mut result = Level {
        rss_before_kib: rss_before,
        ..Level::default()
    };
    for task in tasks {
        let Ok((t, d, s, e)) = task.await else {
            result.errors += 1;
            continue;
        };
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
    ttfc.sort_by(f64::total_cmp);
    delays.sort_by(f64::total_cmp);
    result.ttfc_p50_ms = percentile_sorted(&ttfc, 50.0) / 1000.0;
    result.ttfc_p99_ms = percentile_sorted(&ttfc, 99.0) / 1000.0;
    result.delay_p50_ms = percentile_sorted(&delays, 50.0) / 1000.0;
    result.delay_p99_ms = percentile_sorted(&delays, 99.0) / 1000.0;
    result.events_per_s = events.load(Relaxed) as f64 / elapsed;
    result
}

fn request(model: &str, n: u32, plan: &Plan, extra: Option<serde_json::Value>) -> Bytes {
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

/// The figures of one run.
#[derive(Debug, Clone, Default)]
pub struct Run {
    /// (concurrency, direct, gateway native, gateway fan-out, byte-for-byte proxy).
    pub levels: Vec<(usize, Level, Level, Level, Level)>,
    /// Content events per second, the upstream writing each tick alone: direct, proxy,
    /// gateway.
    pub sat_direct: f64,
    pub sat_proxy: f64,
    pub sat_gateway: f64,
    /// The same, the upstream writing 64 KiB at a time.
    pub bulk_direct: f64,
    pub bulk_proxy: f64,
    pub bulk_gateway: f64,
    /// Gateway VmRSS 1 s after the paced levels, their client's keep-alive connections open,
    /// then 1 s after that client closed them; 1 s after the saturation runs.
    pub rss_after_levels_kib: u64,
    pub rss_levels_closed_kib: u64,
    pub rss_after_sat_kib: u64,
    pub rss_start_kib: u64,
    /// VmRSS when the 1,000-stream native level started, and at its peak with them open.
    pub rss_before_1000_kib: u64,
    pub rss_peak_1000_kib: u64,
    pub open_at_peak: usize,
    /// VmRSS `--settle-secs` after the last load, the harness's keep-alive connections to it
    /// still open; then again once the harness has closed them.
    pub rss_after_kib: u64,
    pub rss_closed_kib: u64,
    pub gateway_panics: usize,
    pub litellm: Option<Other>,
    pub savings: Option<Savings>,
}

/// Another proxy's figures on the native workload.
#[derive(Debug, Clone, Default)]
pub struct Other {
    pub levels: Vec<(usize, Level)>,
    pub sat: f64,
    pub rss_start_kib: u64,
    pub rss_peak_kib: u64,
}

/// Tokens the upstream generated for 20 requests of 5 samples each.
#[derive(Debug, Clone, Copy, Default)]
pub struct Savings {
    pub native_all: u64,
    pub native_first_finished: u64,
    pub native_vote: u64,
    pub fanout_all: u64,
    pub fanout_first_finished: u64,
    pub fanout_vote: u64,
    /// Answers whose selected text was not the expected one (or not 200).
    pub wrong: usize,
}

async fn upstream_stats(client: &reqwest::Client, upstream: &str) -> Snapshot {
    match client.get(format!("{upstream}/stats")).send().await {
        Ok(r) => r.json().await.unwrap_or_default(),
        Err(_) => Snapshot::default(),
    }
}

/// Waits (up to 5 s) for the upstream to have no response open.
async fn upstream_idle(client: &reqwest::Client, upstream: &str) -> Snapshot {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let s = upstream_stats(client, upstream).await;
        if s.open_responses == 0 || Instant::now() > deadline {
            return s;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn paced_plan(args: &GatewayArgs) -> Plan {
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

fn stream_length(args: &GatewayArgs) -> Duration {
    Duration::from_secs_f64(
        (args.first_ms + args.interval_ms * f64::from(args.ticks.saturating_sub(1))) / 1000.0,
    )
}

fn print_level(name: &str, c: usize, l: &Level) {
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

fn level_header() {
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
async fn saturation(
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

fn one_run(rt: &Runtime, args: &GatewayArgs, rep: usize) -> Result<Run, String> {
    let dir = procs::work_dir(&format!("gateway-{rep}"));
    let upstream = procs::upstream(&dir, false)?;
    let mut proxy_cmd = std::process::Command::new(procs::harness());
    proxy_cmd.args([
        "gateway-proxy",
        "--listen",
        "127.0.0.1:0",
        "--upstream",
        &upstream.url,
    ]);
    let proxy = Server::start(
        "proxy",
        proxy_cmd,
        &dir.join("proxy.log"),
        procs::Ready::Line,
        Duration::from_secs(10),
    )?;
    let bin = procs::choicewise_bin(args.choicewise.as_deref());
    let config = procs::gateway_config(&upstream.url, 300.0);
    let gateway = procs::gateway(&dir, &bin, &config)?;
    std::thread::sleep(Duration::from_millis(300));
    let mut run = Run::default();
    println!(
        "\n### run {} of {} (gateway pid {}, VmRSS when started {} KiB)\n",
        rep + 1,
        args.reps,
        gateway.pid(),
        gateway.rss_kib()
    );
    let new_client = || {
        reqwest::Client::builder()
            .pool_idle_timeout(Duration::from_secs(30))
            .build()
            .map_err(|e| e.to_string())
    };
    // One client for the paced levels, closed after them; another for the rest.
    let paced_client = new_client()?;
    let client = new_client()?;
    let plan = paced_plan(args);
    let length = stream_length(args);
    let direct_url = format!("{}/v1/chat/completions", upstream.url);
    let gateway_url = format!("{}/v1/chat/completions", gateway.url);
    let proxy_url = format!("{}/v1/chat/completions", proxy.url);
    rt.block_on(async {
        // Warm-up: connections, allocators, the gateway's first requests.
        for (url, model) in [
            (&direct_url, "m"),
            (&gateway_url, "native"),
            (&gateway_url, "fanout"),
        ] {
            let _ = level(
                &paced_client,
                LevelSpec {
                    url,
                    body: request(model, 4, &plan, None),
                    concurrency: 10,
                    secs: 0.0,
                    min_streams: 10,
                    ramp: Duration::ZERO,
                    how: Scan::Stamps,
                    watch: None,
                    stream_timeout: Duration::from_secs(60),
                },
            )
            .await;
        }
        // Where the load starts from: a gateway that has served (its runtime, pools and token
        // tables made), then idle.
        tokio::time::sleep(Duration::from_secs(1)).await;
        run.rss_start_kib = gateway.rss_kib();
        println!("Gateway VmRSS after the warm-up: {} KiB\n", run.rss_start_kib);
        println!(
            "Paced n = 4 streams: {} content events per choice, {} ms apart after {} ms; times in ms.\n",
            args.ticks, args.interval_ms, args.first_ms
        );
        level_header();
        for &c in &args.concurrency {
            let spec = |url, model, watch| LevelSpec {
                url,
                body: request(model, 4, &plan, None),
                concurrency: c,
                secs: args.secs,
                min_streams: args.min_streams,
                ramp: if c > 1 { length } else { Duration::ZERO },
                how: Scan::Stamps,
                watch,
                stream_timeout: Duration::from_secs(60),
            };
            let direct = level(&paced_client, spec(&direct_url, "m", None)).await;
            print_level("direct", c, &direct);
            let proxied = level(&paced_client, spec(&proxy_url, "m", None)).await;
            print_level("byte-for-byte proxy", c, &proxied);
            let native = level(&paced_client, spec(&gateway_url, "native", Some(gateway.pid()))).await;
            print_level("gateway, native n = 4", c, &native);
            let fanout = level(&paced_client, spec(&gateway_url, "fanout", None)).await;
            print_level("gateway, fan-out n = 4", c, &fanout);
            if c == 1000 {
                run.rss_peak_1000_kib = native.peak_rss_kib;
                run.rss_before_1000_kib = native.rss_before_kib;
                run.open_at_peak = native.open_at_peak;
            }
            run.levels.push((c, direct, native, fanout, proxied));
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        run.rss_after_levels_kib = procs::tree_rss_kib(gateway.pid());
        // The load of the memory target ends: its client closes its connections.
        drop(paced_client);
        tokio::time::sleep(Duration::from_secs(1)).await;
        run.rss_levels_closed_kib = procs::tree_rss_kib(gateway.pid());
        println!(
            "\nSaturation: {} unpaced n = 4 streams at once, {} content events per choice, {} s; content events read per second:",
            args.sat_streams, args.sat_ticks, args.sat_secs
        );
        run.sat_direct = saturation(&client, &direct_url, "m", args, true).await;
        run.sat_proxy = saturation(&client, &proxy_url, "m", args, true).await;
        run.sat_gateway = saturation(&client, &gateway_url, "native", args, true).await;
        println!(
            "upstream writes each tick (4 events) alone: direct {:.0}/s, byte-for-byte proxy {:.0}/s, gateway {:.0}/s ({:.2}x the proxy)",
            run.sat_direct,
            run.sat_proxy,
            run.sat_gateway,
            run.sat_gateway / run.sat_proxy
        );
        run.bulk_direct = saturation(&client, &direct_url, "m", args, false).await;
        run.bulk_proxy = saturation(&client, &proxy_url, "m", args, false).await;
        run.bulk_gateway = saturation(&client, &gateway_url, "native", args, false).await;
        println!(
            "upstream writes 64 KiB at a time: direct {:.0}/s, byte-for-byte proxy {:.0}/s, gateway {:.0}/s ({:.2}x the proxy)",
            run.bulk_direct,
            run.bulk_proxy,
            run.bulk_gateway,
            run.bulk_gateway / run.bulk_proxy
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
        run.rss_after_sat_kib = procs::tree_rss_kib(gateway.pid());
        if !args.no_savings {
            run.savings = Some(savings(&client, &upstream.url, &gateway_url).await);
        }
        tokio::time::sleep(Duration::from_secs_f64(args.settle_secs)).await;
    });
    run.rss_after_kib = gateway.rss_kib();
    // The connections a client keeps open hold their buffers in the gateway; once the client
    // closes them, what stays is the gateway's own.
    drop(client);
    std::thread::sleep(Duration::from_secs(1));
    run.rss_closed_kib = gateway.rss_kib();
    run.gateway_panics = gateway.panics();
    println!(
        "\nGateway VmRSS: start {} KiB, {} KiB when the 1,000-stream native level started, its peak {} KiB ({} streams open), \
         1 s after the paced levels {} KiB, 1 s after their clients closed their connections {} KiB, \
         1 s after the saturation runs {} KiB, {} s after the last load {} KiB, \
         1 s after the clients closed their connections {} KiB",
        run.rss_start_kib,
        run.rss_before_1000_kib,
        run.rss_peak_1000_kib,
        run.open_at_peak,
        run.rss_after_levels_kib,
        run.rss_levels_closed_kib,
        run.rss_after_sat_kib,
        args.settle_secs,
        run.rss_after_kib,
        run.rss_closed_kib
    );
    drop(gateway);
    drop(proxy);
    if let Some(litellm) = &args.litellm {
        match litellm_run(rt, args, litellm, &upstream.url, &dir) {
            Ok(other) => run.litellm = Some(other),
            Err(e) => println!("LiteLLM not measured: {e}"),
        }
    }
    Ok(run)
}

fn litellm_run(
    rt: &Runtime,
    args: &GatewayArgs,
    litellm: &std::path::Path,
    upstream: &str,
    dir: &std::path::Path,
) -> Result<Other, String> {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
        l.local_addr().map_err(|e| e.to_string())?.port()
    };
    // A master key it accepts (it refuses to start without one); sent by the clients.
    let key = format!(
        "sk-bench-{:032x}",
        u128::from(now_ns()) * 0x9E37_79B9_7F4A_7C15
    );
    let config = dir.join("litellm.yaml");
    std::fs::write(
        &config,
        format!(
            "model_list:\n  - model_name: native\n    litellm_params:\n      model: openai/m\n      api_base: {upstream}/v1\n      api_key: sk-none\n"
        ),
    )
    .map_err(|e| e.to_string())?;
    let mut cmd = std::process::Command::new(litellm);
    cmd.arg("--config")
        .arg(&config)
        .args([
            "--host",
            "127.0.0.1",
            "--port",
            &port.to_string(),
            "--num_workers",
            "1",
        ])
        .env("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        .env("LITELLM_LOG", "ERROR")
        .env("DISABLE_SCHEMA_UPDATE", "True")
        .env_remove("DATABASE_URL")
        .env("LITELLM_MASTER_KEY", &key);
    let base = format!("http://127.0.0.1:{port}");
    let server = Server::start(
        "litellm",
        cmd,
        &dir.join("litellm.log"),
        procs::Ready::Url(base.clone(), "/health/liveliness".into()),
        Duration::from_secs(180),
    )?;
    std::thread::sleep(Duration::from_millis(500));
    let mut other = Other {
        rss_start_kib: server.rss_kib(),
        ..Other::default()
    };
    let url = format!("{base}/v1/chat/completions");
    let plan = paced_plan(args);
    let length = stream_length(args);
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert(
        reqwest::header::AUTHORIZATION,
        format!("Bearer {key}").parse().map_err(|_| "a header")?,
    );
    let client = reqwest::Client::builder()
        .default_headers(headers)
        .build()
        .map_err(|e| e.to_string())?;
    let levels = args
        .litellm_concurrency
        .clone()
        .unwrap_or_else(|| args.concurrency.clone());
    rt.block_on(async {
        let _ = level(
            &client,
            LevelSpec {
                url: &url,
                body: request("native", 4, &plan, None),
                concurrency: 4,
                secs: 0.0,
                min_streams: 8,
                ramp: Duration::ZERO,
                how: Scan::Stamps,
                watch: None,
                stream_timeout: Duration::from_secs(60),
            },
        )
        .await;
        println!("\nLiteLLM's proxy (pid {}), native n = 4:\n", server.pid());
        level_header();
        for &c in &levels {
            let l = level(
                &client,
                LevelSpec {
                    url: &url,
                    body: request("native", 4, &plan, None),
                    concurrency: c,
                    secs: args.secs,
                    min_streams: args.min_streams,
                    ramp: if c > 1 { length } else { Duration::ZERO },
                    how: Scan::Stamps,
                    watch: Some(server.pid()),
                    stream_timeout: Duration::from_secs(60),
                },
            )
            .await;
            print_level("LiteLLM, native n = 4", c, &l);
            other.rss_peak_kib = other.rss_peak_kib.max(l.peak_rss_kib);
            other.levels.push((c, l));
        }
        other.sat = saturation(&client, &url, "native", args, true).await;
        println!(
            "LiteLLM saturation: {:.0} content events/s; VmRSS start {} KiB, peak {} KiB",
            other.sat, other.rss_start_kib, other.rss_peak_kib
        );
    });
    Ok(other)
}

/// The savings runs: 20 requests of 5 samples per selection, native and fan-out.
async fn savings(client: &reqwest::Client, upstream: &str, gateway_url: &str) -> Savings {
    let mut s = Savings::default();
    let mut tag = 1_000_000u64;
    for model in ["native", "fanout"] {
        for select in ["all", "first_finished", "vote"] {
            let before = upstream_idle(client, upstream).await;
            let mut tasks = Vec::new();
            for _ in 0..20 {
                tag += 1;
                let plan = Plan {
                    tag,
                    ticks: 8,
                    spread: 6,
                    first_us: 5_000,
                    interval_us: 10_000,
                    stamp: false,
                    fault: crate::upstream::Fault::None,
                    tick_writes: false,
                };
                let (n, extra) = match select {
                    "all" => (5, None),
                    "vote" => (
                        1,
                        Some(json!({"samples": 5, "select": "vote", "vote_by": "Answer: (\\d+)"})),
                    ),
                    _ => (1, Some(json!({"samples": 5, "select": select}))),
                };
                let body = request(model, n, &plan, extra);
                let client = client.clone();
                let url = gateway_url.to_string();
                tasks.push(tokio::spawn(async move {
                    let Ok(resp) = client
                        .post(&url)
                        .header("content-type", "application/json")
                        .body(body)
                        .send()
                        .await
                    else {
                        return false;
                    };
                    if !resp.status().is_success() {
                        return false;
                    }
                    let text = resp.text().await.unwrap_or_default();
                    // Every answer ends `Answer: K`; a selection's is 42.
                    let answers = text.matches("Answer: ").count();
                    let right = text.matches("Answer: 42").count();
                    text.contains("[DONE]")
                        && match select {
                            "all" => answers == 5,
                            _ => answers == 1 && right == 1,
                        }
                }));
                // Five requests at a time.
                if tasks.len() % 5 == 0 {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
            for t in tasks {
                if !t.await.unwrap_or(false) {
                    s.wrong += 1;
                }
            }
            let after = upstream_idle(client, upstream).await;
            let tokens = after.content_events - before.content_events;
            match (model, select) {
                ("native", "all") => s.native_all = tokens,
                ("native", "first_finished") => s.native_first_finished = tokens,
                ("native", "vote") => s.native_vote = tokens,
                ("fanout", "all") => s.fanout_all = tokens,
                ("fanout", "first_finished") => s.fanout_first_finished = tokens,
                _ => s.fanout_vote = tokens,
            }
        }
    }
    let pct = |x: u64, all: u64| 100.0 * (1.0 - x as f64 / all.max(1) as f64);
    println!(
        "\nSavings (20 requests of 5 samples, 8/14/20/26/32 content events; tokens the upstream generated):\n\
         native:  all {} | first_finished {} ({:.0}% saved) | vote {} ({:.0}% saved)\n\
         fan-out: all {} | first_finished {} ({:.0}% saved) | vote {} ({:.0}% saved); wrong answers {}",
        s.native_all,
        s.native_first_finished,
        pct(s.native_first_finished, s.native_all),
        s.native_vote,
        pct(s.native_vote, s.native_all),
        s.fanout_all,
        s.fanout_first_finished,
        pct(s.fanout_first_finished, s.fanout_all),
        s.fanout_vote,
        pct(s.fanout_vote, s.fanout_all),
        s.wrong
    );
    s
}

/// The benchmark: `reps` runs, the medians judged.
pub fn run(args: &GatewayArgs) -> Report {
    let rt = runtime(args.workers);
    let mut runs = Vec::new();
    for rep in 0..args.reps {
        match one_run(&rt, args, rep) {
            Ok(r) => runs.push(r),
            Err(e) => println!("run {} failed: {e}", rep + 1),
        }
    }
    load("end of gateway");
    summarise(args, &runs)
}

fn med(runs: &[Run], f: impl Fn(&Run) -> Option<f64>) -> Option<f64> {
    let v: Vec<f64> = runs.iter().filter_map(f).collect();
    (!v.is_empty()).then(|| median(&v))
}

fn list(runs: &[Run], f: impl Fn(&Run) -> Option<f64>, digits: usize) -> String {
    runs.iter()
        .filter_map(f)
        .map(|x| format!("{x:.digits$}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn summarise(args: &GatewayArgs, runs: &[Run]) -> Report {
    let mut report = Report::default();
    if runs.is_empty() {
        report.info.push("INFO gateway: no run completed".into());
        return report;
    }
    println!(
        "\n### overhead: through it less direct, ms (median of {} runs; each run's figure in brackets)\n",
        runs.len()
    );
    println!(
        "| C | mode | TTFC p50 | TTFC p99 | chunk p50 | chunk p99 |\n|---|---|---|---|---|---|"
    );
    let at = |r: &Run, c: usize, k: usize| {
        r.levels.iter().find(|l| l.0 == c).map(|l| {
            let (d, g) = (l.1, [l.2, l.3, l.4][k]);
            [
                g.ttfc_p50_ms - d.ttfc_p50_ms,
                g.ttfc_p99_ms - d.ttfc_p99_ms,
                g.delay_p50_ms - d.delay_p50_ms,
                g.delay_p99_ms - d.delay_p99_ms,
            ]
        })
    };
    for &c in &args.concurrency {
        for (k, mode) in [
            "gateway, native n = 4",
            "gateway, fan-out n = 4",
            "byte-for-byte proxy",
        ]
        .iter()
        .enumerate()
        {
            let cells: Vec<String> = (0..4)
                .map(|j| {
                    let f = |r: &Run| at(r, c, k).map(|v| v[j]);
                    format!(
                        "{:.2} ({})",
                        med(runs, f).unwrap_or(f64::NAN),
                        list(runs, f, 2)
                    )
                })
                .collect();
            println!("| {c} | {mode} | {} |", cells.join(" | "));
        }
    }
    for (k, name) in [
        (0, "gateway_ttfc_p99_overhead_native_n4_1000_streams"),
        (1, "gateway_ttfc_p99_overhead_fanout_n4_1000_streams"),
    ] {
        if let Some(m) = med(runs, |r| at(r, 1000, k).map(|v| v[1])) {
            report.targets.push(Target {
                name,
                measured: m,
                target: 1.0,
                at_least: false,
                unit: "ms",
            });
        }
    }
    // Content events per second at saturation: direct, proxy, gateway.
    type Rates = fn(&Run) -> (f64, f64, f64);
    let saturations: [(&str, &str, Rates); 2] = [
        (
            "gateway_relay_throughput_vs_byte_proxy",
            "a write per tick",
            |r| (r.sat_direct, r.sat_proxy, r.sat_gateway),
        ),
        (
            "gateway_relay_throughput_vs_byte_proxy_64k_writes",
            "64 KiB writes",
            |r| (r.bulk_direct, r.bulk_proxy, r.bulk_gateway),
        ),
    ];
    for (name, writes, rates) in saturations {
        let ratio = |r: &Run| {
            let (_, proxy, gateway) = rates(r);
            Some(gateway / proxy)
        };
        let Some(m) = med(runs, ratio) else { continue };
        report.targets.push(Target {
            name,
            measured: m,
            target: 0.7,
            at_least: true,
            unit: "x",
        });
        report.info.push(format!(
            "INFO gateway saturation, {writes}, content events/s (median): direct {:.0}, proxy {:.0}, gateway {:.0}; ratios per run: {}",
            med(runs, |r| Some(rates(r).0)).unwrap_or(0.0),
            med(runs, |r| Some(rates(r).1)).unwrap_or(0.0),
            med(runs, |r| Some(rates(r).2)).unwrap_or(0.0),
            list(runs, ratio, 2)
        ));
    }
    let per_stream = |r: &Run| {
        (r.rss_peak_1000_kib > 0).then(|| {
            (r.rss_peak_1000_kib.saturating_sub(r.rss_before_1000_kib)) as f64
                / r.open_at_peak.max(1) as f64
        })
    };
    if let Some(m) = med(runs, per_stream) {
        report.targets.push(Target {
            name: "gateway_rss_per_native_n4_stream_at_1000",
            measured: m,
            target: 128.0,
            at_least: false,
            unit: "KiB",
        });
    }
    let vs_start =
        |kib: fn(&Run) -> u64| move |r: &Run| Some(kib(r) as f64 / r.rss_start_kib.max(1) as f64);
    // The target's load is the paced levels (up to 1,000 concurrent streams); it has ended
    // when their client has closed its connections.
    if let Some(m) = med(runs, vs_start(|r| r.rss_after_levels_kib)) {
        report.info.push(format!(
            "INFO gateway_rss_after_load_vs_start, the clients' keep-alive connections open: {m:.2}x"
        ));
    }
    if let Some(m) = med(runs, vs_start(|r| r.rss_levels_closed_kib)) {
        report.targets.push(Target {
            name: "gateway_rss_after_load_vs_start",
            measured: m,
            target: 1.1,
            at_least: false,
            unit: "x",
        });
    }
    // At the end of a run: after the saturation (and savings) runs and `--settle-secs`, the
    // clients' connections closed. Until the upstream connections the gateway keeps for reuse
    // have closed, what they hold (and the allocator pages they keep) is in the figure.
    if let Some(m) = med(runs, vs_start(|r| r.rss_closed_kib)) {
        let (name, pool) = if args.settle_secs >= pool_closed_secs() {
            (
                "gateway_rss_after_pool_closed_vs_start",
                "the upstream connections kept for reuse closed",
            )
        } else {
            (
                "gateway_rss_after_saturation_vs_start",
                "the upstream connections still pooled",
            )
        };
        report.info.push(format!(
            "INFO {name}, {} s after the last load, the clients' connections closed, {pool}: {m:.2}x",
            args.settle_secs
        ));
    }
    report.info.push(format!(
        "INFO gateway VmRSS KiB per run (start / before the 1000 level / its peak / streams open then / after the paced levels / their clients' connections closed / after saturation / after the last load / its clients' connections closed): {}",
        runs.iter()
            .map(|r| format!(
                "{}/{}/{}/{}/{}/{}/{}/{}/{}",
                r.rss_start_kib,
                r.rss_before_1000_kib,
                r.rss_peak_1000_kib,
                r.open_at_peak,
                r.rss_after_levels_kib,
                r.rss_levels_closed_kib,
                r.rss_after_sat_kib,
                r.rss_after_kib,
                r.rss_closed_kib
            ))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    let panics: usize = runs.iter().map(|r| r.gateway_panics).sum();
    report.info.push(format!("INFO gateway panics: {panics}"));
    let with_litellm: Vec<&Run> = runs.iter().filter(|r| r.litellm.is_some()).collect();
    if !with_litellm.is_empty() {
        let v = |f: &dyn Fn(&Run, &Other) -> Option<f64>| -> Option<f64> {
            let v: Vec<f64> = with_litellm
                .iter()
                .filter_map(|r| r.litellm.as_ref().and_then(|o| f(r, o)))
                .collect();
            (!v.is_empty()).then(|| median(&v))
        };
        let top = args
            .litellm_concurrency
            .as_ref()
            .and_then(|c| c.iter().max().copied())
            .unwrap_or(1000);
        let ours_p99 = |r: &Run, c: usize| at(r, c, 0).map(|v| v[1]);
        let theirs_p99 = |r: &Run, o: &Other, c: usize| {
            let direct = r.levels.iter().find(|l| l.0 == c)?.1;
            let l = o.levels.iter().find(|l| l.0 == c)?.1;
            Some(l.ttfc_p99_ms - direct.ttfc_p99_ms)
        };
        if let Some(m) = v(&|r, o| Some(r.sat_gateway / o.sat)) {
            report.targets.push(Target {
                name: "gateway_throughput_vs_litellm",
                measured: m,
                target: 10.0,
                at_least: true,
                unit: "x",
            });
        }
        if let Some(m) = v(&|r, o| {
            let ours = ours_p99(r, top)?;
            let theirs = theirs_p99(r, o, top)?;
            Some(ours.max(0.0) / theirs)
        }) {
            report.targets.push(Target {
                name: if top == 1000 {
                    "gateway_ttfc_p99_overhead_vs_litellm_1000"
                } else {
                    "gateway_ttfc_p99_overhead_vs_litellm"
                },
                measured: m,
                target: 0.1,
                at_least: false,
                unit: "x",
            });
        }
        for (c, _) in with_litellm[0]
            .litellm
            .as_ref()
            .map_or(&vec![], |o| &o.levels)
        {
            let c = *c;
            report.info.push(format!(
                "INFO litellm C={c}: TTFC overhead p50 {:.2} ms p99 {:.2} ms, chunk overhead p99 {:.2} ms, errors {:.0} (medians)",
                v(&|r, o| {
                    let d = r.levels.iter().find(|l| l.0 == c)?.1;
                    Some(o.levels.iter().find(|l| l.0 == c)?.1.ttfc_p50_ms - d.ttfc_p50_ms)
                })
                .unwrap_or(f64::NAN),
                v(&|r, o| theirs_p99(r, o, c)).unwrap_or(f64::NAN),
                v(&|r, o| {
                    let d = r.levels.iter().find(|l| l.0 == c)?.1;
                    Some(o.levels.iter().find(|l| l.0 == c)?.1.delay_p99_ms - d.delay_p99_ms)
                })
                .unwrap_or(f64::NAN),
                v(&|_, o| Some(o.levels.iter().find(|l| l.0 == c)?.1.errors as f64))
                    .unwrap_or(f64::NAN),
            ));
        }
        report.info.push(format!(
            "INFO litellm saturation {:.0} content events/s; VmRSS start {:.0} KiB, peak {:.0} KiB (medians)",
            v(&|_, o| Some(o.sat)).unwrap_or(0.0),
            v(&|_, o| Some(o.rss_start_kib as f64)).unwrap_or(0.0),
            v(&|_, o| Some(o.rss_peak_kib as f64)).unwrap_or(0.0),
        ));
    } else {
        report
            .info
            .push("INFO litellm not measured (pass --litellm PATH)".into());
    }
    let sv: Vec<Savings> = runs.iter().filter_map(|r| r.savings).collect();
    if !sv.is_empty() {
        let pct = |f: &dyn Fn(&Savings) -> (u64, u64)| {
            median(
                &sv.iter()
                    .map(|s| {
                        let (x, all) = f(s);
                        100.0 * (1.0 - x as f64 / all.max(1) as f64)
                    })
                    .collect::<Vec<_>>(),
            )
        };
        report.info.push(format!(
            "INFO savings (tokens not generated vs all samples to the end, median): native first_finished {:.0}%, vote {:.0}%; fan-out first_finished {:.0}%, vote {:.0}%; wrong answers {}",
            pct(&|s| (s.native_first_finished, s.native_all)),
            pct(&|s| (s.native_vote, s.native_all)),
            pct(&|s| (s.fanout_first_finished, s.fanout_all)),
            pct(&|s| (s.fanout_vote, s.fanout_all)),
            sv.iter().map(|s| s.wrong).sum::<usize>()
        ));
    }
    report
}
