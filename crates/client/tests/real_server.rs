//! Against a real inference server: llama.cpp's own server code (the `xllamacpp` wheel) with
//! SmolLM2-135M-Instruct, started by `scripts/llama-server.sh` (see `docs/real-server.md`).
//!
//! The server's address comes from `CHOICEWISE_LLAMA_URL`; `.ci/run` always sets it. Without
//! it every test here says on stderr that it did not run, and returns. The test that kills a
//! server mid-stream starts a private one of its own, with `CHOICEWISE_LLAMA_PYTHON` and
//! `CHOICEWISE_LLAMA_MODEL`.
//!
//! The tests take turns (one lock): they share the server's slots, and the cancellation test
//! reads the server's slot states. Outputs are kept short (`max_tokens` of a few tens): the
//! model writes about 10 tokens per second per choice when 4 run at once on 2 cores.

use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use choicewise_client::Client;
use choicewise_core::{Completions, Error, ErrorDetail, UsageSource};
use choicewise_test_support::within;
use futures::{StreamExt, TryStreamExt};
use serde_json::{Value, json};

/// One test at a time against the shared server.
static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Every test is bounded: a hang fails instead of blocking the suite.
const LIMIT: Duration = Duration::from_secs(120);

/// How to run these tests: they need the real server, so a plain `cargo test` leaves them
/// out (ignored), and asking for them without it fails, saying this.
const HOW: &str = "needs a llama.cpp server: scripts/llama-server.sh run cargo test -p choicewise-client --test real_server -- --include-ignored";

/// The shared server's base URL (`http://127.0.0.1:PORT/v1`), from `CHOICEWISE_LLAMA_URL`.
fn server_url(test: &str) -> String {
    match std::env::var("CHOICEWISE_LLAMA_URL") {
        Ok(url) if !url.trim().is_empty() => url.trim().trim_end_matches('/').to_string(),
        _ => panic!("real_server::{test}: CHOICEWISE_LLAMA_URL is not set; {HOW}"),
    }
}

/// The server's slots (`CHOICEWISE_LLAMA_SLOTS`, default 4).
fn slots() -> u32 {
    std::env::var("CHOICEWISE_LLAMA_SLOTS")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(4)
}

/// `http://127.0.0.1:PORT/v1` without the `/v1`: where `/slots`, `/metrics`, `/health` are.
fn root(url: &str) -> &str {
    url.strip_suffix("/v1").unwrap_or(url)
}

fn client(url: &str) -> Client {
    Client::builder()
        .base_url(url)
        .max_retries(0)
        .idle_timeout(Duration::from_secs(60))
        .build()
        .unwrap()
}

fn request(n: u32, max_tokens: u32, usage: bool) -> Value {
    let mut r = json!({
        "model": "smollm2",
        "n": n,
        "max_tokens": max_tokens,
        "temperature": 0.9,
        "seed": 7,
        "messages": [{"role": "user", "content": "Name a fruit and say why you like it."}],
    });
    if usage {
        r["stream_options"] = json!({"include_usage": true});
    }
    r
}

async fn get_json(url: String) -> Value {
    let response = reqwest::get(&url)
        .await
        .unwrap_or_else(|e| panic!("{url}: {e}"));
    response.json().await.unwrap()
}

/// How many of the server's slots are generating (`GET /slots`).
async fn busy_slots(url: &str) -> usize {
    let slots = get_json(format!("{}/slots", root(url))).await;
    slots
        .as_array()
        .expect("/slots is an array")
        .iter()
        .filter(|s| s["is_processing"] == true)
        .count()
}

/// A counter of `GET /metrics` (Prometheus text), e.g. `llamacpp:tokens_predicted_total`.
async fn metric(url: &str, name: &str) -> f64 {
    let text = reqwest::get(format!("{}/metrics", root(url)))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in /metrics"))
}

/// Reads every choice's content concurrently, logging the index of each delta as it arrives.
/// Returns the arrival log.
async fn read_all(completions: &Completions) -> Vec<u32> {
    let log = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    let mut choices = completions.choices();
    while let Some(choice) = choices.next().await {
        let log = log.clone();
        tasks.push(tokio::spawn(async move {
            let mut content = choice.content();
            while let Some(_delta) = content.try_next().await? {
                log.lock().unwrap().push(choice.index());
            }
            Ok::<_, Error>(())
        }));
    }
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    Arc::try_unwrap(log).unwrap().into_inner().unwrap()
}

/// n = 1..=4 with `stream_options.include_usage`: every choice streams, interleaved with the
/// others, and finishes; the stream ends cleanly; the usage is the prompt once plus each
/// choice's own completion tokens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a llama.cpp server: scripts/llama-server.sh run cargo test -p choicewise-client --test real_server -- --include-ignored"]
async fn n_choices_stream_interleaved_and_finish() {
    let url = server_url("n_choices_stream_interleaved_and_finish");
    let _turn = TURN.lock().await;
    within(LIMIT, "the requests of n = 1 to 4", async {
        let client = client(&url);
        let mut prompt_of_one = None;
        for n in 1..=slots().min(4) {
            let started = Instant::now();
            let completions = client.chat(request(n, 16, true)).await.unwrap();
            let arrivals = read_all(&completions).await;
            let whole = completions.collect().await.unwrap();
            completions.outcome().await.unwrap();
            eprintln!(
                "n={n}: {} deltas in {:.1} s, usage {:?}",
                arrivals.len(),
                started.elapsed().as_secs_f64(),
                whole
                    .usage
                    .as_ref()
                    .map(|u| (u.prompt_tokens, u.completion_tokens))
            );
            assert_eq!(whole.choices.len(), n as usize);
            for (i, c) in whole.choices.iter().enumerate() {
                assert_eq!(c.index, i as u32);
                let reason = c.finish_reason.as_deref();
                assert!(matches!(reason, Some("stop" | "length")), "{reason:?}");
                assert!(!c.message.content.as_deref().unwrap_or("").is_empty());
            }
            assert_eq!(whole.model, "smollm2");
            // Interleaved: the index changes many times, not once per choice.
            let switches = arrivals.windows(2).filter(|w| w[0] != w[1]).count();
            if n > 1 {
                assert!(
                    switches >= 2 * n as usize,
                    "n={n}: {switches} switches in {arrivals:?}"
                );
            }
            assert!(
                completions.warnings().is_empty(),
                "{:?}",
                completions.warnings()
            );
            // Usage: llama.cpp reports each choice's own usage (one usage-only chunk per
            // choice); the total is the prompt once plus the choices' completion tokens.
            let usage = whole.usage.as_ref().unwrap();
            assert_eq!(usage.source, UsageSource::Reported);
            let per_choice: Vec<u64> = whole
                .choices
                .iter()
                .map(|c| {
                    let u = c.usage.unwrap();
                    assert_eq!(u.source, UsageSource::Reported, "choice {}", c.index);
                    if c.finish_reason.as_deref() == Some("length") {
                        assert_eq!(u.completion_tokens, 16, "choice {}", c.index);
                    }
                    u.completion_tokens
                })
                .collect();
            assert_eq!(usage.completion_tokens, per_choice.iter().sum::<u64>());
            assert_eq!(
                usage.total_tokens,
                usage.prompt_tokens + usage.completion_tokens
            );
            let prompt = *prompt_of_one.get_or_insert(usage.prompt_tokens);
            assert_eq!(
                usage.prompt_tokens, prompt,
                "n={n}: the prompt counted once"
            );
            eprintln!("n={n}: per choice {per_choice:?}");
        }
    })
    .await;
}

/// Dropping the completion mid-stream closes the connection, and the server frees its slots.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a llama.cpp server: scripts/llama-server.sh run cargo test -p choicewise-client --test real_server -- --include-ignored"]
async fn dropping_mid_stream_frees_the_slots() {
    let url = server_url("dropping_mid_stream_frees_the_slots");
    let _turn = TURN.lock().await;
    within(LIMIT, "freeing the slots", async {
        let n = slots().min(4);
        let max_tokens = 400;
        let before = metric(&url, "llamacpp:tokens_predicted_total").await;
        let completions = client(&url)
            .chat(request(n, max_tokens, true))
            .await
            .unwrap();
        let mut choices = completions.choices();
        let first = choices.next().await.unwrap();
        // A few tokens in: the server is generating for every choice.
        let mut content = first.content();
        for _ in 0..4 {
            content.try_next().await.unwrap().unwrap();
        }
        let busy = busy_slots(&url).await;
        assert!(busy >= 1, "no slot busy while streaming");
        drop((content, first, choices, completions));
        let dropped = Instant::now();
        let freed = loop {
            if busy_slots(&url).await == 0 {
                break dropped.elapsed();
            }
            assert!(
                dropped.elapsed() < Duration::from_secs(20),
                "slots still busy 20 s after the drop"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let generated = metric(&url, "llamacpp:tokens_predicted_total").await - before;
        eprintln!(
            "{busy} slots busy; all free {:.2} s after the drop; {generated} tokens generated of {} asked",
            freed.as_secs_f64(),
            n * max_tokens
        );
        assert!(
            generated < f64::from(n * max_tokens) / 2.0,
            "{generated} tokens generated: not cancelled"
        );
    })
    .await;
}

/// More choices than the server has slots: its 400 and its message, as a typed error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a llama.cpp server: scripts/llama-server.sh run cargo test -p choicewise-client --test real_server -- --include-ignored"]
async fn n_beyond_the_slots_is_a_typed_400() {
    let url = server_url("n_beyond_the_slots_is_a_typed_400");
    let _turn = TURN.lock().await;
    within(LIMIT, "the request of n beyond the slots", async {
        let n = slots() + 1;
        let err = client(&url)
            .chat(request(n, 8, true))
            .await
            .expect_err("n beyond the slots must fail");
        let (status, message, body) = (err.status(), err.message(), err.body());
        assert_eq!(status, Some(400), "not a 400: {err:?}");
        assert!(message.contains("'n'"), "{message}");
        assert!(message.contains(&n.to_string()), "{message}");
        assert_eq!(body.unwrap()["error"]["code"], 400);
        assert!(err.to_string().starts_with("the provider answered 400: "));
    })
    .await;
}

/// A private server on its own port, killed when dropped.
struct PrivateServer {
    child: Child,
    url: String,
}

impl PrivateServer {
    /// Starts `scripts/llama_server.py` with 2 slots; fails the test without the environment
    /// to do so.
    async fn start(test: &str) -> Option<PrivateServer> {
        let (Ok(python), Ok(model)) = (
            std::env::var("CHOICEWISE_LLAMA_PYTHON"),
            std::env::var("CHOICEWISE_LLAMA_MODEL"),
        ) else {
            panic!(
                "real_server::{test}: CHOICEWISE_LLAMA_PYTHON and CHOICEWISE_LLAMA_MODEL are not set; {HOW}"
            );
        };
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/llama_server.py");
        let child = Command::new(python)
            .arg(script)
            .args(["--model", &model, "--port", &port.to_string()])
            .args(["--parallel", "2"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start scripts/llama_server.py");
        let mut server = PrivateServer {
            child,
            url: format!("http://127.0.0.1:{port}/v1"),
        };
        let health = format!("http://127.0.0.1:{port}/health");
        let started = Instant::now();
        loop {
            if let Ok(r) = reqwest::get(&health).await
                && r.status() == 200
            {
                break;
            }
            if let Ok(Some(status)) = server.child.try_wait() {
                panic!("the private server exited: {status}");
            }
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "the private server is not healthy after 60 s"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Some(server)
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for PrivateServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The server killed mid-stream: a typed error, and everything received before it kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a llama.cpp server: scripts/llama-server.sh run cargo test -p choicewise-client --test real_server -- --include-ignored"]
async fn server_killed_mid_stream_keeps_what_arrived() {
    const TEST: &str = "server_killed_mid_stream_keeps_what_arrived";
    server_url(TEST);
    let _turn = TURN.lock().await;
    within(LIMIT, "the stream of the killed server", async {
        let Some(mut server) = PrivateServer::start(TEST).await else {
            return;
        };
        let completions = client(&server.url)
            .chat(request(2, 300, true))
            .await
            .unwrap();
        // Read choice 0 (and whatever else arrives) until a few deltas are in.
        let first = completions.choice(0).await.unwrap();
        let mut content = first.content();
        let mut seen = String::new();
        for _ in 0..6 {
            seen.push_str(&content.try_next().await.unwrap().unwrap());
        }
        server.kill();
        // The rest of the stream: an error, not an end.
        let err = loop {
            match content.try_next().await {
                Ok(Some(delta)) => seen.push_str(&delta),
                Ok(None) => panic!("the stream ended cleanly after the server died"),
                Err(e) => break e,
            }
        };
        assert!(
            matches!(err.detail(), ErrorDetail::Transport { .. }),
            "{err:?}"
        );
        // In the user's terms: the connection closed, after how many bytes, which choices were
        // left unfinished; the HTTP library's error kept as the source.
        let text = err.to_string();
        assert!(text.starts_with("the connection closed after "), "{text}");
        assert!(std::error::Error::source(&err).is_some());
        let incomplete = completions.collect().await.expect_err("an error");
        assert!(matches!(
            incomplete.error.detail(),
            ErrorDetail::Transport { .. }
        ));
        let partial = &incomplete.partial;
        assert_eq!(partial.choices[0].message.content.as_deref(), Some(&*seen));
        assert_eq!(partial.choices[0].finish_reason, None);
        let unfinished: Vec<String> = partial
            .choices
            .iter()
            .filter(|c| c.finish_reason.is_none())
            .map(|c| c.index.to_string())
            .collect();
        let expected = match &unfinished[..] {
            [one] => format!("; choice {one} was unfinished"),
            several => format!("; choices {} were unfinished", several.join(", ")),
        };
        assert!(text.ends_with(&expected), "{text}");
        eprintln!("after the kill: {err}; choice 0 kept {} bytes", seen.len());
    })
    .await;
}
