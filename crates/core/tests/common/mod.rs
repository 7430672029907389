//! Helpers shared by the integration tests of the core: the fixtures, observing a
//! completion, waiting for the actors. What other crates' tests share too is in the test kit
//! (`choicewise-test-support`).
#![allow(dead_code)]

pub mod streams;

use std::path::PathBuf;

use std::time::Duration;

use choicewise_core::diagnostics::live_actors;
use choicewise_core::{ChatCompletion, ChoiceEvent, Completions, Incomplete, Source};
use choicewise_test_support::upstream;
/// The read splits and the cutting are the kit's, shared with the other crates' tests (not
/// every test binary uses both).
#[allow(unused_imports)]
pub use choicewise_test_support::{SPLITS, split};
use futures::TryStreamExt;

pub fn fixture_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures")
        .join(name)
}

pub fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(fixture_path(name)).unwrap_or_else(|e| panic!("fixture {name}: {e}"))
}

/// Feeds the reads through `Source::sse` and collects.
pub async fn collect_reads(
    reads: Vec<Vec<u8>>,
) -> Result<ChatCompletion, Incomplete<ChatCompletion>> {
    Completions::new(Source::sse(upstream(reads)))
        .collect()
        .await
}

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

/// Sends choice 0 an update (`"<slow>a"`) its actor spends 50 ms on, then, 10 ms later while
/// the actor still works, the `later` reads and `[DONE]`; returns choice 0's collected
/// content with the slow marker removed. The order of the letters tells whether the later
/// updates waited for the slow one.
pub async fn content_after_a_slow_update(
    completions: Completions,
    tx: futures::channel::mpsc::UnboundedSender<Result<Vec<u8>, std::io::Error>>,
    later: Vec<Vec<u8>>,
) -> String {
    let slow = choicewise_test_support::fault::SLOW_CHOICE;
    let first = choicewise_test_support::content_chunk(0, &format!("{slow}a"), None);
    tx.unbounded_send(Ok(first.into_bytes())).unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    for read in later {
        tx.unbounded_send(Ok(read)).unwrap();
    }
    tx.unbounded_send(Ok(choicewise_test_support::DONE.as_bytes().to_vec()))
        .unwrap();
    let completion =
        choicewise_test_support::within(Duration::from_secs(20), "collect", completions.collect())
            .await
            .unwrap();
    let content = completion.choices[0]
        .message
        .content
        .clone()
        .unwrap_or_default();
    content.replace(slow, "")
}

/// A selection's choices as a set, ascending: a vote selects its winning key's voters in the
/// order they finished, which a test whose voters finish at once does not fix.
#[allow(dead_code)]
pub fn ascending(selected: &[u32]) -> Vec<u32> {
    let mut set = selected.to_vec();
    set.sort_unstable();
    set
}
