//! One answer path for every client API, streamed or not: the output choices' events framed
//! by the client's API ([`ClientApi::framing`], a [`Framing`]), each choice's ending decided once
//! ([`crate::answer::ending::decide`]), with the same back-pressure, cut and accounting for all.

use axum::body::{Body, Bytes};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use choicewise_core::Choice;
use choicewise_core::chunks::Envelope;
use futures::future::{BoxFuture, Either};

use crate::answer::client::ClientApi;
use crate::answer::ending::{AnswerEnd, Initiator, OutputEnd, Seen, decide};
use crate::answer::finish::{Finish, Recorded};
use crate::answer::write::{Closing, Framing, Tail, cut_short, output, sse_response, write_loop};
use crate::request::ChatRequest;
use crate::upstream::engine::{AnswerUsage, Picked, Run, Summary};

/// A streamed Messages answer's prompt tokens: counted in place when few
/// ([`choicewise_usage::counts_quickly`]), else being counted on a blocking thread; `None`
/// when they could not be counted.
pub(crate) enum PromptEstimate {
    Counted(Option<u64>),
    Counting(tokio::task::JoinHandle<Option<u64>>),
}

impl PromptEstimate {
    /// The tokens, once counted.
    pub(crate) async fn tokens(self) -> Option<u64> {
        match self {
            PromptEstimate::Counted(tokens) => tokens,
            PromptEstimate::Counting(counting) => counting.await.ok().flatten(),
        }
    }
}

/// What a request's answer is made of besides its pick, in its client API `A`.
pub(crate) struct Answer<A: ClientApi> {
    /// What the answer needs of its request.
    pub reply: A::Reply,
    /// The answer's envelope: its id, creation time, model.
    pub envelope: Envelope,
    /// The prompt's tokens being counted for the answer's first event (a streamed
    /// Messages answer's).
    pub estimate: Option<PromptEstimate>,
}

impl<A: ClientApi> Answer<A> {
    /// The output choices of `samples` (the pick's) this API answers.
    fn outputs(samples: &[u32]) -> &[u32] {
        match A::ONE_OUTPUT {
            true => &samples[..1],
            false => samples,
        }
    }
}

/// The answer of a request whose pick is made, in the client's API, streamed or not;
/// `finish` goes with its body, which records it when it ends. A streamed answer's
/// response is made at once (its body is its stream); a whole one's once every sample is
/// over, on the heap: the handler's future stays small.
pub(crate) fn respond<A: ClientApi>(
    finish: Finish,
    picked: Picked,
    req: ChatRequest,
    api: Answer<A>,
    closing: Closing,
) -> Either<std::future::Ready<Response>, BoxFuture<'static, Response>> {
    match req.stream {
        true => Either::Left(std::future::ready(streamed(
            finish, picked, req, api, closing,
        ))),
        false => Either::Right(Box::pin(whole(finish, picked, req, api, closing))),
    }
}

/// The streamed answer: the API's opening at once, then each output choice's events as
/// they come, each choice's decided ending, then the tail (usage, summary, the failure of
/// every choice). The body ends once what the run came to is read.
fn streamed<A: ClientApi>(
    mut finish: Finish,
    picked: Picked,
    req: ChatRequest,
    api: Answer<A>,
    mut closing: Closing,
) -> Response {
    let open = finish.metrics().open_stream();
    let content_type = A::streamed_type(&api.reply);
    let body = async_stream::stream! {
        // Dropped with the answer when the client goes away, which cancels every sample
        // and closes every upstream (`Finish`'s drop).
        let _open = open;
        let outputs = Answer::<A>::outputs(&picked.samples);
        let Answer { reply, envelope, estimate } = api;
        let prompt_tokens = match estimate {
            Some(estimate) => estimate.tokens().await,
            None => None,
        };
        let mut framing = A::framing(reply, &envelope, &req, outputs.len(), prompt_tokens);
        let run = finish.running().run();
        let first = run.index_of(outputs[0]);
        let streams = (outputs.iter())
            .map(|sample| output(run.completions.clone(), run.index_of(*sample)))
            .collect();
        let mut ends = Vec::new();
        let written = write_loop(&mut framing, streams, &finish, &mut closing, &mut ends);
        for await write in written {
            yield Ok::<_, std::convert::Infallible>(write);
        }
        let running = finish.running();
        let run = running.run();
        if let Some(cut) = cut_short(&closing) {
            // Cut short: the samples still running end now.
            running.stop(Initiator::Gateway(cut));
        }
        // The usage and the summary wait for every upstream's end; a shutdown that comes
        // meanwhile ends them too (what they had is counted).
        let needs = framing.needs();
        let tail = async {
            let summary = run.final_summary(&picked, &req.policy).await;
            let usage = match needs.usage {
                true => Some(run.usage(&picked.samples).await),
                false => None,
            };
            let stop_reason = match (needs.stop_reason, first) {
                (true, Some(i)) => match run.completions.choice(i).await {
                    Some(choice) => choice.message().await.ok().and_then(|o| o.stop_reason),
                    None => None,
                },
                _ => None,
            };
            Tail { usage, stop_reason, summary }
        };
        // Boxed, as the settle below: the stream is moved as it is made into a body.
        let tail = Box::pin(running.until_closed(tail, &mut closing)).await;
        let mut write = Vec::new();
        let answer = AnswerEnd::of(&ends, true);
        framing.tail(&ends, &answer, tail, &mut write);
        finish.answered(answer);
        yield Ok(axum::body::Bytes::from(write));
        // A long last event, a piece at a time.
        let mut more = Vec::new();
        while framing.more(&mut more) {
            yield Ok(axum::body::Bytes::from(std::mem::take(&mut more)));
        }
        // The body ends once what the run came to is read (its record needs nothing more),
        // or a moment after, an upstream still open then closed.
        Box::pin(finish.settle_after_answer(&mut closing)).await;
    };
    let mut response = sse_response(body);
    if content_type != "text/event-stream" {
        (response.headers_mut()).insert(
            header::CONTENT_TYPE,
            axum::http::HeaderValue::from_static(content_type),
        );
    }
    response
}

/// Each output choice of `samples`, as the run holds it, and how it ended: read once the
/// choices are over (`closing`: whether the answer was cut short).
async fn ended(run: &Run, samples: &[u32], closing: &Closing) -> Vec<(Option<Choice>, OutputEnd)> {
    let mut choices = Vec::with_capacity(samples.len());
    for sample in samples {
        let choice = match run.index_of(*sample) {
            Some(index) => run.completions.choice(index).await,
            None => None,
        };
        let seen = choice.as_ref().map(Seen::of);
        let end = decide(seen.as_ref(), cut_short(closing));
        choices.push((choice, end));
    }
    choices
}

/// The answer as one object (a `chat.completion`, an Anthropic `message`, a Responses
/// `response`): the same choices and endings as the stream's, written once every sample
/// is over; cut short (the gateway's close, the deadline), the samples still running end
/// (stopped) and the answer is what they had. When no output choice finished: the
/// verdict's error ([`AnswerEnd`]), in the API's shape.
async fn whole<A: ClientApi>(
    mut finish: Finish,
    picked: Picked,
    req: ChatRequest,
    api: Answer<A>,
    mut closing: Closing,
) -> Response {
    let running = finish.running();
    let run = running.run();
    let samples = Answer::<A>::outputs(&picked.samples);
    let tail = async {
        let settled = running.read().await;
        let usage = run.usage(&picked.samples).await;
        let summary = run.final_summary(&picked, &req.policy).await;
        (settled, usage, summary)
    };
    let (settled, usage, summary) = running.until_closed(tail, &mut closing).await;
    let choices = ended(run, samples, &closing).await;
    finish.settled(settled);
    let ends: Vec<OutputEnd> = choices.iter().map(|(_, end)| end.clone()).collect();
    let answer = AnswerEnd::of(&ends, false);
    let summary = summary.as_ref();
    let object = one_object(
        &api,
        &req.model,
        req.logprobs,
        &choices,
        &answer,
        &usage,
        summary,
    );
    finish.answered(answer);
    // A failure is recorded as every answer is: when its body has been sent.
    let (status, body) = match object {
        Ok(body) => (StatusCode::OK, body),
        Err((status, error)) => (status, Bytes::from(error.to_string())),
    };
    // The texts are in the bytes: the run's copies went with the verdict (the record, its
    // run settled and its answer decided, let it go), before the answer is sent.
    drop(choices);
    json_body(status, body, finish)
}

/// A non-streamed answer's body, in the client's API, from its output `choices` as they
/// ended and the verdict on them (`answer`; of the request for `model`; `logprobs`: the
/// client asked for them); or, when the verdict is a failure, its status and its error's
/// body in the API's shape.
pub(crate) fn one_object<A: ClientApi>(
    api: &Answer<A>,
    model: &str,
    logprobs: bool,
    choices: &[(Option<Choice>, OutputEnd)],
    answer: &AnswerEnd,
    usage: &AnswerUsage,
    summary: Option<&Summary>,
) -> Result<axum::body::Bytes, (StatusCode, serde_json::Value)> {
    // No output choice finished: a failure in the client's terms, not a 200 of errors.
    if let Some(error) = answer.error(model) {
        let body = A::error_body(&error);
        return Err((answer.status().unwrap_or(error.status), body));
    }
    let Answer {
        reply, envelope, ..
    } = api;
    Ok(A::object(
        reply, envelope, logprobs, choices, usage, summary,
    ))
}

/// A JSON answer's response (`status`: its verdict's), accounted when its body has been
/// sent (or dropped).
fn json_body(status: StatusCode, bytes: Bytes, finish: Finish) -> Response {
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::new(Recorded::new(
            http_body_util::Full::new(bytes),
            finish,
        )))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}
