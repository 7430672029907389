//! A request's run while its record holds it ([`Running`]): the one place its samples are
//! stopped, and what the run came to once they are over ([`Settled`]).

use crate::answer::closing::{Closing, closed};
use crate::answer::ending::{Cut, Ended, ErrorType, Initiator};
use crate::metrics::Outcome;
use crate::upstream::engine::Run;
use crate::upstream::open::TryRecord;

/// How long a failed request's answer waits for its cancelled samples to end, to account
/// for them as they ended.
const SETTLE_AFTER_CANCEL: std::time::Duration = std::time::Duration::from_secs(1);

/// How long a streamed answer's body, its last event written, waits for its upstreams to end
/// (their usage), before those still open are closed and the run is read as it stands.
const SETTLE_AFTER_ANSWER: std::time::Duration = std::time::Duration::from_secs(2);

/// A started run and what is known of it so far. A whole answer reads what it came to
/// before its verdict; a streamed one decides its verdict before its last upstream ends:
/// each is kept until both are known. Every stop of its samples goes through
/// [`stop`](Self::stop): its client gone ([`close`](Self::close)), the answer cut short
/// ([`until_closed`](Self::until_closed)), the request failed ([`fail`](Self::fail)), the
/// answer written ([`settle_after_answer`](Self::settle_after_answer)).
pub(crate) struct Running {
    run: Run,
    /// Its output samples, once picked (`None`: every sample is an output).
    pub(super) outputs: Option<Vec<u32>>,
    pub(super) settled: Option<Settled>,
    pub(super) ended: Option<Ended>,
}

impl Running {
    /// `run`, just started: nothing known of it yet.
    pub(super) fn new(run: Run) -> Running {
        Running {
            run,
            outputs: None,
            settled: None,
            ended: None,
        }
    }

    /// The run: its choices, its pace, its accounting.
    pub(crate) fn run(&self) -> &Run {
        &self.run
    }

    /// The run, to pick its samples.
    pub(crate) fn run_mut(&mut self) -> &mut Run {
        &mut self.run
    }

    /// `by` stops the samples still running (their upstreams closed): each ends cancelled
    /// for `by`'s reason, which its answer's ending reads back; a sample stopped already
    /// keeps its first reason. The one place a request's samples are stopped for its
    /// client, the gateway or its answer (a pick stops its losers within the run).
    pub(crate) fn stop(&self, by: Initiator) {
        self.run.completions.cancel_except_for(&[], by.reason());
    }

    /// Awaits `work`; if the answer is cut short first (the gateway's close, the deadline),
    /// the samples still running are stopped (their upstreams closed), and `work` ends with
    /// what they had.
    pub(crate) async fn until_closed<T>(
        &self,
        work: impl std::future::Future<Output = T>,
        closing: &mut Closing,
    ) -> T {
        let mut work = std::pin::pin!(work);
        tokio::select! {
            done = &mut work => done,
            cut = closed(closing) => {
                self.stop(Initiator::Gateway(cut));
                work.await
            }
        }
    }

    /// What the run came to, once its samples are over.
    pub(crate) async fn read(&self) -> Settled {
        Settled {
            outcome: self.run.outcome(self.outputs.as_deref()).await,
            tries: self.run.tries(),
            samples: self.run.samples,
            after_finish: self.run.dropped_after_finish(),
            outputs: self.outputs.clone(),
        }
    }

    /// What the run came to so far, without waiting: its samples still open counted as
    /// cancelled (they are being), their tokens what they had received.
    fn now(&self) -> Settled {
        Settled {
            outcome: self.run.outcome_now(self.outputs.as_deref()),
            tries: self.run.tries(),
            samples: self.run.samples,
            after_finish: self.run.dropped_after_finish(),
            outputs: self.outputs.clone(),
        }
    }

    /// Reads what the run came to, unless it is known already.
    pub(super) async fn settle(&mut self) {
        if self.settled.is_none() {
            self.settled = Some(self.read().await);
        }
    }

    /// As [`settle`](Self::settle), unless the answer is cut short first (the gateway's
    /// close, the request's deadline): then the samples still running are stopped, and what
    /// they came to is read.
    pub(super) async fn settle_until_closed(&mut self, closing: &mut Closing) {
        if self.settled.is_none() {
            let settled = self.until_closed(self.read(), closing).await;
            self.settled = Some(settled);
        }
    }

    /// A streamed answer's last event is written: as [`settle_until_closed`](Self::settle_until_closed)
    /// for at most [`SETTLE_AFTER_ANSWER`], so that an upstream silent after its last
    /// choice's finish cannot hold the body's end (and its slot); then the samples still
    /// running are stopped (the answer no longer needs them), and what they came to is read.
    pub(super) async fn settle_after_answer(&mut self, closing: &mut Closing) {
        let settled = self.settle_until_closed(closing);
        if tokio::time::timeout(SETTLE_AFTER_ANSWER, settled)
            .await
            .is_ok()
        {
            return;
        }
        self.stop(Initiator::Pick);
        let _ = tokio::time::timeout(SETTLE_AFTER_CANCEL, self.settle()).await;
    }

    /// The request fails with `why` before its answer began: its samples are stopped and
    /// what they came to read (one that does not end in time is read as it stands when the
    /// record is made).
    pub(super) async fn fail(&mut self, why: ErrorType) {
        self.stop(match why {
            ErrorType::RequestDeadline => Initiator::Gateway(Cut::PastDeadline),
            _ => Initiator::Pick,
        });
        self.ended = Some(Ended::Failed(why));
        let _ = tokio::time::timeout(SETTLE_AFTER_CANCEL, self.settle()).await;
    }

    /// The request is over with its run in this state: what it came to and how it ended.
    /// Not decided, its client went away: its samples still running are stopped (their
    /// upstreams closed) and what they had received is read now.
    pub(super) fn close(mut self) -> (Settled, Ended) {
        let ended = match self.ended.take() {
            Some(ended) => ended,
            None => {
                self.stop(Initiator::Client);
                Ended::ClientGone
            }
        };
        // No client waits any more: an upstream read held back for it goes on, so that its
        // reader sees the cancel and closes it rather than waiting on the gate for ever.
        self.run.pace.release();
        let settled = match self.settled.take() {
            Some(settled) => settled,
            None => self.now(),
        };
        (settled, ended)
    }
}

/// What a run came to, read when its samples are over.
pub(crate) struct Settled {
    pub(super) outcome: Outcome,
    pub(super) tries: Vec<TryRecord>,
    pub(super) samples: u32,
    /// Updates whose message data came after their choice's finish, left out of the answer.
    pub(super) after_finish: usize,
    /// The output samples of a selection (`None`: every sample is an output).
    pub(super) outputs: Option<Vec<u32>>,
}

impl Settled {
    /// What a relayed request came to: its `samples`' `outcome`, its `tries`, and the
    /// updates after their finish left out.
    pub(crate) fn relayed(
        outcome: Outcome,
        tries: Vec<TryRecord>,
        samples: u32,
        after_finish: usize,
    ) -> Self {
        Settled {
            outcome,
            tries,
            samples,
            after_finish,
            outputs: None,
        }
    }
}
