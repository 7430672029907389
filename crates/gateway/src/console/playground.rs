//! The playground: a prompt sent through the gateway's own Chat route, its samples
//! followed while the pick decides.
//!
//! `POST /console/playground` makes the request a client would (`/v1/chat/completions`,
//! streamed, with the client's key when the gateway asks one: the request is that key's,
//! limited and recorded as any other) and runs it through the gateway's router, with a
//! [`Watch`] in its extensions. Once the request's samples start, the route hands the watch
//! the run ([`Watch::tap`]): it follows every sample through the library's own per-choice
//! handles (a reader of its own beside the pick's, as `completions.choices()` allows any
//! number of), never through the answer. The browser gets one event stream: `sample` events
//! (a sample's text, reasoning, tool calls and their arguments as they stream, its finish or
//! its cancel and why, each with its time since the request), `answer` events (the client's
//! own Chat chunks, the last with the pick's `choicewise` summary: selected, cancelled, the
//! tally), and `error` (the gateway's refusal, as a client would get it).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderValue, Request, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use maud::html;
use serde_json::{Value, json};
use tower::ServiceExt;

use super::{Signed, failure, page};
use crate::state::Gateway;
use crate::upstream::engine::Run;

/// How long the stream waits, after the answer's end, for the samples' last events.
const LAST_EVENTS: Duration = Duration::from_millis(500);

/// A request's samples followed for the playground: every event of every sample, sent on.
#[derive(Clone)]
pub(crate) struct Watch {
    seen: tokio::sync::mpsc::UnboundedSender<Value>,
    since: Instant,
}

impl Watch {
    /// Follows every sample of `run` (the ones started later too), each on a task of its
    /// own that ends with the sample.
    pub(crate) fn tap(&self, run: &Run) {
        let samples: HashMap<u32, u32> = (0..run.samples)
            .filter_map(|s| run.index_of(s).map(|i| (i, s)))
            .collect();
        let completions = run.completions.clone();
        let watch = self.clone();
        tokio::spawn(async move {
            let mut choices = completions.choices();
            while let Some(choice) = choices.next().await {
                let sample = samples
                    .get(&choice.index())
                    .copied()
                    .unwrap_or(choice.index());
                let watch = watch.clone();
                tokio::spawn(async move {
                    let mut events = choice.events();
                    while let Some(event) = events.next().await {
                        let seen = match &event {
                            Ok(event) => match seen(event) {
                                Some(seen) => seen,
                                None => continue,
                            },
                            Err(e) => json!({"kind": "error", "text": e.to_string()}),
                        };
                        if !watch.send(sample, seen) {
                            return;
                        }
                    }
                    // Its tokens: the upstream's own figure for it, else counted from its
                    // text (once the stream that carries it ends).
                    let usage = choice.usage().await;
                    let source = match usage.source {
                        choicewise_core::UsageSource::Reported => "reported",
                        choicewise_core::UsageSource::Estimated => "estimated",
                    };
                    let tokens = json!({"kind": "tokens", "tokens": usage.completion_tokens, "source": source});
                    watch.send(sample, tokens);
                });
            }
        });
    }
}

impl Watch {
    /// Sends `seen` of `sample`, with its time since the request; false once the playground
    /// is gone.
    fn send(&self, sample: u32, mut seen: Value) -> bool {
        seen["sample"] = json!(sample);
        seen["at_ms"] = json!(self.since.elapsed().as_millis() as u64);
        self.seen.send(seen).is_ok()
    }
}

/// A sample's event as the playground shows it; `None` for what it does not show.
fn seen(event: &choicewise_core::ChoiceEvent) -> Option<Value> {
    use choicewise_core::ChoiceEvent as E;
    use choicewise_core::FunctionCallEvent as F;
    Some(match event {
        E::Content(text) => json!({"kind": "content", "text": &**text}),
        E::Reasoning(text) => json!({"kind": "reasoning", "text": &**text}),
        E::Refusal(text) => json!({"kind": "refusal", "text": &**text}),
        E::FunctionCall(F::Started { call, name, .. }) => json!({
            "kind": "call", "call": call.position, "name": name.as_deref().unwrap_or(""),
        }),
        E::FunctionCall(F::Arguments { call, fragment }) => json!({
            "kind": "arguments", "call": call.position, "text": &**fragment,
        }),
        E::Finished(reason) => json!({"kind": "finished", "reason": &**reason}),
        E::Cancelled(reason) => json!({"kind": "cancelled", "reason": reason.as_str()}),
        _ => return None,
    })
}

/// `GET /console/playground`: the form; the page's script streams the answer into it.
pub(super) async fn form(State(gw): State<Gateway>, _: Signed) -> Response {
    let mut models: Vec<&String> = gw.inner.models.keys().collect();
    models.sort();
    let asks_key = !gw.inner.keys.load().is_empty();
    let body = html! {
        form #playground method="post" action="/console/playground" {
            label for="model" { "Model" }
            select #model name="model" {
                @for m in &models { option value=(m) { (m) } }
            }
            label for="prompt" { "Prompt" }
            textarea #prompt name="prompt" rows="2" required {}
            label for="samples" { "Samples" }
            input #samples name="samples" type="number" min="1" max="16" aria-describedby="samples-help";
            span.help #samples-help { "empty: the model's pick as configured" }
            label for="select" { "Pick" }
            select #select name="select" {
                option value="" { "the model's" }
                option value="vote" { "vote" }
                option value="first_finished" { "first_finished" }
                option value="first_token" { "first_token" }
            }
            @if asks_key {
                label for="client-key" { "Client key" }
                input #client-key name="key" type="password" autocomplete="off" aria-describedby="key-help";
                span.help #key-help { "the request is this key's: limited and recorded as any other" }
            }
            button type="submit" { "Send" }
        }
        p #playground-status role="status" {}
        div #samples-view .columns {}
        section #decision aria-live="polite" {}
        noscript { p { "The playground streams with the console's script: turn scripts on for this page." } }
    };
    page("Playground", Some("/console/playground"), body).into_response()
}

#[derive(serde::Deserialize)]
pub(super) struct Asked {
    model: String,
    prompt: String,
    samples: Option<u32>,
    select: Option<String>,
    key: Option<String>,
}

/// `POST /console/playground`: the request sent through the gateway's router, its samples
/// and its answer as one event stream.
pub(super) async fn send(
    State(gw): State<Gateway>,
    _: Signed,
    asked: Result<axum::Json<Asked>, axum::extract::rejection::JsonRejection>,
) -> Response {
    let asked = match asked {
        Ok(axum::Json(asked)) => asked,
        Err(e) => return failure(StatusCode::BAD_REQUEST, &e.body_text()),
    };
    let mut extension = serde_json::Map::new();
    if let Some(samples) = asked.samples {
        extension.insert("samples".into(), json!(samples));
    }
    if let Some(select) = asked.select.filter(|s| !s.is_empty()) {
        extension.insert("select".into(), json!(select));
    }
    let mut body = json!({
        "model": asked.model,
        "stream": true,
        "stream_options": {"include_usage": true},
        "messages": [{"role": "user", "content": asked.prompt}],
    });
    if !extension.is_empty() {
        body["choicewise"] = Value::Object(extension);
    }
    let (seen, mut events) = tokio::sync::mpsc::unbounded_channel();
    let watch = Watch {
        seen,
        since: Instant::now(),
    };
    let mut request = Request::post("/v1/chat/completions")
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::HOST, "localhost")
        .body(Body::from(body.to_string()))
        .unwrap_or_default();
    if let Some(key) = asked.key.filter(|k| !k.trim().is_empty())
        && let Ok(value) = HeaderValue::from_str(&format!("Bearer {}", key.trim()))
    {
        request.headers_mut().insert(header::AUTHORIZATION, value);
    }
    request.extensions_mut().insert(watch);
    let answering = gw.router().oneshot(request);
    let stream = async_stream::stream! {
        // The samples' events from the start: a pick's answer begins only once it decided.
        tokio::pin!(answering);
        let answer = loop {
            tokio::select! {
                Some(seen) = events.recv() => yield Ok(event("sample", &seen)),
                answered = &mut answering => match answered {
                    Ok(answer) => break answer,
                    Err(never) => match never {},
                },
            }
        };
        let status = answer.status();
        let mut answer = answer.into_body().into_data_stream();
        if !status.is_success() {
            let mut text = Vec::new();
            while let Some(Ok(bytes)) = answer.next().await {
                text.extend_from_slice(&bytes);
            }
            let error: Value = serde_json::from_slice(&text)
                .unwrap_or_else(|_| json!({"error": {"message": String::from_utf8_lossy(&text)}}));
            yield Ok::<_, std::convert::Infallible>(event("error", &json!({"status": status.as_u16(), "body": error})));
            return;
        }
        let mut pending: Vec<u8> = Vec::new();
        let mut ended = false;
        while !ended {
            tokio::select! {
                Some(seen) = events.recv() => yield Ok(event("sample", &seen)),
                read = answer.next() => match read {
                    Some(Ok(bytes)) => {
                        pending.extend_from_slice(&bytes);
                        while let Some(at) = memchr::memmem::find(&pending, b"\n\n") {
                            let whole: Vec<u8> = pending.drain(..at + 2).collect();
                            for line in String::from_utf8_lossy(&whole).lines() {
                                let Some(data) = line.strip_prefix("data: ") else { continue };
                                if data == "[DONE]" {
                                    continue;
                                }
                                let chunk: Value = serde_json::from_str(data).unwrap_or(Value::Null);
                                yield Ok(event("answer", &chunk));
                            }
                        }
                    }
                    _ => ended = true,
                },
            }
        }
        // The samples' last events (a cancel sent as the answer ended).
        while let Ok(Some(seen)) = tokio::time::timeout(LAST_EVENTS, events.recv()).await {
            yield Ok(event("sample", &seen));
        }
        yield Ok(event("end", &json!({})));
    };
    (
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        Body::from_stream(stream),
    )
        .into_response()
}

/// An SSE event named `name` with `data`.
fn event(name: &str, data: &Value) -> axum::body::Bytes {
    axum::body::Bytes::from(format!("event: {name}\ndata: {data}\n\n"))
}
