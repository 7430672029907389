//! `choicewise chat` against a loopback server, and recordings played back with `replay`.

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};

use choicewise_test_support::within;
use choicewise_testserver::{Failure, TestServer, answer};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures")
        .join(name)
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("choicewise-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// Runs `choicewise ARGS` without blocking the runtime the test server runs on, with no
/// OpenAI settings from the environment and an empty standard input.
async fn choicewise(args: &[&str]) -> Output {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_choicewise"))
        .args(args)
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .unwrap()
}

fn ok(out: &Output) -> &[u8] {
    assert!(
        out.status.success(),
        "exit {:?}: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    &out.stdout
}

async fn replay_json(path: &Path) -> Vec<u8> {
    ok(&choicewise(&["replay", path.to_str().unwrap(), "--json"]).await).to_vec()
}

async fn server() -> TestServer {
    TestServer::builder()
        .fixture("openai_n3_tools.sse")
        .seed(7)
        .random_writes(1, 48)
        .max_write_delay(Duration::from_millis(1))
        .start()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_json_equals_replay_json_and_the_request_is_what_was_asked() {
    let server = server().await;
    let url = server.base_url();
    let out = choicewise(&[
        "chat",
        "--base-url",
        &url,
        "--api-key",
        "test",
        "-n",
        "3",
        "--json",
        "hi",
    ])
    .await;
    let expected = replay_json(&fixture("openai_n3_tools.sse")).await;
    assert_eq!(
        String::from_utf8_lossy(ok(&out)),
        String::from_utf8_lossy(&expected)
    );

    // No --model and a server that is not OpenAI's: its model list was asked first.
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(
        (&*requests[0].method, &*requests[0].path),
        ("GET", "/v1/models")
    );
    assert_eq!(requests[0].header("authorization"), Some("Bearer test"));
    let request = &requests[1];
    assert_eq!(request.path, "/v1/chat/completions");
    assert_eq!(request.header("authorization"), Some("Bearer test"));
    let body = request.json.as_ref().unwrap();
    assert_eq!(body["stream"], true);
    assert_eq!(body["n"], 3);
    assert_eq!(body["model"], "gpt-4o-mini");
    assert_eq!(
        body["messages"],
        serde_json::json!([{"role": "user", "content": "hi"}])
    );
    assert_eq!(body["stream_options"]["include_usage"], true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_record_then_replay_gives_the_same_json() {
    let server = server().await;
    let url = server.base_url();
    let recording = scratch("chat.rec");
    let out = choicewise(&[
        "chat",
        "--base-url",
        &url,
        "--api-key",
        "test",
        "-n",
        "3",
        "--record",
        recording.to_str().unwrap(),
        "--json",
        "hi",
    ])
    .await;
    let chat = ok(&out).to_vec();
    let replayed = replay_json(&recording).await;
    assert_eq!(
        String::from_utf8_lossy(&replayed),
        String::from_utf8_lossy(&chat)
    );
    assert_eq!(replayed, replay_json(&fixture("openai_n3_tools.sse")).await);

    // The recording is the fixture's bytes with a header and a stamp before each event.
    let text = std::fs::read_to_string(&recording).unwrap();
    assert!(
        text.starts_with(": choicewise-recording v1\n: t="),
        "{text:.80}"
    );
    let stamps = text.lines().filter(|l| l.starts_with(": t=")).count();
    let events = std::fs::read_to_string(fixture("openai_n3_tools.sse"))
        .unwrap()
        .matches("data: ")
        .count();
    assert_eq!(stamps, events);
    let without: String = text
        .split_inclusive('\n')
        .filter(|l| !l.starts_with(": t=") && !l.starts_with(": choicewise-recording"))
        .collect();
    assert_eq!(
        without,
        std::fs::read_to_string(fixture("openai_n3_tools.sse")).unwrap()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_plain_view_labels_the_choices() {
    let server = server().await;
    let url = server.base_url();
    let out = choicewise(&["chat", "--base-url", &url, "-n", "3", "hi"]).await;
    let text = String::from_utf8(ok(&out).to_vec()).unwrap();
    assert!(text.contains("[choice 1] ✔ finished: tool_calls"), "{text}");
    assert!(
        text.contains("usage (reported): prompt 97, completion 126, total 223"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_error_is_one_line_with_the_status_and_the_providers_message() {
    let server = TestServer::builder()
        .fixture("openai_n3_tools.sse")
        .fail(Failure::status(401).message("Incorrect API key provided: test."))
        .start()
        .await
        .unwrap();
    let url = server.base_url();
    let out = choicewise(&[
        "chat",
        "--base-url",
        &url,
        "--api-key",
        "test",
        "-n",
        "3",
        "--json",
        "hi",
    ])
    .await;
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("401"), "{stderr}");
    assert!(
        stderr.contains("Incorrect API key provided: test."),
        "{stderr}"
    );
}

/// `--retries N` (default 2): a request failed before any answer (here a 500, then a 502) is
/// tried again; with `--retries 0` the first failure is the command's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_request_is_retried_before_any_answer() {
    let flaky = || {
        TestServer::builder()
            .fail(Failure::status(500).message("The server had an error"))
            .then(TestServer::builder().fail(Failure::status(502).message("Bad gateway")))
            .then(TestServer::builder().body(answer("third time")))
    };
    let server = flaky().start().await.unwrap();
    let url = server.base_url();
    let out = choicewise(&["chat", "--base-url", &url, "--model", "m", "--json", "hi"]).await;
    let json: serde_json::Value = serde_json::from_slice(ok(&out)).unwrap();
    assert_eq!(json["choices"][0]["message"]["content"], "third time");
    assert_eq!(server.request_count(), 3, "two retries");

    let server = flaky().start().await.unwrap();
    let url = server.base_url();
    let out = choicewise(&[
        "chat",
        "--base-url",
        &url,
        "--model",
        "m",
        "--retries",
        "0",
        "hi",
    ])
    .await;
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("500"), "{stderr}");
    assert_eq!(server.request_count(), 1, "no retry");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_file_is_sent_with_the_flags_over_it() {
    let server = server().await;
    let url = server.base_url();
    let request = scratch("request.json");
    std::fs::write(
        &request,
        r#"{"model": "gpt-4.1", "temperature": 0.2,
            "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}],
            "messages": [{"role": "user", "content": "Weather in Paris?"}]}"#,
    )
    .unwrap();
    let out = choicewise(&[
        "chat",
        "--base-url",
        &url,
        "--request",
        request.to_str().unwrap(),
        "-n",
        "3",
        "--system",
        "Be brief.",
        "--json",
    ])
    .await;
    ok(&out);
    let body = server.requests()[0].json.clone().unwrap();
    assert_eq!(body["model"], "gpt-4.1");
    assert_eq!(body["n"], 3);
    assert_eq!(body["temperature"], 0.2);
    assert_eq!(body["tools"][0]["function"]["name"], "get_weather");
    assert_eq!(body["messages"][0]["role"], "system");
    assert_eq!(body["messages"][1]["content"], "Weather in Paris?");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_without_a_prompt_or_a_key_says_what_is_missing() {
    let out = choicewise(&["chat", "--base-url", "http://127.0.0.1:9/v1", "-n", "2"]).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no prompt"));
    let out = choicewise(&["chat", "hi"]).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no API key"));
}

/// A recording of the fixture whose stamps span `span` (evenly spread over the events).
fn stamped(name: &str, span: Duration) -> PathBuf {
    let original = std::fs::read_to_string(fixture(name)).unwrap();
    let events: Vec<&str> = original.split_inclusive("\n\n").collect();
    let mut text = String::from(": choicewise-recording v1\n");
    for (i, event) in events.iter().enumerate() {
        let ms = span.as_secs_f64() * 1000.0 * i as f64 / (events.len() - 1) as f64;
        text.push_str(&format!(": t={ms:.3}\n{event}"));
    }
    let path = scratch(&format!("{name}.{}.rec", span.as_millis()));
    std::fs::write(&path, text).unwrap();
    path
}

/// The fastest of three runs (the machine is shared and noisy).
async fn fastest(args: &[&str]) -> (Duration, Vec<u8>) {
    let mut best = None;
    for _ in 0..3 {
        let t0 = Instant::now();
        let out = choicewise(args).await;
        let took = t0.elapsed();
        let stdout = ok(&out).to_vec();
        if best.as_ref().is_none_or(|(b, _)| took < *b) {
            best = Some((took, stdout));
        }
    }
    best.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_honours_the_recorded_times_at_the_given_speed() {
    let path = stamped("openai_n3_tools.sse", Duration::from_millis(300));
    let file = path.to_str().unwrap();
    let expected = replay_json(&fixture("openai_n3_tools.sse")).await;

    let t0 = Instant::now();
    let paced = choicewise(&["replay", file, "--json", "--speed", "1"]).await;
    let took = t0.elapsed();
    assert_eq!(ok(&paced), expected);
    assert!(took >= Duration::from_millis(300), "speed 1 took {took:?}");

    // --json plays at once unless asked; --speed 0 always does.
    let (fast, out) = fastest(&["replay", file, "--json"]).await;
    assert_eq!(out, expected);
    assert!(fast < Duration::from_millis(250), "--json took {fast:?}");
    let (fast, _) = fastest(&["replay", file, "--plain", "--speed", "0"]).await;
    assert!(fast < Duration::from_millis(250), "--speed 0 took {fast:?}");

    // The plain view plays at the recorded pace by default; speed 3 takes a third.
    let t0 = Instant::now();
    let out = choicewise(&["replay", file, "--plain"]).await;
    assert!(t0.elapsed() >= Duration::from_millis(300));
    let plain = String::from_utf8(ok(&out).to_vec()).unwrap();
    assert!(
        plain.contains("[choice 1] ✔ finished: tool_calls"),
        "{plain}"
    );
    let t0 = Instant::now();
    ok(&choicewise(&["replay", file, "--plain", "--speed", "3"]).await);
    assert!(t0.elapsed() >= Duration::from_millis(100));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recording_and_its_plain_stream_replay_alike() {
    let path = stamped("answer_question.sse", Duration::from_millis(50));
    assert_eq!(
        replay_json(&path).await,
        replay_json(&fixture("answer_question.sse")).await
    );
    // Each choice's lines in order (the choices' lines interleave as they come).
    let plain = |p: PathBuf| async move {
        let out = choicewise(&["replay", p.to_str().unwrap(), "--speed", "0"]).await;
        let text = String::from_utf8(ok(&out).to_vec()).unwrap();
        let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
        lines.sort_by(|a, b| a.split(']').next().cmp(&b.split(']').next()));
        lines
    };
    assert_eq!(
        plain(path).await,
        plain(fixture("answer_question.sse")).await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_speed_is_refused() {
    let out = choicewise(&["replay", "--speed=-1"]).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a speed"));
}

/// `chat` against a local server the short way: a base URL without `/v1` and with a trailing
/// slash, no key, no model (the first one the server lists is asked for, and said on stderr).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_against_a_local_server_needs_only_its_address() {
    let server = TestServer::builder()
        .fixture("openai_n3_tools.sse")
        .models(["smollm2", "other"])
        .start()
        .await
        .unwrap();
    let url = format!("http://{}/", server.addr());
    let out = choicewise(&["chat", "-n", "3", "--base-url", &url, "--plain", "hi"]).await;
    let text = String::from_utf8(ok(&out).to_vec()).unwrap();
    assert!(text.contains("[choice 2]"), "{text}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("using smollm2, the first of the 2 models"),
        "{stderr}"
    );
    let requests = server.requests();
    let paths: Vec<_> = requests.iter().map(|r| r.path.as_str()).collect();
    assert_eq!(paths, ["/v1/models", "/v1/chat/completions"]);
    assert_eq!(requests[1].json.as_ref().unwrap()["model"], "smollm2");
    assert_eq!(requests[1].header("authorization"), None);

    // A server without a model list: the error says to pass --model.
    let bare = TestServer::builder()
        .fixture("openai_n3_tools.sse")
        .models(Vec::<String>::new())
        .start()
        .await
        .unwrap();
    let out = choicewise(&["chat", "--base-url", &bare.base_url(), "hi"]).await;
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("pass --model"), "{stderr}");
    assert_eq!(bare.request_count(), 1, "no completion was asked for");
}

/// Against the real llama.cpp server of the real-server suite (`CHOICEWISE_LLAMA_URL`, set by
/// `.ci/run` and `scripts/llama-server.sh`), the short way (its address without `/v1`, no
/// model, no key): the usage line's total is the prompt once plus the choices' own completion
/// counts, which the server reports one chunk per choice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a llama.cpp server: scripts/llama-server.sh run cargo test -p choicewise-cli --test cli -- --include-ignored chat::"]
async fn chat_usage_line_against_a_real_llama_cpp_server_adds_up_the_choices() {
    let url = std::env::var("CHOICEWISE_LLAMA_URL")
        .ok()
        .filter(|u| !u.trim().is_empty())
        .expect("CHOICEWISE_LLAMA_URL is not set: scripts/llama-server.sh run cargo test -p choicewise-cli --test cli -- --include-ignored chat::");
    let request = scratch("llama-request.json");
    std::fs::write(&request, r#"{"max_tokens": 16, "temperature": 0.9}"#).unwrap();
    let address = url.trim_end_matches('/').trim_end_matches("/v1");
    let out = choicewise(&[
        "chat",
        "-n",
        "3",
        "--base-url",
        address,
        "--request",
        request.to_str().unwrap(),
        "Name a colour.",
    ])
    .await;
    let text = String::from_utf8(ok(&out).to_vec()).unwrap();
    let line = text
        .lines()
        .find(|l| l.starts_with("usage (reported): "))
        .unwrap_or_else(|| panic!("no reported usage line in {text}"));
    eprintln!("{line}");
    // usage (reported): prompt P, completion C, total T; per choice a, b, c (reported)
    let numbers: Vec<u64> = line
        .split(|ch: char| !ch.is_ascii_digit())
        .filter_map(|s| s.parse().ok())
        .collect();
    let [prompt, completion, total, a, b, c] = numbers[..] else {
        panic!("unexpected usage line: {line}");
    };
    assert!(line.ends_with("(reported)"), "{line}");
    assert_eq!(completion, a + b + c, "{line}");
    assert_eq!(total, prompt + completion, "{line}");
    assert!(a.max(b).max(c) <= 16 && a.min(b).min(c) > 0, "{line}");
    // The library's client asks for the server's usage the same way by default: the same
    // prompt count, reported.
    let client = choicewise_client::Client::builder()
        .base_url(url.trim_end_matches('/'))
        .build()
        .unwrap();
    let body = serde_json::json!({"model": "m", "n": 3, "max_tokens": 16, "temperature": 0.9,
        "messages": [{"role": "user", "content": "Name a colour."}]});
    let completions = within(Duration::from_secs(120), "chat", client.chat(body))
        .await
        .unwrap();
    let usage = within(Duration::from_secs(120), "usage", completions.usage()).await;
    assert_eq!(usage.source, choicewise::UsageSource::Reported, "{usage:?}");
    assert_eq!(
        usage.prompt_tokens, prompt,
        "the CLI's and the client's prompt counts"
    );
}

/// An answer that begins, then stalls for as long as the client stays.
fn stalled() -> choicewise_testserver::TestServerBuilder {
    TestServer::builder()
        .body(answer("let me think"))
        .stall_after_events(1)
}

async fn fan_out(server: &TestServer, extra: &[&str]) -> Output {
    let url = server.base_url();
    let mut args = vec!["chat", "--base-url", &url, "--model", "m"];
    args.extend_from_slice(extra);
    args.push("What is 6 × 7?");
    choicewise(&args).await
}

fn json_of(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fan_out_sends_k_requests_and_shows_one_completion() {
    let server = TestServer::builder()
        .body(answer("a"))
        .then(TestServer::builder().body(answer("b")))
        .then(TestServer::builder().body(answer("c")))
        .start()
        .await
        .unwrap();
    let out = fan_out(&server, &["--fan-out", "3", "-n", "1", "--json"]).await;
    let json = json_of(&out);
    assert!(out.status.success());
    let requests = server.requests();
    assert_eq!(requests.len(), 3, "exactly three POSTs");
    for r in &requests {
        assert_eq!(r.method, "POST");
        let body = r.json.as_ref().unwrap();
        assert_eq!(body["stream"], true);
        assert!(body.get("n").is_none_or(|n| n == 1), "{body}");
    }
    let choices = json["choices"].as_array().unwrap();
    let indexes: Vec<u64> = choices
        .iter()
        .map(|c| c["index"].as_u64().unwrap())
        .collect();
    assert_eq!(indexes, [0, 1, 2]);
    let mut texts: Vec<&str> = choices
        .iter()
        .map(|c| c["message"]["content"].as_str().unwrap())
        .collect();
    texts.sort_unstable();
    assert_eq!(texts, ["a", "b", "c"]);
    assert!(json.get("selected").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fan_out_first_ends_soon_after_the_fast_finish_and_closes_the_rest() {
    let server = TestServer::builder()
        .body(answer("fast"))
        .delay(Duration::from_millis(200))
        .then(stalled())
        .then(stalled())
        .start()
        .await
        .unwrap();
    let started = Instant::now();
    let out = fan_out(&server, &["--fan-out", "3", "--first", "--json"]).await;
    // The fast answer finishes at about 200 ms; the command is done within a second of it.
    assert!(
        started.elapsed() < Duration::from_millis(1200 + 1000),
        "took {:?}",
        started.elapsed()
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json = json_of(&out);
    let selected = json["selected"].as_array().unwrap();
    assert_eq!(selected.len(), 1);
    let winner = &json["choices"][selected[0].as_u64().unwrap() as usize];
    assert_eq!(winner["message"]["content"], "fast");
    let cancelled = json["choices"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["cancelled"] == true && c["finish_reason"].is_null())
        .count();
    assert_eq!(cancelled, 2);
    // The client closed both stalled connections.
    within(
        Duration::from_secs(1),
        "the stalled connections closing",
        server.wait_disconnects(2),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fan_out_vote_is_decided_after_three_agree() {
    let server = TestServer::builder()
        .body(answer("42"))
        .then(stalled())
        .then(TestServer::builder().body(answer("42")))
        .then(stalled())
        .then(TestServer::builder().body(answer("42")))
        .start()
        .await
        .unwrap();
    let started = Instant::now();
    let out = fan_out(&server, &["--fan-out", "5", "--vote", "--json"]).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(started.elapsed() < Duration::from_secs(10));
    let json = json_of(&out);
    assert_eq!(
        json["vote"],
        serde_json::json!({"decided": true, "key": "42", "votes": 3, "counted": 3, "choices": 5,
                           "tally": [{"key": "42", "votes": 3}]})
    );
    let selected = json["selected"].as_array().unwrap();
    assert_eq!(selected.len(), 3);
    for i in selected {
        let choice = &json["choices"][i.as_u64().unwrap() as usize];
        assert_eq!(choice["message"]["content"], "42");
    }
    within(
        Duration::from_secs(1),
        "the stalled connections closing",
        server.wait_disconnects(2),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fan_out_with_a_failing_upstream_exits_1_naming_it() {
    let healthy = answer("fine");
    let server = TestServer::builder()
        .body(healthy.clone())
        .then(TestServer::builder().fail(Failure::status(500).message("The server had an error")))
        .then(
            TestServer::builder()
                .body(healthy.clone())
                .close_after_events(1),
        )
        .start()
        .await
        .unwrap();
    // No retries: the 500 stays the upstream's failure (with them, the next try answers).
    let out = fan_out(&server, &["--fan-out", "3", "--retries", "0", "--json"]).await;
    assert_eq!(out.status.code(), Some(1));
    let json = json_of(&out);
    let choices = json["choices"].as_array().unwrap();
    assert_eq!(choices.len(), 3, "every requested choice is listed");
    let finished = choices
        .iter()
        .filter(|c| c["finish_reason"] == "stop")
        .count();
    assert_eq!(finished, 1);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("500") && stderr.contains("The server had an error"),
        "{stderr}"
    );
    // One line per failed upstream, each naming it: the refused one and the cut one.
    let lines: Vec<&str> = stderr.lines().filter(|l| l.contains("upstream ")).collect();
    assert_eq!(lines.len(), 2, "{stderr}");
    assert_eq!(
        lines.iter().filter(|l| l.contains("500")).count(),
        1,
        "{stderr}"
    );

    // With a combinator, the healthy choice is still selected: exit 0, the failures said.
    let out = fan_out(&server, &["--fan-out", "3", "--first", "--json"]).await;
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(json_of(&out)["selected"].as_array().unwrap().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_upstream_is_said_once_on_stderr_and_its_usage_as_it_is() {
    /// Each error line of stderr once, and none of them on stdout.
    fn said_once(stdout: &str, stderr: &str) {
        let lines: Vec<&str> = stderr.lines().collect();
        for (k, line) in lines.iter().enumerate() {
            assert!(
                !lines[..k].contains(line),
                "twice on stderr: {line}\n{stderr}"
            );
            let message = line.trim_start_matches("choicewise: ");
            let message = message.split_once(": ").map_or(message, |(_, m)| m);
            assert!(
                !stdout.contains(message),
                "{message:?} on stdout too:\n{stdout}"
            );
        }
    }
    // Two answers that differ: a vote cannot be decided before the third sample ends, so its
    // failure is seen (with two alike, the vote could decide first and cancel it, unsaid).
    let server = TestServer::builder()
        .body(answer("42"))
        .then(TestServer::builder().fail(Failure::status(500).message("The server had an error")))
        .then(TestServer::builder().body(answer("43")))
        .start()
        .await
        .unwrap();
    for pick in [&[][..], &["--vote"], &["--first"]] {
        let mut extra = vec!["--fan-out", "3", "--retries", "0", "--plain"];
        extra.extend_from_slice(pick);
        let out = fan_out(&server, &extra).await;
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        said_once(&stdout, &stderr);
        if pick == ["--first"] {
            // The refused request may be cancelled before its answer: nothing to say then.
            continue;
        }
        assert_eq!(
            stderr.matches("The server had an error").count(),
            1,
            "{stderr}"
        );
        assert_eq!(stdout.matches(" ✘ failed").count(), 1, "{stdout}");
        // The refused upstream reported nothing: it is not counted as reported.
        let usage = stdout.lines().find(|l| l.starts_with("usage")).unwrap();
        assert!(
            usage.contains("3 upstreams: 2 estimated (total ≈ ")
                && usage.contains(", 1 never answered"),
            "{usage}"
        );
    }

    // Nothing to select: why, and the upstreams' errors, once each, on stderr.
    let refused =
        || TestServer::builder().fail(Failure::status(500).message("The server had an error"));
    let server = refused().then(refused()).start().await.unwrap();
    let out = fan_out(
        &server,
        &["--fan-out", "2", "--retries", "0", "--plain", "--vote"],
    )
    .await;
    assert_eq!(out.status.code(), Some(1));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    said_once(&stdout, &stderr);
    assert!(stderr.contains("The server had an error"), "{stderr}");
    assert!(
        stderr.contains("choicewise: nothing selected: "),
        "{stderr}"
    );
    assert!(stdout.contains("selected: none"), "{stdout}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_base_url_ending_in_its_endpoint_is_a_usage_error_before_any_request() {
    let server = server().await;
    let url = format!("{}/chat/completions", server.base_url());
    let out = choicewise(&["chat", "--base-url", &url, "--model", "m", "hi"]).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert_eq!(
        stderr.trim_end(),
        format!(
            "choicewise: --base-url {url:?} ends in the endpoint path /chat/completions; give \
             the API's base URL ({:?}): choicewise adds /chat/completions itself",
            server.base_url()
        )
    );
    // A fan-out item's @URL is checked alike.
    let item = format!("chat:m@{url}");
    let out = choicewise(&["chat", "--api-key", "k", "--fan-out", &item, "hi"]).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("the --fan-out item's @URL"));
    assert!(server.requests().is_empty(), "nothing was sent");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sampling_flags_out_of_range_are_usage_errors() {
    let server = server().await;
    let url = server.base_url();
    for flag in ["--temperature=5", "--temperature=-1", "--top-p=1.5"] {
        let out = choicewise(&["chat", "--base-url", &url, "--model", "m", flag, "hi"]).await;
        assert_eq!(out.status.code(), Some(2), "{flag}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("is out of range: from 0 to"), "{stderr}");
    }
    assert!(server.requests().is_empty(), "nothing was sent");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fan_out_refuses_record_and_a_bad_count() {
    let server = TestServer::builder().start().await.unwrap();
    let path = scratch("fan-out.rec");
    let out = fan_out(
        &server,
        &["--fan-out", "2", "--record", path.to_str().unwrap()],
    )
    .await;
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--record"));
    let out = fan_out(&server, &["--fan-out", "0"]).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--fan-out"));
    assert_eq!(server.request_count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_fan_out_line_mixes_chat_responses_and_anthropic() {
    let chat = TestServer::builder()
        .body(answer("from chat"))
        .start()
        .await
        .unwrap();
    let responses = TestServer::builder()
        .fixture("responses_text.sse")
        .random_writes(1, 40)
        .start()
        .await
        .unwrap();
    let anthropic = TestServer::builder()
        .fixture("anthropic_tools.sse")
        .api_key("sk-ant-test")
        .start()
        .await
        .unwrap();
    let spec = format!(
        "chat:gpt-4o-mini@{},responses:gpt-5-mini@{},anthropic:claude-sonnet-4-5@{}",
        chat.base_url(),
        responses.base_url(),
        anthropic.base_url()
    );
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_choicewise"))
        .args([
            "chat",
            "--api-key",
            "sk-openai-test",
            "--system",
            "Be brief.",
            "--fan-out",
        ])
        .arg(&spec)
        .args(["--json", "Weather in Paris and Tokyo?"])
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .env("ANTHROPIC_API_KEY", "sk-ant-test")
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json = json_of(&out);
    let choices = json["choices"].as_array().unwrap();
    let contents: Vec<&str> = choices
        .iter()
        .map(|c| c["message"]["content"].as_str().unwrap())
        .collect();
    assert_eq!(
        contents,
        [
            "from chat",
            "There are three r's in strawberry.",
            "Let me check both cities."
        ]
    );
    let finishes: Vec<&str> = choices
        .iter()
        .map(|c| c["finish_reason"].as_str().unwrap())
        .collect();
    assert_eq!(finishes, ["stop", "stop", "tool_calls"]);
    // Each choice's source names its upstream's API and host.
    let host = |server: &TestServer| server.addr().to_string();
    for (choice, (api, server)) in choices.iter().zip([
        ("chat", &chat),
        ("responses", &responses),
        ("anthropic", &anthropic),
    ]) {
        assert_eq!(choice["source"]["api"], api, "{choice}");
        assert_eq!(choice["source"]["host"], host(server), "{choice}");
    }
    // Plain lines name them too: the sources differ.
    let plain = tokio::process::Command::new(env!("CARGO_BIN_EXE_choicewise"))
        .args(["chat", "--api-key", "sk-openai-test", "--fan-out"])
        .arg(&spec)
        .args(["--plain", "Weather in Paris and Tokyo?"])
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .env("ANTHROPIC_API_KEY", "sk-ant-test")
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .unwrap();
    let lines = String::from_utf8_lossy(&plain.stdout);
    assert!(
        lines.contains(&format!(
            "[choice 1 responses:gpt-5-mini@{}]",
            host(&responses)
        )),
        "{lines}"
    );
    assert!(
        lines.contains(&format!(
            "[choice 2 anthropic:claude-sonnet-4-5@{}]",
            host(&anthropic)
        )),
        "{lines}"
    );
    assert_eq!(
        choices[2]["message"]["tool_calls"]
            .as_array()
            .unwrap()
            .len(),
        2
    );

    // Each endpoint got its own request shape and key.
    let r = &chat.requests()[0];
    assert_eq!(r.path, "/v1/chat/completions");
    assert_eq!(r.header("authorization"), Some("Bearer sk-openai-test"));
    let body = r.json.as_ref().unwrap();
    assert_eq!(body["messages"][0]["role"], "system");
    assert_eq!(body["model"], "gpt-4o-mini");

    let r = &responses.requests()[0];
    assert_eq!(r.path, "/v1/responses");
    let body = r.json.as_ref().unwrap();
    assert_eq!(
        (&body["model"], &body["instructions"], &body["stream"]),
        (
            &serde_json::json!("gpt-5-mini"),
            &serde_json::json!("Be brief."),
            &serde_json::json!(true)
        )
    );
    assert_eq!(body["input"][0]["content"], "Weather in Paris and Tokyo?");
    assert!(body.get("messages").is_none() && body.get("stream_options").is_none());

    let r = &anthropic.requests()[0];
    assert_eq!(r.path, "/v1/messages");
    assert_eq!(r.header("x-api-key"), Some("sk-ant-test"));
    assert_eq!(r.header("anthropic-version"), Some("2023-06-01"));
    assert!(r.header("authorization").is_none());
    let body = r.json.as_ref().unwrap();
    assert_eq!(
        (&body["system"], &body["max_tokens"]),
        (&serde_json::json!("Be brief."), &serde_json::json!(8192))
    );
    assert_eq!(body["messages"][0]["role"], "user");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_calls_a_responses_or_an_anthropic_endpoint() {
    // (fixture, --api, extra flags, the path requested, what the JSON's first choice says)
    let cases = [
        (
            "anthropic_max_tokens.sse",
            "anthropic",
            &[][..],
            "/v1/messages",
            ("/finish_reason", "length"),
        ),
        (
            "responses_text.sse",
            "responses",
            &["--model", "gpt-5-mini"][..],
            "/v1/responses",
            ("/message/content", "There are three r's in strawberry."),
        ),
    ];
    for (fixture, api, extra, path, (pointer, expected)) in cases {
        let server = TestServer::builder()
            .fixture(fixture)
            .start()
            .await
            .unwrap();
        let url = server.base_url();
        let mut args = vec!["chat", "--api", api, "--base-url", &url];
        args.extend_from_slice(extra);
        args.extend(["--json", "hi"]);
        let out = choicewise(&args).await;
        assert!(
            out.status.success(),
            "{api}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let json = json_of(&out);
        assert_eq!(
            json["choices"][0].pointer(pointer).unwrap(),
            expected,
            "{api}"
        );
        let r = &server.requests()[0];
        assert_eq!(r.path, path);
        if api == "anthropic" {
            // The default model of the Anthropic API.
            assert_eq!(r.json.as_ref().unwrap()["model"], "claude-sonnet-4-5");
        }
    }

    // The Responses API has no n: several choices are --fan-out's (refused before any
    // request, so no server is needed).
    let out = choicewise(&[
        "chat",
        "--api",
        "responses",
        "--base-url",
        "http://127.0.0.1:9/v1",
        "-n",
        "3",
        "hi",
    ])
    .await;
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--fan-out"));

    // Without a key or a base URL, the Anthropic key is asked for by name.
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_choicewise"))
        .args(["chat", "--api", "anthropic", "hi"])
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("ANTHROPIC_BASE_URL")
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("ANTHROPIC_API_KEY"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sampling_flags_reach_every_request_of_a_fan_out() {
    let server = TestServer::builder()
        .body(answer("a"))
        .then(TestServer::builder().body(answer("b")))
        .start()
        .await
        .unwrap();
    let out = fan_out(
        &server,
        &[
            "--fan-out",
            "2",
            "--max-tokens",
            "40",
            "--temperature",
            "0.8",
            "--top-p",
            "0.9",
            "--seed",
            "7",
            "--stop",
            "END",
            "--stop",
            "\n\n",
            "--param",
            "presence_penalty=0.5",
            "--param",
            "user=ada",
            "--param",
            r#"logit_bias={"50256": -100}"#,
            "--json",
        ],
    )
    .await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    for r in &requests {
        let body = r.json.as_ref().unwrap();
        assert_eq!(body["max_tokens"], 40, "{body}");
        assert_eq!(body["temperature"], 0.8);
        assert_eq!(body["top_p"], 0.9);
        assert_eq!(body["seed"], 7);
        assert_eq!(body["stop"], serde_json::json!(["END", "\n\n"]));
        assert_eq!(body["presence_penalty"], 0.5);
        assert_eq!(body["user"], "ada", "a bare word is a string");
        assert_eq!(body["logit_bias"]["50256"], -100);
    }
    let out = choicewise(&["chat", "--param", "no-equals-sign", "hi"]).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("is not KEY=JSON"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_files_prompt_comes_after_its_messages() {
    let server = server().await;
    let url = server.base_url();
    let request = scratch("request-with-prompt.json");
    std::fs::write(
        &request,
        r#"{"model": "m", "max_tokens": 9, "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": "Sunny."}]}"#,
    )
    .unwrap();
    let out = choicewise(&[
        "chat",
        "--base-url",
        &url,
        "--request",
        request.to_str().unwrap(),
        "--max-tokens",
        "20",
        "--json",
        "And in Lisbon?",
    ])
    .await;
    ok(&out);
    let body = server.requests()[0].json.clone().unwrap();
    let messages = body["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 4, "{body}");
    assert_eq!(messages[2]["content"], "Sunny.");
    assert_eq!(messages[3]["role"], "user");
    assert_eq!(messages[3]["content"], "And in Lisbon?", "appended last");
    assert_eq!(body["max_tokens"], 20, "the flag overrides the file");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_server_is_named_with_its_cause_and_no_model_advice() {
    // Nothing listens there, and no later server can take its port.
    let (url, held) = choicewise_test_support::refusing();
    let port = held.local_addr().unwrap().port();
    for with_model in [false, true] {
        let mut args = vec!["chat", "--base-url", &url, "--json"];
        if with_model {
            args.extend(["--model", "m"]);
        }
        args.push("hi");
        let out = choicewise(&args).await;
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(err.contains("connection refused"), "{err}");
        assert!(err.contains(&format!("127.0.0.1:{port}/v1/")), "{err}");
        assert!(
            !err.contains("--model"),
            "no --model advice when the server is down: {err}"
        );
    }
    // A model list behind a key: the status, no advice either.
    let server = TestServer::builder()
        .fixture("demo.sse")
        .api_key("sk-right")
        .start()
        .await
        .unwrap();
    let out = choicewise(&[
        "chat",
        "--base-url",
        &server.base_url(),
        "--api-key",
        "sk-wrong",
        "hi",
    ])
    .await;
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("401"), "{err}");
    assert!(!err.contains("--model"), "{err}");
    assert!(
        !err.contains("sk-wrong") && !err.contains("sk-right"),
        "no key in errors: {err}"
    );
}

/// A loopback server whose k-th request is answered `answers[k]` (arrival order); `"…"`
/// answers begin and then stall.
async fn scripted(answers: &[&str]) -> TestServer {
    let reply = |a: &str| match a {
        "…" => stalled(),
        a => TestServer::builder().body(answer(&format!("Answer: {a}"))),
    };
    let mut builder = reply(answers[0]);
    for a in &answers[1..] {
        builder = builder.then(reply(a));
    }
    builder.start().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vote_needs_two_votes_unless_told_and_can_normalize_keys() {
    // Every answer differs: one vote out of four is no majority.
    let server = scripted(&["1", "2", "3", "4"]).await;
    let out = fan_out(
        &server,
        &["--fan-out", "4", "--vote-by", r"Answer: (\d+)", "--json"],
    )
    .await;
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("nothing selected: no key has 2 votes (tally: "),
        "{err}"
    );
    for k in ["1", "2", "3", "4"] {
        assert!(err.contains(&format!("\"{k}\" 1")), "{err}");
    }
    let json = json_of(&out);
    assert_eq!(json["selected"], serde_json::json!([]));
    // --vote-min 1: a plain plurality, the first voted wins the tie.
    let server = scripted(&["1", "2", "3", "4"]).await;
    let out = fan_out(
        &server,
        &[
            "--fan-out",
            "4",
            "--vote-by",
            r"Answer: (\d+)",
            "--vote-min",
            "1",
            "--json",
        ],
    )
    .await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(json_of(&out)["vote"]["votes"], 1);
    // "no", "No" and "no." are one key with --vote-normalize (decided as soon as two agree),
    // three keys of one vote each without.
    for normalize in [true, false] {
        let server = TestServer::builder()
            .body(answer("no"))
            .then(TestServer::builder().body(answer(" No ")))
            .then(TestServer::builder().body(answer("no.")))
            .start()
            .await
            .unwrap();
        let mut args = vec!["--fan-out", "3", "--vote", "--vote-min", "1", "--json"];
        if normalize {
            args.push("--vote-normalize");
        }
        let out = fan_out(&server, &args).await;
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let vote = &json_of(&out)["vote"];
        match normalize {
            true => {
                assert_eq!(vote["key"], "no", "{vote}");
                assert!(vote["votes"].as_u64().unwrap() >= 2, "{vote}");
            }
            false => assert_eq!(
                (vote["votes"].as_u64(), vote["counted"].as_u64()),
                (Some(1), Some(3)),
                "{vote}"
            ),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_windowed_vote_starts_samples_only_while_undecided() {
    let vote = [
        "--vote-by",
        r"Answer: (\d+)",
        "--vote-window",
        "4",
        "--fan-out",
        "12",
        "--json",
    ];
    // The first window agrees: exactly 4 requests, none after.
    let server = scripted(&["7"; 12]).await;
    let out = fan_out(&server, &vote).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json = json_of(&out);
    assert_eq!(json["started"], 4);
    assert_eq!(json["windows"], serde_json::json!([[0, 1, 2, 3]]));
    assert_eq!(json["vote"]["key"], "7");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(server.request_count(), 4, "no request after the decision");

    // The first window splits, the second agrees: 8 requests, the third window never starts.
    let mut answers = ["5"; 12];
    answers[2] = "6";
    let server = scripted(&answers).await;
    let out = fan_out(&server, &vote).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json = json_of(&out);
    assert_eq!(json["started"], 8);
    assert_eq!(json["windows"].as_array().unwrap().len(), 2);
    assert_eq!(json["vote"]["key"], "5");
    // The third window never starts. (The first window's last request may not have reached
    // the server when the second decided, on a loaded machine: it is cancelled unsent.)
    assert!(server.request_count() <= 8, "{}", server.request_count());
    assert!(
        String::from_utf8_lossy(&out.stderr).is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // No window agrees: all 12 requests, the plurality decides. The last sample breaks a tie
    // of "1" and "2", so no decision can come before its request is made.
    let answers = ["1", "2", "1", "3", "2", "4", "5", "6", "7", "8", "9", "1"];
    let server = scripted(&answers).await;
    let out = fan_out(&server, &vote).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json = json_of(&out);
    assert_eq!(json["started"], 12);
    assert_eq!(json["vote"]["key"], "1");
    assert_eq!(server.request_count(), 12);

    // A window that cannot agree any more starts the next at once, its stalled sample still
    // running; the decision closes that sample's connection.
    let mut answers = ["3"; 12];
    answers[0] = "2";
    answers[1] = "…";
    let server = scripted(&answers).await;
    let started = Instant::now();
    let out = fan_out(&server, &vote).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(started.elapsed() < Duration::from_secs(10));
    let json = json_of(&out);
    assert_eq!(json["started"], 8);
    assert_eq!(json["vote"]["key"], "3");
    // The stalled sample is cancelled; so is a sample of the first window whose request
    // arrived after the second window's (a loaded machine), never one of the second window,
    // which decided by finishing.
    let cancelled: Vec<u64> = (json["choices"].as_array().unwrap().iter())
        .filter(|c| c["cancelled"] == true)
        .map(|c| c["index"].as_u64().unwrap())
        .collect();
    assert!(
        !cancelled.is_empty() && cancelled.iter().all(|i| *i < 4),
        "cancelled {cancelled:?}: {json:#}"
    );
    within(
        Duration::from_secs(1),
        "the stalled sample's connection closing",
        server.wait_disconnects(1),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_shows_progress_then_ctrl_c_prints_what_was_assembled() {
    // The answer begins, then stalls: a terminal user presses Ctrl-C.
    let server = TestServer::builder()
        .body(answer("half an answer"))
        .stall_after_events(2)
        .start()
        .await
        .unwrap();
    let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_choicewise"))
        .args([
            "chat",
            "--base-url",
            &server.base_url(),
            "--model",
            "m",
            "-n",
            "1",
            "--json",
            "hi",
        ])
        .env_remove("OPENAI_API_KEY")
        .env("CHOICEWISE_PROGRESS", "1")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Wait for the request and a few progress lines, then interrupt.
    within(Duration::from_secs(10), "the request", async {
        while server.request_count() == 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    tokio::time::sleep(Duration::from_millis(700)).await;
    let pid = child.id().unwrap().to_string();
    let killed = std::process::Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .unwrap();
    assert!(killed.success());
    let out = within(
        Duration::from_secs(10),
        "the exit",
        child.wait_with_output(),
    )
    .await
    .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{err}");
    assert!(err.contains("⋯ 1 choice · ≈ "), "a progress line: {err:?}");
    assert!(err.contains("\r\x1b[2K"), "cleared: {err:?}");
    assert_eq!(err.matches("interrupted").count(), 1, "{err:?}");
    let json = json_of(&out);
    let choice = &json["choices"][0];
    assert_eq!(choice["finish_reason"], serde_json::Value::Null, "{json}");
    assert!(
        choice["message"]["content"]
            .as_str()
            .unwrap()
            .starts_with("half"),
        "{json}"
    );
    within(
        Duration::from_secs(5),
        "the connection closing",
        server.wait_disconnects(1),
    )
    .await;
}

/// A one-choice stream of `tokens`, each carrying top-2 log-probabilities that give it
/// confidence `c` (`-c/2` and `-3c/2`: their negative mean is `c`), then a finish.
fn logprob_answer(tokens: &[&str], c: f64) -> String {
    let mut sse = String::new();
    for (i, token) in tokens.iter().enumerate() {
        let delta = match i {
            0 => serde_json::json!({"role": "assistant", "content": token}),
            _ => serde_json::json!({"content": token}),
        };
        let logprob = serde_json::json!({"token": token, "logprob": -c / 2.0, "top_logprobs": [
            {"token": token, "logprob": -c / 2.0}, {"token": "~", "logprob": -1.5 * c}]});
        let chunk = serde_json::json!({"id": "chatcmpl-c", "object": "chat.completion.chunk",
            "model": "m", "choices": [{"index": 0, "delta": delta,
            "logprobs": {"content": [logprob]}, "finish_reason": null}]});
        sse.push_str(&format!("data: {chunk}\n\n"));
    }
    let end = serde_json::json!({"id": "chatcmpl-c", "object": "chat.completion.chunk",
        "model": "m", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]});
    sse.push_str(&format!("data: {end}\n\ndata: [DONE]\n\n"));
    sse
}

/// Seven samples for `--fan-out 7 --confidence --warmup 3 --group-tokens 2`, by arrival
/// order. The warmup (any order among the first three requests): "42" at confidence 4, "41"
/// at 3, "42" at 2: the threshold is their 0.1 quantile, 2.2, so the third does not vote, and
/// "42" 4 against "41" 3 leaves the vote undecided. Then: two samples that hesitate
/// (confidence 0.5 and 1, "Hmm maybe …") and stall after two tokens, to be stopped; "41" at
/// 4.5 and "42" at 2.3. Weighted, "41" wins 7.5 to 6.3, although "42" has three finished
/// answers to two.
async fn confidence_server() -> TestServer {
    let sure =
        |n: &str, c: f64| TestServer::builder().body(logprob_answer(&["Answer", ": ", n], c));
    let unsure = |n: &'static str, c: f64| {
        TestServer::builder()
            .body(logprob_answer(&["Hmm", " maybe", n, "\nAnswer: ", n], c))
            .stall_after_events(2)
    };
    sure("42", 4.0)
        .then(sure("41", 3.0))
        .then(sure("42", 2.0))
        .then(unsure(" 41", 0.5))
        .then(sure("41", 4.5))
        .then(unsure(" 42", 1.0))
        .then(sure("42", 2.3))
        .start()
        .await
        .unwrap()
}

const CONFIDENCE: [&str; 12] = [
    "--fan-out",
    "7",
    "--vote-by",
    r"Answer: (\d+)",
    "--confidence",
    "--measure",
    "top_k",
    "--warmup",
    "3",
    "--keep",
    "0.9",
    "--group-tokens",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn confidence_stops_the_unsure_samples_and_weighs_the_vote() {
    let server = confidence_server().await;
    let mut args = CONFIDENCE.to_vec();
    args.extend(["2", "--json"]);
    let out = fan_out(&server, &args).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json = json_of(&out);
    // Every request asked for log-probabilities, top 5 (the default).
    let requests = server.requests();
    assert_eq!(requests.len(), 7);
    for r in &requests {
        let body = r.json.as_ref().unwrap();
        assert_eq!(
            (&body["logprobs"], &body["top_logprobs"]),
            (&serde_json::json!(true), &serde_json::json!(5)),
            "{body}"
        );
    }
    let report = &json["confidence"];
    assert!(
        (report["threshold"].as_f64().unwrap() - 2.2).abs() < 1e-9,
        "{report}"
    );
    assert_eq!(report["warmup"], serde_json::json!([0, 1, 2]));
    let weights = &report["weights"];
    assert_eq!(weights["41"], 7.5, "{report}");
    assert!(
        (weights["42"].as_f64().unwrap() - 6.3).abs() < 1e-9,
        "{report}"
    );
    assert_eq!(json["vote"]["key"], "41");
    assert_eq!(json["started"], 7);
    assert_eq!(json["windows"].as_array().unwrap().len(), 2, "{json:#}");
    // The stopped samples are exactly the hesitant ones: later than the warmup, cancelled
    // after their two tokens, not voting.
    let choices = json["choices"].as_array().unwrap();
    let content = |c: &serde_json::Value| {
        c["message"]["content"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    let hesitant: Vec<u64> = (choices.iter())
        .filter(|c| content(c).starts_with("Hmm"))
        .map(|c| c["index"].as_u64().unwrap())
        .collect();
    assert_eq!(hesitant.len(), 2, "{json:#}");
    assert!(hesitant.iter().all(|i| *i >= 3), "{json:#}");
    assert_eq!(report["stopped"], serde_json::json!(hesitant), "{report}");
    for i in &hesitant {
        let c = &choices[*i as usize];
        assert_eq!(
            (&c["cancelled"], &c["finish_reason"]),
            (&serde_json::json!(true), &serde_json::Value::Null)
        );
    }
    let selected: Vec<u64> = (choices.iter())
        .filter(|c| content(c) == "Answer: 41")
        .map(|c| c["index"].as_u64().unwrap())
        .collect();
    assert_eq!(json["selected"], serde_json::json!(selected));
    // Their stalled connections were closed.
    within(
        Duration::from_secs(2),
        "the stopped samples' connections closing",
        server.wait_disconnects(2),
    )
    .await;

    // Piped, the stopped samples say `low confidence`, apart from `cancelled`, and the last
    // line says the threshold, who was stopped and the weights.
    let server = confidence_server().await;
    let mut args = CONFIDENCE.to_vec();
    args.push("2");
    let out = fan_out(&server, &args).await;
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let marked: Vec<&str> = text
        .lines()
        .filter(|l| l.ends_with("⊘ low confidence"))
        .collect();
    assert_eq!(marked.len(), 2, "{text}");
    assert!(!text.contains("⊘ cancelled"), "{text}");
    for line in marked {
        let label = line.split(']').next().unwrap_or_default();
        assert!(text.contains(&format!("{label}] Hmm maybe")), "{text}");
    }
    let summary = text.lines().last().unwrap_or_default();
    assert!(
        summary.contains("(vote: \"41\" with 2 of 4 votes counted, 7 choices)"),
        "{summary}"
    );
    assert!(
        summary.contains(
            "; 7 samples started in 2 window(s), stopped because the confidence-weighted vote was decided"
        ),
        "{summary}"
    );
    assert!(
        summary.contains("confidence: threshold 2.200, low confidence "),
        "{summary}"
    );
    assert!(
        summary.ends_with("weights \"41\" 7.500, \"42\" 6.300"),
        "{summary}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn confidence_needs_a_vote() {
    let server = confidence_server().await;
    let out = fan_out(&server, &["--fan-out", "3", "--confidence", "--json"]).await;
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("required arguments were not provided"),
        "{err}"
    );
    assert!(err.contains("<--vote|--vote-by <REGEX>>"), "{err}");
    assert_eq!(server.request_count(), 0, "nothing was sent");
}

/// Through a choicewise gateway, a choice whose upstream failed arrives as `finish_reason:
/// "error"` with `choicewise.error`: a failed choice, as it is read from the upstream
/// directly (exit 1, the message shown), not `finished: error` and exit 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateways_failed_choice_is_a_failed_choice() {
    let chunk = |index: u32,
                 delta: serde_json::Value,
                 finish: Option<&str>,
                 extra: serde_json::Value| {
        let mut c = serde_json::json!({"index": index, "delta": delta, "logprobs": null, "finish_reason": finish});
        if !extra.is_null() {
            c["choicewise"] = extra;
        }
        let chunk = serde_json::json!({"id": "chatcmpl-cw1", "object": "chat.completion.chunk",
                                       "created": 1, "model": "m", "choices": [c]});
        format!("data: {chunk}\n\n")
    };
    let body = [
        chunk(
            0,
            serde_json::json!({"role": "assistant", "content": null}),
            None,
            serde_json::Value::Null,
        ),
        chunk(
            1,
            serde_json::json!({"role": "assistant", "content": null}),
            None,
            serde_json::Value::Null,
        ),
        chunk(
            0,
            serde_json::json!({"content": "half an"}),
            None,
            serde_json::Value::Null,
        ),
        chunk(
            1,
            serde_json::json!({"content": "whole answer"}),
            None,
            serde_json::Value::Null,
        ),
        chunk(
            1,
            serde_json::json!({}),
            Some("stop"),
            serde_json::Value::Null,
        ),
        chunk(
            0,
            serde_json::json!({}),
            Some("error"),
            serde_json::json!({"error": "upstream 0: the connection closed after 120 bytes"}),
        ),
        "data: [DONE]\n\n".to_string(),
    ]
    .concat();
    let server = TestServer::builder().body(body).start().await.unwrap();
    let out = choicewise(&[
        "chat",
        "-n",
        "2",
        "--base-url",
        &server.base_url(),
        "--model",
        "m",
        "--json",
        "hi",
    ])
    .await;
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("the connection closed after 120 bytes"),
        "{stderr}"
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["choices"][1]["finish_reason"], "stop");
    assert_eq!(json["choices"][1]["message"]["content"], "whole answer");
    assert_eq!(
        json["choices"][0]["message"]["content"], "half an",
        "what came before stays"
    );
}

/// The pick is core's `Policy` over every choice the run asks for (`-n` × `--fan-out`),
/// checked before anything is sent: a vote no key could win is a usage error (exit 2).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pick_is_checked_against_its_choices_before_anything_is_sent() {
    let server = scripted(&["7"; 4]).await;
    for (args, says) in [
        (
            vec!["--vote"],
            "--vote-min: (2, the default) is more than -n × --fan-out (1): no key could win",
        ),
        (
            vec!["--vote", "--vote-min", "4", "--fan-out", "3"],
            "--vote-min: (4) is more than -n × --fan-out (3)",
        ),
        (
            vec!["--vote", "--vote-min", "5", "-n", "2", "--fan-out", "2"],
            "--vote-min: (5) is more than -n × --fan-out (4)",
        ),
    ] {
        let out = fan_out(&server, &args).await;
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?}");
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(err.contains("no key could win"), "{args:?}: {err}");
    }
    assert_eq!(server.request_count(), 0, "nothing was sent");
}

/// A windowed vote over one request's `-n` choices is planned like a fan-out: one request
/// per choice, started window by window, so the window needs no `--fan-out`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_windowed_vote_over_n_choices_sends_one_request_per_choice() {
    let server = scripted(&["7"; 4]).await;
    let out = fan_out(
        &server,
        &[
            "-n",
            "4",
            "--vote-by",
            r"Answer: (\d+)",
            "--vote-window",
            "2",
            "--json",
        ],
    )
    .await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json = json_of(&out);
    assert_eq!(json["started"], 2);
    assert_eq!(json["windows"], serde_json::json!([[0, 1]]));
    assert_eq!(json["vote"]["key"], "7");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let requests = server.requests();
    assert_eq!(requests.len(), 2, "the first window only");
    for r in &requests {
        assert_eq!(r.json.as_ref().unwrap()["n"], 1, "one choice per request");
    }
}

/// `choicewise picks record` and `report` against a scripted Chat Completions server.
mod picks {
    use std::collections::HashMap;
    use std::net::SocketAddr;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};
    use std::sync::{Arc, Mutex};

    use serde_json::{Value, json};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::{choicewise, ok, scratch};

    /// Each item's right answer and the answers of its 6 scripted samples, in the order
    /// they are asked.
    const ITEMS: [(&str, &str, [&str; 6]); 4] = [
        ("a", "1", ["1", "2", "1", "1", "3", "1"]),
        ("b", "7", ["3", "7", "7", "7", "7", "3"]),
        ("c", "5", ["5", "5", "5", "5", "5", "5"]),
        ("d", "9", ["9", "9", "4", "9", "9", "9"]),
    ];

    /// The text of sample k of item `p`: one character a token. Items `gN` (of
    /// [`graded_items`]) answer N, or N + 1 when N + k is a multiple of 3.
    fn text(p: &str, k: usize) -> String {
        if let Some(n) = p.strip_prefix('g').and_then(|n| n.parse::<usize>().ok()) {
            let a = if (n + k).is_multiple_of(3) { n + 1 } else { n };
            return format!("{p}={a}\n#### {a}");
        }
        let (_, _, answers) = ITEMS.iter().find(|i| i.0 == p).unwrap();
        format!("{p}={}\n#### {}", answers[k], answers[k])
    }

    /// 20 items `g0` .. `g19`, item `gN` answering N.
    fn graded_items(name: &str) -> String {
        let path = scratch(name);
        let lines: Vec<String> = (0..20)
            .map(|n| {
                json!({"id": format!("g{n}"), "prompt": format!("g{n}"), "answer": n.to_string()})
                    .to_string()
            })
            .collect();
        std::fs::write(&path, lines.join("\n") + "\n").unwrap();
        path.to_str().unwrap().to_string()
    }

    /// The scripted server: the k-th request for an item (its last user message) gets its
    /// sample k, streamed a token an event with `logprobs` when asked; it refuses
    /// `logprobs` (400) when told to, and fails every request for `fail` (400) while set.
    struct Server {
        addr: SocketAddr,
        requests: Arc<AtomicUsize>,
        fail: Arc<Mutex<Option<String>>>,
    }

    async fn server(refuse_logprobs: bool) -> Server {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let requests = Arc::new(AtomicUsize::new(0));
        let fail: Arc<Mutex<Option<String>>> = Arc::default();
        let next: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
        let refuse = Arc::new(AtomicBool::new(refuse_logprobs));
        let (count, failing) = (requests.clone(), fail.clone());
        tokio::spawn(async move {
            loop {
                let Ok((mut tcp, _)) = listener.accept().await else {
                    return;
                };
                let (count, failing, next, refuse) =
                    (count.clone(), failing.clone(), next.clone(), refuse.clone());
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 4096];
                    let body = loop {
                        let n = tcp.read(&mut chunk).await.unwrap();
                        if n == 0 {
                            return;
                        }
                        buf.extend_from_slice(&chunk[..n]);
                        let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
                            continue;
                        };
                        let head = String::from_utf8_lossy(&buf[..end]).to_lowercase();
                        let len: usize = head
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length:"))
                            .map_or(0, |v| v.trim().parse().unwrap());
                        if buf.len() >= end + 4 + len {
                            break buf[end + 4..end + 4 + len].to_vec();
                        }
                    };
                    count.fetch_add(1, Relaxed);
                    let req: Value = serde_json::from_slice(&body).unwrap();
                    let item = req["messages"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .rev()
                        .find(|m| m["role"] == "user")
                        .unwrap()["content"]
                        .as_str()
                        .unwrap()
                        .to_string();
                    let logprobs = req["logprobs"] == true;
                    let refused = |message: &str| {
                        let body = json!({"error": {"message": message}}).to_string();
                        format!(
                            "HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                            body.len()
                        )
                    };
                    let answer = if logprobs && refuse.load(Relaxed) {
                        refused("logprobs are not supported")
                    } else if failing.lock().unwrap().as_deref() == Some(item.as_str()) {
                        refused("this item fails")
                    } else {
                        let k = {
                            let mut next = next.lock().unwrap();
                            let k = next.entry(item.clone()).or_insert(0);
                            *k += 1;
                            *k - 1
                        };
                        let mut sse = String::new();
                        for (i, c) in text(&item, k).chars().enumerate() {
                            let t = c.to_string();
                            let mut choice =
                                json!({"index": 0, "delta": {"content": t}, "finish_reason": null});
                            if i == 0 {
                                choice["delta"]["role"] = json!("assistant");
                            }
                            if logprobs {
                                let lp = -0.1 * (k + 1) as f64;
                                choice["logprobs"] = json!({"content": [{"token": t, "logprob": lp,
                                    "top_logprobs": [{"token": t, "logprob": lp}, {"token": "x", "logprob": -2.0},
                                        {"token": "y", "logprob": -3.0}, {"token": "z", "logprob": -4.0},
                                        {"token": "w", "logprob": -5.0}]}]});
                            }
                            sse.push_str(&format!("data: {}\n\n", json!({"choices": [choice]})));
                        }
                        sse.push_str(&format!(
                            "data: {}\n\ndata: [DONE]\n\n",
                            json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
                        ));
                        format!(
                            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n{sse}"
                        )
                    };
                    let _ = tcp.write_all(answer.as_bytes()).await;
                    let _ = tcp.shutdown().await;
                });
            }
        });
        Server {
            addr,
            requests,
            fail,
        }
    }

    fn items_file(name: &str) -> String {
        let path = scratch(name);
        let mut lines = Vec::new();
        for (id, answer, _) in ITEMS {
            let line = if id == "d" {
                json!({"id": id, "messages": [{"role": "system", "content": "be brief"},
                                              {"role": "user", "content": id}], "answer": answer})
            } else {
                json!({"id": id, "prompt": id, "answer": answer})
            };
            lines.push(line.to_string());
        }
        std::fs::write(&path, lines.join("\n") + "\n").unwrap();
        path.to_str().unwrap().to_string()
    }

    async fn record(s: &Server, items: &str, out: &str, k: &str) -> std::process::Output {
        let url = format!("http://{}/v1", s.addr);
        choicewise(&[
            "picks",
            "record",
            "--input",
            items,
            "--samples",
            k,
            "--out",
            out,
            "--base-url",
            &url,
            "--model",
            "m",
            "--api-key",
            "sk-secret-test",
            "--temperature",
            "1.0",
            // One at a time: the server's k-th sample of an item is the set's sample k.
            "--concurrency",
            "1",
        ])
        .await
    }

    async fn report(dir: &str) -> Value {
        let out = choicewise(&["picks", "report", dir, "--answer", r"#### (\d+)", "--json"]).await;
        serde_json::from_slice(ok(&out)).unwrap()
    }

    fn row<'a>(out: &'a Value, name: &str) -> &'a Value {
        out["picks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == name)
            .unwrap_or_else(|| panic!("no {name} in {out}"))
    }

    fn names(out: &Value) -> Vec<String> {
        (out["picks"].as_array().unwrap().iter())
            .map(|r| r["name"].as_str().unwrap().to_string())
            .collect()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn record_resumes_after_an_interruption_and_report_scores_it() {
        let s = server(false).await;
        let items = items_file("picks-items.jsonl");
        let dir = scratch("picks-set");
        let _ = std::fs::remove_dir_all(&dir);
        let out = dir.to_str().unwrap();
        // Interrupted at item c: a and b are written, c and d not.
        *s.fail.lock().unwrap() = Some("c".into());
        let first = record(&s, &items, out, "4").await;
        assert_eq!(first.status.code(), Some(1));
        let err = String::from_utf8_lossy(&first.stderr);
        assert!(err.contains("item \"c\""), "{err}");
        assert!(!err.contains("sk-secret-test"), "the key printed: {err}");
        assert!(dir.join("traces_0.npz").exists() && dir.join("traces_1.npz").exists());
        assert!(!dir.join("traces_2.npz").exists());
        // Resumed: only c and d are asked, 4 samples each.
        *s.fail.lock().unwrap() = None;
        let before = s.requests.load(Relaxed);
        ok(&record(&s, &items, out, "4").await);
        assert_eq!(s.requests.load(Relaxed) - before, 8);
        // Nothing missing: nothing asked.
        let before = s.requests.load(Relaxed);
        ok(&record(&s, &items, out, "4").await);
        assert_eq!(s.requests.load(Relaxed) - before, 0);
        // Two more samples of each item.
        ok(&record(&s, &items, out, "6").await);
        assert_eq!(s.requests.load(Relaxed) - before, 8);

        let meta: Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("meta.json")).unwrap()).unwrap();
        assert_eq!(meta["logprobs"], true);
        assert_eq!(meta["samples_recorded"], 24);
        let vocab: Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("vocab.json")).unwrap())
                .unwrap();
        assert_eq!(vocab["0"], "<eos>");

        let r = report(out).await;
        assert_eq!(
            (r["problems"].as_u64(), r["samples"].as_u64()),
            (Some(4), Some(6))
        );
        assert_eq!(
            names(&r),
            [
                "single",
                "first-finished",
                "vote-4",
                "vote-6",
                "adaptive",
                "confidence-high",
                "confidence-low",
                "sampled-high",
                "sampled-low"
            ]
        );
        // Each confidence pick names its measure, in its row and its settings.
        assert_eq!(row(&r, "sampled-low")["measure"], "sampled");
        assert_eq!(row(&r, "confidence-low")["measure"], "top_k");
        let sampled = &row(&r, "sampled-low")["choicewise"]["confidence"];
        assert_eq!(
            (
                sampled["measure"].as_str(),
                sampled["group_tokens"].as_u64()
            ),
            (Some("sampled"), Some(4))
        );
        // Both measures' separation. Here every sample of an item is as sure as its number
        // says (sample k: -0.1 (k + 1) a token), whatever its answer.
        let sep = &r["separation"];
        assert!(
            sep["sampled"].is_number() && sep["top_k"].is_number(),
            "{sep}"
        );
        assert!(sep["use"] == "sampled" || sep["use"] == "top_k", "{sep}");
        // By hand: sample 0 is right for a, c and d; the first 4 samples' majority for all.
        // One sample is right on 19 of the 24 (a 4, b 4, c 6, d 5): its accuracy, beside the
        // first sample's.
        let single = row(&r, "single");
        assert_eq!(single["first_sample_accuracy"], 0.75, "{single}");
        assert_eq!(single["reference"]["first_sample_accuracy"], 0.75);
        assert_eq!(single["accuracy"], 19.0 / 24.0, "{single}");
        assert_eq!(single["reference"]["accuracy"], 19.0 / 24.0);
        assert_eq!(
            single["sample_accuracy_range"],
            json!([0.75, 1.0]),
            "{single}"
        );
        let interval = single["accuracy_interval"].as_array().unwrap();
        assert!(interval[0].as_f64().unwrap() < 19.0 / 24.0, "{single}");
        assert_eq!(row(&r, "vote-4")["accuracy"], 1.0);
        assert_eq!(row(&r, "vote-4")["reference"]["accuracy"], 1.0);
        assert_eq!(row(&r, "vote-4")["choicewise"]["vote_by"], r"#### (\d+)");
        // The tokens of single: each item's sample 0, one character a token ("a=1\n#### 1").
        assert_eq!(row(&r, "single")["tokens"], 4 * 10);
        for name in names(&r) {
            assert_eq!(row(&r, &name)["failed"], 0, "{name}: {r}");
        }
        // The plain majority of all 6: a 1 (4), b 7 (4), c 5, d 9 (5).
        assert_eq!(r["majority"]["accuracy"], 1.0);
        // The recommendation: the cheapest pick within 1 point of the best vote (vote-4,
        // 100%), so a pick that is always right.
        let rec = &r["recommendation"];
        assert_eq!(rec["accuracy"], 1.0, "{r}");
        let cheapest = (r["picks"].as_array().unwrap().iter())
            .filter(|p| p["accuracy"] == 1.0)
            .map(|p| p["tokens"].as_u64().unwrap())
            .min()
            .unwrap();
        assert_eq!(row(&r, rec["pick"].as_str().unwrap())["tokens"], cheapest);
        let ratio = cheapest as f64 / 40.0;
        assert!((rec["tokens_vs_single"].as_f64().unwrap() - ratio).abs() < 1e-9);
        // The block that deploys it passes `choicewise serve --check`.
        let block = rec["config"].as_str().unwrap();
        assert!(block.starts_with("[models.choicewise]\n"), "{r}");
        // It is the recommended row's own settings, whichever pick that is: a live
        // first-finished may be right on every item of so small a set, and be the cheapest.
        let recommended = &row(&r, rec["pick"].as_str().unwrap())["choicewise"];
        for key in ["samples", "select"] {
            let line = format!("{key} = {}\n", recommended[key]);
            assert!(block.contains(&line), "{line:?} not in {block}\n{r}");
        }
        if recommended["select"] == "vote" {
            assert_eq!(recommended["vote_by"], r"#### (\d+)", "{r}");
            assert!(block.contains("vote_by = \"#### (\\\\d+)\"\n"), "{block}");
        }
        let config = scratch("picks-recommended.toml");
        std::fs::write(
            &config,
            format!(
                "[[models]]\nname = \"recommended\"\n{block}\n[[models.upstreams]]\napi = \"chat\"\nbase_url = \"http://127.0.0.1:9/v1\"\n"
            ),
        )
        .unwrap();
        let check = choicewise(&["serve", "--check", "--config", config.to_str().unwrap()]).await;
        let said = String::from_utf8_lossy(&check.stdout).to_string()
            + &String::from_utf8_lossy(&check.stderr);
        assert_eq!(check.status.code(), Some(0), "{block}\n{said}");
        // Four more reports of the same set, at once (each replays it through a gateway of its
        // own, mostly waiting on its pace): giving up 30 points for tokens; at the recorded
        // pace; accuracy first; the table.
        let answer = r"#### (\d+)";
        let within_30 = [
            "picks", "report", out, "--answer", answer, "--json", "--within", "30",
        ];
        let at_pace = [
            "picks",
            "report",
            out,
            "--answer",
            answer,
            "--json",
            "--recorded-pace",
        ];
        let accuracy_first = [
            "picks", "report", out, "--answer", answer, "--json", "--prefer", "accuracy",
            "--within", "30",
        ];
        let as_table = ["picks", "report", out, "--answer", answer];
        let (cheap, paced, sure, table) = tokio::join!(
            choicewise(&within_30),
            choicewise(&at_pace),
            choicewise(&accuracy_first),
            choicewise(&as_table),
        );
        // Giving up 30 points for tokens: one sample (75%), which needs no configuration.
        let cheap: Value = serde_json::from_slice(ok(&cheap)).unwrap();
        assert_eq!(cheap["recommendation"]["pick"], "single", "{cheap}");
        assert_eq!(cheap["recommendation"]["config"], "");
        // Each sample's times were kept: replayed at their pace, the answers are the same.
        let paced: Value = serde_json::from_slice(ok(&paced)).unwrap();
        assert_eq!(
            paced["recorded_pace"]["samples"], 24,
            "{}",
            paced["recorded_pace"]
        );
        assert!(paced["recorded_pace"]["first_token_ms"].as_f64().unwrap() >= 0.0);
        assert_eq!(row(&paced, "vote-4")["accuracy"], 1.0);
        // Accuracy first: a pick that is always right, the fewest tokens among those.
        let sure: Value = serde_json::from_slice(ok(&sure)).unwrap();
        assert_eq!(sure["recommendation"]["accuracy"], 1.0, "{sure}");

        // The table and the recommendation's line.
        let text = String::from_utf8_lossy(ok(&table)).to_string();
        assert!(
            text.contains("| vote-4 | 100.00% [51.0, 100.0] |"),
            "{text}"
        );
        // Its own run: the pick may differ (the gateway's tokens vary), its accuracy not.
        assert!(text.contains("Recommendation: "), "{text}");
        assert!(text.contains("(100.00% right, "), "{text}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn items_that_share_an_id_or_a_prompt_are_refused_before_any_request() {
        let s = server(false).await;
        let path = scratch("picks-items-repeated.jsonl");
        let lines = [
            json!({"id": "a", "prompt": "a", "answer": "1"}),
            json!({"id": "b", "prompt": "b", "answer": "7"}),
            json!({"id": "a", "prompt": "c", "answer": "5"}),
            json!({"id": "x", "prompt": "a", "answer": "1"}),
            json!({"id": "y", "prompt": "b", "answer": "7"}),
        ];
        let text: Vec<String> = lines.iter().map(Value::to_string).collect();
        std::fs::write(&path, text.join("\n")).unwrap();
        let dir = scratch("picks-set-repeated");
        let _ = std::fs::remove_dir_all(&dir);
        let out = record(&s, path.to_str().unwrap(), dir.to_str().unwrap(), "2").await;
        assert_eq!(out.status.code(), Some(2));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("3 repeated"), "{err}");
        assert!(err.contains("id \"a\" on lines 1, 3"), "{err}");
        assert!(
            err.contains("one prompt on lines 1, 4 (ids \"a\", \"x\")"),
            "{err}"
        );
        assert!(
            err.contains("one prompt on lines 2, 5 (ids \"b\", \"y\")"),
            "{err}"
        );
        assert_eq!(s.requests.load(Relaxed), 0, "nothing is asked");
        assert!(!dir.join("traces_0.npz").exists());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_grader_command_decides_what_is_right() {
        let s = server(false).await;
        let items = graded_items("picks-items-graded.jsonl");
        let dir = scratch("picks-set-graded");
        let _ = std::fs::remove_dir_all(&dir);
        let out = dir.to_str().unwrap();
        ok(&record(&s, &items, out, "3").await);
        // A grader of the kind a pattern cannot be: a script that reads the sample's text
        // on its input and the item's answer from the environment.
        let grader = scratch("picks-grader.sh");
        std::fs::write(
            &grader,
            "#!/bin/sh\ngot=$(sed -n 's/^#### //p')\n[ \"$got\" = \"$CHOICEWISE_ANSWER\" ]\n",
        )
        .unwrap();
        let report = |grade: Option<String>| async move {
            let mut args = vec!["picks", "report", out, "--answer", r"#### (\d+)", "--json"];
            if let Some(g) = &grade {
                args.extend(["--grade", g.as_str()]);
            }
            let r = choicewise(&args).await;
            serde_json::from_slice::<Value>(ok(&r)).unwrap()
        };
        // The three reports at once (each replays the set through a gateway of its own).
        let (by_pattern, graded, none) = tokio::join!(
            report(None),
            report(Some(format!("sh {}", grader.display()))),
            report(Some("cat > /dev/null; exit 1".into())),
        );
        // Sample 0 of item N is wrong when N is a multiple of 3: 7 of 20; sample k when N + k
        // is: a third of each item's samples.
        let single = row(&by_pattern, "single");
        assert_eq!(single["first_sample_accuracy"], 0.65, "{single}");
        assert!(
            (single["accuracy"].as_f64().unwrap() - 2.0 / 3.0).abs() < 1e-9,
            "{single}"
        );
        for name in names(&by_pattern) {
            assert_eq!(
                row(&graded, &name)["accuracy"],
                row(&by_pattern, &name)["accuracy"],
                "{name}: the script grades as the pattern does"
            );
            assert_eq!(
                row(&graded, &name)["reference"]["accuracy"],
                row(&by_pattern, &name)["reference"]["accuracy"],
                "{name}"
            );
        }
        // A grader that finds nothing right: nothing is.
        for name in names(&none) {
            assert_eq!(row(&none, &name)["accuracy"], 0.0, "{name}");
        }
    }

    /// A `.npy` (version 1) of `descr` and `shape`, its header only.
    fn npy_head(descr: &str, shape: &str) -> Vec<u8> {
        let mut header =
            format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
        while (10 + header.len() + 1) % 64 != 0 {
            header.push(' ');
        }
        header.push('\n');
        let mut out = b"\x93NUMPY\x01\x00".to_vec();
        out.extend((header.len() as u16).to_le_bytes());
        out.extend(header.as_bytes());
        out
    }

    /// A set whose one `.npz` holds one problem's arrays, then `tokens.npy` of `shape` and
    /// `zeros` zero bytes of data (deflated: a thousandth of their size).
    fn hostile_set(name: &str, shape: &str, zeros: usize) -> std::path::PathBuf {
        use std::io::Write;
        let dir = scratch(name);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("vocab.json"), r#"{"0": "<eos>", "1": "a"}"#).unwrap();
        let file = std::fs::File::create(dir.join("traces_0.npz")).unwrap();
        let mut zip = zip::ZipWriter::new(file);
        let options = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Deflated);
        let utf32 = |c: char| (c as u32).to_le_bytes().to_vec();
        for (array, descr, body) in [
            ("problem_ids", "<i4", 0i32.to_le_bytes().to_vec()),
            ("levels", "<i2", 0i16.to_le_bytes().to_vec()),
            ("prompts", "<U1", utf32('p')),
            ("answers", "<U1", utf32('1')),
        ] {
            zip.start_file(format!("{array}.npy"), options).unwrap();
            zip.write_all(&npy_head(descr, "(1,)")).unwrap();
            zip.write_all(&body).unwrap();
        }
        zip.start_file("tokens.npy", options).unwrap();
        zip.write_all(&npy_head("|u1", shape)).unwrap();
        let chunk = vec![0u8; 1 << 20];
        for _ in 0..zeros >> 20 {
            zip.write_all(&chunk).unwrap();
        }
        zip.finish().unwrap();
        dir
    }

    /// `choicewise ARGS`, with its peak resident memory in KiB (its own, from `wait4`).
    // The child is reaped by `wait4`, which `Child::wait` cannot do with its usage.
    #[allow(clippy::zombie_processes)]
    fn peak_of(args: &[&str]) -> (std::process::ExitStatus, String, i64) {
        use std::os::unix::process::ExitStatusExt;
        let child = std::process::Command::new(env!("CARGO_BIN_EXE_choicewise"))
            .args(args)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(scratch("peak-stderr")).unwrap())
            .spawn()
            .unwrap();
        let mut status = 0;
        // SAFETY: `rusage` is plain data that `wait4` fills; the pid is our child's.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        let pid = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut usage) };
        assert_eq!(pid, child.id() as i32);
        let stderr = std::fs::read_to_string(scratch("peak-stderr")).unwrap();
        (
            std::process::ExitStatus::from_raw(status),
            stderr,
            usage.ru_maxrss,
        )
    }

    #[test]
    fn a_zip_bomb_is_refused_under_100_mib_and_wrapped_dimensions_are_an_error() {
        // 128 MiB of token ids in about 128 KiB.
        let bomb = hostile_set("picks-bomb", "(1, 1, 134217728)", 128 << 20);
        let size = std::fs::metadata(bomb.join("traces_0.npz")).unwrap().len();
        assert!(size < 1 << 20, "{size} bytes");
        let (status, err, peak_kib) =
            peak_of(&["picks", "report", bomb.to_str().unwrap(), "--answer", "(a)"]);
        assert_eq!(status.code(), Some(2), "{err}");
        assert!(err.contains("a damaged or hostile file"), "{err}");
        assert!(peak_kib < 100 << 10, "{peak_kib} KiB at most resident");
        // Dimensions whose product wraps: an error, not a panic.
        let wrapped = hostile_set("picks-wrapped", "(4294967296, 4294967296, 4294967296)", 0);
        let (status, err, _) = peak_of(&[
            "picks",
            "report",
            wrapped.to_str().unwrap(),
            "--answer",
            "(a)",
        ]);
        assert_eq!(status.code(), Some(2), "{err}");
        assert!(err.contains("number of elements overflows"), "{err}");
        assert!(!err.contains("panicked"), "{err}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_answer_pattern_that_matches_no_sample_is_an_error() {
        let s = server(false).await;
        let items = items_file("picks-items-nomatch.jsonl");
        let dir = scratch("picks-set-nomatch");
        let _ = std::fs::remove_dir_all(&dir);
        let out = dir.to_str().unwrap();
        ok(&record(&s, &items, out, "2").await);
        let r = choicewise(&["picks", "report", out, "--answer", r"ANSWER: (\d+)"]).await;
        assert_eq!(r.status.code(), Some(2));
        let err = String::from_utf8_lossy(&r.stderr);
        assert!(err.contains("matched 0 of the 8 samples"), "{err}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_server_that_refuses_logprobs_is_recorded_without_them() {
        let s = server(true).await;
        let items = items_file("picks-items-nolp.jsonl");
        let dir = scratch("picks-set-nolp");
        let _ = std::fs::remove_dir_all(&dir);
        let out = dir.to_str().unwrap();
        let rec = record(&s, &items, out, "4").await;
        ok(&rec);
        assert!(String::from_utf8_lossy(&rec.stderr).contains("refused logprobs"));
        let meta: Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("meta.json")).unwrap()).unwrap();
        assert_eq!(meta["logprobs"], false);
        let r = report(out).await;
        // No confidence picks without log-probabilities; the rest as above.
        assert_eq!(
            names(&r),
            ["single", "first-finished", "vote-4", "adaptive"]
        );
        assert_eq!(row(&r, "single")["first_sample_accuracy"], 0.75);
        assert_eq!(row(&r, "vote-4")["accuracy"], 1.0);
        assert_eq!(r["logprobs"], false);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_calls_gemini_with_n_as_its_candidates() {
    let record = |candidates: serde_json::Value| {
        format!(
            "data: {}\r\n\r\n",
            serde_json::json!({"candidates": candidates})
        )
    };
    let body = [
        record(serde_json::json!([{"index": 1, "content": {"parts": [{"text": "Two"}]}}])),
        record(serde_json::json!([{"index": 0, "content": {"parts": [{"text": "One"}]}, "finishReason": "STOP"},
            {"index": 1, "finishReason": "MAX_TOKENS"}])),
    ]
    .concat();
    let server = TestServer::builder()
        .body(body)
        .api_key("g")
        .start()
        .await
        .unwrap();
    let url = format!("{}beta", server.base_url());
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_choicewise"))
        .args([
            "chat",
            "--api",
            "gemini",
            "--base-url",
            &url,
            "-n",
            "2",
            "--json",
            "hi",
        ])
        .env("GEMINI_API_KEY", "g")
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json = json_of(&out);
    let choices: Vec<_> = (json["choices"].as_array().unwrap().iter())
        .map(|c| {
            (
                c["message"]["content"].as_str(),
                c["finish_reason"].as_str(),
            )
        })
        .collect();
    assert_eq!(
        choices,
        [(Some("One"), Some("stop")), (Some("Two"), Some("length"))]
    );
    let r = &server.requests()[0];
    assert_eq!(
        r.path,
        "/v1beta/models/gemini-2.5-flash:streamGenerateContent"
    );
    assert_eq!(r.header("x-goog-api-key"), Some("g"));
    assert_eq!(
        r.json.as_ref().unwrap()["generationConfig"]["candidateCount"],
        2
    );
}

/// `--api bedrock` signs each request with the environment's AWS credentials for
/// `AWS_REGION`, writes it in Converse's shape and reads the event stream: two samples of
/// `--fan-out 2` over a scripted Bedrock that checks every signature with botocore.
#[tokio::test]
async fn bedrock_requests_are_signed_with_the_environments_credentials() {
    use choicewise_test_support::{BEDROCK_ACCESS_KEY, BEDROCK_SECRET, BedrockUpstream};
    let script = serde_json::json!({"answers": [
        {"text": "Paris.", "writes": "bytes:1-9"},
        {"text": "It is Paris.", "writes": "bytes:1-9"}
    ]});
    let Some(bedrock) = BedrockUpstream::start(&script, Some("FwoGZXIvYXdzCLITOKEN")) else {
        return;
    };
    let run = |secret: &'static str| {
        tokio::process::Command::new(env!("CARGO_BIN_EXE_choicewise"))
            .args(["chat", "--api", "bedrock", "--base-url", bedrock.url()])
            .args(["--model", "anthropic.claude-3-5-haiku-20241022-v1:0"])
            .args(["--fan-out", "2", "--system", "Be brief.", "--json"])
            .arg("The capital of France?")
            .env("AWS_ACCESS_KEY_ID", BEDROCK_ACCESS_KEY)
            .env("AWS_SECRET_ACCESS_KEY", secret)
            .env("AWS_SESSION_TOKEN", "FwoGZXIvYXdzCLITOKEN")
            .env("AWS_REGION", "us-east-1")
            .env_remove("AWS_BEARER_TOKEN_BEDROCK")
            .stdin(std::process::Stdio::null())
            .output()
    };
    let out = run(BEDROCK_SECRET).await.unwrap();
    let json = json_of(&out);
    let mut contents: Vec<&str> = (json["choices"].as_array().unwrap().iter())
        .map(|c| c["message"]["content"].as_str().unwrap())
        .collect();
    contents.sort_unstable();
    assert_eq!(contents, ["It is Paris.", "Paris."]);
    let requests = bedrock.requests();
    assert_eq!(requests.len(), 2);
    for r in &requests {
        assert_eq!(r["signature"], "ok", "{r}");
        assert_eq!(
            r["body"]["system"],
            serde_json::json!([{"text": "Be brief."}])
        );
        assert!(r["body"].get("model").is_none(), "{r}");
    }
    // A wrong secret: the upstream's 403, named, and the secret nowhere.
    let out = run("not-the-secret").await.unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("403"), "{err}");
    assert!(!err.contains("not-the-secret"), "{err}");
}
