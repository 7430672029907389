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

/// The rotations the tests run: of 0/300/600 ms and of 0/40/80 ms.
fn every_rotation() -> impl Iterator<Item = [u64; 3]> {
    rotations([0, 300, 600])
        .into_iter()
        .chain(rotations([0, 40, 80]))
}

/// Runs per order, client API and streaming: `CHOICEWISE_WIRE_RUNS`, else 20 (the figures
/// in docs/benchmarks.md are of 100).
fn runs() -> usize {
    std::env::var("CHOICEWISE_WIRE_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20)
}

/// `runs` requests to `path`, `together` at a time.
async fn ask_many(
    addr: SocketAddr,
    path: &'static str,
    stream: bool,
    runs: usize,
    together: usize,
) -> Vec<Answered> {
    use futures::StreamExt;
    futures::stream::iter((0..runs).map(|_| ask(addr, path, stream)))
        .buffer_unordered(together)
        .collect()
        .await
}

/// The median and the largest of these times, in ms.
fn spread(mut times: Vec<Duration>) -> (f64, f64) {
    times.sort_unstable();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    (ms(times[times.len() / 2]), ms(times[times.len() - 1]))
}

/// The model's upstreams: three servers whose answers' heads come `delays` ms after the
/// request, or (`one`) one server answering its requests in turn with those delays.
async fn upstreams(
    delays: [u64; 3],
    bodies: [String; 3],
    policy: &str,
    one: bool,
) -> (SocketAddr, Vec<TestServer>) {
    if !one {
        return three(delays, bodies, policy).await;
    }
    let replies = delays.iter().zip(bodies).map(|(delay, body)| {
        TestServer::builder()
            .body(body)
            .head_delay(Duration::from_millis(*delay))
    });
    let server = start(crate::common::in_turn(replies)).await;
    let toml = format!(
        "[[models]]\nname = \"m\"\n[models.choicewise]\nsamples = 3\n{policy}\n{}",
        fan_out_toml(&server.base_url(), "")
    );
    let (addr, _) = serve(&toml, no_env).await;
    (addr, vec![server])
}

/// `first_finished` over three upstreams, each rotation of 0/300/600 ms and of 0/40/80 ms
/// before their first bytes: the sample whose first byte came first is the answer in every
/// run, in every client API, streamed and not, and it comes before the second sample's first
/// byte could have (the pick does not wait for the others' heads).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_finished_answers_the_first_on_the_wire_at_once() {
    let mut latencies = Vec::new();
    for delays in every_rotation() {
        let texts = ["A0", "B1", "C2"];
        let policy = "select = \"first_finished\"";
        let (addr, _servers) = three(delays, texts.map(answer), policy).await;
        let first = (0..3).min_by_key(|&i| delays[i]).unwrap();
        let mut sorted = delays;
        sorted.sort_unstable();
        let second = Duration::from_millis(sorted[1]);
        for path in APIS {
            for stream in [false, true] {
                // One at a time: each answer's time is its own.
                for run in 0..runs() {
                    let got = ask(addr, path, stream).await;
                    let what = format!("{delays:?} {path} stream={stream} run {run}");
                    assert_eq!(got.said, texts[first], "{what}");
                    // The answer (its end, not streamed; its first content, streamed) comes
                    // before the second sample's head could: nobody waited for it.
                    let at = if stream { got.first } else { got.whole };
                    assert!(
                        at < second || sorted[1] < 100,
                        "{what}: answered after {at:?}"
                    );
                    latencies.push(at);
                }
            }
        }
    }
    let (median, most) = spread(latencies);
    eprintln!(
        "first_finished: answered {median:.1} ms after the request (median), {most:.1} ms at most"
    );
}

/// A 1:1:1 vote (a tool call each, every one different), over three upstreams and over one
/// upstream answering the three samples in turn, their heads staggered in every rotation:
/// the first sample to finish on the wire is answered in every run, every client API,
/// streamed and not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a minute on 2 cores: .ci/run runs it in a step of its own"]
async fn a_tied_vote_answers_the_first_to_finish_on_the_wire() {
    let args = [
        r#"{"cmd":"ls a"}"#,
        r#"{"cmd":"ls b"}"#,
        r#"{"cmd":"ls c"}"#,
    ];
    let mut tally = (0, 0);
    // Four client requests at a time over three upstreams (40 ms apart is a scheduling
    // delay's order on a loaded machine: more at once would measure the machine).
    // Over one upstream the samples take its answers in the order their requests arrive:
    // one client request at a time, each of its samples gets one of the three, and fewer
    // runs (0/40/80 ms only) keep the test short.
    for one in [false, true] {
        let (orders, runs, together) = match one {
            false => (every_rotation().collect::<Vec<_>>(), runs(), 4),
            true => (rotations([0, 40, 80]).to_vec(), runs().div_ceil(4), 1),
        };
        for delays in orders {
            let bodies = args.map(|a| tool_call_answer("Bash", a));
            let (addr, _servers) = upstreams(delays, bodies, "select = \"vote\"", one).await;
            let first = (0..3).min_by_key(|&i| delays[i]).unwrap();
            let expected: Value = serde_json::from_str(args[first]).unwrap();
            for path in APIS {
                for stream in [false, true] {
                    for got in ask_many(addr, path, stream, runs, together).await {
                        let what = format!("{delays:?} one upstream {one} {path} stream={stream}");
                        let said: Value = serde_json::from_str(&got.said)
                            .unwrap_or_else(|e| panic!("{what}: {e}: {}", got.said));
                        assert_eq!(said, expected, "{what}");
                        tally.0 += 1;
                    }
                    tally.1 += 1;
                }
            }
        }
    }
    eprintln!(
        "tied votes: {} runs over {} orders, client APIs and streaming, each the first finisher",
        tally.0, tally.1
    );
}

/// Two samples whose call's arguments are not JSON finish first; a valid call finishes last:
/// the vote waits for it and answers it, never cancelling it, in every run, every client API,
/// streamed and not.
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
            for got in ask_many(addr, path, stream, runs(), 10).await {
                let what = format!("{path} stream={stream}");
                let said: Value = serde_json::from_str(&got.said)
                    .unwrap_or_else(|e| panic!("{what}: {e}: {}", got.said));
                assert_eq!(said, json!({"cmd": "ls"}), "{what}");
                assert!(got.whole >= Duration::from_millis(300), "{what}");
            }
        }
    }
    assert_eq!(servers[2].disconnects(), 0, "the valid sample was cut");
}

/// One upstream fails at once (500, no retry left) while the others' heads are still to come:
/// that sample fails alone, and the pick answers from the others, never a 502, in every
/// client API.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sample_that_fails_before_the_others_open_fails_alone() {
    let failing =
        start(TestServer::builder().fail(choicewise_testserver::Failure::status(500))).await;
    let mut servers = vec![failing];
    for text in ["B1", "C2"] {
        let late = TestServer::builder()
            .body(answer(text))
            .head_delay(Duration::from_millis(150));
        servers.push(start(late).await);
    }
    let upstreams: String = (servers.iter())
        .map(|s| fan_out_toml(&s.base_url(), ""))
        .collect();
    let toml = format!(
        "[[models]]\nname = \"m\"\n[models.retry]\nattempts = 1\n[models.choicewise]\nsamples = 3\nselect = \"first_finished\"\n{upstreams}"
    );
    let (addr, _) = serve(&toml, no_env).await;
    for path in APIS {
        for stream in [false, true] {
            let got = ask(addr, path, stream).await;
            assert!(
                ["B1", "C2"].contains(&got.said.as_str()),
                "{path}: {}",
                got.said
            );
        }
    }
    assert!(
        servers[0].request_count() >= 1,
        "the failing upstream was asked"
    );
}
