//! The answers of `POST /v1/messages` and `POST /v1/responses` in their API's terms: the
//! request's one output choice framed by the API's [`Encoder`](crate::api::Encoder)
//! ([`ApiFraming`]), or written as one object ([`object`]). Whether the answer failed is
//! the verdict's ([`AnswerEnd`]), not decided here.

use axum::body::Bytes;
use choicewise_core::{Choice, ChoiceEvent, ChoiceOutput};

use crate::answer::client::{Encoder, Tokens};
use crate::answer::ending::{AnswerEnd, Failure, OutputEnd};
use crate::answer::write::{Framing, Needs, Tail};
use crate::upstream::engine::{AnswerUsage, Summary};

/// A Messages or Responses answer's events: the one output choice's, by the API's
/// [`Encoder`]; its tail is the choice's decided ending, with the usage, the provider's
/// stop reason and the pick's summary.
pub(crate) struct ApiFraming {
    encoder: Box<dyn Encoder>,
}

impl ApiFraming {
    /// The framing of a request's answer by the API's `encoder`.
    pub(crate) fn new(encoder: Box<dyn Encoder>) -> Self {
        ApiFraming { encoder }
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

    fn tail(&mut self, ends: &[OutputEnd], answer: &AnswerEnd, tail: Tail, write: &mut Vec<u8>) {
        let end = (ends.first()).map_or(OutputEnd::Failed(Failure::Missing), Clone::clone);
        // The encoder saw the same events the ending was decided from, and the verdict was
        // decided from this one ending.
        debug_assert!(match &end {
            OutputEnd::Finished(reason) => self.encoder.finish_reason() == Some(reason),
            _ => true,
        });
        debug_assert_eq!(answer.answered, matches!(end, OutputEnd::Finished(_)));
        let usage = tail
            .usage
            .as_ref()
            .map_or_else(Tokens::default, Tokens::from_answer);
        let stop = tail.stop_reason.as_deref();
        self.encoder
            .close(&end, &usage, stop, tail.summary.as_ref(), write);
    }

    fn more(&mut self, write: &mut Vec<u8>) -> bool {
        self.encoder.more(write)
    }

    fn needs(&self) -> Needs {
        Needs {
            usage: true,
            stop_reason: true,
        }
    }
}

/// The answer as one object (an Anthropic `message`, a Responses `response`) of its one
/// output choice (the first of `choices`), which finished (a failed answer is the
/// verdict's error: [`crate::answer::respond::one_object`]), as `text` writes it from the
/// choice and its decided ending.
pub(crate) fn object(
    choices: &[(Option<Choice>, OutputEnd)],
    usage: &AnswerUsage,
    summary: Option<&Summary>,
    text: impl Fn(&ChoiceOutput, &OutputEnd, &Tokens, Option<&Summary>) -> Vec<u8>,
) -> Bytes {
    // The one output choice finished (the verdict says an answer).
    let (choice, end) = match choices.first() {
        Some((choice, end)) => (choice.as_ref(), end.clone()),
        None => (None, OutputEnd::Failed(Failure::Missing)),
    };
    debug_assert!(choice.is_some(), "a finished choice is one the run holds");
    let usage = Tokens::from_answer(usage);
    let text = |out: &ChoiceOutput| text(out, &end, &usage, summary);
    Bytes::from(match choice {
        Some(choice) => choice.inspect(text),
        None => text(&ChoiceOutput::default()),
    })
}
