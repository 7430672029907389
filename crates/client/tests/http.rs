//! The client over real loopback HTTP against choicewise-testserver: fixtures served with
//! hostile write boundaries, the Azure and OpenAI request shapes, error statuses, the retry
//! policy, and the failure modes of a stream (cut, stalled, abandoned).

use std::time::{Duration, Instant};

use choicewise_client::{Client, ClientError, ClientErrorKind};
use choicewise_core::{Completions, ErrorDetail, Source};
use choicewise_test_support::within;
use choicewise_testserver::{Failure, TestServer, TestServerBuilder, fixture, fixture_path};
use futures::TryStreamExt;
use serde_json::{Value, json};

/// Every test is bounded: a hang fails instead of blocking the suite.
const LIMIT: Duration = Duration::from_secs(15);

fn request() -> Value {
    json!({
        "model": "gpt-4o-mini",
        "n": 3,
        "stream": false,
        "messages": [{"role": "user", "content": "What should I pack for Lisbon?"}],
    })
}

fn client(server: &TestServer) -> Client {
    Client::builder()
        .base_url(server.base_url())
        .api_key("sk-test")
        .build()
        .unwrap()
}

/// A server whose writes are cut at random (inside lines and UTF-8 characters), delayed a
/// little, with keep-alive comments between events.
/// The server's answer to `request()` as a stream, within the limit.
async fn chat(server: &TestServer) -> Completions {
    within(LIMIT, "chat", client(server).chat(request()))
        .await
        .unwrap()
}

fn hostile(name: &str, seed: u64) -> TestServerBuilder {
    TestServer::builder()
        .fixture(name)
        .seed(seed)
        .random_writes(1, 96)
        .max_write_delay(Duration::from_micros(300))
        .pings(3)
}

/// The well-formed fixtures: served over HTTP, the same `collect()` as read from the file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fixtures_over_http_equal_the_file() {
    let fixtures = [
        "openai_n3_tools.sse",
        "vllm_n4_reasoning.sse",
        "azure_filters.sse",
        "demo.sse",
        "answer_question.sse",
        "quirks_wire.sse",
        "multi_choice_chunk.sse",
        "openai_refusal.sse",
        "deepseek_reasoning_content.sse",
    ];
    let runs = fixtures.iter().enumerate().map(|(seed, name)| async move {
        let server = hostile(name, seed as u64).start().await.unwrap();
        let completions = client(&server).chat(request()).await.unwrap();
        let over_http = completions.collect().await;
        let file = tokio::fs::File::open(fixture_path(name)).await.unwrap();
        let reference = Completions::new(Source::reader(file).request(request()))
            .collect()
            .await;
        let (ours, theirs) = match (over_http, reference) {
            (Ok(a), Ok(b)) => (a, b),
            (a, b) => panic!(
                "{name}: over HTTP {:?}, from the file {:?}",
                a.err(),
                b.err()
            ),
        };
        assert_eq!(
            serde_json::to_value(&ours).unwrap(),
            serde_json::to_value(&theirs).unwrap(),
            "{name}"
        );
        assert_eq!(server.request_count(), 1, "{name}");
        assert_eq!(server.disconnects(), 0, "{name}");
    });
    within(LIMIT, "the requests", futures::future::join_all(runs)).await;
}

/// The test server really cuts the body into small reads, inside UTF-8 characters, with
/// keep-alive comments: otherwise the equality above would prove little.
#[tokio::test]
async fn the_body_arrives_in_hostile_pieces() {
    use futures::StreamExt;
    let server = hostile("openai_n3_tools.sse", 1).start().await.unwrap();
    let request = request();
    let body = within(LIMIT, "send", client(&server).stream(&request))
        .await
        .unwrap();
    let pieces: Vec<_> = within(LIMIT, "the body", body.collect::<Vec<_>>()).await;
    let pieces: Vec<_> = pieces.into_iter().map(Result::unwrap).collect();
    assert!(pieces.len() > 100, "{} reads", pieces.len());
    let split_chars = pieces
        .iter()
        .filter(|p| std::str::from_utf8(p).is_err())
        .count();
    assert!(
        split_chars > 5,
        "{split_chars} reads end inside a character"
    );
    let body: Vec<u8> = pieces.concat();
    let text = String::from_utf8(body).unwrap();
    assert!(text.contains(": ping\n\n"));
    assert_eq!(
        text.replace(": ping\n\n", "").as_bytes(),
        fixture("openai_n3_tools.sse")
    );
}

/// The per-choice streams see the same text over HTTP as the message they assemble.
#[tokio::test]
async fn choices_stream_over_http() {
    let server = hostile("demo.sse", 99).start().await.unwrap();
    let completions = chat(&server).await;
    let choice = within(LIMIT, "choice 2", completions.choice(2))
        .await
        .unwrap();
    let text: Vec<_> = within(LIMIT, "content", choice.content().try_collect())
        .await
        .unwrap();
    let output = within(LIMIT, "message", choice.message()).await.unwrap();
    assert_eq!(Some(text.concat()), output.message.content);
    assert!(text.len() > 50, "{}", text.len());
}

#[tokio::test]
async fn openai_request_shape() {
    let server = TestServer::builder()
        .fixture("demo.sse")
        .api_key("sk-test")
        .start()
        .await
        .unwrap();
    let client = Client::builder()
        .base_url(server.base_url())
        .api_key("sk-test")
        .header("OpenAI-Organization", "org-123")
        .build()
        .unwrap();
    let completions = within(LIMIT, "chat", client.chat(request())).await.unwrap();
    within(LIMIT, "collect", completions.collect())
        .await
        .unwrap();
    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    let r = &requests[0];
    assert_eq!(r.method, "POST");
    assert_eq!(r.path, "/v1/chat/completions");
    assert_eq!(r.query, None);
    assert_eq!(r.header("authorization"), Some("Bearer sk-test"));
    assert_eq!(r.header("api-key"), None);
    assert_eq!(r.header("accept"), Some("text/event-stream"));
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(r.header("openai-organization"), Some("org-123"));
    let mut expected = request();
    expected["stream"] = json!(true);
    expected["stream_options"] = json!({"include_usage": true});
    assert_eq!(
        r.json.as_ref(),
        Some(&expected),
        "stream forced to true, the provider's usage asked for"
    );
}

#[tokio::test]
async fn azure_request_shape() {
    let server = TestServer::builder()
        .fixture("azure_filters.sse")
        .api_key("azure-key")
        .start()
        .await
        .unwrap();
    let client = Client::builder()
        .base_url(server.azure_base_url("gpt-4o-prod"))
        .azure("2024-10-21")
        .api_key("azure-key")
        .build()
        .unwrap();
    let completions = within(LIMIT, "chat", client.chat(request())).await.unwrap();
    let whole = within(LIMIT, "collect", completions.collect())
        .await
        .unwrap();
    assert_eq!(whole.choices.len(), 2);
    let r = &server.requests()[0];
    assert_eq!(r.path, "/openai/deployments/gpt-4o-prod/chat/completions");
    assert_eq!(r.query.as_deref(), Some("api-version=2024-10-21"));
    assert_eq!(r.header("api-key"), Some("azure-key"));
    assert_eq!(r.header("authorization"), None);
    assert_eq!(r.json.as_ref().unwrap()["stream"], true);
    // The provider's usage is asked for, as the CLI and Python ask for it.
    assert_eq!(
        r.json.as_ref().unwrap()["stream_options"],
        serde_json::json!({"include_usage": true})
    );
}

#[tokio::test]
async fn wrong_key_is_401_not_retried() {
    let server = TestServer::builder()
        .fixture("demo.sse")
        .api_key("sk-right")
        .start()
        .await
        .unwrap();
    let client = Client::builder()
        .base_url(server.base_url())
        .api_key("sk-wrong")
        .build()
        .unwrap();
    let err = within(LIMIT, "chat", client.chat(request()))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ClientErrorKind::Status, "{err:?}");
    assert_eq!(err.status(), Some(401));
    assert!(
        err.message().starts_with("Incorrect API key provided"),
        "{err}"
    );
    let body = err.body().unwrap();
    assert_eq!(body["error"]["code"], "invalid_api_key");
    assert_eq!(body["error"]["type"], "invalid_request_error");
    assert_eq!(server.request_count(), 1);
}

#[tokio::test]
async fn server_error_500_not_retried() {
    let server = TestServer::builder()
        .fail(Failure::status(500).message("boom").code(Some("internal")))
        .start()
        .await
        .unwrap();
    let err = within(LIMIT, "send", client(&server).chat(request()))
        .await
        .unwrap_err();
    assert_eq!((err.status(), err.message()), (Some(500), "boom"));
    assert_eq!(err.body().unwrap()["error"]["code"], "internal");
    assert_eq!(err.to_string(), "the provider answered 500: boom");
    assert_eq!(server.request_count(), 1);
}

#[tokio::test]
async fn non_json_error_body_is_the_message() {
    let server = TestServer::builder()
        .fail(Failure::status(502).text_body("upstream unavailable\n"))
        .start()
        .await
        .unwrap();
    let err = within(LIMIT, "send", client(&server).chat(request()))
        .await
        .unwrap_err();
    assert_eq!(
        (err.status(), err.message(), err.body()),
        (Some(502), "upstream unavailable", None),
        "{err:?}"
    );
    assert_eq!(server.request_count(), 1);
}

#[tokio::test]
async fn rate_limited_once_then_served() {
    let server = TestServer::builder()
        .fixture("openai_n3_tools.sse")
        .fail_first(1, Failure::status(429).retry_after("1"))
        .start()
        .await
        .unwrap();
    let started = Instant::now();
    let completions = chat(&server).await;
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(950), "{waited:?}");
    let whole = within(LIMIT, "collect", completions.collect())
        .await
        .unwrap();
    let file = Completions::new(Source::reader(
        tokio::fs::File::open(fixture_path("openai_n3_tools.sse"))
            .await
            .unwrap(),
    ));
    let reference = within(LIMIT, "collect", file.collect()).await.unwrap();
    assert_eq!(
        serde_json::to_value(&whole.choices).unwrap(),
        serde_json::to_value(&reference.choices).unwrap()
    );
    assert_eq!(server.request_count(), 2);
}

#[tokio::test]
async fn a_wait_past_the_cap_is_returned_at_once_not_retried() {
    // A spent budget: the server says no try passes for 30 days.
    let server = TestServer::builder()
        .fixture("demo.sse")
        .fail(Failure::status(429).retry_after("2592000"))
        .start()
        .await
        .unwrap();
    let client = Client::builder()
        .base_url(server.base_url())
        .max_retries(2)
        .build()
        .unwrap();
    let started = Instant::now();
    let err = within(LIMIT, "chat", client.chat(request()))
        .await
        .unwrap_err();
    assert_eq!(err.status(), Some(429), "{err:?}");
    assert_eq!(err.retry_after(), Some(Duration::from_secs(2_592_000)));
    assert_eq!(server.request_count(), 1, "not retried");
    assert!(started.elapsed() < Duration::from_secs(2), "no wait");
}

#[tokio::test]
async fn rate_limited_forever_gives_up_after_the_retries() {
    // No wait asked for: the backoff, capped, then the refusal.
    let server = TestServer::builder()
        .fixture("demo.sse")
        .fail(Failure::status(429))
        .start()
        .await
        .unwrap();
    let client = Client::builder()
        .base_url(server.base_url())
        .max_retries(2)
        .max_retry_wait(Duration::from_millis(50))
        .build()
        .unwrap();
    let started = Instant::now();
    let err = within(LIMIT, "chat", client.chat(request()))
        .await
        .unwrap_err();
    assert_eq!(err.status(), Some(429), "{err:?}");
    assert_eq!(err.body().unwrap()["error"]["code"], "rate_limit_exceeded");
    assert_eq!(server.request_count(), 3, "max_retries + 1 requests");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the backoff capped"
    );
}

#[tokio::test]
async fn overloaded_503_backs_off_and_recovers() {
    let server = TestServer::builder()
        .fixture("demo.sse")
        .fail_first(2, Failure::status(503))
        .start()
        .await
        .unwrap();
    let client = Client::builder()
        .base_url(server.base_url())
        .max_retry_wait(Duration::from_millis(20))
        .build()
        .unwrap();
    let completions = within(LIMIT, "chat", client.chat(request())).await.unwrap();
    assert_eq!(
        within(LIMIT, "collect", completions.collect())
            .await
            .unwrap()
            .choices
            .len(),
        3
    );
    assert_eq!(server.request_count(), 3);
}

#[tokio::test]
async fn no_retries_when_disabled() {
    let server = TestServer::builder()
        .fail(Failure::status(503))
        .start()
        .await
        .unwrap();
    let client = Client::builder()
        .base_url(server.base_url())
        .max_retries(0)
        .build()
        .unwrap();
    let err = within(LIMIT, "send", client.chat(request()))
        .await
        .unwrap_err();
    assert_eq!(err.status(), Some(503), "{err:?}");
    assert_eq!(server.request_count(), 1);
}

#[tokio::test]
async fn connection_refused_after_retries() {
    // A port that was just free: nothing listens there.
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let client = Client::builder()
        .base_url(format!("http://127.0.0.1:{port}/v1"))
        .max_retries(2)
        .max_retry_wait(Duration::from_millis(100))
        .build()
        .unwrap();
    let started = Instant::now();
    let err = within(LIMIT, "send", client.chat(request()))
        .await
        .unwrap_err();
    let elapsed = started.elapsed();
    assert_eq!(err.kind(), ClientErrorKind::Connect, "{err:?}");
    let url = format!("http://127.0.0.1:{port}/v1/chat/completions");
    assert_eq!(err.url(), Some(url.as_str()));
    assert_eq!(
        err.to_string(),
        format!("could not connect to {url}: connection refused")
    );
    // Two capped waits happened, and no more.
    assert!(elapsed >= Duration::from_millis(190), "{elapsed:?}");
    assert!(elapsed < Duration::from_secs(3), "{elapsed:?}");
}

#[tokio::test]
async fn connection_cut_mid_stream_keeps_what_came_before() {
    let body = fixture("openai_n3_tools.sse");
    let cut = body.len() / 2;
    let server = TestServer::builder()
        .fixture("openai_n3_tools.sse")
        .random_writes(1, 200)
        .close_after(cut)
        .start()
        .await
        .unwrap();
    let completions = chat(&server).await;
    let incomplete = within(LIMIT, "collect", completions.collect())
        .await
        .unwrap_err();
    // The chunked body is never terminated: reqwest reports a broken body, a transport error
    // at the offset where the data stopped.
    match incomplete.error.detail() {
        ErrorDetail::Transport { offset, .. } => assert_eq!(*offset, cut as u64),
        other => panic!("{other:?}"),
    }
    let reference = Completions::new(Source::reader(std::io::Cursor::new(body)));
    let full = within(LIMIT, "collect", reference.collect()).await.unwrap();
    // What arrived before the cut is kept: every choice's text is a prefix of the full one.
    assert!(!incomplete.partial.choices.is_empty());
    let mut kept = 0;
    for choice in &incomplete.partial.choices {
        let whole = &full.choices[choice.index as usize].message;
        if let Some(text) = &choice.message.content {
            assert!(whole.content.as_deref().unwrap().starts_with(text.as_str()));
            kept += text.len();
        }
    }
    assert!(kept > 0);
    assert_eq!(
        server.request_count(),
        1,
        "a started stream is never retried"
    );
}

#[tokio::test]
async fn stalled_stream_hits_the_idle_timeout() {
    let server = TestServer::builder()
        .fixture("demo.sse")
        .stall_after(4000)
        .start()
        .await
        .unwrap();
    let client = Client::builder()
        .base_url(server.base_url())
        .idle_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let started = Instant::now();
    let completions = within(LIMIT, "chat", client.chat(request())).await.unwrap();
    let incomplete = within(LIMIT, "collect", completions.collect())
        .await
        .unwrap_err();
    match incomplete.error.detail() {
        ErrorDetail::IdleTimeout { after, offset } => {
            assert_eq!(*after, Duration::from_millis(300));
            assert_eq!(*offset, 4000);
        }
        other => panic!("{other:?}"),
    }
    assert!(!incomplete.partial.choices.is_empty());
    assert!(started.elapsed() < Duration::from_secs(5));
    // The stalled connection is let go once the completion is dropped.
    drop(completions);
    drop(incomplete);
    within(LIMIT, "the client gone", server.client_gone()).await;
    assert_eq!(server.request_count(), 1);
}

#[tokio::test]
async fn dropping_the_server_cuts_a_stalled_stream() {
    let server = TestServer::builder()
        .fixture("demo.sse")
        .stall_after(2000)
        .start()
        .await
        .unwrap();
    let client = Client::builder()
        .base_url(server.base_url())
        .idle_timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let completions = within(LIMIT, "chat", client.chat(request())).await.unwrap();
    within(LIMIT, "choice 2", completions.choice(2))
        .await
        .unwrap();
    let started = Instant::now();
    drop(server);
    let incomplete = within(LIMIT, "collect", completions.collect())
        .await
        .unwrap_err();
    assert!(
        matches!(
            incomplete.error.detail(),
            ErrorDetail::Transport { offset: 2000, .. }
        ),
        "{:?}",
        incomplete.error
    );
    assert!(started.elapsed() < Duration::from_secs(3));
}

#[tokio::test]
async fn silent_server_times_out_waiting_for_headers() {
    // Accepts connections but never answers.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let hold = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    let client = Client::builder()
        .base_url(format!("http://{addr}/v1"))
        .idle_timeout(Duration::from_millis(200))
        .build()
        .unwrap();
    let err = within(LIMIT, "send", client.chat(request()))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ClientErrorKind::Timeout, "{err:?}");
    hold.abort();
}

#[tokio::test]
async fn dropping_everything_closes_the_connection() {
    let server = TestServer::builder()
        .fixture("demo.sse")
        .random_writes(8, 32)
        .max_write_delay(Duration::from_millis(2))
        .start()
        .await
        .unwrap();
    let completions = chat(&server).await;
    let choice = within(LIMIT, "choice 2", completions.choice(2))
        .await
        .unwrap();
    let mut text = choice.content();
    let first = within(LIMIT, "the first piece", text.try_next())
        .await
        .unwrap();
    assert!(first.is_some());
    assert_eq!(server.disconnects(), 0);
    drop((text, choice, completions));
    let started = Instant::now();
    within(
        Duration::from_secs(5),
        "the server seeing the client go away",
        server.client_gone(),
    )
    .await;
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(server.disconnects(), 1);
}

#[tokio::test]
async fn completions_from_any_http_body() {
    let server = hostile("vllm_n4_reasoning.sse", 5).start().await.unwrap();
    let response = reqwest::Client::new()
        .post(format!("{}/chat/completions", server.base_url()))
        .json(&json!({"model": "m", "stream": true}))
        .send()
        .await
        .unwrap();
    let completions = Completions::builder()
        .idle_timeout(Duration::from_secs(5))
        .start(Source::sse(response.bytes_stream()));
    let whole = within(LIMIT, "collect", completions.collect())
        .await
        .unwrap();
    assert_eq!(whole.choices.len(), 4);
    assert_eq!(whole.choices[1].finish_reason.as_deref(), Some("length"));
}

#[tokio::test]
async fn invalid_settings() {
    let kind = |r: Result<_, ClientError>| r.err().map(|e| e.kind());
    assert_eq!(
        kind(Client::builder().base_url("localhost:8000").build()),
        Some(ClientErrorKind::InvalidUrl)
    );
    assert_eq!(
        kind(Client::builder().api_key("bad\nkey").build()),
        Some(ClientErrorKind::InvalidHeader)
    );
    let client = Client::builder().build().unwrap();
    assert_eq!(
        client.chat(json!("text")).await.err().map(|e| e.kind()),
        Some(ClientErrorKind::InvalidRequest)
    );
    let debug = format!(
        "{:?}",
        Client::builder().api_key("sk-secret").build().unwrap()
    );
    assert!(!debug.contains("sk-secret"), "{debug}");
}

#[cfg(feature = "async-openai")]
mod async_openai {
    use async_openai::types::chat::CreateChatCompletionStreamResponse;
    use choicewise_client::async_openai_source;
    use choicewise_core::{Completions, Source};
    use choicewise_testserver::fixture;

    /// The chunks of a fixture as async-openai values (what its chat stream yields).
    fn chunks(name: &str) -> Vec<CreateChatCompletionStreamResponse> {
        let text = String::from_utf8(fixture(name)).unwrap();
        text.lines()
            .filter_map(|line| line.strip_prefix("data: "))
            .filter(|data| *data != "[DONE]")
            .map(|data| serde_json::from_str(data).unwrap())
            .collect()
    }

    #[tokio::test]
    async fn async_openai_stream_per_choice() {
        for name in ["openai_n3_tools.sse", "demo.sse", "answer_question.sse"] {
            let stream = futures::stream::iter(
                chunks(name)
                    .into_iter()
                    .map(Ok::<_, async_openai::error::OpenAIError>),
            );
            let ours = Completions::new(async_openai_source(stream))
                .collect()
                .await
                .unwrap();
            let reference = Completions::new(Source::reader(std::io::Cursor::new(fixture(name))))
                .collect()
                .await
                .unwrap();
            assert_eq!(
                serde_json::to_value(&ours).unwrap(),
                serde_json::to_value(&reference).unwrap(),
                "{name}"
            );
        }
    }

    #[tokio::test]
    async fn async_openai_error_ends_the_stream() {
        let mut items: Vec<Result<_, async_openai::error::OpenAIError>> =
            chunks("demo.sse").into_iter().take(20).map(Ok).collect();
        items.push(Err(async_openai::error::OpenAIError::InvalidArgument(
            "stream failed".into(),
        )));
        let incomplete = Completions::new(async_openai_source(futures::stream::iter(items)))
            .collect()
            .await
            .unwrap_err();
        assert!(
            matches!(incomplete.error.detail(), choicewise_core::ErrorDetail::Transport { message, .. } if message.contains("stream failed")),
            "{:?}",
            incomplete.error
        );
        assert!(!incomplete.partial.choices.is_empty());
    }
}
