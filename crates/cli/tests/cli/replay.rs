//! The `choicewise replay` command, run as a user runs it.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use serde_json::Value;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures")
        .join(name)
}

fn replay(args: &[&str], stdin: Option<&[u8]>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_choicewise"))
        .arg("replay")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    if let Some(bytes) = stdin {
        input.write_all(bytes).unwrap();
    }
    drop(input);
    child.wait_with_output().unwrap()
}

#[test]
fn json_of_the_bundled_stream_matches_the_openai_sdk_choice_for_choice() {
    let out = replay(&["--json"], None);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ours: Value = serde_json::from_slice(&out.stdout).unwrap();
    let golden: Value =
        serde_json::from_slice(&std::fs::read(fixture("expected/demo.json")).unwrap()).unwrap();
    let ours_choices = ours["choices"].as_array().unwrap();
    assert_eq!(
        ours_choices.len(),
        golden["choices"].as_array().unwrap().len()
    );
    for (o, g) in ours_choices
        .iter()
        .zip(golden["choices"].as_array().unwrap())
    {
        assert_eq!(o["index"], g["index"]);
        assert_eq!(o["finish_reason"], g["finish_reason"]);
        for key in ["role", "content", "refusal"] {
            assert_eq!(o["message"][key], g[key], "choice {} {key}", g["index"]);
        }
        let tool_calls = o["message"]
            .get("tool_calls")
            .cloned()
            .unwrap_or(Value::Null);
        assert_eq!(tool_calls, g["tool_calls"]);
    }
    assert_eq!(ours["object"], "chat.completion");
    assert_eq!(ours["usage"]["source"], "reported");
    assert_eq!(ours["usage"]["total_tokens"], 355);
}

#[test]
fn json_of_a_file_equals_json_of_the_same_stream_on_stdin() {
    let path = fixture("openai_n3_tools.sse");
    let from_file = replay(&[path.to_str().unwrap(), "--json"], None);
    let from_stdin = replay(&["-", "--json"], Some(&std::fs::read(&path).unwrap()));
    assert!(from_file.status.success() && from_stdin.status.success());
    assert_eq!(from_file.stdout, from_stdin.stdout);
}

#[test]
fn the_default_view_labels_text_and_calls_by_choice() {
    let out = replay(&[], None);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("[choice 2] "), "{text}");
    assert!(
        text.contains("[choice 1] → tool call 0: get_weather"),
        "{text}"
    );
    assert!(text.contains("[choice 1] ✔ finished: tool_calls"), "{text}");
    assert!(
        text.contains("usage (reported): prompt 148, completion 207, total 355"),
        "{text}"
    );
}

#[test]
fn bad_input_exits_1_with_a_one_line_error_and_still_prints_what_was_assembled() {
    let sse = concat!(
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"kept\"}}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\n\n",
    );
    let out = replay(&["-", "--json"], Some(sse.as_bytes()));
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("line 3"), "{stderr}");
    let partial: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(partial["choices"][0]["message"]["content"], "kept");

    let out = replay(&["-"], Some(sse.as_bytes()));
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8(out.stdout)
            .unwrap()
            .contains("[choice 0] kept")
    );
}

#[test]
fn a_missing_file_is_a_clear_error() {
    let out = replay(&["/nonexistent/stream.sse"], None);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8(out.stderr)
            .unwrap()
            .contains("cannot open /nonexistent/stream.sse")
    );
}

#[test]
fn without_reported_usage_json_carries_an_estimate_and_request_adds_the_prompt() {
    let sse = concat!(
        "data: {\"model\":\"gpt-4o-mini\",\"choices\":[{\"index\":1,\"delta\":{\"content\":\"Hello!\"},\"finish_reason\":\"stop\"}]}\n\n",
        "data: {\"model\":\"gpt-4o-mini\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi there\"},\"finish_reason\":\"stop\"}]}\n\n",
        "data: [DONE]\n\n",
    );
    let out = replay(&["-", "--json"], Some(sse.as_bytes()));
    assert!(out.status.success());
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    let usage = &json["usage"];
    assert_eq!(usage["source"], "estimated");
    assert_eq!(usage["estimate"]["encoding"], "o200k_base");
    assert_eq!(usage["estimate"]["prompt_counted"], false);
    // "Hello!" is 2 tokens and "Hi there" 2 in o200k_base.
    assert_eq!(usage["completion_tokens"], 4);
    assert_eq!(usage["estimate"]["choices"]["1"], 2);

    let dir = std::env::temp_dir().join(format!("choicewise-request-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let request = dir.join("request.json");
    std::fs::write(
        &request,
        r#"{"model":"gpt-4o-mini","n":2,"messages":[{"role":"user","content":"Say hello"}]}"#,
    )
    .unwrap();
    let out = replay(
        &["-", "--json", "--request", request.to_str().unwrap()],
        Some(sse.as_bytes()),
    );
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["usage"]["prompt_tokens"], 9);
    assert_eq!(json["usage"]["total_tokens"], 13);
    let out = replay(
        &["-", "--request", request.to_str().unwrap()],
        Some(sse.as_bytes()),
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("usage (estimated with o200k_base): prompt 9, completion 4, total 13"),
        "{text}"
    );
}

#[test]
fn the_default_view_shows_each_calls_arguments_as_they_grow() {
    let out = replay(&[fixture("answer_question.sse").to_str().unwrap()], None);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let growing: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("[choice 0] … tool call 0 "))
        .collect();
    assert!(growing.len() > 10, "{text}");
    // Each shown answer extends the previous one.
    let answers: Vec<String> = growing
        .iter()
        .filter_map(|l| serde_json::from_str::<Value>(l.splitn(5, ' ').nth(4).unwrap()).ok())
        .filter_map(|v| v["answer"].as_str().map(str::to_string))
        .collect();
    assert!(
        answers.windows(2).all(|w| w[1].starts_with(&w[0])),
        "{answers:?}"
    );
    assert!(
        text.contains("[choice 0] ← tool call 0 arguments: {\"answer\": \"Bread rises"),
        "{text}"
    );
}

/// Two choices fail on their own (a malformed delta, a bad tool-call index) among healthy
/// ones: every view exits 1 with one stderr line per failed choice naming its index and line;
/// `--json` still prints every choice, the failed ones with `"finish_reason": null`.
#[test]
fn failed_choices_are_reported_one_line_each_and_the_others_finish() {
    let sse = concat!(
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"fine\"}}]}\n\n",
        "data: {\"choices\":[{\"index\":1,\"delta\":{\"content\":\"bad\"}}]}\n\n",
        "data: {\"choices\":[{\"index\":1,\"delta\":{\"content\":5}}]}\n\n",
        "data: {\"choices\":[{\"index\":2,\"delta\":{\"tool_calls\":[{\"index\":-3}]}}]}\n\n",
        "data: {\"choices\":[{\"index\":1,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n",
        "data: [DONE]\n\n",
    );
    for args in [&["-", "--json"][..], &["-", "--plain"][..]] {
        let out = replay(args, Some(sse.as_bytes()));
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        let lines: Vec<&str> = stderr
            .lines()
            .filter(|l| l.starts_with("choicewise: "))
            .collect();
        assert_eq!(lines.len(), 2, "{args:?}: {stderr}");
        assert!(
            lines[0].contains("choice 1") && lines[0].contains("line 5"),
            "{stderr}"
        );
        assert!(
            lines[1].contains("choice 2") && lines[1].contains("line 7"),
            "{stderr}"
        );
        if args.contains(&"--json") {
            let json: Value = serde_json::from_slice(&out.stdout).unwrap();
            let choices = json["choices"].as_array().unwrap();
            assert_eq!(choices.len(), 3);
            assert_eq!(choices[0]["finish_reason"], "stop");
            assert_eq!(choices[0]["message"]["content"], "fine");
            assert_eq!(choices[1]["finish_reason"], Value::Null);
            assert_eq!(choices[1]["message"]["content"], "bad");
            assert_eq!(choices[2]["finish_reason"], Value::Null);
        } else {
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(stdout.contains("[choice 0] ✔ finished: stop"), "{stdout}");
        }
    }
}

/// Responses and Anthropic recordings are recognised from the stream; `--format` forces a
/// dialect, and an event of another dialect is an error naming it.
#[test]
fn typed_dialects_are_recognised_or_forced() {
    for (name, content) in [
        ("anthropic_tools.sse", "Let me check both cities."),
        ("responses_text.sse", "There are three r's in strawberry."),
    ] {
        let out = replay(&[fixture(name).to_str().unwrap(), "--json"], None);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let json: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(json["object"], "chat.completion");
        assert_eq!(json["choices"][0]["message"]["content"], content, "{name}");
    }
    let out = replay(
        &[
            fixture("responses_text.sse").to_str().unwrap(),
            "--json",
            "--format",
            "anthropic",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("\"response.created\" is not an event of the anthropic dialect"),
        "{stderr}"
    );
    let out = replay(&["-", "--format", "grpc"], Some(b""));
    assert_eq!(out.status.code(), Some(2));
}

/// `--first`, `--vote` and `--vote-by` on a recording: `"selected"` (and `"vote"`) in
/// `--json`, exit 0 when something was selected and 1 when nothing could be.
#[test]
fn first_and_vote_select_and_say_so() {
    let chunk = |i: u32, text: &str, finish: Option<&str>| {
        let finish = finish.map_or("null".to_string(), |f| format!("\"{f}\""));
        format!(
            "data: {{\"choices\":[{{\"index\":{i},\"delta\":{{\"content\":\"{text}\"}},\"finish_reason\":{finish}}}]}}\n\n"
        )
    };
    let sse = [
        chunk(0, "The answer is 41", None),
        chunk(2, "It is 42.", Some("stop")),
        chunk(1, "I think 42", None),
        chunk(3, "Answer: 42", Some("stop")),
        chunk(1, ".", Some("stop")),
        chunk(0, ", maybe", Some("length")),
        chunk(4, "Seven", Some("stop")),
        "data: [DONE]\n\n".to_string(),
    ]
    .concat();
    let json = |args: &[&str]| {
        let out = replay(args, Some(sse.as_bytes()));
        let value: Value = serde_json::from_slice(&out.stdout).unwrap();
        (out.status.code(), value)
    };
    // The first choice to finish with stop or tool_calls (choice 0's length does not count).
    // The choices of one read are parsed side by side, so which of several finishes in the
    // same read is seen first is not fixed: only one qualifies here.
    let first = [
        chunk(0, "a", None),
        chunk(2, "b", Some("stop")),
        chunk(1, "c", None),
        chunk(0, "d", Some("length")),
        "data: [DONE]\n\n".to_string(),
    ]
    .concat();
    let out = replay(&["-", "--json", "--first"], Some(first.as_bytes()));
    assert_eq!(out.status.code(), Some(0));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["selected"], serde_json::json!([2]));
    assert!(v.get("vote").is_none());
    // Three choices say 42, one says nothing numeric, one is cut: 42 wins. The vote is
    // decided as soon as it is certain (two 42s with at most one choice still running), so
    // which of the 42s were counted before the rest were cancelled depends on timing.
    let (code, v) = json(&["-", "--json", "--vote-by", r"(\d+)"]);
    assert_eq!(code, Some(0));
    let selected: Vec<u64> = v["selected"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i.as_u64().unwrap())
        .collect();
    assert!(
        selected.len() >= 2 && selected.iter().all(|i| [1, 2, 3].contains(i)),
        "{selected:?}"
    );
    assert_eq!(v["vote"]["key"], "42");
    assert_eq!(v["vote"]["votes"], selected.len());
    assert_eq!(v["vote"]["choices"], 5);
    for c in v["choices"].as_array().unwrap() {
        if c["cancelled"] == true {
            assert_eq!(c["finish_reason"], Value::Null);
        }
    }
    // The whole content (trimmed) as the key: every answer differs, so no key has the two
    // votes a winner needs by default (exit 1, nothing selected)...
    let (code, v) = json(&["-", "--json", "--vote"]);
    assert_eq!(code, Some(1));
    assert_eq!(v["selected"], serde_json::json!([]));
    // ... and with --vote-min 1, a plain plurality: the first vote wins.
    let (code, v) = json(&["-", "--json", "--vote", "--vote-min", "1"]);
    assert_eq!(code, Some(0));
    assert_eq!(v["vote"]["votes"], 1);
    // Without a combinator: no "selected".
    let (code, v) = json(&["-", "--json"]);
    assert_eq!(code, Some(0));
    assert!(v.get("selected").is_none());
    // Nothing finishes with stop: nothing selected, exit 1, the reason on stderr.
    let cut = [
        chunk(0, "a", Some("length")),
        "data: [DONE]\n\n".to_string(),
    ]
    .concat();
    let out = replay(&["-", "--json", "--first"], Some(cut.as_bytes()));
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("nothing selected"), "{stderr}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["selected"], serde_json::json!([]));
    // The plain view ends with a line saying what was selected.
    let out = replay(
        &["-", "--plain", "--vote-by", r"(\d+)"],
        Some(sse.as_bytes()),
    );
    assert_eq!(out.status.code(), Some(0));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("(vote: \"42\" with "), "{stdout}");
}

/// `replay ARGS` with `bytes` on stdin and stdin left open afterwards, as a stalled upstream:
/// the command must end on its own (within 30 s, else the test fails).
fn replay_with_stdin_left_open(args: &[&str], bytes: &[u8]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_choicewise"))
        .arg("replay")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    input.write_all(bytes).unwrap();
    input.flush().unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("replay {args:?} did not end while its input stalled");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    drop(input);
    out
}

/// The `≈ N` of `cancelled choices had ≈ N tokens` on the usage line, and the
/// `(≈ N tokens received)` of the selection's line, in `stdout`.
fn cancelled_tokens(stdout: &str) -> (u64, u64) {
    let number_after = |line: &str, before: &str| -> u64 {
        let rest = &line[line.find(before).unwrap() + before.len()..];
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        digits.parse().unwrap()
    };
    let usage = stdout
        .lines()
        .find(|l| l.starts_with("usage ("))
        .unwrap_or_else(|| panic!("no usage line in {stdout}"));
    assert!(
        usage.contains("; cancelled choices had ≈ "),
        "the usage line does not say what the cancelled choices had used: {usage}"
    );
    let selected = stdout
        .lines()
        .find(|l| l.starts_with("selected: "))
        .unwrap_or_else(|| panic!("no selection line in {stdout}"));
    (
        number_after(usage, "; cancelled choices had ≈ "),
        number_after(selected, "(≈ "),
    )
}

/// `--first` on the bundled demo at its recorded pace: choice 1 finishes with tool_calls at
/// 1.1 s while choices 0 and 2 stream on until 3.1 s, so both are cancelled. The plain view
/// ends each of them with `⊘ cancelled` (never a finish), and the usage line says what they
/// had received, the same figure as the selection's line.
#[test]
fn first_on_the_demo_shows_the_cancelled_choices_and_their_tokens() {
    let out = replay(&["--first", "--plain"], None);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(
        stdout.contains("[choice 1] ✔ finished: tool_calls"),
        "{stdout}"
    );
    for cancelled in [0, 2] {
        assert!(
            stdout.contains(&format!("[choice {cancelled}] ⊘ cancelled")),
            "{stdout}"
        );
        assert!(
            !stdout.contains(&format!("[choice {cancelled}] ✔ finished")),
            "{stdout}"
        );
    }
    assert!(!stdout.contains("[choice 1] ⊘ cancelled"), "{stdout}");
    assert!(
        stdout.contains("selected: choice 1 (first finished); cancelled 0, 2 (≈ "),
        "{stdout}"
    );
    let (in_usage, in_selection) = cancelled_tokens(&stdout);
    assert!(in_usage > 0, "{stdout}");
    assert_eq!(in_usage, in_selection, "{stdout}");
    // The usage line comes before the selection's line, both after every choice's end.
    let lines: Vec<&str> = stdout.lines().collect();
    let n = lines.len();
    assert!(lines[n - 2].starts_with("usage ("), "{stdout}");
    assert!(lines[n - 1].starts_with("selected: "), "{stdout}");

    // Without a combinator nothing is cancelled, and nothing says so.
    let out = replay(&["--plain", "--speed", "0"], None);
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(!stdout.contains("cancelled"), "{stdout}");
}

/// A choice that could never finish (its input stalls, stdin left open) is cancelled once
/// another finishes with stop: the plain view says so, the usage line counts what it had
/// received, and the command ends without waiting for the stalled input.
#[test]
fn first_cancels_a_stalled_choice_and_the_usage_line_counts_it() {
    let sse = concat!(
        "data: {\"model\":\"gpt-4o-mini\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Let me think about\"}}]}\n\n",
        "data: {\"model\":\"gpt-4o-mini\",\"choices\":[{\"index\":1,\"delta\":{\"content\":\"42\"},\"finish_reason\":\"stop\"}]}\n\n",
    );
    let out = replay_with_stdin_left_open(&["-", "--first", "--plain"], sse.as_bytes());
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(
        stdout.contains("[choice 0] Let me think about\n[choice 0] ⊘ cancelled\n"),
        "{stdout}"
    );
    assert!(stdout.contains("[choice 1] ✔ finished: stop"), "{stdout}");
    assert!(
        stdout.contains("selected: choice 1 (first finished); cancelled 0 (≈ "),
        "{stdout}"
    );
    let (in_usage, in_selection) = cancelled_tokens(&stdout);
    // "Let me think about" is 4 tokens in o200k_base.
    assert_eq!((in_usage, in_selection), (4, 4), "{stdout}");
    // --json says it too: the cancelled choice with no finish.
    let out = replay_with_stdin_left_open(&["-", "--first", "--json"], sse.as_bytes());
    assert_eq!(out.status.code(), Some(0));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["selected"], serde_json::json!([1]));
    assert_eq!(v["choices"][0]["cancelled"], true);
    assert_eq!(v["choices"][0]["finish_reason"], Value::Null);
}

#[test]
fn an_input_that_is_not_a_stream_is_named_and_exits_1() {
    let dir = std::env::temp_dir().join(format!("choicewise-sniff-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cases: [(&str, &[u8], &str); 5] = [
        ("empty.sse", b"", "empty input: no SSE events"),
        ("blank.sse", b"\n \n", "empty input: no SSE events"),
        (
            "reply.json",
            br#"{"choices": [{"message": {"content": "hi"}}]}"#,
            "it looks like JSON",
        ),
        (
            "image.png",
            b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR",
            "binary data",
        ),
        ("notes.txt", b"hello\nworld\n", "text without data: lines"),
    ];
    for (name, bytes, what) in cases {
        let path = dir.join(name);
        std::fs::write(&path, bytes).unwrap();
        for stdin in [false, true] {
            let out = match stdin {
                false => replay(&[path.to_str().unwrap()], None),
                true => replay(&["-"], Some(bytes)),
            };
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(1), "{name} (stdin {stdin}): {err}");
            assert!(err.contains(what), "{name} (stdin {stdin}): {err}");
            if what != "empty input: no SSE events" {
                assert!(
                    err.starts_with("choicewise: not an SSE stream or a choicewise recording"),
                    "{name}: {err}"
                );
            } else {
                assert_eq!(err.trim(), "choicewise: empty input: no SSE events");
            }
            assert!(
                out.stdout.is_empty(),
                "{name}: nothing on stdout, no usage line"
            );
        }
    }
    // A stream with no choice at all prints no usage line either.
    let path = dir.join("done.sse");
    std::fs::write(&path, b"data: [DONE]\n\n").unwrap();
    let out = replay(&[path.to_str().unwrap(), "--plain"], None);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("usage"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

fn choicewise(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_choicewise"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn completions_for_every_shell_and_man_pages() {
    for shell in ["bash", "zsh", "fish", "powershell", "elvish"] {
        let out = choicewise(&["completions", shell]);
        assert!(out.status.success(), "{shell}");
        let script = String::from_utf8_lossy(&out.stdout);
        for word in ["choicewise", "replay", "vote-window", "max-tokens"] {
            assert!(script.contains(word), "{shell} completion lacks {word}");
        }
    }
    assert_eq!(choicewise(&["completions", "tcsh"]).status.code(), Some(2));
    let top = choicewise(&["man"]);
    assert!(top.status.success());
    let page = String::from_utf8_lossy(&top.stdout);
    assert!(
        page.starts_with(".ie") || page.contains(".TH choicewise 1"),
        "{page}"
    );
    assert!(page.contains(".TH choicewise 1"));
    let chat = String::from_utf8_lossy(&choicewise(&["man", "chat"]).stdout).into_owned();
    assert!(chat.contains(".TH choicewise-chat 1"), "{chat}");
    assert!(
        chat.contains("max\\-tokens"),
        "the chat page lists its flags"
    );
    let serve = String::from_utf8_lossy(&choicewise(&["man", "serve"]).stdout).into_owned();
    assert!(serve.contains(".TH choicewise-serve 1"), "{serve}");
    assert!(
        serve.contains("log\\-format"),
        "the serve page lists its flags"
    );
    assert_eq!(choicewise(&["man", "nope"]).status.code(), Some(2));
}

/// `--confidence` on a recording with log-probabilities (`confidence_n5_logprobs.rec`: choices
/// 0-2, the warmup, finish at once with confidences 4, 3 and 2 on "42", "41" and "42"; choice 3,
/// "41" at 4.5, finishes at 700 ms; choice 4 hesitates at 1.0 from 300 ms and would finish at
/// 600 ms). The threshold is the 0.1 quantile of 2, 3, 4: 2.2, so choice 2 does not vote and
/// choice 4 is stopped; "41" outweighs "42" (7.5 against 4) although a plain vote ties them.
/// The decision is the library's own over the same stream.
#[test]
fn confidence_on_a_recording_with_logprobs_decides_as_the_library_does() {
    let file = fixture("confidence_n5_logprobs.rec");
    let path = file.to_str().unwrap();
    let flags = [
        "--vote-by",
        r"Answer: (\d+)",
        "--confidence",
        "--measure",
        "top_k",
        "--warmup",
        "3",
        "--group-tokens",
        "2",
        "--speed",
        "1",
    ];
    let mut args = vec![path, "--json"];
    args.extend(flags);
    let out = replay(&args, None);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    let report = &json["confidence"];
    assert!(
        (report["threshold"].as_f64().unwrap() - 2.2).abs() < 1e-9,
        "{report}"
    );
    assert_eq!(report["warmup"], serde_json::json!([0, 1, 2]));
    assert_eq!(report["stopped"], serde_json::json!([4]), "{report}");
    assert_eq!(report["weights"], serde_json::json!({"41": 7.5, "42": 4.0}));
    assert_eq!(json["selected"], serde_json::json!([1, 3]));
    assert_eq!(json["vote"]["key"], "41");
    let stopped = &json["choices"][4];
    assert_eq!(
        (&stopped["cancelled"], &stopped["finish_reason"]),
        (&Value::Bool(true), &Value::Null)
    );

    // The library, over the same bytes (the stamps are SSE comments), as fast as it can read:
    // the same decision.
    let library = tokio::runtime::Runtime::new().unwrap().block_on(async {
        use choicewise::confidence::{Confidence, Measure};
        use choicewise::{Completions, Source, VoteKey};
        let bytes = std::fs::read(&file).unwrap();
        let key = VoteKey::pattern(r"Answer: (\d+)").unwrap();
        Completions::new(Source::reader(std::io::Cursor::new(bytes)))
            .vote(move |o| key.of(o))
            .min_votes(2)
            .confidence(
                Confidence::for_measure(Measure::TopK)
                    .warmup(3)
                    .group_tokens(2),
            )
            .await
    });
    let ours: Vec<u64> = (json["selected"].as_array().unwrap().iter())
        .filter_map(Value::as_u64)
        .collect();
    let theirs: Vec<u64> = library.selected.iter().map(|i| u64::from(*i)).collect();
    assert_eq!(ours, theirs);
    assert_eq!(library.vote.as_ref().map(|t| t.key.as_str()), Some("41"));
    let report = library.confidence.as_ref().unwrap();
    assert_eq!(
        serde_json::to_value(report.weights()).unwrap(),
        json["confidence"]["weights"]
    );
    assert_eq!(report.threshold(), json["confidence"]["threshold"].as_f64());

    // The plain view marks the stopped choice apart from a cancelled one, and says why.
    let mut args = vec![path];
    args.extend(flags);
    let out = replay(&args, None);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("[choice 4] ⊘ low confidence"), "{text}");
    assert!(!text.contains("⊘ cancelled"), "{text}");
    let summary = text.lines().last().unwrap_or_default();
    assert!(
        summary.starts_with("selected: choices 1, 3 (vote: \"41\""),
        "{summary}"
    );
    assert!(
        summary.contains(
            "confidence: threshold 2.200, low confidence 4, weights \"41\" 7.500, \"42\" 4.000"
        ),
        "{summary}"
    );
}

#[test]
fn confidence_without_a_vote_is_a_usage_error() {
    let file = fixture("confidence_n5_logprobs.rec");
    for args in [
        vec!["--confidence"],
        vec!["--confidence", "--first"],
        vec!["--warmup", "3", "--vote"],
        vec!["--vote", "--confidence", "--keep", "1.5"],
    ] {
        let mut all = vec![file.to_str().unwrap()];
        all.extend(&args);
        let out = replay(&all, None);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?}");
        let expected = match args[0] {
            "--confidence" => "<--vote|--vote-by <REGEX>>",
            "--warmup" => "--confidence",
            _ => "is not a share",
        };
        assert!(err.contains(expected), "{args:?}: {err}");
    }
}

/// The pick's flags are core's `Policy`, checked there: a refusal is a usage error (exit 2)
/// naming the flag.
#[test]
fn a_refused_pick_names_its_flag() {
    let file = fixture("confidence_n5_logprobs.rec");
    for (args, says) in [
        (
            vec!["--vote", "--vote-min", "0"],
            "--vote-min: must be an integer of 1 or more, not 0",
        ),
        (
            vec!["--vote", "--vote-window", "0"],
            "--vote-window: must be an integer of 1 or more, not 0",
        ),
        (
            vec!["--vote-by", "("],
            "--vote-by: is not a valid regular expression",
        ),
        (
            vec!["--vote", "--confidence", "--warmup", "65"],
            "--warmup: must be an integer from 1 to 64, not 65",
        ),
        (
            vec!["--vote", "--confidence", "--keep", "0"],
            "--keep: must be a number above 0 and at most 1, not 0",
        ),
    ] {
        let mut all = vec![file.to_str().unwrap()];
        all.extend(&args);
        let out = replay(&all, None);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
}

/// A recording of an n = 4 stream: choices 0..4 answer "a", "b", "a", "b", and the stream
/// finishes them in the order 3, 0, 1, 2; each event at `t(k)` (none: plain SSE).
fn finishing_out_of_order(t: impl Fn(usize) -> Option<f64>) -> Vec<u8> {
    let mut events: Vec<String> = ["a", "b", "a", "b"]
        .iter()
        .enumerate()
        .map(|(i, a)| {
            format!(
                "data: {{\"choices\":[{{\"index\":{i},\"delta\":{{\"content\":\"{a}\"}}}}]}}\n\n"
            )
        })
        .collect();
    for i in [3, 0, 1, 2] {
        events.push(format!(
            "data: {{\"choices\":[{{\"index\":{i},\"delta\":{{}},\"finish_reason\":\"stop\"}}]}}\n\n"
        ));
    }
    events.push("data: [DONE]\n\n".to_string());
    let timed = t(0).is_some();
    let mut out = String::new();
    if timed {
        out.push_str(": choicewise-recording v1\n");
    }
    for (k, event) in events.iter().enumerate() {
        if let Some(t) = t(k) {
            out.push_str(&format!(": t={t:.3}\n"));
        }
        out.push_str(event);
    }
    out.into_bytes()
}

/// Runs `--first` and `--vote` on recordings with distinct, shared and no timestamps, at
/// speeds 0, 1 and 10, `CHOICEWISE_ORDER_RUNS` times each (3 by default: each run is a
/// process of its own; the library's own tests repeat the pick 100 times).
#[test]
fn first_and_vote_give_the_recordings_first_finisher_at_every_speed() {
    let runs: usize = std::env::var("CHOICEWISE_ORDER_RUNS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(3);
    let recordings = [
        (
            "distinct timestamps",
            finishing_out_of_order(|k| Some(k as f64 * 3.0)),
        ),
        (
            "one shared timestamp",
            finishing_out_of_order(|_| Some(5.0)),
        ),
        ("no timestamps", finishing_out_of_order(|_| None)),
    ];
    let dir = std::env::temp_dir().join(format!("choicewise-order-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // Every recording at every speed at once, a thread each (each run is a process that
    // mostly waits on its recording's pace); the runs of one pair one after the other.
    std::thread::scope(|scope| {
        for (what, bytes) in &recordings {
            let path = dir.join(format!("{}.rec", what.replace(' ', "-")));
            std::fs::write(&path, bytes).unwrap();
            for speed in ["0", "1", "10"] {
                let path = path.clone();
                scope.spawn(move || {
                    let path = path.to_str().unwrap();
                    for run in 0..runs {
                        let out = replay(&[path, "--json", "--first", "--speed", speed], None);
                        assert!(
                            out.status.success(),
                            "{what}: {}",
                            String::from_utf8_lossy(&out.stderr)
                        );
                        let json: Value = serde_json::from_slice(&out.stdout).unwrap();
                        assert_eq!(
                            json["selected"],
                            serde_json::json!([3]),
                            "{what}, speed {speed}, run {run}"
                        );
                        // 2:2: the tie goes to "b", whose voter (choice 3) finished first.
                        let out = replay(&[path, "--json", "--vote", "--speed", speed], None);
                        assert!(
                            out.status.success(),
                            "{what}: {}",
                            String::from_utf8_lossy(&out.stderr)
                        );
                        let json: Value = serde_json::from_slice(&out.stdout).unwrap();
                        assert_eq!(json["vote"]["key"], "b", "{what}, speed {speed}, run {run}");
                        // The winning key's voters in the order they finished: 3 answers.
                        assert_eq!(
                            json["selected"],
                            serde_json::json!([3, 1]),
                            "{what}, speed {speed}"
                        );
                        assert_eq!(json["vote"]["tally"][0]["key"], "b");
                    }
                });
            }
        }
    });
}
