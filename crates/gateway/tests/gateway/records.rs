//! Every request on record (`[records]`), over real sockets: one row per request in SQLite
//! and in a PostgreSQL server started here, whenever its client left, with its key, status,
//! pick and tokens as the upstream was scripted to send them; `samples = true` adds a row per
//! sample. The PostgreSQL test needs Debian's `postgresql` (skipped without it, failed under
//! `CI=true`).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use choicewise_records::{RecordsQuery, RequestRecord, Store};
use choicewise_test_support::PostgresServer;
use choicewise_testserver::TestServer;
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;

use crate::common::{CHAT_OK, fan_out_toml, serve, stalled, start};

fn env(name: &str) -> Option<String> {
    (name == "TEAM_A_KEY").then(|| "sk-team-a".into())
}

/// Posts `body` to `path` as `team-a`, with request id `id`: its status.
async fn post(addr: SocketAddr, path: &str, id: &str, body: Value) -> u16 {
    let r = reqwest::Client::new()
        .post(format!("http://{addr}{path}"))
        .bearer_auth("sk-team-a")
        .header("x-api-key", "sk-team-a")
        .header("x-request-id", id)
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let _ = r.bytes().await.unwrap();
    status
}

/// Reads the records until there are `rows` (within 15 s).
async fn until_rows(store: &Store, rows: usize) -> Vec<RequestRecord> {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let records = store
            .records(&RecordsQuery::since(0).with_samples())
            .await
            .unwrap();
        if records.len() >= rows || Instant::now() > deadline {
            return records;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The same requests recorded into `url`.
/// The bytes of the spool's segment files (the spool is a folder of slots, each of
/// segments).
fn spool_bytes(spool: &std::path::Path) -> u64 {
    (std::fs::read_dir(spool).into_iter().flatten().flatten())
        .flat_map(|slot| {
            std::fs::read_dir(slot.path())
                .into_iter()
                .flatten()
                .flatten()
        })
        .filter(|f| f.path().extension().is_some_and(|e| e == "jsonl"))
        .map(|f| f.metadata().map_or(0, |m| m.len()))
        .sum()
}

async fn every_request_on_record(url: &str, spool: &std::path::Path) {
    let upstream = start(TestServer::builder().body(CHAT_OK)).await;
    let stalling = start(stalled(1)).await;
    let toml = format!(
        "[auth]\n[[auth.keys]]\nname = \"team-a\"\nkey_env = \"TEAM_A_KEY\"\n\
         [records]\nurl = \"{url}\"\nsamples = true\nspool_path = \"{}\"\n\
         [[models]]\nname = \"small\"\nprice = {{ input_per_million = 10000.0, output_per_million = 30000.0 }}\n{}\
         [[models]]\nname = \"voting\"\n[models.choicewise]\nsamples = 3\nselect = \"vote\"\n{}\
         [[models]]\nname = \"stuck\"\n[models.choicewise]\nsamples = 2\nselect = \"vote\"\n{}\
         [[models]]\nname = \"slow\"\n{}",
        spool.display(),
        fan_out_toml(&upstream.base_url(), ""),
        fan_out_toml(&upstream.base_url(), ""),
        fan_out_toml(&stalling.base_url(), ""),
        fan_out_toml(&stalling.base_url(), ""),
    );
    let (addr, gateway) = serve(&toml, env).await;
    let user = json!([{"role": "user", "content": "hi"}]);
    let chat =
        |model: &str, stream: bool| json!({"model": model, "messages": user, "stream": stream});
    assert_eq!(
        post(addr, "/v1/chat/completions", "r-json", chat("small", false)).await,
        200
    );
    assert_eq!(
        post(
            addr,
            "/v1/chat/completions",
            "r-stream",
            chat("small", true)
        )
        .await,
        200
    );
    let messages = json!({"model": "small", "max_tokens": 16, "messages": user});
    assert_eq!(
        post(addr, "/v1/messages", "r-messages", messages).await,
        200
    );
    let responses = json!({"model": "small", "input": "hi", "stream": true});
    assert_eq!(
        post(addr, "/v1/responses", "r-responses", responses).await,
        200
    );
    assert_eq!(
        post(
            addr,
            "/v1/chat/completions",
            "r-vote",
            chat("voting", false)
        )
        .await,
        200
    );
    assert_eq!(
        post(addr, "/v1/chat/completions", "r-404", chat("nope", false)).await,
        404
    );
    // A client that leaves while its vote is undecided.
    let body = serde_json::to_vec(&chat("stuck", true)).unwrap();
    let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer sk-team-a\r\n\
         content-type: application/json\r\nx-request-id: r-gone\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    tcp.write_all(head.as_bytes()).await.unwrap();
    tcp.write_all(&body).await.unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    drop(tcp);
    // A client that leaves after its stream began: it was answered 200.
    let mut r = reqwest::Client::new()
        .post(format!("http://{addr}/v1/chat/completions"))
        .bearer_auth("sk-team-a")
        .header("x-request-id", "r-gone-streaming")
        .json(&chat("slow", true))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let first = r.chunk().await.unwrap().unwrap();
    assert!(first.starts_with(b"data: "), "{first:?}");
    drop(r);

    let store = Store::connect(url).await.unwrap();
    let records = until_rows(&store, 8).await;
    gateway.flush_records().await;
    assert_eq!(records.len(), 8, "{records:#?}");
    let row = |id: &str| {
        let found: Vec<&RequestRecord> = records.iter().filter(|r| r.request_id == id).collect();
        assert_eq!(found.len(), 1, "{id}: {records:#?}");
        found[0]
    };
    for (id, api, stream) in [
        ("r-json", "chat", false),
        ("r-stream", "chat", true),
        ("r-messages", "messages", false),
        ("r-responses", "responses", true),
    ] {
        let r = row(id);
        assert_eq!(
            (r.key.as_str(), r.model.as_str(), r.api.as_str(), r.stream),
            ("team-a", "small", api, stream),
            "{id}"
        );
        assert_eq!((r.status, r.ended.as_str()), (200, "complete"), "{id}");
        assert_eq!(
            (r.samples_started, r.prompt_tokens, r.completion_tokens),
            (1, 7, 1),
            "{id}"
        );
        assert!(!r.estimated, "{id}");
        // $10,000 a million prompt tokens and $30,000 a million generated ones.
        assert!(
            (r.cost_usd.unwrap() - 0.1).abs() < 1e-9,
            "{id}: {:?}",
            r.cost_usd
        );
        assert!(
            r.first_byte_ms.is_some_and(|f| f <= r.total_ms),
            "{id}: {r:?}"
        );
        assert_eq!(r.pick, None, "{id}");
        assert_eq!(r.samples.len(), 1, "{id}");
        assert_eq!(r.samples[0].content.as_deref(), Some("ok"), "{id}");
    }
    let vote = row("r-vote");
    assert_eq!(
        (vote.pick.as_deref(), vote.decision.as_deref()),
        (Some("vote"), Some("decided"))
    );
    // Each of the three samples' upstream requests billed its own prompt; a vote decided at
    // two agreeing samples cancels the third, which counts what it had generated (0 or 1).
    assert_eq!((vote.samples_started, vote.prompt_tokens), (3, 21));
    assert!((2..=3).contains(&vote.completion_tokens), "{vote:?}");
    assert_eq!(vote.sample_tokens.len(), 3);
    assert!(
        vote.sample_tokens
            .iter()
            .all(|t| t.prompt == 7 && t.completion <= 1)
    );
    assert_eq!(vote.cost_usd, None, "no price for `voting`");
    assert_eq!(vote.samples.len(), 3);
    let finished: Vec<_> = vote.samples.iter().filter(|s| s.finish == "stop").collect();
    assert_eq!(
        finished.len() as i64,
        3 - vote.samples_cancelled,
        "{:?}",
        vote.samples
    );
    assert!(finished.iter().all(|s| s.content.as_deref() == Some("ok")));
    let mut places: Vec<i64> = finished.iter().filter_map(|s| s.place).collect();
    places.sort_unstable();
    assert_eq!(
        places,
        (0..finished.len() as i64).collect::<Vec<_>>(),
        "{:?}",
        vote.samples
    );
    let missing = row("r-404");
    assert_eq!(
        (missing.status, missing.ended.as_str()),
        (404, "model_not_found")
    );
    assert_eq!(
        (missing.key.as_str(), missing.samples_started),
        ("team-a", 0)
    );
    let gone = row("r-gone");
    assert_eq!(
        (gone.status, gone.ended.as_str(), gone.model.as_str()),
        (499, "client_gone", "stuck")
    );
    assert_eq!(
        (gone.samples_started, gone.samples_cancelled),
        (2, 2),
        "{gone:?}"
    );
    assert_eq!(gone.decision, None, "its vote never decided");
    let left = row("r-gone-streaming");
    assert_eq!(
        (left.status, left.ended.as_str(), left.stream),
        (200, "client_gone", true),
        "a stream's 200 went with its first byte: {left:?}"
    );
    assert!(left.first_byte_ms.is_some(), "{left:?}");
    assert_eq!(spool_bytes(spool), 0, "nothing spooled");
    // Written once each, however long the writer runs on.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(store.count().await.unwrap(), 8);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_request_has_one_row_in_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("records.db").display());
    every_request_on_record(&url, &dir.path().join("records.spool")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_request_has_one_row_in_postgres() {
    let Some(pg) = PostgresServer::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    every_request_on_record(&pg.url(), &dir.path().join("records.spool")).await;
}

/// Asks model `m` without a key: answered 200 whatever becomes of its record, read whole.
async fn answered_whatever_the_record(addr: SocketAddr) {
    let r = reqwest::Client::new()
        .post(format!("http://{addr}/v1/chat/completions"))
        .json(&json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.status(),
        200,
        "a request never waits for, nor fails by, its record"
    );
    let _ = r.bytes().await;
}

/// A database that refuses the configuration (no such database) is said at start, as an
/// error naming it without its password, and the requests are served, their records spooled
/// until it is fixed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_that_does_not_exist_is_said_at_start() {
    let Some(pg) = PostgresServer::start() else {
        return;
    };
    let lines = crate::warnings::lines();
    let upstream = start(TestServer::builder().body(CHAT_OK)).await;
    let dir = tempfile::tempdir().unwrap();
    let url = pg
        .url()
        .replace("postgres@", "postgres:hunter2@")
        .replace("/postgres", "/no_such_records");
    let toml = format!(
        "[records]\nurl = \"{url}\"\nspool_path = \"{}\"\n[[models]]\nname = \"m\"\n{}",
        dir.path().join("records.spool").display(),
        fan_out_toml(&upstream.base_url(), "")
    );
    let (addr, gateway) = serve(&toml, |_| None).await;
    let said = async {
        loop {
            let log = String::from_utf8_lossy(&lines.0.lock().unwrap()).into_owned();
            if let Some(line) = (log.lines())
                .find(|l| l.contains("refuses this configuration") && l.contains("no_such_records"))
            {
                return line.to_string();
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    let line = tokio::time::timeout(Duration::from_secs(10), said)
        .await
        .expect("the refused configuration said at start");
    assert!(line.contains("ERROR"), "{line}");
    assert!(!line.contains("hunter2"), "{line}");
    answered_whatever_the_record(addr).await;
    gateway.flush_records().await;
    assert!(
        spool_bytes(&dir.path().join("records.spool")) > 0,
        "its record spooled"
    );
}

/// The database away and the spool at its bound: the records that do not fit are dropped,
/// counted in `/metrics` by reason and said once in the log; the spool stays within its bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_spool_drops_are_counted_in_the_metrics_and_said_once() {
    let lines = crate::warnings::lines();
    // A 64 KB answer: with its samples kept, each record weighs over 128 KB in the spool.
    let upstream =
        start(TestServer::builder().body(choicewise_testserver::answer(&"word ".repeat(13_000))))
            .await;
    let dir = tempfile::tempdir().unwrap();
    let spool = dir.path().join("full.spool");
    // Nothing listens there: the database is away the whole time.
    let (away, _held) = choicewise_test_support::refusing();
    let port = away
        .trim_start_matches("http://127.0.0.1:")
        .trim_end_matches("/v1");
    let toml = format!(
        "[records]\nurl = \"postgres://postgres@127.0.0.1:{port}/postgres\"\nsamples = true\n\
         spool_path = \"{}\"\nspool_max_mb = 1\n[[models]]\nname = \"m\"\n{}",
        spool.display(),
        fan_out_toml(&upstream.base_url(), "")
    );
    let (addr, gateway) = serve(&toml, |_| None).await;
    for _ in 0..20 {
        answered_whatever_the_record(addr).await;
    }
    gateway.flush_records().await;
    let text = crate::common::metrics(addr).await;
    let value = |prefix: &str| -> f64 {
        (text.lines())
            .find(|l| l.starts_with(prefix))
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
            .unwrap_or(0.0)
    };
    let spooled = value("choicewise_records_spooled_total ");
    let dropped = value("choicewise_records_dropped_total{reason=\"spool_full\"}");
    assert_eq!(spooled + dropped, 20.0, "{text}");
    assert!(
        spooled >= 1.0 && dropped >= 10.0,
        "{spooled} spooled, {dropped} dropped"
    );
    assert_eq!(value("choicewise_records_written_total "), 0.0);
    let size = spool_bytes(&spool);
    assert!(size > 0 && size <= 1 << 20, "the spool is {size} bytes");
    assert_eq!(value("choicewise_records_spool_bytes "), size as f64);
    let log = String::from_utf8_lossy(&lines.0.lock().unwrap()).into_owned();
    let said = (log.lines())
        .filter(|l| {
            l.contains("records: the spool is full") && l.contains(&*spool.to_string_lossy())
        })
        .count();
    assert_eq!(said, 1, "{log}");
}

/// Posts a grade as `key` (a bearer key): its status and JSON answer.
async fn feedback(addr: SocketAddr, key: Option<&str>, body: Value) -> (u16, Value) {
    let mut r = reqwest::Client::new().post(format!("http://{addr}/v1/feedback"));
    if let Some(key) = key {
        r = r.bearer_auth(key);
    }
    let r = r.json(&body).send().await.unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

/// Grades from production (`POST /v1/feedback`) against `url`: the key that made a request
/// grades it (200, kept beside its record, the latest grade its grade), another key's grade
/// of it is refused as if it were unknown (404), the operator grades any; an unknown id is
/// 404, a bad body 400 naming its field, a missing key 401. A grade posted right after its
/// answer finds its record (the writer's queue flushed first).
async fn grades_kept_beside_their_records(url: &str) {
    let upstream = start(TestServer::builder().body(CHAT_OK)).await;
    let spool = tempfile::tempdir().unwrap();
    let toml = format!(
        "[admin]\nkey_env = \"OPERATOR_KEY\"\n\
         [auth]\n[[auth.keys]]\nname = \"team-a\"\nkey_env = \"TEAM_A_KEY\"\n\
         [[auth.keys]]\nname = \"team-b\"\nkey_env = \"TEAM_B_KEY\"\n\
         [records]\nurl = \"{url}\"\nspool_path = \"{}\"\n\
         [[models]]\nname = \"small\"\n{}",
        spool.path().join("records.spool").display(),
        fan_out_toml(&upstream.base_url(), ""),
    );
    let keys = |name: &str| match name {
        "TEAM_A_KEY" => Some("sk-team-a".to_string()),
        "TEAM_B_KEY" => Some("sk-team-b".to_string()),
        "OPERATOR_KEY" => Some("sk-operator".to_string()),
        _ => None,
    };
    let (addr, gateway) = serve(&toml, keys).await;
    let chat = json!({"model": "small", "messages": [{"role": "user", "content": "hi"}]});
    for id in ["a-1", "a-2", "a-3"] {
        assert_eq!(
            post(addr, "/v1/chat/completions", id, chat.clone()).await,
            200
        );
    }
    let r = reqwest::Client::new()
        .post(format!("http://{addr}/v1/chat/completions"))
        .bearer_auth("sk-team-b")
        .header("x-request-id", "b-1")
        .json(&chat)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let _ = r.bytes().await;

    // Right after their answers: found all the same.
    let (status, v) = feedback(
        addr,
        Some("sk-team-a"),
        json!({"request_id": "a-1", "outcome": "right", "source": "ci"}),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        v,
        json!({"object": "feedback", "request_id": "a-1", "outcome": "right", "score": 1.0,
               "source": "ci"})
    );
    let (status, _) = feedback(
        addr,
        Some("sk-team-a"),
        json!({"request_id": "a-2", "outcome": 0.25}),
    )
    .await;
    assert_eq!(status, 200);
    let (status, _) = feedback(
        addr,
        Some("sk-team-a"),
        json!({"request_id": "a-3", "outcome": "wrong"}),
    )
    .await;
    assert_eq!(status, 200);
    // Graded again: the latest grade is the grade.
    let (status, _) = feedback(
        addr,
        Some("sk-team-a"),
        json!({"request_id": "a-3", "outcome": "right"}),
    )
    .await;
    assert_eq!(status, 200);
    // Another key's request: as unknown as one never made.
    let (status, v) = feedback(
        addr,
        Some("sk-team-a"),
        json!({"request_id": "b-1", "outcome": "wrong"}),
    )
    .await;
    assert_eq!(status, 404, "{v}");
    assert_eq!(v["error"]["code"], "request_not_found", "{v}");
    let (status, v) = feedback(
        addr,
        Some("sk-team-a"),
        json!({"request_id": "never", "outcome": "wrong"}),
    )
    .await;
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (404, Some("request_not_found"))
    );
    // The operator grades any request.
    let (status, _) = feedback(
        addr,
        Some("sk-operator"),
        json!({"request_id": "b-1", "outcome": "wrong"}),
    )
    .await;
    assert_eq!(status, 200);
    // A bad body names its field; no key or a wrong one is refused.
    let (status, v) = feedback(
        addr,
        Some("sk-team-a"),
        json!({"request_id": "a-1", "outcome": 2}),
    )
    .await;
    assert_eq!(
        (status, v["error"]["param"].as_str()),
        (400, Some("outcome")),
        "{v}"
    );
    let (status, v) = feedback(addr, Some("sk-team-a"), json!({"outcome": "right"})).await;
    assert_eq!(
        (status, v["error"]["param"].as_str()),
        (400, Some("request_id")),
        "{v}"
    );
    let (status, _) = feedback(addr, None, json!({"request_id": "a-1", "outcome": "right"})).await;
    assert_eq!(status, 401);
    let (status, _) = feedback(
        addr,
        Some("sk-nobody"),
        json!({"request_id": "a-1", "outcome": "right"}),
    )
    .await;
    assert_eq!(status, 401);

    gateway.flush_records().await;
    let store = Store::connect(url).await.unwrap();
    let grade = |id: &'static str| {
        let store = store.clone();
        async move { store.grade(id).await.unwrap().unwrap() }
    };
    let a1 = grade("a-1").await;
    assert_eq!(
        (
            a1.score,
            a1.outcome.as_str(),
            a1.source.as_deref(),
            a1.by.as_str()
        ),
        (1.0, "right", Some("ci"), "team-a")
    );
    assert_eq!(grade("a-2").await.score, 0.25);
    assert_eq!(grade("a-3").await.outcome, "right");
    let b1 = grade("b-1").await;
    assert_eq!(
        (b1.outcome.as_str(), b1.by.as_str()),
        ("wrong", "(operator)")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grades_are_kept_beside_their_records_in_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("records.db").display());
    grades_kept_beside_their_records(&url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grades_are_kept_beside_their_records_in_postgres() {
    let Some(pg) = PostgresServer::start() else {
        return;
    };
    grades_kept_beside_their_records(&pg.url()).await;
}

/// Without `[records]` a grade has nowhere to go: 501 `no_records`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grade_without_records_is_501() {
    let upstream = start(TestServer::builder().body(CHAT_OK)).await;
    let toml = format!(
        "[[models]]\nname = \"small\"\n{}",
        fan_out_toml(&upstream.base_url(), "")
    );
    let (addr, _gateway) = serve(&toml, |_| None).await;
    let (status, v) = feedback(addr, None, json!({"request_id": "x", "outcome": "right"})).await;
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (501, Some("no_records")),
        "{v}"
    );
}
