//! A Gemini request's `generationConfig` read into a Chat Completions body's fields: the
//! sampling settings, `candidateCount` as `n`, the response's format and schema, and the
//! thinking asked for.

use choicewise_core::Dialect;
use serde_json::{Map, Value, json};

use crate::api::{IngressError, field};
use crate::request::kind_of;

pub(super) fn not_an_object(at: &str, v: &Value) -> IngressError {
    IngressError::invalid(at, format!("must be an object, not {}", kind_of(v)))
}

/// `generationConfig`'s fields, translated into `chat`; whether thoughts were asked for.
pub(super) fn generation_config(
    config: &Map<String, Value>,
    max_n: u32,
    chat: &mut Map<String, Value>,
) -> Result<bool, IngressError> {
    let at = |key: &str| format!("generationConfig.{key}");
    for refused in [
        "responseLogprobs",
        "logprobs",
        "speechConfig",
        "imageConfig",
    ] {
        match field(config, refused) {
            None | Some(Value::Bool(false)) => {}
            Some(_) => {
                return Err(IngressError::unsupported(
                    at(refused),
                    "not served by this gateway",
                ));
            }
        }
    }
    if let Some(n) = field(config, "candidateCount") {
        match n.as_u64() {
            Some(n) if n >= 1 && n <= u64::from(max_n) => {
                chat.insert("n".into(), json!(n));
            }
            _ => {
                return Err(IngressError::invalid(
                    at("candidateCount"),
                    format!("must be an integer from 1 to {max_n} (max_n), not {n}"),
                ));
            }
        }
    }
    for (key, to) in [
        ("temperature", "temperature"),
        ("topP", "top_p"),
        ("topK", "top_k"),
        ("presencePenalty", "presence_penalty"),
        ("frequencyPenalty", "frequency_penalty"),
        ("seed", "seed"),
    ] {
        if let Some(v) = field(config, key) {
            if !v.is_number() {
                return Err(IngressError::invalid(
                    at(key),
                    format!("must be a number, not {}", kind_of(v)),
                ));
            }
            chat.insert(to.into(), v.clone());
        }
    }
    if let Some(v) = field(config, "maxOutputTokens") {
        match v.as_u64() {
            Some(n) if n >= 1 => {
                chat.insert("max_tokens".into(), json!(n));
            }
            _ => {
                return Err(IngressError::invalid(
                    at("maxOutputTokens"),
                    format!("must be an integer of 1 or more, not {v}"),
                ));
            }
        }
    }
    if let Some(v) = field(config, "stopSequences") {
        let stop: Option<Vec<&str>> = v
            .as_array()
            .and_then(|a| a.iter().map(Value::as_str).collect());
        match stop {
            Some(stop) if !stop.is_empty() => {
                chat.insert("stop".into(), json!(stop));
            }
            Some(_) => {}
            None => {
                return Err(IngressError::invalid(
                    at("stopSequences"),
                    "must be an array of strings",
                ));
            }
        }
    }
    if let Some(modalities) = field(config, "responseModalities") {
        let text_only = (modalities.as_array()).is_some_and(|m| {
            m.iter()
                .all(|m| m.as_str().is_some_and(|m| m.eq_ignore_ascii_case("text")))
        });
        if !text_only {
            return Err(IngressError::unsupported(
                at("responseModalities"),
                format!("only [\"TEXT\"] is served by this gateway, not {modalities}"),
            ));
        }
    }
    response_format(config, chat)?;
    thinking(config, chat)
}

/// `responseMimeType` and the response's schema as `response_format`.
fn response_format(
    config: &Map<String, Value>,
    chat: &mut Map<String, Value>,
) -> Result<(), IngressError> {
    let json_mime = match field(config, "responseMimeType") {
        None => false,
        Some(Value::String(m)) if m == "text/plain" => false,
        Some(Value::String(m)) if m == "application/json" => true,
        Some(other) => {
            return Err(IngressError::unsupported(
                "generationConfig.responseMimeType",
                format!("must be \"text/plain\" or \"application/json\" here, not {other}"),
            ));
        }
    };
    let schema = match (
        field(config, "responseJsonSchema"),
        field(config, "responseSchema"),
    ) {
        (Some(schema), _) => Some(schema.clone()),
        (None, Some(schema)) => Some(json_schema_of(schema.clone())),
        (None, None) => None,
    };
    let format = match (schema, json_mime) {
        (Some(schema), _) => {
            json!({"type": "json_schema", "json_schema": {"name": "response", "schema": schema}})
        }
        (None, true) => json!({"type": "json_object"}),
        (None, false) => return Ok(()),
    };
    chat.insert("response_format".into(), format);
    Ok(())
}

/// `thinkingConfig` as `reasoning_effort`; whether thoughts were asked for.
fn thinking(
    config: &Map<String, Value>,
    chat: &mut Map<String, Value>,
) -> Result<bool, IngressError> {
    let Some(thinking) = field(config, "thinkingConfig") else {
        return Ok(false);
    };
    let Value::Object(thinking) = thinking else {
        return Err(not_an_object("generationConfig.thinkingConfig", thinking));
    };
    let effort = match (
        field(thinking, "thinkingLevel"),
        field(thinking, "thinkingBudget"),
    ) {
        (Some(Value::String(level)), _) => match level.to_ascii_lowercase().as_str() {
            level @ ("minimal" | "low" | "medium" | "high") => Some(level.to_string()),
            _ => {
                return Err(IngressError::invalid(
                    "generationConfig.thinkingConfig.thinkingLevel",
                    format!("must be MINIMAL, LOW, MEDIUM or HIGH, not {level:?}"),
                ));
            }
        },
        (Some(other), _) => {
            return Err(IngressError::invalid(
                "generationConfig.thinkingConfig.thinkingLevel",
                format!("must be a string, not {}", kind_of(other)),
            ));
        }
        // 0 turns thinking off and -1 leaves it to the model: the upstream's default.
        (None, Some(budget)) => match budget.as_i64() {
            Some(b) if b > 0 => Some(Dialect::thinking_effort(b as u64).to_string()),
            Some(_) => None,
            None => {
                return Err(IngressError::invalid(
                    "generationConfig.thinkingConfig.thinkingBudget",
                    format!("must be an integer, not {budget}"),
                ));
            }
        },
        (None, None) => None,
    };
    if let Some(effort) = effort {
        chat.insert("reasoning_effort".into(), json!(effort));
    }
    Ok(field(thinking, "includeThoughts") == Some(&Value::Bool(true)))
}

/// An OpenAPI schema of Gemini's (`responseSchema`, a declaration's `parameters`) as a JSON
/// Schema: its type names lower-cased (`OBJECT` → `object`), `nullable` as a `null` type,
/// `propertyOrdering` left out, at every level.
pub(super) fn json_schema_of(mut schema: Value) -> Value {
    fn walk(v: &mut Value) {
        match v {
            Value::Object(o) => {
                o.remove("propertyOrdering");
                let nullable = o.remove("nullable") == Some(Value::Bool(true));
                if let Some(Value::String(t)) = o.get_mut("type") {
                    *t = t.to_ascii_lowercase();
                }
                if nullable && let Some(t) = o.get("type").cloned() {
                    o.insert("type".into(), json!([t, "null"]));
                }
                for (key, inner) in o.iter_mut() {
                    match key.as_str() {
                        "properties" | "$defs" | "definitions" => {
                            if let Value::Object(props) = inner {
                                props.values_mut().for_each(walk);
                            }
                        }
                        "items"
                        | "anyOf"
                        | "oneOf"
                        | "allOf"
                        | "prefixItems"
                        | "not"
                        | "additionalProperties" => walk(inner),
                        _ => {}
                    }
                }
            }
            Value::Array(a) => a.iter_mut().for_each(walk),
            _ => {}
        }
    }
    walk(&mut schema);
    schema
}
