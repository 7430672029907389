//! The Anthropic Messages API: one choice per request, its key in `x-api-key`; its writer
//! `api/anthropic.rs` (with the messages and tools of `api/messages.rs` and
//! `api/tools.rs`), its reader `dialect/anthropic.rs`.

use serde_json::{Map, Value};

use super::{ReadsEvents, RequestWriting, UpstreamApi, sealed};
use crate::api::{self, Dialect, MessagesError, RequestError, messages, tools};
use crate::dialect::AnthropicEvents;

/// The Anthropic Messages API as an upstream API ([`Dialect::Anthropic`]).
#[derive(Debug)]
pub(crate) struct Anthropic;

impl sealed::Sealed for Anthropic {}

impl ReadsEvents for Anthropic {
    type Reader = AnthropicEvents;
}

impl UpstreamApi for Anthropic {
    fn dialect(&self) -> Dialect {
        Dialect::Anthropic
    }

    fn name(&self) -> &'static str {
        "anthropic"
    }

    fn endpoint(&self) -> &'static str {
        "messages"
    }

    fn key_header(&self) -> Option<&'static str> {
        Some("x-api-key")
    }

    fn has_n(&self) -> bool {
        false
    }

    fn system_field(&self) -> Option<&'static str> {
        Some("system")
    }

    fn request_writing(&self) -> RequestWriting {
        RequestWriting::ByField
    }

    /// It has no `seed`; OpenAI's own fields (`prompt_cache_key`, `user`,
    /// `safety_identifier`, `service_tier`), which it refuses as unknown, are left out, and
    /// `parallel_tool_calls` goes in its `tool_choice`.
    fn request_from_chat(&self, body: &Map<String, Value>) -> Result<Value, RequestError> {
        request_as(Dialect::Anthropic, body).map(Value::Object)
    }

    fn write_messages_from_chat_json(
        &self,
        text: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<Option<Vec<u8>>, MessagesError> {
        messages::write_messages(Dialect::Anthropic, text, out)
    }

    fn write_tools_from_chat_json(
        &self,
        text: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<(), RequestError> {
        tools::write_tools_text(text, Dialect::Anthropic, out)
            .map_err(|e| RequestError::at("tools", e))
    }

    fn recognises(&self, kind: &str) -> bool {
        matches!(
            kind,
            "message_start"
                | "message_delta"
                | "message_stop"
                | "content_block_start"
                | "content_block_delta"
                | "content_block_stop"
                | "ping"
        )
    }

    fn default_base_url(&self) -> &'static str {
        "https://api.anthropic.com/v1"
    }

    fn env_vars(&self) -> (&'static str, &'static str) {
        ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL")
    }

    fn default_model(&self) -> &'static str {
        "claude-sonnet-4-5"
    }

    fn version_header(&self) -> Option<(&'static str, &'static str)> {
        Some(("anthropic-version", "2023-06-01"))
    }

    fn count_endpoint(&self) -> Option<&'static str> {
        Some("messages/count_tokens")
    }

    fn default_max_tokens(&self) -> Option<u64> {
        Some(api::DEFAULT_ANTHROPIC_MAX_TOKENS)
    }

    fn provider_name(&self) -> &'static str {
        "anthropic"
    }
}

/// Anthropic's translation of a Chat Completions request, for `api` (Anthropic, or an API
/// reshaped from it: its errors name `api`): it has no `seed`; OpenAI's own fields
/// (`prompt_cache_key`, `user`, `safety_identifier`, `service_tier`), which Anthropic refuses
/// as unknown, are left out, and `parallel_tool_calls` goes in its `tool_choice`.
pub(super) fn request_as(
    api: Dialect,
    body: &Map<String, Value>,
) -> Result<Map<String, Value>, RequestError> {
    let left_out = [
        "parallel_tool_calls",
        "prompt_cache_key",
        "user",
        "safety_identifier",
        "service_tier",
    ];
    let (mut out, asked) = api::one_choice_request(api, body, &["seed"], &left_out)?;
    api::anthropic::request(api, body, &mut out, asked)?;
    Ok(out)
}
