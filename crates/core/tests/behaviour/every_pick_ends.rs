//! Every pick ends: whatever happens to its samples (cut mid-stream, failed before their
//! stream began, replacements refused because the retry budget is spent), each pick
//! (first token, hedged or not; first finished; the vote, all at once, window by window,
//! guided by confidence) either decides or fails with a reason, and every sample it started
//! ends. No pick here has a deadline: each ends on its samples' events alone.
//!
//! The samples are made on demand, as the gateway makes them: `planned` samples, up to
//! `replacements` more for those that fail, the replacements past the retry budget refused
//! as the gateway refuses them (a source that fails before its stream begins).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use choicewise_core::confidence::{Confidence, Measure};
use choicewise_core::{Completions, Selection, Source};
use choicewise_test_support::within;
use proptest::prelude::*;
use serde_json::json;

/// Far longer than any schedule here takes: reaching it means a pick hung.
const SETTLED: Duration = Duration::from_secs(10);

static RUNTIME: LazyLock<tokio::runtime::Runtime> = LazyLock::new(|| {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
});

/// How one sample goes.
#[derive(Debug, Clone, Copy)]
enum Fate {
    /// Answers `Answer: key` (with top log-probabilities of confidence `c` when `c > 0`) and
    /// finishes with `stop`, after `ms`.
    Answers { key: u8, c: u8, ms: u64 },
    /// Finishes with `length`: no vote, not a good finish.
    Truncated { ms: u64 },
    /// Sends part of an answer, then its connection breaks after `ms`.
    Cut { ms: u64 },
    /// Fails before its stream begins (every try of it failed), after `ms`.
    FailsOpen { ms: u64 },
}

/// What is picked.
#[derive(Debug, Clone, Copy)]
enum PickKind {
    FirstToken {
        hedge_ms: Option<u64>,
        take: usize,
    },
    FirstFinished {
        take: usize,
    },
    Vote {
        window: Option<usize>,
        min_votes: usize,
        warmup: Option<usize>,
    },
}

fn fate() -> impl Strategy<Value = Fate> {
    prop_oneof![
        3 => (0u8..3, 0u8..4, 0u64..15).prop_map(|(key, c, ms)| Fate::Answers { key, c, ms }),
        1 => (0u64..15).prop_map(|ms| Fate::Truncated { ms }),
        3 => (0u64..15).prop_map(|ms| Fate::Cut { ms }),
        2 => (0u64..15).prop_map(|ms| Fate::FailsOpen { ms }),
    ]
}

fn pick_kind() -> impl Strategy<Value = PickKind> {
    prop_oneof![
        (proptest::option::of(1u64..10), 1usize..3)
            .prop_map(|(hedge_ms, take)| PickKind::FirstToken { hedge_ms, take }),
        (1usize..3).prop_map(|take| PickKind::FirstFinished { take }),
        (
            proptest::option::of(1usize..4),
            1usize..4,
            proptest::option::of(1usize..4)
        )
            .prop_map(|(window, min_votes, warmup)| PickKind::Vote {
                window,
                min_votes,
                warmup
            }),
    ]
}

/// One SSE event of a content delta, with one token of confidence `c` when `c > 0`.
fn delta(text: &str, c: u8, finish: Option<&str>) -> String {
    let mut choice = json!({"index": 0, "delta": {"content": text}, "finish_reason": finish});
    if c > 0 {
        let c = f64::from(c);
        choice["logprobs"] = json!({"content": [{"token": text, "logprob": -c / 2.0,
            "top_logprobs": [{"token": text, "logprob": -c / 2.0}, {"token": "~", "logprob": -1.5 * c}]}]});
    }
    format!("data: {}\n\n", json!({"choices": [choice]}))
}

fn source(fate: Fate) -> Source {
    let sleep = |ms| tokio::time::sleep(Duration::from_millis(ms));
    match fate {
        Fate::FailsOpen { ms } => Source::open(async move {
            sleep(ms).await;
            Err::<Source, _>("every try failed before a first byte")
        })
        .n(1),
        fate => {
            let reads = async_stream::stream! {
                match fate {
                    Fate::Answers { key, c, ms } => {
                        yield Ok::<_, std::io::Error>(delta("Answer: ", c, None));
                        sleep(ms).await;
                        yield Ok(delta(&key.to_string(), c, Some("stop")));
                    }
                    Fate::Truncated { ms } => {
                        sleep(ms).await;
                        yield Ok(delta("Answer: 1", 0, Some("length")));
                    }
                    Fate::Cut { ms } => {
                        yield Ok(delta("Answer: ", 0, None));
                        sleep(ms).await;
                        yield Err(std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset"));
                    }
                    Fate::FailsOpen { .. } => unreachable!(),
                }
            };
            Source::sse(reads).n(1)
        }
    }
}

/// A refused replacement, as the gateway makes it once the retry budget is spent.
fn refused(k: usize) -> Source {
    let message = format!("sample {k} not started: the retry budget is spent");
    Source::open(async move { Err::<Source, _>(message) }).n(1)
}

/// The samples: `fates[k]` for sample `k`; a replacement (`k >= planned`) past `budget`
/// refused. Returns the completion and the samples made, in order.
fn samples(
    fates: Vec<Fate>,
    planned: usize,
    replacements: usize,
    budget: usize,
) -> (Completions, Arc<Mutex<Vec<usize>>>) {
    let made = Arc::new(Mutex::new(Vec::new()));
    let log = made.clone();
    let spent = AtomicUsize::new(0);
    let completions =
        Completions::builder()
            .replace_failed(replacements)
            .samples(planned, move |k| {
                log.lock().unwrap().push(k);
                if k >= planned && spent.fetch_add(1, Ordering::Relaxed) >= budget {
                    return refused(k);
                }
                source(fates[k % fates.len()])
            });
    (completions, made)
}

fn key(o: &choicewise_core::ChoiceOutput) -> Option<String> {
    o.message.content.clone()
}

/// Runs `kind` over the samples, as the gateway does (the first window or the warmup may be
/// started before the pick), and returns its selection once every sample started has ended.
async fn run(kind: PickKind, completions: &Completions, prestart: bool) -> Selection {
    let selection = match kind {
        PickKind::FirstToken { hedge_ms, take } => {
            let mut pick = completions.first_token().take(take);
            if let Some(ms) = hedge_ms {
                pick = pick.hedge_after(Duration::from_millis(ms));
            }
            within(SETTLED, "a first-token pick", pick).await
        }
        PickKind::FirstFinished { take } => {
            within(
                SETTLED,
                "a first-finished pick",
                completions.first_finished().take(take),
            )
            .await
        }
        PickKind::Vote {
            window,
            min_votes,
            warmup,
        } => {
            if prestart {
                completions.start_more(warmup.or(window).unwrap_or(usize::MAX));
            }
            let mut pick = completions.vote(key).min_votes(min_votes);
            if let Some(w) = warmup {
                pick = pick.confidence(
                    Confidence::for_measure(Measure::TopK)
                        .warmup(w)
                        .group_tokens(1),
                );
            }
            if let Some(w) = window {
                pick = pick.window(w);
            }
            within(SETTLED, "a vote", pick).await
        }
    };
    // Every sample started ends: nothing is left holding an upstream.
    within(SETTLED, "the samples' ends", completions.outcome())
        .await
        .ok();
    selection
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, max_shrink_iters: 64, ..ProptestConfig::default() })]

    /// Each pick ends, deciding or saying why not, through any schedule of answers, cuts,
    /// failed opens, refused replacements and a spent budget.
    #[test]
    fn every_pick_decides_or_fails(
        fates in proptest::collection::vec(fate(), 1..10),
        planned in 1usize..7,
        spare in 0usize..3,
        budget in 0usize..6,
        kind in pick_kind(),
        prestart in any::<bool>(),
    ) {
        let replacements = planned * spare;
        let selection = RUNTIME.block_on(async {
            let (completions, made) = samples(fates.clone(), planned, replacements, budget);
            let selection = run(kind, &completions, prestart).await;
            let made = made.lock().unwrap().len();
            prop_assert!(made <= planned + replacements, "{made} samples made");
            Ok(selection)
        })?;
        prop_assert!(
            !selection.selected.is_empty() || selection.reason.is_some(),
            "nothing selected and no reason: {selection:?}"
        );
    }
}

/// The schedule of the hang the gateway met: a windowed vote (windows of 1 and 2) over six
/// samples, each cut mid-stream, whose replacements are all refused (the retry budget is
/// spent as they start). The vote fails once the last sample has ended, saying why, with no
/// deadline to end it.
#[test]
fn a_windowed_vote_whose_replacements_are_refused_fails() {
    RUNTIME.block_on(async {
        for window in [1, 2] {
            for budget in [0, 3] {
                let fates = vec![Fate::Cut { ms: 2 }];
                let (completions, made) = samples(fates, 6, 12, budget);
                let selection =
                    within(SETTLED, "the vote", completions.vote(key).window(window)).await;
                assert!(selection.selected.is_empty(), "{selection:?}");
                assert_eq!(
                    selection.reason.as_deref(),
                    Some("no choice finished with a key to vote on")
                );
                // Every sample and replacement was made: the vote went on while any could
                // still vote, and ended with the last.
                assert_eq!(made.lock().unwrap().len(), 18, "window {window}");
                assert_eq!(selection.started, Some(18));
                let errors = within(SETTLED, "the errors", completions.choice_errors()).await;
                assert_eq!(errors.len(), 18);
                let refused = (errors.iter())
                    .filter(|(_, e)| e.to_string().contains("the retry budget is spent"))
                    .count();
                assert_eq!(refused, 12 - budget, "window {window}, budget {budget}");
            }
        }
    });
}
