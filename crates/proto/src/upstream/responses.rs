//! The OpenAI Responses API: one choice per request; its writer `api/responses.rs` (with
//! the messages and tools of `api/messages.rs` and `api/tools.rs`), its reader
//! `dialect/responses.rs`.

use serde_json::{Map, Value};

use super::{ReadsEvents, RequestWriting, UpstreamApi, sealed};
use crate::api::{self, Dialect, MessagesError, RequestError, messages, tools};
use crate::dialect::ResponsesEvents;

/// The Responses API as an upstream API ([`Dialect::Responses`]).
#[derive(Debug)]
pub(crate) struct Responses;

impl sealed::Sealed for Responses {}

impl ReadsEvents for Responses {
    type Reader = ResponsesEvents;
}

impl UpstreamApi for Responses {
    fn dialect(&self) -> Dialect {
        Dialect::Responses
    }

    fn name(&self) -> &'static str {
        "responses"
    }

    fn endpoint(&self) -> &'static str {
        "responses"
    }

    fn has_n(&self) -> bool {
        false
    }

    fn messages_field(&self) -> &'static str {
        "input"
    }

    fn system_field(&self) -> Option<&'static str> {
        Some("instructions")
    }

    fn request_writing(&self) -> RequestWriting {
        RequestWriting::ByField
    }

    /// It has no `stop` and no `seed`.
    fn request_from_chat(&self, body: &Map<String, Value>) -> Result<Value, RequestError> {
        let (mut out, asked) =
            api::one_choice_request(Dialect::Responses, body, &["seed", "stop"], &[])?;
        api::responses::request(body, &mut out, asked)?;
        Ok(Value::Object(out))
    }

    fn write_messages_from_chat_json(
        &self,
        text: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<Option<Vec<u8>>, MessagesError> {
        messages::write_messages(Dialect::Responses, text, out)
    }

    fn write_tools_from_chat_json(
        &self,
        text: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<(), RequestError> {
        tools::write_tools_text(text, Dialect::Responses, out)
            .map_err(|e| RequestError::at("tools", e))
    }

    fn recognises(&self, kind: &str) -> bool {
        kind.starts_with("response.")
    }
}
