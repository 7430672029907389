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

mod answer;
mod answer_api;
mod answer_chat;
mod auth;
mod closing;
mod config;
mod count;
mod ending;
mod engine;
mod error;
mod finish;
mod handlers;
mod ingress;
mod layers;
mod listen;
mod metrics;
mod open;
mod overload;
mod pace;
mod request;
mod resilience;
mod respond;
mod serving;
mod traces;
mod write;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::middleware::from_fn_with_state;
use axum::routing::{get, post};
use choicewise_client::{Client, Dialect};
use tokio::sync::{Semaphore, watch};

pub use config::{
    Auth, Config, ConfigError, HealthConfig, HostedTools, Limits, Model, NMode, RetryConfig,
    Telemetry, Upstream,
};

use metrics::Metrics;
use open::UpstreamRoute;
use traces::Traces;

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
    /// Each model's pick as the operator set it (`[models.choicewise]`, `max_samples`).
    picks: Arc<HashMap<String, config::ModelPick>>,
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
    /// endpoint (then it must be made inside a tokio runtime, which sends the spans). The
    /// token-count tables its accounting uses are loaded here, once per process.
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
        let mut picks = HashMap::new();
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
                    max_tokens: u.max_tokens.or((u.api == Dialect::Anthropic)
                        .then_some(choicewise_core::defaults::DEFAULT_ANTHROPIC_MAX_TOKENS)),
                    host,
                    idle_timeout: Duration::from_secs_f64(config.limits.upstream_idle_timeout_s),
                    max_answer_bytes: config.limits.max_answer_bytes,
                    weight: u.weight,
                    health: Arc::new(resilience::Health::new(&model.health)),
                    budget: Arc::new(resilience::Budget::new(config.limits.retry_budget_percent)),
                });
            }
            names.push(model.name.clone());
            picks.insert(model.name.clone(), model.pick(&config.limits)?);
            hosted_tools.insert(model.name.clone(), model.hosted_tools);
            models.insert(
                model.name.clone(),
                Arc::new(open::ModelRoutes {
                    name: model.name.clone(),
                    routes,
                    retry: resilience::RetryPolicy::of(&model.retry),
                    fallbacks: model.fallbacks.clone(),
                    budget: Arc::new(resilience::Budget::new(config.limits.retry_budget_percent)),
                    warnings: resilience::Warnings::default(),
                }),
            );
        }
        serving::preload_encodings(&models);
        Ok(Gateway {
            inner: Arc::new(Inner {
                limits: config.limits.clone(),
                keys,
                models: Arc::new(models),
                picks: Arc::new(picks),
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
                post(handlers::chat_completions)
                    .layer(slots())
                    .fallback(layers::post_only),
            )
            .route(
                "/v1/messages",
                post(handlers::messages)
                    .layer(slots())
                    .fallback(layers::post_only),
            )
            .route(
                "/v1/responses",
                post(handlers::responses)
                    .layer(slots())
                    .fallback(layers::post_only),
            )
            .route(
                "/v1/messages/count_tokens",
                post(count::count_tokens)
                    .layer(slots())
                    .fallback(layers::post_only),
            )
            .route("/v1/models", get(handlers::list_models))
            .route("/v1/models/{id}", get(handlers::one_model))
            .route_layer(from_fn_with_state(gw.clone(), layers::auth));
        // A client whose base URL already ends in `/v1` and adds `/v1` itself (Claude Code
        // given `.../v1`) asks `/v1/v1/...`: served as `/v1/...`, the operator told once.
        let doubled = api
            .clone()
            .layer(axum::middleware::from_fn(layers::doubled_v1));
        axum::Router::new()
            .merge(api)
            .nest("/v1", doubled)
            .route("/healthz", get(|| async { "ok" }))
            .route("/metrics", get(handlers::metrics_text))
            .fallback(layers::unknown_route)
            .layer(from_fn_with_state(gw.clone(), layers::browsers))
            .layer(from_fn_with_state(gw.clone(), layers::count))
            .layer(tower_http::request_id::PropagateRequestIdLayer::x_request_id())
            .layer(tower_http::request_id::SetRequestIdLayer::x_request_id(
                layers::RequestIds,
            ))
            .with_state(gw)
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
}

pub use serving::{CLOSE_WAIT, ServeError, serve};
