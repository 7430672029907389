//! The process's allocator, and how a long-running `serve` gives back what a load left.
//!
//! mimalloc by default keeps freed pages for a second before returning them to the system,
//! and returns the pages a thread owns only when that thread allocates or frees again. A
//! gateway's worker threads go quiet when its load ends, so the memory of the peak could stay
//! with them. For `serve`, freed pages are returned at once, and each worker thread collects
//! its heap when it parks, at most once a second (docs/benchmarks.md, Gateway, measures what
//! this gives back).

use std::cell::Cell;
use std::time::{Duration, Instant};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// `mi_option_purge_delay` in mimalloc.h: the milliseconds before freed memory is returned.
/// (The enum keeps its retired options in place, so its values do not move between versions.)
const PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// How often a worker thread collects its heap at most.
const COLLECT_EVERY: Duration = Duration::from_secs(1);

/// No transparent huge pages for the process's memory from here on. mimalloc commits its
/// arenas at once where the system overcommits; the kernel then backs them with huge pages,
/// and every touched 2 MiB counts as resident: a replay's peak and the gateway's memory were
/// about twice what the process used (docs/benchmarks.md has the figures). mimalloc has an
/// option for it, read only before its first allocation, which comes before `main`.
pub fn no_transparent_huge_pages() {
    #[cfg(target_os = "linux")]
    // SAFETY: `prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0)` takes integers and touches no memory of
    // ours; it fails harmlessly on a kernel without transparent huge pages.
    unsafe {
        libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0);
    }
}

/// Freed pages go back to the system at once; for processes that live long and whose load
/// comes and goes.
pub fn return_freed_memory_at_once() {
    // SAFETY: sets one of mimalloc's options, which it reads atomically; any value is valid.
    unsafe { libmimalloc_sys::mi_option_set(PURGE_DELAY, 0) };
}

/// For `tokio::runtime::Builder::on_thread_park`: a worker thread going idle returns the pages
/// it holds that are free, unless it did so less than [`COLLECT_EVERY`] ago.
pub fn collect_when_idle() {
    thread_local! {
        static LAST: Cell<Option<Instant>> = const { Cell::new(None) };
    }
    let now = Instant::now();
    LAST.with(|last| {
        if last
            .get()
            .is_none_or(|t| now.duration_since(t) >= COLLECT_EVERY)
        {
            last.set(Some(now));
            // SAFETY: collects the calling thread's own heap; no pointer is passed.
            unsafe { libmimalloc_sys::mi_collect(true) };
        }
    });
}
