//! The four API dialects: their names, their endpoints, and a request in Chat Completions'
//! shape in each one's shape.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

mod gemini;
mod messages;
mod tools;

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
}

impl Dialect {
    /// Every dialect, in the order of their names in messages.
    ///
    /// ```
    /// assert_eq!(choicewise_proto::Dialect::ALL.len(), 4);
    /// ```
    pub const ALL: [Dialect; 4] = [
        Dialect::Chat,
        Dialect::Responses,
        Dialect::Anthropic,
        Dialect::Gemini,
    ];

    /// Its name: `chat`, `responses`, `anthropic`, `gemini` (configuration, flags, labels).
    ///
    /// ```
    /// assert_eq!(choicewise_proto::Dialect::Chat.name(), "chat");
    /// ```
    pub const fn name(self) -> &'static str {
        match self {
            Dialect::Chat => "chat",
            Dialect::Responses => "responses",
            Dialect::Anthropic => "anthropic",
            Dialect::Gemini => "gemini",
        }
    }

    /// Its streaming endpoint's path under an API's base URL (`…/v1`, `…/v1beta`); Gemini's
    /// names the model too ([`endpoint_for`](Self::endpoint_for)): `models` is its root.
    ///
    /// ```
    /// assert_eq!(choicewise_proto::Dialect::Anthropic.endpoint(), "messages");
    /// ```
    pub const fn endpoint(self) -> &'static str {
        match self {
            Dialect::Chat => "chat/completions",
            Dialect::Responses => "responses",
            Dialect::Anthropic => "messages",
            Dialect::Gemini => "models",
        }
    }

    /// Whether one request of this API asks for several choices (Chat Completions' `n`,
    /// Gemini's `candidateCount`); the others take one request per choice.
    ///
    /// ```
    /// use choicewise_proto::Dialect;
    /// assert!(Dialect::Gemini.has_n() && Dialect::Chat.has_n());
    /// assert!(!Dialect::Anthropic.has_n() && !Dialect::Responses.has_n());
    /// ```
    pub const fn has_n(self) -> bool {
        matches!(self, Dialect::Chat | Dialect::Gemini)
    }

    /// Its streaming endpoint's path for `model`: [`endpoint`](Self::endpoint), but for
    /// Gemini, whose path names the model and the method
    /// (`models/{model}:streamGenerateContent`, asked with `?alt=sse`).
    ///
    /// ```
    /// use choicewise_proto::Dialect;
    /// assert_eq!(Dialect::Gemini.endpoint_for("gemini-2.5-flash"),
    ///     "models/gemini-2.5-flash:streamGenerateContent");
    /// assert_eq!(Dialect::Chat.endpoint_for("gpt-4o"), "chat/completions");
    /// ```
    pub fn endpoint_for(self, model: &str) -> String {
        match self {
            Dialect::Gemini => format!("models/{model}:streamGenerateContent"),
            other => other.endpoint().to_string(),
        }
    }

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

    /// A Chat Completions request's `tools`, given as their JSON text, in this API's shape
    /// as [`request_from_chat`](Self::request_from_chat) writes them, as JSON text: each tool
    /// is read on its own and its schema copied as sent, so that a request of many tools
    /// never exists as a parsed tree (the text is returned as it is for Chat Completions).
    ///
    /// ```
    /// use choicewise_proto::Dialect;
    /// let tools = br#"[{"type": "function", "function": {"name": "w", "parameters": {"type": "object"}}}]"#;
    /// let anthropic = Dialect::Anthropic.tools_from_chat_json(tools).unwrap();
    /// assert_eq!(anthropic, br#"[{"input_schema":{"type": "object"},"name":"w"}]"#);
    /// ```
    ///
    /// # Errors
    ///
    /// As `request_from_chat` for its `tools`: not a list, a tool that is not a function, a
    /// function without a name.
    pub fn tools_from_chat_json(self, tools: &[u8]) -> Result<Vec<u8>, String> {
        match self {
            Dialect::Chat => Ok(tools.to_vec()),
            Dialect::Gemini => gemini::tools_text(tools),
            api => tools::tools_text(tools, api == Dialect::Anthropic),
        }
    }

    /// [`tools_from_chat_json`](Self::tools_from_chat_json) written at the end of `out` (a
    /// request's body written around its tools holds them once, not also in a list of their
    /// own); on an error, `out` holds part of the list.
    ///
    /// ```
    /// use choicewise_proto::Dialect;
    /// let tools = br#"[{"type": "function", "function": {"name": "w", "parameters": {"type": "object"}}}]"#;
    /// let mut body = br#"{"tools":"#.to_vec();
    /// Dialect::Responses.write_tools_from_chat_json(tools, &mut body).unwrap();
    /// assert_eq!(body, br#"{"tools":[{"name":"w","parameters":{"type": "object"},"type":"function"}]"#);
    /// ```
    ///
    /// # Errors
    ///
    /// As [`tools_from_chat_json`](Self::tools_from_chat_json).
    pub fn write_tools_from_chat_json(self, tools: &[u8], out: &mut Vec<u8>) -> Result<(), String> {
        match self {
            Dialect::Chat => {
                out.extend_from_slice(tools);
                Ok(())
            }
            Dialect::Gemini => gemini::write_tools_text(tools, out),
            api => tools::write_tools_text(tools, api == Dialect::Anthropic, out),
        }
    }

    /// A Chat Completions request's `messages`, given as their JSON text, in this API's shape
    /// as [`request_from_chat`](Self::request_from_chat) writes them, as JSON text: the
    /// translated list and, when the first message is a system or developer one, its content
    /// (Anthropic's `system`, Responses' `instructions`). Each message is parsed, translated
    /// and written on its own as the list is read, so that a request of many messages never
    /// exists as a parsed tree: its memory is the text written and the largest message
    /// (the text is returned as it is for Chat Completions).
    ///
    /// ```
    /// use choicewise_proto::Dialect;
    /// let messages = br#"[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"},
    ///     {"role": "tool", "tool_call_id": "a", "content": "1"}, {"role": "tool", "tool_call_id": "b", "content": "2"}]"#;
    /// let anthropic = Dialect::Anthropic.messages_from_chat_json(messages).unwrap();
    /// assert_eq!(anthropic.key, "messages");
    /// assert_eq!(anthropic.system, Some(("system", br#""Be brief.""#.to_vec())));
    /// let list: serde_json::Value = serde_json::from_slice(&anthropic.list).unwrap();
    /// assert_eq!(list[1]["content"].as_array().unwrap().len(), 2, "the two results are one turn");
    ///
    /// let responses = Dialect::Responses.messages_from_chat_json(messages).unwrap();
    /// assert_eq!(responses.key, "input");
    /// assert_eq!(responses.system.unwrap().0, "instructions");
    /// let input: serde_json::Value = serde_json::from_slice(&responses.list).unwrap();
    /// assert_eq!(input[2]["type"], "function_call_output");
    /// ```
    ///
    /// # Errors
    ///
    /// As `request_from_chat` for its `messages` ([`MessagesError`], whose
    /// [`field`](MessagesError::field) is `messages`): JSON that is not a list
    /// ([`MessagesError::NotAnArray`]), as `request_from_chat` refuses it; a message of an
    /// unknown role, a tool call whose `arguments` are not JSON, an image without a URL, text
    /// that is not JSON (`"messages" could not be read: ...`) ([`MessagesError::Invalid`]).
    ///
    /// ```
    /// use choicewise_proto::{Dialect, MessagesError};
    /// let e = Dialect::Anthropic.messages_from_chat_json(br#""hi""#).unwrap_err();
    /// assert_eq!(e, MessagesError::NotAnArray { found: "a string" });
    /// assert_eq!((e.field(), e.to_string().as_str()), ("messages", "\"messages\" must be an array, not a string"));
    /// ```
    pub fn messages_from_chat_json(self, messages: &[u8]) -> Result<MessagesText, MessagesError> {
        let mut list = Vec::with_capacity(messages.len().saturating_add(messages.len() / 8));
        let system = self.write_messages_from_chat_json(messages, &mut list)?;
        Ok(MessagesText {
            key: self.messages_field(),
            list,
            system: (self.system_field()).and_then(|key| Some((key, system?))),
        })
    }

    /// [`messages_from_chat_json`](Self::messages_from_chat_json) written at the end of
    /// `out` (the list's text; `out` grows by an eighth at a time when it has no room left,
    /// so that a body written around the list is allocated about once): the first system
    /// or developer message's content as JSON text, for [`system_field`](Self::system_field).
    ///
    /// ```
    /// use choicewise_proto::Dialect;
    /// let mut body = br#"{"messages":"#.to_vec();
    /// let system = Dialect::Anthropic
    ///     .write_messages_from_chat_json(br#"[{"role": "developer", "content": "Be brief."}]"#, &mut body)
    ///     .unwrap();
    /// assert_eq!(body, br#"{"messages":[]"#);
    /// assert_eq!(system.unwrap(), br#""Be brief.""#);
    /// ```
    ///
    /// # Errors
    ///
    /// As [`messages_from_chat_json`](Self::messages_from_chat_json); `out` then holds part
    /// of the list.
    pub fn write_messages_from_chat_json(
        self,
        messages: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<Option<Vec<u8>>, MessagesError> {
        match self {
            Dialect::Chat => {
                out.extend_from_slice(messages);
                Ok(None)
            }
            Dialect::Gemini => gemini::write_contents(messages, out),
            api => messages::write_messages(api, messages, out),
        }
    }

    /// The request field that holds the conversation in this API's shape: `messages`
    /// (Chat Completions, Anthropic), `input` (Responses) or `contents` (Gemini).
    ///
    /// ```
    /// assert_eq!(choicewise_proto::Dialect::Responses.messages_field(), "input");
    /// ```
    pub const fn messages_field(self) -> &'static str {
        match self {
            Dialect::Responses => "input",
            Dialect::Gemini => "contents",
            _ => "messages",
        }
    }

    /// The request field a first system message's content goes in, translated from Chat
    /// Completions: `system` (Anthropic), `instructions` (Responses), `systemInstruction`
    /// (Gemini, every system message's text a part of it); None for Chat
    /// Completions, whose system message stays a message.
    ///
    /// ```
    /// use choicewise_proto::Dialect;
    /// assert_eq!(Dialect::Anthropic.system_field(), Some("system"));
    /// assert_eq!(Dialect::Chat.system_field(), None);
    /// ```
    pub const fn system_field(self) -> Option<&'static str> {
        match self {
            Dialect::Chat => None,
            Dialect::Responses => Some("instructions"),
            Dialect::Anthropic => Some("system"),
            Dialect::Gemini => Some("systemInstruction"),
        }
    }

    /// A request in Chat Completions' shape (`messages`, `max_tokens`, ...) in this dialect's
    /// shape (Chat: unchanged):
    ///
    /// - Responses: a first system or developer message becomes `instructions`, the others
    ///   `input` items (an assistant's `tool_calls` as `function_call` items, a `tool`
    ///   message as a `function_call_output`, images as `input_image`); `tools` and
    ///   `tool_choice` in its flat shape; `max_tokens` / `max_completion_tokens` become
    ///   `max_output_tokens`; `reasoning_effort` becomes `reasoning: {"effort": ...}` (a
    ///   `reasoning` object the request already carries, a Responses client's own, wins); it
    ///   has no `stop` and no `seed` (an error names them).
    /// - Anthropic: a first system or developer message becomes `system`, a later one a
    ///   `system` turn at its place (as Anthropic's API takes it); an assistant's
    ///   `tool_calls` become `tool_use` blocks, `tool` messages `tool_result` blocks of a
    ///   user turn, images image blocks; `tools` get an `input_schema`, `tool_choice` and
    ///   `parallel_tool_calls` become its `tool_choice`; `max_tokens` is required (from
    ///   `max_completion_tokens`, else [`DEFAULT_ANTHROPIC_MAX_TOKENS`]); `stop` becomes
    ///   `stop_sequences` (a string, a list); `reasoning_effort` becomes `thinking` with a
    ///   budget ([`thinking_budget`](Self::thinking_budget); without `max_tokens`, the answer
    ///   keeps the default room above it; a `thinking` object the request already carries,
    ///   an Anthropic client's own, wins); it has no `seed`; OpenAI's `prompt_cache_key`,
    ///   `user`, `safety_identifier` and `service_tier` are left out.
    ///
    /// - Gemini: every system or developer message's text becomes a part of
    ///   `systemInstruction`, the others `contents` of `user` and `model` turns (an
    ///   assistant's `tool_calls` as `functionCall` parts, its arguments parsed into `args`;
    ///   consecutive `tool` messages one `user` turn of `functionResponse` parts, each named
    ///   by its call's function, a result that is not a JSON object as `{"result": TEXT}`;
    ///   images as `inlineData` or `fileData`); `tools` become one tool of
    ///   `functionDeclarations` (the schema as `parametersJsonSchema`), `tool_choice`
    ///   `toolConfig.functionCallingConfig`; `n`, `temperature`, `top_p`, `max_tokens` /
    ///   `max_completion_tokens`, `stop`, `seed`, `presence_penalty`, `frequency_penalty`,
    ///   `response_format` and `reasoning_effort` go in `generationConfig` (`candidateCount`,
    ///   `temperature`, `topP`, `maxOutputTokens`, `stopSequences`, ..., `thinkingConfig` with
    ///   the budget of [`thinking_budget`](Self::thinking_budget) and its thoughts included);
    ///   `model`, `stream` and OpenAI's own fields are left out (the model is in the URL);
    ///   any other field is an error naming it.
    ///
    /// Responses and Anthropic have no `n` (more than one choice is one request per choice);
    /// none has `stream_options` (each reports usage in the stream anyway).
    ///
    /// `messages` that is not a list is an error ([`MessagesError::NotAnArray`]'s text), as
    /// a message either cannot translate.
    ///
    /// ```
    /// use choicewise_proto::Dialect;
    /// let chat = serde_json::json!({"model": "m", "max_tokens": 50,
    ///     "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]});
    /// let anthropic = Dialect::Anthropic.request_from_chat(&chat).unwrap();
    /// assert_eq!(anthropic["system"], "Be brief.");
    /// assert_eq!(anthropic["max_tokens"], 50);
    ///
    /// let turn = serde_json::json!({"model": "m", "messages": [
    ///     {"role": "user", "content": "Weather in Paris?"},
    ///     {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
    ///         "function": {"name": "weather", "arguments": "{\"city\":\"Paris\"}"}}]},
    ///     {"role": "tool", "tool_call_id": "call_1", "content": "18C"}],
    ///     "tools": [{"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}}]});
    /// let anthropic = Dialect::Anthropic.request_from_chat(&turn).unwrap();
    /// assert_eq!(anthropic["messages"][1]["content"][0]["input"]["city"], "Paris");
    /// assert_eq!(anthropic["messages"][2]["content"][0]["tool_use_id"], "call_1");
    /// assert_eq!(anthropic["tools"][0]["input_schema"]["type"], "object");
    /// let responses = Dialect::Responses.request_from_chat(&turn).unwrap();
    /// assert_eq!(responses["input"][1]["type"], "function_call");
    /// assert_eq!(responses["input"][2]["output"], "18C");
    /// assert_eq!(responses["tools"][0]["name"], "weather");
    /// ```
    pub fn request_from_chat(self, request: &Value) -> Result<Value, String> {
        let api = self;
        let Some(body) = request.as_object() else {
            return Err("the request body must be a JSON object".into());
        };
        if api == Dialect::Chat {
            return Ok(request.clone());
        }
        if api == Dialect::Gemini {
            return gemini::request(body);
        }
        if body.get("n").and_then(Value::as_u64).is_some_and(|n| n > 1) {
            return Err(format!(
                "the {} API has no n: send one request per choice",
                api
            ));
        }
        let mut out = Map::new();
        let messages = match body.get("messages") {
            None => &[][..],
            Some(Value::Array(messages)) => messages,
            Some(other) => {
                let found = messages::json_kind(other);
                return Err(MessagesError::NotAnArray { found }.to_string());
            }
        };
        let read = |each: &mut dyn FnMut(usize, Value) -> Result<(), String>| {
            (messages.iter().enumerate()).try_for_each(|(i, m)| each(i, m.clone()))
        };
        for unsupported in ["seed", "stop"] {
            let missing = match api {
                Dialect::Responses => true,
                _ => unsupported == "seed",
            };
            if missing && body.get(unsupported).is_some_and(|v| !v.is_null()) {
                return Err(format!(
                    "the {} API has no {unsupported}: leave it out for it",
                    api
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
                "parallel_tool_calls" if api == Dialect::Anthropic => {}
                // OpenAI's own request fields (Codex CLI sends `prompt_cache_key`), which the
                // Anthropic API refuses as unknown: left out for it.
                "prompt_cache_key" | "user" | "safety_identifier" | "service_tier"
                    if api == Dialect::Anthropic => {}
                _ => {
                    out.insert(key.clone(), value.clone());
                }
            }
        }
        let max_tokens = body
            .get("max_completion_tokens")
            .or_else(|| body.get("max_tokens"))
            .cloned();
        let effort = body.get("reasoning_effort").and_then(Value::as_str);
        match api {
            Dialect::Responses => {
                let mut input = Vec::with_capacity(messages.len());
                let system = messages::translate(api, read, &mut input)?;
                out.insert("input".into(), Value::Array(input));
                if let Some(list) = body.get("tools").filter(|t| !t.is_null()) {
                    out.insert("tools".into(), tools::tools(list, false)?);
                }
                if let Some(choice) = body.get("tool_choice").filter(|c| !c.is_null()) {
                    out.insert("tool_choice".into(), tools::responses_tool_choice(choice)?);
                }
                if let Some(system) = system {
                    out.insert("instructions".into(), system);
                }
                if let Some(max) = max_tokens {
                    out.insert("max_output_tokens".into(), max);
                }
                if let Some(effort) = effort
                    && !out.contains_key("reasoning")
                {
                    out.insert("reasoning".into(), json!({ "effort": effort }));
                }
            }
            Dialect::Anthropic => {
                let mut turns = Vec::with_capacity(messages.len());
                let system = messages::translate(api, read, &mut turns)?;
                out.insert("messages".into(), Value::Array(turns));
                if let Some(list) = body.get("tools").filter(|t| !t.is_null()) {
                    out.insert("tools".into(), tools::tools(list, true)?);
                }
                let choice = tools::anthropic_tool_choice(
                    body.get("tool_choice"),
                    body.get("parallel_tool_calls"),
                )?;
                if let Some(choice) = choice {
                    out.insert("tool_choice".into(), choice);
                }
                if let Some(system) = system {
                    out.insert("system".into(), system);
                }
                let budget = match effort {
                    Some(effort) if !out.contains_key("thinking") => {
                        Dialect::thinking_budget(effort).ok_or_else(|| {
                            format!(
                                "reasoning_effort {effort:?} has no thinking budget in the {api} \
                                 API: use none, minimal, low, medium or high"
                            )
                        })?
                    }
                    _ => None,
                };
                let max = match (&max_tokens, budget) {
                    (Some(max), Some(budget)) if max.as_u64().is_some_and(|m| m <= budget) => {
                        return Err(format!(
                            "the {api} API thinks within max_tokens: reasoning_effort {:?} \
                             (budget_tokens {budget}) needs max_tokens above {budget}, not {max}",
                            effort.unwrap_or_default()
                        ));
                    }
                    (Some(max), _) => max.clone(),
                    (None, Some(budget)) => json!(budget + DEFAULT_ANTHROPIC_MAX_TOKENS),
                    (None, None) => json!(DEFAULT_ANTHROPIC_MAX_TOKENS),
                };
                out.insert("max_tokens".into(), max);
                if let Some(budget) = budget {
                    out.insert(
                        "thinking".into(),
                        json!({"type": "enabled", "budget_tokens": budget}),
                    );
                }
                match body.get("stop") {
                    Some(Value::String(one)) => {
                        out.insert("stop_sequences".into(), json!([one]));
                    }
                    Some(Value::Array(many)) => {
                        out.insert("stop_sequences".into(), Value::Array(many.clone()));
                    }
                    _ => {}
                }
            }
            Dialect::Chat | Dialect::Gemini => {}
        }
        Ok(Value::Object(out))
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

impl fmt::Display for Dialect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Dialect {
    type Err = String;

    /// `chat`, `responses`, `anthropic` or `gemini`.
    ///
    /// ```
    /// use choicewise_proto::Dialect;
    /// assert!("grpc".parse::<Dialect>().is_err());
    /// ```
    fn from_str(s: &str) -> Result<Self, String> {
        Dialect::ALL
            .into_iter()
            .find(|d| d.name() == s)
            .ok_or_else(|| format!("unknown API {s:?} (chat, responses, anthropic or gemini)"))
    }
}
