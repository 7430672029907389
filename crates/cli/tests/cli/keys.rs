//! Keys managed live (docs/keys.md): `choicewise serve` replicas sharing a keys' store
//! (a real `redis-server`, a real PostgreSQL), changed over the admin API on one replica and
//! seen by the others within a second; `choicewise keys`; a reload on `SIGHUP`.

use std::process::Stdio;
use std::time::{Duration, Instant};

use choicewise_test_support::{PostgresServer, RedisServer, within};
use choicewise_testserver::{TestServer, answer};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};

const LIMIT: Duration = Duration::from_secs(20);

/// The operator's key of these tests' gateways.
const OPERATOR: &str = "op-secret-for-tests";

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// A `choicewise serve` process and its log's lines as they come.
struct Replica {
    child: tokio::process::Child,
    base: String,
    log: tokio::sync::mpsc::UnboundedReceiver<String>,
    config: std::path::PathBuf,
}

impl Replica {
    /// `choicewise serve` of `toml`, once it listens; its log read into `log`.
    async fn start(name: &str, toml: &str) -> Replica {
        let dir = std::env::temp_dir().join(format!("choicewise-keys-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let config = dir.join(format!("{name}.toml"));
        std::fs::write(&config, toml).unwrap();
        let port = free_port();
        let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_choicewise"))
            .args(["serve", "--config", config.to_str().unwrap()])
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .env("ADMIN_KEY", OPERATOR)
            .env("TEAM_A_KEY", "sk-team-a")
            .current_dir(&dir)
            .stdin(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let mut stderr = BufReader::new(child.stderr.take().unwrap()).lines();
        let (tx, mut log) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Ok(Some(line)) = stderr.next_line().await {
                let _ = tx.send(line);
            }
        });
        within(LIMIT, "the listening line", async {
            loop {
                let line = log.recv().await.expect("serve exited");
                if line.starts_with("listening on ") {
                    break;
                }
            }
        })
        .await;
        Replica {
            child,
            base: format!("http://127.0.0.1:{port}"),
            log,
            config,
        }
    }

    /// Waits for a log line holding `text`.
    async fn logged(&mut self, text: &str) -> String {
        within(LIMIT, text, async {
            loop {
                let line = self.log.recv().await.expect("serve exited");
                if line.contains(text) {
                    return line;
                }
            }
        })
        .await
    }
}

/// A chat request with the client key `key`: its status.
async fn chat(base: &str, key: &str) -> u16 {
    let body = json!({"model": "small", "max_tokens": 4,
                      "messages": [{"role": "user", "content": "hi"}]});
    reqwest::Client::new()
        .post(format!("{base}/v1/chat/completions"))
        .bearer_auth(key)
        .json(&body)
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

/// An admin request: its status and JSON answer.
async fn admin(
    base: &str,
    method: reqwest::Method,
    path: &str,
    key: Option<&str>,
    body: Option<Value>,
) -> (u16, Value) {
    let mut request = reqwest::Client::new().request(method, format!("{base}{path}"));
    if let Some(key) = key {
        request = request.bearer_auth(key);
    }
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// How long until every one of `bases` answers a chat request with the key `secret` with
/// `status` (each asked every 10 ms), at most [`LIMIT`].
async fn until_all(bases: &[String], secret: &str, status: u16) -> Duration {
    let started = Instant::now();
    for base in bases {
        while chat(base, secret).await != status {
            assert!(started.elapsed() < LIMIT, "{base} never saw the change");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    started.elapsed()
}

/// Three `choicewise serve` replicas of `toml` (their files named `{name}-{i}`), and their
/// addresses.
async fn three(name: &str, toml: &str) -> (Vec<Replica>, Vec<String>) {
    let mut replicas = Vec::new();
    for i in 0..3 {
        replicas.push(Replica::start(&format!("{name}-{i}"), toml).await);
    }
    let bases = replicas.iter().map(|r| r.base.clone()).collect();
    (replicas, bases)
}

/// The configuration of replicas whose keys are made over the admin API, in the store of
/// `state` (a `[state]` or `[records]` table), before any key exists.
fn config(upstream: &str, state: &str) -> String {
    format!(
        "{state}\n[admin]\nkey_env = \"ADMIN_KEY\"\n[auth]\n\
         [[models]]\nname = \"small\"\n[[models.upstreams]]\napi = \"chat\"\nbase_url = \"{upstream}\"\n\
         [[models]]\nname = \"large\"\n[[models.upstreams]]\napi = \"chat\"\nbase_url = \"{upstream}\"\n"
    )
}

/// Three replicas on one store: a key made on the first is accepted by the others within a
/// second, its limit counted across them, what is left said by each; a name taken is 409;
/// bad bodies are 400 naming the field; without the operator's key, 401 (logged); a rotated
/// key's old secret and a revoked key are refused everywhere within a second; an expired
/// key is refused from its expiry on.
async fn replicas_share_live_keys(state: &str) {
    let upstream = TestServer::builder()
        .body(answer("ok"))
        .start()
        .await
        .unwrap();
    let toml = config(&upstream.base_url(), state);
    let (mut replicas, bases) = three("replica", &toml).await;
    let (first, others) = (&bases[0], &bases[1..]);
    use reqwest::Method;

    // Without the operator's key: 401, logged.
    let (status, _) = admin(first, Method::GET, "/admin/keys", None, None).await;
    assert_eq!(status, 401);
    let (status, body) = admin(first, Method::GET, "/admin/keys", Some("sk-wrong"), None).await;
    assert_eq!(status, 401, "{body}");
    let line = replicas[0].logged("without the operator's key").await;
    assert!(
        line.contains("/admin/keys") && !line.contains("sk-wrong"),
        "{line}"
    );

    // Bad bodies: 400 naming the field.
    for (body, param) in [
        (
            json!({"name": "team-x", "limits": {"requests_per_minute": -1}}),
            "limits",
        ),
        (
            json!({"name": "team-x", "limits": {"requests_per_fortnight": 1}}),
            "limits",
        ),
        (json!({"name": "team x"}), "name"),
        (json!({"name": "team-x", "colour": "red"}), "colour"),
        (
            json!({"name": "team-x", "models": ["nowhere"]}),
            "models[0]",
        ),
        (
            json!({"name": "team-x", "expires_at": "tomorrow"}),
            "expires_at",
        ),
        (json!({"models": ["small"]}), "name"),
        (
            json!({"name": "team-x", "limits": {"usd_per_day": 1}}),
            "limits",
        ),
        (json!({"name": "team-x", "tags": ["nowhere"]}), "tags[0]"),
    ] {
        let (status, answer) = admin(
            first,
            Method::POST,
            "/admin/keys",
            Some(OPERATOR),
            Some(body.clone()),
        )
        .await;
        assert_eq!(status, 400, "{body}: {answer}");
        assert_eq!(answer["error"]["param"], param, "{body}: {answer}");
    }

    // Made on the first replica: accepted by the other two within a second.
    let made = json!({"name": "team-x", "models": ["small"],
                      "limits": {"requests_per_minute": 5}});
    let (status, key) = admin(
        first,
        Method::POST,
        "/admin/keys",
        Some(OPERATOR),
        Some(made.clone()),
    )
    .await;
    assert_eq!(status, 201, "{key}");
    let secret = key["key"].as_str().unwrap().to_string();
    assert_eq!(key["limits"], json!({"requests_per_minute": 5}));
    assert_eq!(
        chat(first, &secret).await,
        200,
        "at once on the replica that made it"
    );
    let seen = until_all(others, &secret, 200).await;
    assert!(
        seen < Duration::from_secs(1),
        "seen by every replica after {seen:?}"
    );
    // A name taken: 409, on any replica.
    let (status, answer) = admin(
        &bases[1],
        Method::POST,
        "/admin/keys",
        Some(OPERATOR),
        Some(made),
    )
    .await;
    assert_eq!(
        (status, answer["error"]["code"].as_str()),
        (409, Some("key_exists"))
    );
    // Its models hold; its limit is counted across the replicas (3 used of 5).
    let body = json!({"model": "large", "messages": [{"role": "user", "content": "hi"}]});
    let refused = reqwest::Client::new()
        .post(format!("{}/v1/chat/completions", bases[2]))
        .bearer_auth(&secret)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 403);
    let (status, own) = admin(&bases[2], Method::GET, "/v1/key", Some(&secret), None).await;
    assert_eq!(status, 200, "{own}");
    assert_eq!(own["name"], "team-x");
    let usage = &own["usage"][0];
    assert_eq!(
        (
            usage["name"].as_str(),
            usage["used"].as_u64(),
            usage["remaining"].as_u64()
        ),
        (Some("requests_per_minute"), Some(3), Some(2)),
        "{own}"
    );
    assert!(
        usage["reset_ms"].as_u64().is_some_and(|ms| ms <= 60_000),
        "{own}"
    );
    assert!(!own.to_string().contains(&secret), "never the secret again");
    let (_, shown) = admin(
        first,
        Method::GET,
        "/admin/keys/team-x",
        Some(OPERATOR),
        None,
    )
    .await;
    assert_eq!(shown["usage"][0]["used"], 3, "{shown}");
    assert_eq!(chat(&bases[1], &secret).await, 200);
    assert_eq!(chat(&bases[2], &secret).await, 200);
    assert_eq!(
        chat(first, &secret).await,
        429,
        "5 a minute across the three"
    );

    // `choicewise keys list` lists it.
    let listed = tokio::process::Command::new(env!("CARGO_BIN_EXE_choicewise"))
        .args(["keys", "list", "--url", &bases[1], "--key-env", "ADMIN_KEY"])
        .env("ADMIN_KEY", OPERATOR)
        .output()
        .await
        .unwrap();
    let table = String::from_utf8_lossy(&listed.stdout);
    assert!(
        listed.status.success(),
        "{}",
        String::from_utf8_lossy(&listed.stderr)
    );
    assert!(
        table.contains("team-x") && table.contains("requests_per_minute=5"),
        "{table}"
    );

    // Rotated on the second: the old secret refused everywhere within a second.
    let (status, rotated) = admin(
        &bases[1],
        Method::PATCH,
        "/admin/keys/team-x",
        Some(OPERATOR),
        Some(json!({"rotate": true, "limits": {"requests_per_minute": 100}})),
    )
    .await;
    assert_eq!(status, 200, "{rotated}");
    let new_secret = rotated["key"].as_str().unwrap().to_string();
    assert_ne!(new_secret, secret);
    let gone = until_all(&bases, &secret, 401).await;
    assert!(
        gone < Duration::from_secs(1),
        "old secret refused after {gone:?}"
    );
    for base in &bases {
        assert_eq!(
            chat(base, &new_secret).await,
            200,
            "{base}: the new limit of 100"
        );
    }

    // Expired at T: accepted before, refused from T on.
    let at = time::OffsetDateTime::now_utc() + time::Duration::milliseconds(1500);
    let at_text = at
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap();
    let (status, _) = admin(
        first,
        Method::PATCH,
        "/admin/keys/team-x",
        Some(OPERATOR),
        Some(json!({"expires_at": at_text})),
    )
    .await;
    assert_eq!(status, 200);
    let expiry = std::time::UNIX_EPOCH + Duration::from_nanos(at.unix_timestamp_nanos() as u64);
    tokio::time::sleep(Duration::from_millis(300)).await;
    for base in &bases {
        assert_eq!(
            chat(base, &new_secret).await,
            200,
            "{base} before its expiry"
        );
    }
    let wait = expiry
        .duration_since(std::time::SystemTime::now())
        .unwrap_or_default();
    tokio::time::sleep(wait + Duration::from_millis(5)).await;
    for base in &bases {
        assert_eq!(
            chat(base, &new_secret).await,
            401,
            "{base} after its expiry"
        );
    }

    // Revoked on the third: refused everywhere within a second, its name free again.
    let (status, _) = admin(
        &bases[2],
        Method::PATCH,
        "/admin/keys/team-x",
        Some(OPERATOR),
        Some(json!({"expires_at": null})),
    )
    .await;
    assert_eq!(status, 200);
    let back = until_all(&bases, &new_secret, 200).await;
    assert!(back < Duration::from_secs(1), "{back:?}");
    let (status, _) = admin(
        &bases[2],
        Method::DELETE,
        "/admin/keys/team-x",
        Some(OPERATOR),
        None,
    )
    .await;
    assert_eq!(status, 200);
    let revoked = until_all(&bases, &new_secret, 401).await;
    assert!(
        revoked < Duration::from_secs(1),
        "revoked after {revoked:?}"
    );
    let (status, _) = admin(
        first,
        Method::DELETE,
        "/admin/keys/team-x",
        Some(OPERATOR),
        None,
    )
    .await;
    assert_eq!(status, 404);
    for replica in &mut replicas {
        let _ = replica.child.start_kill();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_made_on_one_replica_live_on_three_sharing_redis() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    // A patient deadline: this is about the keys, not Redis's latency on a loaded machine,
    // where the default 50 ms made a chat at once after the key was made a 503.
    let state = format!(
        "[state]\nredis_url = \"{}\"\non_state_error = \"refuse\"\nstate_timeout_ms = 2000",
        redis.url()
    );
    replicas_share_live_keys(&state).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_made_on_one_replica_live_on_three_sharing_postgresql() {
    let Some(pg) = PostgresServer::start() else {
        return;
    };
    // The limits' counts in Redis would do too; in the process here, the keys in PostgreSQL.
    let state = format!("[records]\nurl = \"{}\"", pg.url());
    // Each replica's own count: the shared-limit checks above are Redis's; the keys are
    // the point here.
    replicas_share_live_keys_pg(&state).await;
}

/// As [`replicas_share_live_keys`], the keys in PostgreSQL and the counts each replica's own:
/// made, seen by the others within a second, rotated, revoked.
async fn replicas_share_live_keys_pg(state: &str) {
    use reqwest::Method;
    let upstream = TestServer::builder()
        .body(answer("ok"))
        .start()
        .await
        .unwrap();
    let toml = config(&upstream.base_url(), state);
    let (mut replicas, bases) = three("pg-replica", &toml).await;
    let made = json!({"name": "team-y"});
    let (status, key) = admin(
        &bases[0],
        Method::POST,
        "/admin/keys",
        Some(OPERATOR),
        Some(made),
    )
    .await;
    assert_eq!(status, 201, "{key}");
    let secret = key["key"].as_str().unwrap().to_string();
    let seen = until_all(&bases, &secret, 200).await;
    assert!(seen < Duration::from_secs(1), "seen after {seen:?}");
    graded_on_another_replica(&bases, &secret).await;
    let (status, _) = admin(
        &bases[1],
        Method::DELETE,
        "/admin/keys/team-y",
        Some(OPERATOR),
        None,
    )
    .await;
    assert_eq!(status, 200);
    let revoked = until_all(&bases, &secret, 401).await;
    assert!(
        revoked < Duration::from_secs(1),
        "revoked after {revoked:?}"
    );
    for replica in &mut replicas {
        let _ = replica.child.start_kill();
    }
}

/// `choicewise feedback ID OUTCOME` with the key of `--key-env`: its exit code, stdout and
/// stderr.
async fn feedback(args: &[&str], key: &str) -> (i32, String, String) {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_choicewise"))
        .arg("feedback")
        .args(args)
        .env("GRADER_KEY", key)
        .output()
        .await
        .unwrap();
    let text = |b: Vec<u8>| String::from_utf8(b).unwrap();
    (
        out.status.code().unwrap_or(-1),
        text(out.stdout),
        text(out.stderr),
    )
}

/// A request answered by one replica is graded through another at once (`choicewise
/// feedback`, the records database they share): by its own key, then by the operator's; an
/// unknown id is exit 1 saying so.
async fn graded_on_another_replica(bases: &[String], secret: &str) {
    let body = json!({"model": "small", "max_tokens": 4,
                      "messages": [{"role": "user", "content": "hi"}]});
    let r = reqwest::Client::new()
        .post(format!("{}/v1/chat/completions", bases[0]))
        .bearer_auth(secret)
        .header("x-request-id", "pg-graded")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let _ = r.bytes().await;
    let (code, out, err) = feedback(
        &[
            "pg-graded",
            "right",
            "--source",
            "ci",
            "--url",
            &bases[2],
            "--key-env",
            "GRADER_KEY",
        ],
        secret,
    )
    .await;
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (v["outcome"].as_str(), v["source"].as_str()),
        (Some("right"), Some("ci"))
    );
    let (code, _, err) = feedback(
        &[
            "pg-graded",
            "0.5",
            "--url",
            &bases[1],
            "--key-env",
            "GRADER_KEY",
        ],
        OPERATOR,
    )
    .await;
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = feedback(
        &[
            "nope",
            "wrong",
            "--url",
            &bases[1],
            "--key-env",
            "GRADER_KEY",
        ],
        secret,
    )
    .await;
    assert_eq!(code, 1);
    assert!(
        err.contains("no request with id \"nope\"") && err.contains("(404)"),
        "{err}"
    );
    let (code, _, err) = feedback(&["pg-graded", "fine"], secret).await;
    assert_eq!(code, 2, "{err}");
}

/// `SIGHUP` re-reads the file: a changed limit applies at once, said in the log, and the
/// request in flight meanwhile ends whole; an unreadable file leaves the gateway as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_applies_a_changed_limit_without_dropping_a_request_in_flight() {
    let slow = TestServer::builder()
        .body(answer("slow but sure"))
        .delay(Duration::from_millis(1200))
        .start()
        .await
        .unwrap();
    let fast = TestServer::builder()
        .body(answer("ok"))
        .start()
        .await
        .unwrap();
    let toml = |limit: u32| {
        format!(
            "[auth]\n[[auth.keys]]\nname = \"team-a\"\nkey_env = \"TEAM_A_KEY\"\n\
             [auth.keys.limits]\nrequests_per_minute = {limit}\n\
             [[models]]\nname = \"small\"\n[[models.upstreams]]\napi = \"chat\"\nbase_url = \"{}\"\n\
             [[models]]\nname = \"slow\"\n[[models.upstreams]]\napi = \"chat\"\nbase_url = \"{}\"\n",
            fast.base_url(),
            slow.base_url()
        )
    };
    let mut replica = Replica::start("sighup", &toml(2)).await;
    let base = replica.base.clone();
    let first = tokio::spawn({
        let body = json!({"model": "slow", "messages": [{"role": "user", "content": "hi"}]});
        let request = reqwest::Client::new()
            .post(format!("{base}/v1/chat/completions"))
            .bearer_auth("sk-team-a")
            .json(&body);
        async move {
            let response = request.send().await.unwrap();
            let status = response.status().as_u16();
            let text = response.text().await.unwrap();
            (status, text.contains("slow but sure"))
        }
    });
    within(LIMIT, "the upstream asked", async {
        while slow.request_count() < 1 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    assert_eq!(chat(&base, "sk-team-a").await, 200);
    assert_eq!(chat(&base, "sk-team-a").await, 429, "2 a minute");
    let hang_up = |pid: u32| {
        let kill = std::process::Command::new("kill")
            .args(["-HUP", &pid.to_string()])
            .status()
            .unwrap();
        assert!(kill.success());
    };
    let pid = replica.child.id().unwrap();
    // A file that cannot be read is refused, and the gateway goes on as it was.
    std::fs::write(&replica.config, "[[models]]\nname = ").unwrap();
    hang_up(pid);
    replica.logged("reload refused").await;
    assert_eq!(chat(&base, "sk-team-a").await, 429);
    // The first request is still in flight when the new limit is applied.
    std::fs::write(&replica.config, toml(10)).unwrap();
    hang_up(pid);
    let line = replica.logged("reloaded").await;
    assert!(line.contains("keys changed: team-a (limits)"), "{line}");
    assert!(!first.is_finished(), "the first request is still in flight");
    assert_eq!(chat(&base, "sk-team-a").await, 200, "10 a minute now");
    assert_eq!(
        first.await.unwrap(),
        (200, true),
        "the request in flight ended whole"
    );
    let _ = replica.child.start_kill();
}
