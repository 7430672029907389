//! Live heap bytes, counted by the global allocator (the kit's [`CountingAlloc`]) while
//! [`counting`] is on (the scale figures); otherwise every call goes straight to the system
//! allocator after one relaxed load.
//!
//! The allocator is installed in every build, so that every benchmark runs on the same one;
//! only the scale figures (feature `diagnostics`) read it.
#![cfg_attr(not(feature = "diagnostics"), allow(dead_code))]

use choicewise_test_support::CountingAlloc;

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc::paused();

/// Starts counting. Memory allocated before and freed after shows as negative growth, so
/// figures are differences between two readings taken while counting.
pub fn counting() {
    GLOBAL.start();
}

/// Live heap bytes allocated since counting started, less those freed.
pub fn live() -> i64 {
    GLOBAL.live()
}

/// Runs `f` and returns its output with the highest live heap reached meanwhile, above the
/// live heap at its start (counting must be on).
pub async fn peak_during<T>(f: impl std::future::Future<Output = T>) -> (T, i64) {
    GLOBAL.peak_during(f).await
}
