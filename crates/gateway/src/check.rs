//! `choicewise serve --check`: a configuration checked as [`serve`](crate::serve) checks it
//! before it binds ([`Config::check`]), what it would serve ([`Checked`]), and the settings
//! that can never take effect ([`Config::warnings`]).

use std::fmt;
use std::net::SocketAddr;

use choicewise_core::PickRule;
use choicewise_records::shown_url;

use crate::config::{Config, ConfigError, NMode};
use crate::state::Gateway;

/// A configuration that passed [`Config::check`]: the address `serve` would listen on, a
/// line per model and upstream it would serve, and the configuration's warnings. Its
/// `Display` is what `choicewise serve --check` prints: keys appear only as the names of
/// their environment variables, and a base URL's `user:password@` and query are hidden.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Checked {
    /// The address `serve` would listen on (`--listen`, else `listen`, else 127.0.0.1:8787).
    pub listen: SocketAddr,
    /// One line per model, each followed by one indented line per upstream.
    pub lines: Vec<String>,
    /// [`Config::warnings`]: settings that can never take effect.
    pub warnings: Vec<String>,
}

impl fmt::Display for Checked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "listen {}", self.listen)?;
        for line in &self.lines {
            writeln!(f, "{line}")?;
        }
        for warning in &self.warnings {
            writeln!(f, "warning: {warning}")?;
        }
        Ok(())
    }
}

/// `; limits requests_per_minute 60 a minute, usd_per_day $1.00 a day`, or nothing.
fn limits_shown(limits: &crate::config::RateLimits) -> String {
    if limits.is_empty() {
        return String::new();
    }
    let shown: Vec<String> = (limits.iter())
        .map(|l| format!("{} ({})", l.name(), l.stated()))
        .collect();
    format!("; limits {}", shown.join(", "))
}

/// What `serve --check --connect` found of the services a configuration names: a line
/// for each (the records database, Redis), and whether every one answered.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Reached {
    /// One line per service: what was reached, or why not (never a password).
    pub lines: Vec<String>,
    /// Every service answered.
    pub ok: bool,
}

impl fmt::Display for Reached {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for line in &self.lines {
            writeln!(f, "{line}")?;
        }
        Ok(())
    }
}

/// How long `--check --connect` waits for each service.
const REACH_WITHIN: std::time::Duration = std::time::Duration::from_secs(5);

impl Config {
    /// `serve --check --connect`: reaches the services the configuration names, each within
    /// 5 s: the records database (connected, its tables made or migrated as `serve` would,
    /// its rows counted) and Redis (`PING`). A database that refuses the configuration (no
    /// such database, a wrong password) is said as such. Nothing is served.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// use choicewise_gateway::Config;
    /// let dir = tempfile::tempdir().unwrap();
    /// let config = Config::from_toml(&format!(r#"
    ///     [records]
    ///     url = "sqlite://{}/records.db"
    ///     [[models]]
    ///     name = "m"
    ///     [[models.upstreams]]
    ///     api = "chat"
    ///     base_url = "http://127.0.0.1:8080/v1"
    /// "#, dir.path().display())).unwrap();
    /// let reached = config.reach().await;
    /// assert!(reached.ok, "{reached}");
    /// assert!(reached.lines[0].contains("0 requests on record"), "{reached}");
    /// # }
    /// ```
    pub async fn reach(&self) -> Reached {
        let mut reached = Reached {
            lines: Vec::new(),
            ok: true,
        };
        if let Some(records) = &self.records {
            let shown = shown_url(&records.url);
            let found = tokio::time::timeout(REACH_WITHIN, async {
                let store = choicewise_records::Store::connect(&records.url).await?;
                let rows = store.count().await;
                store.close().await;
                rows
            })
            .await;
            let line = match found {
                Ok(Ok(rows)) => format!("records: reached {shown}: {rows} requests on record"),
                Ok(Err(choicewise_records::RecordsError::Config(e))) => {
                    reached.ok = false;
                    format!("records: the database refuses this configuration: {e}")
                }
                Ok(Err(e)) => {
                    reached.ok = false;
                    format!("records: not reached: {e}")
                }
                Err(_) => {
                    reached.ok = false;
                    format!("records: not reached: {shown} did not answer within 5 s")
                }
            };
            reached.lines.push(line);
        }
        if let Some(url) = &self.state.redis_url {
            let shown = shown_url(url);
            let timeout = std::time::Duration::from_millis(self.state.state_timeout_ms);
            let pinged = match crate::quota::redis::Redis::new(url, timeout) {
                Ok(redis) => tokio::time::timeout(REACH_WITHIN, redis.ping())
                    .await
                    .unwrap_or_else(|_| Err("no answer within 5 s".into())),
                Err(e) => Err(e.to_string()),
            };
            let line = match pinged {
                Ok(()) => format!("state: reached {shown}: PING answered"),
                Err(e) => {
                    reached.ok = false;
                    format!("state: not reached: {shown}: {e}")
                }
            };
            reached.lines.push(line);
        }
        if reached.lines.is_empty() {
            reached
                .lines
                .push("no service to reach: neither [records] nor [state] redis_url".into());
        }
        reached
    }

    /// Checks the configuration as [`serve`](crate::serve) does before it binds: the listen
    /// address (`listen` overrides the file's, as `--listen` does; a non-loopback one needs
    /// `[auth]`), the environment variables it names (`[auth] keys_env`, each upstream's
    /// `api_key_env`: set and not empty, as `serve` refuses to start otherwise), each
    /// upstream's client, each model's default pick and the trace exporter. What
    /// [`from_toml`](Self::from_toml) checks was checked when the configuration was read.
    /// Nothing is bound and no upstream is contacted. Returns what would be served, with the
    /// configuration's [`warnings`](Self::warnings).
    ///
    /// ```
    /// use choicewise_gateway::Config;
    /// let config = Config::from_toml(r#"
    ///     [[models]]
    ///     name = "local"
    ///     [models.choicewise]
    ///     select = "vote"
    ///     samples = 3
    ///     [[models.upstreams]]
    ///     api = "chat"
    ///     base_url = "http://127.0.0.1:8080/v1"
    ///     model = "smollm2"
    ///     api_key_env = "LOCAL_KEY"
    /// "#).unwrap();
    /// // serve refuses an unset variable, and so does the check.
    /// let e = config.check_with_env(None, |_| None).unwrap_err();
    /// assert_eq!(e.to_string(), "model \"local\", upstream 1: the environment variable LOCAL_KEY is not set");
    /// let checked = config.check_with_env(None, |_| Some("sk-secret".into())).unwrap();
    /// assert_eq!(checked.listen.to_string(), "127.0.0.1:8787");
    /// let text = checked.to_string();
    /// assert!(text.contains("model \"local\": pick select = \"vote\", samples = 3"), "{text}");
    /// assert!(text.contains("upstream 1: chat http://127.0.0.1:8080/v1, model smollm2, n native, key from $LOCAL_KEY"), "{text}");
    /// assert!(!text.contains("sk-secret"));
    /// // A listen address that serve would refuse:
    /// assert!(config.check_with_env(Some("0.0.0.0:80"), |_| Some("k".into())).is_err());
    /// ```
    pub fn check(&self, listen: Option<&str>) -> Result<Checked, ConfigError> {
        self.check_with_env(listen, |name| std::env::var(name).ok())
    }

    /// As [`check`](Self::check), the environment variables looked up with `env` (as
    /// [`Gateway::with_env`] does).
    pub fn check_with_env(
        &self,
        listen: Option<&str>,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Checked, ConfigError> {
        let listen = self.listen_addr(listen)?;
        // What `serve` makes before it binds (`Gateway::new` without its token tables): the
        // keys read, the upstreams' clients, the picks, the trace exporter (made inside a
        // runtime, as `serve` makes it; one of its own when called outside any).
        let runtime = match tokio::runtime::Handle::try_current() {
            Ok(_) => None,
            Err(_) => Some(
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| ConfigError(format!("cannot start a runtime: {e}")))?,
            ),
        };
        let entered = runtime.as_ref().map(|r| r.enter());
        let built = Gateway::build(self, env);
        // The gateway (and its trace exporter) goes before the runtime it was made in.
        drop(built?);
        drop(entered);
        Ok(Checked {
            listen,
            lines: self.summary(),
            warnings: self.warnings(),
        })
    }

    /// One line per model (its name, its default pick, `lock`, `max_samples`, fallbacks),
    /// each followed by one line per upstream (numbered from 1, as in the configuration's
    /// errors: its API, base URL, model, `n`, and the variable its key is read from).
    fn summary(&self) -> Vec<String> {
        let mut lines = Vec::new();
        match &self.auth {
            Some(auth) => {
                if let Some(var) = &auth.keys_env {
                    lines.push(format!("auth: client keys from ${var}"));
                }
                for key in &auth.keys {
                    let mut line = match &key.key_env {
                        Some(var) => format!("auth: key {:?} from ${var}", key.name),
                        None => format!("auth: key {:?} by its sha256", key.name),
                    };
                    if let Some(models) = &key.models {
                        line.push_str(&format!(", models {models:?}"));
                    }
                    if !key.tags.is_empty() {
                        line.push_str(&format!(", tags {:?}", key.tags));
                    }
                    line.push_str(&limits_shown(&key.limits));
                    lines.push(line);
                }
                for tag in &auth.tags {
                    let shown = limits_shown(&tag.limits);
                    lines.push(format!("auth: tag {:?}{shown}", tag.name));
                }
            }
            None => lines.push("auth: none (loopback only, closed to web pages)".into()),
        }
        let state = &self.state;
        if let Some(url) = &state.redis_url {
            lines.push(format!(
                "state: the limits' counts in {} (on_state_error = {:?}, state_timeout_ms = {})",
                shown_url(url),
                state.on_state_error.as_str(),
                state.state_timeout_ms
            ));
        }
        if let Some(admin) = &self.admin {
            lines.push(format!(
                "admin: the operator's key from ${}; /metrics needs it",
                admin.key_env
            ));
        }
        if let Some(console) = self.console.as_ref().filter(|c| c.enabled) {
            lines.push(match &console.listen {
                Some(at) => format!("console: at http://{at}/console (a listener of its own)"),
                None => "console: at /console on the gateway's listener".into(),
            });
        }
        if let Some(records) = &self.records {
            lines.push(format!(
                "records: every request in {}{} (spool {}, at most {} MiB)",
                shown_url(&records.url),
                if records.samples {
                    ", each sample too"
                } else {
                    ""
                },
                records.spool_path,
                records.spool_max_mb
            ));
        }
        for model in &self.models {
            let mut line = format!("model {:?}:", model.name);
            match &model.choicewise {
                None => line.push_str(" pick none (every sample returned)"),
                Some(table) => {
                    let mut fields: Vec<String> = Vec::new();
                    if let Some(select) = table.get("select") {
                        fields.push(format!("select = {select}"));
                    }
                    for (key, value) in table {
                        if key != "select" && key != "lock" {
                            fields.push(format!("{key} = {value}"));
                        }
                    }
                    match fields.is_empty() {
                        true => line.push_str(" pick none (every sample returned)"),
                        false => line.push_str(&format!(" pick {}", fields.join(", "))),
                    }
                    if table.get("lock") == Some(&serde_json::Value::Bool(true)) {
                        line.push_str(" (locked)");
                    }
                }
            }
            if let Some(max) = model.max_samples {
                line.push_str(&format!("; max_samples {max}"));
            }
            if !model.fallbacks.is_empty() {
                line.push_str(&format!("; fallbacks {:?}", model.fallbacks));
            }
            if let Some(price) = &model.price {
                line.push_str(&format!(
                    "; price ${} in, ${} out per million tokens",
                    price.input_per_million, price.output_per_million
                ));
            }
            line.push_str(&limits_shown(&model.limits));
            lines.push(line);
            for (k, u) in model.upstreams.iter().enumerate() {
                let upstream_model = u.model.as_deref().unwrap_or(&model.name);
                let n = match u.n_mode() {
                    NMode::Native => "native",
                    NMode::FanOut => "fan-out",
                };
                let url = match (u.base_url.is_empty(), &u.region) {
                    (true, Some(region)) => {
                        (u.api.api().regional_base_url(region)).unwrap_or_default()
                    }
                    (true, None) => "(the region's endpoint)".to_string(),
                    (false, _) => shown_url(&u.base_url),
                };
                let mut line = format!(
                    "  upstream {}: {} {url}, model {upstream_model}, n {n}",
                    k + 1,
                    u.api,
                );
                if let Some(max) = u.max_n {
                    line.push_str(&format!(" (max_n {max})"));
                }
                if u.weight != 1 {
                    line.push_str(&format!(", weight {}", u.weight));
                }
                let signed = matches!(
                    u.api.api().authorisation(),
                    choicewise_core::upstream::Authorisation::SigV4 { .. }
                );
                match (&u.api_key_env, signed) {
                    (Some(var), _) => line.push_str(&format!(", key from ${var}")),
                    (None, true) => line.push_str(&format!(
                        ", signed (SigV4) with ${} and ${}",
                        u.access_key_id_env
                            .as_deref()
                            .unwrap_or("AWS_ACCESS_KEY_ID"),
                        u.secret_access_key_env
                            .as_deref()
                            .unwrap_or("AWS_SECRET_ACCESS_KEY")
                    )),
                    (None, false) => line.push_str(", no key"),
                }
                lines.push(line);
            }
        }
        lines
    }

    /// The settings that can never take effect, each a sentence naming the setting and why:
    /// a confidence-guided default vote whose `warmup` is not below its `samples` (every
    /// sample is a warmup sample, run to its end: none is ever stopped early); a windowed
    /// default vote whose `window` is not below its `samples` (every sample starts at once);
    /// a model's `max_samples` above `[limits] max_samples` (the lower one wins);
    /// `allowed_origins` with `[auth]` (the key is the guard, origins are not checked);
    /// `capture_content` without an `otlp_endpoint` (no traces); `max_n` of an upstream at or
    /// above `[limits] max_n` and `max_samples` (no request carries that many); a key's tag
    /// that no `[[auth.tags]]` names (no limit of it applies). `serve` logs
    /// them at start; `choicewise serve --check` prints them.
    ///
    /// ```
    /// use choicewise_gateway::Config;
    /// let config = Config::from_toml(r#"
    ///     [[models]]
    ///     name = "deepconf"
    ///     [models.choicewise]
    ///     select = "vote"
    ///     samples = 3
    ///     [models.choicewise.confidence]
    ///     keep = 0.9
    ///     [[models.upstreams]]
    ///     api = "chat"
    ///     base_url = "http://127.0.0.1:8080/v1"
    /// "#).unwrap();
    /// let warnings = config.warnings();
    /// assert_eq!(warnings.len(), 1);
    /// assert!(warnings[0].starts_with("model \"deepconf\", [models.choicewise]: confidence.warmup (8, the default) is not below samples (3)"), "{}", warnings[0]);
    /// ```
    pub fn warnings(&self) -> Vec<String> {
        let mut warnings = Vec::new();
        for model in &self.models {
            let name = &model.name;
            // Checked at start: a model whose pick does not read has no warnings of its own.
            if let Ok(pick) = model.pick(&self.limits)
                && let Some(policy) = &pick.policy
                && policy.rule() == PickRule::Vote
            {
                let samples = policy.samples() as usize;
                if let Some(confidence) = policy.confidence()
                    && confidence.warmup >= samples
                {
                    let stated = (model.choicewise.as_ref())
                        .and_then(|t| t.get("confidence"))
                        .and_then(|c| c.get("warmup"))
                        .is_some();
                    let default = if stated { "" } else { ", the default" };
                    warnings.push(format!(
                        "model {name:?}, [models.choicewise]: confidence.warmup ({}{default}) is not below samples ({samples}): \
                         every sample is a warmup sample, run to its end, so none is ever stopped early \
                         (set warmup below samples, e.g. warmup = {})",
                        confidence.warmup,
                        (samples / 2).max(1)
                    ));
                }
                if let Some(window) = policy.window()
                    && window >= samples
                {
                    warnings.push(format!(
                        "model {name:?}, [models.choicewise]: window ({window}) is not below samples ({samples}): \
                         every sample starts at once, as without a window"
                    ));
                }
            }
            if let Some(max) = model.max_samples
                && max > self.limits.max_samples
            {
                warnings.push(format!(
                    "model {name:?}: max_samples ({max}) is above [limits] max_samples ({}), which applies: the lower one wins",
                    self.limits.max_samples
                ));
            }
            // The most samples one request of this model may carry: its `n` (at most
            // `max_n`) or its extension's `samples` (at most `max_samples`), under the model's
            // own cap.
            let most = (self.limits.max_n.max(self.limits.max_samples))
                .min(model.max_samples.unwrap_or(u32::MAX));
            if let Some(warning) = self.over_memory(model, most) {
                warnings.push(warning);
            }
            for (k, u) in model.upstreams.iter().enumerate() {
                if let Some(max) = u.max_n
                    && max >= most
                {
                    warnings.push(format!(
                        "model {name:?}, upstream {}: max_n ({max}) is not below the most samples one request of this model may take ({most}): no request is ever split",
                        k + 1
                    ));
                }
            }
        }
        if self.auth.is_some() && !self.allowed_origins.is_empty() {
            warnings.push(
                "allowed_origins is not checked with [auth]: the key is the guard, and every origin may call the gateway with one"
                    .into(),
            );
        }
        if self.telemetry.capture_content && self.telemetry.otlp_endpoint.is_none() {
            warnings.push(
                "telemetry: capture_content without otlp_endpoint: no traces are made".into(),
            );
        }
        if let Some(auth) = &self.auth {
            for (k, key) in auth.keys.iter().enumerate() {
                for tag in &key.tags {
                    if !auth.tags.iter().any(|t| &t.name == tag) {
                        warnings.push(format!(
                            "[[auth.keys]] {} ({:?}): its tag {tag:?} has no [[auth.tags]]: no limit of it applies",
                            k + 1,
                            key.name
                        ));
                    }
                }
            }
        }
        warnings
    }
}

impl Config {
    /// What `model`'s requests may hold of their answers beside the memory ceiling's high
    /// mark: a warning when its default pick's samples (one without) cannot fit, so that
    /// every request without an extension is refused, or when fewer than the `most` samples
    /// a request may take fit, so that the larger ones are (`samples_over_memory`).
    fn over_memory(&self, model: &crate::config::Model, most: u32) -> Option<String> {
        const MIB: u64 = 1 << 20;
        let limits = &self.limits;
        let high = limits.memory_high();
        let fit = limits.samples_within(high)?;
        let name = &model.name;
        let default = (model.pick(limits).ok())
            .and_then(|pick| pick.policy.map(|p| p.samples()))
            .unwrap_or(1);
        let per_choice = limits.max_answer_bytes as u64 / MIB;
        let cost = crate::config::ANSWER_COST;
        // The largest max_answer_bytes with which `samples` fit.
        let lower = |samples: u32| high / (u64::from(samples.max(1)) * cost) / MIB;
        if default > fit {
            let took = limits.answer_worst(default) / MIB;
            return Some(format!(
                "model {name:?}: its default of {default} sample(s) may take {took} MiB of answer \
                 ({default} x max_answer_bytes {per_choice} MiB x {cost}), more than the memory \
                 ceiling's high watermark ({} MiB): its requests are refused (samples_over_memory) \
                 unless they ask for at most {fit}; lower [limits] max_answer_bytes to at most {} MiB \
                 or raise memory_high_watermark_mb",
                high / MIB,
                lower(default)
            ));
        }
        (most > fit).then(|| {
            format!(
                "model {name:?}: a request of more than {fit} of the {most} samples it may take is \
                 refused (samples_over_memory): its answer may take samples x max_answer_bytes \
                 {per_choice} MiB x {cost}, past the memory ceiling's high watermark ({} MiB); \
                 lower [limits] max_answer_bytes to at most {} MiB for {most} to fit",
                high / MIB,
                lower(most)
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_locked_model_without_a_pick_says_so() {
        let config = Config::from_toml(
            "[[models]]\nname = \"m\"\nfallbacks = [\"n\"]\n[models.choicewise]\nlock = true\n\
             [[models.upstreams]]\napi = \"chat\"\nbase_url = \"http://127.0.0.1:9/v1\"\nweight = 2\n\
             [[models]]\nname = \"n\"\n[[models.upstreams]]\napi = \"responses\"\nbase_url = \"http://127.0.0.1:9/v1\"\n",
        )
        .unwrap();
        assert_eq!(
            config.summary(),
            [
                "auth: none (loopback only, closed to web pages)",
                "model \"m\": pick none (every sample returned) (locked); fallbacks [\"n\"]",
                "  upstream 1: chat http://127.0.0.1:9/v1, model m, n native, weight 2, no key",
                "model \"n\": pick none (every sample returned)",
                "  upstream 1: responses http://127.0.0.1:9/v1, model n, n fan-out, no key",
            ]
        );
    }

    #[test]
    fn the_list_the_warnings_and_the_errors_number_an_upstream_alike() {
        // The second [[models.upstreams]] of model "m": "upstream 2" in the list `--check`
        // prints, in a warning about it and in an error about it.
        let config = |second: &str| {
            format!(
                "[limits]\nmax_n = 4\nmax_samples = 4\n[[models]]\nname = \"m\"\n\
                 [[models.upstreams]]\napi = \"chat\"\nbase_url = \"http://127.0.0.1:9/v1\"\n\
                 [[models.upstreams]]\napi = \"chat\"\nbase_url = \"http://127.0.0.1:8/v1\"\n{second}\n"
            )
        };
        let warned = Config::from_toml(&config("max_n = 4")).unwrap();
        let listed = warned.summary();
        assert!(
            listed.contains(
                &"  upstream 2: chat http://127.0.0.1:8/v1, model m, n native (max_n 4), no key"
                    .to_string()
            ),
            "{listed:?}"
        );
        let warnings = warned.warnings();
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].starts_with("model \"m\", upstream 2: max_n (4)"),
            "{warnings:?}"
        );
        for (second, says) in [
            ("weight = 0", "model \"m\", upstream 2: weight"),
            (
                "api_key_env = \"CHECK_UNSET\"",
                "model \"m\", upstream 2: the environment",
            ),
        ] {
            let e = Config::from_toml(&config(second))
                .and_then(|c| c.check_with_env(None, |_| None).map(|_| ()))
                .unwrap_err()
                .to_string();
            assert!(e.starts_with(says), "{second}: {e}");
        }
    }

    #[test]
    fn a_base_url_shows_no_credentials() {
        assert_eq!(
            shown_url("https://user:pw@h.example:8443/v1?api-key=sk"),
            "https://user:***@h.example:8443/v1?***"
        );
        assert_eq!(
            shown_url("http://127.0.0.1:8080/v1"),
            "http://127.0.0.1:8080/v1"
        );
        assert_eq!(shown_url("http://h?k=1"), "http://h/?***");
    }
}
