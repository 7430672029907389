//! A gateway's state: [`Gateway`] and what every request reads from it (its models and their
//! routes, limits, keys, metrics, traces, the closing signal), built once from a
//! [`Config`]. Below the handlers and layers that read it; the crate root keeps the router
//! and the public API.

use std::sync::Arc;
use std::time::Duration;

use choicewise_client::Client;
use choicewise_core::upstream::Authorisation;
use tokio::sync::{Semaphore, watch};

use crate::admission::{Admission, overload, unsent};
use crate::config::{self, Config, ConfigError, HostedTools, Limits};
use crate::keyring::{self, KeyRing, store::KeyStore};
use crate::keys;
use crate::metrics::Metrics;
use crate::quota::Quota;
use crate::traces::Traces;
use crate::upstream::open::{self, UpstreamRoute};
use crate::upstream::resilience;

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
    pub(crate) inner: Arc<Inner>,
}

/// What every request of a gateway reads: written once, by [`Gateway::build`].
pub(crate) struct Inner {
    pub(crate) limits: Arc<Limits>,
    /// The keys clients may send now (the file's and the admin API's); none: no key
    /// needed.
    pub(crate) keys: Arc<KeyRing>,
    /// The operator's key (`[admin]`), which `/metrics` requires; none: open.
    pub(crate) operator: Option<keys::Operator>,
    /// `[console]`, when enabled: where the console is served.
    pub(crate) console: Option<crate::config::Console>,
    /// What the admission layers read ([`Admission`]): the same limits, keys and metrics.
    pub(crate) admission: Arc<Admission>,
    /// The limits of the keys, tags and models, and the store of their counts.
    pub(crate) quota: Arc<Quota>,
    pub(crate) models: open::Models,
    /// Each model's pick as the operator set it (`[models.choicewise]`, `max_samples`).
    pub(crate) picks: Arc<config::ByName<config::ModelPick>>,
    /// In order, for `GET /v1/models`.
    pub(crate) names: Vec<String>,
    pub(crate) metrics: Arc<Metrics>,
    /// `[telemetry]`'s traces, if an endpoint is named.
    pub(crate) traces: Option<Arc<Traces>>,
    /// Set by [`Gateway::close`]: open answers end.
    pub(crate) closing: watch::Sender<bool>,
    /// How long open answers may finish after a shutdown signal (`shutdown_grace_s`).
    pub(crate) grace: Duration,
    /// Chat upstreams whose base URL lacks `/v1`, and the same with it: checked at start.
    pub(crate) v1_checks: Vec<(Client, Client)>,
    /// Each model's rule for hosted tools (`hosted_tools`).
    pub(crate) hosted_tools: config::ByName<HostedTools>,
    /// `[records]`'s writer, once started ([`Gateway::with_env`]; a checked configuration
    /// starts none).
    pub(crate) records: std::sync::OnceLock<Arc<crate::records::Records>>,
}

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway")
            .field("models", &self.inner.names)
            .field("keys", &self.inner.keys.load().len())
            .finish()
    }
}

impl Gateway {
    /// Where a request's record goes now.
    pub(crate) fn sinks(&self) -> crate::answer::finish::Sinks {
        crate::answer::finish::Sinks {
            metrics: self.inner.metrics.clone(),
            traces: self.inner.traces.clone(),
            records: self.inner.records.get().cloned(),
        }
    }

    /// For the crate's unit tests: a gateway of one model, `m`, on a chat upstream that
    /// nothing answers.
    #[cfg(test)]
    pub(crate) fn of_one_model() -> Gateway {
        let config = crate::Config::from_toml(
            "[[models]]\nname = \"m\"\n[[models.upstreams]]\napi = \"chat\"\nbase_url = \"http://127.0.0.1:9/v1\"",
        )
        .unwrap();
        Gateway::new(&config).unwrap()
    }

    /// The state for this configuration, the environment variables it names read with
    /// `env` ([`Gateway::with_env`] is the public entry).
    pub(crate) fn build(
        config: &Config,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Gateway, ConfigError> {
        let env_var = env_reader(&env);
        let file_keys = keyring::FileKeys::of(config, &env_var)?;
        let operator = match &config.admin {
            Some(admin) => Some(keys::Operator::new(
                &env_var(&admin.key_env)
                    .map_err(|e| ConfigError(format!("[admin] key_env: {e}")))?,
            )),
            None => None,
        };
        let mut models = config::ByName::default();
        let mut picks = config::ByName::default();
        let mut v1_checks = Vec::new();
        let mut names = Vec::new();
        let mut hosted_tools = config::ByName::default();
        for model in &config.models {
            let mut routes = Vec::new();
            for (k, u) in model.upstreams.iter().enumerate() {
                let api = u.api;
                // Every try is the gateway's (upstream/open/): the client's own retries are off.
                let upstream_model = u.model.clone().unwrap_or_else(|| model.name.clone());
                let mut builder = Client::builder()
                    .api(api)
                    .model(&upstream_model)
                    .max_idle_connections(config.limits.upstream_idle_connections)
                    .max_retries(0);
                if !u.base_url.is_empty() {
                    builder = builder.base_url(&u.base_url);
                }
                let at = |e: ConfigError| {
                    ConfigError(format!("model {:?}, upstream {}: {e}", model.name, k + 1))
                };
                let mut key = None;
                if let Some(var) = &u.api_key_env {
                    let value = env_var(var).map_err(at)?;
                    builder = builder.api_key(value.clone());
                    key = Some(value);
                }
                if api.api().regional_base_url("region").is_some() {
                    builder = builder.region(region_of(u, &env).map_err(at)?);
                }
                if let (Authorisation::SigV4 { .. }, None) = (api.api().authorisation(), &key) {
                    builder = builder.aws_credentials(aws_credentials(u, &env).map_err(at)?);
                }
                let client = builder.build().map_err(|e| {
                    ConfigError(format!("model {:?}, upstream {}: {e}", model.name, k + 1))
                })?;
                // A local server's base URL without `/v1` is a common slip: `serve` asks the
                // model list of an API whose local servers list theirs (Chat Completions') at
                // start, and at `/v1` when that is a 404 (serving::check_v1).
                let trimmed = u.base_url.trim_end_matches('/');
                if api.api().model_from_list() && !trimmed.ends_with("/v1") {
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
                routes.push(UpstreamRoute {
                    api: u.api,
                    client,
                    label: Arc::from(format!("{}:{upstream_model}@{host}", u.api).as_str()),
                    encoding: choicewise_usage::encoding_for_model(&upstream_model).name,
                    model: upstream_model,
                    n_mode: u.n_mode(),
                    max_n: u.max_n,
                    max_tokens: u.max_tokens.or(api.api().default_max_tokens()),
                    host,
                    idle_timeout: Duration::from_secs_f64(config.limits.upstream_idle_timeout_s),
                    max_answer_bytes: config.limits.max_answer_bytes,
                    weight: u.weight,
                    health: Arc::new(resilience::Health::new(&model.health)),
                    budget: Arc::new(resilience::Budget::new(config.limits.retry_budget_percent)),
                    refusals: Arc::default(),
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
        let (high, low) = config.limits.memory_watermarks();
        let metrics = Arc::new(Metrics::new());
        let slots = Arc::new(crate::counter::Slots::default());
        let quota = Arc::new(Quota::new(config, &slots, metrics.clone())?);
        // Its store is watched once the gateway is made to serve (`Gateway::with_env`), not
        // by a check of the configuration, which reaches nothing unless asked.
        let keys = Arc::new(KeyRing::new(file_keys, slots, key_store(config, &quota)?));
        let limits = Limits {
            resolved_high: Some(high),
            ..config.limits.clone()
        };
        let limits = Arc::new(limits);
        Ok(Gateway {
            inner: Arc::new(Inner {
                limits: limits.clone(),
                keys: keys.clone(),
                operator,
                console: config.console.clone().filter(|c| c.enabled),
                admission: Arc::new(Admission {
                    limits,
                    keys,
                    metrics: metrics.clone(),
                    slots: Arc::new(Semaphore::new(config.limits.max_concurrent_requests)),
                    ceiling: Arc::new(overload::Ceiling::new(high, low)),
                    unsent: Arc::new(unsent::Unsent::new(config.limits.unsent_cap(high))),
                    allowed_origins: config.allowed_origins.clone(),
                    listening: std::sync::OnceLock::new(),
                    warnings: crate::upstream::resilience::Warnings::default(),
                }),
                quota,
                models: Arc::new(models),
                picks: Arc::new(picks),
                names,
                metrics,
                traces: Traces::new(&config.telemetry)?,
                closing: watch::Sender::new(false),
                grace: config.shutdown_grace(),
                v1_checks,
                hosted_tools,
                records: std::sync::OnceLock::new(),
            }),
        })
    }
}

/// The value of the environment variable `name` as `env` finds it, trimmed: an error names
/// an unset or empty variable (never a value).
/// The region of an upstream served per region: its `region`, else `AWS_REGION`, else
/// `AWS_DEFAULT_REGION`.
fn region_of(
    u: &crate::config::Upstream,
    env: &impl Fn(&str) -> Option<String>,
) -> Result<String, ConfigError> {
    let set = |name: &str| {
        env(name)
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
    };
    (u.region.clone())
        .or_else(|| set("AWS_REGION"))
        .or_else(|| set("AWS_DEFAULT_REGION"))
        .ok_or_else(|| {
            ConfigError(format!(
                "the {} API is served per region: give its region (or set AWS_REGION)",
                u.api
            ))
        })
}

/// The credentials of an upstream whose requests are signed, from the environment
/// variables it names (default AWS's own). Only the variables' names are ever said.
fn aws_credentials(
    u: &crate::config::Upstream,
    env: &impl Fn(&str) -> Option<String>,
) -> Result<choicewise_client::AwsCredentials, ConfigError> {
    let env_var = env_reader(env);
    let named = |var: &Option<String>, default: &'static str| -> String {
        var.clone().unwrap_or_else(|| default.to_string())
    };
    let id = env_var(&named(&u.access_key_id_env, "AWS_ACCESS_KEY_ID"))?;
    let secret = env_var(&named(&u.secret_access_key_env, "AWS_SECRET_ACCESS_KEY"))?;
    let credentials = choicewise_client::AwsCredentials::new(id, secret);
    let token = match &u.session_token_env {
        Some(var) => Some(env_var(var)?),
        None => env("AWS_SESSION_TOKEN").filter(|t| !t.trim().is_empty()),
    };
    Ok(match token {
        Some(token) => credentials.session_token(token.trim()),
        None => credentials,
    })
}

pub(crate) fn env_reader(
    env: &impl Fn(&str) -> Option<String>,
) -> impl Fn(&str) -> Result<String, ConfigError> + '_ {
    move |name: &str| match env(name).map(|v| v.trim().to_string()) {
        None => Err(ConfigError(format!(
            "the environment variable {name} is not set"
        ))),
        Some(v) if v.is_empty() => Err(ConfigError(format!(
            "the environment variable {name} is empty"
        ))),
        Some(v) => Ok(v),
    }
}

/// Where the admin API's keys live: `[admin] key_store`, else Redis where the limits' counts
/// are (`[state] redis_url`), else the records database; none without `[admin]` and `[auth]`
/// (keys made over the API would be asked of nobody), nor without a store.
fn key_store(config: &Config, quota: &Quota) -> Result<Option<Arc<dyn KeyStore>>, ConfigError> {
    let (Some(admin), Some(_)) = (&config.admin, &config.auth) else {
        return Ok(None);
    };
    let redis = || {
        (quota.redis()).map(|r| {
            Arc::new(keyring::store::RedisKeys::new(
                r.clone(),
                quota.shown().to_string(),
            )) as Arc<dyn KeyStore>
        })
    };
    let records = || {
        (config.records.as_ref())
            .map(|r| Arc::new(keyring::store::RecordsKeys::new(&r.url)) as Arc<dyn KeyStore>)
    };
    Ok(match admin.key_store {
        None => redis().or_else(records),
        Some(config::KeyStoreKind::Redis) => Some(redis().ok_or_else(|| {
            ConfigError("[admin] key_store = \"redis\" needs [state] redis_url".into())
        })?),
        Some(config::KeyStoreKind::Records) => Some(records().ok_or_else(|| {
            ConfigError("[admin] key_store = \"records\" needs [records]".into())
        })?),
    })
}
