//! The gateway's configuration: a TOML file ([`Config::from_toml`]), checked before anything
//! listens.

use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

use choicewise_core::{Dialect, Policy};
use serde::Deserialize;

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
    /// The models clients may ask for.
    pub models: Vec<Model>,
}

fn default_grace() -> f64 {
    30.0
}

/// `[auth]`: the environment variable holding the accepted keys, comma-separated.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct Auth {
    /// The variable, e.g. `CHOICEWISE_KEYS`.
    pub keys_env: String,
}

/// `[limits]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
#[non_exhaustive]
pub struct Limits {
    /// The most choices (`n`) a request may ask for.
    pub max_n: u32,
    /// The most samples a request may ask for (the `choicewise` extension's `samples`).
    pub max_samples: u32,
    /// The largest request body, in bytes.
    pub max_body_bytes: usize,
    /// The most requests served at once; more are answered 429.
    pub max_concurrent_requests: usize,
    /// How long an upstream may send nothing before its choices fail (seconds, default
    /// 300): a stalled upstream never holds a request forever.
    pub upstream_idle_timeout_s: f64,
    /// How long a client may take to send a request's headers (seconds, default 10); then
    /// its connection is closed.
    pub header_read_timeout_s: f64,
    /// How long a client may take to send a request's body (seconds, default 30); then it
    /// is answered 408.
    pub body_read_timeout_s: f64,
    /// How long a connection may stay open with no request in flight and nothing received
    /// (seconds, default 60); then it is closed.
    pub idle_connection_timeout_s: f64,
    /// The most client connections open at once (default 4096); beyond it new connections
    /// are closed at once, and logged.
    pub max_connections: usize,
    /// The largest request head (request line and headers), in bytes (default 32768);
    /// a larger one is answered 431.
    pub max_header_bytes: usize,
    /// How long a client may take nothing of an answer it is sent (seconds, default 60, as
    /// nginx's `send_timeout`); then the answer ends, its samples are cancelled and its
    /// slot freed.
    pub client_stall_timeout_s: f64,
    /// A model's retries over the last 10 s may be at most this share of its first tries,
    /// in percent (default 20; at least 10 retries are always allowed); each model has a
    /// budget of its own.
    pub retry_budget_percent: f64,
    /// The most bytes one choice's updates may take (default 16777216, 16 MiB): past it that
    /// choice fails alone and the others go on. One upstream answer's bytes are also cut at
    /// it times the samples it carries (a native request for 4 samples may send 4 times
    /// that): past that the answer's choices fail as an upstream's failure does, and its
    /// connection is closed.
    pub max_answer_bytes: usize,
    /// The process's memory, in MiB, above which new requests are refused with 503 and
    /// `Retry-After` while those in flight go on: its resident set plus the request bodies
    /// admitted and not yet answered. Default: three quarters of the memory the process may
    /// use (its cgroup's limit, else the machine's); 0 turns the ceiling off.
    pub memory_high_watermark_mb: Option<u64>,
    /// Once refusing, the memory in MiB below which requests are admitted again (default: 90%
    /// of the high watermark).
    pub memory_low_watermark_mb: Option<u64>,
    /// The most one key (without `[auth]`, one peer address) may hold of the memory ceiling
    /// for request bodies that have not arrived yet, in bytes (default: half of the high
    /// watermark, so that one key's idle uploads leave the other keys at least the other
    /// half; 0: no cap): each such request is charged its route's cost of what may arrive,
    /// and one beside the key's others that would pass the cap is answered 429 with
    /// `Retry-After`. A request alone is never refused by it.
    pub max_unsent_bytes_per_key: Option<u64>,
    /// How long one request may run, from its arrival to its answer's end (seconds,
    /// default 600): then whatever still runs ends as a failure in the client's API's terms
    /// (a 504 before the answer began, its choices ending with an error after), and is
    /// logged.
    pub request_deadline_s: f64,
    /// The most upstream requests one client request may cause, its samples, hedges,
    /// replacements, retries and fallbacks together (default 64); past it, its next try
    /// fails as a 502 `upstream_requests_bound`.
    pub max_upstream_requests_per_request: usize,
    /// The least a client must take of its answer, in bytes per second of the time the
    /// answer waits for it to take more (default 4096; 0: no minimum), over each
    /// `client_stall_timeout_s` of such waiting: a client that drains its answer slower ends
    /// it as a stalled one does.
    pub client_min_bytes_per_s: f64,
}

impl Limits {
    /// What a policy is checked against for a request of `n` choices: `max_samples`.
    pub(crate) fn policy_limits(&self, n: u32) -> choicewise_core::PolicyLimits {
        choicewise_core::PolicyLimits::new(n).max_samples(self.max_samples)
    }

    /// The memory ceiling's two marks in bytes, defaults resolved (`0, 0`: off): `memory`
    /// is what the process may use, for the default.
    pub(crate) fn memory_watermarks_of(&self, memory: Option<u64>) -> (u64, u64) {
        let high = match self.memory_high_watermark_mb {
            Some(mb) => mb.saturating_mul(1 << 20),
            None => memory.map_or(0, |bytes| bytes / 4 * 3),
        };
        let low = match self.memory_low_watermark_mb {
            Some(mb) => mb.saturating_mul(1 << 20),
            None => high / 10 * 9,
        };
        (high, low)
    }

    /// What one key may hold unsent ([`max_unsent_bytes_per_key`](Self::max_unsent_bytes_per_key)),
    /// its default resolved against the ceiling's high mark `high` (0: no cap).
    pub(crate) fn unsent_cap(&self, high: u64) -> u64 {
        self.max_unsent_bytes_per_key.unwrap_or(high / 2)
    }

    /// The memory ceiling's two marks in bytes, defaults resolved (`0, 0`: off).
    pub(crate) fn memory_watermarks(&self) -> (u64, u64) {
        let memory = match self.memory_high_watermark_mb {
            Some(_) => None,
            None => memory_available(),
        };
        self.memory_watermarks_of(memory)
    }
}

/// The memory the process may use: its cgroup's limit (v2 `memory.max`, v1
/// `memory.limit_in_bytes`) or the machine's memory, whichever is smaller; `None` where
/// neither can be read.
fn memory_available() -> Option<u64> {
    let machine = std::fs::read_to_string("/proc/meminfo").ok().and_then(|m| {
        let line = m.lines().find(|l| l.starts_with("MemTotal:"))?;
        let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kib << 10)
    });
    let cgroup = [
        "/sys/fs/cgroup/memory.max",
        "/sys/fs/cgroup/memory/memory.limit_in_bytes",
    ]
    .iter()
    .find_map(|p| std::fs::read_to_string(p).ok()?.trim().parse::<u64>().ok());
    match (machine, cgroup) {
        (Some(m), Some(c)) => Some(m.min(c)),
        (m, c) => m.or(c),
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_n: 16,
            max_samples: 16,
            max_body_bytes: 8 * 1024 * 1024,
            max_concurrent_requests: 1024,
            upstream_idle_timeout_s: 300.0,
            header_read_timeout_s: 10.0,
            body_read_timeout_s: 30.0,
            idle_connection_timeout_s: 60.0,
            max_connections: 4096,
            max_header_bytes: 32 * 1024,
            client_stall_timeout_s: 60.0,
            retry_budget_percent: 20.0,
            max_answer_bytes: 16 * 1024 * 1024,
            memory_high_watermark_mb: None,
            memory_low_watermark_mb: None,
            max_unsent_bytes_per_key: None,
            request_deadline_s: 600.0,
            max_upstream_requests_per_request: 64,
            client_min_bytes_per_s: 4096.0,
        }
    }
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
    /// Its base URL (`http://127.0.0.1:8080/v1`, `https://api.openai.com/v1`).
    pub base_url: String,
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
    /// How it is asked for several choices: as configured, else native for chat.
    pub fn n_mode(&self) -> NMode {
        self.n.unwrap_or(match self.api {
            Dialect::Chat => NMode::Native,
            _ => NMode::FanOut,
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

    /// A `base_url` ending in an API's endpoint path (`…/v1/chat/completions`, `…/messages`,
    /// `…/responses`) is refused, naming its line of `text`: the gateway adds the path itself,
    /// so such an upstream would be asked at `…/chat/completions/chat/completions`.
    fn check_endpoint_paths(&self, text: &str) -> Result<(), ConfigError> {
        // Each URL's lines, in order: the n-th upstream with a URL is on its n-th line.
        let mut used: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
        for model in &self.models {
            for (k, u) in model.upstreams.iter().enumerate() {
                let trimmed = u.base_url.trim_end_matches('/');
                let Some(endpoint) = ["/chat/completions", "/messages", "/responses"]
                    .into_iter()
                    .find(|e| trimmed.ends_with(e))
                else {
                    continue;
                };
                let seen = used.entry(u.base_url.as_str()).or_default();
                let line = (text.lines().enumerate())
                    .filter(|(_, l)| {
                        l.trim_start().starts_with("base_url") && l.contains(u.base_url.as_str())
                    })
                    .nth(*seen)
                    .map(|(i, _)| i + 1);
                *seen += 1;
                let at = line.map_or_else(String::new, |n| format!("line {n}: "));
                let base = &trimmed[..trimmed.len() - endpoint.len()];
                return Err(ConfigError(format!(
                    "{at}model {:?}, upstream {}: base_url {:?} ends in the endpoint path {endpoint}; \
                     give the API's base URL ({base:?}): the gateway adds {endpoint} itself",
                    model.name,
                    k + 1,
                    u.base_url
                )));
            }
        }
        Ok(())
    }

    fn check_values(&self) -> Result<(), ConfigError> {
        let err = |m: String| Err(ConfigError(m));
        if self.models.is_empty() {
            return err("the config names no model ([[models]])".into());
        }
        let mut seen = std::collections::HashSet::new();
        for model in &self.models {
            if model.name.trim().is_empty() {
                return err("a model has an empty name".into());
            }
            if !seen.insert(model.name.as_str()) {
                return err(format!("model {:?} is configured twice", model.name));
            }
            if model.upstreams.is_empty() {
                return err(format!("model {:?} has no upstream", model.name));
            }
            for (k, u) in model.upstreams.iter().enumerate() {
                if u.max_tokens == Some(0) {
                    return err(format!(
                        "model {:?}, upstream {}: max_tokens must be at least 1",
                        model.name,
                        k + 1
                    ));
                }
                if u.max_n == Some(0) {
                    return err(format!(
                        "model {:?}, upstream {}: max_n must be at least 1",
                        model.name,
                        k + 1
                    ));
                }
                if u.max_n.is_some() && u.n_mode() != NMode::Native {
                    return err(format!(
                        "model {:?}, upstream {}: max_n limits an upstream asked with n = \"native\", and this one is asked one request per choice",
                        model.name,
                        k + 1
                    ));
                }
            }
            for fallback in &model.fallbacks {
                if fallback == &model.name {
                    return err(format!("model {:?} names itself as a fallback", model.name));
                }
                if !self.models.iter().any(|m| &m.name == fallback) {
                    return err(format!(
                        "model {:?}: its fallback {fallback:?} is not a configured model",
                        model.name
                    ));
                }
            }
            model.pick(&self.limits)?;
            let r = &model.retry;
            if r.attempts == 0
                || !(r.first_byte_timeout_s.is_finite()
                    && r.first_byte_timeout_s > 0.0
                    && r.first_byte_timeout_s <= 31_536_000.0)
            {
                return err(format!(
                    "model {:?}: retry.attempts must be at least 1 and retry.first_byte_timeout_s a number of seconds above 0",
                    model.name
                ));
            }
            let h = &model.health;
            if h.eject_after == 0
                || !(h.eject_for_s.is_finite()
                    && h.eject_for_s >= 0.0
                    && h.eject_for_s <= 31_536_000.0)
            {
                return err(format!(
                    "model {:?}: health.eject_after must be at least 1 and health.eject_for_s a number of seconds, 0 or more",
                    model.name
                ));
            }
            for (k, u) in model.upstreams.iter().enumerate() {
                let scheme = u.base_url.split_once("://").map(|(s, _)| s);
                if !matches!(scheme, Some("http" | "https")) {
                    return err(format!(
                        "model {:?}, upstream {}: base_url {:?} is not an http or https URL",
                        model.name,
                        k + 1,
                        u.base_url
                    ));
                }
                if u.weight == 0 {
                    return err(format!(
                        "model {:?}, upstream {}: weight must be at least 1",
                        model.name,
                        k + 1
                    ));
                }
                if u.n == Some(NMode::Native) && u.api != Dialect::Chat {
                    return err(format!(
                        "model {:?}, upstream {}: the {} API has no n (n = \"fan-out\")",
                        model.name,
                        k + 1,
                        u.api
                    ));
                }
            }
        }
        let l = &self.limits;
        if l.max_n == 0 || l.max_samples == 0 || l.max_concurrent_requests == 0 {
            return err(
                "limits: max_n, max_samples and max_concurrent_requests must be above 0".into(),
            );
        }
        if l.max_upstream_requests_per_request == 0 {
            return err("limits: max_upstream_requests_per_request must be above 0".into());
        }
        for (name, secs) in [
            ("upstream_idle_timeout_s", l.upstream_idle_timeout_s),
            ("header_read_timeout_s", l.header_read_timeout_s),
            ("body_read_timeout_s", l.body_read_timeout_s),
            ("idle_connection_timeout_s", l.idle_connection_timeout_s),
            ("client_stall_timeout_s", l.client_stall_timeout_s),
            ("request_deadline_s", l.request_deadline_s),
        ] {
            // Above 0, and at most a year: `Duration::from_secs_f64` takes it without panic.
            if !(secs.is_finite() && secs > 0.0 && secs <= 31_536_000.0) {
                return err(format!(
                    "limits: {name} must be a number of seconds above 0 (at most a year)"
                ));
            }
        }
        if !(l.client_min_bytes_per_s.is_finite() && l.client_min_bytes_per_s >= 0.0) {
            return err("limits: client_min_bytes_per_s must be a number, 0 or more".into());
        }
        if !(l.retry_budget_percent.is_finite() && l.retry_budget_percent >= 0.0) {
            return err("limits: retry_budget_percent must be a number, 0 or more".into());
        }
        if l.max_connections == 0 || l.max_connections > 1 << 24 {
            return err("limits: max_connections must be from 1 to 16777216".into());
        }
        if l.max_concurrent_requests > 1 << 24 {
            return err("limits: max_concurrent_requests must be at most 16777216".into());
        }
        if l.max_answer_bytes < 1024 {
            return err("limits: max_answer_bytes must be at least 1024".into());
        }
        let (high, low) = l.memory_watermarks();
        if high > 0 && low >= high {
            return err(format!(
                "limits: memory_low_watermark_mb ({} MiB) must be below memory_high_watermark_mb ({} MiB)",
                low >> 20,
                high >> 20
            ));
        }
        if l.max_header_bytes < 8192 {
            return err("limits: max_header_bytes must be at least 8192".into());
        }
        for origin in &self.allowed_origins {
            let rest = (origin.strip_prefix("http://"))
                .or_else(|| origin.strip_prefix("https://"))
                .unwrap_or_default();
            if rest.is_empty() || rest.contains(['/', ' ']) {
                return err(format!(
                    "allowed_origins: {origin:?} is not an origin (scheme://host[:port], no path)"
                ));
            }
        }
        if let Some(endpoint) = &self.telemetry.otlp_endpoint {
            let rest = (endpoint.strip_prefix("http://"))
                .or_else(|| endpoint.strip_prefix("https://"))
                .unwrap_or_default();
            if rest.trim_end_matches('/').is_empty() || rest.contains(char::is_whitespace) {
                return err(format!(
                    "telemetry: otlp_endpoint {endpoint:?} is not an http or https URL"
                ));
            }
        }
        if !(self.shutdown_grace_s.is_finite()
            && self.shutdown_grace_s >= 0.0
            && self.shutdown_grace_s <= 31_536_000.0)
        {
            return err(
                "shutdown_grace_s must be a number of seconds, 0 or more (at most a year)".into(),
            );
        }
        Ok(())
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
mod tests {
    use super::*;

    const UPSTREAM: &str =
        "[[models.upstreams]]\napi = \"chat\"\nbase_url = \"http://127.0.0.1:9/v1\"\n";

    #[test]
    fn single_brackets_name_the_fix() {
        let e = Config::from_toml(
            "[[models]]\nname = \"m\"\n[models.upstreams]\napi = \"chat\"\nbase_url = \"http://127.0.0.1:9/v1\"\n",
        )
        .unwrap_err();
        assert!(e.to_string().contains("two brackets"), "{e}");
        // An upstream without its model: its [[models]] is named.
        let e = Config::from_toml(UPSTREAM).unwrap_err();
        assert!(
            e.to_string()
                .contains("belongs to the [[models]] table above it"),
            "{e}"
        );
    }

    #[test]
    fn resilience_keys_and_their_checks() {
        let config = Config::from_toml(&format!(
            "[limits]\nretry_budget_percent = 5\n[[models]]\nname = \"m\"\nfallbacks = [\"n\"]\n\
             [models.retry]\nattempts = 4\nfirst_byte_timeout_s = 2.5\n[models.health]\neject_after = 2\n{UPSTREAM}weight = 3\n\
             [[models]]\nname = \"n\"\n{UPSTREAM}"
        ))
        .unwrap();
        let m = &config.models[0];
        assert_eq!(
            (m.retry.attempts, m.retry.backoff_ms, m.retry.max_backoff_ms),
            (4, 100, 10_000)
        );
        assert_eq!((m.health.eject_after, m.health.eject_for_s), (2, 30.0));
        assert_eq!(
            (m.upstreams[0].weight, config.models[1].upstreams[0].weight),
            (3, 1)
        );
        assert_eq!(config.limits.retry_budget_percent, 5.0);
        let unknown = Config::from_toml(&format!(
            "[[models]]\nname = \"m\"\nfallbacks = [\"x\"]\n{UPSTREAM}"
        ))
        .unwrap_err();
        assert!(
            unknown
                .to_string()
                .contains("\"x\" is not a configured model"),
            "{unknown}"
        );
        let zero = Config::from_toml(&format!("[[models]]\nname = \"m\"\n{UPSTREAM}weight = 0\n"))
            .unwrap_err();
        assert!(zero.to_string().contains("weight"), "{zero}");
    }

    #[test]
    fn a_base_url_with_an_endpoint_path_is_refused_naming_its_line() {
        for (url, endpoint) in [
            (
                "http://127.0.0.1:9/v1/chat/completions",
                "/chat/completions",
            ),
            ("https://api.anthropic.com/v1/messages/", "/messages"),
            ("http://127.0.0.1:9/v1/responses", "/responses"),
        ] {
            let text = format!(
                "[[models]]\nname = \"ok\"\n{UPSTREAM}\n[[models]]\nname = \"m\"\n[[models.upstreams]]\napi = \"chat\"\nbase_url = \"{url}\"\n"
            );
            let e = Config::from_toml(&text).unwrap_err().to_string();
            assert!(e.starts_with("line 11: model \"m\", upstream 1: "), "{e}");
            assert!(
                e.contains(&format!("ends in the endpoint path {endpoint}")),
                "{e}"
            );
            assert!(e.contains("\"http"), "{e}");
        }
        // A base URL whose last segment merely resembles one is fine.
        Config::from_toml(
            "[[models]]\nname = \"m\"\n[[models.upstreams]]\napi = \"chat\"\nbase_url = \"http://h/messages-api/v1\"\n",
        )
        .unwrap();
    }

    #[test]
    fn the_memory_ceiling_defaults_to_three_quarters_of_the_memory() {
        let limits = Limits::default();
        // Three quarters of what the process may use, the low mark 90% of it.
        let (high, low) = limits.memory_watermarks_of(Some(16 << 30));
        assert_eq!((high, low), (12 << 30, (12u64 << 30) / 10 * 9));
        // Read from this machine: a ceiling, below its memory.
        let (high, low) = limits.memory_watermarks();
        let machine = memory_available().expect("/proc/meminfo");
        assert!(
            high > 0 && high < machine && low < high,
            "{high} {low} {machine}"
        );
        // Set: the marks as given; 0 turns the ceiling off.
        let set = Limits {
            memory_high_watermark_mb: Some(100),
            memory_low_watermark_mb: Some(80),
            ..Limits::default()
        };
        assert_eq!(set.memory_watermarks(), (100 << 20, 80 << 20));
        let off = Limits {
            memory_high_watermark_mb: Some(0),
            ..Limits::default()
        };
        assert_eq!(off.memory_watermarks().0, 0);
        // One key's unsent bodies: half of the high mark (none with the ceiling off), or as
        // set.
        assert_eq!(set.unsent_cap(100 << 20), 50 << 20);
        assert_eq!(off.unsent_cap(0), 0);
        let capped: Config =
            Config::from_toml("[limits]\nmax_unsent_bytes_per_key = 1048576\n[[models]]\nname = \"m\"\n[[models.upstreams]]\napi = \"chat\"\nbase_url = \"http://h/v1\"\n")
                .unwrap();
        assert_eq!(capped.limits.unsent_cap(100 << 20), 1 << 20);
    }

    #[test]
    fn the_bounds_of_one_request_and_their_checks() {
        let model = format!("[[models]]\nname = \"m\"\n{UPSTREAM}");
        let defaults = Config::from_toml(&model).unwrap().limits;
        assert_eq!(defaults.request_deadline_s, 600.0);
        assert_eq!(defaults.max_upstream_requests_per_request, 64);
        assert_eq!(defaults.client_min_bytes_per_s, 4096.0);
        let set = Config::from_toml(&format!(
            "[limits]\nrequest_deadline_s = 5\nmax_upstream_requests_per_request = 10\nclient_min_bytes_per_s = 0\n{model}"
        ))
        .unwrap()
        .limits;
        assert_eq!(
            (
                set.request_deadline_s,
                set.max_upstream_requests_per_request,
                set.client_min_bytes_per_s
            ),
            (5.0, 10, 0.0)
        );
        for (bad, named) in [
            ("request_deadline_s = 0", "request_deadline_s"),
            (
                "max_upstream_requests_per_request = 0",
                "max_upstream_requests_per_request",
            ),
            ("client_min_bytes_per_s = -1", "client_min_bytes_per_s"),
        ] {
            let e = Config::from_toml(&format!("[limits]\n{bad}\n{model}")).unwrap_err();
            assert!(e.to_string().contains(named), "{e}");
        }
    }

    #[test]
    fn every_error_numbers_upstreams_from_1() {
        // The second [[models.upstreams]] is "upstream 2" in every check's message.
        let second = |keys: &str| {
            format!(
                "[[models]]\nname = \"m\"\n{UPSTREAM}[[models.upstreams]]\napi = \"responses\"\nbase_url = \"http://127.0.0.1:9/v1\"\n{keys}\n"
            )
        };
        for keys in [
            "max_tokens = 0",
            "max_n = 0",
            "max_n = 2",
            "weight = 0",
            "n = \"native\"",
        ] {
            let e = Config::from_toml(&second(keys)).unwrap_err().to_string();
            assert!(e.contains("model \"m\", upstream 2: "), "{keys}: {e}");
        }
        let e = Config::from_toml(&format!(
            "[[models]]\nname = \"m\"\n{UPSTREAM}[[models.upstreams]]\napi = \"chat\"\nbase_url = \"ftp://h/v1\"\n"
        ))
        .unwrap_err();
        assert!(e.to_string().contains("upstream 2: base_url"), "{e}");
        let e = Config::from_toml(
            &second("base_url = \"http://h/v1/responses\"")
                .replace("base_url = \"http://127.0.0.1:9/v1\"\nbase_url", "base_url"),
        )
        .unwrap_err();
        assert!(e.to_string().contains("upstream 2: base_url"), "{e}");
        // Read from the environment when the gateway is made.
        let config = Config::from_toml(&second("api_key_env = \"K2\"")).unwrap();
        let e = config.check_with_env(None, |_| None).unwrap_err();
        assert_eq!(
            e.to_string(),
            "model \"m\", upstream 2: the environment variable K2 is not set"
        );
    }

    #[test]
    fn settings_that_never_take_effect_are_warned_of() {
        let vote = |table: &str| {
            Config::from_toml(&format!(
                "[[models]]\nname = \"v\"\n[models.choicewise]\nselect = \"vote\"\n{table}\n{UPSTREAM}"
            ))
            .unwrap()
            .warnings()
        };
        let w = vote("samples = 8\n[models.choicewise.confidence]\nwarmup = 8");
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].contains("confidence.warmup (8) is not below samples (8)"),
            "{w:?}"
        );
        assert!(vote("samples = 9\n[models.choicewise.confidence]\nwarmup = 8").is_empty());
        assert!(
            vote("samples = 3\n[models.choicewise.confidence]")[0].contains("(8, the default)")
        );
        assert!(vote("samples = 4\nwindow = 4")[0].contains("window (4) is not below samples (4)"));
        assert!(vote("samples = 4\nwindow = 2").is_empty());
        let others = Config::from_toml(&format!(
            "allowed_origins = [\"https://app.example\"]\n[auth]\nkeys_env = \"K\"\n[telemetry]\ncapture_content = true\n\
             [limits]\nmax_samples = 4\nmax_n = 4\n[[models]]\nname = \"m\"\nmax_samples = 8\n{UPSTREAM}max_n = 4\n"
        ))
        .unwrap()
        .warnings();
        assert_eq!(others.len(), 4, "{others:?}");
        for named in [
            "max_samples (8) is above [limits] max_samples (4)",
            "upstream 1: max_n (4)",
            "allowed_origins",
            "capture_content",
        ] {
            assert!(
                others.iter().any(|w| w.contains(named)),
                "{named}: {others:?}"
            );
        }
    }

    #[test]
    fn max_n_is_for_native_upstreams_and_at_least_one() {
        let ok =
            Config::from_toml(&format!("[[models]]\nname = \"m\"\n{UPSTREAM}max_n = 2\n")).unwrap();
        assert_eq!(ok.models[0].upstreams[0].max_n, Some(2));
        let zero = Config::from_toml(&format!("[[models]]\nname = \"m\"\n{UPSTREAM}max_n = 0\n"))
            .unwrap_err();
        assert!(
            zero.to_string()
                .contains("upstream 1: max_n must be at least 1"),
            "{zero}"
        );
        let fan_out = Config::from_toml(&format!(
            "[[models]]\nname = \"m\"\n{UPSTREAM}n = \"fan-out\"\nmax_n = 2\n"
        ))
        .unwrap_err();
        assert!(fan_out.to_string().contains("native"), "{fan_out}");
    }
}
