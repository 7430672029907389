//! The gateway's traces (`[telemetry] otlp_endpoint`): one OpenTelemetry span per chat
//! request, following the GenAI semantic conventions, sent over OTLP/HTTP (JSON) to the
//! endpoint's `/v1/traces`.
//!
//! Made once per request, like the metrics: when its answer has ended (or its client went
//! away), from what the request came to ([`Outcome`]): see [`RequestSpan::end`]. A request
//! answered with an error before any sample started has its span too
//! ([`Traces::record_error`]). No header is ever recorded (no key can reach a span), nor an
//! error's message; the messages only with `capture_content = true`.
//!
//! The SDK's batch processor exports from a thread of its own; its HTTP requests are spawned
//! onto the gateway's tokio runtime ([`Http`]), so a gateway with traces is made inside one.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use axum::http::HeaderMap;
use bytes::Bytes;
use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{Span as _, SpanKind, Status, Tracer as _};
use opentelemetry::{Array, Context, InstrumentationScope, KeyValue, StringValue, Value as Attr};
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};
use serde_json::{Map, Value, json};
use tokio::sync::watch;

use crate::config::{ConfigError, Telemetry};
use crate::error::ApiError;
use crate::metrics::{Outcome, SampleEnd, SampleEnded};
use crate::request::ChatRequest;
use choicewise_core::Dialect;

/// How long one export may take (the HTTP request to the collector).
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a flush or the shutdown waits for the last spans to be made and sent.
pub(crate) const TRACES_WAIT: Duration = Duration::from_secs(5);

/// The most bytes of a collector's answer read.
const MAX_ANSWER_BYTES: usize = 1024 * 1024;

/// A gateway's tracer and its exporter.
pub(crate) struct Traces {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
    capture_content: bool,
    /// Requests whose span is not yet made.
    pending: watch::Sender<usize>,
}

impl std::fmt::Debug for Traces {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Traces")
            .field("capture_content", &self.capture_content)
            .finish()
    }
}

impl Traces {
    /// The traces `[telemetry]` asks for: `None` (nothing made, nothing on the hot path)
    /// without an endpoint.
    pub fn new(config: &Telemetry) -> Result<Option<Arc<Traces>>, ConfigError> {
        let Some(url) = config.traces_url() else {
            return Ok(None);
        };
        let err = |e: &dyn std::fmt::Display| ConfigError(format!("telemetry: {e}"));
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| {
            err(&"a gateway with traces (otlp_endpoint) must be made inside a tokio runtime")
        })?;
        let client = reqwest::Client::builder()
            .timeout(EXPORT_TIMEOUT)
            .build()
            .map_err(|e| err(&e))?;
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(opentelemetry_otlp::Protocol::HttpJson)
            .with_endpoint(url)
            .with_timeout(EXPORT_TIMEOUT)
            .with_http_client(Http { client, runtime })
            .build()
            .map_err(|e| err(&e))?;
        let mut resource = opentelemetry_sdk::Resource::builder();
        if std::env::var_os("OTEL_SERVICE_NAME").is_none() {
            resource = resource.with_service_name("choicewise-gateway");
        }
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource.build())
            .build();
        let tracer = opentelemetry::trace::TracerProvider::tracer_with_scope(
            &provider,
            InstrumentationScope::builder("choicewise-gateway")
                .with_version(env!("CARGO_PKG_VERSION"))
                .build(),
        );
        Ok(Some(Arc::new(Traces {
            provider,
            tracer,
            capture_content: config.capture_content,
            pending: watch::Sender::new(0),
        })))
    }

    /// The trace a request belongs to: its `traceparent` header's (W3C Trace Context), if it
    /// sent one.
    pub fn parent(headers: &HeaderMap) -> Context {
        TraceContextPropagator::new().extract(&opentelemetry_http::HeaderExtractor(headers))
    }

    /// A read request's span, to be ended with [`RequestSpan::end`] (or when dropped).
    pub fn request(
        self: &Arc<Self>,
        parent: Context,
        req: &ChatRequest,
        apis: impl Iterator<Item = Dialect>,
    ) -> RequestSpan {
        self.pending.send_modify(|n| *n += 1);
        RequestSpan {
            traces: self.clone(),
            parent,
            model: req.model.clone(),
            provider: provider_name(apis),
            n: req.n,
            samples: req.samples,
            stream: req.stream,
            select: req.policy.rule().as_str(),
            input: (self.capture_content).then(|| {
                let messages = (req.body.get("messages"))
                    .and_then(|m| serde_json::from_slice::<Value>(m).ok());
                input_messages(messages.as_ref()).to_string()
            }),
            response_id: None,
            key: None,
            first_chunk: OnceLock::new(),
        }
    }

    /// The span of a request answered with an error before any sample started (`model`: the
    /// model it asked for, if it said).
    pub fn record_error(
        &self,
        parent: &Context,
        took: Duration,
        model: Option<&str>,
        e: &ApiError,
    ) {
        let error_type = error_type(e);
        let attributes = vec![
            KeyValue::new("error.type", error_type.clone()),
            KeyValue::new("http.response.status_code", i64::from(e.status.as_u16())),
        ];
        self.unrun(parent, took, model, attributes, Some(error_type));
    }

    /// The span of a request whose client went away before any answer and before its samples
    /// started (its body arriving, its first samples opening): `choicewise.client_closed`,
    /// no error.
    pub fn record_gone(&self, parent: &Context, took: Duration, model: Option<&str>) {
        let attributes = vec![KeyValue::new("choicewise.client_closed", true)];
        self.unrun(parent, took, model, attributes, None);
    }

    /// The span of a request that ended before any sample started, `took` long, with these
    /// attributes besides the operation and the model, an error if `error` says one.
    fn unrun(
        &self,
        parent: &Context,
        took: Duration,
        model: Option<&str>,
        mut attributes: Vec<KeyValue>,
        error: Option<String>,
    ) {
        let end = SystemTime::now();
        attributes.insert(0, KeyValue::new("gen_ai.operation.name", "chat"));
        if let Some(model) = model {
            attributes.push(KeyValue::new("gen_ai.request.model", model.to_string()));
        }
        let mut span = self
            .tracer
            .span_builder(span_name(model))
            .with_kind(SpanKind::Server)
            .with_start_time(end.checked_sub(took).unwrap_or(end))
            .with_attributes(attributes)
            .start_with_context(&self.tracer, parent);
        if let Some(error_type) = error {
            span.set_status(Status::error(error_type));
        }
        span.end_with_timestamp(end);
    }

    /// Sends the spans made so far, once the requests that have ended have theirs (waiting
    /// at most [`TRACES_WAIT`]).
    pub async fn flush(&self) {
        self.settled().await;
        let provider = self.provider.clone();
        let flush = tokio::task::spawn_blocking(move || provider.force_flush());
        let _ = tokio::time::timeout(TRACES_WAIT, flush).await;
    }

    /// Sends the last spans and stops the exporter (waiting at most twice [`TRACES_WAIT`]):
    /// later spans are dropped.
    pub async fn shutdown(&self) {
        self.settled().await;
        let provider = self.provider.clone();
        let shutdown =
            tokio::task::spawn_blocking(move || provider.shutdown_with_timeout(TRACES_WAIT));
        let _ = tokio::time::timeout(TRACES_WAIT, shutdown).await;
    }

    /// Until every ended request has its span (at most [`TRACES_WAIT`]).
    async fn settled(&self) {
        let mut pending = self.pending.subscribe();
        let _ = tokio::time::timeout(TRACES_WAIT, pending.wait_for(|n| *n == 0)).await;
    }
}

impl Drop for Traces {
    fn drop(&mut self) {
        // Dropped without `shutdown`: the SDK's own shutdown, which sends the spans still
        // queued, blocks until they are sent; it runs on a thread of its own rather than on
        // the runtime's (whose tasks send them).
        let provider = self.provider.clone();
        let _ = std::thread::Builder::new()
            .name("choicewise-traces".into())
            .spawn(move || drop(provider));
    }
}

/// A request's span, in the making: what it needs from the request, until its end.
pub(crate) struct RequestSpan {
    traces: Arc<Traces>,
    parent: Context,
    /// The model asked for (a configured name).
    model: String,
    provider: &'static str,
    n: u32,
    samples: u32,
    stream: bool,
    select: &'static str,
    /// `gen_ai.input.messages`, with `capture_content`.
    input: Option<String>,
    /// The answer's id, once answered.
    pub response_id: Option<Arc<str>>,
    /// The name of the key that sent the request (`choicewise.key`), with `[auth]`.
    pub key: Option<Arc<str>>,
    /// From the request's arrival to its first chunk, when streamed.
    pub first_chunk: OnceLock<Duration>,
}

impl Drop for RequestSpan {
    fn drop(&mut self) {
        // Ended or not (its request's task gone), it is no longer pending.
        self.traces
            .pending
            .send_modify(|n| *n = n.saturating_sub(1));
    }
}

/// How long a request lasted: from its arrival to its answer's end on the monotonic clock,
/// and the wall clock at its arrival. Its span's times are that wall reading plus monotonic
/// durations, so the events of its tries lie within the span whatever the wall clock does
/// meanwhile (a step, a slew) and however late the span is made.
#[derive(Debug, Clone, Copy)]
pub struct Lasted {
    /// When the request arrived (monotonic).
    pub arrived: Instant,
    /// The wall clock at that moment.
    pub arrived_at: SystemTime,
    /// When its answer ended (monotonic).
    pub ended: Instant,
}

impl Lasted {
    /// The wall time of `at`, held within the request's time.
    fn wall(&self, at: Instant) -> SystemTime {
        let at = at.clamp(self.arrived, self.ended);
        self.arrived_at + at.duration_since(self.arrived)
    }
}

impl RequestSpan {
    /// Ends the span of a request that lasted from its arrival to its answer's end (`lasted`)
    /// and came to `outcome`, its upstream `tries` as events. `outputs`: the
    /// output choices' samples, in output order (`None`: every sample, `0..n`); `failure`:
    /// why the request was answered with an error, if it was; `completed`: the answer was sent
    /// to its end (not: its client went away).
    pub fn end(
        mut self,
        lasted: Lasted,
        outcome: &Outcome,
        tries: &[crate::upstream::open::TryRecord],
        outputs: Option<&[u32]>,
        failure: Option<&str>,
        completed: bool,
    ) {
        let all: Vec<u32>;
        let outputs = match outputs {
            Some(o) => o,
            None => {
                all = (0..self.n).collect();
                &all
            }
        };
        // The output choices first, in output order; then the other samples, by number.
        let mut ordered: Vec<&SampleEnd> = (outputs.iter())
            .filter_map(|o| outcome.samples.iter().find(|s| s.sample == Some(*o)))
            .collect();
        let mut others: Vec<&SampleEnd> = (outcome.samples.iter())
            .filter(|s| !s.sample.is_some_and(|s| outputs.contains(&s)))
            .collect();
        others.sort_by_key(|s| s.sample);
        ordered.extend(others);

        let capture = self.traces.capture_content;
        let messages: Vec<Value> = (ordered.iter())
            .map(|s| output_message(s, capture))
            .collect();
        let finish_reasons: Vec<StringValue> = (outputs.iter())
            .map(|o| {
                let end = outcome.samples.iter().find(|s| s.sample == Some(*o));
                StringValue::from(
                    end.map_or("error", |s| finish_reason(s.finish.as_str()))
                        .to_string(),
                )
            })
            .collect();
        let numbers = |samples: &mut dyn Iterator<Item = u32>| {
            Attr::Array(Array::I64(samples.map(i64::from).collect()))
        };
        // Whether the request failed is the answer's verdict (`AnswerEnd`), decided once.
        let failure = failure.map(str::to_string);

        let mut attributes = vec![
            KeyValue::new("gen_ai.operation.name", "chat"),
            KeyValue::new("gen_ai.provider.name", self.provider),
            KeyValue::new("gen_ai.request.model", self.model.clone()),
            KeyValue::new("gen_ai.request.choice.count", i64::from(self.n)),
            KeyValue::new(
                "gen_ai.response.finish_reasons",
                Attr::Array(Array::String(finish_reasons)),
            ),
            KeyValue::new("gen_ai.usage.input_tokens", count(outcome.prompt_tokens)),
            KeyValue::new(
                "gen_ai.usage.output_tokens",
                count(outcome.completion_tokens),
            ),
            KeyValue::new("gen_ai.output.messages", Value::Array(messages).to_string()),
            KeyValue::new("choicewise.samples", i64::from(self.samples)),
            KeyValue::new("choicewise.select", self.select),
            KeyValue::new("choicewise.stream", self.stream),
            KeyValue::new(
                "choicewise.output.samples",
                numbers(&mut ordered.iter().filter_map(|s| s.sample)),
            ),
            KeyValue::new("choicewise.selected", numbers(&mut outputs.iter().copied())),
            KeyValue::new(
                "choicewise.cancelled",
                numbers(
                    &mut (ordered.iter())
                        .filter(|s| s.finish == SampleEnded::Cancelled)
                        .filter_map(|s| s.sample),
                ),
            ),
            KeyValue::new("choicewise.usage.estimated", outcome.estimated),
            KeyValue::new(
                "choicewise.usage.cancelled_tokens",
                count(outcome.cancelled_tokens),
            ),
            KeyValue::new(
                "choicewise.usage.unselected_tokens",
                count(outcome.unselected_tokens),
            ),
            KeyValue::new("choicewise.client_closed", !completed),
            KeyValue::new("choicewise.tries", count(tries.len() as u64)),
        ];
        if let Some(key) = &self.key {
            attributes.push(KeyValue::new("choicewise.key", key.to_string()));
        }
        if let Some(id) = &self.response_id {
            attributes.push(KeyValue::new("gen_ai.response.id", id.to_string()));
        }
        if let Some(model) = &outcome.response_model {
            attributes.push(KeyValue::new("gen_ai.response.model", model.clone()));
        }
        if let Some(first) = self.first_chunk.get() {
            attributes.push(KeyValue::new(
                "gen_ai.response.time_to_first_chunk",
                first.as_secs_f64(),
            ));
        }
        if let Some(input) = self.input.take() {
            attributes.push(KeyValue::new("gen_ai.input.messages", input));
        }
        if let Some(failure) = &failure {
            attributes.push(KeyValue::new("error.type", failure.clone()));
        }
        let wall = |at: Instant| lasted.wall(at);
        let tracer = &self.traces.tracer;
        let mut span = tracer
            .span_builder(span_name(Some(&self.model)))
            .with_kind(SpanKind::Server)
            .with_start_time(lasted.arrived_at)
            .with_attributes(attributes)
            .start_with_context(tracer, &self.parent);
        // Each upstream try, at its end: the sample, the upstream and how it went.
        for t in tries {
            span.add_event_with_timestamp(
                "choicewise.try",
                wall(t.at),
                vec![
                    KeyValue::new("choicewise.sample", i64::from(t.sample)),
                    KeyValue::new("choicewise.upstream", t.upstream.to_string()),
                    KeyValue::new("choicewise.try.outcome", t.outcome.as_str()),
                ],
            );
        }
        if let Some(failure) = failure {
            span.set_status(Status::error(failure));
        }
        span.end_with_timestamp(wall(lasted.ended));
    }
}

/// `chat {model}`, as the conventions name an inference span.
///
/// The span is of kind SERVER, not CLIENT as an instrumented client's would be: it covers
/// the gateway serving its client's request, from its arrival to the end of its answer, and
/// is the request's entry into this process (a child of the client's `traceparent`), while
/// the upstream requests it makes may be several (fan-out, hedging).
fn span_name(model: Option<&str>) -> String {
    match model {
        Some(model) => format!("chat {model}"),
        None => "chat".to_string(),
    }
}

/// `gen_ai.provider.name`: the upstreams' API (`openai` for Chat Completions and Responses,
/// `anthropic`, `gcp.gemini`), or `choicewise` when a model's upstreams mix them.
fn provider_name(apis: impl Iterator<Item = Dialect>) -> &'static str {
    let mut names = apis.map(|api| api.api().provider_name());
    let first = names.next().unwrap_or("choicewise");
    match names.all(|n| n == first) {
        true => first,
        false => "choicewise",
    }
}

/// A finish reason as the conventions spell it (`tool_call` for OpenAI's `tool_calls` and
/// `function_call`); the others (`stop`, `length`, `content_filter`, `error`, `cancelled`)
/// as they are.
fn finish_reason(finish: &str) -> &str {
    match finish {
        "tool_calls" | "function_call" => "tool_call",
        other => other,
    }
}

/// The low-cardinality name of an error answer: its code, else its type.
fn error_type(e: &ApiError) -> String {
    e.code.clone().unwrap_or_else(|| e.kind.to_string())
}

/// One entry of `gen_ai.output.messages`: a sample's parts (reasoning, text, refusal, tool
/// calls) and its finish reason; without `capture`, the parts carry their type only (and a
/// tool call its id and name).
fn output_message(sample: &SampleEnd, capture: bool) -> Value {
    let m = &sample.message;
    let mut parts = Vec::new();
    let mut text = |kind: &str, content: &Option<String>| {
        if let Some(content) = content.as_deref().filter(|c| !c.is_empty()) {
            parts.push(match capture {
                true => json!({"type": kind, "content": content}),
                false => json!({"type": kind}),
            });
        }
    };
    text("reasoning", &m.reasoning_content);
    text("text", &m.content);
    text("refusal", &m.refusal);
    let calls = (m.tool_calls.iter())
        .map(|c| (Some(c.id.as_str()), &c.function))
        .chain(m.function_call.iter().map(|f| (None, f)));
    for (id, function) in calls {
        let mut part = Map::new();
        part.insert("type".into(), json!("tool_call"));
        if let Some(id) = id.filter(|id| !id.is_empty()) {
            part.insert("id".into(), json!(id));
        }
        part.insert("name".into(), json!(function.name));
        if capture {
            part.insert("arguments".into(), arguments(&function.arguments));
        }
        parts.push(Value::Object(part));
    }
    json!({
        "role": if m.role.is_empty() { "assistant" } else { m.role.as_str() },
        "parts": parts,
        "finish_reason": finish_reason(sample.finish.as_str()),
    })
}

/// A tool call's arguments: their JSON value, or the text when it is not JSON (cut short).
fn arguments(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|_| json!(text))
}

/// `gen_ai.input.messages` from a Chat Completions request's `messages`: each with its role
/// and parts (text, tool calls, tool call responses; other content parts by their type).
fn input_messages(messages: Option<&Value>) -> Value {
    let Some(Value::Array(messages)) = messages else {
        return json!([]);
    };
    let converted = messages.iter().map(|m| {
        let role = m["role"].as_str().unwrap_or("user");
        let mut parts = Vec::new();
        let content = match &m["content"] {
            Value::String(s) => vec![json!({"type": "text", "content": s})],
            Value::Array(items) => (items.iter())
                .map(|item| match (item["type"].as_str(), item["text"].as_str()) {
                    (Some("text"), Some(text)) => json!({"type": "text", "content": text}),
                    (kind, _) => json!({"type": kind.unwrap_or("unknown")}),
                })
                .collect(),
            _ => Vec::new(),
        };
        if role == "tool" {
            let response = match content.as_slice() {
                [one] => one["content"].clone(),
                _ => json!(content),
            };
            parts.push(json!({"type": "tool_call_response", "id": m["tool_call_id"], "response": response}));
        } else {
            parts.extend(content);
        }
        for call in m["tool_calls"].as_array().into_iter().flatten() {
            parts.push(json!({
                "type": "tool_call",
                "id": call["id"],
                "name": call["function"]["name"],
                "arguments": arguments(call["function"]["arguments"].as_str().unwrap_or_default()),
            }));
        }
        let mut entry = json!({"role": role, "parts": parts});
        if let Some(name) = m["name"].as_str() {
            entry["name"] = json!(name);
        }
        entry
    });
    Value::Array(converted.collect())
}

/// The OTLP exporter's HTTP client: the gateway's reqwest, its requests spawned onto the
/// gateway's runtime (the SDK's batch processor calls it from a thread without one).
#[derive(Debug)]
struct Http {
    client: reqwest::Client,
    runtime: tokio::runtime::Handle,
}

#[async_trait::async_trait]
impl opentelemetry_http::HttpClient for Http {
    async fn send_bytes(
        &self,
        request: axum::http::Request<Bytes>,
    ) -> Result<axum::http::Response<Bytes>, opentelemetry_http::HttpError> {
        let request = reqwest::Request::try_from(request)?;
        let client = self.client.clone();
        let sent = self.runtime.spawn(async move {
            let mut response = client.execute(request).await?;
            let mut body = Vec::new();
            while let Some(chunk) = response.chunk().await? {
                if body.len() + chunk.len() > MAX_ANSWER_BYTES {
                    break;
                }
                body.extend_from_slice(&chunk);
            }
            Ok::<_, reqwest::Error>((response.status(), response.headers().clone(), body))
        });
        let (status, headers, body) = sent.await??;
        let mut response = axum::http::Response::builder()
            .status(status)
            .body(Bytes::from(body))?;
        *response.headers_mut() = headers;
        Ok(response)
    }
}

/// A token count as an OpenTelemetry integer (saturating).
fn count(tokens: u64) -> i64 {
    i64::try_from(tokens).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use choicewise_core::{FunctionCall, Message, ToolCall};

    fn end(finish: &str, message: Message) -> SampleEnd {
        SampleEnd {
            sample: Some(0),
            finish: finish.into(),
            message,
            ..SampleEnd::default()
        }
    }

    #[test]
    fn output_messages_carry_content_only_when_captured() {
        let mut m = Message::assistant("It is sunny.");
        m.tool_calls.push(ToolCall::function(
            "call_1",
            "get_weather",
            r#"{"city":"Paris"}"#,
        ));
        let sample = end("tool_calls", m);
        assert_eq!(
            output_message(&sample, true),
            json!({"role": "assistant", "finish_reason": "tool_call", "parts": [
                {"type": "text", "content": "It is sunny."},
                {"type": "tool_call", "id": "call_1", "name": "get_weather", "arguments": {"city": "Paris"}},
            ]})
        );
        assert_eq!(
            output_message(&sample, false),
            json!({"role": "assistant", "finish_reason": "tool_call", "parts": [
                {"type": "text"},
                {"type": "tool_call", "id": "call_1", "name": "get_weather"},
            ]})
        );
        let mut legacy = Message::default();
        legacy.function_call = Some(FunctionCall::new("f", "{\"a\""));
        assert_eq!(
            output_message(&end("cancelled", legacy), true)["parts"],
            json!([{"type": "tool_call", "name": "f", "arguments": "{\"a\""}])
        );
    }

    #[test]
    fn input_messages_follow_the_conventions() {
        let messages = json!([
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "hi"}, {"type": "image_url", "image_url": {"url": "data:..."}}]},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "42"},
        ]);
        assert_eq!(
            input_messages(Some(&messages)),
            json!([
                {"role": "system", "parts": [{"type": "text", "content": "Be brief."}]},
                {"role": "user", "parts": [{"type": "text", "content": "hi"}, {"type": "image_url"}]},
                {"role": "assistant", "parts": [{"type": "tool_call", "id": "c1", "name": "f", "arguments": {}}]},
                {"role": "tool", "parts": [{"type": "tool_call_response", "id": "c1", "response": "42"}]},
            ])
        );
    }

    #[test]
    fn the_provider_is_the_upstreams_api_or_choicewise_when_mixed() {
        use Dialect::*;
        assert_eq!(provider_name([Chat, Responses].into_iter()), "openai");
        assert_eq!(provider_name([Anthropic].into_iter()), "anthropic");
        assert_eq!(provider_name([Gemini, Gemini].into_iter()), "gcp.gemini");
        assert_eq!(provider_name([Chat, Anthropic].into_iter()), "choicewise");
    }
}
