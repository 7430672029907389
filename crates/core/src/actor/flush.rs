//! The reader's flush and hibernation rules, as plain synchronous values (no runtime, no
//! actor): which choices a flush sends their updates to and with what buffer it refills
//! their slots, and when a quiet upstream's choice actors retire. The reader applies them;
//! the unit tests below check them alone.

use std::time::Duration;

/// A read whose updates come to more than this many bytes of JSON refills the slots it
/// emptied with recycled batches: more such reads are likely to follow (a replayed file, a
/// burst), while a live stream's small reads leave the slots empty, holding no memory while
/// the stream is quiet.
pub(crate) const REFILL_BYTES: usize = 4096;

/// After a read, the reader sends a choice its updates at once if the choice's actor has
/// applied every batch sent to it; a busy actor's updates wait for a later read, until the
/// upstream has nothing more ready or the updates held come to this many bytes of JSON. A
/// live stream's actors are idle when a read comes, so every read is sent at once; while
/// reads come faster than the actors apply them (a replayed file, a burst), they go out in
/// fewer, larger batches: fewer messages and wake-ups per byte.
pub(crate) const FLUSH_BYTES: usize = 64 * 1024;

/// Which choices a flush sends their updates to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flush {
    /// Every choice with updates: the upstream has nothing more ready, the stream ended, or
    /// a cancel or a close is about to be handled.
    All,
    /// Those whose actor has applied every batch sent to it; all once [`FLUSH_BYTES`] are
    /// held.
    Idle,
}

/// One flush's decisions, for the `routed` bytes of updates the splitter holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FlushPolicy {
    hold_busy: bool,
    refill: bool,
}

impl FlushPolicy {
    pub fn new(to: Flush, routed: usize) -> Self {
        FlushPolicy {
            hold_busy: to == Flush::Idle && routed < FLUSH_BYTES,
            refill: routed > REFILL_BYTES,
        }
    }

    /// Whether a choice with updates gets them now (`busy`: its actor has batches to apply,
    /// or it is retiring).
    pub fn sends(&self, busy: bool) -> bool {
        !(self.hold_busy && busy)
    }

    /// Whether an emptied slot gets a recycled batch (else an empty one, holding no memory).
    pub fn refills(&self) -> bool {
        self.refill
    }
}

/// When a quiet upstream's choice actors retire: `after` the last read (never when `None`,
/// or too far in the future to say).
pub(crate) fn retire_at(
    last_read: tokio::time::Instant,
    after: Option<Duration>,
) -> Option<tokio::time::Instant> {
    last_read.checked_add(after?)
}

#[cfg(test)]
mod tests {
    use tokio::time::Instant;

    use super::*;

    #[test]
    fn an_idle_flush_holds_busy_choices_until_enough_is_held() {
        let small = FlushPolicy::new(Flush::Idle, 100);
        assert!(small.sends(false), "an idle actor gets its updates at once");
        assert!(!small.sends(true), "a busy one waits for a later read");
        let large = FlushPolicy::new(Flush::Idle, FLUSH_BYTES);
        assert!(
            large.sends(true),
            "enough held: every choice gets its updates"
        );
        let all = FlushPolicy::new(Flush::All, 1);
        assert!(all.sends(true) && all.sends(false));
    }

    #[test]
    fn only_large_reads_refill_the_slots_they_emptied() {
        assert!(!FlushPolicy::new(Flush::All, REFILL_BYTES).refills());
        assert!(FlushPolicy::new(Flush::All, REFILL_BYTES + 1).refills());
        assert!(FlushPolicy::new(Flush::Idle, 1 << 20).refills());
    }

    #[test]
    fn actors_retire_after_the_quiet_time_or_never() {
        let read = Instant::now();
        let quiet = Duration::from_millis(250);
        assert_eq!(retire_at(read, Some(quiet)), Some(read + quiet));
        assert_eq!(retire_at(read, None), None);
        assert_eq!(retire_at(read, Some(Duration::MAX)), None, "too far: never");
    }
}
