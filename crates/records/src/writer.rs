//! The writer: [`Recorder`] takes records from the requests without ever making them wait,
//! and one task writes them to the database in batches. While the database is away (down,
//! slow past [`WRITE_DEADLINE`], not yet reached) the batches go to an append-only spool file
//! instead, bounded by its size, and are written from it once the database answers again.
//! Records are dropped, counted and said once, only when the queue or the spool is full.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncSeekExt, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use crate::RecordsError;
use crate::record::RequestRecord;
use crate::store::Store;

/// How long one batch's write may take before the database counts as away.
pub const WRITE_DEADLINE: Duration = Duration::from_secs(5);
/// Records per batch, at most.
const BATCH: usize = 512;
/// How long a batch waits for more records after its first.
const LINGER: Duration = Duration::from_millis(100);
/// Records read back from the spool per write.
const DRAIN_BATCH: usize = 1_000;
/// The wait between tries to reach a database that is away, at first and at most.
const RETRY_FIRST: Duration = Duration::from_millis(250);
const RETRY_MAX: Duration = Duration::from_secs(5);

/// Where records wait and how much may: [`Recorder::start`]'s settings.
///
/// ```
/// let c = choicewise_records::RecorderConfig::new("sqlite://records.db", "records.spool");
/// assert_eq!(c.spool_max_bytes, 256 << 20);
/// assert_eq!(c.queue_records, 8_192);
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RecorderConfig {
    /// The database: `sqlite://PATH` or `postgres://...`.
    pub url: String,
    /// The spool file, made when first needed.
    pub spool_path: PathBuf,
    /// The spool's bound (`spool_max_mb`).
    pub spool_max_bytes: u64,
    /// The queue's bound in records: the records a `kill -9` may lose at most.
    pub queue_records: usize,
    /// The queue's bound in bytes (the samples' texts weigh most).
    pub queue_bytes: usize,
}

impl RecorderConfig {
    /// The database at `url`, its spool at `spool_path`; the bounds' defaults (a 256 MiB
    /// spool, a queue of 8,192 records or 64 MiB).
    pub fn new(url: impl Into<String>, spool_path: impl Into<PathBuf>) -> Self {
        RecorderConfig {
            url: url.into(),
            spool_path: spool_path.into(),
            spool_max_bytes: 256 << 20,
            queue_records: 8_192,
            queue_bytes: 64 << 20,
        }
    }
}

/// Why records were dropped: [`Observe::dropped`]'s reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Dropped {
    /// The queue was full: the writer fell behind (the spool's disk too slow).
    QueueFull,
    /// The spool was at its bound while the database was away.
    SpoolFull,
    /// The spool could not be written (its disk).
    SpoolError,
    /// The database refused the record itself (not its connection).
    Rejected,
}

impl Dropped {
    /// Its metrics label: `queue_full`, `spool_full`, `spool_error`, `rejected`.
    ///
    /// ```
    /// assert_eq!(choicewise_records::Dropped::SpoolFull.as_str(), "spool_full");
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            Dropped::QueueFull => "queue_full",
            Dropped::SpoolFull => "spool_full",
            Dropped::SpoolError => "spool_error",
            Dropped::Rejected => "rejected",
        }
    }
}

/// What the writer tells its owner as it goes (the gateway's `/metrics`). Every method
/// defaults to nothing.
///
/// ```
/// use std::sync::atomic::{AtomicU64, Ordering};
/// struct Count(AtomicU64);
/// impl choicewise_records::Observe for Count {
///     fn written(&self, n: u64) { self.0.fetch_add(n, Ordering::Relaxed); }
/// }
/// # let _ = Count(AtomicU64::new(0));
/// ```
pub trait Observe: Send + Sync + 'static {
    /// `n` records written to the database.
    fn written(&self, n: u64) {
        let _ = n;
    }
    /// `n` records written to the spool.
    fn spooled(&self, n: u64) {
        let _ = n;
    }
    /// `n` records dropped, and why.
    fn dropped(&self, why: Dropped, n: u64) {
        let _ = (why, n);
    }
    /// The spool's size now, in bytes.
    fn spool_bytes(&self, bytes: u64) {
        let _ = bytes;
    }
}

impl Observe for () {}

impl<T: Observe> Observe for Arc<T> {
    fn written(&self, n: u64) {
        (**self).written(n)
    }
    fn spooled(&self, n: u64) {
        (**self).spooled(n)
    }
    fn dropped(&self, why: Dropped, n: u64) {
        (**self).dropped(why, n)
    }
    fn spool_bytes(&self, bytes: u64) {
        (**self).spool_bytes(bytes)
    }
}

enum Msg {
    Record(Box<RequestRecord>, usize),
    Flush(oneshot::Sender<()>),
}

/// Takes records and has them written: cheap to clone, never waits. Made with
/// [`start`](Self::start), inside a tokio runtime.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use choicewise_records::{Recorder, RecorderConfig, RequestRecord, Store};
/// let dir = tempfile::tempdir()?;
/// let url = format!("sqlite://{}", dir.path().join("r.db").display());
/// let recorder = Recorder::start(RecorderConfig::new(&url, dir.path().join("spool")), ());
/// recorder.record(RequestRecord::new(1_795_737_600_000, "req-1", "m"));
/// recorder.flush().await; // written (or spooled) now
/// assert_eq!(Store::connect(&url).await?.count().await?, 1);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Recorder {
    shared: Arc<Shared>,
}

struct Shared {
    tx: mpsc::Sender<Msg>,
    queued_bytes: AtomicUsize,
    queue_bytes: usize,
    observe: Arc<dyn Observe>,
    /// A full queue was said in the log (once, until the queue has room again).
    full_said: AtomicBool,
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder")
            .field(
                "queued_bytes",
                &self.shared.queued_bytes.load(Ordering::Relaxed),
            )
            .finish()
    }
}

impl Recorder {
    /// Starts the writer task (on the current tokio runtime: panics outside one, as
    /// `tokio::spawn` does). The database is reached by the task, not here: one that is away
    /// at start gets the records spooled until it answers.
    pub fn start(config: RecorderConfig, observe: impl Observe) -> Recorder {
        let (tx, rx) = mpsc::channel(config.queue_records.max(1));
        let observe: Arc<dyn Observe> = Arc::new(observe);
        let shared = Arc::new(Shared {
            tx,
            queued_bytes: AtomicUsize::new(0),
            queue_bytes: config.queue_bytes,
            observe: observe.clone(),
            full_said: AtomicBool::new(false),
        });
        let writer = Writer {
            spool: Spool::new(config.spool_path.clone(), config.spool_max_bytes),
            config,
            store: None,
            away: None,
            retry: RETRY_FIRST,
            next_try: Instant::now(),
            observe,
            shared: shared.clone(),
            spool_full_said: false,
        };
        tokio::spawn(writer.run(rx));
        Recorder { shared }
    }

    /// Queues `record` for writing, without waiting: with the queue full (in records or
    /// bytes) it is dropped, counted ([`Dropped::QueueFull`]) and said once in the log.
    pub fn record(&self, record: RequestRecord) {
        let shared = &self.shared;
        let weight = record.weight();
        let before = shared.queued_bytes.fetch_add(weight, Ordering::Relaxed);
        if before.saturating_add(weight) > shared.queue_bytes {
            shared.queued_bytes.fetch_sub(weight, Ordering::Relaxed);
            self.queue_full();
            return;
        }
        if shared
            .tx
            .try_send(Msg::Record(Box::new(record), weight))
            .is_err()
        {
            shared.queued_bytes.fetch_sub(weight, Ordering::Relaxed);
            self.queue_full();
        }
    }

    fn queue_full(&self) {
        self.shared.observe.dropped(Dropped::QueueFull, 1);
        if !self.shared.full_said.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                "records: the queue is full, records are dropped (counted in choicewise_records_dropped_total) until the writer catches up"
            );
        }
    }

    /// Waits until every record queued before this call is written to the database or to the
    /// spool (at shutdown). Returns at once if the writer is gone.
    pub async fn flush(&self) {
        let (tx, rx) = oneshot::channel();
        if self.shared.tx.send(Msg::Flush(tx)).await.is_ok() {
            let _ = rx.await;
        }
    }
}

/// More records taken into `buf` for up to [`LINGER`] after its first, until it holds
/// [`BATCH`] or a flush: one transaction for many records, rather than one each.
async fn linger(rx: &mut mpsc::Receiver<Msg>, buf: &mut Vec<Msg>) {
    let until = Instant::now() + LINGER;
    let flushing = |buf: &[Msg]| buf.iter().any(|m| matches!(m, Msg::Flush(_)));
    while buf.len() < BATCH && !flushing(buf) {
        let room = BATCH - buf.len();
        match tokio::time::timeout_at(until, rx.recv_many(buf, room)).await {
            Ok(n) if n > 0 => {}
            // The deadline, or the queue closed.
            _ => return,
        }
    }
}

/// The writer task's state.
struct Writer {
    config: RecorderConfig,
    store: Option<Store>,
    spool: Spool,
    /// Since when the database is away, and why, once it was found away.
    away: Option<(Instant, String)>,
    retry: Duration,
    next_try: Instant,
    observe: Arc<dyn Observe>,
    shared: Arc<Shared>,
    spool_full_said: bool,
}

impl Writer {
    async fn run(mut self, mut rx: mpsc::Receiver<Msg>) {
        self.spool.open_existing().await;
        self.observe.spool_bytes(self.spool.len);
        // The database reached before the first records are taken (they wait in the queue).
        self.catch_up().await;
        let mut buf = Vec::with_capacity(BATCH);
        loop {
            let wake = self.next_try;
            let pending = self.store.is_none() || self.spool.pending();
            tokio::select! {
                n = rx.recv_many(&mut buf, BATCH) => {
                    if n == 0 {
                        break;
                    }
                    linger(&mut rx, &mut buf).await;
                    self.take(std::mem::take(&mut buf)).await;
                    buf.reserve(BATCH);
                }
                () = tokio::time::sleep_until(wake), if pending => {
                    self.catch_up().await;
                }
            }
        }
    }

    /// A batch from the queue: written, else spooled; flushes answered after.
    async fn take(&mut self, msgs: Vec<Msg>) {
        let mut records = Vec::with_capacity(msgs.len());
        let mut flushes = Vec::new();
        let mut weight = 0;
        for msg in msgs {
            match msg {
                Msg::Record(r, w) => {
                    weight += w;
                    records.push(*r);
                }
                Msg::Flush(tx) => flushes.push(tx),
            }
        }
        self.shared
            .queued_bytes
            .fetch_sub(weight, Ordering::Relaxed);
        if self.shared.queued_bytes.load(Ordering::Relaxed) < self.shared.queue_bytes / 2 {
            self.shared.full_said.store(false, Ordering::Relaxed);
        }
        if !records.is_empty() {
            // In order: while the spool holds records, new ones join it.
            if self.store.is_some() && !self.spool.pending() {
                self.write_or_spool(records).await;
            } else {
                self.spool(&records).await;
            }
        }
        for flush in flushes {
            let _ = flush.send(());
        }
    }

    async fn write_or_spool(&mut self, records: Vec<RequestRecord>) {
        match self.write(&records).await {
            Ok(()) => self.observe.written(records.len() as u64),
            Err(RecordsError::Rejected(e)) => self.one_by_one(records, &e).await,
            Err(e) => {
                self.went_away(e.to_string());
                self.spool(&records).await;
            }
        }
    }

    async fn write(&self, records: &[RequestRecord]) -> Result<(), RecordsError> {
        let Some(store) = &self.store else {
            return Err(RecordsError::Database("not connected".into()));
        };
        match tokio::time::timeout(WRITE_DEADLINE, store.write(records)).await {
            Ok(done) => done,
            Err(_) => Err(RecordsError::Database(format!(
                "{}: a write took over {} s",
                store.shown(),
                WRITE_DEADLINE.as_secs()
            ))),
        }
    }

    /// A batch the database refused: each record tried alone, those it refuses dropped and
    /// said (the rest written).
    async fn one_by_one(&mut self, records: Vec<RequestRecord>, why: &str) {
        let mut refused = 0;
        for (i, record) in records.iter().enumerate() {
            match self.write(std::slice::from_ref(record)).await {
                Ok(()) => self.observe.written(1),
                Err(RecordsError::Rejected(e)) => {
                    refused += 1;
                    tracing::warn!(request_id = %record.request_id, "records: the database refused a record: {e}");
                }
                Err(e) => {
                    self.went_away(e.to_string());
                    self.spool(&records[i..]).await;
                    break;
                }
            }
        }
        if refused > 0 {
            self.observe.dropped(Dropped::Rejected, refused);
            tracing::warn!("records: {refused} records refused by the database ({why})");
        }
    }

    fn went_away(&mut self, why: String) {
        if self.away.is_none() {
            tracing::warn!(
                spool = %self.config.spool_path.display(),
                "records: the database is away ({why}); records wait in the spool until it answers"
            );
            self.away = Some((Instant::now(), why));
        }
        self.store = None;
        self.retry = RETRY_FIRST;
        self.next_try = Instant::now() + self.retry;
    }

    async fn spool(&mut self, records: &[RequestRecord]) {
        let (spooled, full, failed) = self.spool.append(records).await;
        self.observe.spooled(spooled);
        self.observe.spool_bytes(self.spool.len);
        if full > 0 {
            self.observe.dropped(Dropped::SpoolFull, full);
            if !self.spool_full_said {
                self.spool_full_said = true;
                tracing::warn!(
                    spool = %self.config.spool_path.display(),
                    max_bytes = self.config.spool_max_bytes,
                    "records: the spool is full (spool_max_mb); records are dropped until the database answers"
                );
            }
        }
        if let Some(e) = failed {
            self.observe
                .dropped(Dropped::SpoolError, records.len() as u64 - spooled - full);
            tracing::warn!(spool = %self.config.spool_path.display(), "records: the spool cannot be written: {e}");
        }
    }

    /// The database reached if it is not, and one batch of the spool written.
    async fn catch_up(&mut self) {
        if self.store.is_none() {
            match tokio::time::timeout(WRITE_DEADLINE, Store::connect(&self.config.url)).await {
                Ok(Ok(store)) => {
                    if self.away.is_none() {
                        tracing::info!(database = %store.shown(), "records: written to the database");
                    }
                    self.store = Some(store);
                }
                Ok(Err(e)) => return self.retry_later(e.to_string()),
                Err(_) => return self.retry_later("no connection within 5 s".into()),
            }
        }
        if !self.spool.pending() {
            self.back(0);
            return;
        }
        let batch = match self.spool.read(DRAIN_BATCH).await {
            Ok(batch) => batch,
            Err(e) => {
                tracing::warn!(spool = %self.config.spool_path.display(), "records: the spool cannot be read: {e}");
                self.retry_later(format!("the spool cannot be read: {e}"));
                return;
            }
        };
        let count = batch.records.len();
        let written = match self.write(&batch.records).await {
            Ok(()) => {
                self.observe.written(count as u64);
                self.spool.drained += count as u64;
                true
            }
            Err(RecordsError::Rejected(e)) => {
                self.one_by_one(batch.records, &e).await;
                self.store.is_some()
            }
            Err(e) => {
                self.store = None;
                self.retry_later(e.to_string());
                false
            }
        };
        if written {
            self.spool.advance(batch.end).await;
            self.observe.spool_bytes(self.spool.len);
            self.next_try = Instant::now();
            if !self.spool.pending() {
                self.back(self.spool.drained);
            }
        }
    }

    fn retry_later(&mut self, why: String) {
        if self.away.is_none() {
            self.went_away(why);
            return;
        }
        self.retry = (self.retry * 2).min(RETRY_MAX);
        self.next_try = Instant::now() + self.retry;
    }

    /// The database answers and the spool is written: said once.
    fn back(&mut self, drained: u64) {
        if let Some((since, _)) = self.away.take() {
            tracing::info!(
                spooled = drained,
                away_s = since.elapsed().as_secs_f64(),
                "records: the database answers again; the spooled records are written"
            );
        }
        self.spool.drained = 0;
        self.spool_full_said = false;
        self.retry = RETRY_FIRST;
    }
}

/// The spool: JSON lines, appended at its end, read from `offset`, emptied once read to its
/// end.
struct Spool {
    path: PathBuf,
    max: u64,
    /// Its size.
    len: u64,
    /// Where the records not yet written start.
    offset: u64,
    /// Records written from it since the database went away.
    drained: u64,
}

/// Records read from the spool, and where the next ones start.
struct SpoolBatch {
    records: Vec<RequestRecord>,
    end: u64,
}

impl Spool {
    fn new(path: PathBuf, max: u64) -> Self {
        Spool {
            path,
            max,
            len: 0,
            offset: 0,
            drained: 0,
        }
    }

    fn pending(&self) -> bool {
        self.offset < self.len
    }

    /// A spool left by an earlier process: its records written first. A last line cut by a
    /// crash is ended, so that the next record starts a line of its own.
    async fn open_existing(&mut self) {
        let Ok(meta) = tokio::fs::metadata(&self.path).await else {
            return;
        };
        self.len = meta.len();
        if self.len == 0 {
            return;
        }
        tracing::info!(
            spool = %self.path.display(),
            bytes = self.len,
            "records: a spool from before; its records are written first"
        );
        let ends_a_line = async {
            let mut f = tokio::fs::File::open(&self.path).await.ok()?;
            f.seek(std::io::SeekFrom::End(-1)).await.ok()?;
            let mut last = [0u8; 1];
            tokio::io::AsyncReadExt::read_exact(&mut f, &mut last)
                .await
                .ok()?;
            Some(last[0] == b'\n')
        };
        if ends_a_line.await == Some(false) {
            let _ = self.append_bytes(b"\n").await;
        }
    }

    /// Appends `records` while they fit: how many were, how many did not fit, and the write's
    /// error if one failed.
    async fn append(&mut self, records: &[RequestRecord]) -> (u64, u64, Option<std::io::Error>) {
        let mut text = Vec::new();
        let mut spooled = 0;
        let mut full = 0;
        for r in records {
            let Ok(mut line) = serde_json::to_vec(r) else {
                continue;
            };
            line.push(b'\n');
            if self.len + (text.len() + line.len()) as u64 > self.max {
                full += 1;
                continue;
            }
            text.extend_from_slice(&line);
            spooled += 1;
        }
        if text.is_empty() {
            return (0, full, None);
        }
        match self.append_bytes(&text).await {
            Ok(()) => (spooled, full, None),
            Err(e) => (0, full, Some(e)),
        }
    }

    async fn append_bytes(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        let mut f = tokio::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
            .await?;
        f.write_all(bytes).await?;
        f.flush().await?;
        self.len += bytes.len() as u64;
        Ok(())
    }

    /// Up to `max` records from `offset`: a line that does not read (cut by a crash) is
    /// skipped and said.
    async fn read(&mut self, max: usize) -> std::io::Result<SpoolBatch> {
        let mut f = tokio::fs::File::open(&self.path).await?;
        f.seek(std::io::SeekFrom::Start(self.offset)).await?;
        let mut reader = tokio::io::BufReader::new(f);
        let mut records = Vec::new();
        let mut end = self.offset;
        let mut line = Vec::new();
        while records.len() < max && end < self.len {
            line.clear();
            let n = reader.read_until(b'\n', &mut line).await?;
            if n == 0 {
                break;
            }
            end += n as u64;
            match serde_json::from_slice::<RequestRecord>(&line) {
                Ok(r) => records.push(r),
                Err(e) if line.iter().all(u8::is_ascii_whitespace) => {
                    let _ = e;
                }
                Err(e) => tracing::warn!(
                    spool = %self.path.display(),
                    at = end - n as u64,
                    "records: a spooled line does not read, left out: {e}"
                ),
            }
        }
        Ok(SpoolBatch { records, end })
    }

    /// The records before `end` are written: the spool emptied when that is all of it.
    async fn advance(&mut self, end: u64) {
        self.offset = end;
        if self.offset >= self.len {
            let emptied = async {
                let f = tokio::fs::OpenOptions::new()
                    .write(true)
                    .open(&self.path)
                    .await?;
                f.set_len(0).await?;
                f.sync_all().await
            };
            if let Err(e) = emptied.await {
                tracing::warn!(spool = %self.path.display(), "records: the spool cannot be emptied: {e}");
                return;
            }
            self.len = 0;
            self.offset = 0;
        }
    }
}
