//! The answers of `POST /v1/messages` and `POST /v1/responses`: the request's one output
//! choice written in the client's API by its [`Encoder`](crate::ingress::Encoder), streamed
//! or as one object, with the same back-pressure, shutdown and accounting as the chat answer.

use axum::body::Bytes;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use crate::answer_chat::json_body;
use crate::engine::Picked;
use crate::finish::{Finish, Settled};
use crate::ingress::{self, Encoder, Reply, Tokens};
use crate::request::ChatRequest;
use crate::write::{
    Closing, Framing, Out, SHUT_DOWN, cut_short, output, sse_response, until_closed, write_loop,
};

/// A Messages or Responses answer's events: the one output choice's, by the API's
/// [`Encoder`], and why the choice failed, if it did.
struct ApiFraming {
    encoder: Box<dyn Encoder>,
    failure: Option<String>,
}

impl Framing for ApiFraming {
    fn open(&mut self, write: &mut Vec<u8>) {
        self.encoder.start(write);
    }

    fn out(&mut self, _: usize, out: Out, write: &mut Vec<u8>) {
        match out {
            Out::Event(event) => self.encoder.event(&event, write),
            Out::Failed(why) => {
                self.failure.get_or_insert(why);
            }
            Out::Ended => {}
        }
    }
}

/// The streamed answer: the API's opening events at once (with the prompt's tokens when
/// `estimate` counts them: Messages' `message_start`), then the output choice's events as
/// they come, then its end (usage, stop reason, the pick's summary) or its failure. The body
/// ends once what the run came to is read.
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
        let index = run.index_of(picked.samples[0]);
        let outputs = vec![output(run.completions.clone(), index)];
        let mut framing = ApiFraming {
            encoder: reply.encoder(),
            failure: None,
        };
        let mut cut = None;
        let written = write_loop(&mut framing, outputs, &finish, &mut closing, &mut cut);
        for await write in written {
            yield Ok::<_, std::convert::Infallible>(write);
        }
        let run = finish.run();
        let ApiFraming { mut encoder, mut failure } = framing;
        if let Some(why) = cut {
            failure.get_or_insert_with(|| why.to_string());
        }
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
        let mut write = Vec::new();
        match failure {
            Some(why) => encoder.failed(&why, summary.as_ref(), &mut write),
            None => encoder.end(&usage, stop_reason.as_deref(), summary.as_ref(), &mut write),
        }
        if unfinished {
            finish.failure = Some("no_finish");
        }
        finish.complete();
        yield Ok(Bytes::from(write));
        // The body ends once what the run came to is read (its record needs nothing more),
        // or a moment after, an upstream still open then closed.
        finish.settle_after_answer(&mut closing).await;
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
    let outputs = finish.outputs.clone();
    let answer = async {
        let settled = Settled::read(run, outputs.as_deref()).await;
        let choice = match run.index_of(picked.samples[0]) {
            Some(index) => run.completions.choice(index).await,
            None => None,
        };
        let Some(choice) = choice else {
            return (
                Err("the upstream ended without this choice".to_string()),
                settled,
            );
        };
        // The choice is over (settled): read where the run holds it, not copied.
        let (cancelled, unfinished) =
            choice.inspect(|out| (out.cancelled, out.finish_reason.is_none()));
        let failed = match (choice.error(), cancelled, unfinished) {
            (Some(error), _, _) => Some(error.to_string()),
            (None, true, _) => Some(cut_short(&why).unwrap_or(SHUT_DOWN).to_string()),
            (None, false, true) => {
                Some("the upstream ended the choice without a finish reason".to_string())
            }
            (None, false, false) => None,
        };
        if let Some(why) = failed {
            return (Err(why), settled);
        }
        let usage = Tokens::from_chat(&run.usage(&picked.samples).await);
        let summary = run.final_summary(&picked, &req.policy).await;
        // The request's parameters a Responses answer repeats are spliced in as sent.
        let message =
            choice.inspect(|out| reply.answer_text(&reply.message(out, &usage, summary.as_ref())));
        (Ok(message), settled)
    };
    let (answer, settled) = until_closed(answer, &mut closing, run).await;
    finish.settled = Some(settled);
    finish.complete();
    match answer {
        Ok(body) => {
            finish.release();
            json_body(Bytes::from(body), finish)
        }
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
