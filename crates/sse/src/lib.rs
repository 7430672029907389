//! Incremental, synchronous server-sent-events (SSE) framing.
//!
//! This crate turns the raw bytes of a `text/event-stream` response, arriving
//! in reads of any size from any source, into [`Event`]s, following the
//! WHATWG HTML standard's *event stream interpretation* rules, with one
//! tolerance that [`Framer::strict`] turns off (events without the blank line
//! between them, below). It does no I/O and knows nothing about async: the
//! caller reads bytes however it likes and hands each read to [`Framer::feed`].
//!
//! # Concepts
//!
//! * **Lines** end with LF, CR or CRLF (a CRLF split between two reads is still
//!   one line end). A UTF-8 byte-order mark at the very start of the stream is
//!   skipped. Each complete line must be valid UTF-8; a multi-byte character
//!   may be split between reads.
//! * **Fields**: a line `name: value` sets a field (one space after the colon
//!   is dropped; a line without colon is a field with an empty value). `data`
//!   lines accumulate (joined with `'\n'`), `event` sets the event type, `id`
//!   sets the last event ID (which persists across events), `retry` gives a
//!   reconnection time; other fields are ignored. Lines starting with `:` are
//!   comments.
//! * **Dispatch**: a blank line dispatches the pending event if it has data,
//!   then starts a new one. In the default tolerant mode, a `data:` line that
//!   arrives while the pending event's data is complete JSON objects or
//!   `[DONE]` dispatches that event first (servers that write one `data:` line
//!   per event without blank lines); [`Framer::unterminated_events`] counts
//!   these, and [`Framer::finish_with`] applies the rule at the end of input. The event is handed to the caller's callback
//!   *borrowed* from the framer's reusable buffers, so framing allocates
//!   nothing per event; [`Event::to_owned`] copies one out. The callback
//!   returns [`ControlFlow`](std::ops::ControlFlow) to continue or to stop
//!   right after that event ([`Feed::Stopped`] says how many bytes were
//!   consumed).
//! * **End of stream**: [`Framer::finish`] discards the undispatched rest, as
//!   WHATWG requires, and describes it in a [`Tail`] so the caller can tell a
//!   clean end from a truncated stream (or accept a final `data: [DONE]`
//!   without its blank line).
//! * **Limits and errors**: an event (pending data plus the line being read)
//!   larger than the maximum event size, an event of more field lines than the
//!   maximum lines per event, or a line that is not UTF-8, is an
//!   [`SseError`] carrying the line number and byte offset; the framer is then
//!   poisoned. Memory stays bounded even for a runaway line without line end,
//!   and the work is linear in the bytes (each byte is looked at a bounded number
//!   of times, whatever the number of lines of an event).
//! * **Positions**: events, errors and tails carry 1-based line numbers and
//!   byte offsets from the start of the stream (a BOM counts as 3 bytes).
//!
//! The framer knows nothing about application conventions such as
//! `data: [DONE]`: the caller decides when to stop.
//!
//! # Example
//!
//! ```
//! use choicewise_sse::{Feed, Framer};
//! use std::ops::ControlFlow;
//!
//! // Reads can split lines, CRLFs and characters anywhere.
//! let reads: [&[u8]; 4] = [
//!     b"\xEF\xBB\xBF: comment\r",
//!     b"\ndata: {\"delta\":\"h\xC3",
//!     b"\xA9\"}\r\n\r\ndata: [DONE]\n\n",
//!     b"data: ignored\n\n",
//! ];
//! let mut framer = Framer::new();
//! let mut chunks = Vec::new();
//! 'stream: for read in reads {
//!     let feed = framer.feed(read, |ev| {
//!         if ev.data == "[DONE]" {
//!             return ControlFlow::Break(());
//!         }
//!         chunks.push((ev.line, ev.data.to_owned()));
//!         ControlFlow::Continue(())
//!     })?;
//!     if let Feed::Stopped { consumed } = feed {
//!         assert_eq!(&read[consumed..], b"");
//!         break 'stream;
//!     }
//! }
//! assert_eq!(chunks, [(2, "{\"delta\":\"hé\"}".to_owned())]);
//! # Ok::<(), choicewise_sse::SseError>(())
//! ```
#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod error;
mod event;
mod framer;

pub use error::SseError;
pub use event::{DataLines, Event, OwnedEvent};
pub use framer::{DEFAULT_MAX_EVENT_LINES, DEFAULT_MAX_EVENT_SIZE, Feed, Framer, Position, Tail};

#[cfg(test)]
mod tests;
