//! Where the counts of the limits live: the [`Store`] trait, and its in-process
//! implementation ([`Memory`]); Redis's is in [`super::redis`].
//!
//! A count is kept per counter (a scope's limit: `key:team-a:requests_per_minute`) as a
//! window's start and the amount counted since: a window begins with the first charge after
//! the last one ended, and lasts its length. A reservation checks every counter of a request
//! and charges all of them, or none (one lock here; one script in Redis); a settlement
//! replaces what was reserved by what was counted, in the windows it was reserved in (a
//! window that ended since is left alone).

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

/// One counter a reservation charges: its name (and its number in the process), its
/// window's length, its limit, and the amount to add.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Charge {
    pub counter: Arc<str>,
    /// The counter's number, unique in the process: where [`Memory`] keeps it.
    pub slot: usize,
    pub window_ms: u64,
    pub limit: u64,
    pub amount: u64,
}

/// What a store said of a reservation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Every counter charged: the start of each one's window (milliseconds since the Unix
    /// epoch, the store's clock), in the charges' order.
    Reserved(Vec<u64>),
    /// Nothing charged: the charge of this index would pass its limit, whose window ends in
    /// `reset_ms`.
    Refused { index: usize, reset_ms: u64 },
}

/// A counter's amount corrected by `delta`, if its window is still the one that started at
/// `start`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Adjust {
    pub counter: Arc<str>,
    /// As [`Charge::slot`].
    pub slot: usize,
    pub start: u64,
    pub delta: i64,
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
}

/// Milliseconds since the Unix epoch now.
pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// A counter's window: when it started, and what was counted in it.
#[derive(Debug, Clone, Copy)]
struct Counted {
    start: u64,
    amount: u64,
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
            let (start, used) = match counters.get(c.slot).copied().flatten() {
                Some(n) if now < n.start.saturating_add(c.window_ms) => (n.start, n.amount),
                _ => (now, 0),
            };
            if used.saturating_add(c.amount) > c.limit {
                let reset_ms = start.saturating_add(c.window_ms).saturating_sub(now);
                return Verdict::Refused { index, reset_ms };
            }
            starts.push(start);
        }
        for (c, &start) in charges.iter().zip(&starts) {
            if counters.len() <= c.slot {
                counters.resize(c.slot + 1, None);
            }
            let entry = counters[c.slot].get_or_insert(Counted { start, amount: 0 });
            if entry.start != start {
                *entry = Counted { start, amount: 0 };
            }
            entry.amount = entry.amount.saturating_add(c.amount);
        }
        Verdict::Reserved(starts)
    }

    /// What the counter numbered `slot` holds: its window's start and amount.
    #[cfg(test)]
    fn amount(&self, slot: usize) -> Option<(u64, u64)> {
        let counters = self.counters.lock().unwrap();
        counters
            .get(slot)
            .copied()
            .flatten()
            .map(|c| (c.start, c.amount))
    }

    fn apply(&self, adjusts: &[Adjust]) {
        let mut counters = self.counters.lock().unwrap_or_else(|p| p.into_inner());
        for a in adjusts {
            if let Some(Some(c)) = counters.get_mut(a.slot)
                && c.start == a.start
            {
                c.amount = c.amount.saturating_add_signed(a.delta);
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
        self.apply(&adjusts);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The counters of these tests: `a`, `b` and `t`, numbered 0, 1 and 2.
    fn slot(counter: &str) -> usize {
        ["a", "b", "t"].iter().position(|c| *c == counter).unwrap()
    }

    fn charge(counter: &str, window_ms: u64, limit: u64, amount: u64) -> Charge {
        Charge {
            counter: Arc::from(counter),
            slot: slot(counter),
            window_ms,
            limit,
            amount,
        }
    }

    #[test]
    fn every_counter_is_charged_or_none() {
        let memory = Memory::default();
        let both = [charge("a", 60_000, 3, 1), charge("b", 1_000, 2, 1)];
        assert_eq!(memory.reserve_at(&both, 0), Verdict::Reserved(vec![0, 0]));
        assert_eq!(memory.reserve_at(&both, 10), Verdict::Reserved(vec![0, 0]));
        // `b` is full until 1000 ms: `a` is not charged either.
        assert_eq!(
            memory.reserve_at(&both, 500),
            Verdict::Refused {
                index: 1,
                reset_ms: 500
            }
        );
        assert_eq!(memory.amount(slot("a")), Some((0, 2)));
        // `b`'s window ended: a new one starts with this charge.
        assert_eq!(
            memory.reserve_at(&both, 1_000),
            Verdict::Reserved(vec![0, 1_000])
        );
        assert_eq!(
            memory.reserve_at(&both, 1_001),
            Verdict::Refused {
                index: 0,
                reset_ms: 58_999
            }
        );
    }

    #[test]
    fn a_settlement_corrects_its_own_window_only() {
        let memory = Memory::default();
        let tokens = [charge("t", 1_000, 100, 80)];
        assert_eq!(memory.reserve_at(&tokens, 0), Verdict::Reserved(vec![0]));
        // 80 reserved, 30 counted.
        memory.apply(&[Adjust {
            counter: Arc::from("t"),
            slot: slot("t"),
            start: 0,
            delta: -50,
        }]);
        assert_eq!(memory.amount(slot("t")), Some((0, 30)));
        // 70 more fit, since the 50 not used were given back.
        let more = [charge("t", 1_000, 100, 70)];
        assert_eq!(memory.reserve_at(&more, 10), Verdict::Reserved(vec![0]));
        assert_eq!(memory.amount(slot("t")), Some((0, 100)));
        // A new window: the old window's correction is not applied to it.
        assert_eq!(
            memory.reserve_at(&tokens, 2_000),
            Verdict::Reserved(vec![2_000])
        );
        memory.apply(&[Adjust {
            counter: Arc::from("t"),
            slot: slot("t"),
            start: 0,
            delta: -80,
        }]);
        assert_eq!(memory.amount(slot("t")), Some((2_000, 80)));
        // A correction never takes a count below 0.
        memory.apply(&[Adjust {
            counter: Arc::from("t"),
            slot: slot("t"),
            start: 2_000,
            delta: -500,
        }]);
        assert_eq!(memory.amount(slot("t")), Some((2_000, 0)));
    }
}
