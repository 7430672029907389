//! The gateway probed as an attacker or a careless client would, and under odd upstreams:
//! every stream ends, no key leaves, nothing a client or an upstream sends grows without a
//! bound. Real loopback HTTP: the project's test server as the upstreams, raw TCP or reqwest
//! as the client.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use choicewise_test_support::within;
use choicewise_testserver::{TestServer, answer};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::common::{answering, endless, metrics, post_chat, serve, sse_data, start};

const LIMIT: Duration = Duration::from_secs(30);

fn env(name: &str) -> Option<String> {
    match name {
        "CLIENT_KEYS" => Some("sk-a".into()),
        "UPSTREAM_KEY" => Some("sk-upstream-secret".into()),
        _ => None,
    }
}

/// One model named `m` over one upstream, with extra top-level TOML before it.
fn config(api: &str, url: &str, before: &str) -> String {
    format!(
        "{before}\n[[models]]\nname = \"m\"\n[[models.upstreams]]\napi = \"{api}\"\nbase_url = \"{url}\"\nmodel = \"up\"\n"
    )
}

fn chat(stream: bool) -> Value {
    json!({"model": "m", "stream": stream, "messages": [{"role": "user", "content": "hi"}],
           "stream_options": {"include_usage": true}})
}

/// A Responses-API stream answering `text` in deltas of `delta` bytes, with the closing
/// events a real one sends, each repeating the whole text.
fn responses_answer(text: &str, delta: usize) -> String {
    let mut sse = String::new();
    let mut seq = 0;
    let mut event = |name: &str, mut data: Value| {
        data["type"] = json!(name);
        data["sequence_number"] = json!(seq);
        seq += 1;
        sse.push_str(&format!("event: {name}\ndata: {data}\n\n"));
    };
    let response = |status: &str, usage: Value| {
        json!({"id": "resp_1", "object": "response", "created_at": 1, "status": status,
               "model": "up", "output": [], "usage": usage})
    };
    event(
        "response.created",
        json!({"response": response("in_progress", Value::Null)}),
    );
    event(
        "response.output_item.added",
        json!({"output_index": 0, "item": {"id": "msg_1", "type": "message", "role": "assistant", "content": []}}),
    );
    event(
        "response.content_part.added",
        json!({"item_id": "msg_1", "output_index": 0, "content_index": 0, "part": {"type": "output_text", "text": ""}}),
    );
    let bytes = text.as_bytes();
    for piece in bytes.chunks(delta) {
        event(
            "response.output_text.delta",
            json!({"item_id": "msg_1", "output_index": 0, "content_index": 0,
                   "delta": std::str::from_utf8(piece).unwrap()}),
        );
    }
    event(
        "response.output_text.done",
        json!({"item_id": "msg_1", "output_index": 0, "content_index": 0, "text": text}),
    );
    event(
        "response.content_part.done",
        json!({"item_id": "msg_1", "output_index": 0, "content_index": 0, "part": {"type": "output_text", "text": text}}),
    );
    let item = json!({"id": "msg_1", "type": "message", "status": "completed", "role": "assistant",
                      "content": [{"type": "output_text", "text": text}]});
    event(
        "response.output_item.done",
        json!({"output_index": 0, "item": item}),
    );
    let mut done = response(
        "completed",
        json!({"input_tokens": 5, "output_tokens": 7, "total_tokens": 12}),
    );
    done["output"] = json!([item]);
    event("response.completed", json!({"response": done}));
    sse
}

fn text_of(chunks: &[Value]) -> String {
    chunks
        .iter()
        .flat_map(|c| c["choices"].as_array().cloned().unwrap_or_default())
        .filter_map(|c| c["delta"]["content"].as_str().map(str::to_string))
        .collect()
}

/// Finding 1: a Responses upstream's closing events repeat the whole text, so an answer of
/// a few hundred KB sends more than the back-pressure allowance after its last write. The
/// stream must still end, with its usage and `[DONE]`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_responses_answer_ends() {
    let text: String = (0..40_000).map(|i| format!("w{} ", i % 97)).collect();
    assert!(text.len() > 150_000);
    let upstream = start(TestServer::builder().body(responses_answer(&text, 2_000))).await;
    let (addr, _) = serve(&config("responses", &upstream.base_url(), ""), env).await;
    let response = post_chat(addr, &chat(true)).await;
    assert_eq!(response.status(), 200);
    let body = within(LIMIT, "the long Responses answer", response.text())
        .await
        .unwrap();
    let (chunks, done) = sse_data(&body);
    assert!(done, "the answer ends with [DONE]");
    assert_eq!(text_of(&chunks), text);
    let usage = chunks
        .iter()
        .rev()
        .find(|c| c["usage"].is_object())
        .unwrap();
    assert_eq!(usage["usage"]["completion_tokens"], 7);
}

/// Finding 1, the other shapes: keep-alive comments in bulk and one large event that writes
/// nothing, after the answer's last write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bytes_that_write_nothing_do_not_hold_the_answer() {
    let words = answer("the answer is here");
    let (body, tail) = words.split_at(words.find("data: [DONE]").unwrap());
    let mut sse = body.to_string();
    // 600 KB of comments, then one 400 KB event of a kind no dialect knows, then the usage.
    sse.push_str(&": keep-alive\n\n".repeat(600_000 / 14));
    let big =
        json!({"object": "chat.completion.chunk", "choices": [], "padding": "x".repeat(400_000)});
    sse.push_str(&format!("data: {big}\n\n"));
    let usage = json!({"object": "chat.completion.chunk", "choices": [],
                       "usage": {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}});
    sse.push_str(&format!("data: {usage}\n\n{tail}"));
    let upstream = start(TestServer::builder().body(sse)).await;
    let (addr, _) = serve(&config("chat", &upstream.base_url(), ""), env).await;
    let response = post_chat(addr, &chat(true)).await;
    let body = within(LIMIT, "the answer", response.text()).await.unwrap();
    let (chunks, done) = sse_data(&body);
    assert!(done, "the answer ends with [DONE]");
    assert_eq!(text_of(&chunks), "the answer is here");
    assert!(chunks.iter().any(|c| c["usage"]["completion_tokens"] == 4));
}

/// Writes `head` on a raw connection and reads the status line of the answer, within
/// `limit`.
async fn status_of(addr: SocketAddr, head: &str, limit: Duration) -> Option<u16> {
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    tcp.write_all(head.as_bytes()).await.ok()?;
    let mut buf = vec![0; 1024];
    let n = tokio::time::timeout(limit, tcp.read(&mut buf))
        .await
        .ok()?
        .ok()?;
    let line = String::from_utf8_lossy(&buf[..n]).to_string();
    line.split(' ').nth(1)?.parse().ok()
}

/// Finding 2: the key is checked from the headers before any body byte is read, and a
/// declared oversize body is refused at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_body_is_read_before_the_key_and_the_size() {
    let upstream = start(TestServer::builder()).await;
    let toml = config(
        "chat",
        &upstream.base_url(),
        "[auth]\nkeys_env = \"CLIENT_KEYS\"\n[limits]\nmax_body_bytes = 1000000",
    );
    let (addr, _) = serve(&toml, env).await;
    // No key, a body announced and never sent: 401 now, not when the body arrives.
    let head = "POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: 900000\r\n\r\n{";
    let status = status_of(addr, head, Duration::from_secs(5)).await;
    assert_eq!(status, Some(401));
    // A key, and a declared size over the limit: 413 at once.
    let head = "POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer sk-a\r\ncontent-type: application/json\r\ncontent-length: 5000000\r\n\r\n{";
    let status = status_of(addr, head, Duration::from_secs(5)).await;
    assert_eq!(status, Some(413));
    // Many keyless uploads of large bodies: the gateway never reads them.
    let started = Instant::now();
    let mut uploads = Vec::new();
    for _ in 0..20 {
        uploads.push(tokio::spawn(async move {
            let mut tcp = TcpStream::connect(addr).await.unwrap();
            let head = "POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: 999999\r\n\r\n";
            tcp.write_all(head.as_bytes()).await.unwrap();
            let mut buf = vec![0; 256];
            let n = tokio::time::timeout(Duration::from_secs(5), tcp.read(&mut buf))
                .await
                .unwrap()
                .unwrap_or(0);
            String::from_utf8_lossy(&buf[..n]).to_string()
        }));
    }
    for upload in uploads {
        let answer = upload.await.unwrap();
        assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
    }
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(upstream.request_count(), 0);
}

/// A loopback server that answers every request with `head` (a whole HTTP response head and
/// body), counting the requests it got.
async fn raw_server(head: String) -> (SocketAddr, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let count = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = count.clone();
    tokio::spawn(async move {
        while let Ok((mut tcp, _)) = listener.accept().await {
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let head = head.clone();
            tokio::spawn(async move {
                let mut buf = vec![0; 64 * 1024];
                let _ = tcp.read(&mut buf).await;
                let _ = tcp.write_all(head.as_bytes()).await;
            });
        }
    });
    (addr, count)
}

async fn post_json(addr: SocketAddr, body: &Value, key: Option<&str>) -> reqwest::Response {
    let mut request = reqwest::Client::new()
        .post(format!("http://{addr}/v1/chat/completions"))
        .json(body);
    if let Some(key) = key {
        request = request.bearer_auth(key);
    }
    request.send().await.unwrap()
}

/// Finding 3: a redirect from an upstream is its failure, never followed with the prompt
/// and the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_redirects_are_not_followed() {
    let (elsewhere, reached) = raw_server(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: 14\r\n\r\ndata: [DONE]\n\n"
            .to_string(),
    )
    .await;
    for status in [302, 307, 308] {
        let (upstream, _) = raw_server(format!(
            "HTTP/1.1 {status} Moved\r\nlocation: http://{elsewhere}/v1/messages\r\ncontent-length: 0\r\n\r\n"
        ))
        .await;
        let toml = format!(
            "[[models]]\nname = \"m\"\n[[models.upstreams]]\napi = \"anthropic\"\nbase_url = \"http://{upstream}/v1\"\napi_key_env = \"UPSTREAM_KEY\"\n"
        );
        let (addr, _) = serve(&toml, env).await;
        let response = post_json(addr, &chat(false), None).await;
        assert_eq!(response.status(), 502);
        let body: Value = response.json().await.unwrap();
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains(&status.to_string()), "{message}");
        assert!(message.contains(&upstream.to_string()), "{message}");
    }
    assert_eq!(reached.load(std::sync::atomic::Ordering::SeqCst), 0);
}

/// Finding 4: credentials in a base URL never appear in messages or metrics.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_in_a_base_url_never_leave() {
    let upstream = answering("fine").await;
    // Bound, not listening, and held: no later server can take its port.
    let (_, held) = crate::common::refusing();
    let closed = held.local_addr().unwrap();
    let url =
        |addr: SocketAddr| format!("http://user:hunter2-pass@{addr}/v1?api-key=hunter2-query");
    let toml = format!(
        "[[models]]\nname = \"m\"\n[[models.upstreams]]\napi = \"chat\"\nbase_url = \"{}\"\n\
         [[models]]\nname = \"down\"\n[[models.upstreams]]\napi = \"chat\"\nbase_url = \"{}\"\n",
        url(upstream.addr()),
        url(closed)
    );
    let (addr, _) = serve(&toml, env).await;
    let ok = post_json(addr, &chat(false), None).await;
    assert_eq!(ok.status(), 200);
    let mut down = chat(false);
    down["model"] = json!("down");
    let failed = post_json(addr, &down, None).await;
    assert_eq!(failed.status(), 502);
    let message = failed.text().await.unwrap();
    assert!(message.contains(&closed.to_string()), "{message}");
    let metrics = metrics(addr).await;
    assert!(metrics.contains(&upstream.addr().to_string()), "{metrics}");
    for text in [&message, &metrics] {
        assert!(!text.contains("hunter2"), "{text}");
        assert!(!text.contains("user:"), "{text}");
    }
}

/// Reads from `tcp` until it closes (or `limit` passes): whether it closed.
async fn closes_within(tcp: &mut TcpStream, limit: Duration) -> bool {
    let mut buf = vec![0; 4096];
    let until = Instant::now() + limit;
    loop {
        match tokio::time::timeout_at(until.into(), tcp.read(&mut buf)).await {
            Err(_) => return false,
            Ok(Ok(0) | Err(_)) => return true,
            Ok(Ok(_)) => {}
        }
    }
}

/// Finding 5: slow headers, idle connections, huge heads and too many connections are
/// bounded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_are_bounded() {
    let upstream = start(TestServer::builder()).await;
    let limits = "[limits]\nheader_read_timeout_s = 1\nidle_connection_timeout_s = 1\nmax_connections = 6\nmax_header_bytes = 16384";
    let (addr, _) = serve(&config("chat", &upstream.base_url(), limits), env).await;

    // Slowloris: a byte of the head every 200 ms is closed after header_read_timeout_s.
    let mut slow = TcpStream::connect(addr).await.unwrap();
    let started = Instant::now();
    let writer = async {
        for b in
            b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\nx-slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
        {
            if slow.write_all(&[*b]).await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(8), writer).await;
    assert!(closes_within(&mut slow, Duration::from_secs(3)).await);
    assert!(started.elapsed() < Duration::from_secs(9));

    // An idle keep-alive connection is closed after idle_connection_timeout_s.
    let mut idle = TcpStream::connect(addr).await.unwrap();
    idle.write_all(b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n")
        .await
        .unwrap();
    let mut buf = vec![0; 1024];
    let n = idle.read(&mut buf).await.unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
    assert!(closes_within(&mut idle, Duration::from_secs(5)).await);
    // So is one that never sends a byte.
    let mut silent = TcpStream::connect(addr).await.unwrap();
    assert!(closes_within(&mut silent, Duration::from_secs(5)).await);

    // A head over max_header_bytes: 431.
    let big = format!(
        "GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\nx-big: {}\r\n\r\n",
        "a".repeat(40_000)
    );
    let status = status_of(addr, &big, Duration::from_secs(5)).await;
    assert_eq!(status, Some(431));

    // max_connections open: one more is closed at once, and counted.
    let mut open = Vec::new();
    for _ in 0..6 {
        let mut tcp = TcpStream::connect(addr).await.unwrap();
        tcp.write_all(b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n")
            .await
            .unwrap();
        let n = tcp.read(&mut buf).await.unwrap();
        assert!(n > 0);
        open.push(tcp);
    }
    let mut extra = TcpStream::connect(addr).await.unwrap();
    assert!(closes_within(&mut extra, Duration::from_millis(500)).await);
    drop(open);
    // Once they closed, connections are served again; the refusal was counted.
    let metrics = within(LIMIT, "metrics after the refusal", async {
        loop {
            if let Ok(r) = reqwest::get(format!("http://{addr}/metrics")).await {
                return r.text().await.unwrap();
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    let refused = metrics
        .lines()
        .find_map(|l| l.strip_prefix("choicewise_connections_refused_total "))
        .and_then(|n| n.parse::<u64>().ok());
    assert!(refused.is_some_and(|n| n >= 1), "{metrics}");
}

/// Finding 6: a client that never reads its answer gives its slot back after
/// client_stall_timeout_s, its upstream closed.
///
/// The upstream never ends its answer, so however much the kernel's socket buffers hold on
/// this machine, the gateway's writes to the client fill them and wait: the answer ends by
/// the stall and nothing else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_reads_frees_its_slot() {
    let upstream = endless(String::new()).await;
    let small = answering("fine").await;
    let toml = format!(
        "{}[[models]]\nname = \"small\"\n[[models.upstreams]]\napi = \"chat\"\nbase_url = \"{}\"\n",
        config(
            "chat",
            &upstream.url,
            // No minimum drain rate: a loaded machine's first writes, each taken a little
            // late, could add up to the stall bound and end the answer as a slow drain. No
            // answer bound within reach: the sockets between fill before it.
            "[limits]\nmax_concurrent_requests = 1\nclient_stall_timeout_s = 1\n\
             client_min_bytes_per_s = 0\nmax_answer_bytes = 268435456"
        ),
        small.base_url()
    );
    let (addr, _) = serve(&toml, env).await;
    let body = serde_json::to_string(&chat(true)).unwrap();
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut stalled = socket.connect(addr).await.unwrap();
    stalled.write_all(head.as_bytes()).await.unwrap();
    // The stalled request holds the slot once its upstream has it (else a probe could take
    // the slot first, and the stalled request get the 429).
    within(LIMIT, "the stalled request reaching its upstream", async {
        while upstream.requests() < 1 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    // The one slot is taken: a small request waits for its 429 to turn into a 200.
    let mut probe = chat(false);
    probe["model"] = json!("small");
    let served = within(LIMIT, "the slot freed by the stall timeout", async {
        loop {
            let r = post_json(addr, &probe, None).await;
            if r.status() == 200 {
                return r.text().await.unwrap();
            }
            assert_eq!(r.status(), 429);
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await;
    assert!(served.contains("fine"));
    // The stall is counted, the stalled answer's sample cancelled and its upstream closed.
    let deadline = Instant::now() + LIMIT;
    loop {
        let metrics = within(LIMIT, "the metrics", metrics(addr)).await;
        let stalled = metrics.contains("choicewise_client_stalls_total 1");
        let cancelled =
            metrics.contains("choicewise_choices_total{model=\"m\",finish_reason=\"cancelled\"} 1");
        let closed = upstream.ended() == 1;
        if stalled && cancelled && closed {
            break;
        }
        if Instant::now() > deadline {
            let seen: Vec<&str> = metrics
                .lines()
                .filter(|l| {
                    ["stalls", "slow_drains", "choices_total"]
                        .iter()
                        .any(|m| l.contains(m))
                })
                .collect();
            panic!(
                "the stall counted, its sample cancelled and its upstream closed: not all within {LIMIT:?} (upstream closed: {closed}); the metrics: {seen:#?}"
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    drop(stalled);
}

/// Finding 7: without [auth], web pages and rebound names are refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyless_gateway_is_closed_to_web_pages() {
    let upstream = answering("fine").await;
    let toml = config(
        "chat",
        &upstream.base_url(),
        "allowed_origins = [\"https://app.example\"]",
    );
    let (addr, _) = serve(&toml, env).await;
    let client = reqwest::Client::new();
    let url = format!("http://{addr}/v1/chat/completions");
    let send = |host: Option<&str>, origin: Option<&str>, content_type: &str| {
        let mut r = client
            .post(&url)
            .header("content-type", content_type)
            .body(serde_json::to_string(&chat(false)).unwrap());
        if let Some(host) = host {
            r = r.header("host", host);
        }
        if let Some(origin) = origin {
            r = r.header("origin", origin);
        }
        r.send()
    };
    let json = "application/json";
    let rebound = format!("attacker.example:{}", addr.port());
    assert_eq!(
        send(Some(&rebound), None, json).await.unwrap().status(),
        403
    );
    assert_eq!(
        send(Some("localhost:1"), None, json)
            .await
            .unwrap()
            .status(),
        403
    );
    let page = send(None, Some("https://evil.example"), json)
        .await
        .unwrap();
    assert_eq!(page.status(), 403);
    // A refusal carries the request's id, as every answer does.
    let id = page.headers()["x-request-id"].to_str().unwrap();
    assert!(id.starts_with("req-"), "{id}");
    let body: Value = page.json().await.unwrap();
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("allowed_origins")
    );
    assert_eq!(send(None, None, "text/plain").await.unwrap().status(), 415);
    assert_eq!(
        send(None, None, "application/x-www-form-urlencoded")
            .await
            .unwrap()
            .status(),
        415
    );
    // What a local client sends is served; so is a listed origin.
    for host in [
        format!("localhost:{}", addr.port()),
        format!("127.0.0.1:{}", addr.port()),
        "localhost".into(),
    ] {
        assert_eq!(
            send(Some(&host), None, json).await.unwrap().status(),
            200,
            "{host}"
        );
    }
    let listed = send(None, Some("https://app.example"), json).await.unwrap();
    assert_eq!(listed.status(), 200);
    assert_eq!(upstream.request_count(), 4);
    // Each refusal counted once, under its status.
    crate::common::metrics_with(
        addr,
        &[
            "choicewise_requests_total{model=\"\",status=\"403\",api=\"chat\"} 3",
            "choicewise_requests_total{model=\"\",status=\"415\",api=\"chat\"} 2",
        ],
    )
    .await;

    // With [auth], the key is the guard: any Host and Origin with a key are served.
    let keyed = config(
        "chat",
        &upstream.base_url(),
        "[auth]\nkeys_env = \"CLIENT_KEYS\"",
    );
    let (addr, _) = serve(&keyed, env).await;
    let r = client
        .post(format!("http://{addr}/v1/chat/completions"))
        .header("host", "gateway.example")
        .header("origin", "https://elsewhere.example")
        .bearer_auth("sk-a")
        .json(&chat(false))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
}

/// Finding 8: a vote_by that compiles too large is a 400 naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_vote_by_is_refused() {
    let upstream = start(TestServer::builder()).await;
    let (addr, _) = serve(&config("chat", &upstream.base_url(), ""), env).await;
    let mut body = chat(false);
    body["choicewise"] = json!({"samples": 2, "select": "vote", "vote_by": "(?i)\\w{400}"});
    let started = Instant::now();
    let r = post_json(addr, &body, None).await;
    assert_eq!(r.status(), 400);
    let body: Value = r.json().await.unwrap();
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("vote_by") && message.contains("too large"),
        "{message}"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(upstream.request_count(), 0);
}

/// Finding 10: the key is checked before the slots. Every slot held by keyed streams:
/// keyless requests still get 401, never 429; a keyless flood does not keep keyed
/// requests out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_key_is_checked_before_the_slots() {
    let upstream = start(crate::common::stalled(2)).await;
    let toml = config(
        "chat",
        &upstream.base_url(),
        "[auth]\nkeys_env = \"CLIENT_KEYS\"\n[limits]\nmax_concurrent_requests = 2",
    );
    let (addr, _) = serve(&toml, env).await;
    let mut held = Vec::new();
    for _ in 0..2 {
        let r = post_json(addr, &chat(true), Some("sk-a")).await;
        assert_eq!(r.status(), 200);
        held.push(r);
    }
    let full = post_json(addr, &chat(true), Some("sk-a")).await;
    assert_eq!(full.status(), 429);
    let message: Value = full.json().await.unwrap();
    assert!(
        !message.to_string().contains('2'),
        "the limit is not revealed: {message}"
    );
    for key in [None, Some("sk-wrong")] {
        assert_eq!(post_json(addr, &chat(true), key).await.status(), 401);
    }
    drop(held);
    // A flood of keyless requests holds no slot: keyed ones are served meanwhile.
    let flood: Vec<_> = (0..50)
        .map(|_| tokio::spawn(async move { post_json(addr, &chat(true), None).await.status() }))
        .collect();
    let keyed = within(LIMIT, "a keyed request during the flood", async {
        loop {
            let r = post_json(addr, &chat(true), Some("sk-a")).await;
            if r.status() == 200 {
                return r.status();
            }
            // The held streams' slots are freed as their connections close.
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert_eq!(keyed, 200);
    for f in flood {
        assert_eq!(f.await.unwrap(), 401);
    }
}

/// A body sent as `chunk`-byte HTTP/1 chunks, all written at once; the status and body of
/// the answer (what could be read of it: the gateway may close before the body's end).
async fn chunked_status(addr: SocketAddr, body: &[u8], chunk: usize) -> (u16, String) {
    let mut wire = b"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\n\
        authorization: Bearer sk-a\r\ncontent-type: application/json\r\n\
        transfer-encoding: chunked\r\nconnection: close\r\n\r\n"
        .to_vec();
    for piece in body.chunks(chunk) {
        wire.extend_from_slice(format!("{:x}\r\n", piece.len()).as_bytes());
        wire.extend_from_slice(piece);
        wire.extend_from_slice(b"\r\n");
    }
    wire.extend_from_slice(b"0\r\n\r\n");
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    let (mut read, mut write) = tcp.split();
    let send = async move {
        // The gateway may close before it has read it all.
        let _ = write.write_all(&wire).await;
    };
    let receive = async move {
        let mut answer = Vec::new();
        let _ = read.read_to_end(&mut answer).await;
        answer
    };
    let ((), answer) = tokio::join!(send, receive);
    let answer = String::from_utf8_lossy(&answer).to_string();
    let status = answer.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0);
    (status, answer)
}

/// Past its first 64 KiB, a body whose chunks average under 16 bytes is refused at once
/// (each chunk costs about a microsecond of CPU whatever its size), with its code and the
/// connection closed, the rest unread; a body of tiny chunks that ends within 64 KiB, and
/// one of ordinary chunks, are served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_of_tiny_chunks_is_refused_past_64_kib() {
    let upstream = answering("fine").await;
    let (addr, _) = serve(
        &config(
            "chat",
            &upstream.base_url(),
            "[auth]\nkeys_env = \"CLIENT_KEYS\"\n",
        ),
        env,
    )
    .await;
    let body = |kib: usize| {
        json!({"model": "m", "messages": [{"role": "user",
            "content": "x".repeat(kib * 1024 - 80)}]})
        .to_string()
        .into_bytes()
    };
    // Chunks of 8 bytes: under the mean of 16, in an eighth of the frames 1-byte chunks take
    // (each frame costs the same whatever its size).
    let (status, text) = chunked_status(addr, &body(1024), 8).await;
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("body_frames_too_small"), "{text}");
    for (kib, chunk) in [(60, 8), (1024, 1024), (256, 64)] {
        let (status, text) = chunked_status(addr, &body(kib), chunk).await;
        assert_eq!(status, 200, "{kib} KiB in {chunk}-byte chunks: {text}");
    }
}
