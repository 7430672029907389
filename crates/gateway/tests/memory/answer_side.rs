//! The answer side bounded by construction (issue 71): an upstream's tool-call arguments
//! cost a few times their bytes, in a vote of many samples and to every client API, and a
//! vote's answer adds at most a few KiB to its chosen choice (`tally`, `vote.key` and
//! `reason` show long keys cut, with their hash). Each test serves a gateway over loopback
//! HTTP with a scripted upstream whose answers are made before the figures start; the heap's
//! peak above its start (the counting allocator, the whole process: the upstream writing,
//! the gateway, the client reading the answer as text) is compared with the bytes the
//! upstream sent.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use choicewise_test_support::within;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::HEAP;
use crate::ONE_AT_A_TIME as SERIAL;
use crate::common::{no_env, raw_upstream, read_head, serve};

const LIMIT: Duration = Duration::from_secs(300);

const MIB: usize = 1024 * 1024;

/// The growth allowed per byte the upstream sent.
const FACTOR: f64 = 4.0;

/// Room besides: the connections' buffers, the runtime's tasks, a small answer's own cost.
const SLACK: usize = 4 * MIB;

/// Arguments of about `size` bytes, distinct for each `seed`: an object of many small
/// edits, the shape whose tree costs the most per byte (many small objects and strings).
fn arguments(seed: usize, size: usize) -> String {
    let mut out = format!(r#"{{"path":"src/file_{seed}.rs","edits":["#);
    let mut i = 0usize;
    while out.len() < size {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&format!(
            r#"{{"line":{i},"old":"a{seed}","new":"b{i}","ok":true}}"#
        ));
        i += 1;
    }
    out.push_str("]}");
    out
}

/// One Chat Completions sample ending in one call of `edit` with these arguments, sent as
/// fragments of 16 KiB: an SSE body ending in `[DONE]`.
fn sample(arguments: &str) -> Vec<u8> {
    let event = |v: Value| format!("data: {v}\n\n");
    let mut out = event(
        json!({"id": "c", "object": "chat.completion.chunk", "model": "up",
        "choices": [{"index": 0, "delta": {"role": "assistant", "tool_calls": [
            {"index": 0, "id": "call_1", "type": "function",
             "function": {"name": "edit", "arguments": ""}}]}, "finish_reason": null}]}),
    );
    let mut rest = arguments;
    while !rest.is_empty() {
        let mut at = rest.len().min(16 * 1024);
        while !rest.is_char_boundary(at) {
            at -= 1;
        }
        let (piece, after) = rest.split_at(at);
        rest = after;
        out.push_str(&event(json!({"id": "c", "object": "chat.completion.chunk",
            "model": "up", "choices": [{"index": 0, "delta": {"tool_calls": [
                {"index": 0, "function": {"arguments": piece}}]}, "finish_reason": null}]})));
    }
    out.push_str(&event(
        json!({"id": "c", "object": "chat.completion.chunk", "model": "up",
        "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
    ));
    out.push_str("data: [DONE]\n\n");
    out.into_bytes()
}

/// An upstream answering its requests in turn with `answers` (made before it serves), each
/// request's body read and dropped first: its base URL, and the bytes of answers it sent.
async fn scripted(answers: Vec<Vec<u8>>) -> (String, Arc<AtomicUsize>) {
    let answers = Arc::new(answers);
    let next = Arc::new(AtomicUsize::new(0));
    let sent = Arc::new(AtomicUsize::new(0));
    let counted = sent.clone();
    let addr = raw_upstream(move |mut tcp| {
        let (answers, next, sent) = (answers.clone(), next.clone(), counted.clone());
        async move {
            let Some(head) = read_head(&mut tcp).await else {
                return;
            };
            let head = String::from_utf8_lossy(&head).to_ascii_lowercase();
            let mut left: usize = (head.lines())
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|n| n.trim().parse().ok())
                .unwrap_or(0);
            let mut buf = [0u8; 4096];
            while left > 0 {
                match tcp.read(&mut buf[..left.min(4096)]).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => left -= n,
                }
            }
            let k = next.fetch_add(1, Ordering::SeqCst) % answers.len();
            let answer = &answers[k];
            let head =
                "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";
            if tcp.write_all(head.as_bytes()).await.is_err() {
                return;
            }
            for piece in answer.chunks(64 * 1024) {
                if tcp.write_all(piece).await.is_err() {
                    return;
                }
                sent.fetch_add(piece.len(), Ordering::Relaxed);
            }
            let _ = tcp.shutdown().await;
        }
    })
    .await;
    (format!("http://{addr}/v1"), sent)
}

/// A gateway over this Chat Completions upstream (model `m`, one request per sample).
async fn gateway(url: &str) -> SocketAddr {
    gateway_to("chat", url).await
}

/// A gateway over this upstream of API `api` (model `m`; a Chat Completions one asked one
/// request per sample).
async fn gateway_to(api: &str, url: &str) -> SocketAddr {
    let n = if api == "chat" {
        "n = \"fan-out\"\n"
    } else {
        ""
    };
    let toml = format!(
        "[limits]\nmax_body_bytes = 1048576\n[[models]]\nname = \"m\"\n[[models.upstreams]]\napi = \"{api}\"\nbase_url = \"{url}\"\nmodel = \"up\"\n{n}"
    );
    serve(&toml, no_env).await.0
}

/// Posts `body` to `path`: the status and the answer's first `keep` bytes as text (read
/// piece by piece, the rest dropped as it arrives, so that the client's copy of a long answer
/// does not count as the gateway's).
async fn post(
    client: &reqwest::Client,
    addr: SocketAddr,
    path: &str,
    body: &Value,
    keep: usize,
) -> (u16, String) {
    let mut response = within(
        LIMIT,
        "an answer",
        client
            .post(format!("http://{addr}{path}"))
            .json(body)
            .send(),
    )
    .await
    .unwrap();
    let status = response.status().as_u16();
    let mut kept = Vec::new();
    while let Some(piece) = within(LIMIT, "its body", response.chunk()).await.unwrap() {
        let room = keep.saturating_sub(kept.len());
        kept.extend_from_slice(&piece[..room.min(piece.len())]);
    }
    (status, String::from_utf8_lossy(&kept).into_owned())
}

/// Posts `body` measured: the status, the answer's first `keep` bytes, the heap's peak
/// above its start and the bytes the upstream sent meanwhile.
async fn measured(
    addr: SocketAddr,
    sent: &AtomicUsize,
    path: &str,
    body: &Value,
    keep: usize,
) -> (u16, String, usize, usize) {
    let client = reqwest::Client::new();
    HEAP.start();
    let before = sent.load(Ordering::Relaxed);
    let ((status, text), peak) = HEAP
        .peak_during(post(&client, addr, path, body, keep))
        .await;
    let sent = sent.load(Ordering::Relaxed) - before;
    (status, text, peak.max(0) as usize, sent)
}

/// Whether `peak` is within `factor` times `sent` and [`SLACK`]; says the figures.
fn fits(what: &str, peak: usize, sent: usize, factor_allowed: f64) -> bool {
    let factor = peak as f64 / sent as f64;
    eprintln!(
        "{what}: the upstream sent {:.1} MiB, the heap grew by {:.1} MiB ({factor:.2}x)",
        sent as f64 / MIB as f64,
        peak as f64 / MIB as f64,
    );
    peak as f64 <= factor_allowed * sent as f64 + SLACK as f64
}

fn within_bound(what: &str, peak: usize, sent: usize) {
    assert!(
        fits(what, peak, sent, FACTOR),
        "{what}: +{peak} bytes for {sent} sent ({:.2}x)",
        peak as f64 / sent as f64
    );
}

/// A vote of 16 samples, each ending in a call with 2 MiB of distinct arguments: no key
/// wins; the answer is the first sample, undecided, its `reason` a few KiB, and the whole
/// costs a few times what the upstream sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vote_of_sixteen_distinct_calls_costs_a_few_times_its_bytes() {
    let _one = SERIAL.lock().await;
    let answers: Vec<Vec<u8>> = (0..16).map(|k| sample(&arguments(k, 2 * MIB))).collect();
    let (url, sent) = scripted(answers).await;
    let addr = gateway(&url).await;
    let body = json!({"model": "m", "messages": [{"role": "user", "content": "edit"}],
        "choicewise": {"samples": 16, "select": "vote"}});
    let (status, text, peak, sent) =
        measured(addr, &sent, "/v1/chat/completions", &body, usize::MAX).await;
    assert_eq!(status, 200, "{:.600}", text);
    within_bound("a vote of 16 x 2 MiB of distinct arguments", peak, sent);
    let answer: Value = serde_json::from_str(&text).unwrap();
    let extension = &answer["choicewise"];
    let vote = &extension["vote"];
    assert_eq!(vote["decided"], false, "{:.2000}", extension);
    let reason = vote["reason"]
        .as_str()
        .or(extension["reason"].as_str())
        .unwrap_or_else(|| panic!("a reason: {:.2000}", extension));
    assert!(
        reason.len() <= 4096,
        "reason of {} bytes: {reason:.600}",
        reason.len()
    );
    assert!(reason.contains("no key has 2 votes"), "{reason:.600}");
    let tally = vote["tally"].as_array().unwrap();
    assert_eq!(tally.len(), 16, "every key listed");
    for entry in tally {
        let key = entry["key"].as_str().unwrap();
        assert!(key.len() <= 512, "a key of {} bytes shown", key.len());
        assert!(key.contains("sha256"), "a cut key names its hash: {key}");
    }
    let shown: std::collections::HashSet<&str> =
        tally.iter().map(|e| e["key"].as_str().unwrap()).collect();
    assert_eq!(shown.len(), 16, "distinct keys stay distinct once cut");
    assert_eq!(vote["key"], tally[0]["key"]);
    // The answer is a whole call, arguments as the upstream wrote them.
    let call = &answer["choices"][0]["message"]["tool_calls"][0]["function"];
    assert_eq!(call["name"], "edit");
    assert!(
        call["arguments"]
            .as_str()
            .unwrap()
            .starts_with(r#"{"path":"src/file_"#)
    );
}

/// A vote of 16 samples of which 6 make one call of 2 MiB and the rest other calls: the call
/// wins, and the answer is its choice and a few KiB besides (`vote.key` and `tally` cut).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decided_vote_adds_a_few_kib_to_its_chosen_choice() {
    let _one = SERIAL.lock().await;
    let answers: Vec<Vec<u8>> = (0..16)
        .map(|k| sample(&arguments(if k % 3 == 0 { 0 } else { k }, 2 * MIB)))
        .collect();
    let (url, sent) = scripted(answers).await;
    let addr = gateway(&url).await;
    let body = json!({"model": "m", "messages": [{"role": "user", "content": "edit"}],
        "choicewise": {"samples": 16, "select": "vote"}});
    let (status, text, peak, sent) =
        measured(addr, &sent, "/v1/chat/completions", &body, usize::MAX).await;
    assert_eq!(status, 200, "{:.600}", text);
    within_bound("a decided vote of 16 x 2 MiB", peak, sent);
    let answer: Value = serde_json::from_str(&text).unwrap();
    let vote = &answer["choicewise"]["vote"];
    assert_eq!(vote["decided"], true, "{:.2000}", answer["choicewise"]);
    // Decided once the others cannot catch up, which depends on the order the samples
    // finish in: at least the two votes a win needs.
    assert!(vote["votes"].as_u64().unwrap() >= 2, "{vote}");
    let chosen = serde_json::to_string(&answer["choices"][0]).unwrap().len();
    let allowed = chosen as f64 * 1.1 + 4096.0;
    eprintln!(
        "a decided vote: the answer is {} bytes, its chosen choice {chosen}",
        text.len()
    );
    assert!(
        text.len() as f64 <= allowed,
        "an answer of {} bytes for a choice of {chosen}",
        text.len()
    );
    let call = &answer["choices"][0]["message"]["tool_calls"][0]["function"];
    assert!(
        call["arguments"]
            .as_str()
            .unwrap()
            .starts_with(r#"{"path":"src/file_0.rs""#)
    );
}

/// One sample of 8 MiB of arguments costs a few times its bytes to each client API, streamed
/// or not: a Responses answer too, which writes the arguments whole three times when
/// streamed, a bounded piece at a time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_call_of_8_mib_costs_a_few_times_its_bytes_to_every_client_api() {
    let _one = SERIAL.lock().await;
    let (url, sent) = scripted(vec![sample(&arguments(1, 8 * MIB))]).await;
    let addr = gateway(&url).await;
    let user = json!([{"role": "user", "content": "edit"}]);
    let mut over = Vec::new();
    for stream in [false, true] {
        for (path, body) in [
            (
                "/v1/chat/completions",
                json!({"model": "m", "messages": user, "stream": stream}),
            ),
            (
                "/v1/messages",
                json!({"model": "m", "max_tokens": 64, "messages": user, "stream": stream}),
            ),
            (
                "/v1/responses",
                json!({"model": "m", "input": "edit", "stream": stream}),
            ),
        ] {
            // `ANSWER_SIDE_ONLY=TEXT` keeps the cases whose path or `stream=..` has TEXT.
            let case = format!("{path} stream={stream}");
            if std::env::var("ANSWER_SIDE_ONLY").is_ok_and(|only| !case.contains(&only)) {
                continue;
            }
            let (status, text, peak, sent) = measured(addr, &sent, path, &body, 64 * 1024).await;
            assert_eq!(status, 200, "{path}: {:.600}", text);
            assert!(text.contains("file_1.rs"), "{path}: {:.600}", text);
            let what = format!("one call of 8 MiB to {path}, stream {stream}");
            if !fits(&what, peak, sent, FACTOR) {
                over.push(what);
            }
        }
    }
    assert!(over.is_empty(), "past their bound: {over:?}");
}

/// An answer-side shape: its name, the API of the upstream that sends it, and its body.
struct Shape {
    name: &'static str,
    api: &'static str,
    body: Vec<u8>,
}

/// `count` copies of `item` joined by commas.
fn repeated(item: &str, count: usize) -> String {
    let mut out = String::with_capacity(count * (item.len() + 1));
    for i in 0..count {
        if i > 0 {
            out.push(',');
        }
        out.push_str(item);
    }
    out
}

/// A Chat Completions body of one choice: `deltas` in turn, then the finish.
fn chat_body(deltas: impl IntoIterator<Item = Value>, finish: &str, last: Value) -> Vec<u8> {
    let mut out = String::new();
    let chunk = |delta: Value, finish: Value| {
        let chunk = json!({"id": "c", "object": "chat.completion.chunk", "model": "up",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
        format!("data: {chunk}\n\n")
    };
    out.push_str(&chunk(json!({"role": "assistant"}), Value::Null));
    for delta in deltas {
        out.push_str(&chunk(delta, Value::Null));
    }
    out.push_str(&chunk(json!({}), json!(finish)));
    if !last.is_null() {
        out.push_str(&format!("data: {last}\n\n"));
    }
    out.push_str("data: [DONE]\n\n");
    out.into_bytes()
}

/// `text` in pieces of 16 KiB (at character boundaries).
fn pieces(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let mut at = rest.len().min(16 * 1024);
        while !rest.is_char_boundary(at) {
            at -= 1;
        }
        let (piece, after) = rest.split_at(at);
        out.push(piece);
        rest = after;
    }
    out
}

/// One call of `name` with these arguments, as Chat Completions deltas.
fn call_deltas(index: usize, name: &str, arguments: &str) -> Vec<Value> {
    let mut deltas = vec![
        json!({"tool_calls": [{"index": index, "id": format!("call_{index}"),
        "type": "function", "function": {"name": name, "arguments": ""}}]}),
    ];
    for piece in pieces(arguments) {
        deltas.push(json!({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}));
    }
    deltas
}

/// An Anthropic body: `message_start` (with `extra` members in its message), one block of
/// `block` streamed as `deltas`, then the stop.
fn anthropic_body(extra: &str, block: Value, deltas: Vec<Value>, stop: &str) -> Vec<u8> {
    let mut out = format!(
        "event: message_start\ndata: {{\"type\":\"message_start\",\"message\":{{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"up\",\"content\":[],\"stop_reason\":null,{extra}\"usage\":{{\"input_tokens\":7,\"output_tokens\":1}}}}}}\n\n"
    );
    let event = |name: &str, data: Value| format!("event: {name}\ndata: {data}\n\n");
    out.push_str(&event(
        "content_block_start",
        json!({"type": "content_block_start", "index": 0, "content_block": block}),
    ));
    for delta in deltas {
        out.push_str(&event(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": delta}),
        ));
    }
    out.push_str(&event(
        "content_block_stop",
        json!({"type": "content_block_stop", "index": 0}),
    ));
    out.push_str(&event(
        "message_delta",
        json!({"type": "message_delta",
        "delta": {"stop_reason": stop}, "usage": {"output_tokens": 1}}),
    ));
    out.push_str(&event("message_stop", json!({"type": "message_stop"})));
    out.into_bytes()
}

/// A Responses body of one function call with these arguments, its `response.created` and
/// `response.completed` echoing `tools` (JSON text).
fn responses_body(arguments: &str, tools: &str) -> Vec<u8> {
    let head = |status: &str, output: &str| {
        format!(
            "{{\"id\":\"resp_1\",\"object\":\"response\",\"created_at\":1,\"status\":\"{status}\",\"model\":\"up\",\"tools\":{tools},\"output\":{output},\"usage\":{{\"input_tokens\":7,\"output_tokens\":1,\"total_tokens\":8}}}}"
        )
    };
    let mut out = format!(
        "event: response.created\ndata: {{\"type\":\"response.created\",\"sequence_number\":0,\"response\":{}}}\n\n",
        head("in_progress", "[]")
    );
    let event = |name: &str, data: Value| format!("event: {name}\ndata: {data}\n\n");
    out.push_str(&event(
        "response.output_item.added",
        json!({"type": "response.output_item.added",
        "output_index": 0, "item": {"id": "fc_1", "type": "function_call", "call_id": "call_1",
        "name": "edit", "arguments": ""}}),
    ));
    for piece in pieces(arguments) {
        out.push_str(&event(
            "response.function_call_arguments.delta",
            json!({
            "type": "response.function_call_arguments.delta", "item_id": "fc_1",
            "output_index": 0, "delta": piece}),
        ));
    }
    let item = json!({"id": "fc_1", "type": "function_call", "status": "completed",
        "call_id": "call_1", "name": "edit", "arguments": arguments});
    out.push_str(&event(
        "response.output_item.done",
        json!({"type": "response.output_item.done",
        "output_index": 0, "item": item}),
    ));
    out.push_str(&format!(
        "event: response.completed\ndata: {{\"type\":\"response.completed\",\"response\":{}}}\n\n",
        head("completed", &format!("[{item}]"))
    ));
    out.into_bytes()
}

/// The answer-side shapes, each about `size` bytes of what matters in it.
fn shapes(size: usize) -> Vec<Shape> {
    let zeros = format!("[{}]", repeated("0", size / 2));
    let deep = format!("{}{zeros}{}", "[".repeat(120), "]".repeat(120));
    let keys: String = format!(
        "{{{}}}",
        (0..size / 10)
            .map(|i| format!("\"k{i}\":0"))
            .collect::<Vec<_>>()
            .join(",")
    );
    let text = "word ".repeat(size / 5);
    let mut many_calls = Vec::new();
    for i in 0..128 {
        many_calls.extend(call_deltas(i, "edit", &arguments(i, size / 128)));
    }
    let dense_usage = json!({"id": "c", "object": "chat.completion.chunk", "model": "up",
        "choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2,
        "completion_tokens_details": serde_json::from_str::<Value>(&keys).unwrap()}});
    let tools = format!(
        "[{}]",
        repeated(
            r#"{"type":"function","name":"t","parameters":{"type":"object","properties":{"a":{"type":"integer"}}}}"#,
            size / 100
        )
    );
    let partial_json: Vec<Value> = pieces(&keys)
        .into_iter()
        .map(|p| json!({"type": "input_json_delta", "partial_json": p}))
        .collect();
    let text_deltas: Vec<Value> = pieces(&text)
        .into_iter()
        .map(|p| json!({"type": "text_delta", "text": p}))
        .collect();
    vec![
        Shape {
            name: "wide arguments",
            api: "chat",
            body: chat_body(call_deltas(0, "edit", &zeros), "tool_calls", Value::Null),
        },
        Shape {
            name: "deep and wide arguments",
            api: "chat",
            body: chat_body(call_deltas(0, "edit", &deep), "tool_calls", Value::Null),
        },
        Shape {
            name: "arguments of many keys",
            api: "chat",
            body: chat_body(call_deltas(0, "edit", &keys), "tool_calls", Value::Null),
        },
        Shape {
            name: "128 calls",
            api: "chat",
            body: chat_body(many_calls, "tool_calls", Value::Null),
        },
        Shape {
            name: "long content",
            api: "chat",
            body: chat_body(
                pieces(&text).into_iter().map(|p| json!({"content": p})),
                "stop",
                Value::Null,
            ),
        },
        Shape {
            name: "a usage of many keys",
            api: "chat",
            body: chat_body([json!({"content": "ok"})], "stop", dense_usage),
        },
        Shape {
            name: "a tool_use input of many keys",
            api: "anthropic",
            body: anthropic_body(
                "",
                json!({"type": "tool_use", "id": "toolu_1", "name": "edit", "input": {}}),
                partial_json,
                "tool_use",
            ),
        },
        Shape {
            name: "a message_start of many keys",
            api: "anthropic",
            body: anthropic_body(
                &format!("\"container\":{keys},"),
                json!({"type": "text", "text": ""}),
                text_deltas,
                "end_turn",
            ),
        },
        Shape {
            name: "arguments of many keys, tools echoed",
            api: "responses",
            body: responses_body(&keys, &tools),
        },
    ]
}

/// The answer-side cost fuzzer's short form: every shape × every client API, streamed or
/// not, each within its bound of what the upstream sent. `ANSWER_SIDE_SIZE=n` sets the
/// shapes' size (2 MiB); `ANSWER_SIDE_ONLY=TEXT` keeps the cases whose name has TEXT.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answer_shapes_cost_a_few_times_what_the_upstream_sent() {
    let _one = SERIAL.lock().await;
    let size: usize = std::env::var("ANSWER_SIDE_SIZE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2 * MIB);
    let only = std::env::var("ANSWER_SIDE_ONLY").ok();
    let user = json!([{"role": "user", "content": "edit"}]);
    let mut over = Vec::new();
    let mut worst = (0.0f64, String::new());
    for shape in shapes(size) {
        let (url, sent) = scripted(vec![shape.body]).await;
        let addr = gateway_to(shape.api, &url).await;
        for stream in [false, true] {
            for (path, body) in [
                (
                    "/v1/chat/completions",
                    json!({"model": "m", "messages": user, "stream": stream}),
                ),
                (
                    "/v1/messages",
                    json!({"model": "m", "max_tokens": 64, "messages": user, "stream": stream}),
                ),
                (
                    "/v1/responses",
                    json!({"model": "m", "input": "edit", "stream": stream}),
                ),
            ] {
                let what = format!(
                    "{} ({} upstream) to {path}, stream {stream}",
                    shape.name, shape.api
                );
                if only.as_ref().is_some_and(|o| !what.contains(o.as_str())) {
                    continue;
                }
                let (status, text, peak, sent) = measured(addr, &sent, path, &body, 4096).await;
                // An event past its tree's budget ends the answer as the upstream's fault.
                assert!(matches!(status, 200 | 502), "{what}: {status} {text:.300}");
                let factor = peak as f64 / sent as f64;
                if factor > worst.0 {
                    worst = (factor, what.clone());
                }
                if !fits(&format!("{what}: {status}"), peak, sent, FACTOR) {
                    over.push(what);
                }
            }
        }
    }
    eprintln!("the costliest: {:.2}x, {}", worst.0, worst.1);
    assert!(over.is_empty(), "past their bound: {over:#?}");
}
