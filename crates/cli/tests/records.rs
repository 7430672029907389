//! `[records]` with `choicewise serve` as processes: what they record is what `choicewise
//! usage` reads; three gateways behind nginx writing to one PostgreSQL keep one row per
//! request, through the database's outage and a gateway's `kill -9`.
//!
//! The tests that need nginx and PostgreSQL (Debian's packages) are ignored by a plain
//! `cargo test`; CI runs them (`.ci/run`), and they fail rather than pass without them.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use choicewise_records::{RecordsQuery, RequestRecord, Store};
use choicewise_test_support::{PostgresServer, within};
use choicewise_testserver::TestServer;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

#[path = "common/nginx.rs"]
mod nginx;

const LIMIT: Duration = Duration::from_secs(30);

/// An upstream sample of one word with its usage: 7 prompt tokens, 1 generated.
const SAMPLE_WITH_USAGE: &str = "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"up\",\
\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"ok\"},\"finish_reason\":\"stop\"}]}\n\n\
data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"up\",\"choices\":[],\
\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":1,\"total_tokens\":8}}\n\ndata: [DONE]\n\n";

/// A folder of this test's own.
fn folder(name: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("choicewise-records-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A free port of 127.0.0.1.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `choicewise serve` of `toml` on `port`, in `dir`, the keys' variables set, once it
/// listens; the rest of its log read into `log` as it comes.
async fn serve(
    dir: &Path,
    name: &str,
    toml: &str,
    port: u16,
) -> (
    tokio::process::Child,
    std::sync::Arc<std::sync::Mutex<Vec<String>>>,
) {
    let config = dir.join(format!("{name}.toml"));
    std::fs::write(&config, toml).unwrap();
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_choicewise"))
        .args(["serve", "--config", config.to_str().unwrap()])
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .current_dir(dir)
        .env("TEAM_A_KEY", "sk-team-a")
        .env("TEAM_B_KEY", "sk-team-b")
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
    let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let kept = log.clone();
    tokio::spawn(async move {
        while let Ok(Some(line)) = stderr.next_line().await {
            kept.lock().unwrap().push(line);
        }
    });
    (child, log)
}

/// The keys `team-a` and `team-b`, records into `url` (samples too), and models `small`
/// (priced: a sample of 7 and 1 tokens costs $0.10), `voting` (a vote of three samples),
/// `broken` (its upstream answers 500) and `stuck` (its samples stall) on these upstreams.
fn config(url: &str, ok: &str, failing: &str, stalling: &str) -> String {
    let model = |name: &str, base: &str, pick: &str| {
        format!(
            "[[models]]\nname = \"{name}\"\n{pick}[[models.upstreams]]\napi = \"chat\"\nbase_url = \"{base}\"\nmodel = \"up\"\nn = \"fan-out\"\n"
        )
    };
    format!(
        "shutdown_grace_s = 5\n\
         [auth]\n[[auth.keys]]\nname = \"team-a\"\nkey_env = \"TEAM_A_KEY\"\n\
         [[auth.keys]]\nname = \"team-b\"\nkey_env = \"TEAM_B_KEY\"\n\
         [records]\nurl = \"{url}\"\nsamples = true\n{}{}{}{}",
        model(
            "small",
            ok,
            "price = { input_per_million = 10000.0, output_per_million = 30000.0 }\n"
        ),
        model(
            "voting",
            ok,
            "[models.choicewise]\nsamples = 3\nselect = \"vote\"\nmin_votes = 3\n"
        ),
        model("broken", failing, ""),
        model(
            "stuck",
            stalling,
            "[models.choicewise]\nsamples = 2\nselect = \"vote\"\n"
        ),
    )
}

/// The upstreams: one answering, one failing, one stalling.
async fn upstreams() -> (TestServer, TestServer, TestServer) {
    let ok = TestServer::builder()
        .body(SAMPLE_WITH_USAGE)
        .start()
        .await
        .unwrap();
    let failing = TestServer::builder()
        .fail(choicewise_testserver::Failure::status(500))
        .start()
        .await
        .unwrap();
    let stalling = TestServer::builder()
        .body(choicewise_testserver::answer("let me think"))
        .stall_after_events(1)
        .start()
        .await
        .unwrap();
    (ok, failing, stalling)
}

/// A request of kind `k` (0..5: chat, streamed chat, vote, failure, a client that leaves)
/// with id `id`, as `key`, to `base`: the status it got (499 for the one that left).
async fn ask(client: &reqwest::Client, base: &str, k: usize, id: &str, key: &str) -> u16 {
    let user = json!([{"role": "user", "content": "hi"}]);
    let (model, stream) = match k {
        0 => ("small", false),
        1 => ("small", true),
        2 => ("voting", false),
        3 => ("broken", false),
        _ => ("stuck", true),
    };
    let body = json!({"model": model, "messages": user, "stream": stream});
    if k == 4 {
        // The client leaves while its vote is undecided.
        let addr = base.trim_start_matches("http://");
        let bytes = serde_json::to_vec(&body).unwrap();
        let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let head = format!(
            "POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer {key}\r\n\
             content-type: application/json\r\nx-request-id: {id}\r\ncontent-length: {}\r\n\r\n",
            bytes.len()
        );
        tcp.write_all(head.as_bytes()).await.unwrap();
        tcp.write_all(&bytes).await.unwrap();
        tokio::time::sleep(Duration::from_millis(150)).await;
        return 499;
    }
    let r = client
        .post(format!("{base}/v1/chat/completions"))
        .bearer_auth(key)
        .header("x-request-id", id)
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let _ = r.bytes().await;
    status
}

/// What request `k` must be recorded as: status, samples started, prompt and generated
/// tokens (`None`: not checked: cancelled samples count what they had).
fn expected(k: usize) -> (i64, i64, Option<(i64, i64)>) {
    match k {
        0 | 1 => (200, 1, Some((7, 1))),
        2 => (200, 3, Some((21, 3))),
        3 => (502, 0, None),
        _ => (499, 2, None),
    }
}

fn check_row(r: &RequestRecord, k: usize, key: &str) {
    let (status, started, tokens) = expected(k);
    assert_eq!(r.key, key, "{r:?}");
    assert_eq!(r.status, status, "{r:?}");
    match k {
        // A failure's samples are retried; a client that left may have left while its
        // samples opened.
        3 => {}
        4 => assert!(r.samples_started <= started, "{r:?}"),
        _ => assert_eq!(r.samples_started, started, "{r:?}"),
    }
    if let Some((prompt, completion)) = tokens {
        assert_eq!(
            (r.prompt_tokens, r.completion_tokens),
            (prompt, completion),
            "{r:?}"
        );
        assert_eq!(r.samples.len() as i64, started, "{r:?}");
    }
}

/// Waits until `store` holds `rows` rows (within `limit`): what it holds.
async fn until_rows(store: &Store, rows: u64, limit: Duration) -> u64 {
    let deadline = Instant::now() + limit;
    loop {
        let n = store.count().await.unwrap_or(0);
        if n >= rows || Instant::now() > deadline {
            return n;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `choicewise SUBCOMMAND ARGS...`: its status, stdout and stderr.
fn choicewise(args: &[&str]) -> (i32, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_choicewise"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `choicewise usage ARGS...`.
fn usage(args: &[&str]) -> (i32, String, String) {
    choicewise(&[&["usage"], args].concat())
}

/// `choicewise picks ARGS...`.
fn picks(args: &[&str]) -> (i32, String, String) {
    choicewise(&[&["picks"], args].concat())
}

/// What one gateway records (SQLite, the default file in its folder) is what `usage` reads,
/// and its queue is written at SIGTERM.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_reads_what_serve_recorded() {
    let dir = folder("usage");
    let (ok, failing, stalling) = upstreams().await;
    let toml = config(
        "sqlite://records.db",
        &ok.base_url(),
        &failing.base_url(),
        &stalling.base_url(),
    );
    let port = free_port();
    let (mut child, _log) = serve(&dir, "usage", &toml, port).await;
    let base = format!("http://127.0.0.1:{port}");
    let client = reqwest::Client::new();
    for (i, (k, key)) in [
        (0, "sk-team-a"),
        (1, "sk-team-a"),
        (2, "sk-team-a"),
        (3, "sk-team-b"),
        (0, "sk-team-b"),
    ]
    .into_iter()
    .enumerate()
    {
        assert_eq!(
            ask(&client, &base, k, &format!("u-{i}"), key).await,
            expected(k).0 as u16
        );
    }
    let kill = std::process::Command::new("kill")
        .args(["-TERM", &child.id().unwrap().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let status = within(LIMIT, "the exit", child.wait()).await.unwrap();
    assert_eq!(status.code(), Some(0));

    let url = format!("sqlite://{}", dir.join("records.db").display());
    let (code, out, err) = usage(&["--records", &url, "--by", "key,model", "--json"]);
    assert_eq!(code, 0, "{err}");
    let rows: Value = serde_json::from_str(&out).unwrap();
    let (a, b) = (0.1, 0.1);
    assert_eq!(
        rows,
        json!([
            {"key": "team-a", "model": "small", "requests": 2, "failed": 0, "prompt_tokens": 14, "completion_tokens": 2, "cost_usd": a + a},
            {"key": "team-a", "model": "voting", "requests": 1, "failed": 0, "prompt_tokens": 21, "completion_tokens": 3, "cost_usd": 0.0},
            {"key": "team-b", "model": "broken", "requests": 1, "failed": 1, "prompt_tokens": 0, "completion_tokens": 0, "cost_usd": 0.0},
            {"key": "team-b", "model": "small", "requests": 1, "failed": 0, "prompt_tokens": 7, "completion_tokens": 1, "cost_usd": b},
        ]),
        "{out}"
    );
    // The table docs/records.md shows is what it prints.
    let docs = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/records.md"),
    )
    .unwrap();
    let command = "$ choicewise usage --records sqlite://records.db --by key,model --since 7d\n";
    let shown = docs
        .split("```text\n")
        .find_map(|b| b.strip_prefix(command))
        .and_then(|b| b.split("```").next())
        .expect("docs/records.md shows `choicewise usage`'s table");
    let (code, out, err) = usage(&["--records", &url, "--by", "key,model", "--since", "7d"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, shown);
    let (code, out, _) = usage(&["--records", &url, "--by", "key", "--since", "1d"]);
    assert_eq!(code, 0);
    assert!(out.starts_with("key     requests  failed"), "{out}");
    assert!(out.contains("\ntotal          5       1"), "{out}");
    let (code, _, err) = usage(&["--records", &url, "--by", "colour"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("\"colour\" is not one of key, model, day, api"),
        "{err}"
    );
    let (code, _, err) = usage(&["--records", "sqlite:///nowhere/records.db"]);
    assert_eq!(code, 1);
    assert!(err.contains("/nowhere/records.db: no such file"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Sends requests `from..to` (their kind `i % 5`, their key by `i % 2`), `concurrency` at a
/// time: each one's id, kind, key, status and time.
async fn load(
    base: &str,
    prefix: &str,
    range: std::ops::Range<usize>,
    concurrency: usize,
) -> Vec<(String, usize, &'static str, u16, Duration)> {
    use futures::StreamExt;
    let client = reqwest::Client::new();
    futures::stream::iter(range)
        .map(|i| {
            let client = client.clone();
            async move {
                let k = i % 5;
                let key = if i % 2 == 0 { "sk-team-a" } else { "sk-team-b" };
                let id = format!("{prefix}-{i}");
                let t = Instant::now();
                let status = ask(&client, base, k, &id, key).await;
                (id, k, key, status, t.elapsed())
            }
        })
        .buffer_unordered(concurrency)
        .collect()
        .await
}

fn key_name(key: &str) -> &'static str {
    if key == "sk-team-a" {
        "team-a"
    } else {
        "team-b"
    }
}

/// Three gateways behind nginx write to one PostgreSQL: 3,000 requests (streamed and not,
/// votes, failures, clients that leave) are 3,000 rows, each with its key, status and
/// tokens. Then the database is stopped for 30 s under load: no request fails or slows for
/// it, and once it is back every record is written, none twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs nginx and PostgreSQL (CI installs them: apt-get install nginx-light postgresql)"]
async fn three_gateways_behind_nginx_keep_one_row_per_request_in_postgres() {
    let mut pg =
        PostgresServer::start().expect("PostgreSQL is not installed; this test DID NOT RUN");
    let dir = folder("nginx-postgres");
    let (ok, failing, stalling) = upstreams().await;
    let toml = config(
        &pg.url(),
        &ok.base_url(),
        &failing.base_url(),
        &stalling.base_url(),
    );
    let ports = [free_port(), free_port(), free_port()];
    let mut gateways = Vec::new();
    for (i, port) in ports.iter().enumerate() {
        let own = dir.join(format!("g{i}"));
        std::fs::create_dir_all(&own).unwrap();
        gateways.push(serve(&own, "gateway", &toml, *port).await);
    }
    let port = free_port();
    let servers: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    let _nginx = nginx::start(&dir, port, &servers, "").await;
    let front = format!("http://127.0.0.1:{port}");

    let sent = load(&front, "n", 0..3_000, 32).await;
    for (id, k, _, status, _) in &sent {
        assert_eq!(i64::from(*status), expected(*k).0, "{id}");
    }
    let store = Store::connect(&pg.url()).await.unwrap();
    assert_eq!(until_rows(&store, 3_000, LIMIT).await, 3_000);
    let rows: HashMap<String, RequestRecord> = store
        .records(&RecordsQuery::since(0).with_samples())
        .await
        .unwrap()
        .into_iter()
        .map(|r| (r.request_id.clone(), r))
        .collect();
    assert_eq!(rows.len(), 3_000, "one row per request id");
    for (id, k, key, _, _) in &sent {
        check_row(&rows[id], *k, key_name(key));
    }
    store.close().await;

    // The database stopped for 30 s under load.
    let before: Vec<Duration> = load(&front, "b", 0..500, 16)
        .await
        .iter()
        .map(|r| r.4)
        .collect();
    pg.stop();
    let started = Instant::now();
    let mut during = Vec::new();
    let mut i = 0;
    while started.elapsed() < Duration::from_secs(30) {
        during.extend(load(&front, "o", i..i + 100, 16).await);
        i += 100;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    pg.start_again();
    for (id, k, _, status, _) in &during {
        assert_eq!(
            i64::from(*status),
            expected(*k).0,
            "{id} while the database was away"
        );
    }
    let p99 = |mut d: Vec<Duration>| {
        d.sort();
        d[d.len() * 99 / 100]
    };
    let (p99_before, p99_during) = (p99(before), p99(during.iter().map(|r| r.4).collect()));
    eprintln!(
        "p99 before {p99_before:?}, while the database was away {p99_during:?} ({} requests)",
        during.len()
    );
    assert!(
        p99_during < p99_before * 2 + Duration::from_millis(100),
        "p99 {p99_before:?} before, {p99_during:?} while the database was away"
    );
    let total = 3_000 + 500 + during.len() as u64;
    let store = Store::connect(&pg.url()).await.unwrap();
    assert_eq!(
        until_rows(&store, total, Duration::from_secs(60)).await,
        total
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(store.count().await.unwrap(), total, "none twice");
    let rows = store.records(&RecordsQuery::since(0)).await.unwrap();
    let by_id: HashMap<&str, &RequestRecord> =
        rows.iter().map(|r| (r.request_id.as_str(), r)).collect();
    for (id, k, key, _, _) in &during {
        let r = by_id
            .get(id.as_str())
            .unwrap_or_else(|| panic!("{id} not written"));
        assert_eq!(
            (r.key.as_str(), r.status),
            (key_name(key), expected(*k).0),
            "{id}"
        );
    }
    // Each gateway said the database went away and came back, once each.
    for (_, log) in &gateways {
        let log = log.lock().unwrap();
        let away = log
            .iter()
            .filter(|l| l.contains("records: the database is away"))
            .count();
        let back = log
            .iter()
            .filter(|l| l.contains("records: the database answers again"))
            .count();
        assert_eq!((away, back), (1, 1), "{log:?}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A gateway killed with `kill -9` under load loses at most the records of the requests in
/// flight and its queue's (docs/records.md): every request answered before the kill, but the
/// last moment's, has its row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL (CI installs it: apt-get install postgresql)"]
async fn kill_9_loses_at_most_the_requests_in_flight() {
    let pg = PostgresServer::start().expect("PostgreSQL is not installed; this test DID NOT RUN");
    let dir = folder("kill-9");
    let (ok, failing, stalling) = upstreams().await;
    let toml = config(
        &pg.url(),
        &ok.base_url(),
        &failing.base_url(),
        &stalling.base_url(),
    );
    let port = free_port();
    let (mut child, _log) = serve(&dir, "gateway", &toml, port).await;
    let base = format!("http://127.0.0.1:{port}");
    let client = reqwest::Client::new();
    let answered = std::sync::Arc::new(std::sync::Mutex::new(Vec::<(String, Instant)>::new()));
    let load = {
        let answered = answered.clone();
        tokio::spawn(async move {
            use futures::StreamExt;
            futures::stream::iter(0..100_000usize)
                .map(|i| {
                    let (client, base, answered) = (client.clone(), base.clone(), answered.clone());
                    async move {
                        // Answered requests only: chats and votes.
                        let k = [0, 1, 2][i % 3];
                        let id = format!("k-{i}");
                        if ask(&client, &base, k, &id, "sk-team-a").await == 200 {
                            answered.lock().unwrap().push((id, Instant::now()));
                        }
                    }
                })
                .buffer_unordered(16)
                .collect::<Vec<()>>()
                .await
        })
    };
    tokio::time::sleep(Duration::from_secs(3)).await;
    let killed = Instant::now();
    child.start_kill().unwrap();
    let _ = child.wait().await;
    load.abort();
    let answered = answered.lock().unwrap().clone();
    let store = Store::connect(&pg.url()).await.unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let rows: std::collections::HashSet<String> = store
        .records(&RecordsQuery::since(0))
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.request_id)
        .collect();
    let lost: Vec<&(String, Instant)> = answered
        .iter()
        .filter(|(id, _)| !rows.contains(id))
        .collect();
    let lost_before = lost
        .iter()
        .filter(|(_, at)| killed.duration_since(*at) > Duration::from_millis(500))
        .count();
    eprintln!(
        "{} answered before the kill, {} rows, {} answered without a row",
        answered.len(),
        rows.len(),
        lost.len()
    );
    assert!(answered.len() > 100, "the load ran: {}", answered.len());
    assert_eq!(
        lost_before, 0,
        "rows lost of requests answered over 0.5 s before the kill"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Production traffic measured: a gateway records every sample of requests for 4 choices;
/// `picks record --from-records` writes them as a set, and `picks report` measures each pick
/// against the vote of all of a request's samples, saying so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_picks_are_measured_on_recorded_traffic() {
    let dir = folder("from-records");
    // Six requests of four samples: answers 4, 4, 5, 4 for the first three requests, then
    // 7, 8, 8, 7 (a tie, 7 drawn first) for the last three.
    let says = |n: u32| {
        TestServer::builder().body(choicewise_testserver::answer(&format!("So it is #### {n}")))
    };
    let mut samples = Vec::new();
    for r in 0..6 {
        let answers = if r < 3 { [4, 4, 5, 4] } else { [7, 8, 8, 7] };
        samples.extend(answers.map(says));
    }
    let mut samples = samples.into_iter();
    let first = samples.next().unwrap();
    let upstream = samples.fold(first, choicewise_testserver::TestServerBuilder::then);
    let upstream = upstream.start().await.unwrap();
    let toml = format!(
        "[records]\nurl = \"sqlite://records.db\"\nsamples = true\n\
         [[models]]\nname = \"m\"\n[[models.upstreams]]\napi = \"chat\"\nbase_url = \"{}\"\nmodel = \"up\"\nn = \"fan-out\"\n",
        upstream.base_url()
    );
    let port = free_port();
    let (mut child, _log) = serve(
        &dir,
        "from-records",
        &format!("shutdown_grace_s = 5\n{toml}"),
        port,
    )
    .await;
    let client = reqwest::Client::new();
    for i in 0..6 {
        // One request at a time: its four samples are the next four answers.
        let r = client
            .post(format!("http://127.0.0.1:{port}/v1/chat/completions"))
            .header("x-request-id", format!("prod-{i}"))
            .json(&json!({"model": "m", "n": 4, "messages": [{"role": "user", "content": "2+2?"}]}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let _ = r.bytes().await;
    }
    let kill = std::process::Command::new("kill")
        .args(["-TERM", &child.id().unwrap().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    within(LIMIT, "the exit", child.wait()).await.unwrap();

    let url = format!("sqlite://{}", dir.join("records.db").display());
    let set = dir.join("set");
    let (code, _, err) = picks(&[
        "record",
        "--from-records",
        &url,
        "--model",
        "m",
        "--out",
        set.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("6 requests of \"m\" with several samples"),
        "{err}"
    );
    let (code, out, err) = picks(&[
        "report",
        set.to_str().unwrap(),
        "--answer",
        r"#### (\d+)",
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let report: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        report["measured_against"],
        "the vote of all of each item's samples (no answers in the set)"
    );
    let pick = |name: &str| {
        (report["picks"].as_array().unwrap().iter())
            .find(|p| p["name"] == name)
            .unwrap_or_else(|| panic!("no pick {name}: {report}"))
            .clone()
    };
    // The vote of all four is the full vote itself, on the gateway and offline alike.
    let vote = pick("vote-4");
    assert_eq!(vote["accuracy"], 1.0, "{vote}");
    assert_eq!(vote["reference"]["accuracy"], 1.0, "{vote}");
    assert_eq!(vote["differing"], json!([]), "{vote}");
    // One sample agrees with the full vote where it drew its answer (which sample drew which
    // answer is the order the upstream served the four requests): the gateway as offline.
    let single = pick("single");
    assert_eq!(
        single["accuracy"], single["reference"]["accuracy"],
        "{single}"
    );
    assert!(single["accuracy"].as_f64().unwrap() >= 0.5, "{single}");
    let (code, _, err) = picks(&[
        "record",
        "--from-records",
        &url,
        "--model",
        "other",
        "--out",
        dir.join("none").to_str().unwrap(),
    ]);
    assert_eq!(code, 1);
    assert!(
        err.contains("no request of model \"other\" with two samples or more"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
