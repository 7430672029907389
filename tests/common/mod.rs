//! Helpers shared by the integration tests.
#![allow(dead_code)]

pub mod streams;

use std::path::PathBuf;

use choicewise::{ChatCompletion, Completions, Incomplete};

pub fn fixture_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

pub fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(fixture_path(name)).unwrap_or_else(|e| panic!("fixture {name}: {e}"))
}

/// Cuts `bytes` into reads of the given sizes, cycling through them.
pub fn split(bytes: &[u8], sizes: &[usize]) -> Vec<Vec<u8>> {
    let mut reads = Vec::new();
    let mut at = 0;
    let mut i = 0;
    while at < bytes.len() {
        let n = sizes[i % sizes.len()].max(1).min(bytes.len() - at);
        reads.push(bytes[at..at + n].to_vec());
        at += n;
        i += 1;
    }
    reads
}

/// Feeds the reads through `Completions::from_sse` and collects.
pub async fn collect_reads(
    reads: Vec<Vec<u8>>,
) -> Result<ChatCompletion, Incomplete<ChatCompletion>> {
    let stream = futures::stream::iter(reads.into_iter().map(Ok::<_, std::io::Error>));
    Completions::from_sse(stream).collect().await
}

/// The read splits every fixture is also run under: whole, single bytes, and sizes that are
/// prime (so they cut lines, CRLFs and multi-byte characters at every phase).
pub const SPLITS: &[&[usize]] = &[&[usize::MAX], &[1], &[2, 3, 5], &[7, 64, 13], &[4096]];
