//! `[[auth.keys]]` (keys with a name, their models and limits), `[[auth.tags]]`, a model's
//! `price` and `[models.limits]`, and `[state]` (where the counts of the limits live).

use std::fmt;

use serde::Deserialize;
use serde::de::{self, MapAccess, Visitor};

/// `[[auth.keys]]`: a key with a name, which the log lines, the metrics and the spans carry.
///
/// ```
/// use choicewise_gateway::Config;
/// let config = Config::from_toml(r#"
///     [[auth.keys]]
///     name = "team-a"
///     key_env = "TEAM_A_KEY"
///     models = ["small"]
///     [auth.keys.limits]
///     requests_per_minute = 60
///     usd_per_day = 1.0
///     [[models]]
///     name = "small"
///     price = { input_per_million = 0.15, output_per_million = 0.60 }
///     [[models.upstreams]]
///     api = "chat"
///     base_url = "http://127.0.0.1:8080/v1"
/// "#).unwrap();
/// let key = &config.auth.as_ref().unwrap().keys[0];
/// assert_eq!(key.name, "team-a");
/// assert_eq!(key.limits.len(), 2);
/// ```
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct KeyConfig {
    /// Its name: unique, in the log lines, the metrics' `key` label and the spans.
    pub name: String,
    /// The environment variable holding the key (one of `key_env` and `sha256`).
    pub key_env: Option<String>,
    /// The SHA-256 of the key, in hexadecimal (64 digits): the key itself is nowhere in the
    /// configuration.
    pub sha256: Option<String>,
    /// Its tags: the limits of each `[[auth.tags]]` it names apply to it too, shared with
    /// every other key of that tag.
    #[serde(default)]
    pub tags: Vec<String>,
    /// The models it may use (absent: every model); another is answered 403
    /// `model_not_allowed`.
    pub models: Option<Vec<String>>,
    /// `[auth.keys.limits]`: what it may take, per window.
    #[serde(default)]
    pub limits: RateLimits,
}

/// `[[auth.tags]]`: limits shared by every key that names the tag.
///
/// ```
/// use choicewise_gateway::Config;
/// let config = Config::from_toml(r#"
///     [[auth.keys]]
///     name = "nightly"
///     key_env = "NIGHTLY_KEY"
///     tags = ["batch"]
///     [[auth.tags]]
///     name = "batch"
///     [auth.tags.limits]
///     samples_per_hour = 10000
///     [[models]]
///     name = "m"
///     [[models.upstreams]]
///     api = "chat"
///     base_url = "http://127.0.0.1:8080/v1"
/// "#).unwrap();
/// let tag = &config.auth.unwrap().tags[0];
/// assert_eq!(tag.limits.iter().next().unwrap().name(), "samples_per_hour");
/// ```
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct TagConfig {
    /// The tag, as keys name it in their `tags`.
    pub name: String,
    /// `[auth.tags.limits]`.
    #[serde(default)]
    pub limits: RateLimits,
}

/// A model's `price`, in US dollars per million tokens: what `usd_per_day` and
/// `usd_per_month` count.
///
/// ```
/// use choicewise_gateway::Config;
/// let config = Config::from_toml(r#"
///     [[models]]
///     name = "small"
///     price = { input_per_million = 0.15, output_per_million = 0.60 }
///     [[models.upstreams]]
///     api = "chat"
///     base_url = "http://127.0.0.1:8080/v1"
/// "#).unwrap();
/// assert_eq!(config.models[0].price.unwrap().input_per_million, 0.15);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct Price {
    /// Per million prompt tokens.
    pub input_per_million: f64,
    /// Per million generated tokens.
    pub output_per_million: f64,
}

/// What a limit counts.
///
/// ```
/// use choicewise_gateway::Resource;
/// assert_eq!(Resource::Tokens.as_str(), "tokens");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Resource {
    /// Requests admitted.
    Requests,
    /// Samples asked of the upstreams (a vote of 4 is 4).
    Samples,
    /// Tokens, prompt and generated, of every sample.
    Tokens,
    /// US dollars, by the model's `price`.
    Usd,
}

impl Resource {
    /// Its name in a limit's name (`requests` of `requests_per_minute`).
    pub fn as_str(self) -> &'static str {
        match self {
            Resource::Requests => "requests",
            Resource::Samples => "samples",
            Resource::Tokens => "tokens",
            Resource::Usd => "usd",
        }
    }
}

/// The window a limit counts over: from the first request counted in it, for its length.
///
/// ```
/// use choicewise_gateway::Window;
/// assert_eq!((Window::Minute.as_str(), Window::Minute.millis()), ("minute", 60_000));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Window {
    /// 1 s.
    Second,
    /// 60 s.
    Minute,
    /// 3600 s.
    Hour,
    /// 24 hours.
    Day,
    /// 30 days.
    Month,
}

impl Window {
    /// Its name in a limit's name (`minute` of `requests_per_minute`).
    pub fn as_str(self) -> &'static str {
        match self {
            Window::Second => "second",
            Window::Minute => "minute",
            Window::Hour => "hour",
            Window::Day => "day",
            Window::Month => "month",
        }
    }

    /// Its length in milliseconds.
    pub fn millis(self) -> u64 {
        match self {
            Window::Second => 1_000,
            Window::Minute => 60_000,
            Window::Hour => 3_600_000,
            Window::Day => 86_400_000,
            Window::Month => 30 * 86_400_000,
        }
    }

    const ALL: [Window; 5] = [
        Window::Second,
        Window::Minute,
        Window::Hour,
        Window::Day,
        Window::Month,
    ];
}

/// One limit: at most `amount` of a resource per window. Dollars are held in billionths
/// (`amount` of [`Resource::Usd`] is nano-dollars), so that counts stay integers.
///
/// ```
/// use choicewise_gateway::{Config, Resource};
/// let config = Config::from_toml(r#"
///     [[models]]
///     name = "small"
///     price = { input_per_million = 0.15, output_per_million = 0.60 }
///     [models.limits]
///     usd_per_month = 30.0
///     [[models.upstreams]]
///     api = "chat"
///     base_url = "http://127.0.0.1:8080/v1"
/// "#).unwrap();
/// let limit = config.models[0].limits.iter().next().unwrap();
/// assert_eq!((limit.resource, limit.amount), (Resource::Usd, 30_000_000_000));
/// assert_eq!(limit.name(), "usd_per_month");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct RateLimit {
    /// What it counts.
    pub resource: Resource,
    /// Over which window.
    pub window: Window,
    /// The most per window (nano-dollars for [`Resource::Usd`]).
    pub amount: u64,
}

/// Nano-dollars in a dollar.
pub(crate) const NANOS_PER_USD: f64 = 1e9;

/// The largest dollar limit: its nano-dollars stay exact in a Lua number (a double).
const MAX_USD: f64 = 1e6;

impl RateLimit {
    /// Its name in the configuration: `requests_per_minute`.
    pub fn name(&self) -> String {
        format!("{}_per_{}", self.resource.as_str(), self.window.as_str())
    }

    /// The limit stated as the configuration states it: `60 a minute`, `$1.00 a day`.
    pub(crate) fn stated(&self) -> String {
        let per = self.window.as_str();
        match self.resource {
            Resource::Usd => format!("${:.2} a {per}", self.amount as f64 / NANOS_PER_USD),
            _ => format!("{} a {per}", self.amount),
        }
    }

    fn parse_name(name: &str) -> Option<(Resource, Window)> {
        let (resource, window) = name.split_once("_per_")?;
        let resource = match resource {
            "requests" => Resource::Requests,
            "samples" => Resource::Samples,
            "tokens" => Resource::Tokens,
            "usd" => Resource::Usd,
            _ => return None,
        };
        let window = Window::ALL.into_iter().find(|w| w.as_str() == window)?;
        Some((resource, window))
    }
}

/// A `limits` table (`[auth.keys.limits]`, `[auth.tags.limits]`, `[models.limits]`): each
/// field optional, named `{requests,samples,tokens}_per_{second,minute,hour,day,month}` (a
/// whole number, 0 or more) or `usd_per_{second,minute,hour,day,month}` (dollars, 0 or more).
/// An unknown name, a negative or fractional count is an error naming it, with its line.
///
/// ```
/// use choicewise_gateway::Config;
/// let e = Config::from_toml(r#"
///     [[models]]
///     name = "m"
///     [models.limits]
///     requests_per_minute = -1
///     [[models.upstreams]]
///     api = "chat"
///     base_url = "http://127.0.0.1:8080/v1"
/// "#).unwrap_err().to_string();
/// assert!(e.contains("`requests_per_minute` must be a whole number, 0 or more, not -1"), "{e}");
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RateLimits(Vec<RateLimit>);

impl RateLimits {
    /// The limits, by name.
    pub fn iter(&self) -> impl Iterator<Item = &RateLimit> {
        self.0.iter()
    }

    /// How many there are.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// None is set.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl<'de> Deserialize<'de> for RateLimits {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Table;
        impl<'de> Visitor<'de> for Table {
            type Value = RateLimits;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a table of limits (requests_per_minute = 60, usd_per_day = 1.0, ...)")
            }
            fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> Result<RateLimits, M::Error> {
                let mut limits: Vec<RateLimit> = Vec::new();
                while let Some(name) = map.next_key::<String>()? {
                    let Some((resource, window)) = RateLimit::parse_name(&name) else {
                        let _ = map.next_value::<de::IgnoredAny>()?;
                        return Err(de::Error::custom(format!(
                            "`{name}` is not a limit: a limit is named \
                             {{requests,samples,tokens,usd}}_per_{{second,minute,hour,day,month}}"
                        )));
                    };
                    let value: f64 = map.next_value::<Number>()?.0;
                    let amount = if resource == Resource::Usd {
                        if !(value.is_finite() && (0.0..=MAX_USD).contains(&value)) {
                            return Err(de::Error::custom(format!(
                                "`{name}` must be a number of dollars from 0 to {MAX_USD}, not {value}"
                            )));
                        }
                        (value * NANOS_PER_USD).round() as u64
                    } else {
                        if !(value.is_finite() && value >= 0.0 && value.fract() == 0.0) {
                            return Err(de::Error::custom(format!(
                                "`{name}` must be a whole number, 0 or more, not {value}"
                            )));
                        }
                        if value > (1u64 << 53) as f64 {
                            return Err(de::Error::custom(format!(
                                "`{name}` must be at most 2^53, not {value}"
                            )));
                        }
                        value as u64
                    };
                    if limits
                        .iter()
                        .any(|l| (l.resource, l.window) == (resource, window))
                    {
                        return Err(de::Error::custom(format!("`{name}` is set twice")));
                    }
                    limits.push(RateLimit {
                        resource,
                        window,
                        amount,
                    });
                }
                Ok(RateLimits(limits))
            }
        }
        deserializer.deserialize_map(Table)
    }
}

/// A TOML number, integer or float, as an `f64`; anything else is an error of its type.
struct Number(f64);

impl<'de> Deserialize<'de> for Number {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Number;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a number")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Number, E> {
                Ok(Number(v as f64))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Number, E> {
                Ok(Number(v as f64))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Number, E> {
                Ok(Number(v))
            }
        }
        deserializer.deserialize_any(V)
    }
}

/// `[state]`: where the counts of the limits live. Without it, in the process (one gateway,
/// nothing to run); with `redis_url`, in Redis, shared by every replica and kept across
/// restarts.
///
/// ```
/// use choicewise_gateway::{Config, OnStateError};
/// let config = Config::from_toml(r#"
///     [state]
///     redis_url = "redis://127.0.0.1:6379"
///     on_state_error = "refuse"
///     [[models]]
///     name = "m"
///     [[models.upstreams]]
///     api = "chat"
///     base_url = "http://127.0.0.1:8080/v1"
/// "#).unwrap();
/// assert_eq!(config.state.on_state_error, OnStateError::Refuse);
/// assert_eq!(config.state.state_timeout_ms, 50);
/// ```
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
#[non_exhaustive]
pub struct State {
    /// `redis://HOST:PORT[/DB]` (a password as `redis://:PASSWORD@HOST:PORT`): the counts
    /// kept there. None: in the process.
    pub redis_url: Option<String>,
    /// What a request meets when the store does not answer in time, or fails.
    pub on_state_error: OnStateError,
    /// How long each call to the store may take, in milliseconds (default 50).
    pub state_timeout_ms: u64,
}

impl Default for State {
    fn default() -> Self {
        State {
            redis_url: None,
            on_state_error: OnStateError::Allow,
            state_timeout_ms: 50,
        }
    }
}

/// `on_state_error`: a request whose limits cannot be read in time.
///
/// ```
/// use choicewise_gateway::OnStateError;
/// assert_eq!(OnStateError::default().as_str(), "allow");
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum OnStateError {
    /// Served, uncounted (the default): the limits are off while the store fails.
    #[default]
    Allow,
    /// Answered 503 `state_unavailable`, within the deadline.
    Refuse,
}

impl OnStateError {
    /// As the configuration names it.
    pub fn as_str(self) -> &'static str {
        match self {
            OnStateError::Allow => "allow",
            OnStateError::Refuse => "refuse",
        }
    }
}

/// Whether `url` is one Redis takes: `redis://` (or `unix://`), parsed. Its error never
/// repeats the URL (it may hold a password).
pub(crate) fn redis_client(url: &str) -> Result<redis::Client, String> {
    let scheme = url.split_once("://").map(|(s, _)| s);
    if !matches!(scheme, Some("redis" | "unix" | "redis+unix")) {
        return Err(
            "must be a redis:// URL (redis://HOST:PORT, or unix:///PATH); TLS (rediss://) is \
             not supported by this build"
                .into(),
        );
    }
    redis::Client::open(url).map_err(|e| format!("cannot be read ({:?})", e.kind()))
}
