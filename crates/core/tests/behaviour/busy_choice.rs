//! The reader holds the updates of a choice whose actor is still busy with earlier ones, and
//! sends them when the upstream has nothing more ready: a busy choice's updates never wait
//! for more input or for the end of the stream.

use std::time::Duration;

use choicewise_core::{ChoiceEvent, Completions, Source};
use choicewise_test_support::fault::{Markers, SLOW_CHOICE};
use choicewise_test_support::{content_chunk, within};
use futures::StreamExt;
use futures::channel::mpsc::unbounded;

type Read = Result<Vec<u8>, std::io::Error>;

const SETTLED: Duration = Duration::from_secs(20);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_choices_updates_arrive_while_the_upstream_waits() {
    let (tx, rx) = unbounded::<Read>();
    let completions = Completions::builder()
        .fault_hook(Markers)
        .hibernate_after(Duration::from_secs(3600))
        .start(Source::sse(rx));
    // Two reads ready back to back: the first keeps choice 0's actor busy for 50 ms, so the
    // second comes while it is busy. Then the upstream waits, open, with nothing more.
    let slow = format!("{SLOW_CHOICE}a");
    tx.unbounded_send(Ok(content_chunk(0, &slow, None).into_bytes()))
        .unwrap();
    tx.unbounded_send(Ok((content_chunk(0, "b", None)
        + &content_chunk(1, "x", None))
        .into_bytes()))
        .unwrap();
    let zero = completions.choice(0).await.unwrap();
    let one = completions.choice(1).await.unwrap();
    let events: Vec<ChoiceEvent> = within(SETTLED, "choice 0's two updates", async {
        zero.events().take(2).map(Result::unwrap).collect().await
    })
    .await;
    assert_eq!(
        events,
        [
            ChoiceEvent::Content(slow.as_str().into()),
            ChoiceEvent::Content("b".into())
        ]
    );
    let x = within(SETTLED, "choice 1's update", one.content().next()).await;
    assert_eq!(x.unwrap().unwrap().as_ref(), "x");
    assert!(
        !tx.is_closed(),
        "the upstream is still open: nothing waited for its end"
    );
    // Then it ends: both choices settle with what they received.
    tx.unbounded_send(Ok(b"data: [DONE]\n\n".to_vec())).unwrap();
    let completion = within(SETTLED, "collect", completions.collect())
        .await
        .unwrap();
    assert_eq!(
        completion.choices[0].message.content.as_deref(),
        Some(format!("{slow}b").as_str())
    );
    assert_eq!(completion.choices[1].message.content.as_deref(), Some("x"));
}
