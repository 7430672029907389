//! Retiring the choice actors while the upstream is quiet (`hibernate_after`): an idle
//! completion holds only its reader, the sub-streams go on across a retirement, the stream can
//! end or fail while the actors are retired, and no update is lost or reordered when actors
//! retire and come back between any two reads.
//!
//! The tests read process-wide actor counters, so they run one at a time.

mod common;

use std::sync::LazyLock;
use std::time::Duration;

use choicewise_core::diagnostics::actors_started;
use choicewise_core::{ChatCompletion, ChoiceEvent, Completions, ErrorDetail, Source};
use choicewise_test_support::{DONE, sse_chunk, within};
use common::actors_reach;
use common::streams::{completion, interleave, sse};
use futures::channel::mpsc::{UnboundedSender, unbounded};
use futures::{StreamExt, TryStreamExt};
use proptest::prelude::*;
use tokio::sync::Mutex;

static SERIAL: Mutex<()> = Mutex::const_new(());

static RUNTIME: LazyLock<tokio::runtime::Runtime> = LazyLock::new(|| {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
});

type Read = Result<Vec<u8>, std::io::Error>;

fn chunk(index: u32, content: &str, finish: Option<&str>) -> Vec<u8> {
    let chunk = serde_json::json!({
        "id": "chatcmpl-h", "object": "chat.completion.chunk", "created": 1, "model": "m",
        "choices": [{"index": index, "delta": {"content": content}, "finish_reason": finish}]
    });
    sse_chunk(chunk).into_bytes()
}

/// How long a test waits for what it awaits, failing instead of hanging if a choice is never
/// settled.
const SETTLED: Duration = Duration::from_secs(20);

/// A completion whose upstream the test feeds by hand.
fn controlled(quiet: Duration) -> (Completions, UnboundedSender<Read>) {
    let (tx, rx) = unbounded::<Read>();
    let completions = Completions::builder()
        .fault_hook(choicewise_test_support::fault::Markers)
        .hibernate_after(quiet)
        .start(Source::sse(rx));
    (completions, tx)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_completion_keeps_only_its_reader_and_its_streams_go_on() {
    let _serial = SERIAL.lock().await;
    let base = actors_reach(0).await;
    assert_eq!(base, 0, "actors left by another test");
    let (completions, tx) = controlled(Duration::from_millis(20));
    for i in [2, 0, 1] {
        tx.unbounded_send(Ok(chunk(i, &format!("{i}a "), None)))
            .unwrap();
    }
    let choices: Vec<_> = completions.choices().take(3).collect().await;
    // A content stream opened before the retirement, read across it.
    let mut content = choices[1].content();
    assert_eq!(&*content.next().await.unwrap().unwrap(), "0a ");

    assert_eq!(actors_reach(1).await, 1, "the choice actors did not retire");
    let started = actors_started();

    tx.unbounded_send(Ok(chunk(0, "0b", Some("stop")))).unwrap();
    assert_eq!(
        &*within(SETTLED, "the next content", content.next())
            .await
            .unwrap()
            .unwrap(),
        "0b"
    );
    assert!(
        within(SETTLED, "the next content", content.next())
            .await
            .is_none()
    );
    assert_eq!(
        actors_started(),
        started + 1,
        "only choice 0's actor comes back"
    );

    assert_eq!(
        actors_reach(1).await,
        1,
        "choice 0's actor did not retire again"
    );
    let mut tail = chunk(2, "2b", Some("length"));
    tail.extend(chunk(1, "1b", Some("stop")));
    tail.extend(DONE.as_bytes());
    tx.unbounded_send(Ok(tail)).unwrap();
    let completion = within(SETTLED, "collect", completions.collect())
        .await
        .unwrap();
    let texts: Vec<_> = completion
        .choices
        .iter()
        .map(|c| c.message.content.clone().unwrap())
        .collect();
    assert_eq!(texts, ["0a 0b", "1a 1b", "2a 2b"]);
    assert_eq!(
        completion.choices[2].finish_reason.as_deref(),
        Some("length")
    );
    drop((choices, content, completions));
    assert_eq!(actors_reach(0).await, 0, "actors left behind");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stream_can_end_while_the_actors_are_retired() {
    let _serial = SERIAL.lock().await;
    assert_eq!(actors_reach(0).await, 0, "actors left by another test");

    // A clean end: the unfinished choice closes cleanly, as it would with its actor alive.
    let (completions, tx) = controlled(Duration::from_millis(5));
    tx.unbounded_send(Ok(chunk(0, "done", Some("stop"))))
        .unwrap();
    tx.unbounded_send(Ok(chunk(1, "half", None))).unwrap();
    let c1 = completions.choice(1).await.unwrap();
    assert_eq!(actors_reach(1).await, 1);
    tx.unbounded_send(Ok(DONE.as_bytes().to_vec())).unwrap();
    let completion = within(SETTLED, "collect", completions.collect())
        .await
        .unwrap();
    assert_eq!(
        completion.choices[1].message.content.as_deref(),
        Some("half")
    );
    let events: Vec<ChoiceEvent> = within(SETTLED, "events", c1.events().try_collect())
        .await
        .unwrap();
    assert_eq!(events.len(), 1, "{events:?}");
    drop((c1, completions));
    assert_eq!(actors_reach(0).await, 0);

    // A cut: every choice ends with the error, keeping what it received.
    let (completions, tx) = controlled(Duration::from_millis(5));
    tx.unbounded_send(Ok(chunk(0, "kept", None))).unwrap();
    let c0 = completions.choice(0).await.unwrap();
    assert_eq!(actors_reach(1).await, 1);
    tx.unbounded_send(Ok(b"data: {\"choi".to_vec())).unwrap();
    drop(tx);
    let incomplete = within(SETTLED, "message", c0.message()).await.unwrap_err();
    assert!(
        matches!(incomplete.error.detail(), ErrorDetail::Truncated { .. }),
        "{:?}",
        incomplete.error
    );
    assert_eq!(incomplete.partial.message.content.as_deref(), Some("kept"));
    drop((c0, completions));
    assert_eq!(actors_reach(0).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_every_handle_while_retired_stops_the_reader() {
    let _serial = SERIAL.lock().await;
    assert_eq!(actors_reach(0).await, 0, "actors left by another test");
    let (completions, tx) = controlled(Duration::from_millis(5));
    tx.unbounded_send(Ok(chunk(0, "x", None))).unwrap();
    tx.unbounded_send(Ok(chunk(1, "y", None))).unwrap();
    let c0 = completions.choice(0).await.unwrap();
    assert_eq!(actors_reach(1).await, 1);
    drop((c0, completions));
    assert_eq!(actors_reach(0).await, 0, "the reader outlived its handles");
    assert!(tx.is_closed(), "the upstream was not released");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_actor_waits_for_the_retired_one_to_apply_its_queue() {
    let _serial = SERIAL.lock().await;
    let (completions, tx) = controlled(Duration::from_millis(1));
    // The actor blocks 50 ms on its first update; meanwhile the upstream goes quiet (the
    // reader retires it, the retirement queued behind the slow update) and the next update
    // comes.
    let later = vec![chunk(0, "b", Some("stop"))];
    assert_eq!(
        common::content_after_a_slow_update(completions, tx, later).await,
        "ab"
    );
}

/// How the upstream paces the next read.
#[derive(Debug, Clone, Copy)]
enum Pause {
    None,
    /// Pending once, then ready at once: the reader may retire nothing, or race a
    /// retirement against the next update.
    Yield,
    /// Quiet for longer than `hibernate_after`: the actors retire.
    Quiet,
}

fn pause() -> impl Strategy<Value = Pause> {
    prop_oneof![Just(Pause::None), Just(Pause::Yield), Just(Pause::Quiet)]
}

async fn outcome(
    reads: Vec<Vec<u8>>,
    pauses: Vec<Pause>,
) -> (ChatCompletion, Vec<(u32, Vec<ChoiceEvent>)>) {
    let paced = futures::stream::iter(reads.into_iter().enumerate()).then(move |(i, read)| {
        let pause = pauses[i % pauses.len()];
        async move {
            match pause {
                Pause::None => {}
                Pause::Yield => tokio::task::yield_now().await,
                Pause::Quiet => tokio::time::sleep(Duration::from_millis(2)).await,
            }
            Ok::<_, std::io::Error>(read)
        }
    });
    common::observe(
        Completions::builder()
            .hibernate_after(Duration::ZERO)
            .start(Source::sse(paced)),
    )
    .await
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// The same interleavings as tests/interleaving.rs, with the actors retiring whenever the
    /// upstream waits: the result and every choice's events equal those of the whole stream
    /// read at once with the actors alive throughout.
    #[test]
    fn retiring_between_any_reads_loses_and_reorders_nothing(
        choices in completion(),
        picks in prop::collection::vec(0usize..4, 0..200),
        group in prop::collection::vec(any::<bool>(), 0..200),
        sizes in prop::collection::vec(1usize..120, 1..6),
        pauses in prop::collection::vec(pause(), 1..8),
    ) {
        let _serial = SERIAL.blocking_lock();
        let shuffled = sse(&interleave(&choices, &picks, &group));
        let whole = futures::stream::iter([Ok::<_, std::io::Error>(shuffled.clone())]);
        let reference = RUNTIME.block_on(async {
            common::observe(Completions::builder().hibernate_after(Duration::MAX).start(Source::sse(whole)))
                .await
        });
        let reads = common::split(&shuffled, &sizes);
        let actual = RUNTIME.block_on(outcome(reads, pauses));
        prop_assert_eq!(&actual.0.choices, &reference.0.choices);
        prop_assert_eq!(&actual.1, &reference.1);
    }
}
