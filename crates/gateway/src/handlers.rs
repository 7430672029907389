//! The gateway's plain routes: the model lists (`GET /v1/models`, and a client API's own,
//! [`ClientApi::MODELS`]) and the metrics (each client API's endpoint is
//! [`crate::route::answer`], instantiated for the API).

use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::api::ClientApi;
use crate::error::ApiError;
use crate::keys::Caller;
use crate::state::Gateway;

/// The caller, as the `auth` layer named it (open without `[auth]`).
type Called = Option<axum::Extension<Caller>>;

/// The configured models the caller's key may use: every one for a key without `models`.
fn visible(gw: &Gateway, called: Called) -> Vec<String> {
    let caller = called.map_or(Caller::Open, |c| c.0);
    (gw.inner.names.iter())
        .filter(|name| caller.may_use(name))
        .cloned()
        .collect()
}

/// A model as `GET /v1/models` lists it: OpenAI's fields (`object`, `created`, `owned_by`)
/// and Anthropic's (`type`, `display_name`, `created_at`), so that the clients of both APIs
/// read it (Claude Code's gateway model discovery reads `id` and `display_name`).
fn model_entry(name: &str) -> Value {
    json!({"id": name, "object": "model", "created": 0, "owned_by": "choicewise",
           "type": "model", "display_name": name, "created_at": "1970-01-01T00:00:00Z"})
}

/// `GET /v1/models`: every configured model the caller's key may use, in the list shapes of
/// both APIs (OpenAI's `object: "list"`, Anthropic's `has_more`, `first_id`, `last_id`).
pub(crate) async fn list_models(State(gw): State<Gateway>, called: Called) -> Response {
    let names = &visible(&gw, called);
    let data: Vec<Value> = names.iter().map(|name| model_entry(name)).collect();
    axum::Json(json!({"object": "list", "data": data, "has_more": false,
                      "first_id": names.first(), "last_id": names.last()}))
    .into_response()
}

/// `GET /v1/models/{id}`: the model, 403 when the caller's key may not use it, or 404
/// naming it.
pub(crate) async fn one_model(
    State(gw): State<Gateway>,
    called: Called,
    axum::extract::Path(id): axum::extract::Path<String>,
) -> Response {
    if gw.inner.models.contains_key(&id) {
        let caller = called.map_or(Caller::Open, |c| c.0);
        if let Err(e) = caller.allows(&id) {
            return e.into_response();
        }
        return axum::Json(model_entry(&id)).into_response();
    }
    ApiError::new(
        StatusCode::NOT_FOUND,
        "invalid_request_error",
        format!("the model {id:?} does not exist here (GET /v1/models lists them)"),
    )
    .code("model_not_found")
    .into_response()
}

/// `GET {A::MODELS}`: every configured model the caller's key may use, in the client API
/// `A`'s list shape ([`ClientApi::models`]: Gemini's `{"models": [...]}`).
pub(crate) async fn api_models<A: ClientApi>(
    State(gw): State<Gateway>,
    called: Called,
) -> Response {
    axum::Json(A::models(&visible(&gw, called))).into_response()
}

/// `GET {A::MODELS}/{name}`, on the API's route: the model in `A`'s shape
/// ([`ClientApi::model`]); a path naming one of the API's `POST` methods rather than a model
/// (`models/m:generateContent`) is a 405, another name a 404, each in `A`'s error shape.
pub(crate) async fn api_model<A: ClientApi>(
    State(gw): State<Gateway>,
    called: Called,
    uri: axum::http::Uri,
) -> Response {
    let name = (A::MODELS)
        .and_then(|list| uri.path().strip_prefix(list))
        .and_then(|rest| rest.strip_prefix('/'))
        .unwrap_or_default();
    if gw.inner.models.contains_key(name) {
        let caller = called.map_or(Caller::Open, |c| c.0);
        if let Err(e) = caller.allows(name) {
            return A::shaped(e);
        }
        return axum::Json(A::model(name)).into_response();
    }
    let method = name
        .rsplit_once(':')
        .map(|(_, method)| format!(":{method}"));
    if let Some(method) =
        method.filter(|m| A::SHOWN.iter().any(|route| route.ends_with(m.as_str())))
    {
        return A::shaped(ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "invalid_request_error",
            format!("{method} takes POST, not GET"),
        ));
    }
    A::shaped(
        ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found_error",
            format!(
                "the model {name:?} does not exist here (GET {} lists them)",
                A::MODELS.unwrap_or("/v1/models")
            ),
        )
        .code("model_not_found"),
    )
}

/// `GET /metrics`: the Prometheus metrics, in OpenMetrics text; with `[admin]`, only for
/// the operator's key (401 otherwise, logged).
pub(crate) async fn metrics_text(
    State(gw): State<Gateway>,
    headers: axum::http::HeaderMap,
    uri: axum::http::Uri,
) -> Response {
    if let Some(operator) = &gw.inner.operator
        && let Err(e) = operator.check(&headers, &uri)
    {
        tracing::warn!(
            route = "/metrics",
            "an operator's route asked without the operator's key: {}",
            e.message
        );
        return e.into_response();
    }
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        gw.inner.metrics.encode(),
    )
        .into_response()
}

/// `POST /v1/models/{model}:{method}`: Gemini's method on Google's v1 paths, served as on
/// v1beta's (google-genai without `api_version` asks there); a `POST` of a model without a
/// method is a 405 saying so (`Allow: GET`).
pub(crate) async fn v1_model_method(
    state: State<Gateway>,
    request: axum::extract::Request,
) -> Response {
    let path = request.uri().path().to_string();
    if crate::api::gemini::v1_method(&path) {
        return crate::route::answer::<crate::api::gemini::Gemini>(state, request).await;
    }
    let e = ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "invalid_request_error",
        format!(
            "POST {path}: a model is read with GET; a Gemini model's method is POST \
             /v1/models/{{model}}:generateContent, :streamGenerateContent or :countTokens"
        ),
    )
    .code("method_not_allowed");
    let warnings = &state.0.inner.admission.warnings;
    if let Some(left_out) = warnings.allow("post_of_a_model", std::time::Instant::now()) {
        tracing::warn!(route = %path, left_out, "a POST of a model without a method (405)");
    }
    let mut response = e.into_response();
    response
        .headers_mut()
        .insert(header::ALLOW, axum::http::HeaderValue::from_static("GET"));
    response
}
