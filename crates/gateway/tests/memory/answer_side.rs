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

/// A vote of 2 samples of about 7.2 MiB, each two calls (a wide array, then one object of
/// some 350,000 keys), costs a few times its bytes to every client API, streamed or not:
/// the vote keys each sample's calls in canonical form, sorting the object's members, and
/// that key costs a few words per member, not copies of the object.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vote_over_an_object_of_350k_keys_costs_a_few_times_its_bytes() {
    let _one = SERIAL.lock().await;
    let half = 3_600_000;
    let wide = format!("[{}]", repeated("0", half / 2));
    let answers: Vec<Vec<u8>> = (0..2)
        .map(|k| {
            let keys = (0..half / 10)
                .map(|i| format!("\"k{i}\":{}", k * 100 + 1))
                .collect::<Vec<_>>()
                .join(",");
            let mut deltas = call_deltas(0, "edit", &wide);
            deltas.extend(call_deltas(1, "edit", &format!("{{{keys}}}")));
            chat_body(deltas, "tool_calls", Value::Null)
        })
        .collect();
    let (url, sent) = scripted(answers).await;
    let addr = gateway(&url).await;
    let user = json!([{"role": "user", "content": "edit"}]);
    let two = json!({"samples": 2, "select": "vote"});
    let mut over = Vec::new();
    for stream in [false, true] {
        for (path, body) in [
            (
                "/v1/chat/completions",
                json!({"model": "m", "messages": user, "stream": stream, "choicewise": two}),
            ),
            (
                "/v1/messages",
                json!({"model": "m", "max_tokens": 64, "messages": user, "stream": stream,
                    "choicewise": two}),
            ),
            (
                "/v1/responses",
                json!({"model": "m", "input": "edit", "stream": stream, "choicewise": two}),
            ),
        ] {
            let case = format!("{path} stream={stream}");
            if std::env::var("ANSWER_SIDE_ONLY").is_ok_and(|only| !case.contains(&only)) {
                continue;
            }
            let (status, text, peak, sent) = measured(addr, &sent, path, &body, 64 * 1024).await;
            assert_eq!(status, 200, "{path}: {:.600}", text);
            assert!(text.contains("edit"), "{path}: {:.600}", text);
            let what = format!("a vote of 2 over 350k keys to {path}, stream {stream}");
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

/// A small generator (xorshift): the same cases for the same seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A number below `n` (at least 1).
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    /// A number from `low` to `high`, on a logarithmic scale (small sizes as often as large).
    fn between(&mut self, low: usize, high: usize) -> usize {
        let (low, high) = (low.max(1) as f64, high.max(low + 1) as f64);
        let unit = (self.next() >> 11) as f64 / (1u64 << 53) as f64;
        (low * (high / low).powf(unit)) as usize
    }

    fn pick<T: Copy>(&mut self, from: &[T]) -> T {
        from[self.below(from.len())]
    }
}

/// One tree of `width` members a level, `depth` levels deep, its leaves `0`.
fn tree(width: usize, depth: usize) -> String {
    if depth == 0 {
        return "0".into();
    }
    let inner = tree(width, depth - 1);
    let members: Vec<String> = (0..width).map(|i| format!("\"k{i}\":{inner}")).collect();
    format!("{{{}}}", members.join(","))
}

/// Arguments of about `size` bytes, of one of the named shapes' kinds or a mix of their
/// ingredients (width, depth, keys); its kind's name.
fn random_arguments(rng: &mut Rng, seed: usize, size: usize) -> (String, String) {
    match rng.below(5) {
        0 => ("edits".into(), arguments(seed, size)),
        1 => (
            "wide".into(),
            format!("[{}]", repeated("0", (size / 2).max(1))),
        ),
        2 => {
            let depth = 1 + rng.below(120);
            let zeros = format!("[{}]", repeated("0", (size / 2).max(1)));
            (
                format!("deep {depth}"),
                format!("{}{zeros}{}", "[".repeat(depth), "]".repeat(depth)),
            )
        }
        3 => {
            let keys = (0..(size / 10).max(1))
                .map(|i| format!("\"k{i}\":{seed}"))
                .collect::<Vec<_>>()
                .join(",");
            ("keys".into(), format!("{{{keys}}}"))
        }
        _ => {
            let width = 2 + rng.below(30);
            let mut depth = 1;
            while width.pow(depth as u32 + 1) * 6 < size / 4 && depth < 12 {
                depth += 1;
            }
            let one = tree(width, depth);
            let count = (size / one.len()).max(1);
            (
                format!("trees {width}x{depth}"),
                format!("[{}]", repeated(&one, count)),
            )
        }
    }
}

/// Content of about `size` bytes: words, text to escape, or CJK; its kind's name.
fn random_content(rng: &mut Rng, size: usize) -> (String, String) {
    let (kind, unit) = rng.pick(&[
        ("words", "word "),
        ("escapes", "a \"q\" \\ \n\t\u{1} "),
        ("cjk", "中文字符"),
    ]);
    (kind.into(), unit.repeat((size / unit.len()).max(1)))
}

/// One generated answer: its content, calls (name, arguments), and whether each content
/// piece carries log-probabilities (`top` alternatives each).
struct Answer {
    content: String,
    calls: Vec<String>,
    top: Option<usize>,
}

/// The answer as a Chat Completions stream.
fn chat_answer(answer: &Answer) -> Vec<u8> {
    let mut out = String::new();
    let mut chunk = |delta: Value, logprobs: Value, finish: Value| {
        let chunk = json!({"id": "c", "object": "chat.completion.chunk", "model": "up",
            "choices": [{"index": 0, "delta": delta, "logprobs": logprobs,
                         "finish_reason": finish}]});
        out.push_str(&format!("data: {chunk}\n\n"));
    };
    chunk(json!({"role": "assistant"}), Value::Null, Value::Null);
    for (t, piece) in pieces(&answer.content).into_iter().enumerate() {
        let logprobs = match answer.top {
            Some(top) => {
                let alternatives: Vec<Value> = (0..top)
                    .map(|k| json!({"token": format!("w{k}"), "logprob": -1.5, "bytes": [119]}))
                    .collect();
                json!({"content": [{"token": format!("w{t}"), "logprob": -0.05, "bytes": [119],
                    "top_logprobs": alternatives}]})
            }
            None => Value::Null,
        };
        chunk(json!({"content": piece}), logprobs, Value::Null);
    }
    for (i, arguments) in answer.calls.iter().enumerate() {
        for delta in call_deltas(i, "edit", arguments) {
            chunk(delta, Value::Null, Value::Null);
        }
    }
    let finish = match answer.calls.is_empty() {
        true => "stop",
        false => "tool_calls",
    };
    chunk(json!({}), Value::Null, json!(finish));
    out.push_str("data: [DONE]\n\n");
    out.into_bytes()
}

/// The answer as an Anthropic Messages stream.
fn anthropic_answer(answer: &Answer) -> Vec<u8> {
    let mut out = String::new();
    let mut event =
        |name: &str, data: Value| out.push_str(&format!("event: {name}\ndata: {data}\n\n"));
    event(
        "message_start",
        json!({"type": "message_start", "message": {"id": "msg_1", "type": "message",
            "role": "assistant", "model": "up", "content": [], "stop_reason": null,
            "usage": {"input_tokens": 7, "output_tokens": 1}}}),
    );
    let mut index = 0;
    if !answer.content.is_empty() {
        event(
            "content_block_start",
            json!({"type": "content_block_start", "index": 0,
                "content_block": {"type": "text", "text": ""}}),
        );
        for piece in pieces(&answer.content) {
            event(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 0,
                    "delta": {"type": "text_delta", "text": piece}}),
            );
        }
        event(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 0}),
        );
        index += 1;
    }
    for (i, arguments) in answer.calls.iter().enumerate() {
        event(
            "content_block_start",
            json!({"type": "content_block_start", "index": index, "content_block":
                {"type": "tool_use", "id": format!("toolu_{i}"), "name": "edit", "input": {}}}),
        );
        for piece in pieces(arguments) {
            event(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": index,
                    "delta": {"type": "input_json_delta", "partial_json": piece}}),
            );
        }
        event(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": index}),
        );
        index += 1;
    }
    let stop = match answer.calls.is_empty() {
        true => "end_turn",
        false => "tool_use",
    };
    event(
        "message_delta",
        json!({"type": "message_delta", "delta": {"stop_reason": stop},
            "usage": {"output_tokens": 1}}),
    );
    event("message_stop", json!({"type": "message_stop"}));
    out.into_bytes()
}

/// The answer as a Responses stream (the API's `.done` events and `response.completed`
/// repeating each text, as OpenAI writes them).
fn responses_answer(answer: &Answer) -> Vec<u8> {
    let mut out = String::new();
    let mut seq = 0;
    let mut event = |name: &str, mut data: Value| {
        data["type"] = json!(name);
        data["sequence_number"] = json!(seq);
        seq += 1;
        out.push_str(&format!("event: {name}\ndata: {data}\n\n"));
    };
    let response = |status: &str, output: Value| {
        json!({"id": "resp_1", "object": "response", "created_at": 1, "status": status,
            "model": "up", "output": output,
            "usage": {"input_tokens": 7, "output_tokens": 1, "total_tokens": 8}})
    };
    event(
        "response.created",
        json!({"response": response("in_progress", json!([]))}),
    );
    let mut items = Vec::new();
    if !answer.content.is_empty() {
        let at = items.len();
        event(
            "response.output_item.added",
            json!({"output_index": at, "item": {"id": "msg_1", "type": "message",
                "status": "in_progress", "role": "assistant", "content": []}}),
        );
        for piece in pieces(&answer.content) {
            event(
                "response.output_text.delta",
                json!({"item_id": "msg_1", "output_index": at, "content_index": 0,
                    "delta": piece}),
            );
        }
        let item = json!({"id": "msg_1", "type": "message", "status": "completed",
            "role": "assistant", "content": [{"type": "output_text", "text": answer.content,
            "annotations": []}]});
        event(
            "response.output_item.done",
            json!({"output_index": at, "item": item}),
        );
        items.push(item);
    }
    for (i, arguments) in answer.calls.iter().enumerate() {
        let (at, id) = (items.len(), format!("fc_{i}"));
        event(
            "response.output_item.added",
            json!({"output_index": at, "item": {"id": id, "type": "function_call",
                "call_id": format!("call_{i}"), "name": "edit", "arguments": ""}}),
        );
        for piece in pieces(arguments) {
            event(
                "response.function_call_arguments.delta",
                json!({"item_id": id, "output_index": at, "delta": piece}),
            );
        }
        let item = json!({"id": id, "type": "function_call", "status": "completed",
            "call_id": format!("call_{i}"), "name": "edit", "arguments": arguments});
        event(
            "response.output_item.done",
            json!({"output_index": at, "item": item}),
        );
        items.push(item);
    }
    event(
        "response.completed",
        json!({"response": response("completed", Value::Array(items))}),
    );
    out.into_bytes()
}

/// A scripted upstream whose answers are set before each case: its base URL, the answers'
/// slot, and the bytes it sent.
struct Script {
    url: String,
    answers: Arc<std::sync::Mutex<Arc<Vec<Vec<u8>>>>>,
    next: Arc<AtomicUsize>,
    sent: Arc<AtomicUsize>,
}

impl Script {
    async fn start() -> Self {
        let answers: Arc<std::sync::Mutex<Arc<Vec<Vec<u8>>>>> = Arc::default();
        let next = Arc::new(AtomicUsize::new(0));
        let sent = Arc::new(AtomicUsize::new(0));
        let (slot, turn, counted) = (answers.clone(), next.clone(), sent.clone());
        let addr = raw_upstream(move |mut tcp| {
            let (slot, turn, counted) = (slot.clone(), turn.clone(), counted.clone());
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
                let answers = slot.lock().unwrap().clone();
                let k = turn.fetch_add(1, Ordering::SeqCst) % answers.len().max(1);
                let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";
                if tcp.write_all(head.as_bytes()).await.is_err() {
                    return;
                }
                for piece in answers.get(k).map_or(&[][..], Vec::as_slice).chunks(64 * 1024) {
                    if tcp.write_all(piece).await.is_err() {
                        return;
                    }
                    counted.fetch_add(piece.len(), Ordering::Relaxed);
                }
                let _ = tcp.shutdown().await;
            }
        })
        .await;
        Script {
            url: format!("http://{addr}/v1"),
            answers,
            next,
            sent,
        }
    }

    /// The next requests are answered with `answers`, in turn.
    fn set(&self, answers: Vec<Vec<u8>>) {
        *self.answers.lock().unwrap() = Arc::new(answers);
        self.next.store(0, Ordering::SeqCst);
    }
}

/// One generated case: what the upstream sends for each sample, how the client asks.
struct FuzzCase {
    name: String,
    api: usize,
    answers: Vec<Vec<u8>>,
    path: &'static str,
    body: Value,
}

/// A case of up to `size` bytes a sample, drawn from `rng`.
fn fuzz_case(rng: &mut Rng, size: usize) -> FuzzCase {
    let api = rng.below(3);
    let samples = rng.pick(&[1, 1, 2, 3, 4]);
    let same = samples > 1 && rng.below(2) == 0;
    let per_sample = rng.between(64 * 1024, size);
    let calls = rng.pick(&[0, 1, 1, 2, 3, 8]);
    let content_share = match calls {
        0 => 1.0,
        _ => rng.pick(&[0.0, 0.0, 0.1, 0.5]),
    };
    let content_size = (per_sample as f64 * content_share) as usize;
    let (content_kind, content) = match content_size {
        0 => ("none".to_string(), String::new()),
        n => random_content(rng, n),
    };
    let top = (api == 0 && content_size > 0 && rng.below(3) == 0).then(|| rng.below(21));
    let mut kinds = Vec::new();
    let mut answer_of = |rng: &mut Rng, seed: usize| {
        let calls: Vec<String> = (0..calls)
            .map(|i| {
                let (kind, text) = random_arguments(
                    rng,
                    seed * 100 + i,
                    (per_sample - content_size) / calls.max(1),
                );
                kinds.push(kind);
                text
            })
            .collect();
        let answer = Answer {
            content: content.clone(),
            calls,
            top,
        };
        match api {
            0 => chat_answer(&answer),
            1 => anthropic_answer(&answer),
            _ => responses_answer(&answer),
        }
    };
    let answers: Vec<Vec<u8>> = match same {
        true => vec![answer_of(rng, 0)],
        false => (0..samples).map(|k| answer_of(rng, k)).collect(),
    };
    kinds.sort();
    kinds.dedup();
    let stream = rng.below(2) == 0;
    let select = rng.pick(&["vote", "first_finished", "first_token"]);
    let choicewise = match samples {
        1 => Value::Null,
        n => json!({"samples": n, "select": select}),
    };
    let (path, mut body) = match rng.below(3) {
        0 => (
            "/v1/chat/completions",
            json!({"model": "m", "messages": [{"role": "user", "content": "edit"}]}),
        ),
        1 => (
            "/v1/messages",
            json!({"model": "m", "max_tokens": 64,
                "messages": [{"role": "user", "content": "edit"}]}),
        ),
        _ => ("/v1/responses", json!({"model": "m", "input": "edit"})),
    };
    body["stream"] = json!(stream);
    if !choicewise.is_null() {
        body["choicewise"] = choicewise;
    }
    if top.is_some() && path == "/v1/chat/completions" && rng.below(2) == 0 {
        body["logprobs"] = json!(true);
        body["top_logprobs"] = json!(top);
    }
    let name = format!(
        "{} upstream, {samples} sample(s){}{}, {per_sample} B each: content {content_kind} \
         {content_size} B{}, {calls} call(s) {kinds:?}, to {path}{}",
        ["chat", "anthropic", "responses"][api],
        if samples > 1 {
            format!(" ({select})")
        } else {
            String::new()
        },
        if same { " alike" } else { "" },
        top.map_or(String::new(), |k| format!(" with {k} log-probabilities")),
        if stream { ", streamed" } else { "" },
    );
    FuzzCase {
        name,
        api,
        answers,
        path,
        body,
    }
}

/// The answer-side cost fuzzer's random form: generated answers (the named shapes'
/// ingredients mixed: widths, depths, key counts, calls, content length and kind, samples
/// and their pick, log-probabilities, the upstream's API, the client's API, streamed or not),
/// each within 4x what the upstream sent plus [`SLACK`]. Without `ANSWER_FUZZ_SECONDS` it
/// runs 6 cases of seed 1; with it, cases of a random seed (or `ANSWER_FUZZ_SEED`, printed
/// either way) until that many seconds have passed. `ANSWER_FUZZ_SIZE=n` bounds a sample's
/// bytes (2 MiB); `ANSWER_FUZZ_CASE=k` runs case k of the seed alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generated_answers_cost_a_few_times_what_the_upstream_sent() {
    let _one = SERIAL.lock().await;
    let env = |name: &str| std::env::var(name).ok().and_then(|v| v.parse::<u64>().ok());
    let budget = env("ANSWER_FUZZ_SECONDS").map(Duration::from_secs);
    let seed = env("ANSWER_FUZZ_SEED").unwrap_or_else(|| match budget {
        Some(_) => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(7, |d| d.as_nanos() as u64),
        None => 1,
    });
    let size = env("ANSWER_FUZZ_SIZE").map_or(2 * MIB, |s| s as usize);
    eprintln!(
        "answer fuzz: seed {seed} (ANSWER_FUZZ_SEED={seed} repeats it), a sample up to {size} B"
    );
    let mut rng = Rng(seed | 1);
    let scripts = [
        Script::start().await,
        Script::start().await,
        Script::start().await,
    ];
    let mut gateways = Vec::new();
    for (script, api) in scripts.iter().zip(["chat", "anthropic", "responses"]) {
        gateways.push(gateway_to(api, &script.url).await);
    }
    let started = std::time::Instant::now();
    let mut worst = (0.0f64, String::new());
    let mut over = Vec::new();
    let mut cases = 0;
    // `ANSWER_FUZZ_CASE=k`: case k of the seed alone (the ones before it made and skipped).
    let only = env("ANSWER_FUZZ_CASE").map(|k| k as usize);
    loop {
        let more = match (only, budget) {
            (Some(k), _) => cases < k,
            (None, Some(budget)) => started.elapsed() < budget,
            (None, None) => cases < 6,
        };
        if !more {
            break;
        }
        let case = fuzz_case(&mut rng, size);
        cases += 1;
        if only.is_some_and(|k| k != cases) {
            continue;
        }
        let script = &scripts[case.api];
        script.set(case.answers);
        let (status, text, peak, sent) = measured(
            gateways[case.api],
            &script.sent,
            case.path,
            &case.body,
            4096,
        )
        .await;
        // Set apart, so that the next case's answers are not measured with this one.
        script.set(Vec::new());
        let what = format!("case {cases}: {}", case.name);
        assert!(matches!(status, 200 | 502), "{what}: {status} {text:.300}");
        // What the bound weighs: the growth past the slack per byte sent.
        let factor = (peak as f64 - SLACK as f64) / sent.max(1) as f64;
        if factor > worst.0 {
            let whole = peak as f64 / sent.max(1) as f64;
            worst = (factor, format!("{what} ({whole:.2}x in all)"));
        }
        if !fits(&format!("{what}: {status}"), peak, sent, FACTOR) {
            over.push(what);
        }
    }
    eprintln!(
        "answer fuzz: {cases} cases in {:.0?} (seed {seed}); the costliest past the {} MiB of \
         slack: {:.2}x, {}",
        started.elapsed(),
        SLACK / MIB,
        worst.0,
        worst.1
    );
    assert!(over.is_empty(), "past their bound (seed {seed}): {over:#?}");
}

/// A request whose answer's worst case (samples × `max_answer_bytes` × 4) passes the memory
/// ceiling's high watermark is refused before any upstream is asked, in each client API's
/// terms, naming the most samples that fit and the caps to lower; one that fits is served.
/// `serve --check`'s warning says the same of the model.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_whose_answer_cannot_fit_the_mark_is_refused_up_front() {
    let _one = SERIAL.lock().await;
    let (url, sent) = scripted(vec![sample("{\"a\":1}")]).await;
    // The mark well above what the process holds now; `max_answer_bytes` a twelfth of it,
    // so that 3 samples fit (3 × 4 twelfths) and 4 do not.
    let high = crate::common::status_bytes("VmRSS") as u64 / MIB as u64 + 300;
    let per_choice = high * MIB as u64 / 12;
    let toml = format!(
        "[limits]\nmemory_high_watermark_mb = {high}\nmax_answer_bytes = {per_choice}\n\
         [[models]]\nname = \"m\"\n[[models.upstreams]]\napi = \"chat\"\nbase_url = \"{url}\"\n\
         model = \"up\"\nn = \"fan-out\"\n"
    );
    let warnings = choicewise_gateway::Config::from_toml(&toml)
        .unwrap()
        .warnings();
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("more than 3 of the 16 samples") && w.contains("max_answer_bytes")),
        "{warnings:#?}"
    );
    let addr = serve(&toml, no_env).await.0;
    let client = reqwest::Client::new();
    let user = json!([{"role": "user", "content": "edit"}]);
    let four = json!({"samples": 4, "select": "vote"});
    for (path, body, param) in [
        (
            "/v1/chat/completions",
            json!({"model": "m", "messages": user, "choicewise": four}),
            "choicewise.samples",
        ),
        (
            "/v1/chat/completions",
            json!({"model": "m", "messages": user, "n": 4}),
            "n",
        ),
        (
            "/v1/messages",
            json!({"model": "m", "max_tokens": 64, "messages": user, "choicewise": four}),
            "choicewise.samples",
        ),
        (
            "/v1/responses",
            json!({"model": "m", "input": "edit", "stream": true, "choicewise": four}),
            "choicewise.samples",
        ),
    ] {
        let before = sent.load(Ordering::Relaxed);
        let (status, text) = post(&client, addr, path, &body, usize::MAX).await;
        assert_eq!(status, 400, "{path}: {text}");
        let error: Value = serde_json::from_str(&text).unwrap();
        let error = &error["error"];
        let message = error["message"].as_str().unwrap();
        assert!(
            message.contains("ask for at most 3")
                && message.contains("max_answer_bytes")
                && message.contains("memory_high_watermark_mb"),
            "{path}: {message}"
        );
        match path {
            // Anthropic's error shape: a type, a message.
            "/v1/messages" => assert_eq!(error["type"], "invalid_request_error", "{text}"),
            _ => {
                assert_eq!(error["code"], "samples_over_memory", "{path}: {text}");
                assert_eq!(error["param"], param, "{path}: {text}");
            }
        }
        assert_eq!(
            sent.load(Ordering::Relaxed),
            before,
            "{path}: no upstream asked"
        );
    }
    // Three samples fit.
    let body = json!({"model": "m", "messages": user,
        "choicewise": {"samples": 3, "select": "vote"}});
    let (status, text) = post(&client, addr, "/v1/chat/completions", &body, usize::MAX).await;
    assert_eq!(status, 200, "{text}");
}
