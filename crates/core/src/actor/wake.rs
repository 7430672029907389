//! How a reader is woken: its upstream's waker, which sends it a message, and the timer
//! that tells it its upstream has gone quiet.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Wake};

use ractor::ActorRef;
use tokio::time::{Instant, Sleep};

use crate::msg::ReaderMsg;

/// A waker that sends the reader [`ReaderMsg::Poll`], at most one at a time.
pub(crate) struct PollWaker {
    reader: ActorRef<ReaderMsg>,
    scheduled: AtomicBool,
}

impl PollWaker {
    pub fn new(reader: ActorRef<ReaderMsg>) -> Self {
        PollWaker {
            reader,
            scheduled: AtomicBool::new(false),
        }
    }

    /// The reader is polling: the next wake sends it a message again.
    pub fn polling(&self) {
        self.scheduled.store(false, Ordering::Release);
    }
}

impl Wake for PollWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref()
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if !self.scheduled.swap(true, Ordering::AcqRel) {
            // Fails only once the reader has stopped: nothing is left to poll.
            if let Err(e) = self.reader.send_message(ReaderMsg::Poll) {
                tracing::trace!(error = %e, "a poll not sent: the reader has stopped");
            }
        }
    }
}

/// The hibernation timer, armed while choice actors run and the upstream waits (boxed: a
/// timer inline would enlarge every idle completion).
#[derive(Default)]
pub(crate) struct QuietTimer(Option<Pin<Box<Sleep>>>);

impl QuietTimer {
    /// Whether `due` has come; if not, `cx`'s waker is woken when it does.
    pub fn elapsed(&mut self, due: Instant, cx: &mut Context<'_>) -> bool {
        let timer = (self.0).get_or_insert_with(|| Box::pin(tokio::time::sleep_until(due)));
        loop {
            if timer.as_mut().poll(cx).is_pending() {
                return false;
            }
            if Instant::now() >= due {
                break;
            }
            // Reads came since it was set: moved on, not reset at every read.
            timer.as_mut().reset(due);
        }
        self.0 = None;
        true
    }

    pub fn disarm(&mut self) {
        self.0 = None;
    }
}
