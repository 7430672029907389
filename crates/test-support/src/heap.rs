//! The heap as a test or a benchmark measures it: a counting global allocator, and the
//! resident set of the process.

use std::alloc::{GlobalAlloc, Layout, System};
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};

/// A global allocator that forwards every call to the system allocator and counts the live
/// heap bytes and their peak.
///
/// [`new`](Self::new) counts from the first allocation (the figures are absolute);
/// [`paused`](Self::paused) counts nothing until [`start`](Self::start), every call costing
/// one relaxed load until then (for a benchmark whose other figures must not pay for the
/// counting).
///
/// ```
/// use choicewise_test_support::CountingAlloc;
///
/// #[global_allocator]
/// static HEAP: CountingAlloc = CountingAlloc::new();
///
/// # fn main() {
/// let before = HEAP.live();
/// let v = vec![0u8; 1 << 20];
/// assert!(HEAP.live() - before >= 1 << 20);
/// drop(v);
/// assert!(HEAP.peak() - before >= 1 << 20);
/// # }
/// ```
#[derive(Debug)]
pub struct CountingAlloc {
    on: AtomicBool,
    live: AtomicI64,
    peak: AtomicI64,
}

impl CountingAlloc {
    /// An allocator counting from the first allocation.
    pub const fn new() -> Self {
        CountingAlloc::counting(true)
    }

    /// An allocator that counts nothing until [`start`](Self::start).
    ///
    /// ```
    /// use choicewise_test_support::CountingAlloc;
    /// let heap = CountingAlloc::paused();
    /// assert_eq!(heap.live(), 0);
    /// heap.start();
    /// ```
    pub const fn paused() -> Self {
        CountingAlloc::counting(false)
    }

    const fn counting(on: bool) -> Self {
        CountingAlloc {
            on: AtomicBool::new(on),
            live: AtomicI64::new(0),
            peak: AtomicI64::new(0),
        }
    }

    /// Starts counting (a [`paused`](Self::paused) allocator). Memory allocated before and
    /// freed after shows as negative growth, so figures are differences between two readings
    /// taken while counting.
    pub fn start(&self) {
        self.on.store(true, Ordering::SeqCst);
    }

    /// Live heap bytes: allocated while counting, less those freed while counting.
    pub fn live(&self) -> i64 {
        self.live.load(Ordering::Relaxed)
    }

    /// The highest [`live`](Self::live) reached since the last [`reset_peak`](Self::reset_peak).
    pub fn peak(&self) -> i64 {
        self.peak.load(Ordering::Relaxed)
    }

    /// Sets the peak to the live heap now, and returns it.
    pub fn reset_peak(&self) -> i64 {
        let now = self.live();
        self.peak.store(now, Ordering::Relaxed);
        now
    }

    /// Runs `f` and returns its output with the highest live heap reached meanwhile, above the
    /// live heap at its start (counting must be on). Measures one thing at a time: the peak is
    /// the allocator's, shared by every thread.
    pub async fn peak_during<T>(&self, f: impl Future<Output = T>) -> (T, i64) {
        let start = self.reset_peak();
        let out = f.await;
        (out, self.peak() - start)
    }

    fn add(&self, bytes: usize) {
        if self.on.load(Ordering::Relaxed) {
            let live = self.live.fetch_add(bytes as i64, Ordering::Relaxed) + bytes as i64;
            self.peak.fetch_max(live, Ordering::Relaxed);
        }
    }

    fn sub(&self, bytes: usize) {
        if self.on.load(Ordering::Relaxed) {
            self.live.fetch_sub(bytes as i64, Ordering::Relaxed);
        }
    }
}

impl Default for CountingAlloc {
    fn default() -> Self {
        CountingAlloc::new()
    }
}

// SAFETY: every call is forwarded to the system allocator unchanged.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            self.add(layout.size());
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        self.sub(layout.size());
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            self.add(layout.size());
        }
        p
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            self.sub(layout.size());
            self.add(new_size);
        }
        p
    }
}

/// Resident set size of this process, bytes (Linux `/proc/self/statm`; 0 elsewhere).
///
/// ```
/// # if cfg!(target_os = "linux") {
/// assert!(choicewise_test_support::rss_bytes() > 0);
/// # }
/// ```
pub fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}
