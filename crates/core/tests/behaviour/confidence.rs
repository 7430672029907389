//! Confidence-guided sampling (DeepConf online): each choice's log-probabilities as typed
//! tokens, and the vote that stops unsure samples while they stream and weighs the rest by
//! confidence. Every sample here is a scripted stream whose tokens carry known top-k
//! log-probabilities, so each token's confidence is known: a token whose top-2 are
//! `-c/2` and `-3c/2` has confidence `c` (their negative mean).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use choicewise_core::confidence::{Confidence, ConfidenceReport, Measure, SampleConfidence};
use choicewise_core::{ChoiceOutput, Completions, Selection, Source};
use choicewise_test_support::within;
use futures::{Stream, StreamExt, TryStreamExt, stream};
use serde_json::{Value, json};

const SETTLED: Duration = Duration::from_secs(20);

/// A token of confidence `c` with its top-2 log-probabilities.
fn top2(token: &str, c: f64) -> Value {
    json!({"token": token, "logprob": -c / 2.0, "top_logprobs": [
        {"token": token, "logprob": -c / 2.0},
        {"token": "~", "logprob": -1.5 * c},
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

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

/// The events of a sample answering `Answer: KEY` in as many tokens as `confidences` (at
/// least 2), each token of that confidence: `Answer: `, empty ones, then the key.
fn tokens(key: &str, confidences: &[f64]) -> Vec<String> {
    let last = confidences.len() - 1;
    (confidences.iter().enumerate())
        .map(|(i, c)| {
            let text = match i {
                0 => "Answer: ",
                i if i == last => key,
                _ => "",
            };
            token_event(0, text, *c)
        })
        .collect()
}

/// A whole sample: its tokens, its finish, `[DONE]`.
fn finished(key: &str, confidences: &[f64]) -> Vec<String> {
    let mut events = tokens(key, confidences);
    events.push(finish_event(0));
    events.push("data: [DONE]\n\n".to_string());
    events
}

fn answer_of(m: &ChoiceOutput) -> Option<String> {
    let text = m.message.content.as_deref()?;
    text.strip_prefix("Answer: ").map(|k| k.trim().to_string())
}

/// Sets its flag when dropped: tells a test that the upstream holding it was dropped.
struct DropFlag(Arc<AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// An upstream sending `events`, then stalling forever (a sample still generating); the flag
/// says it was dropped (its connection closed).
fn stalling(
    events: Vec<String>,
) -> (
    impl Stream<Item = Result<String, std::io::Error>> + Send + 'static,
    Arc<AtomicBool>,
) {
    let dropped = Arc::new(AtomicBool::new(false));
    let guard = DropFlag(dropped.clone());
    let s = stream::iter(events.into_iter().map(Ok))
        .chain(stream::pending())
        .map(move |r| {
            let _keep = &guard;
            r
        });
    (s, dropped)
}

/// An upstream that sends nothing until `gate` opens, then `events`.
fn gated(
    events: Vec<String>,
    gate: tokio::sync::oneshot::Receiver<()>,
) -> impl Stream<Item = Result<String, std::io::Error>> + Send + 'static {
    stream::once(gate)
        .map(move |_| stream::iter(events.clone().into_iter().map(Ok)))
        .flatten()
}

fn ready(events: Vec<String>) -> Source {
    Source::sse(stream::iter(
        events.into_iter().map(Ok::<_, std::io::Error>),
    ))
    .n(1)
}

async fn eventually(flag: &AtomicBool) -> bool {
    for _ in 0..1000 {
        if flag.load(Ordering::SeqCst) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    false
}

fn report(selection: &Selection) -> &ConfidenceReport {
    selection.confidence.as_ref().expect("a confidence report")
}

/// Four warmup samples set the threshold; of the later ones, an unsure sample and one whose
/// confidence drops mid-way are stopped at once (their upstreams dropped while another
/// sample is still generating), and a confident one votes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsure_samples_are_stopped_and_their_upstreams_dropped() {
    // Warmup (groups of 2 tokens): confidences 5, 4, 3 and 6. Sample 2 is below the
    // threshold it helps set: it runs to its end all the same (warmup samples are never
    // stopped), but does not vote.
    let (unsure, unsure_dropped) = stalling(tokens("43", &[1.0, 1.0, 1.0]));
    // Sure at first, then unsure: its groups are 5, 5, then (5 + 1) / 2 = 3 < 3.3.
    let (wavering, wavering_dropped) = stalling(tokens("44", &[5.0, 5.0, 5.0, 1.0, 1.0]));
    let (open, gate) = tokio::sync::oneshot::channel();
    let completions = Completions::builder().fan_out([
        ready(finished("42", &[5.0; 4])),
        ready(finished("41", &[4.0; 4])),
        ready(finished("42", &[3.0; 4])),
        ready(finished("42", &[6.0; 4])),
        Source::sse(unsure).n(1),
        Source::sse(wavering).n(1),
        // Confident, but it answers only once the test has seen the others dropped.
        Source::sse(gated(finished("42", &[5.0; 4]), gate)).n(1),
    ]);
    let c = completions.clone();
    let vote = tokio::spawn(async move {
        c.vote(answer_of)
            .confidence(
                Confidence::for_measure(Measure::TopK)
                    .warmup(4)
                    .group_tokens(2),
            )
            .await
    });
    // Stopped and dropped while the vote is still open: promptly, not at its end.
    assert!(
        eventually(&unsure_dropped).await,
        "the unsure upstream was not dropped"
    );
    assert!(
        eventually(&wavering_dropped).await,
        "the wavering upstream was not dropped"
    );
    assert!(!vote.is_finished(), "the vote waits for the gated sample");
    for index in [4, 5] {
        let choice = completions.choice(index).await.unwrap();
        // Its cancel is published by its own actor, which may run after the reader has
        // dropped its upstream: awaited, as the upstream's drop is.
        let mut tries = 0;
        while !(choice.is_cancelled() && choice.stopped_for_low_confidence()) {
            tries += 1;
            assert!(
                tries < 1000,
                "sample {index} was not stopped for its low confidence"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    open.send(()).unwrap();
    let selection = within(SETTLED, "the vote", vote).await.unwrap();

    let report = report(&selection);
    // The 0.1 quantile of 3, 4, 5, 6: 3 + 0.3 × (4 - 3).
    assert!(close(report.threshold().unwrap(), 3.3), "{report:?}");
    assert_eq!(report.warmup(), [0, 1, 2, 3]);
    assert_eq!(report.stopped(), [4, 5]);
    assert!(selection.stopped_for_low_confidence(4) && !selection.stopped_for_low_confidence(6));
    // After the warmup, 42 had 11 of 15 (0.73): undecided. The weights: 42 from samples 0, 3
    // and 6; 41 from sample 1; not sample 2 (warmup, below the threshold).
    let weights = report.weights();
    assert!(close(weights["42"], 5.0 + 6.0 + 5.0) && close(weights["41"], 4.0));
    assert_eq!(
        weights.len(),
        2,
        "a stopped sample does not vote: {weights:?}"
    );
    assert_eq!(crate::common::ascending(&selection.selected), [0, 3, 6]);
    let tally = selection.vote.as_ref().unwrap();
    assert_eq!(
        (tally.key.as_str(), tally.votes, tally.counted),
        ("42", 3, 4)
    );
    // Stopped choices ended cancelled, and are listed as such.
    assert_eq!(selection.cancelled, [4, 5]);
    for stopped in [4, 5] {
        let reason = completions.choice(stopped).await.unwrap().cancel_reason();
        assert_eq!(
            reason,
            Some(choicewise_core::cancel::CancelReason::LowConfidence),
            "{stopped}"
        );
    }
    let whole = completions.collect().await.unwrap();
    assert!(whole.choices[4].cancelled && whole.choices[5].cancelled);
    assert_eq!(whole.choices[2].finish_reason.as_deref(), Some("stop"));
    // The report's shape.
    let json = serde_json::to_value(&selection).unwrap();
    let keys: Vec<&String> = json["confidence"].as_object().unwrap().keys().collect();
    assert_eq!(keys, ["stopped", "threshold", "warmup", "weights"]);
    assert_eq!(json["confidence"]["stopped"], json!([4, 5]));
    assert_eq!(json["confidence"]["weights"]["41"], 4.0);
}

/// Samples made on demand: one confident answer outweighs several unsure ones, where the
/// plain vote would pick the most frequent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_vote_is_weighted_by_confidence() {
    let script = || {
        vec![
            finished("8", &[9.0; 3]),
            finished("7", &[2.0; 3]),
            finished("7", &[2.0; 3]),
            finished("7", &[2.2; 3]),
            finished("7", &[1.0; 3]),
        ]
    };
    let started = Arc::new(Mutex::new(Vec::new()));
    let log = started.clone();
    let samples = script();
    let completions = Completions::builder().samples(5, move |k| {
        log.lock().unwrap().push(k);
        ready(samples[k].clone())
    });
    let selection = within(
        SETTLED,
        "the vote",
        completions.vote(answer_of).confidence(
            Confidence::for_measure(Measure::TopK)
                .warmup(3)
                .group_tokens(2),
        ),
    )
    .await;
    let report = report(&selection);
    // The 0.1 quantile of 2, 2, 9: 2 (both 2s are at the threshold, and vote).
    assert!(close(report.threshold().unwrap(), 2.0), "{report:?}");
    assert_eq!(report.stopped(), [4]); // 1.0 < 2
    assert!(close(report.weights()["8"], 9.0));
    assert!(close(report.weights()["7"], 2.0 + 2.0 + 2.2));
    assert_eq!(selection.selected, [0]);
    assert_eq!(selection.vote.as_ref().unwrap().key, "8");
    // The warmup started first, then the rest, the weighted vote being undecided (9 / 13).
    assert_eq!(*started.lock().unwrap(), [0, 1, 2, 3, 4]);
    assert_eq!(selection.windows, [vec![0, 1, 2], vec![3, 4]]);
    assert_eq!(selection.started, Some(5));

    // The plain vote over the same samples picks the most frequent answer.
    let samples = script();
    let plain = Completions::builder()
        .samples(5, move |k| ready(samples[k].clone()))
        .vote(answer_of)
        .await;
    assert_eq!(plain.vote.unwrap().key, "7");
    assert_eq!(plain.confidence, None);
}

/// With a window, samples start a few at a time and only while the weighted vote is
/// undecided: here the first window after the warmup reaches the consensus.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn samples_start_only_while_the_weighted_vote_is_undecided() {
    let started = Arc::new(Mutex::new(Vec::new()));
    let log = started.clone();
    let completions = Completions::builder().samples(16, move |k| {
        log.lock().unwrap().push(k);
        match k {
            2 => ready(finished("41", &[1.0; 2])),
            3 => ready(finished("42", &[1.0; 2])),
            4 => ready(finished("42", &[10.0; 2])),
            5 => {
                // Slow: still generating when the vote is decided.
                let events = finished("42", &[5.0; 2]);
                let body = async move {
                    tokio::time::sleep(Duration::from_secs(30)).await;
                    Ok::<_, std::io::Error>(events.concat())
                };
                Source::sse(stream::once(body)).n(1)
            }
            _ => ready(finished("42", &[5.0; 2])),
        }
    });
    let selection = within(
        SETTLED,
        "the vote",
        completions.vote(answer_of).window(2).confidence(
            Confidence::for_measure(Measure::TopK)
                .warmup(4)
                .group_tokens(2),
        ),
    )
    .await;
    // The threshold is 1 (the 0.1 quantile of 5, 5, 1, 1), so every warmup sample votes.
    // After the warmup 42 has 11 of 12 (0.917 < 0.95): one window of 2 starts; sample 4
    // brings 42 to 21 of 22 (0.955): decided, sample 5 cancelled, none of 6.. started.
    assert_eq!(*started.lock().unwrap(), [0, 1, 2, 3, 4, 5]);
    assert_eq!(selection.windows, [vec![0, 1, 2, 3], vec![4, 5]]);
    assert_eq!(selection.started, Some(6));
    assert_eq!(crate::common::ascending(&selection.selected), [0, 1, 3, 4]);
    assert_eq!(selection.cancelled, [5]);
    let report = report(&selection);
    assert!(
        report.stopped().is_empty(),
        "sample 5 was cancelled, not stopped"
    );
    assert!(!selection.stopped_for_low_confidence(5));
    assert_eq!(report.threshold(), Some(1.0));
}

/// Without log-probabilities the rule cannot run: the plain vote decides, and the report
/// says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_logprobs_the_plain_vote_decides_and_says_why() {
    let plain = |answer: &str| {
        let chunk = json!({"choices": [{"index": 0, "delta": {"content": format!("Answer: {answer}")},
            "finish_reason": "stop"}]});
        ready(vec![
            format!("data: {chunk}\n\n"),
            "data: [DONE]\n\n".to_string(),
        ])
    };
    let completions =
        Completions::builder().fan_out([plain("42"), plain("41"), plain("42"), plain("40")]);
    let selection = within(
        SETTLED,
        "the vote",
        completions
            .vote(answer_of)
            .confidence(Confidence::for_measure(Measure::TopK).warmup(2)),
    )
    .await;
    assert_eq!(crate::common::ascending(&selection.selected), [0, 2]);
    assert_eq!(selection.vote.as_ref().unwrap().key, "42");
    let report = report(&selection);
    assert_eq!(
        report.unavailable(),
        Some("none of the 2 warmup choices carried top log-probabilities")
    );
    assert_eq!(report.threshold(), None);
    let json = serde_json::to_value(&selection).unwrap();
    assert_eq!(
        json["confidence"],
        json!({"unavailable": "none of the 2 warmup choices carried top log-probabilities"})
    );
}

/// One stream of three choices that never says how many: the warmup (8 by default) is every
/// choice, known only once the stream ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_warmup_longer_than_the_completion_is_the_whole_completion() {
    let choice = |index: u32, key: &str, c: f64| {
        [
            token_event(index, "Answer: ", c),
            token_event(index, key, c),
            finish_event(index),
        ]
        .concat()
    };
    let sse = [
        choice(1, "42", 4.0),
        choice(0, "42", 5.0),
        choice(2, "41", 3.0),
        "data: [DONE]\n\n".to_string(),
    ]
    .concat();
    let completions = Completions::new(Source::reader(std::io::Cursor::new(sse)));
    let selection = within(
        SETTLED,
        "the vote",
        completions
            .vote(answer_of)
            .confidence(Confidence::for_measure(Measure::TopK)),
    )
    .await;
    let applied = report(&selection);
    // The 0.1 quantile of 3, 4, 5: 3 + 0.2 × 1.
    assert!(close(applied.threshold().unwrap(), 3.2), "{applied:?}");
    assert_eq!(applied.warmup(), [0, 1, 2]);
    assert!(applied.stopped().is_empty());
    assert_eq!(crate::common::ascending(&selection.selected), [0, 1]);

    // The same without log-probabilities: the fallback, with its reason.
    let plain = |index: u32, key: &str| {
        let chunk = json!({"choices": [{"index": index, "delta": {"content": format!("Answer: {key}")},
            "finish_reason": "stop"}]});
        format!("data: {chunk}\n\n")
    };
    let sse = [plain(0, "1"), plain(1, "2"), plain(2, "2")].concat();
    let completions = Completions::new(Source::reader(std::io::Cursor::new(sse)));
    let selection = within(
        SETTLED,
        "the vote",
        completions
            .vote(answer_of)
            .confidence(Confidence::for_measure(Measure::TopK)),
    )
    .await;
    assert_eq!(crate::common::ascending(&selection.selected), [1, 2]);
    assert_eq!(
        report(&selection).unavailable(),
        Some("none of the 3 warmup choices carried top log-probabilities")
    );
}

/// A deadline that passes during the warmup: no threshold, so the plain plurality over the
/// choices in by then, and the report says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadline_during_the_warmup_falls_back_and_says_so() {
    let (stalled, dropped) = stalling(tokens("9", &[5.0, 5.0]));
    let completions = Completions::builder().fan_out([
        ready(finished("42", &[5.0; 2])),
        Source::sse(stalled).n(1),
        ready(finished("42", &[4.0; 2])),
    ]);
    let selection = within(
        SETTLED,
        "the vote",
        completions
            .vote(answer_of)
            .confidence(Confidence::for_measure(Measure::TopK).warmup(3))
            .deadline(Duration::from_millis(300)),
    )
    .await;
    assert!(selection.timed_out);
    assert_eq!(crate::common::ascending(&selection.selected), [0, 2]);
    assert_eq!(
        report(&selection).unavailable(),
        Some("the deadline passed before the warmup ended")
    );
    assert_eq!(selection.cancelled, [1]);
    assert!(eventually(&dropped).await);
}

/// A warmup sample that breaks is replaced within the warmup (`replace_failed`): the
/// replacement counts towards the threshold in its place, so a broken, unsure sample does
/// not lower the threshold. Without replacements its partial confidence sets it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_warmup_sample_that_breaks_is_replaced_within_the_warmup() {
    fn broken(events: Vec<String>) -> Source {
        let reset = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset");
        Source::sse(
            stream::iter(events.into_iter().map(Ok)).chain(stream::once(async move {
                tokio::time::sleep(Duration::from_millis(20)).await;
                Err::<String, _>(reset)
            })),
        )
        .n(1)
    }
    for replace in [1, 0] {
        let started = Arc::new(Mutex::new(Vec::new()));
        let log = started.clone();
        let completions = Completions::builder()
            .replace_failed(replace)
            .samples(8, move |k| {
                log.lock().unwrap().push(k);
                match k {
                    3 => broken(tokens("41", &[0.5; 2])),
                    5.. => ready(finished("7", &[2.0; 2])),
                    _ => ready(finished("42", &[5.0; 2])),
                }
            });
        let selection = within(
            SETTLED,
            "the vote",
            completions.vote(answer_of).confidence(
                Confidence::for_measure(Measure::TopK)
                    .warmup(4)
                    .group_tokens(2),
            ),
        )
        .await;
        let report = report(&selection);
        assert_eq!(selection.vote.as_ref().unwrap().key, "42", "{selection:?}");
        match replace {
            1 => {
                // Samples 0, 1, 2 and the replacement 4: the threshold is 5, and 42 has all
                // the weight: decided once the warmup ends.
                assert_eq!(report.warmup(), [0, 1, 2, 3, 4]);
                assert_eq!(report.threshold(), Some(5.0));
                assert_eq!(*started.lock().unwrap(), [0, 1, 2, 3, 4]);
                assert_eq!(crate::common::ascending(&selection.selected), [0, 1, 2, 4]);
                assert_eq!(selection.windows, [vec![0, 1, 2, 3, 4]]);
            }
            _ => {
                // The broken sample's 0.5 is in the warmup: the threshold falls below 5.
                assert_eq!(report.warmup(), [0, 1, 2, 3]);
                assert!(report.threshold().unwrap() < 5.0, "{report:?}");
                assert_eq!(crate::common::ascending(&selection.selected), [0, 1, 2]);
            }
        }
    }
}

/// The events of a sample of the `sampled` measure: `Answer: KEY` in as many tokens as
/// `logprobs`, each token carrying only its own log-probability (what `logprobs: true` alone
/// sends).
fn sampled_tokens(key: &str, logprobs: &[f64]) -> Vec<String> {
    let last = logprobs.len() - 1;
    (logprobs.iter().enumerate())
        .map(|(i, lp)| {
            let text = match i {
                0 => "Answer: ",
                i if i == last => key,
                _ => "",
            };
            let chunk = json!({"choices": [{"index": 0, "delta": {"content": text},
                "logprobs": {"content": [{"token": text, "logprob": lp}]}, "finish_reason": null}]});
            format!("data: {chunk}\n\n")
        })
        .collect()
}

/// A whole sample of the `sampled` measure, finished.
fn sampled(key: &str, logprobs: &[f64]) -> Source {
    let mut events = sampled_tokens(key, logprobs);
    events.push(finish_event(0));
    events.push("data: [DONE]\n\n".to_string());
    ready(events)
}

/// The `sampled` measure reads each token's own log-probability, with no top-k sent: a
/// sample's confidence is its lowest window mean, its vote weighs `exp` of it, and a later
/// sample whose window falls below the threshold is stopped. DeepConf's `top_k` measure
/// finds nothing to read in the same streams and falls back to the plain vote.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sampled_measure_reads_each_tokens_own_logprob() {
    // `stall`: the unsure sample never finishes (only a stop ends it).
    let script = |stall: bool| {
        let unsure = sampled_tokens("9", &[-3.0, -3.0, -3.0, -3.0]);
        let unsure = match stall {
            true => Source::sse(stalling(unsure).0).n(1),
            false => sampled("9", &[-3.0, -3.0, -3.0, -3.0]),
        };
        vec![
            sampled("7", &[-0.1, -0.1, -0.1, -0.1]), // lowest window of 2: -0.1
            sampled("9", &[-0.2, -0.2, -0.2, -0.2]), // -0.2
            sampled("9", &[-0.1, -2.0, -2.0, -0.1]), // -2.0
            sampled("7", &[-0.1, -1.0, -1.0, -0.1]), // -1.0
            unsure,                                  // -3.0: stopped
            sampled("7", &[-0.3, -0.3, -0.3, -0.3]), // -0.3
        ]
    };
    let options = Confidence::new().warmup(4).group_tokens(2).keep(0.5);
    assert_eq!(options.measure, Measure::Sampled);
    let selection = within(
        SETTLED,
        "the sampled vote",
        Completions::builder()
            .fan_out(script(true))
            .vote(answer_of)
            .confidence(options),
    )
    .await;
    let applied = report(&selection);
    // The 0.5 quantile of -0.1, -0.2, -2.0, -1.0: (-1.0 + -0.2) / 2.
    assert!(close(applied.threshold().unwrap(), -0.6), "{applied:?}");
    assert_eq!(applied.stopped(), [4]);
    // Each vote weighs exp of its confidence: 7 from samples 0 and 5, 9 from sample 1;
    // samples 2 and 3 are below the threshold and do not vote.
    let w = applied.weights();
    assert!(close(w["7"], (-0.1f64).exp() + (-0.3f64).exp()), "{w:?}");
    assert!(close(w["9"], (-0.2f64).exp()), "{w:?}");
    // The winning voters, in the order they finished: these streams race, so either order.
    let mut voters = selection.selected.clone();
    voters.sort_unstable();
    assert_eq!(voters, [0, 5]);

    // DeepConf's measure needs top log-probabilities: none here, so the plain vote decides.
    let top_k = within(
        SETTLED,
        "the top-k vote",
        Completions::builder()
            .fan_out(script(false))
            .vote(answer_of)
            .confidence(Confidence::for_measure(Measure::TopK).warmup(4)),
    )
    .await;
    let why = report(&top_k).unavailable().unwrap();
    assert!(why.contains("top log-probabilities"), "{why}");
}

/// A window starts no more samples than the fewest votes that could decide: after the
/// warmup one sample holds all the weight but one vote is no majority (`min_votes(2)`), so
/// one sample starts, not the window of 4, and the vote is decided when it agrees: the
/// samples DeepConf's one-at-a-time schedule runs, no more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_window_starts_no_more_samples_than_could_decide() {
    let started = Arc::new(Mutex::new(Vec::new()));
    let log = started.clone();
    let completions = Completions::builder().samples(16, move |k| {
        log.lock().unwrap().push(k);
        match k {
            1 => sampled("9", &[-2.0, -2.0, -2.0, -2.0]), // below the threshold: no vote
            _ => sampled("7", &[-0.1, -0.1, -0.1, -0.1]),
        }
    });
    let options = Confidence::new().warmup(2).group_tokens(2).keep(0.5);
    let selection = within(
        SETTLED,
        "the vote",
        (completions.vote(answer_of).window(4).min_votes(2)).confidence(options),
    )
    .await;
    assert_eq!(*started.lock().unwrap(), [0, 1, 2]);
    assert_eq!(selection.windows, [vec![0, 1], vec![2]]);
    assert_eq!(crate::common::ascending(&selection.selected), [0, 2]);
    assert!(selection.cancelled.is_empty(), "{:?}", selection.cancelled);
}
