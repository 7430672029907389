//! The picks on a real model, live: the arithmetic model (models/arith-6m-f16.gguf) served by
//! llama.cpp's own server (scripts/llama-server.sh), the gateway on 127.0.0.1 in front of it,
//! held-out problems (tests/fixtures/arith-set-a-50.json) asked through the gateway's Chat
//! endpoint at temperature 1.0 with five picks: `single` (one sample), `vote-16` (a vote of
//! 16 keyed by `#### (\d+)`), `confidence-high` (the confidence-guided vote by DeepConf's
//! top-k measure, keep 0.9, warmup 16), `adaptive` (the windowed vote: 4 samples at a time,
//! up to 64) and `sampled-low` (the confidence-guided vote by the sampled token's
//! log-probability, keep 0.1, warmup 8, then 4 at a time). Prints a table per pick (accuracy, the tokens the gateway reports and the
//! tokens the server generated, upstream requests, time) and asserts margins that hold at
//! temperature 1.0 (docs/real-server.md has the figures).
//!
//! Ignored by a plain `cargo test`: it needs the server. Run it with
//! `scripts/llama-server.sh run cargo test -p choicewise-gateway --test gateway -- --include-ignored arith::`.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::{Value, json};

const HOW: &str = "needs the arithmetic model's llama.cpp server: scripts/llama-server.sh run cargo test -p choicewise-gateway --test gateway -- --include-ignored arith::";

/// The held-out problems: prompt (`EXPR=\n`) and answer, and what the set's 64 recorded samples
/// of each say.
const FIXTURE: &str = include_str!("../../../../tests/fixtures/arith-set-a-50.json");

/// The tokens `adaptive` (window 4, up to 64 samples) generates on the recorded samples of the
/// same 50 problems, in its offline reference (`choicewise-picks`, the replay's schedule and
/// the gateway's ballot): `choicewise-bench picks --traces ../shared/data/arith-traces/set-a
/// --offline --problems 50 --only adaptive --json` (set-a's first 50 problems are the
/// fixture's: ids 0 to 49; 796 samples started, accuracy 0.80).
const ADAPTIVE_REFERENCE_TOKENS: u64 = 90_737;

/// The tokens `sampled-low` (the confidence-guided vote by the sampled token's
/// log-probability: warmup 8, window of 4 tokens, keep 10%, then 4 samples at a time, up to
/// 64) generates on the same recorded samples in its offline reference: `choicewise-bench
/// picks --traces ../shared/data/arith-traces/set-a --offline --problems 50 --only
/// sampled-low --json` (467 samples started, accuracy 0.80: the reference stops, as the
/// gateway does, at two votes, not one).
const SAMPLED_REFERENCE_TOKENS: u64 = 50_525;

/// The most tokens one live run of `adaptive` or `sampled-low` may generate, as a multiple of
/// its offline reference. Their target is 1.3x, read over several runs (docs/real-server.md
/// gives the runs): one live draw at temperature 1.0 may cross it by the draw alone.
const LIVE_TOKENS_BOUND: f64 = 1.5;

/// The longest answer the server's 192-token slots leave room for after the longest prompt.
const MAX_TOKENS: u64 = 175;

/// One pick: its name in the table, its `choicewise` extension (none: one sample), and how many
/// problems are asked at once.
struct Pick {
    name: &'static str,
    extension: Option<Value>,
    in_flight: usize,
}

/// What one pick did over the problems.
#[derive(Default)]
struct Tally {
    right: usize,
    asked: usize,
    /// `usage.completion_tokens` of the gateway's answers: every sample, cancelled ones included.
    tokens: u64,
    /// Tokens the servers generated during the pick (their `/metrics` counters), in all.
    generated: u64,
    /// The same, each server's.
    by_server: Vec<u64>,
    /// Samples the gateway sent upstream (`choicewise.started`; one request each: fan-out).
    requests: u64,
    /// Samples a confidence-guided vote stopped for low confidence.
    stopped: u64,
    /// Answers whose confidence report says it was unavailable.
    unavailable: usize,
    seconds: f64,
}

/// The answer after `#### ` in a text: its digits.
fn answer_of(text: &str) -> Option<&str> {
    let rest = &text[text.find("#### ")? + 5..];
    let end = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    (end > 0).then(|| &rest[..end])
}

/// Each server's count of generated tokens (`llamacpp:tokens_predicted_total`).
async fn generated(servers: &[&str]) -> Vec<u64> {
    let mut counts = Vec::new();
    for server in servers {
        let text = reqwest::get(format!("{server}/metrics"))
            .await
            .expect("the server's /metrics")
            .text()
            .await
            .unwrap();
        let count = text
            .lines()
            .find_map(|line| line.strip_prefix("llamacpp:tokens_predicted_total "))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .expect("llamacpp:tokens_predicted_total in /metrics");
        counts.push(count as u64);
    }
    counts
}

/// Asks one problem through the gateway; the answer's body.
async fn ask(client: &reqwest::Client, addr: SocketAddr, prompt: &str, pick: &Pick) -> Value {
    let mut body = json!({
        "model": "arith",
        "messages": [{"role": "user", "content": prompt}],
        "temperature": 1.0,
        // The model's own distribution: the server's defaults are top_k 40, top_p 0.95, min_p 0.05.
        "top_k": 0,
        "top_p": 1.0,
        "min_p": 0.0,
        "max_tokens": MAX_TOKENS,
    });
    if let Some(extension) = &pick.extension {
        body["choicewise"] = extension.clone();
    }
    let response = client
        .post(format!("http://{addr}/v1/chat/completions"))
        .json(&body)
        .send()
        .await
        .expect("the gateway answers");
    let status = response.status();
    let text = response.text().await.expect("the answer's body");
    assert_eq!(status, 200, "{} on {prompt:?}: {text}", pick.name);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: not JSON ({e}): {text}", pick.name))
}

async fn run(addr: SocketAddr, servers: &[&str], problems: &[Value], pick: &Pick) -> Tally {
    let client = reqwest::Client::new();
    let before = generated(servers).await;
    let began = Instant::now();
    let answers: Vec<(usize, Value)> = futures::stream::iter(problems.iter().enumerate())
        .map(|(i, p)| {
            let client = &client;
            async move {
                (
                    i,
                    ask(client, addr, p["prompt"].as_str().unwrap(), pick).await,
                )
            }
        })
        .buffer_unordered(pick.in_flight)
        .collect()
        .await;
    let mut tally = Tally {
        seconds: began.elapsed().as_secs_f64(),
        asked: problems.len(),
        ..Tally::default()
    };
    // A cancelled request's last tokens reach the counter a little after its cancel.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let after = generated(servers).await;
    tally.by_server = after.iter().zip(&before).map(|(a, b)| a - b).collect();
    tally.generated = tally.by_server.iter().sum();
    for (i, body) in answers {
        let content = body["choices"][0]["message"]["content"]
            .as_str()
            .unwrap_or_else(|| panic!("{}: no content in {body}", pick.name));
        let truth = problems[i]["answer"].as_str().unwrap();
        tally.right += usize::from(answer_of(content) == Some(truth));
        tally.tokens += body["usage"]["completion_tokens"]
            .as_u64()
            .unwrap_or_else(|| panic!("{}: no usage in {body}", pick.name));
        let report = &body["choicewise"];
        tally.requests += report["started"].as_u64().unwrap_or(1);
        if let Some(confidence) = report.get("confidence") {
            if confidence.get("unavailable").is_some() {
                tally.unavailable += 1;
            }
            tally.stopped += confidence["stopped"]
                .as_array()
                .map_or(0, |s| s.len() as u64);
        }
    }
    tally
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the arithmetic model's llama.cpp server: scripts/llama-server.sh run cargo test -p choicewise-gateway --test gateway -- --include-ignored arith::"]
async fn picks_on_the_arithmetic_model() {
    // Every server of the model (`scripts/llama-server.sh` starts two, one thread each), else
    // the one.
    let upstreams = std::env::var("CHOICEWISE_ARITH_URLS")
        .or_else(|_| std::env::var("CHOICEWISE_ARITH_URL"))
        .unwrap_or_else(|_| panic!("CHOICEWISE_ARITH_URL is not set: {HOW}"));
    let upstreams: Vec<&str> = upstreams.split_whitespace().collect();
    assert!(!upstreams.is_empty(), "CHOICEWISE_ARITH_URLS is empty");
    let servers: Vec<&str> = (upstreams.iter())
        .map(|u| u.trim_end_matches('/').trim_end_matches("/v1"))
        .collect();
    let fixture: Value = serde_json::from_str(FIXTURE).unwrap();
    let problems = fixture["problems"].as_array().unwrap();
    let limit = std::env::var("CHOICEWISE_ARITH_PROBLEMS")
        .ok()
        .map(|n| {
            n.parse::<usize>()
                .expect("CHOICEWISE_ARITH_PROBLEMS: a number")
        })
        .unwrap_or(problems.len())
        .min(problems.len());
    let problems = &problems[..limit];

    // Fan-out: one upstream request per sample, spread over the servers in turn (each
    // server's 4 slots serve `n` only up to 4; the requests beyond its slots wait in its
    // queue). A queued sample has no first byte until a slot frees.
    let mut toml = "[limits]\nmax_samples = 64\n\
         [[models]]\nname = \"arith\"\n\
         [models.retry]\nfirst_byte_timeout_s = 300\n"
        .to_string();
    for upstream in &upstreams {
        toml += &format!(
            "[[models.upstreams]]\napi = \"chat\"\nbase_url = \"{upstream}\"\nmodel = \"arith-6m\"\nn = \"fan-out\"\n"
        );
    }
    let (addr, _gateway) = crate::common::serve(&toml, |_| None).await;

    let picks = [
        Pick {
            name: "single",
            extension: None,
            in_flight: 4,
        },
        Pick {
            name: "vote-16",
            extension: Some(json!({"samples": 16, "select": "vote", "vote_by": "#### (\\d+)"})),
            in_flight: 2,
        },
        Pick {
            name: "confidence-high",
            extension: Some(json!({
                "samples": 32, "select": "vote", "vote_by": "#### (\\d+)",
                "confidence": {"measure": "top_k", "warmup": 16, "keep": 0.9, "group_tokens": 16, "top_logprobs": 5},
            })),
            in_flight: 2,
        },
        Pick {
            name: "adaptive",
            extension: Some(json!({
                "samples": 64, "select": "vote", "vote_by": "#### (\\d+)", "window": 4,
            })),
            in_flight: 2,
        },
        Pick {
            name: "sampled-low",
            extension: Some(json!({
                "samples": 64, "select": "vote", "vote_by": "#### (\\d+)", "window": 4,
                "confidence": {"measure": "sampled", "warmup": 8, "keep": 0.1, "group_tokens": 4, "consensus": 0.95},
            })),
            in_flight: 2,
        },
    ];
    let mut tallies = Vec::new();
    for pick in &picks {
        let tally = run(addr, &servers, problems, pick).await;
        eprintln!(
            "{}: {}/{} right, {:.1} s, tokens generated by each server {:?}",
            pick.name, tally.right, tally.asked, tally.seconds, tally.by_server
        );
        tallies.push(tally);
    }

    let n = problems.len() as f64;
    let recorded: f64 = problems
        .iter()
        .map(|p| p["samples_right"].as_f64().unwrap())
        .sum::<f64>()
        / n;
    let majority = problems
        .iter()
        .filter(|p| p["majority_of_64"] == p["answer"])
        .count() as f64
        / n;
    println!(
        "\n{} held-out problems of set-a at temperature 1.0 (recorded samples: one right {recorded:.3}, \
         majority of 64 right {majority:.2})\n",
        problems.len()
    );
    println!(
        "| pick | accuracy | tokens (gateway usage) | tokens generated (server) | requests | stopped | time |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for (pick, t) in picks.iter().zip(&tallies) {
        println!(
            "| {} | {:.2} ({}/{}) | {} | {} | {} | {} | {:.1} s |",
            pick.name,
            t.right as f64 / n,
            t.right,
            t.asked,
            t.tokens,
            t.generated,
            t.requests,
            t.stopped,
            t.seconds
        );
    }
    println!();

    let [single, vote, confidence, adaptive, sampled] = &tallies[..] else {
        unreachable!()
    };
    let accuracy = |t: &Tally| t.right as f64 / n;
    // A vote's samples go to the servers in turn (sample `i` to server `i mod k`): each
    // generated a share of the vote of 16 (8 of its samples with two servers; at least a
    // quarter of an even share, whatever the cancels and the answers' lengths).
    for (server, count) in servers.iter().zip(&vote.by_server) {
        assert!(
            *count as f64 >= vote.generated as f64 / (4 * servers.len()) as f64,
            "vote-16: {server} generated {count} of its {} tokens",
            vote.generated
        );
    }
    // Margins from the recorded samples of these 50 problems: one sample right 0.773 (sd 0.037
    // over runs), a vote of 16 right 0.818 (sd 0.017); none of 4,000 simulated runs crossed them.
    if problems.len() == 50 {
        assert!(accuracy(single) >= 0.55, "single: {}", accuracy(single));
        assert!(accuracy(vote) >= 0.70, "vote-16: {}", accuracy(vote));
        assert!(
            accuracy(vote) >= accuracy(single) - 0.08,
            "vote-16 {} against single {}",
            accuracy(vote),
            accuracy(single)
        );
        assert!(
            accuracy(confidence) >= 0.70,
            "confidence-high: {}",
            accuracy(confidence)
        );
        // The windowed vote costs what its offline reference does on the recorded samples of
        // the same problems, give or take the draw and the tokens a cancelled sample sends
        // before its cancel lands. The target (at most 1.3x) is a figure over runs
        // (docs/real-server.md), so a single run is held to [`LIVE_TOKENS_BOUND`]: a cancel
        // that no longer landed would run every sample to 64 and generate several times the
        // reference.
        assert!(
            adaptive.generated as f64 <= LIVE_TOKENS_BOUND * ADAPTIVE_REFERENCE_TOKENS as f64,
            "adaptive generated {} tokens, its reference {ADAPTIVE_REFERENCE_TOKENS}",
            adaptive.generated
        );
        // The sampled measure's confidence pick, live: as accurate as a vote, at the cost of
        // its offline reference on the recorded samples (issue 74's target: at most 1.3x, a
        // figure over runs; one run is held to [`LIVE_TOKENS_BOUND`], as above).
        assert!(
            accuracy(sampled) >= 0.70,
            "sampled-low: {}",
            accuracy(sampled)
        );
        assert!(
            sampled.generated as f64 <= LIVE_TOKENS_BOUND * SAMPLED_REFERENCE_TOKENS as f64,
            "sampled-low generated {} tokens, its reference {SAMPLED_REFERENCE_TOKENS}",
            sampled.generated
        );
    }
    // One request per sample; the vote and the confidence vote take 16 samples at least.
    assert_eq!(single.requests, problems.len() as u64);
    assert!(vote.requests >= 16 * problems.len() as u64);
    assert!(confidence.requests >= 16 * problems.len() as u64);
    // The log-probabilities reached the vote: every confidence vote was guided.
    assert_eq!(confidence.unavailable, 0, "confidence unavailable");
    assert_eq!(sampled.unavailable, 0, "sampled confidence unavailable");
    // A vote decided early cancels samples: fewer tokens than 16 samples of each problem.
    let per_sample = single.generated as f64 / n;
    assert!(
        (vote.generated as f64) < 15.0 * per_sample * n,
        "vote-16 generated {} tokens, single {} a sample",
        vote.generated,
        per_sample
    );
}

/// A confidence-guided vote of an agent's request (streamed, with tools) on the real
/// llama.cpp server, which refuses log-probabilities with tools and stream: every request
/// answered 200, decided as a plain vote, `confidence.unavailable` in the server's words; the
/// refusal is learnt once (refused tries only among the first request's samples).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the arithmetic model's llama.cpp server: scripts/llama-server.sh run cargo test -p choicewise-gateway --test gateway -- --include-ignored arith::"]
async fn a_confidence_vote_with_tools_on_llama_cpp() {
    let upstream = std::env::var("CHOICEWISE_ARITH_URL")
        .unwrap_or_else(|_| panic!("CHOICEWISE_ARITH_URL is not set: {HOW}"));
    let toml = format!(
        "[[models]]\nname = \"arith\"\n\
         [[models.upstreams]]\napi = \"chat\"\nbase_url = \"{upstream}\"\nmodel = \"arith-6m\"\nn = \"fan-out\"\n"
    );
    let (addr, _gateway) = crate::common::serve(&toml, |_| None).await;
    let client = reqwest::Client::new();
    let refused = || async {
        let text = (client.get(format!("http://{addr}/metrics")).send().await)
            .unwrap()
            .text()
            .await
            .unwrap();
        (text.lines())
            .filter(|l| l.starts_with("choicewise_upstream_tries_total{") && l.contains("\"4xx\""))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>() as u64
    };
    let tools = json!([{"type": "function", "function": {"name": "read",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}}]);
    let mut after_first = 0;
    for round in 0..3 {
        let body = json!({
            "model": "arith",
            "stream": true,
            "messages": [{"role": "user", "content": "12+30=\n"}],
            "tools": tools,
            "max_tokens": 40,
            "choicewise": {"samples": 4, "select": "vote", "vote_by": "#### (\\d+)",
                "confidence": {"measure": "sampled", "warmup": 2}},
        });
        let response = (client.post(format!("http://{addr}/v1/chat/completions")))
            .json(&body)
            .send()
            .await
            .expect("the gateway answers");
        assert_eq!(response.status(), 200, "round {round}");
        let text = response.text().await.unwrap();
        assert!(
            text.contains("logprobs is not supported with tools + stream")
                && text.contains("\"unavailable\""),
            "round {round}: {text}"
        );
        let refusals = refused().await;
        match round {
            0 => {
                assert!((1..=4).contains(&refusals), "{refusals} refused tries");
                after_first = refusals;
            }
            _ => assert_eq!(refusals, after_first, "round {round}: refused again"),
        }
    }
}
