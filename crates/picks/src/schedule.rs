//! The replay's schedule: when each sample of a problem starts and finishes, in ticks of the
//! trace upstream's pace. The upstream follows it as it serves a run; the reference
//! simulates it; so that the order the gateway reads the samples' finishes in, which every
//! pick counts in, is the reference's too.
//!
//! - A sample of `len` tokens started at tick `s` sends its token `t` at tick `s + t + 1`;
//!   it is *due* to finish at `s + len` (an empty sample at `s + 1`).
//! - A problem's samples (in one run) finish **one a tick**: at each tick, the running sample
//!   first by (due tick, sample number) finishes, if it is due and no sample finished at that
//!   tick; the others wait. Two finishes are then a tick apart (and the upstream keeps them
//!   [`FINISH_GAP`](crate::upstream::FINISH_GAP) apart in real time): not a race between two
//!   connections, unless the gateway is kept off the CPU longer than that.
//! - A sample starts at the tick of the problem's latest finish (0 before any): the samples a
//!   pick starts together start at 0, and a window started because a finish decided it starts
//!   at that finish's tick.
//!
//! ```
//! use choicewise_picks::schedule::Schedule;
//! let mut s = Schedule::new();
//! for (k, len) in [(0, 5), (1, 3), (2, 3)] {
//!     s.start(k, len);
//! }
//! // Samples 1 and 2 are both due at 3: 1 finishes at 3, 2 at 4, then 0 at 5.
//! assert_eq!(s.finish_next(), Some((1, 3)));
//! assert_eq!(s.finish_next(), Some((2, 4)));
//! assert_eq!(s.start(3, 1), (4, 5)); // started at the latest finish, due a token later
//! assert_eq!(s.finish_next(), Some((0, 5)));
//! assert_eq!(s.finish_next(), Some((3, 6)));
//! assert_eq!(s.finish_next(), None);
//! ```

use std::collections::BTreeSet;

/// One problem's samples in one run: those running (due tick, sample number) and the tick of
/// the latest finish.
#[derive(Debug, Clone, Default)]
pub struct Schedule {
    running: BTreeSet<(u64, usize)>,
    last: Option<u64>,
}

impl Schedule {
    /// No sample started.
    pub fn new() -> Self {
        Schedule::default()
    }

    /// The tick a sample started now starts at: the latest finish's (0 before any).
    pub fn start_tick(&self) -> u64 {
        self.last.unwrap_or(0)
    }

    /// Starts sample `k` of `len` tokens: its start tick and the tick it is due to finish.
    pub fn start(&mut self, k: usize, len: usize) -> (u64, u64) {
        self.start_waiting(k, len, 0)
    }

    /// Starts sample `k` of `len` tokens whose first token waits `wait` ticks more (a slow
    /// sample): its start tick and the tick it is due to finish.
    pub fn start_waiting(&mut self, k: usize, len: usize, wait: u64) -> (u64, u64) {
        let s = self.start_tick();
        let due = s + wait + len.max(1) as u64;
        self.running.insert((due, k));
        (s, due)
    }

    /// The tick sample `k` (due at `due`) finishes at, when it is its turn: it is the first
    /// running sample; it finishes when due, or the tick after the latest finish.
    pub fn turn(&self, k: usize, due: u64) -> Option<u64> {
        (self.running.first() == Some(&(due, k))).then(|| self.last.map_or(due, |l| due.max(l + 1)))
    }

    /// Sample `k` finished at `tick` (its [`turn`](Self::turn)).
    pub fn finish(&mut self, k: usize, due: u64, tick: u64) {
        self.running.remove(&(due, k));
        self.last = Some(self.last.map_or(tick, |l| l.max(tick)));
    }

    /// Sample `k` stopped before its end (its stream closed): it no longer finishes.
    pub fn stop(&mut self, k: usize, due: u64) {
        self.running.remove(&(due, k));
    }

    /// The next finish of the samples running, (sample, tick), as the upstream serves it:
    /// what the reference simulates.
    pub fn finish_next(&mut self) -> Option<(usize, u64)> {
        let &(due, k) = self.running.first()?;
        let tick = self.turn(k, due)?;
        self.finish(k, due, tick);
        Some((k, tick))
    }
}
