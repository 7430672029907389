//! Failed samples replaced ([`CompletionsBuilder::replace_failed`]): a sample whose stream
//! breaks mid-way is replaced by one more sample while the pick is undecided, so the pick
//! still decides over as many samples as planned; without failures, or once the
//! replacements are spent, the completion ends as one without them.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use choicewise_core::{Completions, Source};
use choicewise_test_support::within;

const SETTLED: Duration = Duration::from_secs(20);

/// How sample `k` goes.
#[derive(Clone, Copy)]
enum Plan {
    /// Answers `Answer: N` and finishes, after `ms`.
    Answers(u32, u64),
    /// Sends half an answer, then its connection breaks, after `ms`.
    Breaks(u64),
}

/// A completion of `plans.len()` planned samples (more when replaced: sample `k` beyond the
/// plans answers `replacement`), and the samples started, in order.
fn completion(
    plans: Vec<Plan>,
    replacement: Plan,
    replace: usize,
) -> (Completions, Arc<Mutex<Vec<usize>>>) {
    let started = Arc::new(Mutex::new(Vec::new()));
    let log = started.clone();
    let max = plans.len();
    let completions = Completions::builder()
        .replace_failed(replace)
        .samples(max, move |k| {
            log.lock().unwrap().push(k);
            let plan = plans.get(k).copied().unwrap_or(replacement);
            let reads = async_stream::stream! {
                match plan {
                    Plan::Answers(n, ms) => {
                        tokio::time::sleep(Duration::from_millis(ms)).await;
                        yield Ok::<_, std::io::Error>(format!(
                            "data: {{\"choices\":[{{\"delta\":{{\"content\":\"Answer: {n}\"}},\"finish_reason\":\"stop\"}}]}}\n\ndata: [DONE]\n\n"
                        ));
                    }
                    Plan::Breaks(ms) => {
                        yield Ok("data: {\"choices\":[{\"delta\":{\"content\":\"Answer: \"}}]}\n\n".to_string());
                        tokio::time::sleep(Duration::from_millis(ms)).await;
                        yield Err(std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset"));
                    }
                }
            };
            Source::sse(reads).n(1)
        });
    (completions, started)
}

fn key(o: &choicewise_core::ChoiceOutput) -> Option<String> {
    o.message.content.clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vote_decides_over_a_replacement_of_the_sample_that_broke() {
    use Plan::*;
    // Three votes for 42 are needed; sample 1 breaks: only its replacement can make them.
    let plans = vec![Answers(42, 10), Breaks(5), Answers(42, 30)];
    let (completions, started) = completion(plans, Answers(42, 10), 2);
    completions.start_more(3);
    let selection = within(SETTLED, "the vote", completions.vote(key).min_votes(3)).await;
    assert_eq!(
        crate::common::ascending(&selection.selected),
        [0, 2, 3],
        "{selection:?}"
    );
    assert_eq!(*started.lock().unwrap(), [0, 1, 2, 3]);
    let whole = within(SETTLED, "the completion", completions.collect())
        .await
        .unwrap_err()
        .partial;
    // The broken sample stays a failed choice, with what it had sent.
    let broken = &whole.choices[1];
    assert_eq!(broken.finish_reason, None, "{broken:?}");
    assert!(!broken.cancelled);
    assert_eq!(broken.message.content.as_deref(), Some("Answer: "));
    assert_eq!(whole.choices.len(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_failures_the_completion_ends_as_planned() {
    use Plan::*;
    let plans = vec![Answers(1, 5), Answers(2, 1), Answers(3, 10)];
    let (completions, started) = completion(plans, Answers(9, 1), 3);
    completions.start_more(3);
    let whole = within(SETTLED, "the completion", completions.collect())
        .await
        .unwrap();
    assert_eq!(whole.choices.len(), 3);
    assert_eq!(*started.lock().unwrap(), [0, 1, 2], "nothing replaced");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replacements_stop_when_spent_and_the_completion_ends() {
    use Plan::*;
    // Every sample breaks, replacements too: two are replaced, then none.
    let plans = vec![Breaks(1), Breaks(2)];
    let (completions, started) = completion(plans, Breaks(1), 2);
    completions.start_more(2);
    let whole = within(SETTLED, "the completion", completions.collect())
        .await
        .unwrap_err()
        .partial;
    assert_eq!(whole.choices.len(), 4, "two planned, two replacements");
    assert_eq!(*started.lock().unwrap(), [0, 1, 2, 3]);
    assert!(
        (whole.choices.iter()).all(|c| c.finish_reason.is_none() && !c.cancelled),
        "every one failed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decided_pick_replaces_nothing() {
    use Plan::*;
    // Sample 0 finishes first and is picked; sample 1 breaks afterwards: not replaced.
    let plans = vec![Answers(7, 1), Breaks(200)];
    let (completions, started) = completion(plans, Answers(9, 1), 2);
    completions.start_more(2);
    let selection = within(
        SETTLED,
        "the pick",
        completions.first_finished().keep_rest(),
    )
    .await;
    assert_eq!(selection.selected, [0]);
    let _ = within(SETTLED, "the completion", completions.outcome()).await;
    assert_eq!(*started.lock().unwrap(), [0, 1], "decided: no replacement");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_windowed_vote_replaces_a_failed_sample_within_its_window() {
    use Plan::*;
    // Windows of two. Sample 1 breaks: its replacement takes position 2 in the first window
    // and agrees with sample 0, so the first window decides; the samples that would answer
    // 7 never start.
    let plans = vec![
        Answers(5, 1),
        Breaks(1),
        Answers(5, 20),
        Answers(7, 1),
        Answers(7, 1),
        Answers(7, 1),
    ];
    let (completions, started) = completion(plans.clone(), Answers(7, 1), 2);
    let selection = within(SETTLED, "the vote", completions.vote(key).window(2)).await;
    assert_eq!(
        selection.vote.as_ref().unwrap().key,
        "Answer: 5",
        "{selection:?}"
    );
    assert_eq!(crate::common::ascending(&selection.selected), [0, 2]);
    assert_eq!(selection.windows, [vec![0, 1, 2]]);
    let _ = within(SETTLED, "the completion", completions.outcome()).await;
    assert_eq!(*started.lock().unwrap(), [0, 1, 2]);

    // Without replacements the broken sample splits the first window; the next windows run,
    // and the plurality of what finished decides.
    let (completions, started) = completion(plans, Answers(7, 1), 0);
    let selection = within(SETTLED, "the vote", completions.vote(key).window(2)).await;
    assert_eq!(
        selection.vote.as_ref().unwrap().key,
        "Answer: 7",
        "{selection:?}"
    );
    assert_eq!(selection.windows, [vec![0, 1], vec![2, 3], vec![4, 5]]);
    let _ = within(SETTLED, "the completion", completions.outcome()).await;
    assert_eq!(*started.lock().unwrap(), [0, 1, 2, 3, 4, 5]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_windowed_vote_gives_later_windows_the_positions_after_a_replacement() {
    use Plan::*;
    // Windows of two over four planned samples. The first window splits (5 against 6);
    // sample 3, in the second window, breaks after that window opened: its replacement takes
    // the next position (4), which joins the second window, not a third.
    let plans = vec![Answers(5, 1), Answers(6, 30), Answers(8, 40), Breaks(80)];
    let (completions, started) = completion(plans, Answers(8, 1), 1);
    let selection = within(SETTLED, "the vote", completions.vote(key).window(2)).await;
    assert_eq!(
        selection.vote.as_ref().unwrap().key,
        "Answer: 8",
        "{selection:?}"
    );
    assert_eq!(selection.windows, [vec![0, 1], vec![2, 3, 4]]);
    assert_eq!(crate::common::ascending(&selection.selected), [2, 4]);
    let _ = within(SETTLED, "the completion", completions.outcome()).await;
    assert_eq!(*started.lock().unwrap(), [0, 1, 2, 3, 4]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_of_several_choices_is_replaced_choice_by_choice() {
    // Sample 0 is one source of three choices: choice 0 finishes, choice 1 is cut, choice 2
    // never appears; the two it did not finish are replaced by samples of one choice each.
    let answer = |n: u32| {
        format!(
            "data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"Answer: {n}\"}},\"finish_reason\":\"stop\"}}]}}\n\n"
        )
    };
    let started = Arc::new(Mutex::new(Vec::new()));
    let log = started.clone();
    let completions = Completions::builder()
        .replace_failed(5)
        .samples(1, move |k| {
            log.lock().unwrap().push(k);
            if k == 0 {
                let reads = async_stream::stream! {
                    yield Ok::<_, std::io::Error>(
                        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Answer: 5\"},\"finish_reason\":\"stop\"},{\"index\":1,\"delta\":{\"content\":\"Answer: \"}}]}\n\n".to_string(),
                    );
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    yield Err(std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset"));
                };
                return Source::sse(reads).n(3);
            }
            Source::reader(std::io::Cursor::new(answer(5))).n(1)
        });
    completions.start_more(1);
    let selection = within(SETTLED, "the vote", completions.vote(key).min_votes(3)).await;
    assert_eq!(*started.lock().unwrap(), [0, 1, 2], "two replacements");
    assert_eq!(selection.selected.len(), 3, "{selection:?}");
    assert_eq!(selection.vote.unwrap().votes, 3);
}
