//! Live heap bytes, counted by the global allocator while [`counting`] is on (the scale
//! figures); otherwise every call goes straight to the system allocator after one relaxed load.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};

static ON: AtomicBool = AtomicBool::new(false);
static LIVE: AtomicI64 = AtomicI64::new(0);
static PEAK: AtomicI64 = AtomicI64::new(0);

struct Counting;

fn add(bytes: usize) {
    if ON.load(Ordering::Relaxed) {
        let live = LIVE.fetch_add(bytes as i64, Ordering::Relaxed) + bytes as i64;
        PEAK.fetch_max(live, Ordering::Relaxed);
    }
}

fn sub(bytes: usize) {
    if ON.load(Ordering::Relaxed) {
        LIVE.fetch_sub(bytes as i64, Ordering::Relaxed);
    }
}

// SAFETY: every call is forwarded to the system allocator unchanged.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            add(layout.size());
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        sub(layout.size());
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            add(layout.size());
        }
        p
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            sub(layout.size());
            add(new_size);
        }
        p
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Starts counting. Memory allocated before and freed after shows as negative growth, so
/// figures are differences between two readings taken while counting.
pub fn counting() {
    ON.store(true, Ordering::SeqCst);
}

/// Live heap bytes allocated since counting started, less those freed.
pub fn live() -> i64 {
    LIVE.load(Ordering::Relaxed)
}

/// Runs `f` and returns its output with the highest live heap reached meanwhile, above the
/// live heap at its start (counting must be on).
pub async fn peak_during<T>(f: impl std::future::Future<Output = T>) -> (T, i64) {
    let start = live();
    PEAK.store(start, Ordering::Relaxed);
    let out = f.await;
    (out, PEAK.load(Ordering::Relaxed) - start)
}
