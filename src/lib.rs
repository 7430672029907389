//! # choicewise
//!
//! Per-choice streams for streamed chat completions with several choices (`n > 1`).
//!
//! The updates of all choices arrive flattened into one server-sent-event stream, interleaved
//! and out of order, with tool-call fragments to merge by their own index. choicewise reads
//! that stream with a reader actor, routes each update to an actor per choice, and hands you
//! one [`Choice`] per choice: its text, its function calls as they grow, and its assembled
//! message, each readable independently and concurrently, without tracking indexes.
//!
//! ```
//! use choicewise::Completions;
//! use futures::{StreamExt, TryStreamExt};
//!
//! # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let sse = concat!(
//!     "data: {\"choices\":[{\"index\":1,\"delta\":{\"content\":\"Salut\"}}]}\n\n",
//!     "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hello\"},\"finish_reason\":\"stop\"}]}\n\n",
//!     "data: {\"choices\":[{\"index\":1,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n",
//!     "data: [DONE]\n\n",
//! );
//! let completions = Completions::from_reader(sse.as_bytes());
//! let mut choices = completions.choices();
//! while let Some(choice) = choices.next().await {
//!     let text: Vec<_> = choice.content().try_collect().await?;
//!     println!("choice {}: {}", choice.index(), text.concat());
//! }
//! let completion = completions.collect().await?;
//! assert_eq!(completion.choices.len(), 2);
//! # Ok(()) }
//! ```
//!
//! This crate re-exports [`choicewise_core`]; see `docs/` in the repository for the
//! architecture, the benchmarks and the reliability guarantees.
#![deny(missing_docs)]

pub use choicewise_core::*;

/// The HTTP client (feature `client`): POST a chat request with `stream: true` to an
/// OpenAI-compatible endpoint and get [`Completions`] back.
#[cfg(feature = "client")]
pub use choicewise_client as client;
