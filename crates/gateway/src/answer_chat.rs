//! The answer of `POST /v1/chat/completions`: each output choice's chunks as they come
//! (streamed) or one `chat.completion`, with back-pressure, the shutdown's cut and the
//! request's accounting.

use std::task::Poll;

use axum::body::{Body, Bytes};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use choicewise_core::{ChatCompletion, ChoiceOutput, Logprobs};
use futures::StreamExt;
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::engine::Picked;
use crate::error::ApiError;
use crate::finish::Finish;
use crate::request::ChatRequest;
use choicewise_core::chunks::Envelope;
use choicewise_core::chunks::{ChoiceChunks, Element};

/// Why an answer is cut short, once it is: the gateway closes ([`SHUT_DOWN`],
/// [`Gateway::close`](crate::Gateway::close)) or the request passes its deadline
/// ([`PAST_DEADLINE`], `request_deadline_s`).
pub(crate) type Closing = watch::Receiver<Option<&'static str>>;

/// Resolves once the answer is cut short, with why; never if nothing can cut it any more.
pub(crate) async fn closed(closing: &mut Closing) -> &'static str {
    let why = (closing.wait_for(Option::is_some).await).map(|why| (*why).unwrap_or(SHUT_DOWN));
    match why {
        Ok(why) => why,
        Err(_) => std::future::pending().await,
    }
}

/// Why the answer was cut short, if it was.
pub(crate) fn cut_short(closing: &Closing) -> Option<&'static str> {
    *closing.borrow()
}

/// A streamed answer's response: 200, `text/event-stream`, no caching or proxy buffering.
pub(crate) fn sse_response(
    body: impl futures::Stream<Item = Result<Bytes, std::convert::Infallible>> + Send + 'static,
) -> Response {
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .header("x-accel-buffering", "no")
        .body(Body::from_stream(body))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

/// Awaits `work`; if the gateway closes first, its run's samples still running are
/// cancelled (their upstreams closed), and `work` ends with what they had.
pub(crate) async fn until_closed<T>(
    work: impl std::future::Future<Output = T>,
    closing: &mut Closing,
    run: &crate::engine::Run,
) -> T {
    let mut work = std::pin::pin!(work);
    tokio::select! {
        done = &mut work => done,
        _ = closed(closing) => {
            run.completions.cancel_except(&[]);
            work.await
        }
    }
}

/// What an output choice's stream says.
pub(crate) enum Out {
    Event(choicewise_core::ChoiceEvent),
    /// It failed: why.
    Failed(String),
    /// Its events ended.
    Ended,
}

/// One output choice's events, from its start.
pub(crate) fn output(
    completions: choicewise_core::Completions,
    index: Option<u32>,
) -> futures::stream::BoxStream<'static, Out> {
    async_stream::stream! {
        let choice = match index {
            Some(index) => completions.choice(index).await,
            None => None,
        };
        let Some(choice) = choice else {
            yield Out::Failed("the upstream ended without this choice".into());
            return;
        };
        let mut events = choice.events();
        while let Some(event) = events.next().await {
            match event {
                Ok(event) => yield Out::Event(event),
                Err(e) => {
                    yield Out::Failed(e.to_string());
                    return;
                }
            }
        }
        yield Out::Ended;
    }
    .boxed()
}

/// Why a choice ended when the gateway closed.
pub(crate) const SHUT_DOWN: &str = "the gateway shut down before this choice finished";

/// Why a choice ended when its request passed its deadline.
pub(crate) const PAST_DEADLINE: &str =
    "the request passed its deadline (request_deadline_s) before this choice finished";

fn sse(value: &Value) -> Bytes {
    Bytes::from(format!("data: {value}\n\n"))
}

/// How many bytes of chunks already made go into one write at most.
pub(crate) const WRITE_BYTES: usize = 16 * 1024;

/// Appends the chunk, if any, that one output choice's `out` makes; why the choice failed,
/// if `out` says it did (an error, an end without a finish, a finish of `error`).
fn chunk_out(
    write: &mut Vec<u8>,
    prefix: &str,
    chunks: &mut ChoiceChunks,
    out: Out,
) -> Option<String> {
    let (element, failed) = match out {
        Out::Event(event) => {
            let failed = match &event {
                choicewise_core::ChoiceEvent::Finished(reason) if &**reason == "error" => {
                    Some("the upstream ended the choice with finish_reason \"error\"".to_string())
                }
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
        chunk_event(write, prefix, &element);
    }
    failed
}

/// Appends the SSE event of one chunk holding `element`: `prefix` is the envelope up to its
/// `choices` array ([`Envelope::prefix`]).
fn chunk_event(write: &mut Vec<u8>, prefix: &str, element: &Element) {
    write.extend_from_slice(b"data: ");
    write.extend_from_slice(prefix.as_bytes());
    // An element serialises without error into memory.
    let _ = serde_json::to_writer(&mut *write, element);
    write.extend_from_slice(b"]}\n\n");
}

/// The streamed answer: each output choice's chunks as they come, then the usage and the
/// pick's summary when asked for, then (when every choice failed upstream) an error event
/// `{"error": {...}}`, then `[DONE]`.
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
        let outputs: Vec<_> = (picked.samples.iter().enumerate())
            .map(|(o, sample)| {
                output(run.completions.clone(), run.index_of(*sample)).map(move |out| (o, out))
            })
            .collect();
        let mut chunks: Vec<ChoiceChunks> = (0..outputs.len() as u32)
            .map(|o| ChoiceChunks::new(o).logprobs(req.logprobs))
            .collect();
        let several = outputs.len() > 1;
        // Why each output choice failed, if it did.
        let mut failures: Vec<Option<String>> = vec![None; outputs.len()];
        let mut merged = futures::stream::select_all(outputs);
        let prefix = envelope.prefix();
        // Every choice's opening, in index order, in the first write: waiting for no upstream.
        let mut opening = Vec::with_capacity(256 * chunks.len());
        for c in chunks.iter_mut() {
            chunk_event(&mut opening, &prefix, &c.opening());
        }
        yield Ok::<_, std::convert::Infallible>(Bytes::from(opening));
        let mut first = true;
        // From here the upstreams read no further ahead of this client than pace::AHEAD.
        run.pace.streaming();
        let mut ended = false;
        while !ended {
            let next = match futures::poll!(merged.next()) {
                Poll::Ready(next) => next,
                Poll::Pending => {
                    // Everything received is written: the upstreams may read on.
                    run.pace.caught_up();
                    tokio::select! {
                        biased;
                        next = merged.next() => next,
                        _ = closed(&mut closing) => None,
                    }
                }
            };
            let Some((o, out)) = next else { break };
            // Something to write: from here the upstreams wait while the client is behind.
            run.pace.writing();
            // One chunk per element, as the upstreams send them; every element already
            // there goes in the same write. The other choices of the same upstream read
            // are published by their own actors, which the runtime may run after this task
            // (a task woken by the running one runs next), so with several choices the
            // task steps aside once, behind the tasks already runnable, before it writes.
            let mut write = Vec::with_capacity(512);
            if let Some(why) = chunk_out(&mut write, &prefix, &mut chunks[o], out) {
                failures[o].get_or_insert(why);
            }
            let mut stepped_aside = !several;
            while write.len() < WRITE_BYTES {
                match futures::poll!(merged.next()) {
                    Poll::Ready(Some((o, out))) => {
                        if let Some(why) = chunk_out(&mut write, &prefix, &mut chunks[o], out) {
                            failures[o].get_or_insert(why);
                        }
                    }
                    Poll::Ready(None) => {
                        ended = true;
                        break;
                    }
                    Poll::Pending if !stepped_aside => {
                        stepped_aside = true;
                        tokio::task::yield_now().await;
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
            // Counted as taken once hyper asks for more, which it does when it can write.
            let len = write.len();
            yield Ok(Bytes::from(write));
            run.pace.sent(len);
        }
        drop(merged);
        // The usage and the summary wait for the upstreams' ends (a Responses stream's
        // closing events, the usage chunk), which write nothing until then: read freely.
        run.pace.caught_up();
        // Cut short by the gateway's close or the deadline: the choices not finished end now.
        let mut write = Vec::new();
        let why = cut_short(&closing).unwrap_or(SHUT_DOWN);
        for c in chunks.iter_mut().filter(|c| !c.is_finished()) {
            chunk_event(&mut write, &prefix, &c.failed(why));
        }
        if !write.is_empty() {
            yield Ok(Bytes::from(write));
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
            let mut last = envelope.chunk(Vec::new());
            if let Some(usage) = usage {
                last["usage"] = usage;
            }
            if let Some(summary) = summary {
                last["choicewise"] = summary;
            }
            yield Ok(sse(&last));
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
            yield Ok(sse(&error.body()));
        }
        finish.complete();
        yield Ok(Bytes::from_static(b"data: [DONE]\n\n"));
    };
    sse_response(body)
}

/// The answer as one `chat.completion`.
pub(crate) async fn json_response(
    mut finish: Finish,
    picked: Picked,
    req: ChatRequest,
    envelope: Envelope,
    mut closing: Closing,
) -> Response {
    let run = finish.run();
    let why = closing.clone();
    let answer = async {
        let mut choices = Vec::new();
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
            if let Some(error) = error {
                output.finish_reason = Some("error".into());
                output.logprobs = None;
                errors.push((o, error));
            }
            choices.push(output);
        }
        // A choice cut by the gateway's shutdown is an answer as far as it got (the
        // shutdown's contract), not an upstream's failure.
        let failures: Vec<String> = (errors.iter())
            .filter(|(_, e)| e != SHUT_DOWN)
            .map(|(o, e)| format!("choice {o}: {e}"))
            .collect();
        if !failures.is_empty() && failures.len() == choices.len() {
            // Every choice failed upstream: a failure in the client's terms, not a 200 of
            // errors.
            return Err(failures.join("; "));
        }
        // Log-probabilities stay text: out of the tree, written verbatim with it.
        let logprobs: Vec<Option<Logprobs>> =
            choices.iter_mut().map(|c| c.logprobs.take()).collect();
        let mut completion = ChatCompletion::new(choices);
        completion.id = envelope.id.to_string();
        completion.object = "chat.completion".into();
        completion.created = i64::try_from(envelope.created).unwrap_or(i64::MAX);
        completion.model = envelope.model.to_string();
        let mut body = serde_json::to_value(&completion).map_err(|e| e.to_string())?;
        for (o, error) in errors {
            body["choices"][o]["choicewise"] = json!({"error": error});
        }
        body["usage"] = run.usage(&picked.samples).await;
        let summary = run.final_summary(&picked, &req.policy).await;
        if let Some(summary) = summary {
            body["choicewise"] = summary;
        }
        Ok(WithLogprobs { body, logprobs })
    };
    // A shutdown's grace over: the samples still running end (cancelled), and the answer is
    // what they had.
    let body = until_closed(answer, &mut closing, run).await;
    finish.complete();
    match body {
        Ok(answer) => axum::Json(answer).into_response(),
        Err(why) => {
            finish.failure = Some("every_choice_failed");
            ApiError::new(
                StatusCode::BAD_GATEWAY,
                "upstream_error",
                format!("model {:?}: every choice failed: {why}", req.model),
            )
            .code("every_choice_failed")
            .into_response()
        }
    }
}

/// A `chat.completion` whose choices' `logprobs` are written from their text, in place of
/// the body's own (`null`): a tree of them would cost many times their bytes.
struct WithLogprobs {
    body: Value,
    /// By choice, in order.
    logprobs: Vec<Option<Logprobs>>,
}

impl serde::Serialize for WithLogprobs {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{SerializeMap, SerializeSeq};
        struct Choice<'a>(&'a Value, Option<&'a Logprobs>);
        impl serde::Serialize for Choice<'_> {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                let Some(fields) = self.0.as_object() else {
                    return self.0.serialize(s);
                };
                let mut map = s.serialize_map(Some(fields.len()))?;
                for (key, value) in fields {
                    match (key.as_str(), self.1) {
                        ("logprobs", Some(lp)) => map.serialize_entry(key, lp)?,
                        _ => map.serialize_entry(key, value)?,
                    }
                }
                map.end()
            }
        }
        struct Choices<'a>(&'a [Value], &'a [Option<Logprobs>]);
        impl serde::Serialize for Choices<'_> {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                let mut seq = s.serialize_seq(Some(self.0.len()))?;
                for (o, choice) in self.0.iter().enumerate() {
                    seq.serialize_element(&Choice(choice, self.1.get(o).and_then(Option::as_ref)))?;
                }
                seq.end()
            }
        }
        let Some(fields) = self.body.as_object() else {
            return self.body.serialize(s);
        };
        let mut map = s.serialize_map(Some(fields.len()))?;
        for (key, value) in fields {
            match (key.as_str(), value.as_array()) {
                ("choices", Some(choices)) => {
                    map.serialize_entry(key, &Choices(choices, &self.logprobs))?
                }
                _ => map.serialize_entry(key, value)?,
            }
        }
        map.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_written_chunk_is_the_envelope_around_its_element() {
        let envelope = Envelope::new("m \"quoted\"");
        let element = ChoiceChunks::new(2)
            .event(&choicewise_core::ChoiceEvent::Content("a \"b\"\n".into()))
            .unwrap();
        let mut write = Vec::new();
        chunk_event(&mut write, &envelope.prefix(), &element);
        chunk_event(&mut write, &envelope.prefix(), &element);
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
