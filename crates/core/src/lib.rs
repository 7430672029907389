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
//!   combinators pick choices while they stream and cancel the rest; a [`Policy`] states a
//!   pick as data.
//!
//! The crate root holds what an application uses; the finer pieces are in modules: [`plan`],
//! [`policy`] (the limits a policy is checked against, its rule), [`select`] (a vote's tally
//! and its key's errors), [`arguments`] (function-call arguments and their parse errors),
//! [`confidence`], [`defaults`], [`input`], [`wire`] and [`chunks`].
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
pub mod arguments;
mod builder;
mod choice;
mod completion;
mod completions;
mod config;
#[cfg(feature = "diagnostics")]
#[doc(hidden)]
pub mod diagnostics;
mod lifetime;
mod log;
mod msg;
pub mod plan;
pub mod policy;
mod samples;
pub mod select;
mod source;
mod stream;
mod waiters;

pub use arguments::{ArgumentsSnapshot, FunctionCalls, PartialArguments};
pub use builder::CompletionsBuilder;
pub use choice::Choice;
#[cfg(feature = "estimate")]
pub use choicewise_proto::EncodingName;
pub use choicewise_proto::{
    CallKind, CallRef, ChatCompletion, ChoiceEvent, ChoiceOutput, ChoiceSource, ChoiceUsage, Demux,
    Dialect, Error, ErrorDetail, ErrorKind, Estimate, FunctionCall, FunctionCallEvent, Incomplete,
    Logprobs, LogprobsKept, Measure, Message, MessagesText, Snapshot, Text, ToolCall,
    UpstreamError, Usage, UsageSource, Warning, WarningKind,
};
pub use choicewise_proto::{chunks, upstream, wire};
pub use completions::{Choices, Completions};
pub use policy::{PickRule, Policy, PolicyBuilder, PolicyError, PolicyErrorKind};
pub use select::{Pick, Selection, VoteKey};
pub use source::Source;
pub use stream::EventStream;

pub mod confidence {
    //! Confidence from log-probabilities (DeepConf), for a vote guided by it
    //! ([`Pick::confidence`](crate::Pick::confidence)) and for a caller's own use: the
    //! options ([`Confidence`], with its [`Measure`]), a choice's log-probabilities as they stream
    //! ([`Choice::logprobs`](crate::Choice::logprobs), items of [`TokenLogprob`], and
    //! [`Choice::token_confidences_by`](crate::Choice::token_confidences_by)), a sample's
    //! running confidence ([`SampleConfidence`], [`token_confidence`]), the threshold's
    //! [`quantile`], the one ballot every vote counts on ([`Ballot`]) and what a vote reports of it
    //! ([`ConfidenceReport`], in [`Selection::confidence`](crate::Selection::confidence)).
    //!
    //! ```
    //! use choicewise_core::confidence::{Confidence, quantile};
    //! let options = Confidence::new().warmup(8).keep(0.9);
    //! assert_eq!(quantile(&[1.0, 2.0, 3.0], 0.5), Some(2.0));
    //! # let _ = options;
    //! ```

    pub use crate::select::confidence::{ConfidenceApplied, ConfidenceReport};
    pub use choicewise_proto::{
        Ballot, Confidence, MEASURES, Measure, SampleConfidence, Standing, TokenLogprob,
        TopLogprob, UnknownMeasure, quantile, token_confidence,
    };
}

pub mod cancel {
    //! Why a choice was cancelled and who sent the cancel: the reason a
    //! [`ChoiceEvent::Cancelled`](crate::ChoiceEvent::Cancelled) carries
    //! ([`CancelReason`], also [`Choice::cancel_reason`](crate::Choice::cancel_reason)), given
    //! with [`Choice::cancel_for`](crate::Choice::cancel_for),
    //! [`Completions::cancel_for`](crate::Completions::cancel_for) and
    //! [`Completions::cancel_except_for`](crate::Completions::cancel_except_for); and who sent
    //! it ([`CancelledBy`]).
    //!
    //! ```
    //! use choicewise_core::cancel::{CancelReason, CancelledBy};
    //! assert_eq!(CancelReason::Decided.by(), CancelledBy::Library);
    //! assert_eq!(CancelReason::ReaderGone.by(), CancelledBy::Program);
    //! ```

    pub use choicewise_proto::driver::{CancelReason, CancelledBy};
}

pub mod defaults {
    //! The defaults and bounds that the builders and a [`Policy`](crate::Policy) apply when
    //! nothing else is said.
    //!
    //! ```
    //! use choicewise_core::defaults::{DEFAULT_MAX_CHOICES, DEFAULT_MIN_VOTES};
    //! assert!(DEFAULT_MAX_CHOICES > 1);
    //! assert_eq!(DEFAULT_MIN_VOTES, 2);
    //! ```

    pub use crate::config::DEFAULT_HIBERNATE_AFTER;
    pub use crate::policy::{DEFAULT_MIN_VOTES, HEDGE_AFTER_FLOOR};
    pub use crate::select::{
        SHOWN_KEY_MAX_BYTES, SHOWN_KEY_PREFIX_BYTES, VOTE_PATTERN_MAX_BYTES,
        VOTE_PATTERN_MAX_DEPTH, VOTE_PATTERN_MAX_FOLDED_CLASSES, VOTE_PATTERN_SIZE_LIMIT,
    };
    pub use choicewise_proto::{
        DEFAULT_ANTHROPIC_MAX_TOKENS, DEFAULT_MAX_CHOICES, DEFAULT_MAX_EVENT_SIZE,
        DEFAULT_MAX_TOOL_CALLS,
    };
}

pub mod input {
    //! The input side's lower-level pieces: the bound on the items of
    //! [`Source::parsed`](crate::Source::parsed) ([`Parsed`]), what
    //! [`Demux::feed`](crate::Demux::feed) says of its input ([`Flow`]), the options a stream
    //! is read with ([`StreamConfig`]) and the framing's error ([`SseError`]).
    //!
    //! ```
    //! use choicewise_core::Demux;
    //! use choicewise_core::input::Flow;
    //! let mut demux = Demux::new();
    //! assert_eq!(demux.feed(b"data: [DONE]\n\n").unwrap(), Flow::Done);
    //! ```

    pub use choicewise_proto::{Flow, Parsed, SseError, StreamConfig, TokenBound, TokenCount};
}

pub mod counting {
    //! Where a token count is made: on the calling thread when it is short, since handing it
    //! to a blocking thread and being woken with it costs more than the count (a quarter of
    //! the gateway's CPU on a native `n = 3` request, docs/benchmarks.md), else off the
    //! async runtime's workers.

    /// `count`'s result: made on the calling thread when `quick` (with
    /// `choicewise_usage::counts_quickly`: the encoding's table loaded and the text short),
    /// else on Tokio's blocking pool; `None` if it panicked.
    ///
    /// ```
    /// # #[tokio::main] async fn main() {
    /// use choicewise_core::counting::counted;
    /// assert_eq!(counted(true, || 2 + 2).await, Some(4));
    /// assert_eq!(counted(false, || 2 + 2).await, Some(4));
    /// # }
    /// ```
    pub async fn counted<T: Send + 'static>(
        quick: bool,
        count: impl FnOnce() -> T + Send + 'static,
    ) -> Option<T> {
        match quick {
            true => std::panic::catch_unwind(std::panic::AssertUnwindSafe(count)).ok(),
            false => tokio::task::spawn_blocking(count).await.ok(),
        }
    }
}

#[cfg(feature = "fault-injection")]
#[doc(hidden)]
pub mod fault;
