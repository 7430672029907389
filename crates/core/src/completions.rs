//! [`Completions`], the entry point: one streamed completion demultiplexed into choices.

use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::Stream;
use tokio::io::AsyncRead;

use crate::actor::Lifetime;
use crate::actor::reader::{ReaderActor, ReaderArgs};
use crate::choice::Choice;
use crate::config::Config;
use crate::error::{Error, ErrorDetail, Incomplete};
use crate::event::Warning;
use crate::feed::{BoxError, Feed};
use crate::response::ChatCompletion;
use crate::shared::{CompletionShared, Subscription};
use crate::usage::Usage;
use crate::wire::ChatCompletionChunk;

mod builder;
pub use builder::CompletionsBuilder;

/// A streamed chat completion, demultiplexed by choice.
///
/// Create it from raw SSE bytes ([`from_sse`](Self::from_sse), [`from_reader`](Self::from_reader))
/// or from parsed chunks ([`from_chunks`](Self::from_chunks)); a reader actor starts consuming
/// the input at once. Then take the choices as they appear with [`choices`](Self::choices),
/// one by index with [`choice`](Self::choice), or everything at the end with
/// [`collect`](Self::collect). The value is a cheap, cloneable handle (`Send + Sync + 'static`).
///
/// The constructors spawn actors on the current Tokio runtime and panic if called outside
/// one, like `tokio::spawn`.
///
/// When this value and every [`Choice`] and sub-stream taken from it are dropped, the actors
/// stop and the upstream stream is dropped (closing an HTTP body, for instance).
///
/// ```
/// use choicewise_core::Completions;
/// use futures::{StreamExt, TryStreamExt};
///
/// # #[tokio::main] async fn main() {
/// let sse = concat!(
///     "data: {\"choices\":[{\"index\":1,\"delta\":{\"content\":\"B\"}}]}\n\n",
///     "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"A\"},\"finish_reason\":\"stop\"}]}\n\n",
///     "data: {\"choices\":[{\"index\":1,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n",
///     "data: [DONE]\n\n",
/// );
/// let completions = Completions::from_reader(sse.as_bytes());
/// let mut tasks = Vec::new();
/// let mut choices = completions.choices();
/// while let Some(choice) = choices.next().await {
///     tasks.push(tokio::spawn(async move {
///         let text: Vec<_> = choice.content().try_collect().await.unwrap();
///         (choice.index(), text.concat())
///     }));
/// }
/// let mut results = Vec::new();
/// for t in tasks { results.push(t.await.unwrap()); }
/// assert_eq!(results, vec![(1, "B".to_string()), (0, "A".to_string())]);
/// # }
/// ```
#[derive(Clone)]
pub struct Completions {
    shared: Arc<CompletionShared>,
    life: Arc<Lifetime>,
}

impl fmt::Debug for Completions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.shared.lock();
        f.debug_struct("Completions")
            .field("choices", &state.choices.len())
            .field("ended", &state.end.is_some())
            .finish()
    }
}

impl Completions {
    /// Options for the stream: limits and the idle timeout.
    ///
    /// ```
    /// # use choicewise_core::Completions;
    /// let builder = Completions::builder().max_choices(4);
    /// # drop(builder);
    /// ```
    pub fn builder() -> CompletionsBuilder {
        CompletionsBuilder::default()
    }

    /// One completion from several upstreams, with default options: add them to the
    /// returned [`FanOut`](crate::FanOut), then [`start`](crate::FanOut::start).
    ///
    /// ```
    /// # use choicewise_core::Completions;
    /// # #[tokio::main] async fn main() {
    /// let one = "data: {\"choices\":[{\"delta\":{\"content\":\"x\"},\"finish_reason\":\"stop\"}]}\n\n";
    /// let c = Completions::fan_out().reader(one.as_bytes()).reader(one.as_bytes()).start();
    /// assert_eq!(c.collect().await.unwrap().choices.len(), 2);
    /// # }
    /// ```
    pub fn fan_out() -> crate::FanOut {
        crate::FanOut::new(Config::default())
    }

    /// Reads SSE bytes from a stream of reads, with default options.
    ///
    /// ```
    /// # use choicewise_core::Completions;
    /// # #[tokio::main] async fn main() {
    /// let reads = futures::stream::iter([Ok::<_, std::io::Error>(b"data: [DONE]\n\n".to_vec())]);
    /// assert!(Completions::from_sse(reads).outcome().await.is_ok());
    /// # }
    /// ```
    pub fn from_sse<S, B, E>(stream: S) -> Completions
    where
        S: Stream<Item = Result<B, E>> + Send + 'static,
        B: AsRef<[u8]> + Send,
        E: Into<BoxError>,
    {
        Completions::builder().from_sse(stream)
    }

    /// Reads SSE bytes from an `AsyncRead`, with default options.
    ///
    /// ```
    /// # use choicewise_core::Completions;
    /// # #[tokio::main] async fn main() {
    /// assert!(Completions::from_reader(&b"data: [DONE]\n\n"[..]).outcome().await.is_ok());
    /// # }
    /// ```
    pub fn from_reader<R: AsyncRead + Send + 'static>(reader: R) -> Completions {
        Completions::builder().from_reader(reader)
    }

    /// Takes chunks that are already parsed, with default options.
    ///
    /// ```
    /// # use choicewise_core::{Completions, wire::ChatCompletionChunk};
    /// # #[tokio::main] async fn main() {
    /// let chunks = futures::stream::empty::<Result<ChatCompletionChunk<'static>, std::io::Error>>();
    /// assert!(Completions::from_chunks(chunks).outcome().await.is_ok());
    /// # }
    /// ```
    pub fn from_chunks<S, E>(chunks: S) -> Completions
    where
        S: Stream<Item = Result<ChatCompletionChunk<'static>, E>> + Send + 'static,
        E: Into<BoxError>,
    {
        Completions::builder().from_chunks(chunks)
    }

    /// Takes events that are already parsed (Responses, Anthropic Messages or Chat
    /// Completions, as JSON values), with default options; see
    /// [`CompletionsBuilder::from_events`].
    ///
    /// ```
    /// # use choicewise_core::Completions;
    /// # use serde_json::json;
    /// # #[tokio::main] async fn main() {
    /// let events = [
    ///     json!({"type": "response.output_text.delta", "output_index": 0, "content_index": 0, "delta": "Hi"}),
    ///     json!({"type": "response.completed", "response": {"id": "resp_1", "status": "completed", "output": []}}),
    /// ];
    /// let c = Completions::from_events(futures::stream::iter(events.map(Ok::<_, std::io::Error>)));
    /// assert_eq!(c.collect().await.unwrap().choices[0].message.content.as_deref(), Some("Hi"));
    /// # }
    /// ```
    pub fn from_events<S, E>(events: S) -> Completions
    where
        S: Stream<Item = Result<serde_json::Value, E>> + Send + 'static,
        E: Into<BoxError>,
    {
        Completions::builder().from_events(events)
    }

    pub(crate) fn start<F: Feed>(config: Config, feed: F) -> Completions {
        let expected = config
            .request
            .as_deref()
            .and_then(|r| r.get("n"))
            .and_then(serde_json::Value::as_u64)
            .and_then(|n| u32::try_from(n).ok());
        let shared = Arc::new(CompletionShared::new(config));
        let readers = spawn_reader(feed, &shared, 0, expected)
            .into_iter()
            .collect();
        Completions::with_readers(shared, readers)
    }

    pub(crate) fn with_readers(
        shared: Arc<CompletionShared>,
        readers: Vec<ractor::ActorRef<crate::actor::reader::ReaderMsg>>,
    ) -> Completions {
        let life = Arc::new(Lifetime::new(readers, shared.clone()));
        Completions { shared, life }
    }

    /// The choices, each once, in order of first appearance (not index order). The stream
    /// ends when the input ends; if it ended with an error, [`outcome`](Self::outcome) and
    /// every unfinished choice's sub-streams report it.
    ///
    /// ```
    /// # use choicewise_core::Completions;
    /// # use futures::StreamExt;
    /// # #[tokio::main] async fn main() {
    /// let sse = "data: {\"choices\":[{\"index\":2,\"delta\":{}},{\"index\":0,\"delta\":{}}]}\n\ndata: [DONE]\n\n";
    /// let indexes: Vec<u32> = Completions::from_reader(sse.as_bytes())
    ///     .choices().map(|c| c.index()).collect().await;
    /// assert_eq!(indexes, vec![2, 0]);
    /// # }
    /// ```
    pub fn choices(&self) -> Choices {
        Choices {
            sub: Subscription::new(self.shared.clone()),
            cursor: 0,
            life: self.life.clone(),
        }
    }

    /// The choice with this index, once it appears; `None` if the stream ends without it.
    ///
    /// ```
    /// # use choicewise_core::Completions;
    /// # #[tokio::main] async fn main() {
    /// let c = Completions::from_reader(&b"data: [DONE]\n\n"[..]);
    /// assert!(c.choice(0).await.is_none());
    /// # }
    /// ```
    pub async fn choice(&self, index: u32) -> Option<Choice> {
        let sub = Subscription::new(self.shared.clone());
        let found = sub
            .wait(|state| {
                if let Some(c) = state.choices.iter().find(|c| c.index == index) {
                    Poll::Ready(Some(c.clone()))
                } else if state.end.is_some() {
                    Poll::Ready(None)
                } else {
                    Poll::Pending
                }
            })
            .await;
        found.map(|shared| Choice::new(shared, self.life.clone()))
    }

    /// Waits until the input is consumed: `Ok` if it ended well, or the error that ended it.
    ///
    /// ```
    /// # use choicewise_core::{Completions, ErrorKind};
    /// # #[tokio::main] async fn main() {
    /// let c = Completions::from_reader(&b"data: {\"error\":{\"message\":\"quota\"}}\n\n"[..]);
    /// assert!(matches!(c.outcome().await, Err(e) if e.kind() == ErrorKind::Upstream));
    /// # }
    /// ```
    pub async fn outcome(&self) -> Result<(), Error> {
        let sub = Subscription::new(self.shared.clone());
        sub.wait(|state| match &state.end {
            Some(end) => Poll::Ready(end.clone()),
            None => Poll::Pending,
        })
        .await
    }

    /// Waits until every choice is settled and returns the error of each choice that ended
    /// with one, by index: its own (a malformed update, a broken limit, a panic in its actor)
    /// or the stream's, when the stream failed before the choice finished. A choice that
    /// failed on its own does not stop the others, so this may name some choices while the
    /// others finished and [`outcome`](Self::outcome) is `Ok`.
    ///
    /// ```
    /// # use choicewise_core::{Completions, ErrorKind};
    /// # #[tokio::main] async fn main() {
    /// let sse = concat!(
    ///     "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":5}}]}\n\n",
    ///     "data: {\"choices\":[{\"index\":1,\"delta\":{\"content\":\"ok\"},\"finish_reason\":\"stop\"}]}\n\n",
    ///     "data: [DONE]\n\n",
    /// );
    /// let c = Completions::from_reader(sse.as_bytes());
    /// assert!(c.outcome().await.is_ok());
    /// let errors = c.choice_errors().await;
    /// assert_eq!(errors.len(), 1);
    /// let (index, error) = &errors[0];
    /// assert_eq!((*index, error.kind(), error.choice(), error.line()), (0, ErrorKind::Update, Some(0), Some(1)));
    /// # }
    /// ```
    pub async fn choice_errors(&self) -> Vec<(u32, Error)> {
        self.settled().await;
        let choices = self.shared.lock().choices.clone();
        let mut errors: Vec<(u32, Error)> = choices
            .iter()
            .filter_map(|c| {
                let (_, error) = c.lock().outcome();
                error.map(|e| (c.index, e))
            })
            .collect();
        errors.sort_by_key(|(index, _)| *index);
        errors
    }

    /// Waits for the end of the stream and returns the whole completion in the shape of a
    /// non-streaming `chat.completion` response: choices sorted by index, the reported usage
    /// when the stream carried one. On error, what was assembled comes with it.
    ///
    /// ```
    /// # use choicewise_core::Completions;
    /// # #[tokio::main] async fn main() {
    /// let sse = concat!(
    ///     "data: {\"id\":\"c1\",\"model\":\"m\",\"choices\":[{\"index\":1,\"delta\":{\"content\":\"B\"},\"finish_reason\":\"stop\"}]}\n\n",
    ///     "data: {\"id\":\"c1\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"A\"},\"finish_reason\":\"stop\"}]}\n\n",
    ///     "data: [DONE]\n\n",
    /// );
    /// let completion = Completions::from_reader(sse.as_bytes()).collect().await.unwrap();
    /// assert_eq!(completion.object, "chat.completion");
    /// assert_eq!(completion.choices[0].message.content.as_deref(), Some("A"));
    /// assert_eq!(completion.choices[1].message.content.as_deref(), Some("B"));
    /// # }
    /// ```
    pub async fn collect(&self) -> Result<ChatCompletion, Incomplete<ChatCompletion>> {
        self.settled().await;
        let (mut completion, error) = self.shared.assemble();
        let reported = self.shared.lock().reported_usage();
        if reported.is_some() || self.shared.config.estimate_usage {
            let usage = self.usage().await;
            let reported = self.shared.lock().reported_per_choice();
            crate::estimate::fill_choice_usage(&reported, &mut completion.choices, Some(&usage));
            completion.usage = Some(usage);
        }
        match error {
            None => Ok(completion),
            Some(error) => Err(Incomplete {
                partial: completion,
                error,
            }),
        }
    }

    /// Waits until the input is consumed and every choice's actor is done.
    async fn settled(&self) {
        let _ = self.outcome().await;
        let choices = self.shared.lock().choices.clone();
        for choice in choices {
            let sub = Subscription::new(choice);
            sub.wait(|state| match state.settled {
                true => Poll::Ready(()),
                false => Poll::Pending,
            })
            .await;
        }
    }

    /// Waits for the end of the stream and returns the token usage: the provider's figures
    /// when the stream carried them ([`UsageSource::Reported`](crate::UsageSource::Reported);
    /// a later chunk without usage never erases them, and vLLM's running per-choice counts are
    /// combined across choices), otherwise an estimate counted with tiktoken on a blocking
    /// thread ([`UsageSource::Estimated`](crate::UsageSource::Estimated)). Computed once.
    ///
    /// ```
    /// # use choicewise_core::{Completions, UsageSource};
    /// # #[tokio::main] async fn main() {
    /// let sse = concat!(
    ///     "data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"},\"finish_reason\":\"stop\"}],\"usage\":null}\n\n",
    ///     "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":1,\"total_tokens\":10}}\n\n",
    ///     "data: [DONE]\n\n",
    /// );
    /// let usage = Completions::from_reader(sse.as_bytes()).usage().await;
    /// assert_eq!((usage.total_tokens, usage.source), (10, UsageSource::Reported));
    /// # }
    /// ```
    pub async fn usage(&self) -> Usage {
        self.settled().await;
        let shared = &self.shared;
        shared
            .usage
            .get_or_init(|| async {
                // A fan-out: each upstream's reported usage, or `None` and its choices.
                let (reported, parts) = {
                    let state = shared.lock();
                    let parts: Option<Vec<_>> = state.fan_out.then(|| {
                        state
                            .upstreams
                            .iter()
                            .map(|u| {
                                let indexes: Vec<u32> = u.map.values().copied().collect();
                                let own = (u.request.clone(), u.meta.model.clone());
                                (u.reported_usage(), indexes, own)
                            })
                            .collect()
                    });
                    (state.reported_usage(), parts)
                };
                if let Some(reported) = reported {
                    return reported;
                }
                let (completion, _) = shared.assemble();
                let model = shared.model();
                let request = shared.config.request.clone();
                let counting = tokio::task::spawn_blocking(move || match parts {
                    None => Usage::estimate(model, request.as_deref(), &completion.choices),
                    Some(parts) => Usage::sum(
                        parts
                            .into_iter()
                            .map(|(reported, indexes, (own_request, own_model))| {
                                reported.unwrap_or_else(|| {
                                    let request = own_request.as_deref().or(request.as_deref());
                                    let model = own_model.or_else(|| model.clone());
                                    let choices: Vec<_> = completion
                                        .choices
                                        .iter()
                                        .filter(|c| indexes.contains(&c.index))
                                        .cloned()
                                        .collect();
                                    Usage::estimate(model, request, &choices)
                                })
                            })
                            .collect(),
                    ),
                });
                counting
                    .await
                    .unwrap_or_else(|e| Usage::failed_estimate(e.to_string()))
            })
            .await
            .clone()
    }

    /// Cancels every choice still open and every choice still to appear (see
    /// [`Choice::cancel`]), and returns the indexes cancelled. Each cancel takes effect after
    /// the updates its choice had already received, so a choice whose received updates
    /// finish it is listed here yet ends finished. Each upstream is dropped
    /// as soon as no choice of it is still finishing; choices that finished keep their
    /// messages, and [`collect`](Self::collect) still returns everything.
    ///
    /// ```
    /// # use choicewise_core::Completions;
    /// # use futures::{StreamExt, stream};
    /// # #[tokio::main] async fn main() {
    /// let partial = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"}}]}\n\n";
    /// let stalled = stream::iter([Ok::<_, std::io::Error>(partial)]).chain(stream::pending());
    /// let c = Completions::from_sse(stalled);
    /// c.choice(0).await.unwrap();
    /// assert_eq!(c.cancel(), [0]);
    /// let completion = c.collect().await.unwrap(); // the stalled upstream was dropped
    /// assert!(completion.choices[0].cancelled);
    /// # }
    /// ```
    pub fn cancel(&self) -> Vec<u32> {
        self.shared.close()
    }

    /// How many choices the completion will have, when the upstreams declared it: the sum
    /// of a fan-out's `n` when every upstream has one, else the request's `n`.
    pub(crate) fn expected_choices(&self) -> Option<usize> {
        let state = self.shared.lock();
        let mut total = 0usize;
        for u in &state.upstreams {
            match u.indexing {
                crate::shared::Indexing::Block { n, .. } => total += n as usize,
                crate::shared::Indexing::FirstSeen => return None,
                crate::shared::Indexing::AsSent => {
                    let n = self.shared.config.request.as_deref()?.get("n")?.as_u64()?;
                    total += usize::try_from(n).ok()?;
                }
            }
        }
        Some(total)
    }

    /// How many choices have appeared so far.
    pub(crate) fn choice_count(&self) -> usize {
        self.shared.lock().choices.len()
    }

    /// Waits until the cancels of these choices have taken effect (each waits for the updates
    /// received before it), keeps in `indexes` the choices that ended cancelled (dropping any
    /// that one of those updates finished or failed instead), and returns their outputs. An
    /// index with no choice yet (declared, never seen) stays: it is listed as cancelled.
    pub(crate) async fn cancels_taken(
        &self,
        indexes: &mut Vec<u32>,
    ) -> Vec<crate::response::ChoiceOutput> {
        let choices: Vec<_> = (self.shared.lock().choices.iter())
            .filter(|c| indexes.contains(&c.index))
            .cloned()
            .collect();
        let mut outputs = Vec::new();
        for choice in choices {
            let sub = Subscription::new(choice.clone());
            let output = sub
                .wait(|state| match state.is_cancelling() {
                    true => Poll::Pending,
                    false => Poll::Ready(state.output()),
                })
                .await;
            match output.cancelled {
                true => outputs.push(output),
                false => indexes.retain(|&i| i != choice.index),
            }
        }
        outputs
    }

    /// The model to count tokens with.
    pub(crate) fn model(&self) -> Option<String> {
        self.shared.model()
    }

    /// The warnings so far: tolerated irregularities of the input, each with its line and
    /// choice.
    ///
    /// ```
    /// # use choicewise_core::{Completions, WarningKind};
    /// # #[tokio::main] async fn main() {
    /// let sse = "data: {\"choices\":[{\"delta\":{}, \"finish_reason\":\"stop\"}]}{\"choices\":[]}\n\ndata: [DONE]\n\n";
    /// let c = Completions::from_reader(sse.as_bytes());
    /// c.collect().await.unwrap();
    /// assert!(matches!(c.warnings()[0].kind, WarningKind::ConcatenatedObjects { count: 2 }));
    /// # }
    /// ```
    pub fn warnings(&self) -> Vec<Warning> {
        self.shared.lock().warnings.clone()
    }
}

/// Starts the reader of upstream `upstream`; if it cannot start, records the upstream's end.
pub(crate) fn spawn_reader<F: Feed>(
    feed: F,
    shared: &Arc<CompletionShared>,
    upstream: usize,
    expected: Option<u32>,
) -> Option<ractor::ActorRef<crate::actor::reader::ReaderMsg>> {
    let args = ReaderArgs {
        feed,
        shared: shared.clone(),
        upstream,
        expected,
    };
    match ractor::ActorRuntime::spawn_instant(None, ReaderActor::<F>::new(), args) {
        Ok((reader, _)) => Some(reader),
        Err(e) => {
            let mut state = shared.lock();
            let error = state.upstream_error(
                upstream,
                Error::from(ErrorDetail::ActorFailed {
                    choice: None,
                    message: format!("could not start the reader: {e}"),
                }),
            );
            state.end_upstream(upstream, Default::default(), Err(error));
            None
        }
    }
}

/// The stream of a completion's [`Choice`]s, in order of first appearance
/// (see [`Completions::choices`]).
///
/// ```
/// # use choicewise_core::Completions;
/// # use futures::StreamExt;
/// # #[tokio::main] async fn main() {
/// let mut choices = Completions::from_reader(&b"data: [DONE]\n\n"[..]).choices();
/// assert!(choices.next().await.is_none());
/// # }
/// ```
pub struct Choices {
    sub: Subscription<CompletionShared>,
    cursor: usize,
    life: Arc<Lifetime>,
}

impl fmt::Debug for Choices {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Choices")
            .field("cursor", &self.cursor)
            .finish()
    }
}

impl Stream for Choices {
    type Item = Choice;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Choice>> {
        let this = self.get_mut();
        let cursor = &mut this.cursor;
        let next = this.sub.poll_with(cx, |state| {
            if let Some(c) = state.choices.get(*cursor) {
                *cursor += 1;
                Poll::Ready(Some(c.clone()))
            } else if state.end.is_some() {
                Poll::Ready(None)
            } else {
                Poll::Pending
            }
        });
        next.map(|c| c.map(|shared| Choice::new(shared, this.life.clone())))
    }
}

/// How many actors of this crate are alive in the process: the readers and choice actors of
/// every completion not yet ended or dropped (choice actors retired while their upstream is
/// quiet do not count). A diagnostic for leak tests.
///
/// ```
/// # use choicewise_core::{live_actors, Completions};
/// # #[tokio::main] async fn main() {
/// let c = Completions::from_reader(&b"data: [DONE]\n\n"[..]);
/// c.collect().await.unwrap();
/// drop(c);
/// # tokio::time::sleep(std::time::Duration::from_millis(50)).await;
/// # let _ = live_actors();
/// # }
/// ```
pub fn live_actors() -> usize {
    crate::shared::LIVE_ACTORS.load(std::sync::atomic::Ordering::Acquire)
}

/// How many actors of this crate have started in the process so far, readers and choice
/// actors, counting a choice actor again each time it comes back after retiring (see
/// [`CompletionsBuilder::hibernate_after`]). A diagnostic.
///
/// ```
/// # use choicewise_core::{actors_started, Completions};
/// # #[tokio::main] async fn main() {
/// let before = actors_started();
/// let sse = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}\n\ndata: [DONE]\n\n";
/// Completions::from_reader(sse.as_bytes()).collect().await.unwrap();
/// assert!(actors_started() >= before + 2); // the reader and choice 0's actor
/// # }
/// ```
pub fn actors_started() -> usize {
    crate::shared::ACTORS_STARTED.load(std::sync::atomic::Ordering::Acquire)
}
