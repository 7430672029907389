//! # choicewise-proto
//!
//! The protocol of streamed chat completions with several choices (`n > 1`), as plain
//! synchronous code without a runtime: what a stream of `chat.completion.chunk` events (or of
//! the Responses and Anthropic Messages dialects) means, choice by choice.
//!
//! - The **reader's share**: framing (with `choicewise-sse`), the chunk envelope (id, model,
//!   usage, errors), and splitting each chunk's `choices` into every choice's raw update.
//! - Each **choice's share**: parsing its updates and merging them (text, reasoning, refusal,
//!   tool calls by their own index, every provider quirk) into its events and its message,
//!   through one lifecycle per choice.
//! - The value types a program holds: [`ChoiceEvent`], [`ChoiceOutput`], [`ChatCompletion`],
//!   [`Usage`], and one opaque [`Error`] that says what went wrong and where.
//!
//! [`Demux`] runs both shares one after the other on the caller's thread. `choicewise-core`
//! runs the same code on actors (a reader per stream, an actor per choice), with per-choice
//! async streams; most programs use it through the `choicewise` crate.
//!
//! ```
//! use choicewise_proto::{ChoiceEvent, Demux};
//!
//! let sse = concat!(
//!     "data: {\"choices\":[{\"index\":1,\"delta\":{\"content\":\"Bonjour\"}}]}\n\n",
//!     "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hello\"},\"finish_reason\":\"stop\"}]}\n\n",
//!     "data: {\"choices\":[{\"index\":1,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n",
//!     "data: [DONE]\n\n",
//! );
//! let mut demux = Demux::new();
//! demux.feed(sse.as_bytes()).unwrap();
//! assert_eq!(demux.events(1)[0], ChoiceEvent::Content("Bonjour".into()));
//! let whole = demux.finish().unwrap();
//! assert_eq!(whole.choices[0].message.content.as_deref(), Some("Hello"));
//! ```
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod api;
mod ballot;
mod canonical;
pub mod chunks;
mod confidence;
mod config;
mod decode;
mod demux;
mod dialect;
mod error;
#[cfg(feature = "estimate")]
mod estimate;
mod event;
mod event_log;
mod lifecycle;
mod logprobs;
mod merge;
mod relay;
mod response;
mod router;
mod scan;
mod split;
mod tree;
pub mod upstream;
mod usage;
pub mod wire;

pub use api::{
    DEFAULT_ANTHROPIC_MAX_TOKENS, Dialect, MessagesError, MessagesText, RequestError,
    THOUGHT_SIGNATURE_IN_ID,
};
pub use ballot::{Ballot, Standing, Verdict};
pub use canonical::{write_canonical_json, write_json_string};
pub use choicewise_partial_json::{PartialJsonError, Snapshot};
pub use choicewise_sse::SseError;
#[cfg(feature = "estimate")]
pub use choicewise_usage::EncodingName;
pub use confidence::{
    Confidence, MEASURES, Measure, SampleConfidence, TokenLogprob, TopLogprob, UnknownMeasure,
    quantile, token_confidence,
};
pub use config::{
    DEFAULT_MAX_CHOICES, DEFAULT_MAX_EVENT_SIZE, DEFAULT_MAX_TOOL_CALLS, StreamConfig, TokenBound,
    TokenCount,
};
pub use demux::{Demux, Flow};
pub use error::{Error, ErrorDetail, ErrorKind, Incomplete, UpstreamError};
pub use event::{
    ArgumentsError, CallKind, CallRef, ChoiceEvent, FunctionCallEvent, JsonArguments, Text,
    Warning, WarningKind,
};
pub use logprobs::{Logprobs, LogprobsKept};
pub use response::{ChatCompletion, ChoiceOutput, ChoiceSource, FunctionCall, Message, ToolCall};
pub use split::Parsed;
pub use upstream::{Authorisation, Framing, RequestWriting, UpstreamApi};
pub use usage::{ChoiceUsage, Estimate, MAX_REPORTED_TOKENS, Usage, UsageSource};

/// The driver API: what a runtime needs to run this protocol on tasks or actors of its own,
/// as `choicewise-core` does (a reader per stream, an actor per choice). No type here has a
/// public field; each is driven through its methods.
///
/// - The reader's share: a [`Splitter`](driver::Splitter) is fed the stream's bytes (or its
///   parsed values) and splits each chunk's `choices` into per-choice
///   [`Batch`](driver::Batch)es of raw updates, gathering the completion's
///   [`Meta`](driver::Meta) and warnings; each [`Step`](driver::Step) says whether more may
///   come. Emptied batches go back through a per-choice [`BatchPool`](driver::BatchPool).
/// - A choice's share: a [`ChoiceCore`](driver::ChoiceCore) applies its batches, merging
///   them into events, and carries the choice's lifecycle ([`Phase`](driver::Phase),
///   [`Closed`](driver::Closed)); an [`EventLog`](driver::EventLog) keeps the events for
///   readers at their own pace.
/// - The reader's decisions, when each choice runs on an actor of its own: a
///   [`Router`](driver::Router) is told what happens (a choice appeared, its updates, a
///   cancel with its [`CancelReason`](driver::CancelReason), a child stopped or failed, the
///   upstream's end) and says what to do, as [`Command`](driver::Command)s (start a choice's
///   actor, send it a [`ChoiceMsg`](driver::ChoiceMsg), retire it, drop the upstream, stop).
///   It has no runtime: `choicewise-core`'s reader actor executes its commands.
/// - The end: [`assemble`](driver::assemble) builds the [`ChatCompletion`] from the facts and
///   every choice's outcome; [`fill_choice_usage`](driver::fill_choice_usage) and
///   [`output_from_events`](driver::output_from_events) fill in a choice's message.
///
/// [`Demux`] is this API driven on one thread: read it to see the order of the calls.
pub mod driver {
    pub use crate::event_log::EventLog;
    pub use crate::lifecycle::{
        CancelReason, CancelledBy, ChoiceCore, Close, Closed, Phase, assemble, fill_choice_usage,
        output_from_events,
    };
    pub use crate::router::{Child, ChoiceMsg, Command, Refused, Router};
    pub use crate::split::{Batch, BatchPool, Meta, Splitter, Step};
    pub use crate::usage::ReportedUsage;
}
