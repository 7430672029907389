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
//!
//! Here: the arguments and the run with its checks; the mix of requests is in `mix`, the
//! clients' requests and reads in `client`.

mod client;
mod mix;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::time::{Duration, Instant};

use crate::procs;
use crate::upstream::{Fault, text};
use crate::{Report, Target, runtime};

use client::{Outcome, gateway_gauge, hostile, one, upstream_stats};
use mix::{Case, ClientFault, Select, case};

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
    /// The resilience run's gateway's `[limits] retry_budget_percent`: above the product's
    /// default, which its flaky upstream and a burst's first milliseconds (the budget's
    /// floor spent before most first tries are counted) overrun (docs/reliability.md has
    /// the runs).
    #[arg(long, default_value_t = 100.0)]
    pub retry_budget_percent: f64,
}

/// Digits masked, cut at 70 characters: an error message as a kind.
fn kind(message: &str) -> String {
    let masked: String = message
        .chars()
        .map(|c| if c.is_ascii_digit() { '#' } else { c })
        .collect();
    masked.chars().take(70).collect()
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
            procs::resilient_gateway_config(
                &upstream.url,
                &down,
                args.idle_timeout_s,
                args.retry_budget_percent,
            )
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
