//! The answer of `POST /v1/chat/completions`: each output choice's chunks as they come
//! (streamed) or one `chat.completion`, with back-pressure, the shutdown's cut and the
//! request's accounting.

use axum::body::{Body, Bytes};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use choicewise_core::ChoiceOutput;
use choicewise_core::chunks::{ChoiceChunks, ChunkEncoder, DONE, Envelope};
use serde::Serialize;
use serde_json::Value;

use crate::engine::Picked;
use crate::error::ApiError;
use crate::finish::{Accounted, Finish, Settled};
use crate::request::ChatRequest;
use crate::write::{
    Closing, Framing, Out, SHUT_DOWN, cut_short, output, sse_response, until_closed, write_loop,
};

/// A Chat Completions answer's events: each output choice's chunks (proto's encoder), and
/// why each choice failed, if it did (an error, an end without a finish, a finish of
/// `error`).
struct ChatFraming {
    encoder: ChunkEncoder,
    chunks: Vec<ChoiceChunks>,
    failures: Vec<Option<String>>,
}

impl Framing for ChatFraming {
    fn open(&mut self, write: &mut Vec<u8>) {
        // Every choice's opening, in index order.
        for c in self.chunks.iter_mut() {
            self.encoder.element(write, &c.opening());
        }
    }

    fn out(&mut self, o: usize, out: Out, write: &mut Vec<u8>) {
        let chunks = &mut self.chunks[o];
        let (element, failed) = match out {
            Out::Event(event) => {
                let failed = match &event {
                    choicewise_core::ChoiceEvent::Finished(reason) if &**reason == "error" => Some(
                        "the upstream ended the choice with finish_reason \"error\"".to_string(),
                    ),
                    _ => None,
                };
                (chunks.event(&event), failed)
            }
            Out::Failed(why) => (Some(chunks.failed(&why)), Some(why)),
            Out::Ended if !chunks.is_finished() => {
                let why = "the upstream ended the choice without a finish reason";
                (Some(chunks.failed(why)), Some(why.to_string()))
            }
            Out::Ended => (None, None),
        };
        if let Some(element) = element {
            self.encoder.element(write, &element);
        }
        if let Some(why) = failed {
            self.failures[o].get_or_insert(why);
        }
    }
}

/// The streamed answer: each output choice's chunks as they come, then the usage and the
/// pick's summary when asked for, then (when every choice failed upstream) an error event
/// `{"error": {...}}`, then `[DONE]`. The body ends once what the run came to is read.
pub(crate) fn stream_response(
    mut finish: Finish,
    picked: Picked,
    req: ChatRequest,
    envelope: Envelope,
    mut closing: Closing,
) -> Response {
    let open = finish.metrics.open_stream();
    let body = async_stream::stream! {
        // Dropped with the answer when the client goes away, which cancels every sample
        // and closes every upstream (`Finish`'s drop).
        let _open = open;
        let run = finish.run();
        let outputs: Vec<_> = (picked.samples.iter())
            .map(|sample| output(run.completions.clone(), run.index_of(*sample)))
            .collect();
        let mut framing = ChatFraming {
            encoder: envelope.encoder(),
            chunks: (0..outputs.len() as u32)
                .map(|o| ChoiceChunks::new(o).logprobs(req.logprobs))
                .collect(),
            failures: vec![None; outputs.len()],
        };
        let mut cut = None;
        let written = write_loop(&mut framing, outputs, &finish, &mut closing, &mut cut);
        for await write in written {
            yield Ok::<_, std::convert::Infallible>(write);
        }
        let run = finish.run();
        let ChatFraming { encoder, mut chunks, failures } = framing;
        // Cut short by the gateway's close or the deadline: the choices not finished end now.
        let mut write = Vec::new();
        let why = cut_short(&closing).unwrap_or(SHUT_DOWN);
        for c in chunks.iter_mut().filter(|c| !c.is_finished()) {
            encoder.element(&mut write, &c.failed(why));
        }
        if !write.is_empty() {
            yield Ok(Bytes::from(std::mem::take(&mut write)));
        }
        if cut_short(&closing).is_some() {
            // Cut short: the samples still running end now.
            run.completions.cancel_except(&[]);
        }
        // The usage and the summary wait for every upstream's end; a shutdown that comes
        // meanwhile ends them too (what they had is counted).
        let tail = async {
            let summary = run.final_summary(&picked, &req.policy).await;
            let usage = match req.include_usage {
                true => Some(run.usage(&picked.samples).await),
                false => None,
            };
            (summary, usage)
        };
        let (summary, usage) = until_closed(tail, &mut closing, run).await;
        if usage.is_some() || summary.is_some() {
            encoder.last(&mut write, usage.as_ref(), summary.as_ref());
        }
        // Every choice failed upstream (a shutdown's cut is not a failure): the stream ends
        // with OpenAI's mid-stream error event, which the SDKs raise, rather than as a
        // success of truncated choices.
        let failed: Vec<String> = (failures.iter().enumerate())
            .filter_map(|(o, why)| why.as_ref().map(|why| format!("choice {o}: {why}")))
            .collect();
        if !failed.is_empty() && failed.len() == failures.len() {
            finish.failure = Some("every_choice_failed");
            let error = ApiError::new(
                StatusCode::BAD_GATEWAY,
                "upstream_error",
                format!("model {:?}: every choice failed: {}", req.model, failed.join("; ")),
            )
            .code("every_choice_failed");
            ChunkEncoder::event(&mut write, &error.body());
        }
        finish.complete();
        write.extend_from_slice(DONE);
        yield Ok(Bytes::from(write));
        // The body ends once what the run came to is read: its record needs nothing more.
        finish.settle_until_closed(&mut closing).await;
    };
    sse_response(body)
}

/// An output choice of a non-streamed answer: the choice as its upstream sent it, and why it
/// failed, if it did.
#[derive(Serialize)]
struct AnsweredChoice {
    #[serde(flatten)]
    output: ChoiceOutput,
    #[serde(skip_serializing_if = "Option::is_none")]
    choicewise: Option<ChoiceError>,
}

#[derive(Serialize)]
struct ChoiceError {
    error: String,
}

/// A non-streamed answer: a `chat.completion` with the run's usage and the pick's summary.
#[derive(Serialize)]
struct Completion<'a> {
    id: &'a str,
    object: &'static str,
    created: u64,
    model: &'a str,
    choices: &'a [AnsweredChoice],
    usage: &'a Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    choicewise: Option<&'a Value>,
}

/// The answer as one `chat.completion`, written from its types into its bytes once: the
/// choices' texts are held by the run and, while it is written, once more by the answer;
/// the run is let go before the answer is sent.
pub(crate) async fn json_response(
    mut finish: Finish,
    picked: Picked,
    req: ChatRequest,
    envelope: Envelope,
    mut closing: Closing,
) -> Response {
    let run = finish.run();
    let why = closing.clone();
    // The usage and the summary wait for every sample's end; a shutdown's grace over, the
    // samples still running end (cancelled), and the answer is what they had.
    let outputs = finish.outputs.clone();
    let tail = async {
        let usage = run.usage(&picked.samples).await;
        let summary = run.final_summary(&picked, &req.policy).await;
        let settled = Settled::read(run, outputs.as_deref()).await;
        (usage, summary, settled)
    };
    let (usage, summary, settled) = until_closed(tail, &mut closing, run).await;
    let mut choices = Vec::with_capacity(picked.samples.len());
    // Each output choice's error, when it failed.
    let mut errors: Vec<(usize, String)> = Vec::new();
    for (o, sample) in picked.samples.iter().enumerate() {
        let choice = match run.index_of(*sample) {
            Some(index) => run.completions.choice(index).await,
            None => None,
        };
        let (mut output, error) = match choice {
            None => (
                ChoiceOutput::default(),
                Some("the upstream ended without this choice".to_string()),
            ),
            Some(choice) => match choice.message().await {
                Ok(out) if out.cancelled => {
                    (out, Some(cut_short(&why).unwrap_or(SHUT_DOWN).to_string()))
                }
                Ok(out) => (out, None),
                Err(incomplete) => (incomplete.partial, Some(incomplete.error.to_string())),
            },
        };
        // The client's choice `o`, as its upstream sent it: what the library adds of its
        // own (per-choice usage, the source, a mapped dialect's stop reason) left out.
        output.index = o as u32;
        output.usage = None;
        output.source = None;
        output.stop_reason = None;
        output.cancelled = false;
        if !req.logprobs {
            output.logprobs = None;
        }
        if let Some(error) = &error {
            output.finish_reason = Some("error".into());
            output.logprobs = None;
            errors.push((o, error.clone()));
        }
        choices.push(AnsweredChoice {
            output,
            choicewise: error.map(|error| ChoiceError { error }),
        });
    }
    finish.settled = Some(settled);
    finish.complete();
    // A choice cut by the gateway's shutdown is an answer as far as it got (the
    // shutdown's contract), not an upstream's failure.
    let failures: Vec<String> = (errors.iter())
        .filter(|(_, e)| e != SHUT_DOWN)
        .map(|(o, e)| format!("choice {o}: {e}"))
        .collect();
    if !failures.is_empty() && failures.len() == choices.len() {
        // Every choice failed upstream: a failure in the client's terms, not a 200 of
        // errors.
        finish.failure = Some("every_choice_failed");
        return ApiError::new(
            StatusCode::BAD_GATEWAY,
            "upstream_error",
            format!(
                "model {:?}: every choice failed: {}",
                req.model,
                failures.join("; ")
            ),
        )
        .code("every_choice_failed")
        .into_response();
    }
    let completion = Completion {
        id: &envelope.id,
        object: "chat.completion",
        created: envelope.created,
        model: &envelope.model,
        choices: &choices,
        usage: &usage,
        choicewise: summary.as_ref(),
    };
    let bytes = written(&completion);
    drop(choices);
    // The texts are in the bytes: the run's copies go before the answer is sent.
    finish.release();
    json_body(bytes, finish)
}

/// `value` written as JSON into one buffer of its exact size (counted first), so that a
/// large answer is held once, never grown and copied.
pub(crate) fn written(value: &impl Serialize) -> Bytes {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // Values in memory serialise without error.
    let _ = serde_json::to_writer(&mut count, value);
    let mut bytes = Vec::with_capacity(count.0);
    let _ = serde_json::to_writer(&mut bytes, value);
    Bytes::from(bytes)
}

/// A JSON answer's response, accounted when its body has been sent (or dropped).
pub(crate) fn json_body(bytes: Bytes, finish: Finish) -> Response {
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::new(Accounted::new(bytes, finish)))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_written_chunk_is_the_envelope_around_its_element() {
        let envelope = Envelope::new("m \"quoted\"");
        let element = ChoiceChunks::new(2)
            .event(&choicewise_core::ChoiceEvent::Content("a \"b\"\n".into()))
            .unwrap();
        let mut write = Vec::new();
        let encoder = envelope.encoder();
        encoder.element(&mut write, &element);
        encoder.element(&mut write, &element);
        let text = String::from_utf8(write).unwrap();
        let events: Vec<&str> = text.split_terminator("\n\n").collect();
        assert_eq!(events.len(), 2);
        let expected = json!({"index": 2, "delta": {"role": "assistant", "content": "a \"b\"\n"},
                              "logprobs": null, "finish_reason": null});
        for event in events {
            let data = event.strip_prefix("data: ").unwrap();
            let chunk: Value = serde_json::from_str(data).unwrap();
            assert_eq!(chunk, envelope.chunk(vec![expected.clone()]));
        }
    }
}
