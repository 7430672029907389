//! The gateway under the coding agents, as installed: Claude Code (npm
//! `@anthropic-ai/claude-code`) on `/v1/messages` and Codex CLI (npm `@openai/codex`) on
//! `/v1/responses`, pinned and installed by scripts/agents.sh under .clients/agents/, run
//! headless with their default settings (no capability override, no feature flag; only
//! telemetry and updates off) against a gateway on 127.0.0.1, over a scripted upstream of
//! each API (Chat Completions, Anthropic Messages, Responses): a text answer; a tool loop
//! (the upstream's first answer calls the agent's shell tool, which runs a command whose
//! output reaches the upstream's second request, answered with text); an upstream cut
//! mid-answer (the agent shows the error and exits non-zero); a hedged model (its default
//! policy, `[models.choicewise]`, hedges the first token across two upstreams, the first of
//! them silent: the turn completes from the second). And Claude Code's gateway model
//! discovery over the gateway's model list.
//!
//! Ignored by a plain `cargo test`: the agents come from npm, and each is a platform binary
//! of its own. CI runs `scripts/agents.sh install`, then
//! `cargo test --workspace --test agents -- --ignored`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use choicewise_testserver::{TestServer, answer};
use serde_json::{Value, json};

mod common;
use common::{serve, silent};

const KEY: &str = "sk-agent-test";

/// How long one run of an agent may take before it is killed and the test fails.
const RUN_LIMIT: Duration = Duration::from_secs(180);

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Where scripts/agents.sh installs the agents.
fn agents_dir() -> PathBuf {
    std::env::var_os("CHOICEWISE_AGENTS_DIR")
        .map_or_else(|| repo().join(".clients/agents"), PathBuf::from)
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Agent {
    ClaudeCode,
    Codex,
}

impl Agent {
    fn program(self) -> PathBuf {
        let name = match self {
            Agent::ClaudeCode => "claude",
            Agent::Codex => "codex",
        };
        let path = agents_dir().join("node_modules/.bin").join(name);
        assert!(
            path.exists(),
            "{} is missing: run scripts/agents.sh install",
            path.display()
        );
        path
    }

    /// The agent's shell tool, and its arguments to run `command`.
    fn shell_call(self, command: &str) -> (&'static str, Value) {
        match self {
            Agent::ClaudeCode => (
                "Bash",
                json!({"command": command, "description": "Print a number"}),
            ),
            Agent::Codex => ("exec_command", json!({"cmd": command})),
        }
    }
}

/// What one run of an agent did.
struct Ran {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    /// The text files the run left in its home (path under it, text).
    files: Vec<(String, String)>,
}

impl std::fmt::Display for Ran {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exit {:?}\n--- stdout\n{}\n--- stderr\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

/// A fresh directory under the system's temporary one.
fn fresh_dir(what: &str) -> PathBuf {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "choicewise-agents-{}-{what}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs `agent` headless on `prompt` against the gateway at `addr`, asking for `model`: its
/// own home (no user configuration), a fresh working directory, no input.
async fn run_agent(agent: Agent, addr: SocketAddr, model: &str, prompt: &str) -> Ran {
    run_agent_with(agent, addr, model, prompt, &[]).await
}

/// As [`run_agent`], with `env` set too; the files the run left in its home, as `Ran::files`
/// (path under the home, text).
async fn run_agent_with(
    agent: Agent,
    addr: SocketAddr,
    model: &str,
    prompt: &str,
    env: &[(&str, &str)],
) -> Ran {
    let home = fresh_dir("home");
    let work = fresh_dir("work");
    let mut command = Command::new(agent.program());
    command
        .current_dir(&work)
        .env("HOME", &home)
        .env("XDG_CONFIG_HOME", home.join(".config"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // Nothing of the machine's own setup reaches the agent.
    for var in [
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_AUTH_TOKEN",
        "ANTHROPIC_BASE_URL",
        "ANTHROPIC_MODEL",
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
        "CODEX_HOME",
    ] {
        command.env_remove(var);
    }
    match agent {
        Agent::ClaudeCode => {
            command
                .args(["-p", prompt, "--model", model])
                .env("ANTHROPIC_BASE_URL", format!("http://{addr}"))
                .env("ANTHROPIC_API_KEY", KEY)
                // Telemetry and updates off: the only settings changed.
                .env("DISABLE_TELEMETRY", "1")
                .env("DISABLE_AUTOUPDATER", "1")
                .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1");
        }
        Agent::Codex => {
            let codex_home = home.join(".codex");
            std::fs::create_dir_all(&codex_home).unwrap();
            // A custom provider: the gateway, speaking Responses.
            std::fs::write(
                codex_home.join("config.toml"),
                format!(
                    "model = \"{model}\"\nmodel_provider = \"choicewise\"\n\n\
                     [model_providers.choicewise]\nname = \"choicewise\"\n\
                     base_url = \"http://{addr}/v1\"\nwire_api = \"responses\"\n\
                     env_key = \"CHOICEWISE_AGENT_KEY\"\n"
                ),
            )
            .unwrap();
            command
                .args(["exec", "--skip-git-repo-check", prompt])
                .env("CODEX_HOME", &codex_home)
                .env("CHOICEWISE_AGENT_KEY", KEY);
        }
    }
    command.envs(env.iter().copied());
    let child = command.spawn().unwrap_or_else(|e| panic!("{agent:?}: {e}"));
    let pid = child.id();
    let output = match tokio::time::timeout(
        RUN_LIMIT,
        tokio::task::spawn_blocking(move || child.wait_with_output()),
    )
    .await
    {
        Ok(output) => output.unwrap().unwrap(),
        Err(_) => {
            let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
            panic!("{agent:?} did not finish within {RUN_LIMIT:?}");
        }
    };
    let files = files_under(&home, &home);
    for dir in [&home, &work] {
        let _ = std::fs::remove_dir_all(dir);
    }
    Ran {
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        files,
    }
}

/// The text files under `dir`, by their path under `root`.
fn files_under(root: &std::path::Path, dir: &std::path::Path) -> Vec<(String, String)> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            files.extend(files_under(root, &path));
        } else if let Ok(text) = std::fs::read_to_string(&path) {
            let name = path.strip_prefix(root).unwrap_or(&path);
            files.push((name.display().to_string(), text));
        }
    }
    files
}

/// The upstream APIs the agents are tried over.
const APIS: [&str; 3] = ["chat", "anthropic", "responses"];

/// Server-sent events: each `(name, data)` as a frame (`name` empty: a data-only one).
fn frames(events: &[(&str, Value)]) -> String {
    let mut out = String::new();
    for (name, data) in events {
        if !name.is_empty() {
            out.push_str(&format!("event: {name}\n"));
        }
        out.push_str(&format!("data: {data}\n\n"));
    }
    out
}

/// An upstream answer of `api` saying `text`, a word per event.
fn text_answer(api: &str, text: &str) -> String {
    let words: Vec<&str> = text.split_inclusive(' ').collect();
    match api {
        "chat" => answer(text),
        "anthropic" => {
            let mut events = vec![
                (
                    "message_start",
                    json!({"type": "message_start", "message": {"id": "msg_up", "type": "message",
                    "role": "assistant", "model": "up", "content": [], "stop_reason": null,
                    "stop_sequence": null, "usage": {"input_tokens": 40, "output_tokens": 1}}}),
                ),
                (
                    "content_block_start",
                    json!({"type": "content_block_start", "index": 0,
                           "content_block": {"type": "text", "text": ""}}),
                ),
            ];
            for w in &words {
                events.push((
                    "content_block_delta",
                    json!({"type": "content_block_delta", "index": 0,
                           "delta": {"type": "text_delta", "text": w}}),
                ));
            }
            events.extend(anthropic_end("end_turn", words.len()));
            frames(&events)
        }
        _ => {
            let item = json!({"id": "msg_up", "type": "message", "status": "completed",
                "role": "assistant", "content": [{"type": "output_text", "text": text, "annotations": []}]});
            let mut events = responses_start();
            events.push((
                "response.output_item.added",
                json!({"type": "response.output_item.added", "output_index": 0,
                       "item": {"id": "msg_up", "type": "message", "status": "in_progress",
                                "role": "assistant", "content": []}}),
            ));
            events.push((
                "response.content_part.added",
                json!({"type": "response.content_part.added", "item_id": "msg_up",
                       "output_index": 0, "content_index": 0,
                       "part": {"type": "output_text", "text": "", "annotations": []}}),
            ));
            for w in &words {
                events.push((
                    "response.output_text.delta",
                    json!({"type": "response.output_text.delta", "item_id": "msg_up",
                           "output_index": 0, "content_index": 0, "delta": w}),
                ));
            }
            events.push((
                "response.output_text.done",
                json!({"type": "response.output_text.done", "item_id": "msg_up",
                       "output_index": 0, "content_index": 0, "text": text}),
            ));
            events.push((
                "response.output_item.done",
                json!({"type": "response.output_item.done", "output_index": 0, "item": item}),
            ));
            events.push(responses_completed(item, words.len()));
            frames(&events)
        }
    }
}

/// An upstream answer of `api` calling the function `name` with `arguments`.
fn call_answer(api: &str, name: &str, arguments: &Value) -> String {
    let args = arguments.to_string();
    match api {
        "chat" => {
            let chunk = |delta: Value, finish: Value| {
                json!({"id": "chatcmpl-up", "object": "chat.completion.chunk", "model": "up",
                       "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
            };
            frames(&[
                (
                    "",
                    chunk(
                        json!({"role": "assistant", "content": null, "tool_calls": [{"index": 0,
                               "id": "call_up1", "type": "function",
                               "function": {"name": name, "arguments": ""}}]}),
                        Value::Null,
                    ),
                ),
                (
                    "",
                    chunk(
                        json!({"tool_calls": [{"index": 0, "function": {"arguments": args}}]}),
                        Value::Null,
                    ),
                ),
                ("", chunk(json!({}), json!("tool_calls"))),
                ("", json!("[DONE]")),
            ])
            .replace("data: \"[DONE]\"", "data: [DONE]")
        }
        "anthropic" => {
            let mut events = vec![
                (
                    "message_start",
                    json!({"type": "message_start", "message": {"id": "msg_up", "type": "message",
                    "role": "assistant", "model": "up", "content": [], "stop_reason": null,
                    "stop_sequence": null, "usage": {"input_tokens": 40, "output_tokens": 1}}}),
                ),
                (
                    "content_block_start",
                    json!({"type": "content_block_start", "index": 0, "content_block":
                           {"type": "tool_use", "id": "toolu_up1", "name": name, "input": {}}}),
                ),
                (
                    "content_block_delta",
                    json!({"type": "content_block_delta", "index": 0,
                           "delta": {"type": "input_json_delta", "partial_json": args}}),
                ),
            ];
            events.extend(anthropic_end("tool_use", 5));
            frames(&events)
        }
        _ => {
            let item = json!({"id": "fc_up1", "type": "function_call", "status": "completed",
                              "arguments": args, "call_id": "call_up1", "name": name});
            let mut events = responses_start();
            events.push((
                "response.output_item.added",
                json!({"type": "response.output_item.added", "output_index": 0,
                       "item": {"id": "fc_up1", "type": "function_call", "status": "in_progress",
                                "arguments": "", "call_id": "call_up1", "name": name}}),
            ));
            events.push((
                "response.function_call_arguments.delta",
                json!({"type": "response.function_call_arguments.delta", "item_id": "fc_up1",
                       "output_index": 0, "delta": args}),
            ));
            events.push((
                "response.function_call_arguments.done",
                json!({"type": "response.function_call_arguments.done", "item_id": "fc_up1",
                       "output_index": 0, "name": name, "arguments": args}),
            ));
            events.push((
                "response.output_item.done",
                json!({"type": "response.output_item.done", "output_index": 0, "item": item}),
            ));
            events.push(responses_completed(item, 5));
            frames(&events)
        }
    }
}

/// An Anthropic answer's last events: its block closed, the stop reason and usage.
fn anthropic_end(stop: &str, output_tokens: usize) -> Vec<(&'static str, Value)> {
    vec![
        (
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 0}),
        ),
        (
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null},
                   "usage": {"output_tokens": output_tokens}}),
        ),
        ("message_stop", json!({"type": "message_stop"})),
    ]
}

/// A Responses answer's first events.
fn responses_start() -> Vec<(&'static str, Value)> {
    let response = json!({"id": "resp_up", "object": "response", "created_at": 1,
                          "status": "in_progress", "model": "up", "output": [], "usage": null});
    vec![
        (
            "response.created",
            json!({"type": "response.created", "response": response}),
        ),
        (
            "response.in_progress",
            json!({"type": "response.in_progress", "response": response}),
        ),
    ]
}

/// A Responses answer's `response.completed` with its one output item.
fn responses_completed(item: Value, output_tokens: usize) -> (&'static str, Value) {
    (
        "response.completed",
        json!({"type": "response.completed", "response": {"id": "resp_up", "object": "response",
            "created_at": 1, "status": "completed", "model": "up", "output": [item],
            "usage": {"input_tokens": 40, "output_tokens": output_tokens,
                      "total_tokens": 40 + output_tokens}}}),
    )
}

/// A gateway whose model `agent-model` has the one upstream `upstream` of `api`.
async fn gateway(api: &str, upstream: &TestServer) -> SocketAddr {
    let toml = format!(
        "[auth]\nkeys_env = \"AGENT_KEYS\"\n\
         [[models]]\nname = \"agent-model\"\n\
         [[models.upstreams]]\napi = \"{api}\"\nbase_url = \"{}\"\nmodel = \"up\"\n\
         [models.retry]\nbackoff_ms = 1\n",
        upstream.base_url()
    );
    serve(&toml, |name| {
        (name == "AGENT_KEYS").then(|| KEY.to_string())
    })
    .await
    .0
}

/// A gateway whose model `agent-model` hedges its first token across two upstreams of `api`
/// by its default policy (an agent sends no `choicewise` extension): `first` and `second`.
async fn hedged_gateway(api: &str, first: &str, second: &str) -> SocketAddr {
    // A Chat upstream would carry both samples in one request with `n`: one request each.
    let n = match api {
        "chat" => "n = \"fan-out\"\n",
        _ => "",
    };
    let toml = format!(
        "[auth]\nkeys_env = \"AGENT_KEYS\"\n\
         [[models]]\nname = \"agent-model\"\n\
         [models.choicewise]\nselect = \"first_token\"\nsamples = 2\nhedge_after_ms = 300\n\
         [[models.upstreams]]\napi = \"{api}\"\nbase_url = \"{first}\"\nmodel = \"up\"\n{n}\
         [[models.upstreams]]\napi = \"{api}\"\nbase_url = \"{second}\"\nmodel = \"up\"\n{n}\
         [models.retry]\nbackoff_ms = 1\n"
    );
    serve(&toml, |name| {
        (name == "AGENT_KEYS").then(|| KEY.to_string())
    })
    .await
    .0
}

/// The agent's turn, on a model hedged across a silent upstream and one that answers,
/// completes from the second, over each upstream API.
async fn hedged_answer_over_each_api(agent: Agent) {
    futures::future::join_all(APIS.map(|api| async move {
        let said = format!("The hedge answered over {api}.");
        let fine = TestServer::builder()
            .body(text_answer(api, &said))
            .start()
            .await
            .unwrap();
        let addr = hedged_gateway(api, &silent().await, &fine.base_url()).await;
        let ran = run_agent(agent, addr, "agent-model", "Say something.").await;
        assert_eq!(ran.code, Some(0), "{agent:?} over {api}: {ran}");
        assert!(ran.stdout.contains(&said), "{agent:?} over {api}: {ran}");
        assert_eq!(turns(&fine, api).len(), 1, "{agent:?} over {api}: {ran}");
    }))
    .await;
}

/// The upstream's requests on its API's endpoint (not `count_tokens` or `GET /v1/models`).
fn turns(upstream: &TestServer, api: &str) -> Vec<Value> {
    let path = match api {
        "chat" => "/v1/chat/completions",
        "anthropic" => "/v1/messages",
        _ => "/v1/responses",
    };
    (upstream.requests().into_iter())
        .filter(|r| r.path == path)
        .map(|r| r.json.expect("a JSON body"))
        .collect()
}

/// The agent answers with the upstream's text, over each upstream API.
async fn text_answer_over_each_api(agent: Agent) {
    futures::future::join_all(APIS.map(|api| async move {
        let said = format!("The gateway answered over {api}.");
        let upstream = TestServer::builder()
            .body(text_answer(api, &said))
            .start()
            .await
            .unwrap();
        let addr = gateway(api, &upstream).await;
        let ran = run_agent(agent, addr, "agent-model", "Say something.").await;
        assert_eq!(ran.code, Some(0), "{agent:?} over {api}: {ran}");
        assert!(ran.stdout.contains(&said), "{agent:?} over {api}: {ran}");
        let turns = turns(&upstream, api);
        assert_eq!(turns.len(), 1, "{agent:?} over {api}: {turns:?}");
        assert_eq!(turns[0]["model"], "up");
    }))
    .await;
}

/// The agent runs the upstream's shell command and sends its output back; the upstream's
/// second answer ends the turn.
async fn tool_loop_over_each_api(agent: Agent) {
    // The command's output (`cw-42`) is not in its text: only running it gives it.
    let command = "echo cw-$((6*7))";
    futures::future::join_all(APIS.map(|api| async move {
        let (tool, arguments) = agent.shell_call(command);
        let said = format!("The command ran through the gateway over {api}.");
        let upstream = TestServer::builder()
            .body(call_answer(api, tool, &arguments))
            .then(TestServer::builder().body(text_answer(api, &said)))
            .start()
            .await
            .unwrap();
        let addr = gateway(api, &upstream).await;
        let ran = run_agent(agent, addr, "agent-model", "Run the command.").await;
        assert_eq!(ran.code, Some(0), "{agent:?} over {api}: {ran}");
        assert!(ran.stdout.contains(&said), "{agent:?} over {api}: {ran}");
        let turns = turns(&upstream, api);
        assert_eq!(turns.len(), 2, "{agent:?} over {api}: {ran}");
        let second = turns[1].to_string();
        assert!(
            second.contains("cw-42"),
            "{agent:?} over {api}: the command's output is not in the second turn: {second}"
        );
        assert!(
            second.contains(tool),
            "{agent:?} over {api}: the call is not in the second turn: {second}"
        );
    }))
    .await;
}

/// Every answer of the upstream is cut mid-way: the agent shows an error and exits non-zero
/// (`CHOICEWISE_AGENTS_SHOW=1` prints what it showed).
async fn cut_answer_over_each_api(agent: Agent) {
    // The agents retry a failed turn with their own backoff (Claude Code for minutes): the
    // three runs go at once.
    futures::future::join_all(APIS.map(|api| async move {
        let said = "This answer is long enough to be cut before its end by the upstream.";
        // After the opening events and a few words.
        let events = match api {
            "chat" => 3,
            _ => 5,
        };
        let upstream = TestServer::builder()
            .body(text_answer(api, said))
            .close_after_events(events)
            .start()
            .await
            .unwrap();
        let addr = gateway(api, &upstream).await;
        let ran = run_agent(agent, addr, "agent-model", "Say something.").await;
        assert!(
            ran.code.is_some_and(|c| c != 0),
            "{agent:?} over {api}: exited 0 on a cut answer: {ran}"
        );
        assert!(
            !ran.stdout.contains(said),
            "{agent:?} over {api}: printed the whole answer: {ran}"
        );
        let shown = format!("{}{}", ran.stdout, ran.stderr).to_lowercase();
        assert!(
            shown.contains("error"),
            "{agent:?} over {api}: no error shown: {ran}"
        );
        assert!(
            !turns(&upstream, api).is_empty(),
            "{agent:?} over {api}: never reached the upstream: {ran}"
        );
        if std::env::var_os("CHOICEWISE_AGENTS_SHOW").is_some() {
            eprintln!("{agent:?} over {api}, cut: {ran}");
        }
    }))
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Claude Code from npm: scripts/agents.sh install"]
async fn claude_code_text_answer() {
    text_answer_over_each_api(Agent::ClaudeCode).await;
}

/// Claude Code's gateway model discovery (`CLAUDE_CODE_ENABLE_GATEWAY_MODEL_DISCOVERY=1`, the
/// feature under test) reads the gateway's model list: it caches the models whose name says
/// `claude`, which only a list it accepts gives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Claude Code from npm: scripts/agents.sh install"]
async fn claude_code_model_discovery() {
    let upstream = TestServer::builder()
        .body(answer("Discovered."))
        .start()
        .await
        .unwrap();
    let toml = format!(
        "[auth]\nkeys_env = \"AGENT_KEYS\"\n\
         [[models]]\nname = \"claude-gateway-model\"\n[[models.upstreams]]\napi = \"chat\"\nbase_url = \"{url}\"\n\
         [[models]]\nname = \"other-model\"\n[[models.upstreams]]\napi = \"chat\"\nbase_url = \"{url}\"\n",
        url = upstream.base_url()
    );
    let (addr, _) = serve(&toml, |name| {
        (name == "AGENT_KEYS").then(|| KEY.to_string())
    })
    .await;
    let ran = run_agent_with(
        Agent::ClaudeCode,
        addr,
        "claude-gateway-model",
        "Say something.",
        &[("CLAUDE_CODE_ENABLE_GATEWAY_MODEL_DISCOVERY", "1")],
    )
    .await;
    assert_eq!(ran.code, Some(0), "{ran}");
    assert!(ran.stdout.contains("Discovered."), "{ran}");
    let cached = (ran.files.iter())
        .find(|(path, _)| path.ends_with("gateway-models.json"))
        .unwrap_or_else(|| {
            let names: Vec<&str> = ran.files.iter().map(|(p, _)| p.as_str()).collect();
            panic!("no gateway-models.json among {names:?}: {ran}")
        });
    let cached: Value = serde_json::from_str(&cached.1).unwrap();
    let ids: Vec<&str> = (cached["models"].as_array().unwrap().iter())
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["claude-gateway-model"], "{cached}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Claude Code from npm: scripts/agents.sh install"]
async fn claude_code_tool_loop() {
    tool_loop_over_each_api(Agent::ClaudeCode).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Claude Code from npm: scripts/agents.sh install"]
async fn claude_code_cut_answer() {
    cut_answer_over_each_api(Agent::ClaudeCode).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Codex CLI from npm: scripts/agents.sh install"]
async fn codex_text_answer() {
    text_answer_over_each_api(Agent::Codex).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Codex CLI from npm: scripts/agents.sh install"]
async fn codex_tool_loop() {
    tool_loop_over_each_api(Agent::Codex).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Codex CLI from npm: scripts/agents.sh install"]
async fn codex_cut_answer() {
    cut_answer_over_each_api(Agent::Codex).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Claude Code from npm: scripts/agents.sh install"]
async fn claude_code_hedged_model() {
    hedged_answer_over_each_api(Agent::ClaudeCode).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Codex CLI from npm: scripts/agents.sh install"]
async fn codex_hedged_model() {
    hedged_answer_over_each_api(Agent::Codex).await;
}
