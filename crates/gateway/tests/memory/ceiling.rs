//! The process-wide memory ceiling (`memory_high_watermark_mb`): a body is charged what its
//! head may cost (64 KiB of it at most), the rest as its bytes arrive, so that idle uploads
//! announcing large bodies hold almost nothing while no mix of bodies that do arrive takes the
//! gateway past the mark; past it the upload is refused with 503 and `Retry-After` in its
//! API's shape while the others go on, and requests are admitted again once the memory falls.
//! Real loopback HTTP; the bound is read from the process's own memory figures.

use std::net::SocketAddr;
use std::time::Duration;

use choicewise_test_support::rss_bytes;
use choicewise_testserver::{TestServer, answer};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::common::{chunk, metrics, post_chat_keyed, raw_upstream, serve, start};

const MIB: u64 = 1 << 20;

use crate::ONE_AT_A_TIME;

fn env(name: &str) -> Option<String> {
    (name == "CLIENT_KEYS").then(|| "sk-a,sk-b".into())
}

/// A request whose head declares a body of `len` bytes, of which only `{` is sent: the
/// gateway admits it (or not) from its head, and it stays open, holding what it reserved.
async fn held_upload(addr: SocketAddr, path: &str, len: usize) -> TcpStream {
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer sk-a\r\n\
         x-api-key: sk-a\r\ncontent-type: application/json\r\ncontent-length: {len}\r\n\r\n{{"
    );
    tcp.write_all(head.as_bytes()).await.unwrap();
    tcp
}

/// A chunked request of key `sk-a` that has sent its head and one chunk (`{`) and then
/// idles: its body's length is unknown until it ends.
async fn idle_chunked(addr: SocketAddr) -> TcpStream {
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    let head = "POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\n\
                authorization: Bearer sk-a\r\ncontent-type: application/json\r\n\
                transfer-encoding: chunked\r\n\r\n1\r\n{\r\n";
    tcp.write_all(head.as_bytes()).await.unwrap();
    tcp
}

/// The status and body of whatever the gateway answered on `tcp` within `wait`, if it did.
async fn answered_within(tcp: &mut TcpStream, wait: Duration) -> Option<(u16, String)> {
    let mut buf = vec![0; 4096];
    let n = tokio::time::timeout(wait, tcp.read(&mut buf))
        .await
        .ok()?
        .ok()?;
    let text = String::from_utf8_lossy(&buf[..n]).to_string();
    let status = text.get(9..12)?.parse().ok()?;
    Some((status, text))
}

async fn post(addr: SocketAddr, path: &str, body: &Value) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("http://{addr}{path}"))
        .bearer_auth("sk-a")
        .header("x-api-key", "sk-a")
        .json(body)
        .send()
        .await
        .unwrap()
}

/// Posts `body` (key `sk-a`) until it is answered 200, for up to 5 s: what was held is
/// released, and the gateway admits again. The last status.
async fn admitted_again(addr: SocketAddr, body: &Value) -> u16 {
    let mut status = 0;
    for _ in 0..100 {
        status = post(addr, "/v1/chat/completions", body)
            .await
            .status()
            .as_u16();
        if status == 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    status
}

/// Opens uploads of `len` bytes on the three APIs in turn until `count` were tried; the
/// ones held open, and the refusals (path, status, the answer's text).
async fn uploads(
    addr: SocketAddr,
    count: usize,
    len: usize,
) -> (Vec<TcpStream>, Vec<(&'static str, u16, String)>) {
    let paths = ["/v1/chat/completions", "/v1/messages", "/v1/responses"];
    let mut held = Vec::new();
    let mut refused = Vec::new();
    for i in 0..count {
        let mut tcp = held_upload(addr, paths[i % 3], len).await;
        match answered_within(&mut tcp, Duration::from_millis(100)).await {
            None => held.push(tcp),
            Some((status, text)) => refused.push((paths[i % 3], status, text)),
        }
    }
    (held, refused)
}

async fn metric(addr: SocketAddr, name: &str) -> Option<u64> {
    let text = metrics(addr).await;
    let line = text.lines().find(|l| l.starts_with(name))?;
    line.rsplit(' ').next()?.parse().ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_are_charged_as_they_arrive_and_the_mark_holds() {
    let _one = ONE_AT_A_TIME.lock().await;
    let upstream = start(TestServer::builder().body(answer("hello"))).await;
    // The marks sit 160 MiB and 128 MiB above what the test process uses now (the uploads'
    // connection buffers and the test's own bodies take some 60 MiB of it); bodies up to
    // 16 MiB each. The uploads are all one key's: its cap of unsent charges is off, for
    // the ceiling alone to be what refuses them (the cap has its own test, below).
    let idle = rss_bytes();
    let high = idle / MIB + 160;
    let low = idle / MIB + 128;
    let toml = format!(
        "[auth]\nkeys_env = \"CLIENT_KEYS\"\n[limits]\nmax_body_bytes = {}\n\
         body_read_timeout_s = 300\nmax_unsent_bytes_per_key = 0\n\
         memory_high_watermark_mb = {high}\nmemory_low_watermark_mb = {low}\n\
         [[models]]\nname = \"m\"\n[[models.upstreams]]\napi = \"chat\"\nbase_url = \"{}\"\n",
        16 * MIB,
        upstream.base_url()
    );
    let (addr, _) = serve(&toml, env).await;
    let chat = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
    assert_eq!(
        post(addr, "/v1/chat/completions", &chat).await.status(),
        200
    );

    // Twenty idle chunked uploads of one key (their length unknown: up to 16 MiB each), and
    // forty that announce 15 MiB and send one byte (600 MiB announced): each holds only its
    // head's charge, so every one is admitted and another key's request is answered.
    let mut chunked = Vec::new();
    for _ in 0..20 {
        let mut tcp = idle_chunked(addr).await;
        assert_eq!(
            answered_within(&mut tcp, Duration::from_millis(200)).await,
            None
        );
        chunked.push(tcp);
    }
    let (mut held, refused) = uploads(addr, 40, 15 * MIB as usize).await;
    assert!(refused.is_empty(), "refused from their heads: {refused:?}");
    assert_eq!(held.len(), 40);
    let other_key = post_chat_keyed(addr, &chat, "sk-b").await;
    assert_eq!(
        other_key.status(),
        200,
        "another key's request while they idle"
    );
    drop(chunked);

    // The forty send their bodies, all at once (600 MiB): charged as their bytes arrive
    // (each whole once it passes its head's share, so that each is admitted or refused, never
    // all cut halfway), the gateway never passes the mark. Those whose bytes would pass it are refused with
    // 503 in their API's shape (or their connection closed while they still send); the
    // others are read whole and answered 400 (`{ ... }` names no model).
    let paths = ["/v1/chat/completions", "/v1/messages", "/v1/responses"];
    let filler = std::sync::Arc::new(vec![b' '; 15 * MIB as usize - 2]);
    let sending: Vec<_> = held
        .drain(..)
        .enumerate()
        .map(|(i, mut tcp)| {
            let filler = filler.clone();
            tokio::spawn(async move {
                let sent = async {
                    tcp.write_all(&filler).await?;
                    tcp.write_all(b"}").await
                };
                let _ = sent.await; // A refusal may close the connection mid-body.
                // Read whole, its cost scanned, then parsed: slow in a debug build on a
                // busy machine.
                (
                    paths[i % 3],
                    answered_within(&mut tcp, Duration::from_secs(30)).await,
                )
            })
        })
        .collect();
    let mut read_whole = 0;
    let mut refused = 0;
    for task in sending {
        let (path, answer) = task.await.unwrap();
        match answer {
            Some((400, _)) => read_whole += 1,
            Some((status, text)) => {
                assert_eq!(status, 503, "{path}: {text}");
                assert!(
                    text.to_ascii_lowercase().contains("retry-after: 1"),
                    "{text}"
                );
                assert!(text.contains("memory_high_watermark_mb"), "{text}");
                match path {
                    "/v1/messages" => assert!(text.contains(r#""type":"error""#), "{text}"),
                    _ => assert!(text.contains(r#""code":"overloaded""#), "{text}"),
                }
                refused += 1;
            }
            None => refused += 1, // closed before its answer could be read
        }
    }
    let peak = rss_bytes();
    assert!(
        peak <= (high + 16) * MIB,
        "the gateway reached {} MiB, its mark is {high} MiB",
        peak / MIB
    );
    assert!(read_whole >= 1, "no upload was read whole");
    assert!(
        refused >= 1,
        "600 MiB of bodies under a 160 MiB margin: none refused"
    );
    assert!(metric(addr, "choicewise_overload_refused_total").await >= Some(1));
    drop(filler);

    // The uploads are gone: what they reserved is released, and requests are admitted
    // again.
    let status = admitted_again(addr, &chat).await;
    assert_eq!(
        status,
        200,
        "still refused at {} MiB, low mark {low} MiB",
        rss_bytes() / MIB
    );
    assert_eq!(metric(addr, "choicewise_overloaded").await, Some(0));
}

/// A chunked request of key `sk-a` that has sent its head, `{` and `chunk` (one chunk),
/// and then idles.
async fn idle_chunked_after(addr: SocketAddr, chunk: &[u8]) -> TcpStream {
    let mut tcp = idle_chunked(addr).await;
    let size = format!("{:x}\r\n", chunk.len());
    tcp.write_all(size.as_bytes()).await.unwrap();
    tcp.write_all(chunk).await.unwrap();
    tcp.write_all(b"\r\n").await.unwrap();
    tcp
}

/// One key's idle chunked uploads hold at most `max_unsent_bytes_per_key` of the memory
/// ceiling: twenty of them, each 8 MiB into its body (each charged its route's cost of 16
/// MiB, 36 MiB, as much as the other key's 16 MiB body: without the cap they would fill the
/// margin to less than that body's charge), leave another key's request a 200 under a cap
/// of 64 MiB (one of them held). With a small cap, the key's uploads past it are
/// answered 429 at once, with `Retry-After` and naming the limit, while the other key is
/// served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_keys_idle_uploads_leave_the_others_room() {
    let _one = ONE_AT_A_TIME.lock().await;
    let upstream = TestServer::builder()
        .body(answer("hello"))
        .start()
        .await
        .unwrap();
    let idle = rss_bytes();
    let (high, low) = (idle / MIB + 256, idle / MIB + 224);
    let gateway = |cap: &str| {
        format!(
            "[auth]\nkeys_env = \"CLIENT_KEYS\"\n[limits]\nmax_body_bytes = {}\n\
             body_read_timeout_s = 300\n{cap}\
             memory_high_watermark_mb = {high}\nmemory_low_watermark_mb = {low}\n\
             [[models]]\nname = \"m\"\n[[models.upstreams]]\napi = \"chat\"\nbase_url = \"{}\"\n",
            20 * MIB,
            upstream.base_url()
        )
    };
    let (addr, _) = serve(&gateway("max_unsent_bytes_per_key = 67108864\n"), env).await;
    let chunk = vec![b' '; 8 * MIB as usize];
    let mut uploads = Vec::new();
    for _ in 0..20 {
        let mut tcp = idle_chunked_after(addr, &chunk).await;
        // Held, or refused and drained: no answer while it idles.
        assert_eq!(
            answered_within(&mut tcp, Duration::from_millis(200)).await,
            None
        );
        uploads.push(tcp);
    }
    // The other key's body: 16 MiB (whitespace), charged as it arrives.
    let mut other = br#"{"model": "m", "messages": [{"role": "user", "content": "hi"}]"#.to_vec();
    other.resize(16 * MIB as usize - 1, b' ');
    other.push(b'}');
    let answer = reqwest::Client::new()
        .post(format!("http://{addr}/v1/chat/completions"))
        .bearer_auth("sk-b")
        .header("content-type", "application/json")
        .body(other)
        .send()
        .await
        .unwrap();
    let status = answer.status();
    let text = answer.text().await.unwrap();
    assert_eq!(status, 200, "another key beside 20 idle uploads: {text}");
    drop(uploads);

    // A cap of 1 MiB: the heads' charges (160 KiB each) of six fit; the others are 429.
    let (addr, _) = serve(&gateway("max_unsent_bytes_per_key = 1048576\n"), env).await;
    let (mut held, mut refused) = (Vec::new(), Vec::new());
    for _ in 0..20 {
        let mut tcp = idle_chunked(addr).await;
        match answered_within(&mut tcp, Duration::from_millis(200)).await {
            None => held.push(tcp),
            Some(answer) => refused.push(answer),
        }
    }
    assert_eq!((held.len(), refused.len()), (6, 14), "{refused:?}");
    for (status, text) in &refused {
        assert_eq!(*status, 429, "{text}");
        assert!(
            text.to_ascii_lowercase().contains("retry-after: 1"),
            "{text}"
        );
        assert!(
            text.contains("max_unsent_bytes_per_key (1048576)"),
            "{text}"
        );
        assert!(text.contains(r#""code":"unsent_bytes_per_key""#), "{text}");
    }
    let chat = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
    let other = post_chat_keyed(addr, &chat, "sk-b").await;
    assert_eq!(other.status(), 200, "another key beside the held uploads");
    // The uploads gone, the key is admitted again.
    drop(held);
    assert_eq!(
        admitted_again(addr, &chat).await,
        200,
        "the key, its uploads gone"
    );
}

#[tokio::test]
async fn watermarks_out_of_order_are_refused_at_start() {
    let _one = ONE_AT_A_TIME.lock().await;
    let toml = "[limits]\nmemory_high_watermark_mb = 100\nmemory_low_watermark_mb = 200\n\
                [[models]]\nname = \"m\"\n[[models.upstreams]]\napi = \"chat\"\nbase_url = \"http://127.0.0.1:9/v1\"\n";
    let e = choicewise_gateway::Config::from_toml(toml).unwrap_err();
    assert!(e.to_string().contains("memory_low_watermark_mb"), "{e}");
}

/// An upstream that answers every request with an SSE stream that never ends: one content
/// chunk of 8 KiB after another, as fast as it is read.
async fn endless_upstream() -> SocketAddr {
    raw_upstream(|mut tcp| async move {
        let mut buf = vec![0; 65536];
        let _ = tcp.read(&mut buf).await;
        let head =
            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";
        if tcp.write_all(head.as_bytes()).await.is_err() {
            return;
        }
        let chunk = chunk(0, json!({"content": "x".repeat(8192)}), Value::Null);
        while tcp.write_all(chunk.as_bytes()).await.is_ok() {}
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endless_upstream_is_cut_at_the_answer_limit() {
    let _one = ONE_AT_A_TIME.lock().await;
    let upstream = endless_upstream().await;
    // The default max_answer_bytes, one slot: the answer must end and free it.
    let toml = format!(
        "[auth]\nkeys_env = \"CLIENT_KEYS\"\n[limits]\nmax_concurrent_requests = 1\n\
         [[models]]\nname = \"m\"\n[[models.upstreams]]\napi = \"chat\"\nbase_url = \"http://{upstream}/v1\"\n"
    );
    let (addr, _) = serve(&toml, env).await;
    let before = rss_bytes();
    // Streamed, the client takes the answer as it comes; not streamed, the answer's text is
    // held once more than the run holds it, while it is written.
    for stream in [true, false] {
        let body = json!({"model": "m", "stream": stream,
                          "messages": [{"role": "user", "content": "hi"}]});
        let response = post(addr, "/v1/chat/completions", &body).await;
        // Read as it comes, keeping only the last bytes: the client's memory stays small.
        let tail = tokio::time::timeout(Duration::from_secs(60), async {
            use futures::StreamExt;
            let mut tail: Vec<u8> = Vec::new();
            let mut reads = response.bytes_stream();
            while let Some(read) = reads.next().await {
                tail.extend_from_slice(&read.unwrap());
                let cut = tail.len().saturating_sub(4096);
                tail.drain(..cut);
            }
            tail
        })
        .await
        .expect("the answer ends");
        let text = String::from_utf8_lossy(&tail).to_string();
        assert!(text.contains("max_answer_bytes"), "stream {stream}: {text}");
        if stream {
            assert!(text.trim_end().ends_with("data: [DONE]"));
        }
        let grew = rss_bytes().saturating_sub(before);
        assert!(
            grew < 64 * MIB,
            "stream {stream}: the gateway grew by {} MiB",
            grew / MIB
        );
    }
    // The slot was released: the one slot serves another request.
    let body =
        json!({"model": "m", "stream": true, "messages": [{"role": "user", "content": "hi"}]});
    let response = post(addr, "/v1/chat/completions", &body).await;
    assert_eq!(response.status(), 200);
}
