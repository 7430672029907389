//! Why an output choice ended, decided once: [`OutputEnd`], by [`decide`] from what was seen
//! of the choice and whether its answer was cut short. Every API's framing (Chat
//! Completions, Messages, Responses; streamed or not) writes the decided ending and decides
//! nothing itself, so that "failed", "no finish reason", "cut" and "missing" mean the same
//! thing in every answer.

use std::fmt;

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

/// Why a choice failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Failure {
    /// The upstream's error (its message).
    Upstream(String),
    /// The upstream ended the choice with `finish_reason: "error"`.
    ErrorFinish,
    /// The choice's events ended without a finish reason.
    NoFinishReason,
    /// The upstream ended without this choice.
    Missing,
}

impl Failure {
    /// Why, as the answer says it.
    pub(crate) fn why(&self) -> &str {
        match self {
            Failure::Upstream(error) => error,
            Failure::ErrorFinish => "the upstream ended the choice with finish_reason \"error\"",
            Failure::NoFinishReason => "the upstream ended the choice without a finish reason",
            Failure::Missing => "the upstream ended without this choice",
        }
    }
}

/// How an output choice ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum OutputEnd {
    /// It finished, with its finish reason (never `error`).
    Finished(choicewise_core::Text),
    /// It failed.
    Failed(Failure),
    /// Its answer was cut short before it finished.
    Cut(Cut),
}

impl OutputEnd {
    /// Why it did not finish; `None` when it did.
    pub(crate) fn why(&self) -> Option<&str> {
        match self {
            OutputEnd::Finished(_) => None,
            OutputEnd::Failed(failure) => Some(failure.why()),
            OutputEnd::Cut(cut) => Some(cut.why()),
        }
    }

    /// Whether it counts against its answer: an upstream's failure, always; a cut, in a
    /// non-streamed answer past its deadline (the shutdown's contract is an answer as far
    /// as it got; a streamed answer has already sent what it got).
    pub(crate) fn counts_as_failed(&self, streamed: bool) -> bool {
        match self {
            OutputEnd::Finished(_) => false,
            OutputEnd::Failed(_) => true,
            OutputEnd::Cut(Cut::PastDeadline) => !streamed,
            OutputEnd::Cut(Cut::ShutDown) => false,
        }
    }
}

impl fmt::Display for OutputEnd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OutputEnd::Finished(reason) => write!(f, "finished ({reason})"),
            other => f.write_str(other.why().unwrap_or_default()),
        }
    }
}

/// What was seen of a choice by the time its answer ends with it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Seen {
    /// The error it closed with, if any.
    pub(crate) error: Option<String>,
    /// Its finish reason, once seen.
    pub(crate) finish: Option<choicewise_core::Text>,
    /// It was cancelled (its events ended with `Cancelled`).
    pub(crate) cancelled: bool,
}

impl Seen {
    /// What a choice's closed state says: read where the run holds it.
    pub(crate) fn of(choice: &choicewise_core::Choice) -> Seen {
        let (finish, cancelled) = choice.inspect(|out| {
            let finish = out
                .finish_reason
                .as_deref()
                .map(choicewise_core::Text::from);
            (finish, out.cancelled)
        });
        Seen {
            error: choice.error().map(|e| e.to_string()),
            finish,
            cancelled,
        }
    }

    /// Follows a choice's events: its finish, its cancel.
    pub(crate) fn event(&mut self, event: &choicewise_core::ChoiceEvent) {
        match event {
            choicewise_core::ChoiceEvent::Finished(reason) => self.finish = Some(reason.clone()),
            choicewise_core::ChoiceEvent::Cancelled => self.cancelled = true,
            _ => {}
        }
    }
}

/// How an output choice ended: `seen` is what was seen of it (`None`: the upstream ended
/// without it), `cut` why its answer was cut short, if it was.
///
/// An error wins; then a finish (`error` is a failure); then a cut, or a cancel (the
/// answer's own, at a shutdown); an end with none of these is a failure without a finish
/// reason.
pub(crate) fn decide(seen: Option<&Seen>, cut: Option<Cut>) -> OutputEnd {
    let Some(seen) = seen else {
        return OutputEnd::Failed(Failure::Missing);
    };
    if let Some(error) = &seen.error {
        return OutputEnd::Failed(Failure::Upstream(error.clone()));
    }
    match (&seen.finish, cut) {
        (Some(reason), _) if &**reason == "error" => OutputEnd::Failed(Failure::ErrorFinish),
        (Some(reason), _) => OutputEnd::Finished(reason.clone()),
        (None, Some(cut)) => OutputEnd::Cut(cut),
        (None, None) if seen.cancelled => OutputEnd::Cut(Cut::ShutDown),
        (None, None) => OutputEnd::Failed(Failure::NoFinishReason),
    }
}

/// When every output choice failed (by [`OutputEnd::counts_as_failed`]): each one's failure,
/// `choice N: why`, for the answer's 502 (`every_choice_failed`). `None` when one did not.
pub(crate) fn all_failed(ends: &[OutputEnd], streamed: bool) -> Option<String> {
    let failed: Vec<String> = (ends.iter().enumerate())
        .filter(|(_, end)| end.counts_as_failed(streamed))
        .map(|(o, end)| format!("choice {o}: {}", end.why().unwrap_or_default()))
        .collect();
    (!failed.is_empty() && failed.len() == ends.len()).then(|| failed.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(error: Option<&str>, finish: Option<&str>, cancelled: bool) -> Seen {
        Seen {
            error: error.map(str::to_string),
            finish: finish.map(Into::into),
            cancelled,
        }
    }

    #[test]
    fn each_ending_is_decided_from_what_was_seen_and_the_cut() {
        use OutputEnd::{Failed, Finished};
        let cases = [
            (None, None, Failed(Failure::Missing)),
            (None, Some(Cut::ShutDown), Failed(Failure::Missing)),
            (
                Some(seen(Some("boom"), None, false)),
                Some(Cut::PastDeadline),
                Failed(Failure::Upstream("boom".into())),
            ),
            (
                Some(seen(None, Some("stop"), false)),
                None,
                Finished("stop".into()),
            ),
            (
                Some(seen(None, Some("length"), false)),
                Some(Cut::ShutDown),
                Finished("length".into()),
            ),
            (
                Some(seen(None, Some("error"), false)),
                None,
                Failed(Failure::ErrorFinish),
            ),
            (
                Some(seen(None, None, false)),
                None,
                Failed(Failure::NoFinishReason),
            ),
            (
                Some(seen(None, None, false)),
                Some(Cut::PastDeadline),
                OutputEnd::Cut(Cut::PastDeadline),
            ),
            (
                Some(seen(None, None, true)),
                None,
                OutputEnd::Cut(Cut::ShutDown),
            ),
            (
                Some(seen(None, None, true)),
                Some(Cut::PastDeadline),
                OutputEnd::Cut(Cut::PastDeadline),
            ),
        ];
        for (seen, cut, expected) in cases {
            assert_eq!(decide(seen.as_ref(), cut), expected, "{seen:?} {cut:?}");
        }
    }

    #[test]
    fn an_ending_says_why_in_the_answers_words() {
        let failed = OutputEnd::Failed(Failure::NoFinishReason);
        assert_eq!(
            failed.why(),
            Some("the upstream ended the choice without a finish reason")
        );
        assert_eq!(OutputEnd::Cut(Cut::ShutDown).why(), Some(SHUT_DOWN));
        assert_eq!(OutputEnd::Finished("stop".into()).why(), None);
        assert_eq!(
            OutputEnd::Failed(Failure::Missing).to_string(),
            "the upstream ended without this choice"
        );
    }

    #[test]
    fn every_choice_failed_only_when_each_did() {
        let upstream = OutputEnd::Failed(Failure::Upstream("500".into()));
        let stop = OutputEnd::Finished("stop".into());
        let late = OutputEnd::Cut(Cut::PastDeadline);
        let shut = OutputEnd::Cut(Cut::ShutDown);
        assert_eq!(
            all_failed(&[upstream.clone(), upstream.clone()], true).as_deref(),
            Some("choice 0: 500; choice 1: 500")
        );
        assert_eq!(all_failed(&[upstream.clone(), stop], true), None);
        assert_eq!(all_failed(&[], false), None);
        // A shutdown's cut is an answer as far as it got, streamed or not.
        assert_eq!(all_failed(&[upstream.clone(), shut], false), None);
        // The deadline's cut fails a non-streamed answer, not a streamed one.
        assert_eq!(all_failed(&[upstream.clone(), late.clone()], true), None);
        assert_eq!(
            all_failed(&[upstream, late], false).as_deref(),
            Some(format!("choice 0: 500; choice 1: {PAST_DEADLINE}").as_str())
        );
    }
}
