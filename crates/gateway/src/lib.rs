//! # choicewise-gateway
//!
//! An OpenAI-compatible gateway (`choicewise serve`) that gives every model a correct streamed
//! `n`, by one request with `n` where the provider serves it and one request per choice where
//! it does not, spread over the model's upstreams (OpenAI Chat Completions, the Responses API,
//! Anthropic Messages); that picks among samples while they stream (the first to produce, with
//! hedged requests; the first to finish; a vote decided early, window by window); and that
//! accounts every choice (each upstream's own figures, estimated where none came).
//!
//! [`Gateway::router`] is an axum [`Router`](axum::Router): serve it alone ([`serve`]) or
//! mount it in an axum app of your own.
//!
//! ```no_run
//! use choicewise_gateway::{Config, Gateway};
//! # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let config = Config::from_toml(r#"
//!     [[models]]
//!     name = "small"
//!     [[models.upstreams]]
//!     api = "chat"
//!     base_url = "http://127.0.0.1:8080/v1"
//! "#)?;
//! let app = axum::Router::new().nest("/llm", Gateway::new(&config)?.router());
//! // Nagle off, so that each chunk is written when it is made.
//! use axum::serve::ListenerExt;
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8787").await?
//!     .tap_io(|tcp| { let _ = tcp.set_nodelay(true); });
//! axum::serve(listener, app).await?;
//! # Ok(()) }
//! ```
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod answer_api;
mod answer_chat;
mod config;
mod engine;
mod error;
mod ingress;
mod layers;
mod listen;
mod metrics;
mod open;
mod overload;
mod pace;
mod request;
mod resilience;
mod serving;
mod traces;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::from_fn_with_state;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use choicewise_client::{Client, Dialect};
use serde_json::{Value, json};
use tokio::sync::{Semaphore, watch};

pub use config::{
    Auth, Config, ConfigError, HealthConfig, HostedTools, Limits, Model, NMode, RetryConfig,
    Telemetry, Upstream,
};

use choicewise_core::chunks::Envelope;
use engine::Run;
use error::ApiError;
use metrics::Metrics;
use open::UpstreamRoute;
use request::ChatRequest;
use traces::{RequestSpan, Traces};

/// A gateway: its routes, its keys, its limits. Cheap to clone.
///
/// ```
/// use choicewise_gateway::{Config, Gateway};
/// let config = Config::from_toml(
///     "[[models]]\nname = \"m\"\n[[models.upstreams]]\napi = \"chat\"\nbase_url = \"http://127.0.0.1:9/v1\"",
/// ).unwrap();
/// let gateway = Gateway::new(&config).unwrap();
/// let app: axum::Router = gateway.router();
/// # drop(app);
/// ```
#[derive(Clone)]
pub struct Gateway {
    inner: Arc<Inner>,
}

struct Inner {
    limits: Limits,
    /// The keys clients may send; none: no key needed.
    keys: Vec<String>,
    models: open::Models,
    /// Each model's default policy (`[models.choicewise]`), checked at start.
    policies: HashMap<String, choicewise_core::Policy>,
    /// In order, for `GET /v1/models`.
    names: Vec<String>,
    /// One per request being served (`max_concurrent_requests`).
    slots: Arc<Semaphore>,
    /// The process-wide memory ceiling (`memory_high_watermark_mb`).
    ceiling: Arc<overload::Ceiling>,
    metrics: Arc<Metrics>,
    /// `[telemetry]`'s traces, if an endpoint is named.
    traces: Option<Arc<Traces>>,
    /// Set by [`Gateway::close`]: open answers end.
    closing: watch::Sender<bool>,
    /// Without `[auth]`: the web origins whose pages may call the gateway.
    allowed_origins: Vec<String>,
    /// The address [`serve`] listens on, once it does: a keyless gateway's own `Host`.
    listening: std::sync::OnceLock<std::net::SocketAddr>,
    /// How long open answers may finish after a shutdown signal (`shutdown_grace_s`).
    grace: Duration,
    /// Chat upstreams whose base URL lacks `/v1`, and the same with it: checked at start.
    v1_checks: Vec<(Client, Client)>,
    /// Each model's rule for hosted tools (`hosted_tools`).
    hosted_tools: HashMap<String, HostedTools>,
}

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway")
            .field("models", &self.inner.names)
            .field("keys", &self.inner.keys.len())
            .finish()
    }
}

impl Gateway {
    /// A gateway for this configuration: its upstreams' clients, their keys read from the
    /// environment variables the configuration names (an unset one is an error naming the
    /// variable, never a value), and its trace exporter when `[telemetry]` names an
    /// endpoint (then it must be made inside a tokio runtime, which sends the spans).
    pub fn new(config: &Config) -> Result<Gateway, ConfigError> {
        Gateway::with_env(config, |name| std::env::var(name).ok())
    }

    /// As [`new`](Self::new), the variables looked up with `env` instead of the process's
    /// environment (for a program that keeps its secrets elsewhere, and for tests).
    ///
    /// ```
    /// use choicewise_gateway::{Config, Gateway};
    /// let config = Config::from_toml(
    ///     "[auth]\nkeys_env = \"KEYS\"\n[[models]]\nname = \"m\"\n[[models.upstreams]]\napi = \"chat\"\nbase_url = \"http://127.0.0.1:9/v1\"",
    /// ).unwrap();
    /// assert!(Gateway::with_env(&config, |_| None).unwrap_err().to_string().contains("KEYS is not set"));
    /// assert!(Gateway::with_env(&config, |_| Some(" ".into())).unwrap_err().to_string().contains("KEYS is empty"));
    /// assert!(Gateway::with_env(&config, |_| Some("sk-1,sk-2".into())).is_ok());
    /// ```
    pub fn with_env(
        config: &Config,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Gateway, ConfigError> {
        let env_var = |name: &str| match env(name).map(|v| v.trim().to_string()) {
            None => Err(ConfigError(format!(
                "the environment variable {name} is not set"
            ))),
            Some(v) if v.is_empty() => Err(ConfigError(format!(
                "the environment variable {name} is empty"
            ))),
            Some(v) => Ok(v),
        };
        let keys = match &config.auth {
            None => Vec::new(),
            Some(auth) => {
                let keys: Vec<String> = env_var(&auth.keys_env)?
                    .split(',')
                    .map(|k| k.trim().to_string())
                    .filter(|k| !k.is_empty())
                    .collect();
                if keys.is_empty() {
                    return Err(ConfigError(format!("{} holds no key", auth.keys_env)));
                }
                keys
            }
        };
        let mut models = HashMap::new();
        let mut policies = HashMap::new();
        let mut v1_checks = Vec::new();
        let mut names = Vec::new();
        let mut hosted_tools = HashMap::new();
        for model in &config.models {
            let mut routes = Vec::new();
            for (k, u) in model.upstreams.iter().enumerate() {
                let api = u.api;
                // Every try is the gateway's (src/open.rs): the client's own retries are off.
                let mut builder = Client::builder()
                    .api(api)
                    .base_url(&u.base_url)
                    .max_retries(0);
                let mut key = None;
                if let Some(var) = &u.api_key_env {
                    let value = env_var(var).map_err(|e| {
                        ConfigError(format!("model {:?}, upstream {k}: {e}", model.name))
                    })?;
                    builder = builder.api_key(value.clone());
                    key = Some(value);
                }
                let client = builder.build().map_err(|e| {
                    ConfigError(format!("model {:?}, upstream {k}: {e}", model.name))
                })?;
                // A local server's base URL without `/v1` is a common slip: `serve` asks its
                // model list at start, and at `/v1` when that is a 404 (serving::check_v1).
                let trimmed = u.base_url.trim_end_matches('/');
                if u.api == Dialect::Chat && !trimmed.ends_with("/v1") {
                    let mut alt = Client::builder()
                        .api(api)
                        .base_url(format!("{trimmed}/v1"))
                        .max_retries(0);
                    if let Some(key) = key {
                        alt = alt.api_key(key);
                    }
                    if let Ok(alt) = alt.build() {
                        v1_checks.push((client.clone(), alt));
                    }
                }
                // Labels and messages name the host and port only: a base URL's
                // `user:password@` or `?api-key=` never leaves.
                let host = client.host();
                let upstream_model = u.model.clone().unwrap_or_else(|| model.name.clone());
                routes.push(UpstreamRoute {
                    api: u.api,
                    client,
                    label: Arc::from(format!("{}:{upstream_model}@{host}", u.api).as_str()),
                    model: upstream_model,
                    n_mode: u.n_mode(),
                    max_n: u.max_n,
                    host,
                    idle_timeout: Duration::from_secs_f64(config.limits.upstream_idle_timeout_s),
                    max_answer_bytes: config.limits.max_answer_bytes,
                    weight: u.weight,
                    health: Arc::new(resilience::Health::new(&model.health)),
                });
            }
            names.push(model.name.clone());
            if let Some(policy) = model.policy(&config.limits)? {
                policies.insert(model.name.clone(), policy);
            }
            hosted_tools.insert(model.name.clone(), model.hosted_tools);
            models.insert(
                model.name.clone(),
                Arc::new(open::ModelRoutes {
                    name: model.name.clone(),
                    routes,
                    retry: resilience::RetryPolicy::of(&model.retry),
                    fallbacks: model.fallbacks.clone(),
                    budget: Arc::new(resilience::Budget::new(config.limits.retry_budget_percent)),
                }),
            );
        }
        Ok(Gateway {
            inner: Arc::new(Inner {
                limits: config.limits.clone(),
                keys,
                models: Arc::new(models),
                policies,
                names,
                slots: Arc::new(Semaphore::new(config.limits.max_concurrent_requests)),
                ceiling: {
                    let (high, low) = config.limits.memory_watermarks();
                    Arc::new(overload::Ceiling::new(high, low))
                },
                metrics: Arc::new(Metrics::new()),
                traces: Traces::new(&config.telemetry)?,
                closing: watch::Sender::new(false),
                allowed_origins: config.allowed_origins.clone(),
                listening: std::sync::OnceLock::new(),
                grace: config.shutdown_grace(),
                v1_checks,
                hosted_tools,
            }),
        })
    }

    /// The gateway's eight routes:
    ///
    /// - `POST /v1/chat/completions` (OpenAI Chat Completions),
    /// - `POST /v1/messages` (Anthropic Messages),
    /// - `POST /v1/messages/count_tokens` (Anthropic's token count),
    /// - `POST /v1/responses` (OpenAI Responses),
    /// - `GET /v1/models` and `GET /v1/models/{id}` (the configured models),
    /// - `GET /healthz`,
    /// - `GET /metrics` (Prometheus text format; docs/gateway.md lists the metrics).
    ///
    /// Another method on a `POST` route is answered 405, an unknown path 404.
    ///
    /// Its layers, outermost first (docs/gateway.md): the request's id (`x-request-id`, the
    /// client's or one made here, echoed on the answer); the count of every answer in
    /// `choicewise_requests_total`; without `[auth]`, the checks that keep
    /// web pages out (a loopback `Host`, no `Origin` unless listed in `allowed_origins`, JSON
    /// bodies only); the client's key, from the headers, on the `/v1` routes; then, on each
    /// `POST` route, a declared body over `max_body_bytes` refused and a slot taken
    /// (`max_concurrent_requests`), held until the answer's last byte.
    pub fn router(&self) -> axum::Router {
        let gw = self.clone();
        let slots = || from_fn_with_state(gw.clone(), layers::slots);
        let api = axum::Router::new()
            .route(
                "/v1/chat/completions",
                post(chat_completions)
                    .layer(slots())
                    .fallback(layers::post_only),
            )
            .route(
                "/v1/messages",
                post(messages).layer(slots()).fallback(layers::post_only),
            )
            .route(
                "/v1/responses",
                post(responses).layer(slots()).fallback(layers::post_only),
            )
            .route(
                "/v1/messages/count_tokens",
                post(count_tokens)
                    .layer(slots())
                    .fallback(layers::post_only),
            )
            .route("/v1/models", get(list_models))
            .route("/v1/models/{id}", get(one_model))
            .route_layer(from_fn_with_state(gw.clone(), layers::auth));
        axum::Router::new()
            .merge(api)
            .route("/healthz", get(|| async { "ok" }))
            .route("/metrics", get(metrics_text))
            .fallback(layers::unknown_route)
            .layer(from_fn_with_state(gw.clone(), layers::browsers))
            .layer(from_fn_with_state(gw.clone(), layers::count))
            .layer(tower_http::request_id::PropagateRequestIdLayer::x_request_id())
            .layer(tower_http::request_id::SetRequestIdLayer::x_request_id(
                layers::RequestIds,
            ))
            .with_state(gw)
    }

    /// Whether `host` (a `Host` header) names this gateway on loopback: `localhost`,
    /// `127.0.0.1`, `[::1]` or the address it listens on, with the port it listens on when
    /// it names one and the gateway knows its own.
    fn loopback_host(&self, host: &str) -> bool {
        let (name, port) = match host.rsplit_once(':') {
            Some((name, port)) if !port.contains(']') => (name, Some(port)),
            _ => (host, None),
        };
        let listening = self.inner.listening.get();
        let own = listening.map(|a| match a.ip() {
            std::net::IpAddr::V6(ip) => format!("[{ip}]"),
            ip => ip.to_string(),
        });
        let known = ["localhost", "127.0.0.1", "[::1]"]
            .iter()
            .any(|n| n.eq_ignore_ascii_case(name))
            || own.as_deref() == Some(name);
        let port_ok = match (port, listening) {
            (Some(port), Some(addr)) => port.parse::<u16>().ok() == Some(addr.port()),
            (Some(port), None) => port.parse::<u16>().is_ok(),
            (None, _) => true,
        };
        known && port_ok
    }

    /// Ends every open answer now, as a shutdown does when its grace period is over: each
    /// choice still streaming ends with `finish_reason: "error"` (and `choicewise.error`
    /// saying the gateway shut down), then the usage and `[DONE]` follow as usual; every
    /// upstream is closed. Requests that arrive later are answered as usual: stop accepting
    /// them first ([`serve`] does).
    ///
    /// ```
    /// # use choicewise_gateway::{Config, Gateway};
    /// # let config = Config::from_toml(
    /// #     "[[models]]\nname = \"m\"\n[[models.upstreams]]\napi = \"chat\"\nbase_url = \"http://127.0.0.1:9/v1\"",
    /// # ).unwrap();
    /// let gateway = Gateway::new(&config).unwrap();
    /// gateway.close();
    /// ```
    pub fn close(&self) {
        self.inner.closing.send_replace(true);
    }

    /// Sends the spans of the requests answered so far to the OTLP endpoint now, once those
    /// whose answers have ended are made (waiting a few seconds at most); nothing without
    /// `[telemetry] otlp_endpoint`. Spans are otherwise sent in batches, every few seconds.
    pub async fn flush_traces(&self) {
        if let Some(traces) = &self.inner.traces {
            traces.flush().await;
        }
    }

    /// Sends the last spans and stops the trace exporter (waiting a few seconds at most):
    /// for a program that serves [`router`](Self::router) itself, once it is done serving
    /// ([`serve`] does it). Nothing without `[telemetry] otlp_endpoint`.
    pub async fn shutdown_traces(&self) {
        if let Some(traces) = &self.inner.traces {
            traces.shutdown().await;
        }
    }

    /// Checks the client's key (`Authorization: Bearer KEY`, or Anthropic's `x-api-key:
    /// KEY`) when keys are configured.
    fn authorize(&self, headers: &HeaderMap) -> Result<(), ApiError> {
        if self.inner.keys.is_empty() {
            return Ok(());
        }
        let bearer = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        let x_api_key = headers.get("x-api-key").and_then(|v| v.to_str().ok());
        let given = bearer.or(x_api_key).map(str::trim);
        let known = given.is_some_and(|given| {
            // Every key compared in full, whatever matches: no early exit to time.
            (self.inner.keys.iter()).fold(false, |found, key| {
                found | same(key.as_bytes(), given.as_bytes())
            })
        });
        match (given, known) {
            (_, true) => Ok(()),
            (None, _) => Err(ApiError::new(
                StatusCode::UNAUTHORIZED,
                "invalid_request_error",
                "no API key: send Authorization: Bearer KEY (or x-api-key: KEY)",
            )
            .code("missing_api_key")),
            (Some(_), false) => Err(ApiError::new(
                StatusCode::UNAUTHORIZED,
                "invalid_request_error",
                "the API key is not one this gateway accepts",
            )
            .code("invalid_api_key")),
        }
    }
}

impl Gateway {
    /// Who a request comes from, for the ejection rules (`resilience::Health`): a hash of
    /// its key when keys are configured, else of its connection's peer address (its IP: a
    /// client's several connections are one client); one anonymous client for a router
    /// served without the gateway's own listener.
    fn client_of(
        &self,
        headers: &HeaderMap,
        peer: Option<std::net::IpAddr>,
    ) -> resilience::ClientId {
        use std::hash::{Hash, Hasher};
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        if self.inner.keys.is_empty() {
            peer.hash(&mut hasher);
        } else {
            let bearer = (headers.get(header::AUTHORIZATION))
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer "));
            let x_api_key = headers.get("x-api-key").and_then(|v| v.to_str().ok());
            bearer.or(x_api_key).map(str::trim).hash(&mut hasher);
        }
        hasher.finish()
    }
}

/// Compares two byte strings in time that depends on their lengths only.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

/// A model as `GET /v1/models` lists it: OpenAI's fields (`object`, `created`, `owned_by`)
/// and Anthropic's (`type`, `display_name`, `created_at`), so that the clients of both APIs
/// read it (Claude Code's gateway model discovery reads `id` and `display_name`).
fn model_entry(name: &str) -> Value {
    json!({"id": name, "object": "model", "created": 0, "owned_by": "choicewise",
           "type": "model", "display_name": name, "created_at": "1970-01-01T00:00:00Z"})
}

/// `GET /v1/models`: every configured model, in the list shapes of both APIs (OpenAI's
/// `object: "list"`, Anthropic's `has_more`, `first_id`, `last_id`).
async fn list_models(State(gw): State<Gateway>) -> Response {
    let names = &gw.inner.names;
    let data: Vec<Value> = names.iter().map(|name| model_entry(name)).collect();
    axum::Json(json!({"object": "list", "data": data, "has_more": false,
                      "first_id": names.first(), "last_id": names.last()}))
    .into_response()
}

/// `GET /v1/models/{id}`: the model, or 404 naming it.
async fn one_model(
    State(gw): State<Gateway>,
    axum::extract::Path(id): axum::extract::Path<String>,
) -> Response {
    if gw.inner.models.contains_key(&id) {
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

/// `POST /v1/messages/count_tokens`: the prompt's tokens as the model's first Anthropic
/// upstream counts them (its own `count_tokens`); else, or when it cannot answer, counted
/// with tiktoken (the encoding of the model's first upstream) and said so in
/// `x-choicewise-token-count: estimated`.
async fn count_tokens(State(gw): State<Gateway>, request: axum::extract::Request) -> Response {
    // Counted in the metrics under its model when that is a configured one, refused or not.
    let mut label = String::new();
    let mut response = count_tokens_answer(&gw, request, &mut label).await;
    (response.extensions_mut()).insert(layers::ModelLabel(label));
    response
}

/// [`count_tokens`]' answer; `label` gets the configured model the request names, if any.
async fn count_tokens_answer(
    gw: &Gateway,
    request: axum::extract::Request,
    label: &mut String,
) -> Response {
    let api = Dialect::Anthropic;
    let bytes = match layers::read_body(gw, request.into_body()).await {
        Ok(bytes) => bytes,
        Err(e) => return layers::shaped(api, e),
    };
    let gateway = gw.clone();
    let (asked, parsed) = tokio::task::spawn_blocking(move || {
        let body = match ingress::parse_body(&bytes) {
            Ok(body) => body,
            Err(e) => return (None, Err(ApiError::from(e))),
        };
        let asked = body
            .get("model")
            .and_then(Value::as_str)
            .map(str::to_string);
        let translated = match ingress::anthropic::to_chat_for_count(&body) {
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
        Err(e) => return layers::shaped(api, e),
    };
    if let Some(route) = routes.routes.iter().find(|r| r.api == Dialect::Anthropic)
        && let Some(fields) = body.as_object_mut()
    {
        fields.remove("choicewise");
        fields.insert("model".into(), json!(route.model));
        match route.client.count_tokens(&body).await {
            Ok(tokens) => return axum::Json(json!({"input_tokens": tokens})).into_response(),
            Err(e) => tracing::warn!(
                upstream = &*route.label,
                error = %e,
                "the upstream did not count the tokens: estimated instead"
            ),
        }
    }
    let upstream_model = (routes.routes.first()).map_or(routes.name.as_str(), |r| r.model.as_str());
    let encoding = choicewise_usage::encoding_for_model(upstream_model).name;
    let counted = tokio::task::spawn_blocking(move || {
        choicewise_usage::count_prompt(encoding, &chat)
            .map(|count| count.total)
            .map_err(|e| ApiError::invalid(format!("the prompt could not be counted: {e}")))
    })
    .await
    .unwrap_or_else(|_| Err(ApiError::invalid("the prompt could not be counted")));
    match counted {
        Ok(tokens) => (
            [("x-choicewise-token-count", "estimated")],
            axum::Json(json!({"input_tokens": tokens})),
        )
            .into_response(),
        Err(e) => layers::shaped(api, e),
    }
}

async fn metrics_text(State(gw): State<Gateway>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        gw.inner.metrics.encode(),
    )
        .into_response()
}

async fn chat_completions(State(gw): State<Gateway>, request: axum::extract::Request) -> Response {
    answer(gw, request, Dialect::Chat).await
}

/// `POST /v1/messages`: Anthropic's Messages API over any configured model.
async fn messages(State(gw): State<Gateway>, request: axum::extract::Request) -> Response {
    answer(gw, request, Dialect::Anthropic).await
}

/// `POST /v1/responses`: OpenAI's Responses API (stateless) over any configured model.
async fn responses(State(gw): State<Gateway>, request: axum::extract::Request) -> Response {
    answer(gw, request, Dialect::Responses).await
}

/// A request of any of the three APIs (`api`: none for Chat Completions), answered in that
/// API's terms, its failures included.
async fn answer(gw: Gateway, request: axum::extract::Request, api: Dialect) -> Response {
    let (parts, body) = request.into_parts();
    let headers = parts.headers;
    let arrived = Instant::now();
    let peer = parts.extensions.get::<listen::Peer>().map(|p| p.0);
    let mut seen = Seen {
        client: gw.client_of(&headers, peer),
        parent: gw.inner.traces.as_ref().map(|_| Traces::parent(&headers)),
        request_id: (headers.get("x-request-id"))
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
            .unwrap_or_default(),
        ..Seen::default()
    };
    let response = match serve_chat(&gw, body, arrived, &mut seen, api).await {
        Ok(response) => response,
        Err(e) => {
            // Answered before its run began: its span now (a run's is its Finish's).
            if let (Some(traces), Some(parent)) = (&gw.inner.traces, &seen.parent) {
                traces.record_error(parent, arrived.elapsed(), seen.asked.as_deref(), &e);
            }
            let mut response = layers::shaped(api, e);
            if let Some(tries) = &seen.tries {
                let count = tries.lock().map_or(0, |t| t.len());
                response
                    .headers_mut()
                    .insert("x-choicewise-tries", count.into());
            }
            response
        }
    };
    let mut response = response;
    (response.extensions_mut()).insert(layers::ModelLabel(std::mem::take(&mut seen.model)));
    response
}

/// The `api` label of an API's requests in the metrics: its endpoint's name (`chat`,
/// `responses`, `messages`).
pub(crate) fn api_label(api: Dialect) -> &'static str {
    match api {
        Dialect::Anthropic => "messages",
        other => other.name(),
    }
}

/// What [`chat_completions`] learns of a request as it is served, for its accounting.
#[derive(Default)]
struct Seen {
    /// Who the request comes from, for the ejection rules.
    client: resilience::ClientId,
    /// The configured model asked for, once known (empty for any other): the metrics' label.
    model: String,
    /// The request's id (`x-request-id`), for its log line.
    request_id: String,
    /// The model asked for, configured or not, once read: the span's.
    asked: Option<String>,
    /// With traces on, the trace the request belongs to, until its run's [`Finish`] takes
    /// it (and makes the span).
    parent: Option<opentelemetry::Context>,
    /// The request's tries, once its upstreams are tried: counted in `x-choicewise-tries`
    /// on a failure too.
    tries: Option<Arc<std::sync::Mutex<Vec<open::TryRecord>>>>,
}

/// Bodies of at most this many bytes without a `vote_by` are parsed on the worker that
/// read them (see [`parses_inline`]).
const INLINE_PARSE_BYTES: usize = 16 * 1024;

/// Whether a request body is parsed on the worker: at most [`INLINE_PARSE_BYTES`], and no
/// `vote_by` to compile, nor a `\u` escape that could spell one.
fn parses_inline(body: &[u8]) -> bool {
    let has = |needle: &[u8]| body.windows(needle.len()).any(|w| w == needle);
    body.len() <= INLINE_PARSE_BYTES && !has(b"vote_by") && !has(b"\\u")
}

async fn serve_chat(
    gw: &Gateway,
    body: Body,
    arrived: Instant,
    seen: &mut Seen,
    api: Dialect,
) -> Result<Response, ApiError> {
    // The key was checked and a slot taken by the layers (`Gateway::router`).
    let bytes = layers::read_body(gw, body).await?;
    let inline = parses_inline(&bytes);
    let limits = gw.inner.limits.clone();
    // A refusal carries the model the body names, when it could be read: a refused Messages or
    // Responses request is counted in the metrics under its model.
    let parse = move || match api {
        Dialect::Chat => Ok::<_, Box<(ApiError, Option<String>)>>((
            ChatRequest::parse(&bytes, &limits).map_err(|e| Box::new((e, None)))?,
            None,
            None,
            Translation::default(),
        )),
        api => {
            let body =
                ingress::parse_body(&bytes).map_err(|e| Box::new((ApiError::from(e), None)))?;
            let asked = body
                .get("model")
                .and_then(Value::as_str)
                .map(str::to_string);
            let refused = |e: ApiError| Box::new((e, asked.clone()));
            let translated =
                ingress::to_chat(api, &body).map_err(|e| refused(ApiError::from(e)))?;
            let chat = serde_json::to_vec(&translated.chat)
                .map_err(|e| refused(ApiError::invalid(e.to_string())))?;
            let native =
                (!translated.native.is_empty()).then(|| Arc::new((api, translated.native)));
            // A streamed Messages answer names the prompt's tokens in its first event.
            let prompt =
                (api == Dialect::Anthropic && translated.stream).then(|| translated.chat.clone());
            Ok((
                ChatRequest::parse(&chat, &limits).map_err(refused)?,
                Some(translated.reply),
                native,
                Translation {
                    hosted: translated.hosted,
                    prompt,
                },
            ))
        }
    };
    // Parsing a body of up to max_body_bytes (translating it from the client's API) and
    // compiling its vote_by take CPU time: on a blocking thread, never on the workers that
    // serve every connection. A small body without a vote_by parses in microseconds, less
    // than the two thread hand-offs of the blocking pool: on the worker. Either way a panic
    // while parsing is the client's 400, not a dropped connection.
    let unparsed = || Box::new((ApiError::invalid("the request could not be parsed"), None));
    let parsed = if inline {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(parse))
            .unwrap_or_else(|_| Err(unparsed()))
    } else {
        (tokio::task::spawn_blocking(parse).await).unwrap_or_else(|_| Err(unparsed()))
    };
    let (req, reply, native, translation) = match parsed {
        Ok(parsed) => parsed,
        Err(refused) => {
            let (e, asked) = *refused;
            if let Some(model) = asked.filter(|m| gw.inner.models.contains_key(m)) {
                seen.model = model;
            }
            return Err(e);
        }
    };
    seen.asked = Some(req.model.clone());
    let Some(model) = gw.inner.models.get(&req.model).cloned() else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            format!(
                "the model {:?} does not exist here (GET /v1/models lists them)",
                req.model
            ),
        )
        .code("model_not_found"));
    };
    seen.model.clone_from(&req.model);
    // Every ingress's request is read here: the model's default policy applies to those
    // that carry no extension (an agent cannot send one).
    let default = gw.inner.policies.get(&req.model);
    let req = req.with_default(default, &gw.inner.limits)?;
    // Hosted tools the gateway cannot run: left out, or the request refused, as the model
    // says.
    let dropped = match gw.inner.hosted_tools.get(&req.model) {
        Some(HostedTools::Refuse) => match translation.hosted.first() {
            Some(tool) => return Err(tool.refused(&req.model).into()),
            None => None,
        },
        _ => {
            let mut kinds: Vec<&str> = Vec::new();
            for tool in &translation.hosted {
                if !kinds.contains(&tool.kind.as_str()) {
                    kinds.push(&tool.kind);
                }
            }
            (!kinds.is_empty()).then(|| kinds.join(","))
        }
    };
    if let Some(dropped) = &dropped {
        tracing::info!(
            model = %req.model,
            dropped_tools = %dropped,
            "hosted tools left out of the upstream request (hosted_tools = \"drop\")"
        );
    }
    let estimate = translation.prompt.map(|chat| {
        let upstream_model =
            (model.routes.first()).map_or(model.name.as_str(), |r| r.model.as_str());
        let encoding = choicewise_usage::encoding_for_model(upstream_model).name;
        tokio::task::spawn_blocking(move || {
            choicewise_usage::count_prompt(encoding, &chat)
                .ok()
                .map(|count| count.total)
        })
    });
    let apis: Vec<Dialect> = model.routes.iter().map(|u| u.api).collect();
    let budget = model.budget.clone();
    let opener = open::Opener {
        models: gw.inner.models.clone(),
        model,
        body: Arc::new(req.body.clone()),
        native,
        logprobs: req.policy.confidence().map(|c| c.top_logprobs),
        metrics: gw.inner.metrics.clone(),
        budget,
        tries: Arc::default(),
        client: seen.client,
        sent: Arc::default(),
        max_requests: gw.inner.limits.max_upstream_requests_per_request,
    };
    seen.tries = Some(opener.tries.clone());
    // Everything the request does ends by its deadline: opening its first samples, the pick,
    // the answer (`closing`).
    let deadline = arrived + Duration::from_secs_f64(gw.inner.limits.request_deadline_s);
    let past_deadline = |while_: &str| {
        tracing::warn!(
            request_id = %seen.request_id,
            model = %req.model,
            request_deadline_s = gw.inner.limits.request_deadline_s,
            "the request passed its deadline {while_}"
        );
        ApiError::new(
            StatusCode::GATEWAY_TIMEOUT,
            "upstream_error",
            format!(
                "model {:?}: the request passed its deadline ({}s, request_deadline_s) {while_}",
                req.model, gw.inner.limits.request_deadline_s
            ),
        )
        .code("request_deadline")
    };
    let mut run = match tokio::time::timeout_at(deadline.into(), Run::start(opener, &req)).await {
        Ok(run) => run?,
        Err(_) => return Err(past_deadline("while its first samples were opened")),
    };
    let span = match (&gw.inner.traces, seen.parent.take()) {
        (Some(traces), Some(parent)) => Some(traces.request(parent, &req, apis.into_iter())),
        _ => None,
    };
    let picked = run
        .pick(&req, deadline.saturating_duration_since(Instant::now()))
        .await;
    let past_deadline = (picked.samples.is_empty() && picked.timed_out).then(|| {
        let reason = picked.reason.as_deref().unwrap_or("nothing was picked");
        past_deadline(&format!("before its pick decided: {reason}"))
    });
    let mut finish = Finish {
        metrics: gw.inner.metrics.clone(),
        model: req.model.clone(),
        request_id: std::mem::take(&mut seen.request_id),
        arrived,
        outputs: (req.policy.rule() != choicewise_core::PickRule::All)
            .then(|| picked.samples.clone()),
        completed: false,
        span,
        failure: None,
        run: Some(run),
    };
    if let Some(e) = past_deadline {
        finish.failure = Some("request_deadline");
        return Err(e);
    }
    if picked.samples.is_empty() {
        finish.failure = Some("no_choice");
        let reason = picked
            .reason
            .clone()
            .unwrap_or_else(|| "nothing was picked".into());
        return Err(ApiError::new(
            StatusCode::BAD_GATEWAY,
            "upstream_error",
            format!("model {:?}: {reason}", req.model),
        )
        .code("no_choice"));
    }
    let envelope = Envelope::new(&req.model);
    if let Some(span) = &mut finish.span {
        span.response_id = Some(envelope.id.clone());
    }
    let closing = answer_closing(gw, deadline, &finish.request_id, &req.model);
    let tries = finish.run().tries.clone();
    let mut response = match (reply, req.stream) {
        (None, true) => stream_response(finish, picked, req, envelope, closing),
        (None, false) => json_response(finish, picked, req, envelope, closing).await,
        (Some(reply), true) => answer_api::stream(finish, picked, req, reply, estimate, closing),
        (Some(reply), false) => answer_api::json(finish, picked, req, reply, closing).await,
    };
    // Every answer's headers are sent after its first tries ended: how many there were.
    let count = tries.lock().map_or(0, |t| t.len());
    response
        .headers_mut()
        .insert("x-choicewise-tries", count.into());
    if let Some(value) = dropped.and_then(|d| axum::http::HeaderValue::from_str(&d).ok()) {
        response
            .headers_mut()
            .insert("x-choicewise-dropped-tools", value);
    }
    Ok(response)
}

/// What a translated request (Messages, Responses) brings besides its Chat Completions body.
#[derive(Default)]
struct Translation {
    /// Its hosted tools, left out of the body.
    hosted: Vec<ingress::Hosted>,
    /// A streamed Messages request's Chat Completions body, whose prompt tokens are estimated
    /// for its `message_start`.
    prompt: Option<Value>,
}

/// What cuts a request's answer short: the gateway's close ([`Gateway::close`]), or its
/// deadline (`request_deadline_s`, logged), whichever comes first. Watched by a task of its
/// own, which ends with the answer.
fn answer_closing(
    gw: &Gateway,
    deadline: Instant,
    request_id: &str,
    model: &str,
) -> answer_chat::Closing {
    let (cut, closing) = watch::channel(None);
    let mut gateway = gw.inner.closing.subscribe();
    let (request_id, model) = (request_id.to_string(), model.to_string());
    let after = gw.inner.limits.request_deadline_s;
    tokio::spawn(async move {
        let shut = async {
            if gateway.wait_for(|c| *c).await.is_err() {
                std::future::pending::<()>().await;
            }
        };
        tokio::select! {
            () = shut => {
                cut.send_replace(Some(answer_chat::SHUT_DOWN));
            }
            () = tokio::time::sleep_until(deadline.into()) => {
                tracing::warn!(
                    request_id = %request_id,
                    model = %model,
                    request_deadline_s = after,
                    "the request passed its deadline: its answer ends now"
                );
                cut.send_replace(Some(answer_chat::PAST_DEADLINE));
            }
            () = cut.closed() => {}
        }
    });
    closing
}

/// A request's run, accounted in the metrics (and its span made, with traces on) when it is
/// dropped: when its answer ended, or its client went away (then its samples are cancelled
/// first, closing their upstreams).
struct Finish {
    metrics: Arc<Metrics>,
    model: String,
    /// The request's id (`x-request-id`), named in its log line.
    request_id: String,
    arrived: Instant,
    /// The output samples of a selection (`None`: every sample is an output).
    outputs: Option<Vec<u32>>,
    /// The answer was sent to its end.
    completed: bool,
    /// The request's span, with traces on.
    span: Option<RequestSpan>,
    /// Why the request was answered with an error, if it was (the span's `error.type`).
    failure: Option<&'static str>,
    run: Option<Run>,
}

impl Finish {
    fn run(&self) -> &Run {
        self.run
            .as_ref()
            .expect("a Finish holds its run until dropped")
    }

    /// A streamed answer's first chunk is written: its time, in the metrics and the span.
    fn first_chunk(&self) {
        let after = self.arrived.elapsed();
        self.metrics.first_chunk(&self.model, after);
        if let Some(span) = &self.span {
            let _ = span.first_chunk.set(after);
        }
    }

    /// The answer was sent to its end: its samples need no cancel.
    fn complete(&mut self) {
        self.completed = true;
    }
}

impl Drop for Finish {
    fn drop(&mut self) {
        let Some(run) = self.run.take() else { return };
        if !self.completed {
            run.completions.cancel_except(&[]);
        }
        // No client waits any more: an upstream read held back for it goes on, so that its
        // reader sees the cancel and closes it rather than waiting on the gate for ever.
        run.pace.release();
        // When the answer ended: the span's end, even though it is made after the run's
        // upstreams have ended and been counted (`end - took` is then the request's arrival).
        let (took, ended_at) = (self.arrived.elapsed(), std::time::SystemTime::now());
        let request_id = std::mem::take(&mut self.request_id);
        let (metrics, model, outputs, span, failure, completed) = (
            self.metrics.clone(),
            std::mem::take(&mut self.model),
            self.outputs.take(),
            self.span.take(),
            self.failure,
            self.completed,
        );
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let outcome = run.outcome(outputs.as_deref()).await;
                metrics.finished(&model, took, &outcome);
                // The request's line in the operator's log.
                let tries = run.tries();
                let ended = match (completed, failure) {
                    (_, Some(why)) => why,
                    (true, None) => "complete",
                    (false, None) => "client_gone",
                };
                tracing::info!(
                    request_id = %request_id,
                    model = %model,
                    samples = run.samples,
                    tries = tries.len(),
                    failed_tries = tries.iter().filter(|t| t.outcome != resilience::Outcome::Ok).count(),
                    prompt_tokens = outcome.prompt_tokens,
                    completion_tokens = outcome.completion_tokens,
                    estimated = outcome.estimated,
                    duration_ms = took.as_millis() as u64,
                    ended,
                    "request"
                );
                if let Some(span) = span {
                    let arrived_at = ended_at.checked_sub(took).unwrap_or(ended_at);
                    span.end(arrived_at..ended_at, &outcome, &tries, outputs.as_deref(), failure, completed);
                }
            });
        }
    }
}

use answer_chat::{json_response, stream_response};
pub use serving::{CLOSE_WAIT, ServeError, serve};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_bodies_without_a_vote_key_parse_on_the_worker() {
        let small = br#"{"model": "m", "messages": [{"role": "user", "content": "hi"}]}"#;
        assert!(parses_inline(small));
        let vote = br#"{"model": "m", "choicewise": {"select": "vote", "vote_by": "(\\d+)"}}"#;
        assert!(!parses_inline(vote), "a vote_by compiles off the workers");
        let escaped = br#"{"model": "m", "choicewise": {"vote\u005fby": "x"}}"#;
        assert!(!parses_inline(escaped), "an escape could spell vote_by");
        let mut large = br#"{"model": "m", "messages": [{"role": "user", "content": ""#.to_vec();
        large.resize(INLINE_PARSE_BYTES + 1, b'a');
        assert!(
            !parses_inline(&large),
            "a large body parses off the workers"
        );
    }
}
