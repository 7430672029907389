//! [`Choice`], the handle of one choice.

use std::fmt;
use std::sync::Arc;
use std::task::Poll;

use serde::de::DeserializeOwned;

use futures::StreamExt;

use choicewise_proto::{
    ChoiceEvent, ChoiceOutput, ChoiceUsage, Incomplete, Measure, Text, TokenLogprob, UsageSource,
};

use crate::arguments::{ArgumentsSnapshot, FunctionCalls};
use crate::completion::ChoiceEntry;
use crate::lifetime::Lifetime;
use crate::log::Subscription;
use crate::msg::CancelReason;
use crate::stream::EventStream;

/// One choice of a completion: a cheap, cloneable handle (`Send + Sync + 'static`).
///
/// Every sub-stream can be opened at any time, any number of times, and replays the choice
/// from its start. Each reads at its own pace: a slow or dropped consumer never blocks the
/// reader or any other choice. Sub-streams end after the choice's finish, or with the error
/// that ended the stream before it.
///
/// Holding a `Choice` (or any of its sub-streams) keeps the completion running; when the
/// [`Completions`](crate::Completions) value and every handle and stream are dropped, the
/// actors stop and the upstream is dropped.
///
/// ```
/// use choicewise_core::{Completions, Source};
/// use futures::StreamExt;
///
/// # #[tokio::main] async fn main() {
/// let sse = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n";
/// let completions = Completions::new(Source::reader(sse.as_bytes()));
/// let choice = completions.choice(0).await.unwrap();
/// assert_eq!(choice.index(), 0);
/// let text: Vec<_> = choice.content().map(|t| t.unwrap()).collect().await;
/// assert_eq!(text.concat(), "Hi");
/// # }
/// ```
#[derive(Clone)]
pub struct Choice {
    entry: Arc<ChoiceEntry>,
    life: Arc<Lifetime>,
}

impl fmt::Debug for Choice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Choice")
            .field("index", &self.index())
            .finish()
    }
}

impl Choice {
    pub(crate) fn new(entry: Arc<ChoiceEntry>, life: Arc<Lifetime>) -> Self {
        Choice { entry, life }
    }

    /// The choice index.
    ///
    /// ```
    /// # use choicewise_core::{Completions, Source};
    /// # #[tokio::main] async fn main() {
    /// let sse = "data: {\"choices\":[{\"index\":3,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n";
    /// let c = Completions::new(Source::reader(sse.as_bytes())).choice(3).await.unwrap();
    /// assert_eq!(c.index(), 3);
    /// # }
    /// ```
    pub fn index(&self) -> u32 {
        self.entry.index()
    }

    /// Cancels the choice: stops delivering it, for good. If it is still open, its events end
    /// with [`ChoiceEvent::Cancelled`], every sub-stream ends cleanly (`None`, no error)
    /// after what it had, [`message`](Self::message) returns what was received with
    /// [`ChoiceOutput::cancelled`] set and no finish reason, and the choice's later updates
    /// are dropped (neither applied nor reported as errors). Returns `true` if it was open;
    /// a finished, failed or already cancelled choice is left as it is (`false`).
    ///
    /// Nothing received before the cancel is lost: updates the upstream had already sent for
    /// this choice (still being parsed, say, when another choice's finish led the caller to
    /// cancel this one) are applied first, and the cancel takes effect after them. Should one
    /// of them finish or fail the choice, it ends that way instead, and
    /// [`is_cancelled`](Self::is_cancelled) stays `false`.
    ///
    /// When no choice of its upstream is wanted any more (each finished, failed or
    /// cancelled, and every choice the request's `n` announced has appeared), the upstream is
    /// dropped at once: for HTTP, the connection closes and the provider stops generating.
    /// Within one `n > 1` stream the provider cannot stop one choice alone; the cancelled ones
    /// stop being delivered, and the connection closes when no wanted choice remains.
    ///
    /// ```
    /// # use choicewise_core::{cancel::CancelReason, ChoiceEvent, Completions, Source};
    /// # use futures::{StreamExt, stream};
    /// # #[tokio::main] async fn main() {
    /// let first = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"}}]}\n\n";
    /// // The upstream then stalls forever: cancelling its only choice drops it.
    /// let reads = stream::iter([Ok::<_, std::io::Error>(first)]).chain(stream::pending());
    /// let completions = Completions::new(Source::sse(reads));
    /// let choice = completions.choice(0).await.unwrap();
    /// let mut events = choice.events();
    /// assert_eq!(events.next().await.unwrap().unwrap(), ChoiceEvent::Content("Hel".into()));
    /// assert!(choice.cancel());
    /// assert_eq!(events.next().await.unwrap().unwrap(), ChoiceEvent::Cancelled(CancelReason::Asked));
    /// assert!(events.next().await.is_none());
    /// let message = choice.message().await.unwrap();
    /// assert!(message.cancelled);
    /// assert_eq!((message.message.content.as_deref(), message.finish_reason), (Some("Hel"), None));
    /// assert!(completions.outcome().await.is_ok()); // the stalled upstream was dropped
    /// # }
    /// ```
    pub fn cancel(&self) -> bool {
        self.entry.cancel(CancelReason::Asked)
    }

    /// Cancels the choice for `reason` (as [`cancel`](Self::cancel) does): its events end
    /// with [`ChoiceEvent::Cancelled`] carrying it.
    ///
    /// ```
    /// # use choicewise_core::{cancel::CancelReason, ChoiceEvent, Completions, Source};
    /// # use futures::{StreamExt, stream};
    /// # #[tokio::main] async fn main() {
    /// let partial = "data: {\"choices\":[{\"delta\":{\"content\":\"Hel\"}}]}\n\n";
    /// let stalled = stream::iter([Ok::<_, std::io::Error>(partial)]).chain(stream::pending());
    /// let choice = Completions::new(Source::sse(stalled)).choice(0).await.unwrap();
    /// assert!(choice.cancel_for(CancelReason::Deadline));
    /// let events: Vec<_> = choice.events().map(Result::unwrap).collect().await;
    /// assert_eq!(events.last(), Some(&ChoiceEvent::Cancelled(CancelReason::Deadline)));
    /// assert_eq!(choice.cancel_reason(), Some(CancelReason::Deadline));
    /// # }
    /// ```
    pub fn cancel_for(&self, reason: CancelReason) -> bool {
        self.entry.cancel(reason)
    }

    /// Whether the choice was cancelled ([`cancel`](Self::cancel)).
    ///
    /// ```
    /// # use choicewise_core::{Completions, Source};
    /// # #[tokio::main] async fn main() {
    /// let sse = "data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"},\"finish_reason\":\"stop\"}]}\n\n";
    /// let c = Completions::new(Source::reader(sse.as_bytes())).choice(0).await.unwrap();
    /// c.message().await.unwrap();
    /// assert!(!c.cancel()); // already finished: nothing to cancel
    /// assert!(!c.is_cancelled());
    /// # }
    /// ```
    pub fn is_cancelled(&self) -> bool {
        self.entry.log.lock().phase.is_cancelled()
    }

    /// Whether a vote guided by confidence ([`Pick::confidence`](crate::Pick::confidence))
    /// stopped this choice because a group of its tokens fell below the threshold, rather
    /// than cancelling it because the vote was decided (or any other cancel). Read from how
    /// the choice closed, published with its [`ChoiceEvent::Cancelled`]: a reader that sees
    /// that event can ask. Such a choice does not vote; if its finish arrived before the
    /// cancel took effect it ended finished, not stopped, and this is `false`.
    ///
    /// ```
    /// # use choicewise_core::{Completions, Source};
    /// # #[tokio::main] async fn main() {
    /// let sse = "data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}\n\n";
    /// let c = Completions::new(Source::reader(sse.as_bytes())).choice(0).await.unwrap();
    /// c.cancel();
    /// assert!(!c.stopped_for_low_confidence()); // cancelled, but not for its confidence
    /// # }
    /// ```
    pub fn stopped_for_low_confidence(&self) -> bool {
        self.cancel_reason() == Some(CancelReason::LowConfidence)
    }

    /// Why the choice was cancelled, if it was: the reason its
    /// [`ChoiceEvent::Cancelled`] carries, published with it.
    ///
    /// ```
    /// # use choicewise_core::{cancel::CancelReason, Completions, Source};
    /// # use futures::{StreamExt, stream};
    /// # #[tokio::main] async fn main() {
    /// let partial = "data: {\"choices\":[{\"delta\":{\"content\":\"Hel\"}}]}\n\n";
    /// let stalled = stream::iter([Ok::<_, std::io::Error>(partial)]).chain(stream::pending());
    /// let c = Completions::new(Source::sse(stalled)).choice(0).await.unwrap();
    /// assert_eq!(c.cancel_reason(), None);
    /// assert!(c.cancel());
    /// c.message().await.unwrap(); // its end, published with the cancel
    /// assert_eq!(c.cancel_reason(), Some(CancelReason::Asked));
    /// # }
    /// ```
    pub fn cancel_reason(&self) -> Option<CancelReason> {
        self.entry.log.lock().phase.cancel_reason()
    }

    fn stream<T>(&self, select: fn(&ChoiceEvent) -> Option<T>) -> EventStream<T> {
        EventStream::new(self.entry.log.clone(), self.life.clone(), select)
    }

    /// Everything that happens to the choice, in arrival order: role, reasoning, content,
    /// refusal, function-call progress, logprobs, content-filter results, warnings, and the
    /// finish (always last).
    ///
    /// ```
    /// # use choicewise_core::{ChoiceEvent, Completions, Source};
    /// # use futures::StreamExt;
    /// # #[tokio::main] async fn main() {
    /// let sse = "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"Hi\"},\"finish_reason\":\"stop\"}]}\n\n";
    /// let c = Completions::new(Source::reader(sse.as_bytes())).choice(0).await.unwrap();
    /// let events: Vec<ChoiceEvent> = c.events().map(|e| e.unwrap()).collect().await;
    /// assert_eq!(events, vec![
    ///     ChoiceEvent::Role("assistant".into()),
    ///     ChoiceEvent::Content("Hi".into()),
    ///     ChoiceEvent::Finished("stop".into()),
    /// ]);
    /// # }
    /// ```
    pub fn events(&self) -> EventStream<ChoiceEvent> {
        self.stream(|e| Some(e.clone()))
    }

    /// The message text, piece by piece.
    ///
    /// ```
    /// # use choicewise_core::{Completions, Source};
    /// # use futures::TryStreamExt;
    /// # #[tokio::main] async fn main() {
    /// let sse = "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\ndata: {\"choices\":[{\"delta\":{\"content\":\"b\"},\"finish_reason\":\"stop\"}]}\n\n";
    /// let c = Completions::new(Source::reader(sse.as_bytes())).choice(0).await.unwrap();
    /// let parts: Vec<_> = c.content().try_collect().await.unwrap();
    /// assert_eq!(parts.concat(), "ab");
    /// # }
    /// ```
    pub fn content(&self) -> EventStream<Text> {
        self.stream(|e| match e {
            ChoiceEvent::Content(t) => Some(t.clone()),
            _ => None,
        })
    }

    /// The reasoning text (`reasoning_content` or `reasoning` on the wire), piece by piece.
    ///
    /// ```
    /// # use choicewise_core::{Completions, Source};
    /// # use futures::TryStreamExt;
    /// # #[tokio::main] async fn main() {
    /// let sse = "data: {\"choices\":[{\"delta\":{\"reasoning\":\"hmm\"},\"finish_reason\":\"stop\"}]}\n\n";
    /// let c = Completions::new(Source::reader(sse.as_bytes())).choice(0).await.unwrap();
    /// let parts: Vec<_> = c.reasoning().try_collect().await.unwrap();
    /// assert_eq!(parts.concat(), "hmm");
    /// # }
    /// ```
    pub fn reasoning(&self) -> EventStream<Text> {
        self.stream(|e| match e {
            ChoiceEvent::Reasoning(t) => Some(t.clone()),
            _ => None,
        })
    }

    /// The refusal text, piece by piece.
    ///
    /// ```
    /// # use choicewise_core::{Completions, Source};
    /// # use futures::TryStreamExt;
    /// # #[tokio::main] async fn main() {
    /// let sse = "data: {\"choices\":[{\"delta\":{\"refusal\":\"No.\"},\"finish_reason\":\"stop\"}]}\n\n";
    /// let c = Completions::new(Source::reader(sse.as_bytes())).choice(0).await.unwrap();
    /// let parts: Vec<_> = c.refusal().try_collect().await.unwrap();
    /// assert_eq!(parts.concat(), "No.");
    /// # }
    /// ```
    pub fn refusal(&self) -> EventStream<Text> {
        self.stream(|e| match e {
            ChoiceEvent::Refusal(t) => Some(t.clone()),
            _ => None,
        })
    }

    /// The log-probabilities of the message's tokens, token by token, typed: each token and
    /// its top-k alternatives as the Chat Completions wire carries them
    /// (`logprobs.content[i]`, see [`TokenLogprob`]). Like every sub-stream it replays from
    /// the start. Empty when the upstream sent none (the request did not ask with
    /// `"logprobs": true`, or the API has none) or the stream did not keep their text
    /// ([`CompletionsBuilder::logprobs`](crate::CompletionsBuilder::logprobs)); malformed
    /// entries are skipped (see [`TokenLogprob`]) and never fail the choice, and the raw JSON
    /// is still in [`ChoiceEvent::Logprobs`] and [`ChoiceOutput::logprobs`]. Each update's
    /// text is parsed as it is read, and dropped once its tokens are given.
    ///
    /// ```
    /// # use choicewise_core::{Completions, Source};
    /// # use futures::TryStreamExt;
    /// # #[tokio::main] async fn main() {
    /// let sse = concat!(
    ///     "data: {\"choices\":[{\"delta\":{\"content\":\"4\"},\"logprobs\":{\"content\":[",
    ///     "{\"token\":\"4\",\"logprob\":-0.25,\"top_logprobs\":[{\"token\":\"4\",\"logprob\":-0.25},{\"token\":\"5\",\"logprob\":-1.75}]}",
    ///     "]},\"finish_reason\":\"stop\"}]}\n\n",
    /// );
    /// let c = Completions::new(Source::reader(sse.as_bytes())).choice(0).await.unwrap();
    /// let tokens: Vec<_> = c.logprobs().try_collect().await.unwrap();
    /// assert_eq!(tokens[0].token, "4");
    /// assert_eq!(tokens[0].top_logprobs[1].logprob, -1.75);
    /// assert_eq!(tokens[0].confidence(), Some(1.0)); // -(−0.25 − 1.75) / 2
    /// # }
    /// ```
    pub fn logprobs(&self) -> EventStream<TokenLogprob> {
        let raw = self.stream(|e| match e {
            ChoiceEvent::Logprobs(v) => Some(v.clone()),
            _ => None,
        });
        EventStream::derived(
            raw.flat_map(|item| {
                let tokens: Vec<Result<TokenLogprob, choicewise_proto::Error>> = match item {
                    Ok(value) => value.tokens().into_iter().map(Ok).collect(),
                    Err(e) => vec![Err(e)],
                };
                futures::stream::iter(tokens)
            })
            .boxed(),
        )
    }

    /// Each token's confidence (see [`TokenLogprob::confidence`]), token by token, for the
    /// tokens that have one (valid top log-probabilities): what a vote guided by confidence
    /// reads. From the log-probabilities' text ([`LogprobsKept::Raw`](crate::LogprobsKept::Raw),
    /// only their numbers parsed), or from the confidences alone when the stream keeps only
    /// those ([`LogprobsKept::Confidence`](crate::LogprobsKept::Confidence)). Like every
    /// sub-stream it replays from the start.
    ///
    /// ```
    /// # use choicewise_core::{Completions, Source};
    /// # use futures::TryStreamExt;
    /// # #[tokio::main] async fn main() {
    /// let sse = concat!(
    ///     "data: {\"choices\":[{\"delta\":{\"content\":\"4\"},\"logprobs\":{\"content\":[",
    ///     "{\"token\":\"4\",\"logprob\":-0.25,\"top_logprobs\":[{\"token\":\"4\",\"logprob\":-0.25},{\"token\":\"5\",\"logprob\":-1.75}]},",
    ///     "{\"token\":\"!\",\"logprob\":-0.5,\"top_logprobs\":[]}",
    ///     "]},\"finish_reason\":\"stop\"}]}\n\n",
    /// );
    /// let c = Completions::new(Source::reader(sse.as_bytes())).choice(0).await.unwrap();
    /// let confidences: Vec<f64> = c.token_confidences().try_collect().await.unwrap();
    /// assert_eq!(confidences, [1.0]); // the second token has no top log-probabilities
    /// # }
    /// ```
    pub fn token_confidences(&self) -> EventStream<f64> {
        self.token_confidences_by(Measure::TopK)
    }

    /// Each token's confidence by `measure` ([`Measure::of`]), token by token, for the
    /// tokens that have one: from the log-probabilities' text
    /// ([`LogprobsKept::Raw`](crate::LogprobsKept::Raw), only the numbers the measure reads
    /// parsed), or the confidences the stream kept
    /// ([`LogprobsKept::Confidence`](crate::LogprobsKept::Confidence), by the measure it
    /// names). Like every sub-stream it replays from the start.
    ///
    /// ```
    /// # use choicewise_core::{Completions, Measure, Source};
    /// # use futures::TryStreamExt;
    /// # #[tokio::main] async fn main() {
    /// let sse = concat!(
    ///     "data: {\"choices\":[{\"delta\":{\"content\":\"4\"},\"logprobs\":{\"content\":[",
    ///     "{\"token\":\"4\",\"logprob\":-0.25},{\"token\":\"!\",\"logprob\":-0.5}",
    ///     "]},\"finish_reason\":\"stop\"}]}\n\n",
    /// );
    /// let c = Completions::new(Source::reader(sse.as_bytes())).choice(0).await.unwrap();
    /// let sampled: Vec<f64> = c.token_confidences_by(Measure::Sampled).try_collect().await.unwrap();
    /// assert_eq!(sampled, [-0.25, -0.5]);
    /// let top_k: Vec<f64> = c.token_confidences_by(Measure::TopK).try_collect().await.unwrap();
    /// assert!(top_k.is_empty()); // no top log-probabilities were sent
    /// # }
    /// ```
    pub fn token_confidences_by(&self, measure: Measure) -> EventStream<f64> {
        enum Tokens {
            Text(choicewise_proto::Logprobs),
            One(f64),
        }
        let raw = self.stream(|e| match e {
            ChoiceEvent::Logprobs(v) => Some(Tokens::Text(v.clone())),
            ChoiceEvent::TokenConfidence(c) => Some(Tokens::One(*c)),
            _ => None,
        });
        EventStream::derived(
            raw.flat_map(move |item| {
                let confidences: Vec<Result<f64, choicewise_proto::Error>> = match item {
                    Ok(Tokens::Text(value)) => (value.confidences_by(measure).into_iter())
                        .flatten()
                        .map(Ok)
                        .collect(),
                    Ok(Tokens::One(c)) => vec![Ok(c)],
                    Err(e) => vec![Err(e)],
                };
                futures::stream::iter(confidences)
            })
            .boxed(),
        )
    }

    /// Progress of the choice's tool calls and legacy function call: each call is started,
    /// receives argument fragments, and is finished with its whole arguments (and their
    /// parse) when the next call starts or the choice finishes — never merely because the
    /// arguments happen to parse. [`FunctionCalls::partial`] gives each call's partial value.
    ///
    /// ```
    /// # use choicewise_core::{Completions, FunctionCallEvent, Source};
    /// # use futures::TryStreamExt;
    /// # #[tokio::main] async fn main() {
    /// let sse = concat!(
    ///     "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"a\\\"\"}}]}}]}\n\n",
    ///     "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\":1}\"}}]},\"finish_reason\":\"tool_calls\"}]}\n\n",
    /// );
    /// let c = Completions::new(Source::reader(sse.as_bytes())).choice(0).await.unwrap();
    /// let events: Vec<_> = c.function_calls().try_collect().await.unwrap();
    /// let FunctionCallEvent::Finished { arguments, value, .. } = events.last().unwrap() else { panic!() };
    /// assert_eq!(&**arguments, "{\"a\":1}");
    /// assert_eq!(value.as_ref().unwrap().to_value()["a"], 1);
    /// # }
    /// ```
    pub fn function_calls(&self) -> FunctionCalls {
        FunctionCalls::new(self.stream(|e| match e {
            ChoiceEvent::FunctionCall(f) => Some(f.clone()),
            _ => None,
        }))
    }

    /// Typed snapshots of the calls' arguments, emitted each time a call's partial value
    /// changes and once more, final, when the call ends: of every call (`None`), or of the
    /// calls of one function (`"get_weather"`). `T` should tolerate what is not
    /// written yet (`Option` or `#[serde(default)]` fields); a partial value that does not
    /// fit `T` is skipped. A call whose final arguments are invalid or do not fit `T` yields
    /// an [`ErrorDetail::InvalidArguments`](crate::ErrorDetail::InvalidArguments) item, and the stream goes on.
    ///
    /// ```
    /// # use choicewise_core::{Completions, Source};
    /// # use futures::TryStreamExt;
    /// #[derive(serde::Deserialize, Debug)]
    /// struct Weather { city: Option<String>, days: Option<u32> }
    /// # #[tokio::main] async fn main() {
    /// let sse = concat!(
    ///     "data: {\"choices\":[{\"delta\":{\"function_call\":{\"name\":\"w\",\"arguments\":\"{\\\"city\\\": \\\"Ro\"}}}]}\n\n",
    ///     "data: {\"choices\":[{\"delta\":{\"function_call\":{\"arguments\":\"me\\\", \\\"days\\\": 3}\"}},\"finish_reason\":\"function_call\"}]}\n\n",
    /// );
    /// let c = Completions::new(Source::reader(sse.as_bytes())).choice(0).await.unwrap();
    /// let snapshots: Vec<_> = c.arguments::<Weather>(None).try_collect().await.unwrap();
    /// let cities: Vec<_> = snapshots.iter().map(|s| s.value.city.clone().unwrap()).collect();
    /// assert_eq!(cities, ["Ro", "Rome", "Rome"]);
    /// assert_eq!(snapshots.last().unwrap().value.days, Some(3));
    /// assert!(snapshots.last().unwrap().is_final);
    /// let of_another: Vec<_> = c.arguments::<Weather>("other").try_collect().await.unwrap();
    /// assert!(of_another.is_empty());
    /// # }
    /// ```
    pub fn arguments<'a, T>(
        &self,
        function: impl Into<Option<&'a str>>,
    ) -> EventStream<ArgumentsSnapshot<T>>
    where
        T: DeserializeOwned + Send + 'static,
    {
        EventStream::derived(crate::arguments::typed(
            self.function_calls(),
            function.into().map(str::to_string),
            self.index(),
        ))
    }

    /// The decoded text of one string field of the calls' arguments (of every call, `None`,
    /// or of one function's), piece by piece as the model writes it (escapes decoded, even
    /// when split across fragments), ready to append to a display. `path` is a JSON pointer (`/answer`, `/items/0/text`) or a top-level
    /// field name (`answer`).
    ///
    /// ```
    /// # use choicewise_core::{Completions, Source};
    /// # use futures::TryStreamExt;
    /// # #[tokio::main] async fn main() {
    /// let sse = concat!(
    ///     "data: {\"choices\":[{\"delta\":{\"function_call\":{\"name\":\"answer_question\",\"arguments\":\"{\\\"answer\\\": \\\"Line 1\\\\\"}}}]}\n\n",
    ///     "data: {\"choices\":[{\"delta\":{\"function_call\":{\"arguments\":\"nLine 2\\\"}\"}},\"finish_reason\":\"stop\"}]}\n\n",
    /// );
    /// let c = Completions::new(Source::reader(sse.as_bytes())).choice(0).await.unwrap();
    /// let pieces: Vec<_> = c.argument_text(None, "answer").try_collect().await.unwrap();
    /// assert_eq!(pieces.concat(), "Line 1\nLine 2");
    /// let pieces: Vec<_> = c.argument_text("answer_question", "/answer").try_collect().await.unwrap();
    /// assert_eq!(pieces.concat(), "Line 1\nLine 2");
    /// # }
    /// ```
    pub fn argument_text<'a>(
        &self,
        function: impl Into<Option<&'a str>>,
        path: &str,
    ) -> EventStream<Text> {
        EventStream::derived(crate::arguments::field_text(
            self.function_calls(),
            function.into().map(str::to_string),
            path,
        ))
    }

    /// Waits for the choice to finish and returns the assembled message with its finish
    /// reason. If the stream failed before the choice finished, the error carries what was
    /// assembled up to then.
    ///
    /// Data that arrives for a choice after its finish is applied to the message returned by
    /// [`Completions::collect`](crate::Completions::collect), not to an earlier `message()`.
    ///
    /// ```
    /// # use choicewise_core::{Completions, Source};
    /// # #[tokio::main] async fn main() {
    /// let sse = "data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}\n\n"; // no finish, no [DONE]
    /// let c = Completions::new(Source::reader(sse.as_bytes())).choice(0).await.unwrap();
    /// let incomplete = c.message().await.unwrap_err();
    /// assert_eq!(incomplete.partial.message.content.as_deref(), Some("Hi"));
    /// assert!(incomplete.error.to_string().contains("without [DONE]"));
    /// # }
    /// ```
    pub async fn message(&self) -> Result<ChoiceOutput, Incomplete<ChoiceOutput>> {
        let sub = Subscription::new(self.entry.log.clone());
        sub.wait(|published| match published.closed() {
            Some(_) => Poll::Ready(()),
            None => Poll::Pending,
        })
        .await;
        let (output, error) = self.entry.log.lock().outcome(self.index());
        match error {
            None => Ok(output),
            Some(error) => Err(Incomplete {
                partial: output,
                error,
            }),
        }
    }

    /// [`message`](Self::message) shared with the choice's log rather than copied (`None`
    /// when the choice did not finish): what a pick reads to judge a choice, so that judging
    /// a choice of megabytes copies none of it.
    pub(crate) async fn shared_message(&self) -> Option<std::sync::Arc<ChoiceOutput>> {
        let sub = Subscription::new(self.entry.log.clone());
        sub.wait(|published| match published.closed() {
            Some(_) => Poll::Ready(()),
            None => Poll::Pending,
        })
        .await;
        let log = self.entry.log.lock();
        match log.error() {
            None => Some(log.shared_output(self.index())),
            Some(_) => None,
        }
    }

    /// Waits for the choice's message and returns its estimated completion tokens (content,
    /// reasoning, refusal and function calls, counted with tiktoken on a blocking thread). For
    /// a choice cut short by an error, the count of what was received.
    ///
    /// ```
    /// # use choicewise_core::{Completions, Source};
    /// # #[tokio::main] async fn main() {
    /// let sse = "data: {\"model\":\"gpt-4o\",\"choices\":[{\"delta\":{\"content\":\"Hello!\"},\"finish_reason\":\"stop\"}]}\n\n";
    /// let c = Completions::new(Source::reader(sse.as_bytes())).choice(0).await.unwrap();
    /// assert_eq!(c.completion_tokens().await, 2);
    /// # }
    /// ```
    #[cfg(feature = "estimate")]
    pub async fn completion_tokens(&self) -> u64 {
        let output = match self.message().await {
            Ok(o) => o,
            Err(incomplete) => incomplete.partial,
        };
        let model = self.life.shared.model();
        let encoding = choicewise_usage::encoding_for_model(model.as_deref().unwrap_or_default());
        tokio::task::spawn_blocking(move || output.completion_tokens(encoding.name))
            .await
            .unwrap_or(0)
    }

    /// Waits for the end of the stream (a provider may report a choice's usage after its
    /// finish, or only at the very end) and returns the choice's completion tokens: the
    /// provider's own figure for this choice when the stream carried one
    /// ([`UsageSource::Reported`](crate::UsageSource::Reported)), else
    /// [`completion_tokens`](Self::completion_tokens) (`Estimated`). A total shared by several
    /// choices is no choice's figure (see `docs/usage.md`).
    ///
    /// ```
    /// # use choicewise_core::{Completions, Source, UsageSource};
    /// # #[tokio::main] async fn main() {
    /// let sse = concat!( // llama.cpp: one usage-only chunk per choice, after its finish
    ///     "data: {\"choices\":[{\"index\":1,\"delta\":{\"content\":\"B\"},\"finish_reason\":\"stop\"}]}\n\n",
    ///     "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":4,\"total_tokens\":13}}\n\n",
    ///     "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"A\"},\"finish_reason\":\"stop\"}]}\n\n",
    ///     "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":6,\"total_tokens\":15}}\n\n",
    ///     "data: [DONE]\n\n",
    /// );
    /// let c = Completions::new(Source::reader(sse.as_bytes()));
    /// let usage = c.choice(1).await.unwrap().usage().await;
    /// assert_eq!((usage.completion_tokens, usage.source), (4, UsageSource::Reported));
    /// assert_eq!(c.usage().await.total_tokens, 9 + 4 + 6);
    /// # }
    /// ```
    pub async fn usage(&self) -> ChoiceUsage {
        let completion = Subscription::new(self.life.shared.clone());
        completion
            .wait(|state| match state.end() {
                Some(_) => Poll::Ready(()),
                None => Poll::Pending,
            })
            .await;
        let reported = self.life.shared.lock().reported_per_choice();
        match reported.get(&self.index()) {
            Some(&tokens) => ChoiceUsage::new(tokens, UsageSource::Reported),
            #[cfg(feature = "estimate")]
            None => ChoiceUsage::new(self.completion_tokens().await, UsageSource::Estimated),
            #[cfg(not(feature = "estimate"))]
            None => ChoiceUsage::new(0, UsageSource::Estimated),
        }
    }

    /// `f` of the choice as [`snapshot`](Self::snapshot) returns it, read where it is
    /// published rather than copied: for a large message read once it has closed. `f` runs
    /// with no lock held, so it may read the choice or its completion again.
    ///
    /// ```
    /// # use choicewise_core::{Completions, Source};
    /// # #[tokio::main] async fn main() {
    /// let sse = "data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"},\"finish_reason\":\"stop\"}]}\n\n";
    /// let c = Completions::new(Source::reader(sse.as_bytes())).choice(0).await.unwrap();
    /// let _ = c.message().await;
    /// assert_eq!(c.inspect(|o| o.message.content.as_ref().map(String::len)), Some(2));
    /// assert!(c.error().is_none());
    /// # }
    /// ```
    pub fn inspect<T>(&self, f: impl FnOnce(&ChoiceOutput) -> T) -> T {
        let output = self.entry.log.lock().shared_output(self.index());
        f(&output)
    }

    /// The error that ended the choice, once it closed with one (the error
    /// [`message`](Self::message) returns); `None` while it is open.
    pub fn error(&self) -> Option<choicewise_proto::Error> {
        self.entry.log.lock().error()
    }

    /// The choice as assembled so far, without waiting: its message once it has closed (at
    /// its finish, a cancel or an error), and while it streams the message its events tell
    /// so far (text, calls, finish; see `Choice::events`).
    ///
    /// ```
    /// # use choicewise_core::{Completions, Source};
    /// # #[tokio::main] async fn main() {
    /// let sse = "data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"},\"finish_reason\":\"stop\"}]}\n\n";
    /// let c = Completions::new(Source::reader(sse.as_bytes())).choice(0).await.unwrap();
    /// let _ = c.message().await;
    /// assert_eq!(c.snapshot().message.content.as_deref(), Some("Hi"));
    /// # }
    /// ```
    pub fn snapshot(&self) -> ChoiceOutput {
        self.entry.log.lock().outcome(self.index()).0
    }
}
