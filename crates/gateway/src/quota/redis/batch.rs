//! Reservations grouped into calls, as a database groups commits. One call to Redis is made
//! at a time; the reservations that come while it is made wait, and the next call carries
//! them all (at most [`RESERVATIONS`]). Under load a call then serves many requests, and
//! Redis's cost of a call (the script's start, the clock, each counter read and written
//! once) is shared by them; a lone request makes its call at once, as before.
//!
//! No task of its own: the request that finds no call being made leads one, for itself and
//! those waiting; as it ends, it hands the lead to the oldest request still waiting. A
//! request's deadline may drop it at any point: a leader dropped before its call ends
//! leaves the call to finish in a task of its own (the others it carries are answered), and
//! a request dropped as the lead reaches it hands the lead on. A request that gave up
//! before a call took it is charged nothing.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use tokio::sync::oneshot;

use super::Shared;
use crate::quota::store::{Charge, StoreError, Verdict};

/// The most reservations one call carries.
pub(super) const RESERVATIONS: usize = 64;

/// The reservations waiting for a call, and whether one is being made.
#[derive(Default)]
pub(super) struct Calls(Mutex<Queue>);

#[derive(Default)]
struct Queue {
    waiting: VecDeque<Waiter>,
    calling: bool,
}

/// A reservation waiting: its charges, and where its turn is told.
struct Waiter {
    charges: Vec<Charge>,
    turn: oneshot::Sender<Turn>,
}

/// What a waiting reservation is told: its verdict, or to lead the next call.
enum Turn {
    Answered(Result<Verdict, StoreError>),
    Lead,
}

impl Calls {
    fn queue(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Joins the queue if a call is being made (the turn to wait for), or marks one made.
    fn join(&self, charges: &[Charge]) -> Option<oneshot::Receiver<Turn>> {
        let mut queue = self.queue();
        if !queue.calling {
            queue.calling = true;
            return None;
        }
        let (turn, told) = oneshot::channel();
        queue.waiting.push_back(Waiter {
            charges: charges.to_vec(),
            turn,
        });
        Some(told)
    }

    /// The oldest reservations waiting whose requests still wait, at most `n`.
    fn take(&self, n: usize) -> Vec<Waiter> {
        let mut queue = self.queue();
        let mut taken = Vec::new();
        while taken.len() < n {
            let Some(waiter) = queue.waiting.pop_front() else {
                break;
            };
            if !waiter.turn.is_closed() {
                taken.push(waiter);
            }
        }
        taken
    }

    /// A call ended: the oldest request still waiting leads the next, or none is made.
    fn hand_off(&self) {
        let mut queue = self.queue();
        while let Some(waiter) = queue.waiting.pop_front() {
            if waiter.turn.send(Turn::Lead).is_ok() {
                return;
            }
        }
        queue.calling = false;
    }
}

/// Reserves `charges`: in a call of its own, or in the next one made.
pub(super) async fn reserve(
    shared: &Arc<Shared>,
    charges: &[Charge],
) -> Result<Verdict, StoreError> {
    if let Some(told) = shared.calls.join(charges) {
        let mut waiting = Waiting {
            told: Some(told),
            shared,
        };
        match (&mut waiting).await {
            Ok(Turn::Answered(verdict)) => return verdict,
            Ok(Turn::Lead) => {}
            Err(_) => {
                return Err(StoreError(
                    "redis: the call carrying this reservation was lost".into(),
                ));
            }
        }
    }
    let others = shared.calls.take(RESERVATIONS - 1);
    let call = lead(shared.clone(), charges.to_vec(), others);
    Detached(Some(Box::pin(call))).await
}

/// A call of `mine` and `others`: each of the others answered, then the lead handed on
/// (also when the call is dropped unfinished); `mine`'s verdict returned.
async fn lead(
    shared: Arc<Shared>,
    mine: Vec<Charge>,
    others: Vec<Waiter>,
) -> Result<Verdict, StoreError> {
    let _hand_off = HandOff(&shared);
    let reservations: Vec<&[Charge]> = std::iter::once(&mine[..])
        .chain(others.iter().map(|w| &w.charges[..]))
        .collect();
    let mut verdicts = shared.call(&reservations).await.into_iter();
    drop(reservations);
    let lost = || Err(StoreError("redis: no verdict for this reservation".into()));
    let verdict = verdicts.next().unwrap_or_else(lost);
    for waiter in others {
        let _ = (waiter.turn).send(Turn::Answered(verdicts.next().unwrap_or_else(lost)));
    }
    verdict
}

/// Hands the lead on as a call ends, or is dropped.
struct HandOff<'a>(&'a Shared);

impl Drop for HandOff<'_> {
    fn drop(&mut self) {
        self.0.calls.hand_off();
    }
}

/// A request waiting for its turn; dropped once told to lead, it hands the lead on.
struct Waiting<'a> {
    told: Option<oneshot::Receiver<Turn>>,
    shared: &'a Shared,
}

impl Future for Waiting<'_> {
    type Output = Result<Turn, oneshot::error::RecvError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let Some(told) = this.told.as_mut() else {
            return Poll::Pending;
        };
        let turn = std::task::ready!(Pin::new(told).poll(cx));
        this.told = None;
        Poll::Ready(turn)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if let Some(mut told) = self.told.take() {
            told.close();
            if let Ok(Turn::Lead) = told.try_recv() {
                self.shared.calls.hand_off();
            }
        }
    }
}

/// A leader's call: dropped before it ends (its request's deadline), it goes on in a task
/// of its own, so that the reservations it carries are answered and the lead handed on.
struct Detached(Option<Call>);

/// A call being made, boxed so that it can move to a task of its own.
type Call = Pin<Box<dyn Future<Output = Result<Verdict, StoreError>> + Send>>;

impl Future for Detached {
    type Output = Result<Verdict, StoreError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let Some(call) = self.0.as_mut() else {
            return Poll::Pending;
        };
        let verdict = std::task::ready!(call.as_mut().poll(cx));
        self.0 = None;
        Poll::Ready(verdict)
    }
}

impl Drop for Detached {
    fn drop(&mut self) {
        if let Some(call) = self.0.take()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            runtime.spawn(async move {
                let _ = call.await;
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A call takes the oldest waiting, at most what it is asked for, leaving out the
    /// requests that gave up; the lead goes to the oldest still waiting, and with none,
    /// no call is being made.
    #[test]
    fn a_call_takes_the_oldest_still_waiting_and_the_lead_goes_to_the_next() {
        let calls = Calls::default();
        assert!(calls.join(&[]).is_none(), "the first leads");
        let mut told: Vec<_> = (0..RESERVATIONS + 10)
            .map(|_| calls.join(&[]).expect("a call is being made: it waits"))
            .collect();
        // The first two gave up.
        told.drain(..2);
        let taken = calls.take(RESERVATIONS - 1);
        assert_eq!(taken.len(), RESERVATIONS - 1);
        assert!(taken.iter().all(|w| !w.turn.is_closed()));
        drop(taken);
        // Nine wait still: the oldest leads; once it gave up too, the next.
        let (mut oldest, mut next) = (told.remove(RESERVATIONS - 1), told.remove(RESERVATIONS - 1));
        calls.hand_off();
        assert!(matches!(oldest.try_recv(), Ok(Turn::Lead)));
        drop(oldest);
        calls.hand_off();
        assert!(matches!(next.try_recv(), Ok(Turn::Lead)));
        told.clear();
        calls.hand_off();
        calls.hand_off();
        assert!(
            calls.join(&[]).is_none(),
            "no call was being made: this one leads"
        );
    }
}
