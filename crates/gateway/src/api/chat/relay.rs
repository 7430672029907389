//! The pass-through path: a streamed Chat Completions request of one choice and no pick, to
//! a model whose every upstream (its fallbacks' too) speaks Chat Completions, is answered
//! with its upstream's own chunks as they come ([`stream::ChatRelay`]), scanned rather than
//! parsed into choices and written again: no choice actors, no events, no framing of each
//! update. What the record, the limits and the metrics read is still read (the finish, the
//! usage, an error, the output's tokens against its bound), and the request opens, fails
//! and is recorded as on the general path (docs/gateway.md, "The pass-through path").

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::response::Response;
use choicewise_core::chunks::Envelope;
use choicewise_core::{Dialect, PickRule};
use futures::StreamExt;

use crate::answer::closing::{Closing, closed};
use crate::answer::ending::{Ended, OutputEnd};
use crate::answer::finish::{Finish, Settled};
use crate::answer::write::{Tail, sse_response};
use crate::metrics::{Outcome, SampleEnd, SampleEnded, UpstreamTokens};
use crate::request::ChatRequest;
use crate::upstream::engine::{AnswerUsage, ChoiceTokens, Summary, TrySummary, UsageParts};
use crate::upstream::open::{Opened, Opener, TryRecord, counted};
use crate::upstream::pace::bounded;

mod stream;

use stream::{ChatRelay, Fed};

/// How long the answer, its choice finished, waits for the rest of its upstream's stream
/// (its usage), as the general path waits after its last event.
const SETTLE_AFTER_FINISH: Duration = Duration::from_secs(2);

/// Whether a request of the Chat Completions API is relayed: streamed, one sample, no pick
/// and nothing a pick reads (no confidence, no hedge), to a model whose upstreams and
/// fallbacks' upstreams all speak Chat Completions; nothing needs the choice as a whole
/// (the console's playground, a span, the records' samples: `keeps`).
pub(crate) fn relays(req: &ChatRequest, opener: &Opener, keeps: bool) -> bool {
    let policy = &req.policy;
    let chat = |routes: &[crate::upstream::open::UpstreamRoute]| {
        routes.iter().all(|r| r.api == Dialect::Chat)
    };
    let fallbacks_chat = (opener.model.fallbacks.iter())
        .all(|name| opener.models.get(name).is_some_and(|m| chat(&m.routes)));
    req.stream
        && req.samples == 1
        && !keeps
        && policy.rule() == PickRule::All
        && policy.confidence().is_none()
        && policy.hedge_after().is_none()
        && opener.native.is_none()
        && opener.logprobs.is_none()
        && chat(&opener.model.routes)
        && fallbacks_chat
}

/// A relayed request, its upstream request open.
pub(crate) struct Relayed {
    pub(crate) opened: Opened,
    pub(crate) opener: Opener,
    pub(crate) envelope: Envelope,
    /// As the client asked: `logprobs`, `stream_options.include_usage`.
    pub(crate) asked: (bool, bool),
    pub(crate) closing: Closing,
}

/// The relayed answer: its upstream's chunks as they come, then its ending; `finish` goes
/// with its body, which records it when it ends or its client goes away.
pub(crate) fn respond(finish: Finish, relayed: Relayed) -> Response {
    let open = finish.metrics().open_stream();
    let Relayed {
        opened,
        opener,
        envelope,
        asked,
        mut closing,
    } = relayed;
    let Opened {
        reads,
        route,
        limit_set,
        ..
    } = opened;
    if let Some(max_tokens) = limit_set {
        let set = crate::upstream::open::LimitSet {
            sample: 0,
            upstream: route.label.clone(),
            max_tokens,
        };
        lock(&opener.limits_set).push(set);
    }
    let tokens =
        |text: &str| choicewise_usage::count_text(choicewise_usage::DEFAULT_ENCODING, text);
    let bound = (opener.bound).map(|max| choicewise_core::input::TokenBound::new(max, tokens));
    let max_event = choicewise_core::defaults::DEFAULT_MAX_EVENT_SIZE;
    let relay = ChatRelay::new(&envelope, asked, bound, max_event);
    let include_usage = asked.1;
    let encoding = route.encoding;
    let idle = route.idle_timeout;
    let reads = bounded(counted(reads, &opener.metrics), route.max_answer_bytes);
    let mut relaying = Relaying {
        finish,
        relay,
        upstream: route.label.clone(),
        encoding,
        prompt: opener.body.clone(),
        tries: opener.tries.clone(),
        done: false,
    };
    let body = async_stream::stream! {
        // Dropped with the answer when the client goes away: `relaying` records what it
        // had, and the upstream's reads are dropped (its connection closed).
        let _open = open;
        let mut reads = reads.boxed();
        let mut cut = None;
        let mut first = true;
        {
            let mut cut_short_by = std::pin::pin!(closed(&mut closing));
            loop {
                let wait = match relaying.relay.finished() {
                    true => SETTLE_AFTER_FINISH.min(idle),
                    false => idle,
                };
                let next = tokio::select! {
                    biased;
                    next = tokio::time::timeout(wait, reads.next()) => next,
                    why = &mut cut_short_by => {
                        cut = Some(why);
                        break;
                    }
                };
                match next {
                    Ok(Some(Ok(read))) => {
                        let mut write = Vec::with_capacity(read.len() + 128);
                        let fed = relaying.relay.feed(&read, &mut write);
                        if !write.is_empty() {
                            if std::mem::take(&mut first) {
                                relaying.finish.first_chunk();
                            }
                            yield Ok::<_, std::convert::Infallible>(Bytes::from(write));
                        }
                        match fed {
                            Fed::More => {}
                            Fed::Over => break,
                            Fed::Done => {
                                drain(std::mem::replace(&mut reads, futures::stream::empty().boxed()), wait);
                                break;
                            }
                        }
                    }
                    Ok(Some(Err(e))) => {
                        relaying.relay.failed(e.to_string(), None);
                        break;
                    }
                    Ok(None) => break,
                    // Silent: a failure, unless its choice had finished.
                    Err(_) => {
                        relaying.relay.failed(String::new(), Some(wait));
                        break;
                    }
                }
            }
        }
        // Its upstream is done with: closed now, before the tail is written.
        drop(reads);
        // An answer its upstream left unfinished (not the gateway's cut) is a `cut` try, as
        // the general path counts it: in the tries' summary below and in the metrics.
        if !relaying.relay.finished() && cut.is_none() {
            opener.record(0, &relaying.upstream, crate::upstream::resilience::Outcome::Cut);
        }
        let reported = relaying.relay.reported();
        let estimated = match reported {
            Some(_) => None,
            None => Some(relaying.estimate().await),
        };
        let usage = match (include_usage, reported, estimated) {
            (false, _, _) => None,
            (true, Some(r), _) => Some(answer_usage(r.prompt, r.completion, false)),
            (true, None, Some((prompt, completion))) => Some(answer_usage(prompt, completion, true)),
            (true, None, None) => None,
        };
        let tail = Tail {
            usage,
            stop_reason: None,
            summary: tries_summary(&lock(&relaying.tries)),
        };
        let mut write = Vec::new();
        let (end, answer) = relaying.relay.end(cut, tail, &mut write);
        if std::mem::take(&mut first) {
            relaying.finish.first_chunk();
        }
        relaying.settle(&end, Ended::Answer(answer), estimated);
        yield Ok(Bytes::from(write));
    };
    sse_response(body)
}

/// The rest of an upstream's body after its `[DONE]` (its end, most often already read),
/// read so that its connection goes back to the pool; nothing of it is relayed. What has
/// not come yet is read by a task of its own, for at most `wait`, so that the answer's
/// tail does not wait for it.
fn drain(mut reads: futures::stream::BoxStream<'static, ReadResult>, wait: Duration) {
    use futures::FutureExt;
    loop {
        match reads.next().now_or_never() {
            Some(Some(Ok(_))) => continue,
            Some(_) => return,
            None => break,
        }
    }
    tokio::spawn(async move {
        let rest = async { while let Some(Ok(_)) = reads.next().await {} };
        let _ = tokio::time::timeout(wait, rest).await;
    });
}

/// One read of an upstream's answer.
type ReadResult = Result<Bytes, crate::upstream::pace::BoxError>;

/// A relayed answer's record, until it is settled: made with what the relay learned when
/// the answer ends, or when its client goes away (its drop).
struct Relaying {
    finish: Finish,
    relay: ChatRelay,
    /// The upstream that answered, `API:MODEL@HOST`.
    upstream: Arc<str>,
    /// Its model's encoding, for the tokens it did not report.
    encoding: choicewise_usage::EncodingName,
    /// The request's fields, for its prompt's tokens when the upstream reports none.
    prompt: Arc<crate::request::Fields>,
    tries: Arc<Mutex<Vec<TryRecord>>>,
    done: bool,
}

impl Relaying {
    /// The tokens of the prompt and of the output, counted as the general path estimates
    /// an upstream that reports none (off the workers when large).
    async fn estimate(&mut self) -> (u64, u64) {
        let (encoding, fields) = (self.encoding, self.prompt.clone());
        let count = move || {
            let fields = fields.iter().map(|(k, v)| (k.as_str(), &v[..]));
            choicewise_usage::count_prompt_fields(encoding, fields).map_or(0, |c| c.total)
        };
        let bytes: usize = self.prompt.values().map(|v| v.len()).sum();
        let quick = choicewise_usage::counts_quickly(encoding, bytes);
        let prompt = choicewise_core::counting::counted(quick, count)
            .await
            .unwrap_or(0);
        (prompt, self.completion())
    }

    /// The output's tokens, counted.
    fn completion(&mut self) -> u64 {
        choicewise_usage::count_text(self.encoding, self.relay.texts())
    }

    /// The prompt's tokens for a client gone before they were counted, without waiting:
    /// counted at once when the prompt is small, else left uncounted, as the general path
    /// records a client gone.
    fn prompt_now(&self) -> u64 {
        let bytes: usize = self.prompt.values().map(|v| v.len()).sum();
        if !choicewise_usage::counts_quickly(self.encoding, bytes) {
            return 0;
        }
        let fields = self.prompt.iter().map(|(k, v)| (k.as_str(), &v[..]));
        choicewise_usage::count_prompt_fields(self.encoding, fields).map_or(0, |c| c.total)
    }

    /// The record told what the relay came to: its choice ended so (`end`), the request so
    /// (`ended`); `estimated`: the tokens counted where the upstream reported none.
    fn settle(&mut self, end: &OutputEnd, ended: Ended, estimated: Option<(u64, u64)>) {
        self.done = true;
        let finish = match end {
            OutputEnd::Finished(reason) => SampleEnded::Finished(reason.to_string()),
            OutputEnd::Failed(_) => SampleEnded::Failed,
            OutputEnd::Stopped(_) => SampleEnded::Cancelled,
        };
        let outcome = self.outcome(finish, estimated);
        let tries = lock(&self.tries).clone();
        let settled = Settled::relayed(outcome, tries, self.relay.after_finish());
        self.finish.relayed(settled, ended);
    }

    /// What the relayed request came to, its one sample ended so (`finish`).
    fn outcome(&mut self, finish: SampleEnded, estimated: Option<(u64, u64)>) -> Outcome {
        let (prompt, completion, estimated) = match (self.relay.reported(), estimated) {
            (Some(r), _) => (r.prompt, r.completion, false),
            (None, Some((prompt, completion))) => (prompt, completion, true),
            (None, None) => (self.prompt_now(), self.completion(), true),
        };
        let cancelled = finish == SampleEnded::Cancelled;
        let place = matches!(finish, SampleEnded::Finished(_)).then_some(0);
        Outcome {
            samples: vec![SampleEnd {
                sample: Some(0),
                finish,
                place,
                output: Some(0),
                prompt_tokens: prompt,
                completion_tokens: completion,
                estimated,
                ..SampleEnd::default()
            }],
            upstreams: vec![UpstreamTokens {
                upstream: self.upstream.clone(),
                prompt,
                completion,
                estimated,
            }],
            prompt_tokens: prompt,
            completion_tokens: completion,
            estimated,
            response_model: self.relay.response_model().map(str::to_string),
            cancelled_tokens: if cancelled { completion } else { 0 },
            unselected_tokens: 0,
        }
    }
}

impl Drop for Relaying {
    /// A client gone before the answer ended: its sample stopped for it, what it had
    /// received counted.
    fn drop(&mut self) {
        if !self.done {
            let stopped = OutputEnd::Stopped(crate::answer::ending::Initiator::Client);
            self.settle(&stopped, Ended::ClientGone, None);
        }
    }
}

/// The answer's usage, in Chat Completions' shape with its `choicewise` parts, as the
/// general path writes it: its one sample's tokens, reported or `estimated`.
fn answer_usage(prompt: u64, completion: u64, estimated: bool) -> AnswerUsage {
    AnswerUsage {
        choicewise: UsageParts {
            estimated,
            per_choice: vec![ChoiceTokens {
                completion_tokens: completion,
                estimated,
                index: Some(0),
                prompt_tokens: prompt,
                sample: 0,
            }],
        },
        completion_tokens: completion,
        prompt_tokens: prompt,
        total_tokens: prompt + completion,
    }
}

/// The final `choicewise` object of a request whose tries did not all succeed: its tries.
fn tries_summary(tries: &[TryRecord]) -> Option<Summary> {
    let retried = (tries.iter()).any(|t| t.outcome != crate::upstream::resilience::Outcome::Ok);
    retried.then(|| Summary {
        tries: (tries.iter())
            .map(|t| TrySummary {
                outcome: t.outcome.as_str(),
                sample: t.sample,
                upstream: t.upstream.clone(),
            })
            .collect(),
        ..Summary::default()
    })
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
