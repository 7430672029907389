//! The gateway under the official OpenAI clients, which no one here wrote: openai-python and
//! openai-node (scripts/gateway-clients.sh installs them under .clients/) run the same cases
//! (tests/clients/run.py, run.cjs) against a gateway on 127.0.0.1 over the project's test
//! servers — native `n`, fan-out over three dialects, a failing upstream, a choice cut
//! mid-stream, selection — and, when `CHOICEWISE_LLAMA_URL` names a real llama.cpp server
//! (scripts/llama-server.sh), over it too. Each script prints what its client parsed; the
//! expectations, one set for both clients, are here.
//!
//! Ignored by a plain `cargo test` (the clients come from PyPI and npm); CI installs them and
//! runs `cargo test -p choicewise-gateway --test clients -- --ignored`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Command;

use choicewise_core::{Completions, Source};
use choicewise_testserver::{Failure, TestServer, answer, fixture};
use serde_json::Value;

mod common;
use common::{serve, stalled};

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
    let native = TestServer::builder()
        .fixture("openai_n3_tools.sse")
        .random_writes(1, 40)
        .start()
        .await
        .unwrap();
    let chat = TestServer::builder()
        .body(answer("from chat"))
        .start()
        .await
        .unwrap();
    let responses = TestServer::builder()
        .fixture("responses_text.sse")
        .start()
        .await
        .unwrap();
    let anthropic = TestServer::builder()
        .fixture("anthropic_tools.sse")
        .start()
        .await
        .unwrap();
    let failing = TestServer::builder()
        .fail(Failure::status(500).message("boom"))
        .start()
        .await
        .unwrap();
    let cut = TestServer::builder()
        .body(answer("fine"))
        .then(
            TestServer::builder()
                .body(answer("cut short"))
                .close_after_events(1),
        )
        .then(TestServer::builder().body(answer("fine")))
        .start()
        .await
        .unwrap();
    let vote = TestServer::builder()
        .body(answer("Answer: 42"))
        .then(stalled(1))
        .then(TestServer::builder().body(answer("Answer: 41")))
        .then(TestServer::builder().body(answer("Answer: 42")))
        .then(TestServer::builder().body(answer("Answer: 42")))
        .start()
        .await
        .unwrap();
    // Two samples per request, one stalling and one quick, whichever connects first.
    let race = stalled(1)
        .then(TestServer::builder().body(answer("done quickly")))
        .start()
        .await
        .unwrap();
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
    assert!(
        program.exists() || !program.is_absolute(),
        "{} is missing: run scripts/gateway-clients.sh install",
        program.display()
    );
    let gateway = gateway().await;
    let mut command = Command::new(&program);
    command
        .arg(repo().join("crates/gateway/tests/clients").join(script))
        .env(
            "CHOICEWISE_GATEWAY_URL",
            format!("http://{}/v1", gateway.addr),
        )
        .env("CHOICEWISE_GATEWAY_KEY", KEY);
    if node {
        let modules = clients_dir().join("node/node_modules");
        assert!(
            modules.join("openai").exists(),
            "{} has no openai: run scripts/gateway-clients.sh install",
            modules.display()
        );
        command.env("NODE_PATH", modules);
    }
    let output = tokio::task::spawn_blocking(move || command.output())
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("{}: {e}", program.display()));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{script} failed: {stderr}");
    serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("{script} printed no JSON ({e}): {stderr}"))
}

/// The choices the library assembles from a fixture: what native `n` must give the client.
async fn assembled(name: &str) -> Vec<Value> {
    let whole = Completions::new(Source::reader(std::io::Cursor::new(fixture(name))))
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
        assert_eq!(
            summary["cancelled"].as_array().unwrap().len(),
            1,
            "{client} {name}: {got}"
        );
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
    check(run(python, "run.py", false).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs openai-node from npm: scripts/gateway-clients.sh install"]
async fn openai_node() {
    check(run(PathBuf::from("node"), "run.cjs", true).await).await;
}
