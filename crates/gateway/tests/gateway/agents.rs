//! The gateway under the coding agents, as installed: Claude Code (npm
//! `@anthropic-ai/claude-code`) on `/v1/messages`, Codex CLI (npm `@openai/codex`) on
//! `/v1/responses`, opencode (npm `opencode-ai`) and pi (npm `@mariozechner/pi-coding-agent`)
//! on `/v1/chat/completions`, Gemini CLI (npm `@google/gemini-cli`) on
//! `/v1beta/models/{model}:streamGenerateContent`, pinned and installed by scripts/agents.sh
//! under .clients/agents/,
//! run headless with their default settings (no capability override, no feature flag; only
//! telemetry, updates and other fetches of the internet off), each in a home of its own,
//! against a gateway on 127.0.0.1 over a scripted upstream of each API (Chat Completions,
//! Anthropic Messages, Responses, Gemini): a text answer; a tool loop (the upstream's first answer
//! calls one of the agent's tools, a shell command, a file write or a file read, which the agent
//! runs; its result reaches the upstream's next request, answered with text, and the gateway
//! counts the turns and the call's samples); an upstream cut
//! mid-answer (the agent shows the error and exits non-zero); a vote model
//! (`[models.choicewise] select = "vote"`, 3 samples) whose samples all call the same tool
//! (the agent runs it and ends the turn, exit 0); a hedged model (its default policy hedges
//! the first token across two upstreams, the first of them silent: the turn completes from the
//! second). Claude Code's and Codex's tool loop over a scripted Bedrock upstream (ConverseStream,
//! its signatures checked by botocore: crate::bedrock_upstream). And Claude Code's gateway
//! model discovery over the gateway's model list.
//!
//! Each test serves one gateway with a model per upstream API (`agent-chat`,
//! `agent-anthropic`, `agent-responses`, `agent-gemini`) and runs the agent over the four at
//! once.
//!
//! Ignored by a plain `cargo test`: the agents come from npm, and each is a program of its
//! own. CI runs `scripts/agents.sh install`, then
//! `cargo test --workspace --test gateway -- --ignored --test-threads 32 agents::` (the agents wait on
//! their upstreams and their own backoff far more than they compute).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use choicewise_testserver::{Failure, TestServer, TestServerBuilder, answer, tool_call_answer};
use serde_json::{Value, json};

use crate::common::{answering, refusing, serve, silent};

const KEY: &str = "sk-agent-test";

/// How long one run of an agent may take before it is killed and the test fails.
const RUN_LIMIT: Duration = Duration::from_secs(180);

/// The agents that may run at once, across the tests (`CHOICEWISE_AGENTS_PARALLEL`, default
/// 8): the agents mostly wait on their upstreams and their own backoff, but each start takes
/// a few seconds of a core (opencode's the most), so the tests can all start at once
/// (`--test-threads`) while the machine runs no more agents than it can start.
fn agent_slots() -> &'static tokio::sync::Semaphore {
    static SLOTS: std::sync::OnceLock<tokio::sync::Semaphore> = std::sync::OnceLock::new();
    SLOTS.get_or_init(|| {
        let parallel = std::env::var("CHOICEWISE_AGENTS_PARALLEL")
            .ok()
            .and_then(|n| n.parse().ok())
            .filter(|n| *n > 0)
            .unwrap_or(8);
        tokio::sync::Semaphore::new(parallel)
    })
}

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
    OpenCode,
    Pi,
    GeminiCli,
}

/// A tool call the upstream asks an agent for, and what running it leaves.
struct ToolCall {
    name: &'static str,
    arguments: Value,
    effect: Effect,
}

/// What running a [`ToolCall`] leaves.
enum Effect {
    /// The tool's output, which only running it gives, reaches the next turn.
    Output(&'static str),
    /// A file of the working directory (its path under it) holds this text.
    File(&'static str, &'static str),
    /// The file (its path under the working directory) holding this text, written there
    /// before the run, is read: its text, which only reading it gives, reaches the next turn.
    Read(&'static str, &'static str),
}

impl Agent {
    fn program(self) -> PathBuf {
        let name = match self {
            Agent::ClaudeCode => "claude",
            Agent::Codex => "codex",
            Agent::OpenCode => "opencode",
            Agent::Pi => "pi",
            Agent::GeminiCli => "gemini",
        };
        let path = agents_dir().join("node_modules/.bin").join(name);
        assert!(
            path.exists(),
            "{} is missing: run scripts/agents.sh install",
            path.display()
        );
        path
    }

    /// A call of one of the agent's own tools, in the working directory `work`: its shell
    /// running a command whose output (`cw-42`) is not in its text (Claude Code, Codex), its
    /// file write (opencode, pi), or its file read (Gemini CLI, whose default approval mode
    /// runs no write or shell command headless).
    ///
    /// The `k`th call of a loop (0 or 1) differs from the other in what it leaves: `cw-42`
    /// or `cw-48`, `notes.txt` or `more.txt`.
    fn tool_call(self, work: &Path, k: usize) -> ToolCall {
        let (command, output, file, text, read) = match k {
            0 => (
                "echo cw-$((6*7))",
                "cw-42",
                "notes.txt",
                "cw-42\n",
                "cw-42 was read from the file",
            ),
            _ => (
                "echo cw-$((6*8))",
                "cw-48",
                "more.txt",
                "cw-48\n",
                "cw-48 was read from the other file",
            ),
        };
        match self {
            Agent::ClaudeCode => ToolCall {
                name: "Bash",
                arguments: json!({"command": command, "description": "Print a number"}),
                effect: Effect::Output(output),
            },
            Agent::Codex => ToolCall {
                name: "exec_command",
                arguments: json!({"cmd": command}),
                effect: Effect::Output(output),
            },
            // opencode's write takes an absolute path.
            Agent::OpenCode => ToolCall {
                name: "write",
                arguments: json!({"filePath": work.join(file), "content": text}),
                effect: Effect::File(file, text),
            },
            Agent::Pi => ToolCall {
                name: "write",
                arguments: json!({"path": file, "content": text}),
                effect: Effect::File(file, text),
            },
            // Its read_file takes a path in the workspace.
            Agent::GeminiCli => ToolCall {
                name: "read_file",
                arguments: json!({"file_path": work.join(file)}),
                effect: Effect::Read(file, read),
            },
        }
    }

    /// The requests the agent sends beside its turn, which take upstream answers too:
    /// opencode asks the same model for the session's title (a request without tools) as its
    /// first turn starts.
    fn side_requests(self) -> usize {
        match self {
            Agent::OpenCode => 1,
            _ => 0,
        }
    }

    /// The gateway's client API the agent speaks: its requests' `api` label in the metrics.
    fn api(self) -> &'static str {
        match self {
            Agent::ClaudeCode => "messages",
            Agent::Codex => "responses",
            Agent::OpenCode | Agent::Pi => "chat",
            Agent::GeminiCli => "gemini",
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
    /// The text files the run left in its working directory (path under it, text).
    work_files: Vec<(String, String)>,
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
    run_agent_in(agent, addr, model, prompt, &[], fresh_dir("work")).await
}

/// As [`run_agent`], with `env` set too, in the working directory `work` (removed after);
/// the files the run left in its home as `Ran::files`, in `work` as `Ran::work_files`.
async fn run_agent_in(
    agent: Agent,
    addr: SocketAddr,
    model: &str,
    prompt: &str,
    env: &[(&str, &str)],
    work: PathBuf,
) -> Ran {
    let home = fresh_dir("home");
    // Both go when the run ends, however it ends (a panic of the test included).
    let _remove = Remove(vec![home.clone(), work.clone()]);
    let mut command = Command::new(agent.program());
    command
        .current_dir(&work)
        // opencode takes its directory from PWD: the test's own (this repository) otherwise.
        .env("PWD", &work)
        .env("HOME", &home)
        .env("XDG_CONFIG_HOME", home.join(".config"))
        .env("XDG_DATA_HOME", home.join(".local/share"))
        .env("XDG_CACHE_HOME", home.join(".cache"))
        .env("XDG_STATE_HOME", home.join(".local/state"))
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
        "OPENCODE_CONFIG",
        "OPENCODE_CONFIG_CONTENT",
        "OPENCODE_CONFIG_DIR",
        "PI_CODING_AGENT_DIR",
        "GEMINI_API_KEY",
        "GEMINI_CLI_HOME",
        "GEMINI_MODEL",
        "GOOGLE_API_KEY",
        "GOOGLE_GEMINI_BASE_URL",
        "GOOGLE_GENAI_USE_GCA",
        "GOOGLE_GENAI_USE_VERTEXAI",
        "GOOGLE_CLOUD_PROJECT",
    ] {
        command.env_remove(var);
    }
    // A port of 127.0.0.1 that refuses connections, held for the run (opencode's registry).
    let (refused, _held) = refusing();
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
            // A custom provider: the gateway, speaking Responses. Its plugins' sync (GitHub,
            // chatgpt.com) and analytics off.
            std::fs::write(
                codex_home.join("config.toml"),
                format!(
                    "model = \"{model}\"\nmodel_provider = \"choicewise\"\n\n\
                     [model_providers.choicewise]\nname = \"choicewise\"\n\
                     base_url = \"http://{addr}/v1\"\nwire_api = \"responses\"\n\
                     env_key = \"CHOICEWISE_AGENT_KEY\"\n\n\
                     [features]\nplugins = false\n\n[analytics]\nenabled = false\n"
                ),
            )
            .unwrap();
            command
                .args(["exec", "--skip-git-repo-check", prompt])
                .env("CODEX_HOME", &codex_home)
                .env("CHOICEWISE_AGENT_KEY", KEY);
        }
        Agent::OpenCode => {
            // A provider of its own config file: the gateway, speaking Chat Completions.
            let config = home.join(".config/opencode");
            std::fs::create_dir_all(&config).unwrap();
            let provider = json!({
                "$schema": "https://opencode.ai/config.json",
                "provider": {"choicewise": {
                    "npm": "@ai-sdk/openai-compatible",
                    "name": "choicewise",
                    "options": {"baseURL": format!("http://{addr}/v1"),
                                "apiKey": "{env:CHOICEWISE_AGENT_KEY}"},
                    "models": {model: {"name": model}},
                }},
            });
            std::fs::write(config.join("opencode.json"), provider.to_string()).unwrap();
            command
                .args(["run", "-m", &format!("choicewise/{model}"), prompt])
                .env("CHOICEWISE_AGENT_KEY", KEY)
                // Updates, sharing and the models.dev list off; and the npm install it
                // starts in its config directory (its plugin package) goes to a port that
                // refuses, not to the registry.
                .env("OPENCODE_DISABLE_AUTOUPDATE", "1")
                .env("OPENCODE_DISABLE_SHARE", "1")
                .env("OPENCODE_DISABLE_MODELS_FETCH", "1")
                .env("npm_config_registry", refused.trim_end_matches("/v1"));
        }
        Agent::Pi => {
            // A provider of its models.json: the gateway, speaking Chat Completions.
            let config = home.join(".pi/agent");
            std::fs::create_dir_all(&config).unwrap();
            let provider = json!({"providers": {"choicewise": {
                "baseUrl": format!("http://{addr}/v1"),
                "api": "openai-completions",
                "apiKey": "CHOICEWISE_AGENT_KEY",
                "models": [{"id": model}],
            }}});
            std::fs::write(config.join("models.json"), provider.to_string()).unwrap();
            command
                .args(["-p", "--provider", "choicewise", "--model", model, prompt])
                .env("CHOICEWISE_AGENT_KEY", KEY)
                // Its startup fetches (update and package checks) off.
                .env("PI_OFFLINE", "1");
        }
        Agent::GeminiCli => {
            // The gateway as its documented base URL (GOOGLE_GEMINI_BASE_URL), the key sent as
            // x-goog-api-key. Its settings: the API-key authentication (the "gateway" type the
            // base URL alone selects is refused headless), and usage statistics (sent to
            // Google), telemetry and update checks off.
            let config = home.join(".gemini");
            std::fs::create_dir_all(&config).unwrap();
            let settings = json!({
                "security": {"auth": {"selectedType": "gemini-api-key"}},
                "privacy": {"usageStatisticsEnabled": false},
                "telemetry": {"enabled": false},
                "general": {"enableAutoUpdate": false, "enableAutoUpdateNotification": false},
            });
            std::fs::write(config.join("settings.json"), settings.to_string()).unwrap();
            command
                // A fresh working directory is not one it trusts: trusted for the run.
                .args(["--skip-trust", "-p", prompt, "-m", model])
                .env("GOOGLE_GEMINI_BASE_URL", format!("http://{addr}"))
                .env("GEMINI_API_KEY", KEY);
        }
    }
    command.envs(env.iter().copied());
    // A process group of its own: the agent's helpers (Codex's binary under its Node.js
    // wrapper, opencode's server) end with it.
    std::os::unix::process::CommandExt::process_group(&mut command, 0);
    let _slot = agent_slots().acquire().await.unwrap();
    let started = std::time::Instant::now();
    let mut child = tokio::process::Command::from(command)
        .spawn()
        .unwrap_or_else(|e| panic!("{agent:?}: {e}"));
    let group = Group(child.id().expect("a running child"));
    let stdout = tokio::spawn(read_all(child.stdout.take().unwrap()));
    let stderr = tokio::spawn(read_all(child.stderr.take().unwrap()));
    let status = tokio::time::timeout(RUN_LIMIT, child.wait()).await;
    // Whatever of the group is left holds the pipes open: end it before reading them out.
    drop(group);
    // A helper that left the group (a daemon of its own session) may hold them still.
    let read_out = |task: tokio::task::JoinHandle<Vec<u8>>| async move {
        let read = tokio::time::timeout(Duration::from_secs(5), task).await;
        String::from_utf8_lossy(&read.map(Result::unwrap).unwrap_or_default()).into_owned()
    };
    let stdout = read_out(stdout).await;
    let stderr = read_out(stderr).await;
    let Ok(status) = status else {
        panic!(
            "{agent:?} did not finish within {RUN_LIMIT:?}\n--- stdout\n{stdout}\n--- stderr\n{stderr}"
        );
    };
    let status = status.unwrap();
    if std::env::var_os("CHOICEWISE_AGENTS_SHOW").is_some() {
        eprintln!("{agent:?} on {model}: {status} in {:?}", started.elapsed());
    }
    let files = files_under(&home, &home);
    let work_files = files_under(&work, &work);
    Ran {
        code: status.code(),
        stdout,
        stderr,
        files,
        work_files,
    }
}

/// A running agent's process group, killed when dropped: at the run's end, its time limit, or
/// a test's panic, so that no agent outlives its test.
struct Group(u32);

impl Drop for Group {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-9", "--", &format!("-{}", self.0)])
            .stderr(Stdio::null())
            .status();
    }
}

/// Directories removed when dropped.
struct Remove(Vec<PathBuf>);

impl Drop for Remove {
    fn drop(&mut self) {
        for dir in &self.0 {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// Everything `from` gives until its end (or an error).
async fn read_all(mut from: impl tokio::io::AsyncRead + Unpin) -> Vec<u8> {
    use tokio::io::AsyncReadExt;
    let mut all = Vec::new();
    let _ = from.read_to_end(&mut all).await;
    all
}

/// The text files under `dir`, by their path under `root`.
fn files_under(root: &Path, dir: &Path) -> Vec<(String, String)> {
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
const APIS: [&str; 4] = ["chat", "anthropic", "responses", "gemini"];

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
        "gemini" => {
            let mut events: Vec<(&str, Value)> = (words.iter())
                .map(|w| ("", gemini_record(json!([{"text": w}]), None)))
                .collect();
            events.push(("", gemini_record(json!([]), Some(words.len()))));
            frames(&events)
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
    // Each call its own ids, as an upstream gives them: from its arguments (FNV-1a).
    let tag = format!(
        "{:08x}",
        (args.bytes()).fold(0x811c_9dc5u32, |h, b| (h ^ u32::from(b))
            .wrapping_mul(0x0100_0193))
    );
    let (call_id, tool_use_id, item_id) = (
        format!("call_up{tag}"),
        format!("toolu_up{tag}"),
        format!("fc_up{tag}"),
    );
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
                               "id": call_id, "type": "function",
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
        // Gemini sends a call whole, in one part, its finish `STOP`.
        "gemini" => frames(&[(
            "",
            gemini_record(
                json!([{"functionCall": {"name": name, "args": arguments}}]),
                Some(5),
            ),
        )]),
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
                           {"type": "tool_use", "id": tool_use_id, "name": name, "input": {}}}),
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
            let item = json!({"id": item_id, "type": "function_call", "status": "completed",
                              "arguments": args, "call_id": call_id, "name": name});
            let mut events = responses_start();
            events.push((
                "response.output_item.added",
                json!({"type": "response.output_item.added", "output_index": 0,
                       "item": {"id": item_id, "type": "function_call", "status": "in_progress",
                                "arguments": "", "call_id": call_id, "name": name}}),
            ));
            events.push((
                "response.function_call_arguments.delta",
                json!({"type": "response.function_call_arguments.delta", "item_id": item_id,
                       "output_index": 0, "delta": args}),
            ));
            events.push((
                "response.function_call_arguments.done",
                json!({"type": "response.function_call_arguments.done", "item_id": item_id,
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

/// A Gemini `GenerateContentResponse` record of candidate 0 with `parts`; with
/// `Some(tokens)`, its last: finished `STOP`, with the usage.
fn gemini_record(parts: Value, last: Option<usize>) -> Value {
    let mut candidate = json!({"index": 0, "content": {"role": "model", "parts": parts}});
    let mut record = json!({"modelVersion": "up", "responseId": "resp_up"});
    if let Some(tokens) = last {
        candidate["finishReason"] = json!("STOP");
        record["usageMetadata"] = json!({"promptTokenCount": 40,
            "candidatesTokenCount": tokens, "totalTokenCount": 40 + tokens});
    }
    record["candidates"] = json!([candidate]);
    record
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

/// The name of the test gateway's model over `api`.
fn model_of(api: &str) -> String {
    format!("agent-{api}")
}

/// A gateway with, for each `(api, base URLs)`, a model named by [`model_of`] whose upstreams
/// are those of that API, each with `extra` TOML (its own keys), and whose `[models.choicewise]`
/// table is `policy` (none if empty).
async fn gateway_of(models: &[(&str, Vec<String>)], policy: &str) -> SocketAddr {
    let mut toml = String::from("[auth]\nkeys_env = \"AGENT_KEYS\"\n");
    for (api, urls) in models {
        toml.push_str(&format!("[[models]]\nname = \"{}\"\n", model_of(api)));
        if !policy.is_empty() {
            toml.push_str(&format!("[models.choicewise]\n{policy}"));
        }
        // A Chat upstream would carry several samples in one request with `n`: one request
        // each, as the other APIs take them.
        let n = match *api {
            "chat" => "n = \"fan-out\"\n",
            _ => "",
        };
        for url in urls {
            // Gemini's base URL names its version (`.../v1beta`).
            let url = match *api {
                "gemini" => format!("{url}beta"),
                _ => url.clone(),
            };
            toml.push_str(&format!(
                "[[models.upstreams]]\napi = \"{api}\"\nbase_url = \"{url}\"\nmodel = \"up\"\n{n}"
            ));
        }
        toml.push_str("[models.retry]\nbackoff_ms = 1\n");
    }
    serve(&toml, |name| {
        (name == "AGENT_KEYS").then(|| KEY.to_string())
    })
    .await
    .0
}

/// A gateway whose model over each API has the one upstream of `upstreams` (in [`APIS`]'
/// order).
async fn gateway(upstreams: &[TestServer; APIS.len()]) -> SocketAddr {
    let models: Vec<(&str, Vec<String>)> = (APIS.iter().zip(upstreams))
        .map(|(api, upstream)| (*api, vec![upstream.base_url()]))
        .collect();
    gateway_of(&models, "").await
}

/// An upstream of each API, each answering every request as `answers(api)` says in turn
/// (cycling after the last).
async fn upstreams(answers: impl Fn(&str) -> Vec<TestServerBuilder>) -> [TestServer; APIS.len()] {
    let started = futures::future::join_all(APIS.map(|api| {
        let mut answers = answers(api).into_iter();
        let mut builder = answers.next().expect("an answer");
        for next in answers {
            builder = builder.then(next);
        }
        builder.start()
    }))
    .await;
    let started: Vec<TestServer> = started.into_iter().map(Result::unwrap).collect();
    started.try_into().unwrap_or_else(|_| unreachable!())
}

/// The agent's turn, on a model hedged across a silent upstream and one that answers,
/// completes from the second, over each upstream API.
async fn hedged_answer_over_each_api(agent: Agent) {
    let said = |api: &str| format!("The hedge answered over {api}.");
    let fine =
        upstreams(|api| vec![TestServer::builder().body(text_answer(api, &said(api)))]).await;
    let mut models = Vec::new();
    for (api, upstream) in APIS.iter().zip(&fine) {
        models.push((*api, vec![silent().await, upstream.base_url()]));
    }
    let policy = "select = \"first_token\"\nsamples = 2\nhedge_after_ms = 300\n";
    let addr = gateway_of(&models, policy).await;
    futures::future::join_all(APIS.iter().zip(&fine).map(|(api, fine)| async move {
        let ran = run_agent(agent, addr, &model_of(api), "Say something.").await;
        assert_eq!(ran.code, Some(0), "{agent:?} over {api}: {ran}");
        assert!(
            ran.stdout.contains(&said(api)),
            "{agent:?} over {api}: {ran}"
        );
        assert_eq!(turns(fine, api).len(), 1, "{agent:?} over {api}: {ran}");
    }))
    .await;
}

/// The agent's turns the upstream was asked for on its API's endpoint: its requests that
/// offer tools (not `count_tokens`, `GET /v1/models` or opencode's title request).
fn turns(upstream: &TestServer, api: &str) -> Vec<Value> {
    let path = match api {
        "chat" => "/v1/chat/completions",
        "anthropic" => "/v1/messages",
        "gemini" => "/v1beta/models/up:streamGenerateContent",
        _ => "/v1/responses",
    };
    (upstream.requests().into_iter())
        .filter(|r| r.path == path)
        .map(|r| r.json.expect("a JSON body"))
        .filter(|body| body["tools"].as_array().is_some_and(|t| !t.is_empty()))
        .collect()
}

/// The agent answers with the upstream's text, over each upstream API.
async fn text_answer_over_each_api(agent: Agent) {
    let said = |api: &str| format!("The gateway answered over {api}.");
    let upstreams =
        upstreams(|api| vec![TestServer::builder().body(text_answer(api, &said(api)))]).await;
    let addr = gateway(&upstreams).await;
    futures::future::join_all(
        APIS.iter()
            .zip(&upstreams)
            .map(|(api, upstream)| async move {
                let ran = run_agent(agent, addr, &model_of(api), "Say something.").await;
                assert_eq!(ran.code, Some(0), "{agent:?} over {api}: {ran}");
                assert!(
                    ran.stdout.contains(&said(api)),
                    "{agent:?} over {api}: {ran}"
                );
                let turns = turns(upstream, api);
                assert_eq!(turns.len(), 1, "{agent:?} over {api}: {turns:?}");
                // Gemini names the model in the path `turns` reads (`models/up:...`).
                if *api != "gemini" {
                    assert_eq!(turns[0]["model"], "up");
                }
            }),
    )
    .await;
}

/// The agent runs the tool the upstream calls, in each of `samples` samples of the turn, and
/// sends its result back; the upstream's next answer (text, in every sample) ends the turn.
/// Over each upstream API, on a gateway whose models have `policy`.
async fn tool_loop_over_each_api(agent: Agent, samples: usize, policy: &str) {
    tool_loops_over_each_api(agent, samples, policy, 1).await;
}

/// As [`tool_loop_over_each_api`], with `calls` turns of calls (1 or 2, each call another)
/// before the text: the last turn carries back every call and what each left.
async fn tool_loops_over_each_api(agent: Agent, samples: usize, policy: &str, calls: usize) {
    let said = |api: &str| format!("The tool ran through the gateway over {api}.");
    let works = APIS.map(|_| fresh_dir("work"));
    let loops = works.each_ref().map(|work| {
        (0..calls)
            .map(|k| agent.tool_call(work, k))
            .collect::<Vec<_>>()
    });
    for (work, calls) in works.iter().zip(&loops) {
        for call in calls {
            if let Effect::Read(path, text) = call.effect {
                std::fs::write(work.join(path), text).unwrap();
            }
        }
    }
    let upstreams = upstreams(|api| {
        let calls = &loops[APIS.iter().position(|a| *a == api).unwrap()];
        let mut answers = Vec::new();
        for (k, call) in calls.iter().enumerate() {
            // The side requests (with the first turn) take calls too, whichever comes first.
            let side = if k == 0 { agent.side_requests() } else { 0 };
            answers.extend(vec![
                TestServer::builder().body(call_answer(
                    api,
                    call.name,
                    &call.arguments
                ));
                samples * (1 + side)
            ]);
        }
        answers.extend(vec![
            TestServer::builder().body(text_answer(api, &said(api)));
            samples
        ]);
        answers
    })
    .await;
    let models: Vec<(&str, Vec<String>)> = (APIS.iter().zip(&upstreams))
        .map(|(api, upstream)| (*api, vec![upstream.base_url()]))
        .collect();
    let addr = gateway_of(&models, policy).await;
    let runs = (APIS.iter().zip(&upstreams).zip(works).zip(&loops)).map(
        |(((api, upstream), work), calls)| async move {
            let ran = run_agent_in(agent, addr, &model_of(api), "Do it.", &[], work).await;
            assert_eq!(ran.code, Some(0), "{agent:?} over {api}: {ran}");
            assert!(
                ran.stdout.contains(&said(api)),
                "{agent:?} over {api}: {ran}"
            );
            let turns = turns(upstream, api);
            // A turn a call and one for the text, of `samples` each, but a vote whose samples
            // agree is decided by a majority of them, and may cancel the rest before they are
            // asked.
            let decided_by = samples / 2 + 1;
            assert!(
                turns.len() >= (calls.len() + 1) * decided_by,
                "{agent:?} over {api}: {ran}"
            );
            // The turn that carried the calls' results back. A gateway that fails a call's
            // turn (a 502) leaves the agent retrying until the upstream's text comes round: it
            // then ends well, a tool never run.
            let last = turns.last().unwrap().to_string();
            // Its conversation, said when a check fails (the tools' definitions are most of
            // the turn).
            let story = messages_of(&last);
            let retried = format!(
                "{} turns of {samples} samples (did a call's turn fail, the agent retry?)",
                turns.len()
            );
            for call in calls {
                match call.effect {
                    // Only reading the file gives its text.
                    Effect::Read(_, text) => assert!(
                        last.contains(text),
                        "{agent:?} over {api}: the file's text {text:?} is not in the last \
                         turn; {retried}: {story}"
                    ),
                    // Only running the command gives its output.
                    Effect::Output(output) => assert!(
                        last.contains(output),
                        "{agent:?} over {api}: the tool's output {output} is not in the last \
                         turn; {retried}: {story}"
                    ),
                    Effect::File(path, text) => {
                        // The prompt names no file: only the call sent back, or its result,
                        // does.
                        assert!(
                            last.contains(path),
                            "{agent:?} over {api}: the call writing {path} is not in the last \
                             turn; {retried}: {story}"
                        );
                        let written = ran.work_files.iter().find(|(p, _)| p == path);
                        assert_eq!(
                            written.map(|(_, t)| t.as_str()),
                            Some(text),
                            "{agent:?} over {api}: {path} not written; {retried}: {ran}"
                        );
                    }
                }
            }
            // What the gateway recorded of the model's requests: the agent's turns, answered
            // complete in its API, and the calls' samples, a majority of each turn at least,
            // finished for a tool call.
            let metrics = metrics_text(addr).await;
            let model = model_of(api);
            let of = |name: &str, labels: &[(&str, &str)]| sample(&metrics, name, labels);
            let answered = of(
                "choicewise_answers_total",
                &[
                    ("api", agent.api()),
                    ("model", &model),
                    ("ended", "complete"),
                ],
            );
            assert!(
                answered >= (calls.len() + 1) as f64,
                "{agent:?} over {api}: {answered} answers\n{metrics}"
            );
            let called = of(
                "choicewise_choices_total",
                &[("model", &model), ("finish_reason", "tool_calls")],
            );
            assert!(
                called >= (calls.len() * decided_by) as f64,
                "{agent:?} over {api}: {called} samples called the tool\n{metrics}"
            );
        },
    );
    futures::future::join_all(runs).await;
}

/// A turn after a broken call, over a Gemini upstream. The conversation begins on a Chat
/// upstream whose call's arguments are cut short (not JSON) and which then fails, so that its
/// model falls back to one over Gemini (`fallbacks`): the agent sends the broken call back
/// with what its tool made of it, the Gemini upstream is asked that turn (the call passed on,
/// not refused), and its answer ends the turn. Gemini CLI is told the call in Gemini's own
/// terms (`MALFORMED_FUNCTION_CALL`) and asks the turn again, which Gemini answers.
async fn a_turn_after_a_broken_call_over_gemini(agent: Agent) {
    let work = fresh_dir("work");
    let call = agent.tool_call(&work, 0);
    let whole = call.arguments.to_string();
    let broken = &whole[..whole.len() - 1];
    let said = "The turn after the broken call was answered over Gemini.";
    let broken_call = || TestServer::builder().body(tool_call_answer(call.name, broken));
    let mut chat = broken_call();
    for _ in 0..agent.side_requests() {
        chat = chat.then(broken_call());
    }
    // Every later request fails, before any byte: the model falls back.
    for _ in 0..64 {
        chat = chat.then(TestServer::builder().fail(Failure::status(500)));
    }
    let chat = chat.start().await.unwrap();
    let gemini = (TestServer::builder().body(text_answer("gemini", said)))
        .start()
        .await
        .unwrap();
    let toml = format!(
        "[auth]\nkeys_env = \"AGENT_KEYS\"\n\
         [[models]]\nname = \"agent-broken\"\nfallbacks = [\"agent-gemini\"]\n\
         [[models.upstreams]]\napi = \"chat\"\nbase_url = \"{}\"\nmodel = \"up\"\n\
         [models.retry]\nbackoff_ms = 1\n\
         [[models]]\nname = \"agent-gemini\"\n\
         [[models.upstreams]]\napi = \"gemini\"\nbase_url = \"{}beta\"\nmodel = \"up\"\n",
        chat.base_url(),
        gemini.base_url()
    );
    let addr = serve(&toml, |name| {
        (name == "AGENT_KEYS").then(|| KEY.to_string())
    })
    .await
    .0;
    let ran = run_agent_in(agent, addr, "agent-broken", "Do it.", &[], work).await;
    assert_eq!(ran.code, Some(0), "{agent:?}: {ran}");
    assert!(ran.stdout.contains(said), "{agent:?}: {ran}");
    let chat_turns = turns(&chat, "chat");
    assert!(
        !chat_turns.is_empty(),
        "{agent:?}: the Chat upstream was not asked: {ran}"
    );
    let turns = turns(&gemini, "gemini");
    let parts: Vec<&Value> = (turns.iter())
        .flat_map(|turn| turn["contents"].as_array().into_iter().flatten())
        .flat_map(|content| content["parts"].as_array().into_iter().flatten())
        .collect();
    if agent == Agent::GeminiCli {
        // Told in its own API's terms (`MALFORMED_FUNCTION_CALL`, as Gemini says it), Gemini
        // CLI asks the turn again (the Chat upstream is asked a second time, then Gemini)
        // rather than keeping the call.
        assert!(
            chat_turns.len() >= 2 && !turns.is_empty(),
            "{agent:?}: the turn was not asked again: {ran}"
        );
        let kept = (parts.iter()).any(|part| part.get("functionCall").is_some());
        assert!(!kept, "{agent:?}: the broken call was kept: {turns:?}");
        return;
    }
    // The turn after the call carries it back (as the agent keeps it: Codex its text,
    // Claude Code its own object around it), with what the tool made of it.
    let carried = (parts.iter()).any(|part| {
        part["functionCall"]["name"] == call.name && holds(&part["functionCall"]["args"], broken)
    });
    let answered = (parts.iter()).any(|part| part["functionResponse"]["name"] == call.name);
    assert!(
        carried && answered,
        "{agent:?}: no turn to Gemini carries the broken call back with its result: {turns:?}\n{ran}"
    );
}

/// Whether `value` holds the string `text`, at any depth.
fn holds(value: &Value, text: &str) -> bool {
    match value {
        Value::String(s) => s == text,
        Value::Array(items) => items.iter().any(|v| holds(v, text)),
        Value::Object(fields) => fields.values().any(|v| holds(v, text)),
        _ => false,
    }
}

/// The agent runs the tool a Bedrock upstream calls (ConverseStream, each request's SigV4
/// signature checked by botocore: crate::bedrock_upstream), and the upstream's next answer,
/// given once the tool's output reached it, ends the turn.
async fn tool_loop_over_bedrock(agent: Agent) {
    use crate::bedrock_upstream::{ACCESS_KEY, Bedrock, SECRET};
    let work = fresh_dir("work");
    let call = agent.tool_call(&work, 0);
    let Effect::Output(output) = call.effect else {
        unreachable!("{agent:?} runs a shell command")
    };
    let said = "The tool ran through the gateway over bedrock.";
    // The call in turn, to every request (the agent's retries too), until one carries the
    // tool's output back, which only running it gives: that one gets the text.
    let script = json!({"answers": [
        {"match": output, "text": said},
        {"tool_uses": [{"id": "tooluse_agent_1", "name": call.name, "input": call.arguments}],
         "writes": "bytes:1-48"},
    ]});
    let Some(bedrock) = Bedrock::start(&script, None) else {
        return;
    };
    let toml = format!(
        "[auth]\nkeys_env = \"AGENT_KEYS\"\n[[models]]\nname = \"agent-bedrock\"\n\
         [[models.upstreams]]\napi = \"bedrock\"\nbase_url = \"{}\"\nregion = \"us-east-1\"\n\
         model = \"up\"\n[models.retry]\nbackoff_ms = 1\n",
        bedrock.url()
    );
    let (addr, _) = serve(&toml, |name| match name {
        "AGENT_KEYS" => Some(KEY.to_string()),
        "AWS_ACCESS_KEY_ID" => Some(ACCESS_KEY.to_string()),
        "AWS_SECRET_ACCESS_KEY" => Some(SECRET.to_string()),
        _ => None,
    })
    .await;
    let ran = run_agent_in(agent, addr, "agent-bedrock", "Do it.", &[], work).await;
    assert_eq!(ran.code, Some(0), "{agent:?} over bedrock: {ran}");
    assert!(ran.stdout.contains(said), "{agent:?} over bedrock: {ran}");
    let requests = bedrock.requests();
    assert!(
        requests.iter().all(|r| r["signature"] == "ok"),
        "{agent:?} over bedrock: {requests:?}"
    );
    // The turn that carried the call and its result back, in Converse's shape.
    let last = requests.last().unwrap()["body"].to_string();
    assert!(
        last.contains("\"toolUse\"") && last.contains("\"toolResult\"") && last.contains(output),
        "{agent:?} over bedrock: {}",
        messages_of(&last)
    );
}

/// A turn's conversation, without its tools' definitions (most of a turn, none of its story).
fn messages_of(turn: &str) -> String {
    let Ok(mut turn) = serde_json::from_str::<Value>(turn) else {
        return turn.to_string();
    };
    if let Some(turn) = turn.as_object_mut() {
        turn.remove("tools");
    }
    turn.to_string()
}

/// The gateway's metrics, as `GET /metrics` answers them.
async fn metrics_text(addr: SocketAddr) -> String {
    let response = reqwest::get(format!("http://{addr}/metrics"))
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    response.text().await.unwrap()
}

/// The sum of the samples of the metric `name` (a counter: its `_total` line) that carry
/// every one of `labels` (0 when none does).
fn sample(metrics: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    (metrics.lines())
        .filter_map(|line| line.strip_prefix(name)?.strip_prefix('{'))
        .filter_map(|rest| rest.split_once("} "))
        .filter(|(set, _)| {
            (labels.iter()).all(|(k, v)| set.split(',').any(|pair| pair == format!("{k}=\"{v}\"")))
        })
        .filter_map(|(_, value)| value.split_whitespace().next()?.parse::<f64>().ok())
        .sum()
}

/// Every answer of the upstream is cut mid-way: the agent shows an error and exits non-zero
/// (`CHOICEWISE_AGENTS_SHOW=1` prints what it showed).
async fn cut_answer_over_each_api(agent: Agent) {
    let said = "This answer is long enough to be cut before its end by the upstream.";
    let upstreams = upstreams(|api| {
        // After the opening events and a few words.
        let events = match api {
            "chat" => 3,
            _ => 5,
        };
        vec![
            TestServer::builder()
                .body(text_answer(api, said))
                .close_after_events(events),
        ]
    })
    .await;
    let addr = gateway(&upstreams).await;
    // The agents retry a failed turn with their own backoff: Claude Code ten times, for
    // about two and a half minutes, so here twice (its documented `CLAUDE_CODE_MAX_RETRIES`):
    // the same error after its last retry, in the suite's time.
    let env: &[(&str, &str)] = match agent {
        Agent::ClaudeCode => &[("CLAUDE_CODE_MAX_RETRIES", "2")],
        _ => &[],
    };
    futures::future::join_all(
        APIS.iter()
            .zip(&upstreams)
            .map(|(api, upstream)| async move {
                let work = fresh_dir("work");
                let ran =
                    run_agent_in(agent, addr, &model_of(api), "Say something.", env, work).await;
                assert!(
                    ran.code.is_some_and(|c| c != 0),
                    "{agent:?} over {api}: exited 0 on a cut answer: {ran}"
                );
                assert!(
                    !ran.stdout.contains(said),
                    "{agent:?} over {api}: printed the whole answer: {ran}"
                );
                // The word error, or the gateway's own message (pi prints only the message).
                let shown = format!("{}{}", ran.stdout, ran.stderr).to_lowercase();
                assert!(
                    shown.contains("error") || shown.contains("the connection closed"),
                    "{agent:?} over {api}: no error shown: {ran}"
                );
                assert!(
                    !turns(upstream, api).is_empty(),
                    "{agent:?} over {api}: never reached the upstream: {ran}"
                );
                if std::env::var_os("CHOICEWISE_AGENTS_SHOW").is_some() {
                    eprintln!("{agent:?} over {api}, cut: {ran}");
                }
            }),
    )
    .await;
}

/// The default policy of a vote model for agents: three samples, a majority wins.
const VOTE: &str = "select = \"vote\"\nsamples = 3\n";

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
    let upstream = answering("Discovered.").await;
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
    let ran = run_agent_in(
        Agent::ClaudeCode,
        addr,
        "claude-gateway-model",
        "Say something.",
        &[("CLAUDE_CODE_ENABLE_GATEWAY_MODEL_DISCOVERY", "1")],
        fresh_dir("work"),
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
    tool_loop_over_each_api(Agent::ClaudeCode, 1, "").await;
}

/// Three turns: two calls, each another, then the text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Claude Code from npm: scripts/agents.sh install"]
async fn claude_code_three_turn_tool_loop() {
    tool_loops_over_each_api(Agent::ClaudeCode, 1, "", 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Claude Code from npm: scripts/agents.sh install"]
async fn claude_code_tool_loop_over_bedrock() {
    tool_loop_over_bedrock(Agent::ClaudeCode).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Claude Code from npm: scripts/agents.sh install"]
async fn claude_code_cut_answer() {
    cut_answer_over_each_api(Agent::ClaudeCode).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Claude Code from npm: scripts/agents.sh install"]
async fn claude_code_hedged_model() {
    hedged_answer_over_each_api(Agent::ClaudeCode).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Claude Code from npm: scripts/agents.sh install"]
async fn claude_code_vote_model_tool_call() {
    tool_loop_over_each_api(Agent::ClaudeCode, 3, VOTE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Codex CLI from npm: scripts/agents.sh install"]
async fn codex_text_answer() {
    text_answer_over_each_api(Agent::Codex).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Codex CLI from npm: scripts/agents.sh install"]
async fn codex_tool_loop() {
    tool_loop_over_each_api(Agent::Codex, 1, "").await;
}

/// Three turns: two calls, each another, then the text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Codex CLI from npm: scripts/agents.sh install"]
async fn codex_three_turn_tool_loop() {
    tool_loops_over_each_api(Agent::Codex, 1, "", 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Codex CLI from npm: scripts/agents.sh install"]
async fn codex_tool_loop_over_bedrock() {
    tool_loop_over_bedrock(Agent::Codex).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Codex CLI from npm: scripts/agents.sh install"]
async fn codex_cut_answer() {
    cut_answer_over_each_api(Agent::Codex).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Codex CLI from npm: scripts/agents.sh install"]
async fn codex_hedged_model() {
    hedged_answer_over_each_api(Agent::Codex).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Codex CLI from npm: scripts/agents.sh install"]
async fn codex_vote_model_tool_call() {
    tool_loop_over_each_api(Agent::Codex, 3, VOTE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs opencode from npm: scripts/agents.sh install"]
async fn opencode_text_answer() {
    text_answer_over_each_api(Agent::OpenCode).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs opencode from npm: scripts/agents.sh install"]
async fn opencode_tool_loop() {
    tool_loop_over_each_api(Agent::OpenCode, 1, "").await;
}

/// Three turns: two calls, each another, then the text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs opencode from npm: scripts/agents.sh install"]
async fn opencode_three_turn_tool_loop() {
    tool_loops_over_each_api(Agent::OpenCode, 1, "", 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs opencode from npm: scripts/agents.sh install"]
async fn opencode_cut_answer() {
    cut_answer_over_each_api(Agent::OpenCode).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs opencode from npm: scripts/agents.sh install"]
async fn opencode_vote_model_tool_call() {
    tool_loop_over_each_api(Agent::OpenCode, 3, VOTE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs pi from npm: scripts/agents.sh install"]
async fn pi_text_answer() {
    text_answer_over_each_api(Agent::Pi).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs pi from npm: scripts/agents.sh install"]
async fn pi_tool_loop() {
    tool_loop_over_each_api(Agent::Pi, 1, "").await;
}

/// Three turns: two calls, each another, then the text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs pi from npm: scripts/agents.sh install"]
async fn pi_three_turn_tool_loop() {
    tool_loops_over_each_api(Agent::Pi, 1, "", 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs pi from npm: scripts/agents.sh install"]
async fn pi_cut_answer() {
    cut_answer_over_each_api(Agent::Pi).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs pi from npm: scripts/agents.sh install"]
async fn pi_vote_model_tool_call() {
    tool_loop_over_each_api(Agent::Pi, 3, VOTE).await;
}

// No cut answer for Gemini CLI: its SDK raises no error record of a server-sent stream
// (`data: {"error": ...}`), and a candidate that ends `OTHER` after some text is an answer to
// it, so it shows the text it got and exits 0 (docs/agents.md).

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Gemini CLI from npm: scripts/agents.sh install"]
async fn gemini_cli_text_answer() {
    text_answer_over_each_api(Agent::GeminiCli).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Gemini CLI from npm: scripts/agents.sh install"]
async fn gemini_cli_tool_loop() {
    tool_loop_over_each_api(Agent::GeminiCli, 1, "").await;
}

/// Three turns: two calls, each another, then the text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Gemini CLI from npm: scripts/agents.sh install"]
async fn gemini_cli_three_turn_tool_loop() {
    tool_loops_over_each_api(Agent::GeminiCli, 1, "", 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Gemini CLI from npm: scripts/agents.sh install"]
async fn gemini_cli_vote_model_tool_call() {
    tool_loop_over_each_api(Agent::GeminiCli, 3, VOTE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Gemini CLI from npm: scripts/agents.sh install"]
async fn gemini_cli_hedged_model() {
    hedged_answer_over_each_api(Agent::GeminiCli).await;
}

/// A PNG of one pixel.
const PIXEL_PNG: [u8; 70] = [
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52,
    0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06, 0x00, 0x00, 0x00, 0x1f, 0x15, 0xc4,
    0x89, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x44, 0x41, 0x54, 0x78, 0xda, 0x63, 0x64, 0xf8, 0xcf, 0x50,
    0x0f, 0x00, 0x03, 0x86, 0x01, 0x80, 0x5a, 0x34, 0x7d, 0x6b, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45,
    0x4e, 0x44, 0xae, 0x42, 0x60, 0x82,
];

/// Gemini CLI reads an image (its `read_file` of a PNG the upstream asks for): a tool result
/// that holds media, whose tokens it asks the gateway to count (`:countTokens`, which the
/// gateway answers itself) before it sends the image on; the upstream sees the two turns,
/// the image in the second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Gemini CLI from npm: scripts/agents.sh install"]
async fn gemini_cli_counts_an_image_it_read() {
    let work = fresh_dir("work");
    std::fs::write(work.join("pixel.png"), PIXEL_PNG).unwrap();
    let read = json!({"file_path": work.join("pixel.png")});
    let said = "The image was read through the gateway.";
    let upstream = TestServer::builder()
        .body(call_answer("chat", "read_file", &read))
        .then(TestServer::builder().body(text_answer("chat", said)))
        .start()
        .await
        .unwrap();
    let addr = gateway_of(&[("chat", vec![upstream.base_url()])], "").await;
    let model = model_of("chat");
    let ran = run_agent_in(Agent::GeminiCli, addr, &model, "Do it.", &[], work).await;
    assert_eq!(ran.code, Some(0), "{ran}");
    assert!(ran.stdout.contains(said), "{ran}");
    let turns = turns(&upstream, "chat");
    assert_eq!(turns.len(), 2, "{ran}");
    assert!(
        turns[1]
            .to_string()
            .contains("data:image/png;base64,iVBORw0KGgo"),
        "the image is not in the last turn: {}",
        turns[1]
    );
    // Three requests of Gemini's API answered 200: the two turns, and the count between them.
    let metrics = metrics_text(addr).await;
    let of = |name: &str, labels: &[(&str, &str)]| sample(&metrics, name, labels);
    let ok = [
        ("api", "gemini"),
        ("model", model.as_str()),
        ("status", "200"),
    ];
    assert_eq!(of("choicewise_requests_total", &ok), 3.0, "{metrics}");
    let complete = [
        ("api", "gemini"),
        ("model", model.as_str()),
        ("ended", "complete"),
    ];
    assert_eq!(of("choicewise_answers_total", &complete), 2.0, "{metrics}");
}

/// The turn after a broken call, over a Gemini upstream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Claude Code from npm: scripts/agents.sh install"]
async fn claude_code_turn_after_a_broken_call_over_gemini() {
    a_turn_after_a_broken_call_over_gemini(Agent::ClaudeCode).await;
}

/// The turn after a broken call, over a Gemini upstream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Codex CLI from npm: scripts/agents.sh install"]
async fn codex_turn_after_a_broken_call_over_gemini() {
    a_turn_after_a_broken_call_over_gemini(Agent::Codex).await;
}

/// The turn after a broken call, over a Gemini upstream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Gemini CLI from npm: scripts/agents.sh install"]
async fn gemini_cli_turn_after_a_broken_call_over_gemini() {
    a_turn_after_a_broken_call_over_gemini(Agent::GeminiCli).await;
}
