//! The process-wide memory ceiling (Envoy's overload manager, with one resource and one
//! action): above the high watermark the gateway refuses new requests with 503 and
//! `Retry-After`, while the requests it serves go on; below the low watermark it admits
//! again.
//!
//! The memory is the process's resident set (`/proc/self/statm`, read at most every
//! [`SAMPLE_EVERY`] by the request that finds the last reading stale), plus the request bodies
//! admitted and not yet read: a body is reserved at its declared length (or at
//! `max_body_bytes` when it declares none) from its admission until its handler has answered,
//! so that a burst of large uploads counts before it is resident. Where the process's
//! memory cannot be read (no `/proc`), only the reservations count.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How stale the resident-set reading may be when a request asks.
pub(crate) const SAMPLE_EVERY: Duration = Duration::from_millis(20);

/// The ceiling's state: the watermarks, the last reading, the reservations.
#[derive(Debug)]
pub(crate) struct Ceiling {
    high: u64,
    low: u64,
    /// Resident bytes at the last reading.
    resident: AtomicU64,
    /// When the last reading was taken, in microseconds since `epoch`.
    read_at: AtomicU64,
    epoch: Instant,
    /// Bytes of request bodies admitted and not yet answered.
    reserved: AtomicU64,
    /// Refusing: above the high watermark, not yet below the low one.
    refusing: AtomicBool,
    /// Reads the resident set ([`resident_bytes`]; the tests' own elsewhere).
    read: fn() -> Option<u64>,
}

/// Why a request was refused: the memory counted and the watermark it passed.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Refused {
    pub used: u64,
    pub high: u64,
}

/// A request body's reservation, released when dropped.
#[derive(Debug)]
pub(crate) struct Reservation {
    ceiling: Arc<Ceiling>,
    bytes: u64,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.ceiling
            .reserved
            .fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

/// What a state change says, for the log and the metric: `Some(true)` on starting to refuse,
/// `Some(false)` on admitting again.
pub(crate) type Change = Option<bool>;

impl Ceiling {
    /// A ceiling at these marks, in bytes (a high mark of 0 turns it off).
    pub(crate) fn new(high: u64, low: u64) -> Ceiling {
        Ceiling::with_marks(high, low, resident_bytes)
    }

    fn with_marks(high: u64, low: u64, read: fn() -> Option<u64>) -> Ceiling {
        Ceiling {
            read,
            high,
            low,
            resident: AtomicU64::new(0),
            read_at: AtomicU64::new(u64::MAX),
            epoch: Instant::now(),
            reserved: AtomicU64::new(0),
            refusing: AtomicBool::new(false),
        }
    }

    /// The memory counted against the watermarks: resident plus reserved.
    #[cfg(test)]
    fn used(&self) -> u64 {
        self.resident() + self.reserved.load(Ordering::Acquire)
    }

    /// The resident set, read anew when the last reading is older than [`SAMPLE_EVERY`].
    fn resident(&self) -> u64 {
        let now = self.epoch.elapsed().as_micros() as u64;
        let at = self.read_at.load(Ordering::Acquire);
        if at == u64::MAX || now.saturating_sub(at) >= SAMPLE_EVERY.as_micros() as u64 {
            // Whoever reads first refreshes; a race only reads twice.
            self.read_at.store(now, Ordering::Release);
            self.resident
                .store((self.read)().unwrap_or(0), Ordering::Release);
        }
        self.resident.load(Ordering::Acquire)
    }

    /// Admits a request whose body may take `body` bytes, or refuses it. Returns the
    /// reservation to hold until the request is answered, and whether the state changed.
    pub(crate) fn admit(
        self: &Arc<Self>,
        body: u64,
    ) -> (Result<Option<Reservation>, Refused>, Change) {
        if self.high == 0 {
            return (Ok(None), None);
        }
        let resident = self.resident();
        let mut reserved = self.reserved.load(Ordering::Acquire);
        loop {
            let used = resident + reserved;
            let refusing = self.refusing.load(Ordering::Acquire);
            if refusing && used >= self.low {
                // Hysteresis: refusing until below the low watermark.
                return (
                    Err(Refused {
                        used,
                        high: self.high,
                    }),
                    None,
                );
            }
            if used + body > self.high {
                // Past the mark with this body: refused. The gateway turns to refusing
                // everyone only when the memory in use is above the low mark already; one
                // large body while little is in use is refused alone.
                let turn = match used >= self.low {
                    true => self.turn(true),
                    false => None,
                };
                return (
                    Err(Refused {
                        used,
                        high: self.high,
                    }),
                    turn,
                );
            }
            let turn_to = refusing.then_some(false);
            // The reservation is taken only if nobody else's came first, so that racing
            // admissions never pass the mark together.
            match self.reserved.compare_exchange_weak(
                reserved,
                reserved + body,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => {
                    let reservation = Reservation {
                        ceiling: self.clone(),
                        bytes: body,
                    };
                    return (Ok(Some(reservation)), turn_to.and_then(|to| self.turn(to)));
                }
                Err(now) => reserved = now,
            }
        }
    }

    /// Turns to refusing (`true`) or admitting; `Some` for the one request that turned it.
    fn turn(&self, refusing: bool) -> Change {
        (self.refusing)
            .compare_exchange(!refusing, refusing, Ordering::AcqRel, Ordering::Acquire)
            .ok()
            .map(|_| refusing)
    }

    /// Whether the gateway refuses new requests now.
    pub(crate) fn refusing(&self) -> bool {
        self.refusing.load(Ordering::Acquire)
    }
}

/// The process's resident set in bytes, from `/proc/self/statm` (its second field, in pages);
/// `None` where it cannot be read.
pub(crate) fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    // The page size of every Linux platform the gateway builds for but a few (16 KiB on some
    // arm64 kernels): read it where the kernel says it.
    Some(pages * page_size())
}

fn page_size() -> u64 {
    static SIZE: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *SIZE.get_or_init(|| {
        // AT_PAGESZ through /proc/self/auxv: type 6, as pairs of native words.
        let auxv = std::fs::read("/proc/self/auxv").unwrap_or_default();
        let word = std::mem::size_of::<usize>();
        auxv.chunks_exact(2 * word)
            .find_map(|pair| {
                let key = usize::from_ne_bytes(pair[..word].try_into().ok()?);
                let value = usize::from_ne_bytes(pair[word..].try_into().ok()?);
                (key == 6).then_some(value as u64)
            })
            .unwrap_or(4096)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    /// A process that uses no memory: the reservations alone count.
    fn nothing() -> Option<u64> {
        Some(0)
    }

    #[test]
    fn one_body_over_the_room_left_is_refused_alone() {
        let ceiling = Arc::new(Ceiling::with_marks(64 * MIB, 48 * MIB, nothing));
        let (small, change) = ceiling.admit(MIB);
        let small = small.expect("admitted").expect("reserved");
        assert_eq!(change, None);
        assert_eq!(ceiling.used(), MIB);
        // Little in use: a body over the room left is refused, the others still admitted.
        let (big, change) = ceiling.admit(100 * MIB);
        assert!(matches!(big, Err(Refused { used, high }) if used == MIB && high == 64 * MIB));
        assert_eq!(change, None);
        assert!(!ceiling.refusing());
        assert!(ceiling.admit(MIB).0.is_ok());
        drop(small);
        assert_eq!(ceiling.used(), 0);
    }

    #[test]
    fn refuses_above_the_high_mark_until_below_the_low_one() {
        let ceiling = Arc::new(Ceiling::with_marks(64 * MIB, 40 * MIB, nothing));
        let mut held: Vec<_> = (0..4)
            .map(|_| ceiling.admit(15 * MIB).0.expect("room").expect("reserved"))
            .collect();
        // 60 MiB in use, above the low mark: a body past the high one turns the gateway to
        // refusing, and then even an empty one is refused.
        let (refused, change) = ceiling.admit(5 * MIB);
        assert!(refused.is_err());
        assert_eq!(change, Some(true));
        assert!(ceiling.refusing());
        let (refused, change) = ceiling.admit(0);
        assert!(refused.is_err());
        assert_eq!(change, None);
        // Between the marks (45 MiB): still refusing.
        held.pop();
        let (between, change) = ceiling.admit(0);
        assert!(between.is_err());
        assert_eq!(change, None);
        // Below the low mark (30 MiB): admitting again, said once.
        held.pop();
        let (admitted, change) = ceiling.admit(MIB);
        assert!(admitted.is_ok());
        assert_eq!(change, Some(false));
        assert!(!ceiling.refusing());
        assert_eq!(ceiling.admit(0).1, None);
    }

    #[test]
    fn counts_the_resident_memory_too() {
        fn big() -> Option<u64> {
            Some(70 * MIB)
        }
        let ceiling = Arc::new(Ceiling::with_marks(64 * MIB, 48 * MIB, big));
        let (refused, change) = ceiling.admit(0);
        assert!(matches!(refused, Err(Refused { used, .. }) if used == 70 * MIB));
        assert_eq!(change, Some(true));
    }

    #[test]
    fn off_when_the_high_mark_is_zero() {
        let ceiling = Arc::new(Ceiling::with_marks(0, 0, nothing));
        let (admitted, change) = ceiling.admit(u64::MAX / 2);
        assert!(matches!(admitted, Ok(None)));
        assert_eq!(change, None);
    }

    #[test]
    fn reads_the_process_memory() {
        let rss = resident_bytes().expect("/proc/self/statm");
        assert!(rss > MIB, "{rss}");
    }
}
