//! OpenAI Chat Completions, and the servers compatible with it: the shape every request is
//! read in, so its writer writes the request as it is; its chunks are the splitter's own.

use serde_json::{Map, Value};

use super::{ReadsEvents, RequestWriting, UpstreamApi, sealed};
use crate::api::{Dialect, MessagesError, RequestError};
use crate::dialect::Chunks;

/// Chat Completions as an upstream API ([`Dialect::Chat`]).
#[derive(Debug)]
pub(crate) struct Chat;

impl sealed::Sealed for Chat {}

impl ReadsEvents for Chat {
    type Reader = Chunks;
}

impl UpstreamApi for Chat {
    fn dialect(&self) -> Dialect {
        Dialect::Chat
    }

    fn name(&self) -> &'static str {
        "chat"
    }

    fn endpoint(&self) -> &'static str {
        "chat/completions"
    }

    fn has_n(&self) -> bool {
        true
    }

    fn request_writing(&self) -> RequestWriting {
        RequestWriting::AsSent
    }

    fn request_from_chat(&self, body: &Map<String, Value>) -> Result<Value, RequestError> {
        Ok(Value::Object(body.clone()))
    }

    fn write_messages_from_chat_json(
        &self,
        messages: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<Option<Vec<u8>>, MessagesError> {
        out.extend_from_slice(messages);
        Ok(None)
    }

    fn write_tools_from_chat_json(
        &self,
        tools: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<(), RequestError> {
        out.extend_from_slice(tools);
        Ok(())
    }

    fn model_from_list(&self) -> bool {
        true
    }

    fn usage_when_asked(&self) -> bool {
        true
    }

    fn has_logprobs(&self) -> bool {
        true
    }
}
