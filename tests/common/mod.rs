//! Helpers shared by the integration tests.
#![allow(dead_code)]

pub mod streams;

use std::path::PathBuf;

use std::time::Duration;

use choicewise::{ChatCompletion, ChoiceEvent, Completions, Incomplete, live_actors};
use futures::TryStreamExt;

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

/// A completion's `collect()` (which must succeed) and then every choice's events, replayed
/// from the start.
pub async fn observe(completions: Completions) -> (ChatCompletion, Vec<(u32, Vec<ChoiceEvent>)>) {
    let completion = completions.collect().await.expect("well-formed stream");
    let mut events = Vec::new();
    for c in &completion.choices {
        let choice = completions.choice(c.index).await.unwrap();
        events.push((c.index, choice.events().try_collect().await.unwrap()));
    }
    (completion, events)
}

/// Waits (up to 5 s) until `live_actors()` is `target`, and returns it then.
pub async fn actors_reach(target: usize) -> usize {
    for _ in 0..500 {
        if live_actors() == target {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    live_actors()
}
