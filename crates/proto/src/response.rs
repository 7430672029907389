//! The assembled result, in the shape of OpenAI's non-streaming `chat.completion` response.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A whole completion, as `Completions::collect` assembles it:
/// the same JSON shape as a non-streaming `chat.completion` response.
///
/// ```
/// use choicewise_proto::ChatCompletion;
/// let c = ChatCompletion::default();
/// assert_eq!(c.object, "chat.completion");
/// assert!(serde_json::to_value(&c).unwrap().get("usage").is_none());
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ChatCompletion {
    /// The completion id.
    pub id: String,
    /// Always `"chat.completion"`.
    pub object: String,
    /// Unix time of creation, in seconds.
    pub created: i64,
    /// The model.
    pub model: String,
    /// Backend configuration fingerprint, if sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_fingerprint: Option<String>,
    /// The service tier, if sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_tier: Option<String>,
    /// The choices, sorted by index.
    pub choices: Vec<ChoiceOutput>,
    /// Token usage: the provider's figures when the stream carried them, else an estimate
    /// (see [`Usage::source`](crate::Usage::source)).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<crate::usage::Usage>,
    /// Azure's prompt filter annotations, when sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_filter_results: Option<Value>,
}

impl ChatCompletion {
    /// A completion of these choices; set the other fields as needed.
    ///
    /// ```
    /// use choicewise_proto::{ChatCompletion, ChoiceOutput, Message};
    /// let mut c = ChatCompletion::new(vec![ChoiceOutput::new(0, Message::assistant("Hi"))]);
    /// c.id = "chatcmpl-1".into();
    /// assert_eq!(serde_json::to_value(&c).unwrap()["choices"][0]["message"]["content"], "Hi");
    /// ```
    pub fn new(choices: Vec<ChoiceOutput>) -> Self {
        ChatCompletion {
            choices,
            ..ChatCompletion::default()
        }
    }
}

impl Default for ChatCompletion {
    fn default() -> Self {
        ChatCompletion {
            id: String::new(),
            object: "chat.completion".to_string(),
            created: 0,
            model: String::new(),
            system_fingerprint: None,
            service_tier: None,
            choices: Vec::new(),
            usage: None,
            prompt_filter_results: None,
        }
    }
}

/// One assembled choice: what `Choice::message` returns and what
/// [`ChatCompletion::choices`] holds.
///
/// ```
/// use choicewise_proto::ChoiceOutput;
/// let c = ChoiceOutput::default();
/// assert_eq!(c.message.role, "assistant");
/// assert_eq!(c.finish_reason, None);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ChoiceOutput {
    /// The choice index.
    pub index: u32,
    /// The assembled message.
    pub message: Message,
    /// Why the choice ended, as the provider sent it; `None` if it never said.
    pub finish_reason: Option<String>,
    /// Log probabilities, merged across updates (see [`Logprobs::merged`](crate::Logprobs::merged)), if any were
    /// sent and the stream kept them as text: written verbatim.
    pub logprobs: Option<crate::Logprobs>,
    /// Azure's content filter annotations, the latest sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_filter_results: Option<Value>,
    /// The choice's completion tokens, reported or estimated (flagged), filled by
    /// `Completions::collect` with the usage: the provider's
    /// figure for this choice, or the estimate's when the usage is estimated. `None` when the
    /// provider reported only a total shared by several choices, and from
    /// `Choice::message`, whose choice may finish before its usage
    /// arrives; `Choice::usage` answers in every case.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<crate::usage::ChoiceUsage>,
    /// The provider's own stop reason when `finish_reason` was mapped from another dialect:
    /// Anthropic's `stop_reason` (`end_turn`, `stop_sequence`, `tool_use`, `max_tokens`,
    /// `refusal`, ...), or a Responses stream's status (`completed`, or the reason of an
    /// `incomplete` response, such as `max_output_tokens`). Left out when `None` (Chat
    /// Completions streams).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<String>,
    /// In a fan-out (`FanOut`), where the choice came from: its upstream
    /// and that upstream's own response id and model, which may differ from the
    /// completion's (each request has its own id; a mixed fan-out has several models).
    /// Filled by `Completions::collect`; left out for a
    /// single stream.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<ChoiceSource>,
    /// The choice was cancelled (`Choice::cancel`) before it
    /// finished: the message is what it had received, and `finish_reason` is `None`.
    /// Serialised as `"cancelled": true`, and left out when `false`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cancelled: bool,
}

impl ChoiceOutput {
    /// Whether the choice finished well: not cancelled, its finish reason `stop` or
    /// `tool_calls` (not `length`, `content_filter`, `error`, ...). What every pick counts
    /// as a finished answer.
    ///
    /// ```
    /// use choicewise_proto::{ChoiceOutput, Message};
    /// let mut c = ChoiceOutput::new(0, Message::assistant("Hi"));
    /// assert!(!c.finished_well());
    /// c.finish_reason = Some("stop".into());
    /// assert!(c.finished_well());
    /// c.finish_reason = Some("length".into());
    /// assert!(!c.finished_well());
    /// ```
    pub fn finished_well(&self) -> bool {
        !self.cancelled && matches!(self.finish_reason.as_deref(), Some("stop" | "tool_calls"))
    }

    /// A choice with this index and message; nothing else set (no finish reason yet).
    ///
    /// ```
    /// use choicewise_proto::{ChoiceOutput, Message};
    /// let mut c = ChoiceOutput::new(1, Message::assistant("Hi"));
    /// c.finish_reason = Some("stop".into());
    /// assert_eq!(serde_json::to_value(&c).unwrap()["message"]["content"], "Hi");
    /// ```
    pub fn new(index: u32, message: Message) -> Self {
        ChoiceOutput {
            index,
            message,
            ..ChoiceOutput::default()
        }
    }
}

/// Where a choice of a fan-out came from (see [`ChoiceOutput::source`]).
///
/// ```
/// use choicewise_proto::ChoiceSource;
/// let mut source = ChoiceSource::default();
/// (source.upstream, source.id) = (1, Some("msg_1".into()));
/// let json = serde_json::to_value(&source).unwrap();
/// assert_eq!(json, serde_json::json!({"upstream": 1, "id": "msg_1"}));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ChoiceSource {
    /// The upstream's position among the fan-out's upstreams, in the order they were added.
    pub upstream: usize,
    /// The id of the upstream's response (`chatcmpl-…`, `resp_…`, `msg_…`), if it sent one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// The model the upstream named, if it named one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

/// An assistant message assembled from deltas.
///
/// `content` is `None` when no content was ever sent, and `Some("")` when only empty strings
/// were: the two are kept apart.
///
/// ```
/// use choicewise_proto::Message;
/// let m = Message::default();
/// let json = serde_json::to_value(&m).unwrap();
/// assert_eq!(json, serde_json::json!({"role": "assistant", "content": null, "refusal": null}));
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Message {
    /// The author role, `"assistant"` unless the provider said otherwise.
    pub role: String,
    /// The text content.
    pub content: Option<String>,
    /// The refusal text.
    pub refusal: Option<String>,
    /// Reasoning text, under the key DeepSeek and vLLM use in non-streaming responses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    /// Tool calls, in call order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// The legacy function call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub function_call: Option<FunctionCall>,
}

impl Message {
    /// An assistant message with this text content.
    ///
    /// ```
    /// use choicewise_proto::{Message, ToolCall};
    /// let mut m = Message::assistant("It is sunny.");
    /// m.tool_calls.push(ToolCall::function("call_1", "get_weather", "{}"));
    /// assert_eq!((m.role.as_str(), m.content.as_deref()), ("assistant", Some("It is sunny.")));
    /// ```
    pub fn assistant(content: impl Into<String>) -> Self {
        Message {
            content: Some(content.into()),
            ..Message::default()
        }
    }
}

impl Default for Message {
    fn default() -> Self {
        Message {
            role: "assistant".to_string(),
            content: None,
            refusal: None,
            reasoning_content: None,
            tool_calls: Vec::new(),
            function_call: None,
        }
    }
}

/// One assembled tool call.
///
/// ```
/// use choicewise_proto::ToolCall;
/// let call = ToolCall::function("call_1", "f", "{}");
/// assert_eq!(serde_json::to_value(&call).unwrap()["type"], "function");
/// ```
///
/// A custom tool's call (`kind` `"custom"`, its free-text input kept as
/// `function.arguments`) is written as Chat Completions writes it:
///
/// ```
/// use choicewise_proto::ToolCall;
/// let mut call = ToolCall::function("call_1", "apply_patch", "*** Begin Patch");
/// call.kind = "custom".into();
/// let written = serde_json::to_value(&call).unwrap();
/// assert_eq!(written["custom"]["input"], "*** Begin Patch");
/// assert_eq!(serde_json::from_value::<ToolCall>(written).unwrap(), call);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(from = "WireToolCall")]
#[non_exhaustive]
pub struct ToolCall {
    /// The call id (empty if the provider never sent one).
    pub id: String,
    /// The tool type, `"function"` unless the provider said otherwise (`"custom"`: a custom
    /// tool's call, whose `function.arguments` is its free-text input).
    pub kind: String,
    /// The function called (a custom tool: its name and input).
    pub function: FunctionCall,
}

impl Serialize for ToolCall {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = s.serialize_map(Some(3))?;
        map.serialize_entry("id", &self.id)?;
        map.serialize_entry("type", &self.kind)?;
        match self.kind == "custom" {
            true => map.serialize_entry(
                "custom",
                &CustomCall {
                    name: self.function.name.clone(),
                    input: self.function.arguments.clone(),
                },
            )?,
            false => map.serialize_entry("function", &self.function)?,
        }
        map.end()
    }
}

/// A custom tool's call as Chat Completions writes it: its name and its input.
#[derive(Serialize, Deserialize)]
struct CustomCall {
    name: String,
    input: String,
}

/// A [`ToolCall`] as written: a function's, or a custom tool's.
#[derive(Deserialize)]
struct WireToolCall {
    #[serde(default)]
    id: String,
    #[serde(rename = "type", default)]
    kind: Option<String>,
    #[serde(default)]
    function: Option<FunctionCall>,
    #[serde(default)]
    custom: Option<CustomCall>,
}

impl From<WireToolCall> for ToolCall {
    fn from(w: WireToolCall) -> Self {
        match (w.custom, w.function) {
            (Some(c), None) => ToolCall {
                id: w.id,
                kind: w.kind.unwrap_or_else(|| "custom".into()),
                function: FunctionCall::new(c.name, c.input),
            },
            (_, function) => ToolCall {
                id: w.id,
                kind: w.kind.unwrap_or_else(|| "function".into()),
                function: function.unwrap_or_else(|| FunctionCall::new("", "")),
            },
        }
    }
}

impl ToolCall {
    /// A call of a function tool (`"type": "function"`).
    ///
    /// ```
    /// use choicewise_proto::ToolCall;
    /// let call = ToolCall::function("call_1", "get_weather", r#"{"city":"Paris"}"#);
    /// assert_eq!((call.kind.as_str(), call.function.name.as_str()), ("function", "get_weather"));
    /// ```
    pub fn function(
        id: impl Into<String>,
        name: impl Into<String>,
        arguments: impl Into<String>,
    ) -> Self {
        ToolCall {
            id: id.into(),
            kind: "function".to_string(),
            function: FunctionCall::new(name, arguments),
        }
    }
}

/// A function name and its whole arguments string.
///
/// ```
/// use choicewise_proto::FunctionCall;
/// let f = FunctionCall::new("get_weather", r#"{"city":"Paris"}"#);
/// assert_eq!(f.arguments_json().unwrap()["city"], "Paris");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct FunctionCall {
    /// The function name.
    pub name: String,
    /// The arguments, a JSON document as text (not validated).
    pub arguments: String,
}

impl FunctionCall {
    /// A function call: its name and its arguments as JSON text.
    ///
    /// ```
    /// use choicewise_proto::FunctionCall;
    /// let f = FunctionCall::new("get_weather", r#"{"city":"Paris"}"#);
    /// assert_eq!(f.arguments_json().unwrap()["city"], "Paris");
    /// ```
    pub fn new(name: impl Into<String>, arguments: impl Into<String>) -> Self {
        FunctionCall {
            name: name.into(),
            arguments: arguments.into(),
        }
    }

    /// Parses the arguments.
    ///
    /// ```
    /// use choicewise_proto::FunctionCall;
    /// let f = FunctionCall::new("f", "{\"a\":1}");
    /// assert_eq!(f.arguments_json().unwrap()["a"], 1);
    /// ```
    pub fn arguments_json(&self) -> serde_json::Result<Value> {
        serde_json::from_str(&self.arguments)
    }
}
