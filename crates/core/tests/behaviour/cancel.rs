//! A cancel takes effect after the updates its choice had already received: it never drops
//! one of them, even while the choice's actor is still parsing it.

use std::time::Duration;

use choicewise_core::{ChoiceEvent, Completions, Source, cancel::CancelReason};
use choicewise_test_support::fault::{Markers, SLOW_CHOICE};
use choicewise_test_support::{content_chunk, within};
use futures::TryStreamExt;
use futures::channel::mpsc::{UnboundedSender, unbounded};

type Read = Result<Vec<u8>, std::io::Error>;

const SETTLED: Duration = Duration::from_secs(20);

/// A completion whose upstream the test feeds by hand (it never sends `[DONE]`: the upstream
/// ends when no choice is wanted), after one read holding a slow update of choice 0 (its
/// actor spends 50 ms on it) and choice 1's whole answer.
fn slow_choice_beside_a_fast_one(finish_0: Option<&str>) -> (Completions, UnboundedSender<Read>) {
    slow_choice_of(&format!("{SLOW_CHOICE}a"), finish_0)
}

/// As [`slow_choice_beside_a_fast_one`], choice 0's update of `text`.
fn slow_choice_of(text: &str, finish_0: Option<&str>) -> (Completions, UnboundedSender<Read>) {
    let (tx, rx) = unbounded::<Read>();
    let completions = Completions::builder()
        .fault_hook(Markers)
        .hibernate_after(Duration::from_secs(3600))
        .start(Source::sse(rx));
    let read = content_chunk(0, text, finish_0) + &content_chunk(1, "x", Some("stop"));
    tx.unbounded_send(Ok(read.into_bytes())).unwrap();
    (completions, tx)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_keeps_the_update_received_before_it() {
    let (completions, _tx) = slow_choice_beside_a_fast_one(None);
    let zero = completions.choice(0).await.unwrap();
    let one = completions.choice(1).await.unwrap();
    // Choice 1 is in while choice 0's actor still parses its first update: cancelling
    // choice 0 now must keep that update, as a caller taking the first finished choice does.
    within(SETTLED, "choice 1", one.message()).await.unwrap();
    assert!(zero.cancel());
    assert!(!zero.cancel(), "a second cancel does nothing");

    let events: Vec<ChoiceEvent> = within(SETTLED, "choice 0", zero.events().try_collect())
        .await
        .unwrap();
    let slow = ChoiceEvent::Content(format!("{SLOW_CHOICE}a").into());
    assert!(events.contains(&slow), "{events:?}");
    assert_eq!(
        events.last(),
        Some(&ChoiceEvent::Cancelled(CancelReason::Asked)),
        "{events:?}"
    );
    assert!(zero.is_cancelled());
    // The upstream was dropped (no choice is wanted), and the completion has both.
    let completion = within(SETTLED, "collect", completions.collect())
        .await
        .unwrap();
    let c0 = &completion.choices[0];
    assert!(c0.cancelled);
    assert_eq!(c0.finish_reason, None);
    assert_eq!(
        c0.message.content.as_deref(),
        Some(format!("{SLOW_CHOICE}a").as_str())
    );
    assert_eq!(completion.choices[1].finish_reason.as_deref(), Some("stop"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_update_received_before_a_cancel_may_still_finish_the_choice() {
    let (completions, _tx) = slow_choice_beside_a_fast_one(Some("stop"));
    let zero = completions.choice(0).await.unwrap();
    let one = completions.choice(1).await.unwrap();
    within(SETTLED, "choice 1", one.message()).await.unwrap();
    // Choice 0's finish came before the cancel: the choice finishes.
    zero.cancel();
    let message = within(SETTLED, "choice 0", zero.message()).await.unwrap();
    assert_eq!(message.finish_reason.as_deref(), Some("stop"));
    assert!(!message.cancelled);
    assert!(!zero.is_cancelled());
    let events: Vec<ChoiceEvent> = within(SETTLED, "events", zero.events().try_collect())
        .await
        .unwrap();
    assert!(
        !events
            .iter()
            .any(|e| matches!(e, ChoiceEvent::Cancelled(_))),
        "{events:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_finished_lists_as_cancelled_only_the_choices_that_ended_cancelled() {
    // Both choices' finishes are in the one read: whichever is picked, the other finishes
    // too (its finish came before the cancel), so nothing is listed as cancelled.
    let (completions, _tx) = slow_choice_beside_a_fast_one(Some("stop"));
    let selection = within(
        SETTLED,
        "first finished",
        completions.first_finished().into_future(),
    )
    .await;
    assert_eq!(selection.selected.len(), 1, "{selection:?}");
    assert!(selection.cancelled.is_empty(), "{selection:?}");
    assert_eq!(selection.cancelled_tokens, 0);
    let completion = within(SETTLED, "collect", completions.collect())
        .await
        .unwrap();
    assert!(completion.choices.iter().all(|c| !c.cancelled));
}

/// The tokens of the choices a pick cancelled are its text's, counted on a blocking thread
/// when long (or the encoding's table is not loaded yet: the first count loads it) and in
/// place when short.
#[cfg(feature = "estimate")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pick_counts_the_tokens_of_the_choices_it_cancelled() {
    let long = format!("{SLOW_CHOICE}{}", "word ".repeat(200));
    for text in [long, format!("{SLOW_CHOICE}a few words")] {
        let (completions, _tx) = slow_choice_of(&text, None);
        let selection = within(
            SETTLED,
            "first finished",
            completions.first_finished().into_future(),
        )
        .await;
        assert_eq!(selection.selected, [1], "{selection:?}");
        assert_eq!(selection.cancelled, [0], "{selection:?}");
        let completion = within(SETTLED, "collect", completions.collect())
            .await
            .unwrap();
        let counted =
            completion.choices[0].completion_tokens(choicewise_core::EncodingName::O200kBase);
        assert!(counted > 3, "{counted}");
        assert_eq!(selection.cancelled_tokens, counted, "{} bytes", text.len());
    }
}
