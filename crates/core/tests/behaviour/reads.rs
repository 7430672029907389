//! Every read goes to the choices' actors, small or large, while an actor may still be working
//! on the batches before it: a choice's updates apply in order, and a fault stays with its
//! choice.

use std::time::Duration;

use choicewise_core::{ChoiceEvent, Completions, ErrorDetail, Source};
use choicewise_test_support::{DONE, content_chunk, within};
use futures::TryStreamExt;
use futures::channel::mpsc::{UnboundedSender, unbounded};

type Read = Result<Vec<u8>, std::io::Error>;

fn chunk(index: u32, content: &str, finish: Option<&str>) -> Vec<u8> {
    content_chunk(index.into(), content, finish).into_bytes()
}

const SETTLED: Duration = Duration::from_secs(20);

/// A completion whose upstream the test feeds by hand; its actors never retire.
fn controlled() -> (Completions, UnboundedSender<Read>) {
    let (tx, rx) = unbounded::<Read>();
    let completions = Completions::builder()
        .fault_hook(choicewise_test_support::fault::Markers)
        .hibernate_after(Duration::from_secs(3600))
        .start(Source::sse(rx));
    (completions, tx)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_read_waits_for_the_choices_busy_actor() {
    let (completions, tx) = controlled();
    // The actor spends 50 ms on its first update; the next reads are small and come while it
    // works: they must queue behind it, not be applied ahead of it by the reader.
    let later = vec![chunk(0, "b", None), chunk(0, "c", Some("stop"))];
    assert_eq!(
        crate::common::content_after_a_slow_update(completions, tx, later).await,
        "abc"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_in_a_choice_actor_fails_that_choice_only() {
    let poison = choicewise_test_support::fault::PANIC_CHOICE;
    let (completions, tx) = controlled();
    tx.unbounded_send(Ok([chunk(0, "a", None), chunk(1, "x", None)].concat()))
        .unwrap();
    // Both actors have handled their first batch.
    let c0 = completions.choice(0).await.unwrap();
    let c1 = completions.choice(1).await.unwrap();
    let mut first = c1.content();
    assert_eq!(&*first.try_next().await.unwrap().unwrap(), "x");
    tokio::time::sleep(Duration::from_millis(20)).await;
    tx.unbounded_send(Ok(chunk(1, poison, None))).unwrap();
    tx.unbounded_send(Ok(chunk(1, "y", None))).unwrap();
    tx.unbounded_send(Ok(chunk(0, "b", Some("stop")))).unwrap();
    tx.unbounded_send(Ok(DONE.as_bytes().to_vec())).unwrap();

    let events: Vec<ChoiceEvent> = within(SETTLED, "choice 0", c0.events().try_collect())
        .await
        .expect("choice 0 is untouched");
    assert_eq!(
        events,
        vec![
            ChoiceEvent::Content("a".into()),
            ChoiceEvent::Content("b".into()),
            ChoiceEvent::Finished("stop".into()),
        ]
    );
    let failed = within(SETTLED, "choice 1", c1.content().try_collect::<Vec<_>>())
        .await
        .expect_err("choice 1 fails");
    assert!(
        matches!(failed.detail(), ErrorDetail::ActorFailed { choice: Some(1), message } if message.contains("panicked")),
        "{failed:?}"
    );
    let incomplete = within(SETTLED, "collect", completions.collect())
        .await
        .expect_err("one choice failed");
    let partial = &incomplete.partial;
    assert_eq!(partial.choices[0].message.content.as_deref(), Some("ab"));
    assert_eq!(partial.choices[0].finish_reason.as_deref(), Some("stop"));
    assert_eq!(partial.choices[1].message.content.as_deref(), Some("x"));
    assert_eq!(partial.choices[1].finish_reason, None);
}

/// Reads of every size, the large ones (more than 4 KiB of updates, their batch buffers
/// recycled) and the small ones, give what the whole stream read at once gives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_and_small_reads_in_turn_give_the_same_completion() {
    let chunks: Vec<Vec<u8>> = (0..600)
        .map(|k| {
            let index = (k * 7 % 3) as u32;
            let finish = (k >= 597).then_some("stop");
            chunk(index, &format!("w{k} "), finish)
        })
        .collect();
    let whole: Vec<u8> = chunks
        .iter()
        .flatten()
        .copied()
        .chain(DONE.bytes())
        .collect();
    let reference = Completions::new(Source::sse(futures::stream::iter([
        Ok::<_, std::io::Error>(whole.clone()),
    ])))
    .collect()
    .await
    .unwrap();
    for pattern in [&[60usize, 1][..], &[1, 1, 80], &[2, 45, 3, 1]] {
        let mut reads = Vec::new();
        let mut rest = &chunks[..];
        for &take in pattern.iter().cycle() {
            if rest.is_empty() {
                break;
            }
            let (read, tail) = rest.split_at(take.min(rest.len()));
            reads.push(Ok::<_, std::io::Error>(read.concat()));
            rest = tail;
        }
        reads.push(Ok(DONE.as_bytes().to_vec()));
        let paced = futures::StreamExt::then(futures::stream::iter(reads), |read| async {
            tokio::task::yield_now().await;
            read
        });
        let got = within(
            SETTLED,
            "collect",
            Completions::new(Source::sse(paced)).collect(),
        )
        .await
        .unwrap();
        assert_eq!(got, reference, "reads of {pattern:?} chunks");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inspecting_closure_may_read_the_choice_and_the_completion_again() {
    // The closures run with no lock held: reading the same choice or the completion from
    // inside them does not deadlock (a blocking thread, so that a deadlock fails the test).
    let sse =
        "data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"},\"finish_reason\":\"stop\"}]}\n\n";
    let completions = Completions::new(Source::reader(sse.as_bytes()));
    let choice = completions.choice(0).await.unwrap();
    let _ = choice.message().await;
    let c = completions.clone();
    let read = tokio::task::spawn_blocking(move || {
        let inner = choice.inspect(|o| (o.message.content.clone(), choice.snapshot().index));
        let outer = c.inspect(|o, _| (o.index, c.inspect(|p, _| p.index)));
        (inner, outer)
    });
    let (inner, outer) = within(SETTLED, "the inspecting closures", read)
        .await
        .unwrap();
    assert_eq!(inner, (Some("Hi".to_string()), 0));
    assert_eq!(outer, [(0, vec![0])]);
}
