//! The process-wide memory ceiling (Envoy's overload manager, with one resource and one
//! action): above the high watermark the gateway refuses new requests with 503 and
//! `Retry-After`, while the requests it serves go on; below the low watermark it admits
//! again.
//!
//! The memory is the process's resident set (`/proc/self/statm`, read at most every
//! [`SAMPLE_EVERY`] by the request that finds the last reading stale), plus what the requests
//! admitted will cost and have not yet taken: a request is charged from its admission until
//! its handler has answered, so that a burst of large uploads, or of bodies that cost many
//! times their size to parse, counts before it is resident. The charge is first
//! [`cost_bound`] of its declared length up to `HEAD_CHARGE` (64 KiB; of that much when it
//! declares none): its route's factor over what may arrive first; it grows to the bound of
//! every byte received as the body's bytes arrive, before they are kept, so that idle
//! connections announcing large bodies hold little; once the body is read, [`cost`] of its
//! fields' sizes (the factor over the fields its handler builds from). The charges of the parses running at
//! once are all under the mark, so together they never pass it; once parsed, the mark is
//! checked again ([`Ceiling::recheck`]). Where the process's memory cannot be read (no
//! `/proc`), only the charges count.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::api::BodyCost;

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
pub(crate) struct AboveWatermark {
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

impl Reservation {
    /// Charges the request `bytes` in all, in place of what it holds: less is released at
    /// once; more is taken only if it fits under the high mark with everything else in use
    /// (else the reservation stays as it was, and the refusal says why).
    pub(crate) fn charge(&mut self, bytes: u64) -> Result<(), AboveWatermark> {
        let ceiling = &self.ceiling;
        if bytes <= self.bytes {
            ceiling
                .reserved
                .fetch_sub(self.bytes - bytes, Ordering::AcqRel);
            self.bytes = bytes;
            return Ok(());
        }
        let extra = bytes - self.bytes;
        let resident = ceiling.resident();
        let mut reserved = ceiling.reserved.load(Ordering::Acquire);
        loop {
            let used = resident + reserved;
            if used + extra > ceiling.high {
                return Err(AboveWatermark {
                    used,
                    high: ceiling.high,
                });
            }
            match ceiling.reserved.compare_exchange_weak(
                reserved,
                reserved + extra,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => {
                    self.bytes = bytes;
                    return Ok(());
                }
                Err(now) => reserved = now,
            }
        }
    }

    /// The bytes it holds.
    pub(crate) fn held(&self) -> u64 {
        self.bytes
    }
}

/// What a request of `route` whose body is `body` bytes may cost before its fields are
/// known: the body, and the route's factor over all of it (an upper bound of [`cost`]).
pub(crate) fn cost_bound(route: BodyCost, body: u64) -> u64 {
    body.saturating_add(body.saturating_mul(route.sixteenths) / 16)
}

/// What a request of `route` costs to process, from its fields' sizes: its body (`len`
/// bytes), held while it is served, and the route's factor over the `heavy` bytes of the
/// fields its handler builds from (the body's scan: [`crate::wellformed::Scan::heavy`]).
pub(crate) fn cost(route: BodyCost, len: usize, heavy: u64) -> u64 {
    (len as u64).saturating_add(heavy.saturating_mul(route.sixteenths) / 16)
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
    ) -> (Result<Option<Reservation>, AboveWatermark>, Change) {
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
                    Err(AboveWatermark {
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
                    Err(AboveWatermark {
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

    /// The mark checked again once a request's body is parsed, against the resident set
    /// read anew (its parse's memory is there now, or freed): refused when the process is
    /// above the high mark, which turns the gateway to refusing.
    pub(crate) fn recheck(&self) -> (Result<(), AboveWatermark>, Change) {
        if self.high == 0 {
            return (Ok(()), None);
        }
        let now = self.epoch.elapsed().as_micros() as u64;
        self.read_at.store(now, Ordering::Release);
        let resident = (self.read)().unwrap_or(0);
        self.resident.store(resident, Ordering::Release);
        if resident > self.high {
            let refused = AboveWatermark {
                used: resident,
                high: self.high,
            };
            return (Err(refused), self.turn(true));
        }
        (Ok(()), None)
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
    use crate::api::ClientApi;
    use crate::api::chat::Chat;
    use crate::api::messages::Messages;
    use crate::api::responses::Responses;

    /// The cost entry of the client API of `path` (none: its bytes alone).
    fn cost_of_path(path: &str) -> BodyCost {
        crate::api::find(path).map_or(BodyCost::NONE, |api| api.cost)
    }

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
        assert!(
            matches!(big, Err(AboveWatermark { used, high }) if used == MIB && high == 64 * MIB)
        );
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
        assert!(matches!(refused, Err(AboveWatermark { used, .. }) if used == 70 * MIB));
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
    fn a_charge_grows_only_within_the_mark_and_shrinks_at_once() {
        let ceiling = Arc::new(Ceiling::with_marks(64 * MIB, 48 * MIB, nothing));
        let mut held = ceiling.admit(8 * MIB).0.expect("room").expect("reserved");
        // Grown to what the request will cost: counted against the mark.
        held.charge(40 * MIB).expect("fits");
        assert_eq!((held.held(), ceiling.used()), (40 * MIB, 40 * MIB));
        let (refused, _) = ceiling.admit(30 * MIB);
        assert!(refused.is_err());
        // Past the mark: refused, the reservation as it was.
        let e = held.charge(70 * MIB).expect_err("past the mark");
        assert_eq!((e.used, e.high), (40 * MIB, 64 * MIB));
        assert_eq!(ceiling.used(), 40 * MIB);
        // Smaller: released at once.
        held.charge(4 * MIB).expect("smaller");
        assert_eq!(ceiling.used(), 4 * MIB);
        drop(held);
        assert_eq!(ceiling.used(), 0);
    }

    #[test]
    fn the_recheck_reads_the_resident_set_anew() {
        fn big() -> Option<u64> {
            Some(70 * MIB)
        }
        let ceiling = Ceiling::with_marks(64 * MIB, 48 * MIB, big);
        let (refused, change) = ceiling.recheck();
        assert!(matches!(refused, Err(AboveWatermark { used, .. }) if used == 70 * MIB));
        assert_eq!(change, Some(true));
        let calm = Ceiling::with_marks(64 * MIB, 48 * MIB, nothing);
        assert!(matches!(calm.recheck(), (Ok(()), None)));
    }

    /// The heavy bytes of `text` as the body's scan counts them for `route`.
    fn heavy_bytes(route: BodyCost, text: &[u8]) -> u64 {
        crate::wellformed::scan(text, crate::wellformed::Paths::Indexed, route.heavy).heavy
    }

    /// What `text` costs on `route` ([`cost`] of its scan).
    fn cost_of(route: BodyCost, text: &[u8]) -> u64 {
        cost(route, text.len(), heavy_bytes(route, text))
    }

    #[test]
    fn a_request_costs_its_body_and_its_route_over_its_heavy_fields() {
        let messages = format!(
            r#"[{}]"#,
            vec![r#"{"role":"user","content":"hi"}"#; 1000].join(",")
        );
        let body = format!(r#"{{"model":"m","messages":{messages},"metadata":{{"a":"}}"}}}}"#);
        let text = body.as_bytes();
        // The messages' bytes exactly, whatever their nesting and strings hold.
        assert_eq!(heavy_bytes(Chat::COST, text), messages.len() as u64);
        let len = text.len() as u64;
        let chat = cost_of(Chat::COST, text);
        assert_eq!(
            chat,
            len + messages.len() as u64 * Chat::COST.sixteenths / 16
        );
        // Another route: the body alone; the bound before the fields are known is never
        // below the cost.
        assert_eq!(cost_of(BodyCost::NONE, text), len);
        for route in [
            Chat::COST,
            Messages::COST,
            cost_of_path("/v1/messages/count_tokens"),
            Responses::COST,
        ] {
            assert!(cost_of(route, text) <= cost_bound(route, len));
        }
        // A light field is not counted; a key with an escape, a field sent twice, and text
        // that is not one object are counted high.
        assert_eq!(heavy_bytes(Messages::COST, br#"{"metadata":[1,2,3]}"#), 0);
        assert_eq!(
            heavy_bytes(Messages::COST, br#"{"messag\u0065s":[1,2]}"#),
            5
        );
        assert_eq!(
            heavy_bytes(Responses::COST, br#"{"input":[1], "input":"abc"}"#),
            3 + 5
        );
        assert_eq!(heavy_bytes(Chat::COST, br#"[{"messages":1}]"#), 16);
        assert_eq!(heavy_bytes(Chat::COST, br#"{"a":1}{"messages":2}"#), 21);
        assert_eq!(cost_of_path("/v1/messages/count_tokens"), Messages::COST);
        assert_eq!(cost_of_path("/v1/models"), BodyCost::NONE);
        assert_eq!(cost_of_path("/v1/v1/responses"), Responses::COST);
    }

    #[test]
    fn reads_the_process_memory() {
        let rss = resident_bytes().expect("/proc/self/statm");
        assert!(rss > MIB, "{rss}");
    }
}
