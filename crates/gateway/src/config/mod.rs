//! The gateway's configuration: a TOML file ([`Config::from_toml`]), checked before anything
//! listens.

use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

use choicewise_core::{Dialect, Policy};
use serde::Deserialize;

mod checks;
mod keys;
mod limits;
mod records;

pub use keys::{
    KeyConfig, OnStateError, Price, RateLimit, RateLimits, Resource, State, TagConfig, Window,
};
pub(crate) use keys::{NANOS_PER_USD, redis_client};
pub(crate) use limits::ANSWER_COST;
pub use limits::Limits;
pub use records::Records;

/// The configuration of a gateway (the TOML file of `choicewise serve --config FILE`).
///
/// ```
/// use choicewise_gateway::Config;
/// let config = Config::from_toml(r#"
///     listen = "127.0.0.1:8787"
///     [[models]]
///     name = "small"
///     [[models.upstreams]]
///     api = "chat"
///     base_url = "http://127.0.0.1:8080/v1"
///     model = "smollm2"
/// "#).unwrap();
/// assert_eq!(config.limits.max_n, 16);
/// assert_eq!(config.models[0].upstreams[0].model.as_deref(), Some("smollm2"));
/// ```
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct Config {
    /// The address to listen on (`--listen` overrides it).
    pub listen: Option<String>,
    /// The keys clients must send; without it only a loopback address may be listened on.
    pub auth: Option<Auth>,
    /// Without `[auth]`: the web origins (`https://app.example`) whose pages may call the
    /// gateway; a request with any other `Origin` header is answered 403.
    #[serde(default)]
    pub allowed_origins: Vec<String>,
    /// Limits of each request and of the gateway.
    #[serde(default)]
    pub limits: Limits,
    /// How long open streams may finish after a shutdown signal, in seconds (default 30).
    #[serde(default = "default_grace")]
    pub shutdown_grace_s: f64,
    /// Traces of the requests (off unless it names an OTLP endpoint).
    #[serde(default)]
    pub telemetry: Telemetry,
    /// `[state]`: where the counts of the keys' and models' limits live (default: in the
    /// process).
    #[serde(default)]
    pub state: State,
    /// `[records]`: every request on record in SQLite or PostgreSQL (off without it).
    #[serde(default)]
    pub records: Option<Records>,
    /// `[admin]`: the operator's key, which the operator's routes (`/metrics`) require.
    #[serde(default)]
    pub admin: Option<Admin>,
    /// `[console]`: the console in a browser at `/console` (off without it; needs
    /// `[admin]`, whose key opens it).
    #[serde(default)]
    pub console: Option<Console>,
    /// The models clients may ask for.
    pub models: Vec<Model>,
}

/// `[console]`: the console at `/console` (docs/console.md): the last requests, the usage,
/// the keys, behind the operator's key of `[admin]`; on the gateway's listener, or on one of
/// its own (`listen`).
///
/// ```
/// use choicewise_gateway::Config;
/// let config = Config::from_toml(r#"
///     [admin]
///     key_env = "CHOICEWISE_ADMIN_KEY"
///     [console]
///     enabled = true
///     listen = "127.0.0.1:8081"
///     [[models]]
///     name = "m"
///     [[models.upstreams]]
///     api = "chat"
///     base_url = "http://127.0.0.1:8080/v1"
/// "#).unwrap();
/// let console = config.console.unwrap();
/// assert!(console.enabled);
/// assert_eq!(console.listen.as_deref(), Some("127.0.0.1:8081"));
/// ```
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct Console {
    /// Whether the console is served.
    pub enabled: bool,
    /// A listener of the console's own (the gateway's routes are not served there); absent:
    /// the gateway's listener.
    pub listen: Option<String>,
}

fn default_grace() -> f64 {
    30.0
}

/// `[admin]`: the operator's key, read from the environment variable `key_env` at start (never
/// from the file). With it, `GET /metrics` (which names every key and what it spent) answers
/// only `Authorization: Bearer` that key, 401 otherwise; without `[admin]` it answers anyone
/// who reaches the listener.
///
/// ```
/// use choicewise_gateway::Config;
/// let config = Config::from_toml(r#"
///     [admin]
///     key_env = "CHOICEWISE_ADMIN_KEY"
///     [[models]]
///     name = "m"
///     [[models.upstreams]]
///     api = "chat"
///     base_url = "http://127.0.0.1:8080/v1"
/// "#).unwrap();
/// assert_eq!(config.admin.unwrap().key_env, "CHOICEWISE_ADMIN_KEY");
/// ```
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct Admin {
    /// The environment variable holding the operator's key.
    pub key_env: String,
    /// Where the keys made over the admin API (`/admin/keys`) live: `"redis"` (`[state]
    /// redis_url`) or `"records"` (`[records]`'s database). Absent: Redis where the
    /// limits' counts are, else the records database; with neither, keys cannot be made
    /// over the API (it answers 501 `no_key_store`).
    pub key_store: Option<KeyStoreKind>,
}

/// `[admin] key_store`: where the admin API's keys live.
///
/// ```
/// use choicewise_gateway::{Config, KeyStoreKind};
/// let config = Config::from_toml(r#"
///     [admin]
///     key_env = "CHOICEWISE_ADMIN_KEY"
///     key_store = "records"
///     [auth]
///     [records]
///     url = "sqlite://records.db"
///     [[models]]
///     name = "m"
///     [[models.upstreams]]
///     api = "chat"
///     base_url = "http://127.0.0.1:8080/v1"
/// "#).unwrap();
/// assert_eq!(config.admin.unwrap().key_store, Some(KeyStoreKind::Records));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum KeyStoreKind {
    /// Redis (`[state] redis_url`): the hash `{choicewise:api-keys}`.
    Redis,
    /// The records database (`[records] url`): the table `api_keys`.
    Records,
}

/// `[auth]`: the keys clients send. Unnamed keys from one environment variable
/// (`keys_env`, comma-separated), keys with a name, models and limits (`[[auth.keys]]`), or
/// both; and the tags' shared limits (`[[auth.tags]]`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct Auth {
    /// The variable holding unnamed keys, e.g. `CHOICEWISE_KEYS`.
    pub keys_env: Option<String>,
    /// `[[auth.keys]]`: keys with a name.
    #[serde(default)]
    pub keys: Vec<KeyConfig>,
    /// `[[auth.tags]]`: limits shared by the keys of a tag.
    #[serde(default)]
    pub tags: Vec<TagConfig>,
}

/// `[telemetry]`: one OpenTelemetry span per chat request (the GenAI semantic conventions),
/// sent over OTLP/HTTP (JSON) to `{otlp_endpoint}/v1/traces`; off when no endpoint is named.
///
/// ```
/// use choicewise_gateway::Config;
/// let config = Config::from_toml(r#"
///     [telemetry]
///     otlp_endpoint = "http://127.0.0.1:4318"
///     capture_content = false
///     [[models]]
///     name = "small"
///     [[models.upstreams]]
///     api = "chat"
///     base_url = "http://127.0.0.1:8080/v1"
/// "#).unwrap();
/// assert_eq!(config.telemetry.traces_url().as_deref(), Some("http://127.0.0.1:4318/v1/traces"));
/// assert!(!config.telemetry.capture_content);
/// ```
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
#[non_exhaustive]
pub struct Telemetry {
    /// The OTLP/HTTP collector's base URL, as in `OTEL_EXPORTER_OTLP_ENDPOINT`
    /// (`http://127.0.0.1:4318`): spans go to its `/v1/traces`. None: no traces.
    pub otlp_endpoint: Option<String>,
    /// Put the messages in the spans (`gen_ai.input.messages`, and the content of
    /// `gen_ai.output.messages`); off by default, as the conventions advise: prompts and
    /// answers may be sensitive.
    pub capture_content: bool,
}

impl Telemetry {
    /// Where spans are sent: the endpoint's `/v1/traces` (a trailing `/` of the endpoint
    /// dropped); `None` when traces are off.
    pub fn traces_url(&self) -> Option<String> {
        let base = self.otlp_endpoint.as_deref()?.trim_end_matches('/');
        Some(format!("{base}/v1/traces"))
    }
}

/// `[[models]]`: a name clients ask for, and where its choices come from.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct Model {
    /// What clients ask for (`"model"` of their request).
    pub name: String,
    /// Its upstreams: a request's samples are spread over them by their weights (smooth
    /// weighted round robin; with equal weights sample `i` goes to upstream `i mod k`).
    pub upstreams: Vec<Upstream>,
    /// Models tried in order when every try of this model failed before a first byte.
    #[serde(default)]
    pub fallbacks: Vec<String>,
    /// `[models.retry]`: the tries of each sample.
    #[serde(default)]
    pub retry: RetryConfig,
    /// `[models.health]`: when an upstream is ejected.
    #[serde(default)]
    pub health: HealthConfig,
    /// `[models.choicewise]`: the model's default policy, with the `choicewise` extension's
    /// own fields (`samples`, `select`, `hedge_after_ms`, `vote_by`, `window`, `confidence`,
    /// ...), and `lock`. A request's extension is merged over it field by field (the merge
    /// rule of docs/gateway.md: the fields a request states replace the model's, its
    /// `deadline_ms` may only lower the model's); with `lock = true`, a request carrying an
    /// extension is refused. Checked at start with the extension's rules.
    #[serde(default)]
    pub choicewise: Option<serde_json::Map<String, serde_json::Value>>,
    /// The most samples one request of this model may take (its `n`, or its extension's
    /// `samples`): above it, a 400 naming the model and the cap. The gateway-wide
    /// `[limits] max_samples` applies too; the lower one wins.
    #[serde(default)]
    pub max_samples: Option<u32>,
    /// What is done with a request's hosted tools, which the gateway cannot run (Responses'
    /// `web_search`, `file_search`, `code_interpreter`, `computer_use*`, `image_generation`,
    /// `mcp`, ...; Messages' server tools): `"drop"` (the default) leaves them out of the
    /// upstream request and names their types in the answer's `x-choicewise-dropped-tools`
    /// header; `"refuse"` answers 400 naming the tool.
    #[serde(default)]
    pub hosted_tools: HostedTools,
    /// US dollars per million tokens, for the `usd_per_*` limits.
    pub price: Option<Price>,
    /// `[models.limits]`: what every key together may take of this model, per window.
    #[serde(default)]
    pub limits: RateLimits,
}

impl Model {
    /// Its pick as the operator set it: `[models.choicewise]` (without `lock`, checked as a
    /// request's extension of `n` = 1 would be), `lock` and `max_samples`; an error names
    /// the model.
    pub(crate) fn pick(&self, limits: &Limits) -> Result<ModelPick, ConfigError> {
        let name = &self.name;
        let max_samples = match self.max_samples {
            Some(0) => {
                return Err(ConfigError(format!(
                    "model {name:?}: max_samples must be at least 1"
                )));
            }
            max => max.map(|max| max.min(limits.max_samples)),
        };
        let mut pick = ModelPick {
            model: name.clone(),
            default: None,
            policy: None,
            lock: false,
            max_samples,
        };
        let Some(table) = &self.choicewise else {
            return Ok(pick);
        };
        let mut table = table.clone();
        pick.lock = match table.remove("lock") {
            None => false,
            Some(serde_json::Value::Bool(lock)) => lock,
            Some(v) => {
                return Err(ConfigError(format!(
                    "model {name:?}, [models.choicewise]: lock must be true or false, not {v}"
                )));
            }
        };
        let cap = max_samples.unwrap_or(limits.max_samples);
        let policy =
            Policy::from_json(&table, &limits.policy_limits(1).max_samples(cap)).map_err(|e| {
                let e = e.message_naming(|field| format!("\"choicewise.{field}\""));
                ConfigError(format!("model {name:?}, [models.choicewise]: {e}"))
            })?;
        pick.policy = Some(policy);
        pick.default = Some(table);
        Ok(pick)
    }
}

/// A map by a configured name (a model's): read by every request with the name it asks,
/// written only at start, so hashed with foldhash rather than SipHash.
pub(crate) type ByName<V> = std::collections::HashMap<String, V, foldhash::fast::RandomState>;

/// A model's pick as the operator set it ([`Model::pick`]): what a request's own extension is
/// merged with ([`ChatRequest::with_model`](crate::request::ChatRequest::with_model)).
#[derive(Debug, Clone)]
pub(crate) struct ModelPick {
    /// The model's name, for the refusals.
    pub model: String,
    /// `[models.choicewise]` without `lock`: the fields a request's extension is merged over.
    pub default: Option<serde_json::Map<String, serde_json::Value>>,
    /// The default read and checked, for the requests that carry no extension.
    pub policy: Option<Policy>,
    /// `lock = true`: a request's extension is refused.
    pub lock: bool,
    /// The most samples one request may take: the model's `max_samples`, at most the
    /// gateway's; `None` when the model sets none (the gateway's bounds the extension's
    /// `samples` only).
    pub max_samples: Option<u32>,
}

/// `hosted_tools` of a model.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HostedTools {
    /// Left out of the upstream request, and named in `x-choicewise-dropped-tools`.
    #[default]
    Drop,
    /// The request is refused (400 naming the tool).
    Refuse,
}

/// `[models.retry]`: how a sample is tried over its model's upstreams.
///
/// ```
/// use choicewise_gateway::Config;
/// let config = Config::from_toml(r#"
///     [[models]]
///     name = "m"
///     [models.retry]
///     attempts = 5
///     [[models.upstreams]]
///     api = "chat"
///     base_url = "http://127.0.0.1:8080/v1"
/// "#).unwrap();
/// assert_eq!(config.models[0].retry.attempts, 5);
/// assert_eq!(config.models[0].retry.backoff_ms, 100);
/// ```
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
#[non_exhaustive]
pub struct RetryConfig {
    /// Tries per sample over the model's upstreams, the first included (1: none).
    pub attempts: u32,
    /// The base of the exponential backoff, with full jitter, between tries on one upstream.
    pub backoff_ms: u64,
    /// A `Retry-After` above this is not waited for on that upstream; the backoff's cap.
    pub max_backoff_ms: u64,
    /// A try with no first byte by then fails (and is retried).
    pub first_byte_timeout_s: f64,
}

impl Default for RetryConfig {
    fn default() -> Self {
        RetryConfig {
            attempts: 3,
            backoff_ms: 100,
            max_backoff_ms: 10_000,
            first_byte_timeout_s: 60.0,
        }
    }
}

/// `[models.health]`: passive health of each upstream.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
#[non_exhaustive]
pub struct HealthConfig {
    /// Consecutive failed tries of one upstream that eject it.
    pub eject_after: u32,
    /// How long it is skipped (doubling on each ejection in a row, at most 300 s).
    pub eject_for_s: f64,
}

impl Default for HealthConfig {
    fn default() -> Self {
        HealthConfig {
            eject_after: 5,
            eject_for_s: 30.0,
        }
    }
}

/// `[[models.upstreams]]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct Upstream {
    /// The API it speaks.
    pub api: Dialect,
    /// Its base URL (`http://127.0.0.1:8080/v1`, `https://api.openai.com/v1`). May be left
    /// out for an API served per region (Bedrock's: its runtime endpoint in `region`).
    #[serde(default)]
    pub base_url: String,
    /// The region of an API served per region (Bedrock's): its requests are signed for it,
    /// and its base URL is the region's when `base_url` is left out. Default: `AWS_REGION`,
    /// else `AWS_DEFAULT_REGION`, as AWS's tools read them.
    pub region: Option<String>,
    /// For an API whose requests are signed (Bedrock's): the environment variables of the
    /// access key, its secret and a session token (default `AWS_ACCESS_KEY_ID`,
    /// `AWS_SECRET_ACCESS_KEY` and, if set, `AWS_SESSION_TOKEN`). Not read when
    /// `api_key_env` names a key (a Bedrock API key, sent as a bearer token).
    pub access_key_id_env: Option<String>,
    /// See [`access_key_id_env`](Self::access_key_id_env).
    pub secret_access_key_env: Option<String>,
    /// See [`access_key_id_env`](Self::access_key_id_env); when named, it must be set.
    pub session_token_env: Option<String>,
    /// The upstream's model name (default: the model's name).
    pub model: Option<String>,
    /// The environment variable holding its key, if it needs one.
    pub api_key_env: Option<String>,
    /// How several choices are asked of it (default: native for chat, fan-out otherwise).
    pub n: Option<NMode>,
    /// Its share of the model's samples (default 1).
    #[serde(default = "one")]
    pub weight: u32,
    /// For an upstream asked with native `n`: the most samples one request carries (a
    /// provider that refuses a larger `n`); more are split over several requests. None: no
    /// limit.
    pub max_n: Option<u32>,
    /// The answer room it is asked for when a request states no limit of its own
    /// (`max_tokens` / `max_completion_tokens` / `max_output_tokens`): sent as its API's
    /// limit. None: no limit is sent, except to an Anthropic upstream, which requires one and
    /// gets [`DEFAULT_ANTHROPIC_MAX_TOKENS`](choicewise_core::defaults::DEFAULT_ANTHROPIC_MAX_TOKENS).
    /// A client's own limit is always passed as sent.
    pub max_tokens: Option<u64>,
}

fn one() -> u32 {
    1
}

/// How an upstream is asked for several choices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NMode {
    /// One request with `n`.
    Native,
    /// One request per choice.
    FanOut,
}

impl Upstream {
    /// How it is asked for several choices: as configured, else native for an API that
    /// has `n` (Chat Completions, Gemini's `candidateCount`).
    pub fn n_mode(&self) -> NMode {
        self.n.unwrap_or(match self.api.has_n() {
            true => NMode::Native,
            false => NMode::FanOut,
        })
    }
}

/// What is wrong with a configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError(pub(crate) String);

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigError {}

impl Config {
    /// Parses and checks a configuration: at least one model, names unique and non-empty,
    /// each with at least one upstream whose base URL is an `http(s)` URL and whose `n =
    /// "native"` is only on a chat upstream; sensible limits; an `http(s)` OTLP endpoint.
    ///
    /// ```
    /// use choicewise_gateway::Config;
    /// let e = Config::from_toml("listen = \"127.0.0.1:1\"\nmodels = []").unwrap_err();
    /// assert_eq!(e.to_string(), "the config names no model ([[models]])");
    /// ```
    pub fn from_toml(text: &str) -> Result<Config, ConfigError> {
        let config: Config = toml::from_str(text).map_err(|e| {
            let mut message = format!("invalid config: {e}");
            let single = |table: &str| text.lines().any(|l| l.trim_start().starts_with(table));
            if message.contains("expected a sequence") && message.contains("upstreams") {
                message.push_str(match single("[models.upstreams]") {
                    true => "\n(each upstream is a [[models.upstreams]] table: two brackets)",
                    false => {
                        "\n(a [[models.upstreams]] table belongs to the [[models]] table above it)"
                    }
                });
            } else if message.contains("expected a sequence") && message.contains("models") {
                message.push_str("\n(each model is a [[models]] table: two brackets)");
            }
            ConfigError(message)
        })?;
        config.check_values()?;
        config.check_endpoint_paths(text)?;
        Ok(config)
    }

    /// The address to listen on: `over` (`--listen`), else the file's `listen`, else
    /// `127.0.0.1:8787`; refused when it is not a loopback address and no `[auth]` is set.
    ///
    /// ```
    /// use choicewise_gateway::Config;
    /// let config = Config::from_toml(
    ///     "[[models]]\nname = \"m\"\n[[models.upstreams]]\napi = \"chat\"\nbase_url = \"http://127.0.0.1:9/v1\"",
    /// ).unwrap();
    /// assert_eq!(config.listen_addr(None).unwrap().to_string(), "127.0.0.1:8787");
    /// assert!(config.listen_addr(Some("0.0.0.0:8787")).unwrap_err().to_string().contains("[auth]"));
    /// assert_eq!(config.listen_addr(Some("localhost:0")).unwrap().to_string(), "127.0.0.1:0");
    /// ```
    pub fn listen_addr(&self, over: Option<&str>) -> Result<SocketAddr, ConfigError> {
        let text = over.or(self.listen.as_deref()).unwrap_or("127.0.0.1:8787");
        // `localhost:PORT` is the loopback address: 127.0.0.1.
        let resolved = match text.strip_prefix("localhost:") {
            Some(port) => format!("127.0.0.1:{port}"),
            None => text.to_string(),
        };
        let addr: SocketAddr = resolved
            .parse()
            .map_err(|e| ConfigError(format!("listen address {text:?}: {e}")))?;
        if !addr.ip().is_loopback() && self.auth.is_none() {
            return Err(ConfigError(format!(
                "refusing to listen on {addr} without [auth]: only a loopback address may be served without keys"
            )));
        }
        Ok(addr)
    }

    /// The grace period of a shutdown.
    pub fn shutdown_grace(&self) -> Duration {
        Duration::from_secs_f64(self.shutdown_grace_s)
    }
}

#[cfg(test)]
mod tests;
