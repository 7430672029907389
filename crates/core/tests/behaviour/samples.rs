//! Samples made on demand and the windowed vote (early-stopping self-consistency): a sample
//! starts only while the vote is undecided. Each sample here is an in-memory stream whose
//! answer and pace the test scripts; a sample that starts is recorded, and one that is
//! dropped (its connection, were it HTTP) is counted.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use choicewise_core::{Completions, Source};
use choicewise_test_support::within;

const SETTLED: Duration = Duration::from_secs(20);

/// What the samples did.
#[derive(Default)]
struct Log {
    /// Sample numbers, in the order they started.
    started: Mutex<Vec<usize>>,
    /// Samples whose stream was dropped before it ended.
    dropped: AtomicUsize,
}

/// Counts the drop of a stream that did not end.
struct Dropped(Arc<Log>, bool);

impl Drop for Dropped {
    fn drop(&mut self) {
        if !self.1 {
            self.0.dropped.fetch_add(1, Ordering::SeqCst);
        }
    }
}

/// Sample `k` answers `answers[k]` after `delays[k]` ms (a stream that first waits, then
/// sends one chunk with the finish).
fn samples(
    answers: &[&'static str],
    delays: &[u64],
    window: usize,
) -> (
    Completions,
    Arc<Log>,
    impl std::future::Future<Output = choicewise_core::Selection>,
) {
    let log = Arc::new(Log::default());
    let (answers, delays) = (answers.to_vec(), delays.to_vec());
    let max = answers.len();
    let made = log.clone();
    let completions = Completions::builder().samples(max, move |k| {
        made.started.lock().unwrap().push(k);
        let text = answers[k];
        let delay = Duration::from_millis(delays[k]);
        let guard = Dropped(made.clone(), false);
        let body = async move {
            let mut guard = guard; // the whole guard moves in, not just its flag
            tokio::time::sleep(delay).await;
            guard.1 = true;
            Ok::<_, std::io::Error>(format!(
                "data: {{\"choices\":[{{\"delta\":{{\"content\":\"Answer: {text}\"}},\"finish_reason\":\"stop\"}}]}}\n\ndata: [DONE]\n\n"
            ))
        };
        Source::sse(futures::stream::once(body)).n(1)
    });
    let c = completions.clone();
    let vote = async move {
        c.vote(|m| {
            let text = m.message.content.as_deref()?;
            text.strip_prefix("Answer: ").map(str::to_string)
        })
        .window(window)
        .await
    };
    (completions, log, vote)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_unanimous_first_window_starts_no_other() {
    let (completions, log, vote) = samples(&["7"; 16], &[5; 16], 4);
    let selection = within(SETTLED, "the vote", vote).await;
    assert_eq!(selection.vote.as_ref().unwrap().key, "7");
    assert_eq!(crate::common::ascending(&selection.selected), [0, 1, 2, 3]);
    assert_eq!(selection.started, Some(4));
    assert_eq!(selection.windows, [vec![0, 1, 2, 3]]);
    assert_eq!(*log.started.lock().unwrap(), [0, 1, 2, 3]);
    let whole = within(SETTLED, "collect", completions.collect())
        .await
        .unwrap();
    assert_eq!(whole.choices.len(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_split_first_window_then_a_unanimous_second() {
    let mut answers = ["5"; 12];
    answers[1] = "6";
    let (_, log, vote) = samples(&answers, &[5; 12], 4);
    let selection = within(SETTLED, "the vote", vote).await;
    assert_eq!(selection.vote.as_ref().unwrap().key, "5");
    assert_eq!(selection.started, Some(8), "the third window never started");
    assert_eq!(log.started.lock().unwrap().len(), 8);
    assert_eq!(selection.windows, [vec![0, 1, 2, 3], vec![4, 5, 6, 7]]);
    // Every finished sample whose key won, in whichever window it ran.
    assert_eq!(
        crate::common::ascending(&selection.selected),
        [0, 2, 3, 4, 5, 6, 7]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn samples_started_before_the_vote_count_towards_its_first_window() {
    // A caller (the gateway) opens the first window itself, to fail before its answer begins;
    // the vote then starts only what each window lacks, never a window ahead.
    let mut answers = ["5"; 12];
    answers[1] = "6";
    let (completions, log, vote) = samples(&answers, &[5; 12], 4);
    assert_eq!(completions.start_more(4), 4);
    let selection = within(SETTLED, "the vote", vote).await;
    assert_eq!(selection.vote.as_ref().unwrap().key, "5");
    assert_eq!(selection.started, Some(8), "the third window never started");
    assert_eq!(log.started.lock().unwrap().len(), 8);
    assert_eq!(selection.windows, [vec![0, 1, 2, 3], vec![4, 5, 6, 7]]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_unanimous_window_then_the_plurality_of_all() {
    // Windows of 3 over 8 samples (the last window has 2): none unanimous.
    let answers = ["1", "2", "1", "3", "1", "4", "2", "1"];
    let (_, log, vote) = samples(&answers, &[5; 8], 3);
    let selection = within(SETTLED, "the vote", vote).await;
    let tally = selection.vote.unwrap();
    // "1" wins once no other key can pass it (at 3 votes, when the rest could only tie it
    // and its first voter finished first), or with all 4.
    assert_eq!(tally.key.as_str(), "1");
    assert!(tally.votes >= 3, "{tally:?}");
    assert_eq!(selection.started, Some(8));
    assert_eq!(log.started.lock().unwrap().len(), 8);
    assert_eq!(
        selection.windows,
        [vec![0, 1, 2], vec![3, 4, 5], vec![6, 7]]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_next_window_starts_as_soon_as_one_cannot_be_unanimous() {
    // Sample 2 is slow; samples 0 and 1 disagree at once: window 1 starts long before
    // sample 2 finishes, and sample 2 still votes.
    let answers = ["8", "9", "8", "8", "8", "8", "8", "8"];
    let delays = [5, 5, 1500, 5, 5, 5, 5, 5];
    let (_, log, vote) = samples(&answers, &delays, 3);
    let started = tokio::time::Instant::now();
    let watch = {
        let log = log.clone();
        async move {
            loop {
                if log.started.lock().unwrap().len() > 3 {
                    return started.elapsed();
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        }
    };
    let (selection, second_window_at) =
        within(SETTLED, "the vote", async { tokio::join!(vote, watch) }).await;
    assert!(
        second_window_at < Duration::from_millis(1000),
        "the second window started at {second_window_at:?}, not before the slow sample"
    );
    // Window 1 (3, 4, 5) is unanimous on 8 and decides; the slow sample 2 is cancelled.
    assert_eq!(selection.vote.as_ref().unwrap().key, "8");
    assert_eq!(selection.started, Some(6));
    assert!(selection.selected.contains(&4));
    assert_eq!(selection.cancelled, [2]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_sample_is_dropped_and_a_finished_one_is_not() {
    // Window 0 splits at once (5, 4) while its sample 2 is slow; window 1 agrees on 4 and
    // decides: sample 2 is cancelled and its stream dropped (were it HTTP, its connection
    // closed); the others had ended.
    let answers = ["5", "4", "4", "4", "4", "4", "4"];
    let delays = [5, 5, 3000, 5, 5, 5, 5];
    let (completions, log, vote) = samples(&answers, &delays, 3);
    let selection = within(SETTLED, "the vote", vote).await;
    assert_eq!(selection.vote.as_ref().unwrap().key, "4");
    assert_eq!(selection.cancelled, [2]);
    assert_eq!(crate::common::ascending(&selection.selected), [1, 3, 4, 5]);
    assert_eq!(selection.started, Some(6), "the third window never started");
    within(SETTLED, "the end", completions.outcome())
        .await
        .unwrap();
    assert_eq!(
        log.dropped.load(Ordering::SeqCst),
        1,
        "the cancelled sample's stream"
    );
    let whole = within(SETTLED, "collect", completions.collect())
        .await
        .unwrap();
    assert!(whole.choices[2].cancelled);
}

/// One finished answer, as a sample's stream.
fn answer(k: usize) -> Source {
    let sse = format!(
        "data: {{\"choices\":[{{\"delta\":{{\"content\":\"sample {k}\"}},\"finish_reason\":\"stop\"}}]}}\n\n"
    );
    Source::reader(std::io::Cursor::new(sse)).n(1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_maker_that_starts_more_samples_does_not_deadlock() {
    // The maker runs outside the completion's lock: one that calls back into the completion
    // (here, sample 0 asks for two more) is served, its samples started after it returns.
    let handle: Arc<Mutex<Option<Completions>>> = Arc::default();
    let inside = handle.clone();
    let asked = Arc::new(Mutex::new(Vec::new()));
    let seen = asked.clone();
    let completions = Completions::builder().samples(4, move |k| {
        if k == 0
            && let Some(c) = inside.lock().unwrap().clone()
        {
            let more = c.start_more(2);
            seen.lock().unwrap().push((more, c.started()));
        }
        answer(k)
    });
    *handle.lock().unwrap() = Some(completions.clone());
    // On a blocking thread, so that a deadlock fails the test rather than hanging it.
    let c = completions.clone();
    let started = within(
        SETTLED,
        "start_more",
        tokio::task::spawn_blocking(move || c.start_more(1)),
    )
    .await
    .expect("start_more returns");
    assert_eq!(started, 1);
    assert_eq!(
        *asked.lock().unwrap(),
        [(2, 0)],
        "queued while sample 0 was made"
    );
    assert_eq!(
        completions.started(),
        3,
        "sample 0, then the two it asked for"
    );
    handle.lock().unwrap().take();
    completions.stop_sampling();
    let whole = within(SETTLED, "the completion", completions.collect())
        .await
        .unwrap();
    let texts: Vec<_> = (whole.choices.iter())
        .map(|c| c.message.content.clone().unwrap())
        .collect();
    assert_eq!(texts, ["sample 0", "sample 1", "sample 2"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_maker_that_panics_stops_sampling_and_the_completion_ends() {
    let completions = Completions::builder().samples(3, |k| {
        assert!(k < 1, "the maker fails on sample {k}");
        answer(k)
    });
    assert_eq!(completions.start_more(1), 1);
    let c = completions.clone();
    let panicked = tokio::task::spawn_blocking(move || c.start_more(1)).await;
    assert!(panicked.is_err(), "the maker's panic reaches its caller");
    assert_eq!(completions.start_more(1), 0, "sampling stopped");
    let whole = within(SETTLED, "the completion", completions.collect())
        .await
        .unwrap();
    assert_eq!(
        whole.choices.len(),
        1,
        "the sample made before the panic is kept"
    );
}
