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

/// A gateway over this upstream (model `m`, one request per sample), answers up to 64 MiB a
/// choice.
async fn gateway(url: &str) -> SocketAddr {
    let toml = format!(
        "[limits]\nmax_body_bytes = 1048576\n[[models]]\nname = \"m\"\n[[models.upstreams]]\napi = \"chat\"\nbase_url = \"{url}\"\nmodel = \"up\"\nn = \"fan-out\"\n"
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

/// The growth allowed per byte sent for one call to a client API: [`FACTOR`], but for a
/// Responses answer, which writes a call whole more often (docs/reliability.md, "The cost of
/// an answer"): not streamed, in its item and in the body written (measured 4.2x); streamed,
/// three times (`response.function_call_arguments.done`, `response.output_item.done`,
/// `response.completed`) beside the arguments the encoder gathers (6.5x).
fn bound(path: &str, stream: bool) -> f64 {
    match (path, stream) {
        ("/v1/responses", false) => 4.5,
        ("/v1/responses", true) => 7.0,
        _ => FACTOR,
    }
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
    // Decided once the others cannot catch up: five of its six votes may do.
    assert!(vote["votes"].as_u64().unwrap() >= 5, "{vote}");
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
/// or not.
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
            if !fits(&what, peak, sent, bound(path, stream)) {
                over.push(what);
            }
        }
    }
    assert!(over.is_empty(), "past their bound: {over:?}");
}
