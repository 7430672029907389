//! The cost fuzzer (issue 63): hostile bodies (deep, wide, many tiny parts, long numbers,
//! long strings) in every field each route parses, for every client API and every upstream
//! API, and `count_tokens`, sent through a gateway served in this process on 127.0.0.1 over
//! test upstreams, under a counting allocator: the heap's peak above its start (the gateway's
//! copy of the body included, the client's not) must stay within `C × body + K`
//! ([`bound`] per route, [`SLACK`]; docs/reliability.md, "The cost of a body").
//!
//! The short form (the test, a fixed seed, named cases of 4.2 MB, just above a power of two
//! where a buffer grown by doubling costs the most, and generated ones of 0.25 to 2 MB) runs
//! every named case of issue 63 and a few generated ones; the long form, `COST_FUZZ_LONG=1` (optionally
//! `COST_FUZZ_SEED=n`, `COST_FUZZ_CASES=n`), runs larger bodies and many more generated
//! cases; `COST_FUZZ_ONLY=TEXT` keeps the cases whose name or route has TEXT. Each case
//! prints a line: its name, route, body, peak and peak per body byte.

use std::net::SocketAddr;
use std::time::Duration;

use crate::common::{
    ANTHROPIC_ANSWER, GEMINI_ANSWER, RESPONSES_ANSWER, SSE_HEAD, key_env, models_toml, post_bytes,
    reading_upstream, serve,
};
use choicewise_test_support::within;

use crate::HEAP;

use crate::ONE_AT_A_TIME as SERIAL;

const MIB: usize = 1024 * 1024;

/// The heap's peak may be at most this many times the body ([`bound`], per route)...
///
/// - 4 on every route: the body, held while the request is served (in a buffer of its
///   declared size), and at most about three times it besides: the translated messages, the
///   upstream's body, and the largest part on its way (a message's content parts, a tool
///   call's arguments unescaped once, a prompt's count); each written straight into the
///   list it joins, never into a buffer of its own first (the figures: docs/reliability.md,
///   the cost fuzzer's table).
fn bound(_: Route) -> f64 {
    4.0
}

/// ... plus this much (the connections' buffers, the runtime's tasks, a small request's
/// own cost): small beside the short form's bodies, so that a copy of one of them shows.
const SLACK: usize = 4 * MIB;

/// The client APIs (and `count_tokens`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Api {
    Chat,
    Messages,
    Count,
    Responses,
}

impl Api {
    fn path(self) -> &'static str {
        match self {
            Api::Chat => "/v1/chat/completions",
            Api::Messages => "/v1/messages",
            Api::Count => "/v1/messages/count_tokens",
            Api::Responses => "/v1/responses",
        }
    }

    /// The top-level fields its route parses (beyond the messages and the tools), each with
    /// how a hostile value is put into it.
    fn parsed_fields(self) -> &'static [&'static str] {
        match self {
            Api::Chat => &["stop", "tool_choice", "stream_options", "choicewise"],
            Api::Messages | Api::Count => &[
                "thinking",
                "stop_sequences",
                "tool_choice",
                "choicewise",
                "system",
            ],
            Api::Responses => &["text", "reasoning", "tool_choice", "choicewise"],
        }
    }
}

/// A route: a client API and the model (`m`: a Chat Completions upstream reporting no usage,
/// `a`: an Anthropic one, `r`: a Responses one, `g`: a Gemini one).
#[derive(Debug, Clone, Copy)]
struct Route(Api, &'static str);

const ROUTES: [Route; 13] = [
    Route(Api::Count, "m"),
    Route(Api::Chat, "m"),
    Route(Api::Chat, "a"),
    Route(Api::Chat, "r"),
    Route(Api::Messages, "m"),
    Route(Api::Messages, "a"),
    Route(Api::Messages, "r"),
    Route(Api::Responses, "m"),
    Route(Api::Responses, "a"),
    Route(Api::Responses, "r"),
    Route(Api::Chat, "g"),
    Route(Api::Messages, "g"),
    Route(Api::Responses, "g"),
];

impl std::fmt::Display for Route {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let up = match self.1 {
            "m" => "chat",
            "a" => "anthropic",
            "g" => "gemini",
            _ => "responses",
        };
        write!(f, "{} -> {up}", self.0.path())
    }
}

/// A hostile JSON value of about `size` bytes.
#[derive(Debug, Clone, Copy)]
enum Hostile {
    /// `[0,0,0,...]`: wide.
    Zeros,
    /// `[[[[[0]]]]],...`: many small nested arrays.
    Deep,
    /// `{"k0":0,"k1":0,...}`: an object of many keys.
    Keys,
    /// One number of `size` digits.
    LongNumber,
    /// One string of `size` bytes.
    LongString,
    /// `[{"type":"text","text":"a"},...]`: many tiny content parts.
    TinyParts,
}

const HOSTILE: [Hostile; 6] = [
    Hostile::Zeros,
    Hostile::Deep,
    Hostile::Keys,
    Hostile::LongNumber,
    Hostile::LongString,
    Hostile::TinyParts,
];

fn hostile(kind: Hostile, api: Api, size: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(size + 64);
    let repeat = |out: &mut Vec<u8>, open: &[u8], item: &dyn Fn(usize) -> String, close: &[u8]| {
        out.extend_from_slice(open);
        let mut i = 0;
        while out.len() < size {
            if i > 0 {
                out.push(b',');
            }
            out.extend_from_slice(item(i).as_bytes());
            i += 1;
        }
        out.extend_from_slice(close);
    };
    match kind {
        Hostile::Zeros => repeat(&mut out, b"[", &|_| "0".into(), b"]"),
        Hostile::Deep => repeat(&mut out, b"[", &|_| "[[[[0]]]]".into(), b"]"),
        Hostile::Keys => repeat(&mut out, b"{", &|i| format!("\"k{i}\":0"), b"}"),
        Hostile::LongNumber => {
            out.push(b'1');
            out.resize(size, b'7');
        }
        Hostile::LongString => {
            out.push(b'"');
            out.resize(size, b'a');
            out.push(b'"');
        }
        Hostile::TinyParts => {
            let part = match api {
                Api::Responses => r#"{"type":"input_text","text":"a"}"#,
                _ => r#"{"type":"text","text":"a"}"#,
            };
            repeat(&mut out, b"[", &|_| part.into(), b"]")
        }
    }
    out
}

/// Where a hostile value goes.
#[derive(Debug, Clone, Copy)]
enum Place {
    /// A top-level field the route parses (by its index in [`Api::parsed_fields`]).
    Field(usize),
    /// A user message's content.
    Content,
    /// An unknown key of a message.
    MessageKey,
    /// An unknown key of a content part.
    PartKey,
    /// A tool call's arguments (Chat Completions, Responses: as their JSON text in a string;
    /// Messages: a `tool_use` block's `input`, as `{"z": VALUE}`).
    ToolArguments,
    /// A tool's schema (`{"type":"object","properties":{"z": VALUE}}`).
    ToolSchema,
    /// Many small messages (the list itself).
    Messages,
}

const PLACES: [Place; 7] = [
    Place::Field(0),
    Place::Content,
    Place::MessageKey,
    Place::PartKey,
    Place::ToolArguments,
    Place::ToolSchema,
    Place::Messages,
];

/// A top-level field's hostile value (wrapped so that it is the field's expected type where
/// that is an object).
fn field_value(key: &str, v: &[u8]) -> Vec<u8> {
    let v = String::from_utf8_lossy(v);
    match key {
        "choicewise" => format!(r#"{{"unknown":{v}}}"#),
        "text" => format!(r#"{{"format":{v}}}"#),
        "reasoning" => format!(r#"{{"effort":"low","zz":{v}}}"#),
        "thinking" => format!(r#"{{"type":"enabled","budget_tokens":2048,"zz":{v}}}"#),
        "tool_choice" => format!(r#"{{"type":"auto","zz":{v}}}"#),
        "stream_options" => format!(r#"{{"include_usage":true,"zz":{v}}}"#),
        _ => v.into_owned(),
    }
    .into_bytes()
}

/// A JSON string of `text`.
fn string(text: &[u8]) -> String {
    serde_json::to_string(&String::from_utf8_lossy(text)).unwrap()
}

/// A body for `route` with the hostile value `v` at `place`.
fn body(route: Route, place: Place, v: &[u8]) -> Vec<u8> {
    let Route(api, model) = route;
    let v_text = String::from_utf8_lossy(v);
    let user = |content: &str| format!(r#"{{"role":"user","content":{content}}}"#);
    let hi = user("\"hi\"");
    let mut fields: Vec<(String, Vec<u8>)> = vec![("model".into(), format!("\"{model}\"").into())];
    if api == Api::Messages {
        fields.push(("max_tokens".into(), b"16".to_vec()));
    }
    let mut messages: Vec<String> = Vec::new();
    let mut tools: Option<String> = None;
    match place {
        Place::Field(i) => {
            let key = api.parsed_fields()[i % api.parsed_fields().len()];
            fields.push((key.into(), field_value(key, v)));
            messages.push(hi);
        }
        Place::Content => messages.push(user(&v_text)),
        Place::MessageKey => {
            messages.push(format!(r#"{{"role":"user","content":"hi","zz":{v_text}}}"#))
        }
        Place::PartKey => {
            let kind = if api == Api::Responses {
                "input_text"
            } else {
                "text"
            };
            messages.push(user(&format!(
                r#"[{{"type":"{kind}","text":"hi","zz":{v_text}}}]"#
            )));
        }
        Place::ToolArguments => {
            let input = format!(r#"{{"z":{v_text}}}"#);
            messages.push(hi);
            match api {
                Api::Chat => {
                    messages.push(format!(
                        r#"{{"role":"assistant","content":null,"tool_calls":[{{"id":"c1","type":"function","function":{{"name":"f","arguments":{}}}}}]}}"#,
                        string(input.as_bytes())
                    ));
                    messages.push(r#"{"role":"tool","tool_call_id":"c1","content":"ok"}"#.into());
                }
                Api::Messages | Api::Count => {
                    messages.push(format!(
                        r#"{{"role":"assistant","content":[{{"type":"tool_use","id":"c1","name":"f","input":{input}}}]}}"#
                    ));
                    messages.push(
                        r#"{"role":"user","content":[{"type":"tool_result","tool_use_id":"c1","content":"ok"}]}"#
                            .into(),
                    );
                }
                Api::Responses => {
                    messages.push(format!(
                        r#"{{"type":"function_call","call_id":"c1","name":"f","arguments":{}}}"#,
                        string(input.as_bytes())
                    ));
                    messages.push(
                        r#"{"type":"function_call_output","call_id":"c1","output":"ok"}"#.into(),
                    );
                }
            }
        }
        Place::ToolSchema => {
            let schema = format!(r#"{{"type":"object","properties":{{"z":{v_text}}}}}"#);
            tools = Some(match api {
                Api::Chat => format!(
                    r#"[{{"type":"function","function":{{"name":"f","parameters":{schema}}}}}]"#
                ),
                Api::Messages | Api::Count => {
                    format!(r#"[{{"name":"f","input_schema":{schema}}}]"#)
                }
                Api::Responses => {
                    format!(r#"[{{"type":"function","name":"f","parameters":{schema}}}]"#)
                }
            });
            messages.push(hi);
        }
        Place::Messages => {
            let n = v.len() / (hi.len() + 1) + 1;
            messages.extend(std::iter::repeat_n(hi, n));
        }
    }
    let list_key = if api == Api::Responses {
        "input"
    } else {
        "messages"
    };
    fields.push((list_key.into(), format!("[{}]", messages.join(",")).into()));
    if let Some(tools) = tools {
        fields.push(("tools".into(), tools.into()));
    }
    let mut out = b"{".to_vec();
    for (i, (k, v)) in fields.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(format!("\"{k}\":").as_bytes());
        out.extend_from_slice(v);
    }
    out.push(b'}');
    out
}

/// The Chat Completions upstream's answer: without usage, so that the gateway estimates the
/// prompt's tokens from the body.
const CHAT_ANSWER: &str = "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"up\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"ok\"},\"finish_reason\":null}]}\n\ndata: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"up\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n";

/// A gateway with models `m`, `a`, `r` and `g` (see [`Route`]), taking bodies up to
/// `max_body`; `limits`: more of its `[limits]`.
pub async fn gateway(max_body: usize, limits: &str) -> SocketAddr {
    let chat = reading_upstream(SSE_HEAD, || CHAT_ANSWER.as_bytes().to_vec()).await;
    let anthropic = reading_upstream(SSE_HEAD, || ANTHROPIC_ANSWER.as_bytes().to_vec()).await;
    let responses = reading_upstream(SSE_HEAD, || RESPONSES_ANSWER.as_bytes().to_vec()).await;
    let gemini = reading_upstream(SSE_HEAD, || GEMINI_ANSWER.as_bytes().to_vec()).await;
    let toml = format!(
        "[auth]\nkeys_env = \"CLIENT_KEYS\"\n[limits]\nmax_body_bytes = {max_body}\n{limits}\n{}",
        models_toml(&[
            ("m", "chat", &chat),
            ("a", "anthropic", &anthropic),
            ("r", "responses", &responses),
            ("g", "gemini", &gemini)
        ])
    );
    serve(&toml, key_env).await.0
}

/// Posts `body` to `path`: its status and its answer's first bytes.
async fn post(
    client: &reqwest::Client,
    addr: SocketAddr,
    path: &str,
    body: Vec<u8>,
) -> (u16, String) {
    let limit = Duration::from_secs(300);
    let response = within(limit, "an answer", post_bytes(client, addr, path, body)).await;
    let status = response.status().as_u16();
    let text = within(limit, "its body", response.text()).await.unwrap();
    (status, text.chars().take(300).collect())
}

/// A case: its name, its route, its body.
struct Case {
    name: String,
    route: Route,
    body: Vec<u8>,
}

/// What a case measured.
struct Measured {
    status: u16,
    answer: String,
    peak: usize,
}

/// Runs `case` alone: its status and the heap's peak above its start (the body handed to the
/// client is made before).
async fn measure(client: &reqwest::Client, addr: SocketAddr, case: Case) -> Measured {
    let Case { route, body, .. } = case;
    HEAP.start();
    let ((status, answer), peak) = HEAP
        .peak_during(post(client, addr, route.0.path(), body))
        .await;
    Measured {
        status,
        answer,
        peak: peak.max(0) as usize,
    }
}

/// The named cases of issue 63, each a body of about `size` bytes.
fn named(size: usize) -> Vec<Case> {
    let mut cases = Vec::new();
    let mut add = |name: &str, route: Route, body: Vec<u8>| {
        cases.push(Case {
            name: name.into(),
            route,
            body,
        })
    };
    for route in ROUTES {
        let api = route.0;
        let parts = hostile(Hostile::TinyParts, api, size);
        add(
            "one message of tiny text blocks",
            route,
            body(route, Place::Content, &parts),
        );
        let zeros = hostile(Hostile::Zeros, api, size);
        add(
            "a tool call's arguments of zeros",
            route,
            body(route, Place::ToolArguments, &zeros),
        );
        let long = hostile(Hostile::LongString, api, size);
        add(
            "one long string message",
            route,
            body(route, Place::Content, &long),
        );
        add(
            "an unknown key of zeros in a message",
            route,
            body(route, Place::MessageKey, &zeros),
        );
    }
    // A Gemini upstream's tools and contents are written by a writer of their own: its
    // schemas and its many messages too (the other upstreams': requests.rs,
    // messages_cost.rs). A Responses client's large schema costs about 6x on every
    // upstream, its answer echoing the tools (docs/reliability.md): not this upstream's.
    for route in ROUTES.into_iter().filter(|r| r.1 == "g") {
        let zeros = hostile(Hostile::Zeros, route.0, size);
        if route.0 != Api::Responses {
            add(
                "a tool's schema of zeros",
                route,
                body(route, Place::ToolSchema, &zeros),
            );
        }
        add(
            "many small messages",
            route,
            body(route, Place::Messages, &zeros),
        );
    }
    for api in [Api::Chat, Api::Messages, Api::Count, Api::Responses] {
        for (i, field) in api.parsed_fields().iter().enumerate() {
            let route = Route(api, "m");
            let zeros = hostile(Hostile::Zeros, api, size);
            add(
                &format!("`{field}` of zeros"),
                route,
                body(route, Place::Field(i), &zeros),
            );
        }
    }
    for model in ["a", "r", "g"] {
        for (i, field) in Api::Chat.parsed_fields().iter().enumerate().take(2) {
            let route = Route(Api::Chat, model);
            let zeros = hostile(Hostile::Zeros, Api::Chat, size);
            add(
                &format!("`{field}` of zeros"),
                route,
                body(route, Place::Field(i), &zeros),
            );
        }
    }
    cases
}

/// A fan-out of 16 samples of a body of many small messages to an Anthropic upstream.
fn fan_out(size: usize) -> Case {
    let route = Route(Api::Messages, "a");
    let list = body(route, Place::Messages, &vec![b' '; size]);
    let mut text = String::from_utf8(list).unwrap();
    text.insert_str(1, r#""choicewise":{"samples":16,"select":"vote"},"#);
    Case {
        name: "a fan-out of 16 samples".into(),
        route,
        body: text.into_bytes(),
    }
}

/// A small generator (xorshift): the same cases for the same seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// `count` generated cases: a hostile value of a kind, at a place, on a route, of 1 to
/// `max` bytes.
fn generated(seed: u64, count: usize, min: usize, max: usize) -> Vec<Case> {
    let mut rng = Rng(seed | 1);
    (0..count)
        .map(|_| {
            let route = ROUTES[rng.below(ROUTES.len())];
            let kind = HOSTILE[rng.below(HOSTILE.len())];
            let mut place = PLACES[rng.below(PLACES.len())];
            if let Place::Field(_) = place {
                place = Place::Field(rng.below(route.0.parsed_fields().len()));
            }
            let size = min + rng.below(max - min);
            let v = hostile(kind, route.0, size);
            Case {
                name: format!("{kind:?} at {place:?}"),
                route,
                body: body(route, place, &v),
            }
        })
        .collect()
}

/// Runs the cases one at a time: prints each one's figures, and fails naming every case over
/// its bound or answered other than 200 or 400.
async fn run(cases: Vec<Case>, max_body: usize) {
    let addr = gateway(max_body, "").await;
    let client = reqwest::Client::new();
    // The connection pools and the gateway's lazily built state exist before the figures.
    for route in ROUTES {
        let warm = body(route, Place::Content, b"\"hi\"");
        let (status, text) = post(&client, addr, route.0.path(), warm).await;
        assert_eq!(status, 200, "{route}: {text}");
    }
    let mut failed = Vec::new();
    for case in cases {
        let (name, route, len) = (case.name.clone(), case.route, case.body.len());
        let m = measure(&client, addr, case).await;
        let c = bound(route);
        let bound = (c * len as f64) as usize + SLACK;
        let line = format!(
            "{name:<40} {route:<42} body {:>6.1} MB  peak {:>7.1} MiB  {:>5.1}x  {}",
            len as f64 / 1e6,
            m.peak as f64 / MIB as f64,
            m.peak as f64 / len as f64,
            m.status
        );
        let line = format!("{line}  (C {c})");
        eprintln!("{line}");
        if m.peak > bound || !matches!(m.status, 200 | 400) {
            failed.push(format!("{line}: {}", m.answer));
        }
    }
    assert!(
        failed.is_empty(),
        "over C x body + {} MiB, or not answered 200 or 400:\n{}",
        SLACK / MIB,
        failed.join("\n")
    );
}

fn long_form() -> bool {
    std::env::var_os("COST_FUZZ_LONG").is_some()
}

fn var(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Every named case of issue 63 on every route, a fan-out of 16 samples, then generated
/// ones (`COST_FUZZ_LONG`: larger, and many more).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_bodies_cost_a_few_times_their_bytes() {
    // Held from the start: the cases' bodies are made before they run, and would move the
    // figures of a test measuring beside them.
    let _one = SERIAL.lock().await;
    let (size, seed, count, max) = match long_form() {
        true => (
            var("COST_FUZZ_SIZE", 24 << 20) as usize,
            var("COST_FUZZ_SEED", 63),
            var("COST_FUZZ_CASES", 200) as usize,
            32 << 20,
        ),
        false => (4_200_000, var("COST_FUZZ_SEED", 63), 12, 2_000_000),
    };
    let mut cases = named(size);
    cases.push(fan_out(size));
    cases.extend(generated(seed, count, max / 8, max));
    // `COST_FUZZ_ONLY=TEXT`: only the cases whose name or route has TEXT.
    if let Ok(only) = std::env::var("COST_FUZZ_ONLY") {
        cases.retain(|c| c.name.contains(&only) || c.route.to_string().contains(&only));
    }
    run(cases, 4 * size.max(max)).await;
}
