//! The admin API (`[admin]`): the keys managed live under `/admin/keys`, behind the
//! operator's key, and `GET /v1/key`, a client's own key and what is left of its limits.
//!
//! A key made here is kept hashed in the keys' store ([`crate::keyring::store`]): its secret
//! is shown once, in the answer that made it (or rotated it). Every change is made in the
//! store first, then read back by this replica at once and by the others within a second
//! ([`crate::keyring`]). The keys of the configuration file are listed and shown too, and
//! changed only in the file (a reload reads it again).

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

use crate::error::ApiError;
use crate::keyring::{ManagedKey, store::KeyStore};
use crate::keys::{self, Caller, NamedKey, Origin, UNNAMED};
use crate::state::Gateway;

/// How many times a change is tried again when another changed the key at the same time.
const TRIES: usize = 5;

/// The longest name a key made here may have.
const MAX_NAME: usize = 64;

/// Whether the request sends the operator's key: the 401 (logged, naming the route, never
/// the key sent) otherwise.
fn operator(gw: &Gateway, headers: &HeaderMap, uri: &Uri) -> Result<(), ApiError> {
    let Some(operator) = &gw.inner.operator else {
        return Err(not_found("the admin API is off: configure [admin]"));
    };
    operator.check(headers, uri).inspect_err(|e| {
        tracing::warn!(
            route = %uri.path(),
            "an operator's route asked without the operator's key: {}",
            e.message
        );
    })
}

/// An operator's route: `work`'s answer once the request sends the operator's key
/// ([`operator`]), its error in the API's shape otherwise.
pub(crate) async fn as_operator<F>(
    gw: &Gateway,
    headers: &HeaderMap,
    uri: &Uri,
    work: F,
) -> Response
where
    F: std::future::Future<Output = Result<Response, ApiError>>,
{
    match operator(gw, headers, uri) {
        Ok(()) => work.await.unwrap_or_else(IntoResponse::into_response),
        Err(refused) => refused.into_response(),
    }
}

fn not_found(message: impl Into<String>) -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "invalid_request_error", message).code("not_found")
}

fn no_key(name: &str) -> ApiError {
    not_found(format!("no key is named {name:?}")).code("key_not_found")
}

/// 400 naming the field `param`.
fn invalid(param: &str, what: impl std::fmt::Display) -> ApiError {
    ApiError::invalid(format!("{param}: {what}"))
        .param(param)
        .code("invalid_value")
}

/// The store the admin API's keys live in: 501 `no_key_store` when there is none.
fn store(gw: &Gateway) -> Result<&std::sync::Arc<dyn KeyStore>, ApiError> {
    gw.inner.keys.store().ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_IMPLEMENTED,
            "invalid_request_error",
            "keys cannot be made here: they live in Redis ([state] redis_url) or the records \
             database ([records]), and need [auth]; this gateway has not both",
        )
        .code("no_key_store")
    })
}

/// 503 naming the store and what it said (never a secret).
fn unavailable(store: &dyn KeyStore, e: String) -> ApiError {
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "server_error",
        format!("the keys' store {} did not answer: {e}", store.shown()),
    )
    .code("key_store_unavailable")
    .wait(1)
}

/// Milliseconds since the Unix epoch as RFC 3339 (`2026-11-28T21:00:00Z`).
pub(crate) fn rfc3339(ms: u64) -> Option<String> {
    let at = time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000).ok()?;
    at.format(&time::format_description::well_known::Rfc3339)
        .ok()
}

/// A key as the admin API shows it: never its secret nor its digest.
fn view(key: &NamedKey, now_ms: u64) -> Value {
    let limits: Map<String, Value> = (key.limits.iter())
        .map(|l| (l.name(), crate::quota::amount_json(l.resource, l.amount)))
        .collect();
    let (origin, created) = match key.origin {
        Origin::Config => ("config", None),
        Origin::Managed { created_ms } => ("admin", rfc3339(created_ms)),
    };
    json!({
        "object": "api_key",
        "name": &*key.name,
        "origin": origin,
        "models": key.models,
        "tags": key.tags,
        "limits": limits,
        "expires_at": key.expires_ms.and_then(rfc3339),
        "expired": key.expired(now_ms),
        "created_at": created,
    })
}

/// Every named key (the file's and the admin API's), by name, each with what is left of
/// its limits (as `GET /admin/keys/{name}` shows it).
pub(crate) async fn all_with_usage(gw: &Gateway) -> Vec<Value> {
    use futures::StreamExt;
    let keys = gw.inner.keys.snapshot();
    // Asked of the limits' store a few at a time, in the keys' order: not one key after the
    // other, nor a thousand calls at once.
    let keys: Vec<_> = keys.all_named().cloned().collect();
    futures::stream::iter(keys)
        .map(|key| async move { view_with_usage(gw, &key).await })
        .buffered(16)
        .collect()
        .await
}

/// A key's view with what is left of each of its limits (`usage`), as the limits' store
/// counts it; `usage_error` where the store did not answer.
async fn view_with_usage(gw: &Gateway, key: &NamedKey) -> Value {
    let mut shown = view(key, keys::now_ms());
    match gw.inner.quota.left(&key.rules).await {
        Ok(left) => shown["usage"] = left.iter().map(|l| l.to_json()).collect(),
        Err(e) => shown["usage_error"] = json!(e),
    }
    shown
}

/// `GET /admin/keys`: every named key (the file's and the admin API's), by name.
pub(crate) async fn list(State(gw): State<Gateway>, headers: HeaderMap, uri: Uri) -> Response {
    as_operator(&gw, &headers, &uri, async {
        let now = keys::now_ms();
        let keys = gw.inner.keys.snapshot();
        let data: Vec<Value> = keys.all_named().map(|k| view(k, now)).collect();
        Ok(axum::Json(json!({"object": "list", "data": data})).into_response())
    })
    .await
}

/// `GET /admin/keys/{name}`: the key and what is left of each of its limits.
pub(crate) async fn one(
    State(gw): State<Gateway>,
    headers: HeaderMap,
    uri: Uri,
    Path(name): Path<String>,
) -> Response {
    as_operator(&gw, &headers, &uri, async {
        let key = gw.inner.keys.snapshot().get(&name).cloned();
        let key = key.ok_or_else(|| no_key(&name))?;
        Ok(axum::Json(view_with_usage(&gw, &key).await).into_response())
    })
    .await
}

/// `GET /v1/key`: the caller's own key and what is left of each of its limits.
pub(crate) async fn own(
    State(gw): State<Gateway>,
    called: Option<axum::Extension<Caller>>,
) -> Response {
    match called.map(|c| c.0).unwrap_or_default() {
        Caller::Open => not_found("this gateway asks no key").into_response(),
        Caller::Unnamed => {
            axum::Json(json!({"object": "api_key", "name": UNNAMED, "usage": []})).into_response()
        }
        Caller::Named(key) => axum::Json(view_with_usage(&gw, &key).await).into_response(),
    }
}

/// A secret key: `cw-` and 64 hexadecimal digits of the system's random generator.
fn new_secret() -> Result<String, ApiError> {
    use ring::rand::SecureRandom;
    let mut bytes = [0u8; 32];
    ring::rand::SystemRandom::new()
        .fill(&mut bytes)
        .map_err(|_| {
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "server_error",
                "the system's random generator failed",
            )
        })?;
    Ok(format!("cw-{}", hex(&bytes)))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The JSON object of a request's body, or a 400 saying what it is instead.
fn object(body: &Bytes) -> Result<Map<String, Value>, ApiError> {
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(ApiError::invalid("the body must be a JSON object").code("invalid_json")),
        Err(e) => Err(ApiError::invalid(format!("the body is not JSON: {e}")).code("invalid_json")),
    }
}

/// Applies the fields of a create or change body to `key`: each checked, an error naming
/// it. `fields` are the names this request may give.
fn apply(
    gw: &Gateway,
    key: &mut ManagedKey,
    body: &Map<String, Value>,
    fields: &[&str],
) -> Result<(), ApiError> {
    for (field, value) in body {
        if !fields.contains(&field.as_str()) {
            return Err(invalid(
                field,
                format!("no such field; a key's are {}", fields.join(", ")),
            )
            .code("unknown_field"));
        }
        match field.as_str() {
            "name" | "rotate" => {}
            "models" => key.models = models(gw, value)?,
            "tags" => key.tags = tags(gw, value)?,
            "limits" => {
                let Value::Object(limits) = value else {
                    return Err(invalid("limits", "must be an object of limits by name"));
                };
                let mut checked = key.clone();
                checked.limits = limits.clone();
                checked
                    .rate_limits()
                    .map_err(|e| invalid("limits", e.replace("invalid type: ", "")))?;
                key.limits = limits.clone();
            }
            "expires_at" => key.expires_at_ms = expiry(value)?,
            _ => {}
        }
    }
    // A limit of dollars counts the models' prices: every model it counts has one.
    let usd = key.rate_limits().ok().and_then(|limits| {
        (limits.iter())
            .find(|l| l.resource == crate::config::Resource::Usd)
            .map(|l| l.name())
    });
    if let Some(limit) = usd {
        let unpriced = (gw.inner.names.iter())
            .filter(|m| {
                key.models
                    .as_ref()
                    .is_none_or(|allowed| allowed.contains(m))
            })
            .find(|m| !gw.inner.quota.priced(m));
        if let Some(model) = unpriced {
            return Err(invalid(
                "limits",
                format!("{limit} counts dollars, and the model {model:?} it may use has no price"),
            ));
        }
    }
    Ok(())
}

fn models(gw: &Gateway, value: &Value) -> Result<Option<Vec<String>>, ApiError> {
    let list = match value {
        Value::Null => return Ok(None),
        Value::Array(list) => list,
        _ => {
            return Err(invalid(
                "models",
                "must be a list of model names, or null for every one",
            ));
        }
    };
    let mut names = Vec::with_capacity(list.len());
    for (i, model) in list.iter().enumerate() {
        let at = format!("models[{i}]");
        let Some(name) = model.as_str() else {
            return Err(invalid(&at, "must be a model's name"));
        };
        if !gw.inner.models.contains_key(name) {
            return Err(invalid(&at, format!("no model {name:?} is configured")));
        }
        names.push(name.to_string());
    }
    Ok(Some(names))
}

fn tags(gw: &Gateway, value: &Value) -> Result<Vec<String>, ApiError> {
    let Value::Array(list) = value else {
        return Err(invalid("tags", "must be a list of tags"));
    };
    let file = gw.inner.keys.file();
    let mut tags = Vec::with_capacity(list.len());
    for (i, tag) in list.iter().enumerate() {
        let at = format!("tags[{i}]");
        let Some(tag) = tag.as_str() else {
            return Err(invalid(&at, "must be a tag's name"));
        };
        if !file.has_tag(tag) {
            return Err(invalid(&at, format!("no [[auth.tags]] is named {tag:?}")));
        }
        tags.push(tag.to_string());
    }
    Ok(tags)
}

/// `expires_at`: RFC 3339 (`2026-12-31T00:00:00Z`), seconds since the Unix epoch, or null
/// (never).
fn expiry(value: &Value) -> Result<Option<u64>, ApiError> {
    let bad = || {
        invalid(
            "expires_at",
            "must be a time in RFC 3339 (2026-12-31T00:00:00Z), seconds since the Unix epoch, or null",
        )
    };
    match value {
        Value::Null => Ok(None),
        Value::Number(n) => n
            .as_u64()
            .map(|s| Some(s.saturating_mul(1000)))
            .ok_or_else(bad),
        Value::String(text) => {
            let at =
                time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339)
                    .map_err(|_| bad())?;
            let ms = at.unix_timestamp_nanos() / 1_000_000;
            u64::try_from(ms).map(Some).map_err(|_| bad())
        }
        _ => Err(bad()),
    }
}

/// A name a key made here may take: 1 to 64 letters, digits, `.`, `_` or `-`.
fn check_name(name: &Value) -> Result<String, ApiError> {
    let Some(name) = name.as_str() else {
        return Err(invalid("name", "must be a string"));
    };
    let fits = (1..=MAX_NAME).contains(&name.len())
        && (name.bytes()).all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if !fits {
        return Err(invalid(
            "name",
            format!(
                "{name:?} is not a key's name: 1 to {MAX_NAME} letters, digits, '.', '_' or '-'"
            ),
        ));
    }
    Ok(name.to_string())
}

fn exists(name: &str) -> ApiError {
    ApiError::new(
        StatusCode::CONFLICT,
        "invalid_request_error",
        format!("a key named {name:?} exists"),
    )
    .code("key_exists")
}

fn in_config(name: &str) -> ApiError {
    ApiError::new(
        StatusCode::CONFLICT,
        "invalid_request_error",
        format!(
            "the key {name:?} is the configuration file's ([[auth.keys]]): change it there, then reload (SIGHUP)"
        ),
    )
    .code("key_in_config")
}

/// `POST /admin/keys`: makes a key (`name`, and `models`, `tags`, `limits`, `expires_at`
/// as a key of the file has them): 201 with the key's secret, shown this once.
pub(crate) async fn create(
    State(gw): State<Gateway>,
    headers: HeaderMap,
    uri: Uri,
    body: Bytes,
) -> Response {
    as_operator(&gw, &headers, &uri, answered(created(&gw, &body))).await
}

/// A change's answer: its status and the key as shown, as JSON.
async fn answered(
    change: impl std::future::Future<Output = Result<(StatusCode, Value), ApiError>>,
) -> Result<Response, ApiError> {
    let (status, shown) = change.await?;
    Ok((status, axum::Json(shown)).into_response())
}

/// Makes the key `body` describes (the fields of `POST /admin/keys`): 201 and the key as
/// shown, with its secret (`key`), shown this once.
pub(crate) async fn created(gw: &Gateway, body: &Bytes) -> Result<(StatusCode, Value), ApiError> {
    let body = object(body)?;
    let name = check_name(
        body.get("name")
            .ok_or_else(|| invalid("name", "is required"))?,
    )?;
    let store = store(gw)?;
    if name == UNNAMED || gw.inner.keys.file().has_key(&name) {
        return Err(exists(&name));
    }
    let secret = new_secret()?;
    let now = keys::now_ms();
    let mut key = ManagedKey {
        name: name.clone(),
        sha256: hex(&keys::sha256(secret.as_bytes())),
        models: None,
        tags: Vec::new(),
        limits: Map::new(),
        expires_at_ms: None,
        created_at_ms: now,
        updated_at_ms: now,
    };
    apply(
        gw,
        &mut key,
        &body,
        &["name", "models", "tags", "limits", "expires_at"],
    )?;
    let text = serde_json::to_string(&key).unwrap_or_default();
    match store.create(&name, &text).await {
        Ok(true) => {}
        Ok(false) => return Err(exists(&name)),
        Err(e) => return Err(unavailable(store.as_ref(), e)),
    }
    tracing::info!(key = %name, "admin: key created");
    let shown = shown_now(gw, &name).await;
    let mut shown = shown.unwrap_or_else(|| json!({"name": name}));
    shown["key"] = json!(secret);
    Ok((StatusCode::CREATED, shown))
}

/// This replica's keys read again from the store after a change of `name`, at once (the
/// others read them within a second).
async fn read_back(gw: &Gateway, name: &str) {
    if let Err(e) = gw.inner.keys.refresh(true).await {
        tracing::warn!(key = %name, "admin: the keys' store could not be read back: {e}");
    }
}

/// The key `name` as this replica sees it once it read the store again.
async fn shown_now(gw: &Gateway, name: &str) -> Option<Value> {
    read_back(gw, name).await;
    let key = gw.inner.keys.snapshot().get(name).cloned()?;
    Some(view(&key, keys::now_ms()))
}

/// `PATCH /admin/keys/{name}`: changes a key made here (`models`, `tags`, `limits`,
/// `expires_at`; `"rotate": true` gives it a new secret, shown this once, and the old one is
/// refused from then on).
pub(crate) async fn change(
    State(gw): State<Gateway>,
    headers: HeaderMap,
    uri: Uri,
    Path(name): Path<String>,
    body: Bytes,
) -> Response {
    as_operator(&gw, &headers, &uri, answered(changed(&gw, &name, &body))).await
}

/// Changes the key `name` as `body` says (the fields of `PATCH /admin/keys/{name}`): the
/// key as shown, with its new secret (`key`) when rotated.
pub(crate) async fn changed(
    gw: &Gateway,
    name: &str,
    body: &Bytes,
) -> Result<(StatusCode, Value), ApiError> {
    let body = object(body)?;
    if gw.inner.keys.file().has_key(name) {
        return Err(in_config(name));
    }
    let store = store(gw)?;
    let rotate = match body.get("rotate") {
        None | Some(Value::Bool(false)) => false,
        Some(Value::Bool(true)) => true,
        Some(_) => return Err(invalid("rotate", "must be true or false")),
    };
    let fields = ["models", "tags", "limits", "expires_at", "rotate"];
    for _ in 0..TRIES {
        let all = store
            .all()
            .await
            .map_err(|e| unavailable(store.as_ref(), e))?;
        let Some((_, old)) = all.into_iter().find(|(n, _)| n == name) else {
            return Err(no_key(name));
        };
        let mut key: ManagedKey = serde_json::from_str(&old).map_err(|e| {
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "server_error",
                format!("the key {name:?} in the store cannot be read: {e}"),
            )
        })?;
        apply(gw, &mut key, &body, &fields)?;
        let secret = match rotate {
            true => {
                let secret = new_secret()?;
                key.sha256 = hex(&keys::sha256(secret.as_bytes()));
                Some(secret)
            }
            false => None,
        };
        key.updated_at_ms = keys::now_ms();
        let text = serde_json::to_string(&key).unwrap_or_default();
        match store.replace(name, &old, &text).await {
            Ok(true) => {
                tracing::info!(key = %name, rotated = rotate, "admin: key changed");
                let mut shown = shown_now(gw, name)
                    .await
                    .unwrap_or_else(|| json!({"name": name}));
                if let Some(secret) = secret {
                    shown["key"] = json!(secret);
                }
                return Ok((StatusCode::OK, shown));
            }
            // Changed by another since it was read: read it again.
            Ok(false) => continue,
            Err(e) => return Err(unavailable(store.as_ref(), e)),
        }
    }
    Err(ApiError::new(
        StatusCode::CONFLICT,
        "invalid_request_error",
        format!("the key {name:?} was changed by other requests at the same time; try again"),
    )
    .code("conflict"))
}

/// `DELETE /admin/keys/{name}`: revokes a key made here: refused by every replica within
/// a second, its name free again.
pub(crate) async fn revoke(
    State(gw): State<Gateway>,
    headers: HeaderMap,
    uri: Uri,
    Path(name): Path<String>,
) -> Response {
    as_operator(&gw, &headers, &uri, answered(revoked(&gw, &name))).await
}

/// Revokes the key `name`.
pub(crate) async fn revoked(gw: &Gateway, name: &str) -> Result<(StatusCode, Value), ApiError> {
    if gw.inner.keys.file().has_key(name) {
        return Err(in_config(name));
    }
    let store = store(gw)?;
    match store.remove(name).await {
        Ok(true) => {}
        Ok(false) => return Err(no_key(name)),
        Err(e) => return Err(unavailable(store.as_ref(), e)),
    }
    tracing::info!(key = %name, "admin: key revoked");
    read_back(gw, name).await;
    Ok((
        StatusCode::OK,
        json!({"object": "api_key", "name": name, "revoked": true}),
    ))
}
