//! [`Demux`]: the whole demultiplexer without a runtime, for tests, fuzzers, benchmarks and
//! programs that already own their I/O loop.

use crate::config::StreamConfig;
use crate::error::{Error, Incomplete};
use crate::event::{ChoiceEvent, Warning};
use crate::event_log::EventLog;
use crate::lifecycle::{ChoiceCore, assemble};
use crate::response::{ChatCompletion, ChoiceOutput};
use crate::split::{Parsed, Splitter, Step};

/// The demultiplexer as plain synchronous code: bytes in, per-choice events and messages out.
///
/// `Completions` runs the same two pieces on actors: the reader's share
/// (framing, the chunk envelope, splitting `choices` into each choice's raw JSON) and each
/// choice's share (parsing its updates, merging them into its message and events). `Demux`
/// runs them one after the other on the caller's thread, with the same limits, errors and
/// results: a malformed update fails its choice only, and everything received before an
/// error stays available.
///
/// ```
/// use choicewise_proto::{ChoiceEvent, Demux, Flow};
///
/// let mut demux = Demux::new();
/// let sse = concat!(
///     "data: {\"choices\":[{\"index\":1,\"delta\":{\"content\":\"B\"},\"finish_reason\":\"stop\"}]}\n\n",
///     "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"A\"},\"finish_reason\":\"stop\"}]}\n\n",
///     "data: [DONE]\n\n",
/// );
/// // Any split of the input into reads gives the same result.
/// let (first, rest) = sse.as_bytes().split_at(30);
/// assert_eq!(demux.feed(first).unwrap(), Flow::Continue);
/// assert_eq!(demux.feed(rest).unwrap(), Flow::Done);
/// assert_eq!(demux.indexes(), vec![1, 0]);
/// assert_eq!(demux.events(0)[0], ChoiceEvent::Content("A".into()));
/// let whole = demux.finish().unwrap();
/// assert_eq!(whole.choices[1].message.content.as_deref(), Some("B"));
/// ```
#[derive(Debug)]
pub struct Demux {
    config: StreamConfig,
    splitter: Splitter,
    /// One per splitter slot, in order of first appearance: the choice and its log.
    choices: Vec<(ChoiceCore, EventLog)>,
    warnings: Vec<Warning>,
    end: Option<Result<(), Error>>,
    /// Values fed by [`Demux::feed_parsed`]: they stand in for line numbers.
    parsed: u64,
    /// Reused buffer of one batch's events.
    buf: Vec<ChoiceEvent>,
}

/// What the input said after a [`Demux::feed`]: more may come, or `[DONE]` ended it.
///
/// ```
/// use choicewise_proto::{Demux, Flow};
/// let mut demux = Demux::new();
/// assert_eq!(demux.feed(b"data: {\"choices\":[]}\n\n").unwrap(), Flow::Continue);
/// assert_eq!(demux.feed(b"data: [DONE]\n\n").unwrap(), Flow::Done);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Flow {
    /// More input may come.
    Continue,
    /// `data: [DONE]` ended the stream (anything after it in the same read is ignored, with a
    /// warning).
    Done,
}

impl Default for Demux {
    fn default() -> Self {
        Demux::new()
    }
}

impl Demux {
    /// A demultiplexer with the default limits (see [`Demux::with_config`] to set them).
    ///
    /// ```
    /// let demux = choicewise_proto::Demux::new();
    /// assert!(demux.indexes().is_empty());
    /// ```
    pub fn new() -> Demux {
        Demux::with_config(StreamConfig::default())
    }

    /// A demultiplexer with these limits, framing and dialect.
    ///
    /// ```
    /// use choicewise_proto::{Demux, ErrorKind, StreamConfig};
    /// let mut config = StreamConfig::default();
    /// config.max_choices = 1;
    /// let mut demux = Demux::with_config(config);
    /// let e = demux.feed(b"data: {\"choices\":[{\"index\":0},{\"index\":1}]}\n\n").unwrap_err();
    /// assert_eq!(e.kind(), ErrorKind::Limit);
    /// ```
    pub fn with_config(config: StreamConfig) -> Demux {
        Demux {
            splitter: Splitter::new(&config),
            config,
            choices: Vec::new(),
            warnings: Vec::new(),
            end: None,
            parsed: 0,
            buf: Vec::new(),
        }
    }

    /// Feeds one read of SSE bytes (any split of the stream). Returns the stream's error if
    /// it failed here; after the end (`[DONE]` or an error), further input is ignored.
    ///
    /// ```
    /// use choicewise_proto::{Demux, ErrorKind};
    /// let mut demux = Demux::new();
    /// let error = demux.feed(b"data: [1]\n\n").unwrap_err();
    /// assert_eq!((error.kind(), error.line()), (ErrorKind::Chunk, Some(1)));
    /// ```
    pub fn feed(&mut self, bytes: &[u8]) -> Result<Flow, Error> {
        if let Some(end) = &self.end {
            return end.clone().map(|()| Flow::Done);
        }
        let step = self.splitter.feed(bytes);
        self.step(step)
    }

    /// Feeds one value parsed by the caller: a Chat Completions chunk
    /// ([`ChatCompletionChunk`](crate::wire::ChatCompletionChunk)), or an event of any dialect
    /// as a JSON value (an event of the Responses or Anthropic Messages API, or a Chat
    /// Completions chunk). Each value counts as one line in errors and warnings.
    ///
    /// ```
    /// use choicewise_proto::{Demux, wire::ChatCompletionChunk};
    /// use serde_json::json;
    /// let mut demux = Demux::new();
    /// let chunk: ChatCompletionChunk = serde_json::from_str(
    ///     r#"{"choices":[{"index":2,"delta":{"content":"hi"},"finish_reason":"stop"}]}"#,
    /// ).unwrap();
    /// demux.feed_parsed(chunk.into_owned()).unwrap();
    /// assert_eq!(demux.finish().unwrap().choices[0].index, 2);
    ///
    /// let mut demux = Demux::new();
    /// demux.feed_parsed(json!({"type": "response.output_text.delta", "output_index": 0, "delta": "Hi"})).unwrap();
    /// demux.feed_parsed(json!({"type": "response.completed", "response": {"id": "resp_1", "status": "completed"}})).unwrap();
    /// let completion = demux.finish().unwrap();
    /// assert_eq!((completion.id.as_str(), completion.choices[0].message.content.as_deref()), ("resp_1", Some("Hi")));
    /// ```
    pub fn feed_parsed(&mut self, value: impl Parsed) -> Result<(), Error> {
        if let Some(end) = &self.end {
            return end.clone();
        }
        self.parsed += 1;
        let step = match value.route(&mut self.splitter, self.parsed) {
            Ok(()) => Step::Continue,
            Err(e) => Step::End(Err(e)),
        };
        self.step(step).map(|_| ())
    }

    /// Ends the input (if `[DONE]` or an error has not already) and returns the whole
    /// completion, without usage; on error, what was assembled comes with it. A stream that
    /// stops without `[DONE]` while a choice is unfinished is [`ErrorDetail::Truncated`](crate::ErrorDetail::Truncated).
    ///
    /// ```
    /// use choicewise_proto::{Demux, ErrorKind};
    /// let mut demux = Demux::new();
    /// demux.feed(b"data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}\n\n").unwrap();
    /// let cut = demux.finish().unwrap_err(); // no finish, no [DONE]
    /// assert_eq!(cut.error.kind(), ErrorKind::Truncated);
    /// assert_eq!(cut.partial.choices[0].message.content.as_deref(), Some("Hi"));
    /// ```
    // The same result as `Completions::collect`: the error carries what was assembled.
    #[allow(clippy::result_large_err)]
    pub fn finish(&mut self) -> Result<ChatCompletion, Incomplete<ChatCompletion>> {
        if self.end.is_none() {
            let step = self.splitter.end_of_input();
            let _ = self.step(step);
        }
        let outcomes = self.choices.iter().map(|(core, _)| core.outcome());
        let per_choice = self.splitter.meta.usage.per_choice();
        let (completion, error) = assemble(
            self.splitter.meta.clone(),
            &per_choice,
            self.end.as_ref(),
            outcomes,
        );
        match error {
            None => Ok(completion),
            Some(error) => Err(Incomplete {
                partial: completion,
                error,
            }),
        }
    }

    /// The choice indexes seen so far, in order of first appearance.
    ///
    /// ```
    /// use choicewise_proto::Demux;
    /// let mut demux = Demux::new();
    /// demux.feed(b"data: {\"choices\":[{\"index\":2,\"delta\":{}},{\"index\":0,\"delta\":{}}]}\n\n").unwrap();
    /// assert_eq!(demux.indexes(), [2, 0]);
    /// ```
    pub fn indexes(&self) -> Vec<u32> {
        self.splitter.slots.iter().map(|s| s.index).collect()
    }

    /// Every event of choice `index` so far (empty for an unknown index).
    ///
    /// ```
    /// use choicewise_proto::{ChoiceEvent, Demux};
    /// let mut demux = Demux::new();
    /// demux.feed(b"data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n").unwrap();
    /// assert_eq!(demux.events(0), [ChoiceEvent::Content("a".into())]);
    /// assert!(demux.events(7).is_empty());
    /// ```
    pub fn events(&self, index: u32) -> Vec<ChoiceEvent> {
        let Some((_, log)) = self.state(index) else {
            return Vec::new();
        };
        (0..)
            .map_while(|position| log.get(position).cloned())
            .collect()
    }

    /// Choice `index` as assembled so far, with its error if it failed.
    ///
    /// ```
    /// use choicewise_proto::{Demux, ErrorKind};
    /// let mut demux = Demux::new();
    /// demux.feed(b"data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n").unwrap();
    /// demux.feed(b"data: {\"choices\":[{\"delta\":{\"content\":5}}]}\n\n").unwrap();
    /// let (so_far, error) = demux.choice(0).unwrap();
    /// assert_eq!(so_far.message.content.as_deref(), Some("a"));
    /// assert_eq!(error.unwrap().kind(), ErrorKind::Update);
    /// ```
    pub fn choice(&self, index: u32) -> Option<(ChoiceOutput, Option<Error>)> {
        self.state(index).map(|(core, _)| core.outcome())
    }

    /// How choice `index`'s events ended, once they have: `Ok` at its finish (or a clean end
    /// of the stream), or the error that ended them (its own, or the stream's before its
    /// finish). `None` while they are open, or for an unknown index. An error after the
    /// finish (a late update that broke a limit) does not end them; [`Demux::choice`]
    /// reports it.
    ///
    /// ```
    /// use choicewise_proto::Demux;
    /// let mut demux = Demux::new();
    /// demux.feed(b"data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n").unwrap();
    /// assert!(demux.ended(0).is_none());
    /// demux.feed(b"data: {\"choices\":[{\"delta\":{\"content\":[]}}]}\n\n").unwrap();
    /// assert!(demux.ended(0).unwrap().is_err());
    /// ```
    pub fn ended(&self, index: u32) -> Option<Result<(), Error>> {
        self.state(index)?.0.phase().closed().map(|c| c.result())
    }

    /// Cancels choice `index`, as `Choice::cancel` does: if it is
    /// still open, its events end with [`ChoiceEvent::Cancelled`] (`Asked`), its later updates are
    /// dropped, and its output is flagged `cancelled` without a finish reason. Returns
    /// whether it was open. (There is no upstream to drop here: the caller owns the I/O.)
    ///
    /// ```
    /// use choicewise_proto::driver::CancelReason;
    /// use choicewise_proto::{ChoiceEvent, Demux};
    /// let mut demux = Demux::new();
    /// demux.feed(b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\n").unwrap();
    /// assert!(demux.cancel(0));
    /// demux.feed(b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"b\"}}]}\n\ndata: [DONE]\n\n").unwrap();
    /// assert_eq!(demux.events(0), [ChoiceEvent::Content("a".into()), ChoiceEvent::Cancelled(CancelReason::Asked)]);
    /// let completion = demux.finish().unwrap();
    /// assert!(completion.choices[0].cancelled);
    /// assert_eq!(completion.choices[0].message.content.as_deref(), Some("a"));
    /// assert!(demux.warnings().is_empty());
    /// ```
    pub fn cancel(&mut self, index: u32) -> bool {
        let Some(slot) = self.splitter.slots.iter().position(|s| s.index == index) else {
            return false;
        };
        let Some((core, log)) = self.choices.get_mut(slot) else {
            return false;
        };
        let cancelled = core.cancel(crate::lifecycle::CancelReason::Asked, &mut self.buf);
        log.append(&mut self.buf);
        cancelled
    }

    /// Warnings so far (the stream's and every choice's).
    ///
    /// ```
    /// use choicewise_proto::{Demux, WarningKind};
    /// let mut demux = Demux::new();
    /// demux.feed(b"data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n").unwrap();
    /// demux.feed(b"data: {\"choices\":[{\"delta\":{\"content\":\"late\"}}]}\n\n").unwrap();
    /// assert_eq!(demux.warnings()[0].kind, WarningKind::DataAfterFinish);
    /// ```
    pub fn warnings(&self) -> &[Warning] {
        &self.warnings
    }

    fn state(&self, index: u32) -> Option<&(ChoiceCore, EventLog)> {
        let slot = self.splitter.slots.iter().position(|s| s.index == index)?;
        self.choices.get(slot)
    }

    /// Runs every choice's share of what the splitter produced, then records the end.
    fn step(&mut self, step: Step) -> Result<Flow, Error> {
        let known = self.choices.len();
        for slot in &self.splitter.slots[known..] {
            let core = ChoiceCore::new(slot.index, self.config.max_tool_calls)
                .logprobs(self.config.logprobs)
                .max_bytes(self.config.max_choice_bytes)
                .max_tokens(self.config.max_choice_tokens)
                .drop_after_finish(self.config.drop_after_finish);
            self.choices.push((core, EventLog::default()));
        }
        self.warnings.append(&mut self.splitter.warnings);
        for (slot, (core, log)) in self.splitter.slots.iter_mut().zip(&mut self.choices) {
            if slot.batch.is_empty() {
                continue;
            }
            // Parsed (or skipped) in place: the slot's buffers serve every read.
            core.apply_batch(&mut slot.batch, &mut self.buf, &mut self.warnings);
            log.append(&mut self.buf);
        }
        match step {
            Step::Continue => Ok(Flow::Continue),
            Step::End(outcome) => {
                for (core, log) in &mut self.choices {
                    if let Some(w) = core.settle(outcome.clone(), &mut self.buf) {
                        self.warnings.push(w);
                    }
                    log.append(&mut self.buf);
                }
                self.end = Some(outcome.clone());
                outcome.map(|()| Flow::Done)
            }
        }
    }

    #[doc(hidden)]
    pub fn split_only(&mut self, bytes: &[u8]) -> bool {
        let step = self.splitter.feed(bytes);
        for slot in &mut self.splitter.slots {
            slot.batch.clear();
        }
        self.splitter.warnings.clear();
        matches!(step, Step::Continue)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorDetail;

    const STREAM: &str = concat!(
        "data: {\"choices\":[{\"index\":1,\"delta\":{\"content\":\"B\"}}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":5}}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"}}]}\n\n",
        "data: {\"choices\":[{\"index\":1,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n",
        "data: [DONE]\n\n",
    );

    #[test]
    fn a_choice_past_its_bound_of_tokens_finishes_length_there_and_never_earlier() {
        // Words, counted: "two" and "words" apart are two, "twowords" whole is one.
        let words = |text: &str| text.split_whitespace().count() as u64;
        let update = |index: u32, text: &str| {
            format!(
                "data: {{\"choices\":[{{\"index\":{index},\"delta\":{{\"content\":\"{text}\"}}}}]}}\n\n"
            )
        };
        let mut stream = String::new();
        // Choice 0: pieces of one word, which a piecewise count puts past the bound of 2.
        for piece in ["a", "b", "c", "d"] {
            stream.push_str(&update(0, piece));
        }
        // Choice 1: one word an update, past its bound at the third.
        for word in ["one ", "two ", "three ", "four "] {
            stream.push_str(&update(1, word));
        }
        for index in [0, 1] {
            stream.push_str(&format!(
                "data: {{\"choices\":[{{\"index\":{index},\"delta\":{{}},\"finish_reason\":\"stop\"}}]}}\n\n"
            ));
        }
        stream.push_str("data: [DONE]\n\n");
        let config = StreamConfig {
            max_choice_tokens: Some(crate::TokenBound::new(2, words)),
            ..StreamConfig::default()
        };
        let mut demux = Demux::with_config(config);
        demux.feed(stream.as_bytes()).unwrap();
        let done = demux.finish().unwrap();
        let (first, second) = (&done.choices[0], &done.choices[1]);
        assert_eq!(first.message.content.as_deref(), Some("abcd"));
        assert_eq!(first.finish_reason.as_deref(), Some("stop"));
        assert_eq!(second.message.content.as_deref(), Some("one two three "));
        assert_eq!(second.finish_reason.as_deref(), Some("length"));
    }

    #[test]
    fn a_bad_update_fails_its_choice_only_under_any_split() {
        let mut reference = None;
        for size in [1, 2, 7, 64, STREAM.len()] {
            let mut demux = Demux::new();
            for read in STREAM.as_bytes().chunks(size) {
                demux.feed(read).unwrap();
            }
            let inc = demux.finish().unwrap_err();
            assert!(
                matches!(
                    inc.error.detail(),
                    ErrorDetail::InvalidUpdate {
                        choice: 0,
                        line: 3,
                        ..
                    }
                ),
                "{:?}",
                inc.error
            );
            assert_eq!(inc.partial.choices[1].message.content.as_deref(), Some("B"));
            assert_eq!(
                inc.partial.choices[1].finish_reason.as_deref(),
                Some("stop")
            );
            assert_eq!(inc.partial.choices[0].finish_reason, None);
            let ignored: Vec<_> = demux
                .warnings()
                .iter()
                .filter(|w| {
                    matches!(
                        w.kind,
                        crate::WarningKind::IgnoredAfterFailure { updates: 1 }
                    )
                })
                .collect();
            assert_eq!(ignored.len(), 1, "{:?}", demux.warnings());
            let result = format!("{:?}", inc.partial);
            assert_eq!(reference.get_or_insert(result.clone()), &result);
        }
    }

    #[test]
    fn a_choice_past_its_bytes_fails_alone_under_any_split() {
        // Choice 0 sends ten updates of 45 bytes each; its bound lets the first four in.
        let mut stream =
            String::from("data: {\"choices\":[{\"index\":1,\"delta\":{\"content\":\"B\"}}]}\n\n");
        for k in 0..10 {
            stream.push_str(&format!(
                "data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"x{k}\"}}}}]}}\n\n"
            ));
        }
        stream.push_str("data: {\"choices\":[{\"index\":1,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n");
        let update = r#"{"index":0,"delta":{"content":"x0"}}"#.len();
        let mut reference = None;
        for size in [1, 3, 64, stream.len()] {
            let config = crate::StreamConfig {
                max_choice_bytes: Some(4 * update + 1),
                ..Default::default()
            };
            let mut demux = Demux::with_config(config);
            for read in stream.as_bytes().chunks(size) {
                demux.feed(read).unwrap();
            }
            let inc = demux.finish().unwrap_err();
            assert!(
                matches!(
                    inc.error.detail(),
                    ErrorDetail::ChoiceTooLarge {
                        choice: 0,
                        line: 11,
                        ..
                    }
                ),
                "{:?}",
                inc.error
            );
            assert_eq!(
                inc.partial.choices[0].message.content.as_deref(),
                Some("x0x1x2x3")
            );
            assert_eq!(
                inc.partial.choices[1].finish_reason.as_deref(),
                Some("stop")
            );
            let result = format!("{:?}", inc.partial);
            assert_eq!(reference.get_or_insert(result.clone()), &result);
        }
    }

    #[test]
    fn the_end_is_sticky_and_truncation_is_an_error() {
        let mut demux = Demux::new();
        demux
            .feed(b"data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n")
            .unwrap();
        let inc = demux.finish().unwrap_err();
        assert!(
            matches!(inc.error.detail(), ErrorDetail::Truncated { .. }),
            "{:?}",
            inc.error
        );
        assert_eq!(inc.partial.choices[0].message.content.as_deref(), Some("a"));
        assert!(demux.feed(b"data: [DONE]\n\n").is_err());
    }
}
