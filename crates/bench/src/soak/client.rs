//! The soak's clients: one request of the mix sent and read to its end (what it received,
//! checked later), one hostile upload to the keyless gateway, and the upstream's and the
//! gateway's own counters read over HTTP.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::Value;

use super::mix::{Case, ClientFault, body};
use crate::procs;
use crate::upstream::Snapshot;

/// What a client received.
#[derive(Debug, Default)]
pub(super) struct Outcome {
    pub(super) status: u16,
    /// The error answer's code, or a transport error.
    pub(super) error: Option<String>,
    pub(super) read_to_end: bool,
    pub(super) done: bool,
    /// Per output choice: its text, its finish_reason, its `choicewise.error`.
    pub(super) choices: BTreeMap<u64, (String, Option<String>, Option<String>)>,
    pub(super) hung: bool,
    /// A byte read held the upstreams' key.
    pub(super) leaked: bool,
    /// `x-choicewise-tries`, and the time to the answer's headers.
    pub(super) tries: Option<u64>,
    pub(super) headers_after: Duration,
}

fn apply_choice(out: &mut Outcome, element: &Value, message: bool) {
    let index = element.get("index").and_then(Value::as_u64).unwrap_or(999);
    let entry = out.choices.entry(index).or_default();
    let content = if message {
        element.pointer("/message/content")
    } else {
        element.pointer("/delta/content")
    };
    if let Some(t) = content.and_then(Value::as_str) {
        entry.0.push_str(t);
    }
    if let Some(f) = element.get("finish_reason").and_then(Value::as_str) {
        entry.1 = Some(f.to_string());
    }
    if let Some(e) = element.pointer("/choicewise/error").and_then(Value::as_str) {
        entry.2 = Some(e.to_string());
    }
}

pub(super) async fn one(client: &reqwest::Client, url: &str, c: &Case) -> Outcome {
    let mut out = Outcome::default();
    let sent = Instant::now();
    let resp = match client
        .post(url)
        .header("content-type", "application/json")
        .body(body(c))
        .send()
        .await
    {
        Ok(r) => r,
        Err(e) => {
            out.error = Some(format!("transport: {e}"));
            return out;
        }
    };
    out.status = resp.status().as_u16();
    out.headers_after = sent.elapsed();
    out.tries = (resp.headers().get("x-choicewise-tries"))
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok());
    if out.status != 200 {
        let text = resp.text().await.unwrap_or_default();
        out.leaked |= text.contains(procs::SOAK_KEY);
        let code = serde_json::from_str::<Value>(&text)
            .ok()
            .and_then(|v| {
                v.pointer("/error/code")
                    .and_then(Value::as_str)
                    .map(str::to_string)
            })
            .unwrap_or_else(|| "-".into());
        out.error = Some(code);
        return out;
    }
    if !c.stream {
        match resp.bytes().await {
            Ok(b) => {
                out.leaked |= memchr::memmem::find(&b, procs::SOAK_KEY.as_bytes()).is_some();
                out.read_to_end = true;
                out.done = true;
                if let Ok(v) = serde_json::from_slice::<Value>(&b) {
                    for ch in v["choices"].as_array().into_iter().flatten() {
                        apply_choice(&mut out, ch, true);
                    }
                }
            }
            Err(e) => out.error = Some(format!("transport: {e}")),
        }
        return out;
    }
    let mut reads = resp.bytes_stream();
    let mut carry: Vec<u8> = Vec::new();
    let mut events = 0usize;
    while let Some(read) = reads.next().await {
        let read = match read {
            Ok(r) => r,
            Err(e) => {
                out.error = Some(format!("transport mid-stream: {e}"));
                return out;
            }
        };
        carry.extend_from_slice(&read);
        out.leaked |= memchr::memmem::find(&carry, procs::SOAK_KEY.as_bytes()).is_some();
        while let Some(end) = memchr::memmem::find(&carry, b"\n\n") {
            let event: Vec<u8> = carry.drain(..end + 2).collect();
            let Some(data) = event.strip_prefix(b"data: ") else {
                continue;
            };
            let data = &data[..data.len() - 2];
            if data == b"[DONE]" {
                out.done = true;
                continue;
            }
            events += 1;
            match serde_json::from_slice::<Value>(data) {
                Ok(v) => {
                    for ch in v["choices"].as_array().into_iter().flatten() {
                        apply_choice(&mut out, ch, false);
                    }
                }
                Err(_) => out.error = Some("an event that is not JSON".into()),
            }
        }
        match c.client {
            ClientFault::Disconnect(after) if events >= after => return out,
            ClientFault::Slow => tokio::time::sleep(Duration::from_millis(10)).await,
            _ => {}
        }
    }
    out.read_to_end = true;
    out
}

/// One hostile upload to the keyless gateway at `addr` (`host:port`), of kind `k % 3`: a
/// declared body over `max_body_bytes` (413 at once), a `text/plain` POST (415), a body that
/// never arrives (408 after `body_read_timeout_s`). `None` when answered so, else what came.
pub(super) async fn hostile(addr: &str, k: usize) -> Option<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (head, body, expect) = match k % 3 {
        0 => (
            "content-type: application/json\r\ncontent-length: 9000000",
            "",
            "413",
        ),
        1 => ("content-type: text/plain\r\ncontent-length: 2", "{}", "415"),
        _ => (
            "content-type: application/json\r\ncontent-length: 1000",
            "{\"model\":",
            "408",
        ),
    };
    let request =
        format!("POST /v1/chat/completions HTTP/1.1\r\nhost: {addr}\r\n{head}\r\n\r\n{body}");
    let answer = async {
        let mut tcp = tokio::net::TcpStream::connect(addr).await.ok()?;
        tcp.write_all(request.as_bytes()).await.ok()?;
        let mut buf = vec![0; 512];
        let n = tcp.read(&mut buf).await.ok()?;
        Some(String::from_utf8_lossy(&buf[..n]).to_string())
    };
    match tokio::time::timeout(Duration::from_secs(8), answer).await {
        Ok(Some(a)) if a.starts_with(&format!("HTTP/1.1 {expect}")) => None,
        Ok(Some(a)) => Some(format!(
            "expected {expect}, got {:?}",
            a.lines().next().unwrap_or("")
        )),
        Ok(None) => Some(format!("expected {expect}, the connection failed")),
        Err(_) => Some(format!("expected {expect}, nothing within 8 s")),
    }
}

pub(super) async fn upstream_stats(client: &reqwest::Client, upstream: &str) -> Snapshot {
    match client.get(format!("{upstream}/stats")).send().await {
        Ok(r) => r.json().await.unwrap_or_default(),
        Err(_) => Snapshot::default(),
    }
}

pub(super) async fn gateway_gauge(
    client: &reqwest::Client,
    gateway: &str,
    name: &str,
) -> Option<f64> {
    let text = client
        .get(format!("{gateway}/metrics"))
        .send()
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    text.lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
}
