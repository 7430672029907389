//! Gemini answers: every candidate's events as `GenerateContentResponse` records
//! ([`GeminiFraming`]: server-sent events, or the records of one JSON array), or one
//! `GenerateContentResponse` ([`object`]).
//!
//! A record carries the candidate it advances, by `index`: a text delta as a `text` part, a
//! reasoning delta as a `thought` part when the client asked for thoughts, a function call
//! once complete as a `functionCall` part (`args` an object, as the upstream wrote it). A
//! candidate's end is a record of its `finishReason` (`stop` → `STOP`, `length` →
//! `MAX_TOKENS`, `content_filter` → `SAFETY`, `tool_calls` → `STOP`; Gemini's own reasons
//! as they are; any other `STOP`), its content of no parts; a call whose arguments are not a JSON object ends its
//! candidate with `MALFORMED_FUNCTION_CALL`; a candidate that failed or was cut ends with
//! `OTHER` and why in `finishMessage`. The last candidate's end comes with the answer's
//! `usageMetadata` and the `choicewise` summary; when no candidate finished, an `{"error":
//! ...}` record follows (the SDKs raise it).

use axum::body::Bytes;
use choicewise_core::chunks::Envelope;
use choicewise_core::{ChoiceEvent, ChoiceOutput, FunctionCallEvent};
use serde::Serialize;
use serde::ser::{SerializeSeq, Serializer};
use serde_json::value::RawValue;

use super::GeminiReply;
use crate::answer::ending::{AnswerEnd, OutputEnd};
use crate::answer::write::{Framing, Needs, Tail};
use crate::upstream::engine::{AnswerUsage, Summary};

/// A `GenerateContentResponse`, as a record of a stream or the whole answer.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Record<'a, C: Serialize> {
    candidates: C,
    #[serde(skip_serializing_if = "Option::is_none")]
    usage_metadata: Option<UsageMetadata>,
    model_version: &'a str,
    response_id: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    choicewise: Option<&'a Summary>,
}

/// A candidate of a record.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Candidate<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    content: Option<Content<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    finish_reason: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    finish_message: Option<String>,
    index: u32,
}

#[derive(Serialize)]
struct Content<'a> {
    role: &'static str,
    parts: Vec<Part<'a>>,
}

/// A part of an answer's content.
#[derive(Serialize)]
#[serde(untagged)]
enum Part<'a> {
    Text {
        text: &'a str,
    },
    Thought {
        text: &'a str,
        thought: bool,
    },
    Call {
        #[serde(rename = "functionCall")]
        function_call: Call<'a>,
    },
}

#[derive(Serialize)]
struct Call<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<&'a str>,
    name: &'a str,
    args: &'a RawValue,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct UsageMetadata {
    prompt_token_count: u64,
    candidates_token_count: u64,
    total_token_count: u64,
}

impl UsageMetadata {
    fn of(usage: &AnswerUsage) -> Self {
        UsageMetadata {
            prompt_token_count: usage.prompt_tokens,
            candidates_token_count: usage.completion_tokens,
            total_token_count: usage.total_tokens,
        }
    }
}

/// A call's arguments as the `args` object, as the upstream wrote them (no arguments: `{}`);
/// why not, when they are not a JSON object.
fn args_of(arguments: &str) -> Result<&RawValue, String> {
    let text = arguments.trim();
    if text.is_empty() {
        return serde_json::from_str("{}").map_err(|e| e.to_string());
    }
    match serde_json::from_str::<&RawValue>(text) {
        Ok(raw) if raw.get().starts_with('{') => Ok(raw),
        Ok(raw) => Err(format!(
            "its arguments are not a JSON object: {}",
            crate::request::kind_of(raw.get().as_bytes())
        )),
        Err(e) => Err(format!("its arguments are not valid JSON: {e}")),
    }
}

/// Gemini's `finishReason` for a finish reason (and whether a call was malformed).
fn finish_reason(reason: &str, malformed: bool) -> &'static str {
    const GEMINI: [&str; 10] = [
        "STOP",
        "MAX_TOKENS",
        "SAFETY",
        "RECITATION",
        "LANGUAGE",
        "OTHER",
        "BLOCKLIST",
        "PROHIBITED_CONTENT",
        "SPII",
        "MALFORMED_FUNCTION_CALL",
    ];
    if malformed {
        return "MALFORMED_FUNCTION_CALL";
    }
    match reason {
        "length" => "MAX_TOKENS",
        "content_filter" => "SAFETY",
        own => GEMINI
            .iter()
            .find(|g| **g == own)
            .copied()
            .unwrap_or("STOP"),
    }
}

/// A candidate's last record: its finish reason, and why when it did not finish (or a call
/// was malformed).
fn ending(index: u32, end: &OutputEnd, malformed: Option<String>) -> Candidate<'static> {
    let (reason, message) = match end {
        OutputEnd::Finished(reason) => (finish_reason(reason, malformed.is_some()), malformed),
        other => ("OTHER", other.why()),
    };
    // Its content is there, of no parts: clients read a candidate's parts without asking.
    Candidate {
        content: Some(Content {
            role: "model",
            parts: Vec::new(),
        }),
        finish_reason: Some(reason),
        finish_message: message,
        index,
    }
}

/// One candidate's stream: why its calls were malformed, if one was.
#[derive(Default)]
struct Stream {
    malformed: Option<String>,
}

/// A Gemini answer's records: each output choice's events as the records of its candidate
/// (its `index`, the output's), the last candidate's end held for the tail, which adds the
/// usage and the summary, then an error record when the verdict is a failure. Server-sent
/// events (`data: {...}\n\n`, no `[DONE]`), or one JSON array (`[{...},\r\n{...}]`).
pub(crate) struct GeminiFraming {
    sse: bool,
    thoughts: bool,
    model: std::sync::Arc<str>,
    id: std::sync::Arc<str>,
    streams: Vec<Stream>,
    /// Records written (a JSON array's records after the first follow a comma).
    records: usize,
    /// Candidates ended.
    ended: usize,
    /// The last candidate's end, written with the tail.
    held: Option<Candidate<'static>>,
}

impl GeminiFraming {
    /// The framing of `outputs` candidates of a request's answer, as `envelope` names it.
    pub(crate) fn new(reply: &GeminiReply, envelope: &Envelope, outputs: usize) -> Self {
        GeminiFraming {
            sse: reply.sse,
            thoughts: reply.thoughts,
            model: envelope.model.clone(),
            id: envelope.id.clone(),
            streams: (0..outputs).map(|_| Stream::default()).collect(),
            records: 0,
            ended: 0,
            held: None,
        }
    }

    /// Appends one record.
    fn record<C: Serialize>(
        &mut self,
        candidates: C,
        usage: Option<UsageMetadata>,
        summary: Option<&Summary>,
        write: &mut Vec<u8>,
    ) {
        let (model, id) = (self.model.clone(), self.id.clone());
        let record = Record {
            candidates,
            usage_metadata: usage,
            model_version: &model,
            response_id: &id,
            choicewise: summary,
        };
        self.raw(&record, write);
    }

    /// Appends one record of any shape (an error's).
    fn raw(&mut self, record: &impl Serialize, write: &mut Vec<u8>) {
        match (self.sse, self.records) {
            (true, _) => write.extend_from_slice(b"data: "),
            (false, 0) => {}
            (false, _) => write.extend_from_slice(b",\r\n"),
        }
        // Serialising into memory fails only for a map with non-string keys, which no
        // record has.
        let _ = serde_json::to_writer(&mut *write, record);
        if self.sse {
            write.extend_from_slice(b"\n\n");
        }
        self.records += 1;
    }

    /// A record of candidate `o`'s new parts.
    fn parts(&mut self, o: usize, parts: Vec<Part<'_>>, write: &mut Vec<u8>) {
        let candidate = Candidate {
            content: Some(Content {
                role: "model",
                parts,
            }),
            index: o as u32,
            finish_reason: None,
            finish_message: None,
        };
        self.record([candidate], None, None, write);
    }
}

impl Framing for GeminiFraming {
    fn open(&mut self, write: &mut Vec<u8>) {
        if !self.sse {
            write.push(b'[');
        }
    }

    fn event(&mut self, o: usize, event: &ChoiceEvent, write: &mut Vec<u8>) {
        match event {
            ChoiceEvent::Content(t) | ChoiceEvent::Refusal(t) if !t.is_empty() => {
                self.parts(o, vec![Part::Text { text: t }], write);
            }
            ChoiceEvent::Reasoning(t) if self.thoughts && !t.is_empty() => {
                let part = Part::Thought {
                    text: t,
                    thought: true,
                };
                self.parts(o, vec![part], write);
            }
            ChoiceEvent::FunctionCall(FunctionCallEvent::Finished {
                call,
                id,
                name,
                arguments,
                ..
            }) => match args_of(arguments) {
                Ok(args) => {
                    let function_call = Call {
                        id: id.as_deref(),
                        name: name.as_deref().unwrap_or_default(),
                        args,
                    };
                    self.parts(o, vec![Part::Call { function_call }], write);
                }
                Err(why) => {
                    let stream = &mut self.streams[o];
                    stream.malformed.get_or_insert(format!("{call}: {why}"));
                }
            },
            _ => {}
        }
    }

    fn end(&mut self, o: usize, end: &OutputEnd, write: &mut Vec<u8>) {
        let malformed = self.streams[o].malformed.take();
        let candidate = ending(o as u32, end, malformed);
        self.ended += 1;
        if self.ended == self.streams.len() {
            self.held = Some(candidate);
        } else {
            self.record([candidate], None, None, write);
        }
    }

    fn tail(&mut self, _: &[OutputEnd], answer: &AnswerEnd, tail: Tail, write: &mut Vec<u8>) {
        let held: Vec<Candidate> = self.held.take().into_iter().collect();
        let usage = tail.usage.as_ref().map(UsageMetadata::of);
        self.record(held, usage, tail.summary.as_ref(), write);
        // No candidate finished: Google's error record, which the SDKs raise.
        if let Some(error) = answer.error(&self.model) {
            let body = super::error_body(error.status, &error.message, None);
            self.raw(&body, write);
        }
        if !self.sse {
            write.push(b']');
        }
    }

    fn needs(&self) -> Needs {
        Needs {
            usage: true,
            stop_reason: false,
        }
    }
}

/// The answer as one `GenerateContentResponse`: every output choice a candidate, as it
/// ended, with the usage and the summary (the verdict says some candidate finished).
pub(crate) fn object(
    reply: &GeminiReply,
    envelope: &Envelope,
    choices: &[(Option<choicewise_core::Choice>, OutputEnd)],
    usage: &AnswerUsage,
    summary: Option<&Summary>,
) -> Bytes {
    let record = Record {
        candidates: Candidates {
            choices,
            thoughts: reply.thoughts,
        },
        usage_metadata: Some(UsageMetadata::of(usage)),
        model_version: &envelope.model,
        response_id: &envelope.id,
        choicewise: summary,
    };
    Bytes::from(crate::api::to_vec_exact(&record))
}

/// The candidates of a whole answer, each written from the run's own copy of its choice.
struct Candidates<'a> {
    choices: &'a [(Option<choicewise_core::Choice>, OutputEnd)],
    thoughts: bool,
}

impl Serialize for Candidates<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.choices.len()))?;
        for (o, (choice, end)) in self.choices.iter().enumerate() {
            let index = o as u32;
            let mut write = |output: &ChoiceOutput| {
                seq.serialize_element(&whole(index, output, end, self.thoughts))
            };
            match choice {
                Some(choice) => choice.inspect(write)?,
                None => write(&ChoiceOutput::default())?,
            }
        }
        seq.end()
    }
}

/// A whole candidate: its thoughts (when asked for), text and function calls, and how it
/// ended.
fn whole<'a>(
    index: u32,
    output: &'a ChoiceOutput,
    end: &OutputEnd,
    thoughts: bool,
) -> Candidate<'a> {
    let m = &output.message;
    let mut parts = Vec::new();
    if let Some(t) = m
        .reasoning_content
        .as_deref()
        .filter(|t| thoughts && !t.is_empty())
    {
        parts.push(Part::Thought {
            text: t,
            thought: true,
        });
    }
    for t in [m.content.as_deref(), m.refusal.as_deref()]
        .into_iter()
        .flatten()
    {
        if !t.is_empty() {
            parts.push(Part::Text { text: t });
        }
    }
    let calls = (m.tool_calls.iter())
        .map(|c| (Some(c.id.as_str()).filter(|id| !id.is_empty()), &c.function))
        .chain(m.function_call.iter().map(|f| (None, f)));
    let mut malformed = None;
    for (place, (id, f)) in calls.enumerate() {
        match args_of(&f.arguments) {
            Ok(args) => parts.push(Part::Call {
                function_call: Call {
                    id,
                    name: &f.name,
                    args,
                },
            }),
            Err(why) => {
                malformed.get_or_insert(format!("tool call {place}: {why}"));
            }
        }
    }
    let ended = ending(index, end, malformed);
    Candidate {
        content: Some(Content {
            role: "model",
            parts,
        }),
        ..ended
    }
}

/// Gemini's `finishReason` of a finish reason, for the tests.
#[cfg(test)]
pub(super) fn finish_reason_of(reason: &str) -> &'static str {
    finish_reason(reason, false)
}
