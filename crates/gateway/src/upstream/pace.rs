//! Back-pressure: a request's upstreams read no further ahead of its client than
//! [`AHEAD`] bytes.
//!
//! Every upstream read of a request passes through [`paced`], which counts it as received;
//! the streamed answer counts what its client has taken ([`Pace::sent`]: hyper polls the
//! body only when it has room to write, so a client that stops reading stops the count).
//! While the difference is above [`AHEAD`], the upstreams are not read: their connections
//! fill and the providers' writes wait, as over one TCP connection.
//!
//! Received and sent bytes are not the same bytes (an upstream's chunk and the chunk the
//! gateway writes for it differ in size, and some upstream events write nothing: keep-alive
//! comments, a Responses stream's closing events that repeat the whole text), so the count
//! could say "ahead" with nothing left to write. The answer therefore says when it has
//! written everything available and waits for the upstreams ([`Pace::caught_up`]): the gate
//! stays open, whatever the count, until the answer has something to write again
//! ([`Pace::writing`]). An upstream is held only while its client has bytes to take and
//! does not take them, never while the answer itself waits for the upstream.
//!
//! The gate closes only once the answer streams ([`Pace::streaming`]): before that, a pick
//! (first finished, a vote) reads its samples as they come, since no client is reading yet.
//!
//! The idle timeout (`upstream_idle_timeout_s`) is kept here too, around each read of the
//! upstream itself: a read held back for a slow client is not an upstream's silence.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use futures::{Stream, StreamExt};
use tokio::sync::Notify;

/// How far, in bytes, a request's upstreams may read ahead of what its client has taken.
pub(crate) const AHEAD: usize = 256 * 1024;

/// An error of an upstream's stream, as the core takes it.
pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// One request's count of bytes received from its upstreams and taken by its client.
#[derive(Debug, Default)]
pub(crate) struct Pace {
    received: AtomicUsize,
    sent: AtomicUsize,
    streaming: AtomicBool,
    /// The answer has written everything it had and waits for the upstreams.
    waiting: AtomicBool,
    room: Notify,
}

impl Pace {
    /// The answer has begun: from now on the upstreams wait for the client. What was
    /// received before counts as taken (the answer replays it from the choices' logs).
    pub(crate) fn streaming(&self) {
        self.writing();
        self.streaming.store(true, Ordering::Release);
        self.room.notify_waiters();
    }

    /// The answer is over (its client gone, or its end written): the upstreams are never
    /// held again.
    pub(crate) fn release(&self) {
        self.streaming.store(false, Ordering::Release);
        self.room.notify_waiters();
    }

    /// The client took `bytes` of the answer.
    pub(crate) fn sent(&self, bytes: usize) {
        self.sent.fetch_add(bytes, Ordering::AcqRel);
        if self.has_room() {
            self.room.notify_waiters();
        }
    }

    /// The answer wrote everything the upstreams had sent and waits for more: the
    /// upstreams read freely until it has something to write again ([`writing`](Self::writing)).
    pub(crate) fn caught_up(&self) {
        let received = self.received.load(Ordering::Acquire);
        self.sent.fetch_max(received, Ordering::AcqRel);
        self.waiting.store(true, Ordering::Release);
        self.room.notify_waiters();
    }

    /// The answer has something to write: from now on the upstreams wait while it is more
    /// than [`AHEAD`] bytes behind them.
    pub(crate) fn writing(&self) {
        let received = self.received.load(Ordering::Acquire);
        self.sent.fetch_max(received, Ordering::AcqRel);
        self.waiting.store(false, Ordering::Release);
    }

    fn has_room(&self) -> bool {
        if !self.streaming.load(Ordering::Acquire) || self.waiting.load(Ordering::Acquire) {
            return true;
        }
        let received = self.received.load(Ordering::Acquire);
        let sent = self.sent.load(Ordering::Acquire);
        received.saturating_sub(sent) <= AHEAD
    }

    /// Waits while the upstreams are more than [`AHEAD`] bytes ahead of the client.
    async fn room(&self) {
        loop {
            let notified = self.room.notified();
            tokio::pin!(notified);
            // Registered before the check, so that a notification between the two is kept.
            notified.as_mut().enable();
            if self.has_room() {
                return;
            }
            notified.await;
        }
    }
}

/// An upstream's reads, read only while `pace` has room, each within `idle` of asking.
pub(crate) fn paced<S, E>(
    reads: S,
    pace: Arc<Pace>,
    idle: Duration,
) -> impl Stream<Item = Result<Bytes, BoxError>> + Send + 'static
where
    S: Stream<Item = Result<Bytes, E>> + Send + 'static,
    E: Into<BoxError>,
{
    let state = Some((Box::pin(reads), pace));
    futures::stream::unfold(state, move |state| async move {
        let (mut reads, pace) = state?;
        pace.room().await;
        match tokio::time::timeout(idle, reads.next()).await {
            Ok(Some(Ok(read))) => {
                pace.received.fetch_add(read.len(), Ordering::AcqRel);
                Some((Ok(read), Some((reads, pace))))
            }
            Ok(Some(Err(e))) => Some((Err(e.into()), Some((reads, pace)))),
            Ok(None) => None,
            Err(_) => Some((Err(silent(idle)), None)),
        }
    })
}

/// An upstream's reads, ended with an error once they pass `max` bytes in all
/// (`max_answer_bytes`): an upstream that sends without end costs a bounded memory.
pub(crate) fn bounded<S, E>(
    reads: S,
    max: usize,
) -> impl Stream<Item = Result<Bytes, BoxError>> + Send + 'static
where
    S: Stream<Item = Result<Bytes, E>> + Send + 'static,
    E: Into<BoxError>,
{
    let mut total = 0usize;
    let mut over = false;
    reads
        .map(move |read| {
            let read = read.map_err(Into::into)?;
            total = total.saturating_add(read.len());
            match total > max {
                true => Err(
                    format!("the upstream's answer passed {max} bytes (max_answer_bytes)").into(),
                ),
                false => Ok(read),
            }
        })
        // Nothing after the error: the reads end there.
        .take_while(move |read| {
            let go = !over;
            over |= read.is_err();
            futures::future::ready(go)
        })
}

/// The error of an upstream silent for `idle`.
pub(crate) fn silent(idle: Duration) -> BoxError {
    format!(
        "the upstream sent nothing for {}s (upstream_idle_timeout_s)",
        idle.as_secs_f64()
    )
    .into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reads(count: usize, size: usize) -> impl Stream<Item = Result<Bytes, BoxError>> {
        futures::stream::iter((0..count).map(move |_| Ok(Bytes::from(vec![b'x'; size]))))
    }

    #[tokio::test]
    async fn an_answer_over_its_bound_ends_in_an_error() {
        let within: Vec<_> = bounded(reads(4, 1000), 4000).collect().await;
        assert!(within.iter().all(Result::is_ok));
        let over: Vec<_> = bounded(reads(100, 1000), 2500).collect().await;
        assert_eq!(over.len(), 3, "two reads, then the error, then nothing");
        let e = over[2].as_ref().unwrap_err().to_string();
        assert!(e.contains("2500 bytes (max_answer_bytes)"), "{e}");
    }

    #[tokio::test]
    async fn holds_the_upstream_while_the_client_is_behind() {
        let pace = Arc::new(Pace::default());
        pace.streaming();
        let mut upstream = Box::pin(paced(reads(100, 64 * 1024), pace.clone(), Duration::MAX));
        let mut got = 0;
        // Reads until it is more than AHEAD ahead, then waits.
        while tokio::time::timeout(Duration::from_millis(50), upstream.next())
            .await
            .is_ok()
        {
            got += 1;
        }
        assert_eq!(got, AHEAD / (64 * 1024) + 1);
        // The client takes some: one more read.
        pace.sent(64 * 1024);
        assert!(upstream.next().await.is_some());
        assert!(
            tokio::time::timeout(Duration::from_millis(50), upstream.next())
                .await
                .is_err()
        );
        // The client caught up: reads go on.
        pace.caught_up();
        assert!(upstream.next().await.is_some());
    }

    #[tokio::test]
    async fn reads_freely_while_the_answer_waits_for_the_upstream() {
        let pace = Arc::new(Pace::default());
        pace.streaming();
        // Bytes that write nothing for the client (a Responses stream's closing events, or
        // keep-alive comments), far more than AHEAD: the answer waits all along.
        pace.caught_up();
        let upstream = paced(reads(100, 64 * 1024), pace.clone(), Duration::MAX);
        let all = tokio::time::timeout(Duration::from_secs(5), upstream.count()).await;
        assert_eq!(all.ok(), Some(100));
        // Once the answer writes again, the count holds the upstream as before.
        pace.writing();
        let mut upstream = Box::pin(paced(reads(100, 64 * 1024), pace.clone(), Duration::MAX));
        let mut got = 0;
        while tokio::time::timeout(Duration::from_millis(50), upstream.next())
            .await
            .is_ok()
        {
            got += 1;
        }
        assert_eq!(got, AHEAD / (64 * 1024) + 1);
        pace.caught_up();
        assert!(upstream.next().await.is_some());
    }

    #[tokio::test]
    async fn a_released_pace_holds_nothing() {
        let pace = Arc::new(Pace::default());
        pace.streaming();
        pace.writing();
        let mut upstream = Box::pin(paced(reads(100, 64 * 1024), pace.clone(), Duration::MAX));
        while tokio::time::timeout(Duration::from_millis(50), upstream.next())
            .await
            .is_ok()
        {}
        // Held; the answer goes away: the held read goes on, and every read after it.
        pace.release();
        let rest = tokio::time::timeout(Duration::from_secs(5), upstream.count()).await;
        assert!(rest.is_ok_and(|n| n > 0));
    }

    #[tokio::test]
    async fn reads_freely_before_the_answer_streams() {
        let pace = Arc::new(Pace::default());
        let upstream = paced(reads(100, 64 * 1024), pace.clone(), Duration::MAX);
        assert_eq!(upstream.count().await, 100);
    }

    #[tokio::test]
    async fn a_silent_upstream_fails_after_idle_but_a_held_one_does_not() {
        let pace = Arc::new(Pace::default());
        pace.streaming();
        let first = futures::stream::iter([Ok::<_, BoxError>(Bytes::from(vec![0; AHEAD + 1]))]);
        let silent_after = first.chain(futures::stream::pending());
        let idle = Duration::from_millis(200);
        let mut upstream = Box::pin(paced(silent_after, pace.clone(), idle));
        assert!(upstream.next().await.unwrap().is_ok());
        // Held for the client far longer than the idle timeout: no error.
        assert!(
            tokio::time::timeout(idle * 5, upstream.next())
                .await
                .is_err()
        );
        // Then the upstream itself is silent: the idle error.
        pace.caught_up();
        let error = upstream.next().await.unwrap().unwrap_err();
        assert!(
            error.to_string().contains("sent nothing for 0.2s"),
            "{error}"
        );
        assert!(upstream.next().await.is_none());
    }
}
