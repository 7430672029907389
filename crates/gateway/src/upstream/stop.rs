//! Who stopped a run's samples before their upstreams ended them, and why (as h2's
//! `Initiator` says who reset a stream): the gateway's cut (it shut down, or the request
//! passed its deadline), the client, or the pick. Carried by each cancel as its
//! [`CancelReason`] (`Run::stop`), and read back from the choice's
//! [`ChoiceEvent::Cancelled`](choicewise_core::ChoiceEvent::Cancelled) or its closed state
//! by the answer's endings (`crate::answer::ending`): nothing is kept beside the choices.

use choicewise_core::cancel::CancelReason;

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
/// who reset a stream): sent with the cancel ([`reason`](Initiator::reason)), read back from
/// it ([`of`](Initiator::of)), never inferred from the choice's `cancelled` flag.
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
    /// The reason its cancels carry.
    pub(crate) fn reason(self) -> CancelReason {
        match self {
            Initiator::Gateway(Cut::ShutDown) => CancelReason::ShuttingDown,
            Initiator::Gateway(Cut::PastDeadline) => CancelReason::Deadline,
            Initiator::Client => CancelReason::ReaderGone,
            // The gateway closing a run it is done with (the run's own pick cancels for
            // `Decided` or `LowConfidence`).
            Initiator::Pick => CancelReason::Closing,
        }
    }

    /// Who sent a cancel with this reason: the gateway's cut, the client, else the pick (a
    /// decided vote, a confidence stop, a run closed once answered).
    pub(crate) fn of(reason: CancelReason) -> Initiator {
        match reason {
            CancelReason::ShuttingDown => Initiator::Gateway(Cut::ShutDown),
            CancelReason::Deadline => Initiator::Gateway(Cut::PastDeadline),
            CancelReason::ReaderGone => Initiator::Client,
            CancelReason::Asked
            | CancelReason::LowConfidence
            | CancelReason::Decided
            | CancelReason::Closing => Initiator::Pick,
        }
    }

    /// Why, as the answer says it.
    pub(crate) fn why(self) -> &'static str {
        match self {
            Initiator::Gateway(cut) => cut.why(),
            Initiator::Client => CLIENT_GONE,
            Initiator::Pick => PICK_STOPPED,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_initiator_is_read_back_from_the_reason_it_sends() {
        for by in [
            Initiator::Gateway(Cut::ShutDown),
            Initiator::Gateway(Cut::PastDeadline),
            Initiator::Client,
            Initiator::Pick,
        ] {
            assert_eq!(Initiator::of(by.reason()), by, "{by:?}");
        }
        // The pick's own cancels, and a program's, are the pick's.
        for reason in [
            CancelReason::Decided,
            CancelReason::LowConfidence,
            CancelReason::Asked,
        ] {
            assert_eq!(Initiator::of(reason), Initiator::Pick, "{reason:?}");
        }
    }
}
