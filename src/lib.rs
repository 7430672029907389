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
//! use choicewise::{Completions, Source};
//! use futures::{StreamExt, TryStreamExt};
//!
//! # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let sse = concat!(
//!     "data: {\"choices\":[{\"index\":1,\"delta\":{\"content\":\"Salut\"}}]}\n\n",
//!     "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hello\"},\"finish_reason\":\"stop\"}]}\n\n",
//!     "data: {\"choices\":[{\"index\":1,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n",
//!     "data: [DONE]\n\n",
//! );
//! let completions = Completions::new(Source::reader(sse.as_bytes()));
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
//! ## What it does
//!
//! | | |
//! |---|---|
//! | **Inputs** | one [`Source`]: SSE bytes ([`Source::sse`], [`Source::reader`]), parsed chunks or events of any dialect ([`Source::parsed`]), or a source still to be opened ([`Source::open`]); read with [`Completions::new`], or with options on [`Completions::builder`] |
//! | **Per-choice streams** | [`Choice::content`], [`Choice::reasoning`], [`Choice::refusal`], [`Choice::events`]: each an [`EventStream`] that replays from the start |
//! | **Function calls as they grow** | [`Choice::function_calls`] (fragments, partial JSON values), [`Choice::arguments`] (typed snapshots), [`Choice::argument_text`] (one string field's text) |
//! | **Results** | [`Choice::message`], [`Completions::collect`] (a [`ChatCompletion`] in OpenAI's non-streaming shape), [`Completions::usage`] (reported, or a flagged tiktoken [`Estimate`]) |
//! | **Dialects** | OpenAI Chat Completions, OpenAI Responses and Anthropic Messages streams, recognised or set with [`CompletionsBuilder::dialect`] |
//! | **Many requests, one completion** | [`CompletionsBuilder::fan_out`] of several sources; the HTTP side makes them (`client::Client::source`, feature `client`) |
//! | **Acting while they stream** | [`Choice::cancel`], [`Completions::cancel`], and the [`Pick`]s [`Completions::first_finished`], [`Completions::first_where`], [`Completions::vote`], [`Completions::best_of`] |
//! | **Errors** | one [`Error`]: its [`kind`](Error::kind), [`line`](Error::line), [`offset`](Error::offset), [`choice`](Error::choice); a failed choice fails alone, and [`Incomplete`] keeps what arrived |
//! | **Without a runtime** | [`Demux`], the same demultiplexer for synchronous code |
//!
//! The crate root holds what an application uses. The finer pieces are in modules: [`plan`]
//! (the gateway's request plans), [`policy`] (`PolicyLimits`, what a policy is checked
//! against), [`select`] (a vote's `Tally`, `KeyVotes`, `VoteKeyError`), [`arguments`]
//! (`ArgumentsError`, `PartialJsonError`), [`confidence`] (DeepConf's options,
//! log-probabilities and the report of a vote guided by them), [`defaults`] (defaults and
//! bounds), [`input`] (the input side's lower-level types), [`wire`] (chunk types) and
//! [`chunks`] (the chunk encoder).
//!
//! The repository's `docs/` explain the architecture (the actors and the flow of one chunk),
//! the benchmarks, the reliability guarantees, each capability, and which parts of this API
//! are stable (`docs/api.md`).
#![deny(missing_docs)]

pub use choicewise_core::*;

/// The HTTP client (feature `client`): POST a chat request with `stream: true` to an
/// OpenAI-compatible endpoint and get [`Completions`] back.
#[cfg(feature = "client")]
pub use choicewise_client as client;

/// The Rust blocks of `README.md` and of `docs/*.md` that show this crate's API, compiled as
/// doctests (and run where they need no server: the others are `no_run`), so that the docs'
/// code stays code. Hidden `# ` lines make a block complete in `docs/`; the README's blocks
/// are whole programs, since GitHub shows hidden lines. They use the `client` feature, which
/// the crate's tests turn on (its dev-dependency on itself).
#[cfg(doctest)]
mod docs {
    #[doc = include_str!("../README.md")]
    mod readme {}
    #[doc = include_str!("../docs/api.md")]
    mod api {}
    #[doc = include_str!("../docs/dialects.md")]
    mod dialects {}
    #[doc = include_str!("../docs/fan-out.md")]
    mod fan_out {}
}
