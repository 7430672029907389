//! Every request on record, whenever its client leaves: one count in
//! `choicewise_requests_total` and one log line, in every client API. A client that leaves
//! before any answer (its body still arriving, its samples opening, its vote undecided) is
//! counted with status 499 and logged `ended="client_gone"`, its samples cancelled and their
//! tokens counted; a refusal (an unknown model's 404) is logged with its code. Real loopback
//! HTTP: the client is a raw TCP connection that goes away.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use choicewise_testserver::{TestServer, answer};
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::common::{fan_out_toml, metrics, no_env, serve, stalled, start};
use crate::warnings::lines;

/// The client APIs, by path, and their `api` label.
const APIS: [(&str, &str); 3] = [
    ("/v1/chat/completions", "chat"),
    ("/v1/messages", "messages"),
    ("/v1/responses", "responses"),
];

/// A request body of model `m` for `path`.
fn body(path: &str, model: &str) -> Value {
    let user = json!([{"role": "user", "content": "hi"}]);
    match path {
        "/v1/messages" => json!({"model": model, "max_tokens": 64, "messages": user}),
        "/v1/responses" => json!({"model": model, "input": "hi"}),
        _ => json!({"model": model, "messages": user}),
    }
}

/// Sends a request's head (with this id) and the first `send` bytes of `body` (all of it
/// when `None`), waits `stay`, and goes away.
async fn leave(
    addr: SocketAddr,
    path: &str,
    id: &str,
    body: &[u8],
    send: Option<usize>,
    stay: Duration,
) {
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\nx-request-id: {id}\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    tcp.write_all(head.as_bytes()).await.unwrap();
    tcp.write_all(&body[..send.unwrap_or(body.len())])
        .await
        .unwrap();
    tokio::time::sleep(stay).await;
    drop(tcp);
}

/// The value of the metric line that starts with `prefix` (0 when there is none).
fn value(text: &str, prefix: &str) -> f64 {
    (text.lines())
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0.0)
}

/// The log lines naming request `id`, once there is one (within 10 s).
async fn logged(id: &str) -> Vec<String> {
    let lines = lines();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = String::from_utf8_lossy(&lines.0.lock().unwrap()).into_owned();
        let found: Vec<String> = (text.lines())
            .filter(|l| l.contains(&format!("request_id={id} ")) && l.contains(" request "))
            .map(str::to_string)
            .collect();
        if !found.is_empty() || Instant::now() > deadline {
            return found;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A client that leaves mid-body, while its samples open, or while its vote is undecided:
/// one 499 count under its model and one log line `ended="client_gone"` each, in every
/// client API; its samples' upstreams are closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_leaves_before_any_answer_is_counted_and_logged_once() {
    let _ = lines();
    // Model `opening`: its samples' heads come after 5 s. Model `voting`: a vote of three
    // samples that each stall after their first event.
    let slow = start(
        TestServer::builder()
            .body(answer("late"))
            .head_delay(Duration::from_secs(5)),
    )
    .await;
    let stalling = start(stalled(1)).await;
    let toml = format!(
        "[[models]]\nname = \"opening\"\n[models.choicewise]\nsamples = 2\nselect = \"vote\"\n{}\
         [[models]]\nname = \"voting\"\n[models.choicewise]\nsamples = 3\nselect = \"vote\"\n{}",
        fan_out_toml(&slow.base_url(), ""),
        fan_out_toml(&stalling.base_url(), ""),
    );
    let (addr, _) = serve(&toml, no_env).await;
    let mut n = 0;
    for (path, api) in APIS {
        for (model, when, send, stay) in [
            ("voting", "mid-body", Some(10), 200),
            ("opening", "while its samples open", None, 300),
            ("voting", "while its vote is undecided", None, 500),
        ] {
            n += 1;
            let id = format!("gone-{n}");
            let what = format!("{path} {when}");
            let before = metrics(addr).await;
            let bytes = serde_json::to_vec(&body(path, model)).unwrap();
            leave(addr, path, &id, &bytes, send, Duration::from_millis(stay)).await;
            let lines = logged(&id).await;
            assert_eq!(lines.len(), 1, "{what}: {lines:?}");
            assert!(
                lines[0].contains(r#"ended="client_gone""#),
                "{what}: {}",
                lines[0]
            );
            // Mid-body the model is not read yet.
            let named = if send.is_some() { "" } else { model };
            let gone = format!(
                "choicewise_requests_total{{model=\"{named}\",status=\"499\",api=\"{api}\"}}"
            );
            let after = metrics(addr).await;
            assert_eq!(
                value(&after, &gone) - value(&before, &gone),
                1.0,
                "{what}: {after}"
            );
        }
    }
    // The undecided votes' samples (three a request, three requests) were closed.
    let deadline = Instant::now() + Duration::from_secs(10);
    while stalling.disconnects() < 9 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(stalling.disconnects(), 9);
}

/// A request for a model that does not exist is answered 404 and logged with its code.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_model_is_logged() {
    let _ = lines();
    let upstream = start(TestServer::builder().body(answer("hi"))).await;
    let toml = format!(
        "[[models]]\nname = \"m\"\n{}",
        fan_out_toml(&upstream.base_url(), "")
    );
    let (addr, _) = serve(&toml, no_env).await;
    for (k, (path, _)) in APIS.iter().enumerate() {
        let id = format!("unknown-{k}");
        let r = reqwest::Client::new()
            .post(format!("http://{addr}{path}"))
            .header("x-request-id", &id)
            .json(&body(path, "nope"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 404, "{path}");
        let lines = logged(&id).await;
        assert_eq!(lines.len(), 1, "{path}: {lines:?}");
        assert!(
            lines[0].contains(r#"ended="model_not_found""#),
            "{path}: {}",
            lines[0]
        );
    }
}
