//! The answers of `POST /v1/messages` and `POST /v1/responses` in their API's terms: the
//! request's one output choice framed by the API's [`Encoder`](crate::ingress::Encoder)
//! ([`ApiFraming`]), or written as one object ([`message`]).

use axum::body::Bytes;
use axum::http::StatusCode;
use choicewise_core::{Choice, ChoiceEvent};
use serde_json::Value;

use crate::ending::{Failure, OutputEnd};
use crate::engine::{AnswerUsage, Summary};
use crate::finish::ErrorType;
use crate::ingress::{self, Encoder, Reply, Tokens};
use crate::write::{Framing, Needs, Tail};

/// A Messages or Responses answer's events: the one output choice's, by the API's
/// [`Encoder`]; its tail is the choice's decided ending, with the usage, the provider's
/// stop reason and the pick's summary.
pub(crate) struct ApiFraming {
    encoder: Box<dyn Encoder>,
}

impl ApiFraming {
    /// The framing of a request's answer.
    pub(crate) fn new(reply: &Reply) -> Self {
        ApiFraming {
            encoder: reply.encoder(),
        }
    }
}

impl Framing for ApiFraming {
    fn open(&mut self, write: &mut Vec<u8>) {
        self.encoder.start(write);
    }

    fn event(&mut self, _: usize, event: &ChoiceEvent, write: &mut Vec<u8>) {
        self.encoder.event(event, write);
    }

    fn end(&mut self, _: usize, _: &OutputEnd, _: &mut Vec<u8>) {
        // Written with the tail, which carries the usage and the summary.
    }

    fn tail(&mut self, ends: &[OutputEnd], tail: Tail, write: &mut Vec<u8>) -> Option<ErrorType> {
        let end = (ends.first()).map_or(OutputEnd::Failed(Failure::Missing), Clone::clone);
        // The encoder saw the same events the ending was decided from.
        debug_assert!(match &end {
            OutputEnd::Finished(reason) => self.encoder.finish_reason() == Some(reason),
            _ => true,
        });
        let usage = tail
            .usage
            .as_ref()
            .map_or_else(Tokens::default, Tokens::from_answer);
        let summary = tail
            .summary
            .as_ref()
            .and_then(|c| serde_json::to_value(c).ok());
        let stop = tail.stop_reason.as_deref();
        self.encoder
            .close(&end, &usage, stop, summary.as_ref(), write);
        // A choice whose events ended without its finish is named in the request's log.
        (end == OutputEnd::Failed(Failure::NoFinishReason)).then_some(ErrorType::NoFinish)
    }

    fn needs(&self) -> Needs {
        Needs {
            usage: true,
            stop_reason: true,
        }
    }
}

/// The answer as one object (an Anthropic `message`, a Responses `response`) of the output
/// `choice` that ended so (`end`); one that did not finish is a 502: `Err` is its body, in
/// the API's error shape.
pub(crate) fn message(
    reply: &Reply,
    model: &str,
    (choice, end): (Option<&Choice>, &OutputEnd),
    usage: &AnswerUsage,
    summary: Option<&Summary>,
) -> Result<Bytes, Value> {
    match (choice, end) {
        (Some(choice), OutputEnd::Finished(_)) => {
            let usage = Tokens::from_answer(usage);
            let summary = summary.and_then(|c| serde_json::to_value(c).ok());
            let summary = summary.as_ref();
            // The request's parameters a Responses answer repeats are spliced in as sent.
            let text =
                choice.inspect(|out| reply.answer_text(&reply.message(out, &usage, summary)));
            Ok(Bytes::from(text))
        }
        (_, end) => {
            let why = end.why().unwrap_or_default();
            let message = format!("model {model:?}: {why}");
            Err(ingress::error_body(
                reply.api,
                StatusCode::BAD_GATEWAY,
                &message,
            ))
        }
    }
}
