//! A request in Chat Completions' shape in the Anthropic Messages API's shape.

use serde_json::{Map, Value, json};

use super::{DEFAULT_ANTHROPIC_MAX_TOKENS, Dialect, RequestError, messages, tools};

/// The Anthropic-only part of [`Dialect::request_from_chat`]: the fields `out` already
/// holds are the ones passed through.
pub(crate) fn request(
    api: Dialect,
    body: &Map<String, Value>,
    out: &mut Map<String, Value>,
    (messages, max_tokens, effort): (&[Value], Option<Value>, Option<&str>),
) -> Result<(), RequestError> {
    let read = |each: &mut dyn FnMut(usize, Value) -> Result<(), String>| {
        (messages.iter().enumerate()).try_for_each(|(i, m)| each(i, m.clone()))
    };
    let mut turns = Vec::with_capacity(messages.len());
    let system =
        messages::translate(api, read, &mut turns).map_err(|e| RequestError::at("messages", e))?;
    out.insert("messages".into(), Value::Array(turns));
    if let Some(list) = body.get("tools").filter(|t| !t.is_null()) {
        let tools = tools::tools(list, api).map_err(|e| RequestError::at("tools", e))?;
        out.insert("tools".into(), tools);
    }
    let choice =
        tools::anthropic_tool_choice(body.get("tool_choice"), body.get("parallel_tool_calls"))
            .map_err(|e| RequestError::at("tool_choice", e))?;
    if let Some(choice) = choice {
        out.insert("tool_choice".into(), choice);
    }
    if let Some(system) = system {
        out.insert("system".into(), system);
    }
    let budget = match effort {
        Some(effort) if !out.contains_key("thinking") => Dialect::thinking_budget(effort)
            .ok_or_else(|| {
                RequestError::at(
                    "reasoning_effort",
                    format!(
                        "reasoning_effort {effort:?} has no thinking budget in the {api} \
                         API: use none, minimal, low, medium or high"
                    ),
                )
            })?,
        _ => None,
    };
    let max = match (&max_tokens, budget) {
        (Some(max), Some(budget)) if max.as_u64().is_some_and(|m| m <= budget) => {
            return Err(RequestError::at(
                "max_tokens",
                format!(
                    "the {api} API thinks within max_tokens: reasoning_effort {:?} \
                     (budget_tokens {budget}) needs max_tokens above {budget}, not {max}",
                    effort.unwrap_or_default()
                ),
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
    Ok(())
}
