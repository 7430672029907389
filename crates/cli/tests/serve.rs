//! `choicewise serve` as a process: its start, and its shutdown on SIGTERM.

use std::process::Stdio;
use std::time::{Duration, Instant};

use choicewise_test_support::within;
use choicewise_testserver::{TestServer, answer};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};

const LIMIT: Duration = Duration::from_secs(20);

/// A streamed request's output choices: `(text, finish_reason, choicewise.error)`, and whether
/// `[DONE]` ended it.
async fn stream(
    base: String,
    model: &str,
) -> (Vec<(String, Option<String>, Option<String>)>, bool) {
    let body = json!({"model": model, "stream": true,
                      "messages": [{"role": "user", "content": "hi"}]});
    let response = reqwest::Client::new()
        .post(format!("{base}/v1/chat/completions"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let text = response.text().await.unwrap();
    let mut choices = vec![(String::new(), None, None); 1];
    let mut done = false;
    for data in text.split("\n\n").filter_map(|e| e.strip_prefix("data: ")) {
        if data == "[DONE]" {
            done = true;
            continue;
        }
        let chunk: Value = serde_json::from_str(data).unwrap();
        for c in chunk["choices"].as_array().unwrap() {
            let entry: &mut (String, Option<String>, Option<String>) =
                &mut choices[c["index"].as_u64().unwrap() as usize];
            if let Some(t) = c["delta"]["content"].as_str() {
                entry.0.push_str(t);
            }
            if let Some(f) = c["finish_reason"].as_str() {
                entry.1 = Some(f.into());
            }
            if let Some(e) = c["choicewise"]["error"].as_str() {
                entry.2 = Some(e.into());
            }
        }
    }
    (choices, done)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_lets_open_answers_finish_within_the_grace_then_ends_the_rest() {
    // One model's answers take 1.5 s; the other's stall after their first words.
    let slow = TestServer::builder()
        .body(answer("slow but sure"))
        .delay(Duration::from_millis(1500))
        .start()
        .await
        .unwrap();
    let stalled = TestServer::builder()
        .body(answer("let me think about it"))
        .stall_after_events(2)
        .start()
        .await
        .unwrap();
    let dir = std::env::temp_dir().join(format!("choicewise-serve-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("gateway.toml");
    std::fs::write(
        &config,
        format!(
            "listen = \"127.0.0.1:0\"\nshutdown_grace_s = 3\n\
             [[models]]\nname = \"slow\"\n[[models.upstreams]]\napi = \"chat\"\nbase_url = \"{}\"\n\
             [[models]]\nname = \"stalled\"\n[[models.upstreams]]\napi = \"chat\"\nbase_url = \"{}\"\n",
            slow.base_url(),
            stalled.base_url()
        ),
    )
    .unwrap();
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_choicewise"))
        .args(["serve", "--config", config.to_str().unwrap()])
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap()).lines();
    let first = within(LIMIT, "the listening line", stderr.next_line())
        .await
        .unwrap()
        .unwrap();
    let base = first
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("{first}"))
        .to_string();
    let slow_answer = tokio::spawn(stream(base.clone(), "slow"));
    let stalled_answer = tokio::spawn(stream(base.clone(), "stalled"));
    within(LIMIT, "both upstreams asked", async {
        while slow.request_count() < 1 || stalled.request_count() < 1 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let signalled = Instant::now();
    let kill = std::process::Command::new("kill")
        .args(["-TERM", &child.id().unwrap().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());

    // Within the grace period: the slow answer finishes as usual.
    let (choices, done) = within(LIMIT, "the slow answer", slow_answer).await.unwrap();
    assert!(done);
    for (text, finish, _) in &choices {
        assert_eq!(
            (text.as_str(), finish.as_deref()),
            ("slow but sure", Some("stop"))
        );
    }
    // No new connection is accepted meanwhile.
    let refused = reqwest::get(format!("{base}/healthz")).await;
    assert!(
        refused.is_err(),
        "a connection after the signal: {refused:?}"
    );

    // After it: the stalled answer ends, each choice with what arrived and an error.
    let (choices, done) = within(LIMIT, "the stalled answer", stalled_answer)
        .await
        .unwrap();
    let ended = signalled.elapsed();
    assert!(done, "[DONE] still ends the answer");
    for (text, finish, error) in &choices {
        assert!(text.starts_with("let"), "{text:?}");
        assert_eq!(finish.as_deref(), Some("error"));
        assert!(error.as_deref().unwrap().contains("shut down"), "{error:?}");
    }
    assert!(
        ended >= Duration::from_millis(2900) && ended < Duration::from_secs(6),
        "ended {ended:?} after the signal, with a grace of 3 s"
    );
    within(
        Duration::from_secs(2),
        "the stalled upstream closing",
        stalled.wait_disconnects(1),
    )
    .await;
    let status = within(Duration::from_secs(8), "the exit", child.wait())
        .await
        .unwrap();
    assert_eq!(status.code(), Some(0));
    let mut said = String::new();
    while let Ok(Some(line)) = stderr.next_line().await {
        said.push_str(&line);
        said.push('\n');
    }
    assert!(said.contains("shutting down"), "{said}");
    assert!(said.contains("grace period over"), "{said}");
    let _ = std::fs::remove_dir_all(dir);
}
