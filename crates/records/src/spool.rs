//! The spool: where records wait while the database is away, on disk, in the shape of
//! vector's disk buffer at a smaller size.
//!
//! `spool_path` is a folder of **slots**, `0/`, `1/`, ...: each process that records takes
//! the first slot whose `lock` file no other process holds (`flock`, released by the kernel
//! when the process ends, however it ends), so that replicas started from one folder each
//! spool alone and none reads another's records. A slot holds **segments**, files of JSON
//! lines named by a sequence number; records are appended to the newest, read from the
//! oldest, and a segment is deleted once every record in it is written. A slot left by a
//! process that ended is **adopted** by a live one: its segments are moved into the live
//! slot (a rename in one folder) and written from there.
//!
//! An append that fails (a full disk) is cut back to where it began, so that the segment
//! holds only whole records; each append is `fsync`ed before its records count as spooled.
//! The bound counts only the bytes not yet written to the database.

use std::collections::VecDeque;
use std::fs::TryLockError;
use std::io::SeekFrom;
use std::path::{Path, PathBuf};

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncSeekExt, AsyncWriteExt};

use crate::RecordsError;
use crate::record::RequestRecord;

/// A segment is closed and a new one begun once it holds this many bytes.
const SEGMENT_BYTES: u64 = 16 << 20;
/// Slots tried, at most: the processes that can spool in one folder at once.
const SLOTS: usize = 64;

/// One segment file: its number and how many of its bytes hold whole records.
#[derive(Debug)]
struct Segment {
    seq: u64,
    len: u64,
}

/// Records read from the spool: each record's end (so that a write that stops part-way
/// advances exactly past what it wrote).
pub(crate) struct SpoolBatch {
    pub(crate) records: Vec<RequestRecord>,
    /// Where each record's line ends, in the oldest segment.
    pub(crate) ends: Vec<u64>,
    /// Where the read stopped: past this nothing in the oldest segment is left unread.
    pub(crate) end: u64,
}

/// What an append did: records spooled, records over the bound, the disk's error.
#[derive(Debug, Default)]
pub(crate) struct Appended {
    pub(crate) spooled: u64,
    pub(crate) full: u64,
    pub(crate) failed: Option<std::io::Error>,
}

/// This process's slot of the spool.
pub(crate) struct Spool {
    /// `spool_path`, the folder of slots.
    root: PathBuf,
    /// This process's slot, and the lock that keeps it so.
    dir: PathBuf,
    slot: usize,
    _lock: std::fs::File,
    /// The bound on unwritten bytes.
    max: u64,
    /// Oldest first; the last is appended to.
    segments: VecDeque<Segment>,
    /// The newest segment, open for appends.
    open: Option<tokio::fs::File>,
    /// Where the unwritten records of the oldest segment begin.
    read_at: u64,
    next_seq: u64,
}

impl std::fmt::Debug for Spool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Spool")
            .field("dir", &self.dir)
            .field("segments", &self.segments)
            .field("read_at", &self.read_at)
            .finish()
    }
}

fn segment_name(seq: u64) -> String {
    format!("{seq:020}.jsonl")
}

/// The segments of a slot's folder, by number.
fn segments_in(dir: &Path) -> std::io::Result<Vec<(u64, u64)>> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let Some(seq) = (name.to_str())
            .and_then(|n| n.strip_suffix(".jsonl"))
            .and_then(|n| n.parse::<u64>().ok())
        else {
            continue;
        };
        found.push((seq, entry.metadata()?.len()));
    }
    found.sort_unstable();
    Ok(found)
}

/// `slot`'s lock, taken without waiting: `None` when another process holds it.
fn try_lock(dir: &Path) -> std::io::Result<Option<std::fs::File>> {
    std::fs::create_dir_all(dir)?;
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join("lock"))?;
    match file.try_lock() {
        Ok(()) => Ok(Some(file)),
        Err(TryLockError::WouldBlock) => Ok(None),
        Err(TryLockError::Error(e)) => Err(e),
    }
}

impl Spool {
    /// Takes the first free slot of the spool at `root` (made when missing). A spool file
    /// of an earlier version at `root` is moved into the slot taken, its records kept.
    pub(crate) fn open(root: &Path, max: u64) -> Result<Spool, RecordsError> {
        let fail = |what: &str, e: std::io::Error| {
            RecordsError::Spool(format!("{}: {what}: {e}", root.display()))
        };
        // A spool of one file (before slots): moved aside, then into the slot taken.
        let mut legacy = None;
        if root.is_file() {
            let aside = root.with_extension(format!("upgrading-{}", std::process::id()));
            match std::fs::rename(root, &aside) {
                Ok(()) => legacy = Some(aside),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(fail("moving the spool file of an earlier version", e)),
            }
        }
        std::fs::create_dir_all(root).map_err(|e| fail("making its folder", e))?;
        let mut taken = None;
        for slot in 0..SLOTS {
            let dir = root.join(slot.to_string());
            match try_lock(&dir) {
                Ok(Some(lock)) => {
                    taken = Some((slot, dir, lock));
                    break;
                }
                Ok(None) => continue,
                Err(e) => return Err(fail(&format!("locking slot {slot}"), e)),
            }
        }
        let Some((slot, dir, lock)) = taken else {
            return Err(RecordsError::Spool(format!(
                "{}: all {SLOTS} slots are held by other processes; give this gateway a \
                 spool_path of its own in [records]",
                root.display()
            )));
        };
        let found = segments_in(&dir).map_err(|e| fail("reading its slot", e))?;
        let mut spool = Spool {
            root: root.to_path_buf(),
            slot,
            _lock: lock,
            max,
            next_seq: found.last().map_or(1, |(seq, _)| seq + 1),
            segments: (found.into_iter())
                .map(|(seq, len)| Segment { seq, len })
                .collect(),
            open: None,
            read_at: 0,
            dir,
        };
        if let Some(aside) = legacy {
            spool
                .take_in(&aside)
                .map_err(|e| fail("moving the spool file of an earlier version", e))?;
        }
        Ok(spool)
    }

    /// The folder of this process's slot.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// Moves the file at `from` into this slot as its newest closed segment.
    fn take_in(&mut self, from: &Path) -> std::io::Result<()> {
        // Appends go on in a segment after it.
        self.open = None;
        let seq = self.next_seq;
        self.next_seq += 1;
        let len = std::fs::metadata(from)?.len();
        std::fs::rename(from, self.dir.join(segment_name(seq)))?;
        self.segments.push_back(Segment { seq, len });
        Ok(())
    }

    /// Moves into this slot the segments of every slot no process holds (left by a process
    /// that ended): how many segments were taken.
    pub(crate) fn adopt_orphans(&mut self) -> usize {
        let mut taken = 0;
        let own = self.slot;
        for slot in (0..SLOTS).filter(|s| *s != own) {
            let dir = self.root.join(slot.to_string());
            if !dir.join("lock").exists() {
                continue;
            }
            let Ok(Some(lock)) = try_lock(&dir) else {
                continue;
            };
            let Ok(found) = segments_in(&dir) else {
                continue;
            };
            for (seq, _) in found {
                let from = dir.join(segment_name(seq));
                match self.take_in(&from) {
                    Ok(()) => taken += 1,
                    Err(e) => tracing::warn!(
                        segment = %from.display(),
                        "records: a spool segment of an ended process cannot be moved: {e}"
                    ),
                }
            }
            drop(lock);
        }
        if taken > 0 {
            tracing::info!(
                spool = %self.dir.display(),
                segments = taken,
                "records: spooled records of a process that ended are written from this one's spool"
            );
        }
        taken
    }

    /// Bytes of records not yet written to the database.
    pub(crate) fn unwritten(&self) -> u64 {
        let total: u64 = self.segments.iter().map(|s| s.len).sum();
        total - self.read_at
    }

    /// Whether it holds records not yet written.
    pub(crate) fn pending(&self) -> bool {
        self.unwritten() > 0
    }

    /// Appends the `records` that fit under the bound, in one write, `fsync`ed. A write that
    /// fails is cut back to where it began.
    pub(crate) async fn append(&mut self, records: &[RequestRecord]) -> Appended {
        let mut out = Appended::default();
        let mut text = Vec::new();
        let room = self.max.saturating_sub(self.unwritten());
        let mut lines = 0;
        for r in records {
            // A record is strings and numbers: its JSON cannot fail; were it to, the record
            // would be dropped and counted, never the batch.
            let Ok(mut line) = serde_json::to_vec(r) else {
                out.full += 1;
                continue;
            };
            line.push(b'\n');
            if (text.len() + line.len()) as u64 > room {
                out.full += 1;
                continue;
            }
            text.extend_from_slice(&line);
            lines += 1;
        }
        if text.is_empty() {
            return out;
        }
        match self.append_bytes(&text).await {
            Ok(()) => out.spooled = lines,
            Err(e) => out.failed = Some(e),
        }
        out
    }

    async fn append_bytes(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        let full = self.segments.back().is_none_or(|s| s.len >= SEGMENT_BYTES);
        if self.open.is_none() || full {
            let seq = self.next_seq;
            let file = tokio::fs::OpenOptions::new()
                .create_new(true)
                .write(true)
                .open(self.dir.join(segment_name(seq)))
                .await?;
            self.next_seq += 1;
            self.segments.push_back(Segment { seq, len: 0 });
            self.open = Some(file);
        }
        let (Some(file), Some(segment)) = (self.open.as_mut(), self.segments.back_mut()) else {
            unreachable!("a segment was opened above");
        };
        let begun = segment.len;
        let written = async {
            file.seek(SeekFrom::Start(begun)).await?;
            file.write_all(bytes).await?;
            file.flush().await?;
            file.sync_data().await
        };
        match written.await {
            Ok(()) => {
                segment.len += bytes.len() as u64;
                Ok(())
            }
            Err(e) => {
                // Cut back to the last whole record; if even that fails, this segment is
                // closed at its known length (reads stop there) and the next append begins
                // another.
                let cut = async {
                    file.set_len(begun).await?;
                    file.sync_data().await
                };
                if cut.await.is_err() {
                    self.open = None;
                }
                Err(e)
            }
        }
    }

    /// Up to `max_records` records, or about `max_bytes` of them, from the oldest segment
    /// with records not yet written. A line that does not read (cut by a crash) is skipped
    /// and said.
    pub(crate) async fn read(
        &mut self,
        max_records: usize,
        max_bytes: u64,
    ) -> std::io::Result<SpoolBatch> {
        self.drop_written().await;
        let Some(segment) = self.segments.front() else {
            return Ok(SpoolBatch {
                records: Vec::new(),
                ends: Vec::new(),
                end: 0,
            });
        };
        let path = self.dir.join(segment_name(segment.seq));
        let mut f = tokio::fs::File::open(&path).await?;
        f.seek(SeekFrom::Start(self.read_at)).await?;
        let mut reader = tokio::io::BufReader::new(f).take(segment.len - self.read_at);
        let (mut records, mut ends) = (Vec::new(), Vec::new());
        let mut end = self.read_at;
        let mut line = Vec::new();
        while records.len() < max_records && end - self.read_at < max_bytes {
            line.clear();
            let n = reader.read_until(b'\n', &mut line).await?;
            if n == 0 {
                break;
            }
            end += n as u64;
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            match serde_json::from_slice::<RequestRecord>(&line) {
                Ok(r) => {
                    records.push(r);
                    ends.push(end);
                }
                Err(e) => tracing::warn!(
                    spool = %path.display(),
                    at = end - n as u64,
                    "records: a spooled line does not read, left out: {e}"
                ),
            }
        }
        Ok(SpoolBatch { records, ends, end })
    }

    /// The records of the oldest segment before `end` are written.
    pub(crate) async fn advance(&mut self, end: u64) {
        self.read_at = self.read_at.max(end);
        self.drop_written().await;
    }

    /// Deletes the oldest segments whose every record is written (the open one too: the
    /// next append begins a new one).
    async fn drop_written(&mut self) {
        while let Some(segment) = self.segments.front()
            && self.read_at >= segment.len
        {
            let path = self.dir.join(segment_name(segment.seq));
            if self.segments.len() == 1 {
                self.open = None;
            }
            if let Err(e) = tokio::fs::remove_file(&path).await
                && e.kind() != std::io::ErrorKind::NotFound
            {
                tracing::warn!(segment = %path.display(), "records: a written spool segment cannot be deleted: {e}");
                return;
            }
            self.segments.pop_front();
            self.read_at = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(i: usize) -> RequestRecord {
        RequestRecord::new(1_795_737_600_000, format!("req-{i}"), "m")
    }

    #[tokio::test]
    async fn two_spools_in_one_folder_take_two_slots_and_an_ended_one_is_adopted() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("records.spool");
        let mut a = Spool::open(&root, 1 << 20).unwrap();
        let mut b = Spool::open(&root, 1 << 20).unwrap();
        assert_ne!(a.dir(), b.dir());
        let records: Vec<RequestRecord> = (0..10).map(record).collect();
        assert_eq!(a.append(&records[..4]).await.spooled, 4);
        assert_eq!(b.append(&records[4..]).await.spooled, 6);
        // b ends: a takes its segments, and reads all ten. A process forked by another
        // thread of this one (another test's server) holds b's lock until its `exec`: the
        // writer tries again a minute on, this test 10 ms on.
        drop(b);
        let mut adopted = a.adopt_orphans();
        for _ in 0..200 {
            if adopted > 0 {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            adopted = a.adopt_orphans();
        }
        assert_eq!(adopted, 1);
        let mut ids = Vec::new();
        while a.pending() {
            let batch = a.read(3, u64::MAX).await.unwrap();
            ids.extend(batch.records.iter().map(|r| r.request_id.clone()));
            a.advance(batch.end).await;
        }
        ids.sort();
        let mut want: Vec<String> = records.iter().map(|r| r.request_id.clone()).collect();
        want.sort();
        assert_eq!(ids, want);
        assert_eq!(
            segments_in(a.dir()).unwrap(),
            vec![],
            "written segments are deleted"
        );
    }

    #[tokio::test]
    async fn the_bound_counts_only_what_is_unwritten() {
        let dir = tempfile::tempdir().unwrap();
        let one = serde_json::to_vec(&record(0)).unwrap().len() as u64 + 1;
        let mut spool = Spool::open(&dir.path().join("s"), 3 * one + 2).unwrap();
        let records: Vec<RequestRecord> = (0..5).map(record).collect();
        let appended = spool.append(&records).await;
        assert_eq!((appended.spooled, appended.full), (3, 2));
        let batch = spool.read(2, u64::MAX).await.unwrap();
        spool.advance(batch.end).await;
        // Two written: room for two more, though the segment still holds five lines' worth.
        assert_eq!(spool.append(&records[3..]).await.spooled, 2);
    }

    #[tokio::test]
    async fn a_spool_file_of_an_earlier_version_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("records.spool");
        let mut text = serde_json::to_vec(&record(7)).unwrap();
        text.push(b'\n');
        std::fs::write(&root, &text).unwrap();
        let mut spool = Spool::open(&root, 1 << 20).unwrap();
        assert!(root.is_dir());
        let batch = spool.read(10, u64::MAX).await.unwrap();
        assert_eq!(batch.records[0].request_id, "req-7");
    }
}
