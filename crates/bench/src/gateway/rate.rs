//! Requests per second at saturation: closed-loop clients, each starting its next streamed
//! request (unpaced, `--rate-ticks` content events, one choice) as soon as its last one
//! ended, for `--rate-secs`. What the gateway's fixed cost per request (parsing, planning,
//! its record, accounting, the answer's framing) allows, where the events/s of the
//! saturation runs measure its per-event cost.
//!
//! In `choicewise-bench gateway` it is measured direct, through the byte-for-byte proxy and
//! through the gateway. `choicewise-bench gateway-rate --before PATH` pairs two gateway
//! binaries on one machine: rounds alternating between them (before, this one, before, ...),
//! each against a fresh upstream and gateway process, with the gateway's CPU time per request
//! read from `/proc`.

use std::path::PathBuf;
use std::time::Duration;

use super::measure::{LevelSpec, Scan, level, request};
use crate::procs::{self, Server};
use crate::stats::{listed, median};
use crate::upstream::Plan;
use crate::{Report, Target, load, runtime};

/// The request-rate workload's settings, shared by `gateway` and `gateway-rate`.
#[derive(Debug, Clone, clap::Args)]
pub struct RateArgs {
    /// Concurrent clients of the request-rate runs (each with its next request at once).
    #[arg(long, default_value_t = 50)]
    pub rate_concurrency: usize,
    /// Seconds of each request-rate run.
    #[arg(long, default_value_t = 5.0)]
    pub rate_secs: f64,
    /// Content events of a request-rate stream (one choice, unpaced).
    #[arg(long, default_value_t = 16)]
    pub rate_ticks: u32,
}

/// `choicewise-bench gateway-rate`: this gateway's requests per second against another
/// build's, paired.
#[derive(Debug, Clone, clap::Args)]
pub struct GatewayRateArgs {
    /// The other `choicewise` binary (the build compared against); without it, this one
    /// alone is measured.
    #[arg(long)]
    pub before: Option<PathBuf>,
    /// This build's `choicewise` binary (default: next to this harness).
    #[arg(long)]
    pub choicewise: Option<PathBuf>,
    /// Rounds; each measures both binaries, alternating which goes first.
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Worker threads of the clients' runtime.
    #[arg(long, default_value_t = 1)]
    pub workers: usize,
    /// The limits this build serves with (docs/keys.md): `none`, `memory` (a named key with
    /// limits of requests, samples and tokens that never bind, counted in the process) or a
    /// `redis://` URL (the same, counted in that Redis). The clients send the key.
    #[arg(long, default_value = "none")]
    pub limits: String,
    /// The limits the `--before` build serves with, as `--limits`. With `--before` naming
    /// this very binary, `--limits memory --before-limits none` measures what the limits cost.
    #[arg(long, default_value = "none")]
    pub before_limits: String,
    /// The records this build writes (docs/records.md): `none`, `sqlite` (a file in the
    /// run's folder), `sqlite-samples` (the same with `samples = true`) or a `postgres://`
    /// URL.
    #[arg(long, default_value = "none")]
    pub records: String,
    /// The records the `--before` build writes, as `--records`. With `--before` naming this
    /// very binary, `--records sqlite --before-records none` measures what the records cost.
    #[arg(long, default_value = "none")]
    pub before_records: String,
    #[command(flatten)]
    pub rate: RateArgs,
}

/// The key the clients send when a run has limits.
const BENCH_KEY: &str = "choicewise-bench-key";

/// The configuration lines of `--limits WHERE`: a named key whose limits of requests,
/// samples and tokens never bind (so that each request reserves and settles them), counted in
/// the process or in Redis; none for `none`.
fn limits_config(limits: &str) -> Result<String, String> {
    let state = match limits {
        "none" => return Ok(String::new()),
        "memory" => String::new(),
        url if url.starts_with("redis://") => {
            format!("[state]\nredis_url = \"{url}\"\non_state_error = \"refuse\"\n")
        }
        other => {
            return Err(format!(
                "--limits {other:?}: none, memory or a redis:// URL"
            ));
        }
    };
    let digest = ring::digest::digest(&ring::digest::SHA256, BENCH_KEY.as_bytes());
    let sha: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    Ok(format!(
        "{state}[auth]\n[[auth.keys]]\nname = \"bench\"\nsha256 = \"{sha}\"\n\
         [auth.keys.limits]\nrequests_per_minute = 1000000000\nsamples_per_minute = 1000000000\n\
         tokens_per_minute = 1000000000000\n"
    ))
}

/// The configuration lines of `--records WHAT` for a run in `dir`; none for `none`.
fn records_config(records: &str, dir: &std::path::Path) -> Result<String, String> {
    let spool = dir.join("records.spool");
    let (url, samples) = match records {
        "none" => return Ok(String::new()),
        "sqlite" => (
            format!("sqlite://{}", dir.join("records.db").display()),
            false,
        ),
        "sqlite-samples" => (
            format!("sqlite://{}", dir.join("records.db").display()),
            true,
        ),
        url if url.starts_with("postgres://") => (url.to_string(), false),
        other => {
            return Err(format!(
                "--records {other:?}: none, sqlite, sqlite-samples or a postgres:// URL"
            ));
        }
    };
    Ok(format!(
        "[records]\nurl = \"{url}\"\nsamples = {samples}\nspool_path = \"{}\"\n",
        spool.display()
    ))
}

/// One request-rate measurement.
#[derive(Debug, Clone, Copy, Default)]
pub struct Rate {
    /// Requests read whole per second.
    pub per_s: f64,
    /// Requests that failed (not 200, or cut).
    pub errors: usize,
    /// The watched process's CPU time (user and system) per request read whole, µs; 0
    /// when no process was watched.
    pub cpu_us: f64,
    /// The median time from a request's start to its first chunk, ms: at
    /// `--rate-concurrency 1`, what one request waits with nothing beside it.
    pub ttfc_p50_ms: f64,
}

/// CPU time (user and system) a process has used, in clock ticks (`/proc/PID/stat`).
fn cpu_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command may hold spaces and parentheses: the fields follow its last `)`.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    // utime and stime: fields 14 and 15 of the line, 12 and 13 after the command.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// The kernel's clock ticks per second (`USER_HZ`): 100 on every Linux this runs on.
const TICKS_PER_S: f64 = 100.0;

/// Requests per second through `url`, `model` at `rate`'s workload, a short warm-up first;
/// with `watch`, the CPU time that process spent per request.
pub(super) async fn request_rate(
    client: &reqwest::Client,
    url: &str,
    model: &str,
    rate: &RateArgs,
    watch: Option<u32>,
) -> Rate {
    let plan = Plan {
        ticks: rate.rate_ticks,
        ..Plan::default()
    };
    let spec = |concurrency, secs| LevelSpec {
        url,
        body: request(model, 1, &plan, None),
        concurrency,
        secs,
        min_streams: 1,
        ramp: Duration::ZERO,
        how: Scan::Count,
        watch: None,
        stream_timeout: Duration::from_secs(60),
    };
    let _ = level(client, spec(rate.rate_concurrency, 0.5)).await;
    let before = watch.and_then(cpu_ticks);
    let l = level(client, spec(rate.rate_concurrency, rate.rate_secs)).await;
    let after = watch.and_then(cpu_ticks);
    let ok = l.streams.saturating_sub(l.errors);
    let cpu_us = match (before, after) {
        (Some(b), Some(a)) if ok > 0 => (a - b) as f64 / TICKS_PER_S * 1e6 / ok as f64,
        _ => 0.0,
    };
    Rate {
        per_s: l.requests_per_s,
        errors: l.errors,
        cpu_us,
        ttfc_p50_ms: l.ttfc_p50_ms,
    }
}

/// One gateway process (binary `bin`) on a fresh upstream: its requests per second.
fn one_binary(
    rt: &tokio::runtime::Runtime,
    bin: &std::path::Path,
    rate: &RateArgs,
    name: &str,
    (limits, records): (&str, &str),
) -> Result<Rate, String> {
    let dir = procs::work_dir(&format!("gateway-rate-{name}"));
    let upstream: Server = procs::upstream(&dir, false)?;
    let limited = limits_config(limits)?;
    let recorded = records_config(records, &dir)?;
    let config = format!(
        "{}{limited}{recorded}",
        procs::gateway_config(&upstream.url, 300.0)
    );
    let gateway = procs::gateway(&dir, bin, &config)?;
    let mut headers = reqwest::header::HeaderMap::new();
    if !limited.is_empty() {
        let value = format!("Bearer {BENCH_KEY}");
        let value = reqwest::header::HeaderValue::from_str(&value).map_err(|e| e.to_string())?;
        headers.insert(reqwest::header::AUTHORIZATION, value);
    }
    let client = reqwest::Client::builder()
        .pool_idle_timeout(Duration::from_secs(30))
        .default_headers(headers)
        .build()
        .map_err(|e| e.to_string())?;
    let url = format!("{}/v1/chat/completions", gateway.url);
    let r = rt.block_on(request_rate(
        &client,
        &url,
        "native",
        rate,
        Some(gateway.pid()),
    ));
    if gateway.panics() > 0 {
        return Err(format!(
            "{name}: the gateway panicked; its log: {}",
            gateway.log.display()
        ));
    }
    Ok(r)
}

/// The paired benchmark.
pub fn run(args: &GatewayRateArgs) -> Report {
    let rt = runtime(args.workers);
    let this = procs::choicewise_bin(args.choicewise.as_deref());
    let mut report = Report::default();
    let mut ours = Vec::new();
    let mut theirs = Vec::new();
    println!(
        "Requests per second: {} clients, streamed requests of one choice, {} content events, unpaced, {} s a run; \
         the gateway's CPU time per request (user and system, /proc)\n",
        args.rate.rate_concurrency, args.rate.rate_ticks, args.rate.rate_secs
    );
    // Each binary served once before the rounds, not counted: the first process started
    // from a binary reads it from disk, and the first round would hold that against it.
    let warm = RateArgs {
        rate_secs: 1.0,
        ..args.rate.clone()
    };
    let these = (args.limits.as_str(), args.records.as_str());
    let those = (args.before_limits.as_str(), args.before_records.as_str());
    let runs =
        std::iter::once((this.as_path(), these)).chain(args.before.as_deref().map(|b| (b, those)));
    for (bin, settings) in runs {
        if let Err(e) = one_binary(&rt, bin, &warm, "warm-up", settings) {
            println!("warm-up of {}: {e}", bin.display());
        }
    }
    println!(
        "| round | build | requests/s | errors | gateway CPU µs/request | first chunk p50 ms |\n|---|---|---|---|---|---|"
    );
    // Each round's pair, when both of its runs completed.
    let mut ratios = Vec::new();
    // Each round's first-chunk p50, this build's less the other's, ms.
    let mut added = Vec::new();
    for round in 0..args.rounds {
        let (mut this_run, mut before_run) = (None, None);
        let mut order: Vec<(&str, &std::path::Path, (&str, &str))> = vec![("this", &this, these)];
        if let Some(before) = &args.before {
            order.push(("before", before, those));
            if round % 2 == 0 {
                order.reverse();
            }
        }
        for (name, bin, settings) in order {
            match one_binary(&rt, bin, &args.rate, name, settings) {
                Ok(r) => {
                    println!(
                        "| {} | {name} | {:.0} | {} | {:.0} | {:.3} |",
                        round + 1,
                        r.per_s,
                        r.errors,
                        r.cpu_us,
                        r.ttfc_p50_ms
                    );
                    match name {
                        "this" => this_run = Some(r),
                        _ => before_run = Some(r),
                    }
                }
                Err(e) => println!("| {} | {name} | failed: {e} | | |", round + 1),
            }
        }
        ours.extend(this_run);
        theirs.extend(before_run);
        // A round's two runs share the machine's state of the moment: its ratio is judged.
        if let (Some(o), Some(t)) = (this_run, before_run) {
            ratios.push(o.per_s / t.per_s);
            added.push(o.ttfc_p50_ms - t.ttfc_p50_ms);
        }
        load(&format!("round {}", round + 1));
    }
    if ours.is_empty() {
        report
            .info
            .push("INFO gateway-rate: no run completed".into());
        return report;
    }
    let rate = median(&ours.iter().map(|r| r.per_s).collect::<Vec<_>>());
    let cpu = median(&ours.iter().map(|r| r.cpu_us).collect::<Vec<_>>());
    report.info.push(format!(
        "INFO gateway_requests_per_s: {rate:.0} (median of {}), gateway CPU {cpu:.0} µs a request",
        ours.len()
    ));
    if !ratios.is_empty() {
        let before = median(&theirs.iter().map(|r| r.per_s).collect::<Vec<_>>());
        let before_cpu = median(&theirs.iter().map(|r| r.cpu_us).collect::<Vec<_>>());
        report.info.push(format!(
            "INFO before: {before:.0} requests/s, CPU {before_cpu:.0} µs a request; rounds' ratios {}",
            listed(&ratios)
        ));
        report.info.push(format!(
            "INFO first chunk p50 added vs before: {:+.3} ms (median; rounds {})",
            median(&added),
            added
                .iter()
                .map(|a| format!("{a:+.3}"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
        report.targets.push(Target {
            name: "gateway_requests_per_s_vs_before",
            measured: median(&ratios),
            target: 0.95,
            at_least: true,
            unit: "x",
        });
    }
    report
}
