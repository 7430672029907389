//! [`CompletionsBuilder`]: the options of a completion, and the calls that start one.

use std::time::Duration;

use choicewise_proto::Demux;

use crate::completion::Mode;
use crate::completions::Completions;
use crate::config::Config;
#[cfg(doc)]
use crate::defaults::{
    DEFAULT_HIBERNATE_AFTER, DEFAULT_MAX_CHOICES, DEFAULT_MAX_EVENT_SIZE, DEFAULT_MAX_TOOL_CALLS,
};
use crate::source::Source;

impl Completions {
    /// Reads one source, with default options.
    ///
    /// ```
    /// # use choicewise_core::{Completions, Source};
    /// # #[tokio::main] async fn main() {
    /// let sse = "data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n";
    /// let completions = Completions::new(Source::reader(sse.as_bytes()));
    /// assert_eq!(completions.collect().await.unwrap().choices.len(), 1);
    /// # }
    /// ```
    pub fn new(source: Source) -> Completions {
        CompletionsBuilder::default().start(source)
    }

    /// The options of a completion: limits, timeouts, dialect, estimates; then
    /// [`start`](CompletionsBuilder::start) one source, [`fan_out`](CompletionsBuilder::fan_out)
    /// several, or make a [`Demux`].
    ///
    /// ```
    /// # use choicewise_core::Completions;
    /// let builder = Completions::builder().max_choices(4);
    /// # drop(builder);
    /// ```
    pub fn builder() -> CompletionsBuilder {
        CompletionsBuilder::default()
    }
}

/// Options of a [`Completions`], and the calls that start one.
///
/// ```
/// use std::time::Duration;
/// use choicewise_core::{Completions, Source};
///
/// # #[tokio::main] async fn main() {
/// let completions = Completions::builder()
///     .max_choices(16)
///     .max_event_size(1 << 20)
///     .idle_timeout(Duration::from_secs(30))
///     .start(Source::reader(&b"data: [DONE]\n\n"[..]));
/// assert!(completions.collect().await.unwrap().choices.is_empty());
/// # }
/// ```
#[derive(Debug, Clone, Default)]
#[must_use = "a builder does nothing until it starts a completion"]
pub struct CompletionsBuilder {
    pub(crate) config: Config,
}

impl CompletionsBuilder {
    /// The largest SSE event accepted, in bytes (default
    /// [`DEFAULT_MAX_EVENT_SIZE`]); a larger one ends the stream
    /// with [`ErrorDetail::Sse`](crate::ErrorDetail::Sse) instead of growing memory.
    ///
    /// ```
    /// # use choicewise_core::{Completions, Source};
    /// # #[tokio::main] async fn main() {
    /// let big = format!("data: {{\"choices\":[{{\"delta\":{{\"content\":\"{}\"}}}}]}}\n\n", "x".repeat(100));
    /// let c = Completions::builder().max_event_size(64).start(Source::reader(std::io::Cursor::new(big)));
    /// assert!(c.collect().await.is_err());
    /// # }
    /// ```
    pub fn max_event_size(mut self, bytes: usize) -> Self {
        self.config.stream.max_event_size = bytes;
        self
    }

    /// The stream's wire dialect: Chat Completions chunks, OpenAI Responses events or
    /// Anthropic Messages events. By default it is recognised from the stream's first event
    /// (its `type`, or its `event:` line); a Responses or Anthropic stream is one choice.
    ///
    /// ```
    /// use choicewise_core::{Completions, Dialect, Source};
    /// # #[tokio::main] async fn main() {
    /// let sse = concat!(
    ///     "event: message_start\n",
    ///     "data: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"model\":\"claude\",\"role\":\"assistant\",\"usage\":{\"input_tokens\":5}}}\n\n",
    ///     "data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
    ///     "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\n",
    ///     "data: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
    ///     "data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":1}}\n\n",
    ///     "data: {\"type\":\"message_stop\"}\n\n",
    /// );
    /// let c = Completions::builder().dialect(Dialect::Anthropic).start(Source::reader(sse.as_bytes()));
    /// let whole = c.collect().await.unwrap();
    /// assert_eq!(whole.id, "msg_1");
    /// assert_eq!(whole.choices[0].message.content.as_deref(), Some("Hi"));
    /// assert_eq!(whole.choices[0].finish_reason.as_deref(), Some("stop"));
    /// assert_eq!(whole.usage.unwrap().total_tokens, 6);
    /// # }
    /// ```
    pub fn dialect(mut self, dialect: crate::Dialect) -> Self {
        self.config.stream.dialect = Some(dialect);
        self
    }

    /// Strict WHATWG framing of the SSE bytes (default `false`: the tolerant mode). The
    /// tolerant mode also takes events written one `data:` line each without the blank line
    /// between them, applying each line that is a complete JSON object (or `[DONE]`) as an
    /// event, with a [`WarningKind::EventsWithoutBlankLines`](crate::WarningKind); the strict
    /// mode joins such lines into one event, as the standard says (see `choicewise_sse::Framer::strict`).
    ///
    /// ```
    /// # use choicewise_core::{Completions, Source};
    /// # #[tokio::main] async fn main() {
    /// let sse = "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\ndata: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\n";
    /// let tolerant = Completions::new(Source::reader(sse.as_bytes())).collect().await.unwrap();
    /// assert_eq!(tolerant.choices[0].finish_reason.as_deref(), Some("stop"));
    /// let strict = Completions::builder().strict_sse(true).start(Source::reader(sse.as_bytes()));
    /// assert!(strict.collect().await.is_err()); // one event, never dispatched: truncated
    /// # }
    /// ```
    pub fn strict_sse(mut self, strict: bool) -> Self {
        self.config.stream.strict_sse = strict;
        self
    }

    /// The most distinct choices accepted (default
    /// [`DEFAULT_MAX_CHOICES`]); one more ends the stream with
    /// [`ErrorDetail::TooManyChoices`](crate::ErrorDetail::TooManyChoices).
    ///
    /// ```
    /// # use choicewise_core::{Completions, ErrorKind, Source};
    /// # #[tokio::main] async fn main() {
    /// let sse = "data: {\"choices\":[{\"index\":0,\"delta\":{}},{\"index\":1,\"delta\":{}}]}\n\n";
    /// let c = Completions::builder().max_choices(1).start(Source::reader(sse.as_bytes()));
    /// let err = c.collect().await.unwrap_err();
    /// assert_eq!(err.error.kind(), ErrorKind::Limit);
    /// # }
    /// ```
    pub fn max_choices(mut self, choices: usize) -> Self {
        self.config.stream.max_choices = choices;
        self
    }

    /// The most tool calls accepted in one choice (default
    /// [`DEFAULT_MAX_TOOL_CALLS`]); one more ends that choice
    /// with [`ErrorDetail::InvalidToolCall`](crate::ErrorDetail::InvalidToolCall).
    ///
    /// ```
    /// # use choicewise_core::{Completions, Source};
    /// # #[tokio::main] async fn main() {
    /// let c = Completions::builder().max_tool_calls(4).start(Source::reader(&b"data: [DONE]\n\n"[..]));
    /// assert!(c.collect().await.is_ok());
    /// # }
    /// ```
    pub fn max_tool_calls(mut self, calls: usize) -> Self {
        self.config.stream.max_tool_calls = calls;
        self
    }

    /// The most bytes of raw updates one choice may take (each its JSON element of a chunk's
    /// `choices`; default: no bound but the event size's); past it that choice ends with
    /// [`ErrorDetail::ChoiceTooLarge`](crate::ErrorDetail::ChoiceTooLarge) and the others go
    /// on: an upstream that sends one choice without end costs a bounded memory. Updates of
    /// the Messages and Responses dialects (one choice per stream) are not counted.
    ///
    /// ```
    /// # use choicewise_core::{Completions, Source, ErrorDetail};
    /// # #[tokio::main] async fn main() {
    /// let chunk = |i: u32, text: &str| format!(
    ///     "data: {{\"choices\":[{{\"index\":{i},\"delta\":{{\"content\":\"{text}\"}}}}]}}\n\n");
    /// let mut sse = chunk(1, "short");
    /// sse.push_str(&"data: {\"choices\":[{\"index\":1,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n");
    /// for _ in 0..100 { sse.push_str(&chunk(0, "and on")); }
    /// sse.push_str("data: [DONE]\n\n");
    /// let c = Completions::builder().max_choice_bytes(1024).start(Source::reader(std::io::Cursor::new(sse)));
    /// let errors = c.choice_errors().await;
    /// assert_eq!(errors.len(), 1);
    /// assert!(matches!(errors[0].1.detail(), ErrorDetail::ChoiceTooLarge { choice: 0, limit: 1024, .. }));
    /// # }
    /// ```
    pub fn max_choice_bytes(mut self, bytes: usize) -> Self {
        self.config.stream.max_choice_bytes = Some(bytes);
        self
    }

    /// Finishes each choice with `finish_reason: "length"` once its output (content,
    /// refusal, reasoning, calls' arguments) passes `bound`'s tokens, at the update that
    /// passes it; its later updates are dropped and its upstream no longer read for it (a
    /// source of this choice alone is closed): an upstream that ignores the `max_tokens` it
    /// was sent costs at most the bound.
    ///
    /// ```
    /// use choicewise_core::{Completions, Source, input::TokenBound};
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let words = |text: &str| text.split_whitespace().count() as u64;
    /// let sse = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"one two \"}}]}\n\n\
    ///            data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"three four \"}}]}\n\n\
    ///            data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"five\"},\"finish_reason\":\"stop\"}]}\n\n\
    ///            data: [DONE]\n\n";
    /// let c = Completions::builder()
    ///     .max_choice_tokens(TokenBound::new(3, words))
    ///     .start(Source::reader(std::io::Cursor::new(sse)));
    /// let done = c.collect().await.unwrap();
    /// let choice = &done.choices[0];
    /// assert_eq!(choice.message.content.as_deref(), Some("one two three four "));
    /// assert_eq!(choice.finish_reason.as_deref(), Some("length"));
    /// # }
    /// ```
    pub fn max_choice_tokens(mut self, bound: crate::input::TokenBound) -> Self {
        self.config.stream.max_choice_tokens = Some(bound);
        self
    }

    /// Leaves out message data that arrives for a choice after its finish (reported as
    /// [`WarningKind::DataAfterFinishDropped`](crate::WarningKind::DataAfterFinishDropped)),
    /// so that every reader sees the message as it was at its finish, as a relay that ends
    /// each choice at its finish does. By default such data is applied to the message and
    /// reported as [`WarningKind::DataAfterFinish`](crate::WarningKind::DataAfterFinish).
    ///
    /// ```
    /// # use choicewise_core::{Completions, Source, WarningKind};
    /// # #[tokio::main] async fn main() {
    /// let sse = concat!(
    ///     "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"4\"},\"finish_reason\":\"stop\"}]}\n\n",
    ///     "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\" and more\"}}]}\n\n",
    ///     "data: [DONE]\n\n",
    /// );
    /// let c = Completions::builder().drop_after_finish(true).start(Source::reader(sse.as_bytes()));
    /// let collected = c.collect().await.unwrap();
    /// assert_eq!(collected.choices[0].message.content.as_deref(), Some("4"));
    /// assert_eq!(c.warnings()[0].kind, WarningKind::DataAfterFinishDropped);
    /// # }
    /// ```
    pub fn drop_after_finish(mut self, drop: bool) -> Self {
        self.config.stream.drop_after_finish = drop;
        self
    }

    /// The request's custom tools (`"type": "custom"`, free-text input) that an Anthropic
    /// upstream is sent as tools of one string property, `input`
    /// ([`StreamConfig::custom_tools`](choicewise_proto::StreamConfig::custom_tools)): their calls are
    /// read back as custom tools' calls, the input their arguments (none by default).
    ///
    /// ```
    /// # use choicewise_core::{Completions, Dialect, Source};
    /// # #[tokio::main] async fn main() {
    /// let sse = concat!(
    ///     "data: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"role\":\"assistant\",\"usage\":{\"input_tokens\":1}}}\n\n",
    ///     "data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"tool_use\",\"id\":\"t\",\"name\":\"apply_patch\",\"input\":{}}}\n\n",
    ///     "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"input\\\": \\\"*** Begin\\\"}\"}}\n\n",
    ///     "data: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
    ///     "data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\"},\"usage\":{\"output_tokens\":3}}\n\n",
    ///     "data: {\"type\":\"message_stop\"}\n\n",
    /// );
    /// let c = Completions::builder()
    ///     .dialect(Dialect::Anthropic)
    ///     .custom_tools(["apply_patch".to_string()])
    ///     .start(Source::reader(sse.as_bytes()));
    /// let collected = c.collect().await.unwrap();
    /// let call = &collected.choices[0].message.tool_calls[0];
    /// assert_eq!((call.kind.as_str(), call.function.arguments.as_str()), ("custom", "*** Begin"));
    /// # }
    /// ```
    pub fn custom_tools(mut self, names: impl IntoIterator<Item = String>) -> Self {
        self.config.stream.custom_tools = names.into_iter().collect();
        self
    }

    /// What the choices keep of the log-probabilities the upstream sends (default
    /// [`LogprobsKept::Raw`](crate::LogprobsKept::Raw): their JSON text, in
    /// [`ChoiceEvent::Logprobs`](crate::ChoiceEvent::Logprobs) and
    /// [`ChoiceOutput::logprobs`](crate::ChoiceOutput::logprobs)).
    /// [`LogprobsKept::Confidence`](crate::LogprobsKept::Confidence) keeps only each token's
    /// confidence by its measure, what a vote guided by it reads
    /// ([`Choice::token_confidences_by`](crate::Choice::token_confidences_by));
    /// [`LogprobsKept::Nothing`](crate::LogprobsKept::Nothing) drops them unparsed.
    ///
    /// ```
    /// # use choicewise_core::{Completions, LogprobsKept, Measure, Source};
    /// # use futures::TryStreamExt;
    /// # #[tokio::main] async fn main() {
    /// let sse = concat!(
    ///     "data: {\"choices\":[{\"delta\":{\"content\":\"4\"},\"logprobs\":{\"content\":[",
    ///     "{\"token\":\"4\",\"logprob\":-0.25,\"top_logprobs\":[{\"token\":\"4\",\"logprob\":-0.25},{\"token\":\"5\",\"logprob\":-1.75}]}",
    ///     "]},\"finish_reason\":\"stop\"}]}\n\n",
    /// );
    /// let c = Completions::builder()
    ///     .logprobs(LogprobsKept::Confidence(Measure::TopK))
    ///     .start(Source::reader(sse.as_bytes()));
    /// let choice = c.choice(0).await.unwrap();
    /// let confidences: Vec<f64> = choice.token_confidences().try_collect().await.unwrap();
    /// assert_eq!(confidences, [1.0]);
    /// assert_eq!(choice.message().await.unwrap().logprobs, None); // no text kept
    /// # }
    /// ```
    pub fn logprobs(mut self, kept: crate::LogprobsKept) -> Self {
        self.config.stream.logprobs = kept;
        self
    }

    /// Ends the stream with [`ErrorDetail::IdleTimeout`](crate::ErrorDetail::IdleTimeout) when the upstream sends nothing for this
    /// long (default: wait forever).
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use choicewise_core::{Completions, ErrorKind, Source};
    /// # #[tokio::main] async fn main() {
    /// let stalled = futures::stream::pending::<Result<Vec<u8>, std::io::Error>>();
    /// let c = Completions::builder().idle_timeout(Duration::from_millis(10)).start(Source::sse(stalled));
    /// assert!(matches!(c.outcome().await, Err(e) if e.kind() == ErrorKind::Timeout));
    /// # }
    /// ```
    pub fn idle_timeout(mut self, after: Duration) -> Self {
        self.config.idle_timeout = Some(after);
        self
    }

    /// Retires the choice actors when the upstream has sent nothing for this long (default:
    /// [`DEFAULT_HIBERNATE_AFTER`], 250 ms). A choice keeps
    /// its state and its sub-streams while its actor is retired; the next update for it spawns
    /// a new actor, once the old one has applied everything it had queued. An idle completion
    /// then holds only its reader actor. `Duration::MAX` keeps the actors for the whole
    /// stream.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use choicewise_core::{Completions, Source};
    /// # use futures::{StreamExt, stream};
    /// # #[tokio::main] async fn main() {
    /// let first = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"}}]}\n\n";
    /// let rest = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"lo\"},\
    ///             \"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n";
    /// // The upstream goes quiet for 50 ms after the first chunk: the actor retires.
    /// let reads = stream::iter([Ok::<_, std::io::Error>(first)]).chain(stream::once(async move {
    ///     tokio::time::sleep(Duration::from_millis(50)).await;
    ///     Ok(rest)
    /// }));
    /// let c = Completions::builder().hibernate_after(Duration::from_millis(5)).start(Source::sse(reads));
    /// let completion = c.collect().await.unwrap();
    /// assert_eq!(completion.choices[0].message.content.as_deref(), Some("Hello"));
    /// # }
    /// ```
    pub fn hibernate_after(mut self, quiet: Duration) -> Self {
        self.config.hibernate_after = Some(quiet);
        self
    }

    /// The model, to choose the encoding of usage estimates (default: the first source's
    /// request's `model`, else the model named by the stream).
    ///
    /// ```
    /// # use choicewise_core::{Completions, Source};
    /// # #[tokio::main] async fn main() {
    /// let sse = "data: {\"choices\":[{\"delta\":{\"content\":\"Hello!\"},\"finish_reason\":\"stop\"}]}\n\n";
    /// let usage = Completions::builder().model("gpt-4").start(Source::reader(sse.as_bytes())).usage().await;
    /// assert_eq!(usage.estimate.unwrap().encoding, "cl100k_base");
    /// # }
    /// ```
    pub fn model(mut self, model: impl Into<String>) -> Self {
        self.config.model = Some(model.into());
        self
    }

    /// Whether [`Completions::collect`] estimates the usage when the stream carried none
    /// (default `true`). Estimating loads a BPE table once per process (some 100 ms) and
    /// encodes every choice's output; [`Completions::usage`] estimates regardless.
    ///
    /// ```
    /// # use choicewise_core::{Completions, Source};
    /// # #[tokio::main] async fn main() {
    /// let sse = "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n";
    /// let c = Completions::builder().estimate_usage(false).start(Source::reader(sse.as_bytes()));
    /// assert!(c.collect().await.unwrap().usage.is_none());
    /// # }
    /// ```
    pub fn estimate_usage(mut self, estimate: bool) -> Self {
        self.config.estimate_usage = estimate;
        self
    }

    /// Test-only (feature `fault-injection`): installs a hook that makes a choice's actor
    /// panic or stall at the updates it picks ([`fault`](crate::fault)).
    #[cfg(feature = "fault-injection")]
    #[doc(hidden)]
    pub fn fault_hook(mut self, hook: impl crate::fault::FaultHook) -> Self {
        self.config.fault_hook = crate::fault::Hook(Some(std::sync::Arc::new(hook)));
        self
    }

    /// Starts reading one source: a reader actor starts consuming it at once. Panics when
    /// called outside a Tokio runtime, like `tokio::spawn`.
    ///
    /// ```
    /// # use choicewise_core::{Completions, Source};
    /// # #[tokio::main] async fn main() {
    /// let reads = futures::stream::iter([Ok::<_, std::io::Error>("data: [DO"), Ok("NE]\n\n")]);
    /// let c = Completions::builder().start(Source::sse(reads));
    /// assert!(c.outcome().await.is_ok());
    /// # }
    /// ```
    pub fn start(self, source: Source) -> Completions {
        Completions::start(self.config, Mode::Single, vec![source])
    }

    /// One completion whose choices come from several sources (one request each, for
    /// instance), each read by a reader actor of its own, all at once.
    ///
    /// **Numbering.** Source `k`'s choice `i` gets an index of the completion, after the
    /// choices of the sources before it: while every source before it (and it) declared its
    /// choice count ([`Source::n`], or its request's `n`), source `k` owns the block
    /// `offset_k .. offset_k + n_k` (`offset_k` the sum of the counts before it), whatever
    /// arrives first; every other choice is numbered in the order it is first seen, after
    /// the blocks.
    ///
    /// **Ending.** A source that fails fails only its own unfinished choices, with
    /// [`ErrorDetail::UpstreamFailed`](crate::ErrorDetail::UpstreamFailed) naming it; the
    /// others go on, and [`Completions::outcome`] reports the first failed source. When no
    /// choice of a source is wanted any more (see [`Choice::cancel`](crate::Choice::cancel)),
    /// that source alone is dropped, closing its connection.
    ///
    /// **Usage.** [`Completions::usage`] sums the sources' usage (each request's prompt
    /// counted once): the reported figures where a source reported them, an estimate of its
    /// own choices where it did not; [`Usage::upstreams`](crate::Usage::upstreams) lists
    /// each source's part.
    ///
    /// ```
    /// use choicewise_core::{Completions, Source};
    /// # #[tokio::main] async fn main() {
    /// let a = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"A\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n";
    /// let b = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"B\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n";
    /// let completions = Completions::builder()
    ///     .fan_out([Source::reader(a.as_bytes()).n(1), Source::reader(b.as_bytes()).n(1)]);
    /// let completion = completions.collect().await.unwrap();
    /// let texts: Vec<_> = completion.choices.iter().map(|c| c.message.content.clone().unwrap()).collect();
    /// assert_eq!(texts, ["A", "B"]);
    /// # }
    /// ```
    pub fn fan_out(self, sources: impl IntoIterator<Item = Source>) -> Completions {
        Completions::start(self.config, Mode::FanOut, sources.into_iter().collect())
    }

    /// The options, for the other ways to start a completion.
    pub(crate) fn into_config(self) -> Config {
        self.config
    }

    /// The same demultiplexer without a runtime, with these limits, framing and dialect:
    /// for programs that own their I/O loop (see [`Demux`]).
    ///
    /// ```
    /// # use choicewise_core::Completions;
    /// let mut demux = Completions::builder().max_choices(2).demux();
    /// assert!(demux.feed(b"data: {\"choices\":[{\"index\":0},{\"index\":1},{\"index\":2}]}\n\n").is_err());
    /// ```
    pub fn demux(self) -> Demux {
        Demux::with_config(self.config.stream)
    }
}
