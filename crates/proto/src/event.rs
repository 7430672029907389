//! What a choice's sub-streams yield.
//!
//! Text arrives as [`Text`], a shared string: every consumer of the same choice receives the
//! same allocation, so a fan-out to several readers copies no text.

use std::fmt;
use std::sync::Arc;

use serde_json::Value;

/// A piece of text shared by every consumer that receives it.
///
/// ```
/// let piece: choicewise_proto::Text = "Hello".into();
/// assert_eq!(&*piece, "Hello");
/// ```
pub type Text = Arc<str>;

/// One thing that happened to a choice, in arrival order (what `Choice::events` yields).
///
/// ```
/// use choicewise_proto::ChoiceEvent;
/// let event = ChoiceEvent::Content("Hello".into());
/// assert_eq!(event.text(), Some("Hello"));
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ChoiceEvent {
    /// The author role, once, when the choice first names it.
    Role(Text),
    /// Message text.
    Content(Text),
    /// Refusal text.
    Refusal(Text),
    /// Reasoning text (`reasoning_content` or `reasoning` on the wire).
    Reasoning(Text),
    /// Progress of a tool call or of the legacy function call.
    FunctionCall(FunctionCallEvent),
    /// Log probabilities sent with this update, as the provider sent them: their JSON text
    /// ([`LogprobsKept::Raw`](crate::LogprobsKept::Raw), the default).
    Logprobs(crate::Logprobs),
    /// One token's confidence by the stream's measure (see
    /// [`Measure::of`](crate::Measure::of)), in place of [`Logprobs`](Self::Logprobs) when the
    /// stream keeps only those ([`LogprobsKept::Confidence`](crate::LogprobsKept::Confidence));
    /// tokens without what the measure reads have none.
    TokenConfidence(f64),
    /// Content filter annotations sent with this update (Azure).
    ContentFilter(Arc<Value>),
    /// Something about the input that was tolerated but is worth knowing.
    Warning(Warning),
    /// The choice finished, with the provider's reason kept as sent (`stop`, `length`,
    /// `tool_calls`, `content_filter`, `error`, ...). Always the last event of a choice
    /// that finished.
    Finished(Text),
    /// The choice was cancelled (`Choice::cancel`, a pick, a close) before it finished, for
    /// this reason (which says who sent it: [`CancelReason::by`]). Always the last event of
    /// a cancelled choice: its sub-streams end (`None`) right after it, with no error, and
    /// its later updates are dropped.
    ///
    /// [`CancelReason::by`]: crate::driver::CancelReason::by
    Cancelled(crate::driver::CancelReason),
}

impl ChoiceEvent {
    /// The text this event carries, if it is content, refusal or reasoning text.
    ///
    /// ```
    /// use choicewise_proto::ChoiceEvent;
    /// assert_eq!(ChoiceEvent::Reasoning("hm".into()).text(), Some("hm"));
    /// assert_eq!(ChoiceEvent::Finished("stop".into()).text(), None);
    /// ```
    pub fn text(&self) -> Option<&str> {
        match self {
            ChoiceEvent::Content(t) | ChoiceEvent::Refusal(t) | ChoiceEvent::Reasoning(t) => {
                Some(t)
            }
            _ => None,
        }
    }

    /// Whether the choice produces something with this event: a non-empty content delta,
    /// or progress of a tool call (a role, an empty string, reasoning are not). The rule of a
    /// first-token pick.
    ///
    /// ```
    /// use choicewise_proto::ChoiceEvent;
    /// assert!(ChoiceEvent::Content("4".into()).produces());
    /// assert!(!ChoiceEvent::Content("".into()).produces());
    /// assert!(!ChoiceEvent::Reasoning("hm".into()).produces());
    /// ```
    pub fn produces(&self) -> bool {
        match self {
            ChoiceEvent::Content(t) => !t.is_empty(),
            ChoiceEvent::FunctionCall(_) => true,
            _ => false,
        }
    }
}

/// Which function call of a choice an event is about.
///
/// ```
/// use choicewise_proto::{CallKind, CallRef};
/// let call = CallRef { kind: CallKind::Tool, position: 1 };
/// assert_eq!(call.to_string(), "tool call 1");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CallRef {
    /// A tool call or the legacy function call.
    pub kind: CallKind,
    /// The call's position among the choice's tool calls, in the order of the message's
    /// `tool_calls` (0 for the legacy function call).
    pub position: u32,
}

impl fmt::Display for CallRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            CallKind::Tool => write!(f, "tool call {}", self.position),
            CallKind::Function => f.write_str("function call"),
        }
    }
}

/// The two ways a model calls functions.
///
/// ```
/// use choicewise_proto::CallKind;
/// assert_ne!(CallKind::Tool, CallKind::Function);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CallKind {
    /// An entry of `tool_calls`.
    Tool,
    /// The legacy single `function_call`.
    Function,
}

/// Progress of one function call (what `Choice::function_calls` yields).
///
/// A call is `Started` once, then receives `Arguments` fragments, then is `Finished` exactly
/// once: when the next call of the choice starts, or when the choice finishes. It is never
/// finished merely because its arguments happen to parse as JSON.
///
/// ```
/// use choicewise_proto::{CallKind, CallRef, FunctionCallEvent};
/// let call = CallRef { kind: CallKind::Tool, position: 0 };
/// let e = FunctionCallEvent::Arguments { call, fragment: "{\"a\"".into() };
/// assert_eq!(e.call(), call);
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum FunctionCallEvent {
    /// A new call, with the id and name known at its first fragment.
    Started {
        /// Which call.
        call: CallRef,
        /// The tool call id (`None` for the legacy function call or if the provider sent none).
        id: Option<Text>,
        /// The function name (`None` only if the provider has not sent it yet).
        name: Option<Text>,
        /// A custom tool's call (`"type": "custom"`): its arguments are the tool's free-text
        /// input, not JSON.
        custom: bool,
    },
    /// A fragment of the call's JSON arguments.
    Arguments {
        /// Which call.
        call: CallRef,
        /// The text appended to the arguments.
        fragment: Text,
    },
    /// The call is complete.
    Finished {
        /// Which call.
        call: CallRef,
        /// The call id, if any.
        id: Option<Text>,
        /// The function name, if any.
        name: Option<Text>,
        /// The whole arguments string, as the provider sent it.
        arguments: Text,
        /// The arguments checked as one JSON value and kept as text (no tree is built until
        /// one is asked for), or why they are not valid JSON (with the byte offset).
        value: Result<JsonArguments, ArgumentsError>,
        /// The arguments were valid only after escaping raw control characters inside
        /// strings (a raw newline, say); `value` is the repaired text.
        repaired: bool,
    },
}

impl FunctionCallEvent {
    /// The call this event is about.
    ///
    /// ```
    /// use choicewise_proto::{CallKind, CallRef, FunctionCallEvent};
    /// let call = CallRef { kind: CallKind::Function, position: 0 };
    /// let e = FunctionCallEvent::Started { call, id: None, name: Some("f".into()), custom: false };
    /// assert_eq!(e.call().kind, CallKind::Function);
    /// ```
    pub fn call(&self) -> CallRef {
        match self {
            FunctionCallEvent::Started { call, .. }
            | FunctionCallEvent::Arguments { call, .. }
            | FunctionCallEvent::Finished { call, .. } => *call,
        }
    }
}

/// A tolerated irregularity in the input, with where it happened.
///
/// ```
/// use choicewise_proto::{Demux, WarningKind};
/// let sse = concat!(
///     "data: {\"choices\":[{\"index\":1,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n",
///     "data: {\"choices\":[{\"index\":1,\"delta\":{\"content\":\"late\"}}]}\n\n",
///     "data: [DONE]\n\n",
/// );
/// let mut demux = Demux::new();
/// demux.feed(sse.as_bytes()).unwrap();
/// demux.finish().unwrap();
/// let w = &demux.warnings()[0];
/// assert_eq!((w.choice, w.line, &w.kind), (Some(1), 3, &WarningKind::DataAfterFinish));
/// assert_eq!(w.to_string(), "choice 1, line 3: data for the choice after its finish (kept)");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Warning {
    /// The choice concerned, if the warning is about one.
    pub choice: Option<u32>,
    /// The SSE line of the event that caused it (0 for parsed-chunk input: the chunk's
    /// 1-based position in the input stream there).
    pub line: u64,
    /// What happened.
    pub kind: WarningKind,
}

/// The kinds of [`Warning`].
///
/// ```
/// use choicewise_proto::WarningKind;
/// let k = WarningKind::ConcatenatedObjects { count: 2 };
/// assert_eq!(k.to_string(), "2 JSON objects on one data line (all applied)");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum WarningKind {
    /// Data arrived for a choice after its `finish_reason`; it was applied to the message.
    DataAfterFinish,
    /// Data arrived for a choice after its `finish_reason`; it was left out, the message
    /// staying as it was at its finish
    /// ([`StreamConfig::drop_after_finish`](crate::StreamConfig::drop_after_finish)).
    DataAfterFinishDropped,
    /// A second `finish_reason` arrived; the first is kept as the finish reason. (Values
    /// longer than 80 characters are quoted cut, with their length.)
    SecondFinish {
        /// The finish reason in force.
        kept: String,
        /// The later one.
        ignored: String,
    },
    /// Function-call `arguments` arrived as a JSON value instead of a string; its compact
    /// serialisation was appended.
    ArgumentsNotString,
    /// A set-once field (role, call id, type, name) was sent again with another value; the
    /// first value is kept. (Values longer than 80 characters are quoted cut, with their
    /// length.)
    ConflictingValue {
        /// The field, e.g. `tool_calls[1].id`.
        field: String,
        /// The value in force.
        kept: String,
        /// The value that was ignored.
        ignored: String,
    },
    /// An argument fragment arrived for a call that had already finished (a later call had
    /// started); it was appended to that call's arguments.
    FragmentAfterCallEnd {
        /// The call.
        call: CallRef,
    },
    /// An argument fragment arrived after its choice's `finish_reason`, while the call's
    /// arguments were still an incomplete JSON value: the call (and the choice's finish) had
    /// been kept open for it, and it was appended.
    FinishBeforeArguments {
        /// The call.
        call: CallRef,
    },
    /// Events were written one `data:` line each without the blank line between them; each
    /// line that was a complete JSON object (or `[DONE]`) was applied as an event (the SSE
    /// framer's tolerant mode). Given once per stream, at the first such event.
    EventsWithoutBlankLines,
    /// One `data:` line held several JSON chunks; all were applied in order.
    ConcatenatedObjects {
        /// How many.
        count: usize,
    },
    /// Bytes followed `data: [DONE]` in the same read; they were not interpreted.
    DataAfterDone {
        /// How many bytes.
        bytes: usize,
    },
    /// Updates for a choice after it had failed were ignored: the choice's error had already
    /// ended its sub-streams. `line` is the first one's.
    IgnoredAfterFailure {
        /// How many updates were ignored.
        updates: u64,
    },
    /// An event type the stream's dialect does not define: skipped.
    UnknownEvent {
        /// Its `type`.
        kind: String,
    },
    /// Several usage-only chunks (`choices: []`) that are not one per choice (as llama.cpp
    /// sends them): repeated totals or something else. None is added to another; the one with
    /// the most completion tokens is the reported usage (see `docs/usage.md`).
    UsageAmbiguous {
        /// How many usage-only chunks had arrived when it became ambiguous.
        chunks: usize,
    },
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(choice) = self.choice {
            write!(f, "choice {choice}, ")?;
        }
        write!(f, "line {}: {}", self.line, self.kind)
    }
}

impl fmt::Display for WarningKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WarningKind::DataAfterFinish => {
                f.write_str("data for the choice after its finish (kept)")
            }
            WarningKind::DataAfterFinishDropped => {
                f.write_str("data for the choice after its finish (dropped)")
            }
            WarningKind::SecondFinish { kept, ignored } => {
                write!(
                    f,
                    "second finish_reason {ignored:?} after {kept:?} (first kept)"
                )
            }
            WarningKind::ArgumentsNotString => {
                f.write_str("function arguments sent as a JSON value, not a string (serialised)")
            }
            WarningKind::ConflictingValue {
                field,
                kept,
                ignored,
            } => {
                write!(f, "{field} sent as {ignored:?} after {kept:?} (first kept)")
            }
            WarningKind::FragmentAfterCallEnd { call } => {
                write!(f, "argument fragment for {call} after it ended (appended)")
            }
            WarningKind::FinishBeforeArguments { call } => write!(
                f,
                "argument fragment for {call} after the choice's finish_reason (the call was kept open for it)"
            ),
            WarningKind::EventsWithoutBlankLines => f.write_str(
                "events without the blank line between them (each complete JSON data line applied as an event)",
            ),
            WarningKind::ConcatenatedObjects { count } => {
                write!(f, "{count} JSON objects on one data line (all applied)")
            }
            WarningKind::DataAfterDone { bytes } => {
                write!(f, "{bytes} bytes after [DONE] (ignored)")
            }
            WarningKind::IgnoredAfterFailure { updates } => {
                write!(
                    f,
                    "{updates} update{} for the choice after it failed (ignored)",
                    if *updates == 1 { "" } else { "s" }
                )
            }
            WarningKind::UnknownEvent { kind } => {
                write!(f, "unknown event type {kind:?} (skipped)")
            }
            WarningKind::UsageAmbiguous { chunks } => write!(
                f,
                "{chunks} usage-only chunks, not one per choice (none added up; the largest is the usage)"
            ),
        }
    }
}

/// Why a call's complete arguments are not valid JSON, with the byte offset of the problem.
/// The raw arguments string stays available in the event and the message.
///
/// ```
/// use choicewise_proto::ArgumentsError;
/// let e = ArgumentsError { offset: Some(7), message: "unexpected '}' at byte 7".into() };
/// assert_eq!(e.to_string(), "invalid arguments: unexpected '}' at byte 7");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid arguments: {message}")]
pub struct ArgumentsError {
    /// Byte offset of the problem in the arguments string, when known.
    pub offset: Option<u64>,
    /// What is wrong.
    pub message: String,
}

/// A call's complete arguments, checked to be one JSON value and kept as their text: no JSON
/// tree is built unless one is asked for ([`to_value`](Self::to_value)), since a tree costs
/// 20 to 50 times the text's bytes. [`deserialize`](Self::deserialize) reads a typed value
/// straight from the text.
///
/// ```
/// use choicewise_proto::JsonArguments;
/// let args = JsonArguments::parse(r#"{"city": "Paris", "days": 3}"#).unwrap();
/// assert_eq!(args.as_str(), r#"{"city": "Paris", "days": 3}"#);
/// #[derive(serde::Deserialize)]
/// struct Trip { city: String, days: u32 }
/// let trip: Trip = args.deserialize().unwrap();
/// assert_eq!((trip.city.as_str(), trip.days), ("Paris", 3));
/// assert_eq!(args.to_value()["days"], 3);
/// assert!(JsonArguments::parse("{\"cut\": ").is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsonArguments(Text);

impl JsonArguments {
    /// `text` as arguments, once checked to be one JSON value (whitespace around it allowed)
    /// by serde_json without building a tree; else serde_json's error.
    ///
    /// ```
    /// assert!(choicewise_proto::JsonArguments::parse(" [1, 2] ").is_ok());
    /// assert!(choicewise_proto::JsonArguments::parse("[1, 2] 3").is_err());
    /// ```
    pub fn parse(text: &str) -> Result<Self, serde_json::Error> {
        Self::check(text)?;
        Ok(JsonArguments(Text::from(text)))
    }

    /// Checks `text` as one JSON value, no tree built.
    pub(crate) fn check(text: &str) -> Result<(), serde_json::Error> {
        serde_json::from_str::<serde::de::IgnoredAny>(text).map(|_| ())
    }

    /// Text already checked (by [`check`](Self::check), or by the incremental parser).
    pub(crate) fn checked(text: Text) -> Self {
        JsonArguments(text)
    }

    /// The arguments' JSON text: as the provider sent it, or repaired (see
    /// [`FunctionCallEvent::Finished`]'s `repaired`).
    ///
    /// ```
    /// assert_eq!(choicewise_proto::JsonArguments::parse("{}").unwrap().as_str(), "{}");
    /// ```
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// A typed value read straight from the text (serde_json's parser, no tree between).
    ///
    /// ```
    /// let args = choicewise_proto::JsonArguments::parse("[1, 2, 3]").unwrap();
    /// assert_eq!(args.deserialize::<Vec<u8>>().unwrap(), [1, 2, 3]);
    /// ```
    pub fn deserialize<T: serde::de::DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_str(&self.0)
    }

    /// The arguments as a JSON tree. It costs 20 to 50 times the text's bytes: read a typed
    /// value ([`deserialize`](Self::deserialize)) or the text where that will do. A value
    /// nested deeper than serde_json's limit (128) is read by the incremental parser (up to
    /// its own limit, `choicewise_partial_json::DEFAULT_MAX_DEPTH`); past both, `null`.
    ///
    /// ```
    /// let args = choicewise_proto::JsonArguments::parse(r#"{"a": [true]}"#).unwrap();
    /// assert_eq!(args.to_value(), serde_json::json!({"a": [true]}));
    /// ```
    pub fn to_value(&self) -> Value {
        serde_json::from_str(&self.0).unwrap_or_else(|_| {
            let mut parser = choicewise_partial_json::PartialJson::new();
            (parser.push(&self.0).and_then(|()| parser.finish())).unwrap_or(Value::Null)
        })
    }
}

impl fmt::Display for JsonArguments {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}
