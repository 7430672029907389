//! Where the counts of the limits live: the [`Store`] trait, and its in-process
//! implementation ([`Memory`]); Redis's is in [`super::redis`].
//!
//! A count is kept per counter (a scope's limit: `key:team-a:requests_per_minute`) as a
//! window's start, the amount charged since, and the part of it **held** by requests in
//! flight (reserved, not yet settled): a window begins with the first charge after the last
//! one ended, and lasts its length. A reservation checks every counter of a request and
//! charges all of them, or none (one lock here; one script in Redis). A refusal says whether
//! the settled amount alone would have let the charge pass (the limit is held by requests
//! in flight, which give back what they do not use within seconds) or not. A settlement
//! replaces what was reserved by what was used, in the window it was reserved in; if that
//! window ended since, what was used is charged to the current window (one is begun if none
//! is running): a long generation is never dropped from the count.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

/// One counter a reservation charges: its name (and its number in the process), its
/// window's length, its limit, the amount to add, and how much of it is held until the
/// request's settlement (all of it where the settlement may differ; none for a request's
/// count of 1, which is what it uses).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Charge {
    pub counter: Arc<str>,
    /// The counter's number, unique in the process: where [`Memory`] keeps it.
    pub slot: usize,
    pub window_ms: u64,
    pub limit: u64,
    pub amount: u64,
    pub hold: u64,
}

/// A counter's window as a reservation left it: when it started (milliseconds since the
/// Unix epoch, the store's clock) and the amount charged in it, this charge included.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Window {
    pub start: u64,
    pub amount: u64,
}

/// What a store said of a reservation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Every counter charged: each one's window, in the charges' order, and the store's
    /// clock then.
    Reserved { now: u64, windows: Vec<Window> },
    /// Nothing charged: the charge of this index would pass its limit, whose window ends in
    /// `reset_ms` and holds `used`; `in_flight` when the settled amount alone would have let
    /// it pass.
    Refused {
        index: usize,
        reset_ms: u64,
        used: u64,
        in_flight: bool,
    },
}

/// A settlement of one counter: `held` of it was reserved in the window that started at
/// `start`, and `used` is what the request took.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Adjust {
    pub counter: Arc<str>,
    /// As [`Charge::slot`].
    pub slot: usize,
    pub start: u64,
    pub window_ms: u64,
    pub held: u64,
    pub used: u64,
}

/// Why a store could not answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StoreError(pub String);

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A store's answer to come.
pub(crate) type StoreFuture<'a, T> =
    Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'a>>;

/// Where the counts live. The caller bounds every call by its deadline
/// (`state_timeout_ms`); a store never needs to.
pub(crate) trait Store: Send + Sync {
    /// Checks `charges` against their limits and, if every one fits, charges them all, at
    /// once.
    fn reserve<'a>(&'a self, charges: &'a [Charge]) -> StoreFuture<'a, Verdict>;

    /// Applies `adjusts` (all at once) without waiting for them (a request's record, made
    /// as its body is dropped): now, or by a task of the store's that applies them in order
    /// under the same deadline as every call.
    fn settle_later(&self, adjusts: Vec<Adjust>);

    /// What each of `counters` holds now (none where no window runs), without changing it,
    /// and the store's clock.
    fn peek<'a>(&'a self, counters: &'a [Peek]) -> StoreFuture<'a, Seen>;
}

/// A counter to be read ([`Store::peek`]): its name, its number in the process and its
/// window's length.
#[derive(Debug, Clone)]
pub(crate) struct Peek {
    pub counter: Arc<str>,
    pub slot: usize,
    pub window_ms: u64,
}

/// What [`Store::peek`] found: the store's clock, and each counter's running window (its
/// start, amount and held part).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Seen {
    pub now: u64,
    pub windows: Vec<Option<(u64, u64, u64)>>,
}

/// Milliseconds since the Unix epoch now.
pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// A counter's window: when it started, what was charged in it, and the part of that held
/// by requests in flight.
#[derive(Debug, Clone, Copy)]
struct Counted {
    start: u64,
    amount: u64,
    held: u64,
}

/// The counts in the process: one gateway's, forgotten when it stops. The counters are the
/// configuration's (a scope's limits), numbered when the configuration is read, so the table
/// is a list by their numbers ([`Charge::slot`]), its size bounded by the configuration: a
/// request's counters are found without hashing a name.
#[derive(Debug, Default)]
pub(crate) struct Memory {
    counters: Mutex<Vec<Option<Counted>>>,
}

impl Memory {
    /// [`Store::reserve`] at `now` (milliseconds).
    pub(crate) fn reserve_at(&self, charges: &[Charge], now: u64) -> Verdict {
        let mut counters = self.counters.lock().unwrap_or_else(|p| p.into_inner());
        let mut starts = Vec::with_capacity(charges.len());
        for (index, c) in charges.iter().enumerate() {
            let n = match counters.get(c.slot).copied().flatten() {
                Some(n) if now < n.start.saturating_add(c.window_ms) => n,
                _ => Counted {
                    start: now,
                    amount: 0,
                    held: 0,
                },
            };
            if n.amount.saturating_add(c.amount) > c.limit {
                let reset_ms = n.start.saturating_add(c.window_ms).saturating_sub(now);
                let settled = n.amount.saturating_sub(n.held);
                let in_flight = settled.saturating_add(c.amount) <= c.limit;
                return Verdict::Refused {
                    index,
                    reset_ms,
                    used: n.amount,
                    in_flight,
                };
            }
            starts.push(n.start);
        }
        let mut windows = Vec::with_capacity(charges.len());
        for (c, &start) in charges.iter().zip(&starts) {
            if counters.len() <= c.slot {
                counters.resize(c.slot + 1, None);
            }
            let fresh = Counted {
                start,
                amount: 0,
                held: 0,
            };
            let entry = counters[c.slot].get_or_insert(fresh);
            if entry.start != start {
                *entry = fresh;
            }
            entry.amount = entry.amount.saturating_add(c.amount);
            entry.held = entry.held.saturating_add(c.hold);
            windows.push(Window {
                start,
                amount: entry.amount,
            });
        }
        Verdict::Reserved { now, windows }
    }

    /// What the counter numbered `slot` holds: its window's start, amount and held part.
    #[cfg(test)]
    pub(crate) fn amount(&self, slot: usize) -> Option<(u64, u64, u64)> {
        let counters = self.counters.lock().unwrap();
        counters
            .get(slot)
            .copied()
            .flatten()
            .map(|c| (c.start, c.amount, c.held))
    }

    /// [`Store::settle_later`] at `now` (milliseconds).
    pub(crate) fn apply_at(&self, adjusts: &[Adjust], now: u64) {
        let mut counters = self.counters.lock().unwrap_or_else(|p| p.into_inner());
        for a in adjusts {
            if counters.len() <= a.slot {
                counters.resize(a.slot + 1, None);
            }
            let counter = &mut counters[a.slot];
            let running = |c: &Counted| now < c.start.saturating_add(a.window_ms);
            match counter {
                // Its own window, still running: what was reserved replaced by what was used.
                Some(c) if c.start == a.start && running(c) => {
                    c.amount = (c.amount.saturating_add(a.used)).saturating_sub(a.held);
                    c.held = c.held.saturating_sub(a.held);
                }
                // A window that ended since: what was used is charged to the current one.
                Some(c) if running(c) => {
                    c.amount = c.amount.saturating_add(a.used);
                }
                _ if a.used > 0 => {
                    *counter = Some(Counted {
                        start: now,
                        amount: a.used,
                        held: 0,
                    });
                }
                _ => {}
            }
        }
    }
}

impl Store for Memory {
    fn reserve<'a>(&'a self, charges: &'a [Charge]) -> StoreFuture<'a, Verdict> {
        let verdict = self.reserve_at(charges, now_ms());
        Box::pin(std::future::ready(Ok(verdict)))
    }

    fn settle_later(&self, adjusts: Vec<Adjust>) {
        self.apply_at(&adjusts, now_ms());
    }

    fn peek<'a>(&'a self, counters: &'a [Peek]) -> StoreFuture<'a, Seen> {
        let now = now_ms();
        let held = self.counters.lock().unwrap_or_else(|p| p.into_inner());
        let windows = (counters.iter())
            .map(|p| {
                let c = held.get(p.slot).copied().flatten()?;
                (now < c.start.saturating_add(p.window_ms)).then_some((c.start, c.amount, c.held))
            })
            .collect();
        Box::pin(std::future::ready(Ok(Seen { now, windows })))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The counters of these tests: `a`, `b` and `t`, numbered 0, 1 and 2.
    fn slot(counter: &str) -> usize {
        ["a", "b", "t"].iter().position(|c| *c == counter).unwrap()
    }

    /// A charge of `amount`, all of it held until settled.
    fn charge(counter: &str, window_ms: u64, limit: u64, amount: u64) -> Charge {
        Charge {
            counter: Arc::from(counter),
            slot: slot(counter),
            window_ms,
            limit,
            amount,
            hold: amount,
        }
    }

    fn adjust(counter: &str, start: u64, window_ms: u64, held: u64, used: u64) -> Adjust {
        Adjust {
            counter: Arc::from(counter),
            slot: slot(counter),
            start,
            window_ms,
            held,
            used,
        }
    }

    fn refused(index: usize, reset_ms: u64, used: u64, in_flight: bool) -> Verdict {
        Verdict::Refused {
            index,
            reset_ms,
            used,
            in_flight,
        }
    }

    /// Reserved at `now`, each counter's window's start and amount.
    fn reserved(now: u64, windows: &[(u64, u64)]) -> Verdict {
        Verdict::Reserved {
            now,
            windows: (windows.iter())
                .map(|&(start, amount)| Window { start, amount })
                .collect(),
        }
    }

    #[test]
    fn every_counter_is_charged_or_none() {
        let memory = Memory::default();
        let both = [charge("a", 60_000, 3, 1), charge("b", 1_000, 2, 1)];
        assert_eq!(memory.reserve_at(&both, 0), reserved(0, &[(0, 1), (0, 1)]));
        assert_eq!(
            memory.reserve_at(&both, 10),
            reserved(10, &[(0, 2), (0, 2)])
        );
        // `b` is full until 1000 ms, by two requests not settled: `a` is not charged either.
        assert_eq!(memory.reserve_at(&both, 500), refused(1, 500, 2, true));
        assert_eq!(memory.amount(slot("a")), Some((0, 2, 2)));
        // `b`'s window ended: a new one starts with this charge.
        assert_eq!(
            memory.reserve_at(&both, 1_000),
            reserved(1_000, &[(0, 3), (1_000, 1)])
        );
        assert_eq!(memory.reserve_at(&both, 1_001), refused(0, 58_999, 3, true));
    }

    #[test]
    fn a_refusal_says_whether_requests_in_flight_hold_the_limit() {
        let memory = Memory::default();
        let tokens = [charge("t", 60_000, 100, 80)];
        assert_eq!(memory.reserve_at(&tokens, 0), reserved(0, &[(0, 80)]));
        // 80 held by a request in flight: 30 more would pass once it settles.
        let more = [charge("t", 60_000, 100, 30)];
        assert_eq!(memory.reserve_at(&more, 10), refused(0, 59_990, 80, true));
        // It used all 80: now the settled amount alone refuses.
        memory.apply_at(&[adjust("t", 0, 60_000, 80, 80)], 20);
        assert_eq!(memory.amount(slot("t")), Some((0, 80, 0)));
        assert_eq!(memory.reserve_at(&more, 30), refused(0, 59_970, 80, false));
    }

    #[test]
    fn a_settlement_corrects_its_window_or_charges_the_current_one() {
        let memory = Memory::default();
        let tokens = [charge("t", 1_000, 100, 80)];
        assert_eq!(memory.reserve_at(&tokens, 0), reserved(0, &[(0, 80)]));
        // 80 reserved, 30 used.
        memory.apply_at(&[adjust("t", 0, 1_000, 80, 30)], 5);
        assert_eq!(memory.amount(slot("t")), Some((0, 30, 0)));
        // 70 more fit, since the 50 not used were given back.
        let more = [charge("t", 1_000, 100, 70)];
        assert_eq!(memory.reserve_at(&more, 10), reserved(10, &[(0, 100)]));
        assert_eq!(memory.amount(slot("t")), Some((0, 100, 70)));
        // A new window: the old window's request, settled late, is charged to it whole.
        assert_eq!(
            memory.reserve_at(&tokens, 2_000),
            reserved(2_000, &[(2_000, 80)])
        );
        memory.apply_at(&[adjust("t", 0, 1_000, 70, 500)], 2_010);
        assert_eq!(memory.amount(slot("t")), Some((2_000, 580, 80)));
        // No window running: the late settlement begins one.
        memory.apply_at(&[adjust("t", 2_000, 1_000, 80, 90)], 5_000);
        assert_eq!(memory.amount(slot("t")), Some((5_000, 90, 0)));
        // A correction never takes a count below 0.
        memory.apply_at(&[adjust("t", 5_000, 1_000, 200, 0)], 5_001);
        assert_eq!(memory.amount(slot("t")), Some((5_000, 0, 0)));
    }
}
