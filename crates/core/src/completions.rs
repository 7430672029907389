//! [`Completions`], the entry point: one streamed completion demultiplexed into choices.

use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use choicewise_proto::{
    ChatCompletion, ChoiceUsage, Error, Incomplete, Usage, UsageSource, Warning,
};
use futures::Stream;

use crate::actor::reader::spawn_reader;
use crate::choice::Choice;
use crate::completion::{ChoiceEntry, CompletionShared, Mode};
use crate::config::Config;
use crate::lifetime::Lifetime;
use crate::log::Subscription;
use crate::msg::{CancelReason, Close};
use crate::source::Source;

mod usage;

use usage::usage_counting;

/// A streamed chat completion, demultiplexed by choice.
///
/// Start it from a [`Source`] ([`Completions::new`], or [`Completions::builder`] for options
/// and for several sources); a reader actor starts consuming the input at once. Then take
/// the choices as they appear with [`choices`](Self::choices), one by index with
/// [`choice`](Self::choice), or everything at the end with [`collect`](Self::collect). The
/// value is a cheap, cloneable handle (`Send + Sync + 'static`).
///
/// Starting one spawns actors on the current Tokio runtime and panics outside one, like
/// `tokio::spawn`.
///
/// When this value and every [`Choice`] and sub-stream taken from it are dropped, the actors
/// stop and the upstream is dropped (closing an HTTP body, for instance).
///
/// ```
/// use choicewise_core::{Completions, Source};
/// use futures::{StreamExt, TryStreamExt};
///
/// # #[tokio::main] async fn main() {
/// let sse = concat!(
///     "data: {\"choices\":[{\"index\":1,\"delta\":{\"content\":\"B\"}}]}\n\n",
///     "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"A\"},\"finish_reason\":\"stop\"}]}\n\n",
///     "data: {\"choices\":[{\"index\":1,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n",
///     "data: [DONE]\n\n",
/// );
/// let completions = Completions::new(Source::reader(sse.as_bytes()));
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
    pub(crate) shared: Arc<CompletionShared>,
    pub(crate) life: Arc<Lifetime>,
}

impl fmt::Debug for Completions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.shared.lock();
        f.debug_struct("Completions")
            .field("choices", &state.choices.len())
            .field("ended", &state.end().is_some())
            .finish()
    }
}

impl Completions {
    /// A completion of this `mode` reading `sources`.
    pub(crate) fn start(config: Config, mode: Mode, sources: Vec<Source>) -> Completions {
        let completions = Completions::adding(config, mode);
        for source in sources {
            completions.add(source);
        }
        completions.added();
        completions
    }

    /// A completion of this `mode` whose constructor adds its sources, then calls
    /// [`added`](Self::added).
    pub(crate) fn adding(config: Config, mode: Mode) -> Completions {
        let shared = Arc::new(CompletionShared::new(config, mode));
        Completions {
            life: Arc::new(Lifetime::new(shared.clone())),
            shared,
        }
    }

    /// Its constructor added its sources: the completion ends once they have (and, for one
    /// of samples, once sampling stopped).
    pub(crate) fn added(&self) {
        let mut state = self.shared.lock();
        state.adding = false;
        state.end_if_done();
    }

    /// Starts reading one more source; its number among the completion's upstreams.
    pub(crate) fn add(&self, source: Source) -> usize {
        let expected = source.expected();
        let idle = source.idle.or(self.shared.config.idle_timeout);
        let k = self.shared.lock().add_upstream(expected, source.request);
        if let Some(reader) = spawn_reader(source.input, idle, &self.shared, k, expected) {
            self.life.keep(reader.clone());
            let mut state = self.shared.lock();
            if state.upstreams[k].end.is_none() {
                if let crate::completion::CompletionPhase::Closing(close) = &state.phase {
                    // Closed while it started: it may have missed the close.
                    let _ = reader.send_message(crate::msg::ReaderMsg::Close(close.clone()));
                }
                state.upstreams[k].reader = Some(reader);
            }
        }
        k
    }

    /// The choices, each once, in order of first appearance (not index order). The stream
    /// ends when the input ends; if it ended with an error, [`outcome`](Self::outcome) and
    /// every unfinished choice's sub-streams report it.
    ///
    /// ```
    /// # use choicewise_core::{Completions, Source};
    /// # use futures::StreamExt;
    /// # #[tokio::main] async fn main() {
    /// let sse = "data: {\"choices\":[{\"index\":2,\"delta\":{}},{\"index\":0,\"delta\":{}}]}\n\ndata: [DONE]\n\n";
    /// let indexes: Vec<u32> = Completions::new(Source::reader(sse.as_bytes()))
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
    /// # use choicewise_core::{Completions, Source};
    /// # #[tokio::main] async fn main() {
    /// let c = Completions::new(Source::reader(&b"data: [DONE]\n\n"[..]));
    /// assert!(c.choice(0).await.is_none());
    /// # }
    /// ```
    pub async fn choice(&self, index: u32) -> Option<Choice> {
        let sub = Subscription::new(self.shared.clone());
        let found = sub
            .wait(|state| {
                if let Some(c) = state.choices.iter().find(|c| c.index() == index) {
                    Poll::Ready(Some(c.clone()))
                } else if state.end().is_some() {
                    Poll::Ready(None)
                } else {
                    Poll::Pending
                }
            })
            .await;
        found.map(|entry| Choice::new(entry, self.life.clone()))
    }

    /// Waits until the input is consumed: `Ok` if it ended well, or the error that ended it.
    ///
    /// ```
    /// # use choicewise_core::{Completions, ErrorKind, Source};
    /// # #[tokio::main] async fn main() {
    /// let c = Completions::new(Source::reader(&b"data: {\"error\":{\"message\":\"quota\"}}\n\n"[..]));
    /// assert!(matches!(c.outcome().await, Err(e) if e.kind() == ErrorKind::Upstream));
    /// # }
    /// ```
    pub async fn outcome(&self) -> Result<(), Error> {
        let sub = Subscription::new(self.shared.clone());
        sub.wait(|state| match state.end() {
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
    /// # use choicewise_core::{Completions, ErrorKind, Source};
    /// # #[tokio::main] async fn main() {
    /// let sse = concat!(
    ///     "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":5}}]}\n\n",
    ///     "data: {\"choices\":[{\"index\":1,\"delta\":{\"content\":\"ok\"},\"finish_reason\":\"stop\"}]}\n\n",
    ///     "data: [DONE]\n\n",
    /// );
    /// let c = Completions::new(Source::reader(sse.as_bytes()));
    /// assert!(c.outcome().await.is_ok());
    /// let errors = c.choice_errors().await;
    /// assert_eq!(errors.len(), 1);
    /// let (index, error) = &errors[0];
    /// assert_eq!((*index, error.kind(), error.choice(), error.line()), (0, ErrorKind::Update, Some(0), Some(1)));
    /// # }
    /// ```
    pub async fn choice_errors(&self) -> Vec<(u32, Error)> {
        self.settled().await;
        let mut errors: Vec<(u32, Error)> = self
            .entries()
            .iter()
            .filter_map(|c| {
                let (_, error) = c.log.lock().outcome(c.index());
                error.map(|e| (c.index(), e))
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
    /// # use choicewise_core::{Completions, Source};
    /// # #[tokio::main] async fn main() {
    /// let sse = concat!(
    ///     "data: {\"id\":\"c1\",\"model\":\"m\",\"choices\":[{\"index\":1,\"delta\":{\"content\":\"B\"},\"finish_reason\":\"stop\"}]}\n\n",
    ///     "data: {\"id\":\"c1\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"A\"},\"finish_reason\":\"stop\"}]}\n\n",
    ///     "data: [DONE]\n\n",
    /// );
    /// let completion = Completions::new(Source::reader(sse.as_bytes())).collect().await.unwrap();
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
            choicewise_proto::driver::fill_choice_usage(
                &reported,
                &mut completion.choices,
                Some(&usage),
            );
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

    /// `f` of each choice as [`collect`](Self::collect) returns it (its own usage as
    /// [`ChoiceOutput::usage`](choicewise_proto::ChoiceOutput::usage) says it, passed apart),
    /// read where it is published rather than copied: a choice's message is held once however
    /// many read it. By index; each choice as it is now, so call it once the completion is
    /// over (after [`usage`](Self::usage) or [`collect`](Self::collect)) for their ends. `f`
    /// runs with no lock held, so it may read the completion again.
    ///
    /// ```
    /// # use choicewise_core::{Completions, Source};
    /// # #[tokio::main] async fn main() {
    /// let sse = "data: {\"model\":\"m-1\",\"choices\":[{\"delta\":{\"content\":\"Hi\"},\"finish_reason\":\"stop\"}]}\n\n";
    /// let c = Completions::new(Source::reader(sse.as_bytes()));
    /// let usage = c.usage().await;
    /// let ends = c.inspect(|o, u| (o.finish_reason.clone(), u.map(|u| u.completion_tokens)));
    /// assert_eq!(ends, [(Some("stop".to_string()), Some(usage.completion_tokens))]);
    /// assert_eq!(c.response_model().as_deref(), Some("m-1"));
    /// # }
    /// ```
    pub fn inspect<T>(
        &self,
        mut f: impl FnMut(&choicewise_proto::ChoiceOutput, Option<ChoiceUsage>) -> T,
    ) -> Vec<T> {
        let (mut entries, reported) = {
            let state = self.shared.lock();
            (state.choices.clone(), state.reported_per_choice())
        };
        entries.sort_by_key(|c| c.index());
        let estimate = (self.shared.usage.get())
            .and_then(|u| u.estimate.as_ref())
            .map(|e| &e.choices);
        (entries.iter())
            .map(|c| {
                let index = c.index();
                let usage = match (reported.get(&index), estimate.and_then(|e| e.get(&index))) {
                    (Some(&n), _) => Some(ChoiceUsage::new(n, UsageSource::Reported)),
                    (None, Some(&n)) => Some(ChoiceUsage::new(n, UsageSource::Estimated)),
                    (None, None) => None,
                };
                let output = c.log.lock().shared_output(index);
                f(&output, usage)
            })
            .collect()
    }

    /// The model the stream named in its answer, if it named one.
    ///
    /// ```
    /// # use choicewise_core::{Completions, Source};
    /// # #[tokio::main] async fn main() {
    /// let c = Completions::new(Source::reader(&b"data: [DONE]\n\n"[..]));
    /// c.outcome().await.unwrap();
    /// assert_eq!(c.response_model(), None);
    /// # }
    /// ```
    pub fn response_model(&self) -> Option<String> {
        self.shared.lock().meta.model().map(str::to_string)
    }

    /// The completion's choices so far.
    pub(crate) fn entries(&self) -> Vec<Arc<ChoiceEntry>> {
        self.shared.lock().choices.clone()
    }

    /// Waits until the stream is over and every choice has settled.
    pub(crate) async fn settled(&self) {
        let _ = self.outcome().await;
        for choice in self.entries() {
            let sub = Subscription::new(choice.log.clone());
            sub.wait(|published| match published.phase.is_settled() {
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
    /// thread ([`UsageSource::Estimated`](crate::UsageSource::Estimated); without the
    /// `estimate` feature, zeros saying so). Computed once.
    ///
    /// ```
    /// # use choicewise_core::{Completions, Source, UsageSource};
    /// # #[tokio::main] async fn main() {
    /// let sse = concat!(
    ///     "data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"},\"finish_reason\":\"stop\"}],\"usage\":null}\n\n",
    ///     "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":1,\"total_tokens\":10}}\n\n",
    ///     "data: [DONE]\n\n",
    /// );
    /// let usage = Completions::new(Source::reader(sse.as_bytes())).usage().await;
    /// assert_eq!((usage.total_tokens, usage.source), (10, UsageSource::Reported));
    /// # }
    /// ```
    pub async fn usage(&self) -> Usage {
        self.settled().await;
        let shared = &self.shared;
        shared
            .usage
            .get_or_init(|| async {
                match usage_counting(shared) {
                    Ok(reported) => reported,
                    // A small count is made here: a hand-off would cost as much.
                    Err((quick, count)) => crate::counting::counted(quick, count)
                        .await
                        .unwrap_or_else(|| Usage::failed_estimate("counting panicked".into())),
                }
            })
            .await
            .clone()
    }

    /// The usage as it stands, without waiting: as [`usage`](Self::usage) says, of what was
    /// received so far (an estimate counted on the calling thread, in bounded time). For a
    /// caller that cannot wait for the end, such as one accounting for a completion it
    /// cancels as it drops it; the figures may be below those `usage` gives at the end.
    ///
    /// ```
    /// # use choicewise_core::{Completions, Source, UsageSource};
    /// # #[tokio::main] async fn main() {
    /// let sse = "data: {\"choices\":[{\"delta\":{\"content\":\"Hello!\"},\"finish_reason\":\"stop\"}]}\n\n";
    /// let c = Completions::new(Source::reader(sse.as_bytes()));
    /// c.choice(0).await.unwrap().message().await.unwrap();
    /// let usage = c.usage_now();
    /// assert_eq!((usage.completion_tokens, usage.source), (2, UsageSource::Estimated));
    /// # }
    /// ```
    pub fn usage_now(&self) -> Usage {
        match usage_counting(&self.shared) {
            Ok(reported) => reported,
            Err((_, count)) => count(),
        }
    }

    /// The indexes of the choices still open: not finished, failed or cancelled.
    ///
    /// ```
    /// # use choicewise_core::{Completions, Source};
    /// # #[tokio::main] async fn main() {
    /// let c = Completions::new(Source::reader(&b"data: [DONE]\n\n"[..]));
    /// c.outcome().await.unwrap();
    /// assert!(c.open_choices().is_empty());
    /// # }
    /// ```
    pub fn open_choices(&self) -> Vec<u32> {
        let mut open: Vec<u32> = (self.entries().iter())
            .filter(|c| c.log.lock().closed().is_none())
            .map(|c| c.index())
            .collect();
        open.sort_unstable();
        open
    }

    /// Cancels every choice still open and every choice still to appear (see
    /// [`Choice::cancel`]), waits until the completion is over, and returns the indexes of
    /// the choices that ended cancelled. Each cancel takes effect after the updates its
    /// choice had already received, so a choice whose received updates finish it ends
    /// finished. Each upstream is dropped as soon as no choice of it is still finishing;
    /// choices that finished keep their messages, and [`collect`](Self::collect) still
    /// returns everything.
    ///
    /// ```
    /// # use choicewise_core::{Completions, Source};
    /// # use futures::{StreamExt, stream};
    /// # #[tokio::main] async fn main() {
    /// let partial = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"}}]}\n\n";
    /// let stalled = stream::iter([Ok::<_, std::io::Error>(partial)]).chain(stream::pending());
    /// let c = Completions::new(Source::sse(stalled));
    /// c.choice(0).await.unwrap();
    /// assert_eq!(c.cancel().await, [0]);
    /// let completion = c.collect().await.unwrap(); // the stalled upstream was dropped
    /// assert!(completion.choices[0].cancelled);
    /// # }
    /// ```
    pub async fn cancel(&self) -> Vec<u32> {
        self.cancel_for(CancelReason::Closing).await
    }

    /// As [`cancel`](Self::cancel), for `reason`: each choice it cancels ends with
    /// [`ChoiceEvent::Cancelled`](crate::ChoiceEvent::Cancelled) carrying it.
    ///
    /// ```
    /// # use choicewise_core::{cancel::CancelReason, ChoiceEvent, Completions, Source};
    /// # use futures::{StreamExt, stream};
    /// # #[tokio::main] async fn main() {
    /// let partial = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"}}]}\n\n";
    /// let stalled = stream::iter([Ok::<_, std::io::Error>(partial)]).chain(stream::pending());
    /// let c = Completions::new(Source::sse(stalled));
    /// let choice = c.choice(0).await.unwrap();
    /// assert_eq!(c.cancel_for(CancelReason::ShuttingDown).await, [0]);
    /// let events: Vec<_> = choice.events().map(Result::unwrap).collect().await;
    /// assert_eq!(events.last(), Some(&ChoiceEvent::Cancelled(CancelReason::ShuttingDown)));
    /// # }
    /// ```
    pub async fn cancel_for(&self, reason: CancelReason) -> Vec<u32> {
        self.shared.close(Close::new([], reason));
        self.settled().await;
        let mut cancelled: Vec<u32> = self
            .entries()
            .iter()
            .filter(|c| c.log.lock().phase.is_cancelled())
            .map(|c| c.index())
            .collect();
        cancelled.sort_unstable();
        cancelled
    }

    /// Cancels every choice but those in `keep` (indexes), and every choice still to appear
    /// (a sample not started, a declared choice of a request not answered yet), without
    /// waiting; the kept choices stream on. Each upstream with no kept choice left is dropped
    /// at once, closing its connection, even before its first byte; a completion of samples
    /// starts no more. For a program that picked its choices by its own rule.
    ///
    /// ```
    /// # use choicewise_core::{Completions, Source};
    /// # use futures::stream;
    /// # #[tokio::main] async fn main() {
    /// let quick = "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"},\"finish_reason\":\"stop\"}]}\n\n";
    /// let silent = stream::pending::<Result<&str, std::io::Error>>(); // no byte yet
    /// let c = Completions::builder().fan_out([Source::reader(quick.as_bytes()).n(1), Source::sse(silent).n(1)]);
    /// c.choice(0).await.unwrap().message().await.unwrap();
    /// c.cancel_except(&[0]);
    /// let whole = c.collect().await.unwrap(); // the silent upstream was dropped
    /// assert!(whole.choices[1].cancelled);
    /// # }
    /// ```
    pub fn cancel_except(&self, keep: &[u32]) {
        self.cancel_except_for(keep, CancelReason::Closing);
    }

    /// As [`cancel_except`](Self::cancel_except), for `reason`: each choice it cancels
    /// ends with [`ChoiceEvent::Cancelled`](crate::ChoiceEvent::Cancelled) carrying it.
    ///
    /// ```
    /// # use choicewise_core::{cancel::CancelReason, ChoiceEvent, Completions, Source};
    /// # use futures::{StreamExt, stream};
    /// # #[tokio::main] async fn main() {
    /// let quick = "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"},\"finish_reason\":\"stop\"}]}\n\n";
    /// let opened = "data: {\"choices\":[{\"delta\":{\"content\":\"h\"}}]}\n\n";
    /// let slow = stream::iter([Ok::<_, std::io::Error>(opened)]).chain(stream::pending());
    /// let c = Completions::builder().fan_out([Source::reader(quick.as_bytes()).n(1), Source::sse(slow).n(1)]);
    /// let slow = c.choice(1).await.unwrap();
    /// c.cancel_except_for(&[0], CancelReason::ReaderGone);
    /// let events: Vec<_> = slow.events().map(Result::unwrap).collect().await;
    /// assert_eq!(events.last(), Some(&ChoiceEvent::Cancelled(CancelReason::ReaderGone)));
    /// # }
    /// ```
    pub fn cancel_except_for(&self, keep: &[u32], reason: CancelReason) {
        self.shared.close(Close::new(keep, reason));
    }

    /// How many choices the completion will have, when every upstream declared it.
    pub(crate) fn expected_choices(&self) -> Option<usize> {
        if self.shared.lock().open_ended() {
            return None;
        }
        self.declared_choices()
    }

    /// The choices the upstreams started so far declare (their `n`), whether or not more
    /// will be added; `None` if one does not say.
    pub(crate) fn declared_choices(&self) -> Option<usize> {
        let state = self.shared.lock();
        let mut total = 0usize;
        for u in &state.upstreams {
            match u.indexing {
                crate::completion::Indexing::Block { n, .. } => total += n as usize,
                crate::completion::Indexing::FirstSeen => return None,
                crate::completion::Indexing::AsSent => {
                    let n = u.request.as_deref()?.get("n")?.as_u64()?;
                    total += usize::try_from(n).ok()?;
                }
            }
        }
        Some(total)
    }

    /// The choice `index`'s place in the order the stream finished the choices (`0` first),
    /// once its finish reason was routed: known before its message settles; `None` for a
    /// choice that has not finished (or ended without a finish: failed, cancelled).
    ///
    /// ```
    /// # use choicewise_core::{Completions, Source};
    /// # #[tokio::main] async fn main() {
    /// let sse = concat!(
    ///     "data: {\"choices\":[{\"index\":1,\"delta\":{\"content\":\"b\"},\"finish_reason\":\"stop\"}]}\n\n",
    ///     "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"},\"finish_reason\":\"stop\"}]}\n\n",
    ///     "data: [DONE]\n\n",
    /// );
    /// let c = Completions::new(Source::reader(sse.as_bytes()));
    /// let _ = c.usage().await;
    /// assert_eq!((c.finish_place(1), c.finish_place(0)), (Some(0), Some(1)));
    /// assert_eq!(c.finish_place(2), None);
    /// # }
    /// ```
    pub fn finish_place(&self, index: u32) -> Option<u64> {
        self.shared.lock().finish_place(index)
    }

    /// The choices the stream finished at places `from..` of the finish order, in order.
    pub(crate) fn finished_from(&self, from: usize) -> Vec<u32> {
        self.shared.lock().finished_from(from).to_vec()
    }

    /// How many choices have appeared.
    pub(crate) fn choice_count(&self) -> usize {
        self.shared.lock().choices.len()
    }

    /// The outputs of these choices, as published.
    pub(crate) fn outputs(&self, indexes: &[u32]) -> Vec<choicewise_proto::ChoiceOutput> {
        self.entries()
            .iter()
            .filter(|c| indexes.contains(&c.index()))
            .map(|c| c.log.lock().outcome(c.index()).0)
            .collect()
    }

    /// The model to count tokens with.
    #[cfg(feature = "estimate")]
    pub(crate) fn model(&self) -> Option<String> {
        self.shared.model()
    }

    /// The warnings so far: tolerated irregularities of the input, each with its line and
    /// choice.
    ///
    /// ```
    /// # use choicewise_core::{Completions, Source, WarningKind};
    /// # #[tokio::main] async fn main() {
    /// let sse = "data: {\"choices\":[{\"delta\":{}, \"finish_reason\":\"stop\"}]}{\"choices\":[]}\n\ndata: [DONE]\n\n";
    /// let c = Completions::new(Source::reader(sse.as_bytes()));
    /// c.collect().await.unwrap();
    /// assert!(matches!(c.warnings()[0].kind, WarningKind::ConcatenatedObjects { count: 2 }));
    /// # }
    /// ```
    pub fn warnings(&self) -> Vec<Warning> {
        self.shared.lock().warnings.clone()
    }
}

/// The stream of a completion's [`Choice`]s, in order of first appearance
/// (see [`Completions::choices`]).
///
/// ```
/// # use choicewise_core::{Completions, Source};
/// # use futures::StreamExt;
/// # #[tokio::main] async fn main() {
/// let mut choices = Completions::new(Source::reader(&b"data: [DONE]\n\n"[..])).choices();
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
            } else if state.end().is_some() {
                Poll::Ready(None)
            } else {
                Poll::Pending
            }
        });
        next.map(|c| c.map(|entry| Choice::new(entry, this.life.clone())))
    }
}
