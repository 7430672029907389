//! A request in Chat Completions' shape in the OpenAI Responses API's shape.

use serde_json::{Map, Value, json};

use super::{Dialect, RequestError, messages, tools};

/// The Responses-only part of [`Dialect::request_from_chat`]: the fields `out` already
/// holds are the ones passed through.
pub(crate) fn request(
    body: &Map<String, Value>,
    out: &mut Map<String, Value>,
    (messages, max_tokens, effort): (&[Value], Option<Value>, Option<&str>),
) -> Result<(), RequestError> {
    let api = Dialect::Responses;
    let read = |each: &mut dyn FnMut(usize, Value) -> Result<(), String>| {
        (messages.iter().enumerate()).try_for_each(|(i, m)| each(i, m.clone()))
    };
    let mut input = Vec::with_capacity(messages.len());
    let system =
        messages::translate(api, read, &mut input).map_err(|e| RequestError::at("messages", e))?;
    out.insert("input".into(), Value::Array(input));
    if let Some(list) = body.get("tools").filter(|t| !t.is_null()) {
        let tools =
            tools::tools(list, Dialect::Responses).map_err(|e| RequestError::at("tools", e))?;
        out.insert("tools".into(), tools);
    }
    if let Some(choice) = body.get("tool_choice").filter(|c| !c.is_null()) {
        let choice =
            tools::responses_tool_choice(choice).map_err(|e| RequestError::at("tool_choice", e))?;
        out.insert("tool_choice".into(), choice);
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
    Ok(())
}
