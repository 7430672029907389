//! The checks a configuration passes once parsed: its values (models, upstreams, limits,
//! origins, the OTLP endpoint, the grace period) and its base URLs (no endpoint path).

use super::{Config, ConfigError, NMode, Resource};

impl Config {
    /// A `base_url` ending in an API's endpoint path (`…/v1/chat/completions`, `…/messages`,
    /// `…/responses`) is refused, naming its line of `text`: the gateway adds the path itself,
    /// so such an upstream would be asked at `…/chat/completions/chat/completions`.
    pub(super) fn check_endpoint_paths(&self, text: &str) -> Result<(), ConfigError> {
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

    pub(super) fn check_values(&self) -> Result<(), ConfigError> {
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
                let regional = u.api.api().regional_base_url("region").is_some();
                if u.base_url.is_empty() && !regional {
                    return err(format!(
                        "model {:?}, upstream {}: no base_url (the {} API's base URL, such as http://127.0.0.1:8080/v1)",
                        model.name,
                        k + 1,
                        u.api
                    ));
                }
                if !regional
                    && (u.region.is_some()
                        || u.access_key_id_env.is_some()
                        || u.secret_access_key_env.is_some()
                        || u.session_token_env.is_some())
                {
                    return err(format!(
                        "model {:?}, upstream {}: region and the AWS credentials' *_env are Bedrock's, not the {} API's",
                        model.name,
                        k + 1,
                        u.api
                    ));
                }
                let scheme = u.base_url.split_once("://").map(|(s, _)| s);
                if !u.base_url.is_empty() && !matches!(scheme, Some("http" | "https")) {
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
                if u.n == Some(NMode::Native) && !u.api.has_n() {
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
        self.check_keys()?;
        self.check_state()?;
        if let Some(records) = &self.records {
            records.check()?;
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
}

impl Config {
    /// `[auth]`'s keys and tags, the models' prices and limits: each key named once, by one
    /// of `key_env` and `sha256` (64 hexadecimal digits), its `models` configured ones; a
    /// price of numbers, 0 or more; a `usd_per_*` limit only where every model it counts has
    /// a price. Each error names the table (`[[auth.keys]] 2 ("team-a")`, a model) and the field.
    fn check_keys(&self) -> Result<(), ConfigError> {
        let err = |m: String| Err(ConfigError(m));
        if self.console.as_ref().is_some_and(|c| c.enabled) && self.admin.is_none() {
            return err(
                "[console] needs [admin]: the console opens with the operator's key (key_env)"
                    .into(),
            );
        }
        for model in &self.models {
            if let Some(price) = &model.price {
                for (field, v) in [
                    ("input_per_million", price.input_per_million),
                    ("output_per_million", price.output_per_million),
                ] {
                    if !(v.is_finite() && (0.0..=1e6).contains(&v)) {
                        return err(format!(
                            "model {:?}: price.{field} must be a number of dollars from 0 to 1000000, not {v}",
                            model.name
                        ));
                    }
                }
            }
            let usd = model.limits.iter().find(|l| l.resource == Resource::Usd);
            if let (Some(limit), None) = (usd, &model.price) {
                return err(format!(
                    "model {:?}: [models.limits] {} counts dollars, and the model has no price \
                     (price = {{ input_per_million = ..., output_per_million = ... }})",
                    model.name,
                    limit.name()
                ));
            }
        }
        let Some(auth) = &self.auth else {
            return Ok(());
        };
        if auth.keys_env.is_none() && auth.keys.is_empty() && self.admin.is_none() {
            return err(
                "[auth] names no key: set keys_env (unnamed keys), add [[auth.keys]], or make \
                 them over the admin API ([admin])"
                    .into(),
            );
        }
        let mut tags = std::collections::HashSet::new();
        for (k, tag) in auth.tags.iter().enumerate() {
            let at = format!("[[auth.tags]] {} ({:?})", k + 1, tag.name);
            if tag.name.trim().is_empty() {
                return err(format!("[[auth.tags]] {}: the name is empty", k + 1));
            }
            if !tags.insert(tag.name.as_str()) {
                return err(format!("{at}: the tag is configured twice"));
            }
            if let Some(limit) = tag.limits.iter().find(|l| l.resource == Resource::Usd)
                && let Some(model) = self.models.iter().find(|m| m.price.is_none())
            {
                return err(format!(
                    "{at}: {} counts dollars, and model {:?} has no price",
                    limit.name(),
                    model.name
                ));
            }
        }
        let mut names: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
        for (k, key) in auth.keys.iter().enumerate() {
            let at = format!("[[auth.keys]] {} ({:?})", k + 1, key.name);
            if key.name.trim().is_empty() {
                return err(format!("[[auth.keys]] {}: the name is empty", k + 1));
            }
            if key.name == crate::keys::UNNAMED {
                return err(format!(
                    "{at}: the name {:?} is the label of the unnamed keys (keys_env); choose another",
                    key.name
                ));
            }
            if let Some(first) = names.insert(key.name.as_str(), k + 1) {
                return err(format!(
                    "{at}: the name is given to [[auth.keys]] {first} too; each key's name is its own"
                ));
            }
            match (&key.key_env, &key.sha256) {
                (None, None) => {
                    return err(format!(
                        "{at}: no key: set key_env (the variable holding it) or sha256 (its digest)"
                    ));
                }
                (Some(_), Some(_)) => {
                    return err(format!("{at}: key_env and sha256 both set; keep one"));
                }
                (None, Some(hex)) => {
                    if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                        return err(format!(
                            "{at}: sha256 must be 64 hexadecimal digits (the SHA-256 of the key), \
                             and it has {} characters",
                            hex.len()
                        ));
                    }
                }
                (Some(_), None) => {}
            }
            for (i, tag) in key.tags.iter().enumerate() {
                if key.tags[..i].contains(tag) {
                    return err(format!("{at}: tags names {tag:?} twice"));
                }
            }
            if let Some(models) = &key.models {
                for model in models {
                    if !self.models.iter().any(|m| &m.name == model) {
                        return err(format!(
                            "{at}: models names {model:?}, which is not a configured model"
                        ));
                    }
                }
            }
            if let Some(limit) = key.limits.iter().find(|l| l.resource == Resource::Usd) {
                let usable = self.models.iter().filter(|m| {
                    (key.models.as_ref()).is_none_or(|allowed| allowed.contains(&m.name))
                });
                if let Some(model) = usable.into_iter().find(|m| m.price.is_none()) {
                    return err(format!(
                        "{at}: {} counts dollars, and model {:?}, which the key may use, has no price",
                        limit.name(),
                        model.name
                    ));
                }
            }
        }
        Ok(())
    }

    /// `[state]`: a `redis://` (or `unix://`) URL that parses; a timeout from 1 ms to 60 s.
    fn check_state(&self) -> Result<(), ConfigError> {
        let state = &self.state;
        if !(1..=60_000).contains(&state.state_timeout_ms) {
            return Err(ConfigError(format!(
                "[state] state_timeout_ms must be from 1 to 60000, not {}",
                state.state_timeout_ms
            )));
        }
        if let Some(url) = &state.redis_url {
            super::keys::redis_client(url)
                .map_err(|e| ConfigError(format!("[state] redis_url: {e}")))?;
        }
        Ok(())
    }
}
