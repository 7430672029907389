//! The gateway under the official OpenAI and Anthropic clients, which no one here wrote
//! (scripts/gateway-clients.sh installs them under .clients/).
//!
//! Chat Completions: openai-python and openai-node run the same cases (tests/clients/run.py,
//! run.cjs) against a gateway on 127.0.0.1 over the project's test servers — native `n`,
//! fan-out over three dialects, a failing upstream, a choice cut mid-stream, selection — and,
//! when `CHOICEWISE_LLAMA_URL` names a real llama.cpp server (scripts/llama-server.sh), over
//! it too.
//!
//! The SDKs' own APIs, over Chat Completions test upstreams: anthropic-python and the
//! Anthropic TypeScript SDK on `/v1/messages` (anthropic_run.py, anthropic_run.cjs),
//! openai-python on `/v1/responses` (responses_run.py) and the OpenAI Agents SDK running an
//! agent with a function tool (agents_run.py), and the Vercel AI SDK, whose default OpenAI
//! provider speaks Responses (ai_sdk_run.cjs): streamed and not, the SDKs' stream helpers,
//! tool round trips, a selection, a failing upstream and a bad request; google-genai on
//! Gemini's `/v1beta/models/{model}:generateContent` and `:streamGenerateContent`
//! (gemini_run.py): `candidateCount = 3` streamed and not, a vote, function calls and errors; with
//! `CHOICEWISE_LLAMA_URL`, anthropic-python and openai-python's Responses also over the real
//! llama.cpp server.
//!
//! Each script prints what its client parsed; the expectations are here.
//!
//! Ignored by a plain `cargo test` (the clients come from PyPI and npm); CI installs them and
//! runs `cargo test -p choicewise-gateway --test gateway -- --ignored clients::`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use choicewise_core::{Completions, Source};
use choicewise_testserver::{Failure, TestServer};
use serde_json::Value;

use crate::common::{answering, fixture, says, serve, stalled, start, votes_for_42};

const KEY: &str = "sk-client-test";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn clients_dir() -> PathBuf {
    std::env::var_os("CHOICEWISE_CLIENTS_DIR")
        .map_or_else(|| repo().join(".clients"), PathBuf::from)
}

/// The upstreams of one client's run (fresh for each: the scripted answers cycle per server).
struct Upstreams {
    _servers: Vec<TestServer>,
    addr: SocketAddr,
}

async fn gateway() -> Upstreams {
    let native = start(
        TestServer::builder()
            .fixture("openai_n3_tools.sse")
            .random_writes(1, 40),
    )
    .await;
    let chat = answering("from chat").await;
    let responses = fixture("responses_text.sse").await;
    let anthropic = fixture("anthropic_tools.sse").await;
    let failing = start(TestServer::builder().fail(Failure::status(500).message("boom"))).await;
    let cut = start(
        says("fine")
            .then(says("cut short").close_after_events(1))
            .then(says("fine")),
    )
    .await;
    let vote = start(votes_for_42()).await;
    // Two samples per request, one stalling and one quick, whichever connects first.
    let race = start(stalled(1).then(says("done quickly"))).await;
    let upstream = |name: &str, api: &str, url: &str, n: &str| {
        format!(
            "[[models]]\nname = \"{name}\"\n[[models.upstreams]]\napi = \"{api}\"\nbase_url = \"{url}\"\nmodel = \"up\"\nn = \"{n}\"\n"
        )
    };
    let mut toml = String::from("[auth]\nkeys_env = \"CLIENT_KEYS\"\n");
    toml += &upstream("native", "chat", &native.base_url(), "native");
    toml += &upstream("mixed", "chat", &chat.base_url(), "fan-out");
    toml += &format!(
        "[[models.upstreams]]\napi = \"responses\"\nbase_url = \"{}\"\n[[models.upstreams]]\napi = \"anthropic\"\nbase_url = \"{}\"\n",
        responses.base_url(),
        anthropic.base_url()
    );
    toml += &upstream("failing", "chat", &failing.base_url(), "native");
    toml += &upstream("cut", "chat", &cut.base_url(), "fan-out");
    // One upstream refusing connections, one answering 500, one fine: the client sees no
    // failure (issue 40).
    let (refused, _refusing) = crate::common::refusing();
    toml += &upstream("resilient", "chat", &refused, "fan-out");
    toml += &format!(
        "[[models.upstreams]]\napi = \"chat\"\nbase_url = \"{}\"\nmodel = \"up\"\nn = \"fan-out\"\n\
         [[models.upstreams]]\napi = \"chat\"\nbase_url = \"{}\"\nmodel = \"up\"\nn = \"fan-out\"\n\
         [models.retry]\nbackoff_ms = 1\n",
        failing.base_url(),
        chat.base_url()
    );
    toml += &upstream("vote", "chat", &vote.base_url(), "fan-out");
    toml += &upstream("race", "chat", &race.base_url(), "fan-out");
    if let Ok(llama) = std::env::var("CHOICEWISE_LLAMA_URL") {
        toml += &upstream("llama", "chat", &llama, "native");
        toml += &upstream("llama-fan-out", "chat", &llama, "fan-out");
    }
    let env = |name: &str| (name == "CLIENT_KEYS").then(|| KEY.to_string());
    let (addr, _) = serve(&toml, env).await;
    Upstreams {
        _servers: vec![native, chat, responses, anthropic, failing, cut, vote, race],
        addr,
    }
}

/// Runs a client's script against a fresh gateway; what it parsed.
async fn run(program: PathBuf, script: &str, node: bool) -> Value {
    let gateway = gateway().await;
    run_script(gateway.addr, program, script, node.then_some("openai")).await
}

/// Runs a client's script against the gateway at `addr`; what it parsed. `package`: the npm
/// package a Node script needs.
async fn run_script(
    addr: SocketAddr,
    program: PathBuf,
    script: &str,
    package: Option<&str>,
) -> Value {
    run_keyed(addr, program, script, package, KEY).await
}

/// [`run_script`], its client given `key`.
async fn run_keyed(
    addr: SocketAddr,
    program: PathBuf,
    script: &str,
    package: Option<&str>,
    key: &str,
) -> Value {
    assert!(
        program.exists() || !program.is_absolute(),
        "{} is missing: run scripts/gateway-clients.sh install",
        program.display()
    );
    let mut command = Command::new(&program);
    command
        .arg(repo().join("crates/gateway/tests/clients").join(script))
        .env("CHOICEWISE_GATEWAY_URL", format!("http://{addr}/v1"))
        .env("CHOICEWISE_GATEWAY_KEY", key);
    if let Some(package) = package {
        let modules = clients_dir().join("node/node_modules");
        assert!(
            modules.join(package).exists(),
            "{} has no {package}: run scripts/gateway-clients.sh install",
            modules.display()
        );
        command.env("NODE_PATH", modules);
    }
    let child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{}: {e}", program.display()));
    let pid = child.id();
    // Bounded: a client that hangs is killed and fails the test instead of holding CI.
    let output = match tokio::time::timeout(
        std::time::Duration::from_secs(120),
        tokio::task::spawn_blocking(move || child.wait_with_output()),
    )
    .await
    {
        Ok(output) => output.unwrap().unwrap(),
        Err(_) => {
            let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
            panic!("{script} did not finish within 120 s");
        }
    };
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{script} failed: {stderr}");
    serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("{script} printed no JSON ({e}): {stderr}"))
}

/// The choices the library assembles from a fixture: what native `n` must give the client.
async fn assembled(name: &str) -> Vec<Value> {
    let whole = Completions::new(Source::reader(std::io::Cursor::new(
        choicewise_testserver::fixture(name),
    )))
    .collect()
    .await
    .unwrap();
    let whole = serde_json::to_value(whole).unwrap();
    whole["choices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let calls: Vec<Value> = c["message"]["tool_calls"]
                .as_array()
                .map(|calls| {
                    calls
                        .iter()
                        .map(|t| {
                            serde_json::json!({"id": t["id"], "name": t["function"]["name"],
                                "arguments": t["function"]["arguments"]})
                        })
                        .collect()
                })
                .unwrap_or_default();
            serde_json::json!({"index": c["index"], "content": c["message"]["content"].as_str().unwrap_or(""),
                "finish_reason": c["finish_reason"], "tool_calls": calls, "error": null})
        })
        .collect()
}

fn texts(result: &Value) -> Vec<&str> {
    result["choices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["content"].as_str().unwrap())
        .collect()
}

fn finishes(result: &Value) -> Vec<&str> {
    result["choices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["finish_reason"].as_str().unwrap_or("none"))
        .collect()
}

/// Usage: the totals add up and each choice has its part.
fn check_usage(usage: &Value, choices: usize, what: &str) {
    let (p, c, t) = (
        usage["prompt_tokens"].as_u64().unwrap(),
        usage["completion_tokens"].as_u64().unwrap(),
        usage["total_tokens"].as_u64().unwrap(),
    );
    assert_eq!(p + c, t, "{what}: {usage}");
    assert!(c > 0, "{what}: {usage}");
    let per_choice = usage["choicewise"]["per_choice"].as_array().unwrap();
    assert_eq!(per_choice.len(), choices, "{what}: {usage}");
    let parts: u64 = per_choice
        .iter()
        .map(|x| x["completion_tokens"].as_u64().unwrap())
        .sum();
    assert_eq!(parts, c, "{what}: the parts sum to the total: {usage}");
    assert!(usage["choicewise"]["estimated"].is_boolean(), "{what}");
}

async fn check(results: Value) {
    let client = results["client"].as_str().unwrap().to_string();
    let case = |name: &str| results[name].clone();
    eprintln!("checking {client}");

    let models = case("models");
    for m in ["native", "mixed", "failing", "cut", "vote", "race"] {
        assert!(
            models.as_array().unwrap().iter().any(|x| x == m),
            "{client}: {models}"
        );
    }

    // One healthy upstream of three: no failure the client sees, every choice the healthy
    // one's.
    for name in ["resilient_stream", "resilient_whole"] {
        let got = case(name);
        let choices = got["choices"].as_array().unwrap();
        assert_eq!(choices.len(), 3, "{client} {name}: {got}");
        for c in choices {
            assert_eq!(c["content"], "from chat", "{client} {name}: {got}");
            assert_eq!(c["finish_reason"], "stop", "{client} {name}: {got}");
            assert!(c["error"].is_null(), "{client} {name}: {got}");
        }
    }

    // Native n: every choice, renumbered 0..n-1, tool calls merged by their own index.
    let expected = assembled("openai_n3_tools.sse").await;
    for name in ["native_stream", "native_whole"] {
        let got = case(name);
        assert_eq!(
            got["choices"].as_array().unwrap(),
            &expected,
            "{client} {name}"
        );
    }
    check_usage(
        &case("native_stream")["usage"],
        3,
        &format!("{client} native"),
    );
    check_usage(
        &case("native_whole")["usage"],
        3,
        &format!("{client} native whole"),
    );

    // Fan-out over chat, responses and anthropic: choice i is request i's.
    for name in ["mixed_stream", "mixed_whole"] {
        let got = case(name);
        let t = texts(&got);
        assert_eq!(t.len(), 3, "{client} {name}: {got}");
        assert_eq!(t[0], "from chat", "{client} {name}");
        assert!(!t[1].is_empty(), "{client} {name}: the Responses text");
        assert_eq!(
            finishes(&got),
            ["stop", "stop", "tool_calls"],
            "{client} {name}"
        );
        let call = &got["choices"][2]["tool_calls"][0];
        let args: Value = serde_json::from_str(call["arguments"].as_str().unwrap())
            .unwrap_or_else(|e| panic!("{client} {name}: arguments are JSON: {e}: {call}"));
        assert!(args.is_object(), "{client} {name}: {args}");
        assert!(!call["name"].as_str().unwrap().is_empty());
    }
    assert_eq!(
        case("mixed_stream")["choices"],
        case("mixed_whole")["choices"],
        "{client}: streamed and whole answers agree"
    );
    check_usage(
        &case("mixed_stream")["usage"],
        3,
        &format!("{client} mixed"),
    );

    // A 5xx before the first byte: 502 in OpenAI's shape, the client's own error class.
    let failing = case("failing");
    assert_eq!(failing["status"], 502, "{client}: {failing}");
    assert_eq!(failing["type"], "upstream_error", "{client}: {failing}");
    assert_eq!(
        failing["class"], "InternalServerError",
        "{client}: {failing}"
    );
    assert!(
        failing["message"].as_str().unwrap().contains("\"failing\""),
        "{client}: {failing}"
    );

    // A choice cut mid-stream ends alone with finish_reason "error"; the others finish.
    let cut = case("cut_stream");
    let mut f = finishes(&cut);
    f.sort_unstable();
    assert_eq!(f, ["error", "stop", "stop"], "{client}: {cut}");
    let failed = cut["choices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["finish_reason"] == "error")
        .unwrap();
    assert!(
        failed["error"].is_string(),
        "{client}: the failed choice says why: {cut}"
    );

    // A vote decided while the stalled sample still runs: it is cancelled.
    for name in ["vote_stream", "vote_whole"] {
        let got = case(name);
        assert_eq!(texts(&got), ["Answer: 42"], "{client} {name}: {got}");
        let summary = &got["choicewise"];
        assert_eq!(summary["decision"], "vote", "{client} {name}: {got}");
        assert_eq!(summary["samples"], 5, "{client} {name}: {got}");
        assert_eq!(
            summary["selected"].as_array().unwrap().len(),
            1,
            "{client} {name}"
        );
        // The stalled sample never finishes, so it is cancelled; the "41" may finish before
        // the third "42" decides the vote, or be cancelled with it, as the sockets run.
        let cancelled = summary["cancelled"].as_array().unwrap();
        assert!((1..=2).contains(&cancelled.len()), "{client} {name}: {got}");
        assert!(
            !cancelled.contains(&summary["selected"][0]),
            "{client} {name}: {got}"
        );
        assert_eq!(summary["vote"]["votes"], 3, "{client} {name}: {got}");
    }
    check_usage(&case("vote_stream")["usage"], 5, &format!("{client} vote"));

    // First finished: the quick sample wins; the stalled one is cancelled.
    let race = case("first_finished_stream");
    assert_eq!(texts(&race), ["done quickly"], "{client}: {race}");
    assert_eq!(
        race["choicewise"]["decision"], "first_finished",
        "{client}: {race}"
    );
    let (selected, cancelled) = (
        &race["choicewise"]["selected"],
        &race["choicewise"]["cancelled"],
    );
    assert_eq!(selected.as_array().unwrap().len(), 1, "{client}: {race}");
    assert_eq!(cancelled.as_array().unwrap().len(), 1, "{client}: {race}");
    assert_ne!(selected[0], cancelled[0], "{client}: {race}");

    for (name, status, class) in [
        ("wrong_key", 401, "AuthenticationError"),
        ("unknown_model", 404, "NotFoundError"),
        ("n_too_large", 400, "BadRequestError"),
    ] {
        let got = case(name);
        assert_eq!(got["status"], status, "{client} {name}: {got}");
        assert_eq!(got["class"], class, "{client} {name}: {got}");
        assert!(
            got["message"].as_str().is_some_and(|m| !m.is_empty()),
            "{client} {name}"
        );
    }

    if std::env::var_os("CHOICEWISE_LLAMA_URL").is_some() {
        let got = case("llama_stream");
        assert_eq!(
            got["choices"].as_array().unwrap().len(),
            3,
            "{client}: {got}"
        );
        for f in finishes(&got) {
            assert!(matches!(f, "stop" | "length"), "{client}: {got}");
        }
        assert!(texts(&got).iter().all(|t| !t.is_empty()), "{client}: {got}");
        check_usage(&got["usage"], 3, &format!("{client} llama"));
        assert_eq!(
            got["usage"]["choicewise"]["estimated"], false,
            "{client}: the server counts: {got}"
        );
        let got = case("llama_whole");
        assert_eq!(texts(&got).len(), 2, "{client}: {got}");
        assert!(texts(&got).iter().all(|t| !t.is_empty()), "{client}: {got}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs openai-python from PyPI: scripts/gateway-clients.sh install"]
async fn openai_python() {
    let python = clients_dir().join("venv/bin/python");
    let results = run(python, "run.py", false).await;
    // openai-python's own stream helper, 20 times over native n = 3 whose choices first
    // appear out of order: every run ends with the three choices the library assembles.
    let expected = assembled("openai_n3_tools.sse").await;
    let runs = results["stream_helper"].as_array().unwrap();
    assert_eq!(runs.len(), 20);
    for (i, run) in runs.iter().enumerate() {
        assert!(run.get("error").is_none(), "run {i}: {run}");
        let choices = run["choices"].as_array().unwrap();
        assert_eq!(choices.len(), expected.len(), "run {i}: {run}");
        for (got, want) in choices.iter().zip(&expected) {
            assert_eq!(got["index"], want["index"], "run {i}: {run}");
            assert_eq!(got["content"], want["content"], "run {i}: {run}");
            assert_eq!(
                got["finish_reason"], want["finish_reason"],
                "run {i}: {run}"
            );
        }
    }
    check(results).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs openai-node from npm: scripts/gateway-clients.sh install"]
async fn openai_node() {
    check(run(PathBuf::from("node"), "run.cjs", true).await).await;
}

// The SDKs' own APIs: Anthropic Messages (`/v1/messages`) and OpenAI Responses
// (`/v1/responses`), each client's script run against a gateway of Chat Completions upstreams.

/// A one-choice Chat Completions stream calling `get_weather` with `{"city": "Paris"}` (the
/// arguments in two fragments), finishing with `tool_calls`.
fn tool_call() -> String {
    let chunk = |delta: Value, finish: Value| {
        let chunk = serde_json::json!({"id": "chatcmpl-tool", "object": "chat.completion.chunk",
            "model": "m", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
        format!("data: {chunk}\n\n")
    };
    let mut sse = chunk(
        serde_json::json!({"role": "assistant", "content": null, "tool_calls": [{"index": 0,
            "id": "call_weather", "type": "function",
            "function": {"name": "get_weather", "arguments": ""}}]}),
        Value::Null,
    );
    for part in ["{\"city\": ", "\"Paris\"}"] {
        sse += &chunk(
            serde_json::json!({"tool_calls": [{"index": 0, "function": {"arguments": part}}]}),
            Value::Null,
        );
    }
    sse += &chunk(serde_json::json!({}), "tool_calls".into());
    sse + "data: [DONE]\n\n"
}

/// The text the tools upstream answers once the tool's result is back.
const AFTER_TOOL: &str = "It is sunny in Paris.";

/// The upstreams of one SDK's run: `echo` answers text, `tools` a tool call then (the
/// result sent back) text, in turn; `select` fans out 3 samples, one of two stalling;
/// `failing` answers 503.
struct SdkUpstreams {
    tools: TestServer,
    select: TestServer,
    _servers: Vec<TestServer>,
    addr: SocketAddr,
}

async fn sdk_gateway() -> SdkUpstreams {
    let echo = answering("Hello from chat").await;
    let tools = start(
        TestServer::builder()
            .body(tool_call())
            .then(says(AFTER_TOOL)),
    )
    .await;
    let select = start(stalled(1).then(says("Answer: 42"))).await;
    let failing =
        start(TestServer::builder().fail(Failure::status(503).message("down for maintenance")))
            .await;
    // Every answer cut after its first words.
    let cut = start(says("an answer cut before its end").close_after_events(2)).await;
    let upstream = |name: &str, url: &str, n: &str| {
        format!(
            "[[models]]\nname = \"{name}\"\n[[models.upstreams]]\napi = \"chat\"\nbase_url = \"{url}\"\nmodel = \"up\"\nn = \"{n}\"\n"
        )
    };
    let mut toml = String::from("[auth]\nkeys_env = \"CLIENT_KEYS\"\n");
    toml += &upstream("echo", &echo.base_url(), "native");
    toml += &upstream("tools", &tools.base_url(), "native");
    toml += &upstream("select", &select.base_url(), "fan-out");
    toml += &upstream("failing", &failing.base_url(), "native");
    toml += &upstream("cut", &cut.base_url(), "native");
    if let Ok(llama) = std::env::var("CHOICEWISE_LLAMA_URL") {
        toml += &upstream("llama", &llama, "native");
    }
    let env = |name: &str| (name == "CLIENT_KEYS").then(|| KEY.to_string());
    let (addr, _) = serve(&toml, env).await;
    SdkUpstreams {
        tools,
        select,
        _servers: vec![echo, failing, cut],
        addr,
    }
}

/// What the tools upstream was sent: `pairs` tool round trips, each a request answered with
/// the call, then one carrying the call and its result (`sunny`) back as Chat Completions
/// messages.
fn check_round_trips(tools: &TestServer, pairs: usize, what: &str) {
    let requests = tools.requests();
    assert_eq!(requests.len(), 2 * pairs, "{what}: tool requests");
    check_round_trip_requests(&requests, what);
}

/// `requests`, in pairs: a request offering the tool, then one carrying the call and its
/// result back.
fn check_round_trip_requests(requests: &[choicewise_testserver::RecordedRequest], what: &str) {
    for pair in requests.chunks(2) {
        let first = pair[0].json.as_ref().unwrap();
        assert_eq!(
            first["tools"][0]["function"]["name"], "get_weather",
            "{what}: the tool is offered: {first}"
        );
        let second = pair[1].json.as_ref().unwrap();
        let messages = second["messages"].as_array().unwrap();
        let call = messages
            .iter()
            .find(|m| m["role"] == "assistant" && m["tool_calls"].is_array())
            .unwrap_or_else(|| panic!("{what}: the call is sent back: {second}"));
        assert_eq!(call["tool_calls"][0]["id"], "call_weather", "{what}");
        assert_eq!(
            call["tool_calls"][0]["function"]["name"], "get_weather",
            "{what}"
        );
        let args: Value = serde_json::from_str(
            call["tool_calls"][0]["function"]["arguments"]
                .as_str()
                .unwrap(),
        )
        .unwrap();
        assert_eq!(args, serde_json::json!({"city": "Paris"}), "{what}");
        let result = messages
            .iter()
            .find(|m| m["role"] == "tool")
            .unwrap_or_else(|| panic!("{what}: the result is sent back: {second}"));
        assert_eq!(result["tool_call_id"], "call_weather", "{what}: {second}");
        assert!(
            result["content"].to_string().contains("sunny"),
            "{what}: {second}"
        );
    }
}

/// A `choicewise` summary of the selection every SDK asks for.
fn check_selection(summary: &Value, what: &str) {
    assert_eq!(summary["decision"], "first_finished", "{what}: {summary}");
    assert_eq!(summary["samples"], 3, "{what}: {summary}");
    assert_eq!(summary["started"], 3, "{what}: {summary}");
    assert_eq!(
        summary["selected"].as_array().map(Vec::len),
        Some(1),
        "{what}: {summary}"
    );
}

/// An error the client raised: its status, class and a non-empty message.
fn check_error(got: &Value, status: u16, class: &str, what: &str) {
    assert_eq!(got["status"], status, "{what}: {got}");
    assert_eq!(got["class"], class, "{what}: {got}");
    assert!(
        got["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{what}: {got}"
    );
}

/// An Anthropic `message` as a client parsed it: its text, stop reason and usage.
fn check_message(got: &Value, text: &str, what: &str) {
    assert_eq!(got["type"], "message", "{what}: {got}");
    assert_eq!(got["role"], "assistant", "{what}: {got}");
    assert_eq!(got["content"][0]["type"], "text", "{what}: {got}");
    assert_eq!(got["content"][0]["text"], text, "{what}: {got}");
    assert_eq!(got["stop_reason"], "end_turn", "{what}: {got}");
    assert!(
        got["usage"]["output_tokens"].as_u64().unwrap() > 0,
        "{what}: {got}"
    );
}

/// Anthropic's streamed event sequence, as a client typed it.
fn check_anthropic_events(got: &Value, text: &str, what: &str) {
    let events: Vec<&str> = got["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_str().unwrap())
        .collect();
    assert_eq!(events.first(), Some(&"message_start"), "{what}: {got}");
    assert_eq!(
        events[events.len() - 2..],
        ["message_delta", "message_stop"],
        "{what}: {got}"
    );
    assert!(events.contains(&"content_block_start"), "{what}: {got}");
    assert!(events.contains(&"content_block_stop"), "{what}: {got}");
    assert_eq!(got["text"], text, "{what}: {got}");
    assert_eq!(got["stop_reason"], "end_turn", "{what}: {got}");
    assert!(
        got["usage"]["output_tokens"].as_u64().unwrap() > 0,
        "{what}: {got}"
    );
}

/// What both Anthropic SDKs run: `create` streamed and not, the stream helper, a selection,
/// a failing upstream, a missing `max_tokens`, a wrong key.
fn check_anthropic(got: &Value, client: &str) {
    check_message(&got["create_whole"], "Hello from chat", client);
    assert_eq!(got["create_whole"]["model"], "echo", "{client}");
    check_anthropic_events(&got["create_stream"], "Hello from chat", client);
    assert_eq!(got["create_stream"]["model"], "echo", "{client}");
    let helper = &got["stream_helper"];
    assert_eq!(
        helper["text_stream"], "Hello from chat",
        "{client}: {helper}"
    );
    check_message(&helper["final"], "Hello from chat", client);

    // A selection: the quick sample's answer, the summary beside it.
    check_message(&got["select_whole"], "Answer: 42", client);
    check_selection(&got["select_whole"]["choicewise"], client);
    check_anthropic_events(&got["select_stream"], "Answer: 42", client);
    check_selection(&got["select_stream"]["choicewise"], client);

    // A failing upstream: 502 in Anthropic's shape; a bad request and a wrong key too.
    for name in ["failing", "failing_stream"] {
        let failing = &got[name];
        check_error(failing, 502, "InternalServerError", client);
        assert_eq!(failing["shape"], "error", "{client}: {failing}");
        assert_eq!(failing["type"], "api_error", "{client}: {failing}");
        assert!(
            failing["message"].as_str().unwrap().contains("503"),
            "{client}: {failing}"
        );
    }
    let bad = &got["no_max_tokens"];
    check_error(bad, 400, "BadRequestError", client);
    assert_eq!(bad["type"], "invalid_request_error", "{client}: {bad}");
    assert!(
        bad["message"].as_str().unwrap().contains("max_tokens"),
        "{client}: {bad}"
    );
    let wrong = &got["wrong_key"];
    check_error(wrong, 401, "AuthenticationError", client);
    assert_eq!(wrong["type"], "authentication_error", "{client}: {wrong}");
    if std::env::var_os("CHOICEWISE_LLAMA_URL").is_some() {
        // A real model: its own words, a stop reason Anthropic's terms have, real counts.
        for name in ["llama_whole", "llama_select"] {
            let m = &got[name];
            let text = m["content"][0]["text"].as_str().unwrap_or_default();
            assert!(!text.trim().is_empty(), "{client} {name}: {m}");
            assert!(
                matches!(m["stop_reason"].as_str(), Some("end_turn" | "max_tokens")),
                "{client} {name}: {m}"
            );
            assert!(
                m["usage"]["output_tokens"].as_u64().unwrap() > 0,
                "{client} {name}: {m}"
            );
            assert!(
                m["usage"]["input_tokens"].as_u64().unwrap() > 0,
                "{client} {name}: {m}"
            );
        }
        assert_eq!(
            got["llama_select"]["choicewise"]["decision"], "first_token",
            "{client}"
        );
        let stream = &got["llama_stream"];
        assert!(
            !stream["text"].as_str().unwrap().trim().is_empty(),
            "{client}: {stream}"
        );
        assert_eq!(stream["events"][0], "message_start", "{client}: {stream}");
        assert_eq!(
            stream["events"].as_array().unwrap().last().unwrap(),
            "message_stop"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the Anthropic TypeScript SDK from npm: scripts/gateway-clients.sh install"]
async fn anthropic_node() {
    let gateway = sdk_gateway().await;
    let node = PathBuf::from("node");
    let got = run_script(
        gateway.addr,
        node,
        "anthropic_run.cjs",
        Some("@anthropic-ai/sdk"),
    )
    .await;
    let client = got["client"].as_str().unwrap().to_string();
    eprintln!("checking {client}");
    check_anthropic(&got, &client);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs anthropic-python from PyPI: scripts/gateway-clients.sh install"]
async fn anthropic_python() {
    let python = clients_dir().join("venv/bin/python");
    let gateway = sdk_gateway().await;
    let got = run_script(gateway.addr, python, "anthropic_run.py", None).await;
    let client = got["client"].as_str().unwrap().to_string();
    eprintln!("checking {client}");
    check_anthropic(&got, &client);

    // A tool call, its result sent back, the answer: with `create` and with `stream`.
    for name in ["tool_round_trip", "tool_round_trip_stream"] {
        let what = format!("{client} {name}");
        let first = &got[name]["first"];
        assert_eq!(first["stop_reason"], "tool_use", "{what}: {first}");
        let call = first["content"]
            .as_array()
            .unwrap()
            .iter()
            .find(|b| b["type"] == "tool_use")
            .unwrap();
        assert_eq!(call["id"], "call_weather", "{what}: {first}");
        assert_eq!(call["name"], "get_weather", "{what}: {first}");
        assert_eq!(
            call["input"],
            serde_json::json!({"city": "Paris"}),
            "{what}"
        );
        check_message(&got[name]["second"], AFTER_TOOL, &what);
    }
    check_round_trips(&gateway.tools, 2, &client);

    let counted = got["count_tokens"].as_u64().unwrap();
    assert!(counted > 3, "{client}: count_tokens {counted}");
}

/// A Responses `response` as a client parsed it, answering `text`.
fn check_response(got: &Value, text: &str, what: &str) {
    assert_eq!(got["status"], "completed", "{what}: {got}");
    assert_eq!(got["output_text"], text, "{what}: {got}");
    assert!(
        got["output"]
            .as_array()
            .unwrap()
            .iter()
            .any(|i| i["type"] == "message" && i["text"] == text),
        "{what}: {got}"
    );
    assert!(
        got["usage"]["output_tokens"].as_u64().unwrap() > 0,
        "{what}: {got}"
    );
}

/// Responses' streamed events as `responses.create(stream=True)` typed them.
fn check_responses_events(got: &Value, text: &str, what: &str) {
    let events: Vec<&str> = got["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_str().unwrap())
        .collect();
    assert_eq!(
        events[..2],
        ["response.created", "response.in_progress"],
        "{what}: {got}"
    );
    assert_eq!(events.last(), Some(&"response.completed"), "{what}: {got}");
    for name in [
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.done",
        "response.output_item.done",
    ] {
        assert!(events.contains(&name), "{what}: {name}: {got}");
    }
    assert_eq!(got["in_order"], true, "{what}: sequence numbers: {got}");
    assert_eq!(got["text"], text, "{what}: {got}");
    check_response(&got["final"], text, what);
}

/// The first half of a function-call round trip: the call as the client parsed it.
fn check_function_call(response: &Value, what: &str) {
    let call = response["output"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["type"] == "function_call")
        .unwrap_or_else(|| panic!("{what}: no function call: {response}"));
    assert_eq!(call["call_id"], "call_weather", "{what}: {call}");
    assert_eq!(call["name"], "get_weather", "{what}: {call}");
    let args: Value = serde_json::from_str(call["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(args, serde_json::json!({"city": "Paris"}), "{what}: {call}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs openai-python from PyPI: scripts/gateway-clients.sh install"]
async fn openai_python_responses() {
    let python = clients_dir().join("venv/bin/python");
    let gateway = sdk_gateway().await;
    let got = run_script(gateway.addr, python, "responses_run.py", None).await;
    let client = got["client"].as_str().unwrap().to_string();
    eprintln!("checking {client} (Responses)");
    if std::env::var_os("CHOICEWISE_CLIENTS_DUMP").is_some() {
        eprintln!("{got:#}");
    }

    check_responses_events(&got["create_stream"], "Hello from chat", &client);
    check_response(&got["create_whole"], "Hello from chat", &client);
    assert_eq!(got["create_whole"]["model"], "echo", "{client}");
    check_response(&got["helper_stream"]["final"], "Hello from chat", &client);

    // A function call, its output sent back, the answer: create(stream=True) and stream().
    let plain = &got["tool_round_trip"];
    check_function_call(&plain["first"]["final"], &client);
    assert!(
        plain["first"]["events"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e == "response.function_call_arguments.done"),
        "{client}: {plain}"
    );
    check_responses_events(&plain["second"], AFTER_TOOL, &client);
    let helper = &got["tool_round_trip_helper"];
    check_function_call(&helper["first"]["final"], &client);
    let streamed: Value =
        serde_json::from_str(helper["first"]["arguments_streamed"].as_str().unwrap()).unwrap();
    assert_eq!(streamed, serde_json::json!({"city": "Paris"}), "{client}");
    check_response(&helper["second"]["final"], AFTER_TOOL, &client);
    check_round_trips(&gateway.tools, 2, &client);

    // A selection: the quick sample's answer, the summary on response.completed.
    check_responses_events(&got["select_stream"], "Answer: 42", &client);
    check_selection(&got["select_stream"]["choicewise"], &client);
    check_response(&got["select_whole"], "Answer: 42", &client);
    check_selection(&got["select_whole"]["choicewise"], &client);

    let failing = &got["failing"];
    check_error(failing, 502, "InternalServerError", &client);
    assert!(
        failing["message"].as_str().unwrap().contains("503"),
        "{client}: {failing}"
    );
    let stored = &got["stored"];
    check_error(stored, 400, "BadRequestError", &client);
    assert_eq!(stored["param"], "store", "{client}: {stored}");

    if std::env::var_os("CHOICEWISE_LLAMA_URL").is_some() {
        // A real model: its own words (cut at max_output_tokens or not), real counts.
        for r in [&got["llama_whole"], &got["llama_stream"]["final"]] {
            assert!(
                matches!(r["status"].as_str(), Some("completed" | "incomplete")),
                "{client}: {r}"
            );
            assert!(
                !r["output_text"].as_str().unwrap().trim().is_empty(),
                "{client}: {r}"
            );
            assert!(
                r["usage"]["output_tokens"].as_u64().unwrap() > 0,
                "{client}: {r}"
            );
        }
        let stream = &got["llama_stream"];
        assert_eq!(stream["in_order"], true, "{client}: {stream}");
        assert_eq!(
            stream["text"], stream["final"]["output_text"],
            "{client}: the deltas add up to the text"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs openai-agents from PyPI: scripts/gateway-clients.sh install"]
async fn openai_agents() {
    let python = clients_dir().join("venv/bin/python");
    let gateway = sdk_gateway().await;
    let got = run_script(gateway.addr, python, "agents_run.py", None).await;
    let client = got["client"].as_str().unwrap().to_string();
    eprintln!("checking {client}");
    if std::env::var_os("CHOICEWISE_CLIENTS_DUMP").is_some() {
        eprintln!("{got:#}");
    }

    // The agent calls its tool once, then answers: run and run_streamed.
    for name in ["run", "run_streamed"] {
        let run = &got[name];
        assert_eq!(run["final_output"], AFTER_TOOL, "{client} {name}: {run}");
        assert_eq!(
            run["tool_calls"],
            serde_json::json!(["Paris"]),
            "{client} {name}"
        );
        let items: Vec<&str> = run["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i.as_str().unwrap())
            .collect();
        assert_eq!(
            items,
            ["ToolCallItem", "ToolCallOutputItem", "MessageOutputItem"],
            "{client} {name}"
        );
    }
    assert_eq!(got["run_streamed"]["deltas"], AFTER_TOOL, "{client}");
    check_round_trips(&gateway.tools, 2, &client);

    assert_eq!(got["select"]["final_output"], "Answer: 42", "{client}");
    // The SDK keeps no `choicewise` summary: the upstream saw the fan-out. (At least 2: a
    // sample cancelled at the decision may be cut before the upstream has read its request.)
    assert!(
        gateway.select.request_count() >= 2,
        "{client}: samples fanned out"
    );

    let failing = &got["failing"];
    check_error(failing, 502, "InternalServerError", &client);
    let stored = &got["stored"];
    check_error(stored, 400, "BadRequestError", &client);
    assert_eq!(stored["param"], "store", "{client}: {stored}");
    // The Chat model on a stream whose only choice was cut: the SDK raises the gateway's
    // mid-stream error event (issue 49), it does not return the truncated text.
    let cut = &got["cut"];
    assert_eq!(cut["raised"], "APIError", "{client}: {cut}");
    assert!(
        cut["message"]
            .as_str()
            .is_some_and(|m| m.contains("every choice failed")),
        "{client}: {cut}"
    );

    if std::env::var_os("CHOICEWISE_LLAMA_URL").is_some() {
        // A real model: an agent without tools answers in its own words, or the SDK reports
        // the answer cut at max_tokens (`response.incomplete`) in its own terms.
        let llama = &got["llama"];
        match llama["incomplete"].as_str() {
            Some(why) => assert!(why.contains("max_output_tokens"), "{client}: {llama}"),
            None => {
                assert!(
                    !llama["final_output"].as_str().unwrap().trim().is_empty(),
                    "{client}: {llama}"
                );
                assert_eq!(
                    llama["items"],
                    serde_json::json!(["MessageOutputItem"]),
                    "{client}"
                );
            }
        }
    }
}

/// The Vercel AI SDK's default OpenAI provider, `openai(model)`, which speaks Responses:
/// text whole and streamed, a tool round trip the SDK drives itself, and a failing upstream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the Vercel AI SDK from npm: scripts/gateway-clients.sh install"]
async fn ai_sdk() {
    let gateway = sdk_gateway().await;
    let got = run_script(
        gateway.addr,
        PathBuf::from("node"),
        "ai_sdk_run.cjs",
        Some("@ai-sdk/openai"),
    )
    .await;
    let client = got["client"].as_str().unwrap().to_string();
    eprintln!("checking {client}");
    if std::env::var_os("CHOICEWISE_CLIENTS_DUMP").is_some() {
        eprintln!("{got:#}");
    }
    for urls in got["urls"].as_array().unwrap() {
        assert!(
            urls.as_str().unwrap().ends_with("/v1/responses"),
            "{client}: the default provider speaks Responses: {urls}"
        );
    }
    for case in ["generate", "stream"] {
        let r = &got[case];
        assert_eq!(r["text"], "Hello from chat", "{client} {case}: {r}");
        assert_eq!(r["finish_reason"], "stop", "{client} {case}: {r}");
        assert!(
            r["output_tokens"].as_u64().unwrap() > 0,
            "{client} {case}: {r}"
        );
    }
    assert_eq!(got["generate"]["model"], "echo", "{client}");

    let round = &got["tool_round_trip"];
    assert_eq!(round["text"], AFTER_TOOL, "{client}: {round}");
    assert_eq!(
        round["calls"],
        serde_json::json!([{"name": "get_weather", "input": {"city": "Paris"}}]),
        "{client}"
    );
    assert_eq!(round["results"], serde_json::json!(["sunny"]), "{client}");
    // The round trip's two requests, then the first step of the one that refers to its call
    // by id (its second step is refused before any upstream).
    let requests = gateway.tools.requests();
    assert_eq!(requests.len(), 3, "{client}: tool requests");
    check_round_trip_requests(&requests[..2], &client);
    let referenced = &got["referenced"];
    check_error(referenced, 400, "APICallError", &client);
    assert!(
        referenced["message"]
            .as_str()
            .unwrap()
            .contains("item_reference"),
        "{client}: {referenced}"
    );

    let failing = &got["failing"];
    check_error(failing, 502, "APICallError", &client);
    assert!(
        failing["message"].as_str().unwrap().contains("503"),
        "{client}: {failing}"
    );
}

// Google's own API: google-genai on `/v1beta/models/{model}:generateContent`,
// `:streamGenerateContent`, `:countTokens` and `GET /v1beta/models` (gemini_run.py), over the
// Chat Completions test upstreams of the
// Gemini tests (`crate::gemini::gateway`).

/// A candidate as gemini_run.py built it: its index, text, finish reason, and nothing of
/// it after its finish.
fn check_candidates(got: &Value, expected: &[(&str, &str)], what: &str) {
    let candidates = got.as_array().unwrap_or_else(|| panic!("{what}: {got}"));
    assert_eq!(candidates.len(), expected.len(), "{what}: {got}");
    for (i, (c, (text, finish))) in candidates.iter().zip(expected).enumerate() {
        assert_eq!(c["index"], i, "{what}: {got}");
        assert_eq!(c["text"], *text, "{what}: {got}");
        assert_eq!(c["finish_reason"], *finish, "{what}: {got}");
        assert_eq!(c["after_finish"], 0, "{what}: {got}");
    }
}

/// Usage metadata as the SDK typed it: the parts add up to the total.
fn check_gemini_usage(usage: &Value, what: &str) {
    let (p, c, t) = (
        usage["prompt"].as_u64().unwrap(),
        usage["candidates"].as_u64().unwrap(),
        usage["total"].as_u64().unwrap(),
    );
    assert!(c > 0 && p + c == t, "{what}: {usage}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs google-genai from PyPI: scripts/gateway-clients.sh install"]
async fn google_genai() {
    use crate::gemini::THREE;
    let gateway = crate::gemini::gateway().await;
    let python = clients_dir().join("venv/bin/python");
    let got = run_keyed(
        gateway.addr,
        python,
        "gemini_run.py",
        None,
        crate::gemini::KEY,
    )
    .await;
    let client = got["client"].as_str().unwrap().to_string();

    // candidateCount = 3, streamed (20 times over) and not: every candidate complete, by index.
    let stream = &got["three_stream"];
    check_candidates(&stream["candidates"], &THREE, &format!("{client} stream"));
    check_gemini_usage(&stream["usage"], &client);
    assert_eq!(stream["model_version"], "three", "{client}: {stream}");
    let runs = got["three_streams"].as_array().unwrap();
    assert_eq!(runs.len(), 20, "{client}");
    for (i, run) in runs.iter().enumerate() {
        check_candidates(run, &THREE, &format!("{client} stream {i}"));
    }
    let whole = &got["three_whole"];
    check_candidates(&whole["candidates"], &THREE, &format!("{client} whole"));
    assert_eq!(
        whole["order"],
        serde_json::json!([0, 1, 2]),
        "{client}: {whole}"
    );
    check_gemini_usage(&whole["usage"], &client);

    // A vote: one candidate, the majority's.
    for name in ["vote_whole", "vote_stream"] {
        check_candidates(&got[name]["candidates"], &[("Answer: 42", "STOP")], &client);
    }

    // A function call, its args an object; sent back with its response, paired by name.
    let weather = serde_json::json!({"name": "get_weather", "args": {"city": "Paris"}});
    assert_eq!(
        got["tools_whole"]["function_calls"],
        serde_json::json!([weather]),
        "{client}"
    );
    for name in ["round_trip", "round_trip_stream"] {
        assert_eq!(got[name]["call"], weather, "{client} {name}");
    }
    // Its requests: the call, then each round trip's two (the call, the call sent back).
    let requests = gateway.tools.requests();
    assert_eq!(requests.len(), 5, "{client}: tool requests");
    for sent in [&requests[2], &requests[4]] {
        let sent = sent.json.as_ref().unwrap();
        let messages = sent["messages"].as_array().unwrap();
        let call = messages.iter().find(|m| m["role"] == "assistant").unwrap();
        let id = &call["tool_calls"][0]["id"];
        assert_eq!(id, "call_weather", "{client}: {sent}");
        let result = messages.iter().find(|m| m["role"] == "tool").unwrap();
        assert_eq!(result["tool_call_id"], *id, "{client}: {sent}");
        assert!(
            result["content"]
                .as_str()
                .unwrap()
                .contains("sunny in Paris"),
            "{sent}"
        );
    }

    // Errors: the SDK's own classes, Google's status names.
    for (name, status, class, google) in [
        ("failing", 502, "ServerError", "UNAVAILABLE"),
        ("cut_stream", 502, "ServerError", "UNAVAILABLE"),
        ("unknown_model", 404, "ClientError", "NOT_FOUND"),
        ("count_unknown", 404, "ClientError", "NOT_FOUND"),
        ("model_unknown", 404, "ClientError", "NOT_FOUND"),
        ("bad_count", 400, "ClientError", "INVALID_ARGUMENT"),
        ("wrong_key", 401, "ClientError", "UNAUTHENTICATED"),
    ] {
        let e = &got[name];
        check_error(e, status, class, &format!("{client} {name}"));
        assert_eq!(e["google_status"], google, "{client} {name}: {e}");
    }
    assert!(
        got["bad_count"]["message"]
            .as_str()
            .unwrap()
            .contains("candidateCount"),
        "{client}: {}",
        got["bad_count"]
    );

    // The token count: the prompt's, more for a longer one.
    let (short, long) = (got["count"].as_u64(), got["count_long"].as_u64());
    let (Some(short), Some(long)) = (short, long) else {
        panic!(
            "{client}: counts {} and {}",
            got["count"], got["count_long"]
        );
    };
    assert!(
        short > 2 && long > short + 100,
        "{client}: {short} then {long}"
    );
    // The model list and one model, as the SDK types them.
    let actions = serde_json::json!(["generateContent", "streamGenerateContent", "countTokens"]);
    let models = got["models"].as_array().unwrap();
    let names: Vec<&str> = models.iter().map(|m| m["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "models/three",
            "models/tools",
            "models/vote",
            "models/down",
            "models/cut",
            "models/thinks",
            "models/team/three"
        ],
        "{client}"
    );
    for model in models {
        assert_eq!(model["actions"], actions, "{client}: {model}");
    }
    assert_eq!(models[0]["display_name"], "three", "{client}");
    assert_eq!(got["model"]["name"], "models/team/three", "{client}");
    assert_eq!(got["model"]["actions"], actions, "{client}");
}

/// A scripted Gemini upstream of three candidates, interleaved and out of order (2 first, 1
/// finished first): "42", "41" and "42" again, each in two pieces.
fn gemini_three() -> String {
    let text = |i: u32, t: &str| serde_json::json!({"index": i, "content": {"role": "model", "parts": [{"text": t}]}});
    let stop =
        |i: u32| serde_json::json!({"index": i, "content": {"parts": []}, "finishReason": "STOP"});
    let records = [
        serde_json::json!({"candidates": [text(2, "4")], "modelVersion": "gemini-2.5-flash"}),
        serde_json::json!({"candidates": [text(1, "4"), text(0, "4")]}),
        serde_json::json!({"candidates": [text(1, "1"), stop(1)]}),
        serde_json::json!({"candidates": [text(2, "2")]}),
        serde_json::json!({"candidates": [text(0, "2"), stop(2)]}),
        serde_json::json!({"candidates": [stop(0)], "usageMetadata": {"promptTokenCount": 7,
            "candidatesTokenCount": 6, "totalTokenCount": 13}}),
    ];
    records
        .iter()
        .map(|r| format!("data: {r}\r\n\r\n"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs openai-python from PyPI: scripts/gateway-clients.sh install"]
async fn openai_python_from_gemini() {
    let gemini = start(
        TestServer::builder()
            .body(gemini_three())
            .api_key("g-key")
            .random_writes(1, 40),
    )
    .await;
    let toml = format!(
        "[auth]\nkeys_env = \"CLIENT_KEYS\"\n[[models]]\nname = \"gemini\"\n[[models.upstreams]]\n\
         api = \"gemini\"\nbase_url = \"{}beta\"\nmodel = \"up\"\napi_key_env = \"GEMINI_KEY\"\n",
        gemini.base_url()
    );
    let env = |name: &str| match name {
        "CLIENT_KEYS" => Some(KEY.to_string()),
        "GEMINI_KEY" => Some("g-key".to_string()),
        _ => None,
    };
    let (addr, _) = serve(&toml, env).await;
    let python = clients_dir().join("venv/bin/python");
    let results = run_script(addr, python, "gemini_upstream_run.py", None).await;
    let expected = serde_json::json!([
        {"index": 0, "content": "42", "finish_reason": "stop"},
        {"index": 1, "content": "41", "finish_reason": "stop"},
        {"index": 2, "content": "42", "finish_reason": "stop"},
    ]);
    for name in ["stream", "whole"] {
        let got = &results[name];
        assert_eq!(got["choices"], expected, "{name}: {got}");
        assert_eq!(got["usage"]["prompt_tokens"], 7, "{name}: {got}");
        assert_eq!(got["usage"]["completion_tokens"], 6, "{name}: {got}");
    }
    let vote = &results["vote"];
    assert_eq!(
        vote["choices"],
        serde_json::json!([{"index": 0, "content": "42", "finish_reason": "stop"}]),
        "{vote}"
    );
    // Every request one upstream request of three candidates, with Gemini's key.
    let sent = gemini.requests();
    assert_eq!(sent.len(), 3);
    for r in &sent {
        assert_eq!(r.path, "/v1beta/models/up:streamGenerateContent");
        assert_eq!(r.header("x-goog-api-key"), Some("g-key"));
        assert_eq!(
            r.json.as_ref().unwrap()["generationConfig"]["candidateCount"],
            3
        );
    }
}
