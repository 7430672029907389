//! One answer path for the three APIs, streamed or not: the output choices' events framed
//! by the client's API ([`Framing`]), each choice's ending decided once
//! ([`crate::answer::ending::decide`]), with the same back-pressure, cut and accounting for all.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use choicewise_core::Choice;
use choicewise_core::chunks::Envelope;

use crate::answer::ending::{AnswerEnd, Initiator, OutputEnd, Seen, decide};
use crate::answer::finish::{Finish, Settled};
use crate::answer::translated::{self, ApiFraming};
use crate::answer::write::{
    Closing, Framing, Tail, cut_short, output, sse_response, until_closed, write_loop,
};
use crate::api::chat::{self, ChatFraming, json_body};
use crate::api::{self, Reply};
use crate::request::ChatRequest;
use crate::upstream::engine::{AnswerUsage, Picked, Run, Summary};

/// The client's API, as its answer is written.
pub(crate) enum Api {
    /// Chat Completions: the answer's envelope (its id, creation time, model).
    Chat(Envelope),
    /// Messages or Responses: what the answer needs of its request, and (a streamed
    /// Messages answer) its prompt's tokens being counted for its first event.
    Translated {
        reply: Reply,
        estimate: Option<tokio::task::JoinHandle<Option<u64>>>,
    },
}

/// The answer of a request whose pick is made, in the client's API, streamed or not;
/// `finish` goes with its body, which records it when it ends.
pub(crate) async fn respond(
    finish: Finish,
    picked: Picked,
    req: ChatRequest,
    api: Api,
    closing: Closing,
) -> Response {
    match req.stream {
        true => streamed(finish, picked, req, api, closing),
        false => whole(finish, picked, req, api, closing).await,
    }
}

/// The streamed answer: the API's opening at once, then each output choice's events as
/// they come, each choice's decided ending, then the tail (usage, summary, the failure of
/// every choice). The body ends once what the run came to is read.
fn streamed(
    mut finish: Finish,
    picked: Picked,
    req: ChatRequest,
    api: Api,
    mut closing: Closing,
) -> Response {
    let open = finish.metrics().open_stream();
    let body = async_stream::stream! {
        // Dropped with the answer when the client goes away, which cancels every sample
        // and closes every upstream (`Finish`'s drop).
        let _open = open;
        let (mut framing, outputs): (Box<dyn Framing>, &[u32]) = match api {
            Api::Chat(envelope) => {
                let asked = (req.logprobs, req.include_usage);
                let framing = ChatFraming::new(&envelope, picked.samples.len(), &req.model, asked);
                (Box::new(framing), &picked.samples)
            }
            // These APIs have one output choice.
            Api::Translated { mut reply, estimate } => {
                if let Some(estimate) = estimate {
                    reply.input_tokens = estimate.await.ok().flatten();
                }
                (Box::new(ApiFraming::new(&reply)), &picked.samples[..1])
            }
        };
        let run = finish.run();
        let first = run.index_of(outputs[0]);
        let streams = (outputs.iter())
            .map(|sample| output(run.completions.clone(), run.index_of(*sample)))
            .collect();
        let mut ends = Vec::new();
        let written = write_loop(&mut *framing, streams, &finish, &mut closing, &mut ends);
        for await write in written {
            yield Ok::<_, std::convert::Infallible>(write);
        }
        let run = finish.run();
        if let Some(cut) = cut_short(&closing) {
            // Cut short: the samples still running end now.
            run.stop(Initiator::Gateway(cut));
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
        let tail = until_closed(tail, &mut closing, run).await;
        let mut write = Vec::new();
        let answer = AnswerEnd::of(&ends, true);
        framing.tail(&ends, &answer, tail, &mut write);
        finish.answered(answer);
        finish.complete();
        yield Ok(axum::body::Bytes::from(write));
        // The body ends once what the run came to is read (its record needs nothing more),
        // or a moment after, an upstream still open then closed.
        finish.settle_after_answer(&mut closing).await;
    };
    sse_response(body)
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
        let seen = choice.as_ref().map(|c| Seen::of(c, &run.stops));
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
async fn whole(
    mut finish: Finish,
    picked: Picked,
    req: ChatRequest,
    api: Api,
    mut closing: Closing,
) -> Response {
    let run = finish.run();
    let outputs = finish.outputs().map(<[u32]>::to_vec);
    let samples: &[u32] = match &api {
        Api::Chat(_) => &picked.samples,
        Api::Translated { .. } => &picked.samples[..1],
    };
    let tail = async {
        let settled = Settled::read(run, outputs.as_deref()).await;
        let usage = run.usage(&picked.samples).await;
        let summary = run.final_summary(&picked, &req.policy).await;
        (settled, usage, summary)
    };
    let (settled, usage, summary) = until_closed(tail, &mut closing, run).await;
    let choices = ended(run, samples, &closing).await;
    finish.settled(settled);
    finish.complete();
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
    let body = match object {
        Ok(body) => body,
        Err((status, error)) => return (status, axum::Json(error)).into_response(),
    };
    drop(choices);
    // The texts are in the bytes: the run's copies go before the answer is sent.
    finish.release();
    json_body(body, finish)
}

/// A non-streamed answer's body, in the client's API, from its output `choices` as they
/// ended and the verdict on them (`answer`; of the request for `model`; `logprobs`: the
/// client asked for them); or, when the verdict is a failure, its status and its error's
/// body in the API's shape.
pub(crate) fn one_object(
    api: &Api,
    model: &str,
    logprobs: bool,
    choices: &[(Option<Choice>, OutputEnd)],
    answer: &AnswerEnd,
    usage: &AnswerUsage,
    summary: Option<&Summary>,
) -> Result<axum::body::Bytes, (StatusCode, serde_json::Value)> {
    // No output choice finished: a failure in the client's terms, not a 200 of errors.
    if let Some(error) = answer.error(model) {
        let body = match api {
            Api::Chat(_) => error.body(),
            Api::Translated { reply, .. } => api::api_error_body(reply.api, &error),
        };
        return Err((answer.status().unwrap_or(error.status), body));
    }
    match api {
        Api::Chat(envelope) => {
            let answered: Vec<(Option<Choice>, Option<String>)> = (choices.iter())
                .map(|(choice, end)| (choice.clone(), end.why()))
                .collect();
            Ok(chat::completion(
                envelope, &answered, logprobs, usage, summary,
            ))
        }
        Api::Translated { reply, .. } => {
            // The one output choice finished (the verdict says an answer).
            let choice = choices.first().and_then(|(choice, _)| choice.as_ref());
            debug_assert!(choice.is_some(), "a finished choice is one the run holds");
            Ok(translated::message(reply, choice, usage, summary))
        }
    }
}

#[cfg(test)]
mod tests;
