//! The gateway benchmark's savings runs: the content events the upstream wrote for
//! `select: first_finished` and `vote` against every sample to its end, read from the
//! upstream's own counters.

use std::time::{Duration, Instant};

use serde_json::json;

use super::Savings;
use super::measure::request;
use crate::upstream::{Plan, Snapshot};

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

/// The savings runs: 20 requests of 5 samples per selection, native and fan-out.
pub(super) async fn savings(
    client: &reqwest::Client,
    upstream: &str,
    gateway_url: &str,
) -> Savings {
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
