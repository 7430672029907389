//! Keys with names, limits and budgets (`[[auth.keys]]`, `[models.limits]`, `[state]`), over
//! real sockets: the counts in the process, and in a `redis-server` started here on a free
//! port of 127.0.0.1 with a directory of its own, shared by two gateways.
//!
//! The Redis tests need `redis-server` (Debian's package): where it cannot be found they
//! fail under CI (`CI=true`) and are skipped, saying why, elsewhere.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use choicewise_gateway::{Config, Gateway};
use choicewise_testserver::TestServer;
use serde_json::{Value, json};
use tokio::sync::oneshot;

use crate::common::{CHAT_OK, metrics_with, start};

/// The key of `team-a` (`TEAM_A_KEY`), of `team-b` (`TEAM_B_KEY`), and the unnamed one
/// (`OLD_KEYS`).
fn env(name: &str) -> Option<String> {
    match name {
        "TEAM_A_KEY" => Some("sk-team-a".into()),
        "TEAM_B_KEY" => Some("sk-team-b".into()),
        "OLD_KEYS" => Some("sk-old".into()),
        "OPERATOR_KEY" => Some("sk-operator".into()),
        _ => None,
    }
}

/// An upstream answering every sample "ok" with its usage: 7 prompt tokens, 1 generated.
async fn upstream() -> TestServer {
    start(TestServer::builder().body(CHAT_OK)).await
}

/// Model `small` (priced at $10,000 a million prompt tokens and $30,000 a million generated
/// ones: a sample of 7 and 1 tokens costs $0.10) and model `large`, on `upstream`, asked one
/// request per sample.
fn models(upstream: &TestServer, limits: &str) -> String {
    let url = upstream.base_url();
    format!(
        "[[models]]\nname = \"small\"\nprice = {{ input_per_million = 10000.0, output_per_million = 30000.0 }}\n{limits}\n\
         [[models.upstreams]]\napi = \"chat\"\nbase_url = \"{url}\"\nmodel = \"up\"\nn = \"fan-out\"\n\
         [[models]]\nname = \"large\"\nprice = {{ input_per_million = 1.0, output_per_million = 1.0 }}\n\
         [[models.upstreams]]\napi = \"chat\"\nbase_url = \"{url}\"\nmodel = \"up\"\nn = \"fan-out\"\n"
    )
}

/// A gateway served on a free port until its sender is dropped or sent to.
struct Served {
    addr: SocketAddr,
    /// The gateway served (its keys reloaded while it serves).
    gateway: Gateway,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl Served {
    async fn start(toml: &str) -> Served {
        let config = Config::from_toml(toml).unwrap();
        let gateway = Gateway::with_env(&config, env).unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let serving = gateway.clone();
        let task = tokio::spawn(async move {
            let _ = serving
                .serve_on(listener, async move {
                    let _ = stopped.await;
                })
                .await;
        });
        Served {
            addr,
            gateway,
            stop: Some(stop),
            task,
        }
    }

    /// Stops it: no new connections, its open answers finished.
    async fn stop(mut self) {
        drop(self.stop.take());
        let _ = tokio::time::timeout(Duration::from_secs(10), &mut self.task).await;
    }
}

fn ask(model: &str, samples: Option<u32>) -> Value {
    let mut body = json!({
        "model": model,
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 1,
    });
    if let Some(samples) = samples {
        body["choicewise"] = json!({"select": "vote", "samples": samples});
    }
    body
}

async fn post(
    client: &reqwest::Client,
    addr: SocketAddr,
    path: &str,
    key: &str,
    body: &Value,
) -> reqwest::Response {
    client
        .post(format!("http://{addr}{path}"))
        .bearer_auth(key)
        .header("x-api-key", key)
        .json(body)
        .send()
        .await
        .unwrap()
}

/// What a refusal says: its status, `Retry-After` and JSON body.
async fn refusal(response: reqwest::Response) -> (u16, Option<u64>, Value) {
    let status = response.status().as_u16();
    let wait = (response.headers().get("retry-after")).and_then(|v| v.to_str().ok()?.parse().ok());
    (status, wait, response.json().await.unwrap())
}

/// The key is checked on every `/v1` route and every method of it, before the method is
/// judged (405) and before a body route takes a slot; the unknown `/v1` path is a 404 to
/// anyone.
#[tokio::test]
async fn the_key_comes_first_on_every_method_of_every_v1_route() {
    let upstream = upstream().await;
    let toml = format!(
        "[auth]\n[[auth.keys]]\nname = \"team-a\"\nkey_env = \"TEAM_A_KEY\"\n{}",
        models(&upstream, "")
    );
    let served = Served::start(&toml).await;
    let client = reqwest::Client::new();
    let send = |method: reqwest::Method, path: &str, key: Option<&str>| {
        let mut r = client.request(method, format!("http://{}{path}", served.addr));
        if let Some(key) = key {
            r = r.bearer_auth(key);
        }
        r.header("content-type", "application/json")
            .body("{}")
            .send()
    };
    use reqwest::Method;
    for (method, path, keyed) in [
        (Method::POST, "/v1/chat/completions", 400),
        (Method::GET, "/v1/chat/completions", 405),
        (Method::DELETE, "/v1/chat/completions", 405),
        (Method::POST, "/v1/messages/count_tokens", 400),
        (Method::GET, "/v1/messages/count_tokens", 405),
        (Method::GET, "/v1/models", 200),
        (Method::POST, "/v1/models", 405),
        (Method::GET, "/v1/models/small", 200),
        (Method::GET, "/v1/key", 200),
        (Method::GET, "/v1/v1/models", 200),
    ] {
        let without = send(method.clone(), path, None).await.unwrap();
        assert_eq!(without.status(), 401, "{method} {path} without a key");
        let wrong = send(method.clone(), path, Some("sk-wrong")).await.unwrap();
        assert_eq!(wrong.status(), 401, "{method} {path} with a wrong key");
        let with = send(method.clone(), path, Some("sk-team-a")).await.unwrap();
        assert_eq!(with.status(), keyed, "{method} {path} with the key");
    }
    let unknown = send(Method::GET, "/v1/nothing", None).await.unwrap();
    assert_eq!(unknown.status(), 404);
    assert_eq!(upstream.request_count(), 0);
    served.stop().await;
}

/// One kept-alive connection meets the keys as they are at each of its requests: a key sent
/// again on it is the same caller, another key on it is that key, and a key taken away (the
/// keys reloaded without it) is refused on the very connection that used it.
#[tokio::test]
async fn a_kept_alive_connection_meets_the_keys_as_they_are_now() {
    use http_body_util::BodyExt;
    let up = upstream().await;
    let team_b =
        "[[auth.keys]]\nname = \"team-b\"\nkey_env = \"TEAM_B_KEY\"\nmodels = [\"large\"]\n";
    let both = format!(
        "[auth]\n[[auth.keys]]\nname = \"team-a\"\nkey_env = \"TEAM_A_KEY\"\n{team_b}{}",
        models(&up, "")
    );
    let served = Served::start(&both).await;
    let addr = served.addr;
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut send, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tcp))
            .await
            .unwrap();
    tokio::spawn(connection);
    // One request on the connection: its status.
    let mut ask = async |key: &str, model: &str| {
        let body = serde_json::to_vec(&ask(model, None)).unwrap();
        let request = hyper::Request::post("/v1/chat/completions")
            .header("host", addr.to_string())
            .header("authorization", format!("Bearer {key}"))
            .header("content-type", "application/json")
            .body(http_body_util::Full::new(bytes::Bytes::from(body)))
            .unwrap();
        send.ready().await.unwrap();
        let response = send.send_request(request).await.unwrap();
        let status = response.status().as_u16();
        let _ = response.into_body().collect().await.unwrap();
        status
    };
    assert_eq!(ask("sk-team-a", "small").await, 200);
    assert_eq!(ask("sk-team-a", "small").await, 200);
    // team-b on the same connection is team-b, kept to its models.
    assert_eq!(ask("sk-team-b", "small").await, 403);
    assert_eq!(ask("sk-team-b", "large").await, 200);
    assert_eq!(ask("sk-team-a", "large").await, 200);
    assert_eq!(ask("sk-wrong", "small").await, 401);
    // team-a taken away: refused on this connection at once.
    let without_a = format!("[auth]\n{team_b}{}", models(&up, ""));
    (served.gateway)
        .reload_with_env(&Config::from_toml(&without_a).unwrap(), env)
        .unwrap();
    assert_eq!(ask("sk-team-a", "small").await, 401);
    assert_eq!(ask("sk-team-b", "large").await, 200);
    assert!(
        !send.is_closed(),
        "every request went over the one connection"
    );
    metrics_with(
        addr,
        &[
            "choicewise_key_requests_total{key=\"team-a\",status=\"200\"} 3",
            "choicewise_key_requests_total{key=\"team-b\",status=\"403\"} 1",
            "choicewise_key_requests_total{key=\"team-b\",status=\"200\"} 2",
        ],
    )
    .await;
    drop(send);
    served.stop().await;
}

#[tokio::test]
async fn named_keys_are_told_apart_limited_and_kept_to_their_models() {
    let up = upstream().await;
    let toml = format!(
        "[auth]\nkeys_env = \"OLD_KEYS\"\n\
         [[auth.keys]]\nname = \"team-a\"\nkey_env = \"TEAM_A_KEY\"\nmodels = [\"small\"]\n\
         [auth.keys.limits]\nrequests_per_minute = 3\n\
         [[auth.keys]]\nname = \"team-b\"\nsha256 = \"{}\"\n{}",
        hex_sha256(b"sk-team-b"),
        models(&up, "")
    );
    let gw = Served::start(&toml).await;
    let client = reqwest::Client::new();
    let chat = "/v1/chat/completions";
    // Outside its models: 403, before anything is counted.
    let (status, _, body) =
        refusal(post(&client, gw.addr, chat, "sk-team-a", &ask("large", None)).await).await;
    assert_eq!(status, 403);
    assert_eq!(body["error"]["code"], "model_not_allowed", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("`team-a`"),
        "{body}"
    );
    for _ in 0..3 {
        let r = post(&client, gw.addr, chat, "sk-team-a", &ask("small", None)).await;
        assert_eq!(r.status(), 200);
    }
    // The fourth of the minute, in each client API's own error shape.
    let (status, wait, body) =
        refusal(post(&client, gw.addr, chat, "sk-team-a", &ask("small", None)).await).await;
    assert_eq!(status, 429);
    assert!((1..=60).contains(&wait.unwrap()), "{wait:?}");
    assert_eq!(body["error"]["code"], "rate_limit_exceeded", "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("requests_per_minute of key `team-a` (3 a minute) reached; resets in "),
        "{message}"
    );
    let messages =
        json!({"model": "small", "max_tokens": 1, "messages": [{"role": "user", "content": "hi"}]});
    let (status, wait, body) =
        refusal(post(&client, gw.addr, "/v1/messages", "sk-team-a", &messages).await).await;
    assert_eq!((status, wait.is_some()), (429, true));
    assert_eq!(body["type"], "error", "{body}");
    assert_eq!(body["error"]["type"], "rate_limit_error", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("requests_per_minute of key `team-a`"),
        "{body}"
    );
    let responses = json!({"model": "small", "input": "hi", "max_output_tokens": 16});
    let (status, _, body) =
        refusal(post(&client, gw.addr, "/v1/responses", "sk-team-a", &responses).await).await;
    assert_eq!(status, 429);
    assert_eq!(body["error"]["code"], "rate_limit_exceeded", "{body}");
    // The other keys have limits of their own (none).
    for key in ["sk-team-b", "sk-old", "sk-team-b"] {
        let r = post(&client, gw.addr, chat, key, &ask("large", None)).await;
        assert_eq!(r.status(), 200, "{key}");
    }
    // The metrics by key: the configured names and one label for the unnamed keys; never a key.
    let text = metrics_with(
        gw.addr,
        &[
            "choicewise_key_requests_total{key=\"team-a\",status=\"200\"} 3",
            "choicewise_key_requests_total{key=\"team-a\",status=\"429\"} 3",
            "choicewise_key_requests_total{key=\"team-a\",status=\"403\"} 1",
            "choicewise_key_requests_total{key=\"team-b\",status=\"200\"} 2",
            "choicewise_key_requests_total{key=\"(unnamed)\",status=\"200\"} 1",
            "choicewise_limit_refusals_total{scope=\"key:team-a\",limit=\"requests_per_minute\"} 3",
            "choicewise_key_tokens_total{key=\"team-a\",kind=\"prompt\"} 21",
        ],
    )
    .await;
    assert!(!text.contains("sk-"), "a key in the metrics");
    gw.stop().await;
}

/// `GET path` with `key`: its status and JSON body.
async fn get_with(
    client: &reqwest::Client,
    addr: SocketAddr,
    path: &str,
    key: &str,
) -> (u16, Value) {
    // Every client API's route reads the key from `Authorization: Bearer` too.
    let r = client
        .get(format!("http://{addr}{path}"))
        .bearer_auth(key)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn the_count_routes_and_the_model_lists_obey_the_key() {
    let up = upstream().await;
    let toml = format!(
        "[auth]\n[[auth.keys]]\nname = \"team-a\"\nkey_env = \"TEAM_A_KEY\"\nmodels = [\"small\"]\n\
         [auth.keys.limits]\nrequests_per_minute = 3\n\
         [[auth.keys]]\nname = \"team-b\"\nkey_env = \"TEAM_B_KEY\"\n{}",
        models(&up, "")
    );
    let gw = Served::start(&toml).await;
    let client = reqwest::Client::new();
    let messages =
        |model: &str| json!({"model": model, "messages": [{"role": "user", "content": "hi"}]});
    let gemini = json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]});
    let anthropic_count = "/v1/messages/count_tokens";
    let gemini_count = |model: &str| format!("/v1beta/models/{model}:countTokens");
    // A model outside the key's: 403 on both count routes, nothing counted.
    let r = post(
        &client,
        gw.addr,
        anthropic_count,
        "sk-team-a",
        &messages("large"),
    )
    .await;
    let (status, _, body) = refusal(r).await;
    assert_eq!(status, 403, "{body}");
    let r = post(
        &client,
        gw.addr,
        &gemini_count("large"),
        "sk-team-a",
        &gemini,
    )
    .await;
    assert_eq!(r.status(), 403);
    // Each count is a request of the key's: 3 of 6 answered, the rest 429 with a wait.
    let mut answered = 0;
    for i in 0..6 {
        let r = if i % 2 == 0 {
            post(
                &client,
                gw.addr,
                anthropic_count,
                "sk-team-a",
                &messages("small"),
            )
            .await
        } else {
            post(
                &client,
                gw.addr,
                &gemini_count("small"),
                "sk-team-a",
                &gemini,
            )
            .await
        };
        let (status, wait, body) = refusal(r).await;
        match status {
            200 => answered += 1,
            429 => assert!(
                wait.is_some_and(|w| (1..=60).contains(&w)),
                "{wait:?} {body}"
            ),
            other => panic!("{other}: {body}"),
        }
    }
    assert_eq!(
        answered, 3,
        "a key of 3 requests a minute counts its counts"
    );
    // A chat now is the fourth request of the minute.
    let r = post(
        &client,
        gw.addr,
        "/v1/chat/completions",
        "sk-team-a",
        &ask("small", None),
    )
    .await;
    assert_eq!(r.status(), 429);
    // The model lists show a key only its models; another key sees them all.
    let ids = |body: &Value, list: &str, field: &str| -> Vec<String> {
        (body[list].as_array().unwrap().iter())
            .map(|m| m[field].as_str().unwrap().to_string())
            .collect()
    };
    let (status, body) = get_with(&client, gw.addr, "/v1/models", "sk-team-a").await;
    assert_eq!(
        (status, ids(&body, "data", "id")),
        (200, vec!["small".to_string()]),
        "{body}"
    );
    let (_, body) = get_with(&client, gw.addr, "/v1/models", "sk-team-b").await;
    assert_eq!(ids(&body, "data", "id"), ["small", "large"], "{body}");
    let (status, body) = get_with(&client, gw.addr, "/v1beta/models", "sk-team-a").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(ids(&body, "models", "name"), ["models/small"], "{body}");
    let (status, body) = get_with(&client, gw.addr, "/v1/models/large", "sk-team-a").await;
    assert_eq!(status, 403, "{body}");
    let (status, _) = get_with(&client, gw.addr, "/v1/models/large", "sk-team-b").await;
    assert_eq!(status, 200);
    gw.stop().await;
}

#[tokio::test]
async fn the_room_a_token_limit_reserves_is_the_room_sent_upstream() {
    let up = upstream().await;
    let toml = format!(
        "[auth]\n[[auth.keys]]\nname = \"team-a\"\nkey_env = \"TEAM_A_KEY\"\n\
         [auth.keys.limits]\ntokens_per_minute = 100000\n\
         [[auth.keys]]\nname = \"team-b\"\nkey_env = \"TEAM_B_KEY\"\n{}",
        models(&up, "")
    );
    let gw = Served::start(&toml).await;
    let client = reqwest::Client::new();
    let chat = "/v1/chat/completions";
    let unlimited = json!({"model": "small", "messages": [{"role": "user", "content": "hi"}]});
    let sent_max_tokens = |i: usize| -> Option<u64> {
        let body: Value = serde_json::from_slice(&up.requests()[i].body).unwrap();
        body["max_tokens"].as_u64()
    };
    // A key limited by tokens, a request that states no limit: held to the room reserved.
    let r = post(&client, gw.addr, chat, "sk-team-a", &unlimited).await;
    assert_eq!(r.status(), 200);
    assert_eq!(sent_max_tokens(0), Some(4096));
    // A limit the request states is its own.
    let r = post(&client, gw.addr, chat, "sk-team-a", &ask("small", None)).await;
    assert_eq!(r.status(), 200);
    assert_eq!(sent_max_tokens(1), Some(1));
    // A key no limit of tokens binds: nothing added.
    let r = post(&client, gw.addr, chat, "sk-team-b", &unlimited).await;
    assert_eq!(r.status(), 200);
    assert_eq!(sent_max_tokens(2), None);
    gw.stop().await;
}

#[tokio::test]
async fn a_limited_keys_answers_say_what_is_left_and_requests_in_flight_ask_a_short_wait() {
    let up = upstream().await;
    let stalling = start(crate::common::stalled(1)).await;
    let toml = format!(
        "[auth]\n[[auth.keys]]\nname = \"team-a\"\nkey_env = \"TEAM_A_KEY\"\n\
         [auth.keys.limits]\nrequests_per_minute = 50\ntokens_per_minute = 10000\n{}\
         [[models]]\nname = \"slow\"\n[[models.upstreams]]\napi = \"chat\"\nbase_url = \"{}\"\nmodel = \"up\"\n",
        models(&up, ""),
        stalling.base_url()
    );
    let gw = Served::start(&toml).await;
    let client = reqwest::Client::new();
    let chat = "/v1/chat/completions";
    let header = |r: &reqwest::Response, name: &str| -> String {
        (r.headers().get(name))
            .and_then(|v| v.to_str().ok())
            .unwrap_or_else(|| panic!("no {name}: {:?}", r.headers()))
            .to_string()
    };
    // An answer says what is left of each limit after it, and when each resets.
    let r = post(&client, gw.addr, chat, "sk-team-a", &ask("small", None)).await;
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "x-ratelimit-limit-requests"), "50");
    assert_eq!(header(&r, "x-ratelimit-remaining-requests"), "49");
    assert_eq!(header(&r, "x-ratelimit-limit-tokens"), "10000");
    let left: u64 = header(&r, "x-ratelimit-remaining-tokens").parse().unwrap();
    assert!((9_000..10_000).contains(&left), "{left}");
    for name in ["x-ratelimit-reset-requests", "x-ratelimit-reset-tokens"] {
        let reset = header(&r, name);
        assert!(
            reset == "1m0s" || (reset.ends_with('s') && reset.len() <= 3),
            "{name}: {reset}"
        );
    }
    let _ = r.bytes().await;
    // Two answers that stall, each holding a sample's room of 4,096 tokens: the third is
    // refused only by what they hold, and asked to wait a second, not the minute.
    let unlimited =
        json!({"model": "slow", "stream": true, "messages": [{"role": "user", "content": "hi"}]});
    let mut stalled = Vec::new();
    for _ in 0..2 {
        let mut r = post(&client, gw.addr, chat, "sk-team-a", &unlimited).await;
        assert_eq!(r.status(), 200);
        let _ = r.chunk().await.unwrap();
        stalled.push(r);
    }
    let r = post(&client, gw.addr, chat, "sk-team-a", &unlimited).await;
    let limit = header(&r, "x-ratelimit-limit-tokens");
    let remaining: u64 = header(&r, "x-ratelimit-remaining-tokens").parse().unwrap();
    let (status, wait, body) = refusal(r).await;
    assert_eq!((status, wait), (429, Some(1)), "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("is held by requests in flight; retry in 1 s"),
        "{message}"
    );
    assert_eq!(limit, "10000");
    assert!(remaining < 4_096, "{remaining}");
    // They end: what they did not use is given back, and the next request passes.
    drop(stalled);
    let passed = async {
        loop {
            let r = post(&client, gw.addr, chat, "sk-team-a", &ask("small", None)).await;
            if r.status() == 200 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(5), passed)
        .await
        .expect("the room the stalled answers held was given back");
    gw.stop().await;
}

#[tokio::test]
async fn a_vote_reserves_its_samples_and_settles_what_they_took() {
    let up = upstream().await;
    // A vote of 4 samples: each takes 7 + 1 tokens; 4 × (prompt + 1 of room) is reserved.
    let toml = format!(
        "[auth]\n[[auth.keys]]\nname = \"team-a\"\nkey_env = \"TEAM_A_KEY\"\n\
         [auth.keys.limits]\nsamples_per_minute = 10\ntokens_per_minute = 100\n{}",
        models(&up, "")
    );
    let gw = Served::start(&toml).await;
    let client = reqwest::Client::new();
    let chat = "/v1/chat/completions";
    let mut answered = 0;
    let mut refused = None;
    for _ in 0..5 {
        let r = post(&client, gw.addr, chat, "sk-team-a", &ask("small", Some(4))).await;
        match r.status().as_u16() {
            200 => answered += 1,
            _ => {
                refused = Some(refusal(r).await);
                break;
            }
        }
    }
    // 10 samples a minute hold two votes of 4; the third is refused by its samples.
    assert_eq!(answered, 2);
    let (status, _, body) = refused.unwrap();
    assert_eq!(status, 429);
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("samples_per_minute of key `team-a` (10 a minute)"),
        "{message}"
    );
    // 2 votes × 4 samples × 8 tokens counted, reported by the upstream.
    metrics_with(
        gw.addr,
        &[
            "choicewise_key_tokens_total{key=\"team-a\",kind=\"prompt\"} 56",
            "choicewise_key_tokens_total{key=\"team-a\",kind=\"completion\"} 8",
        ],
    )
    .await;
    // One request that alone takes more than a whole window: 400, whenever it is sent.
    let (status, wait, body) =
        refusal(post(&client, gw.addr, chat, "sk-team-a", &ask("small", Some(16))).await).await;
    assert_eq!((status, wait), (400, None), "{body}");
    assert_eq!(body["error"]["code"], "exceeds_limit", "{body}");
    gw.stop().await;
}

#[tokio::test]
async fn a_models_limit_is_shared_by_every_key() {
    let up = upstream().await;
    let toml = format!(
        "[auth]\nkeys_env = \"OLD_KEYS\"\n[[auth.keys]]\nname = \"team-a\"\nkey_env = \"TEAM_A_KEY\"\n{}",
        models(&up, "[models.limits]\nrequests_per_hour = 2\n")
    );
    let gw = Served::start(&toml).await;
    let client = reqwest::Client::new();
    let chat = "/v1/chat/completions";
    assert_eq!(
        post(&client, gw.addr, chat, "sk-team-a", &ask("small", None))
            .await
            .status(),
        200
    );
    assert_eq!(
        post(&client, gw.addr, chat, "sk-old", &ask("small", None))
            .await
            .status(),
        200
    );
    let (status, wait, body) =
        refusal(post(&client, gw.addr, chat, "sk-old", &ask("small", None)).await).await;
    assert_eq!(status, 429);
    assert!(wait.unwrap() > 60, "{wait:?}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("requests_per_hour of model `small` (2 a hour) reached; resets in "),
        "{message}"
    );
    // Another model is not limited.
    assert_eq!(
        post(&client, gw.addr, chat, "sk-old", &ask("large", None))
            .await
            .status(),
        200
    );
    gw.stop().await;
}

fn hex_sha256(bytes: &[u8]) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, bytes);
    digest.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

/// A `redis-server` of its own: a free port of 127.0.0.1, a directory of its own, no
/// persistence; stopped when dropped.
struct RedisServer {
    port: u16,
    dir: PathBuf,
    child: Option<tokio::process::Child>,
}

/// Where `redis-server` is, if it is installed.
fn redis_server_path() -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    (std::env::split_paths(&path).chain([PathBuf::from("/usr/sbin"), PathBuf::from("/usr/bin")]))
        .map(|dir| dir.join("redis-server"))
        .find(|p| p.is_file())
}

impl RedisServer {
    /// A server started, or `None` (with the reason printed) where `redis-server` is not
    /// installed; under CI (`CI=true`) its absence fails the test.
    async fn start() -> Option<RedisServer> {
        let Some(path) = redis_server_path() else {
            if std::env::var("CI").is_ok_and(|v| v == "true") {
                panic!(
                    "redis-server is not installed, and CI=true: .ci/run installs it (apt-get install redis-server)"
                );
            }
            eprintln!(
                "skipped: redis-server is not installed (Debian: apt-get install redis-server)"
            );
            return None;
        };
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let dir =
            std::env::temp_dir().join(format!("choicewise-redis-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut server = RedisServer {
            port,
            dir,
            child: None,
        };
        server.run(path).await;
        Some(server)
    }

    async fn run(&mut self, path: PathBuf) {
        self.run_with(path, &[]).await;
    }

    async fn run_with(&mut self, path: PathBuf, more: &[&str]) {
        let child = tokio::process::Command::new(path)
            .args(["--bind", "127.0.0.1", "--port", &self.port.to_string()])
            .args(more)
            .args([
                "--save",
                "",
                "--appendonly",
                "no",
                "--protected-mode",
                "yes",
            ])
            .arg("--dir")
            .arg(&self.dir)
            .stdout(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while tokio::net::TcpStream::connect(("127.0.0.1", self.port))
            .await
            .is_err()
        {
            assert!(
                Instant::now() < deadline,
                "redis-server did not listen on {}",
                self.port
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Stops it as `redis-cli shutdown nosave` does (the `SHUTDOWN NOSAVE` command), and waits
    /// for its process to end.
    async fn shut_down(&mut self) {
        use tokio::io::AsyncWriteExt;
        if let Ok(mut tcp) = tokio::net::TcpStream::connect(("127.0.0.1", self.port)).await {
            let _ = tcp
                .write_all(b"*2\r\n$8\r\nSHUTDOWN\r\n$6\r\nNOSAVE\r\n")
                .await;
        }
        if let Some(mut child) = self.child.take() {
            let ended = tokio::time::timeout(Duration::from_secs(5), child.wait()).await;
            if ended.is_err() {
                let _ = child.kill().await;
            }
        }
    }

    /// Starts it again on its port.
    async fn start_again(&mut self) {
        self.run(redis_server_path().unwrap()).await;
    }

    /// What the hash `key` holds in its field `v` (a counter's amount), if it exists.
    async fn amount(&self, key: &str) -> Option<u64> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut tcp = tokio::net::TcpStream::connect(("127.0.0.1", self.port))
            .await
            .ok()?;
        let command = format!("*3\r\n$4\r\nHGET\r\n${}\r\n{key}\r\n$1\r\nv\r\n", key.len());
        tcp.write_all(command.as_bytes()).await.ok()?;
        // `$-1\r\n` (none), or `$LEN\r\nVALUE\r\n`.
        let complete = |reply: &[u8]| {
            reply.ends_with(b"\r\n")
                && (reply.starts_with(b"$-1") || reply.iter().filter(|&&b| b == b'\n').count() == 2)
        };
        let mut reply = Vec::new();
        let mut buf = [0u8; 256];
        while !complete(&reply) {
            let n = tcp.read(&mut buf).await.ok()?;
            if n == 0 {
                return None;
            }
            reply.extend_from_slice(&buf[..n]);
        }
        let text = String::from_utf8(reply).ok()?;
        text.lines().nth(1)?.trim().parse().ok()
    }

    /// Waits (20 s at most: a loaded machine's settlements come late) until the counter
    /// `key` holds `amount`.
    async fn wait_for(&self, key: &str, amount: u64) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let now = self.amount(key).await;
            if now == Some(amount) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{key} holds {now:?}, not {amount}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Makes it answer nothing for `seconds` (`DEBUG SLEEP`), as a stalled server does.
    async fn stall(&self, seconds: f64) {
        let mut tcp = tokio::net::TcpStream::connect(("127.0.0.1", self.port))
            .await
            .unwrap();
        use tokio::io::AsyncWriteExt;
        let s = seconds.to_string();
        let command = format!(
            "*3\r\n$5\r\nDEBUG\r\n$5\r\nSLEEP\r\n${}\r\n{s}\r\n",
            s.len()
        );
        tcp.write_all(command.as_bytes()).await.unwrap();
        // The connection stays open until the sleep is over.
        tokio::spawn(async move {
            use tokio::io::AsyncReadExt;
            let mut buf = [0u8; 64];
            let _ = tcp.read(&mut buf).await;
        });
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let _ = child.start_kill();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `[state]` on `redis`, with this policy.
fn state(redis: &RedisServer, policy: &str) -> String {
    format!(
        "[state]\nredis_url = \"{}\"\non_state_error = \"{policy}\"\nstate_timeout_ms = 50\n",
        redis.url()
    )
}

#[tokio::test]
async fn two_gateways_on_one_redis_answer_exactly_the_limit_and_keep_it_across_restarts() {
    let Some(redis) = RedisServer::start().await else {
        return;
    };
    let up = upstream().await;
    let toml = format!(
        "{}[auth]\n[[auth.keys]]\nname = \"team-a\"\nkey_env = \"TEAM_A_KEY\"\n\
         [auth.keys.limits]\nrequests_per_minute = 60\n{}",
        state(&redis, "refuse"),
        models(&up, "")
    );
    let (one, two) = (Served::start(&toml).await, Served::start(&toml).await);
    let client = reqwest::Client::new();
    // 100 requests, spread over both, 10 at a time.
    let addrs = [one.addr, two.addr];
    let mut statuses = Vec::new();
    for round in 0..10 {
        let batch = (0..10).map(|i| {
            let client = client.clone();
            let addr = addrs[(round * 10 + i) % 2];
            async move {
                let r = post(
                    &client,
                    addr,
                    "/v1/chat/completions",
                    "sk-team-a",
                    &ask("small", None),
                )
                .await;
                let wait = r.headers().contains_key("retry-after");
                (r.status().as_u16(), wait)
            }
        });
        statuses.extend(futures::future::join_all(batch).await);
    }
    let answered = statuses.iter().filter(|(s, _)| *s == 200).count();
    let refused = statuses
        .iter()
        .filter(|(s, wait)| *s == 429 && *wait)
        .count();
    assert_eq!((answered, refused), (60, 40), "{statuses:?}");
    // Both gateways stop; two new ones on the same Redis still see the minute's 60.
    one.stop().await;
    two.stop().await;
    let again = Served::start(&toml).await;
    let (status, wait, body) = refusal(
        post(
            &client,
            again.addr,
            "/v1/chat/completions",
            "sk-team-a",
            &ask("small", None),
        )
        .await,
    )
    .await;
    assert_eq!(status, 429, "{body}");
    assert!((1..=60).contains(&wait.unwrap()));
    again.stop().await;
}

#[tokio::test]
async fn a_daily_budget_is_refused_within_one_requests_cost() {
    let Some(redis) = RedisServer::start().await else {
        return;
    };
    let up = upstream().await;
    let toml = format!(
        "{}[auth]\n[[auth.keys]]\nname = \"team-a\"\nkey_env = \"TEAM_A_KEY\"\n\
         [auth.keys.limits]\nusd_per_day = 1.0\n{}",
        state(&redis, "refuse"),
        models(&up, "")
    );
    let (one, two) = (Served::start(&toml).await, Served::start(&toml).await);
    let client = reqwest::Client::new();
    // Each answered request counts 7 prompt and 1 generated tokens: $0.10; it reserves its
    // prompt as counted here and 2 tokens of room, about $0.14: the budget is refused only
    // if the reservations were replaced by what was counted.
    let cost = 0.10;
    let mut body = ask("small", None);
    body["max_tokens"] = json!(2);
    let mut answered = 0u32;
    let mut refusal_seen = None;
    for i in 0..30 {
        let addr = [one.addr, two.addr][i % 2];
        let r = post(&client, addr, "/v1/chat/completions", "sk-team-a", &body).await;
        match r.status().as_u16() {
            200 => answered += 1,
            _ => {
                refusal_seen = Some(refusal(r).await);
                break;
            }
        }
        // The settlement is applied by the store's task: in Redis, the day's count becomes
        // what was counted, $0.10 (100,000,000 nano-dollars) a request.
        let counted = u64::from(answered) * 100_000_000;
        redis
            .wait_for("choicewise:key:team-a:usd_per_day", counted)
            .await;
    }
    let (status, wait, body) = refusal_seen.expect("the budget was never refused");
    assert_eq!(status, 429, "{body}");
    assert!(wait.unwrap() > 3600, "{wait:?}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("usd_per_day of key `team-a` ($1.00 a day) reached; resets in "),
        "{message}"
    );
    let spent = f64::from(answered) * cost;
    assert!(
        spent <= 1.0 + 1e-9 && spent >= 1.0 - cost - 1e-9,
        "refused after ${spent:.2} counted ({answered} requests)"
    );
    one.stop().await;
    two.stop().await;
}

/// Requests sent one after another to `addrs` in turn for `lasting`, with `during` run
/// meanwhile: each one's status and how long it took.
async fn load_while(
    addrs: [SocketAddr; 2],
    lasting: Duration,
    during: impl std::future::Future<Output = ()>,
) -> Vec<(u16, Duration)> {
    let client = reqwest::Client::new();
    let load = async {
        let mut seen = Vec::new();
        let end = Instant::now() + lasting;
        let mut i = 0;
        while Instant::now() < end {
            let began = Instant::now();
            let r = post(
                &client,
                addrs[i % 2],
                "/v1/chat/completions",
                "sk-team-a",
                &ask("small", None),
            )
            .await;
            seen.push((r.status().as_u16(), began.elapsed()));
            i += 1;
        }
        seen
    };
    let (seen, ()) = tokio::join!(load, during);
    seen
}

#[tokio::test]
async fn with_allow_no_request_fails_while_redis_is_down() {
    let Some(mut redis) = RedisServer::start().await else {
        return;
    };
    let up = upstream().await;
    let toml = format!(
        "{}[auth]\n[[auth.keys]]\nname = \"team-a\"\nkey_env = \"TEAM_A_KEY\"\n\
         [auth.keys.limits]\nrequests_per_minute = 100000\n{}",
        state(&redis, "allow"),
        models(&up, "")
    );
    let (one, two) = (Served::start(&toml).await, Served::start(&toml).await);
    let redis = &mut redis;
    let seen = load_while([one.addr, two.addr], Duration::from_secs(3), async move {
        tokio::time::sleep(Duration::from_millis(500)).await;
        redis.shut_down().await;
        tokio::time::sleep(Duration::from_millis(1000)).await;
        redis.start_again().await;
    })
    .await;
    assert!(seen.len() > 20, "{} requests", seen.len());
    let failed: Vec<_> = seen.iter().filter(|(s, _)| *s != 200).collect();
    assert!(failed.is_empty(), "{failed:?}");
    // The failures were counted, and their end said: nothing fails now.
    let text = metrics_with(one.addr, &["choicewise_state_failing 0"]).await;
    let errors: u64 = (text.lines())
        .filter(|l| l.starts_with("choicewise_state_errors_total{op=\"reserve\"}"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum();
    assert!(errors > 0, "{text}");
    one.stop().await;
    two.stop().await;
}

#[tokio::test]
async fn with_refuse_requests_get_503_within_the_deadline_while_redis_is_down_or_stalled() {
    let Some(mut redis) = RedisServer::start().await else {
        return;
    };
    let up = upstream().await;
    let toml = format!(
        "{}[auth]\n[[auth.keys]]\nname = \"team-a\"\nkey_env = \"TEAM_A_KEY\"\n\
         [auth.keys.limits]\nrequests_per_minute = 100000\n{}",
        state(&redis, "refuse"),
        models(&up, "")
    );
    let (one, two) = (Served::start(&toml).await, Served::start(&toml).await);
    let addrs = [one.addr, two.addr];
    let redis_ref = &mut redis;
    let seen = load_while(addrs, Duration::from_millis(4500), async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        // Stalled for 3 s: every call waits for its deadline (50 ms), not for Redis.
        redis_ref.stall(3.0).await;
        tokio::time::sleep(Duration::from_millis(3200)).await;
        redis_ref.shut_down().await;
    })
    .await;
    let unavailable: Vec<_> = seen.iter().filter(|(s, _)| *s == 503).collect();
    assert!(!unavailable.is_empty(), "{seen:?}");
    assert!(seen.iter().all(|(s, _)| matches!(s, 200 | 503)), "{seen:?}");
    // No request waited for the stalled Redis (3 s): each one's wait ended at its deadline
    // (50 ms), loopback HTTP and a busy machine allowed for.
    let slowest = seen.iter().map(|(_, took)| *took).max().unwrap();
    assert!(
        slowest < Duration::from_millis(1500),
        "a request took {slowest:?}"
    );
    let r = post(
        &reqwest::Client::new(),
        one.addr,
        "/v1/chat/completions",
        "sk-team-a",
        &ask("small", None),
    )
    .await;
    let (status, wait, body) = refusal(r).await;
    assert_eq!((status, wait), (503, Some(1)), "{body}");
    assert_eq!(body["error"]["code"], "state_unavailable", "{body}");
    // Started again: requests are counted and answered again.
    redis.start_again().await;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = post(
            &reqwest::Client::new(),
            two.addr,
            "/v1/chat/completions",
            "sk-team-a",
            &ask("small", None),
        )
        .await;
        if r.status() == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "still {}", r.status());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    one.stop().await;
    two.stop().await;
}

#[tokio::test]
async fn an_unreachable_redis_is_said_at_start_and_refuse_keeps_serve_from_starting() {
    // A port nothing listens on.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let up = upstream().await;
    let toml = format!(
        "listen = \"127.0.0.1:0\"\n[state]\nredis_url = \"redis://:hunter2@127.0.0.1:{port}\"\n\
         on_state_error = \"refuse\"\n[auth]\n[[auth.keys]]\nname = \"team-a\"\nsha256 = \"{}\"\n\
         [auth.keys.limits]\nrequests_per_minute = 5\n{}",
        hex_sha256(b"sk-team-a"),
        models(&up, "")
    );
    let config = Config::from_toml(&toml).unwrap();
    let began = Instant::now();
    let served = choicewise_gateway::serve(&config, None);
    let e = tokio::time::timeout(Duration::from_secs(10), served)
        .await
        .expect("serve did not return")
        .unwrap_err()
        .to_string();
    assert!(began.elapsed() < Duration::from_secs(5));
    assert!(
        e.contains(&format!(
            "[state] redis_url redis://:***@127.0.0.1:{port} is unreachable"
        )) && e.contains("not starting, as on_state_error = \"refuse\" says"),
        "{e}"
    );
    assert!(!e.contains("hunter2"), "the password was shown: {e}");
}

#[tokio::test]
async fn a_redis_cluster_is_refused_at_start_saying_why() {
    let Some(mut redis) = RedisServer::start().await else {
        return;
    };
    // The same server again, as a Cluster node.
    redis.shut_down().await;
    let path = redis_server_path().unwrap();
    redis
        .run_with(
            path,
            &[
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
            ],
        )
        .await;
    let up = upstream().await;
    let toml = format!(
        "listen = \"127.0.0.1:0\"\n{}[auth]\n[[auth.keys]]\nname = \"team-a\"\nsha256 = \"{}\"\n\
         [auth.keys.limits]\nrequests_per_minute = 5\n{}",
        state(&redis, "allow"),
        hex_sha256(b"sk-team-a"),
        models(&up, "")
    );
    let config = Config::from_toml(&toml).unwrap();
    let served = choicewise_gateway::serve(&config, None);
    let e = tokio::time::timeout(Duration::from_secs(10), served)
        .await
        .expect("serve did not return")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("is a Redis Cluster node, which the limits do not support"),
        "{e}"
    );
}

#[tokio::test]
async fn with_admin_the_metrics_answer_the_operators_key_only() {
    let up = upstream().await;
    let toml = format!(
        "[admin]\nkey_env = \"OPERATOR_KEY\"\n[auth]\n[[auth.keys]]\nname = \"team-a\"\nkey_env = \"TEAM_A_KEY\"\n{}",
        models(&up, "")
    );
    let gw = Served::start(&toml).await;
    let client = reqwest::Client::new();
    let r = post(
        &client,
        gw.addr,
        "/v1/chat/completions",
        "sk-team-a",
        &ask("small", None),
    )
    .await;
    assert_eq!(r.status(), 200);
    let metrics = |key: Option<&'static str>| {
        let client = client.clone();
        async move {
            let mut get = client.get(format!("http://{}/metrics", gw.addr));
            if let Some(key) = key {
                get = get.bearer_auth(key);
            }
            let r = get.send().await.unwrap();
            (r.status().as_u16(), r.text().await.unwrap())
        }
    };
    // Without a key, with a client's key: 401, and nothing of the keys shown.
    for key in [None, Some("sk-team-a")] {
        let (status, body) = metrics(key).await;
        assert_eq!(status, 401, "{key:?}: {body}");
        assert!(!body.contains("team-a"), "{body}");
    }
    let (status, body) = metrics(Some("sk-operator")).await;
    assert_eq!(status, 200);
    assert!(
        body.contains("choicewise_key_requests_total{key=\"team-a\""),
        "{body}"
    );
    gw.stop().await;
    // Its variable unset: the gateway does not start, naming it.
    let config = Config::from_toml(&toml.replace("OPERATOR_KEY", "UNSET_OPERATOR_KEY")).unwrap();
    let e = Gateway::with_env(&config, env).err().unwrap().to_string();
    assert!(
        e.contains("[admin] key_env") && e.contains("UNSET_OPERATOR_KEY"),
        "{e}"
    );
}

/// An upstream that ignores the `max_tokens` it is sent: every sample is 20,000 tokens of
/// " word" (one token each), in chunks of ten, finished `stop`, its usage saying so.
fn ignores_max_tokens() -> String {
    let chunk = |delta: &str, finish: &str| {
        format!(
            "data: {{\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"up\",\
             \"choices\":[{{\"index\":0,\"delta\":{delta},\"finish_reason\":{finish}}}]}}\n\n"
        )
    };
    let ten = json!({"content": " word".repeat(10)}).to_string();
    let mut body = chunk(r#"{"role":"assistant","content":""}"#, "null");
    for _ in 0..2_000 {
        body.push_str(&chunk(&ten, "null"));
    }
    body.push_str(&chunk("{}", "\"stop\""));
    body.push_str(
        "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"up\",\"choices\":[],\
         \"usage\":{\"prompt_tokens\":7,\"completion_tokens\":20000,\"total_tokens\":20007}}\n\ndata: [DONE]\n\n",
    );
    body
}

/// What `key` used of its first limit, as `GET /v1/key` says, and the whole answer.
async fn key_usage(client: &reqwest::Client, addr: SocketAddr, key: &str) -> (u64, Value) {
    let (_, own) = get_with(client, addr, "/v1/key", key).await;
    (own["usage"][0]["used"].as_u64().unwrap(), own)
}

#[tokio::test]
async fn a_sample_past_its_room_is_stopped_there_when_its_upstream_ignores_max_tokens() {
    let up = start(TestServer::builder().body(ignores_max_tokens())).await;
    let toml = format!(
        "[auth]\n[[auth.keys]]\nname = \"team-a\"\nkey_env = \"TEAM_A_KEY\"\n\
         [auth.keys.limits]\ntokens_per_minute = 5000\n\
         [[auth.keys]]\nname = \"team-b\"\nkey_env = \"TEAM_B_KEY\"\n\
         [auth.keys.limits]\ntokens_per_minute = 20000\n{}",
        models(&up, "")
    );
    let gw = Served::start(&toml).await;
    let client = reqwest::Client::new();
    let chat = "/v1/chat/completions";
    let unlimited = json!({"model": "large", "messages": [{"role": "user", "content": "hi"}]});
    // Held to its room of 4,096 tokens, sent upstream and ignored there: stopped at it.
    let r = post(&client, gw.addr, chat, "sk-team-a", &unlimited).await;
    assert_eq!(r.status(), 200);
    let answer: Value = r.json().await.unwrap();
    let choice = &answer["choices"][0];
    assert_eq!(choice["finish_reason"], "length", "{}", answer["usage"]);
    let words = choice["message"]["content"]
        .as_str()
        .unwrap()
        .split_whitespace()
        .count();
    assert!((4_096..=4_106).contains(&words), "{words} words");
    let completion = answer["usage"]["completion_tokens"].as_u64().unwrap();
    assert!((4_096..=4_106).contains(&completion), "{}", answer["usage"]);
    // What the key was charged: within the one request's room, under the limit; the next
    // request is refused by what was used, not let through.
    let (used, own) = key_usage(&client, gw.addr, "sk-team-a").await;
    assert!((4_096..=5_000).contains(&used), "{own}");
    let (status, _, body) =
        refusal(post(&client, gw.addr, chat, "sk-team-a", &unlimited).await).await;
    assert_eq!(status, 429, "{body}");
    // A vote of 4, each sample of it held to its room: 4 rooms at most, not 4 × 20,000.
    let mut vote = unlimited.clone();
    vote["choicewise"] = json!({"select": "vote", "samples": 4, "min_votes": 4});
    let r = post(&client, gw.addr, chat, "sk-team-b", &vote).await;
    assert_eq!(r.status(), 200);
    let answer: Value = r.json().await.unwrap();
    assert_eq!(answer["choices"][0]["finish_reason"], "length");
    let (used, own) = key_usage(&client, gw.addr, "sk-team-b").await;
    assert!((4 * 4_096..=4 * 4_120).contains(&used), "{own}");
    gw.stop().await;
}

/// The same upstream, streamed: a Chat request of one choice is relayed (its upstream's
/// own chunks passed on), and the relay holds the sample to its room as the general path
/// does: its finish `length` there, its upstream closed, the key charged within the room.
#[tokio::test]
async fn a_relayed_stream_past_its_room_is_stopped_there_when_its_upstream_ignores_max_tokens() {
    let up = start(TestServer::builder().body(ignores_max_tokens())).await;
    let toml = format!(
        "[auth]\n[[auth.keys]]\nname = \"team-a\"\nkey_env = \"TEAM_A_KEY\"\n\
         [auth.keys.limits]\ntokens_per_minute = 5000\n{}",
        models(&up, "")
    );
    let gw = Served::start(&toml).await;
    let client = reqwest::Client::new();
    let chat = "/v1/chat/completions";
    let streamed = json!({"model": "large", "stream": true,
                          "stream_options": {"include_usage": true},
                          "messages": [{"role": "user", "content": "hi"}]});
    let r = post(&client, gw.addr, chat, "sk-team-a", &streamed).await;
    assert_eq!(r.status(), 200);
    let text = r.text().await.unwrap();
    let (chunks, done) = crate::common::sse_data(&text);
    assert!(done, "{text}");
    let content: String = (chunks.iter())
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    let words = content.split_whitespace().count();
    assert!((4_096..=4_106).contains(&words), "{words} words");
    let finish = chunks
        .iter()
        .find_map(|c| c["choices"][0]["finish_reason"].as_str());
    assert_eq!(finish, Some("length"));
    // The usage the client asked for is the gateway's count of what it relayed.
    let usage = &chunks.last().unwrap()["usage"];
    let completion = usage["completion_tokens"].as_u64().unwrap();
    assert!((4_096..=4_106).contains(&completion), "{usage}");
    assert_eq!(usage["choicewise"]["estimated"], true, "{usage}");
    let (used, own) = key_usage(&client, gw.addr, "sk-team-a").await;
    assert!((4_096..=5_000).contains(&used), "{own}");
    let (status, _, body) =
        refusal(post(&client, gw.addr, chat, "sk-team-a", &streamed).await).await;
    assert_eq!(status, 429, "{body}");
    gw.stop().await;
}

/// Keys made over the admin API while the keys' store (Redis) goes away: the replica keeps
/// the keys it last read (a request with one is still served; the limits' counts, with
/// `allow`, go uncounted), a change asked meanwhile is a 503 `key_store_unavailable` and
/// makes nothing, and once Redis is back a change is made and served again.
#[tokio::test]
async fn a_keys_store_that_goes_away_keeps_the_keys_last_read_and_refuses_changes() {
    let Some(mut redis) = RedisServer::start().await else {
        return;
    };
    let up = upstream().await;
    let toml = format!(
        "{}[admin]\nkey_env = \"OPERATOR_KEY\"\n[auth]\n{}",
        state(&redis, "allow"),
        models(&up, "")
    );
    let gw = Served::start(&toml).await;
    let other = Served::start(&toml).await;
    let client = reqwest::Client::new();
    let admin = |body: Value| {
        client
            .post(format!("http://{}/admin/keys", gw.addr))
            .bearer_auth("sk-operator")
            .json(&body)
            .send()
    };
    let r = admin(json!({"name": "team-x"})).await.unwrap();
    assert_eq!(r.status(), 201);
    let made: Value = r.json().await.unwrap();
    let secret = made["key"].as_str().unwrap().to_string();
    let chat = "/v1/chat/completions";
    let r = post(&client, gw.addr, chat, &secret, &ask("small", None)).await;
    assert_eq!(r.status(), 200);
    redis.shut_down().await;
    // Several reads of the store fail meanwhile: the key read before is kept.
    tokio::time::sleep(Duration::from_millis(800)).await;
    let r = post(&client, gw.addr, chat, &secret, &ask("small", None)).await;
    assert_eq!(r.status(), 200, "the key last read is kept");
    let r = admin(json!({"name": "team-y"})).await.unwrap();
    let (status, _, body) = refusal(r).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"]["code"], "key_store_unavailable", "{body}");
    redis.start_again().await;
    // Back: the change is made, and served.
    let r = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let r = admin(json!({"name": "team-y"})).await.unwrap();
            if r.status() != 503 {
                return r;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .expect("Redis back within 10 s");
    assert_eq!(r.status(), 201);
    let made: Value = r.json().await.unwrap();
    let again = made["key"].as_str().unwrap().to_string();
    let r = post(&client, gw.addr, chat, &again, &ask("small", None)).await;
    assert_eq!(r.status(), 200);
    // The other replica, which also lived through the store's absence, sees it too.
    let started = std::time::Instant::now();
    loop {
        let r = post(&client, other.addr, chat, &again, &ask("small", None)).await;
        if r.status() == 200 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(8),
            "never seen by the other replica"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    gw.stop().await;
    other.stop().await;
}
