//! The writer under the faults a database and a disk really have, over real servers and a
//! real full disk (a small tmpfs, mounted by the test: root only; skipped elsewhere, a
//! failure under CI): every record written once, or counted dropped with its reason, and
//! none dropped while the database answers and the spool has room.

use std::io::Write;
use std::path::{Path, PathBuf};

use super::*;

fn under_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

/// A tmpfs of a few MiB mounted on a folder of its own, unmounted when dropped.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    /// `None` (said) where this process may not mount; a failure under CI, which runs as
    /// root.
    fn mount(size: &str) -> Option<Tmpfs> {
        let dir = tempfile::tempdir().unwrap();
        let out = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .output();
        match out {
            Ok(o) if o.status.success() => Some(Tmpfs { dir }),
            o => {
                let why = match o {
                    Ok(o) => String::from_utf8_lossy(&o.stderr).into_owned(),
                    Err(e) => e.to_string(),
                };
                assert!(!under_ci(), "CI runs as root and mounts a tmpfs: {why}");
                eprintln!(
                    "skipped: a full disk needs a tmpfs, which this user cannot mount ({why})"
                );
                None
            }
        }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Fills the disk, leaving `room` bytes: the filler file's path.
    fn fill(&self, room: u64) -> PathBuf {
        let path = self.path().join("filler");
        let mut f = std::fs::File::create(&path).unwrap();
        let block = vec![0x5a_u8; 64 << 10];
        let mut len = 0u64;
        loop {
            match f.write(&block) {
                Ok(0) | Err(_) => break,
                Ok(n) => len += n as u64,
            }
        }
        let _ = f.sync_all();
        f.set_len(len.saturating_sub(room)).unwrap();
        f.sync_all().unwrap();
        path
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .output();
    }
}

/// A record with `text` bytes of sample content: big enough that a full disk notices.
fn heavy(i: i64, text: usize) -> RequestRecord {
    let mut r = record("k", "m", T0 + i, 200, (3, 5));
    let mut s = SampleRecord::new(0, "stop");
    s.content = Some("z".repeat(text));
    r.samples.push(s);
    r
}

/// Waits until `counts` says `spooled` records were spooled, for at most 20 s.
async fn until_spooled(counts: &Counts, spooled: u64) {
    let start = Instant::now();
    while Counts::get(&counts.spooled) < spooled && start.elapsed() < Duration::from_secs(20) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        Counts::get(&counts.spooled) >= spooled,
        "spooled {} of {spooled}",
        Counts::get(&counts.spooled)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_on_a_full_disk_then_room_again_loses_nothing() {
    let Some(disk) = Tmpfs::mount("8m") else {
        return;
    };
    let spool_dir = tempfile::tempdir().unwrap();
    let spool = spool_dir.path().join("records.spool");
    let url = format!("sqlite://{}", disk.path().join("records.db").display());
    let counts = Arc::new(Counts::default());
    let recorder = Recorder::start(RecorderConfig::new(&url, &spool), counts.clone()).unwrap();
    for i in 0..20 {
        recorder.record(heavy(i, 2_000));
    }
    recorder.flush().await;
    let store = Store::connect(&url).await.unwrap();
    assert_eq!(until_rows(&store, 20, Duration::from_secs(10)).await, 20);

    let filler = disk.fill(0);
    for i in 20..120 {
        recorder.record(heavy(i, 20_000));
        if i % 10 == 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    recorder.flush().await;
    until_spooled(&counts, 1).await;
    assert_eq!(counts.lost(), 0, "nothing dropped while the spool has room");

    std::fs::remove_file(filler).unwrap();
    for i in 120..140 {
        recorder.record(heavy(i, 2_000));
    }
    recorder.flush().await;
    let rows = until_rows(&store, 140, Duration::from_secs(30)).await;
    assert_eq!(rows, 140, "every record written once the disk has room");
    assert_eq!(counts.lost(), 0);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(store.count().await.unwrap(), 140, "none twice");
    assert_eq!(
        spool_segments(&spool),
        Vec::<PathBuf>::new(),
        "written segments deleted"
    );
    store.close().await;
}

/// Runs `sql` on the server as its superuser.
async fn admin(pg: &PostgresServer, sql: &str) {
    let pool = sqlx::PgPool::connect(&pg.url()).await.unwrap();
    sqlx::query(sql).execute(&pool).await.unwrap();
    sqlx::query("SELECT pg_reload_conf()")
        .execute(&pool)
        .await
        .unwrap();
    pool.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_read_only_as_after_a_failover_then_read_write_loses_nothing() {
    let Some(pg) = PostgresServer::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let spool = dir.path().join("records.spool");
    let counts = Arc::new(Counts::default());
    let recorder = Recorder::start(RecorderConfig::new(pg.url(), &spool), counts.clone()).unwrap();
    for i in 0..50 {
        recorder.record(record("k", "m", T0 + i, 200, (1, 1)));
    }
    recorder.flush().await;
    let store = Store::connect(&pg.url()).await.unwrap();
    assert_eq!(until_rows(&store, 50, Duration::from_secs(10)).await, 50);
    store.close().await;

    // Every transaction read-only from now on: SQLSTATE 25006 on each insert.
    admin(&pg, "ALTER SYSTEM SET default_transaction_read_only = on").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    for i in 50..150 {
        recorder.record(record("k", "m", T0 + i, 200, (1, 1)));
        if i % 10 == 0 {
            tokio::time::sleep(Duration::from_millis(30)).await;
        }
    }
    recorder.flush().await;
    until_spooled(&counts, 100).await;
    assert_eq!(
        counts.lost(),
        0,
        "a read-only database is away, not the records' fault"
    );

    admin(&pg, "ALTER SYSTEM RESET default_transaction_read_only").await;
    let store = Store::connect(&pg.url()).await.unwrap();
    let rows = until_rows(&store, 150, Duration::from_secs(30)).await;
    assert_eq!(
        rows, 150,
        "every record written once the database takes writes again"
    );
    assert_eq!(counts.lost(), 0);
    store.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_paused_its_records_wait_in_memory_one_first_try_then_the_spool() {
    let Some(mut pg) = PostgresServer::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let spool = dir.path().join("records.spool");
    let counts = Arc::new(Counts::default());
    let recorder = Recorder::start(RecorderConfig::new(pg.url(), &spool), counts.clone()).unwrap();
    for i in 0..20 {
        recorder.record(record("k", "m", T0 + i, 200, (1, 1)));
    }
    recorder.flush().await;
    let store = Store::connect(&pg.url()).await.unwrap();
    assert_eq!(until_rows(&store, 20, Duration::from_secs(10)).await, 20);
    store.close().await;

    // Stalled, not failing: every statement waits. A batch is spooled once its first try
    // has waited FIRST_TRY, so a flush returns within about that, not the 5 s of a pool.
    pg.pause(true);
    for i in 20..70 {
        recorder.record(record("k", "m", T0 + i, 200, (1, 1)));
    }
    let began = Instant::now();
    recorder.flush().await;
    let took = began.elapsed();
    assert!(
        took < choicewise_records::FIRST_TRY + Duration::from_millis(700),
        "the batch waited {took:?} in memory"
    );
    assert_eq!(
        Counts::get(&counts.spooled),
        50,
        "spooled, fsynced, not held"
    );

    pg.pause(false);
    let store = Store::connect(&pg.url()).await.unwrap();
    let rows = until_rows(&store, 70, Duration::from_secs(30)).await;
    assert_eq!(
        rows, 70,
        "every record written once the database answers again"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(store.count().await.unwrap(), 70, "none twice");
    assert_eq!(counts.lost(), 0);
    store.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_spool_disk_full_mid_append_cuts_it_back_and_later_records_are_written() {
    let Some(disk) = Tmpfs::mount("2m") else {
        return;
    };
    let db_dir = tempfile::tempdir().unwrap();
    // The database's folder does not exist yet: SQLite cannot open it, the database is away.
    let db_folder = db_dir.path().join("later");
    let url = format!("sqlite://{}", db_folder.join("records.db").display());
    let spool = disk.path().join("records.spool");
    let counts = Arc::new(Counts::default());
    let recorder = Recorder::start(RecorderConfig::new(&url, &spool), counts.clone()).unwrap();
    recorder.record(heavy(0, 1_000));
    recorder.flush().await;
    assert_eq!(Counts::get(&counts.spooled), 1);

    // Room for about three of the next ten, which are spooled in one append: it fails, and
    // is cut back to the record before it.
    let filler = disk.fill(8 << 10);
    for i in 1..11 {
        recorder.record(heavy(i, 3_000));
    }
    recorder.flush().await;
    assert_eq!(
        Counts::get(&counts.spool_error),
        10,
        "the failed append counted"
    );
    assert_eq!(spool_lines(&spool), 1, "the spool holds whole records only");

    std::fs::remove_file(filler).unwrap();
    for i in 11..31 {
        recorder.record(heavy(i, 3_000));
    }
    recorder.flush().await;
    assert_eq!(Counts::get(&counts.spooled), 21);

    std::fs::create_dir_all(&db_folder).unwrap();
    let store = Store::connect(&url).await.unwrap();
    let rows = until_rows(&store, 21, Duration::from_secs(30)).await;
    assert_eq!(
        rows, 21,
        "every record spooled, before the failure and after it, written"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(store.count().await.unwrap(), 21);
    assert_eq!(
        counts.lost(),
        10,
        "only the failed append's records dropped"
    );
    store.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_started_from_one_folder_spool_apart_and_lose_nothing() {
    let Some(mut pg) = PostgresServer::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    // The default configuration of three replicas in one folder: one spool_path.
    let spool = dir.path().join("records.spool");
    let counts: Vec<Arc<Counts>> = (0..3).map(|_| Arc::new(Counts::default())).collect();
    let mut replicas: Vec<Recorder> = (counts.iter())
        .map(|c| Recorder::start(RecorderConfig::new(pg.url(), &spool), c.clone()).unwrap())
        .collect();
    pg.stop();
    for (r, replica) in replicas.iter().enumerate() {
        for i in 0..40 {
            replica.record(record("k", "m", T0 + (r as i64) * 1_000 + i, 200, (1, 1)));
        }
    }
    for replica in &replicas {
        replica.flush().await;
    }
    assert_eq!(
        spool_lines(&spool),
        120,
        "each replica spooled its own forty"
    );
    // One replica ends (as a kill would) with its records spooled; one started in its place
    // takes its slot and writes them.
    drop(replicas.pop());
    tokio::time::sleep(Duration::from_millis(200)).await;
    let again = Arc::new(Counts::default());
    replicas.push(Recorder::start(RecorderConfig::new(pg.url(), &spool), again.clone()).unwrap());

    pg.start_again();
    let store = Store::connect(&pg.url()).await.unwrap();
    let rows = until_rows(&store, 120, Duration::from_secs(30)).await;
    assert_eq!(rows, 120, "every replica's records written, once");
    let dropped: u64 = counts.iter().map(|c| c.lost()).sum::<u64>() + again.lost();
    assert_eq!(dropped, 0);
    store.close().await;
}

#[tokio::test]
async fn a_record_too_large_for_the_queue_keeps_its_row_its_texts_cut() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("records.db").display());
    let counts = Arc::new(Counts::default());
    let recorder = Recorder::start(
        RecorderConfig::new(&url, dir.path().join("records.spool")),
        counts.clone(),
    )
    .unwrap();
    // A vote of 16 asking `top_logprobs: 20` for about 4,000 tokens a sample: about 5 MiB
    // of log-probabilities a sample, 80 MiB in all, over the 64 MiB queue.
    let mut r = record("k", "m", T0, 200, (16 * 20, 16 * 4_000));
    for i in 0..16 {
        let mut s = SampleRecord::new(i, "stop");
        s.content = Some("word ".repeat(4_000));
        s.logprobs = Some("x".repeat(5 << 20));
        r.samples.push(s);
    }
    let id = r.id.clone();
    recorder.record(r);
    recorder.flush().await;
    let store = Store::connect(&url).await.unwrap();
    assert_eq!(until_rows(&store, 1, Duration::from_secs(10)).await, 1);
    assert_eq!(counts.lost(), 0);
    let pool = sqlx::SqlitePool::connect(&url).await.unwrap();
    let (cut, tokens): (bool, i64) =
        sqlx::query_as("SELECT samples_cut, completion_tokens FROM requests WHERE id = ?")
            .bind(&id)
            .fetch_one(&pool)
            .await
            .unwrap();
    assert!(cut, "the row says its samples were cut");
    assert_eq!(tokens, 64_000, "its counts whole");
    let (samples, contents): (i64, i64) = sqlx::query_as(
        "SELECT COUNT(*), SUM(LENGTH(content) = 20000) FROM samples WHERE request = ?",
    )
    .bind(&id)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(
        (samples, contents),
        (16, 16),
        "every sample kept, its text whole"
    );
    pool.close().await;
}

#[tokio::test]
async fn a_database_that_does_not_exist_is_a_configuration_error() {
    let Some(pg) = PostgresServer::start() else {
        return;
    };
    let url = pg.url().replace("/postgres", "/no_such_database");
    let e = Store::connect(&url).await.unwrap_err();
    assert!(
        matches!(e, choicewise_records::RecordsError::Config(_)),
        "{e:?}"
    );
    assert!(e.to_string().contains("no_such_database"), "{e}");
}

/// A small seeded generator (xorshift64*): the same steps for the same seed.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
    }
}

/// One step of the model-based test.
#[derive(Debug, Clone, Copy)]
enum Step {
    /// `n` records, to one of the live recorders.
    Record(usize),
    /// The database's disk filled, or given room again.
    DatabaseFull(bool),
    /// The spool's disk filled, or given room again.
    SpoolFull(bool),
    /// A recorder ends (as its process would) and another starts on the same folder.
    Restart,
    /// A second process starts on the same folder, or the second one ends.
    Second(bool),
}

/// Random sequences of faults, with real SQLite on one small disk and the spool on another:
/// the database full and back, the spool's disk full and back, a recorder restarted, a
/// second one on the same folder. Every record is written exactly once or counted dropped,
/// and none is dropped while the spool's disk has room (the database's state never drops a
/// record).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_faults_lose_nothing_but_what_a_full_spool_disk_refused() {
    // Room for every seed's rows and SQLite's write-ahead log, until it is filled.
    let Some(db_disk) = Tmpfs::mount("48m") else {
        return;
    };
    let Some(spool_disk) = Tmpfs::mount("3m") else {
        return;
    };
    let url = format!("sqlite://{}", db_disk.path().join("records.db").display());
    let spool = spool_disk.path().join("records.spool");
    for seed in [7_u64, 1_234, 99, 2_026, 31_337, 4_242] {
        let mut rng = Rng(seed);
        let mut steps = Vec::new();
        for _ in 0..40 {
            steps.push(match rng.below(8) {
                0..=2 => Step::Record(1 + rng.below(30) as usize),
                3 => Step::DatabaseFull(rng.below(2) == 0),
                4 => Step::SpoolFull(rng.below(2) == 0),
                5 => Step::Restart,
                _ => Step::Second(rng.below(2) == 0),
            });
        }
        let start = |counts: &mut Vec<Arc<Counts>>| {
            let c = Arc::new(Counts::default());
            counts.push(c.clone());
            Recorder::start(RecorderConfig::new(&url, &spool), c).unwrap()
        };
        let mut counts = Vec::new();
        let mut live = vec![start(&mut counts)];
        let (mut db_filler, mut spool_filler) = (None, None);
        let mut sent = 0u64;
        // `heavy` adds T0: each seed's records in a million milliseconds of their own.
        let base = seed as i64 * 1_000_000;
        for step in &steps {
            match *step {
                Step::Record(n) => {
                    let dropped_before: u64 = counts.iter().map(|c| c.lost()).sum();
                    let to = &live[sent as usize % live.len()];
                    for _ in 0..n {
                        to.record(heavy(base + sent as i64, 4_000));
                        sent += 1;
                    }
                    to.flush().await;
                    let dropped: u64 = counts.iter().map(|c| c.lost()).sum();
                    if spool_filler.is_none() {
                        assert_eq!(
                            dropped, dropped_before,
                            "seed {seed}: records dropped at {step:?} with room on the spool's disk ({steps:?})"
                        );
                    }
                }
                Step::DatabaseFull(full) => match (full, db_filler.take()) {
                    (true, None) => db_filler = Some(db_disk.fill(0)),
                    (false, Some(f)) => std::fs::remove_file(f).unwrap(),
                    (_, kept) => db_filler = kept,
                },
                Step::SpoolFull(full) => match (full, spool_filler.take()) {
                    (true, None) => spool_filler = Some(spool_disk.fill(4 << 10)),
                    (false, Some(f)) => std::fs::remove_file(f).unwrap(),
                    (_, kept) => spool_filler = kept,
                },
                Step::Restart => {
                    let ended = live.remove(0);
                    ended.flush().await;
                    drop(ended);
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    live.insert(0, start(&mut counts));
                }
                Step::Second(true) if live.len() == 1 => live.push(start(&mut counts)),
                Step::Second(false) if live.len() == 2 => {
                    let ended = live.pop().unwrap();
                    ended.flush().await;
                    drop(ended);
                    // Its slot is left for the next recorder to start there.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    live.push(start(&mut counts));
                }
                Step::Second(_) => {}
            }
        }
        // Every fault cleared: whatever was spooled is written.
        for filler in [db_filler.take(), spool_filler.take()]
            .into_iter()
            .flatten()
        {
            std::fs::remove_file(filler).unwrap();
        }
        for recorder in &live {
            recorder.flush().await;
        }
        let dropped: u64 = counts.iter().map(|c| c.lost()).sum();
        let store = Store::connect(&url).await.unwrap();
        let pool = sqlx::SqlitePool::connect(&url).await.unwrap();
        let mine = |pool: &sqlx::SqlitePool| {
            let pool = pool.clone();
            async move {
                let (n,): (i64,) =
                    sqlx::query_as("SELECT COUNT(*) FROM requests WHERE at_ms >= ? AND at_ms < ?")
                        .bind(T0 + base)
                        .bind(T0 + base + 1_000_000)
                        .fetch_one(&pool)
                        .await
                        .unwrap_or((0,));
                n as u64
            }
        };
        let begun = Instant::now();
        let mut rows = mine(&pool).await;
        while rows < sent - dropped && begun.elapsed() < Duration::from_secs(30) {
            tokio::time::sleep(Duration::from_millis(100)).await;
            rows = mine(&pool).await;
        }
        if rows != sent - dropped {
            for slot in std::fs::read_dir(&spool).unwrap().flatten() {
                let files: Vec<(String, u64)> = (std::fs::read_dir(slot.path()).unwrap().flatten())
                    .map(|f| {
                        (
                            f.file_name().to_string_lossy().into_owned(),
                            f.metadata().unwrap().len(),
                        )
                    })
                    .collect();
                eprintln!("slot {:?}: {files:?}", slot.file_name());
            }
            for (i, c) in counts.iter().enumerate() {
                eprintln!(
                    "recorder {i}: written {} spooled {} lost {}",
                    Counts::get(&c.written),
                    Counts::get(&c.spooled),
                    c.lost()
                );
            }
        }
        let written: u64 = counts.iter().map(|c| Counts::get(&c.written)).sum();
        let spooled: u64 = counts.iter().map(|c| Counts::get(&c.spooled)).sum();
        assert_eq!(
            rows,
            sent - dropped,
            "seed {seed}: {written} written, {spooled} spooled, {} rows in all, {} unwritten in the spool; {sent} sent, {dropped} counted dropped ({steps:?})",
            store.count().await.unwrap_or(0),
            spool_bytes(&spool),
        );
        let spool_errors: u64 = counts.iter().map(|c| Counts::get(&c.spool_error)).sum();
        assert_eq!(
            dropped, spool_errors,
            "seed {seed}: dropped only by the spool's full disk"
        );
        eprintln!(
            "seed {seed}: {sent} records, {dropped} refused by the spool's full disk, the rest written once"
        );
        drop(live);
        pool.close().await;
        store.close().await;
    }
}
