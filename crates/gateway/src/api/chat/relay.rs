//! The pass-through path: a streamed Chat Completions request with no pick, to a model
//! whose every upstream (its fallbacks' too) speaks Chat Completions, and whose samples go
//! in one upstream request (one choice, or a native `n`), is answered with its upstream's
//! own chunks as they come ([`stream::ChatRelay`]), scanned rather than parsed into choices
//! and written again: no choice actors, no events, no framing of each update. What the
//! record, the limits and the metrics read is still read (each choice's finish, the usage,
//! an error, each output's tokens against its bound), and the request opens, fails and is
//! recorded as on the general path (docs/gateway.md, "The pass-through path").

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
use crate::upstream::engine::{AnswerUsage, ChoiceTokens, Summary, TrySummary, UsageParts, share};
use crate::upstream::open::{Opened, Opener, TryRecord, counted};
use crate::upstream::pace::bounded;

mod stream;

use stream::{ChatRelay, Fed, Reported};

/// How long the answer, its choice finished, waits for the rest of its upstream's stream
/// (its usage), as the general path waits after its last event.
const SETTLE_AFTER_FINISH: Duration = Duration::from_secs(2);

/// Whether a request of the Chat Completions API is relayed: streamed, no pick and nothing
/// a pick reads (no confidence, no hedge), to a model whose upstreams and fallbacks'
/// upstreams all speak Chat Completions, its samples planned in one upstream request (one
/// sample, or a native `n` of them all); nothing needs the choices as a whole (the
/// console's playground, a span, the records' samples: `keeps`).
pub(crate) fn relays(req: &ChatRequest, opener: &Opener, keeps: bool) -> bool {
    let policy = &req.policy;
    let chat = |routes: &[crate::upstream::open::UpstreamRoute]| {
        routes.iter().all(|r| r.api == Dialect::Chat)
    };
    let fallbacks_chat = (opener.model.fallbacks.iter())
        .all(|name| opener.models.get(name).is_some_and(|m| chat(&m.routes)));
    req.stream
        && !keeps
        && policy.rule() == PickRule::All
        && policy.confidence().is_none()
        && policy.hedge_after().is_none()
        && opener.native.is_none()
        && opener.logprobs.is_none()
        && chat(&opener.model.routes)
        && fallbacks_chat
        && (req.samples == 1 || crate::upstream::engine::one_request(&opener.model.routes, req))
}

/// A relayed request, its upstream request open.
pub(crate) struct Relayed {
    pub(crate) opened: Opened,
    /// Its samples (its choices), all in its one upstream request.
    pub(crate) samples: u32,
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
        samples,
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
    let samples: Vec<u32> = (0..samples.max(1)).collect();
    if let Some(max_tokens) = limit_set {
        let set = |sample| crate::upstream::open::LimitSet {
            sample,
            upstream: route.label.clone(),
            max_tokens,
        };
        lock(&opener.limits_set).extend(samples.iter().map(|&s| set(s)));
    }
    let tokens =
        |text: &str| choicewise_usage::count_text(choicewise_usage::DEFAULT_ENCODING, text);
    let bound = (opener.bound).map(|max| choicewise_core::input::TokenBound::new(max, tokens));
    let max_event = choicewise_core::defaults::DEFAULT_MAX_EVENT_SIZE;
    let sizes = (max_event, route.max_answer_bytes);
    let relay = ChatRelay::new(&envelope, samples.len(), asked, bound, sizes);
    let include_usage = asked.1;
    let encoding = route.encoding;
    let idle = route.idle_timeout;
    let max_bytes = crate::upstream::engine::max_bytes(&route, &samples);
    let reads = bounded(counted(reads, &opener.metrics), max_bytes);
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
        // Several choices: the gateway's openings, before any upstream chunk.
        let openings = relaying.relay.take_openings();
        if !openings.is_empty() {
            first = false;
            relaying.finish.first_chunk();
            yield Ok(Bytes::from(openings));
        }
        {
            let mut cut_short_by = std::pin::pin!(closed(&mut closing));
            loop {
                let wait = match relaying.relay.closed() {
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
                    // Silent: a failure, unless its choices had closed.
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
        let tokens = relaying.tokens().await;
        let tail = Tail {
            usage: include_usage.then(|| tokens.usage()),
            stop_reason: None,
            summary: tries_summary(&lock(&relaying.tries)),
        };
        // Room for the usage's chunk, the summary and `[DONE]` at once.
        let mut write = Vec::with_capacity(1024);
        let (ends, answer) = relaying.relay.end(cut, tail, &mut write);
        if std::mem::take(&mut first) {
            relaying.finish.first_chunk();
        }
        relaying.settle(&ends, Ended::Answer(answer), Some(tokens));
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
    /// The tokens of the prompt and of each choice's output: the upstream's report (each
    /// choice's own figure where it gave one, the rest of its total shared among the others
    /// in proportion to their texts, as the general path shares it), else counted as the
    /// general path estimates an upstream that reports none; off the workers when large.
    async fn tokens(&mut self) -> Tokens {
        let to = self.to_count();
        let counts = self.counts(to.encoding, &to.which).await;
        match to.reported {
            Some(r) => Tokens::reported(r, to.own, &counts),
            None => {
                let (encoding, fields) = (self.encoding, self.prompt.clone());
                let count = move || {
                    let fields = fields.iter().map(|(k, v)| (k.as_str(), &v[..]));
                    choicewise_usage::count_prompt_fields(encoding, fields).map_or(0, |c| c.total)
                };
                let quick = choicewise_usage::counts_quickly(encoding, self.prompt_bytes());
                let prompt = choicewise_core::counting::counted(quick, count)
                    .await
                    .unwrap_or(0);
                Tokens::estimated(prompt, counts)
            }
        }
    }

    /// [`tokens`](Self::tokens) without waiting, for a client gone: a prompt counted at
    /// once when it is small, else left uncounted, as the general path records a client
    /// gone.
    fn tokens_now(&mut self) -> Tokens {
        let to = self.to_count();
        let counts: Vec<u64> = (to.which.iter())
            .map(|&i| choicewise_usage::count_text(to.encoding, self.relay.texts(i)))
            .collect();
        match to.reported {
            Some(r) => Tokens::reported(r, to.own, &counts),
            None => Tokens::estimated(self.prompt_now(), counts),
        }
    }

    /// What counting the answer's tokens takes: the upstream's report, each choice's own
    /// figure in it, and the choices whose texts are counted (those without one: their
    /// weights in the rest of the total; without a report, all) in which encoding.
    fn to_count(&self) -> ToCount {
        let reported = self.relay.reported();
        let own = match (self.relay.choices(), reported) {
            // One choice: its upstream's total is its own.
            (1, Some(r)) => vec![Some(r.completion)],
            (n, None) => vec![None; n],
            _ => self.relay.reported_own(),
        };
        let which = (own.iter().enumerate())
            .filter_map(|(i, o)| o.is_none().then_some(i))
            .collect();
        let encoding = match reported {
            Some(_) => choicewise_usage::DEFAULT_ENCODING,
            None => self.encoding,
        };
        ToCount {
            reported,
            own,
            which,
            encoding,
        }
    }

    /// The tokens of the texts of the choices `which` in `encoding`: in place when few
    /// ([`choicewise_usage::counts_quickly`]), else off the workers; none (every weight
    /// zero: equal shares) if counting panicked.
    async fn counts(
        &mut self,
        encoding: choicewise_usage::EncodingName,
        which: &[usize],
    ) -> Vec<u64> {
        let texts: Vec<String> = (which.iter())
            .map(|&i| self.relay.texts(i).to_string())
            .collect();
        let bytes = texts.iter().map(String::len).sum();
        let quick = choicewise_usage::counts_quickly(encoding, bytes);
        let count = move || {
            (texts.iter())
                .map(|t| choicewise_usage::count_text(encoding, t))
                .collect()
        };
        let counted = choicewise_core::counting::counted(quick, count).await;
        counted.unwrap_or_else(|| vec![0; which.len()])
    }

    /// The bytes of the prompt's fields (what counting it reads).
    fn prompt_bytes(&self) -> usize {
        self.prompt.values().map(|v| v.len()).sum()
    }

    /// The prompt's tokens for a client gone before they were counted, without waiting:
    /// counted at once when the prompt is small, else left uncounted, as the general path
    /// records a client gone.
    fn prompt_now(&self) -> u64 {
        if !choicewise_usage::counts_quickly(self.encoding, self.prompt_bytes()) {
            return 0;
        }
        let fields = self.prompt.iter().map(|(k, v)| (k.as_str(), &v[..]));
        choicewise_usage::count_prompt_fields(self.encoding, fields).map_or(0, |c| c.total)
    }

    /// The record told what the relay came to: its choices ended so (`ends`, by index),
    /// the request so (`ended`); `tokens`: as counted, or to be counted now.
    fn settle(&mut self, ends: &[OutputEnd], ended: Ended, tokens: Option<Tokens>) {
        self.done = true;
        let finishes = (ends.iter())
            .map(|end| match end {
                OutputEnd::Finished(reason) => SampleEnded::Finished(reason.to_string()),
                OutputEnd::Failed(_) => SampleEnded::Failed,
                OutputEnd::Stopped(_) => SampleEnded::Cancelled,
            })
            .collect();
        let tokens = tokens.unwrap_or_else(|| self.tokens_now());
        let outcome = self.outcome(finishes, &tokens);
        let tries = lock(&self.tries).clone();
        let samples = self.relay.choices() as u32;
        let settled = Settled::relayed(outcome, tries, samples, self.relay.after_finish());
        self.finish.relayed(settled, ended);
    }

    /// What the relayed request came to, its samples ended so (`finishes`, by index), as
    /// the general path's accounting says it.
    fn outcome(&mut self, finishes: Vec<SampleEnded>, tokens: &Tokens) -> Outcome {
        let cancelled = |f: &SampleEnded| *f == SampleEnded::Cancelled;
        // Per-sample parts count when some sample was not output.
        let wasted = finishes.iter().any(cancelled);
        let cancelled_tokens = (finishes.iter().zip(&tokens.completions))
            .filter(|(f, _)| cancelled(f))
            .map(|(_, c)| *c)
            .fold(0, u64::saturating_add);
        let samples = (finishes.into_iter().enumerate())
            .map(|(i, finish)| SampleEnd {
                sample: Some(i as u32),
                output: (!cancelled(&finish)).then_some(i as u32),
                place: self.relay.place(i),
                finish,
                prompt_tokens: if i == 0 { tokens.prompt } else { 0 },
                completion_tokens: tokens.completions[i],
                estimated: tokens.part_estimated(i),
                ..SampleEnd::default()
            })
            .collect();
        let completion = tokens.completion();
        Outcome {
            samples,
            upstreams: vec![UpstreamTokens {
                upstream: self.upstream.clone(),
                prompt: tokens.prompt,
                completion,
                estimated: !tokens.reported,
            }],
            prompt_tokens: tokens.prompt,
            completion_tokens: completion,
            estimated: !tokens.reported || (wasted && tokens.parts_estimated()),
            response_model: self.relay.response_model().map(str::to_string),
            cancelled_tokens,
            unselected_tokens: 0,
        }
    }
}

impl Drop for Relaying {
    /// A client gone before the answer ended: its choices still open stopped for it, what
    /// it had received counted.
    fn drop(&mut self) {
        if !self.done {
            let stopped = OutputEnd::Stopped(crate::answer::ending::Initiator::Client);
            let ends: Vec<OutputEnd> = (0..self.relay.choices())
                .map(|i| match self.relay.finish(i) {
                    Some(reason) => OutputEnd::Finished(reason.into()),
                    None => stopped.clone(),
                })
                .collect();
            self.settle(&ends, Ended::ClientGone, None);
        }
    }
}

/// What counting a relayed answer's tokens takes ([`Relaying::to_count`]).
struct ToCount {
    reported: Option<Reported>,
    own: Vec<Option<u64>>,
    which: Vec<usize>,
    encoding: choicewise_usage::EncodingName,
}

/// A relayed answer's tokens: its prompt's and each choice's.
struct Tokens {
    prompt: u64,
    /// Each choice's output tokens, by index.
    completions: Vec<u64>,
    /// Each choice's part is the gateway's: counted, or its share of a total the upstream
    /// reported for several, by index.
    counted: Vec<bool>,
    /// The upstream reported them.
    reported: bool,
}

impl Tokens {
    /// As the upstream reported them (`r`): each choice's own figure where it gave one
    /// (`own`), the rest of its total shared among the others by their `weights`.
    fn reported(r: Reported, own: Vec<Option<u64>>, weights: &[u64]) -> Tokens {
        let known = (own.iter().flatten()).fold(0, |a: u64, b| a.saturating_add(*b));
        let left = r.completion.saturating_sub(known);
        let mut shares = share(left, weights).into_iter();
        Tokens {
            prompt: r.prompt,
            completions: (own.iter())
                .map(|o| o.unwrap_or_else(|| shares.next().unwrap_or(0)))
                .collect(),
            counted: own.iter().map(Option::is_none).collect(),
            reported: true,
        }
    }

    /// Counted by the gateway.
    fn estimated(prompt: u64, completions: Vec<u64>) -> Tokens {
        Tokens {
            prompt,
            counted: vec![true; completions.len()],
            completions,
            reported: false,
        }
    }

    /// The output's tokens, all choices'.
    fn completion(&self) -> u64 {
        self.completions
            .iter()
            .copied()
            .fold(0, u64::saturating_add)
    }

    /// Whether choice `i`'s part is the gateway's: counted, or a share of a total.
    fn part_estimated(&self, i: usize) -> bool {
        self.counted.get(i).copied().unwrap_or(true)
    }

    /// Whether some choice's part is the gateway's.
    fn parts_estimated(&self) -> bool {
        self.counted.iter().any(|c| *c)
    }

    /// The answer's usage, in Chat Completions' shape with its `choicewise` parts, as the
    /// general path writes it.
    fn usage(&self) -> AnswerUsage {
        let completion = self.completion();
        AnswerUsage {
            choicewise: UsageParts {
                estimated: !self.reported || self.parts_estimated(),
                per_choice: (self.completions.iter().enumerate())
                    .map(|(i, c)| ChoiceTokens {
                        completion_tokens: *c,
                        estimated: self.part_estimated(i),
                        index: Some(i),
                        prompt_tokens: if i == 0 { self.prompt } else { 0 },
                        sample: i as u32,
                    })
                    .collect(),
            },
            completion_tokens: completion,
            prompt_tokens: self.prompt,
            total_tokens: self.prompt.saturating_add(completion),
        }
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
