//! A client that reads slowly holds back its upstream: what the gateway holds for it is
//! bounded by the sockets' buffers, not by the answer (about 40 MB here). The heaviest test of
//! the gateway's streaming (about 18 s in a debug build), so it is here, out of the README's
//! test command, in CI's step of its own.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use choicewise_test_support::within;
use futures::StreamExt;
use serde_json::json;

use crate::ONE_AT_A_TIME as SERIAL;
use crate::common::{no_env, post_chat, serve};

/// An upstream whose answer is `chunks` content chunks of `size` letters, made only as its
/// connection takes them; the count of those made so far.
async fn lazy_upstream(chunks: usize, size: usize) -> (String, Arc<AtomicUsize>) {
    let made = Arc::new(AtomicUsize::new(0));
    let counter = made.clone();
    let app = axum::Router::new().route(
        "/v1/chat/completions",
        axum::routing::post(move || {
            let counter = counter.clone();
            async move {
                let text = "x".repeat(size);
                let body = futures::stream::iter(0..=chunks).map(move |i| {
                    counter.fetch_add(1, Ordering::SeqCst);
                    let event = match i == chunks {
                        false => format!(
                            "data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{text}\"}}}}]}}\n\n"
                        ),
                        true => "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n".to_string(),
                    };
                    Ok::<_, std::convert::Infallible>(axum::body::Bytes::from(event))
                });
                axum::response::Response::builder()
                    .header("content-type", "text/event-stream")
                    .body(axum::body::Body::from_stream(body))
                    .unwrap()
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}/v1"), made)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_reads_slowly_holds_back_its_upstream() {
    // Alone: it holds megabytes in this process, which the heap bounds beside it would count.
    let _alone = SERIAL.lock().await;
    // About 50 MB of answer: far more than the sockets between the three can buffer.
    const CHUNKS: usize = 160_000;
    let (url, made) = lazy_upstream(CHUNKS, 256).await;
    // An answer over the default max_answer_bytes (16 MiB): the bound raised for this one.
    let toml = format!(
        "[limits]\nmax_answer_bytes = 134217728\n[[models]]\nname = \"m\"\n\
         [[models.upstreams]]\napi = \"chat\"\nbase_url = \"{url}\"\nmodel = \"up\"\n"
    );
    let (addr, _gateway) = serve(&toml, no_env).await;
    let request =
        json!({"model": "m", "stream": true, "messages": [{"role": "user", "content": "hi"}]});
    let response = post_chat(addr, &request).await;
    assert_eq!(response.status(), 200);
    let mut body = response.bytes_stream();
    let mut received = body.next().await.unwrap().unwrap().len();
    // The client stops reading: the upstream is held once the buffers between are full. The
    // count is taken as settled once it has not moved for a second; a busy machine can starve
    // the three for a moment, and the kernel may still grow a socket's buffer after that.
    let counter = &made;
    let settled = |deadline: Instant| async move {
        let (mut last, mut still) = (usize::MAX, 0);
        while still < 2 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(500)).await;
            let now = counter.load(Ordering::SeqCst);
            still = if now == last { still + 1 } else { 0 };
            last = now;
        }
        last
    };
    let held = settled(Instant::now() + Duration::from_secs(15)).await;
    assert!(
        held < CHUNKS / 2,
        "the upstream made {held} of {CHUNKS} chunks for a client that read one read"
    );
    // And it stays held: seconds on, without a read, it is still under that bound.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let later = settled(Instant::now() + Duration::from_secs(5)).await;
    assert!(
        later < CHUNKS / 2,
        "and stays held: {later} of {CHUNKS} chunks made, {held} when first held"
    );
    // The client reads on: the whole answer arrives, in order and intact.
    let mut tail = Vec::new();
    while let Some(read) = within(Duration::from_secs(120), "the rest", body.next()).await {
        let read = read.unwrap();
        received += read.len();
        tail.extend_from_slice(&read[read.len().saturating_sub(64)..]);
        tail.drain(..tail.len().saturating_sub(64));
    }
    assert!(String::from_utf8_lossy(&tail).ends_with("data: [DONE]\n\n"));
    assert_eq!(made.load(Ordering::SeqCst), CHUNKS + 1);
    assert!(received > CHUNKS * 256, "{received} bytes");
}
