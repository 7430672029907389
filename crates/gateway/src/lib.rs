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

mod admin;
mod admission;
mod answer;
mod api;
mod check;
mod config;
mod console;
mod count;
mod counter;
mod error;
mod feedback;
mod handlers;
mod keyring;
mod keys;
mod listen;
mod log_format;
mod metrics;
mod quota;
mod records;
mod request;
mod route;
mod serving;
mod state;
mod stderr;
#[cfg(test)]
mod test_log;
mod traces;
mod upstream;
mod wellformed;

use admission::layers;
use axum::middleware::from_fn_with_state;
use axum::routing::{get, post};
use route::answer;

pub use config::{
    Admin, Auth, Config, ConfigError, Console, HealthConfig, HostedTools, KeyConfig, KeyStoreKind,
    Limits, Model, NMode, OnStateError, Price, RateLimit, RateLimits, Records, Resource,
    RetryConfig, State, TagConfig, Telemetry, Upstream, Window,
};

pub use check::{Checked, Reached};
pub use log_format::{LogFields, LogTime};
pub use state::Gateway;
pub use stderr::{
    BATCH_WAIT as STDERR_BATCH_WAIT, MAX_BUFFERED as STDERR_MAX_BUFFERED, StderrLog, StderrWriter,
};

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
        let gateway = Gateway::build(config, env)?;
        // The keys made live: read from their store now and then (a check does not).
        gateway.inner.keys.watch();
        serving::preload_encodings(&gateway.inner.models);
        if let Some(records) = &config.records {
            let writer = records::Records::start(config, records, &gateway.inner.metrics)?;
            let _ = gateway.inner.records.set(std::sync::Arc::new(writer));
        }
        Ok(gateway)
    }

    /// The gateway's routes:
    ///
    /// - `POST /v1/chat/completions` (OpenAI Chat Completions),
    /// - `POST /v1/messages` (Anthropic Messages),
    /// - `POST /v1/messages/count_tokens` (Anthropic's token count),
    /// - `POST /v1/responses` (OpenAI Responses),
    /// - `POST /v1beta/models/{model}:generateContent`, `:streamGenerateContent` and
    ///   `:countTokens` (Google's Gemini), `GET /v1beta/models` and `GET /v1beta/models/{model}`
    ///   (the configured models in Gemini's shape),
    /// - `GET /v1/models` and `GET /v1/models/{id}` (the configured models),
    /// - `GET /v1/key` (the caller's key and what is left of its limits),
    /// - `POST /v1/feedback` (a grade of a request, kept with its record: `[records]`),
    /// - `GET /healthz`,
    /// - `GET /metrics` (Prometheus text format; docs/gateway.md lists the metrics),
    /// - with `[admin]`, the admin API behind the operator's key: `POST` and `GET
    ///   /admin/keys`, `GET`, `PATCH` and `DELETE /admin/keys/{name}` (docs/keys.md),
    /// - with `[console]` (and no `listen` of its own), the console under `/console`
    ///   (docs/console.md; [`console_router`](Self::console_router) alone otherwise).
    ///
    /// Another method on a `POST` route is answered 405, an unknown path 404.
    ///
    /// Its layers, outermost first (docs/gateway.md): the request's id (`x-request-id`, the
    /// client's or one made here, echoed on the answer); the count of every answer in
    /// `choicewise_requests_total`; without `[auth]`, the checks that keep
    /// web pages out (a loopback `Host`, no `Origin` unless listed in `allowed_origins`, JSON
    /// bodies only); the client's key, from the headers, on the `/v1` routes; then, on each
    /// `POST` route, a declared body over `max_body_bytes` refused, the memory ceiling's
    /// admission (`memory_high_watermark_mb`), a slot taken (`max_concurrent_requests`),
    /// held until the answer's last byte, and the body read and charged its cost.
    pub fn router(&self) -> axum::Router {
        axum::Router::new().fallback_service(self.service())
    }

    /// What [`router`](Self::router) serves, as the one service the listener calls: the
    /// layers every request meets around the routes, without a router around them (each
    /// router a request passes clones its route's service and boxes its future), and the
    /// console's routes beside them only when the console is on this listener.
    pub(crate) fn service(
        &self,
    ) -> impl tower::Service<
        axum::extract::Request,
        Response = axum::response::Response,
        Error = std::convert::Infallible,
        Future: Send + 'static,
    > + Clone
    + Send
    + Sync
    + 'static {
        let gw = self.clone();
        let slots = || from_fn_with_state(gw.inner.admission.clone(), layers::slots);
        // The `/v1` routes' layers: the key on each (`auth`), and, on a route that takes a
        // body, the key then the slot as one layer (`admit`, the slot for a `POST` alone).
        // Each wraps its route's every method and its fallback, as a router's
        // `route_layer` would.
        let auth = || from_fn_with_state(gw.inner.admission.clone(), layers::auth);
        let admit = || from_fn_with_state(gw.inner.admission.clone(), layers::admit);
        // Each client API's route ([`api::each`]: the one list).
        struct Routes(axum::Router<Gateway>, Gateway);
        impl api::EachApi for Routes {
            fn api<A: api::ClientApi>(&mut self) {
                let gate = || self.1.inner.admission.clone();
                let mut route = post(answer::<A>);
                let mut routes = std::mem::take(&mut self.0);
                // Its own model list, when it has one: the list, and one model on its route.
                if let Some(list) = A::MODELS {
                    route = route.get(handlers::api_model::<A>);
                    let listed = get(handlers::api_models::<A>);
                    routes =
                        routes.route(list, listed.layer(from_fn_with_state(gate(), layers::auth)));
                }
                let route = route
                    .fallback(layers::post_only)
                    .layer(from_fn_with_state(gate(), layers::admit));
                self.0 = routes.route(A::ROUTE, route);
            }
        }
        let mut routes = Routes(axum::Router::new(), gw.clone());
        api::each(&mut routes);
        let api = routes
            .0
            .route(
                "/v1/messages/count_tokens",
                post(count::count_tokens)
                    .fallback(layers::post_only)
                    .layer(admit()),
            )
            .route("/v1/models", get(handlers::list_models).layer(auth()))
            .route("/v1/key", get(admin::own).layer(auth()))
            .route(
                "/v1/models/{id}",
                get(handlers::one_model)
                    .merge(post(handlers::v1_model_method).fallback(layers::post_only))
                    .layer(admit()),
            );
        // A client whose base URL already ends in `/v1` and adds `/v1` itself (Claude Code
        // given `.../v1`) asks `/v1/v1/...`: served as `/v1/...`, the operator told once.
        let doubled = api
            .clone()
            .layer(axum::middleware::from_fn(layers::doubled_v1));
        let mut router = axum::Router::new().merge(api).nest("/v1", doubled);
        if gw.inner.operator.is_some() {
            router = router
                .route("/admin/keys", get(admin::list).post(admin::create))
                .route("/admin/picks", get(console::picks_json))
                .route(
                    "/admin/keys/{name}",
                    get(admin::one).patch(admin::change).delete(admin::revoke),
                );
        }
        router = router
            // A client's key or the operator's: checked by the route itself. A slot held
            // as any request's (a grade may wait a second for its record).
            .route(
                "/v1/feedback",
                post(feedback::give)
                    .layer(slots())
                    .fallback(layers::post_only),
            )
            .route("/healthz", get(|| async { "ok" }))
            .route("/metrics", get(handlers::metrics_text))
            .fallback(layers::unknown_route);
        // The layers every request meets wrap the routes once, as one service, rather than
        // each route (`Router::layer`): a route's layers are cloned for each request it
        // serves, and cloning a layer clones what it wraps.
        let admission = || gw.inner.admission.clone();
        let routes = router.with_state(gw.clone());
        // The console on this listener: outside the checks that keep web pages out (it is
        // a web page, signed by the operator and checked for its own origin). Without it,
        // the count's layer makes those checks itself.
        let console_here = (gw.inner.console.as_ref()).is_some_and(|c| c.listen.is_none());
        let routes = match console_here {
            true => tower::util::Either::Left(
                axum::Router::new()
                    .merge(console::routes().with_state(gw.clone()))
                    .fallback_service(
                        tower::ServiceBuilder::new()
                            .layer(from_fn_with_state(admission(), layers::browsers))
                            .service(routes),
                    ),
            ),
            false => tower::util::Either::Right(routes),
        };
        let counting = layers::Counting {
            gate: admission(),
            checks: !console_here,
        };
        // The count's layer also gives each request its id (the client's `x-request-id`,
        // or one made here) and echoes it on the answer.
        tower::ServiceBuilder::new()
            .layer(from_fn_with_state(counting, layers::count))
            .service(routes)
    }

    /// The console's routes alone (`/console`, docs/console.md), for a listener of their
    /// own (`[console] listen`), with the request ids the gateway's routes have: 404 on
    /// every path when `[console]` is not enabled.
    ///
    /// ```
    /// # use choicewise_gateway::{Config, Gateway};
    /// let config = Config::from_toml(
    ///     "[admin]\nkey_env = \"OPERATOR\"\n[console]\nenabled = true\nlisten = \"127.0.0.1:0\"\n\
    ///      [[models]]\nname = \"m\"\n[[models.upstreams]]\napi = \"chat\"\nbase_url = \"http://127.0.0.1:9/v1\"",
    /// ).unwrap();
    /// let gateway = Gateway::with_env(&config, |_| Some("operator-key".into())).unwrap();
    /// let console: axum::Router = gateway.console_router();
    /// ```
    pub fn console_router(&self) -> axum::Router {
        let gw = self.clone();
        let routes = match gw.inner.console.is_some() {
            true => console::routes(),
            false => axum::Router::new(),
        };
        routes
            .fallback(layers::unknown_route)
            .layer(tower_http::request_id::PropagateRequestIdLayer::x_request_id())
            .layer(tower_http::request_id::SetRequestIdLayer::x_request_id(
                admission::request_id::RequestIds,
            ))
            .with_state(gw)
    }

    /// Reads the keys of `config`'s `[auth]` again (`[[auth.keys]]`, `keys_env`, the tags'
    /// limits; their variables from the process's environment) and applies them at once:
    /// requests that come after meet the new keys and limits, requests in flight keep
    /// theirs. What changed, in a few words (`keys added: team-c`, `keys changed: team-a
    /// (limits)`); an error (the gateway unchanged) when a variable is unset. The rest of
    /// the configuration applies only at a start. `choicewise serve` does it on `SIGHUP`.
    ///
    /// ```
    /// # use choicewise_gateway::{Config, Gateway};
    /// let text = |limit: u32| format!(
    ///     "[auth]\n[[auth.keys]]\nname = \"team-a\"\nsha256 = \"{}\"\n[auth.keys.limits]\nrequests_per_minute = {limit}\n\
    ///      [[models]]\nname = \"m\"\n[[models.upstreams]]\napi = \"chat\"\nbase_url = \"http://127.0.0.1:9/v1\"",
    ///     "0".repeat(64));
    /// let gateway = Gateway::new(&Config::from_toml(&text(10)).unwrap()).unwrap();
    /// let changes = gateway.reload(&Config::from_toml(&text(20)).unwrap()).unwrap();
    /// assert_eq!(changes, ["keys changed: team-a (limits)"]);
    /// ```
    pub fn reload(&self, config: &Config) -> Result<Vec<String>, ConfigError> {
        self.reload_with_env(config, |name| std::env::var(name).ok())
    }

    /// As [`reload`](Self::reload), the variables looked up with `env`.
    pub fn reload_with_env(
        &self,
        config: &Config,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Vec<String>, ConfigError> {
        let file = keyring::FileKeys::of(config, &state::env_reader(&env))?;
        Ok(self.inner.keys.replace_file(file))
    }

    /// Ends every open answer now, as a shutdown does when its grace period is over: each
    /// choice still streaming ends with `finish_reason: "error"` (and `choicewise.error`
    /// saying the gateway shut down), then the usage, the error event `shut_down` when no
    /// choice finished, and `[DONE]`; a non-streamed answer none of whose choices finished
    /// is a 503 `shut_down`, in its API's shape (docs/gateway.md, the rule per ending);
    /// every upstream is closed. Requests that arrive later are answered as usual: stop accepting
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

    /// Waits until the records of the requests answered so far are written to `[records]`'s
    /// database, or to its spool while it is away (at most its write deadline, 5 s, a batch);
    /// nothing without `[records]`. [`serve`] does it at shutdown.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// # let config = choicewise_gateway::Config::from_toml(
    /// #     "[[models]]\nname = \"m\"\n[[models.upstreams]]\napi = \"chat\"\nbase_url = \"http://127.0.0.1:9/v1\"",
    /// # ).unwrap();
    /// let gateway = choicewise_gateway::Gateway::new(&config).unwrap();
    /// gateway.flush_records().await;
    /// # }
    /// ```
    pub async fn flush_records(&self) {
        if let Some(records) = self.inner.records.get() {
            records.flush().await;
        }
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

pub use serving::{CLOSE_WAIT, ServeError, serve, serve_file};
