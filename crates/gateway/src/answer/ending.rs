//! Why an output choice ended, decided once: [`OutputEnd`], by [`decide`] from what was seen
//! of the choice (its error typed, who stopped it: [`Initiator`]) and whether its answer was
//! cut short; and how the whole answer ended, decided once from those: [`AnswerEnd`], the
//! one verdict its status, its log line, its span and its metrics read. Every API's framing
//! (Chat Completions, Messages, Responses; streamed or not) writes the decided ending and
//! decides nothing itself, so that "failed", "no finish reason", "cut" and "missing" mean
//! the same thing in every answer.

use std::fmt;

use axum::http::StatusCode;

use crate::error::ApiError;

pub(crate) use crate::upstream::stop::{Cut, Initiator};

/// Why a choice failed: the upstream's doing.
#[derive(Debug, Clone)]
pub(crate) enum Failure {
    /// The upstream's error, as the library reported it.
    Upstream(choicewise_core::Error),
    /// The upstream ended the choice with `finish_reason: "error"`.
    ErrorFinish,
    /// The choice's events ended without a finish reason.
    NoFinishReason,
    /// The upstream ended without this choice.
    Missing,
}

impl PartialEq for Failure {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            // The library's errors compare by what they say.
            (Failure::Upstream(a), Failure::Upstream(b)) => a.to_string() == b.to_string(),
            (a, b) => std::mem::discriminant(a) == std::mem::discriminant(b),
        }
    }
}

impl Eq for Failure {}

impl Failure {
    /// Why, as the answer says it.
    pub(crate) fn why(&self) -> String {
        match self {
            Failure::Upstream(error) => error.to_string(),
            Failure::ErrorFinish => {
                "the upstream ended the choice with finish_reason \"error\"".to_string()
            }
            Failure::NoFinishReason => {
                "the upstream ended the choice without a finish reason".to_string()
            }
            Failure::Missing => "the upstream ended without this choice".to_string(),
        }
    }
}

/// How an output choice ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum OutputEnd {
    /// It finished, with its finish reason (never `error`).
    Finished(choicewise_core::Text),
    /// It failed upstream.
    Failed(Failure),
    /// It was stopped before it finished, by whom and why.
    Stopped(Initiator),
}

impl OutputEnd {
    /// Why it did not finish; `None` when it did.
    pub(crate) fn why(&self) -> Option<String> {
        match self {
            OutputEnd::Finished(_) => None,
            OutputEnd::Failed(failure) => Some(failure.why()),
            OutputEnd::Stopped(by) => Some(by.why().to_string()),
        }
    }
}

impl fmt::Display for OutputEnd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OutputEnd::Finished(reason) => write!(f, "finished ({reason})"),
            other => f.write_str(&other.why().unwrap_or_default()),
        }
    }
}

/// What was seen of a choice by the time its answer ends with it.
#[derive(Debug, Clone, Default)]
pub(crate) struct Seen {
    /// The error it closed with, if any.
    pub(crate) error: Option<choicewise_core::Error>,
    /// Its finish reason, once seen.
    pub(crate) finish: Option<choicewise_core::Text>,
    /// Who stopped it, if it was (its events ended with `Cancelled`).
    pub(crate) stopped: Option<Initiator>,
}

impl Seen {
    /// What a choice's closed state says: read where the run holds it.
    pub(crate) fn of(choice: &choicewise_core::Choice) -> Seen {
        let finish =
            choice.inspect(|out| (out.finish_reason.as_deref()).map(choicewise_core::Text::from));
        Seen {
            error: choice.error(),
            finish,
            // Published with its cancel, in the same write.
            stopped: choice.cancel_reason().map(Initiator::of),
        }
    }

    /// Follows a choice's events: its finish, its cancel (by whom its reason says).
    pub(crate) fn event(&mut self, event: &choicewise_core::ChoiceEvent) {
        match event {
            choicewise_core::ChoiceEvent::Finished(reason) => self.finish = Some(reason.clone()),
            choicewise_core::ChoiceEvent::Cancelled(reason) => {
                self.stopped = Some(Initiator::of(*reason));
            }
            _ => {}
        }
    }
}

/// How an output choice ended: `seen` is what was seen of it (`None`: the upstream ended
/// without it), `cut` why its answer was cut short, if it was.
///
/// An error wins; then a finish (`error` is a failure); then the answer's cut; then who
/// stopped it; an end with none of these is a failure without a finish reason.
pub(crate) fn decide(seen: Option<&Seen>, cut: Option<Cut>) -> OutputEnd {
    let Some(seen) = seen else {
        return OutputEnd::Failed(Failure::Missing);
    };
    if let Some(error) = &seen.error {
        return OutputEnd::Failed(Failure::Upstream(error.clone()));
    }
    match (&seen.finish, cut, seen.stopped) {
        (Some(reason), _, _) if &**reason == "error" => OutputEnd::Failed(Failure::ErrorFinish),
        (Some(reason), _, _) => OutputEnd::Finished(reason.clone()),
        (None, Some(cut), _) => OutputEnd::Stopped(Initiator::Gateway(cut)),
        (None, None, Some(by)) => OutputEnd::Stopped(by),
        (None, None, None) => OutputEnd::Failed(Failure::NoFinishReason),
    }
}

/// Why a request was answered with an error once its run began: its log line's `ended`,
/// its span's `error.type`, and the code of its error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ErrorType {
    /// It passed its deadline: before its pick decided, or before any output choice
    /// finished (504 `request_deadline`).
    RequestDeadline,
    /// Its pick found no choice (502 `no_choice`).
    NoChoice,
    /// The gateway shut down before any output choice finished (503 `shut_down`).
    ShutDown,
    /// Every output choice failed upstream (502 `every_choice_failed`).
    EveryChoiceFailed,
    /// The client went away before any output choice finished (nobody reads its 499).
    ClientGone,
}

impl ErrorType {
    /// Its name in the log, the metrics and the span, and its error's code.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            ErrorType::RequestDeadline => "request_deadline",
            ErrorType::NoChoice => "no_choice",
            ErrorType::ShutDown => "shut_down",
            ErrorType::EveryChoiceFailed => "every_choice_failed",
            ErrorType::ClientGone => "client_gone",
        }
    }

    /// The status a request failed so is answered with, when it is still to send.
    pub(crate) fn status(self) -> StatusCode {
        match self {
            ErrorType::RequestDeadline => StatusCode::GATEWAY_TIMEOUT,
            ErrorType::NoChoice | ErrorType::EveryChoiceFailed => StatusCode::BAD_GATEWAY,
            ErrorType::ShutDown => StatusCode::SERVICE_UNAVAILABLE,
            // nginx's "client closed request": no client reads it.
            ErrorType::ClientGone => StatusCode::from_u16(499).unwrap_or(StatusCode::BAD_REQUEST),
        }
    }
}

/// How a whole answer ended, decided once from its output choices' endings and whether it
/// streamed (as tower-http's `classify` decides once whether a response failed): its HTTP
/// status where one is still to send, whether it failed and how, its log label, its span's
/// status and its metrics' outcome. Every API's answer, streamed or not, reads this one
/// verdict; nothing re-derives it.
///
/// The rule, one per ending, for every API:
///
/// - some output choice finished: the answer is an answer (200; a pick never turns what a
///   sample gave into an error), its choices that did not finish marked so (Chat);
/// - none finished: a failure in the client's terms, by the first cause of: the gateway's
///   cut (shutdown: 503, `shut_down`; deadline: 504, `request_deadline`), then the
///   upstream's failure (502, `every_choice_failed`), then the client or the pick;
/// - the log label and the metrics' outcome name the cut whenever one cut a choice short,
///   streamed or not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AnswerEnd {
    /// Why the answer ended.
    pub(crate) cause: Cause,
    /// Some output choice finished.
    pub(crate) answered: bool,
    /// The answer streamed: its status (200) was sent with its first byte.
    pub(crate) streamed: bool,
    /// Each output choice that did not finish, `choice N: why`, `; `-separated.
    pub(crate) failures: String,
}

/// The label of an answer some of whose output choices failed while another finished.
pub(crate) const SOME_CHOICES_FAILED: &str = "some_choices_failed";

/// Why an answer ended, across its output choices.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cause {
    /// Every output choice finished.
    Finished,
    /// The gateway cut a choice short (the first cause there is).
    Cut(Cut),
    /// A choice failed upstream, none was cut.
    Failed,
    /// A choice was stopped by `Initiator` (the client, the pick), none failed or was cut.
    Stopped(Initiator),
}

impl AnswerEnd {
    /// The verdict of an answer whose output choices ended so (`streamed`: it streamed).
    pub(crate) fn of(ends: &[OutputEnd], streamed: bool) -> AnswerEnd {
        let cut = ends.iter().find_map(|end| match end {
            OutputEnd::Stopped(Initiator::Gateway(cut)) => Some(*cut),
            _ => None,
        });
        let failed = ends.iter().any(|end| matches!(end, OutputEnd::Failed(_)));
        let stopped = ends.iter().find_map(|end| match end {
            OutputEnd::Stopped(by) => Some(*by),
            _ => None,
        });
        let cause = match (cut, failed, stopped) {
            (Some(cut), _, _) => Cause::Cut(cut),
            (None, true, _) => Cause::Failed,
            (None, false, Some(by)) => Cause::Stopped(by),
            // No output choice at all is an upstream's failure: nothing came.
            (None, false, None) if ends.is_empty() => Cause::Failed,
            (None, false, None) => Cause::Finished,
        };
        let failures = (ends.iter().enumerate())
            .filter_map(|(o, end)| end.why().map(|why| format!("choice {o}: {why}")))
            .collect::<Vec<_>>()
            .join("; ");
        AnswerEnd {
            cause,
            answered: ends.iter().any(|end| matches!(end, OutputEnd::Finished(_))),
            streamed,
            failures,
        }
    }

    /// How the answer failed, in the client's terms, when no output choice finished:
    /// the request's error type (its span's `error.type`); `None` when it is an answer.
    pub(crate) fn failure(&self) -> Option<ErrorType> {
        if self.answered {
            return None;
        }
        Some(match self.cause {
            Cause::Cut(Cut::ShutDown) => ErrorType::ShutDown,
            Cause::Cut(Cut::PastDeadline) => ErrorType::RequestDeadline,
            Cause::Stopped(Initiator::Client) => ErrorType::ClientGone,
            Cause::Failed | Cause::Finished | Cause::Stopped(_) => ErrorType::EveryChoiceFailed,
        })
    }

    /// The HTTP status still to send: `None` for a streamed answer (its 200 went with its
    /// first byte); 200 when some output choice finished; else the failure's.
    pub(crate) fn status(&self) -> Option<StatusCode> {
        if self.streamed {
            return None;
        }
        Some(match self.failure() {
            None => StatusCode::OK,
            Some(failure) => failure.status(),
        })
    }

    /// The request's log label (`ended`) and its metrics' outcome: the cut whenever one cut
    /// a choice short, else the failure, else `some_choices_failed` when an output choice
    /// failed beside one that finished (an answer, 200, that the log does not call
    /// complete), else `complete`. The same streamed or not.
    pub(crate) fn label(&self) -> &'static str {
        match (self.cause, self.failure()) {
            (Cause::Cut(Cut::ShutDown), _) => ErrorType::ShutDown.as_str(),
            (Cause::Cut(Cut::PastDeadline), _) => ErrorType::RequestDeadline.as_str(),
            (_, Some(failure)) => failure.as_str(),
            (Cause::Failed, None) => SOME_CHOICES_FAILED,
            (_, None) => "complete",
        }
    }

    /// The span's status: an error (its `error.type`) when the answer failed.
    pub(crate) fn span_error(&self) -> Option<&'static str> {
        self.failure().map(ErrorType::as_str)
    }

    /// The answer's error, in Chat Completions' shape, when it failed (for `model`): the
    /// one a non-streamed answer is, and a streamed one ends with.
    pub(crate) fn error(&self, model: &str) -> Option<ApiError> {
        let failure = self.failure()?;
        let kind = match failure {
            ErrorType::ShutDown => "server_error",
            _ => "upstream_error",
        };
        // Each choice's own why; a failure of every choice says so first.
        let message = match failure {
            ErrorType::EveryChoiceFailed => {
                format!("model {model:?}: every choice failed: {}", self.failures)
            }
            _ => format!("model {model:?}: {}", self.failures),
        };
        Some(ApiError::new(failure.status(), kind, message).code(failure.as_str()))
    }
}

/// How a request whose run began ended, as its record says it (its log's `ended`, its
/// metrics' outcome, its span's status, its row's status): the answer's verdict, a failure
/// before its answer began, or its client gone before either was decided. Every label of
/// the record is read from this one value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Ended {
    /// The answer was decided: its verdict.
    Answer(AnswerEnd),
    /// The request failed before its answer began (its pick found nothing, or its deadline
    /// passed while it picked).
    Failed(ErrorType),
    /// Its client went away before its answer was decided.
    ClientGone,
}

impl Ended {
    /// The log's `ended` and the metrics' outcome.
    pub(crate) fn label(&self) -> &'static str {
        match self {
            Ended::Answer(answer) => answer.label(),
            Ended::Failed(why) => why.as_str(),
            Ended::ClientGone => ErrorType::ClientGone.as_str(),
        }
    }

    /// The span's `error.type`, when it failed (a client gone says so in its own attribute).
    pub(crate) fn span_error(&self) -> Option<&'static str> {
        match self {
            Ended::Answer(answer) => answer.span_error(),
            Ended::Failed(why) => Some(why.as_str()),
            Ended::ClientGone => None,
        }
    }

    /// The status the request was answered with (a streamed answer's 200 went with its
    /// first byte; a client gone, 499, was never sent).
    pub(crate) fn status(&self) -> u16 {
        match self {
            Ended::Answer(answer) => answer.status().map_or(200, |s| s.as_u16()),
            Ended::Failed(why) => why.status().as_u16(),
            Ended::ClientGone => ErrorType::ClientGone.status().as_u16(),
        }
    }

    /// The client went away before the answer was decided.
    pub(crate) fn client_gone(&self) -> bool {
        matches!(self, Ended::ClientGone)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::upstream::stop::SHUT_DOWN;

    fn seen(error: Option<&str>, finish: Option<&str>, stopped: Option<Initiator>) -> Seen {
        Seen {
            error: error.map(upstream_error),
            finish: finish.map(Into::into),
            stopped,
        }
    }

    /// An upstream's error, as the library reports it.
    fn upstream_error(message: &str) -> choicewise_core::Error {
        let reads = format!("data: {{\"error\":{{\"message\":\"{message}\"}}}}\n\n");
        choicewise_core::Demux::new()
            .feed(reads.as_bytes())
            .unwrap_err()
    }

    #[test]
    fn each_ending_is_decided_from_what_was_seen_and_the_cut() {
        use OutputEnd::{Failed, Finished, Stopped};
        let shut = Initiator::Gateway(Cut::ShutDown);
        let late = Initiator::Gateway(Cut::PastDeadline);
        let boom = upstream_error("boom");
        let cases = [
            (None, None, Failed(Failure::Missing)),
            (None, Some(Cut::ShutDown), Failed(Failure::Missing)),
            (
                Some(seen(Some("boom"), None, None)),
                Some(Cut::PastDeadline),
                Failed(Failure::Upstream(boom)),
            ),
            (
                Some(seen(None, Some("stop"), None)),
                None,
                Finished("stop".into()),
            ),
            (
                Some(seen(None, Some("length"), None)),
                Some(Cut::ShutDown),
                Finished("length".into()),
            ),
            (
                Some(seen(None, Some("error"), None)),
                None,
                Failed(Failure::ErrorFinish),
            ),
            (
                Some(seen(None, None, None)),
                None,
                Failed(Failure::NoFinishReason),
            ),
            (
                Some(seen(None, None, None)),
                Some(Cut::PastDeadline),
                Stopped(late),
            ),
            // Who stopped it is read, never inferred: the shutdown, the client, the pick.
            (Some(seen(None, None, Some(shut))), None, Stopped(shut)),
            (
                Some(seen(None, None, Some(Initiator::Client))),
                None,
                Stopped(Initiator::Client),
            ),
            (
                Some(seen(None, None, Some(Initiator::Pick))),
                None,
                Stopped(Initiator::Pick),
            ),
            // The answer's own cut wins over an earlier stop.
            (
                Some(seen(None, None, Some(Initiator::Pick))),
                Some(Cut::PastDeadline),
                Stopped(late),
            ),
        ];
        for (seen, cut, expected) in cases {
            assert_eq!(decide(seen.as_ref(), cut), expected, "{seen:?} {cut:?}");
        }
    }

    #[test]
    fn a_cancel_is_read_with_who_sent_it() {
        use choicewise_core::{ChoiceEvent, cancel::CancelReason};
        let cases = [
            (CancelReason::Decided, Initiator::Pick),
            (CancelReason::LowConfidence, Initiator::Pick),
            (
                CancelReason::ShuttingDown,
                Initiator::Gateway(Cut::ShutDown),
            ),
            (
                CancelReason::Deadline,
                Initiator::Gateway(Cut::PastDeadline),
            ),
            (CancelReason::ReaderGone, Initiator::Client),
        ];
        for (reason, by) in cases {
            let mut seen = Seen::default();
            seen.event(&ChoiceEvent::Cancelled(reason));
            assert_eq!(seen.stopped, Some(by), "{reason:?}");
            assert_eq!(decide(Some(&seen), None), OutputEnd::Stopped(by));
        }
    }

    #[test]
    fn an_ending_says_why_in_the_answers_words() {
        let failed = OutputEnd::Failed(Failure::NoFinishReason);
        assert_eq!(
            failed.why().as_deref(),
            Some("the upstream ended the choice without a finish reason")
        );
        let shut = OutputEnd::Stopped(Initiator::Gateway(Cut::ShutDown));
        assert_eq!(shut.why().as_deref(), Some(SHUT_DOWN));
        assert_eq!(OutputEnd::Finished("stop".into()).why(), None);
        assert_eq!(
            OutputEnd::Failed(Failure::Missing).to_string(),
            "the upstream ended without this choice"
        );
    }

    /// The rule, one row per answer's endings, streamed and not: the status still to send
    /// (not streamed), the failure (the span's `error.type`), and the label (the log's
    /// `ended`, the metrics' outcome), which is the same streamed or not.
    #[test]
    fn one_verdict_per_answer_the_same_streamed_or_not() {
        let stop = || OutputEnd::Finished("stop".into());
        let failed = || OutputEnd::Failed(Failure::Upstream(upstream_error("500")));
        let no_finish = || OutputEnd::Failed(Failure::NoFinishReason);
        let shut = || OutputEnd::Stopped(Initiator::Gateway(Cut::ShutDown));
        let late = || OutputEnd::Stopped(Initiator::Gateway(Cut::PastDeadline));
        let gone = || OutputEnd::Stopped(Initiator::Client);
        let picked = || OutputEnd::Stopped(Initiator::Pick);
        use ErrorType::*;
        #[rustfmt::skip]
        let rows: Vec<(Vec<OutputEnd>, u16, Option<ErrorType>, &str)> = vec![
            (vec![stop()],                 200, None,                    "complete"),
            (vec![stop(), stop()],         200, None,                    "complete"),
            // A pick never turns what a sample gave into an error.
            (vec![failed(), stop()],       200, None,                    "some_choices_failed"),
            (vec![failed()],               502, Some(EveryChoiceFailed), "every_choice_failed"),
            (vec![no_finish()],            502, Some(EveryChoiceFailed), "every_choice_failed"),
            (vec![failed(), failed()],     502, Some(EveryChoiceFailed), "every_choice_failed"),
            (vec![OutputEnd::Failed(Failure::Missing)], 502, Some(EveryChoiceFailed), "every_choice_failed"),
            (vec![],                       502, Some(EveryChoiceFailed), "every_choice_failed"),
            (vec![picked()],               502, Some(EveryChoiceFailed), "every_choice_failed"),
            // A cut is named, whether or not a choice finished.
            (vec![shut()],                 503, Some(ShutDown),          "shut_down"),
            (vec![failed(), shut()],       503, Some(ShutDown),          "shut_down"),
            (vec![stop(), shut()],         200, None,                    "shut_down"),
            (vec![late()],                 504, Some(RequestDeadline),   "request_deadline"),
            (vec![failed(), late()],       504, Some(RequestDeadline),   "request_deadline"),
            (vec![stop(), late()],         200, None,                    "request_deadline"),
            (vec![gone()],                 499, Some(ClientGone),        "client_gone"),
        ];
        for (ends, status, failure, label) in rows {
            for streamed in [true, false] {
                let answer = AnswerEnd::of(&ends, streamed);
                let row = format!("{ends:?} streamed={streamed}");
                assert_eq!(answer.failure(), failure, "{row}");
                assert_eq!(answer.label(), label, "{row}");
                assert_eq!(answer.span_error(), failure.map(ErrorType::as_str), "{row}");
                let expected = (!streamed).then(|| StatusCode::from_u16(status).unwrap());
                assert_eq!(answer.status(), expected, "{row}");
                // The answer's error is the failure's, in its status.
                let error = answer.error("m");
                assert_eq!(
                    error.as_ref().map(|e| e.status.as_u16()),
                    failure.map(|_| status)
                );
                if let Some(error) = error {
                    let body = error.body();
                    assert_eq!(body["error"]["code"], label, "{row}");
                    assert!(
                        body["error"]["message"]
                            .as_str()
                            .unwrap()
                            .starts_with("model \"m\": "),
                        "{body}"
                    );
                }
            }
        }
    }

    #[test]
    fn a_failed_answers_error_names_each_choices_failure() {
        let ends = [
            OutputEnd::Failed(Failure::ErrorFinish),
            OutputEnd::Failed(Failure::Missing),
        ];
        let error = AnswerEnd::of(&ends, false).error("m").unwrap();
        assert_eq!(
            error.body()["error"]["message"],
            "model \"m\": every choice failed: choice 0: the upstream ended the choice with \
             finish_reason \"error\"; choice 1: the upstream ended without this choice"
        );
    }

    /// A request's record reads every label from one value: the answer's verdict, a
    /// failure before it, or the client gone.
    #[test]
    fn a_records_labels_come_from_one_value() {
        let cut = AnswerEnd::of(
            &[OutputEnd::Stopped(Initiator::Gateway(Cut::ShutDown))],
            false,
        );
        let finished = AnswerEnd::of(&[OutputEnd::Finished("stop".into())], true);
        #[rustfmt::skip]
        let rows = [
            (Ended::Answer(finished),                    "complete",         None,                     200, false),
            (Ended::Answer(cut),                         "shut_down",        Some("shut_down"),        503, false),
            (Ended::Failed(ErrorType::NoChoice),         "no_choice",        Some("no_choice"),        502, false),
            (Ended::Failed(ErrorType::RequestDeadline),  "request_deadline", Some("request_deadline"), 504, false),
            (Ended::ClientGone,                          "client_gone",      None,                     499, true),
        ];
        for (ended, label, span_error, status, gone) in rows {
            assert_eq!(ended.label(), label, "{ended:?}");
            assert_eq!(ended.span_error(), span_error, "{ended:?}");
            assert_eq!(ended.status(), status, "{ended:?}");
            assert_eq!(ended.client_gone(), gone, "{ended:?}");
        }
    }
}
