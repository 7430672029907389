//! `max_answer_bytes` bounds each choice, not the answer: an upstream asked for 16 choices
//! in one request (native `n`) that sends one of them without end costs a bounded memory,
//! that choice alone fails, and the other fifteen finish. Loopback HTTP; the bound asserted
//! from the process's own figures (the counting allocator's peak, the resident set's growth
//! above idle: `/proc/self/status`' `VmHWM`, reset through `/proc/self/clear_refs`).

use std::net::SocketAddr;
use std::time::Duration;

use choicewise_test_support::within;
use serde_json::{Value, json};

use crate::ONE_AT_A_TIME;
use crate::common::{Endless, chunk, endless, no_env, post_chat, serve, status_bytes};

use crate::HEAP;

const LIMIT: Duration = Duration::from_secs(120);

const MIB: i64 = 1024 * 1024;

/// An upstream answering every request with 16 choices: choices 1 to 15 say a word and
/// finish, choice 0 sends 8 KiB deltas without end (as long as it is read).
async fn endless_choice() -> Endless {
    let mut first = String::new();
    for i in 1..16 {
        first.push_str(&chunk(
            i,
            json!({"role": "assistant", "content": "fine"}),
            Value::Null,
        ));
        first.push_str(&chunk(i, json!({}), json!("stop")));
    }
    endless(first).await
}

async fn post(addr: SocketAddr, body: &Value) -> Value {
    let response = within(LIMIT, "an answer", post_chat(addr, body)).await;
    assert_eq!(response.status(), 200);
    within(LIMIT, "its body", response.json()).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_endless_choice_of_sixteen_fails_alone_within_its_bound() {
    let _one = ONE_AT_A_TIME.lock().await;
    let upstream = endless_choice().await;
    let url = &upstream.url;
    let toml = format!(
        "[[models]]\nname = \"m\"\n[[models.upstreams]]\napi = \"chat\"\nbase_url = \"{url}\"\nmodel = \"up\"\nn = \"native\"\n"
    );
    let (addr, _) = serve(&toml, no_env).await;
    let user = json!([{"role": "user", "content": "hi"}]);
    // Warm: the connection pools and the gateway's lazily built state exist before the
    // figures start.
    let _ = post(
        addr,
        &json!({"model": "m", "n": 16, "messages": user, "max_tokens": 1}),
    )
    .await;
    let idle = status_bytes("VmRSS");
    let peak_reset = std::fs::write("/proc/self/clear_refs", "5").is_ok();
    let body = json!({"model": "m", "n": 16, "messages": user});
    let (v, heap) = HEAP.peak_during(post(addr, &body)).await;
    let rss = match peak_reset {
        true => status_bytes("VmHWM"),
        false => status_bytes("VmRSS"),
    } - idle;
    let (heap, rss) = (heap as f64 / MIB as f64, rss as f64 / MIB as f64);
    let sent = upstream.sent() as f64 / MIB as f64;
    eprintln!(
        "n = 16, one endless choice: heap peak +{heap:.1} MiB, resident +{rss:.1} MiB; the upstream sent {sent:.1} MiB in all"
    );
    let choices = v["choices"].as_array().unwrap();
    assert_eq!(choices.len(), 16, "{v:.400}");
    for c in choices {
        match c["index"].as_u64() {
            Some(0) => assert_eq!(c["finish_reason"], "error", "{c:.400}"),
            _ => {
                assert_eq!(c["finish_reason"], "stop", "{c:.400}");
                assert_eq!(c["message"]["content"], "fine", "{c:.400}");
            }
        }
    }
    let text = v.to_string();
    assert!(text.contains("max_choice_bytes"), "{:.2000}", choices[0]);
    assert!(heap < 96.0, "the heap grew by {heap:.1} MiB");
    assert!(rss < 96.0, "the resident set grew by {rss:.1} MiB");
}
