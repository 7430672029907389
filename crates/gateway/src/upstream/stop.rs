//! Who stopped a run's samples before their upstreams ended them, and why (as h2's
//! `Initiator` says who reset a stream): the gateway's cut (it shut down, or the request
//! passed its deadline), the client, or the pick. Written where the cancel is taken
//! ([`Stops::stop`], by `Run::stop`), read by the answer's endings
//! (`crate::answer::ending`).

use std::sync::{Arc, OnceLock};

/// Why a choice ended when the gateway closed.
pub(crate) const SHUT_DOWN: &str = "the gateway shut down before this choice finished";

/// Why a choice ended when its request passed its deadline.
pub(crate) const PAST_DEADLINE: &str =
    "the request passed its deadline (request_deadline_s) before this choice finished";

/// Why an answer was cut short: the gateway closed, or the request passed its deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cut {
    /// The gateway shut down ([`Gateway::close`](crate::Gateway::close)).
    ShutDown,
    /// The request passed its deadline (`request_deadline_s`).
    PastDeadline,
}

impl Cut {
    /// Why, as the answer says it.
    pub(crate) fn why(self) -> &'static str {
        match self {
            Cut::ShutDown => SHUT_DOWN,
            Cut::PastDeadline => PAST_DEADLINE,
        }
    }
}

/// Who stopped a choice before its upstream ended it, and why (as h2's `Initiator` says
/// who reset a stream): written where the cancel is taken ([`Stops::stop`]), never
/// inferred from the choice's `cancelled` flag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Initiator {
    /// The gateway cut the answer short: it shut down, or the request passed its deadline.
    Gateway(Cut),
    /// The client went away before the answer's end.
    Client,
    /// The pick, or the answer done with its samples: a sample it no longer needed (a vote
    /// decided, a confidence stop, one still open once the answer was written).
    Pick,
}

/// Why a choice ended when its client went away.
pub(crate) const CLIENT_GONE: &str = "the client went away before this choice finished";

/// Why a choice ended when the pick stopped it.
pub(crate) const PICK_STOPPED: &str = "the pick stopped this choice before it finished";

impl Initiator {
    /// Why, as the answer says it.
    pub(crate) fn why(self) -> &'static str {
        match self {
            Initiator::Gateway(cut) => cut.why(),
            Initiator::Client => CLIENT_GONE,
            Initiator::Pick => PICK_STOPPED,
        }
    }
}

/// Who stopped a run's samples, once someone did: the first to stop them is kept. Shared by
/// the run (its cancels) and its answer (its endings).
#[derive(Debug, Clone, Default)]
pub(crate) struct Stops(Arc<OnceLock<Initiator>>);

impl Stops {
    /// `by` stops the samples (the first to stop them is kept).
    pub(crate) fn stop(&self, by: Initiator) {
        let _ = self.0.set(by);
    }

    /// Who stopped the samples, if someone did.
    pub(crate) fn by(&self) -> Option<Initiator> {
        self.0.get().copied()
    }
}
