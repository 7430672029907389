//! The body of one upstream request: the client's request as Chat Completions, translated to
//! the upstream's API where it speaks another (field by field, the messages from their text),
//! written once per upstream and number of samples in a run and shared by the requests that
//! send it.

use std::sync::{Arc, Mutex};

use serde_json::{Map, Value, json};

use super::{Opener, UpstreamRoute};
use crate::error::ApiError;
use crate::request::is_translated;
use choicewise_core::Dialect;
use choicewise_core::upstream::RequestError;
use choicewise_core::upstream::RequestWriting;

/// The answer room a request for upstream `u` is given when its body (`base`) states no
/// limit of its own: `u`'s `max_tokens`, else the room its key's limits reserved (`room`,
/// [`Opener::room`]); None when the client stated one, or neither is set.
pub(super) fn limit_to_set(
    u: &UpstreamRoute,
    base: &crate::request::Fields,
    room: Option<u64>,
) -> Option<u64> {
    let stated = ["max_tokens", "max_completion_tokens"]
        .iter()
        .any(|k| base.get(*k).is_some_and(|v| &v[..] != b"null"));
    u.max_tokens.or(room).filter(|_| !stated)
}

/// The bodies of a run's upstream requests ([`Opener::bodies`]): by upstream (its label and
/// model) and number of samples, each written once, by the first request that needs it
/// (the others wait for it).
pub(crate) type Bodies = Arc<Mutex<Vec<(BodyKey, Arc<std::sync::OnceLock<BodyText>>)>>>;

/// What a body of [`Bodies`] is written for: an upstream's label and model, the samples,
/// and whether it asks for the log-probabilities of a confidence-guided vote.
type BodyKey = (Arc<str>, String, usize, bool);

/// A body written, or why it could not be.
type BodyText = Result<bytes::Bytes, ApiError>;

/// [`request_body`], written once per upstream and number of samples in a run and shared
/// by every request that sends it ([`Opener::bodies`]); `logprobs`: whether it asks for the
/// confidence-guided vote's log-probabilities (not when the upstream refuses them).
pub(super) fn shared_body(
    u: &UpstreamRoute,
    opener: &Opener,
    samples: usize,
    logprobs: bool,
) -> BodyText {
    let key: BodyKey = (u.label.clone(), u.model.clone(), samples, logprobs);
    let cell = {
        let mut bodies = opener.bodies.lock().unwrap_or_else(|e| e.into_inner());
        match bodies.iter().find(|(k, _)| *k == key) {
            Some((_, cell)) => cell.clone(),
            None => {
                let cell = Arc::default();
                bodies.push((key, Arc::clone(&cell)));
                cell
            }
        }
    };
    let logprobs = opener.logprobs.filter(|_| logprobs);
    cell.get_or_init(|| request_body(u, opener, samples, logprobs))
        .clone()
}

/// The body of a request for `samples` samples to upstream `u`, in its API, as JSON text.
///
/// How is the upstream API's ([`UpstreamApi::request_writing`](choicewise_core::upstream::UpstreamApi::request_writing)).
/// A Chat Completions upstream's body is the client's fields as they came
/// ([`RequestWriting::AsSent`]), with the fields the gateway decides written over them:
/// nothing of it is parsed. An API written by field ([`RequestWriting::ByField`]: Responses,
/// Anthropic, Gemini) is translated
/// ([`Dialect::request_from_chat`]) from a parsed copy of the few fields it reshapes, its
/// messages and tools translated from their text one at a time
/// ([`Dialect::write_messages_from_chat_json`], [`Dialect::tools_from_chat_json`]): a request of
/// many messages is never a tree (for Gemini, every field but the messages and the tools is
/// parsed: it has a place for none of the others as they are). A request that states no
/// limit gets the upstream's `max_tokens` ([`limit_to_set`]); a confidence-guided vote's
/// (`logprobs`) asks a Chat Completions upstream for log-probabilities.
pub(crate) fn request_body(
    u: &UpstreamRoute,
    opener: &Opener,
    samples: usize,
    logprobs: Option<choicewise_core::confidence::Confidence>,
) -> Result<bytes::Bytes, ApiError> {
    let base = &*opener.body;
    let writing = u.api.api().request_writing();
    if writing == RequestWriting::AsSent {
        let model = serde_json::to_vec(&u.model).map_err(|e| ApiError::invalid(e.to_string()))?;
        let mut over: Vec<(&str, Vec<u8>)> = vec![
            ("model", model),
            ("stream", b"true".to_vec()),
            ("stream_options", br#"{"include_usage":true}"#.to_vec()),
        ];
        if samples > 1 {
            over.push(("n", samples.to_string().into_bytes()));
        }
        if let Some(limit) = limit_to_set(u, base, opener.room) {
            over.push(("max_tokens", limit.to_string().into_bytes()));
        }
        if let Some(confidence) = logprobs {
            over.push(("logprobs", b"true".to_vec()));
            // The `sampled` measure reads each token's own `logprob`: no `top_logprobs`
            // asked beyond what the client asked itself.
            if let Some(k) = confidence.asks_top_logprobs() {
                let asked = (base.get("top_logprobs"))
                    .and_then(|t| serde_json::from_slice::<Value>(t).ok())
                    .and_then(|t| t.as_u64())
                    .unwrap_or(0);
                over.push(("top_logprobs", asked.max(k as u64).to_string().into_bytes()));
            }
        }
        let over: Vec<(&str, &[u8])> = over.iter().map(|(k, v)| (*k, &v[..])).collect();
        return Ok(crate::request::write_object(base, &over).into());
    }
    let native = (opener.native.as_deref()).filter(|(api, _)| *api == u.api);
    if writing == RequestWriting::Whole {
        return whole_body(u, base, native.map(|n| &n.1), opener.room);
    }
    let translated = translated_body(
        u.api,
        &u.model,
        base,
        native.map(|n| &n.1),
        (samples, limit_to_set(u, base, opener.room)),
    )?;
    Ok(translated.into())
}

/// [`request_body`] for an upstream whose API's request is translated whole
/// ([`RequestWriting::Whole`]: Bedrock's, which nests what Chat Completions keeps at its top):
/// every field parsed, with the model, streaming and the limit the gateway sets, and
/// translated as one tree; the translation's refusals are coded as Gemini's are.
fn whole_body(
    u: &UpstreamRoute,
    base: &crate::request::Fields,
    native: Option<&Map<String, Value>>,
    room: Option<u64>,
) -> Result<bytes::Bytes, ApiError> {
    let mut body = Map::new();
    for (k, text) in base.iter() {
        body.insert(
            k.clone(),
            crate::request::parse_field(k, text).map_err(ApiError::invalid)?,
        );
    }
    if let Some(native) = native {
        body.extend(native.clone());
    }
    if let Some(limit) = limit_to_set(u, base, room) {
        body.entry("max_tokens").or_insert(json!(limit));
    }
    body.insert("model".into(), json!(u.model));
    body.insert("stream".into(), json!(true));
    let request = (u.api.api().request_from_chat(&body))
        .map_err(|e| at_param(ApiError::invalid(e.message()), &e).code("untranslatable_request"))?;
    let text = serde_json::to_vec(&request).map_err(|e| ApiError::invalid(e.to_string()))?;
    Ok(text.into())
}

/// [`request_body`] for an upstream of API `api` other than Chat Completions, for its model
/// `model`: the client's fields `base`, the client's own fields of that API (`native`), the
/// samples one request asks for (Gemini's `candidateCount`) and the limit the gateway sets
/// (`limit`). The model is in a Gemini request's URL, streaming in its method: neither is
/// one of its fields.
fn translated_body(
    api: Dialect,
    model: &str,
    base: &crate::request::Fields,
    native: Option<&Map<String, Value>>,
    (samples, limit): (usize, Option<u64>),
) -> Result<Vec<u8>, ApiError> {
    // Gemini's request has a place for none of the client's fields as they are: each is
    // read, and written in its shape, left out or refused by name.
    let gemini = !api.api().passes_other_fields();
    // The translation's own refusals: for Gemini, every one of them is coded.
    let refused = |e: RequestError| {
        let refusal = at_param(ApiError::invalid(e.message()), &e);
        match gemini {
            true => refusal.code("untranslatable_request"),
            false => refusal,
        }
    };
    // What the translation reads or reshapes is parsed, but for the messages and the tools,
    // translated one at a time from their text (the tools' schemas copied); every other
    // field passes through as the client sent it.
    let parsed = |k: &str| match gemini {
        true => k != "messages" && k != "tools",
        false => is_translated(k) && k != "messages",
    };
    let mut body = Map::new();
    for (k, text) in base.iter().filter(|(k, _)| parsed(k)) {
        body.insert(
            k.clone(),
            crate::request::parse_field(k, text).map_err(ApiError::invalid)?,
        );
    }
    if let Some(native) = native {
        body.extend(native.clone());
    }
    if api.has_n() && samples > 1 {
        body.insert("n".into(), json!(samples));
    }
    if let Some(limit) = limit {
        body.entry("max_tokens").or_insert(json!(limit));
    }
    body.insert("model".into(), json!(model));
    body.insert("stream".into(), json!(true));
    let Value::Object(body) = api
        .request_from_chat(&Value::Object(body))
        .map_err(refused)?
    else {
        return Err(ApiError::invalid("the translated request is not an object"));
    };
    let mut fields = crate::request::fields_of(body);
    let (list_key, system_key) = (api.messages_field(), api.system_field());
    fields.remove(list_key);
    for (k, text) in base.iter().filter(|_| !gemini) {
        if !is_translated(k) && k != "tools" {
            // A field the translation writes itself (`system`, `input`, ...) is its own.
            fields.entry(k.clone()).or_insert_with(|| text.clone());
        }
    }
    let messages = base.get("messages").map_or(&b"[]"[..], |m| &m[..]);
    // The tools translated straight into the body at their key (never a list of their own
    // beside it), about the size the client's are; their error, if any, is given at their
    // key (after the messages').
    let tools = base.get("tools").filter(|t| &t[..] != b"null");
    // The body is written in its keys' order, the messages translated into it as they are
    // read: a first system message's content is known once the list is written, before its
    // own key (`system` after `messages`, `instructions` after `input`).
    let mut keys: Vec<&str> = (fields.keys().map(String::as_str))
        .chain([list_key])
        .chain(system_key)
        .chain(tools.map(|_| "tools"))
        .collect();
    keys.sort_unstable();
    keys.dedup();
    let size = (fields.iter().map(|(k, v)| k.len() + v.len() + 4)).sum::<usize>()
        + messages.len()
        + messages.len() / 8
        + tools.map_or(0, |t| t.len() + t.len() / 8)
        + 64;
    let mut out = Vec::with_capacity(size);
    out.push(b'{');
    let mut system: Option<Vec<u8>> = None;
    for key in keys {
        let piece = if key == list_key {
            Piece::Messages
        } else if Some(key) == system_key
            && let Some(text) = system.take()
        {
            Piece::Owned(text)
        } else if key == "tools"
            && let Some(tools) = tools
        {
            Piece::Tools(tools)
        } else {
            match fields.get(key) {
                Some(text) => Piece::Text(text),
                None => continue,
            }
        };
        if out.len() > 1 {
            out.push(b',');
        }
        // A string always serialises.
        let _ = serde_json::to_writer(&mut out, key);
        out.push(b':');
        match piece {
            Piece::Text(text) => out.extend_from_slice(text),
            Piece::Owned(text) => out.extend_from_slice(&text),
            Piece::Messages => {
                system = api
                    .write_messages_from_chat_json(messages, &mut out)
                    .map_err(|e| match gemini {
                        true => refused(e.into()),
                        // What the check of every request lets through but this API cannot
                        // take (a second system message for Anthropic, say).
                        false => ApiError::invalid(e.to_string())
                            .param(e.field())
                            .code("untranslatable_message"),
                    })?;
            }
            Piece::Tools(tools) => {
                (api.write_tools_from_chat_json(tools, &mut out)).map_err(refused)?
            }
        }
    }
    out.push(b'}');
    Ok(out)
}

/// `error` naming the request field the translation's refusal names, if it names one.
fn at_param(error: ApiError, refusal: &RequestError) -> ApiError {
    match refusal.param() {
        Some(param) => error.param(param),
        None => error,
    }
}

/// A field of a translated body, as [`translated_body`] writes it.
enum Piece<'a> {
    /// Its text, as the client sent it or the translation wrote it.
    Text(&'a [u8]),
    /// Its text, made here (the first system message's content).
    Owned(Vec<u8>),
    /// The messages, translated into the body as they are read.
    Messages,
    /// The client's tools (their text), translated into the body as they are read.
    Tools(&'a [u8]),
}

/// The request for `samples` samples to upstream `u` as the library reads it for their
/// accounting: the upstream's `model`, the request's `n`.
pub(crate) fn accounting(u: &UpstreamRoute, samples: usize) -> Value {
    let mut request = json!({"model": u.model});
    if u.api.has_n() && samples > 1 {
        request["n"] = json!(samples);
    }
    request
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::{Fields, fields_of, split_object, write_object};

    /// The translated body as it was written before the messages were translated from their
    /// text: every field the translation reads parsed, the whole request translated as a
    /// tree, its tools then written from their text, the other fields passed on.
    fn as_a_tree(
        api: Dialect,
        base: &Fields,
        native: Option<&Map<String, Value>>,
        limit: Option<u64>,
    ) -> Result<Vec<u8>, String> {
        let mut body = Map::new();
        for (k, text) in base.iter().filter(|(k, _)| is_translated(k)) {
            body.insert(k.clone(), serde_json::from_slice(text).unwrap());
        }
        if let Some(native) = native {
            body.extend(native.clone());
        }
        if let Some(limit) = limit {
            body.entry("max_tokens").or_insert(json!(limit));
        }
        body.insert("model".into(), json!("up"));
        body.insert("stream".into(), json!(true));
        let Value::Object(body) =
            (api.request_from_chat(&Value::Object(body))).map_err(|e| e.to_string())?
        else {
            unreachable!()
        };
        let mut fields = fields_of(body);
        if let Some(tools) = base.get("tools").filter(|t| &t[..] != b"null") {
            let tools = api.tools_from_chat_json(tools).map_err(|e| e.to_string())?;
            fields.insert("tools".into(), tools.into());
        }
        for (k, text) in base {
            if !is_translated(k) && k != "tools" {
                fields.entry(k.clone()).or_insert_with(|| text.clone());
            }
        }
        Ok(write_object(&fields, &[]))
    }

    #[test]
    fn translated_bodies_are_written_as_the_tree_was() {
        let messages = json!([
            {"role": "developer", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "what is it?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBO"}}]},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "a", "type": "function",
                "function": {"name": "w", "arguments": "{\"c\":\"Paris\"}"}}]},
            {"role": "tool", "tool_call_id": "a", "content": "18C"},
            {"role": "tool", "tool_call_id": "b", "content": "19C"},
            {"role": "system", "content": "later"},
            {"role": "assistant", "content": "Done."}]);
        let tools = json!([{"type": "function", "function": {"name": "w", "parameters": {"type": "object"}}}]);
        let bodies = [
            json!({"messages": messages, "tools": tools, "tool_choice": "required", "stop": "x",
                   "max_tokens": 50, "metadata": {"a": 1}, "temperature": 0.5}),
            // A client's own `system` or `instructions` field: the first system message wins.
            json!({"messages": messages, "system": "own", "instructions": "own", "input": [1],
                   "zz": null, "reasoning_effort": "low", "max_completion_tokens": 3000}),
            json!({"messages": [{"role": "user", "content": "hi"}], "system": "own",
                   "instructions": "own", "tools": null}),
            json!({"messages": [], "parallel_tool_calls": false, "user": "u", "seed": null}),
            json!({"tools": tools}),
        ];
        let thinking: Map<String, Value> = serde_json::from_value(
            json!({"thinking": {"type": "enabled", "budget_tokens": 1500},
                "reasoning": {"effort": "low", "summary": "auto"}}),
        )
        .unwrap();
        // A first system message is known once the list is written: its key comes after.
        for api in [Dialect::Anthropic, Dialect::Responses] {
            assert!(Some(api.messages_field()) < api.system_field(), "{api}");
        }
        let mut compared = 0;
        for body in bodies {
            let base = split_object(&bytes::Bytes::from(body.to_string())).unwrap();
            for api in [Dialect::Anthropic, Dialect::Responses] {
                for (native, limit) in [(None, None), (Some(&thinking), Some(9000))] {
                    let text = translated_body(api, "up", &base, native, (1, limit));
                    match (text, as_a_tree(api, &base, native, limit)) {
                        (Ok(text), Ok(tree)) => {
                            assert_eq!(
                                String::from_utf8(text).unwrap(),
                                String::from_utf8(tree).unwrap(),
                                "{api}: {body}"
                            );
                            compared += 1;
                        }
                        (Err(e), Err(tree)) => assert_eq!(e.message, tree, "{api}: {body}"),
                        (text, tree) => panic!("{api}: {body}: {text:?} but {tree:?}"),
                    }
                }
            }
        }
        // All but the Responses requests with a `stop`, which it has not.
        assert_eq!(compared, 18);
        // Messages that are not a list: a 400 naming the field, as the tree refuses them.
        let not_a_list = json!({"messages": "not a list"});
        let base = split_object(&bytes::Bytes::from(not_a_list.to_string())).unwrap();
        for api in [Dialect::Anthropic, Dialect::Responses] {
            let e = translated_body(api, "up", &base, None, (1, None)).unwrap_err();
            let tree = as_a_tree(api, &base, None, None).unwrap_err();
            assert_eq!((e.status.as_u16(), &e.message), (400, &tree));
            assert_eq!(e.body()["error"]["param"], "messages");
            assert_eq!(tree, "\"messages\" must be an array, not a string");
        }
        // A message the translation refuses: the same 400.
        let bad = json!({"messages": [{"role": "user", "content": "x"}, {"role": "robot"}]});
        let base = split_object(&bytes::Bytes::from(bad.to_string())).unwrap();
        for api in [Dialect::Anthropic, Dialect::Responses] {
            let e = translated_body(api, "up", &base, None, (1, None)).unwrap_err();
            let tree = as_a_tree(api, &base, None, None).unwrap_err();
            assert_eq!((e.status.as_u16(), e.message), (400, tree));
        }
    }

    /// A Gemini upstream's body as it was written before its messages and tools were
    /// translated from their text: every field parsed whole, the request translated as a
    /// tree and serialised.
    fn as_a_gemini_tree(
        base: &Fields,
        samples: usize,
        limit: Option<u64>,
    ) -> Result<Vec<u8>, String> {
        let mut body = Map::new();
        for (k, text) in base {
            body.insert(k.clone(), serde_json::from_slice(text).unwrap());
        }
        if samples > 1 {
            body.insert("n".into(), json!(samples));
        }
        if let Some(limit) = limit {
            body.entry("max_tokens").or_insert(json!(limit));
        }
        let body =
            (Dialect::Gemini.request_from_chat(&Value::Object(body))).map_err(|e| e.to_string())?;
        Ok(serde_json::to_vec(&body).unwrap())
    }

    #[test]
    fn gemini_bodies_are_written_as_the_tree_was() {
        let messages = json!([
            {"role": "developer", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "what is it?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBO"}},
                {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}]},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "a", "type": "function", "function": {"name": "w", "arguments": "{\"c\":\"Paris\"}"}},
                {"id": "b__thought__c2ln", "type": "function", "function": {"name": "t", "arguments": ""}}]},
            {"role": "tool", "tool_call_id": "a", "content": "{\"c\":18}"},
            {"role": "tool", "tool_call_id": "b__thought__c2ln", "content": "noon"},
            {"role": "system", "content": "later"},
            {"role": "assistant", "content": "Done."}]);
        let tools = json!([{"type": "function", "function": {"name": "w", "description": "weather",
            "parameters": {"properties": {"c": {"type": "string"}}, "type": "object"}}}]);
        let large = json!([{"role": "user", "content": "x".repeat(70_000)},
            {"role": "assistant", "content": "y".repeat(70_000)}]);
        let bodies = [
            json!({"messages": messages, "tools": tools, "tool_choice": "required", "stop": "x",
                   "max_tokens": 50, "metadata": {"a": 1}, "temperature": 0.5, "top_p": 0.9,
                   "seed": 3, "user": "u", "parallel_tool_calls": false}),
            json!({"messages": messages, "reasoning_effort": "low", "max_completion_tokens": 3000,
                   "response_format": {"type": "json_schema", "json_schema": {"name": "r",
                       "schema": {"type": "object"}}}, "tools": null, "zz": null}),
            json!({"messages": large, "tool_choice": {"type": "function", "function": {"name": "w"}},
                   "tools": tools}),
            json!({"messages": [{"role": "user", "content": "hi"}], "frequency_penalty": 0.1,
                   "presence_penalty": 0.2, "stop": ["a", "b"]}),
            json!({"messages": null}),
            json!({"tools": tools}),
            json!({}),
            // Broken calls sent back in a history: passed on under `raw_arguments`, alike.
            json!({"messages": [{"role": "assistant", "content": null, "tool_calls": [
                {"id": "a", "type": "function", "function": {"name": "w", "arguments": "{\"c\": \"Par"}},
                {"id": "b", "type": "function", "function": {"name": "w", "arguments": " [1, 2] "}},
                {"id": "c", "type": "function", "function": {"name": "w", "arguments": "\"é\\n\""}}]},
                {"role": "tool", "tool_call_id": "a", "content": "?"}]}),
            // Refused alike: a field Gemini has no place for, a message it cannot take, a
            // tool it cannot take, a tool choice it cannot read, a limit that is no count.
            json!({"messages": messages, "logprobs": true}),
            json!({"messages": [{"role": "tool", "tool_call_id": "x", "content": "1"}]}),
            json!({"messages": "not a list"}),
            json!({"tools": [{"type": "custom", "custom": {"name": "p"}}]}),
            json!({"tools": {"not": "a list"}}),
            json!({"tool_choice": "sometimes"}),
            json!({"max_tokens": "many"}),
        ];
        let mut compared = 0;
        for body in bodies {
            let base = split_object(&bytes::Bytes::from(body.to_string())).unwrap();
            for (samples, limit) in [(1, None), (3, Some(9000))] {
                let text = translated_body(Dialect::Gemini, "up", &base, None, (samples, limit));
                match (text, as_a_gemini_tree(&base, samples, limit)) {
                    (Ok(text), Ok(tree)) => {
                        let text = String::from_utf8(text).unwrap();
                        assert_eq!(text, String::from_utf8(tree).unwrap(), "{body}");
                        // Neither the model nor streaming is a field of Gemini's.
                        let keys: Value = serde_json::from_str(&text).unwrap();
                        assert!(keys.get("model").is_none() && keys.get("stream").is_none());
                        compared += 1;
                    }
                    (Err(e), Err(tree)) => {
                        assert_eq!((e.status.as_u16(), &e.message), (400, &tree), "{body}");
                        assert_eq!(e.body()["error"]["code"], "untranslatable_request");
                    }
                    (text, tree) => panic!("{body}: {text:?} but {tree:?}"),
                }
            }
        }
        assert_eq!(compared, 16);
        // The samples are its candidates, the limit set its room unless the client set one.
        let base = split_object(&bytes::Bytes::from(json!({"max_tokens": 5}).to_string())).unwrap();
        let text = translated_body(Dialect::Gemini, "up", &base, None, (4, Some(9000))).unwrap();
        let body: Value = serde_json::from_slice(&text).unwrap();
        assert_eq!(
            body,
            json!({"contents": [], "generationConfig": {"candidateCount": 4, "maxOutputTokens": 5}})
        );
    }
}
