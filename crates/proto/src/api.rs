//! The four API dialects: their names, their endpoints, and a request in Chat Completions'
//! shape in each one's shape.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

pub(crate) mod anthropic;
pub(crate) mod gemini;
pub(crate) mod messages;
pub(crate) mod responses;
pub(crate) mod tools;

/// `max_tokens` sent to the Anthropic API, which requires it, when a request in Chat
/// Completions' shape has none (see [`Dialect::request_from_chat`]).
///
/// 8,192: room for a whole answer of an agent's turn (a file written out, a long plan)
/// rather than a cut one, and the largest output every current Anthropic model accepts
/// (Claude 3.5 Haiku and Sonnet stop there; later models allow more), so that the default
/// never makes a request invalid. A gateway operator gives more per upstream (its
/// `max_tokens` key); a client's own limit always wins.
///
/// ```
/// assert_eq!(choicewise_proto::DEFAULT_ANTHROPIC_MAX_TOKENS, 8192);
/// ```
pub const DEFAULT_ANTHROPIC_MAX_TOKENS: u64 = 8192;

/// What separates a tool call's id from the Gemini thought signature that came with the
/// call, in the id a Gemini upstream's call is given: the signature must go back with the
/// call in the next turn (Gemini 3 refuses a function-calling turn without it), and the id
/// is what a Chat client sends back of a call. The request writer puts it back.
///
/// ```
/// use choicewise_proto::{Dialect, THOUGHT_SIGNATURE_IN_ID};
/// let id = format!("call_0{THOUGHT_SIGNATURE_IN_ID}CiQB");
/// let chat = serde_json::json!({"messages": [{"role": "assistant", "tool_calls": [
///     {"id": id, "type": "function", "function": {"name": "f", "arguments": "{}"}}]}]});
/// let gemini = Dialect::Gemini.request_from_chat(&chat).unwrap();
/// assert_eq!(gemini["contents"][0]["parts"][0]["thoughtSignature"], "CiQB");
/// ```
pub const THOUGHT_SIGNATURE_IN_ID: &str = "__thought__";

/// Why a request could not be written in an upstream API's shape
/// ([`UpstreamApi::request_from_chat`](crate::UpstreamApi::request_from_chat)): the request
/// field at fault, when one is, and why.
///
/// ```
/// use choicewise_proto::Dialect;
/// let e = Dialect::Anthropic.request_from_chat(&serde_json::json!({"messages": [], "seed": 1})).unwrap_err();
/// assert_eq!(e.param(), Some("seed"));
/// assert_eq!(e.to_string(), "the anthropic API has no seed: leave it out for it");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct RequestError {
    param: Option<String>,
    message: String,
}

impl RequestError {
    /// An error of no one field.
    ///
    /// ```
    /// let e = choicewise_proto::RequestError::new("the body must be a JSON object");
    /// assert_eq!((e.param(), e.message()), (None, "the body must be a JSON object"));
    /// ```
    pub fn new(message: impl Into<String>) -> Self {
        RequestError {
            param: None,
            message: message.into(),
        }
    }

    /// An error of the request field `param`.
    ///
    /// ```
    /// let e = choicewise_proto::RequestError::at("tools", "tools[0]: a function needs a name");
    /// assert_eq!(e.param(), Some("tools"));
    /// ```
    pub fn at(param: impl Into<String>, message: impl Into<String>) -> Self {
        RequestError {
            param: Some(param.into()),
            message: message.into(),
        }
    }

    /// The request field at fault (`messages`, `tools`, `seed`, ...), when one is.
    ///
    /// ```
    /// assert_eq!(choicewise_proto::RequestError::new("x").param(), None);
    /// ```
    pub fn param(&self) -> Option<&str> {
        self.param.as_deref()
    }

    /// Why, in words that name the field and the API.
    ///
    /// ```
    /// assert_eq!(choicewise_proto::RequestError::new("why").message(), "why");
    /// ```
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl From<MessagesError> for RequestError {
    fn from(e: MessagesError) -> Self {
        RequestError::at(e.field(), e.to_string())
    }
}

/// Why a Chat Completions `messages` could not be translated into another API's
/// ([`Dialect::messages_from_chat_json`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MessagesError {
    /// `messages` is JSON but not a list: what it is instead (`null`, `a string`, `an
    /// object`, ...).
    #[error("\"messages\" must be an array, not {found}")]
    NotAnArray {
        /// What the value is.
        found: &'static str,
    },
    /// `messages` is not JSON, or one of its messages cannot be translated: why, naming the
    /// message by its index in the client's list.
    #[error("{0}")]
    Invalid(String),
}

impl MessagesError {
    /// The request field at fault: `messages`.
    pub const fn field(&self) -> &'static str {
        "messages"
    }
}

/// An API dialect: what a stream speaks, what an upstream is asked in, what a client sent.
/// The one name of an API across choicewise (configuration files, flags, metrics labels).
///
/// A stream whose dialect is not given is recognised from its first event.
///
/// ```
/// use choicewise_proto::Dialect;
/// assert_eq!("anthropic".parse::<Dialect>(), Ok(Dialect::Anthropic));
/// assert_eq!(Dialect::Responses.to_string(), "responses");
/// assert_eq!(Dialect::Chat.endpoint(), "chat/completions");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum Dialect {
    /// OpenAI Chat Completions and compatible servers: `chat.completion.chunk` events, any
    /// `n` (the default).
    #[default]
    Chat,
    /// The OpenAI Responses API's typed events: one choice.
    Responses,
    /// The Anthropic Messages API's events: one choice.
    Anthropic,
    /// Google's Gemini API (`streamGenerateContent?alt=sse`): each record's `candidates`,
    /// any number of them (`generationConfig.candidateCount` is `n`), by `index`.
    Gemini,
    /// AWS Bedrock's ConverseStream (`/model/{model}/converse-stream`): one choice, its
    /// events in AWS's binary event stream, its requests signed with SigV4.
    Bedrock,
}

impl Dialect {
    /// Every dialect, in the order of their names in messages.
    ///
    /// ```
    /// assert_eq!(choicewise_proto::Dialect::ALL.len(), 5);
    /// ```
    pub const ALL: [Dialect; 5] = [
        Dialect::Chat,
        Dialect::Responses,
        Dialect::Anthropic,
        Dialect::Gemini,
        Dialect::Bedrock,
    ];

    /// The Anthropic `thinking` budget (`budget_tokens`) that stands for a Chat Completions
    /// `reasoning_effort`: `none` thinks not (`Some(None)`); `minimal` and `low` 1,024 (the
    /// API's least), `medium` 2,048, `high` 4,096: the lower bound of each effort the gateway
    /// reads back from a budget. `None` for an effort it does not know.
    ///
    /// ```
    /// use choicewise_proto::Dialect;
    /// assert_eq!(Dialect::thinking_budget("medium"), Some(Some(2048)));
    /// assert_eq!(Dialect::thinking_budget("none"), Some(None));
    /// assert_eq!(Dialect::thinking_budget("extreme"), None);
    /// ```
    pub fn thinking_budget(effort: &str) -> Option<Option<u64>> {
        match effort {
            "none" => Some(None),
            "minimal" | "low" => Some(Some(1024)),
            "medium" => Some(Some(2048)),
            "high" => Some(Some(4096)),
            _ => None,
        }
    }

    /// The Chat Completions `reasoning_effort` that stands for an Anthropic `thinking`
    /// budget: the inverse of [`thinking_budget`](Self::thinking_budget), one table for both
    /// directions (below 2,048 tokens `low`, below 4,096 `medium`, else `high`).
    ///
    /// ```
    /// use choicewise_proto::Dialect;
    /// assert_eq!(Dialect::thinking_effort(3000), "medium");
    /// assert_eq!(Dialect::thinking_budget(Dialect::thinking_effort(5000)), Some(Some(4096)));
    /// ```
    pub fn thinking_effort(budget: u64) -> &'static str {
        match budget {
            ..2048 => "low",
            2048..4096 => "medium",
            _ => "high",
        }
    }
}

/// A Chat Completions request's `messages` in another API's shape, as JSON text
/// ([`Dialect::messages_from_chat_json`]).
///
/// ```
/// use choicewise_proto::Dialect;
/// let text = Dialect::Responses
///     .messages_from_chat_json(br#"[{"role": "user", "content": "hi"}]"#)
///     .unwrap();
/// assert_eq!(text.list, br#"[{"content":"hi","role":"user"}]"#);
/// assert_eq!(text.system, None);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct MessagesText {
    /// The request's field the list goes in: `messages` (Anthropic, Chat Completions),
    /// `input` (Responses) or `contents` (Gemini).
    pub key: &'static str,
    /// The translated list, as JSON text.
    pub list: Vec<u8>,
    /// The field a first system or developer message's content goes in (`system`,
    /// `instructions`) and that content as JSON text; None when the first message is not one
    /// (and for Chat Completions, whose messages stay as they are).
    pub system: Option<(&'static str, Vec<u8>)>,
}

/// The part of [`Dialect::request_from_chat`] that Responses and Anthropic share, for `api`,
/// an API of one choice per request: `n` above 1, `messages` that is not a list, or a field
/// of `unsupported` is an error; every field it does not translate itself passes through but
/// those of `left_out`. What is left to the API's own writer: the fields passed through,
/// the messages, the limit (`max_completion_tokens`, else `max_tokens`) and the
/// `reasoning_effort`.
pub(crate) fn one_choice_request<'a>(
    api: Dialect,
    body: &'a Map<String, Value>,
    unsupported: &[&str],
    left_out: &[&str],
) -> Result<OneChoiceRequest<'a>, RequestError> {
    if body.get("n").and_then(Value::as_u64).is_some_and(|n| n > 1) {
        return Err(RequestError::at(
            "n",
            format!("the {api} API has no n: send one request per choice"),
        ));
    }
    let mut out = Map::new();
    let messages = match body.get("messages") {
        None => &[][..],
        Some(Value::Array(messages)) => messages,
        Some(other) => {
            let found = messages::json_kind(other);
            return Err(MessagesError::NotAnArray { found }.into());
        }
    };
    for unsupported in unsupported {
        if body.get(*unsupported).is_some_and(|v| !v.is_null()) {
            return Err(RequestError::at(
                *unsupported,
                format!("the {api} API has no {unsupported}: leave it out for it"),
            ));
        }
    }
    for (key, value) in body {
        match key.as_str() {
            "n"
            | "stream_options"
            | "messages"
            | "max_tokens"
            | "max_completion_tokens"
            | "stop"
            | "tools"
            | "tool_choice"
            | "reasoning_effort" => {}
            key if left_out.contains(&key) => {}
            _ => {
                out.insert(key.to_string(), value.clone());
            }
        }
    }
    let max_tokens = body
        .get("max_completion_tokens")
        .or_else(|| body.get("max_tokens"))
        .cloned();
    let effort = body.get("reasoning_effort").and_then(Value::as_str);
    Ok((out, (messages, max_tokens, effort)))
}

/// What [`one_choice_request`] leaves to an API's writer: the fields passed through, and
/// the messages, the limit and the effort asked.
pub(crate) type OneChoiceRequest<'a> = (
    Map<String, Value>,
    (&'a [Value], Option<Value>, Option<&'a str>),
);
