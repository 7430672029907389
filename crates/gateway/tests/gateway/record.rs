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

use crate::common::{
    SSE_HEAD, chunk, fan_out_toml, metrics, no_env, reading_upstream, serve, stalled, start,
    upstream_toml,
};
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

/// The sum of the metric lines that start with `prefix` and hold `label`.
fn sum(text: &str, prefix: &str, label: &str) -> f64 {
    (text.lines())
        .filter(|l| l.starts_with(prefix) && l.contains(label))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// A Chat upstream's answer of three choices (`n = 3`) of which only choice 1 finishes:
/// no `[DONE]`, choices 0 and 2 left unfinished.
fn three_one_finished() -> Vec<u8> {
    let mut sse = String::new();
    for i in 0..3 {
        let delta = json!({"role": "assistant", "content": format!("choice {i}")});
        sse += &chunk(i, delta, Value::Null);
    }
    sse += &chunk(1, json!({}), json!("stop"));
    sse.into_bytes()
}

/// A Chat upstream's answer of one choice that never finishes (no `[DONE]`).
fn one_unfinished() -> Vec<u8> {
    let delta = json!({"role": "assistant", "content": "cut short"});
    chunk(0, delta, Value::Null).into_bytes()
}

/// An upstream request whose choices are left unfinished after its first byte is a `cut`
/// try, however its stream ended: cut mid-body (a chunked body never terminated), ended
/// cleanly without `[DONE]` (chunked), or a close-delimited body that just stops. Its log
/// line counts the try failed and names how the answer ended as the verdict says (a native
/// `n = 3` stream whose choice 1 finished is `complete`, its choices 0 and 2 failed; one
/// choice of a Messages or Responses answer left unfinished is `every_choice_failed`), and
/// `/metrics` counts the try `cut`. In every client API, streamed and not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_upstream_request_is_a_cut_try_as_the_verdict_says() {
    let _ = lines();
    let mut one = three_one_finished();
    one.extend_from_slice(chunk(0, json!({"content": " lost"}), Value::Null).as_bytes());
    let chunked_cut = start(TestServer::builder().body(one).close_after_events(4)).await;
    let clean_end = start(TestServer::builder().body(three_one_finished())).await;
    let close_delimited = reading_upstream(SSE_HEAD, three_one_finished).await;
    let single_cut = start(
        TestServer::builder()
            .body(one_unfinished())
            .close_after_events(1),
    )
    .await;
    let single_end = reading_upstream(SSE_HEAD, one_unfinished).await;
    let native = |name: &str, url: &str| {
        format!(
            "[[models]]\nname = \"{name}\"\n{}",
            upstream_toml("chat", url, "n = \"native\"")
        )
    };
    let toml = [
        native("chunked_cut", &chunked_cut.base_url()),
        native("clean_end", &clean_end.base_url()),
        native("close_delimited", &close_delimited),
        native("single_cut", &single_cut.base_url()),
        native("single_end", &single_end),
    ]
    .concat();
    let (addr, _) = serve(&toml, no_env).await;
    let mut n = 0;
    for (path, _) in APIS {
        let models: &[&str] = match path {
            "/v1/chat/completions" => &["chunked_cut", "clean_end", "close_delimited"],
            _ => &["single_cut", "single_end"],
        };
        for model in models {
            for stream in [true, false] {
                n += 1;
                let id = format!("cut-{n}");
                let what = format!("{path} {model} stream={stream}");
                let before = metrics(addr).await;
                let mut request = body(path, model);
                request["stream"] = json!(stream);
                if path == "/v1/chat/completions" {
                    request["n"] = json!(3);
                }
                let r = reqwest::Client::new()
                    .post(format!("http://{addr}{path}"))
                    .header("x-request-id", &id)
                    .json(&request)
                    .send()
                    .await
                    .unwrap();
                let status = r.status().as_u16();
                let text = r.text().await.unwrap();
                let (expected_status, ended) = match path {
                    // An answer (choice 1 finished), whose log says two choices failed.
                    "/v1/chat/completions" => (200, "some_choices_failed"),
                    _ if stream => (200, "every_choice_failed"),
                    _ => (502, "every_choice_failed"),
                };
                assert_eq!(status, expected_status, "{what}: {text}");
                if path == "/v1/chat/completions" {
                    // The client's choices: 0 and 2 failed, 1 finished, and the tries say so.
                    let finishes: Vec<String> = match stream {
                        true => {
                            let (chunks, done) = crate::common::sse_data(&text);
                            assert!(done, "{what}: {text}");
                            let mut f = vec![String::new(); 3];
                            for c in &chunks {
                                for choice in c["choices"].as_array().unwrap() {
                                    if let Some(reason) = choice["finish_reason"].as_str() {
                                        f[choice["index"].as_u64().unwrap() as usize] =
                                            reason.to_string();
                                    }
                                }
                            }
                            f
                        }
                        false => {
                            let v: Value = serde_json::from_str(&text).unwrap();
                            (v["choices"].as_array().unwrap().iter())
                                .map(|c| c["finish_reason"].as_str().unwrap().to_string())
                                .collect()
                        }
                    };
                    assert_eq!(finishes, ["error", "stop", "error"], "{what}: {text}");
                    assert!(text.contains(r#""outcome":"cut""#), "{what}: {text}");
                }
                let lines = logged(&id).await;
                assert_eq!(lines.len(), 1, "{what}: {lines:?}");
                let line = &lines[0];
                assert!(
                    line.contains(&format!("ended=\"{ended}\"")),
                    "{what}: {line}"
                );
                assert!(line.contains(" tries=2 "), "{what}: {line}");
                assert!(line.contains(" failed_tries=1 "), "{what}: {line}");
                let tries = format!("choicewise_upstream_tries_total{{model=\"{model}\",");
                let after = metrics(addr).await;
                for (outcome, more) in [("cut", 1.0), ("ok", 1.0)] {
                    let label = format!("outcome=\"{outcome}\"");
                    assert_eq!(
                        sum(&after, &tries, &label) - sum(&before, &tries, &label),
                        more,
                        "{what} {outcome}: {after}"
                    );
                }
                let answers = format!("choicewise_answers_total{{model=\"{model}\",");
                let label = format!("ended=\"{ended}\"");
                assert_eq!(
                    sum(&after, &answers, &label) - sum(&before, &answers, &label),
                    1.0,
                    "{what}: {after}"
                );
            }
        }
    }
}

/// An upstream's own refusal (a 404) is passed through and logged with its try, `4xx`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstreams_404_is_logged_with_its_try() {
    let _ = lines();
    let refusing = start(
        TestServer::builder().fail(
            choicewise_testserver::Failure::status(404)
                .message("no such model")
                .code(Some("model_not_found")),
        ),
    )
    .await;
    let toml = format!(
        "[[models]]\nname = \"m\"\n{}",
        fan_out_toml(&refusing.base_url(), "")
    );
    let (addr, _) = serve(&toml, no_env).await;
    for (k, (path, _)) in APIS.iter().enumerate() {
        let id = format!("upstream-404-{k}");
        let before = metrics(addr).await;
        let r = reqwest::Client::new()
            .post(format!("http://{addr}{path}"))
            .header("x-request-id", &id)
            .json(&body(path, "m"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 404, "{path}");
        assert_eq!(r.headers()["x-choicewise-tries"], "1", "{path}");
        let lines = logged(&id).await;
        assert_eq!(lines.len(), 1, "{path}: {lines:?}");
        let line = &lines[0];
        assert!(line.contains(" tries=1 failed_tries=1 "), "{path}: {line}");
        assert!(
            line.contains(r#"ended="model_not_found""#),
            "{path}: {line}"
        );
        let after = metrics(addr).await;
        let tries = "choicewise_upstream_tries_total{model=\"m\",";
        let refused = "outcome=\"4xx\"";
        assert_eq!(
            sum(&after, tries, refused) - sum(&before, tries, refused),
            1.0,
            "{path}: {after}"
        );
    }
}

/// The disconnect's cancel, for each body kind, in every client API: a client that leaves
/// its streamed answer mid-stream (its body holds the record), one that leaves while its
/// JSON answer waits for its sample (the handler holds it), and one that never reads its
/// refusal (a pick that found no choice: its body holds it). Each is recorded once, as its
/// verdict says (`client_gone`, `client_gone`, `no_choice`); the samples of the first two
/// are cancelled, their upstreams closed, what they had received counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_body_kind_is_recorded_once_and_a_gone_client_cancels() {
    let _ = lines();
    let stalling = start(stalled(1)).await;
    let cut = start(
        TestServer::builder()
            .body(one_unfinished())
            .close_after_events(1),
    )
    .await;
    let toml = format!(
        "[[models]]\nname = \"stalling\"\n{}\
         [[models]]\nname = \"cut\"\n[models.retry]\nattempts = 1\n\
         [models.choicewise]\nsamples = 2\nselect = \"vote\"\n{}",
        fan_out_toml(&stalling.base_url(), ""),
        fan_out_toml(&cut.base_url(), ""),
    );
    let (addr, _) = serve(&toml, no_env).await;
    let mut n = 0;
    let mut stalled_samples = 0;
    for (path, api) in APIS {
        for (kind, model, stream, ended, status) in [
            ("streamed", "stalling", true, "client_gone", "200"),
            ("json", "stalling", false, "client_gone", "499"),
            ("refusal", "cut", false, "no_choice", "502"),
        ] {
            n += 1;
            let id = format!("kind-{n}");
            let what = format!("{path} {kind}");
            let before = metrics(addr).await;
            let mut request = body(path, model);
            request["stream"] = json!(stream);
            let bytes = serde_json::to_vec(&request).unwrap();
            leave(addr, path, &id, &bytes, None, Duration::from_millis(500)).await;
            let lines = logged(&id).await;
            assert_eq!(lines.len(), 1, "{what}: {lines:?}");
            assert!(
                lines[0].contains(&format!("ended=\"{ended}\"")),
                "{what}: {}",
                lines[0]
            );
            let count = format!(
                "choicewise_requests_total{{model=\"{model}\",status=\"{status}\",api=\"{api}\"}}"
            );
            let after = metrics(addr).await;
            assert_eq!(
                value(&after, &count) - value(&before, &count),
                1.0,
                "{what}: {after}"
            );
            if model == "stalling" {
                stalled_samples += 1;
                // Its sample is cancelled, its upstream closed, what it had counted.
                let deadline = Instant::now() + Duration::from_secs(10);
                while stalling.disconnects() < stalled_samples && Instant::now() < deadline {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                assert_eq!(stalling.disconnects(), stalled_samples, "{what}");
                let cancelled = format!("choicewise_cancelled_tokens_total{{model=\"{model}\"}}");
                assert!(
                    value(&after, &cancelled) > value(&before, &cancelled),
                    "{what}: {after}"
                );
                assert!(
                    !lines[0].contains(" completion_tokens=0 "),
                    "{what}: {}",
                    lines[0]
                );
            } else {
                // Both samples cut: each a cut try.
                assert!(
                    lines[0].contains(" failed_tries=2 "),
                    "{what}: {}",
                    lines[0]
                );
            }
        }
    }
}
