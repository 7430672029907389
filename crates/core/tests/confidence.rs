//! Confidence-guided sampling (DeepConf online): each choice's log-probabilities as typed
//! tokens, and the vote that stops unsure samples while they stream and weighs the rest by
//! confidence. Every sample here is a scripted stream whose tokens carry known top-k
//! log-probabilities, so each token's confidence is known: a token whose top-2 are
//! `-(c - 1)` and `-(c + 1)` has confidence exactly `c`.

use choicewise_core::{Completions, SampleConfidence, Source};
use futures::{StreamExt, TryStreamExt};
use serde_json::{Value, json};

/// The top-2 log-probabilities of a token of confidence `c` (`c >= 1`).
fn top2(token: &str, c: f64) -> Value {
    json!({"token": token, "logprob": -(c - 1.0), "top_logprobs": [
        {"token": token, "logprob": -(c - 1.0)},
        {"token": "~", "logprob": -(c + 1.0)},
    ]})
}

/// One SSE event: a content delta of `text` whose one token has confidence `c`.
fn token_event(index: u32, text: &str, c: f64) -> String {
    let chunk = json!({"choices": [{"index": index, "delta": {"content": text},
        "logprobs": {"content": [top2(text, c)]}, "finish_reason": null}]});
    format!("data: {chunk}\n\n")
}

/// The finishing event of a choice.
fn finish_event(index: u32) -> String {
    let chunk = json!({"choices": [{"index": index, "delta": {}, "finish_reason": "stop"}]});
    format!("data: {chunk}\n\n")
}

#[tokio::test]
async fn logprobs_are_typed_tokens_that_replay_and_tolerate_garbage() {
    let odd = json!({"choices": [{"index": 0, "delta": {"content": "?"},
        "logprobs": {"content": [7, {"token": "?", "top_logprobs": "bad"}]}}]});
    let not_an_object = json!({"choices": [{"index": 0, "delta": {"content": "!"},
        "logprobs": "not logprobs"}]});
    let sse = [
        token_event(0, "a", 3.0),
        format!("data: {odd}\n\n"),
        format!("data: {not_an_object}\n\n"),
        token_event(0, "b", 5.0),
        finish_event(0),
    ]
    .concat();
    let completions = Completions::new(Source::reader(std::io::Cursor::new(sse)));
    let choice = completions.choice(0).await.unwrap();
    let tokens: Vec<_> = choice.logprobs().try_collect().await.unwrap();
    let names: Vec<&str> = tokens.iter().map(|t| t.token.as_str()).collect();
    assert_eq!(names, ["a", "?", "b"]);
    let confidences: Vec<Option<f64>> = tokens.iter().map(|t| t.confidence()).collect();
    assert_eq!(confidences, [Some(3.0), None, Some(5.0)]);
    // Replays from the start, any number of times.
    assert_eq!(choice.logprobs().count().await, 3);
    // The choice did not fail, and the raw JSON is kept as sent.
    let message = choice.message().await.unwrap();
    assert_eq!(message.message.content.as_deref(), Some("a?!b"));
    assert_eq!(message.finish_reason.as_deref(), Some("stop"));
    let mut s = SampleConfidence::new(2);
    for t in &tokens {
        s.push_token(t);
    }
    assert_eq!(s.confidence(), Some(4.0));
}

#[tokio::test]
async fn a_choice_without_logprobs_has_none() {
    let sse =
        "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"},\"finish_reason\":\"stop\"}]}\n\n";
    let completions = Completions::new(Source::reader(sse.as_bytes()));
    let choice = completions.choice(0).await.unwrap();
    assert_eq!(choice.logprobs().count().await, 0);
}
