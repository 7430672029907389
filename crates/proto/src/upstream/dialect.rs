//! [`Dialect`]'s per-API methods, each its implementation's ([`Dialect::api`]), and its
//! name as text both ways.

use std::fmt;
use std::str::FromStr;

use serde_json::Value;

use crate::api::{Dialect, MessagesError, MessagesText, RequestError};

impl Dialect {
    /// Whether its requests take Anthropic's messages and tools (Anthropic's own, and
    /// Bedrock's Converse, reshaped from them): the translations' shape, their errors
    /// naming this API.
    pub(crate) fn takes_anthropic_shape(self) -> bool {
        matches!(self, Dialect::Anthropic | Dialect::Bedrock)
    }

    /// Its name: `chat`, `responses`, `anthropic`, `gemini` (configuration, flags, labels).
    ///
    /// ```
    /// assert_eq!(choicewise_proto::Dialect::Chat.name(), "chat");
    /// ```
    pub fn name(self) -> &'static str {
        self.api().name()
    }

    /// Its streaming endpoint's path under an API's base URL (`…/v1`, `…/v1beta`); Gemini's
    /// names the model too ([`endpoint_for`](Self::endpoint_for)): `models` is its root.
    ///
    /// ```
    /// assert_eq!(choicewise_proto::Dialect::Anthropic.endpoint(), "messages");
    /// ```
    pub fn endpoint(self) -> &'static str {
        self.api().endpoint()
    }

    /// Whether one request of this API asks for several choices (Chat Completions' `n`,
    /// Gemini's `candidateCount`); the others take one request per choice.
    ///
    /// ```
    /// use choicewise_proto::Dialect;
    /// assert!(Dialect::Gemini.has_n() && Dialect::Chat.has_n());
    /// assert!(!Dialect::Anthropic.has_n() && !Dialect::Responses.has_n());
    /// ```
    pub fn has_n(self) -> bool {
        self.api().has_n()
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
        self.api().endpoint_for(model)
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
    pub fn tools_from_chat_json(self, tools: &[u8]) -> Result<Vec<u8>, RequestError> {
        let mut out = Vec::with_capacity(tools.len());
        self.api().write_tools_from_chat_json(tools, &mut out)?;
        Ok(out)
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
    pub fn write_tools_from_chat_json(
        self,
        tools: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<(), RequestError> {
        self.api().write_tools_from_chat_json(tools, out)
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
        self.api().write_messages_from_chat_json(messages, out)
    }

    /// The request field that holds the conversation in this API's shape: `messages`
    /// (Chat Completions, Anthropic), `input` (Responses) or `contents` (Gemini).
    ///
    /// ```
    /// assert_eq!(choicewise_proto::Dialect::Responses.messages_field(), "input");
    /// ```
    pub fn messages_field(self) -> &'static str {
        self.api().messages_field()
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
    pub fn system_field(self) -> Option<&'static str> {
        self.api().system_field()
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
    ///   `max_completion_tokens`, else [`DEFAULT_ANTHROPIC_MAX_TOKENS`](crate::DEFAULT_ANTHROPIC_MAX_TOKENS)); `stop` becomes
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
    pub fn request_from_chat(self, request: &Value) -> Result<Value, RequestError> {
        let Some(body) = request.as_object() else {
            return Err(RequestError::new("the request body must be a JSON object"));
        };
        self.api().request_from_chat(body)
    }
}

impl fmt::Display for Dialect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Dialect {
    type Err = String;

    /// `chat`, `responses`, `anthropic`, `gemini` or `bedrock`.
    ///
    /// ```
    /// use choicewise_proto::Dialect;
    /// assert!("grpc".parse::<Dialect>().is_err());
    /// ```
    fn from_str(s: &str) -> Result<Self, String> {
        Dialect::ALL
            .into_iter()
            .find(|d| d.name() == s)
            .ok_or_else(|| {
                format!("unknown API {s:?} (chat, responses, anthropic, gemini or bedrock)")
            })
    }
}
