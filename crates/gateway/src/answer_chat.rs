//! The answer of `POST /v1/chat/completions`: each output choice's chunks as they come
//! (streamed) or one `chat.completion`, with back-pressure, the shutdown's cut and the
//! request's accounting.

use axum::body::{Body, Bytes};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use choicewise_core::chunks::{ChoiceChunks, ChunkEncoder, DONE, Envelope};
use choicewise_core::{Choice, ChoiceOutput};
use serde::Serialize;
use serde::ser::{SerializeMap, SerializeSeq, Serializer};
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
        // The body ends once what the run came to is read (its record needs nothing more),
        // or a moment after, an upstream still open then closed.
        finish.settle_after_answer(&mut closing).await;
    };
    sse_response(body)
}

/// The output choices of a non-streamed answer, each written from the run's own copy of it
/// (read in place, [`Choice::inspect`](choicewise_core::Choice::inspect)), with why it failed,
/// if it did.
struct AnsweredChoices<'a> {
    choices: &'a [(Option<Choice>, Option<String>)],
    /// The client asked for log-probabilities.
    logprobs: bool,
}

impl Serialize for AnsweredChoices<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.choices.len()))?;
        for (o, (choice, error)) in self.choices.iter().enumerate() {
            let (index, error, logprobs) = (o as u32, error.as_deref(), self.logprobs);
            let mut write = |output: &ChoiceOutput| {
                seq.serialize_element(&AnsweredChoice {
                    index,
                    output,
                    error,
                    logprobs,
                })
            };
            match choice {
                Some(choice) => choice.inspect(write)?,
                None => write(&ChoiceOutput::default())?,
            }
        }
        seq.end()
    }
}

/// The client's choice `index`, as its upstream sent it: what the library adds of its own
/// (per-choice usage, the source, a mapped dialect's stop reason) left out; a failed one
/// ends with `finish_reason: "error"` and why in `choicewise.error`.
struct AnsweredChoice<'a> {
    index: u32,
    output: &'a ChoiceOutput,
    error: Option<&'a str>,
    logprobs: bool,
}

impl Serialize for AnsweredChoice<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Error<'a> {
            error: &'a str,
        }
        let output = self.output;
        let mut map = s.serialize_map(None)?;
        map.serialize_entry("index", &self.index)?;
        map.serialize_entry("message", &output.message)?;
        match self.error {
            Some(_) => map.serialize_entry("finish_reason", "error")?,
            None => map.serialize_entry("finish_reason", &output.finish_reason)?,
        }
        let logprobs = (self.logprobs && self.error.is_none())
            .then_some(output.logprobs.as_ref())
            .flatten();
        map.serialize_entry("logprobs", &logprobs)?;
        if let Some(filter) = &output.content_filter_results {
            map.serialize_entry("content_filter_results", filter)?;
        }
        if let Some(error) = self.error {
            map.serialize_entry("choicewise", &Error { error })?;
        }
        map.end()
    }
}

/// A non-streamed answer: a `chat.completion` with the run's usage and the pick's summary.
#[derive(Serialize)]
struct Completion<'a> {
    id: &'a str,
    object: &'static str,
    created: u64,
    model: &'a str,
    choices: AnsweredChoices<'a>,
    usage: &'a Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    choicewise: Option<&'a Value>,
}

/// The answer as one `chat.completion`, written from its types into one buffer of its exact
/// size: each choice's text is read where the run holds it and written once, into the
/// answer's bytes; the run is let go before they are sent.
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
    // Each output choice, and why it failed, if it did.
    let mut choices: Vec<(Option<Choice>, Option<String>)> = Vec::new();
    for sample in &picked.samples {
        let choice = match run.index_of(*sample) {
            Some(index) => run.completions.choice(index).await,
            None => None,
        };
        let error = match &choice {
            None => Some("the upstream ended without this choice".to_string()),
            Some(choice) => match (choice.error(), choice.inspect(|o| o.cancelled)) {
                (Some(error), _) => Some(error.to_string()),
                (None, true) => Some(cut_short(&why).unwrap_or(SHUT_DOWN).to_string()),
                (None, false) => None,
            },
        };
        choices.push((choice, error));
    }
    finish.settled = Some(settled);
    finish.complete();
    // A choice cut by the gateway's shutdown is an answer as far as it got (the
    // shutdown's contract), not an upstream's failure.
    let failures: Vec<String> = (choices.iter().enumerate())
        .filter_map(|(o, (_, e))| e.as_ref().map(|e| (o, e)))
        .filter(|(_, e)| *e != SHUT_DOWN)
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
        choices: AnsweredChoices {
            choices: &choices,
            logprobs: req.logprobs,
        },
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
    fn an_answered_choice_is_its_output_renumbered_without_the_librarys_additions() {
        let mut output = ChoiceOutput::new(7, choicewise_core::Message::assistant("Hi"));
        output.finish_reason = Some("stop".into());
        output.logprobs = Some(choicewise_core::Logprobs::from_value(
            &json!({"content": []}),
        ));
        output.content_filter_results = Some(json!({"hate": {"filtered": false}}));
        output.stop_reason = Some("end_turn".into());
        output.usage = Some(choicewise_core::ChoiceUsage::new(
            3,
            choicewise_core::UsageSource::Reported,
        ));
        let written = |error: Option<&str>, logprobs: bool| {
            serde_json::to_value(AnsweredChoice {
                index: 2,
                output: &output,
                error,
                logprobs,
            })
            .unwrap()
        };
        // As the library's own serialisation of the choice says it, but for its additions.
        let mut expected = output.clone();
        expected.index = 2;
        (expected.usage, expected.stop_reason) = (None, None);
        assert_eq!(
            written(None, true),
            serde_json::to_value(&expected).unwrap()
        );
        expected.logprobs = None;
        assert_eq!(
            written(None, false),
            serde_json::to_value(&expected).unwrap()
        );
        let mut failed = serde_json::to_value(&expected).unwrap();
        failed["finish_reason"] = json!("error");
        failed["choicewise"] = json!({"error": "cut"});
        assert_eq!(written(Some("cut"), true), failed);
    }

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
