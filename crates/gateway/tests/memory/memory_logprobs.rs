//! Log-probabilities in the memory model: an honest upstream's log-probabilities for
//! `n: 16, top_logprobs: 20` pass through as text, and a vote guided by confidence keeps only
//! the numbers it needs. Real loopback HTTP against an upstream the test starts; the bound is
//! read from the process's own memory figures, never from timing: the peak resident size
//! (`VmHWM` in /proc/self/status, reset through /proc/self/clear_refs before each probe), and
//! the allocator's peak of live heap bytes (which memory freed by an earlier probe and reused
//! cannot hide). The test's own client and upstream count too: they keep little.

use std::net::SocketAddr;
use std::time::Duration;

use futures::StreamExt;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::common::{no_env, post_chat, serve, status_bytes};

use crate::HEAP;

const MIB: u64 = 1 << 20;

use crate::ONE_AT_A_TIME;

/// Where a probe starts: the resident size and the live heap now.
struct Idle {
    rss: u64,
    heap: i64,
}

impl Idle {
    /// Resets both peaks.
    fn now() -> Idle {
        // "5" resets the peak resident size to the current one (Linux 4.0 and later).
        let reset = std::fs::write("/proc/self/clear_refs", "5").is_ok();
        assert!(reset, "the peak resident size cannot be reset here");
        Idle {
            rss: status_bytes("VmRSS") as u64,
            heap: HEAP.reset_peak(),
        }
    }

    /// The growth at its peak since, resident and heap; printed as `what`.
    fn grew(&self, what: &str) -> (u64, u64) {
        let rss = (status_bytes("VmHWM") as u64).saturating_sub(self.rss);
        let heap = (HEAP.peak() - self.heap).max(0) as u64;
        println!(
            "{what}: peak growth {} MiB resident, {} MiB of heap",
            rss / MIB,
            heap / MIB
        );
        (rss, heap)
    }
}

/// One token's `logprobs.content` entry with `top` alternatives, written with the spaces an
/// upstream may send (kept verbatim by the gateway).
fn token_logprobs(t: usize, top: usize, sure: bool) -> String {
    let alternatives: Vec<String> = (0..top)
        .map(|j| {
            let lp = if sure && j > 0 {
                -9.5 - j as f64
            } else {
                -0.05 - 0.1 * j as f64
            };
            format!(
                r#"{{"token": "t{t}_{j}", "logprob": {lp:.6}, "bytes": [116, {}]}}"#,
                48 + j
            )
        })
        .collect();
    format!(
        r#"{{"token": "w{t}", "logprob": -0.050000, "bytes": [119], "top_logprobs": [{}]}}"#,
        alternatives.join(", ")
    )
}

/// An upstream that answers each request with its `n` choices (1 unless asked), interleaved,
/// of `tokens` tokens each (the last ones `Answer: 42.`), every token with `top`
/// log-probabilities; written chunk by chunk as it is read.
async fn logprobs_upstream(tokens: usize, top: usize) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut tcp, _)) = listener.accept().await {
            tokio::spawn(async move {
                // The request: its head, then its body of content-length bytes.
                let mut read = Vec::new();
                let mut buf = vec![0; 65536];
                let body = loop {
                    let Ok(n) = tcp.read(&mut buf).await else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    read.extend_from_slice(&buf[..n]);
                    let text = String::from_utf8_lossy(&read).to_string();
                    let Some(end) = text.find("\r\n\r\n") else {
                        continue;
                    };
                    let length: usize = (text[..end].lines())
                        .find_map(|l| {
                            let (k, v) = l.split_once(':')?;
                            k.eq_ignore_ascii_case("content-length")
                                .then(|| v.trim().parse().ok())?
                        })
                        .unwrap_or(0);
                    if read.len() >= end + 4 + length {
                        break read[end + 4..end + 4 + length].to_vec();
                    }
                };
                let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                let n = request["n"].as_u64().unwrap_or(1) as usize;
                let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";
                if tcp.write_all(head.as_bytes()).await.is_err() {
                    return;
                }
                let answer = ["Answer", ": ", "42", "."];
                for t in 0..tokens {
                    let mut chunk = String::new();
                    for i in 0..n {
                        let text = match tokens - t {
                            left @ 1..=4 => answer[4 - left].to_string(),
                            _ => format!("w{t} "),
                        };
                        let role = if t == 0 { r#""role":"assistant","# } else { "" };
                        chunk.push_str(&format!(
                            "data: {{\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"up\",\
                             \"choices\":[{{\"index\":{i},\"delta\":{{{role}\"content\":{}}},\
                             \"logprobs\":{{\"content\": [{}]}},\"finish_reason\":null}}]}}\n\n",
                            json!(text),
                            token_logprobs(t, top, true)
                        ));
                    }
                    if tcp.write_all(chunk.as_bytes()).await.is_err() {
                        return;
                    }
                }
                let mut end = String::new();
                for i in 0..n {
                    end.push_str(&format!(
                        "data: {{\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"up\",\
                         \"choices\":[{{\"index\":{i},\"delta\":{{}},\"logprobs\":null,\"finish_reason\":\"stop\"}}]}}\n\n"
                    ));
                }
                end.push_str("data: [DONE]\n\n");
                let _ = tcp.write_all(end.as_bytes()).await;
            });
        }
    });
    addr
}

async fn gateway(upstream: SocketAddr) -> SocketAddr {
    let toml = format!(
        "[[models]]\nname = \"m\"\n[[models.upstreams]]\napi = \"chat\"\nbase_url = \"http://{upstream}/v1\"\n"
    );
    serve(&toml, no_env).await.0
}

/// Native `n: 16, logprobs, top_logprobs: 20`, 500 tokens each, passed through (streamed,
/// then as one `chat.completion`): under 96 MiB above idle, every token's log-probabilities
/// in the answer as the upstream wrote them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn native_logprobs_pass_through_as_text_within_96_mib() {
    let _one = ONE_AT_A_TIME.lock().await;
    const TOKENS: usize = 500;
    let addr = gateway(logprobs_upstream(TOKENS, 20).await).await;
    let body = json!({"model": "m", "n": 16, "logprobs": true, "top_logprobs": 20, "stream": true,
                      "messages": [{"role": "user", "content": "count"}]});
    // A small request first: the gateway's lazily built state is part of idle.
    let warm = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
    let warmed = post_chat(addr, &warm).await;
    assert_eq!(warmed.status(), 200);
    let _ = warmed.bytes().await;

    // Streamed: read as it comes, counting each choice's tokens; nothing kept.
    let idle = Idle::now();
    let response = post_chat(addr, &body).await;
    assert_eq!(response.status(), 200);
    let mut reads = response.bytes_stream();
    let (mut carry, mut tokens, mut verbatim) = (Vec::<u8>::new(), [0usize; 16], 0usize);
    let done = tokio::time::timeout(Duration::from_secs(300), async {
        while let Some(read) = reads.next().await {
            carry.extend_from_slice(&read.unwrap());
            while let Some(end) = carry.windows(2).position(|w| w == b"\n\n") {
                let event: Vec<u8> = carry.drain(..end + 2).collect();
                let Some(data) = event.strip_prefix(b"data: ") else {
                    continue;
                };
                let Ok(chunk) = serde_json::from_slice::<Value>(data) else {
                    continue;
                };
                for c in chunk["choices"].as_array().into_iter().flatten() {
                    if let Some(content) = c["logprobs"]["content"].as_array() {
                        tokens[c["index"].as_u64().unwrap() as usize] += content.len();
                    }
                }
                let text = String::from_utf8_lossy(data);
                verbatim += usize::from(text.contains(r#""logprobs":{"content": [{"token": "w"#));
            }
        }
    })
    .await;
    assert!(done.is_ok(), "the stream ended");
    let streamed = idle.grew(&format!("native n=16 × {TOKENS} tokens × 20 top, streamed"));
    assert_eq!(
        tokens, [TOKENS; 16],
        "every token's log-probabilities passed through"
    );
    assert_eq!(verbatim, 16 * TOKENS, "as the upstream wrote them");

    // As one chat.completion: the answer's text is read whole, then parsed once the peak
    // is taken.
    let mut body = body;
    body["stream"] = json!(false);
    let idle = Idle::now();
    let response = post_chat(addr, &body).await;
    assert_eq!(response.status(), 200);
    let text = tokio::time::timeout(Duration::from_secs(300), response.bytes())
        .await
        .expect("the answer ends")
        .unwrap();
    let whole = idle.grew(&format!(
        "native n=16 × {TOKENS} tokens × 20 top, one chat.completion of {} MiB",
        text.len() as u64 / MIB
    ));
    assert!(
        String::from_utf8_lossy(&text)
            .contains(r#""logprobs":{"content":[{"token": "w0", "logprob": -0.050000"#),
        "merged, each token's text as sent"
    );
    let v: Value = serde_json::from_slice(&text).unwrap();
    drop(text);
    for (i, choice) in v["choices"].as_array().unwrap().iter().enumerate() {
        let content = choice["logprobs"]["content"].as_array().unwrap();
        assert_eq!(content.len(), TOKENS, "choice {i}");
        assert_eq!(content[1]["top_logprobs"].as_array().unwrap().len(), 20);
        assert_eq!(
            choice["message"]["content"]
                .as_str()
                .map(|t| t.ends_with("Answer: 42.")),
            Some(true)
        );
    }
    for (what, (rss, heap)) in [("streamed", streamed), ("one chat.completion", whole)] {
        assert!(
            rss < 96 * MIB && heap < 96 * MIB,
            "{what}: the process grew by {} MiB resident, {} MiB of heap",
            rss / MIB,
            heap / MIB
        );
    }
}

/// A confidence vote of 16 samples × 1,000 tokens with 20 top log-probabilities: under
/// 128 MiB above idle; the upstreams are asked for them, the vote is weighted by them, and
/// the client, who did not ask, gets none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_confidence_vote_keeps_only_numbers_within_128_mib() {
    let _one = ONE_AT_A_TIME.lock().await;
    const TOKENS: usize = 1000;
    let addr = gateway(logprobs_upstream(TOKENS, 20).await).await;
    let warm = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
    let warmed = post_chat(addr, &warm).await;
    assert_eq!(warmed.status(), 200);
    let _ = warmed.bytes().await;

    let body = json!({"model": "m", "messages": [{"role": "user", "content": "count"}],
        "choicewise": {"samples": 16, "select": "vote", "vote_by": "Answer: (\\d+)",
                       "confidence": {"measure": "top_k", "warmup": 16, "top_logprobs": 20}}});
    let idle = Idle::now();
    let response = post_chat(addr, &body).await;
    assert_eq!(response.status(), 200);
    let v: Value = tokio::time::timeout(Duration::from_secs(300), response.json())
        .await
        .expect("the vote ends")
        .unwrap();
    let (rss, heap) = idle.grew(&format!(
        "confidence vote, 16 samples × {TOKENS} tokens × 20 top"
    ));
    let content = v["choices"][0]["message"]["content"]
        .as_str()
        .unwrap_or_default();
    assert!(
        content.ends_with("Answer: 42."),
        "{}",
        &v.to_string()[..500.min(v.to_string().len())]
    );
    assert!(
        v["choices"][0]["logprobs"].is_null(),
        "the client did not ask"
    );
    let report = &v["choicewise"]["confidence"];
    assert_eq!(
        report["warmup"].as_array().map(Vec::len),
        Some(16),
        "{report}"
    );
    // Each sure token: -(−0.05 − Σ_{j=1..19} (9.5 + j)) / 20.
    let sure = (0.05 + (1..20).map(|j| 9.5 + j as f64).sum::<f64>()) / 20.0;
    let weight = report["weights"]["42"].as_f64().unwrap();
    assert!((weight - 16.0 * sure).abs() < 1e-6, "{report}");
    assert!(
        rss < 128 * MIB && heap < 128 * MIB,
        "the process grew by {} MiB resident, {} MiB of heap",
        rss / MIB,
        heap / MIB
    );
}
