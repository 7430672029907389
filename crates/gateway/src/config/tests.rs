use super::limits::memory_available;
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
    assert!(vote("samples = 3\n[models.choicewise.confidence]")[0].contains("(8, the default)"));
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
    let zero =
        Config::from_toml(&format!("[[models]]\nname = \"m\"\n{UPSTREAM}max_n = 0\n")).unwrap_err();
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

/// A config of one model `small` (priced) after these lines.
fn keyed(lines: &str) -> Result<Config, ConfigError> {
    Config::from_toml(&format!(
        "{lines}\n[[models]]\nname = \"small\"\nprice = {{ input_per_million = 0.15, output_per_million = 0.60 }}\n{UPSTREAM}"
    ))
}

#[test]
fn named_keys_limits_and_prices_are_read() {
    let config = keyed(
        "[auth]\nkeys_env = \"OLD\"\n[[auth.keys]]\nname = \"team-a\"\nkey_env = \"TEAM_A_KEY\"\nmodels = [\"small\"]\ntags = [\"batch\"]\n\
         [auth.keys.limits]\nrequests_per_minute = 60\ntokens_per_minute = 20000\nsamples_per_minute = 200\nusd_per_day = 1.0\n\
         [[auth.tags]]\nname = \"batch\"\n[auth.tags.limits]\nrequests_per_hour = 1000\n\
         [state]\nredis_url = \"redis://127.0.0.1:6379\"\non_state_error = \"refuse\"\nstate_timeout_ms = 20",
    )
    .unwrap();
    let auth = config.auth.as_ref().unwrap();
    assert_eq!(auth.keys_env.as_deref(), Some("OLD"));
    let key = &auth.keys[0];
    let names: Vec<String> = key.limits.iter().map(|l| l.name()).collect();
    assert_eq!(
        names,
        [
            "requests_per_minute",
            "samples_per_minute",
            "tokens_per_minute",
            "usd_per_day"
        ]
    );
    let usd = key.limits.iter().last().unwrap();
    assert_eq!((usd.resource, usd.window), (Resource::Usd, Window::Day));
    assert_eq!(usd.amount, 1_000_000_000, "nano-dollars");
    assert_eq!(usd.stated(), "$1.00 a day");
    assert_eq!(auth.tags[0].limits.len(), 1);
    assert_eq!(config.state.on_state_error, OnStateError::Refuse);
    assert_eq!(config.state.state_timeout_ms, 20);
    let price = config.models[0].price.unwrap();
    assert_eq!(price.output_per_million, 0.6);
}

#[test]
fn bad_keys_are_refused_naming_what_and_where() {
    let sha = "a".repeat(64);
    let cases = [
        (
            format!(
                "[[auth.keys]]\nname = \"team-a\"\nsha256 = \"{sha}\"\n[[auth.keys]]\nname = \"team-a\"\nkey_env = \"B\""
            ),
            "[[auth.keys]] 2 (\"team-a\"): the name is given to [[auth.keys]] 1 too",
        ),
        (
            "[[auth.keys]]\nname = \"a\"\nkey_env = \"A\"\nmodels = [\"large\"]".into(),
            "[[auth.keys]] 1 (\"a\"): models names \"large\", which is not a configured model",
        ),
        (
            "[[auth.keys]]\nname = \"a\"\nkey_env = \"A\"\n[auth.keys.limits]\nrequests_per_minute = -1".into(),
            "`requests_per_minute` must be a whole number, 0 or more, not -1",
        ),
        (
            "[[auth.keys]]\nname = \"a\"\nkey_env = \"A\"\n[auth.keys.limits]\nrequests_per_mnute = 5".into(),
            "`requests_per_mnute` is not a limit",
        ),
        (
            "[[auth.keys]]\nname = \"a\"\nkey_env = \"A\"\n[auth.keys.limits]\nusd_per_day = -0.5".into(),
            "`usd_per_day` must be a number of dollars from 0 to 1000000, not -0.5",
        ),
        (
            "[[auth.keys]]\nname = \"a\"".into(),
            "[[auth.keys]] 1 (\"a\"): no key: set key_env",
        ),
        (
            "[[auth.keys]]\nname = \"a\"\nsha256 = \"abc\"".into(),
            "sha256 must be 64 hexadecimal digits",
        ),
        (
            "[[auth.keys]]\nname = \"(unnamed)\"\nkey_env = \"A\"".into(),
            "the label of the unnamed keys",
        ),
        (
            "[auth]\n".into(),
            "[auth] names no key",
        ),
        (
            "[[auth.keys]]\nname = \"a\"\nkey_env = \"A\"\ntags = [\"t\", \"t\"]".into(),
            "[[auth.keys]] 1 (\"a\"): tags names \"t\" twice",
        ),
        (
            "[state]\nredis_url = \"http://127.0.0.1:6379\"".into(),
            "[state] redis_url: must be a redis:// URL",
        ),
        (
            "[state]\nstate_timeout_ms = 0".into(),
            "[state] state_timeout_ms must be from 1 to 60000",
        ),
        (
            "[state]\non_state_error = \"maybe\"".into(),
            "unknown variant `maybe`",
        ),
    ];
    for (lines, expected) in cases {
        let e = keyed(&lines).unwrap_err().to_string();
        assert!(e.contains(expected), "{lines}\n=> {e}");
    }
    // A limit's error names its table's line.
    let e = keyed("[[auth.keys]]\nname = \"a\"\nkey_env = \"A\"\n[auth.keys.limits]\nrequests_per_minute = -1")
        .unwrap_err()
        .to_string();
    assert!(e.contains("line 4"), "{e}");
}

#[test]
fn a_bad_price_is_refused_naming_the_model() {
    let priced = |price: &str| {
        Config::from_toml(&format!(
            "[[models]]\nname = \"small\"\nprice = {price}\n{UPSTREAM}"
        ))
        .map(drop)
        .unwrap_err()
        .to_string()
    };
    let e = priced("{ input_per_million = \"cheap\", output_per_million = 1 }");
    assert!(e.contains("line 3") && e.contains("invalid type"), "{e}");
    let e = priced("{ input_per_million = 1.0 }");
    assert!(e.contains("missing field `output_per_million`"), "{e}");
    let e = priced("{ input_per_million = -1.0, output_per_million = 1 }");
    assert!(
        e.contains("model \"small\": price.input_per_million must be a number of dollars"),
        "{e}"
    );
    // Dollars counted of a model without a price.
    let e = Config::from_toml(&format!(
        "[[auth.keys]]\nname = \"a\"\nkey_env = \"A\"\n[auth.keys.limits]\nusd_per_day = 1\n[[models]]\nname = \"free\"\n{UPSTREAM}"
    ))
    .unwrap_err()
    .to_string();
    assert!(
        e.contains(
            "usd_per_day counts dollars, and model \"free\", which the key may use, has no price"
        ),
        "{e}"
    );
}

#[test]
fn the_check_names_keys_and_limits_never_a_key() {
    let config = keyed(
        "[auth]\nkeys_env = \"OLD\"\n[[auth.keys]]\nname = \"team-a\"\nkey_env = \"TEAM_A_KEY\"\nmodels = [\"small\"]\n\
         [auth.keys.limits]\nrequests_per_minute = 60\nusd_per_day = 1.5\n\
         [state]\nredis_url = \"redis://:pw@127.0.0.1:6379\"",
    )
    .unwrap();
    let env = |name: &str| match name {
        "OLD" => Some("sk-old".to_string()),
        "TEAM_A_KEY" => Some("sk-team-a".to_string()),
        _ => None,
    };
    let text = config.check_with_env(None, env).unwrap().to_string();
    assert!(text.contains("auth: client keys from $OLD\n"), "{text}");
    assert!(
        text.contains(
            "auth: key \"team-a\" from $TEAM_A_KEY, models [\"small\"]; limits requests_per_minute (60 a minute), usd_per_day ($1.50 a day)\n"
        ),
        "{text}"
    );
    assert!(
        text.contains("state: the limits' counts in redis://:***@127.0.0.1:6379 (on_state_error = \"allow\", state_timeout_ms = 50)"),
        "{text}"
    );
    assert!(
        text.contains("price $0.15 in, $0.6 out per million tokens"),
        "{text}"
    );
    for secret in ["sk-old", "sk-team-a", "pw@"] {
        assert!(!text.contains(secret), "{secret}: {text}");
    }
    // Two names for one key: refused, naming both tables.
    let twice = keyed(
        "[[auth.keys]]\nname = \"a\"\nkey_env = \"A\"\n[[auth.keys]]\nname = \"b\"\nkey_env = \"B\"",
    )
    .unwrap();
    let e = twice
        .check_with_env(None, |_| Some("same".into()))
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        "[[auth.keys]] 2 (\"b\"): the same key as [[auth.keys]] 1; each key's name is its own"
    );
}

#[test]
fn a_model_whose_answers_cannot_fit_the_memory_mark_is_warned_of() {
    let warned = |limits: &str, pick: &str| {
        Config::from_toml(&format!(
            "[limits]\n{limits}\n[[models]]\nname = \"m\"\n{pick}\n{UPSTREAM}"
        ))
        .unwrap()
        .warnings()
    };
    // 16 MiB a choice × 4: 64 MiB a sample; a mark of 200 MiB holds 3 of them.
    let limits = "memory_high_watermark_mb = 200\nmemory_low_watermark_mb = 100";
    let parsed = Config::from_toml(&format!(
        "[limits]\n{limits}\n[[models]]\nname = \"m\"\n{UPSTREAM}"
    ))
    .unwrap();
    assert_eq!(parsed.limits.answer_worst(16), 1 << 30);
    assert_eq!(parsed.limits.samples_within(200 << 20), Some(3));
    assert_eq!(parsed.limits.samples_within(0), None);
    let w = warned(limits, "");
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(
        w[0].contains("a request of more than 3 of the 16 samples")
            && w[0].contains("lower [limits] max_answer_bytes to at most 3 MiB"),
        "{w:?}"
    );
    let w = warned(
        limits,
        "[models.choicewise]\nselect = \"vote\"\nsamples = 8",
    );
    assert!(
        w[0].contains("its default of 8 sample(s) may take 512 MiB")
            && w[0].contains("unless they ask for at most 3")
            && w[0].contains("at most 6 MiB"),
        "{w:?}"
    );
    // Caps that fit, or no ceiling: nothing to say.
    assert!(warned(&format!("{limits}\nmax_answer_bytes = 3145728"), "").is_empty());
    assert!(warned("memory_high_watermark_mb = 0", "").is_empty());
}
