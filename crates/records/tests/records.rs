//! Records written and read back, in SQLite and in a PostgreSQL server started here (on a
//! free port of 127.0.0.1, a folder of its own): batches, each record once, the spool while
//! the database is away and its bound, a spool left by a crash, the usage query.
//!
//! The PostgreSQL tests need Debian's `postgresql`: where it cannot be found they fail
//! under CI (`CI=true`) and are skipped, saying why, elsewhere.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use choicewise_records::{
    By, Dropped, Observe, Recorder, RecorderConfig, RecordsQuery, RequestRecord, SampleRecord,
    SampleTokens, Store, UsageQuery,
};
use choicewise_test_support::PostgresServer;

// Most of these tests wait on a database server of their own: two a core at once.
choicewise_test_support::waiting_tests!();

/// The writer under the faults a database and a disk have (a read-only or full database, a
/// full spool disk, replicas in one folder, a record too large).
#[path = "writer/faults.rs"]
mod faults;

const DAY: i64 = 86_400_000;
/// 2026-11-27T00:00:00Z.
const T0: i64 = 1_795_737_600_000;

/// A record of `key` for `model` at `at_ms`, answered `status`, with these tokens.
fn record(key: &str, model: &str, at_ms: i64, status: i64, tokens: (i64, i64)) -> RequestRecord {
    let mut r = RequestRecord::new(at_ms, format!("req-{at_ms}"), model);
    r.key = key.into();
    r.api = "chat".into();
    r.status = status;
    r.ended = if status < 400 { "complete" } else { "refused" }.into();
    (r.prompt_tokens, r.completion_tokens) = tokens;
    r.sample_tokens = vec![SampleTokens {
        sample: 0,
        prompt: tokens.0 as u64,
        completion: tokens.1 as u64,
        estimated: false,
    }];
    r.cost_usd = Some((tokens.0 + tokens.1) as f64 / 1e6);
    r.total_ms = 12.5;
    r
}

#[derive(Default)]
struct Counts {
    written: AtomicU64,
    spooled: AtomicU64,
    spool_full: AtomicU64,
    queue_full: AtomicU64,
    spool_error: AtomicU64,
    rejected: AtomicU64,
}

impl Counts {
    fn get(n: &AtomicU64) -> u64 {
        n.load(Ordering::Relaxed)
    }
    /// Records dropped, for any reason.
    fn lost(&self) -> u64 {
        Counts::get(&self.spool_full)
            + Counts::get(&self.queue_full)
            + Counts::get(&self.spool_error)
            + Counts::get(&self.rejected)
    }
}

/// The spool's segment files under `spool` (its folder of slots).
fn spool_segments(spool: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    for slot in std::fs::read_dir(spool).into_iter().flatten().flatten() {
        for file in std::fs::read_dir(slot.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            if file.path().extension().is_some_and(|e| e == "jsonl") {
                found.push(file.path());
            }
        }
    }
    found
}

/// The bytes in the spool's segments.
fn spool_bytes(spool: &std::path::Path) -> u64 {
    (spool_segments(spool).iter())
        .map(|p| std::fs::metadata(p).map_or(0, |m| m.len()))
        .sum()
}

/// The records (lines) in the spool's segments.
fn spool_lines(spool: &std::path::Path) -> u64 {
    (spool_segments(spool).iter())
        .map(|p| {
            std::fs::read_to_string(p)
                .unwrap_or_default()
                .lines()
                .count() as u64
        })
        .sum()
}

impl Observe for Counts {
    fn written(&self, n: u64) {
        self.written.fetch_add(n, Ordering::Relaxed);
    }
    fn spooled(&self, n: u64) {
        self.spooled.fetch_add(n, Ordering::Relaxed);
    }
    fn dropped(&self, why: Dropped, n: u64) {
        match why {
            Dropped::SpoolFull => self.spool_full.fetch_add(n, Ordering::Relaxed),
            Dropped::QueueFull => self.queue_full.fetch_add(n, Ordering::Relaxed),
            Dropped::SpoolError => self.spool_error.fetch_add(n, Ordering::Relaxed),
            Dropped::Rejected => self.rejected.fetch_add(n, Ordering::Relaxed),
            _ => 0,
        };
    }
}

/// The same records, written and read back, whatever the database.
async fn round_trip(url: &str) {
    let store = Store::connect(url).await.unwrap();
    let mut records = vec![
        record("team-a", "small", T0, 200, (10, 20)),
        record("team-a", "small", T0 + 1_000, 429, (0, 0)),
        record("team-b", "small", T0 + DAY, 200, (5, 7)),
        record("team-a", "large", T0 + DAY, 502, (3, 0)),
    ];
    let mut sample = SampleRecord::new(0, "stop");
    sample.content = Some("4".into());
    sample.place = Some(0);
    records[0].samples.push(sample);
    store.write(&records).await.unwrap();
    // Written again (a spool replayed after a crash): still one row each.
    store.write(&records).await.unwrap();
    assert_eq!(store.count().await.unwrap(), 4);

    let rows = store
        .usage(&UsageQuery::new(vec![By::Key, By::Model]))
        .await
        .unwrap();
    let shown: Vec<String> = rows
        .iter()
        .map(|r| serde_json::to_string(r).unwrap())
        .collect();
    assert_eq!(
        shown,
        [
            r#"{"key":"team-a","model":"large","requests":1,"failed":1,"prompt_tokens":3,"completion_tokens":0,"cost_usd":3e-6}"#,
            r#"{"key":"team-a","model":"small","requests":2,"failed":1,"prompt_tokens":10,"completion_tokens":20,"cost_usd":0.00003}"#,
            r#"{"key":"team-b","model":"small","requests":1,"failed":0,"prompt_tokens":5,"completion_tokens":7,"cost_usd":0.000012}"#,
        ]
    );
    let by_day = store
        .usage(&UsageQuery::new(vec![By::Day]).since(T0 + DAY))
        .await
        .unwrap();
    assert_eq!(by_day.len(), 1);
    assert_eq!(by_day[0].group, [(By::Day, "2026-11-28".to_string())]);
    assert_eq!((by_day[0].requests, by_day[0].prompt_tokens), (2, 8));
    let everything = store.usage(&UsageQuery::new(vec![])).await.unwrap();
    assert_eq!(everything.len(), 1);
    assert_eq!(everything[0].requests, 4);

    // The last requests, newest first, a page at a time, by key or request id.
    let listed = |q: RecordsQuery| {
        let store = store.clone();
        async move {
            let rows = store.records(&q).await.unwrap();
            rows.into_iter()
                .map(|r| format!("{} {} {}", r.at_ms - T0, r.key, r.model))
                .collect::<Vec<_>>()
        }
    };
    let first = listed(RecordsQuery::since(0).newest_first().limit(2)).await;
    let (large, small) = (format!("{DAY} team-a large"), format!("{DAY} team-b small"));
    // Two records of one arrival: by id, descending (`req-…` ids equal here, then the
    // record ids differ), so either order is the newest two.
    assert!(
        first == [large.clone(), small.clone()] || first == [small.clone(), large.clone()],
        "{first:?}"
    );
    let last = store
        .records(&RecordsQuery::since(0).newest_first().limit(2))
        .await
        .unwrap()
        .pop()
        .unwrap();
    let next = listed(
        RecordsQuery::since(0)
            .newest_first()
            .after(last.at_ms, last.id),
    )
    .await;
    assert_eq!(next, ["1000 team-a small", "0 team-a small"]);
    let team_a = listed(RecordsQuery::since(0).newest_first().key("team-a")).await;
    assert_eq!(team_a.len(), 3);
    assert!(team_a.iter().all(|r| r.contains("team-a")), "{team_a:?}");
    let team_a_small = listed(RecordsQuery::since(0).key("team-a").model("small")).await;
    assert_eq!(team_a_small, ["0 team-a small", "1000 team-a small"]);
    let one = store
        .records(
            &RecordsQuery::since(0)
                .request_id(format!("req-{T0}"))
                .with_samples(),
        )
        .await
        .unwrap();
    assert_eq!(one.len(), 1);
    assert_eq!(one[0].samples[0].content.as_deref(), Some("4"));
    store.close().await;
}

#[tokio::test]
async fn sqlite_keeps_each_record_once_and_sums_the_spend() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("records.db").display());
    round_trip(&url).await;
    // Opened again: the migrations are not run twice, the rows are there.
    assert_eq!(
        Store::connect(&url).await.unwrap().count().await.unwrap(),
        4
    );
}

/// Stores opening one new SQLite file at once (two replicas in one folder, or a gateway's
/// records writer beside its keys) each find the tables made once, none failing on a
/// migration another applied meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stores_opening_one_new_sqlite_file_at_once_migrate_it_once() {
    for round in 0..5 {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("records.db").display());
        let mut opening = tokio::task::JoinSet::new();
        for _ in 0..6 {
            let url = url.clone();
            opening.spawn(async move { Store::connect(&url).await });
        }
        while let Some(store) = opening.join_next().await {
            let store = store.unwrap();
            assert!(store.is_ok(), "round {round}: {}", store.unwrap_err());
        }
        assert_eq!(
            Store::connect(&url).await.unwrap().count().await.unwrap(),
            0
        );
    }
}

#[tokio::test]
async fn postgres_keeps_each_record_once_and_sums_the_spend() {
    let Some(pg) = PostgresServer::start() else {
        return;
    };
    round_trip(&pg.url()).await;
    assert_eq!(
        Store::connect(&pg.url())
            .await
            .unwrap()
            .count()
            .await
            .unwrap(),
        4
    );
}

/// New records go to PostgreSQL by COPY: every text comes back as it was, whatever it
/// holds (tabs, newlines, backslashes, a `\N`, text that is no number), NULLs stay NULL and
/// floats exact; a batch with a record PostgreSQL refuses (a NUL in a text) is written again
/// record by record, that one dropped and counted, the rest written once.
#[tokio::test]
async fn postgres_takes_new_records_by_copy_texts_intact_and_a_refused_one_dropped() {
    let Some(pg) = PostgresServer::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let counts = Arc::new(Counts::default());
    let config = RecorderConfig::new(pg.url(), dir.path().join("records.spool"));
    let recorder = Recorder::start(config, counts.clone()).unwrap();
    let awkward = [
        "tab\there",
        "line\nbreak\r\n",
        "back\\slash \\N",
        "\\N",
        "",
        "é \u{1F600} \"quoted\"",
    ];
    let mut sent = Vec::new();
    for (i, text) in awkward.iter().enumerate() {
        let mut r = record(text, "m\tx", T0 + i as i64, 200, (3, 4));
        r.pick = Some(text.to_string());
        r.decision = (i % 2 == 0).then(|| format!("{{\"why\":\"{}\"}}", text.escape_default()));
        r.first_byte_ms = (i % 2 == 1).then_some(0.1 + i as f64);
        r.cost_usd = Some(1e-7 * i as f64);
        let mut sample = SampleRecord::new(0, "stop");
        sample.content = Some(format!("{text}|{text}"));
        sample.message = (i % 3 == 0).then(|| text.to_string());
        sample.place = Some(0);
        r.samples.push(sample);
        r.samples.push(SampleRecord::new(1, "cancelled"));
        sent.push(r);
    }
    for r in &sent {
        recorder.record(r.clone());
    }
    recorder.flush().await;
    let store = Store::connect(&pg.url()).await.unwrap();
    assert_eq!(until_rows(&store, 6, Duration::from_secs(10)).await, 6);
    // Then a batch with the refused record amid others.
    let mut refused = record("k", "nul\0model", T0 + 100, 200, (1, 1));
    refused.request_id = "refused".into();
    for i in 0..5 {
        if i == 2 {
            recorder.record(refused.clone());
        }
        let r = record("k", "m", T0 + 200 + i, 200, (1, 1));
        recorder.record(r.clone());
        sent.push(r);
    }
    recorder.flush().await;
    assert_eq!(until_rows(&store, 11, Duration::from_secs(10)).await, 11);
    let back = store
        .records(&RecordsQuery::since(0).with_samples())
        .await
        .unwrap();
    assert_eq!(back, sent, "every record as it was sent");
    assert_eq!(Counts::get(&counts.rejected), 1, "the refused record");
    assert_eq!(Counts::get(&counts.written), 11);
    assert_eq!(Counts::get(&counts.spooled), 0);
}

#[tokio::test]
async fn a_bad_url_is_named_without_its_password() {
    let e = Store::connect("postgres://me:hunter2@127.0.0.1:1/db")
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("postgres://me:***@127.0.0.1:1/db"), "{e}");
    assert!(!e.contains("hunter2"), "{e}");
    let e = Store::connect("mysql://x").await.unwrap_err().to_string();
    assert!(e.contains("sqlite:// or postgres://"), "{e}");
}

/// Waits until `store` has `rows` rows, for at most `within`.
async fn until_rows(store: &Store, rows: u64, within: Duration) -> u64 {
    let start = Instant::now();
    loop {
        let n = store.count().await.unwrap_or(0);
        if n >= rows || start.elapsed() > within {
            return n;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn postgres_away_records_wait_in_the_spool_and_are_written_once_back() {
    let Some(mut pg) = PostgresServer::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let spool = dir.path().join("records.spool");
    let counts = Arc::new(Counts::default());
    let recorder =
        Recorder::start(RecorderConfig::new(pg.url(), spool.clone()), counts.clone()).unwrap();
    for i in 0..100 {
        recorder.record(record("k", "m", T0 + i, 200, (1, 1)));
    }
    recorder.flush().await;
    let store = Store::connect(&pg.url()).await.unwrap();
    assert_eq!(until_rows(&store, 100, Duration::from_secs(10)).await, 100);
    store.close().await;

    pg.stop();
    // While it is away, recording never waits and nothing is lost.
    let mut slowest = Duration::ZERO;
    for i in 100..1_100 {
        let t = Instant::now();
        recorder.record(record("k", "m", T0 + i, 200, (1, 1)));
        slowest = slowest.max(t.elapsed());
        if i % 100 == 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    recorder.flush().await;
    assert!(
        slowest < Duration::from_millis(50),
        "a record waited {slowest:?}"
    );
    assert!(
        counts.spooled.load(Ordering::Relaxed) >= 1_000,
        "spooled {}",
        counts.spooled.load(Ordering::Relaxed)
    );
    assert!(spool_bytes(&spool) > 0);

    pg.start_again();
    for i in 1_100..1_200 {
        recorder.record(record("k", "m", T0 + i, 200, (1, 1)));
    }
    let store = Store::connect(&pg.url()).await.unwrap();
    let rows = until_rows(&store, 1_200, Duration::from_secs(30)).await;
    assert_eq!(rows, 1_200, "every record written once");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(store.count().await.unwrap(), 1_200, "none twice");
    assert_eq!(counts.written.load(Ordering::Relaxed), 1_200);
    assert_eq!(counts.spool_full.load(Ordering::Relaxed), 0);
    assert_eq!(
        spool_segments(&spool),
        Vec::<std::path::PathBuf>::new(),
        "the spool emptied"
    );
}

#[tokio::test]
async fn a_full_spool_drops_counted_and_the_rest_is_written() {
    let dir = tempfile::tempdir().unwrap();
    // Nothing listens there: the database is away from the start.
    let (away, _held) = choicewise_test_support::refusing();
    let port = away.trim_start_matches("http://127.0.0.1:");
    let port = port.trim_end_matches("/v1");
    let url = format!("postgres://postgres@127.0.0.1:{port}/postgres");
    let spool = dir.path().join("records.spool");
    let counts = Arc::new(Counts::default());
    let mut config = RecorderConfig::new(url, spool.clone());
    config.spool_max_bytes = 20_000;
    let recorder = Recorder::start(config, counts.clone()).unwrap();
    for i in 0..200 {
        recorder.record(record("k", "m", T0 + i, 200, (1, 1)));
    }
    recorder.flush().await;
    let spooled = counts.spooled.load(Ordering::Relaxed);
    let dropped = counts.spool_full.load(Ordering::Relaxed);
    assert_eq!(spooled + dropped, 200, "each record spooled or counted");
    assert!(
        dropped > 0 && spooled > 0,
        "{spooled} spooled, {dropped} dropped"
    );
    let len = spool_bytes(&spool);
    assert!(len <= 20_000, "the spool is {len} bytes");
    assert_eq!(spool_lines(&spool), spooled);
}

#[tokio::test]
async fn a_spool_left_by_a_crash_is_written_first_its_cut_line_left_out() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("records.db").display());
    let spool = dir.path().join("records.spool");
    let mut text = String::new();
    for i in 0..3 {
        text.push_str(&serde_json::to_string(&record("k", "m", T0 + i, 200, (1, 1))).unwrap());
        text.push('\n');
    }
    // The fourth was being written when the process was killed.
    let cut = serde_json::to_string(&record("k", "m", T0 + 3, 200, (1, 1))).unwrap();
    text.push_str(&cut[..cut.len() / 2]);
    std::fs::write(&spool, text).unwrap();
    let recorder = Recorder::start(RecorderConfig::new(&url, spool.clone()), ()).unwrap();
    recorder.record(record("k", "m", T0 + 4, 200, (1, 1)));
    recorder.flush().await;
    let store = Store::connect(&url).await.unwrap();
    assert_eq!(until_rows(&store, 4, Duration::from_secs(10)).await, 4);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(store.count().await.unwrap(), 4);
}
