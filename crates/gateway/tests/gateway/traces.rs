//! The gateway's traces over real loopback HTTP: the project's test server as the upstreams,
//! the gateway served on 127.0.0.1, and a loopback OTLP/HTTP receiver that decodes each
//! export (`POST /v1/traces`, OTLP's JSON encoding) into the protocol's own types.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;

use choicewise_gateway::{Config, Gateway};
use choicewise_test_support::within;
use choicewise_testserver::Failure;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use opentelemetry_proto::tonic::trace::v1::status::StatusCode;
use serde_json::{Map, Value, json};

use crate::common::{answering, fixture, says, serve, stalled, start};

const LIMIT: Duration = Duration::from_secs(20);

/// The environment the gateways of these tests see: keys that must never reach a span.
fn env(name: &str) -> Option<String> {
    match name {
        "UPSTREAM_KEY" => Some("sk-upstream-secret".into()),
        "CLIENT_KEYS" => Some("sk-client-secret".into()),
        _ => None,
    }
}

/// One decoded span: what the tests look at.
#[derive(Debug, Clone)]
struct Span {
    name: String,
    kind: i32,
    trace_id: Vec<u8>,
    parent_span_id: Vec<u8>,
    start: u64,
    end: u64,
    error: bool,
    service: Option<String>,
    /// Its attributes as JSON values (arrays as arrays).
    attributes: Map<String, Value>,
    /// Its events: each one's name, time and attributes.
    events: Vec<(String, u64, Map<String, Value>)>,
}

impl Span {
    fn attr(&self, key: &str) -> &Value {
        self.attributes.get(key).unwrap_or(&Value::Null)
    }

    /// `gen_ai.output.messages`, parsed.
    fn output_messages(&self) -> Vec<Value> {
        let text = self.attr("gen_ai.output.messages").as_str();
        let text = text.unwrap_or_else(|| panic!("no gen_ai.output.messages: {self:#?}"));
        serde_json::from_str::<Vec<Value>>(text).unwrap()
    }
}

fn json_of(value: Option<&any_value::Value>) -> Value {
    match value {
        None => Value::Null,
        Some(any_value::Value::StringValue(s)) => json!(s),
        Some(any_value::Value::BoolValue(b)) => json!(b),
        Some(any_value::Value::IntValue(i)) => json!(i),
        Some(any_value::Value::DoubleValue(d)) => json!(d),
        Some(any_value::Value::ArrayValue(a)) => (a.values.iter())
            .map(|v| json_of(v.value.as_ref()))
            .collect(),
        Some(other) => panic!("an attribute of an unexpected type: {other:?}"),
    }
}

/// A loopback OTLP/HTTP receiver: every export's raw body, and its spans decoded.
#[derive(Clone, Default)]
struct Receiver {
    bodies: Arc<Mutex<Vec<String>>>,
    spans: Arc<Mutex<Vec<Span>>>,
}

async fn receive(State(receiver): State<Receiver>, body: Bytes) -> axum::Json<Value> {
    let text = String::from_utf8(body.to_vec()).expect("an OTLP/JSON body");
    let request: ExportTraceServiceRequest =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("not OTLP/JSON ({e}): {text}"));
    let mut decoded = Vec::new();
    for resource_spans in &request.resource_spans {
        let service = (resource_spans.resource.iter())
            .flat_map(|r| &r.attributes)
            .find(|kv| kv.key == "service.name")
            .and_then(|kv| {
                json_of(kv.value.as_ref().and_then(|v| v.value.as_ref()))
                    .as_str()
                    .map(str::to_string)
            });
        for scope_spans in &resource_spans.scope_spans {
            for span in &scope_spans.spans {
                decoded.push(Span {
                    name: span.name.clone(),
                    kind: span.kind,
                    trace_id: span.trace_id.clone(),
                    parent_span_id: span.parent_span_id.clone(),
                    start: span.start_time_unix_nano,
                    end: span.end_time_unix_nano,
                    error: span
                        .status
                        .as_ref()
                        .is_some_and(|s| s.code == StatusCode::Error as i32),
                    service: service.clone(),
                    attributes: (span.attributes.iter())
                        .map(|kv| {
                            let value = kv.value.as_ref().and_then(|v| v.value.as_ref());
                            (kv.key.clone(), json_of(value))
                        })
                        .collect(),
                    events: (span.events.iter())
                        .map(|e| {
                            let attributes = (e.attributes.iter())
                                .map(|kv| {
                                    let value = kv.value.as_ref().and_then(|v| v.value.as_ref());
                                    (kv.key.clone(), json_of(value))
                                })
                                .collect();
                            (e.name.clone(), e.time_unix_nano, attributes)
                        })
                        .collect(),
                });
            }
        }
    }
    receiver.bodies.lock().unwrap().push(text);
    receiver.spans.lock().unwrap().extend(decoded);
    axum::Json(json!({}))
}

impl Receiver {
    /// A receiver on a free port of 127.0.0.1, and its base URL (the `otlp_endpoint`).
    async fn start() -> (Receiver, String) {
        let receiver = Receiver::default();
        let app = axum::Router::new()
            .route("/v1/traces", axum::routing::post(receive))
            .with_state(receiver.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        (receiver, format!("http://{addr}"))
    }

    /// The spans received once there are `count` (flushing the gateway's exporter until
    /// then), after a moment in which no more come.
    async fn spans(&self, gateway: &Gateway, count: usize) -> Vec<Span> {
        let deadline = Instant::now() + LIMIT;
        loop {
            gateway.flush_traces().await;
            let spans = self.spans.lock().unwrap().clone();
            if spans.len() >= count {
                tokio::time::sleep(Duration::from_millis(200)).await;
                gateway.flush_traces().await;
                let spans = self.spans.lock().unwrap().clone();
                assert_eq!(spans.len(), count, "one span per request: {spans:#?}");
                return spans;
            }
            assert!(
                Instant::now() < deadline,
                "{} spans of {count} after {LIMIT:?}",
                spans.len()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Every export's body, as sent.
    fn raw(&self) -> String {
        self.bodies.lock().unwrap().join("\n")
    }
}

/// A gateway of this configuration served on 127.0.0.1, and the gateway itself.
async fn gateway(toml: &str) -> (SocketAddr, Gateway) {
    serve(toml, env).await
}

/// `[telemetry]`, `[auth]` and these models: `(name, base_url, extra upstream TOML)`, each
/// over one chat upstream that needs a key.
fn config(endpoint: &str, capture_content: bool, models: &[(&str, String, &str)]) -> String {
    let mut toml = format!(
        "[auth]\nkeys_env = \"CLIENT_KEYS\"\n[telemetry]\notlp_endpoint = \"{endpoint}/\"\ncapture_content = {capture_content}\n"
    );
    for (name, url, extra) in models {
        toml.push_str(&format!(
            "[[models]]\nname = \"{name}\"\n[[models.upstreams]]\napi = \"chat\"\nbase_url = \"{url}\"\nmodel = \"up\"\napi_key_env = \"UPSTREAM_KEY\"\n{extra}\n"
        ));
    }
    toml
}

async fn post(addr: SocketAddr, body: Value) -> reqwest::Response {
    post_with(addr, body, None).await
}

async fn post_with(addr: SocketAddr, body: Value, traceparent: Option<&str>) -> reqwest::Response {
    let mut request = reqwest::Client::new()
        .post(format!("http://{addr}/v1/chat/completions"))
        .bearer_auth("sk-client-secret")
        .json(&body);
    if let Some(traceparent) = traceparent {
        request = request.header("traceparent", traceparent);
    }
    within(LIMIT, "the answer's head", request.send())
        .await
        .unwrap()
}

/// The chunks of a streamed answer (ended with `[DONE]`).
async fn read_sse(response: reqwest::Response) -> Vec<Value> {
    assert_eq!(response.status(), 200);
    let text = within(LIMIT, "the stream", response.text()).await.unwrap();
    assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
    (text.split("\n\n"))
        .filter_map(|e| e.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).unwrap())
        .collect()
}

fn request(model: &str, n: u32) -> Value {
    json!({"model": model, "n": n, "stream": true, "stream_options": {"include_usage": true},
           "messages": [{"role": "user", "content": "What is the weather in Paris?"}]})
}

/// The span of the request whose answer had this id.
fn span_of<'a>(spans: &'a [Span], id: &Value) -> &'a Span {
    (spans.iter())
        .find(|s| s.attr("gen_ai.response.id") == id)
        .unwrap_or_else(|| panic!("no span with gen_ai.response.id {id}: {spans:#?}"))
}

/// What every span of a chat request carries.
fn assert_common(span: &Span, model: &str, n: u64, usage: &Value) {
    assert_eq!(span.name, format!("chat {model}"));
    assert_eq!(span.kind, SpanKind::Server as i32);
    assert_eq!(span.service.as_deref(), Some("choicewise-gateway"));
    assert!(span.end > span.start, "{span:#?}");
    assert!(!span.error, "{span:#?}");
    assert_eq!(span.attr("gen_ai.operation.name"), "chat");
    assert_eq!(span.attr("gen_ai.provider.name"), "openai");
    assert_eq!(span.attr("gen_ai.request.model"), model);
    assert_eq!(span.attr("gen_ai.request.choice.count"), n);
    // The key's name: the unnamed keys of `keys_env` are `(unnamed)`, never the key.
    assert_eq!(span.attr("choicewise.key"), "(unnamed)");
    assert_eq!(
        span.attr("gen_ai.usage.input_tokens"),
        &usage["prompt_tokens"]
    );
    assert_eq!(
        span.attr("gen_ai.usage.output_tokens"),
        &usage["completion_tokens"]
    );
    let first = span.attr("gen_ai.response.time_to_first_chunk");
    let first = first.as_f64().unwrap_or_else(|| panic!("{span:#?}"));
    assert!(
        first > 0.0 && first < (span.end - span.start) as f64 / 1e9,
        "time to first chunk {first}"
    );
    assert!(span.attr("error.type").is_null());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_span_per_request_with_every_choice_and_no_content_unless_asked() {
    let (receiver, endpoint) = Receiver::start().await;
    let tools = fixture("openai_n3_tools.sse").await;
    // The winner starts late: the others have said something by then.
    let winner = says("the answer is 42").delay(Duration::from_millis(300));
    let picks = start(stalled(2).then(winner).then(stalled(2))).await;
    let (addr, gateway) = gateway(&config(
        &endpoint,
        false,
        &[
            ("m", tools.base_url(), ""),
            ("pick", picks.base_url(), "n = \"fan-out\""),
        ],
    ))
    .await;

    // n = 3, streamed: one entry per choice, with its finish reason.
    let chunks = read_sse(post(addr, request("m", 3)).await).await;
    let usage = chunks.last().unwrap()["usage"].clone();
    assert_eq!(usage["prompt_tokens"], 97, "the fixture's usage");
    // A selection: 3 samples, the first to finish is the choice, the 2 others cancelled.
    let mut select = request("pick", 1);
    select["choicewise"] = json!({"samples": 3, "select": "first_finished"});
    let picked = read_sse(post(addr, select).await).await;
    let summary = &picked.last().unwrap()["choicewise"];
    assert_eq!(summary["cancelled"].as_array().unwrap().len(), 2);
    let picked_usage = picked.last().unwrap()["usage"].clone();

    let spans = receiver.spans(&gateway, 2).await;

    let span = span_of(&spans, &chunks[0]["id"]);
    assert_common(span, "m", 3, &usage);
    assert_eq!(span.attr("gen_ai.response.model"), "gpt-4o-mini-2024-07-18");
    assert_eq!(
        span.attr("gen_ai.response.finish_reasons"),
        &json!(["stop", "tool_call", "stop"])
    );
    assert_eq!(span.attr("choicewise.samples"), 3);
    assert_eq!(span.attr("choicewise.output.samples"), &json!([0, 1, 2]));
    assert_eq!(span.attr("choicewise.cancelled"), &json!([]));
    let messages = span.output_messages();
    assert_eq!(messages.len(), 3, "one entry per choice: {messages:#?}");
    let finishes: Vec<&Value> = messages.iter().map(|m| &m["finish_reason"]).collect();
    assert_eq!(finishes, ["stop", "tool_call", "stop"]);
    for m in &messages {
        assert_eq!(m["role"], "assistant");
        for part in m["parts"].as_array().unwrap() {
            assert!(
                part.get("content").is_none() && part.get("arguments").is_none(),
                "no content without capture_content: {part}"
            );
        }
    }
    assert_eq!(messages[0]["parts"], json!([{"type": "text"}]));
    let call = &messages[1]["parts"].as_array().unwrap().last().unwrap();
    assert_eq!(call["type"], "tool_call");
    assert!(
        call["name"].as_str().is_some_and(|n| !n.is_empty()),
        "{call}"
    );
    assert!(span.attr("gen_ai.input.messages").is_null());

    let span = span_of(&spans, &picked[0]["id"]);
    assert_common(span, "pick", 1, &picked_usage);
    assert_eq!(span.attr("choicewise.samples"), 3);
    assert_eq!(span.attr("choicewise.select"), "first_finished");
    assert_eq!(
        span.attr("gen_ai.response.finish_reasons"),
        &json!(["stop"])
    );
    assert_eq!(span.attr("choicewise.selected"), &summary["selected"]);
    assert_eq!(span.attr("choicewise.cancelled"), &summary["cancelled"]);
    assert!(
        span.attr("choicewise.usage.cancelled_tokens")
            .as_i64()
            .unwrap()
            > 0
    );
    let messages = span.output_messages();
    assert_eq!(
        messages.len(),
        3,
        "every sample, the cancelled ones included"
    );
    let finishes: Vec<&Value> = messages.iter().map(|m| &m["finish_reason"]).collect();
    assert_eq!(
        finishes,
        ["stop", "cancelled", "cancelled"],
        "{messages:#?}"
    );
    assert_eq!(
        messages[1]["parts"],
        json!([{"type": "text"}]),
        "what it had"
    );

    // No content, no key, ever.
    let raw = receiver.raw();
    for never in [
        "Paris",
        "the answer is 42",
        "let me think",
        "sk-upstream-secret",
        "sk-client-secret",
    ] {
        assert!(!raw.contains(never), "{never:?} in an export");
    }
}

/// Each upstream try is an event of the request's span, at its end, naming its sample, its
/// upstream and how it went.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_try_is_an_event_of_the_requests_span() {
    let (receiver, endpoint) = Receiver::start().await;
    let upstream = start(says("retried").fail_first(1, Failure::status(503))).await;
    let (addr, gateway) = gateway(&config(
        &endpoint,
        false,
        &[(
            "m",
            upstream.base_url(),
            "[models.retry]\nattempts = 2\nbackoff_ms = 1",
        )],
    ))
    .await;
    let chunks = read_sse(post(addr, request("m", 1)).await).await;
    let spans = receiver.spans(&gateway, 1).await;
    let span = span_of(&spans, &chunks[0]["id"]);
    assert_eq!(span.attr("choicewise.tries"), 2);
    let tries: Vec<(&str, &Value, &Value)> = (span.events.iter())
        .map(|(name, _, a)| {
            (
                name.as_str(),
                &a["choicewise.try.outcome"],
                &a["choicewise.sample"],
            )
        })
        .collect();
    assert_eq!(
        tries,
        [
            ("choicewise.try", &json!("5xx"), &json!(0)),
            ("choicewise.try", &json!("ok"), &json!(0))
        ]
    );
    for (_, at, a) in &span.events {
        assert!(span.start <= *at && *at <= span.end, "within the span");
        assert!(
            a["choicewise.upstream"]
                .as_str()
                .unwrap()
                .starts_with("chat:up@")
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn content_is_captured_when_asked_and_errors_have_their_span() {
    let (receiver, endpoint) = Receiver::start().await;
    let upstream = answering("the answer is 42").await;
    let (addr, gateway) = gateway(&config(
        &endpoint,
        true,
        &[("m", upstream.base_url(), "n = \"fan-out\"")],
    ))
    .await;
    let trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
    let traceparent = format!("00-{trace_id}-00f067aa0ba902b7-01");
    let chunks = read_sse(post_with(addr, request("m", 2), Some(&traceparent)).await).await;
    let usage = chunks.last().unwrap()["usage"].clone();
    // Not streamed: no first chunk.
    let mut whole = request("m", 1);
    whole["stream"] = json!(false);
    whole.as_object_mut().unwrap().remove("stream_options");
    let answer: Value = post(addr, whole).await.json().await.unwrap();
    // Refused before any sample: a span with its error.
    let unknown = post(addr, request("nope", 1)).await;
    assert_eq!(unknown.status(), 404);

    let spans = receiver.spans(&gateway, 3).await;

    let span = span_of(&spans, &chunks[0]["id"]);
    assert_common(span, "m", 2, &usage);
    let hex = |bytes: &[u8]| bytes.iter().map(|b| format!("{b:02x}")).collect::<String>();
    assert_eq!(hex(&span.trace_id), trace_id, "the client's trace");
    assert_eq!(hex(&span.parent_span_id), "00f067aa0ba902b7");
    assert_eq!(span.attr("choicewise.usage.estimated"), true);
    let messages = span.output_messages();
    assert_eq!(messages.len(), 2);
    for m in &messages {
        assert_eq!(
            m,
            &json!({"role": "assistant", "finish_reason": "stop",
                    "parts": [{"type": "text", "content": "the answer is 42"}]})
        );
    }
    let input: Value =
        serde_json::from_str(span.attr("gen_ai.input.messages").as_str().unwrap()).unwrap();
    assert_eq!(
        input,
        json!([{"role": "user", "parts": [{"type": "text", "content": "What is the weather in Paris?"}]}])
    );

    let span = span_of(&spans, &answer["id"]);
    assert_eq!(span.attr("gen_ai.request.choice.count"), 1);
    assert!(span.attr("gen_ai.response.time_to_first_chunk").is_null());
    assert_eq!(span.output_messages().len(), 1);
    assert_eq!(
        span.attr("gen_ai.usage.output_tokens"),
        &answer["usage"]["completion_tokens"]
    );

    let span = (spans.iter()).find(|s| s.name == "chat nope").unwrap();
    assert!(span.error);
    assert_eq!(span.attr("error.type"), "model_not_found");
    assert_eq!(span.attr("gen_ai.request.model"), "nope");
    assert_eq!(span.attr("http.response.status_code"), 404);
    assert!(!receiver.raw().contains("sk-"), "no key in an export");
}

/// A client that leaves while its samples open, or while its vote is undecided, has its
/// span as any other request, ended with its record: `choicewise.client_closed`, not an
/// error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_gone_before_its_answer_has_its_span() {
    let (receiver, endpoint) = Receiver::start().await;
    // Heads that never come in time: the samples are still opening when the client leaves.
    let opening = start(says("late").head_delay(LIMIT)).await;
    let undecided = start(stalled(2)).await;
    let (addr, gateway) = gateway(&config(
        &endpoint,
        false,
        &[
            ("opening", opening.base_url(), "n = \"fan-out\""),
            ("undecided", undecided.base_url(), "n = \"fan-out\""),
        ],
    ))
    .await;
    for (model, upstream, spans) in [("opening", &opening, 1), ("undecided", &undecided, 2)] {
        let mut body = request(model, 1);
        body["choicewise"] = json!({"samples": 2, "select": "vote"});
        let asking = tokio::spawn(async move { post(addr, body).await });
        // Both samples asked, then a moment for the undecided ones to stream their first
        // events (the vote has nothing to count), and the client leaves.
        within(LIMIT, "both samples asked", async {
            while upstream.requests().len() < 2 {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        asking.abort();
        let spans = receiver.spans(&gateway, spans).await;
        let name = format!("chat {model}");
        let span = (spans.iter()).find(|s| s.name == name);
        let span = span.unwrap_or_else(|| panic!("no span {name}: {spans:#?}"));
        assert_eq!(span.attr("gen_ai.request.model"), model, "{span:#?}");
        assert_eq!(span.attr("choicewise.client_closed"), true, "{span:#?}");
        assert!(!span.error, "a client gone is no error: {span:#?}");
        if model == "undecided" {
            // The span of its run.
            assert_eq!(span.attr("choicewise.select"), "vote");
            assert_eq!(span.attr("choicewise.samples"), 2);
        }
    }
}

#[test]
fn the_endpoint_is_a_base_url_and_traces_are_off_without_one() {
    let models = "[[models]]\nname = \"m\"\n[[models.upstreams]]\napi = \"chat\"\nbase_url = \"http://127.0.0.1:9/v1\"\n";
    let off = Config::from_toml(models).unwrap();
    assert_eq!(off.telemetry.traces_url(), None);
    assert!(!off.telemetry.capture_content);
    // Off: nothing to export, so no runtime needed.
    Gateway::new(&off).unwrap();
    let on = Config::from_toml(&format!(
        "[telemetry]\notlp_endpoint = \"https://collector:4318/\"\n{models}"
    ))
    .unwrap();
    assert_eq!(
        on.telemetry.traces_url().as_deref(),
        Some("https://collector:4318/v1/traces")
    );
    for bad in ["collector:4318", "grpc://collector:4317", "http://"] {
        let e = Config::from_toml(&format!("[telemetry]\notlp_endpoint = \"{bad}\"\n{models}"))
            .unwrap_err();
        assert!(e.to_string().contains("otlp_endpoint"), "{bad}: {e}");
    }
    let e =
        Config::from_toml(&format!("[telemetry]\nendpoint = \"http://c\"\n{models}")).unwrap_err();
    assert!(e.to_string().contains("unknown field"), "{e}");
}
