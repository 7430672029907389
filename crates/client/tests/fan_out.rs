//! Client fan-out against the loopback test server: K requests, one completion.

use std::future::IntoFuture;
use std::time::{Duration, Instant};

use choicewise_client::Client;
use choicewise_core::{Completions, ErrorDetail, Source};
use choicewise_test_support::within;
use choicewise_testserver::{Failure, TestServer, TestServerBuilder, answer};
use futures::StreamExt;
use serde_json::{Value, json};

/// An answer that begins, then stalls (the connection kept open).
fn stalled() -> TestServerBuilder {
    TestServer::builder()
        .body(answer("thinking about it"))
        .stall_after_events(1)
}

/// The client closes `n` stalled connections within a second of the decision.
async fn stalled_closed_within_a_second(server: &TestServer, n: usize) {
    within(
        Duration::from_secs(1),
        "the stalled connections closing",
        server.wait_disconnects(n),
    )
    .await;
}

fn request() -> Value {
    json!({"model": "m", "messages": [{"role": "user", "content": "What is 6 × 7?"}]})
}

/// How long a test waits for the answers of the loopback server.
const ANSWERED: Duration = Duration::from_secs(10);

/// `copies` requests of the same body, one completion.
fn fan_out(client: &Client, request: Value, copies: usize) -> Completions {
    Completions::builder().fan_out((0..copies).map(|_| client.source(request.clone())))
}

/// `copies` requests of the same body, each sent once the one before it was answered (so
/// that request k gets the test server's answer k).
fn in_turn(client: &Client, request: Value, copies: usize) -> Completions {
    let mut previous: Option<tokio::sync::oneshot::Receiver<()>> = None;
    let sources = (0..copies).map(|_| {
        let (answered, next) = tokio::sync::oneshot::channel();
        let wait = previous.replace(next);
        let (client, body) = (client.clone(), request.clone());
        Source::open(async move {
            if let Some(wait) = wait {
                let _ = wait.await;
            }
            let reads = client.stream(&body).await;
            let _ = answered.send(());
            Ok::<_, choicewise_client::ClientError>(Source::sse(reads?))
        })
        .n(1)
        .request(request.clone())
    });
    Completions::builder().fan_out(sources.collect::<Vec<_>>())
}

fn client(server: &TestServer) -> Client {
    Client::builder()
        .base_url(server.base_url())
        .build()
        .unwrap()
}

#[tokio::test]
async fn three_requests_one_completion() {
    let server = TestServer::builder()
        .body(answer("a"))
        .then(TestServer::builder().body(answer("b")))
        .then(TestServer::builder().body(answer("c")))
        .start()
        .await
        .unwrap();
    let mut one = request();
    one["n"] = json!(1);
    let completion = within(
        ANSWERED,
        "collect",
        fan_out(&client(&server), one, 3).collect(),
    )
    .await
    .unwrap();
    let requests = server.requests();
    assert_eq!(requests.len(), 3);
    for r in &requests {
        let body = r.json.as_ref().unwrap();
        assert_eq!(
            (body["n"].clone(), body["stream"].clone()),
            (json!(1), json!(true))
        );
    }
    let indexes: Vec<u32> = completion.choices.iter().map(|c| c.index).collect();
    assert_eq!(indexes, [0, 1, 2]);
    let mut texts: Vec<&str> = completion
        .choices
        .iter()
        .map(|c| c.message.content.as_deref().unwrap())
        .collect();
    texts.sort_unstable();
    assert_eq!(texts, ["a", "b", "c"]);
}

#[tokio::test]
async fn first_finished_closes_the_stalled_connections() {
    let server = TestServer::builder()
        .body(answer("fast"))
        .delay(Duration::from_millis(200))
        .then(stalled())
        .then(stalled())
        .start()
        .await
        .unwrap();
    let started = Instant::now();
    let completions = fan_out(&client(&server), request(), 3);
    let selection = within(
        ANSWERED,
        "first_finished",
        completions.first_finished().into_future(),
    )
    .await;
    assert_eq!(selection.selected.len(), 1);
    assert_eq!(selection.cancelled.len(), 2);
    // The stalled connections are closed by the client, within a second of the decision.
    stalled_closed_within_a_second(&server, 2).await;
    assert!(started.elapsed() < Duration::from_secs(5));
    let winner = selection.selected[0];
    let completion = completions.collect().await.unwrap();
    let won = &completion.choices[winner as usize];
    assert_eq!(won.message.content.as_deref(), Some("fast"));
    assert!(completion.choices.iter().filter(|c| c.cancelled).count() == 2);
    assert!(completions.outcome().await.is_ok());
}

#[tokio::test]
async fn vote_decided_after_three_agree() {
    let server = TestServer::builder()
        .body(answer("42"))
        .then(stalled())
        .then(TestServer::builder().body(answer(" 42\n")))
        .then(stalled())
        .then(TestServer::builder().body(answer("42")))
        .start()
        .await
        .unwrap();
    let completions = fan_out(&client(&server), request(), 5);
    let key = |o: &choicewise_core::ChoiceOutput| {
        o.message.content.as_deref().map(|t| t.trim().to_string())
    };
    let selection = within(ANSWERED, "vote", completions.vote(key).into_future()).await;
    let tally = selection.vote.clone().unwrap();
    assert_eq!(
        (
            tally.key.as_str(),
            tally.votes,
            tally.counted,
            tally.choices
        ),
        ("42", 3, 3, 5)
    );
    assert_eq!(selection.selected.len(), 3);
    assert_eq!(selection.cancelled.len(), 2);
    stalled_closed_within_a_second(&server, 2).await;
    let completion = completions.collect().await.unwrap();
    for i in &selection.selected {
        let content = completion.choices[*i as usize].message.content.as_deref();
        assert_eq!(content.map(str::trim), Some("42"));
    }
}

#[tokio::test]
async fn a_failing_upstream_fails_only_its_choices() {
    let healthy = answer("fine");
    let server = TestServer::builder()
        .body(healthy.clone())
        .then(TestServer::builder().fail(Failure::status(500)))
        .then(
            TestServer::builder()
                .body(healthy.clone())
                .close_after_events(1),
        )
        .then(TestServer::builder().body(healthy))
        .start()
        .await
        .unwrap();
    // One at a time, so that request k gets answer k.
    let completions = in_turn(&client(&server), request(), 4);
    let incomplete = within(ANSWERED, "collect", completions.collect())
        .await
        .unwrap_err();
    let choices = &incomplete.partial.choices;
    assert_eq!(choices.len(), 4, "every requested choice is listed");
    let finished: Vec<u32> = choices
        .iter()
        .filter(|c| c.finish_reason.as_deref() == Some("stop"))
        .map(|c| c.index)
        .collect();
    assert_eq!(finished, [0, 3]);
    assert_eq!(choices[2].message.content.as_deref(), Some("fine"));
    let errors = completions.choice_errors().await;
    let failed: Vec<u32> = errors.iter().map(|(i, _)| *i).collect();
    assert_eq!(failed, [1, 2]);
    match errors[0].1.detail() {
        ErrorDetail::UpstreamFailed { upstream: 1, error } => {
            assert!(
                matches!(error.detail(), ErrorDetail::Open { .. }),
                "{error}"
            );
            assert!(error.to_string().contains("500"), "{error}");
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        errors[1].1.detail(),
        ErrorDetail::UpstreamFailed { upstream: 2, .. }
    ));
    // The refused request used no tokens; the others are estimated (none reported usage).
    let usage = completions.usage().await;
    let totals: Vec<u64> = usage.upstreams.iter().map(|u| u.total_tokens).collect();
    assert_eq!(totals.len(), 4);
    assert_eq!(totals[1], 0);
    assert!(
        totals[0] > 0 && totals[2] > 0 && totals[3] > 0,
        "{totals:?}"
    );
}

#[tokio::test]
async fn dropping_everything_closes_every_upstream() {
    let server = stalled().start().await.unwrap();
    let completions = fan_out(&client(&server), request(), 4);
    // Every request is streaming.
    let mut choices = completions.choices();
    for _ in 0..4 {
        within(ANSWERED, "a choice", choices.next()).await.unwrap();
    }
    drop(choices);
    drop(completions);
    within(
        Duration::from_secs(5),
        "every connection closing",
        server.wait_disconnects(4),
    )
    .await;
}

#[tokio::test]
async fn concurrency_limits_the_requests_in_flight() {
    let server = stalled().start().await.unwrap();
    let client = Client::builder()
        .base_url(server.base_url())
        .max_concurrent_requests(2)
        .build()
        .unwrap();
    let completions = fan_out(&client, request(), 5);
    let mut choices = completions.choices();
    for _ in 0..2 {
        within(ANSWERED, "a choice", choices.next()).await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(server.request_count(), 2, "only two slots");
    // Cancelling both frees their slots: the next requests go out.
    completions.choice(0).await.unwrap().cancel();
    within(Duration::from_secs(5), "a choice", choices.next())
        .await
        .unwrap();
    assert_eq!(server.request_count(), 3);
}

#[tokio::test]
async fn usage_sums_each_request() {
    let with_usage = answer("x").replace(
        "data: [DONE]",
        "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":2,\"total_tokens\":12}}\n\ndata: [DONE]",
    );
    let server = TestServer::builder()
        .body(with_usage.clone())
        .start()
        .await
        .unwrap();
    let completions = fan_out(&client(&server), request(), 3);
    let usage = within(ANSWERED, "usage", completions.usage()).await;
    assert_eq!((usage.prompt_tokens, usage.completion_tokens), (30, 6));
    assert_eq!(usage.upstreams.len(), 3);
}
