//! A time bound on what a test awaits.

use std::future::{Future, IntoFuture};
use std::panic::Location;
use std::time::Duration;

/// Awaits `f` for at most `limit`: its output, or a panic naming `what` did not end, the limit
/// and where the bound was set. So that a test that would hang fails instead, saying what it
/// waited for.
///
/// The clock starts when `within` is called (inside a Tokio runtime, with its time driver).
///
/// ```
/// use std::time::Duration;
/// use choicewise_test_support::within;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let n = within(Duration::from_secs(5), "the answer", async { 42 }).await;
/// assert_eq!(n, 42);
/// # }
/// ```
///
/// ```should_panic
/// # use std::time::Duration;
/// # use choicewise_test_support::within;
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// // Panics: "the stalled stream: no result within 10ms (at src/main.rs:...)".
/// within(Duration::from_millis(10), "the stalled stream", std::future::pending::<()>()).await;
/// # }
/// ```
#[track_caller]
pub fn within<F: IntoFuture>(limit: Duration, what: &str, f: F) -> impl Future<Output = F::Output> {
    let at = Location::caller();
    let bounded = tokio::time::timeout(limit, f);
    async move {
        bounded
            .await
            .unwrap_or_else(|_| panic!("{what}: no result within {limit:?} (at {at})"))
    }
}
