//! Handles and sub-streams: replay from the start, independent readers, drops, panics.

use std::time::Duration;

use choicewise_core::{ChoiceEvent, Completions, ErrorDetail, Source};
use choicewise_test_support::{DONE, content_chunk, within};
use futures::{StreamExt, TryStreamExt};

fn two_choices() -> String {
    [
        content_chunk(1, "b1 ", None),
        content_chunk(0, "a1 ", None),
        content_chunk(1, "b2", Some("stop")),
        content_chunk(0, "a2", Some("length")),
        DONE.to_string(),
    ]
    .concat()
}

type Read = Result<Vec<u8>, std::io::Error>;

/// A byte stream fed by the test, so the test decides when data arrives.
fn channel() -> (
    tokio::sync::mpsc::UnboundedSender<Read>,
    impl futures::Stream<Item = Read> + Send + 'static,
) {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    (
        tx,
        futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|x| (x, rx)) }),
    )
}

#[tokio::test]
async fn sub_streams_opened_late_or_twice_replay_from_the_start() {
    let completions = Completions::new(Source::reader(std::io::Cursor::new(two_choices())));
    completions.collect().await.unwrap();
    let choice = completions.choice(0).await.unwrap();
    for _ in 0..2 {
        let text: Vec<_> = choice.content().try_collect().await.unwrap();
        assert_eq!(text.concat(), "a1 a2");
    }
    let events: Vec<_> = choice.events().try_collect().await.unwrap();
    assert_eq!(events.last(), Some(&ChoiceEvent::Finished("length".into())));
    assert_eq!(
        choice.message().await.unwrap().finish_reason.as_deref(),
        Some("length")
    );
}

#[tokio::test]
async fn a_reader_that_never_reads_blocks_nobody() {
    let (tx, input) = channel();
    let completions = Completions::new(Source::sse(input));
    tx.send(Ok(content_chunk(0, "a", None).into_bytes()))
        .unwrap();
    tx.send(Ok(content_chunk(1, "b", None).into_bytes()))
        .unwrap();
    let idle_reader = completions.choice(0).await.unwrap().content(); // never polled
    let choice1 = completions.choice(1).await.unwrap();
    let mut content1 = choice1.content();
    assert_eq!(&*content1.next().await.unwrap().unwrap(), "b");
    for i in 0..1000 {
        tx.send(Ok(content_chunk(1, &format!("{i} "), None).into_bytes()))
            .unwrap();
    }
    tx.send(Ok(content_chunk(1, "", Some("stop")).into_bytes()))
        .unwrap();
    let rest: Vec<_> = content1.try_collect().await.unwrap();
    assert_eq!(rest.len(), 1000);
    tx.send(Ok(content_chunk(0, "", Some("stop")).into_bytes()))
        .unwrap();
    tx.send(Ok(DONE.as_bytes().to_vec())).unwrap();
    let completion = completions.collect().await.unwrap();
    assert_eq!(completion.choices.len(), 2);
    // The idle reader still has everything, from the start.
    let text: Vec<_> = idle_reader.try_collect().await.unwrap();
    assert_eq!(text.concat(), "a");
}

#[tokio::test]
async fn dropping_one_choice_and_its_streams_leaves_the_others_running() {
    let (tx, input) = channel();
    let completions = Completions::new(Source::sse(input));
    tx.send(Ok([
        content_chunk(0, "a", None),
        content_chunk(1, "b", None),
    ]
    .concat()
    .into_bytes()))
        .unwrap();
    let c0 = completions.choice(0).await.unwrap();
    let mut s0 = c0.content();
    assert_eq!(&*s0.next().await.unwrap().unwrap(), "a");
    drop((s0, c0));
    tx.send(Ok([
        content_chunk(1, "c", Some("stop")),
        content_chunk(0, "z", Some("stop")),
    ]
    .concat()
    .into_bytes()))
        .unwrap();
    tx.send(Ok(DONE.as_bytes().to_vec())).unwrap();
    let c1 = completions.choice(1).await.unwrap();
    let text: Vec<_> = c1.content().try_collect().await.unwrap();
    assert_eq!(text.concat(), "bc");
    let completion = completions.collect().await.unwrap();
    assert_eq!(completion.choices[0].message.content.as_deref(), Some("az"));
}

#[tokio::test]
async fn parsed_chunks_give_the_same_result_as_their_sse() {
    let sse = two_choices();
    let chunks: Vec<Result<choicewise_core::wire::ChatCompletionChunk<'static>, std::io::Error>> =
        sse.lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .filter(|d| *d != "[DONE]")
            .map(|d| {
                Ok(
                    serde_json::from_str::<choicewise_core::wire::ChatCompletionChunk>(d)
                        .unwrap()
                        .into_owned(),
                )
            })
            .collect();
    let from_chunks = Completions::new(Source::parsed(futures::stream::iter(chunks)))
        .collect()
        .await
        .unwrap();
    let from_sse = Completions::new(Source::reader(std::io::Cursor::new(sse)))
        .collect()
        .await
        .unwrap();
    assert_eq!(from_chunks, from_sse);
}

#[tokio::test]
async fn a_transport_error_ends_open_choices_after_their_data() {
    let reads = vec![
        Ok(content_chunk(0, "partial", None).into_bytes()),
        Err(std::io::Error::new(
            std::io::ErrorKind::ConnectionReset,
            "peer reset",
        )),
    ];
    let completions = Completions::new(Source::sse(futures::stream::iter(reads)));
    let inc = completions.collect().await.unwrap_err();
    assert!(
        matches!(inc.error.detail(), ErrorDetail::Transport { message, .. } if message == "peer reset"),
        "{:?}",
        inc.error
    );
    assert_eq!(
        inc.partial.choices[0].message.content.as_deref(),
        Some("partial")
    );
    // In the user's terms, the I/O error kept as the source.
    let offset = content_chunk(0, "partial", None).len();
    assert_eq!(
        inc.error.to_string(),
        format!("the connection closed after {offset} bytes; choice 0 was unfinished")
    );
    let source = std::error::Error::source(&inc.error).unwrap();
    assert_eq!(source.to_string(), "peer reset");
    // Another failure keeps the library's words.
    let reads = vec![
        Ok(content_chunk(0, "a", Some("stop")).into_bytes()),
        Ok(content_chunk(1, "b", None).into_bytes()),
        Err(std::io::Error::other("disk on fire")),
    ];
    let inc = Completions::new(Source::sse(futures::stream::iter(reads)))
        .collect()
        .await
        .unwrap_err();
    assert!(
        inc.error
            .to_string()
            .starts_with("reading the stream failed after "),
        "{}",
        inc.error
    );
    assert!(
        inc.error
            .to_string()
            .ends_with(" bytes (disk on fire); choice 1 was unfinished"),
        "{}",
        inc.error
    );
}

#[tokio::test]
async fn an_idle_upstream_times_out_with_a_typed_error() {
    let (tx, input) = channel();
    let completions = Completions::builder()
        .idle_timeout(Duration::from_millis(50))
        .start(Source::sse(input));
    tx.send(Ok(content_chunk(0, "hi", None).into_bytes()))
        .unwrap();
    let inc = completions.collect().await.unwrap_err();
    assert!(
        matches!(inc.error.detail(), ErrorDetail::IdleTimeout { .. }),
        "{:?}",
        inc.error
    );
    assert_eq!(
        inc.partial.choices[0].message.content.as_deref(),
        Some("hi")
    );
    drop(tx);
}

#[tokio::test]
async fn a_panic_in_a_choice_actor_is_a_typed_error_on_that_choice_only() {
    let poison = choicewise_test_support::fault::PANIC_CHOICE;
    let sse = [
        content_chunk(0, "before ", None),
        content_chunk(1, "fine", None),
        content_chunk(0, poison, None),
        content_chunk(1, "", Some("stop")),
        content_chunk(0, "after", Some("stop")),
        DONE.to_string(),
    ]
    .concat();
    let completions = Completions::builder()
        .fault_hook(choicewise_test_support::fault::Markers)
        .start(Source::reader(std::io::Cursor::new(sse)));
    let c0 = completions.choice(0).await.unwrap();
    let mut content = c0.content();
    assert_eq!(&*content.next().await.unwrap().unwrap(), "before ");
    let err = content.next().await.unwrap().unwrap_err();
    assert!(
        matches!(err.detail(), ErrorDetail::ActorFailed { choice: Some(0), message } if message.contains("injected fault")),
        "{err:?}"
    );
    let c1 = completions.choice(1).await.unwrap();
    assert_eq!(
        c1.message().await.unwrap().message.content.as_deref(),
        Some("fine")
    );
    let inc = within(Duration::from_secs(5), "collect", completions.collect())
        .await
        .unwrap_err();
    assert!(matches!(
        inc.error.detail(),
        ErrorDetail::ActorFailed {
            choice: Some(0),
            ..
        }
    ));
    assert_eq!(
        inc.partial.choices[0].message.content.as_deref(),
        Some("before ")
    );
}

#[tokio::test]
async fn a_panic_in_the_reader_ends_every_stream_with_a_typed_error() {
    // The upstream's own poll panics after its first read: the reader catches it around
    // reading and splitting, as it would a panic of its own.
    let mut reads = vec![content_chunk(0, "kept", None).into_bytes()].into_iter();
    let input = futures::stream::poll_fn(move |_| match reads.next() {
        Some(read) => std::task::Poll::Ready(Some(Ok::<_, std::io::Error>(read))),
        None => panic!("injected fault in the reader"),
    });
    let completions = Completions::new(Source::sse(input));
    let inc = within(Duration::from_secs(5), "collect", completions.collect())
        .await
        .unwrap_err();
    assert!(
        matches!(inc.error.detail(), ErrorDetail::ActorFailed { .. }),
        "{:?}",
        inc.error
    );
    assert_eq!(
        inc.partial.choices[0].message.content.as_deref(),
        Some("kept")
    );
}
