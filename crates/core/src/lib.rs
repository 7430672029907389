//! # choicewise-core
//!
//! A streamed chat completion with `n > 1` arrives as one flat stream of
//! `chat.completion.chunk` objects: the choices' updates interleaved, a choice first appearing
//! after a higher index, several choices in one chunk, tool-call fragments to merge by their
//! own index. This crate turns that stream into one handle per choice.
//!
//! - [`Completions`] takes the input: raw SSE bytes ([`Completions::from_sse`],
//!   [`Completions::from_reader`]) or parsed chunks ([`Completions::from_chunks`]).
//! - [`Completions::choices`] yields a [`Choice`] per choice as it appears; each choice has
//!   sub-streams ([`Choice::content`], [`Choice::function_calls`], [`Choice::events`], ...)
//!   that replay from the start at any time, and [`Choice::message`], the assembled message.
//! - [`Completions::collect`] gives the whole completion in the shape of a non-streaming
//!   response.
//!
//! Inside, a reader actor frames and parses the input and routes each update to a per-choice
//! actor, spawned when its index first appears (see the `actor` module's documentation and
//! `docs/architecture.md`).
//!
//! ```
//! use choicewise_core::Completions;
//! use futures::{StreamExt, TryStreamExt};
//!
//! # #[tokio::main] async fn main() {
//! let sse = concat!(
//!     "data: {\"choices\":[{\"index\":1,\"delta\":{\"role\":\"assistant\",\"content\":\"Bonjour\"}}]}\n\n",
//!     "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Hello\"}}]}\n\n",
//!     "data: {\"choices\":[{\"index\":1,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n",
//!     "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n",
//!     "data: [DONE]\n\n",
//! );
//! let completions = Completions::from_reader(sse.as_bytes());
//! let mut choices = completions.choices();
//! let mut tasks = Vec::new();
//! while let Some(choice) = choices.next().await {
//!     tasks.push(tokio::spawn(async move {
//!         let text: Vec<_> = choice.content().try_collect().await?;
//!         Ok::<_, choicewise_core::Error>(format!("{}: {}", choice.index(), text.concat()))
//!     }));
//! }
//! for task in tasks {
//!     println!("{}", task.await.unwrap().unwrap());
//! }
//! let whole = completions.collect().await.unwrap();
//! assert_eq!(whole.choices[0].message.content.as_deref(), Some("Hello"));
//! # }
//! ```
#![deny(missing_docs)]

mod actor;
mod arguments;
mod choice;
mod completions;
mod config;
mod decode;
mod demux;
mod dialect;
mod error;
mod estimate;
mod event;
mod event_log;
mod fan_out;
mod feed;
mod lifecycle;
mod merge;
mod response;
mod scan;
mod select;
mod shared;
mod split;
mod stream;
mod usage;
mod waiters;
pub mod wire;

pub use arguments::{ArgumentsSnapshot, FunctionCalls, PartialArguments};
pub use choice::Choice;
/// The incremental partial-JSON parser behind [`FunctionCalls::partial`] (crate
/// `choicewise-partial-json`).
pub use choicewise_partial_json::{PartialJsonError, Snapshot};
pub use choicewise_sse::SseError;
pub use choicewise_usage::EncodingName;
pub use completions::{Choices, Completions, CompletionsBuilder};
// Diagnostics for leak and lifecycle tests, not part of the documented API (docs/api.md).
#[doc(hidden)]
pub use completions::{actors_started, live_actors};
pub use config::{
    DEFAULT_HIBERNATE_AFTER, DEFAULT_MAX_CHOICES, DEFAULT_MAX_EVENT_SIZE, DEFAULT_MAX_TOOL_CALLS,
};
pub use demux::{Demux, Flow};
pub use error::{Error, ErrorDetail, ErrorKind, Incomplete, UpstreamError};
pub use event::{
    ArgumentsError, CallKind, CallRef, ChoiceEvent, FunctionCallEvent, Text, Warning, WarningKind,
};
pub use fan_out::FanOut;
pub use select::{Pick, Selection, Tally};
pub use stream::EventStream;
pub use wire::Dialect;
/// Test-only fault triggers (feature `fault-injection`).
#[cfg(feature = "fault-injection")]
#[doc(hidden)]
pub mod fault {
    /// A content delta with exactly this text panics inside its choice's actor.
    pub const FAULT_PANIC_CHOICE: &str = "\u{1}choicewise:panic-choice";
    /// A content delta starting with this text makes its choice's actor block its thread for
    /// 50 ms before applying the batch (which then merges as usual): a slow actor.
    pub const FAULT_SLOW_CHOICE: &str = "\u{1}choicewise:slow-choice";
    /// An SSE event with exactly this data panics inside the reader.
    pub const FAULT_PANIC_READER: &str = "\u{1}choicewise:panic-reader";
}
pub use response::{ChatCompletion, ChoiceOutput, ChoiceSource, FunctionCall, Message, ToolCall};
pub use usage::{ChoiceUsage, Estimate, Usage, UsageSource};
