//! The first-event latency the gateway adds on each API it serves (`choicewise-bench
//! gateway-apis`): Chat Completions, Anthropic Messages and OpenAI Responses through
//! `choicewise serve`, beside the same requests sent to the synthetic upstream directly, in
//! the same run, at 1 and 100 concurrent streams. Loopback only.
//!
//! Each request is one paced n = 1 stream (its first content event `--first-ms` after the
//! request, then a few more); the figure is the time from sending it to reading its first
//! content event (chat `"content"`, a Messages `text_delta`, a Responses
//! `response.output_text.delta`). Printed per run and as medians of the runs: p50 and p99,
//! and each endpoint's added p50 and p99 over direct.

use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::json;

use crate::upstream::{Fault, Plan};
use crate::{Report, procs, runtime};

#[derive(Debug, Clone, clap::Args)]
pub struct ApisArgs {
    /// Runs (the figures are their medians).
    #[arg(long, default_value_t = 3)]
    pub runs: usize,
    /// Streams per level and endpoint.
    #[arg(long, default_value_t = 300)]
    pub streams: usize,
    /// The upstream's wait before its first content event, in ms.
    #[arg(long, default_value_t = 5.0)]
    pub first_ms: f64,
    /// The `choicewise` binary (default: next to this harness).
    #[arg(long)]
    pub choicewise: Option<std::path::PathBuf>,
}

/// The endpoints measured: a name, the URL path, the body, what marks its first content.
fn endpoints(plan: &Plan) -> Vec<(&'static str, bool, &'static str, String, &'static [u8])> {
    let message = plan.message();
    let chat = json!({"model": "native", "stream": true,
                      "messages": [{"role": "user", "content": message}]});
    let mut direct = chat.clone();
    direct["model"] = json!("m");
    let messages = json!({"model": "native", "stream": true, "max_tokens": 100,
                          "messages": [{"role": "user", "content": message}]});
    let responses = json!({"model": "native", "stream": true, "input": message});
    vec![
        (
            "direct (chat)",
            false,
            "/v1/chat/completions",
            direct.to_string(),
            b"\"content\":\"",
        ),
        (
            "gateway chat",
            true,
            "/v1/chat/completions",
            chat.to_string(),
            b"\"content\":\"",
        ),
        (
            "gateway messages",
            true,
            "/v1/messages",
            messages.to_string(),
            b"\"text_delta\"",
        ),
        (
            "gateway responses",
            true,
            "/v1/responses",
            responses.to_string(),
            b"output_text.delta",
        ),
    ]
}

/// Time to the first content event of one streamed request, in ms.
async fn first_event(
    client: &reqwest::Client,
    url: &str,
    body: String,
    mark: &[u8],
) -> Option<f64> {
    let started = Instant::now();
    let response = client
        .post(url)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .ok()?;
    if !response.status().is_success() {
        return None;
    }
    let mut reads = response.bytes_stream();
    let mut seen: Vec<u8> = Vec::new();
    let mut first = None;
    while let Some(Ok(read)) = reads.next().await {
        seen.extend_from_slice(&read);
        // The mark, followed by anything but an empty string's closing quote.
        let found = memchr::memmem::find_iter(&seen, mark)
            .any(|at| seen.get(at + mark.len()).is_some_and(|b| *b != b'"'));
        if first.is_none() && found {
            first = Some(started.elapsed().as_secs_f64() * 1e3);
        }
    }
    first
}

fn percentile(values: &mut [f64], p: f64) -> f64 {
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => f64::NAN,
        n => values[((n as f64 - 1.0) * p).round() as usize],
    }
}

/// One run: per (endpoint, concurrency), p50 and p99 in ms.
fn one_run(args: &ApisArgs, run: usize) -> Result<Vec<(&'static str, usize, f64, f64)>, String> {
    let dir = procs::work_dir("apis");
    let upstream = procs::upstream(&dir, false)?;
    let bin = procs::choicewise_bin(args.choicewise.as_deref());
    let gateway = procs::gateway(&dir, &bin, &procs::gateway_config(&upstream.url, 300.0))?;
    let plan = Plan {
        tag: run as u64,
        ticks: 4,
        spread: 0,
        first_us: (args.first_ms * 1000.0) as u64,
        interval_us: 1_000,
        stamp: false,
        fault: Fault::None,
        tick_writes: false,
    };
    let rt = runtime(2);
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(200)
        .tcp_nodelay(true)
        .build()
        .map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    rt.block_on(async {
        for concurrency in [1usize, 100] {
            for (name, through_gateway, path, body, mark) in endpoints(&plan) {
                let base = if through_gateway { &gateway.url } else { &upstream.url };
                let url = format!("{base}{path}");
                // Warm the connections and the gateway's first requests.
                for _ in 0..concurrency.min(20) {
                    let _ = first_event(&client, &url, body.clone(), mark).await;
                }
                let mut times = Vec::new();
                let rounds = args.streams.div_ceil(concurrency);
                for _ in 0..rounds {
                    let batch: Vec<_> = (0..concurrency)
                        .map(|_| {
                            let (client, url, body) = (client.clone(), url.clone(), body.clone());
                            tokio::spawn(async move { first_event(&client, &url, body, mark).await })
                        })
                        .collect();
                    for t in batch {
                        if let Ok(Some(ms)) = t.await {
                            times.push(ms);
                        }
                    }
                }
                let (p50, p99) = (percentile(&mut times, 0.5), percentile(&mut times, 0.99));
                println!(
                    "run {run}: {name:<18} at {concurrency:>3} concurrent: {} streams, first event p50 {p50:.2} ms, p99 {p99:.2} ms",
                    times.len()
                );
                out.push((name, concurrency, p50, p99));
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    });
    Ok(out)
}

pub fn run(args: &ApisArgs) -> Report {
    let mut report = Report::default();
    let mut runs = Vec::new();
    for r in 0..args.runs {
        match one_run(args, r) {
            Ok(figures) => runs.push(figures),
            Err(e) => {
                println!("gateway-apis could not run: {e}");
                return report;
            }
        }
    }
    let median = |name: &str, c: usize, p99: bool| {
        let mut v: Vec<f64> = (runs.iter())
            .filter_map(|figures| {
                (figures.iter())
                    .find(|(n, cc, _, _)| *n == name && *cc == c)
                    .map(|(_, _, p50, p99v)| if p99 { *p99v } else { *p50 })
            })
            .collect();
        percentile(&mut v, 0.5)
    };
    println!(
        "\nMedians of {} runs (ms); added = the endpoint's minus direct's:",
        runs.len()
    );
    for c in [1usize, 100] {
        let (d50, d99) = (
            median("direct (chat)", c, false),
            median("direct (chat)", c, true),
        );
        for name in ["gateway chat", "gateway messages", "gateway responses"] {
            let (p50, p99) = (median(name, c, false), median(name, c, true));
            let line = format!(
                "INFO apis {name} at {c} concurrent: first event p50 {p50:.2} p99 {p99:.2}; direct p50 {d50:.2} p99 {d99:.2}; added p50 {:+.2} p99 {:+.2}",
                p50 - d50,
                p99 - d99
            );
            println!("{line}");
            report.info.push(line);
        }
    }
    report
}
