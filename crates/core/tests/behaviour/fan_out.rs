//! Cancelling choices and fanning out over several upstreams, through the actors.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use choicewise_core::cancel::{CancelReason, CancelledBy};
use choicewise_core::{ChoiceEvent, Completions, Source, UsageSource};
use futures::{Stream, StreamExt, TryStreamExt, stream};

/// Sets its flag when dropped: tells a test that the upstream holding it was dropped.
struct DropFlag(Arc<AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// An upstream that sends `reads` and then stalls forever; the flag says it was dropped.
fn stalling(
    reads: Vec<&'static str>,
) -> (
    impl Stream<Item = Result<&'static str, std::io::Error>> + Send + 'static,
    Arc<AtomicBool>,
) {
    let dropped = Arc::new(AtomicBool::new(false));
    let guard = DropFlag(dropped.clone());
    let s = stream::iter(reads.into_iter().map(Ok))
        .chain(stream::pending())
        .map(move |r| {
            let _keep = &guard;
            r
        });
    (s, dropped)
}

async fn eventually(flag: &AtomicBool) -> bool {
    for _ in 0..200 {
        if flag.load(Ordering::SeqCst) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    false
}

const A0: &str = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\n";
const B1: &str = "data: {\"choices\":[{\"index\":1,\"delta\":{\"content\":\"b\"}}]}\n\n";

#[tokio::test]
async fn cancelling_the_only_choice_drops_a_stalled_upstream() {
    let (upstream, dropped) = stalling(vec![A0]);
    let c = Completions::new(Source::sse(upstream));
    let choice = c.choice(0).await.unwrap();
    let mut content = choice.content();
    assert_eq!(&*content.next().await.unwrap().unwrap(), "a");
    assert!(choice.cancel());
    assert!(!choice.cancel(), "a second cancel does nothing");
    assert!(content.next().await.is_none(), "ends cleanly, no error");
    assert!(eventually(&dropped).await, "the upstream was not dropped");
    assert!(c.outcome().await.is_ok());
    let completion = c.collect().await.unwrap();
    assert!(completion.choices[0].cancelled);
    assert_eq!(completion.choices[0].finish_reason, None);
    let json = serde_json::to_value(&completion.choices[0]).unwrap();
    assert_eq!(json["cancelled"], true);
    assert!(json["finish_reason"].is_null());
    // What the cancelled choice received is counted, and flagged as estimated.
    let usage = c.usage().await;
    assert_eq!(usage.source, UsageSource::Estimated);
    assert_eq!(
        completion.choices[0].usage.unwrap().source,
        UsageSource::Estimated
    );
    assert!(completion.choices[0].usage.unwrap().completion_tokens >= 1);
}

#[tokio::test]
async fn a_cancelled_choice_drops_its_later_updates_while_the_others_go_on() {
    let (tx, rx) = futures::channel::mpsc::unbounded::<Result<&'static str, std::io::Error>>();
    let c = Completions::new(Source::sse(rx));
    tx.unbounded_send(Ok(A0)).unwrap();
    tx.unbounded_send(Ok(B1)).unwrap();
    let zero = c.choice(0).await.unwrap();
    let one = c.choice(1).await.unwrap();
    let mut events = zero.events();
    events.next().await.unwrap().unwrap();
    assert!(zero.cancel());
    tx.unbounded_send(Ok(A0)).unwrap(); // dropped: not applied, not an error
    tx.unbounded_send(Ok(
        "data: {\"choices\":[{\"index\":1,\"delta\":{\"content\":\"c\"},\"finish_reason\":\"stop\"}]}\n\n",
    ))
    .unwrap();
    tx.unbounded_send(Ok("data: [DONE]\n\n")).unwrap();
    let rest: Vec<_> = events.try_collect().await.unwrap();
    assert_eq!(rest, vec![ChoiceEvent::Cancelled(CancelReason::Asked)]);
    assert_eq!(
        one.message().await.unwrap().message.content.as_deref(),
        Some("bc")
    );
    let completion = c.collect().await.unwrap();
    assert_eq!(completion.choices[0].message.content.as_deref(), Some("a"));
    assert!(completion.choices[0].cancelled);
    assert!(!completion.choices[1].cancelled);
    assert!(c.warnings().is_empty(), "{:?}", c.warnings());
    assert!(c.choice_errors().await.is_empty());
}

#[tokio::test]
async fn an_upstream_is_kept_while_a_choice_of_it_is_still_wanted() {
    let (upstream, dropped) = stalling(vec![A0, B1]);
    let c = Completions::new(Source::sse(upstream));
    let zero = c.choice(0).await.unwrap();
    c.choice(1).await.unwrap();
    assert!(zero.cancel());
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!dropped.load(Ordering::SeqCst), "choice 1 is still wanted");
    c.choice(1).await.unwrap().cancel();
    assert!(eventually(&dropped).await);
}

const ONE: &str = concat!(
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"42\"},\"finish_reason\":\"stop\"}]}\n\n",
    "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":1,\"total_tokens\":11}}\n\n",
    "data: [DONE]\n\n",
);

#[tokio::test]
async fn fan_out_numbers_by_n_and_a_failing_upstream_fails_only_its_choices() {
    let failing = stream::iter([
        Ok::<_, std::io::Error>(A0.as_bytes().to_vec()),
        Err(std::io::Error::other("connection reset")),
    ]);
    let two = concat!(
        "data: {\"choices\":[{\"index\":1,\"delta\":{\"content\":\"y\"},\"finish_reason\":\"stop\"}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"},\"finish_reason\":\"stop\"}]}\n\n",
        "data: [DONE]\n\n",
    );
    let c = Completions::builder().fan_out([
        Source::reader(ONE.as_bytes()).n(1),
        Source::sse(failing).n(1),
        Source::reader(two.as_bytes()).n(2),
    ]);
    let mut seen: Vec<u32> = c.choices().map(|c| c.index()).collect().await;
    seen.sort();
    assert_eq!(seen, [0, 1, 2, 3]);
    let outcome = c.outcome().await;
    assert!(
        matches!(&outcome, Err(e) if e.upstream() == Some(1)),
        "{outcome:?}"
    );
    let errors = c.choice_errors().await;
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(matches!(&errors[0], (1, e) if e.upstream() == Some(1)));
    let inc = c.collect().await.unwrap_err();
    let texts: Vec<_> = inc
        .partial
        .choices
        .iter()
        .map(|c| (c.index, c.message.content.clone().unwrap_or_default()))
        .collect();
    assert_eq!(
        texts,
        [
            (0, "42".into()),
            (1, "a".into()),
            (2, "x".into()),
            (3, "y".into())
        ]
    );
    // Usage: upstream 0 reported, the others are estimated; each counted once, and said so.
    let usage = c.usage().await;
    assert_eq!(usage.source, UsageSource::Estimated);
    assert_eq!(usage.upstreams.len(), 3);
    assert_eq!(usage.upstreams[0].source, UsageSource::Reported);
    assert_eq!(usage.upstreams[0].prompt_tokens, 10);
    assert_eq!(usage.upstreams[2].source, UsageSource::Estimated);
    let sum: u64 = usage.upstreams.iter().map(|u| u.total_tokens).sum();
    assert_eq!(usage.total_tokens, sum);
}

#[tokio::test]
async fn fan_out_without_n_numbers_in_first_seen_order() {
    let (late, _) = stalling(vec![]);
    let (tx, rx) = futures::channel::mpsc::unbounded::<Result<&'static str, std::io::Error>>();
    let c = Completions::builder().fan_out([Source::sse(late), Source::sse(rx)]);
    tx.unbounded_send(Ok(B1)).unwrap();
    tx.unbounded_send(Ok(A0)).unwrap();
    let mut choices = c.choices();
    let first = choices.next().await.unwrap();
    let second = choices.next().await.unwrap();
    assert_eq!((first.index(), second.index()), (0, 1));
    let mut content = first.content();
    assert_eq!(&*content.next().await.unwrap().unwrap(), "b");
}

#[tokio::test]
async fn fan_out_with_reported_usage_sums_it_with_prompts_once_per_request() {
    let c = Completions::builder().fan_out([
        Source::reader(ONE.as_bytes()),
        Source::reader(ONE.as_bytes()),
    ]);
    let completion = c.collect().await.unwrap();
    let usage = completion.usage.unwrap();
    assert_eq!(usage.source, UsageSource::Reported);
    assert_eq!(
        (
            usage.prompt_tokens,
            usage.completion_tokens,
            usage.total_tokens
        ),
        (20, 2, 22)
    );
    assert_eq!(completion.choices[1].usage.unwrap().completion_tokens, 1);
}

#[tokio::test]
async fn dropping_everything_mid_stream_drops_every_upstream() {
    let (a, a_dropped) = stalling(vec![A0]);
    let (b, b_dropped) = stalling(vec![A0]);
    let c = Completions::builder().fan_out([Source::sse(a), Source::sse(b)]);
    let mut choices = c.choices();
    choices.next().await.unwrap();
    choices.next().await.unwrap();
    drop(choices);
    drop(c);
    assert!(eventually(&a_dropped).await);
    assert!(eventually(&b_dropped).await);
}

#[tokio::test]
async fn cancelling_in_one_upstream_drops_only_that_upstream() {
    let (a, a_dropped) = stalling(vec![A0]);
    let (b, b_dropped) = stalling(vec![A0]);
    let c = Completions::builder().fan_out([Source::sse(a).n(1), Source::sse(b).n(1)]);
    c.choice(1).await.unwrap();
    assert!(c.choice(0).await.unwrap().cancel());
    assert!(eventually(&a_dropped).await);
    tokio::time::sleep(Duration::from_millis(30)).await;
    assert!(!b_dropped.load(Ordering::SeqCst));
    assert!(c.choice(1).await.unwrap().cancel());
    assert!(eventually(&b_dropped).await);
    assert!(c.outcome().await.is_ok());
}

fn answer(text: &str, finish: &str) -> String {
    format!(
        "data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{text}\"}},\"finish_reason\":\"{finish}\"}}]}}\n\ndata: [DONE]\n\n"
    )
}

fn ready(text: String) -> impl Stream<Item = Result<String, std::io::Error>> + Send + 'static {
    stream::iter([Ok(text)])
}

#[tokio::test]
async fn first_finished_skips_length_and_cancels_a_stalled_choice() {
    let (slow, slow_dropped) = stalling(vec![A0]);
    let c = Completions::builder().fan_out([
        Source::sse(ready(answer("cut", "length"))).n(1),
        Source::sse(slow).n(1),
        Source::sse(ready(answer("good", "stop"))).n(1),
    ]);
    // Choice 1 must be there to be cancelled (and counted).
    let stalled = c.choice(1).await.unwrap();
    let selection = c.first_finished().await;
    assert_eq!(selection.selected, [2]);
    assert_eq!(selection.cancelled, [1]);
    assert!(selection.cancelled_tokens >= 1);
    assert!(eventually(&slow_dropped).await);
    // Its cancel says why, and that the pick sent it.
    let events: Vec<ChoiceEvent> = stalled.events().try_collect().await.unwrap();
    assert_eq!(
        events.last(),
        Some(&ChoiceEvent::Cancelled(CancelReason::Decided))
    );
    assert_eq!(stalled.cancel_reason(), Some(CancelReason::Decided));
    assert_eq!(CancelReason::Decided.by(), CancelledBy::Library);
    let completion = c.collect().await.unwrap();
    assert_eq!(
        completion.choices[0].finish_reason.as_deref(),
        Some("length")
    );
    assert!(completion.choices[1].cancelled);
}

#[tokio::test]
async fn first_finished_selects_nothing_when_every_choice_fails_or_the_deadline_passes() {
    let failing = || stream::iter([Err::<String, _>(std::io::Error::other("reset"))]);
    let c = Completions::builder().fan_out([
        Source::sse(failing()),
        Source::sse(ready(answer("x", "content_filter"))),
    ]);
    let selection = c.first_finished().await;
    assert!(selection.selected.is_empty());
    assert!(selection.reason.is_some());
    assert!(!selection.timed_out);

    let (slow, dropped) = stalling(vec![A0]);
    let c = Completions::builder().fan_out([Source::sse(slow)]);
    let selection = c.first_finished().deadline(Duration::from_millis(50)).await;
    assert!(selection.timed_out && selection.selected.is_empty());
    assert!(eventually(&dropped).await);
}

#[tokio::test]
async fn a_vote_tie_goes_to_the_key_voted_first_and_no_key_means_no_vote() {
    let c = Completions::builder().fan_out([Source::sse(ready(answer("a", "stop"))).n(1)]);
    let key = |m: &choicewise_core::ChoiceOutput| m.message.content.clone();
    assert_eq!(c.vote(key).await.selected, [0]);

    let (tx, rx) = futures::channel::mpsc::unbounded::<Result<String, std::io::Error>>();
    let c = Completions::builder().fan_out([
        Source::sse(rx).n(1),
        Source::sse(ready(answer("b", "stop"))).n(1),
        Source::sse(ready(answer("none", "stop"))).n(1),
    ]);
    c.choice(1).await.unwrap().message().await.unwrap();
    tx.unbounded_send(Ok(answer("a", "stop"))).unwrap();
    let only_letters =
        |m: &choicewise_core::ChoiceOutput| m.message.content.clone().filter(|t| t.len() == 1);
    let selection = c.vote(only_letters).await;
    let tally = selection.vote.unwrap();
    assert_eq!(
        (
            tally.key.as_str(),
            tally.votes,
            tally.counted,
            tally.choices
        ),
        ("b", 1, 1, 3)
    );
    // Decided without "a": its vote would only tie "b", whose voter finished first.
    assert_eq!(selection.selected, [1]);
}

#[tokio::test]
async fn first_where_skips_finished_choices_it_does_not_accept() {
    let (slow, slow_dropped) = stalling(vec![A0]);
    let c = Completions::builder().fan_out([
        Source::sse(ready(answer("{\\\"city\\\": 3}", "stop"))).n(1),
        Source::sse(slow).n(1),
        Source::sse(ready(answer("{\\\"city\\\": \\\"Paris\\\"}", "stop"))).n(1),
    ]);
    #[derive(serde::Deserialize)]
    #[allow(dead_code)]
    struct Place {
        city: String,
    }
    let parses = |o: &choicewise_core::ChoiceOutput| {
        o.message
            .content
            .as_deref()
            .is_some_and(|t| serde_json::from_str::<Place>(t).is_ok())
    };
    c.choice(1).await.unwrap();
    let selection = c.first_where(parses).await;
    assert_eq!(selection.selected, [2]);
    assert_eq!(selection.cancelled, [1]);
    assert!(eventually(&slow_dropped).await);

    let c = Completions::builder().fan_out([Source::sse(ready(answer("no", "stop")))]);
    let selection = c.first_where(|_| false).await;
    assert!(selection.selected.is_empty());
    assert!(selection.reason.unwrap().contains("accepted"));
}

#[tokio::test]
async fn best_of_waits_for_every_choice_and_ties_go_to_the_first_finished() {
    let (tx, rx) = futures::channel::mpsc::unbounded::<Result<String, std::io::Error>>();
    let c = Completions::builder().fan_out([
        Source::sse(ready(answer("bb", "stop"))).n(1),
        Source::sse(rx).n(1),
        Source::sse(ready(answer("aaaa", "length"))).n(1),
        Source::sse(ready(answer("cc", "stop"))).n(1),
    ]);
    let len =
        |o: &choicewise_core::ChoiceOutput| o.message.content.as_ref().map(|t| t.len() as f64);
    let pick = tokio::spawn({
        let c = c.clone();
        async move { c.best_of(len).await }
    });
    // Not decided while a choice is still running.
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!pick.is_finished());
    tx.unbounded_send(Ok(answer("ddd", "stop"))).unwrap();
    drop(tx);
    let selection = pick.await.unwrap();
    // "aaaa" ended with length: it does not compete.
    assert_eq!((selection.selected, selection.score), (vec![1], Some(3.0)));
    assert!(selection.cancelled.is_empty());

    // Equal scores: the one that finished first.
    let c = Completions::builder().fan_out([Source::sse(ready(answer("x", "stop"))).n(1)]);
    let selection = c.best_of(|_| Some(1.0)).await;
    assert_eq!(selection.selected, [0]);
    let selection = c.best_of(|_| Some(f64::NAN)).await;
    assert!(selection.selected.is_empty() && selection.score.is_none());
}

#[tokio::test]
async fn best_of_at_the_deadline_picks_among_those_in_and_cancels_the_rest() {
    let (slow, dropped) = stalling(vec![A0]);
    let c = Completions::builder().fan_out([
        Source::sse(slow).n(1),
        Source::sse(ready(answer("in time", "stop"))).n(1),
    ]);
    let selection = c
        .best_of(|_| Some(0.5))
        .deadline(Duration::from_millis(100))
        .await;
    assert!(selection.timed_out);
    assert_eq!(
        (selection.selected, selection.cancelled),
        (vec![1], vec![0])
    );
    assert!(eventually(&dropped).await);
}

#[tokio::test]
async fn keep_rest_leaves_the_other_choices_streaming() {
    let (tx, rx) = futures::channel::mpsc::unbounded::<Result<String, std::io::Error>>();
    let c = Completions::builder().fan_out([
        Source::sse(ready(answer("fast", "stop"))).n(1),
        Source::sse(rx).n(1),
    ]);
    let selection = c.first_finished().keep_rest().await;
    assert_eq!((selection.selected, selection.cancelled), (vec![0], vec![]));
    tx.unbounded_send(Ok(answer("slow", "stop"))).unwrap();
    drop(tx);
    let whole = c.collect().await.unwrap();
    assert_eq!(whole.choices[1].message.content.as_deref(), Some("slow"));
    assert!(!whole.choices[1].cancelled);
}

#[tokio::test]
async fn a_declared_choice_that_never_appeared_is_listed_as_cancelled() {
    let (silent, dropped) = stalling(vec![]);
    let c = Completions::builder().fan_out([
        Source::sse(silent).n(2),
        Source::sse(ready(answer("fast", "stop"))).n(1),
    ]);
    let selection = c.first_finished().await;
    assert_eq!(
        (selection.selected, selection.cancelled),
        (vec![2], vec![0, 1])
    );
    assert_eq!(selection.cancelled_tokens, 0);
    assert!(eventually(&dropped).await);
    let whole = c.collect().await.unwrap();
    let listed: Vec<(u32, bool)> = whole
        .choices
        .iter()
        .map(|c| (c.index, c.cancelled))
        .collect();
    assert_eq!(listed, [(0, true), (1, true), (2, false)]);
}

/// An upstream that ends before the next one is added does not end the completion: every
/// source's choices are there, however fast the first ones are read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fast_first_upstream_never_ends_the_fan_out_early() {
    let answer = |a: &str| {
        let sse = format!(
            "data: {{\"choices\":[{{\"delta\":{{\"content\":\"{a}\"}},\"finish_reason\":\"stop\"}}]}}\n\n"
        );
        Source::reader(std::io::Cursor::new(sse)).n(1)
    };
    for _ in 0..300 {
        let c = Completions::builder().fan_out([answer("41"), answer("42"), answer("43")]);
        let whole = c.collect().await.unwrap();
        let texts: Vec<_> = (whole.choices.iter())
            .map(|c| c.message.content.as_deref().unwrap_or_default())
            .collect();
        assert_eq!(texts, ["41", "42", "43"]);
    }
}
