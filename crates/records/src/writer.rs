//! The writer: [`Recorder`] takes records from the requests without ever making them wait,
//! and one task writes them to the database in batches. A batch the database does not take
//! within [`FIRST_TRY`] (it is down, read-only, full, slow, not yet reached) goes to the
//! spool instead (`spool.rs`), `fsync`ed, and is written from there once the database answers
//! again, while new batches go straight to it. So a record waits in memory for at most
//! the batch's linger and one first try: that is what a `kill -9` can lose. Records are
//! dropped, counted and said, only when the queue or the spool is at its bound, when the
//! spool's disk refuses them, or when the database refuses the record itself.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::RecordsError;
use crate::record::RequestRecord;
use crate::spool::Spool;
use crate::store::Store;

/// How long a batch of new records may wait for the database before it is spooled: the
/// most a record waits in memory, past the batch's linger.
pub const FIRST_TRY: Duration = Duration::from_secs(1);
/// How long a connection, or one write of records read back from the spool, may take
/// before the database counts as away again (in the background: nothing waits on it).
pub const WRITE_DEADLINE: Duration = Duration::from_secs(5);
/// Records per batch, at most.
const BATCH: usize = 512;
/// How long a batch waits for more records after its first.
const LINGER: Duration = Duration::from_millis(100);
/// Records read back from the spool per write, at most, and their bytes, about.
const DRAIN_BATCH: usize = 1_000;
const DRAIN_BYTES: u64 = 8 << 20;
/// The wait between tries to reach a database that is away, at first and at most.
const RETRY_FIRST: Duration = Duration::from_millis(250);
const RETRY_MAX: Duration = Duration::from_secs(5);
/// How often a configuration the database refuses is said again while it lasts, and how
/// often the spool's folder is searched for slots of processes that ended.
const REPEAT: Duration = Duration::from_secs(60);

/// Where records wait and how much may: [`Recorder::start`]'s settings.
///
/// ```
/// let c = choicewise_records::RecorderConfig::new("sqlite://records.db", "records.spool");
/// assert_eq!(c.spool_max_bytes, 256 << 20);
/// assert_eq!(c.queue_records, 8_192);
/// assert_eq!(c.record_max_bytes, 16 << 20);
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RecorderConfig {
    /// The database: `sqlite://PATH` or `postgres://...`.
    pub url: String,
    /// The spool's folder: one slot in it per process (see the crate's docs).
    pub spool_path: PathBuf,
    /// The spool's bound on the bytes not yet written (`spool_max_mb`).
    pub spool_max_bytes: u64,
    /// The queue's bound in records.
    pub queue_records: usize,
    /// The queue's bound in bytes (the samples' texts weigh most).
    pub queue_bytes: usize,
    /// One record's bound in bytes: a record weighing more has its samples' texts cut to
    /// it ([`RequestRecord::fit`]), so that every request keeps its row.
    pub record_max_bytes: usize,
}

impl RecorderConfig {
    /// The database at `url`, its spool at `spool_path`; the bounds' defaults (a 256 MiB
    /// spool, a queue of 8,192 records or 64 MiB, 16 MiB a record).
    pub fn new(url: impl Into<String>, spool_path: impl Into<PathBuf>) -> Self {
        RecorderConfig {
            url: url.into(),
            spool_path: spool_path.into(),
            spool_max_bytes: 256 << 20,
            queue_records: 8_192,
            queue_bytes: 64 << 20,
            record_max_bytes: 16 << 20,
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
    /// The database refused the record itself (a data or integrity error), not its
    /// connection or its state.
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
/// let recorder = Recorder::start(RecorderConfig::new(&url, dir.path().join("spool")), ())?;
/// recorder.record(RequestRecord::new(1_795_737_600_000, "req-1", "m"));
/// recorder.flush().await; // written (or spooled) now
/// assert_eq!(Store::connect(&url).await?.count().await?, 1);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Recorder {
    /// The queue; the writer ends (its slot of the spool released) once every `Recorder`
    /// is dropped and the queue is written.
    tx: mpsc::Sender<Msg>,
    shared: Arc<Shared>,
}

struct Shared {
    queued_bytes: AtomicUsize,
    queue_bytes: usize,
    record_max_bytes: usize,
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
    /// Takes a slot of the spool and starts the writer task (on the current tokio runtime:
    /// panics outside one, as `tokio::spawn` does). The database is reached by the task, not
    /// here: one that is away at start gets the records spooled until it answers, and one
    /// that refuses the configuration (no such database, a wrong password) is said at once,
    /// as an error, and again each minute while it lasts. An error only when the spool
    /// cannot be opened (its folder, or every slot held by another process).
    pub fn start(config: RecorderConfig, observe: impl Observe) -> Result<Recorder, RecordsError> {
        let spool = Spool::open(&config.spool_path, config.spool_max_bytes)?;
        let (tx, rx) = mpsc::channel(config.queue_records.max(1));
        let observe: Arc<dyn Observe> = Arc::new(observe);
        let shared = Arc::new(Shared {
            queued_bytes: AtomicUsize::new(0),
            queue_bytes: config.queue_bytes,
            record_max_bytes: config.record_max_bytes.min(config.queue_bytes),
            observe: observe.clone(),
            full_said: AtomicBool::new(false),
        });
        let now = Instant::now();
        let writer = Writer {
            spool,
            config,
            store: None,
            job: None,
            away: None,
            config_said: None,
            retry: RETRY_FIRST,
            next_try: now,
            next_adopt: now,
            drain_records: DRAIN_BATCH,
            drained: 0,
            observe,
            shared: shared.clone(),
            spool_full_said: false,
        };
        tokio::spawn(writer.run(rx));
        Ok(Recorder { tx, shared })
    }

    /// Queues `record` for writing, without waiting: with the queue full (in records or
    /// bytes) it is dropped, counted ([`Dropped::QueueFull`]) and said once in the log. A
    /// record over [`RecorderConfig::record_max_bytes`] has its samples' texts cut to it
    /// first ([`RequestRecord::fit`]).
    pub fn record(&self, mut record: RequestRecord) {
        let shared = &self.shared;
        let mut weight = record.weight();
        if weight > shared.record_max_bytes {
            record.fit(shared.record_max_bytes);
            weight = record.weight();
            tracing::warn!(
                request_id = %record.request_id,
                max_bytes = shared.record_max_bytes,
                "records: a record's samples were cut to its bound (samples_cut in its row)"
            );
        }
        let before = shared.queued_bytes.fetch_add(weight, Ordering::Relaxed);
        if before.saturating_add(weight) > shared.queue_bytes {
            shared.queued_bytes.fetch_sub(weight, Ordering::Relaxed);
            self.queue_full();
            return;
        }
        if self
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
        if self.tx.send(Msg::Flush(tx)).await.is_ok() {
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

/// What writing a batch did: how many of its records, in order, were written (or refused
/// and dropped) before the database went away, if it did.
struct Wrote {
    /// Records written.
    written: u64,
    /// Records the database refused (their own fault), with why.
    rejected: Vec<(String, String)>,
    /// The records from this index on were not written: the database went away (why).
    away: Option<(usize, RecordsError)>,
    /// It went away by not answering within the deadline (rather than by an error).
    timed_out: bool,
}

/// Writes `records` within `deadline`: the batch in one transaction (records never written
/// before, `new`, by [`Store::write_new`]); a batch refused for a record's fault, each record
/// alone (those refused dropped, the rest written); a database away, at the first record it
/// did not take.
async fn write_batch(
    store: &Store,
    records: &[RequestRecord],
    new: bool,
    deadline: Duration,
) -> Wrote {
    let mut wrote = Wrote {
        written: 0,
        rejected: Vec::new(),
        away: None,
        timed_out: false,
    };
    // `Err(None)`: no answer within the deadline.
    let timed = |records, new: bool| async move {
        let written = async move {
            match new {
                true => store.write_new(records).await,
                false => store.write(records).await,
            }
        };
        match tokio::time::timeout(deadline, written).await {
            Ok(done) => done.map_err(Some),
            Err(_) => Err(None),
        }
    };
    let mut away = |at: usize, e: Option<RecordsError>| {
        wrote.timed_out = e.is_none();
        let e = e.unwrap_or_else(|| {
            RecordsError::Database(format!(
                "{}: no answer within {} ms",
                store.shown(),
                deadline.as_millis()
            ))
        });
        (at, e)
    };
    let mut rejected = Vec::new();
    let mut written = 0;
    let gone = match timed(records, new).await {
        Ok(()) => {
            written = records.len() as u64;
            None
        }
        Err(Some(RecordsError::Rejected(_))) => {
            let mut gone = None;
            for (i, record) in records.iter().enumerate() {
                match timed(std::slice::from_ref(record), false).await {
                    Ok(()) => written += 1,
                    Err(Some(RecordsError::Rejected(e))) => {
                        rejected.push((record.request_id.clone(), e));
                    }
                    Err(e) => {
                        gone = Some(away(i, e));
                        break;
                    }
                }
            }
            gone
        }
        Err(e) => Some(away(0, e)),
    };
    wrote.away = gone;
    wrote.written = written;
    wrote.rejected = rejected;
    wrote
}

/// A background job of the writer: nothing waits on it but the spool's records.
enum Job {
    /// Reaching the database.
    Connect(JoinHandle<Result<Store, RecordsError>>),
    /// Writing records read from the spool: where each ends, where the read stopped.
    Drain(JoinHandle<Wrote>, Vec<u64>, u64),
}

/// What a finished job gave.
enum Done {
    Connected(Result<Store, RecordsError>),
    Drained(Wrote, Vec<u64>, u64),
}

impl Job {
    async fn done(&mut self) -> Done {
        match self {
            Job::Connect(handle) => Done::Connected(match handle.await {
                Ok(done) => done,
                Err(e) => Err(RecordsError::Database(format!(
                    "the connection's task: {e}"
                ))),
            }),
            Job::Drain(handle, ends, end) => {
                let wrote = handle.await.unwrap_or_else(|e| Wrote {
                    written: 0,
                    rejected: Vec::new(),
                    away: Some((0, RecordsError::Database(format!("the write's task: {e}")))),
                    timed_out: false,
                });
                Done::Drained(wrote, std::mem::take(ends), *end)
            }
        }
    }
}

/// The writer task's state.
struct Writer {
    config: RecorderConfig,
    /// The database, while it answers.
    store: Option<Store>,
    spool: Spool,
    /// A connection or a drain under way.
    job: Option<Job>,
    /// Since when the database is away, and why, once it was found away.
    away: Option<(Instant, String)>,
    /// When a configuration the database refuses was last said.
    config_said: Option<Instant>,
    retry: Duration,
    next_try: Instant,
    next_adopt: Instant,
    /// Records read back per drain write: halved when one takes too long, so that a slow
    /// database still takes the spool.
    drain_records: usize,
    /// Records written from the spool since the database went away.
    drained: u64,
    observe: Arc<dyn Observe>,
    shared: Arc<Shared>,
    spool_full_said: bool,
}

impl Writer {
    async fn run(mut self, mut rx: mpsc::Receiver<Msg>) {
        self.observe.spool_bytes(self.spool.unwritten());
        if self.spool.pending() {
            tracing::info!(
                spool = %self.spool.dir().display(),
                bytes = self.spool.unwritten(),
                "records: a spool from before; its records are written once the database answers"
            );
        }
        // The database reached before the first records are taken (they wait in the queue,
        // for the first try at most).
        self.start_job().await;
        if let Some(mut job) = self.job.take() {
            match tokio::time::timeout(FIRST_TRY, job.done()).await {
                Ok(done) => self.finished(done).await,
                Err(_) => self.job = Some(job),
            }
        }
        let mut buf = Vec::with_capacity(BATCH);
        loop {
            let wake = self.next_try;
            tokio::select! {
                n = rx.recv_many(&mut buf, BATCH) => {
                    if n == 0 {
                        break;
                    }
                    linger(&mut rx, &mut buf).await;
                    self.take(std::mem::take(&mut buf)).await;
                    buf.reserve(BATCH);
                }
                done = async { self.job.as_mut().expect("guarded").done().await }, if self.job.is_some() => {
                    self.job = None;
                    self.finished(done).await;
                }
                () = tokio::time::sleep_until(wake), if self.job.is_none() => {
                    self.start_job().await;
                }
            }
        }
        // The queue is closed and every record in it was written or spooled; a drain under
        // way leaves its records in the spool, for the next process.
    }

    /// Starts what the writer needs next, if anything: a connection while the database is
    /// away, else a write of the spool's oldest records.
    async fn start_job(&mut self) {
        if Instant::now() >= self.next_adopt {
            self.next_adopt = Instant::now() + REPEAT;
            self.spool.adopt_orphans();
            self.observe.spool_bytes(self.spool.unwritten());
        }
        let Some(store) = self.store.clone() else {
            let url = self.config.url.clone();
            self.job = Some(Job::Connect(tokio::spawn(async move {
                match tokio::time::timeout(WRITE_DEADLINE, Store::connect(&url)).await {
                    Ok(done) => done,
                    Err(_) => Err(RecordsError::Database(format!(
                        "{}: no connection within {} s",
                        crate::shown_url(&url),
                        WRITE_DEADLINE.as_secs()
                    ))),
                }
            })));
            return;
        };
        // Nothing to do until records are spooled (which wakes the writer) or it is time to
        // look for the spools of ended processes.
        self.next_try = self.next_adopt;
        if !self.spool.pending() {
            return;
        }
        match self.spool.read(self.drain_records, DRAIN_BYTES).await {
            Ok(batch) => {
                let (records, ends, end) = (batch.records, batch.ends, batch.end);
                let handle = tokio::spawn(async move {
                    write_batch(&store, &records, false, WRITE_DEADLINE).await
                });
                self.job = Some(Job::Drain(handle, ends, end));
            }
            Err(e) => {
                tracing::warn!(spool = %self.spool.dir().display(), "records: the spool cannot be read: {e}");
                self.retry_later(format!("the spool cannot be read: {e}"));
            }
        }
    }

    /// A job's end: the database reached or not; records read back written or not.
    async fn finished(&mut self, done: Done) {
        match done {
            Done::Connected(Ok(store)) => {
                if self.away.is_none() {
                    tracing::info!(database = %store.shown(), "records: written to the database");
                }
                self.config_said = None;
                self.store = Some(store);
                self.next_try = Instant::now();
                if !self.spool.pending() {
                    self.back();
                }
            }
            Done::Connected(Err(e)) => {
                if let RecordsError::Config(why) = &e {
                    let due = self.config_said.is_none_or(|at| at.elapsed() >= REPEAT);
                    if due {
                        self.config_said = Some(Instant::now());
                        tracing::error!(
                            spool = %self.spool.dir().display(),
                            "records: the database refuses this configuration ({why}); records wait in the spool until it is fixed"
                        );
                    }
                }
                self.retry_later(e.to_string());
            }
            Done::Drained(wrote, ends, end) => {
                self.said(&wrote);
                self.drained += wrote.written;
                match wrote.away {
                    None => {
                        self.spool.advance(end).await;
                        self.drain_records = (self.drain_records * 2).min(DRAIN_BATCH);
                        self.next_try = Instant::now();
                        if !self.spool.pending() {
                            self.back();
                        }
                    }
                    Some((i, e)) => {
                        if i > 0 {
                            self.spool.advance(ends[i - 1]).await;
                        }
                        if wrote.timed_out {
                            self.drain_records = (self.drain_records / 2).max(1);
                        }
                        self.store = None;
                        self.retry_later(e.to_string());
                    }
                }
                self.observe.spool_bytes(self.spool.unwritten());
            }
        }
    }

    /// Counts and says what a write did.
    fn said(&self, wrote: &Wrote) {
        if wrote.written > 0 {
            self.observe.written(wrote.written);
        }
        if !wrote.rejected.is_empty() {
            for (request_id, e) in &wrote.rejected {
                tracing::warn!(%request_id, "records: the database refused a record: {e}");
            }
            self.observe
                .dropped(Dropped::Rejected, wrote.rejected.len() as u64);
        }
    }

    /// A batch from the queue: written if the database takes it within [`FIRST_TRY`], else
    /// spooled; flushes answered after.
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
            // Straight to a database that answers, beside a drain of the spool.
            let rest = match &self.store {
                Some(store) => {
                    let wrote = write_batch(store, &records, true, FIRST_TRY).await;
                    self.said(&wrote);
                    match wrote.away {
                        None => 0..0,
                        Some((i, e)) => {
                            self.went_away(e.to_string());
                            i..records.len()
                        }
                    }
                }
                None => 0..records.len(),
            };
            if !rest.is_empty() {
                self.spool(&records[rest]).await;
            }
        }
        for flush in flushes {
            let _ = flush.send(());
        }
    }

    fn went_away(&mut self, why: String) {
        if self.away.is_none() {
            tracing::warn!(
                spool = %self.spool.dir().display(),
                "records: the database is away ({why}); records wait in the spool until it answers"
            );
            self.away = Some((Instant::now(), why));
        }
        self.store = None;
        self.retry = RETRY_FIRST;
        self.next_try = Instant::now() + self.retry;
    }

    async fn spool(&mut self, records: &[RequestRecord]) {
        let appended = self.spool.append(records).await;
        self.observe.spooled(appended.spooled);
        self.observe.spool_bytes(self.spool.unwritten());
        if appended.full > 0 {
            self.observe.dropped(Dropped::SpoolFull, appended.full);
            if !self.spool_full_said {
                self.spool_full_said = true;
                tracing::warn!(
                    spool = %self.spool.dir().display(),
                    max_bytes = self.config.spool_max_bytes,
                    "records: the spool is full (spool_max_mb); records are dropped until the database takes the spooled ones"
                );
            }
        }
        if let Some(e) = appended.failed {
            let lost = records.len() as u64 - appended.spooled - appended.full;
            self.observe.dropped(Dropped::SpoolError, lost);
            tracing::warn!(spool = %self.spool.dir().display(), dropped = lost, "records: the spool cannot be written: {e}");
        }
        if self.store.is_some() && self.job.is_none() {
            self.next_try = Instant::now();
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
    fn back(&mut self) {
        if let Some((since, _)) = self.away.take() {
            tracing::info!(
                spooled = self.drained,
                away_s = since.elapsed().as_secs_f64(),
                "records: the database answers again; the spooled records are written"
            );
        }
        self.drained = 0;
        self.spool_full_said = false;
        self.retry = RETRY_FIRST;
    }
}
