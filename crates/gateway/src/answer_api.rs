//! The answers of `POST /v1/messages` and `POST /v1/responses`: the request's one output
//! choice written in the client's API by its [`Encoder`](crate::ingress::Encoder), streamed
//! or as one object, with the same back-pressure, shutdown and accounting as the chat answer.

use std::task::Poll;

use axum::body::Bytes;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use futures::StreamExt;

use crate::answer_chat::{
    Closing, Out, SHUT_DOWN, WRITE_BYTES, closed, cut_short, output, sse_response, until_closed,
};
use crate::engine::Picked;
use crate::finish::Finish;
use crate::ingress::{self, Reply, Tokens};
use crate::request::ChatRequest;

/// The streamed answer: the API's opening events at once (with the prompt's tokens when
/// `estimate` counts them: Messages' `message_start`), then the output choice's events as
/// they come, then its end (usage, stop reason, the pick's summary) or its failure.
pub(crate) fn stream(
    mut finish: Finish,
    picked: Picked,
    req: ChatRequest,
    mut reply: Reply,
    estimate: Option<tokio::task::JoinHandle<Option<u64>>>,
    mut closing: Closing,
) -> Response {
    let open = finish.metrics.open_stream();
    let body = async_stream::stream! {
        let _open = open;
        if let Some(estimate) = estimate {
            reply.input_tokens = estimate.await.ok().flatten();
        }
        let run = finish.run();
        let sample = picked.samples[0];
        let index = run.index_of(sample);
        let mut events = output(run.completions.clone(), index);
        let mut encoder = reply.encoder();
        let mut write = Vec::with_capacity(512);
        encoder.start(&mut write);
        yield Ok::<_, std::convert::Infallible>(Bytes::from(std::mem::take(&mut write)));
        run.pace.streaming();
        let mut failure: Option<String> = None;
        let mut first = true;
        let mut ended = false;
        while !ended {
            let next = match futures::poll!(events.next()) {
                Poll::Ready(next) => next,
                Poll::Pending => {
                    run.pace.caught_up();
                    tokio::select! {
                        biased;
                        next = events.next() => next,
                        why = closed(&mut closing) => {
                            failure.get_or_insert_with(|| why.to_string());
                            None
                        }
                    }
                }
            };
            let Some(out) = next else { break };
            run.pace.writing();
            let mut take = |out: Out, write: &mut Vec<u8>| match out {
                Out::Event(event) => encoder.event(&event, write),
                Out::Failed(why) => {
                    failure.get_or_insert(why);
                }
                Out::Ended => {}
            };
            take(out, &mut write);
            while write.len() < WRITE_BYTES {
                match futures::poll!(events.next()) {
                    Poll::Ready(Some(out)) => take(out, &mut write),
                    Poll::Ready(None) => {
                        ended = true;
                        break;
                    }
                    Poll::Pending => break,
                }
            }
            if write.is_empty() {
                continue;
            }
            if std::mem::take(&mut first) {
                finish.first_chunk();
            }
            let len = write.len();
            yield Ok(Bytes::from(std::mem::take(&mut write)));
            run.pace.sent(len);
        }
        drop(events);
        run.pace.caught_up();
        if cut_short(&closing).is_some() {
            run.completions.cancel_except(&[]);
        }
        // The usage and the summary wait for every upstream's end; a shutdown that comes
        // meanwhile ends them too.
        let tail = async {
            let summary = run.final_summary(&picked, &req.policy).await;
            let usage = Tokens::from_chat(&run.usage(&picked.samples).await);
            let stop_reason = match index {
                Some(i) => match run.completions.choice(i).await {
                    Some(choice) => choice.message().await.ok().and_then(|o| o.stop_reason),
                    None => None,
                },
                None => None,
            };
            (summary, usage, stop_reason)
        };
        let (summary, usage, stop_reason) = until_closed(tail, &mut closing, run).await;
        // A choice whose events ended without its finish ends as a failure (the encoder's
        // `end` writes it so itself; said here for the log of the request).
        let unfinished = failure.is_none() && !encoder.finished();
        match failure {
            Some(why) => encoder.failed(&why, summary.as_ref(), &mut write),
            None => encoder.end(&usage, stop_reason.as_deref(), summary.as_ref(), &mut write),
        }
        if unfinished {
            finish.failure = Some("no_finish");
        }
        finish.complete();
        yield Ok(Bytes::from(write));
    };
    sse_response(body)
}

/// The answer as one object (an Anthropic `message`, a Responses `response`); a choice that
/// failed, or was cut short by a shutdown, is a 502 in the API's error shape.
pub(crate) async fn json(
    mut finish: Finish,
    picked: Picked,
    req: ChatRequest,
    reply: Reply,
    mut closing: Closing,
) -> Response {
    let run = finish.run();
    let why = closing.clone();
    let answer = async {
        let choice = match run.index_of(picked.samples[0]) {
            Some(index) => run.completions.choice(index).await,
            None => None,
        };
        let Some(choice) = choice else {
            return Err("the upstream ended without this choice".to_string());
        };
        let out = match choice.message().await {
            Ok(out) if out.cancelled => {
                return Err(cut_short(&why).unwrap_or(SHUT_DOWN).to_string());
            }
            Ok(out) => out,
            Err(incomplete) => return Err(incomplete.error.to_string()),
        };
        if out.finish_reason.is_none() {
            return Err("the upstream ended the choice without a finish reason".to_string());
        }
        let usage = Tokens::from_chat(&run.usage(&picked.samples).await);
        let summary = run.final_summary(&picked, &req.policy).await;
        Ok(reply.answer_text(&reply.message(&out, &usage, summary.as_ref())))
    };
    let answer = until_closed(answer, &mut closing, run).await;
    finish.complete();
    match answer {
        Ok(body) => (
            [(axum::http::header::CONTENT_TYPE, "application/json")],
            body,
        )
            .into_response(),
        Err(why) => {
            finish.failure = Some("choice_failed");
            let status = StatusCode::BAD_GATEWAY;
            let message = format!("model {:?}: {why}", req.model);
            (
                status,
                axum::Json(ingress::error_body(reply.api, status, &message)),
            )
                .into_response()
        }
    }
}
