//! The first-* picks: the first choices to produce (`first_token`) or to finish well
//! (`first_finished`), `take(n)` of them in the order they qualified, and `hedge_after` on
//! samples made on demand. The gateway states its first-token, first-n and hedged picks with
//! these; nothing else picks.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use choicewise_core::{Completions, Source};
use choicewise_test_support::{content_chunk, within};
use futures::channel::mpsc::{UnboundedSender, unbounded};
use futures::stream;

type Read = Result<Vec<u8>, std::io::Error>;

const SETTLED: Duration = Duration::from_secs(20);

/// One upstream of one choice that the test feeds by hand.
fn fed() -> (Source, UnboundedSender<Read>) {
    let (tx, rx) = unbounded::<Read>();
    (Source::sse(rx).n(1), tx)
}

fn send(tx: &UnboundedSender<Read>, text: &str, finish: Option<&str>) {
    tx.unbounded_send(Ok(content_chunk(0, text, finish).into_bytes()))
        .unwrap();
}

fn reasoning(tx: &UnboundedSender<Read>) {
    let chunk = "data: {\"choices\":[{\"index\":0,\"delta\":{\"reasoning_content\":\"hm\"}}]}\n\n";
    tx.unbounded_send(Ok(chunk.as_bytes().to_vec())).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_token_picks_the_first_to_produce_and_lets_it_stream_on() {
    let (a, a_tx) = fed();
    let (b, b_tx) = fed();
    let (c, c_tx) = fed();
    let completions = Completions::builder().fan_out([a, b, c]);
    // Reasoning and an empty content delta are not producing: only choice 2's "4" is.
    reasoning(&a_tx);
    send(&b_tx, "", None);
    let pick = tokio::spawn({
        let completions = completions.clone();
        async move { completions.first_token().await }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!pick.is_finished(), "nothing has produced yet");
    send(&c_tx, "4", None);
    let selection = within(SETTLED, "the pick", pick).await.unwrap();
    assert_eq!(selection.selected, [2]);
    assert_eq!(selection.cancelled, [0, 1]);
    assert_eq!(selection.reason, None);
    // Decided at the token, before the choice finished: it streams on.
    send(&c_tx, " is the answer", Some("stop"));
    drop(c_tx);
    let whole = within(SETTLED, "collect", completions.collect())
        .await
        .unwrap();
    assert_eq!(
        whole.choices[2].message.content.as_deref(),
        Some("4 is the answer")
    );
    assert!(whole.choices[0].cancelled && whole.choices[1].cancelled);
    // The cancelled upstreams were dropped: their senders see it.
    assert!(a_tx.is_closed() && b_tx.is_closed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn take_n_selects_in_the_order_the_choices_qualified() {
    let (sources, senders): (Vec<_>, Vec<_>) = (0..4).map(|_| fed()).unzip();
    let completions = Completions::builder().fan_out(sources);
    let pick = tokio::spawn({
        let completions = completions.clone();
        async move { completions.first_finished().take(2).await }
    });
    // Choice 3 finishes first, then 1 cut short (`length`: not a good finish), then 0.
    send(&senders[3], "three", Some("stop"));
    tokio::time::sleep(Duration::from_millis(30)).await;
    send(&senders[1], "one", Some("length"));
    tokio::time::sleep(Duration::from_millis(30)).await;
    send(&senders[0], "zero", Some("stop"));
    let selection = within(SETTLED, "the pick", pick).await.unwrap();
    assert_eq!(selection.selected, [3, 0], "in the order they finished");
    assert_eq!(selection.cancelled, [2]);
    assert!(
        senders[2].is_closed(),
        "the unfinished upstream was dropped"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_choice_producing_is_a_reason_not_a_hang() {
    let reasoning_only = "data: {\"choices\":[{\"delta\":{\"reasoning_content\":\"hm\"},\"finish_reason\":\"stop\"}]}\n\n";
    let c = Completions::new(Source::reader(reasoning_only.as_bytes()));
    let selection = within(SETTLED, "the pick", c.first_token().take(2)).await;
    assert!(selection.selected.is_empty());
    assert_eq!(
        selection.reason.as_deref(),
        Some("no choice produced content or a tool call")
    );
}

/// Samples whose first one is silent (no byte, not even its status line, were it HTTP) and
/// the others answer at once; records which samples started.
fn silent_first(max: usize) -> (Completions, Arc<Mutex<Vec<usize>>>) {
    let started = Arc::new(Mutex::new(Vec::new()));
    let log = started.clone();
    let completions = Completions::builder().samples(max, move |k| {
        log.lock().unwrap().push(k);
        match k {
            0 => Source::sse(stream::pending::<Read>()).n(1),
            _ => {
                let chunk: Read = Ok(content_chunk(0, "hedged", Some("stop")).into_bytes());
                Source::sse(stream::iter([chunk])).n(1)
            }
        }
    });
    (completions, started)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hedge_starts_the_next_sample_when_the_first_is_silent() {
    let (completions, started) = silent_first(3);
    let selection = within(
        SETTLED,
        "the hedged pick",
        completions
            .first_token()
            .hedge_after(Duration::from_millis(100)),
    )
    .await;
    assert_eq!(selection.selected, [1]);
    assert_eq!(selection.started, Some(2), "one hedge was enough");
    assert_eq!(*started.lock().unwrap(), [0, 1]);
    let whole = within(SETTLED, "collect", completions.collect())
        .await
        .unwrap();
    assert!(whole.choices[0].cancelled, "the silent sample was dropped");
    assert_eq!(whole.choices[1].message.content.as_deref(), Some("hedged"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_hedge_when_the_first_sample_answers_in_time() {
    let quick = Arc::new(Mutex::new(Vec::new()));
    let log = quick.clone();
    let completions = Completions::builder().samples(3, move |k| {
        log.lock().unwrap().push(k);
        let chunk = content_chunk(0, "quick", Some("stop")).into_bytes();
        Source::sse(stream::iter([Ok::<_, std::io::Error>(chunk)])).n(1)
    });
    let selection = within(
        SETTLED,
        "the hedged pick",
        completions
            .first_token()
            .hedge_after(Duration::from_secs(5)),
    )
    .await;
    assert_eq!(selection.selected, [0]);
    assert_eq!(selection.started, Some(1));
    assert_eq!(*quick.lock().unwrap(), [0]);
}

/// A vote that no key wins answers, when told to, with the choice that finished well first
/// (in time, not by index); the tally lists every key, text and tool calls alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_undecided_vote_answers_the_first_to_finish_when_told_to() {
    use choicewise_core::VoteKey;
    let (a, a_tx) = fed();
    let (b, b_tx) = fed();
    let (c, c_tx) = fed();
    let completions = Arc::new(Completions::builder().fan_out([a, b, c]));
    let key = VoteKey::content();
    let picking = {
        let completions = Arc::clone(&completions);
        tokio::spawn(async move {
            (completions.vote(move |o| key.of(o)))
                .min_votes(2)
                .or_first_finished()
                .await
        })
    };
    // Choice 2 finishes first, then 0, then 1: every answer differs.
    send(&c_tx, "three", Some("stop"));
    tokio::time::sleep(Duration::from_millis(50)).await;
    send(&a_tx, "one", Some("stop"));
    tokio::time::sleep(Duration::from_millis(50)).await;
    send(&b_tx, "two", Some("stop"));
    let selection = within(SETTLED, "the vote", picking).await.unwrap();
    assert_eq!(selection.selected, [2]);
    let tally = selection.vote.unwrap();
    assert!(!tally.decided);
    assert_eq!(
        (tally.key.as_str(), tally.votes, tally.counted),
        ("three", 1, 3)
    );
    let keys: Vec<&str> = tally.tally.iter().map(|v| v.key.as_str()).collect();
    assert_eq!(
        keys,
        ["three", "one", "two"],
        "ties in the order of the first votes"
    );
    assert!(selection.reason.unwrap().starts_with("no key has 2 votes"));
}

/// Without `or_first_finished` an undecided vote selects nothing; with it, a choice cut at
/// its length is still an answer, and only a vote whose every choice failed selects nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_undecided_vote_selects_nothing_unless_some_choice_finished_well() {
    let (a, a_tx) = fed();
    let (b, b_tx) = fed();
    let completions = Completions::builder().fan_out([a, b]);
    send(&a_tx, "one", Some("stop"));
    send(&b_tx, "two", Some("stop"));
    let selection = within(
        SETTLED,
        "the vote",
        completions.vote(|o| o.message.content.clone()).min_votes(2),
    )
    .await;
    assert!(selection.selected.is_empty());
    assert!(selection.vote.is_none());

    let (a, a_tx) = fed();
    let (b, b_tx) = fed();
    let completions = Completions::builder().fan_out([a, b]);
    send(&a_tx, "cut", Some("length"));
    drop(a_tx);
    b_tx.unbounded_send(Err(std::io::Error::other("reset")))
        .unwrap();
    let pick = completions
        .vote(|o| o.message.content.clone())
        .or_first_finished();
    let selection = within(SETTLED, "the vote", pick).await;
    assert_eq!(selection.selected, [0], "the cut answer: {selection:?}");
    assert!(!selection.vote.as_ref().unwrap().decided);
    assert_eq!(
        selection.reason.as_deref(),
        Some("no choice finished with a key to vote on")
    );

    let (a, a_tx) = fed();
    let (b, b_tx) = fed();
    let completions = Completions::builder().fan_out([a, b]);
    a_tx.unbounded_send(Err(std::io::Error::other("reset")))
        .unwrap();
    b_tx.unbounded_send(Err(std::io::Error::other("reset")))
        .unwrap();
    let pick = completions
        .vote(|o| o.message.content.clone())
        .or_first_finished();
    let selection = within(SETTLED, "the vote", pick).await;
    assert!(selection.selected.is_empty(), "{selection:?}");
    assert!(selection.vote.is_none());
}
