//! The gateway's stderr, written in batches by a thread of its own ([`StderrLog`]): a
//! request's log line costs the request an append to a buffer, not a system call of its own.
//!
//! A line is on stderr at most [`BATCH_WAIT`] after it was written; when [`MAX_BUFFERED`]
//! bytes wait, the line that would pass it is written at once by the task that wrote it,
//! after the lines before it (a slow reader of stderr slows the writers, it never grows the
//! buffer or loses a line). The operator's lines (`listening on …`, `stopped`) take the same
//! way while a [`StderrLog`] runs, so that every line keeps its order. Dropping the
//! [`StderrLog`] writes what is left before it returns. A line stderr cannot take (its reader
//! gone) is lost, never a panic: the same as a line written straight to stderr.

use std::io::Write;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

/// How long the writing thread waits after the first line of a batch for more to join it.
///
/// ```
/// assert_eq!(choicewise_gateway::STDERR_BATCH_WAIT.as_millis(), 5);
/// ```
pub const BATCH_WAIT: Duration = Duration::from_millis(5);

/// The most bytes waiting to be written; a line past it is written by its own writer.
///
/// ```
/// assert_eq!(choicewise_gateway::STDERR_MAX_BUFFERED, 1 << 20);
/// ```
pub const MAX_BUFFERED: usize = 1 << 20;

/// The lines waiting, and whether the log is closing.
#[derive(Default)]
struct Waiting {
    bytes: Vec<u8>,
    closing: bool,
}

/// Where the lines go: stderr, or a test's capture.
type Sink = Box<dyn Fn(&[u8]) + Send + Sync>;

struct Shared {
    waiting: Mutex<Waiting>,
    /// Signalled when the first line of a batch arrives, and at closing.
    arrived: Condvar,
    sink: Sink,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Waiting> {
        self.waiting.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues `line`, or writes it at once (closing, or past [`MAX_BUFFERED`]).
    fn put(&self, line: &[u8]) {
        let mut waiting = self.lock();
        if waiting.closing {
            drop(waiting);
            (self.sink)(line);
        } else if waiting.bytes.len() + line.len() > MAX_BUFFERED {
            // In order: the lines before it, then it, while no other line can pass.
            let batch = std::mem::take(&mut waiting.bytes);
            (self.sink)(&batch);
            (self.sink)(line);
        } else {
            let first = waiting.bytes.is_empty();
            waiting.bytes.extend_from_slice(line);
            drop(waiting);
            if first {
                self.arrived.notify_one();
            }
        }
    }
}

/// The [`StderrLog`] running, if one is: where [`line`] goes.
static RUNNING: Mutex<Option<Arc<Shared>>> = Mutex::new(None);

/// Writes `bytes` to stderr whole, or drops them when stderr cannot take them.
fn to_stderr(bytes: &[u8]) {
    let _ = std::io::stderr().lock().write_all(bytes);
}

/// A line for the operator on stderr (`line` and a newline), in order with the log's lines:
/// through the running [`StderrLog`], else straight.
pub(crate) fn line(line: std::fmt::Arguments<'_>) {
    let running = RUNNING.lock().unwrap_or_else(|e| e.into_inner()).clone();
    match running {
        Some(shared) => shared.put(format!("{line}\n").as_bytes()),
        None => {
            let _ = writeln!(std::io::stderr(), "{line}");
        }
    }
}

/// The process's stderr written in batches by a thread of its own: give
/// [`writer`](Self::writer)s to the log (a `tracing` subscriber's writer); the gateway's own
/// lines for the operator take the same way while it runs. At most one runs at a time.
/// Dropping it writes every line still waiting, then stops the thread.
///
/// ```
/// use std::io::Write;
///
/// let log = choicewise_gateway::StderrLog::start().expect("the first log of the process");
/// writeln!(log.writer(), "a line, on stderr within 5 ms").unwrap();
/// drop(log); // written by now
/// ```
pub struct StderrLog {
    shared: Arc<Shared>,
    writer: Option<JoinHandle<()>>,
}

impl StderrLog {
    /// Starts the writing thread; `None` if a [`StderrLog`] runs already or the thread
    /// cannot be started (write to stderr directly then).
    pub fn start() -> Option<StderrLog> {
        let mut running = RUNNING.lock().unwrap_or_else(|e| e.into_inner());
        if running.is_some() {
            return None;
        }
        let log = StderrLog::start_to(Box::new(to_stderr))?;
        *running = Some(Arc::clone(&log.shared));
        Some(log)
    }

    /// [`start`](Self::start), writing to `sink`, not the process's stderr.
    fn start_to(sink: Sink) -> Option<StderrLog> {
        let shared = Arc::new(Shared {
            waiting: Mutex::new(Waiting::default()),
            arrived: Condvar::new(),
            sink,
        });
        let theirs = Arc::clone(&shared);
        let writer = std::thread::Builder::new()
            .name("choicewise-stderr".into())
            .spawn(move || write_batches(&theirs))
            .ok()?;
        Some(StderrLog {
            shared,
            writer: Some(writer),
        })
    }

    /// A writer of this log's lines: each write is queued whole, in order.
    ///
    /// ```
    /// use std::io::Write;
    ///
    /// if let Some(log) = choicewise_gateway::StderrLog::start() {
    ///     let mut w = log.writer();
    ///     w.write_all(b"one line\n").unwrap();
    /// }
    /// ```
    pub fn writer(&self) -> StderrWriter {
        StderrWriter(Arc::clone(&self.shared))
    }
}

impl Drop for StderrLog {
    fn drop(&mut self) {
        {
            let mut running = RUNNING.lock().unwrap_or_else(|e| e.into_inner());
            if running
                .as_ref()
                .is_some_and(|r| Arc::ptr_eq(r, &self.shared))
            {
                *running = None;
            }
        }
        self.shared.lock().closing = true;
        self.shared.arrived.notify_one();
        if let Some(writer) = self.writer.take() {
            let _ = writer.join();
        }
    }
}

impl std::fmt::Debug for StderrLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StderrLog").finish_non_exhaustive()
    }
}

/// The writing thread: waits for a line, lets a batch gather for [`BATCH_WAIT`], writes it.
fn write_batches(shared: &Shared) {
    // The batch last written, emptied, takes the next lines: the buffer does not grow again
    // from nothing for every batch. Past [`KEPT_CAPACITY`] it is given back.
    let mut batch = Vec::new();
    loop {
        let mut waiting = shared.lock();
        while waiting.bytes.is_empty() && !waiting.closing {
            waiting = shared
                .arrived
                .wait(waiting)
                .unwrap_or_else(|e| e.into_inner());
        }
        if waiting.bytes.is_empty() {
            return;
        }
        if !waiting.closing {
            drop(waiting);
            std::thread::sleep(BATCH_WAIT);
            waiting = shared.lock();
        }
        std::mem::swap(&mut waiting.bytes, &mut batch);
        drop(waiting);
        (shared.sink)(&batch);
        batch.clear();
        batch.shrink_to(KEPT_CAPACITY);
    }
}

/// The most of a written batch's buffer kept for the next.
const KEPT_CAPACITY: usize = 64 << 10;

/// A writer of a [`StderrLog`]'s lines ([`StderrLog::writer`]); it never fails, and after the
/// log is dropped it writes straight to where the log wrote.
///
/// ```
/// use std::io::Write;
///
/// if let Some(log) = choicewise_gateway::StderrLog::start() {
///     let w = log.writer();
///     std::thread::spawn(move || writeln!(&mut { w }, "from another thread").unwrap())
///         .join()
///         .unwrap();
/// }
/// ```
#[derive(Clone)]
pub struct StderrWriter(Arc<Shared>);

impl Write for StderrWriter {
    fn write(&mut self, line: &[u8]) -> std::io::Result<usize> {
        self.0.put(line);
        Ok(line.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl std::fmt::Debug for StderrWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StderrWriter").finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn captured() -> (Arc<Mutex<Vec<u8>>>, Sink) {
        let out = Arc::new(Mutex::new(Vec::new()));
        let theirs = Arc::clone(&out);
        (
            out,
            Box::new(move |b: &[u8]| theirs.lock().unwrap().extend_from_slice(b)),
        )
    }

    #[test]
    fn every_line_is_written_once_in_order_within_the_bound() {
        let (out, sink) = captured();
        let log = StderrLog::start_to(sink).unwrap();
        let mut expected = Vec::new();
        let big = vec![b'x'; MAX_BUFFERED / 3];
        for i in 0..40 {
            let mut w = log.writer();
            let line = format!("line {i}\n").into_bytes();
            w.write_all(&line).unwrap();
            expected.extend_from_slice(&line);
            if i % 10 == 9 {
                w.write_all(&big).unwrap();
                expected.extend_from_slice(&big);
            }
            assert!(log.shared.lock().bytes.len() <= MAX_BUFFERED);
        }
        // A batch reaches the sink without the log closing.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while out.lock().unwrap().is_empty() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(!out.lock().unwrap().is_empty());
        let mut late = log.writer();
        drop(log);
        assert_eq!(*out.lock().unwrap(), expected);
        // After closing, a line goes straight to the sink.
        late.write_all(b"after\n").unwrap();
        assert!(out.lock().unwrap().ends_with(b"after\n"));
    }
}
