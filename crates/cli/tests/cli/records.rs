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

use choicewise_records::{Grade, RecordsQuery, RequestRecord, Store};
use choicewise_test_support::{PostgresServer, within};
use choicewise_testserver::TestServer;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use crate::nginx;
use crate::records_data::{T0, folder, recorded};

const LIMIT: Duration = Duration::from_secs(30);

/// An upstream sample of one word with its usage: 7 prompt tokens, 1 generated.
const SAMPLE_WITH_USAGE: &str = "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"up\",\
\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"ok\"},\"finish_reason\":\"stop\"}]}\n\n\
data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"up\",\"choices\":[],\
\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":1,\"total_tokens\":8}}\n\ndata: [DONE]\n\n";

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

/// A PostgreSQL server of the test's own, a folder named `name`, the upstreams and the
/// configuration of [`config`] on them (the upstreams returned to be kept alive).
async fn with_postgres(
    name: &str,
) -> (
    PostgresServer,
    PathBuf,
    String,
    (TestServer, TestServer, TestServer),
) {
    let pg = PostgresServer::start().expect("PostgreSQL is not installed; this test DID NOT RUN");
    let dir = folder(name);
    let upstreams = upstreams().await;
    let (ok, failing, stalling) = &upstreams;
    let toml = config(
        &pg.url(),
        &ok.base_url(),
        &failing.base_url(),
        &stalling.base_url(),
    );
    (pg, dir, toml, upstreams)
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
    let (mut pg, dir, toml, _upstreams) = with_postgres("nginx-postgres").await;
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
    let (pg, dir, toml, _upstreams) = with_postgres("kill-9").await;
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

/// Two gateways started from one folder with the default spool, at about 100 requests/s:
/// PostgreSQL stops (as a crash would), one gateway is killed with `kill -9` while it is
/// away, a gateway started in its place and the database back: every request answered has
/// its row but those the killed gateway answered in the last second before its kill.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL (CI installs it: apt-get install postgresql)"]
async fn replicas_in_one_folder_and_a_kill_9_while_the_database_is_away_lose_at_most_a_second() {
    let (mut pg, dir, toml, _upstreams) = with_postgres("one-folder").await;
    let ports = [free_port(), free_port()];
    let (mut killed_one, _a) = serve(&dir, "a", &toml, ports[0]).await;
    let (_b, _b_log) = serve(&dir, "b", &toml, ports[1]).await;
    let client = reqwest::Client::new();
    // (request id, which gateway, when answered)
    type Answered = Vec<(String, usize, Instant)>;
    let answered = std::sync::Arc::new(std::sync::Mutex::new(Answered::new()));
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let load = {
        let (answered, stop) = (answered.clone(), stop.clone());
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(10));
            let mut i = 0usize;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) && i < 2_000 {
                tick.tick().await;
                let (client, answered) = (client.clone(), answered.clone());
                let which = i % 2;
                let base = format!("http://127.0.0.1:{}", ports[which]);
                let id = format!("one-folder-{i}");
                tokio::spawn(async move {
                    let sent = client
                        .post(format!("{base}/v1/chat/completions"))
                        .bearer_auth("sk-team-a")
                        .header("x-request-id", &id)
                        .json(&json!({"model": "small", "messages": [{"role": "user", "content": "hi"}]}))
                        .timeout(Duration::from_secs(5))
                        .send()
                        .await;
                    if let Ok(r) = sent
                        && r.status() == 200
                        && r.bytes().await.is_ok()
                    {
                        answered.lock().unwrap().push((id, which, Instant::now()));
                    }
                });
                i += 1;
            }
        })
    };
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    pg.stop();
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    killed_one.start_kill().unwrap();
    let _ = killed_one.wait().await;
    // The kill's time is its process's death: an answer the killed gateway finished while
    // the signal was on its way is one of its last, not one after it.
    let killed = Instant::now();
    tokio::time::sleep(Duration::from_millis(500)).await;
    pg.start_again();
    // A gateway in the killed one's place takes its slot of the spool, and writes it.
    let (_c, _c_log) = serve(&dir, "c", &toml, ports[0]).await;
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let _ = load.await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let answered = answered.lock().unwrap().clone();
    let store = Store::connect(&pg.url()).await.unwrap();
    let started = Instant::now();
    let lost = loop {
        let rows: std::collections::HashSet<String> = (store.records(&RecordsQuery::since(0)))
            .await
            .unwrap()
            .into_iter()
            .map(|r| r.request_id)
            .collect();
        let lost: Vec<(String, usize, Instant)> = (answered.iter())
            .filter(|(id, _, _)| !rows.contains(id))
            .cloned()
            .collect();
        let settled = lost.iter().all(|(_, which, at)| {
            *which == 0 && *at <= killed && killed - *at <= Duration::from_secs(1)
        });
        if settled || started.elapsed() > Duration::from_secs(30) {
            break lost;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let oldest = (lost.iter())
        .filter(|(_, which, at)| *which == 0 && *at <= killed)
        .map(|(_, _, at)| killed - *at)
        .max();
    eprintln!(
        "{} answered, {} without a row (all the killed gateway's, the oldest {oldest:?} before its kill)",
        answered.len(),
        lost.len()
    );
    assert!(answered.len() > 300, "the load ran: {}", answered.len());
    for (id, which, at) in &lost {
        assert!(
            *which == 0 && *at <= killed && killed - *at <= Duration::from_secs(1),
            "{id} answered by gateway {which}, {:?} before the kill, has no row",
            killed.checked_duration_since(*at)
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A gateway recording every sample (`[records] samples = true`, SQLite in `dir`) of model
/// `m`, asked once per entry of `answers` (`x-request-id: prod-I`) for four choices, one
/// request at a time: its upstream answers the request's four samples `So it is #### N`, N
/// the entry's numbers in turn. Stopped by SIGTERM once asked: the records' URL.
async fn record_answers(dir: &Path, answers: &[[u32; 4]]) -> String {
    let says = |n: u32| {
        TestServer::builder().body(choicewise_testserver::answer(&format!("So it is #### {n}")))
    };
    let mut samples = answers.iter().flat_map(|a| a.map(says));
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
        dir,
        "from-records",
        &format!("shutdown_grace_s = 5\n{toml}"),
        port,
    )
    .await;
    let client = reqwest::Client::new();
    for i in 0..answers.len() {
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
    format!("sqlite://{}", dir.join("records.db").display())
}

/// A pick's row of a report.
fn pick_of(report: &Value, name: &str) -> Value {
    (report["picks"].as_array().unwrap().iter())
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("no pick {name}: {report}"))
        .clone()
}

/// What a report measured against the vote says it measured.
const BY_VOTE: &str = "the vote of all of each item's samples (no answers in the set)";

/// Production traffic measured: a gateway records every sample of requests for 4 choices;
/// `picks record --from-records` writes them as a set, and `picks report` measures each pick
/// against the vote of all of a request's samples, saying so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_picks_are_measured_on_recorded_traffic() {
    let dir = folder("from-records");
    // Six requests of four samples: answers 4, 4, 5, 4 for the first three requests, then
    // 7, 8, 8, 7 (a tie, 7 drawn first) for the last three.
    let answers: Vec<[u32; 4]> = (0..6)
        .map(|r| if r < 3 { [4, 4, 5, 4] } else { [7, 8, 8, 7] })
        .collect();
    let url = record_answers(&dir, &answers).await;
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
    // No grade: the vote alone, as one report.
    assert_eq!(report["measured_against"], BY_VOTE);
    assert_eq!(report["items_graded"], Value::Null);
    assert_eq!(report["agreement"], Value::Null);
    let pick = |name: &str| pick_of(&report, name);
    // The vote of all four is the full vote itself, on the gateway and offline alike.
    let vote = pick("vote-4");
    assert_eq!(vote["accuracy"], 1.0, "{vote}");
    assert_eq!(vote["reference"]["accuracy"], 1.0, "{vote}");
    assert_eq!(vote["differing"], json!([]), "{vote}");
    // One sample agrees with the full vote where it drew its answer (which sample drew which
    // answer is the order the upstream served the four requests): the gateway as offline.
    let single = pick("single");
    assert_eq!(
        single["first_sample_accuracy"], single["reference"]["first_sample_accuracy"],
        "{single}"
    );
    // One sample's accuracy is the mean over every sample of each item, within its interval.
    assert_eq!(
        single["accuracy"], single["reference"]["accuracy"],
        "{single}"
    );
    let interval = &single["accuracy_interval"];
    assert!(
        interval[0].as_f64() <= single["accuracy"].as_f64(),
        "{single}"
    );
    assert!(
        single["accuracy"].as_f64() <= interval[1].as_f64(),
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

/// Production traffic graded: of twelve recorded requests, six get a grade (written into the
/// records as `POST /v1/feedback` keeps it); `picks record --from-records` carries them as
/// the items' grades, and `picks report` measures accuracy on those six and agreement on the
/// other six, in two reports, never one figure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_picks_are_measured_on_graded_traffic_apart_from_the_rest() {
    let dir = folder("graded");
    // Requests 0 to 5 say one answer four times (10 + I); requests 6 to 11 say 4, 4, 5, 4
    // three times, then 7, 8, 8, 7 three times.
    let answers: Vec<[u32; 4]> = (0..12)
        .map(|r| match r {
            0..6 => [10 + r; 4],
            6..9 => [4, 4, 5, 4],
            _ => [7, 8, 8, 7],
        })
        .collect();
    let url = record_answers(&dir, &answers).await;
    // Four graded right, one wrong, one scored 0.8 (right); the latest grade counts.
    let store = Store::connect(&url).await.unwrap();
    let grades = [
        ("prod-0", Grade::new(1.0, "right", "(operator)", T0)),
        ("prod-1", Grade::new(1.0, "right", "(operator)", T0)),
        (
            "prod-2",
            Grade::new(1.0, "right", "(operator)", T0).source("ci"),
        ),
        ("prod-3", Grade::new(0.0, "wrong", "(operator)", T0)),
        ("prod-3", Grade::new(1.0, "right", "(operator)", T0 + 1)),
        ("prod-4", Grade::new(0.0, "wrong", "(operator)", T0)),
        ("prod-5", Grade::new(0.8, "score", "(operator)", T0)),
    ];
    for (id, g) in &grades {
        store.add_grade(id, g).await.unwrap();
    }
    store.close().await;
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
    assert!(err.contains("6 graded (POST /v1/feedback)"), "{err}");
    let read = |name: &str| -> Value {
        serde_json::from_str(&std::fs::read_to_string(set.join(name)).unwrap()).unwrap()
    };
    assert_eq!(read("meta.json")["graded_items"], 6);
    // Each grade speaks of the sample that became the answer's first choice: sample 0.
    let kept = read("grades.json");
    assert_eq!(kept.as_object().unwrap().len(), 6, "{kept}");
    assert_eq!(
        kept["prod-2"],
        json!({"sample": 0, "outcome": "right", "score": 1.0, "source": "ci", "by": "(operator)", "at_ms": T0})
    );
    assert_eq!(kept["prod-3"]["outcome"], "right", "{kept}");
    assert_eq!(kept["prod-4"]["score"], 0.0, "{kept}");

    let report_args = ["report", set.to_str().unwrap(), "--answer", r"#### (\d+)"];
    let (code, out, err) = picks(&[&report_args[..], &["--json"]].concat());
    assert_eq!(code, 0, "{err}");
    let report: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["measured_against"], "feedback", "{report}");
    assert_eq!(report["items_graded"], 6, "{report}");
    assert_eq!(report["problems"], 6, "{report}");
    let agreement = &report["agreement"];
    assert_eq!(agreement["measured_against"], BY_VOTE, "{agreement}");
    assert_eq!(agreement["problems"], 6, "{agreement}");
    assert_eq!(agreement["items_graded"], Value::Null, "{agreement}");
    // On the graded items every pick says the item's one answer: right on the five graded
    // right, wrong on the one graded wrong, on the gateway and offline alike.
    for name in ["vote-4", "single"] {
        let p = pick_of(&report, name);
        assert_eq!(p["accuracy"], 5.0 / 6.0, "{p}");
        assert_eq!(p["reference"]["accuracy"], 5.0 / 6.0, "{p}");
    }
    assert_eq!(report["majority"]["accuracy"], 5.0 / 6.0, "{report}");
    // On the others, the vote of all four agrees with itself: the figures are not mixed.
    let vote = pick_of(agreement, "vote-4");
    assert_eq!(vote["accuracy"], 1.0, "{vote}");
    assert_eq!(vote["reference"]["accuracy"], 1.0, "{vote}");
    assert!(report["recommendation"].is_object(), "{report}");
    assert!(agreement["recommendation"].is_object(), "{agreement}");

    let (code, out, err) = picks(&report_args);
    assert_eq!(code, 0, "{err}");
    let graded = out
        .find("Graded by feedback (POST /v1/feedback): 6 items: accuracy")
        .unwrap_or_else(|| panic!("{out}"));
    let heading = format!(
        "No answers in {} for its 6 items without a grade",
        set.display()
    );
    let rest = out.find(&heading).unwrap_or_else(|| panic!("{out}"));
    assert!(graded < rest, "{out}");
    // The recommendation is the graded items', and says so.
    assert!(out.contains("% right by feedback"), "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A records database damaged by hand or by a tool (SQLite keeps whatever a column is given):
/// `usage` and `picks record --from-records` leave out the rows they cannot read, count them
/// and name them on stderr, and read the rest, exit 0; a name of 65,536 characters is cut in
/// the table, counts past `u64::MAX` stop there and say so, no sum prints `inf` (issue 84).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_and_from_records_leave_out_the_rows_they_cannot_read_naming_them() {
    let dir = folder("damaged");
    let url = format!("sqlite://{}", dir.join("records.db").display());
    let store = Store::connect(&url).await.unwrap();
    let long_key = "k".repeat(65_536);
    let answer = "So it is #### 4";
    store
        .write(&[
            recorded("good-1", "team-a", T0, 2, answer),
            recorded("good-2", "team-a", T0 + 1, 2, answer),
            recorded("long-key", &long_key, T0 + 2, 2, answer),
            recorded("blob-key", "team-b", T0 + 3, 2, answer),
            recorded("real-tokens", "team-b", T0 + 4, 2, answer),
            recorded("huge-cost", "team-b", T0 + 5, 2, answer),
            recorded("blob-id", "team-b", T0 + 6, 2, answer),
            recorded("blob-sample", "team-a", T0 + 7, 3, answer),
            recorded("not-utf8", "team-c", T0 + 8, 2, answer),
            recorded("max-1", "team-max", T0 + 9, 2, answer),
            recorded("max-2", "team-max", T0 + 10, 2, answer),
            recorded("max-3", "team-max", T0 + 11, 2, answer),
        ])
        .await
        .unwrap();
    store.close().await;
    let pool = sqlx::SqlitePool::connect(&url).await.unwrap();
    let blob_id_rowid: i64 = sqlx::query_scalar("SELECT rowid FROM requests WHERE id = 'blob-id'")
        .fetch_one(&pool)
        .await
        .unwrap();
    for damage in [
        "UPDATE requests SET key_name = X'6b6579' WHERE id = 'blob-key'",
        "UPDATE requests SET prompt_tokens = 1.5 WHERE id = 'real-tokens'",
        "UPDATE requests SET cost_usd = 1e300 WHERE id = 'huge-cost'",
        "UPDATE requests SET id = X'00ff', at_ms = 'soon', key_name = X'00' WHERE id = 'blob-id'",
        "UPDATE samples SET content = X'00' WHERE request = 'blob-sample' AND sample = 1",
        "UPDATE requests SET key_name = CAST(X'ff' AS TEXT) WHERE id = 'not-utf8'",
        "UPDATE requests SET prompt_tokens = 9223372036854775807 WHERE key_name = 'team-max'",
    ] {
        sqlx::query(damage).execute(&pool).await.unwrap();
    }
    pool.close().await;

    let (code, out, err) = usage(&["--records", &url, "--by", "key,model"]);
    assert_eq!(code, 0, "{err}");
    assert!(!err.contains("panicked"), "{err}");
    let lines: Vec<&str> = out.lines().collect();
    let cut = format!("{}…  m ", "k".repeat(63));
    assert!(lines.iter().any(|l| l.starts_with(&cut)), "{out}");
    assert!(lines.iter().all(|l| l.chars().count() < 200), "{out}");
    let team_a = lines.iter().find(|l| l.starts_with("team-a ")).unwrap();
    assert!(team_a.contains(" 3 "), "{team_a}");
    let team_max = lines.iter().find(|l| l.starts_with("team-max ")).unwrap();
    assert!(team_max.contains(" 18446744073709551615 "), "{team_max}");
    assert!(lines.iter().any(|l| l.starts_with("\u{fffd} ")), "{out}");
    assert!(!lines.iter().any(|l| l.starts_with("team-b ")), "{out}");
    let total = lines.last().unwrap();
    assert!(total.starts_with("total "), "{out}");
    assert!(total.contains(" 8 "), "{total}");
    assert!(!out.contains("inf") && !out.contains("NaN"), "{out}");
    for said in [
        "choicewise: usage: 4 rows could not be read and were left out:".to_string(),
        r#"requests id "blob-key": key_name holds a blob of 3 bytes, wanted text"#.into(),
        r#"requests id "real-tokens": prompt_tokens holds the real 1.5, wanted an integer of at least 0"#.into(),
        r#"requests id "huge-cost": cost_usd holds the real 1.0e+300, wanted null or a cost from 0 to 1e12"#.into(),
        format!("requests rowid {blob_id_rowid}: key_name holds a blob of 1 byte, wanted text"),
        "a sum reached 18446744073709551615 (the most a count holds) and stops there".into(),
    ] {
        assert!(err.contains(&said), "{said:?} not in {err}");
    }

    // The JSON keeps the names whole.
    let (code, out, err) = usage(&["--records", &url, "--by", "key", "--json"]);
    assert_eq!(code, 0, "{err}");
    let rows: Value = serde_json::from_str(&out).unwrap();
    let rows = rows.as_array().unwrap();
    assert!(rows.iter().any(|r| r["key"] == long_key.as_str()), "{out}");
    let max = rows.iter().find(|r| r["key"] == "team-max").unwrap();
    assert_eq!(max["prompt_tokens"], u64::MAX, "{max}");
    // By model, the key is not read: the row of a blob key is counted.
    let (code, out, err) = usage(&["--records", &url, "--by", "model", "--json"]);
    assert_eq!(code, 0, "{err}");
    let rows: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(rows[0]["requests"], 10, "{out}");
    assert!(err.contains(" 2 rows could not be read"), "{err}");

    // The same check, row by row: the readable requests are items, the others named.
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
    assert!(!err.contains("panicked"), "{err}");
    for said in [
        "choicewise: picks record: 5 rows could not be read and were left out:".to_string(),
        format!("requests rowid {blob_id_rowid}: id holds a blob of 2 bytes, wanted text; at_ms holds a text of 4 bytes, wanted an integer; key_name holds a blob of 1 byte, wanted text"),
        r#"requests id "blob-key": key_name holds a blob of 3 bytes, wanted text"#.into(),
        r#"requests id "real-tokens": prompt_tokens holds the real 1.5, wanted an integer"#.into(),
        r#"requests id "not-utf8": key_name cannot be read"#.into(),
        r#"samples request "blob-sample", sample 1: content holds a blob of 1 byte, wanted text or null"#.into(),
        "8 requests of \"m\" with several samples written".into(),
    ] {
        assert!(err.contains(&said), "{said:?} not in {err}");
    }
    let meta: Value =
        serde_json::from_str(&std::fs::read_to_string(set.join("meta.json")).unwrap()).unwrap();
    assert_eq!(
        (meta["items"].as_u64(), meta["rows_left_out"].as_u64()),
        (Some(8), Some(5))
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
    assert_eq!(report["problems"], 8, "{report}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// PostgreSQL keeps each column's type, but a count may be negative and a cost Infinity or
/// NaN: `usage` names those rows and sums the rest; the records are read page by page by
/// their keys, requests of one millisecond told apart by their ids.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_usage_and_from_records_page_by_key_and_leave_out_what_cannot_be_summed() {
    let Some(pg) = PostgresServer::start() else {
        return;
    };
    let store = Store::connect(&pg.url()).await.unwrap();
    let mut records: Vec<RequestRecord> = (0..40)
        .map(|i| recorded(&format!("r-{i:02}"), "team-a", T0 + i / 3, 2, "#### 4"))
        .collect();
    for (id, at) in [("negative", 1), ("infinite", 2), ("nan", 3)] {
        records.push(recorded(id, "team-b", T0 + at, 2, "#### 5"));
    }
    store.write(&records).await.unwrap();
    let read = store.records(&RecordsQuery::since(0)).await.unwrap();
    assert_eq!(read.len(), 43);
    let keys: Vec<(i64, String)> = read.iter().map(|r| (r.at_ms, r.id.clone())).collect();
    let unique: std::collections::HashSet<&String> = keys.iter().map(|k| &k.1).collect();
    assert_eq!(unique.len(), 43, "each record once");
    assert!(keys.windows(2).all(|w| w[0].0 <= w[1].0), "{keys:?}");
    store.close().await;
    let pool = sqlx::PgPool::connect(&pg.url()).await.unwrap();
    for damage in [
        "UPDATE requests SET prompt_tokens = -5 WHERE id = 'negative'",
        "UPDATE requests SET cost_usd = 'Infinity' WHERE id = 'infinite'",
        "UPDATE requests SET cost_usd = 'NaN' WHERE id = 'nan'",
    ] {
        sqlx::query(damage).execute(&pool).await.unwrap();
    }
    pool.close().await;

    let (code, out, err) = usage(&["--records", &pg.url(), "--by", "key", "--json"]);
    assert_eq!(code, 0, "{err}");
    let rows: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        rows,
        json!([{"key": "team-a", "requests": 40, "failed": 0, "prompt_tokens": 400, "completion_tokens": 200, "cost_usd": 10.0}]),
        "{out}"
    );
    for said in [
        "choicewise: usage: 3 rows could not be read and were left out:",
        r#"requests id "negative": prompt_tokens holds the value -5, wanted an integer of at least 0"#,
        r#"requests id "infinite": cost_usd holds the value Infinity, wanted null or a cost from 0 to 1e12"#,
        r#"requests id "nan": cost_usd holds the value NaN, wanted null or a cost from 0 to 1e12"#,
    ] {
        assert!(err.contains(said), "{said:?} not in {err}");
    }
    let (code, out, err) = usage(&["--records", &pg.url(), "--by", "key"]);
    assert_eq!(code, 0, "{err}");
    assert!(!out.contains("inf") && !out.contains("NaN"), "{out}");

    // Readable rows, all of them: 43 items, in the order of their keys.
    let dir = folder("pg-from-records");
    let set = dir.join("set");
    let (code, _, err) = picks(&[
        "record",
        "--from-records",
        &pg.url(),
        "--model",
        "m",
        "--out",
        set.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("43 requests of \"m\" with several samples"),
        "{err}"
    );
    assert!(!err.contains("could not be read"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
