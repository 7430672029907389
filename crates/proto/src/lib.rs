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
mod merge;
mod response;
mod scan;
mod split;
mod usage;
pub mod wire;

pub use api::{DEFAULT_ANTHROPIC_MAX_TOKENS, Dialect};
pub use choicewise_partial_json::{PartialJsonError, Snapshot};
pub use choicewise_sse::SseError;
#[cfg(feature = "estimate")]
pub use choicewise_usage::EncodingName;
pub use confidence::{
    Confidence, SampleConfidence, TokenLogprob, TopLogprob, WeightedVote, quantile,
    token_confidence,
};
pub use config::{
    DEFAULT_MAX_CHOICES, DEFAULT_MAX_EVENT_SIZE, DEFAULT_MAX_TOOL_CALLS, StreamConfig,
};
pub use demux::{Demux, Flow};
pub use error::{Error, ErrorDetail, ErrorKind, Incomplete, UpstreamError};
pub use event::{
    ArgumentsError, CallKind, CallRef, ChoiceEvent, FunctionCallEvent, Text, Warning, WarningKind,
};
pub use response::{ChatCompletion, ChoiceOutput, ChoiceSource, FunctionCall, Message, ToolCall};
pub use split::Parsed;
pub use usage::{ChoiceUsage, Estimate, Usage, UsageSource};

/// The interface between this crate and the runtime of `choicewise-core`: the pieces the
/// actors run (the splitter, a choice's state, the event log). Not part of the public API:
/// no stability promise, hidden from the documentation.
#[doc(hidden)]
pub mod __private {
    pub use crate::event_log::EventLog;
    pub use crate::lifecycle::{
        ChoiceCore, Closed, Phase, assemble, fill_choice_usage, output_from_events,
    };
    pub use crate::split::{Batch, BatchPool, Meta, Slot, Splitter, Step};
    pub use crate::usage::ReportedUsage;
}
