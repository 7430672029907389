//! # choicewise-test-support
//!
//! What the tests of the workspace (and the benchmark harness) share, so that each test file
//! does not write it again:
//!
//! - [`CountingAlloc`], a global allocator that counts the live heap and its peak, and
//!   [`rss_bytes`], the resident set of the process;
//! - [`waiting_tests!`], more tests of a binary at once where they mostly wait;
//! - [`within`], a time bound on a future that fails the test naming what did not end;
//! - [`refusing`], an upstream that refuses connections, its port held;
//! - servers of a test's own: [`RedisServer`], [`PostgresServer`], [`ChromeDriver`] (a
//!   browser to drive);
//! - builders of upstream streams: [`split`] and [`SPLITS`] (the read splits a stream is
//!   replayed under), [`upstream`] (reads as a byte stream), [`sse_chunk`], [`sse_stream`],
//!   [`content_chunk`] and [`DONE`] (SSE events);
//! - [`is_prefix_consistent`], the relation between a partial JSON snapshot and the complete
//!   value, and [`json_workload`], the documents and fragments the partial-JSON benchmarks
//!   parse;
//! - with the feature `invariants`, the module `invariants`: what the fuzz targets check, replayed by
//!   the core's tests.
//!
//! Never published (`publish = false`): the crates that test with it name it as a path-only
//! dev-dependency, which `cargo package` leaves out.
//!
//! ```
//! use choicewise_test_support::CountingAlloc;
//!
//! #[global_allocator]
//! static HEAP: CountingAlloc = CountingAlloc::new();
//!
//! # fn main() {
//! let before = HEAP.live();
//! let reads: Vec<Vec<u8>> = (0..16).map(|_| vec![0; 1024]).collect();
//! assert!(HEAP.live() - before >= 16 * 1024);
//! # drop(reads);
//! # }
//! ```
#![deny(missing_docs)]

mod bedrock;
mod chromium;
#[cfg(feature = "fault-injection")]
pub mod fault;
mod heap;
#[cfg(feature = "invariants")]
#[allow(missing_docs)]
pub mod invariants;
#[allow(missing_docs)]
pub mod json_workload;
mod net;
mod postgres;
mod prefix;
mod redis;
mod sse;
pub mod threads;
mod time;

pub use bedrock::{BEDROCK_ACCESS_KEY, BEDROCK_SECRET, BedrockUpstream};
pub use chromium::ChromeDriver;
pub use heap::{CountingAlloc, rss_bytes};
pub use net::refusing;
pub use postgres::PostgresServer;
pub use prefix::is_prefix_consistent;
pub use redis::RedisServer;
pub use sse::{DONE, SPLITS, content_chunk, split, sse_chunk, sse_stream, upstream};
pub use time::within;
