//! `choicewise serve` as a process: its start, and its shutdown on SIGTERM.

use std::process::Stdio;
use std::time::{Duration, Instant};

use choicewise_test_support::{RedisServer, within};
use choicewise_testserver::{TestServer, answer};
use futures::StreamExt;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::nginx;

const LIMIT: Duration = Duration::from_secs(20);

/// A streamed request's output choices: `(text, finish_reason, choicewise.error)`, whether
/// `[DONE]` ended it, and the code of the error event before it, if there was one.
async fn stream(
    base: String,
    model: &str,
) -> (
    Vec<(String, Option<String>, Option<String>)>,
    bool,
    Option<String>,
) {
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
    let mut error = None;
    for data in text.split("\n\n").filter_map(|e| e.strip_prefix("data: ")) {
        if data == "[DONE]" {
            done = true;
            continue;
        }
        let chunk: Value = serde_json::from_str(data).unwrap();
        if let Some(code) = chunk["error"]["code"].as_str() {
            error = Some(code.to_string());
            continue;
        }
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
    (choices, done, error)
}

/// A `choicewise serve` process on a free port of 127.0.0.1 with this configuration (without
/// `listen`): the process, its base URL, and the rest of its stderr.
async fn serve(
    name: &str,
    toml: &str,
) -> (
    tokio::process::Child,
    String,
    tokio::io::Lines<BufReader<tokio::process::ChildStderr>>,
) {
    serve_with(name, toml, &[]).await
}

/// [`serve`], with more arguments for the command.
async fn serve_with(
    name: &str,
    toml: &str,
    more: &[&str],
) -> (
    tokio::process::Child,
    String,
    tokio::io::Lines<BufReader<tokio::process::ChildStderr>>,
) {
    let dir = std::env::temp_dir().join(format!("choicewise-serve-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join(format!("{name}.toml"));
    std::fs::write(&config, format!("listen = \"127.0.0.1:0\"\n{toml}")).unwrap();
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_choicewise"))
        .args(["serve", "--config", config.to_str().unwrap()])
        .args(more)
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
    (child, base, stderr)
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
    let (mut child, base, mut stderr) = serve(
        "grace",
        &format!(
            "shutdown_grace_s = 3\n\
             [[models]]\nname = \"slow\"\n[[models.upstreams]]\napi = \"chat\"\nbase_url = \"{}\"\n\
             [[models]]\nname = \"stalled\"\n[[models.upstreams]]\napi = \"chat\"\nbase_url = \"{}\"\n",
            slow.base_url(),
            stalled.base_url()
        ),
    )
    .await;
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
    let (choices, done, error) = within(LIMIT, "the slow answer", slow_answer).await.unwrap();
    assert!(done);
    assert_eq!(error, None);
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
    let (choices, done, error) = within(LIMIT, "the stalled answer", stalled_answer)
        .await
        .unwrap();
    let ended = signalled.elapsed();
    assert!(done, "[DONE] still ends the answer");
    // No choice finished: the error event the SDKs raise names the shutdown.
    assert_eq!(error.as_deref(), Some("shut_down"));
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
    assert!(
        said.contains("shutting down: no new connections; waiting up to 3s for 2 open requests\n"),
        "{said}"
    );
    assert!(
        said.contains("grace period over: ending 1 open request now\n"),
        "{said}"
    );
    assert!(said.ends_with("stopped\n"), "{said}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_without_open_requests_says_it_shuts_down_and_stopped() {
    let (mut child, base, mut stderr) = serve(
        "idle",
        "shutdown_grace_s = 30\n[[models]]\nname = \"m\"\n[[models.upstreams]]\n\
         api = \"chat\"\nbase_url = \"http://127.0.0.1:9/v1\"\n",
    )
    .await;
    // Serving: a request answered, over and gone before the signal.
    let health = reqwest::get(format!("{base}/healthz")).await.unwrap();
    assert_eq!(health.status(), 200);
    drop(health);
    let signalled = Instant::now();
    let kill = std::process::Command::new("kill")
        .args(["-TERM", &child.id().unwrap().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let status = within(LIMIT, "the exit", child.wait()).await.unwrap();
    assert_eq!(status.code(), Some(0));
    // Nothing to wait for: not the 30 s of grace.
    assert!(
        signalled.elapsed() < Duration::from_secs(10),
        "{:?}",
        signalled.elapsed()
    );
    let mut said = Vec::new();
    while let Ok(Some(line)) = stderr.next_line().await {
        said.push(line);
    }
    let shutting = said
        .iter()
        .position(|l| l == "shutting down: no new connections, no open request");
    assert!(shutting.is_some(), "{said:?}");
    assert_eq!(said.last().map(String::as_str), Some("stopped"), "{said:?}");
}

/// nginx (the Debian package; CI installs it) in front of two `choicewise serve` processes,
/// buffering off, as docs/gateway.md shows: streamed n = 3 answers come through whole, spread
/// over both gateways, and chunks pass as they come. Ignored by a plain `cargo test`; it fails
/// rather than passes when nginx is missing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_connection_is_logged_as_json() {
    let upstream = TestServer::builder().start().await.unwrap();
    let (_child, base, mut stderr) = serve_with(
        "log",
        &format!(
            "[limits]\nmax_connections = 1\n\
             [[models]]\nname = \"m\"\n[[models.upstreams]]\napi = \"chat\"\nbase_url = \"{}\"\n",
            upstream.base_url()
        ),
        &["--log-format", "json"],
    )
    .await;
    let addr = base.trim_start_matches("http://").to_string();
    let _held = tokio::net::TcpStream::connect(&addr).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let _refused = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let line = within(LIMIT, "the refusal's log line", async {
        loop {
            let line = stderr.next_line().await.unwrap().unwrap();
            if line.contains("refused a connection") {
                return line;
            }
        }
    })
    .await;
    let entry: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!(entry["level"], "WARN", "{line}");
    assert_eq!(entry["fields"]["max_connections"], 1, "{line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_base_url_without_v1_is_named_at_start() {
    let upstream = TestServer::builder().start().await.unwrap();
    let bare = upstream.base_url().trim_end_matches("/v1").to_string();
    let (_child, _base, mut stderr) = serve(
        "v1",
        &format!(
            "[[models]]\nname = \"m\"\n[[models.upstreams]]\napi = \"chat\"\nbase_url = \"{bare}\"\n"
        ),
    )
    .await;
    let line = within(LIMIT, "the /v1 warning", async {
        loop {
            let line = stderr.next_line().await.unwrap().unwrap();
            if line.contains("lacks /v1") {
                return line;
            }
        }
    })
    .await;
    assert!(line.contains("add /v1 to base_url"), "{line}");
    assert!(line.contains(&upstream.addr().to_string()), "{line}");
}

/// A gateway whose stderr's reader is gone (a log collector that died) still answers whole:
/// a log line that cannot be written is lost, not a panic that cuts the answer it was
/// written for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_whose_stderr_is_closed_still_answers_whole() {
    let upstream = TestServer::builder()
        .fixture("demo.sse")
        .start()
        .await
        .unwrap();
    let toml = format!(
        "[[models]]\nname = \"whole\"\n[[models.upstreams]]\napi = \"chat\"\nbase_url = \"{}\"\n",
        upstream.base_url()
    );
    let (_child, base, stderr) = serve("closed-stderr", &toml).await;
    // The listening line was read: nobody reads stderr any more.
    drop(stderr);
    let client = reqwest::Client::new();
    for _ in 0..3 {
        let response = within(
            LIMIT,
            "an answer",
            client
                .post(format!("{base}/v1/chat/completions"))
                .json(&json!({"model": "whole", "n": 3, "stream": true,
                              "messages": [{"role": "user", "content": "hi"}]}))
                .send(),
        )
        .await
        .unwrap();
        assert_eq!(response.status(), 200);
        let text = within(LIMIT, "the whole answer", response.text())
            .await
            .expect("the answer's body ends well");
        assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs nginx on the PATH (CI installs it: apt-get install nginx-light)"]
async fn nginx_in_front_of_two_gateways_streams_n_3() {
    let whole = TestServer::builder()
        .fixture("demo.sse")
        .start()
        .await
        .unwrap();
    let stalled = TestServer::builder()
        .fixture("demo.sse")
        .stall_after_events(4)
        .start()
        .await
        .unwrap();
    let toml = format!(
        "[[models]]\nname = \"whole\"\n[[models.upstreams]]\napi = \"chat\"\nbase_url = \"{}\"\n\
         [[models]]\nname = \"stalled\"\n[[models.upstreams]]\napi = \"chat\"\nbase_url = \"{}\"\n",
        whole.base_url(),
        stalled.base_url()
    );
    let (_a, base_a, _) = serve("lb-a", &toml).await;
    let (_b, base_b, _) = serve("lb-b", &toml).await;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = std::env::temp_dir().join(format!("choicewise-nginx-{}", std::process::id()));
    let host = |base: &str| base.trim_start_matches("http://").to_string();
    let servers = [host(&base_a), host(&base_b)];
    let _nginx = nginx::start(&dir, port, &servers, "proxy_set_header Host localhost;").await;
    let front = format!("http://127.0.0.1:{port}");

    let client = reqwest::Client::new();
    let ask = |model: &str| {
        client
            .post(format!("{front}/v1/chat/completions"))
            .json(&json!({"model": model, "n": 3, "stream": true,
                          "messages": [{"role": "user", "content": "hi"}]}))
            .send()
    };
    for _ in 0..6 {
        let response = within(LIMIT, "an answer through nginx", ask("whole"))
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        let text = response.text().await.unwrap();
        assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
        let mut finishes = [None, None, None];
        for data in text.split("\n\n").filter_map(|e| e.strip_prefix("data: ")) {
            let Ok(chunk) = serde_json::from_str::<Value>(data) else {
                continue;
            };
            for c in chunk["choices"].as_array().unwrap() {
                if let Some(f) = c["finish_reason"].as_str() {
                    finishes[c["index"].as_u64().unwrap() as usize] = Some(f.to_string());
                }
            }
        }
        assert!(
            finishes
                .iter()
                .all(|f| matches!(f.as_deref(), Some("stop" | "tool_calls"))),
            "{finishes:?}"
        );
    }
    // Both gateways served: nginx spread the requests.
    for base in [&base_a, &base_b] {
        let metrics = reqwest::get(format!("{base}/metrics"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(
            metrics.contains(
                "choicewise_requests_total{model=\"whole\",status=\"200\",api=\"chat\"} 3"
            ),
            "{base}: {metrics}"
        );
    }
    // An answer whose upstream stalls after its first events: those chunks arrive through
    // nginx while it stalls (nothing holds them back).
    let response = within(LIMIT, "the stalled answer's headers", ask("stalled"))
        .await
        .unwrap();
    let mut body = response.bytes_stream();
    let first = within(
        Duration::from_secs(5),
        "the first chunk through nginx",
        body.next(),
    )
    .await
    .unwrap()
    .unwrap();
    assert!(first.starts_with(b"data: "), "{first:?}");
    drop(body);
    let _ = std::fs::remove_dir_all(dir);
}

/// `serve --check` on this configuration file: its exit status, stdout and stderr.
fn check(config: &std::path::Path, env: &[(&str, &str)], more: &[&str]) -> (i32, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_choicewise"))
        .args(["serve", "--config", config.to_str().unwrap(), "--check"])
        .args(more)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

/// A file of the test's own temporary directory holding `text`.
fn config_file(name: &str, text: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("choicewise-check-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn check_prints_what_it_would_serve_and_exits_0_without_binding_or_calling_upstreams() {
    // A port taken, and an upstream that would see any connection.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let upstream = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    upstream.set_nonblocking(true).unwrap();
    let config = config_file(
        "check-ok.toml",
        &format!(
            "[auth]\nkeys_env = \"CHECK_KEYS\"\n[[models]]\nname = \"deepconf\"\n\
             [models.choicewise]\nselect = \"vote\"\nsamples = 3\n[models.choicewise.confidence]\nkeep = 0.9\n\
             [[models.upstreams]]\napi = \"chat\"\nbase_url = \"http://{}\"\nmodel = \"smollm2\"\n\
             [[models.upstreams]]\napi = \"anthropic\"\nbase_url = \"https://u:pw@api.example/v1\"\n\
             api_key_env = \"CHECK_UPSTREAM_KEY\"\n",
            upstream.local_addr().unwrap()
        ),
    );
    let env = [
        ("CHECK_KEYS", "ck-secret-1"),
        ("CHECK_UPSTREAM_KEY", "sk-secret-2"),
    ];
    let listen = taken.local_addr().unwrap().to_string();
    let (code, out, err) = check(&config, &env, &["--listen", &listen]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.starts_with(&format!("listen {listen}\n")), "{out}");
    assert!(out.contains("auth: client keys from $CHECK_KEYS"), "{out}");
    assert!(
        out.contains(
            "model \"deepconf\": pick select = \"vote\", confidence = {\"keep\":0.9}, samples = 3"
        ),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "  upstream 1: chat http://{}, model smollm2, n native, no key",
            upstream.local_addr().unwrap()
        )),
        "{out}"
    );
    assert!(
        out.contains("  upstream 2: anthropic https://u:***@api.example/v1, model deepconf, n fan-out, key from $CHECK_UPSTREAM_KEY"),
        "{out}"
    );
    // The default warmup (8) over 3 samples stops no sample: said.
    assert!(
        out.contains("warning: model \"deepconf\", [models.choicewise]: confidence.warmup (8, the default) is not below samples (3)"),
        "{out}"
    );
    assert!(
        out.ends_with("check-ok.toml: the configuration is ok, 1 warning\n"),
        "{out}"
    );
    for secret in ["ck-secret-1", "sk-secret-2", "pw"] {
        assert!(
            !out.contains(secret) && !err.contains(secret),
            "{secret}: {out}{err}"
        );
    }
    assert!(
        matches!(upstream.accept(), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "the upstream was contacted"
    );
}

/// `--check` without `--connect` reaches no service: a configuration whose keys live in the
/// records database (`[admin]`, `[auth]`, `[records]`) leaves no database, no lock file,
/// after it (the keys' store is watched only by a gateway made to serve).
#[test]
fn check_alone_makes_no_database() {
    let dir = std::env::temp_dir().join(format!("choicewise-no-reach-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let db = dir.join("records.db");
    let config = config_file(
        "no-reach.toml",
        &format!(
            "[admin]\nkey_env = \"OPERATOR\"\n[console]\nenabled = true\n[auth]\n\
             [records]\nurl = \"sqlite://{}\"\n\
             [[models]]\nname = \"m\"\n[[models.upstreams]]\napi = \"chat\"\nbase_url = \"http://127.0.0.1:9/v1\"\n",
            db.display()
        ),
    );
    for _ in 0..3 {
        let (code, out, err) = check(&config, &[("OPERATOR", "sk-operator")], &[]);
        assert_eq!(code, 0, "{out}{err}");
        assert!(out.contains("console: at /console"), "{out}");
    }
    let left: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "{left:?}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn check_connect_reaches_the_records_and_redis_and_says_what_it_found() {
    let dir = std::env::temp_dir().join(format!("choicewise-reach-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let db = dir.join("records.db");
    let (refused, _held) = choicewise_test_support::refusing();
    let redis_port = refused
        .trim_start_matches("http://127.0.0.1:")
        .trim_end_matches("/v1");
    let models = "[[models]]\nname = \"m\"\n[[models.upstreams]]\napi = \"chat\"\n\
                  base_url = \"http://127.0.0.1:9/v1\"\n";
    // The records database answers; nothing answers on Redis's port.
    let config = config_file(
        "reach.toml",
        &format!(
            "[records]\nurl = \"sqlite://{}\"\n[state]\nredis_url = \"redis://:hunter2@127.0.0.1:{redis_port}\"\n{models}",
            db.display()
        ),
    );
    let (code, out, err) = check(&config, &[], &["--connect"]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        out.contains(&format!(
            "records: reached sqlite://{}: 0 requests on record",
            db.display()
        )),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "state: not reached: redis://:***@127.0.0.1:{redis_port}"
        )),
        "{out}"
    );
    assert!(err.contains("did not answer"), "{err}");
    assert!(!format!("{out}{err}").contains("hunter2"), "{out}{err}");
    // Without Redis, it exits 0.
    let config = config_file(
        "reach-ok.toml",
        &format!("[records]\nurl = \"sqlite://{}\"\n{models}", db.display()),
    );
    let (code, out, err) = check(&config, &[], &["--connect"]);
    assert_eq!(code, 0, "{out}{err}");
    // --connect alone is refused: it only adds to --check.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_choicewise"))
        .args(["serve", "--config", config.to_str().unwrap(), "--connect"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn check_names_the_file_and_exits_2_where_serve_would_not_start() {
    let upstream = "[[models.upstreams]]\napi = \"chat\"\nbase_url = \"http://127.0.0.1:9/v1\"\n";
    for (name, text, env, more, says) in [
        (
            "unknown-key.toml",
            format!(
                "[auth]\nkeys_env = \"K\"\nallowed_origins = []\n[[models]]\nname = \"m\"\n{upstream}"
            ),
            &[("K", "k")][..],
            &[][..],
            "unknown field `allowed_origins`",
        ),
        (
            "unset-key.toml",
            format!("[[models]]\nname = \"m\"\n{upstream}api_key_env = \"CHECK_UNSET_VARIABLE\"\n"),
            &[][..],
            &[][..],
            "model \"m\", upstream 1: the environment variable CHECK_UNSET_VARIABLE is not set",
        ),
        (
            "unset-keys.toml",
            format!(
                "[auth]\nkeys_env = \"CHECK_UNSET_KEYS\"\n[[models]]\nname = \"m\"\n{upstream}"
            ),
            &[][..],
            &[][..],
            "[auth] keys_env: the environment variable CHECK_UNSET_KEYS is not set",
        ),
        (
            "bad-pick.toml",
            format!(
                "[[models]]\nname = \"m\"\n[models.choicewise]\nwindow = 2\nselect = \"first_token\"\nsamples = 2\n{upstream}"
            ),
            &[][..],
            &[][..],
            "model \"m\", [models.choicewise]: \"choicewise.window\" goes with",
        ),
        (
            "duplicate-key-name.toml",
            format!(
                "[[auth.keys]]\nname = \"team-a\"\nkey_env = \"K\"\n[[auth.keys]]\nname = \"team-a\"\nkey_env = \"K2\"\n[[models]]\nname = \"m\"\n{upstream}"
            ),
            &[("K", "k"), ("K2", "k2")][..],
            &[][..],
            "[[auth.keys]] 2 (\"team-a\"): the name is given to [[auth.keys]] 1 too",
        ),
        (
            "key-unknown-model.toml",
            format!(
                "[[auth.keys]]\nname = \"team-a\"\nkey_env = \"K\"\nmodels = [\"large\"]\n[[models]]\nname = \"m\"\n{upstream}"
            ),
            &[("K", "k")][..],
            &[][..],
            "[[auth.keys]] 1 (\"team-a\"): models names \"large\", which is not a configured model",
        ),
        (
            "negative-limit.toml",
            format!(
                "[[auth.keys]]\nname = \"team-a\"\nkey_env = \"K\"\n[auth.keys.limits]\nrequests_per_minute = -60\n[[models]]\nname = \"m\"\n{upstream}"
            ),
            &[("K", "k")][..],
            &[][..],
            "`requests_per_minute` must be a whole number, 0 or more, not -60",
        ),
        (
            "bad-price.toml",
            format!(
                "[[models]]\nname = \"m\"\nprice = {{ input_per_million = \"0.15$\", output_per_million = 0.6 }}\n{upstream}"
            ),
            &[][..],
            &[][..],
            "line 3",
        ),
        (
            "open-listen.toml",
            format!("[[models]]\nname = \"m\"\n{upstream}"),
            &[][..],
            &["--listen", "0.0.0.0:8787"][..],
            "refusing to listen on 0.0.0.0:8787 without [auth]",
        ),
    ] {
        let path = config_file(name, &text);
        let (code, out, err) = check(&path, env, more);
        assert_eq!(code, 2, "{name}: {out}{err}");
        assert!(out.is_empty(), "{name}: {out}");
        assert!(
            err.starts_with(&format!("choicewise: {}: ", path.display())),
            "{name}: {err}"
        );
        assert!(err.contains(says), "{name}: {err}");
    }
    let (code, _, err) = check(std::path::Path::new("/nonexistent/gateway.toml"), &[], &[]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("cannot read /nonexistent/gateway.toml"),
        "{err}"
    );
}

/// The fences of a TOML block of the docs: ```` ```toml ```` for a complete configuration,
/// checked alone; ```` ```toml reference ```` for the complete one the fragments go into (one,
/// in docs/gateway.md); ```` ```toml fragment ```` for part of a configuration, checked put
/// into the reference (its top-level keys in place of the reference's, its tables after the
/// reference's); ```` ```toml codex ```` for Codex CLI's own config.toml and ```` ```toml cargo ````
/// for a Cargo.toml, not checked.
#[derive(Debug, PartialEq)]
enum Block {
    Complete,
    Reference,
    Fragment,
    NotTheGateways,
}

/// Every ```` ```toml ```` block of README.md and docs/*.md: where it starts (`FILE:LINE`), its
/// fence and its text.
fn toml_blocks() -> Vec<(String, Block, String)> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut files = vec![root.join("README.md")];
    let mut docs: Vec<_> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    files.extend(docs);
    let mut blocks = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let name = file.strip_prefix(&root).unwrap().display().to_string();
        let mut open: Option<(String, Block, String)> = None;
        for (i, line) in text.lines().enumerate() {
            match &mut open {
                None => {
                    let Some(info) = line.strip_prefix("```toml") else {
                        continue;
                    };
                    let kind = match info.trim() {
                        "" => Block::Complete,
                        "reference" => Block::Reference,
                        "fragment" => Block::Fragment,
                        "codex" | "cargo" => Block::NotTheGateways,
                        other => panic!("{name}:{}: unknown fence ```toml {other}", i + 1),
                    };
                    open = Some((format!("{name}:{}", i + 1), kind, String::new()));
                }
                Some(_) if line.trim_end() == "```" => blocks.push(open.take().unwrap()),
                Some((_, _, body)) => {
                    body.push_str(line);
                    body.push('\n');
                }
            }
        }
        assert!(open.is_none(), "{name}: a ```toml block without its end");
    }
    blocks
}

/// A fragment put into the reference: its top-level keys (the lines before its first table)
/// replace the reference's same keys at its top, and its tables follow the reference's (a
/// `[[models.upstreams]]` alone is one more upstream of the reference's last model).
fn merged(reference: &str, fragment: &str) -> String {
    let is_table = |l: &str| l.trim_start().starts_with('[');
    let key = |l: &str| {
        let l = l.trim();
        (!l.starts_with('#') && l.contains('='))
            .then(|| l.split('=').next().unwrap().trim().to_string())
    };
    let split = fragment
        .lines()
        .position(is_table)
        .unwrap_or(fragment.lines().count());
    let top: Vec<&str> = fragment.lines().take(split).collect();
    let keys: Vec<String> = top.iter().filter_map(|l| key(l)).collect();
    let mut out: String = top.iter().map(|l| format!("{l}\n")).collect();
    let mut in_table = false;
    for line in reference.lines() {
        in_table |= is_table(line);
        if !in_table && key(line).is_some_and(|k| keys.contains(&k)) {
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    for line in fragment.lines().skip(split) {
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// The environment variables a configuration names (`keys_env`, `api_key_env`): `serve`
/// refuses to start when one is unset, so the check of a doc's block sets each.
fn named_variables(config: &str) -> Vec<(String, String)> {
    config
        .lines()
        .filter_map(|l| {
            let (key, value) = l.split('#').next()?.split_once('=')?;
            let variable = value.trim().trim_matches('"').to_string();
            // Each key of its own: two `[[auth.keys]]` may not hold the same one.
            let secret = format!("doc-secret-{variable}");
            matches!(
                key.trim(),
                "keys_env"
                    | "api_key_env"
                    | "key_env"
                    | "access_key_id_env"
                    | "secret_access_key_env"
            )
            .then_some((variable, secret))
        })
        .collect()
}

#[test]
fn every_toml_block_of_the_docs_passes_serve_check() {
    let blocks = toml_blocks();
    let references: Vec<_> = blocks.iter().filter(|b| b.1 == Block::Reference).collect();
    assert_eq!(
        references.len(),
        1,
        "one ```toml reference block: {references:?}"
    );
    assert!(
        references[0].0.starts_with("docs/gateway.md:"),
        "{}",
        references[0].0
    );
    let reference = &references[0].2;
    let mut failed = Vec::new();
    let mut checked = 0;
    for (at, kind, text) in &blocks {
        let config = match kind {
            Block::NotTheGateways => continue,
            Block::Complete | Block::Reference => text.clone(),
            Block::Fragment => merged(reference, text),
        };
        let env = named_variables(&config);
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let path = config_file(
            &format!("doc-{}.toml", at.replace(['/', ':', '.'], "-")),
            &config,
        );
        let (code, out, err) = check(&path, &env, &[]);
        checked += 1;
        if code != 0 {
            failed.push(format!("{at} ({kind:?}): exit {code}\n{err}"));
        } else if out.contains("warning: ") || out.contains("doc-secret") {
            failed.push(format!(
                "{at} ({kind:?}): a warning or a key printed\n{out}"
            ));
        }
    }
    assert!(checked >= 8, "only {checked} blocks found");
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_logs_the_warnings_at_start() {
    let config = config_file(
        "warns.toml",
        "listen = \"127.0.0.1:0\"\n[[models]]\nname = \"deepconf\"\n[models.choicewise]\n\
         select = \"vote\"\nsamples = 3\n[models.choicewise.confidence]\nkeep = 0.9\n\
         [[models.upstreams]]\napi = \"chat\"\nbase_url = \"http://127.0.0.1:9/v1\"\n",
    );
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_choicewise"))
        .args(["serve", "--config", config.to_str().unwrap()])
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap()).lines();
    let before = within(LIMIT, "the listening line", async {
        let mut before = Vec::new();
        loop {
            let line = stderr.next_line().await.unwrap().unwrap();
            if line.starts_with("listening on ") {
                return before;
            }
            before.push(line);
        }
    })
    .await;
    assert!(
        before.iter().any(|l| l.contains("WARN")
            && l.contains("confidence.warmup (8, the default) is not below samples (3)")),
        "{before:?}"
    );
}

/// docs/gateway.md shows what `--check` prints for its reference configuration: it is.
#[test]
fn the_check_output_shown_in_the_docs_is_what_it_prints() {
    let blocks = toml_blocks();
    let reference = &blocks.iter().find(|b| b.1 == Block::Reference).unwrap().2;
    let docs = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/gateway.md"),
    )
    .unwrap();
    let shown = docs
        .split("```text\n")
        .find(|b| b.starts_with("listen "))
        .and_then(|b| b.split("```").next())
        .expect("a ```text block of --check's output in docs/gateway.md");
    let path = config_file("gateway.toml", reference);
    let env = named_variables(reference);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let (code, out, err) = check(&path, &env, &[]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out.replace(&path.display().to_string(), "gateway.toml"),
        shown
    );
}

/// What the hash `key` of the Redis on `port` holds in its field `v` (a counter's amount).
fn redis_amount(port: u16, key: &str) -> Option<u64> {
    use std::io::{Read, Write};
    let mut tcp = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    let command = format!("*3\r\n$4\r\nHGET\r\n${}\r\n{key}\r\n$1\r\nv\r\n", key.len());
    tcp.write_all(command.as_bytes()).ok()?;
    // `$-1\r\n` (none), or `$LEN\r\nVALUE\r\n`.
    let mut reply = Vec::new();
    let mut buf = [0u8; 256];
    while !(reply.ends_with(b"\r\n")
        && (reply.starts_with(b"$-1") || reply.iter().filter(|&&b| b == b'\n').count() == 2))
    {
        let n = tcp.read(&mut buf).ok()?;
        if n == 0 {
            return None;
        }
        reply.extend_from_slice(&buf[..n]);
    }
    String::from_utf8(reply)
        .ok()?
        .lines()
        .nth(1)?
        .trim()
        .parse()
        .ok()
}

/// A free port of 127.0.0.1.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `choicewise serve` on `port` for `toml`, once it listens (the lines before are read).
async fn serve_on_port(name: &str, toml: &str, port: u16) -> tokio::process::Child {
    let dir = std::env::temp_dir().join(format!("choicewise-serve-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join(format!("{name}.toml"));
    std::fs::write(&config, toml).unwrap();
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_choicewise"))
        .args(["serve", "--config", config.to_str().unwrap()])
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap()).lines();
    within(LIMIT, "the listening line", async {
        loop {
            let line = stderr.next_line().await.unwrap().expect("serve exited");
            if line.starts_with("listening on ") {
                break;
            }
        }
    })
    .await;
    // The rest of its log is read (and dropped), so that it never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = stderr.next_line().await {} });
    child
}

/// An upstream sample of one word with its usage: 7 prompt tokens, 1 generated.
const SAMPLE_WITH_USAGE: &str = "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"up\",\
\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"ok\"},\"finish_reason\":\"stop\"}]}\n\n\
data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"up\",\"choices\":[],\
\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":1,\"total_tokens\":8}}\n\ndata: [DONE]\n\n";

/// Three `choicewise serve` processes behind nginx sharing one `redis-server`
/// (docs/keys.md): a key limited to 60 requests a minute gets exactly 60 of 100 answered
/// through nginx, 40 refused with 429 and `Retry-After`; a key limited to 1000 tokens a minute
/// sending votes of 4 is refused within one request's reservation of the limit, the tokens
/// counted across the three; every gateway restarted, the counts are still there. Ignored by a
/// plain `cargo test`; it fails rather than passes when nginx or redis-server is missing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs nginx and redis-server (CI installs them: apt-get install nginx-light redis-server)"]
async fn nginx_in_front_of_three_gateways_sharing_redis_keeps_the_keys_limits() {
    // Not skipped where redis-server is missing: this test is run when asked for.
    let redis = RedisServer::start().expect("redis-server is not installed; this test DID NOT RUN");
    let redis_port = redis.port();
    let upstream = TestServer::builder()
        .body(SAMPLE_WITH_USAGE)
        .start()
        .await
        .unwrap();
    let sha = |key: &str| -> String {
        use std::fmt::Write;
        let digest = ring::digest::digest(&ring::digest::SHA256, key.as_bytes());
        digest.as_ref().iter().fold(String::new(), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
    };
    let toml = format!(
        "[state]\nredis_url = \"redis://127.0.0.1:{redis_port}\"\non_state_error = \"refuse\"\n\
         [auth]\n[[auth.keys]]\nname = \"team-a\"\nsha256 = \"{}\"\n[auth.keys.limits]\nrequests_per_minute = 60\n\
         [[auth.keys]]\nname = \"team-b\"\nsha256 = \"{}\"\n[auth.keys.limits]\ntokens_per_minute = 1000\n\
         [[models]]\nname = \"small\"\n[[models.upstreams]]\napi = \"chat\"\nbase_url = \"{}\"\nmodel = \"up\"\nn = \"fan-out\"\n",
        sha("sk-team-a"),
        sha("sk-team-b"),
        upstream.base_url()
    );
    let ports = [free_port(), free_port(), free_port()];
    let mut gateways = Vec::new();
    for (i, port) in ports.iter().enumerate() {
        gateways.push(serve_on_port(&format!("redis-{i}"), &toml, *port).await);
    }
    let port = free_port();
    let dir = std::env::temp_dir().join(format!("choicewise-nginx-redis-{}", std::process::id()));
    let servers: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    let _nginx = nginx::start(&dir, port, &servers, "").await;
    let front = format!("http://127.0.0.1:{port}");
    let client = reqwest::Client::new();
    let ask = |key: &'static str, samples: u32| {
        let mut body = json!({"model": "small", "max_tokens": 1,
                              "messages": [{"role": "user", "content": "hi"}]});
        if samples > 1 {
            // Every sample needed: a vote of agreeing samples would be decided before the
            // last, which may then count less than its whole answer.
            body["choicewise"] =
                json!({"select": "vote", "samples": samples, "min_votes": samples});
        }
        client
            .post(format!("{front}/v1/chat/completions"))
            .bearer_auth(key)
            .json(&body)
            .send()
    };

    // 100 requests, 10 at a time, spread by nginx over the three.
    let mut statuses = Vec::new();
    for _ in 0..10 {
        let batch = (0..10).map(|_| async {
            let r = ask("sk-team-a", 1).await.unwrap();
            (r.status().as_u16(), r.headers().contains_key("retry-after"))
        });
        statuses.extend(futures::future::join_all(batch).await);
    }
    let answered = statuses.iter().filter(|(s, _)| *s == 200).count();
    let refused = statuses.iter().filter(|(s, w)| *s == 429 && *w).count();
    assert_eq!((answered, refused), (60, 40), "{statuses:?}");

    // Votes of 4 against 1000 tokens a minute: each counts 4 × (7 + 1) tokens.
    let mut votes = 0u64;
    let refusal = loop {
        let r = within(LIMIT, "a vote", ask("sk-team-b", 4)).await.unwrap();
        if r.status() != 200 {
            break r;
        }
        votes += 1;
        assert!(votes < 100, "never refused");
        // Its settlement applied (by the task of the gateway that served it): the minute's
        // count in Redis is what was counted, 32 tokens a vote.
        let key = "choicewise:key:team-b:tokens_per_minute";
        let deadline = Instant::now() + LIMIT;
        while redis_amount(redis_port, key) != Some(votes * 32) {
            assert!(
                Instant::now() < deadline,
                "{key}: {:?}",
                redis_amount(redis_port, key)
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    assert_eq!(refusal.status(), 429);
    let body: Value = refusal.json().await.unwrap();
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("tokens_per_minute of key `team-b` (1000 a minute) reached"),
        "{body}"
    );
    // The tokens counted by the three, each its own share.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut counted = 0u64;
    let mut serving = 0;
    for port in ports {
        let text = reqwest::get(format!("http://127.0.0.1:{port}/metrics"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let mine: u64 = (text.lines())
            .filter(|l| l.starts_with("choicewise_key_tokens_total{key=\"team-b\""))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum();
        serving += usize::from(mine > 0);
        counted += mine;
    }
    assert_eq!(counted, votes * 32);
    assert!(serving >= 2, "nginx spread the votes over the gateways");
    // A vote reserves 4 × (its prompt as counted here + 1 of room): under 100 tokens.
    assert!(
        (900..=1000).contains(&counted),
        "refused at {counted} tokens counted"
    );

    // Every gateway restarted: the minute's counts are still there.
    for child in &mut gateways {
        child.kill().await.unwrap();
    }
    gateways.clear();
    for (i, port) in ports.iter().enumerate() {
        gateways.push(serve_on_port(&format!("redis-again-{i}"), &toml, *port).await);
    }
    for _ in 0..3 {
        let r = within(LIMIT, "a request after the restart", ask("sk-team-a", 1))
            .await
            .unwrap();
        assert_eq!(r.status(), 429);
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// A named key's requests are logged with its name (`key="team-a"`), the request a limit
/// refused too, and the key itself is in no line of the log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_keys_name_is_in_the_log_never_the_key() {
    let upstream = TestServer::builder()
        .body(SAMPLE_WITH_USAGE)
        .start()
        .await
        .unwrap();
    let digest = ring::digest::digest(&ring::digest::SHA256, b"sk-team-a");
    let sha: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    let (_child, base, mut stderr) = serve(
        "keys-log",
        &format!(
            "[[auth.keys]]\nname = \"team-a\"\nsha256 = \"{sha}\"\n[auth.keys.limits]\nrequests_per_minute = 1\n\
             [[models]]\nname = \"small\"\n[[models.upstreams]]\napi = \"chat\"\nbase_url = \"{}\"\nmodel = \"up\"\n",
            upstream.base_url()
        ),
    )
    .await;
    let client = reqwest::Client::new();
    for (id, status) in [("req-keys-1", 200), ("req-keys-2", 429)] {
        let r = client
            .post(format!("{base}/v1/chat/completions"))
            .bearer_auth("sk-team-a")
            .header("x-request-id", id)
            .json(&json!({"model": "small", "messages": [{"role": "user", "content": "hi"}]}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), status);
        let _ = r.bytes().await;
    }
    let mut lines = Vec::new();
    let (answered, refused) = within(LIMIT, "the two requests' lines", async {
        loop {
            let line = stderr.next_line().await.unwrap().unwrap();
            lines.push(line);
            let of = |id: &str| lines.iter().find(|l| l.contains(id)).cloned();
            if let (Some(a), Some(r)) = (of("req-keys-1"), of("req-keys-2")) {
                return (a, r);
            }
        }
    })
    .await;
    assert!(
        answered.contains(" request ") && answered.contains("key=\"team-a\""),
        "{answered}"
    );
    assert!(
        refused.contains("key=\"team-a\"")
            && refused.contains("refused by its limits: requests_per_minute of key `team-a`"),
        "{refused}"
    );
    assert!(lines.iter().all(|l| !l.contains("sk-team-a")), "{lines:?}");
}

/// Pauses the process `pid` (`SIGSTOP`) for `pause`, then lets it go on (`SIGCONT`).
#[cfg(target_os = "linux")]
async fn paused(pid: u32, pause: Duration) {
    let pid = pid as libc::pid_t;
    // SAFETY: kill(2) with a pid this test spawned and a signal number; no memory is passed.
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    tokio::time::sleep(pause).await;
    // SAFETY: as above.
    unsafe { libc::kill(pid, libc::SIGCONT) };
}

/// How a gateway pause reorders finishes (issue 87; docs/picks.md, "A pause and the finish
/// order"): `first_finished` over three upstreams that answer `finishes` ms after the
/// request (each upstream in the lead in turn, `runs` times each), the gateway stopped
/// (SIGSTOP) from `pause.0` to `pause.1` ms after the request was sent. How many times the
/// answer was the first finisher's, the second's, the third's.
#[cfg(target_os = "linux")]
async fn first_finished_through_a_pause(
    finishes: [u64; 3],
    pause: (u64, u64),
    runs: usize,
) -> [usize; 3] {
    const NAMES: [&str; 3] = ["A", "B", "C"];
    let mut upstreams = Vec::new();
    for (u, name) in NAMES.iter().enumerate() {
        // Its answer to the run led by upstream `lead` (request k is answered by reply
        // k % 3): after the delay of its place in that run.
        let reply = |lead: usize| {
            let place = (u + 3 - lead) % 3;
            TestServer::builder()
                .body(answer(name))
                .head_delay(Duration::from_millis(finishes[place]))
        };
        let server = reply(0)
            .then(reply(1))
            .then(reply(2))
            .start()
            .await
            .unwrap();
        upstreams.push(server);
    }
    let toml = format!(
        "[[models]]\nname = \"m\"\n[models.choicewise]\nselect = \"first_finished\"\nsamples = 3\n{}",
        (upstreams.iter())
            .map(|u| format!(
                "[[models.upstreams]]\napi = \"chat\"\nbase_url = \"{}\"\nmodel = \"up\"\nn = \"fan-out\"\n",
                u.base_url()
            ))
            .collect::<String>()
    );
    let (child, base, mut stderr) = serve("paused", &toml).await;
    tokio::spawn(async move { while let Ok(Some(_)) = stderr.next_line().await {} });
    let pid = child.id().unwrap();
    let client = reqwest::Client::new();
    let body = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
    let mut places = [0usize; 3];
    for run in 0..3 * runs {
        let lead = run % 3;
        let sent = Instant::now();
        let asked = client
            .post(format!("{base}/v1/chat/completions"))
            .json(&body)
            .send();
        let pausing = async {
            tokio::time::sleep_until((sent + Duration::from_millis(pause.0)).into()).await;
            paused(pid, Duration::from_millis(pause.1 - pause.0)).await;
        };
        let (answered, ()) = tokio::join!(asked, pausing);
        let v: Value = answered.unwrap().json().await.unwrap();
        let said = v["choices"][0]["message"]["content"]
            .as_str()
            .unwrap_or_default();
        let u = NAMES
            .iter()
            .position(|n| *n == said)
            .unwrap_or_else(|| panic!("{v}"));
        places[(u + 3 - lead) % 3] += 1;
    }
    drop(child);
    places
}

/// A gateway paused across the finishes (issue 87's case: finishes 40 ms apart, a pause of
/// 100 ms around them) reads them in no order it can know: the answer is any of them, and
/// the test measures how often it is the first (printed; docs/picks.md has the figures). A
/// pause ends the reordering: a finish that came after it never beats one that came during
/// it.
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "asks a gateway 150 times, pausing it 120 (about a minute); CI runs it with the serve tests"]
async fn a_pause_reorders_only_the_finishes_it_covers() {
    // Without a pause (one of no length), the control.
    let control = first_finished_through_a_pause([300, 340, 380], (290, 290), 10).await;
    println!(
        "not paused: first {}, second {}, third {} of 30",
        control[0], control[1], control[2]
    );
    // Finishes at 300, 340 and 380 ms; the gateway stopped from 290 to 390 ms.
    let around = first_finished_through_a_pause([300, 340, 380], (290, 390), 20).await;
    println!(
        "paused around all three finishes: first {}, second {}, third {} of 60",
        around[0], around[1], around[2]
    );
    assert_eq!(around.iter().sum::<usize>(), 60);
    // Finishes at 300 and 340 during a pause from 280 to 360 ms, the third at 500 ms.
    let bound = first_finished_through_a_pause([300, 340, 500], (280, 360), 20).await;
    println!(
        "paused around the first two: first {}, second {}, third {} of 60",
        bound[0], bound[1], bound[2]
    );
    assert_eq!(
        bound[2], 0,
        "a finish after the pause beat one during it: {bound:?}"
    );
}
