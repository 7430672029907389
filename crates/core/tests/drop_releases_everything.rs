//! When the `Completions` value and every handle are dropped mid-stream, the actors stop and
//! the upstream stream is dropped. (Its own test binary: it counts the process's live actors.)

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use choicewise_core::diagnostics::live_actors;
use choicewise_core::{Completions, Source};
use common::actors_reach;
use futures::StreamExt;

/// An upstream that sends two choices' first updates, then stalls forever, and records its drop.
struct Upstream {
    dropped: Arc<AtomicBool>,
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.dropped.store(true, Ordering::SeqCst);
    }
}

fn stalling_upstream(
    dropped: Arc<AtomicBool>,
) -> impl futures::Stream<Item = Result<Vec<u8>, std::io::Error>> + Send {
    let guard = Upstream { dropped };
    let first = b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}},{\"index\":1,\"delta\":{\"content\":\"b\"}}]}\n\n".to_vec();
    futures::stream::iter([Ok(first)])
        .chain(futures::stream::pending())
        .map(move |x| {
            let _ = &guard;
            x
        })
}

/// The tests here count the process's live actors: one at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_every_handle_mid_stream_stops_the_actors_and_drops_the_upstream() {
    let _serial = SERIAL.lock().await;
    assert_eq!(actors_reach(0).await, 0);
    for round in 0..20 {
        let dropped = Arc::new(AtomicBool::new(false));
        // The actors stay alive while the upstream stalls, so that the count shows them.
        let completions = Completions::builder()
            .hibernate_after(Duration::MAX)
            .start(Source::sse(stalling_upstream(dropped.clone())));
        let mut choices = completions.choices();
        let c0 = choices.next().await.unwrap();
        let mut content = c0.content();
        assert_eq!(&*content.next().await.unwrap().unwrap(), "a");
        let c1 = choices.next().await.unwrap();
        assert_eq!(
            actors_reach(3).await,
            3,
            "round {round}: a reader and two choice actors"
        );
        assert!(!dropped.load(Ordering::SeqCst));
        // Handles still alive keep it running; the last drop stops everything.
        drop(completions);
        drop(choices);
        drop(c0);
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(
            live_actors(),
            3,
            "round {round}: still held by a Choice and a stream"
        );
        drop(content);
        drop(c1);
        assert_eq!(
            actors_reach(0).await,
            0,
            "round {round}: actors left behind"
        );
        for _ in 0..100 {
            if dropped.load(Ordering::SeqCst) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(
            dropped.load(Ordering::SeqCst),
            "round {round}: upstream not dropped"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finished_completions_leave_no_actor_behind() {
    let _serial = SERIAL.lock().await;
    let before = actors_reach(0).await;
    let sse = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"},\"finish_reason\":\"stop\"},{\"index\":1,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n";
    let mut kept = Vec::new();
    for _ in 0..100 {
        let c = Completions::new(Source::reader(sse.as_bytes()));
        c.collect().await.unwrap();
        kept.push(c); // handles still held: the actors end anyway once the stream is over
    }
    assert_eq!(actors_reach(before).await, before);
}
