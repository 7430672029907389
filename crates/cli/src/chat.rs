//! `choicewise chat`: send a chat completion request with `n` choices and show them as they
//! stream (choicewise-client does the HTTP; this only builds the request and shows it).

use std::fs::File;
use std::io::{BufWriter, IsTerminal, Read};
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use choicewise::plan::PlanUpstream;
use choicewise::{Completions, Dialect, Policy, Source};
use choicewise_client::Client;
use clap::Args;
use futures::Stream;
use serde_json::{Map, Value, json};

use crate::record::Recorder;
use crate::show;
use crate::upstream::{self, Item};
use crate::view::ViewArgs;
use crate::{Exit, live, replay, view};

/// The model asked for when neither `--model` nor `--request` names one.
pub const DEFAULT_MODEL: &str = "gpt-4o-mini";

#[derive(Debug, Args)]
pub struct ChatArgs {
    /// The prompt, sent as a user message (the words are joined with spaces). Without it, the
    /// prompt is read from standard input, unless that is a terminal.
    prompt: Vec<String>,
    /// How many choices to ask for.
    #[arg(short = 'n', value_name = "N")]
    n: Option<u32>,
    /// The model [default: gpt-4o-mini, unless --request names one; with a --base-url that is
    /// not OpenAI's, the first model the server lists at BASE_URL/models].
    #[arg(long, value_name = "MODEL")]
    model: Option<String>,
    /// A system message, put first (replacing the content of a system or developer message
    /// already first in --request).
    #[arg(long, value_name = "TEXT")]
    system: Option<String>,
    /// A full request body (JSON: messages, tools, response_format, anything). -n, --model,
    /// --system and the sampling flags override its fields; the prompt, if given, is appended
    /// as the last user message.
    #[arg(long, value_name = "FILE")]
    request: Option<PathBuf>,
    /// The most tokens each choice may generate (sent as max_tokens to chat and anthropic,
    /// max_output_tokens to responses).
    #[arg(long, value_name = "N")]
    max_tokens: Option<u64>,
    /// Sampling temperature (0 to 2).
    #[arg(long, value_name = "T", value_parser = parse_temperature)]
    temperature: Option<f64>,
    /// Nucleus sampling: the probability mass the tokens are drawn from (0 to 1).
    #[arg(long, value_name = "P", value_parser = parse_top_p)]
    top_p: Option<f64>,
    /// A seed, for providers that sample deterministically with one (chat only).
    #[arg(long, value_name = "N")]
    seed: Option<i64>,
    /// Stop generating at this text (repeatable; stop_sequences for anthropic; not in the
    /// responses API).
    #[arg(long, value_name = "TEXT")]
    stop: Vec<String>,
    /// Set any top-level request field: KEY=JSON, the value parsed as JSON, a bare word taken
    /// as a string (repeatable; applied last, so it overrides the flags above).
    #[arg(long, value_name = "KEY=JSON", value_parser = parse_param)]
    param: Vec<(String, Value)>,
    /// The API to call: chat (POST BASE_URL/chat/completions), responses (OpenAI's
    /// Responses API, BASE_URL/responses), anthropic (Anthropic's Messages API,
    /// BASE_URL/messages), gemini (BASE_URL/models/MODEL:streamGenerateContent) or bedrock
    /// (AWS Bedrock's ConverseStream, BASE_URL/model/MODEL/converse-stream, signed with the
    /// AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN of the environment for
    /// AWS_REGION); the request is reshaped for each.
    #[arg(long, value_name = "API", default_value = "chat", value_parser = upstream::api_parser())]
    api: Dialect,
    /// The API's base URL (a URL without a path, such as http://127.0.0.1:8080, means
    /// http://127.0.0.1:8080/v1; a trailing slash is ignored) [default: $OPENAI_BASE_URL, else
    /// https://api.openai.com/v1; with --api anthropic, $ANTHROPIC_BASE_URL, else
    /// https://api.anthropic.com/v1; gemini: $GEMINI_BASE_URL, else Google's v1beta; bedrock:
    /// $AWS_ENDPOINT_URL_BEDROCK_RUNTIME, else the region's runtime endpoint].
    // The doc comment is the --help text, plain text in a terminal: no `<...>` around URLs.
    #[allow(rustdoc::bare_urls)]
    #[arg(long, value_name = "URL")]
    base_url: Option<String>,
    /// The API key (sent as `Authorization: Bearer KEY`, `api-key: KEY` with --azure,
    /// `x-api-key: KEY` to anthropic, `x-goog-api-key: KEY` to gemini) [default:
    /// $OPENAI_API_KEY; with --api anthropic, $ANTHROPIC_API_KEY; gemini: $GEMINI_API_KEY;
    /// bedrock: $AWS_BEARER_TOKEN_BEDROCK, a Bedrock API key, else the request is signed].
    #[arg(long, value_name = "KEY")]
    api_key: Option<String>,
    /// Azure OpenAI: the api-version; BASE_URL is then the deployment's URL
    /// (https://RESOURCE.openai.azure.com/openai/deployments/DEPLOYMENT).
    // The --help text, as above.
    #[allow(rustdoc::bare_urls)]
    #[arg(long, value_name = "API_VERSION")]
    azure: Option<String>,
    #[command(flatten)]
    view: ViewArgs,
    /// Save the raw stream with its arrival times to FILE (`choicewise replay FILE` plays it
    /// back; format in docs/recording.md).
    #[arg(long, value_name = "FILE")]
    record: Option<PathBuf>,
    /// Send several requests at once and show all their choices side by side as one
    /// completion; --first and --vote then close the connections no longer needed. SPEC is
    /// K (K copies of the request, each with -n choices, default 1) or a comma-separated list
    /// of K and `[K*]API:MODEL[@URL]` items, mixing APIs and providers, e.g.
    /// `2*chat:gpt-4o-mini,responses:gpt-5-mini,anthropic:claude-sonnet-4-5`. An item with
    /// the command's --api uses --base-url and --api-key; another API uses its own
    /// environment variables (OPENAI_*, ANTHROPIC_*) unless @URL is given.
    #[arg(long, value_name = "SPEC", value_parser = upstream::parse_fan_out)]
    fan_out: Option<upstream::FanOutSpec>,
    /// Give up when the server sends nothing for this long, in seconds [default: 60].
    #[arg(long, value_name = "SECS", value_parser = parse_seconds)]
    idle_timeout: Option<Duration>,
    /// Tries after the first when a request fails before any answer: a failed connection,
    /// or the status 408, 429, 500, 502, 503, 504 or 529 (waiting what the server asks, else
    /// an exponential backoff). Once an answer streams, nothing is retried.
    #[arg(long, value_name = "N", default_value_t = 2)]
    retries: u32,
}

/// A number from `low` to `high`, both included (the range the APIs accept and `--help`
/// states: a value outside it is a usage error here, not a 400 from the provider).
fn parse_in_range(s: &str, low: f64, high: f64) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(x) if (low..=high).contains(&x) => Ok(x),
        Ok(x) if x.is_finite() => Err(format!("{s} is out of range: from {low} to {high}")),
        _ => Err(format!("{s:?} is not a number")),
    }
}

/// `--temperature`: 0 to 2.
fn parse_temperature(s: &str) -> Result<f64, String> {
    parse_in_range(s, 0.0, 2.0)
}

/// `--top-p`: 0 to 1.
fn parse_top_p(s: &str) -> Result<f64, String> {
    parse_in_range(s, 0.0, 1.0)
}

/// `KEY=JSON`: the value parsed as JSON, or taken as a string when it is not JSON.
fn parse_param(s: &str) -> Result<(String, Value), String> {
    let Some((key, value)) = s.split_once('=') else {
        return Err(format!("{s:?} is not KEY=JSON (no '=')"));
    };
    let key = key.trim();
    if key.is_empty() {
        return Err(format!("{s:?} has no key before '='"));
    }
    let value = serde_json::from_str(value).unwrap_or_else(|_| Value::String(value.to_string()));
    Ok((key.to_string(), value))
}

fn parse_seconds(s: &str) -> Result<Duration, String> {
    match s.parse::<f64>() {
        Ok(x) if x.is_finite() && x > 0.0 => Ok(Duration::from_secs_f64(x)),
        _ => Err(format!("{s:?} is not a number of seconds above 0")),
    }
}

/// The request body: `--request` (or `{}`), then the flags and the prompt over it. Without a
/// model from either, `default_model` (none: the model is left out, to be looked up).
fn build_request(
    base: Option<Value>,
    args: &ChatArgs,
    prompt: Option<String>,
    default_model: Option<&str>,
) -> Result<Value, String> {
    let mut body = match base {
        None => Map::new(),
        Some(Value::Object(body)) => body,
        Some(_) => return Err("--request: the request body must be a JSON object".into()),
    };
    match &args.model {
        Some(model) => {
            body.insert("model".into(), json!(model));
        }
        None => {
            if let Some(model) = default_model {
                body.entry("model").or_insert(json!(model));
            }
        }
    }
    if let Some(n) = args.n {
        body.insert("n".into(), json!(n));
    }
    if let Some(max) = args.max_tokens {
        body.remove("max_completion_tokens");
        body.insert("max_tokens".into(), json!(max));
    }
    if let Some(t) = args.temperature {
        body.insert("temperature".into(), json!(t));
    }
    if let Some(p) = args.top_p {
        body.insert("top_p".into(), json!(p));
    }
    if let Some(seed) = args.seed {
        body.insert("seed".into(), json!(seed));
    }
    if !args.stop.is_empty() {
        body.insert("stop".into(), json!(args.stop));
    }
    for (key, value) in &args.param {
        body.insert(key.clone(), value.clone());
    }
    let messages = body.entry("messages").or_insert(json!([]));
    let Some(messages) = messages.as_array_mut() else {
        return Err("--request: \"messages\" must be an array".into());
    };
    if let Some(system) = &args.system {
        let first_is_system = messages
            .first()
            .and_then(|m| m["role"].as_str())
            .is_some_and(|role| role == "system" || role == "developer");
        if first_is_system {
            messages[0]["content"] = json!(system);
        } else {
            messages.insert(0, json!({"role": "system", "content": system}));
        }
    }
    if let Some(prompt) = prompt {
        messages.push(json!({"role": "user", "content": prompt}));
    }
    if !messages
        .iter()
        .any(|m| m["role"] != "system" && m["role"] != "developer")
    {
        return Err("no prompt: give it as arguments, on standard input, or in --request".into());
    }
    // Ask for the provider's usage figures, as every front end does; a request that sets
    // stream_options keeps its own (null: send none).
    choicewise_client::ask_for_usage(&mut body);
    Ok(Value::Object(body))
}

/// `--confidence`: ask for each token's log-probability (`logprobs: true`), and with
/// `Some(k)` (the `top_k` measure) for its top `k` (`top_logprobs: k`) unless the request
/// already asks for some (its own `top_logprobs` kept).
fn ask_for_logprobs(request: &mut Value, top: Option<usize>) {
    let Some(body) = request.as_object_mut() else {
        return;
    };
    body.insert("logprobs".into(), json!(true));
    let Some(k) = top else { return };
    let asked = body.get("top_logprobs").and_then(Value::as_u64);
    if asked.is_none_or(|n| n == 0) {
        body.insert("top_logprobs".into(), json!(k));
    }
}

/// The prompt: the arguments, else standard input when it is not a terminal.
fn prompt(args: &ChatArgs) -> Result<Option<String>, String> {
    if !args.prompt.is_empty() {
        return Ok(Some(args.prompt.join(" ")));
    }
    let stdin = std::io::stdin();
    if stdin.is_terminal() {
        return Ok(None);
    }
    let mut text = String::new();
    stdin
        .lock()
        .read_to_string(&mut text)
        .map_err(|e| format!("cannot read the prompt from standard input: {e}"))?;
    let text = text.trim();
    Ok((!text.is_empty()).then(|| text.to_string()))
}

fn nonempty(value: &Option<String>) -> Option<&str> {
    value.as_deref().map(str::trim).filter(|v| !v.is_empty())
}

/// The base URL as given, made friendly to local servers: without its trailing slashes, and
/// with `/v1` when it has no path at all (`http://127.0.0.1:8080`). Azure deployment URLs are
/// only trimmed.
fn friendly_base_url(url: &str, azure: bool) -> String {
    let url = url.trim().trim_end_matches('/');
    match url.split_once("://") {
        Some((_, rest)) if !azure && !rest.is_empty() && !rest.contains(['/', '?', '#']) => {
            format!("{url}/v1")
        }
        _ => url.to_string(),
    }
}

/// The endpoint paths the client adds to a base URL itself.
const ENDPOINT_PATHS: [&str; 3] = ["/chat/completions", "/messages", "/responses"];

/// A base URL ending in an API's endpoint path (`…/v1/chat/completions`) is refused as a
/// usage error, in the words of the gateway's configuration check: the client adds the path
/// itself, and would ask `…/chat/completions/chat/completions` (a bare 404). `whence` names
/// where the URL came from (`--base-url`, `$OPENAI_BASE_URL`, a `--fan-out` item's `@URL`).
fn check_endpoint_path(url: &str, whence: &str) -> Result<(), Exit> {
    let trimmed = url.trim().trim_end_matches('/');
    let Some(endpoint) = ENDPOINT_PATHS.into_iter().find(|e| trimmed.ends_with(e)) else {
        return Ok(());
    };
    let base = &trimmed[..trimmed.len() - endpoint.len()];
    Err(Exit {
        message: format!(
            "{whence} {url:?} ends in the endpoint path {endpoint}; give the API's base URL \
             ({base:?}): choicewise adds {endpoint} itself"
        ),
        code: 2,
    })
}

/// Whether the base URL is OpenAI's own API, whose model list is no guide to a default.
fn is_openai(url: &str) -> bool {
    let host = url
        .split_once("://")
        .map_or(url, |(_, rest)| rest)
        .split(['/', ':', '?'])
        .next()
        .unwrap_or_default();
    host.eq_ignore_ascii_case("api.openai.com")
}

/// The model to ask for when none was given: OpenAI's default, or, for another server (a local
/// one serves one model or a few), the first model it lists at `/models` (said on stderr when
/// it lists several).
async fn default_model(
    client: &Client,
    base_url: Option<&str>,
    azure: bool,
) -> Result<String, String> {
    let Some(url) = base_url.filter(|u| !azure && !is_openai(u)) else {
        return Ok(DEFAULT_MODEL.to_string());
    };
    let models = client.models().await.map_err(|e| match e.kind() {
        // Answered, but not with a model list: naming a model is the way round it.
        choicewise_client::ClientErrorKind::InvalidResponse => format!(
            "no --model given, and the server's model list ({url}/models) could not be read: {e}; pass --model"
        ),
        // Down, refused, or an error status: what failed, in its own words.
        _ => e.to_string(),
    })?;
    match &models[..] {
        [] => Err(format!(
            "no --model given, and the server lists no model at {url}/models; pass --model"
        )),
        // The one model a local server serves: nothing to say.
        [one] => Ok(one.clone()),
        [first, ..] => {
            eprintln!(
                "choicewise: no --model given: using {first}, the first of the {} models {url}/models lists",
                models.len()
            );
            Ok(first.clone())
        }
    }
}

/// One request to send: the client for its API and endpoint, and its body in that API's
/// shape.
struct Upstream {
    client: Client,
    body: Value,
    model: String,
    api: Dialect,
}

impl Upstream {
    /// Where its choices come from, as the views name it.
    fn source(&self) -> view::SourceLabel {
        view::SourceLabel {
            api: self.api.to_string(),
            model: self.model.clone(),
            host: self.client.host(),
        }
    }
}

/// An environment variable, if set and not blank.
fn env_var(name: &str) -> Option<String> {
    std::env::var(name)
        .ok()
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
}

/// The client of one item: its API, base URL and key (see `--fan-out`), and whether its
/// base URL is a server other than the provider's own.
fn client_for(
    args: &ChatArgs,
    api: Dialect,
    url: Option<&str>,
    idle: Duration,
    model: &str,
) -> Result<(Client, Option<String>), Exit> {
    let own = api == args.api;
    let (key_env, url_env) = api.api().env_vars();
    let azure = args.azure.as_ref().filter(|_| own);
    let given = match url {
        Some(url) => Some((url.to_string(), "the --fan-out item's @URL".to_string())),
        None => match own.then(|| nonempty(&args.base_url)).flatten() {
            Some(url) => Some((url.to_string(), "--base-url".to_string())),
            None => env_var(url_env).map(|url| (url, format!("${url_env}"))),
        },
    };
    if let Some((url, whence)) = &given {
        check_endpoint_path(url, whence)?;
    }
    let base_url = given.map(|(u, _)| match api.api().bare_host_is_v1() {
        true => friendly_base_url(&u, azure.is_some()),
        // Gemini's base URL is its version's (`…/v1beta`): nothing added to a bare host.
        false => u.trim().trim_end_matches('/').to_string(),
    });
    let key = own
        .then(|| nonempty(&args.api_key).map(str::to_string))
        .flatten()
        .or_else(|| env_var(key_env));
    // The model is the URL's for Gemini (unused by the others).
    let mut builder = Client::builder().api(api).model(model);
    // Without one, the API's provider's.
    if let Some(url) = &base_url {
        builder = builder.base_url(url);
    }
    // The region of an API served per region, as AWS's tools read it.
    if api.api().regional_base_url("").is_some()
        && let Some(region) = env_var("AWS_REGION").or_else(|| env_var("AWS_DEFAULT_REGION"))
    {
        builder = builder.region(region);
    }
    // An API whose requests are signed (Bedrock's) signs with AWS's credentials from the
    // environment, for AWS's region, unless a key of its own is given.
    let signed = matches!(
        api.api().authorisation(),
        choicewise::upstream::Authorisation::SigV4 { .. }
    );
    match key {
        Some(key) => builder = builder.api_key(key),
        None if signed && let Some(credentials) = choicewise_client::AwsCredentials::from_env() => {
            builder = builder.aws_credentials(credentials);
        }
        None if base_url.is_none() => {
            let message = match api {
                Dialect::Chat => format!(
                    "no API key: pass --api-key or set {key_env} (or --base-url for a local server)"
                ),
                _ if own => format!(
                    "no API key for the {api} API: pass --api-key or set {key_env} (or --base-url for a local server)"
                ),
                _ => format!(
                    "no API key for the {api} API: set {key_env} (or give the item an @URL of a local server)"
                ),
            };
            return Err(Exit::from(message));
        }
        None => {}
    }
    if let Some(version) = azure {
        builder = builder.azure(version);
    }
    let client = builder
        .idle_timeout(idle)
        .max_retries(args.retries)
        .retry_server_errors(true)
        .build()
        .map_err(|e| e.to_string())?;
    Ok((client, base_url))
}

/// Every request of the run, in order: one, or the items of `--fan-out`.
async fn upstreams(
    args: &ChatArgs,
    request: &Value,
    idle: Duration,
) -> Result<Vec<Upstream>, Exit> {
    let items = args.fan_out.clone().map(|spec| spec.0).unwrap_or_else(|| {
        vec![Item {
            copies: 1,
            api: None,
            model: None,
            base_url: None,
        }]
    });
    let mut out = Vec::new();
    for item in items {
        let api = item.api.unwrap_or(args.api);
        let given = (item.model).or_else(|| request["model"].as_str().map(str::to_string));
        // Gemini names the model in its URL: known before its client is built.
        let url_model = match &given {
            Some(model) => model.clone(),
            None if api.api().path_names_model() => api.api().default_model().to_string(),
            None => String::new(),
        };
        let (client, base_url) = client_for(args, api, item.base_url.as_deref(), idle, &url_model)?;
        let model = match given {
            Some(model) => model,
            None if api.api().model_from_list() => {
                let azure = args.azure.is_some() && api == args.api;
                default_model(&client, base_url.as_deref(), azure).await?
            }
            None => api.api().default_model().to_string(),
        };
        let mut body = request.clone();
        body["model"] = json!(model);
        if args.view.confidence
            && !api.api().has_logprobs()
            && let Some(fields) = body.as_object_mut()
        {
            // Log-probabilities are a Chat Completions field: the other APIs' choices carry
            // none and do not vote under --confidence (its report names them).
            fields.remove("logprobs");
            fields.remove("top_logprobs");
        }
        let body = upstream::shape(api, &body)?;
        for _ in 0..item.copies {
            out.push(Upstream {
                client: client.clone(),
                body: body.clone(),
                model: model.clone(),
                api,
            });
        }
    }
    Ok(out)
}

pub async fn run(args: ChatArgs) -> Result<(), Exit> {
    let base = match &args.request {
        Some(path) => Some(replay::read_request(path).await?),
        None => None,
    };
    let mut request = build_request(base, &args, prompt(&args)?, None)?;
    // The pick is checked before anything is sent, over every choice the run asks for: the
    // fan-out's requests, each with the request's n.
    let copies = args
        .fan_out
        .as_ref()
        .map_or(1, |spec| spec.0.iter().map(|item| item.copies).sum());
    let per_request = request["n"].as_u64().unwrap_or(1).max(1);
    let samples = u32::try_from(copies as u64 * per_request).unwrap_or(u32::MAX);
    let policy = args.view.policy(Some(samples))?;
    if let Some(options) = policy.as_ref().and_then(Policy::confidence) {
        ask_for_logprobs(&mut request, options.asks_top_logprobs());
    }
    let idle = args
        .idle_timeout
        .unwrap_or(choicewise_client::DEFAULT_IDLE_TIMEOUT);
    let mut upstreams = upstreams(&args, &request, idle).await?;

    // One sample per choice, planned over the upstreams: each gets its share in one request
    // of its n when all start at once, else one request per sample, started window by
    // window or after the warmup of --confidence, only while the vote is undecided.
    let plan = match &policy {
        Some(policy) => Some(policy.plan(&vec![PlanUpstream::new(1).native_n(true); copies])),
        None if copies > 1 => Some(
            view::every_sample(samples)?.plan(&vec![PlanUpstream::new(1).native_n(true); copies]),
        ),
        None => None,
    };
    if let Some(plan) = plan.filter(|plan| plan.requests().len() > 1) {
        if args.record.is_some() {
            let why = match copies {
                1 => "a vote started on demand sends one request per choice",
                _ => "it cannot be used with --fan-out",
            };
            return Err(Exit::from(format!("--record saves one stream; {why}")));
        }
        let start = Instant::now();
        // Each planned request: its upstream, its body asking for its samples.
        let requests: Vec<(&Upstream, Value)> = (plan.requests().iter())
            .map(|r| {
                let upstream = &upstreams[r.upstream()];
                let mut body = upstream.body.clone();
                let n = r.samples().len() as u64;
                if n != per_request {
                    body["n"] = json!(n);
                }
                (upstream, body)
            })
            .collect();
        let title = fan_out_title(
            requests.iter().map(|(u, _)| u.model.as_str()),
            plan.requests()[0].samples().len(),
        );
        let models: Vec<&str> = upstreams.iter().map(|u| u.model.as_str()).collect();
        let model = models
            .iter()
            .all(|m| *m == models[0])
            .then(|| models[0].to_string());
        // Each choice's source: the requests number their choices in blocks, in order.
        let sources = view::Sources::new(
            requests.iter().map(|(u, _)| u.source()).collect(),
            plan.requests()[0].samples().len(),
        );
        let sources_of_requests: Vec<(Client, Value)> = (requests.into_iter())
            .map(|(u, body)| (u.client.clone(), body))
            .collect();
        let k = sources_of_requests.len();
        let completions = match plan.on_demand() {
            true => Completions::builder().samples(k, move |i| {
                let (client, body) = &sources_of_requests[i];
                client.source(body.clone())
            }),
            false => Completions::builder().fan_out(
                (sources_of_requests.into_iter()).map(|(client, body)| client.source(body)),
            ),
        };
        let options = live::Options {
            start,
            title,
            model,
            sources,
        };
        return show(completions, policy, &args, options).await;
    }
    let Upstream {
        client,
        body: request,
        ..
    } = upstreams.remove(0);

    // Open the recording first: a bad path fails before anything is spent.
    let recording = match &args.record {
        Some(path) => {
            let file =
                File::create(path).map_err(|e| format!("cannot create {}: {e}", path.display()))?;
            Some((
                path.clone(),
                Arc::new(Mutex::new(Recording::default())),
                file,
            ))
        }
        None => None,
    };

    let start = Instant::now();
    let body = client.stream(&request).await.map_err(|e| e.to_string())?;
    let (source, recording) = match recording {
        None => (Source::sse(body), None),
        Some((path, shared, file)) => {
            shared.lock().unwrap_or_else(|p| p.into_inner()).recorder =
                Some(Recorder::new(BufWriter::new(file), start));
            let tap = Tap {
                inner: Box::pin(body),
                recording: shared.clone(),
            };
            (Source::sse(tap), Some((path, shared)))
        }
    };
    let completions = Completions::new(source.request(request.clone()).idle_timeout(idle));

    let model = request["model"].as_str().map(str::to_string);
    let n = request["n"].as_u64().unwrap_or(1);
    let title = format!(
        "chat · {} · n={n}",
        model.as_deref().unwrap_or(DEFAULT_MODEL)
    );
    let options = live::Options {
        start,
        title,
        model,
        sources: view::Sources::default(),
    };
    let shown = show(completions, policy, &args, options).await;

    // Whatever arrived is saved, however the view ended.
    if let Some((path, shared)) = recording {
        let mut state = shared.lock().unwrap_or_else(|p| p.into_inner());
        let finished = state.recorder.take().map(Recorder::finish);
        let failed = state
            .error
            .take()
            .map(Err)
            .or(finished.map(|f| f.map(drop)));
        if let Some(Err(e)) = failed {
            let message = format!("cannot write the recording {}: {e}", path.display());
            return Err(shown.err().unwrap_or(Exit::from(message)));
        }
    }
    shown
}

/// `chat · gpt-4o-mini · 3 requests × n=1`, or, for different models,
/// `chat · 4 requests: 2 × gpt-4o-mini, gpt-5-mini, claude-sonnet-4-5`: the models of the
/// requests, in order, each asking for `n` choices.
fn fan_out_title<'a>(models: impl Iterator<Item = &'a str>, n: usize) -> String {
    let mut k = 0;
    let mut runs: Vec<(&str, usize)> = Vec::new();
    for model in models {
        k += 1;
        match runs.last_mut() {
            Some((last, count)) if *last == model => *count += 1,
            _ => runs.push((model, 1)),
        }
    }
    match &runs[..] {
        [(model, _)] => format!("chat · {model} · {k} requests × n={n}"),
        _ => {
            let list: Vec<String> = runs
                .iter()
                .map(|(model, count)| match count {
                    1 => model.to_string(),
                    c => format!("{c} × {model}"),
                })
                .collect();
            format!("chat · {k} requests: {}", list.join(", "))
        }
    }
}

/// Shows the completion until it ends, or until Ctrl-C.
async fn show(
    completions: Completions,
    pick: Option<Policy>,
    args: &ChatArgs,
    options: live::Options,
) -> Result<(), Exit> {
    show::show(completions, pick, &args.view, options).await
}

#[derive(Default)]
struct Recording {
    recorder: Option<Recorder<BufWriter<File>>>,
    /// The first write error; the stream goes on without recording.
    error: Option<std::io::Error>,
}

/// Passes the body's reads through, recording each with its arrival time.
struct Tap<S> {
    inner: S,
    recording: Arc<Mutex<Recording>>,
}

impl<S, B, E> Stream for Tap<S>
where
    S: Stream<Item = Result<B, E>> + Unpin,
    B: AsRef<[u8]>,
{
    type Item = Result<B, E>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let next = Pin::new(&mut self.inner).poll_next(cx);
        if let Poll::Ready(Some(Ok(bytes))) = &next {
            let arrived = Instant::now();
            let mut state = self.recording.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(recorder) = state.recorder.as_mut()
                && let Err(e) = recorder.write(bytes.as_ref(), arrived)
            {
                state.recorder = None;
                state.error = Some(e);
            }
        }
        next
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        chat: ChatArgs,
    }

    fn args(list: &[&str]) -> ChatArgs {
        Cli::parse_from(std::iter::once("chat").chain(list.iter().copied())).chat
    }

    #[test]
    fn flags_fill_an_empty_request() {
        let a = args(&["-n", "3", "--system", "Be brief.", "hi", "there"]);
        let r = build_request(None, &a, Some("hi there".into()), Some(DEFAULT_MODEL)).unwrap();
        assert_eq!(
            r,
            json!({
                "model": "gpt-4o-mini",
                "n": 3,
                "messages": [
                    {"role": "system", "content": "Be brief."},
                    {"role": "user", "content": "hi there"},
                ],
                "stream_options": {"include_usage": true},
            })
        );
    }

    #[test]
    fn flags_override_or_fill_a_request_file() {
        let base = json!({
            "model": "gpt-4.1",
            "n": 2,
            "tools": [{"type": "function", "function": {"name": "f"}}],
            "messages": [{"role": "developer", "content": "old"}, {"role": "user", "content": "q"}],
            "stream_options": null,
        });
        let r = build_request(Some(base.clone()), &args(&[]), None, Some(DEFAULT_MODEL)).unwrap();
        assert_eq!(r["model"], "gpt-4.1");
        assert_eq!(r["n"], 2);
        assert!(r.get("stream_options").is_none());
        assert_eq!(r["tools"], base["tools"]);

        let a = args(&["--model", "o4-mini", "-n", "4", "--system", "new"]);
        let r = build_request(Some(base), &a, Some("more".into()), None).unwrap();
        assert_eq!((&r["model"], &r["n"]), (&json!("o4-mini"), &json!(4)));
        assert_eq!(
            r["messages"],
            json!([
                {"role": "developer", "content": "new"},
                {"role": "user", "content": "q"},
                {"role": "user", "content": "more"},
            ])
        );
    }

    #[test]
    fn without_a_default_the_model_is_left_to_look_up() {
        let r = build_request(None, &args(&[]), Some("hi".into()), None).unwrap();
        assert!(r.get("model").is_none());
    }

    #[test]
    fn base_urls_of_local_servers() {
        let f = |u: &str| friendly_base_url(u, false);
        assert_eq!(f("http://127.0.0.1:8080"), "http://127.0.0.1:8080/v1");
        assert_eq!(f("http://127.0.0.1:8080/"), "http://127.0.0.1:8080/v1");
        assert_eq!(f(" http://localhost:8000/v1/ "), "http://localhost:8000/v1");
        assert_eq!(
            f("https://openrouter.ai/api/v1"),
            "https://openrouter.ai/api/v1"
        );
        assert_eq!(
            friendly_base_url("https://r.openai.azure.com/", true),
            "https://r.openai.azure.com"
        );
        assert!(is_openai("https://api.openai.com/v1"));
        assert!(is_openai("https://API.openai.com:443/v1/"));
        assert!(!is_openai("http://127.0.0.1:8080/v1"));
        assert!(!is_openai("https://api.openai.com.example/v1"));
    }

    #[test]
    fn confidence_asks_for_top_logprobs_unless_the_request_does() {
        // The sampled measure: each token's own log-probability, no top-k.
        let mut r = json!({"messages": []});
        ask_for_logprobs(&mut r, None);
        assert_eq!(
            (&r["logprobs"], r.get("top_logprobs")),
            (&json!(true), None)
        );
        let mut r = json!({"messages": []});
        ask_for_logprobs(&mut r, Some(5));
        assert_eq!(
            (&r["logprobs"], &r["top_logprobs"]),
            (&json!(true), &json!(5))
        );
        let mut r = json!({"messages": [], "top_logprobs": 3});
        ask_for_logprobs(&mut r, Some(5));
        assert_eq!(
            (&r["logprobs"], &r["top_logprobs"]),
            (&json!(true), &json!(3))
        );
        let mut r = json!({"messages": [], "logprobs": false, "top_logprobs": 0});
        ask_for_logprobs(&mut r, Some(5));
        assert_eq!(
            (&r["logprobs"], &r["top_logprobs"]),
            (&json!(true), &json!(5))
        );
    }

    #[test]
    fn sampling_flags_out_of_range_are_usage_errors() {
        let parse = |list: &[&str]| {
            Cli::try_parse_from(std::iter::once("chat").chain(list.iter().copied()))
                .map(|cli| cli.chat)
        };
        let a = parse(&["--temperature", "2", "--top-p", "0", "hi"]).unwrap();
        assert_eq!((a.temperature, a.top_p), (Some(2.0), Some(0.0)));
        for bad in [
            &["--temperature", "5"][..],
            &["--temperature", "-0.1"],
            &["--top-p", "1.5"],
            &["--temperature", "nan"],
        ] {
            let e = parse(bad)
                .err()
                .unwrap_or_else(|| panic!("{bad:?} accepted"));
            assert_eq!(e.exit_code(), 2, "{bad:?}");
        }
        let e = parse(&["--temperature", "5"]).err().unwrap().to_string();
        assert!(e.contains("5 is out of range: from 0 to 2"), "{e}");
    }

    #[test]
    fn a_base_url_ending_in_an_endpoint_path_is_refused() {
        let e = check_endpoint_path("http://127.0.0.1:8080/v1/chat/completions/", "--base-url")
            .unwrap_err();
        assert_eq!(e.code, 2);
        assert_eq!(
            e.message,
            "--base-url \"http://127.0.0.1:8080/v1/chat/completions/\" ends in the endpoint path \
             /chat/completions; give the API's base URL (\"http://127.0.0.1:8080/v1\"): choicewise \
             adds /chat/completions itself"
        );
        assert!(check_endpoint_path("https://api.anthropic.com/v1/messages", "x").is_err());
        assert!(check_endpoint_path("http://h/v1", "x").is_ok());
        assert!(check_endpoint_path("http://h/v1/responses-proxy", "x").is_ok());
    }

    #[test]
    fn a_request_without_a_prompt_is_refused() {
        let e = build_request(None, &args(&["--system", "s"]), None, None).unwrap_err();
        assert!(e.starts_with("no prompt"), "{e}");
        let e = build_request(Some(json!([])), &args(&[]), Some("x".into()), None).unwrap_err();
        assert!(e.contains("JSON object"), "{e}");
    }
}
