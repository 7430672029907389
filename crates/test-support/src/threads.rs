//! How many tests of one binary run at once, for binaries whose tests mostly wait.

/// The factor over the machine's cores: tests that wait on processes and sockets (with real
/// delays) leave the cores half idle at one test a core, libtest's default.
pub const WAITING_TESTS_PER_CORE: usize = 2;

/// Sets `RUST_TEST_THREADS` to [`WAITING_TESTS_PER_CORE`] times the machine's cores, unless
/// it is set already; `--test-threads` still has the last word. Called by
/// [`waiting_tests!`](crate::waiting_tests) before the test binary's `main`, while it has one
/// thread; of no use after libtest has read it.
///
/// ```standalone_crate
/// // A test binary's own call, in effect (here in `main`, of a process of its own that has
/// // one thread: it sets the variable and nothing reads it again).
/// use choicewise_test_support::threads::{WAITING_TESTS_PER_CORE, set_for_waiting_tests};
///
/// // SAFETY: this doctest's process has one thread.
/// unsafe { std::env::remove_var("RUST_TEST_THREADS") };
/// set_for_waiting_tests();
/// let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
/// let set = std::env::var("RUST_TEST_THREADS").unwrap();
/// assert_eq!(set, (cores * WAITING_TESTS_PER_CORE).to_string());
/// // Set already: left as it is.
/// unsafe { std::env::set_var("RUST_TEST_THREADS", "1") };
/// set_for_waiting_tests();
/// assert_eq!(std::env::var("RUST_TEST_THREADS").unwrap(), "1");
/// ```
pub fn set_for_waiting_tests() {
    if std::env::var_os("RUST_TEST_THREADS").is_some() {
        return;
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    // SAFETY: before `main` (or in a `main` of one thread, the doctest above), the process
    // has one thread, so nothing reads the environment while it is written.
    unsafe {
        std::env::set_var(
            "RUST_TEST_THREADS",
            (cores * WAITING_TESTS_PER_CORE).to_string(),
        )
    };
}

/// In a test binary whose tests mostly wait (on processes, sockets, real delays), runs
/// [`WAITING_TESTS_PER_CORE`] of them a core at once rather than libtest's one: a function in
/// the binary's `.init_array`, which the loader runs before `main`, sets `RUST_TEST_THREADS`
/// (unless it is set). On Linux; elsewhere it does nothing.
///
/// ```
/// choicewise_test_support::waiting_tests!();
/// # fn main() {}
/// ```
#[macro_export]
macro_rules! waiting_tests {
    () => {
        #[cfg(target_os = "linux")]
        #[used]
        #[unsafe(link_section = ".init_array")]
        static CHOICEWISE_WAITING_TESTS: extern "C" fn() = {
            extern "C" fn set() {
                $crate::threads::set_for_waiting_tests();
            }
            set
        };
    };
}
