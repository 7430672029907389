//! # choicewise-core
//!
//! A streamed chat completion with `n > 1` arrives as one flat stream of
//! `chat.completion.chunk` objects: the choices' updates interleaved, a choice first appearing
//! after a higher index, several choices in one chunk, tool-call fragments to merge by their
//! own index. This crate turns that stream into one handle per choice, on actors: a reader
//! per stream, supervising one actor per choice (the protocol itself, without a runtime, is
//! `choicewise-proto`).
//!
//! - [`Completions`] reads a [`Source`]: raw SSE bytes, an `AsyncRead`, parsed chunks or
//!   events, or a source still to be opened; [`CompletionsBuilder::fan_out`] reads several as
//!   one completion.
//! - [`Completions::choices`] yields a [`Choice`] per choice as it appears; each choice has
//!   sub-streams ([`Choice::content`], [`Choice::function_calls`], [`Choice::events`], ...)
//!   that replay from the start at any time, and [`Choice::message`], the assembled message.
//! - [`Completions::collect`] gives the whole completion in the shape of a non-streaming
//!   response; [`Completions::first_finished`], [`vote`](Completions::vote) and the other
//!   combinators pick choices while they stream and cancel the rest.
//!
//! ```
//! use choicewise_core::{Completions, Source};
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
//! let completions = Completions::new(Source::reader(sse.as_bytes()));
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
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod actor;
mod arguments;
mod builder;
mod choice;
mod completion;
mod completions;
mod config;
#[cfg(feature = "diagnostics")]
mod diagnostics;
mod lifetime;
mod log;
mod msg;
mod plan;
mod policy;
mod samples;
mod select;
mod source;
mod stream;
mod waiters;

pub use arguments::{ArgumentsSnapshot, FunctionCalls, PartialArguments};
pub use builder::CompletionsBuilder;
pub use choice::Choice;
#[cfg(feature = "estimate")]
pub use choicewise_proto::EncodingName;
pub use choicewise_proto::{
    ArgumentsError, CallKind, CallRef, ChatCompletion, ChoiceEvent, ChoiceOutput, ChoiceSource,
    ChoiceUsage, Confidence, DEFAULT_ANTHROPIC_MAX_TOKENS, DEFAULT_MAX_CHOICES,
    DEFAULT_MAX_EVENT_SIZE, DEFAULT_MAX_TOOL_CALLS, Demux, Dialect, Error, ErrorDetail, ErrorKind,
    Estimate, Flow, FunctionCall, FunctionCallEvent, Incomplete, Message, Parsed, PartialJsonError,
    SampleConfidence, Snapshot, SseError, StreamConfig, Text, TokenLogprob, ToolCall, TopLogprob,
    UpstreamError, Usage, UsageSource, Warning, WarningKind, WeightedVote, quantile,
    token_confidence,
};
pub use choicewise_proto::{chunks, wire};
pub use completions::{Choices, Completions};
pub use config::DEFAULT_HIBERNATE_AFTER;
#[cfg(feature = "diagnostics")]
#[doc(hidden)]
pub use diagnostics::{actors_started, live_actors};
pub use plan::{Opening, Plan, PlanUpstream, PlannedRequest};
pub use policy::{
    DEFAULT_MIN_VOTES, HEDGE_AFTER_FLOOR, PickRule, Policy, PolicyBuilder, PolicyError,
    PolicyErrorKind, PolicyLimits,
};
pub use select::confidence::{ConfidenceApplied, ConfidenceReport};
pub use select::{
    Pick, Selection, Tally, VOTE_PATTERN_MAX_BYTES, VOTE_PATTERN_MAX_DEPTH,
    VOTE_PATTERN_MAX_FOLDED_CLASSES, VOTE_PATTERN_SIZE_LIMIT, VoteKey, VoteKeyError,
};
pub use source::Source;
pub use stream::EventStream;

#[cfg(feature = "fault-injection")]
#[doc(hidden)]
pub mod fault;
