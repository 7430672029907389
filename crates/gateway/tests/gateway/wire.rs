//! The picks over real sockets: a model of three upstream servers, one sample each, whose
//! first bytes come at staggered times (each rotation of the delays), asked through every
//! client API, streamed and not. The pick must follow the order the samples finished on the
//! wire, and answer at that moment, not after the slowest sample's head.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use choicewise_test_support::within;
use choicewise_testserver::{TestServer, answer, tool_call_answer};
use serde_json::{Value, json};

use crate::common::{fan_out_toml, no_env, serve, start};

const LIMIT: Duration = Duration::from_secs(30);

/// The client APIs, by path.
const APIS: [&str; 3] = ["/v1/chat/completions", "/v1/messages", "/v1/responses"];

/// Three upstreams, upstream `i` answering `bodies[i]` once `delays[i]` ms have passed after
/// each request (before its status line); a model `m` over them with this pick policy, one
/// sample on each.
async fn three(
    delays: [u64; 3],
    bodies: [String; 3],
    policy: &str,
) -> (SocketAddr, Vec<TestServer>) {
    let mut servers = Vec::new();
    for (delay, body) in delays.iter().zip(bodies) {
        let server = TestServer::builder()
            .body(body)
            .head_delay(Duration::from_millis(*delay));
        servers.push(start(server).await);
    }
    let upstreams: String = (servers.iter())
        .map(|s| fan_out_toml(&s.base_url(), ""))
        .collect();
    let toml = format!(
        "[[models]]\nname = \"m\"\n[models.choicewise]\nsamples = 3\n{policy}\n{upstreams}"
    );
    let (addr, _) = serve(&toml, no_env).await;
    (addr, servers)
}

/// The request body for `path`, streamed or not.
fn request(path: &str, stream: bool) -> Value {
    let user = json!([{"role": "user", "content": "which?"}]);
    match path {
        "/v1/messages" => {
            json!({"model": "m", "max_tokens": 64, "stream": stream, "messages": user})
        }
        "/v1/responses" => json!({"model": "m", "stream": stream, "input": "which?"}),
        _ => json!({"model": "m", "stream": stream, "messages": user}),
    }
}

/// What the answer says: its text, or its tool call's arguments; and, streamed, when its
/// first content came (from `asked`).
struct Answered {
    said: String,
    first: Duration,
    whole: Duration,
}

/// Posts to `path` and reads the answer's text (or its call's arguments), timing its first
/// content and its end.
async fn ask(addr: SocketAddr, path: &str, stream: bool) -> Answered {
    let asked = Instant::now();
    let response = within(
        LIMIT,
        "the answer's head",
        reqwest::Client::new()
            .post(format!("http://{addr}{path}"))
            .json(&request(path, stream))
            .send(),
    )
    .await
    .unwrap();
    assert_eq!(response.status(), 200, "{path}");
    if !stream {
        let v: Value = within(LIMIT, "the answer", response.json()).await.unwrap();
        let whole = asked.elapsed();
        return Answered {
            said: said_whole(path, &v),
            first: whole,
            whole,
        };
    }
    let mut said = String::new();
    let mut first = None;
    let mut buffer = String::new();
    let mut body = response;
    while let Some(bytes) = within(LIMIT, "the stream", body.chunk()).await.unwrap() {
        buffer.push_str(std::str::from_utf8(&bytes).unwrap());
        while let Some(end) = buffer.find("\n\n") {
            let event: String = buffer.drain(..end + 2).collect();
            if let Some(piece) = said_streamed(path, &event)
                && !piece.is_empty()
            {
                first.get_or_insert_with(|| asked.elapsed());
                said.push_str(&piece);
            }
        }
    }
    let whole = asked.elapsed();
    Answered {
        said,
        first: first.unwrap_or(whole),
        whole,
    }
}

/// A whole answer's text or first call's arguments, in `path`'s API.
fn said_whole(path: &str, v: &Value) -> String {
    let text = |t: &Value| t.as_str().map(str::to_string);
    let found = match path {
        "/v1/messages" => (v["content"].as_array().into_iter().flatten()).find_map(|b| {
            text(&b["text"]).or_else(|| (b["type"] == "tool_use").then(|| b["input"].to_string()))
        }),
        "/v1/responses" => (v["output"].as_array().into_iter().flatten())
            .find_map(|o| text(&o["content"][0]["text"]).or_else(|| text(&o["arguments"]))),
        _ => {
            let m = &v["choices"][0]["message"];
            text(&m["content"]).or_else(|| text(&m["tool_calls"][0]["function"]["arguments"]))
        }
    };
    found.unwrap_or_else(|| panic!("{path}: nothing said in {v}"))
}

/// The text or argument piece one streamed event carries, in `path`'s API.
fn said_streamed(path: &str, event: &str) -> Option<String> {
    let data = event.lines().find_map(|l| l.strip_prefix("data: "))?;
    let v: Value = serde_json::from_str(data).ok()?;
    let text = |t: &Value| t.as_str().map(str::to_string);
    match path {
        "/v1/messages" => {
            let d = &v["delta"];
            text(&d["text"]).or_else(|| text(&d["partial_json"]))
        }
        "/v1/responses" => match v["type"].as_str()? {
            "response.output_text.delta" | "response.function_call_arguments.delta" => {
                text(&v["delta"])
            }
            _ => None,
        },
        _ => {
            let d = &v["choices"][0]["delta"];
            text(&d["content"]).or_else(|| text(&d["tool_calls"][0]["function"]["arguments"]))
        }
    }
}

/// Each rotation of these delays.
fn rotations(delays: [u64; 3]) -> [[u64; 3]; 3] {
    let [a, b, c] = delays;
    [[a, b, c], [c, a, b], [b, c, a]]
}

/// `first_finished` over three upstreams, each rotation of 0/300/600 ms and of 0/40/80 ms
/// before their first bytes: the sample whose first byte came first is the answer in every
/// run, in every client API, streamed and not, and it comes before the second sample's first
/// byte could have (the pick does not wait for the others' heads).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_finished_answers_the_first_on_the_wire_at_once() {
    for delays in rotations([0, 300, 600])
        .into_iter()
        .chain(rotations([0, 40, 80]))
    {
        let bodies = ["A0", "B1", "C2"].map(answer);
        let (addr, _servers) = three(delays, bodies, "select = \"first_finished\"").await;
        let first = (0..3).min_by_key(|&i| delays[i]).unwrap();
        let expected = ["A0", "B1", "C2"][first];
        let second = {
            let mut d = delays;
            d.sort_unstable();
            d[1]
        };
        for path in APIS {
            for stream in [false, true] {
                for run in 0..5 {
                    let got = ask(addr, path, stream).await;
                    let what = format!("{delays:?} {path} stream={stream} run {run}");
                    assert_eq!(got.said, expected, "{what}");
                    // The answer (its end, not streamed; its first content, streamed) comes
                    // before the second sample's head: nobody waited for it.
                    let at = if stream { got.first } else { got.whole };
                    assert!(
                        at < Duration::from_millis(second) || second < 100,
                        "{what}: answered after {at:?}"
                    );
                }
            }
        }
    }
}

/// A 1:1:1 vote over three upstreams (a tool call each, every one different): the first
/// sample to finish on the wire is answered, in every rotation, every client API.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tied_vote_answers_the_first_to_finish_on_the_wire() {
    for delays in rotations([0, 150, 300]) {
        let args = [
            r#"{"cmd":"ls a"}"#,
            r#"{"cmd":"ls b"}"#,
            r#"{"cmd":"ls c"}"#,
        ];
        let bodies = args.map(|a| tool_call_answer("Bash", a));
        let (addr, _servers) = three(delays, bodies, "select = \"vote\"").await;
        let first = (0..3).min_by_key(|&i| delays[i]).unwrap();
        let expected: Value = serde_json::from_str(args[first]).unwrap();
        for path in APIS {
            for stream in [false, true] {
                for run in 0..3 {
                    let got = ask(addr, path, stream).await;
                    let what = format!("{delays:?} {path} stream={stream} run {run}");
                    let said: Value = serde_json::from_str(&got.said)
                        .unwrap_or_else(|e| panic!("{what}: {e}: {}", got.said));
                    assert_eq!(said, expected, "{what}");
                }
            }
        }
    }
}

/// Two samples whose call's arguments are not JSON finish first; a valid call finishes last:
/// the vote waits for it and answers it, never cancelling it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vote_waits_for_a_valid_call_still_running() {
    let bodies = [
        tool_call_answer("Bash", r#"{"cmd": "ls"#),
        tool_call_answer("Bash", r#"{"cmd" "ls"}"#),
        tool_call_answer("Bash", r#"{"cmd":"ls"}"#),
    ];
    let (addr, servers) = three([0, 100, 300], bodies, "select = \"vote\"").await;
    for path in APIS {
        for stream in [false, true] {
            let got = ask(addr, path, stream).await;
            let what = format!("{path} stream={stream}");
            let said: Value = serde_json::from_str(&got.said)
                .unwrap_or_else(|e| panic!("{what}: {e}: {}", got.said));
            assert_eq!(said, json!({"cmd": "ls"}), "{what}");
            assert!(got.whole >= Duration::from_millis(300), "{what}");
        }
    }
    assert_eq!(servers[2].disconnects(), 0, "the valid sample was cut");
}
