//! Google's Gemini API (`streamGenerateContent?alt=sse`): several choices per request
//! (`candidateCount`), the model in the path, its key in `x-goog-api-key`; its writer
//! `api/gemini.rs`, its reader `dialect/gemini.rs`.

use serde_json::{Map, Value};

use super::{ReadsEvents, UpstreamApi, sealed};
use crate::api::{Dialect, MessagesError, RequestError, gemini};
use crate::dialect::gemini::Candidates;

/// The Gemini API as an upstream API ([`Dialect::Gemini`]).
#[derive(Debug)]
pub(crate) struct Gemini;

impl sealed::Sealed for Gemini {}

impl ReadsEvents for Gemini {
    type Reader = Candidates;
}

impl UpstreamApi for Gemini {
    fn dialect(&self) -> Dialect {
        Dialect::Gemini
    }

    fn name(&self) -> &'static str {
        "gemini"
    }

    fn endpoint(&self) -> &'static str {
        "models"
    }

    fn endpoint_for(&self, model: &str) -> String {
        format!("models/{model}:streamGenerateContent")
    }

    fn key_header(&self) -> Option<&'static str> {
        Some("x-goog-api-key")
    }

    fn has_n(&self) -> bool {
        true
    }

    fn messages_field(&self) -> &'static str {
        "contents"
    }

    fn system_field(&self) -> Option<&'static str> {
        Some("systemInstruction")
    }

    fn record_keys(&self) -> &'static [&'static str] {
        &["candidates", "usageMetadata", "promptFeedback"]
    }

    fn request_from_chat(&self, body: &Map<String, Value>) -> Result<Value, RequestError> {
        gemini::request(body)
    }

    fn write_messages_from_chat_json(
        &self,
        messages: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<Option<Vec<u8>>, MessagesError> {
        gemini::write_contents(messages, out)
    }

    fn write_tools_from_chat_json(
        &self,
        tools: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<(), RequestError> {
        gemini::write_tools_text(tools, out).map_err(|e| RequestError::at("tools", e))
    }

    fn default_base_url(&self) -> &'static str {
        "https://generativelanguage.googleapis.com/v1beta"
    }

    fn env_vars(&self) -> (&'static str, &'static str) {
        ("GEMINI_API_KEY", "GEMINI_BASE_URL")
    }

    fn default_model(&self) -> &'static str {
        "gemini-2.5-flash"
    }

    fn bare_host_is_v1(&self) -> bool {
        false
    }

    fn path_names_model(&self) -> bool {
        true
    }

    fn stream_query(&self) -> Option<(&'static str, &'static str)> {
        Some(("alt", "sse"))
    }

    fn stream_field(&self) -> bool {
        false
    }

    fn passes_other_fields(&self) -> bool {
        false
    }

    fn provider_name(&self) -> &'static str {
        "gcp.gemini"
    }
}
