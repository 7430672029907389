//! A Responses answer's `response` object and its output items, as the stream's events and
//! the non-streamed answer both write them.

use choicewise_core::ChoiceOutput;
use serde::Serialize;
use serde_json::{Value, json};
use std::collections::HashMap;

use super::texts::{Marks, Seg, escape_into, escaped_len};
use crate::answer::ending::OutputEnd;
use crate::api::{Reply, Tokens, new_id, unix_time};
use crate::request::Fields;
use crate::upstream::engine::Summary;

/// A call's name as the client knows it: a namespace's function by its own name, with its
/// namespace; any other as it came.
pub(super) fn client_name(
    namespaced: &HashMap<String, (String, String)>,
    name: Option<&str>,
) -> (String, Option<String>) {
    let name = name.unwrap_or_default();
    match namespaced.get(name) {
        Some((namespace, own)) => (own.clone(), Some(namespace.clone())),
        None => (name.to_string(), None),
    }
}

/// A custom tool call's input: the `input` string of its arguments (`{"input": ...}`), else
/// the arguments' text as it came.
/// Read without a tree: the other members are skipped.
pub(super) fn custom_input(arguments: &str) -> String {
    #[derive(serde::Deserialize)]
    struct Custom {
        input: String,
    }
    match serde_json::from_str::<Custom>(arguments) {
        Ok(custom) => custom.input,
        Err(_) => arguments.to_string(),
    }
}

/// A `custom_tool_call` output item (its `input` a string, or a mark standing for one).
pub(super) fn custom_item(
    id: &str,
    status: &str,
    input: Value,
    call_id: &str,
    name: &str,
) -> Value {
    json!({"id": id, "type": "custom_tool_call", "status": status, "call_id": call_id,
           "name": name, "input": input})
}

/// A `function_call` output item (`namespace` after `name` when it has one).
pub(super) fn call_item(
    id: &str,
    status: &str,
    arguments: &str,
    call_id: &str,
    name: &str,
    namespace: Option<&str>,
) -> Value {
    let mut item = json!({"id": id, "type": "function_call", "status": status,
                          "arguments": arguments, "call_id": call_id, "name": name});
    if let Some(namespace) = namespace {
        item["namespace"] = json!(namespace);
    }
    item
}

/// The `incomplete_details.reason` of a finish that leaves the response incomplete.
pub(super) fn incomplete_reason(finish: &str) -> Option<&'static str> {
    match finish {
        "length" => Some("max_output_tokens"),
        "content_filter" => Some("content_filter"),
        _ => None,
    }
}

/// The usage object.
pub(super) fn usage_of(usage: &Tokens) -> Value {
    json!({
        "input_tokens": usage.input,
        "input_tokens_details": {"cached_tokens": usage.cached_input},
        "output_tokens": usage.output,
        "output_tokens_details": {"reasoning_tokens": usage.reasoning},
        "total_tokens": usage.input.saturating_add(usage.output),
    })
}

/// What a response object names besides its state.
pub(super) struct ResponseParts<'a> {
    pub(super) id: &'a str,
    pub(super) created_at: u64,
    pub(super) model: &'a str,
}

/// A value written with the request's echoed parameters (`echo`, their JSON text as sent)
/// in every response object in it (an object whose `object` is `"response"`), in place of
/// its defaults: the echoed `tools` and `metadata` are copied, never parsed.
pub(crate) struct Echoed<'a> {
    /// The value: an event, or a response object.
    pub value: &'a Value,
    /// The echoed parameters.
    pub echo: &'a Fields,
}

impl Serialize for Echoed<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{Error, SerializeMap, SerializeSeq};
        let echo = self.echo;
        if echo.is_empty() {
            return self.value.serialize(s);
        }
        match self.value {
            Value::Object(o) => {
                let response = o.get("object") == Some(&json!("response"));
                let echoed = |k: &str| response.then(|| echo.get(k)).flatten();
                let mut map = s.serialize_map(None)?;
                let mut keys: Vec<&str> = o.keys().map(String::as_str).collect();
                if response {
                    keys.extend(echo.keys().map(String::as_str));
                    keys.sort_unstable();
                    keys.dedup();
                }
                for k in keys {
                    match (echoed(k), o.get(k)) {
                        (Some(text), _) => {
                            let raw: &serde_json::value::RawValue =
                                serde_json::from_slice(text).map_err(S::Error::custom)?;
                            map.serialize_entry(k, raw)?;
                        }
                        (None, Some(v)) => map.serialize_entry(k, &Echoed { value: v, echo })?,
                        (None, None) => {}
                    }
                }
                map.end()
            }
            Value::Array(a) => {
                let mut seq = s.serialize_seq(Some(a.len()))?;
                for v in a {
                    seq.serialize_element(&Echoed { value: v, echo })?;
                }
                seq.end()
            }
            v => v.serialize(s),
        }
    }
}

/// A response object: the request's parameters repeated (OpenAI's defaults for those not
/// sent), its state, output and usage.
pub(super) fn response_object(
    parts: ResponseParts<'_>,
    status: &str,
    output: Value,
    usage: Value,
    error: Value,
    incomplete: Value,
) -> Value {
    // `output` moves in (json! would copy it: a call's arguments may be megabytes).
    let mut r = json!({
        "id": parts.id, "object": "response", "created_at": parts.created_at,
        "status": status, "background": false, "error": error,
        "incomplete_details": incomplete, "instructions": null, "max_output_tokens": null,
        "metadata": {}, "model": parts.model, "output": null, "parallel_tool_calls": true,
        "previous_response_id": null, "reasoning": {"effort": null, "summary": null},
        "store": false, "temperature": null, "text": {"format": {"type": "text"}},
        "tool_choice": "auto", "tools": [], "top_p": null, "truncation": "disabled",
        "usage": usage, "user": null,
    });
    r["output"] = output;
    r
}

/// The non-streamed answer as a tree ([`message_with`], its texts copied in), for the
/// tests; the answer is written by [`object_text`].
#[cfg(test)]
pub(crate) fn message(
    reply: &Reply,
    output: &ChoiceOutput,
    end: &OutputEnd,
    usage: &Tokens,
    choicewise: Option<&Summary>,
) -> Value {
    message_with(reply, output, end, usage, choicewise, &mut |t| json!(t))
}

/// The non-streamed answer: a `response` object whose `output` holds a reasoning item (when
/// asked for and given), a message item (its text and refusal parts; an empty text when the
/// choice has neither nor calls), then each call's `function_call` item. `incomplete` for a
/// `length` or `content_filter` finish; `failed` when the choice did not finish, its error
/// the decided ending's (`end`: its words and its code, as the stream's `response.failed`). Each text
/// of `output` (its content, refusal, reasoning and calls' arguments) is written as `text`
/// makes it: the text itself, or a mark standing for it ([`object_text`]).
fn message_with<'a>(
    reply: &Reply,
    output: &'a ChoiceOutput,
    end: &OutputEnd,
    usage: &Tokens,
    choicewise: Option<&Summary>,
    text: &mut dyn FnMut(&'a str) -> Value,
) -> Value {
    let m = &output.message;
    let finish = match end {
        OutputEnd::Finished(reason) => Some(&**reason),
        _ => None,
    };
    let incomplete = finish.and_then(incomplete_reason);
    let item_status = match incomplete {
        Some(_) => "incomplete",
        None => "completed",
    };
    let mut items = Vec::new();
    if let Some(reasoning) = m
        .reasoning_content
        .as_deref()
        .filter(|t| reply.reasoning && !t.is_empty())
    {
        let text = text(reasoning);
        items.push(json!({"id": new_id("rs"), "type": "reasoning",
                          "summary": [{"type": "summary_text", "text": text}]}));
    }
    let calls: Vec<_> = (m.tool_calls.iter())
        .map(|c| (Some(c.id.as_str()).filter(|id| !id.is_empty()), &c.function))
        .chain(m.function_call.iter().map(|f| (None, f)))
        .collect();
    let mut parts = Vec::new();
    if let Some(content) = m.content.as_deref().filter(|t| !t.is_empty()) {
        let text = text(content);
        parts.push(json!({"type": "output_text", "text": text, "annotations": [], "logprobs": []}));
    }
    if let Some(refusal) = m.refusal.as_deref().filter(|t| !t.is_empty()) {
        let text = text(refusal);
        parts.push(json!({"type": "refusal", "refusal": text}));
    }
    if parts.is_empty() && calls.is_empty() {
        parts.push(json!({"type": "output_text", "text": "", "annotations": [], "logprobs": []}));
    }
    if !parts.is_empty() {
        items.push(
            json!({"id": new_id("msg"), "type": "message", "status": item_status,
                          "role": "assistant", "content": parts}),
        );
    }
    for (id, f) in calls {
        let call_id = id.map_or_else(|| new_id("call"), str::to_string);
        let (name, namespace) = client_name(&reply.namespaced, Some(&f.name));
        if namespace.is_none() && reply.custom.contains(&name) {
            let input = custom_input(&f.arguments);
            items.push(custom_item(
                &new_id("ctc"),
                item_status,
                json!(input),
                &call_id,
                &name,
            ));
            continue;
        }
        let mut item = call_item(
            &new_id("fc"),
            item_status,
            "",
            &call_id,
            &name,
            namespace.as_deref(),
        );
        item["arguments"] = text(&f.arguments);
        items.push(item);
    }
    let (status, error, details) = match (finish, incomplete) {
        (None, _) => ("failed", super::failure(end), Value::Null),
        (_, Some(reason)) => ("incomplete", Value::Null, json!({"reason": reason})),
        _ => ("completed", Value::Null, Value::Null),
    };
    let id = new_id("resp");
    let parts = ResponseParts {
        id: &id,
        created_at: unix_time().as_secs(),
        model: &reply.model,
    };
    let mut body = response_object(
        parts,
        status,
        Value::Array(items),
        usage_of(usage),
        error,
        details,
    );
    Summary::ride_on(choicewise, &mut body);
    body
}

/// The non-streamed answer's text ([`message`]), with the request's echoed parameters as they
/// were sent ([`Echoed`]), in a buffer of exactly its length: each text of the choice
/// written from where the run holds it, never copied into a tree first.
pub(crate) fn object_text(
    reply: &Reply,
    output: &ChoiceOutput,
    end: &OutputEnd,
    usage: &Tokens,
    choicewise: Option<&Summary>,
) -> Vec<u8> {
    let marks = Marks::new();
    let mut texts: Vec<&str> = Vec::new();
    let body = message_with(reply, output, end, usage, choicewise, &mut |t| {
        texts.push(t);
        marks.mark(texts.len() - 1)
    });
    let echoed = Echoed {
        value: &body,
        echo: &reply.echo,
    };
    // A value always serialises.
    let json = serde_json::to_vec(&echoed).unwrap_or_default();
    drop(body);
    let segs = marks.split(json, texts.len());
    let len = (segs.iter())
        .map(|seg| match seg {
            Seg::Json(bytes) => bytes.len(),
            Seg::Text(k) => escaped_len(texts[*k]),
        })
        .sum();
    let mut out = Vec::with_capacity(len);
    for seg in segs {
        match seg {
            Seg::Json(bytes) => out.extend_from_slice(&bytes),
            Seg::Text(k) => {
                out.push(b'"');
                escape_into(&mut out, texts[k]);
                out.push(b'"');
            }
        }
    }
    out
}
