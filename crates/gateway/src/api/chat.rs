//! Chat Completions (`POST /v1/chat/completions`), the API the gateway runs every request
//! in ([`Chat`]): its request checked as it came, its streamed framing ([`ChatFraming`]) and
//! its one `chat.completion` object ([`completion`]).

use axum::body::Bytes;
use axum::response::{IntoResponse, Response};
use choicewise_core::chunks::{ChoiceChunks, ChunkEncoder, DONE, Envelope};
use choicewise_core::{Choice, ChoiceEvent, ChoiceOutput};
use serde::Serialize;
use serde::ser::{SerializeMap, SerializeSeq, Serializer};

use crate::Limits;
use crate::answer::ending::{AnswerEnd, OutputEnd};
use crate::answer::write::{Framing, Needs, Tail};
use crate::api::{BodyCost, ClientApi, Head, Read, Refused};
use crate::config::ModelPick;
use crate::error::ApiError;
use crate::request::ChatRequest;
use crate::upstream::engine::{AnswerUsage, Summary};

pub(crate) mod relay;

/// OpenAI's Chat Completions: the request is the one the gateway runs, read as it came;
/// every output choice is answered (its `n`).
pub(crate) struct Chat;

impl ClientApi for Chat {
    const LABEL: &'static str = "chat";
    const ROUTE: &'static str = "/v1/chat/completions";
    const COST: BodyCost = BodyCost {
        heavy: &["messages", "tools", "functions"],
        sixteenths: 24,
    };
    const ONE_OUTPUT: bool = false;
    type Reply = ();
    type Framing = ChatFraming;

    fn read(
        _: &Head,
        bytes: &Bytes,
        limits: &Limits,
        picks: &crate::config::ByName<ModelPick>,
    ) -> Result<Read<()>, Box<Refused>> {
        let req = ChatRequest::parse(bytes, limits)
            .and_then(|r| r.with_model(picks, limits))
            .map_err(|e| Refused::new(e, model_of(bytes)))?;
        Ok(Read {
            req,
            reply: (),
            native: None,
            hosted: Vec::new(),
            prompt: None,
        })
    }

    fn framing(
        _: (),
        envelope: &Envelope,
        req: &ChatRequest,
        outputs: usize,
        _: Option<u64>,
    ) -> ChatFraming {
        let asked = (req.logprobs, req.include_usage);
        ChatFraming::new(envelope, outputs, &req.model, asked)
    }

    fn object(
        _: &(),
        envelope: &Envelope,
        logprobs: bool,
        choices: &[(Option<Choice>, OutputEnd)],
        usage: &AnswerUsage,
        summary: Option<&Summary>,
    ) -> Bytes {
        completion(envelope, choices, logprobs, usage, summary)
    }

    fn error_body(error: &ApiError) -> serde_json::Value {
        error.body()
    }

    fn shaped(error: ApiError) -> Response {
        error.into_response()
    }
}

/// The model a refused body names, when it can be read: the refusal is counted under it
/// when it is a configured one. Read again on this path alone, its top level only.
fn model_of(bytes: &Bytes) -> Option<String> {
    let body = crate::request::split_object(bytes).ok()?;
    serde_json::from_slice(body.get("model")?).ok()
}

/// A Chat Completions answer's events: each output choice's chunks (proto's encoder); a
/// choice that did not finish ends with a `finish_reason: "error"` chunk saying why; the
/// tail is the usage and the pick's summary when asked for, then (when the verdict is a
/// failure: no choice finished) an error event `{"error": {...}}`, then `[DONE]`.
pub(crate) struct ChatFraming {
    encoder: ChunkEncoder,
    chunks: Vec<ChoiceChunks>,
    /// The model asked for, named in the answer's error.
    model: String,
    include_usage: bool,
}

impl ChatFraming {
    /// The framing of `outputs` choices of a request for `model` (`logprobs`,
    /// `include_usage`: as the client asked).
    pub(crate) fn new(
        envelope: &Envelope,
        outputs: usize,
        model: &str,
        (logprobs, include_usage): (bool, bool),
    ) -> Self {
        ChatFraming {
            encoder: envelope.encoder(),
            chunks: (0..outputs as u32)
                .map(|o| ChoiceChunks::new(o).logprobs(logprobs))
                .collect(),
            model: model.to_string(),
            include_usage,
        }
    }

    /// Every choice taken as opened, none written: the upstream's own chunk opens it (a
    /// relayed answer of one choice).
    pub(crate) fn opened(&mut self) {
        for c in self.chunks.iter_mut() {
            let _ = c.opening();
        }
    }
}

impl Framing for ChatFraming {
    fn open(&mut self, write: &mut Vec<u8>) {
        // Every choice's opening, in index order.
        for c in self.chunks.iter_mut() {
            self.encoder.element(write, &c.opening());
        }
    }

    fn event(&mut self, o: usize, event: &ChoiceEvent, write: &mut Vec<u8>) {
        if let Some(element) = self.chunks[o].event(event) {
            self.encoder.element(write, &element);
        }
    }

    fn end(&mut self, o: usize, end: &OutputEnd, write: &mut Vec<u8>) {
        let chunks = &mut self.chunks[o];
        // A finish (`error` included) was written with its event.
        if let Some(why) = end.why()
            && !chunks.is_finished()
        {
            self.encoder.element(write, &chunks.failed(&why));
        }
    }

    fn tail(&mut self, _: &[OutputEnd], answer: &AnswerEnd, tail: Tail, write: &mut Vec<u8>) {
        if tail.usage.is_some() || tail.summary.is_some() {
            // Serialised from their types, straight into the answer.
            (self.encoder).last(write, tail.usage.as_ref(), tail.summary.as_ref());
        }
        // No choice finished (the verdict's failure): the stream ends with OpenAI's
        // mid-stream error event, which the SDKs raise, rather than as a success of
        // truncated choices.
        if let Some(error) = answer.error(&self.model) {
            ChunkEncoder::event(write, &error.body());
        }
        write.extend_from_slice(DONE);
    }

    fn needs(&self) -> Needs {
        Needs {
            usage: self.include_usage,
            stop_reason: false,
        }
    }
}

/// The output choices of a non-streamed answer, each written from the run's own copy of it
/// (read in place, [`Choice::inspect`](choicewise_core::Choice::inspect)), with how it ended
/// (why it failed, if it did).
struct AnsweredChoices<'a> {
    choices: &'a [(Option<Choice>, OutputEnd)],
    /// The client asked for log-probabilities.
    logprobs: bool,
}

impl Serialize for AnsweredChoices<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.choices.len()))?;
        for (o, (choice, end)) in self.choices.iter().enumerate() {
            let why = end.why();
            let (index, error, logprobs) = (o as u32, why.as_deref(), self.logprobs);
            let mut write = |output: &ChoiceOutput| {
                seq.serialize_element(&AnsweredChoice {
                    index,
                    output,
                    error,
                    logprobs,
                })
            };
            match choice {
                Some(choice) => choice.inspect(write)?,
                None => write(&ChoiceOutput::default())?,
            }
        }
        seq.end()
    }
}

/// The client's choice `index`, as its upstream sent it: what the library adds of its own
/// (per-choice usage, the source, a mapped dialect's stop reason) left out; a failed one
/// ends with `finish_reason: "error"` and why in `choicewise.error`.
struct AnsweredChoice<'a> {
    index: u32,
    output: &'a ChoiceOutput,
    error: Option<&'a str>,
    logprobs: bool,
}

impl Serialize for AnsweredChoice<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Error<'a> {
            error: &'a str,
        }
        let output = self.output;
        let mut map = s.serialize_map(None)?;
        map.serialize_entry("index", &self.index)?;
        map.serialize_entry("message", &output.message)?;
        match self.error {
            Some(_) => map.serialize_entry("finish_reason", "error")?,
            None => map.serialize_entry("finish_reason", &output.finish_reason)?,
        }
        let logprobs = (self.logprobs && self.error.is_none())
            .then_some(output.logprobs.as_ref())
            .flatten();
        map.serialize_entry("logprobs", &logprobs)?;
        if let Some(filter) = &output.content_filter_results {
            map.serialize_entry("content_filter_results", filter)?;
        }
        if let Some(error) = self.error {
            map.serialize_entry("choicewise", &Error { error })?;
        }
        map.end()
    }
}

/// A non-streamed answer: a `chat.completion` with the run's usage and the pick's summary.
#[derive(Serialize)]
struct Completion<'a> {
    id: &'a str,
    object: &'static str,
    created: u64,
    model: &'a str,
    choices: AnsweredChoices<'a>,
    usage: &'a AnswerUsage,
    #[serde(skip_serializing_if = "Option::is_none")]
    choicewise: Option<&'a Summary>,
}

/// The answer as one `chat.completion`, written from its types into one buffer of its exact
/// size: each choice's text read where the run holds it (`choices`: each with its decided
/// ending) and written once, into the answer's bytes.
pub(crate) fn completion(
    envelope: &Envelope,
    choices: &[(Option<Choice>, OutputEnd)],
    logprobs: bool,
    usage: &AnswerUsage,
    summary: Option<&Summary>,
) -> Bytes {
    written(&Completion {
        id: &envelope.id,
        object: "chat.completion",
        created: envelope.created,
        model: &envelope.model,
        choices: AnsweredChoices { choices, logprobs },
        usage,
        choicewise: summary,
    })
}

/// `value` written as JSON into one buffer of its exact size (counted first), so that a
/// large answer is held once, never grown and copied.
pub(crate) fn written(value: &impl Serialize) -> Bytes {
    Bytes::from(super::to_vec_exact(value))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    #[test]
    fn an_answered_choice_is_its_output_renumbered_without_the_librarys_additions() {
        let mut output = ChoiceOutput::new(7, choicewise_core::Message::assistant("Hi"));
        output.finish_reason = Some("stop".into());
        output.logprobs = Some(choicewise_core::Logprobs::from_value(
            &json!({"content": []}),
        ));
        output.content_filter_results = Some(json!({"hate": {"filtered": false}}));
        output.stop_reason = Some("end_turn".into());
        output.usage = Some(choicewise_core::ChoiceUsage::new(
            3,
            choicewise_core::UsageSource::Reported,
        ));
        let written = |error: Option<&str>, logprobs: bool| {
            serde_json::to_value(AnsweredChoice {
                index: 2,
                output: &output,
                error,
                logprobs,
            })
            .unwrap()
        };
        // As the library's own serialisation of the choice says it, but for its additions.
        let mut expected = output.clone();
        expected.index = 2;
        (expected.usage, expected.stop_reason) = (None, None);
        assert_eq!(
            written(None, true),
            serde_json::to_value(&expected).unwrap()
        );
        expected.logprobs = None;
        assert_eq!(
            written(None, false),
            serde_json::to_value(&expected).unwrap()
        );
        let mut failed = serde_json::to_value(&expected).unwrap();
        failed["finish_reason"] = json!("error");
        failed["choicewise"] = json!({"error": "cut"});
        assert_eq!(written(Some("cut"), true), failed);
    }

    #[test]
    fn a_written_chunk_is_the_envelope_around_its_element() {
        let envelope = Envelope::new("m \"quoted\"");
        let element = ChoiceChunks::new(2)
            .event(&choicewise_core::ChoiceEvent::Content("a \"b\"\n".into()))
            .unwrap();
        let mut write = Vec::new();
        let encoder = envelope.encoder();
        encoder.element(&mut write, &element);
        encoder.element(&mut write, &element);
        let text = String::from_utf8(write).unwrap();
        let events: Vec<&str> = text.split_terminator("\n\n").collect();
        assert_eq!(events.len(), 2);
        let expected = json!({"index": 2, "delta": {"role": "assistant", "content": "a \"b\"\n"},
                              "logprobs": null, "finish_reason": null});
        for event in events {
            let data = event.strip_prefix("data: ").unwrap();
            let chunk: Value = serde_json::from_str(data).unwrap();
            assert_eq!(chunk, envelope.chunk(vec![expected.clone()]));
        }
    }
}
