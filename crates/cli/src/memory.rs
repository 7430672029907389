//! How a long-running `serve` gives back what a load left, under mimalloc (the binary's
//! allocator, set in `src/main.rs`).
//!
//! mimalloc by default keeps freed pages for a second before returning them to the system,
//! and returns the pages a thread owns only when that thread allocates or frees again. A
//! gateway's worker threads go quiet when its load ends, so the memory of the peak could stay
//! with them. For `serve`, freed pages are returned after [`PURGE_DELAY_MS`], and each worker
//! thread collects its heap when it parks (which returns what it freed at once), once a second
//! while a load goes on and at once when it ends (docs/benchmarks.md, Gateway, measures what
//! this gives back).

use std::cell::Cell;
use std::time::{Duration, Instant};

/// `mi_option_purge_delay` in mimalloc.h: the milliseconds before freed memory is returned.
/// (The enum keeps its retired options in place, so its values do not move between versions.)
const PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// How long freed pages are kept before they go back to the system. Returned at once (0),
/// the pages that a steady load frees and takes again are faulted in anew on every request
/// (docs/benchmarks.md, "The request path's fixed cost beside a byte relay", measures it).
const PURGE_DELAY_MS: std::ffi::c_long = 100;

/// How often a worker thread collects its heap at most.
const COLLECT_EVERY: Duration = Duration::from_secs(1);

/// Freed pages go back to the system soon ([`PURGE_DELAY_MS`]); for processes that live long
/// and whose load comes and goes.
pub fn return_freed_memory_soon() {
    // SAFETY: sets one of mimalloc's options, which it reads atomically; any value is valid.
    unsafe { libmimalloc_sys::mi_option_set(PURGE_DELAY, PURGE_DELAY_MS) };
}

/// For `tokio::runtime::Builder::on_thread_park`: a worker thread going idle returns the pages
/// it holds that are free, if it last did so [`COLLECT_EVERY`] ago, or if the runtime's
/// tasks have fallen below half of what they were then: a load has ended, and what its
/// connections freed would otherwise stay with a thread that now sleeps until the next
/// request. (Each such collection halves the count it waits for, so they stay few.)
pub fn collect_when_idle() {
    thread_local! {
        /// When this thread last collected, and the runtime's tasks then.
        static LAST: Cell<Option<(Instant, usize)>> = const { Cell::new(None) };
        /// The runtime of this worker thread, taken at its first park: a park reads its task
        /// count (one atomic load) without cloning the handle each time.
        static RUNTIME: Option<tokio::runtime::Handle> = tokio::runtime::Handle::try_current().ok();
    }
    let now = Instant::now();
    let tasks = RUNTIME.with(|rt| rt.as_ref().map_or(0, |h| h.metrics().num_alive_tasks()));
    LAST.with(|last| {
        if collection_due(last.get(), now, tasks) {
            last.set(Some((now, tasks)));
            // SAFETY: collects the calling thread's own heap; no pointer is passed.
            unsafe { libmimalloc_sys::mi_collect(true) };
        }
    });
}

/// Whether a thread that last collected at `last` (when, and the runtime's tasks then)
/// collects now, with `tasks` alive.
fn collection_due(last: Option<(Instant, usize)>, now: Instant, tasks: usize) -> bool {
    last.is_none_or(|(at, then)| {
        now.duration_since(at) >= COLLECT_EVERY || tasks.saturating_mul(2) < then
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_collects_first_then_once_a_second_or_when_the_tasks_halve() {
        let t0 = Instant::now();
        let soon = t0 + Duration::from_millis(10);
        assert!(collection_due(None, t0, 0));
        // A steady load: once a second.
        assert!(!collection_due(Some((t0, 1000)), soon, 990));
        assert!(!collection_due(Some((t0, 1000)), soon, 1500));
        assert!(collection_due(Some((t0, 1000)), t0 + COLLECT_EVERY, 1000));
        // A load ending: at once.
        assert!(!collection_due(Some((t0, 1000)), soon, 500));
        assert!(collection_due(Some((t0, 1000)), soon, 499));
        // Idle: no collection on every park.
        assert!(!collection_due(Some((t0, 0)), soon, 0));
        assert!(!collection_due(Some((t0, 1)), soon, 1));
    }
}
