//! The I/O: the HTTP/1.1 server loop (hyper), routing and answering each request, and
//! writing the SSE body as the plan says.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, Limited, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::task::JoinSet;

use crate::plan::Write;
use crate::{End, Failure, RecordedRequest, State};

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type Body = BoxBody<Bytes, BoxError>;

/// How long a cut waits for the bytes before it to leave.
const FLUSH_BEFORE_CUT: Duration = Duration::from_millis(20);

/// The largest request body read; a larger one is answered with 413.
const MAX_REQUEST_BODY: usize = 4 << 20;

impl Failure {
    fn response(&self) -> Response<Body> {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut builder = Response::builder().status(status);
        if let Some(after) = &self.retry_after {
            builder = builder.header("retry-after", after.as_str());
        }
        let (content_type, body) = match &self.text_body {
            Some(text) => ("text/plain; charset=utf-8", text.clone().into_bytes()),
            None => ("application/json", self.body().to_string().into_bytes()),
        };
        builder
            .header("content-type", content_type)
            .body(full(body))
            .expect("a valid response")
    }
}

pub(crate) async fn accept_loop(listener: TcpListener, state: Arc<State>) {
    let mut connections = JoinSet::new();
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(_) => {
                // Out of descriptors or the like: wait a little rather than spin.
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        while connections.try_join_next().is_some() {}
        let _ = stream.set_nodelay(true);
        let number = state.connections.fetch_add(1, Ordering::SeqCst);
        let state = state.clone();
        connections.spawn(async move {
            let service = service_fn(move |request| handle(state.clone(), request, number));
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed()
}

/// How a path's requests carry their key: a bearer token (OpenAI), `api-key` (Azure
/// OpenAI, with `?api-version=`), `x-api-key` (Anthropic) or `x-goog-api-key` (Gemini).
enum KeyHeader {
    Bearer,
    Azure,
    XApiKey,
    Goog,
}

fn route(path: &str) -> Option<KeyHeader> {
    match path {
        "/v1/chat/completions" | "/v1/responses" => return Some(KeyHeader::Bearer),
        "/v1/messages" | "/v1/messages/count_tokens" => return Some(KeyHeader::XApiKey),
        _ => {}
    }
    // Gemini: `/v1beta/models/{model}:streamGenerateContent` (or `:generateContent`).
    if let Some(rest) = path.strip_prefix("/v1beta/models/")
        && let Some((model, method)) = rest.split_once(':')
    {
        let known = matches!(method, "streamGenerateContent" | "generateContent");
        return (known && !model.is_empty() && !model.contains('/')).then_some(KeyHeader::Goog);
    }
    let deployment = path
        .strip_prefix("/openai/deployments/")?
        .strip_suffix("/chat/completions")?;
    (!deployment.is_empty() && !deployment.contains('/')).then_some(KeyHeader::Azure)
}

/// `POST /v1/messages/count_tokens`: `{"input_tokens": N}`, N the words of the request's
/// text (its `system` and its messages' text, as strings or text blocks): a stand-in for the
/// provider's own count, so that a test can tell it from an estimate.
fn count_tokens(request: &RecordedRequest) -> Response<Body> {
    fn words(value: &serde_json::Value) -> usize {
        match value {
            serde_json::Value::String(s) => s.split_whitespace().count(),
            serde_json::Value::Array(items) => items.iter().map(words).sum(),
            serde_json::Value::Object(block) => block.get("text").map_or(0, words),
            _ => 0,
        }
    }
    let Some(body) = &request.json else {
        return Failure::status(400)
            .message("The request body is not JSON.")
            .kind("invalid_request_error")
            .response();
    };
    let messages = body["messages"].as_array().map_or(0, |m| {
        m.iter().map(|message| words(&message["content"])).sum()
    });
    let count = words(&body["system"]) + messages;
    Response::builder()
        .status(StatusCode::OK)
        .header("content-type", "application/json")
        .body(full(format!("{{\"input_tokens\":{count}}}")))
        .expect("a valid response")
}

/// `GET /v1/models`.
fn models(state: &State, request: &RecordedRequest) -> Response<Body> {
    if request.method != "GET" {
        return Failure::status(405)
            .message(format!("Method {} not allowed", request.method))
            .kind("invalid_request_error")
            .response();
    }
    if let Some(key) = &state.api_key {
        let authorized = request
            .header("authorization")
            .and_then(|v| v.strip_prefix("Bearer "))
            .is_some_and(|k| k == key);
        if !authorized {
            return Failure::status(401).response();
        }
    }
    let data: Vec<Value> = state
        .models
        .iter()
        .map(|id| serde_json::json!({"id": id, "object": "model", "created": 0, "owned_by": "choicewise-testserver"}))
        .collect();
    Response::builder()
        .status(200)
        .header("content-type", "application/json")
        .body(full(
            serde_json::json!({"object": "list", "data": data}).to_string(),
        ))
        .expect("a valid response")
}

async fn handle(
    state: Arc<State>,
    request: Request<Incoming>,
    connection: usize,
) -> Result<Response<Body>, Infallible> {
    let (parts, body) = request.into_parts();
    let body = match Limited::new(body, MAX_REQUEST_BODY).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(_) => {
            return Ok(Failure::status(413)
                .message("The request body is too large or was cut.")
                .response());
        }
    };
    let recorded = RecordedRequest {
        method: parts.method.to_string(),
        path: parts.uri.path().to_string(),
        query: parts.uri.query().map(str::to_string),
        headers: parts
            .headers
            .iter()
            .map(|(name, value)| {
                let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
                (name.as_str().to_string(), value)
            })
            .collect(),
        json: serde_json::from_slice(&body).ok(),
        body: body.to_vec(),
        connection,
    };
    let number = {
        let mut requests = state.requests.lock().expect("requests lock");
        requests.push(recorded.clone());
        requests.len() - 1
    };

    if recorded.path == "/v1/models" {
        return Ok(models(&state, &recorded));
    }
    let Some(api) = route(&recorded.path) else {
        return Ok(Failure::status(404)
            .message(format!("Unknown path {}", recorded.path))
            .code(Some("not_found"))
            .response());
    };
    if recorded.method != "POST" {
        return Ok(Failure::status(405)
            .message(format!("Method {} not allowed", recorded.method))
            .kind("invalid_request_error")
            .response());
    }
    if matches!(api, KeyHeader::Azure)
        && recorded
            .query_param("api-version")
            .is_none_or(str::is_empty)
    {
        return Ok(Failure::status(400)
            .message("Missing required query parameter: api-version")
            .code(Some("missing_api_version"))
            .response());
    }
    if let Some(key) = &state.api_key {
        let authorized = match api {
            KeyHeader::Bearer => recorded
                .header("authorization")
                .and_then(|v| v.strip_prefix("Bearer "))
                .is_some_and(|k| k == key),
            KeyHeader::Azure => recorded.header("api-key") == Some(key.as_str()),
            KeyHeader::XApiKey => recorded.header("x-api-key") == Some(key.as_str()),
            KeyHeader::Goog => recorded.header("x-goog-api-key") == Some(key.as_str()),
        };
        if !authorized {
            return Ok(Failure::status(401).response());
        }
    }
    let reply = &state.replies[number % state.replies.len()];
    if !reply.head_delay.is_zero() {
        tokio::time::sleep(reply.head_delay).await;
    }
    if let Some(failure) = reply.failure.as_ref().filter(|_| number < reply.fail_first) {
        return Ok(failure.response());
    }
    if let Some((fields, failure)) = &reply.refused {
        let has = |f: &String| {
            (recorded.json.as_ref()).is_some_and(|j| j.get(f).is_some_and(|v| !v.is_null()))
        };
        if fields.iter().all(has) {
            return Ok(failure.response());
        }
    }
    if recorded.path == "/v1/messages/count_tokens" {
        return Ok(count_tokens(&recorded));
    }
    let response = Response::builder()
        .status(StatusCode::OK)
        .header("content-type", "text/event-stream; charset=utf-8")
        .header("cache-control", "no-cache")
        .header("x-request-id", format!("req_{number}"))
        .body(sse_body(&state, number % state.replies.len()))
        .expect("a valid response");
    Ok(response)
}

/// Counts the answer as abandoned if it is dropped before its planned end.
struct Abandoned {
    state: Arc<State>,
    planned_end: bool,
}

impl Abandoned {
    /// The answer reached its planned end: dropping it now is no disconnect.
    fn planned_end(&mut self) {
        self.planned_end = true;
    }
}

impl Drop for Abandoned {
    fn drop(&mut self) {
        if !self.planned_end {
            self.state.disconnects.send_modify(|n| *n += 1);
        }
    }
}

enum BodyStep {
    Writing(usize),
    Ending,
    Over,
}

struct BodyState {
    writes: Vec<Write>,
    /// When the next write is due: the start plus every planned delay so far. The timer
    /// counts in milliseconds, so a delay under one is owed and paid with the next ones
    /// rather than rounded up to a whole tick each time.
    due: Option<tokio::time::Instant>,
    phase: BodyStep,
    end: End,
    guard: Abandoned,
}

/// The writes of the plan, cut at `limit` bytes.
fn truncated(writes: &[Write], limit: usize) -> Vec<Write> {
    let mut out = Vec::new();
    let mut sent = 0;
    for w in writes {
        if sent >= limit {
            break;
        }
        let take = w.bytes.len().min(limit - sent);
        out.push(Write {
            delay: w.delay,
            bytes: w.bytes.slice(..take),
        });
        sent += take;
    }
    out
}

fn sse_body(state: &Arc<State>, reply: usize) -> Body {
    let reply = &state.replies[reply];
    let mut writes = match reply.end {
        End::Complete => reply.writes.as_ref().clone(),
        End::Close(n) | End::Stall(n) => truncated(&reply.writes, n),
    };
    if let Some(first) = writes.first_mut() {
        first.delay += reply.delay;
    } else if !reply.delay.is_zero() {
        writes.push(Write {
            delay: reply.delay,
            bytes: Bytes::new(),
        });
    }
    let body = BodyState {
        writes,
        due: None,
        phase: BodyStep::Writing(0),
        end: reply.end,
        guard: Abandoned {
            state: state.clone(),
            planned_end: false,
        },
    };
    let frames = futures::stream::unfold(body, |mut body| async move {
        loop {
            match body.phase {
                BodyStep::Writing(i) if i < body.writes.len() => {
                    let write = body.writes[i].clone();
                    if !write.delay.is_zero() {
                        let due =
                            *body.due.get_or_insert_with(tokio::time::Instant::now) + write.delay;
                        body.due = Some(due);
                        if due > tokio::time::Instant::now() {
                            tokio::time::sleep_until(due).await;
                        } else {
                            // Behind the plan: still a write of its own, flushed apart.
                            tokio::task::yield_now().await;
                        }
                    }
                    body.phase = BodyStep::Writing(i + 1);
                    return Some((Ok(Frame::data(write.bytes)), body));
                }
                BodyStep::Writing(_) => body.phase = BodyStep::Ending,
                BodyStep::Ending => match body.end {
                    End::Complete => {
                        body.guard.planned_end();
                        return None;
                    }
                    End::Close(n) => {
                        // hyper flushes what it buffered when the body is pending; an error
                        // right away would drop those bytes with the connection.
                        tokio::time::sleep(FLUSH_BEFORE_CUT).await;
                        body.guard.planned_end();
                        body.phase = BodyStep::Over;
                        let cut: BoxError = format!("connection cut after {n} bytes").into();
                        return Some((Err(cut), body));
                    }
                    // Until the client goes away or the server is dropped.
                    End::Stall(_) => std::future::pending::<()>().await,
                },
                BodyStep::Over => return None,
            }
        }
    });
    StreamBody::new(frames).boxed()
}
