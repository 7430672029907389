//! The gateway's request layers, outermost first (after tower-http's request id): the count
//! of every answer ([`count`]), the keyless mode's checks against web pages ([`browsers`]),
//! the client's key ([`auth`]), and on each `POST` route the request slots ([`slots`]: the
//! declared size, the memory ceiling, a slot, then the body read and charged), each an axum
//! middleware (a `tower` layer) around plain handlers, which get the body read.
//!
//! The order is the point: a request without a valid key is answered 401 from its headers,
//! before any of its body is read and before it could hold a slot; a body announced larger
//! than `max_body_bytes` is refused from its `Content-Length` alone; only then does a
//! request take one of the `max_concurrent_requests` slots, held until its answer's last
//! byte.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;

use crate::admission::auth;
use crate::admission::auth::KeyLabel;
use crate::admission::overload;
use crate::admission::request_id::{RequestIds, X_REQUEST_ID};
use crate::admission::unsent;
use crate::api::{BodyCost, PathApi, of_path as api_of};
use crate::error::ApiError;
use crate::metrics::{CLIENT_GONE_STATUS, RequestModel};
use crate::wellformed::Scan;

use crate::admission::Admission;

/// The `api` label of a path's requests in the metrics: its client API's, or none for the
/// paths of no client API.
pub(crate) fn path_api_label(path: &str) -> &'static str {
    crate::api::find(path).map_or("", |api| api.label)
}

/// An error answered in the shape of `api` (the client API of its path: [`api_of`]).
pub(crate) fn shaped(api: PathApi, e: ApiError) -> Response {
    (api.shaped)(e)
}

/// Any other route: 404 in the shape of the API its path looks like, naming the routes that
/// exist.
pub(crate) async fn unknown_route(request: Request) -> Response {
    let path = request.uri().path().to_string();
    let e = ApiError::new(
        StatusCode::NOT_FOUND,
        "invalid_request_error",
        format!(
            "no route {} {path} here: this gateway serves {}",
            request.method(),
            crate::api::routes_named()
        ),
    )
    .code("unknown_route");
    shaped(api_of(&path), e)
}

/// Serves a request of a doubled `/v1` (`/v1/v1/messages`) as its route, and tells the
/// operator once per process which base URL to fix.
pub(crate) async fn doubled_v1(request: Request, next: axum::middleware::Next) -> Response {
    static TOLD: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if !TOLD.swap(true, std::sync::atomic::Ordering::Relaxed) {
        tracing::warn!(
            path = %request.uri().path(),
            "a client asked a path with /v1 twice (its base URL ends in /v1 and it adds /v1 \
             itself): served as the single /v1 route; give that client the base URL without /v1"
        );
    }
    next.run(request).await
}

/// A `POST` route asked with another method: 405 (`Allow: POST`) in the shape of the route's
/// API, naming the method to use.
pub(crate) async fn post_only(request: Request) -> Response {
    let path = request.uri().path().to_string();
    let e = ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "invalid_request_error",
        format!(
            "{} {path} is not served: send the request with POST",
            request.method()
        ),
    )
    .code("method_not_allowed");
    let mut response = shaped(api_of(&path), e);
    response
        .headers_mut()
        .insert(header::ALLOW, axum::http::HeaderValue::from_static("POST"));
    response
}

/// The configured model a request named, set by its handler on the answer (absent: none).
#[derive(Debug, Clone)]
pub(crate) struct ModelLabel(pub String);

/// A request not answered yet: counted with [`CLIENT_GONE_STATUS`] if it is dropped so
/// (its client went away: hyper drops the request's future), and logged when no handler
/// kept its record (it went away while its body arrived).
struct Unanswered {
    gate: Arc<Admission>,
    api: &'static str,
    model: RequestModel,
    request_id: Option<axum::http::HeaderValue>,
    arrived: std::time::Instant,
    answered: bool,
}

impl Drop for Unanswered {
    fn drop(&mut self) {
        if self.answered {
            return;
        }
        let (model, recorded) = self.model.lock().clone();
        (self.gate.metrics).answered(self.api, &model, CLIENT_GONE_STATUS);
        if !recorded {
            let id = self.request_id.as_ref().and_then(|v| v.to_str().ok());
            gone_mid_body(&self.gate, id, self.api, self.arrived.elapsed());
        }
    }
}

/// Counts every request once in `choicewise_requests_total`: the API its path belongs to,
/// its status, and the model its handler named ([`ModelLabel`]); the layers' refusals (403,
/// 415, 401, 413, 429) and unknown routes included; a request whose client went away before
/// any answer as [`CLIENT_GONE_STATUS`], under the model its handler had named.
pub(crate) async fn count(
    State(Counting { gate, checks }): State<Counting>,
    mut request: Request,
    next: Next,
) -> Response {
    let api = path_api_label(request.uri().path());
    let model = RequestModel::default();
    request.extensions_mut().insert(model.clone());
    // The request's id: the client's, or one made here; echoed on its answer.
    let request_id = match request.headers().get(X_REQUEST_ID) {
        Some(id) => Some(id.clone()),
        None => RequestIds::made().inspect(|id| {
            request.headers_mut().insert(X_REQUEST_ID, id.clone());
        }),
    };
    let mut unanswered = Unanswered {
        gate,
        api,
        model,
        request_id,
        arrived: std::time::Instant::now(),
        answered: false,
    };
    let refused = match checks {
        true => refused_keyless(&unanswered.gate, &request),
        false => None,
    };
    let mut response = match refused {
        Some(refused) => refused,
        None => next.run(request).await,
    };
    unanswered.answered = true;
    if let Some(id) = &unanswered.request_id
        && !response.headers().contains_key(X_REQUEST_ID)
    {
        response.headers_mut().insert(X_REQUEST_ID, id.clone());
    }
    let model = (response.extensions().get::<ModelLabel>()).map_or("", |m| m.0.as_str());
    let status = response.status().as_u16();
    let gate = &unanswered.gate;
    gate.metrics.answered(api, model, status);
    if let Some(KeyLabel(caller)) = response.extensions().get::<KeyLabel>()
        && let Some(name) = caller.name()
    {
        (gate.metrics).key_answered(&name, status);
    }
    response
}

/// Without `[auth]`: only loopback `Host`s, no cross-origin page unless its origin is
/// listed in `allowed_origins`, and JSON bodies only (a page's form or `text/plain` POST
/// needs no preflight). A web page, or a DNS-rebound name, cannot spend the upstreams' keys.
pub(crate) async fn browsers(
    State(gate): State<Arc<Admission>>,
    request: Request,
    next: Next,
) -> Response {
    match refused_keyless(&gate, &request) {
        Some(refused) => refused,
        None => next.run(request).await,
    }
}

/// The state of [`count`]: the admission's, and whether it also makes the checks of
/// [`browsers`] (where no route it wraps is outside them: one layer fewer a request).
#[derive(Clone)]
pub(crate) struct Counting {
    pub(crate) gate: Arc<Admission>,
    pub(crate) checks: bool,
}

/// [`browsers`]' answer to a request its checks refuse; `None` when it may go on.
fn refused_keyless(gate: &Admission, request: &Request) -> Option<Response> {
    if !gate.keys.load().is_empty() {
        return None;
    }
    if let Err(e) = keyless_checks(gate, request.method(), request.headers()) {
        // Said in the log (a client that cannot reach the gateway may not say why), at
        // most once a while.
        if let Some(left_out) = gate
            .warnings
            .allow("keyless_refused", std::time::Instant::now())
        {
            tracing::warn!(
                route = %request.uri().path(),
                status = e.status.as_u16(),
                left_out,
                "a request refused without [auth]: {}",
                e.message
            );
        }
        return Some(shaped(api_of(request.uri().path()), e));
    }
    None
}

fn keyless_checks(gate: &Admission, method: &Method, headers: &HeaderMap) -> Result<(), ApiError> {
    let forbidden = |message: String| {
        ApiError::new(StatusCode::FORBIDDEN, "permission_error", message).code("forbidden")
    };
    if let Some(host) = headers.get(header::HOST) {
        let host = host.to_str().unwrap_or_default();
        if !auth::loopback_host(gate.listening.get(), host) {
            return Err(forbidden(format!(
                "the Host {host:?} is not this gateway's: without [auth] it answers only \
                 localhost, 127.0.0.1, [::1] and its listen address"
            )));
        }
    }
    if let Some(origin) = headers.get(header::ORIGIN) {
        let origin = origin.to_str().unwrap_or_default();
        if !gate.allowed_origins.iter().any(|o| o == origin) {
            return Err(forbidden(format!(
                "requests from web pages (Origin {origin:?}) are refused without [auth]; \
                 list the origin in allowed_origins to accept it"
            )));
        }
    }
    if method == Method::POST && !is_json(headers) {
        return Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "invalid_request_error",
            "the request body must be JSON: send Content-Type: application/json",
        )
        .code("unsupported_media_type"));
    }
    Ok(())
}

/// `Content-Type: application/json`, with or without parameters, or a `+json` type.
fn is_json(headers: &HeaderMap) -> bool {
    let Some(value) = headers.get(header::CONTENT_TYPE) else {
        return false;
    };
    let essence = value
        .to_str()
        .unwrap_or_default()
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .as_bytes();
    // Compared without case, and without a copy.
    let starts = |prefix: &[u8]| {
        essence
            .get(..prefix.len())
            .is_some_and(|p| p.eq_ignore_ascii_case(prefix))
    };
    let ends = |suffix: &[u8]| {
        (essence.len().checked_sub(suffix.len()))
            .is_some_and(|at| essence[at..].eq_ignore_ascii_case(suffix))
    };
    essence.eq_ignore_ascii_case(b"application/json") || (starts(b"application/") && ends(b"+json"))
}

/// The client's key, from the headers alone: 401 before anything else happens. Who sent
/// the request ([`keys::Caller`]) goes into its extensions, for its handler, and onto its
/// answer, for its count by key.
pub(crate) async fn auth(
    State(gate): State<Arc<Admission>>,
    request: Request,
    next: Next,
) -> Response {
    keyed(gate, request, next, false).await
}

/// [`auth`], then, for a `POST`, [`slots`]: the layers of a route that takes a body, as one
/// (a request pays for one layer, not two).
pub(crate) async fn admit(
    State(gate): State<Arc<Admission>>,
    request: Request,
    next: Next,
) -> Response {
    keyed(gate, request, next, true).await
}

/// The key's check, then (`slot`, for a `POST`) a slot taken, then the request served.
async fn keyed(gate: Arc<Admission>, mut request: Request, next: Next, slot: bool) -> Response {
    let caller = match auth::authorized(&gate, &mut request) {
        Ok(caller) => caller,
        Err(e) => return shaped(api_of(request.uri().path()), e),
    };
    let response = match slot && request.method() == Method::POST {
        true => slotted(gate, request, next).await,
        false => next.run(request).await,
    };
    auth::labelled(response, caller)
}

/// A declared body over `max_body_bytes` is refused at once (413); then the request takes
/// a slot (429 when none is free), held until its answer's body is dropped: its last byte
/// written, or its client gone.
pub(crate) async fn slots(
    State(gate): State<Arc<Admission>>,
    request: Request,
    next: Next,
) -> Response {
    slotted(gate, request, next).await
}

/// [`slots`]' work.
async fn slotted(gate: Arc<Admission>, mut request: Request, next: Next) -> Response {
    let arrived = std::time::Instant::now();
    let declared = (request.headers().get(header::CONTENT_LENGTH))
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    let api = api_of(request.uri().path());
    let max_body = gate.limits.max_body_bytes as u64;
    if declared.is_some_and(|len| len > max_body) {
        return shaped(api, too_large(&gate));
    }
    // The memory ceiling: the request charged what its head may cost (its route's factor
    // over its declared length, at most `HEAD_CHARGE` of it), the rest as its bytes arrive,
    // until the handler has answered.
    let entry = crate::api::find(request.uri().path());
    let route = entry.map_or(BodyCost::NONE, |api| api.cost);
    let bound = overload::cost_bound(route, declared.unwrap_or(max_body).min(HEAD_CHARGE));
    // The key's charges of bodies not yet received, capped (`max_unsent_bytes_per_key`).
    let client = auth::client(
        &gate.keys.load(),
        request.headers(),
        request.uri(),
        request.extensions(),
    );
    request.extensions_mut().insert(auth::Client(client));
    let mut hold = match gate.unsent.hold(client, bound) {
        Ok(hold) => hold,
        Err(over) => return shaped(api, over.error()),
    };
    let (admitted, change) = gate.ceiling.admit(bound);
    admission(&gate, admitted.as_ref().err(), change);
    let mut reservation = match admitted {
        Ok(reservation) => reservation,
        Err(refused) => return shaped(api, overloaded(refused)),
    };
    let Ok(permit) = gate.slots.clone().try_acquire_owned() else {
        let e = ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "rate_limit_error",
            "the gateway is serving as many requests as it may at once; retry later",
        )
        .code("too_many_requests");
        let mut response = shaped(api, e);
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
        return response;
    };
    // The body read here, and the charge made what its fields' sizes say it costs: less
    // than the bound, or (a body of no declared length) more, which the mark may refuse.
    let (parts, body) = request.into_parts();
    let charge = Charge {
        reservation: reservation.as_mut(),
        hold: &mut hold,
        route,
    };
    let bytes = match read_charged(&gate, body, Some(charge)).await {
        Ok(bytes) => bytes,
        Err(e) => {
            if e.status.as_u16() == CLIENT_GONE_STATUS {
                let took = arrived.elapsed();
                let id = (parts.headers.get("x-request-id")).and_then(|v| v.to_str().ok());
                gone_mid_body(&gate, id, request_api_label(&parts), took);
            }
            return shaped(api, e);
        }
    };
    // Received: no longer the key's unsent.
    drop(hold);
    let mut parts = parts;
    if let Some(reservation) = &mut reservation {
        // The body's one scan: its cost here, and its fault and flags for its handler.
        let scan = match entry {
            Some(api) => scan_of(api, bytes.clone()).await,
            None => None,
        };
        let cost = match &scan {
            Some(scan) => overload::cost(route, bytes.len(), scan.heavy),
            None => overload::cost_bound(route, bytes.len() as u64),
        };
        if let Some(scan) = scan {
            parts.extensions.insert(scan);
        }
        if let Err(refused) = reservation.charge(cost) {
            admission(&gate, Some(&refused), None);
            return shaped(api, overloaded(refused));
        }
    }
    let request = Request::from_parts(parts, Body::from(bytes));
    let response = next.run(request).await;
    // The handler has answered: its body was read and parsed.
    drop(reservation);
    // The slot goes with the body: when hyper drops it, at its end or its client's. Its
    // frames pass as they are, its size told (an answer of known length keeps it).
    response.map(|body| {
        Body::new(super::Guarded {
            body,
            guard: permit,
        })
    })
}

/// Bodies up to this size are scanned for their cost on the worker that read them, larger
/// ones on a blocking thread; only larger ones are checked again once parsed ([`parsed`]).
const SPLIT_FROM: usize = 16 * 1024;

/// A read body of client API `api`, scanned once ([`crate::wellformed::scan`]): for its
/// cost ([`overload::cost`], from its top-level fields' sizes) and its handler; `None` when
/// the scan could not run (the route's bound is charged, and the handler scans).
async fn scan_of(api: &'static PathApi, bytes: axum::body::Bytes) -> Option<Scan> {
    let small = bytes.len() <= SPLIT_FROM;
    let scan = move || crate::wellformed::scan(&bytes, api.paths, api.cost.heavy);
    if small {
        return Some(scan());
    }
    tokio::task::spawn_blocking(scan).await.ok()
}

/// A handler has parsed a body of `len` bytes: the mark checked again against the memory
/// now resident (bodies up to [`SPLIT_FROM`] are not: their parse is too small to tell).
/// A 503 when the process is above it.
pub(crate) fn parsed(gate: &Admission, len: usize) -> Result<(), ApiError> {
    if len <= SPLIT_FROM {
        return Ok(());
    }
    let (checked, change) = gate.ceiling.recheck();
    admission(gate, checked.as_ref().err(), change);
    checked.map_err(overloaded)
}

/// Logs and counts what the ceiling did with a request (`refused`: it was refused; `change`:
/// the gateway turned to refusing, or to admitting again).
fn admission(
    gate: &Admission,
    refused: Option<&overload::AboveWatermark>,
    change: overload::Change,
) {
    match change {
        Some(true) => tracing::warn!(
            used_mib = refused.map_or(0, |r| r.used >> 20),
            "memory above memory_high_watermark_mb: new requests are refused with 503 until \
             it is below memory_low_watermark_mb"
        ),
        Some(false) => {
            tracing::info!("memory below memory_low_watermark_mb: requests are admitted again")
        }
        None => {}
    }
    let ceiling = &gate.ceiling;
    if refused.is_some() || change.is_some() {
        gate.metrics.overload(refused.is_some(), ceiling.refusing());
    }
}

/// 503: the process's memory is above the ceiling (`memory_high_watermark_mb`).
fn overloaded(refused: crate::admission::overload::AboveWatermark) -> ApiError {
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "overloaded_error",
        format!(
            "the gateway is short of memory ({} MiB in use, memory_high_watermark_mb {}): \
             retry later",
            refused.used >> 20,
            refused.high >> 20
        ),
    )
    .code("overloaded")
    .wait(1)
}

/// 413: the body is larger than `max_body_bytes`.
pub(crate) fn too_large(gate: &Admission) -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "invalid_request_error",
        format!(
            "the request body is larger than {} bytes (max_body_bytes)",
            gate.limits.max_body_bytes
        ),
    )
    .code("request_too_large")
}

/// The most of a body charged before its bytes arrive (its route's factor over it): a body
/// that declares more is charged the rest as its bytes come ([`read_charged`]), so that
/// idle connections announcing large bodies hold almost nothing of the memory ceiling.
pub(crate) const HEAD_CHARGE: u64 = 64 * 1024;

/// Past this many bytes of a body, its frames are checked for their mean size
/// ([`MIN_MEAN_FRAME`]).
const TINY_FRAMES_FROM: u64 = 64 * 1024;

/// The smallest mean size of a body's frames (its HTTP/1 chunks) past [`TINY_FRAMES_FROM`]:
/// each frame costs a pass through hyper's connection and the whole service stack, about
/// a microsecond of CPU whatever its size, so a body of 1-byte chunks costs some 750 µs of
/// CPU per KiB (docs/reliability.md). Clients send chunks of kilobytes; frames averaging
/// under 16 bytes are refused with a 400 and the connection closed (the rest is not read),
/// which bounds what one request of tiny chunks costs.
const MIN_MEAN_FRAME: u64 = 16;

/// Why a body could not be collected.
enum Collected {
    /// The body failed, or passed the limit.
    Body(axum::Error),
    /// Past its first [`TINY_FRAMES_FROM`] bytes, its frames averaged fewer than
    /// [`MIN_MEAN_FRAME`] bytes: how many bytes came in how many frames.
    TinyFrames { received: u64, frames: u64 },
    /// Its bytes, charged as they came, passed the memory ceiling or its key's cap.
    Refused(Refusal),
}

/// What refused a body's charge as it grew.
enum Refusal {
    /// The memory ceiling.
    Ceiling(overload::AboveWatermark),
    /// Its key's cap of unsent charges (`max_unsent_bytes_per_key`).
    Key(unsent::OverCap),
}

/// What a body arriving is charged to: the memory ceiling's reservation (none when the
/// ceiling is off) and its key's unsent charges, by its route's bound.
struct Charge<'a> {
    reservation: Option<&'a mut overload::Reservation>,
    hold: &'a mut unsent::Hold,
    route: BodyCost,
}

/// How much of a body to have charged once `received` bytes of it arrived: up to
/// [`HEAD_CHARGE`], what the head was charged; past it, a body of known length (`declared`)
/// all of it at once, so that bodies arriving side by side are admitted whole or refused,
/// never all cut halfway; a body of unknown length the next power of two of what arrived,
/// at most `limit` (a few steps, each admitted or refused).
fn charged_part(received: u64, declared: Option<u64>, limit: u64) -> u64 {
    if received <= HEAD_CHARGE {
        return received;
    }
    match declared {
        Some(len) => len.max(received),
        None => received.next_power_of_two().min(limit).max(received),
    }
}

/// A body's bytes, at most `limit`, charged to `charge` as they arrive: before a frame is
/// kept, the reservation and the key's hold grow to the route's bound over what
/// [`charged_part`] says. The buffer starts at the declared length up to [`HEAD_CHARGE`] and
/// grows with the bytes; a body sent as one frame is kept as it is.
async fn collect(
    body: Body,
    limit: usize,
    mut charge: Option<Charge<'_>>,
) -> Result<axum::body::Bytes, Collected> {
    use http_body_util::BodyExt;
    let mut body = http_body_util::Limited::new(body, limit);
    let hint = http_body::Body::size_hint(&body);
    let declared = hint.lower() as usize;
    let mut buf = bytes::BytesMut::with_capacity(declared.min(limit).min(HEAD_CHARGE as usize));
    let mut refused = None;
    let (mut received, mut frames) = (0u64, 0u64);
    while let Some(frame) = body.frame().await {
        let frame = match frame {
            Ok(frame) => frame,
            // Refused already: the refusal, whatever became of the rest.
            Err(_) if refused.is_some() => break,
            Err(e) => return Err(Collected::Body(axum::Error::new(e))),
        };
        let Ok(data) = frame.into_data() else {
            continue;
        };
        (received, frames) = (received + data.len() as u64, frames + 1);
        if received > TINY_FRAMES_FROM && frames.saturating_mul(MIN_MEAN_FRAME) > received {
            return Err(Collected::TinyFrames { received, frames });
        }
        if refused.is_some() {
            continue; // Drained, not kept: the client then reads its 503, not a reset.
        }
        if let Some(charge) = &mut charge {
            let received = (buf.len() + data.len()) as u64;
            let part = charged_part(received, hint.exact(), limit as u64);
            let due = overload::cost_bound(charge.route, part);
            // Each grows, never shrinks, while the body arrives (as its head was charged).
            let by_key = match due > charge.hold.held() {
                true => charge.hold.grow(due).err().map(Refusal::Key),
                false => None,
            };
            let by_ceiling = match (by_key.is_none(), charge.reservation.as_deref_mut()) {
                (true, Some(r)) if due > r.held() => r.charge(due).err().map(Refusal::Ceiling),
                _ => None,
            };
            if let Some(e) = by_key.or(by_ceiling) {
                // Refused mid-body: what arrived is let go, and the rest is read and
                // dropped (within the body's limit and its read timeout), so that the
                // answer reaches a client still sending.
                refused = Some(e);
                buf = bytes::BytesMut::new();
                if let Some(r) = charge.reservation.as_deref_mut() {
                    r.charge(0).ok();
                }
                charge.hold.grow(0).ok();
                continue;
            }
        }
        if buf.is_empty() && data.len() >= declared {
            // One frame, the whole body: kept as it is.
            buf = bytes::BytesMut::from(data);
        } else {
            grow_for(
                &mut buf,
                data.len(),
                hint.exact().map(|l| l.min(limit as u64)),
            );
            buf.extend_from_slice(&data);
        }
    }
    match refused {
        Some(e) => Err(Collected::Refused(e)),
        None => Ok(buf.freeze()),
    }
}

/// Makes room in `buf` for `more` bytes of a body of `declared` length, if known: past its
/// head's share, once, for all of it, so that a body of known length is held in a buffer of
/// its size (growing by doubling would hold up to twice it, and both buffers while the bytes
/// move); a body of unknown length grows as a `Vec` does.
fn grow_for(buf: &mut bytes::BytesMut, more: usize, declared: Option<u64>) {
    let needed = buf.len() + more;
    if needed <= buf.capacity() {
        return;
    }
    let whole = declared.map_or(0, |len| usize::try_from(len).unwrap_or(usize::MAX));
    buf.reserve(whole.max(needed) - buf.len());
}

/// The body, at most `max_body_bytes`, within `body_read_timeout_s`.
pub(crate) async fn read_body(gate: &Admission, body: Body) -> Result<axum::body::Bytes, ApiError> {
    read_charged(gate, body, None).await
}

/// [`read_body`], the bytes charged to a reservation of the memory ceiling and to the key's
/// unsent charges as they arrive (a 503 when they would pass the ceiling, a 429 the key's
/// cap).
async fn read_charged(
    gate: &Admission,
    body: Body,
    charge: Option<Charge<'_>>,
) -> Result<axum::body::Bytes, ApiError> {
    let limit = gate.limits.max_body_bytes;
    let timeout = std::time::Duration::from_secs_f64(gate.limits.body_read_timeout_s);
    match tokio::time::timeout(timeout, collect(body, limit, charge)).await {
        Err(_) => Err(ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            "invalid_request_error",
            format!(
                "the request body did not arrive within {}s (body_read_timeout_s)",
                timeout.as_secs_f64()
            ),
        )
        .code("request_timeout")),
        Ok(Ok(bytes)) => Ok(bytes),
        Ok(Err(Collected::Refused(Refusal::Ceiling(refused)))) => {
            admission(gate, Some(&refused), None);
            Err(overloaded(refused))
        }
        Ok(Err(Collected::Refused(Refusal::Key(over)))) => Err(over.error()),
        Ok(Err(Collected::TinyFrames { received, frames })) => Err(ApiError::invalid(format!(
            "the request body came in frames of {} bytes on average ({received} bytes in \
             {frames} chunks): past its first {} KiB a body's chunks must average at least \
             {MIN_MEAN_FRAME} bytes",
            received / frames.max(1),
            TINY_FRAMES_FROM / 1024
        ))
        .code("body_frames_too_small")),
        Ok(Err(Collected::Body(e))) => {
            // A body over the limit, its client gone before it was sent whole, or a
            // connection that failed while sending it.
            let over = std::error::Error::source(&e)
                .is_some_and(|s| s.is::<http_body_util::LengthLimitError>());
            Err(match (over, client_left(&e)) {
                (true, _) => too_large(gate),
                (false, true) => ApiError::new(
                    StatusCode::from_u16(CLIENT_GONE_STATUS).unwrap_or(StatusCode::BAD_REQUEST),
                    "invalid_request_error",
                    "the client went away before its request body arrived",
                )
                .code("client_gone"),
                (false, false) => {
                    ApiError::invalid(format!("the request body could not be read: {e}"))
                }
            })
        }
    }
}

/// Whether a body's error is its client's leaving: the connection closed (or was reset)
/// before the body it declared was sent whole.
fn client_left(e: &axum::Error) -> bool {
    use std::io::ErrorKind::{BrokenPipe, ConnectionAborted, ConnectionReset, UnexpectedEof};
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        if let Some(e) = s.downcast_ref::<hyper::Error>()
            && (e.is_incomplete_message() || e.is_canceled() || e.is_closed())
        {
            return true;
        }
        if let Some(e) = s.downcast_ref::<std::io::Error>() {
            return matches!(
                e.kind(),
                UnexpectedEof | ConnectionReset | ConnectionAborted | BrokenPipe
            );
        }
        source = s.source();
    }
    false
}

/// The log line of a request whose client went away while its body arrived: as every
/// request's (`ended="client_gone"`), before any model was read.
fn gone_mid_body(gate: &Admission, request_id: Option<&str>, api: &'static str, took: Duration) {
    let ended = crate::answer::ending::ErrorType::ClientGone.as_str();
    (gate.metrics).finished("", api, ended, took, &crate::metrics::Outcome::default());
    let id = request_id.unwrap_or_default();
    crate::answer::finish::log_unrun(id, "", "", &[], took, ended);
}

/// The `api` label of a request's path (`chat`, `messages`, `responses`; empty for others).
fn request_api_label(parts: &axum::http::request::Parts) -> &'static str {
    path_api_label(parts.uri.path())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_is_charged_its_head_then_whole_or_in_doubling_steps() {
        let limit = 16 << 20;
        // Up to the head's share: what arrived (the head charge covers it).
        assert_eq!(charged_part(10, Some(1 << 20), limit), 10);
        assert_eq!(charged_part(HEAD_CHARGE, None, limit), HEAD_CHARGE);
        // Past it: a declared body all at once; an unknown one by powers of two.
        assert_eq!(
            charged_part(HEAD_CHARGE + 1, Some(15 << 20), limit),
            15 << 20
        );
        assert_eq!(charged_part(HEAD_CHARGE + 1, None, limit), 2 * HEAD_CHARGE);
        assert_eq!(charged_part(3 << 20, None, limit), 4 << 20);
        assert_eq!(charged_part(15 << 20, None, limit), 16 << 20);
        // A body that lied about its length is charged what arrived.
        assert_eq!(charged_part(2 << 20, Some(1 << 20), limit), 2 << 20);
    }

    #[test]
    fn json_content_types() {
        let with = |v: &str| {
            let mut h = HeaderMap::new();
            h.insert(header::CONTENT_TYPE, v.parse().unwrap());
            is_json(&h)
        };
        assert!(with("application/json"));
        assert!(with("Application/JSON; charset=utf-8"));
        assert!(with("application/vnd.api+json"));
        assert!(with("APPLICATION/Problem+JSON"));
        assert!(!with("text/plain+json"));
        assert!(!with("application/+jso"));
        assert!(!with("application/json-seq"));
        assert!(!with("text/plain"));
        assert!(!with("application/x-www-form-urlencoded"));
        assert!(!with("multipart/form-data; boundary=x"));
        assert!(!is_json(&HeaderMap::new()));
    }
}
