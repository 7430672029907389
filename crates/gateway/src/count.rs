//! The token counts: `POST /v1/messages/count_tokens` ([`count_tokens`]), and a client API's
//! own count on its route ([`api_count`]: Gemini's `:countTokens`).

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use std::time::{Duration, Instant};

use choicewise_client::{ClientErrorKind, CountBounds, Dialect, MAX_COUNT_ANSWER_BYTES};
use serde_json::json;

use crate::admission::layers;
use crate::api::{self, ClientApi, Counted, messages::Messages};
use crate::error::ApiError;
use crate::keys::Caller;
use crate::quota::{Demand, Reservation};
use crate::request::Fields;
use crate::state::Gateway;
use crate::wellformed::Scan;

/// A count under its caller's key, as a request is: of a model the key may use (403
/// otherwise, before anything is counted or asked upstream), and charged as one request to
/// the limits it meets (429 past them, with `Retry-After`); it generates nothing, so it
/// takes no samples, tokens or dollars. The reservation, held until the count is answered;
/// `rate`, the `x-ratelimit-*` headers it leaves.
async fn under_key(
    gw: &Gateway,
    caller: &Caller,
    model: &str,
    rate: &mut crate::error::Headers,
) -> Result<Option<Reservation>, ApiError> {
    caller.allows(model)?;
    let quota = &gw.inner.quota;
    let Some(applicable) = quota.applicable(caller, model) else {
        return Ok(None);
    };
    let demand = Demand {
        samples: 0,
        ..Default::default()
    };
    let reserved = quota.reserve(applicable, demand, || async { 0 }).await?;
    if let Some(reservation) = &reserved {
        *rate = reservation.rate_headers();
    }
    Ok(reserved)
}

/// Who sent `request` (the `auth` layer's [`Caller`]; open without `[auth]`).
fn caller_of(request: &axum::extract::Request) -> Caller {
    (request.extensions().get::<Caller>().cloned()).unwrap_or_default()
}

/// `POST /v1/messages/count_tokens`: the prompt's tokens as the model's first Anthropic
/// upstream counts them (its own `count_tokens`, its answer at most
/// [`MAX_COUNT_ANSWER_BYTES`], its wait bounded by `first_byte_timeout_s`,
/// `upstream_idle_timeout_s` and `request_deadline_s`); else, or when it cannot answer in
/// time, counted with tiktoken (the encoding of the model's first upstream) and said so in
/// `x-choicewise-token-count: estimated`. An answer too large, or not a count, is a 502.
pub(crate) async fn count_tokens(
    State(gw): State<Gateway>,
    request: axum::extract::Request,
) -> Response {
    // Counted in the metrics under its model when that is a configured one, refused or not.
    let mut label = String::new();
    let mut rate = Vec::new();
    let mut response = count_tokens_answer(&gw, request, &mut label, &mut rate).await;
    crate::error::with_headers(&mut response, rate);
    (response.extensions_mut()).insert(layers::ModelLabel(label));
    response
}

/// [`count_tokens`]' answer; `label` gets the configured model the request names, if any.
async fn count_tokens_answer(
    gw: &Gateway,
    request: axum::extract::Request,
    label: &mut String,
    rate: &mut crate::error::Headers,
) -> Response {
    let arrived = Instant::now();
    let caller = caller_of(&request);
    // The body's scan, when the admission made it.
    let scanned = request.extensions().get::<Scan>().cloned();
    let bytes = match layers::read_body(&gw.inner.admission, request.into_body()).await {
        Ok(bytes) => bytes,
        Err(e) => return Messages::shaped(e),
    };
    let gateway = gw.clone();
    let len = bytes.len();
    let (asked, parsed) = tokio::task::spawn_blocking(move || {
        // The messages route's rule of strings, numbers and depth, whichever upstream counts.
        let fault = match scanned {
            Some(scan) => scan.fault,
            None => crate::wellformed::find_fault(&bytes, Messages::PATHS),
        };
        if let Some(fault) = fault {
            return (None, Err(fault.error()));
        }
        let body = match api::parse_body(&bytes) {
            Ok(body) => body,
            Err(e) => return (None, Err(ApiError::from(e))),
        };
        let asked = (body.get("model")).and_then(|m| serde_json::from_slice::<String>(m).ok());
        let translated = match api::messages::to_chat_for_count(&body) {
            Ok(translated) => translated,
            Err(e) => return (asked, Err(ApiError::from(e))),
        };
        let model = translated.reply.model.clone();
        let Some(routes) = gateway.inner.models.get(&model).cloned() else {
            let e = ApiError::new(
                StatusCode::NOT_FOUND,
                "not_found_error",
                format!("the model {model:?} does not exist here (GET /v1/models lists them)"),
            );
            return (asked, Err(e));
        };
        (asked, Ok((body, translated.chat, routes)))
    })
    .await
    .unwrap_or_else(|_| {
        let e = ApiError::invalid("the prompt could not be counted");
        (None, Err(e))
    });
    if let Some(model) = asked.filter(|m| gw.inner.models.contains_key(m)) {
        *label = model;
    }
    let (mut body, chat, routes) = match parsed {
        Ok(parsed) => parsed,
        Err(e) => return Messages::shaped(e),
    };
    // Parsed: the memory mark checked again before the count goes on.
    if let Err(e) = layers::parsed(&gw.inner.admission, len) {
        return Messages::shaped(e);
    }
    // Held until the count is answered.
    let _reserved = match under_key(gw, &caller, &routes.name, rate).await {
        Ok(reserved) => reserved,
        Err(e) => return Messages::shaped(e),
    };
    if let Some(route) = routes.routes.iter().find(|r| r.api == Dialect::Anthropic) {
        // The client's body as it came, but for its model and the gateway's extension.
        body.remove("choicewise");
        let model = json!(route.model).to_string();
        let text = crate::request::write_object(&body, &[("model", model.as_bytes())]);
        // A count is small, and its wait bounded as a sample's is: its head and its first
        // byte within first_byte_timeout_s, each later read within upstream_idle_timeout_s,
        // all of it within
        // the request's deadline (request_deadline_s).
        let bounds = CountBounds {
            first_byte: routes.retry.first_byte_timeout,
            idle: route.idle_timeout,
            max_bytes: MAX_COUNT_ANSWER_BYTES,
        };
        let deadline = arrived + Duration::from_secs_f64(gw.inner.limits.request_deadline_s);
        let counted = route.client.count_tokens_within(text.into(), bounds);
        let failed = match tokio::time::timeout_at(deadline.into(), counted).await {
            Ok(Ok(tokens)) => {
                return axum::Json(json!({"input_tokens": tokens})).into_response();
            }
            Ok(Err(e)) if e.kind() == ClientErrorKind::InvalidResponse => {
                // An answer past the bound, or not a count: the upstream's failure, said so
                // (an estimate would hide it).
                tracing::warn!(upstream = &*route.label, error = %e, "the upstream's token count is unreadable");
                let e = ApiError::new(
                    StatusCode::BAD_GATEWAY,
                    "api_error",
                    format!("the upstream's token count could not be read: {e}"),
                )
                .code("bad_upstream_answer");
                return Messages::shaped(e);
            }
            Ok(Err(e)) => e.to_string(),
            Err(_) => format!(
                "no count within the request's deadline ({}s, request_deadline_s)",
                gw.inner.limits.request_deadline_s
            ),
        };
        tracing::warn!(
            upstream = &*route.label,
            error = %failed,
            "the upstream did not count the tokens: estimated instead"
        );
        if Instant::now() >= deadline {
            // Nothing is left of the request's time to count it here.
            let e = ApiError::new(
                StatusCode::GATEWAY_TIMEOUT,
                "api_error",
                format!(
                    "the tokens were not counted within the request's deadline ({}s, \
                     request_deadline_s)",
                    gw.inner.limits.request_deadline_s
                ),
            )
            .code("deadline_exceeded");
            return Messages::shaped(e);
        }
    }
    let upstream_model = (routes.routes.first()).map_or(routes.name.as_str(), |r| r.model.as_str());
    estimated::<Messages>(gw, upstream_model, chat, len).await
}

/// The prompt of `chat` (a Chat Completions body's fields) counted with tiktoken, the
/// encoding of `upstream_model`, on a blocking thread (a body of `len` bytes: the memory mark
/// checked again after), answered in `A`'s shape ([`ClientApi::counted`]) and said so in
/// `x-choicewise-token-count: estimated`.
async fn estimated<A: ClientApi>(
    gw: &Gateway,
    upstream_model: &str,
    chat: Fields,
    len: usize,
) -> Response {
    let encoding = choicewise_usage::encoding_for_model(upstream_model).name;
    let counted = tokio::task::spawn_blocking(move || {
        let fields = chat.iter().map(|(k, v)| (k.as_str(), &v[..]));
        choicewise_usage::count_prompt_fields(encoding, fields)
            .map(|count| count.total)
            .map_err(|e| ApiError::invalid(format!("the prompt could not be counted: {e}")))
    })
    .await
    .unwrap_or_else(|_| Err(ApiError::invalid("the prompt could not be counted")));
    // Counted: the memory mark checked again (what the count took may have passed it).
    if let Err(e) = layers::parsed(&gw.inner.admission, len) {
        return A::shaped(e);
    }
    match counted {
        Ok(tokens) => (
            [("x-choicewise-token-count", "estimated")],
            axum::Json(A::counted(tokens)),
        )
            .into_response(),
        Err(e) => A::shaped(e),
    }
}

/// A client API's own token count, on its route ([`ClientApi::asks`] says
/// [`Asks::CountTokens`](api::Asks::CountTokens): Gemini's `POST /v1beta/models/{model}:countTokens`): the request read
/// by its API ([`ClientApi::read_count`], under the same rule of strings, numbers and depth as
/// its answers' bodies), its prompt counted by the gateway with tiktoken (the encoding of the
/// model's first upstream), answered in its API's shape and said so in
/// `x-choicewise-token-count: estimated`. Bounded as Messages' count is: the body read within
/// `max_body_bytes` and charged to the memory ceiling, parsed and counted on a blocking thread.
/// An unknown model is a 404, every refusal in the API's error shape.
pub(crate) async fn api_count<A: ClientApi>(
    gw: Gateway,
    request: axum::extract::Request,
) -> Response {
    // Counted in the metrics under its model when that is a configured one, refused or not.
    let mut label = String::new();
    let mut rate = Vec::new();
    let mut response = api_count_answer::<A>(&gw, request, &mut label, &mut rate).await;
    crate::error::with_headers(&mut response, rate);
    (response.extensions_mut()).insert(layers::ModelLabel(label));
    response
}

/// [`api_count`]'s answer; `label` gets the configured model the request names, if any.
async fn api_count_answer<A: ClientApi>(
    gw: &Gateway,
    request: axum::extract::Request,
    label: &mut String,
    rate: &mut crate::error::Headers,
) -> Response {
    let caller = caller_of(&request);
    let scanned = request.extensions().get::<Scan>().cloned();
    let (head, body) = request.into_parts();
    let bytes = match layers::read_body(&gw.inner.admission, body).await {
        Ok(bytes) => bytes,
        Err(e) => return A::shaped(e),
    };
    let len = bytes.len();
    let limits = gw.inner.limits.clone();
    let read = tokio::task::spawn_blocking(move || {
        let fault = match scanned {
            Some(scan) => scan.fault,
            None => crate::wellformed::find_fault(&bytes, A::PATHS),
        };
        match fault {
            Some(fault) => Err(api::Refused::new(fault.error(), None)),
            None => A::read_count(&head, &bytes, &limits),
        }
    })
    .await
    .unwrap_or_else(|_| {
        let e = ApiError::invalid("the prompt could not be counted");
        Err(api::Refused::new(e, None))
    });
    let Counted { model, chat } = match read {
        Ok(read) => read,
        Err(refused) => {
            if let Some(model) = refused.asked.filter(|m| gw.inner.models.contains_key(m)) {
                *label = model;
            }
            return A::shaped(refused.error);
        }
    };
    let Some(routes) = gw.inner.models.get(&model) else {
        return A::shaped(
            ApiError::new(
                StatusCode::NOT_FOUND,
                "not_found_error",
                format!(
                    "the model {model:?} does not exist here (GET {} lists them)",
                    A::MODELS.unwrap_or("/v1/models")
                ),
            )
            .code("model_not_found"),
        );
    };
    // Parsed: the memory mark checked again before the count goes on.
    if let Err(e) = layers::parsed(&gw.inner.admission, len) {
        return A::shaped(e);
    }
    *label = model;
    // Held until the count is answered.
    let _reserved = match under_key(gw, &caller, label, rate).await {
        Ok(reserved) => reserved,
        Err(e) => return A::shaped(e),
    };
    let upstream_model = (routes.routes.first()).map_or(routes.name.as_str(), |r| r.model.as_str());
    estimated::<A>(gw, upstream_model, chat, len).await
}
