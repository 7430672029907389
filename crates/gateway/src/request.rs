//! A client's request as the gateway reads it: the model, `n`, `stream`, the usage option, and
//! the `choicewise` extension, each checked against the limits (400 naming what is wrong).

use std::collections::BTreeMap;

use bytes::Bytes;
use choicewise_core::{Policy, PolicyError, PolicyErrorKind};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

pub(crate) mod message_check;

use crate::config::{Limits, ModelPick};
use crate::error::ApiError;

/// A JSON object's top-level fields by name, each its JSON text: as the client sent it (a
/// slice of the body read, sharing its memory) or as the gateway wrote it. What the gateway
/// only forwards stays these bytes, never a parsed tree; the upstream's body is written from
/// them ([`write_object`]). Keys are in order, as a parsed object's are.
pub(crate) type Fields = BTreeMap<String, Bytes>;

/// Why a body is not a JSON object.
#[derive(Debug)]
pub(crate) enum NotAnObject {
    /// It is not JSON.
    Json(serde_json::Error),
    /// It is JSON of another type.
    Type,
}

/// Splits a JSON object into its top-level fields (a field sent twice is the last one, as
/// when parsing it whole), each a slice of `bytes`: the body is checked to be JSON, and
/// nothing below its top level is parsed into a tree.
pub(crate) fn split_object(bytes: &Bytes) -> Result<Fields, NotAnObject> {
    let first = (bytes.iter()).find(|b| !matches!(b, b' ' | b'\t' | b'\n' | b'\r'));
    if first != Some(&b'{') {
        // Not an object: whether it is JSON at all says which refusal it gets.
        let _: &RawValue = serde_json::from_slice(bytes).map_err(NotAnObject::Json)?;
        return Err(NotAnObject::Type);
    }
    // Read straight into the map (a field sent twice: its last), each value a slice of the
    // body.
    let mut fields = Fields::new();
    let read = choicewise_partial_json::for_each_raw_field(bytes, |key, value| {
        fields.insert(key.to_owned(), bytes.slice_ref(value.get().as_bytes()));
        Ok::<(), std::convert::Infallible>(())
    });
    match read.map_err(NotAnObject::Json)? {
        Ok(()) => Ok(fields),
        Err(never) => match never {},
    }
}

/// Writes a JSON object of `fields`, with `over` replacing (or adding) fields of the same
/// name (the last of a name in `over` the one written): each field's text is copied once,
/// in key order, `fields` (already in that order) merged with `over` sorted.
pub(crate) fn write_object(fields: &Fields, over: &[(&str, &[u8])]) -> Vec<u8> {
    let mut over = over.to_vec();
    // A stable sort: of two of one name, the later stays after, and is the one kept.
    over.sort_by_key(|(k, _)| *k);
    over.dedup_by(|later, kept| {
        let same = later.0 == kept.0;
        if same {
            *kept = *later;
        }
        same
    });
    let size: usize = (fields.iter().map(|(k, v)| k.len() + v.len()))
        .chain(over.iter().map(|(k, v)| k.len() + v.len()))
        .map(|n| n + 4)
        .sum();
    let mut out = Vec::with_capacity(size + 2);
    out.push(b'{');
    let mut over = over.into_iter().peekable();
    for (k, v) in fields.iter().map(|(k, v)| (k.as_str(), &v[..])) {
        // The replacements named before this field, then the field, or the one replacing it.
        while let Some((o, text)) = over.next_if(|(o, _)| *o < k) {
            member(&mut out, o, text);
        }
        match over.next_if(|(o, _)| *o == k) {
            Some((o, text)) => member(&mut out, o, text),
            None => member(&mut out, k, v),
        }
    }
    for (o, text) in over {
        member(&mut out, o, text);
    }
    out.push(b'}');
    out
}

/// One member `"k":text` of the object `out` is writing, after a comma unless it is the first.
fn member(out: &mut Vec<u8>, k: &str, text: &[u8]) {
    if out.len() > 1 {
        out.push(b',');
    }
    // A string always serialises.
    let _ = serde_json::to_writer(&mut *out, k);
    out.push(b':');
    out.extend_from_slice(text);
}

/// The fields of a parsed object, each serialised: for a body the gateway builds itself.
pub(crate) fn fields_of(map: Map<String, Value>) -> Fields {
    (map.into_iter())
        .map(|(k, v)| {
            // A value always serialises.
            let text = serde_json::to_vec(&v).unwrap_or_else(|_| b"null".to_vec());
            (k, Bytes::from(text))
        })
        .collect()
}

/// A JSON value, parsed or as its text: what [`kind_of`] names the type of.
pub(crate) enum Json<'a> {
    /// A parsed value.
    Value(&'a Value),
    /// A field's JSON text.
    Text(&'a [u8]),
}

impl<'a> From<&'a Value> for Json<'a> {
    fn from(v: &'a Value) -> Self {
        Json::Value(v)
    }
}

impl<'a> From<&'a [u8]> for Json<'a> {
    fn from(text: &'a [u8]) -> Self {
        Json::Text(text)
    }
}

impl<'a> From<&'a Bytes> for Json<'a> {
    fn from(text: &'a Bytes) -> Self {
        Json::Text(text)
    }
}

/// The JSON type of a value or of a field's text, for messages (`an object`, `a string`,
/// ...).
pub(crate) fn kind_of<'a>(json: impl Into<Json<'a>>) -> &'static str {
    let first = match json.into() {
        Json::Text(text) => text.first().copied(),
        Json::Value(v) => Some(match v {
            Value::Null => b'n',
            Value::Bool(_) => b't',
            Value::Number(_) => b'0',
            Value::String(_) => b'"',
            Value::Array(_) => b'[',
            Value::Object(_) => b'{',
        }),
    };
    match first {
        Some(b'{') => "an object",
        Some(b'[') => "an array",
        Some(b'"') => "a string",
        Some(b't' | b'f') => "a boolean",
        Some(b'n') => "null",
        _ => "a number",
    }
}

/// The most bytes a field the gateway parses into a tree (an object or an array) may have:
/// a parsed tree costs 20 to 80 times its text, so a larger one is refused before it is
/// parsed (issue 63). Strings and numbers parse into about their own size, and are not
/// bounded here.
pub(crate) const MAX_PARSED_FIELD: usize = 64 * 1024;

/// Why the field `key` of JSON text `text` may not be parsed into a tree: it is an object or
/// an array of more than [`MAX_PARSED_FIELD`] bytes.
pub(crate) fn too_large_to_parse(key: &str, text: &[u8]) -> Option<String> {
    let first = text.iter().find(|b| !b.is_ascii_whitespace());
    (matches!(first, Some(b'{' | b'[')) && text.len() > MAX_PARSED_FIELD).then(|| {
        format!(
            "{key:?} is {} bytes: a field the gateway parses may be at most {MAX_PARSED_FIELD} \
             bytes",
            text.len()
        )
    })
}

/// A field's text parsed, for a field the gateway reads: a 400 naming `key` when it cannot
/// be (nested deeper than the parser goes), or when it is too large to parse
/// ([`too_large_to_parse`]).
pub(crate) fn parse_field(key: &str, text: &[u8]) -> Result<Value, String> {
    if let Some(e) = too_large_to_parse(key, text) {
        return Err(e);
    }
    serde_json::from_slice(text).map_err(|e| format!("{key:?} could not be read: {e}"))
}

/// A Chat Completions field the gateway reads rather than passing it on as sent.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ChatField {
    pub name: &'static str,
    /// The gateway parses it into a tree somewhere (the request's own fields, the
    /// translation to another API, the prompt's count): refused when too large to parse
    /// ([`too_large_to_parse`]), before any field is parsed.
    pub parsed: bool,
    /// The translation to another upstream API reads or reshapes it
    /// (`Dialect::request_from_chat`); the others pass on as they are.
    pub translated: bool,
}

impl ChatField {
    const fn new(name: &'static str, parsed: bool, translated: bool) -> ChatField {
        ChatField {
            name,
            parsed,
            translated,
        }
    }
}

/// The Chat Completions fields the gateway reads, **one list**: a parsed field that is too
/// large is refused first in this order.
pub(crate) const CHAT_FIELDS: [ChatField; 23] = [
    ChatField::new("model", true, false),
    ChatField::new("n", true, true),
    ChatField::new("stream", true, false),
    ChatField::new("stream_options", true, true),
    ChatField::new("messages", false, true),
    ChatField::new("choicewise", true, false),
    ChatField::new("logprobs", true, false),
    ChatField::new("top_logprobs", true, false),
    ChatField::new("max_tokens", true, true),
    ChatField::new("max_completion_tokens", true, true),
    ChatField::new("stop", true, true),
    ChatField::new("seed", true, true),
    ChatField::new("tool_choice", true, true),
    ChatField::new("function_call", true, false),
    ChatField::new("reasoning_effort", true, true),
    ChatField::new("parallel_tool_calls", true, true),
    ChatField::new("prompt_cache_key", true, true),
    ChatField::new("user", true, true),
    ChatField::new("safety_identifier", true, true),
    ChatField::new("service_tier", true, true),
    ChatField::new("thinking", true, true),
    ChatField::new("reasoning", true, true),
    ChatField::new("temperature", true, false),
];

/// The field `key`'s entry in [`CHAT_FIELDS`], with its place there.
pub(crate) fn chat_field(key: &str) -> Option<(usize, &'static ChatField)> {
    CHAT_FIELDS.iter().enumerate().find(|(_, f)| f.name == key)
}

/// Whether the translation to another upstream API reads or reshapes the Chat Completions
/// field `key` ([`ChatField::translated`]).
pub(crate) fn is_translated(key: &str) -> bool {
    chat_field(key).is_some_and(|(_, f)| f.translated)
}

/// A checked request.
#[derive(Debug, Clone)]
pub(crate) struct ChatRequest {
    /// The model the client asked for (a configured name).
    pub model: String,
    /// Choices to return.
    pub n: u32,
    /// Samples to take upstream (at least `n`): the policy's.
    pub samples: u32,
    pub stream: bool,
    pub include_usage: bool,
    /// The client asked for log-probabilities (`"logprobs": true`): they pass through.
    pub logprobs: bool,
    /// How the samples are picked from: the request's `choicewise` extension merged over its
    /// model's default, or either alone ([`with_model`](Self::with_model)), else every
    /// sample a choice.
    pub policy: Policy,
    /// The request's `choicewise` extension as sent, if it carried one: merged over its
    /// model's default ([`with_model`](Self::with_model)).
    pub extension: Option<Map<String, Value>>,
    /// The body to send upstream, in Chat Completions' shape, without what the gateway
    /// decides (`model`, `n`, `stream`, `stream_options`, `choicewise`): raw fields,
    /// shared with the run that sends them.
    pub body: std::sync::Arc<Fields>,
}

fn err(message: String) -> ApiError {
    ApiError::invalid(message)
}

impl ChatRequest {
    /// Reads a request body.
    pub fn parse(bytes: &Bytes, limits: &Limits) -> Result<ChatRequest, ApiError> {
        let body = split_object(bytes).map_err(|e| match e {
            NotAnObject::Json(e) => {
                err(format!("the request body is not valid JSON: {e}")).code("invalid_json")
            }
            NotAnObject::Type => err("the request body must be a JSON object".into()),
        })?;
        ChatRequest::from_fields(body, limits)
    }

    /// Reads a request's fields (a body split, or one translated from another API): only
    /// those the gateway decides are parsed.
    pub fn from_fields(mut body: Fields, limits: &Limits) -> Result<ChatRequest, ApiError> {
        // The body's own fields, each looked up among the parsed ones (a body has few fields;
        // the first refused in `CHAT_FIELDS`' order).
        let too_large = (body.iter())
            .filter_map(|(key, text)| match chat_field(key)? {
                (i, field) if field.parsed => Some((i, key, text)),
                _ => None,
            })
            .filter_map(|(i, key, text)| Some((i, key, text, too_large_to_parse(key, text)?)))
            .min_by_key(|(i, ..)| *i);
        if let Some((_, key, text, e)) = too_large {
            if key == "choicewise"
                && let Some(refused) = pattern_refused(text, limits)
            {
                return Err(refused);
            }
            return Err(err(e).code("field_too_large").param(key));
        }
        let mut take = |key: &str| match body.remove(key) {
            None => Ok(None),
            Some(text) => parse_field(key, &text).map(Some).map_err(err),
        };
        let model = match take("model")? {
            Some(Value::String(m)) if !m.trim().is_empty() => m,
            Some(_) => return Err(err("\"model\" must be a non-empty string".into())),
            None => return Err(err("\"model\" is required".into()).code("missing_model")),
        };
        let n = match take("n")? {
            None | Some(Value::Null) => 1,
            Some(v) => match v.as_u64() {
                Some(n) if n >= 1 && n <= u64::from(limits.max_n) => n as u32,
                _ => {
                    return Err(err(format!(
                        "\"n\" must be an integer from 1 to {} (max_n), not {v}",
                        limits.max_n
                    ))
                    .code("invalid_n"));
                }
            },
        };
        let stream = match take("stream")? {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => b,
            Some(v) => return Err(err(format!("\"stream\" must be a boolean, not {v}"))),
        };
        let include_usage = match take("stream_options")? {
            None | Some(Value::Null) => false,
            Some(Value::Object(o)) => o
                .get("include_usage")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            Some(v) => {
                return Err(err(format!(
                    "\"stream_options\" must be an object, not {v}"
                )));
            }
        };
        let extension = match take("choicewise")? {
            None | Some(Value::Null) => None,
            Some(Value::Object(o)) => Some(o),
            Some(v) => return Err(err(format!("\"choicewise\" must be an object, not {v}"))),
        };
        // Every sample a choice until the model's pick and the extension are applied
        // (`with_model`), which checks the extension.
        let policy = Policy::from_json(&Map::new(), &limits.policy_limits(n)).map_err(refused)?;
        let logprobs = body.get("logprobs").map(|t| &t[..]) == Some(b"true");
        match body.get("messages") {
            Some(messages) if messages.first() == Some(&b'[') => {
                // Every item an object with a role its API knows, before any upstream.
                message_check::chat_messages(messages).map_err(ApiError::from)?;
            }
            _ => {
                return Err(err("\"messages\" must be an array".into()).code("invalid_messages"));
            }
        }
        Ok(ChatRequest {
            model,
            n,
            samples: policy.samples(),
            stream,
            include_usage,
            logprobs,
            policy,
            extension,
            body: std::sync::Arc::new(body),
        })
    }

    /// The names of its custom tools (`{"type": "custom", "custom": {"name": ...}}`, whose
    /// input is free text), read from the text of its `tools`, each tool on its own.
    pub fn custom_tools(&self) -> Vec<String> {
        let mut names = Vec::new();
        let Some(tools) = self.body.get("tools").filter(|t| t.first() == Some(&b'[')) else {
            return names;
        };
        #[derive(serde::Deserialize)]
        struct Tool {
            #[serde(rename = "type")]
            kind: Option<String>,
            custom: Option<Custom>,
        }
        #[derive(serde::Deserialize)]
        struct Custom {
            name: Option<String>,
        }
        let _ = choicewise_partial_json::for_each_raw_entry(tools, |_, raw| {
            if let Ok(Tool {
                kind: Some(kind),
                custom: Some(Custom { name: Some(name) }),
            }) = serde_json::from_str::<Tool>(raw.get())
                && kind == "custom"
            {
                names.push(name);
            }
            Ok::<(), ()>(())
        });
        names
    }

    /// Applies its model's pick as the operator set it (its [`ModelPick`] in `picks`; none
    /// for a model that is not configured, whose request is refused later) and checks the
    /// request's extension, by the merge rule of docs/gateway.md:
    ///
    /// - with `lock`, a request carrying an extension (even `{}`) is refused;
    /// - a request's `n`, or its merged `samples`, above the model's `max_samples` is refused,
    ///   naming the model and the cap;
    /// - without an extension, the model's default applies as it is;
    /// - with one, the extension is merged over the default ([`merge`]) and the result
    ///   checked against the request's `n`.
    pub fn with_model(
        mut self,
        picks: &crate::config::ByName<ModelPick>,
        limits: &Limits,
    ) -> Result<ChatRequest, ApiError> {
        let pick = picks.get(&self.model);
        let (model, default, lock, cap) = match pick {
            Some(p) => (p.model.as_str(), p.default.as_ref(), p.lock, p.max_samples),
            None => (self.model.as_str(), None, false, None),
        };
        if lock && self.extension.is_some() {
            return Err(err(format!(
                "the pick of model {model:?} is set by the operator (lock = true in its \
                 [models.choicewise]): leave out the \"choicewise\" extension"
            ))
            .code("choicewise_locked")
            .param("choicewise"));
        }
        let over_cap = |cap: u32, asked: u64, param: &str| {
            err(format!(
                "model {model:?} takes at most {cap} samples (its max_samples), and the request \
                 asks for {asked} ({param})"
            ))
            .code("invalid_samples")
            .param(param)
        };
        if let Some(cap) = cap
            && self.n > cap
        {
            return Err(over_cap(cap, u64::from(self.n), "n"));
        }
        let (fields, whose) = match (&self.extension, default) {
            (None, None) => return self.within_memory(limits, "n"),
            (None, Some(_)) => (None, " (the default of model"),
            (Some(ext), None) => (Some(ext.clone()), ""),
            (Some(ext), Some(default)) => (
                Some(merge(default, ext)),
                " (the request's extension merged over the default of model",
            ),
        };
        let asked = (fields.as_ref().or(default))
            .and_then(|f| f.get("samples"))
            .and_then(Value::as_u64);
        if let (Some(cap), Some(asked)) = (cap, asked)
            && asked > u64::from(cap)
        {
            return Err(over_cap(cap, asked, "choicewise.samples"));
        }
        let checks = limits
            .policy_limits(self.n)
            .max_samples(cap.unwrap_or(limits.max_samples));
        let policy = match (&fields, pick.and_then(|p| p.policy.as_ref())) {
            (None, Some(default)) => default.checked_for(&checks),
            (fields, _) => Policy::from_json(fields.as_ref().unwrap_or(&Map::new()), &checks),
        };
        let policy = policy.map_err(|e| {
            let mut e = refused(e);
            if !whose.is_empty() {
                e.message
                    .push_str(&format!("{whose} {model:?}, its [models.choicewise])"));
            }
            e
        })?;
        self.samples = policy.samples();
        self.policy = policy;
        self.within_memory(limits, "choicewise.samples")
    }

    /// The request, if its answer's worst case fits under the memory ceiling's high mark:
    /// its samples × `max_answer_bytes` × [`ANSWER_COST`](crate::config::ANSWER_COST) (what
    /// the gateway may hold per byte of an answer). Else refused before anything starts:
    /// 400 `samples_over_memory` naming `param` (where the samples were asked for), the
    /// most samples that fit, and the operator's caps that set it.
    fn within_memory(self, limits: &Limits, param: &str) -> Result<ChatRequest, ApiError> {
        let high = limits.memory_high();
        let Some(most) = limits.samples_within(high) else {
            return Ok(self);
        };
        let samples = self.samples.max(1);
        if samples <= most {
            return Ok(self);
        }
        const MIB: u64 = 1 << 20;
        let worst = limits.answer_worst(samples);
        let cost = format!(
            "the answer of {samples} sample{} may take up to {} MiB ({samples} × max_answer_bytes \
             {} MiB × {}, what the gateway may hold per byte of an answer), more than the \
             memory ceiling's high watermark ({} MiB)",
            if samples == 1 { "" } else { "s" },
            worst / MIB,
            limits.max_answer_bytes as u64 / MIB,
            crate::config::ANSWER_COST,
            high / MIB,
        );
        let remedy = match most {
            0 => "the operator lowers [limits] max_answer_bytes or raises memory_high_watermark_mb"
                .to_string(),
            _ => format!(
                "ask for at most {most} (or the operator lowers [limits] max_answer_bytes or \
                 raises memory_high_watermark_mb)"
            ),
        };
        Err(err(format!("{cost}: {remedy}"))
            .code("samples_over_memory")
            .param(param))
    }
}

/// The fields of the policies' JSON form that only some rules take: those of a model's
/// default that a request choosing another `select` leaves behind.
const RULE_FIELDS: [&str; 6] = [
    "hedge_after_ms",
    "vote_by",
    "vote_normalize",
    "min_votes",
    "window",
    "confidence",
];

/// A request's `choicewise` extension merged over its model's default (the merge rule of
/// docs/gateway.md): each field the request states (not `null`) replaces the model's, the
/// others stay the model's (an empty extension keeps the model's pick, its hedge included);
/// a request's `deadline_ms` may lower the model's, never raise it; a request that picks
/// another `select` than the model's keeps none of the model's fields that go with a rule
/// ([`RULE_FIELDS`]).
///
pub(crate) fn merge(
    default: &Map<String, Value>,
    request: &Map<String, Value>,
) -> Map<String, Value> {
    let mut merged = default.clone();
    let stated = |key: &str| request.get(key).filter(|v| !v.is_null());
    if let Some(select) = stated("select")
        && default.get("select") != Some(select)
    {
        for key in RULE_FIELDS {
            merged.remove(key);
        }
    }
    for (key, value) in request {
        if value.is_null() {
            continue;
        }
        let lower = match (key.as_str(), merged.get(key)) {
            ("deadline_ms", Some(model)) => match (model.as_u64(), value.as_u64()) {
                (Some(model_ms), Some(asked)) if asked > model_ms => Some(model.clone()),
                _ => None,
            },
            _ => None,
        };
        merged.insert(key.clone(), lower.unwrap_or_else(|| value.clone()));
    }
    merged
}

/// A `choicewise` extension too large to parse, refused for its `vote_by` when that is what
/// makes it large (its own, more telling 400: `vote_by_too_large`): its fields read one at a
/// time, the small ones and the strings parsed, and checked as a policy.
fn pattern_refused(text: &[u8], limits: &Limits) -> Option<ApiError> {
    let mut fields = Map::new();
    let read = choicewise_partial_json::for_each_raw_field(text, |key, raw| {
        let raw = raw.get();
        if raw.starts_with('"') || raw.len() <= MAX_PARSED_FIELD {
            fields.insert(key.to_string(), serde_json::from_str(raw)?);
        }
        Ok::<(), serde_json::Error>(())
    });
    if !matches!(read, Ok(Ok(()))) || !fields.contains_key("vote_by") {
        return None;
    }
    match Policy::from_json(&fields, &limits.policy_limits(1)) {
        Err(e) if e.kind() == PolicyErrorKind::PatternTooLarge => Some(refused(e)),
        _ => None,
    }
}

/// A refused policy as the client's 400, with the codes the extension's errors have.
fn refused(e: PolicyError) -> ApiError {
    let code = match e.kind() {
        PolicyErrorKind::Samples => Some("invalid_samples"),
        PolicyErrorKind::UnknownRule => Some("invalid_select"),
        PolicyErrorKind::PatternTooLarge => Some("vote_by_too_large"),
        _ => None,
    };
    // The extension names its fields `"choicewise.FIELD"`.
    let mut refused = err(e.message_naming(|field| format!("\"choicewise.{field}\"")));
    refused.param = Some(format!("choicewise.{}", e.field()));
    match code {
        Some(code) => refused.code(code),
        None => refused,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `write_object` merges as inserting each of `over` into the fields would: every
    /// order of names around the fields' own, names given twice (the last kept), escapes.
    #[test]
    fn a_written_object_is_the_fields_with_over_inserted() {
        let names = ["", "a", "b", "c", "m", "model", "z", "\"q\"", "é"];
        let mut cases = 0;
        for fields_mask in 0u32..(1 << 5) {
            // Of every other name, those the mask's bits choose.
            let fields: Fields = (names.iter().step_by(2).enumerate())
                .filter(|(j, _)| fields_mask & (1 << j) != 0)
                .map(|(j, k)| (k.to_string(), Bytes::from(j.to_string())))
                .collect();
            for a in 0..names.len() {
                for b in 0..names.len() {
                    let over: [(&str, &[u8]); 3] =
                        [(names[a], b"true"), (names[b], b"null"), (names[a], b"[1]")];
                    for over in [&over[..0], &over[..1], &over[..2], &over[..]] {
                        let mut expected: BTreeMap<&str, &[u8]> =
                            (fields.iter()).map(|(k, v)| (k.as_str(), &v[..])).collect();
                        for (k, v) in over {
                            expected.insert(k, v);
                        }
                        let expected = serde_json::to_string(
                            &(expected.into_iter())
                                .map(|(k, v)| {
                                    (k.to_string(), serde_json::from_slice::<Value>(v).unwrap())
                                })
                                .collect::<Map<String, Value>>(),
                        )
                        .unwrap();
                        let written = write_object(&fields, over);
                        assert_eq!(
                            std::str::from_utf8(&written).unwrap(),
                            expected,
                            "{fields:?} {over:?}"
                        );
                        cases += 1;
                    }
                }
            }
        }
        assert_eq!(cases, 32 * 81 * 4);
    }

    #[test]
    fn an_object_splits_as_a_map_of_its_raw_values() {
        let bodies = [
            r#"{"model":"m","n":2,"messages":[{"role":"user","content":"hi"}]}"#,
            " \n{ \"a\" : { \"b\" : [1, 2] } , \"a\": \"last wins\" }\t",
            r#"{"mod\u0065l":"escaped key","s":"x\"y","f":1.5e3,"t":true,"z":null}"#,
            "{}",
            r#"{"a":1} trailing"#,
            r#"{"a":1,}"#,
            r#"{"a" 1}"#,
            r#"{"a":01}"#,
            r#"{"a":"unterminated}"#,
            "{\"a\":\"\u{1}\"}",
        ];
        for body in bodies {
            let bytes = Bytes::from(body);
            let ours = split_object(&bytes);
            let map: Result<BTreeMap<String, &RawValue>, _> = serde_json::from_slice(&bytes);
            match (ours, map) {
                (Ok(ours), Ok(map)) => {
                    let map: Fields = (map.into_iter())
                        .map(|(k, v)| (k, Bytes::copy_from_slice(v.get().as_bytes())))
                        .collect();
                    assert_eq!(ours, map, "{body}");
                }
                (Err(NotAnObject::Json(ours)), Err(map)) => {
                    assert_eq!(ours.to_string(), map.to_string(), "{body}");
                }
                (ours, map) => panic!("{body}: {ours:?} against {map:?}"),
            }
        }
    }

    #[test]
    fn a_value_and_its_text_are_named_alike() {
        use serde_json::json;
        let values = [
            json!(null),
            json!(true),
            json!(false),
            json!(1.5),
            json!(-2),
            json!("s"),
            json!([1]),
            json!({"a": 1}),
        ];
        let names = [
            "null",
            "a boolean",
            "a boolean",
            "a number",
            "a number",
            "a string",
            "an array",
            "an object",
        ];
        for (value, name) in values.iter().zip(names) {
            let text = Bytes::from(serde_json::to_vec(value).unwrap());
            assert_eq!(kind_of(value), name, "{value}");
            assert_eq!(kind_of(&text), name, "{value}");
        }
    }

    fn parse(body: &str) -> Result<ChatRequest, ApiError> {
        let limits = Limits::default();
        ChatRequest::parse(&Bytes::from(body.to_string()), &limits)?
            .with_model(&Default::default(), &limits)
    }

    #[test]
    fn requests_are_checked_naming_what_is_wrong() {
        let ok = parse(r#"{"model": "m", "n": 3, "stream": true, "messages": []}"#).unwrap();
        assert_eq!((ok.n, ok.samples, ok.stream), (3, 3, true));
        assert_eq!(ok.policy.rule(), choicewise_core::PickRule::All);
        for (body, says) in [
            ("{", "not valid JSON"),
            ("[1]", "must be a JSON object"),
            (r#"{"messages": []}"#, "\"model\" is required"),
            (r#"{"model": "m", "n": 17, "messages": []}"#, "max_n"),
            (r#"{"model": "m", "n": 0, "messages": []}"#, "\"n\" must be"),
            (
                r#"{"model": "m", "n": 2, "choicewise": {"samples": 1, "select": "vote"}, "messages": []}"#,
                "from n (2)",
            ),
            (
                r#"{"model": "m", "choicewise": {"samples": 17, "select": "vote"}, "messages": []}"#,
                "max_samples",
            ),
            (
                r#"{"model": "m", "choicewise": {"samples": 3, "select": "best"}, "messages": []}"#,
                "unknown \"choicewise.select\"",
            ),
            (
                r#"{"model": "m", "choicewise": {"samples": 3}, "messages": []}"#,
                "needs \"choicewise.select\"",
            ),
            (
                r#"{"model": "m", "choicewise": {"samples": 3, "select": "vote", "vote_by": "("}, "messages": []}"#,
                "not a valid regular",
            ),
            (
                r#"{"model": "m", "choicewise": {"samples": 3, "select": "vote", "hedge_after_ms": 5}, "messages": []}"#,
                "goes with",
            ),
            (r#"{"model": "m"}"#, "\"messages\" must be an array"),
        ] {
            let e = parse(body).unwrap_err();
            assert_eq!(e.status, 400, "{body}");
            assert!(e.message.contains(says), "{body}: {}", e.message);
        }
        let hedged = parse(r#"{"model": "m", "choicewise": {"samples": 3, "select": "first_token", "hedge_after_ms": 250}, "messages": []}"#).unwrap();
        assert_eq!(
            (hedged.policy.rule(), hedged.policy.hedge_after()),
            (
                choicewise_core::PickRule::FirstToken,
                Some(std::time::Duration::from_millis(250))
            )
        );
        assert!(!hedged.body.contains_key("choicewise"));
    }

    #[test]
    fn a_requests_extension_is_merged_over_the_models_default() {
        let merged = |model: Value, request: Value| {
            Value::Object(merge(
                model.as_object().unwrap(),
                request.as_object().unwrap(),
            ))
        };
        let hedged = serde_json::json!({"samples": 2, "select": "first_token", "hedge_after_ms": 400, "deadline_ms": 5000});
        // Nothing stated: the model's, whole.
        assert_eq!(merged(hedged.clone(), serde_json::json!({})), hedged);
        assert_eq!(
            merged(hedged.clone(), serde_json::json!({"hedge_after_ms": null})),
            hedged
        );
        // The fields stated replace the model's; the deadline may only be lowered.
        assert_eq!(
            merged(
                hedged.clone(),
                serde_json::json!({"samples": 16, "deadline_ms": 9000})
            ),
            serde_json::json!({"samples": 16, "select": "first_token", "hedge_after_ms": 400, "deadline_ms": 5000})
        );
        assert_eq!(
            merged(hedged.clone(), serde_json::json!({"deadline_ms": 300}))["deadline_ms"],
            300
        );
        // Another rule leaves the model's rule's fields behind, not its samples or deadline.
        assert_eq!(
            merged(hedged.clone(), serde_json::json!({"select": "vote"})),
            serde_json::json!({"samples": 2, "select": "vote", "deadline_ms": 5000})
        );
        let vote =
            serde_json::json!({"select": "vote", "samples": 5, "vote_by": "x", "min_votes": 2});
        assert_eq!(
            merged(
                vote.clone(),
                serde_json::json!({"select": "vote", "samples": 3})
            ),
            serde_json::json!({"select": "vote", "samples": 3, "vote_by": "x", "min_votes": 2})
        );
        // A bad value stated is the request's, for its own error.
        assert_eq!(
            merged(hedged, serde_json::json!({"deadline_ms": "soon"}))["deadline_ms"],
            "soon"
        );
    }

    #[test]
    fn a_parsed_field_too_large_is_refused_the_first_in_its_order() {
        let big = |key: &str| format!(r#""{key}": [{}0]"#, "0,".repeat(MAX_PARSED_FIELD / 2));
        // `seed` sorts before `stop` by name; `stop` comes first in the order the fields
        // are checked.
        let body = format!(
            r#"{{"model": "m", "messages": [], {}, {}, {}}}"#,
            big("thinking"),
            big("seed"),
            big("stop")
        );
        let e = parse(&body).unwrap_err();
        assert_eq!(e.code.as_deref(), Some("field_too_large"));
        assert_eq!(e.param.as_deref(), Some("stop"), "{}", e.message);
        let body = format!(
            r#"{{"model": "m", "messages": [], {}}}"#,
            big("tool_choice")
        );
        let e = parse(&body).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("tool_choice"), "{}", e.message);
        assert!(e.message.contains("at most 65536 bytes"), "{}", e.message);
        // A field the gateway does not parse may be as large as the body.
        let body = format!(r#"{{"model": "m", "messages": [], {}}}"#, big("metadata"));
        assert!(parse(&body).is_ok());
    }

    #[test]
    fn fields_stay_as_sent_and_are_written_over_once() {
        let body = Bytes::from_static(
            br#" {"model": "m", "tools": [ {"a" : 1} ], "x": null, "x": {"k": [1, 2]},
                 "messages": [], "n": 2, "\u0041": "\u00e9"} "#,
        );
        let fields = split_object(&body).unwrap();
        assert_eq!(&fields["tools"][..], br#"[ {"a" : 1} ]"#);
        // A field sent twice is its last text, as when the body is parsed whole.
        assert_eq!(&fields["x"][..], br#"{"k": [1, 2]}"#);
        assert_eq!(&fields["A"][..], br#""\u00e9""#);
        let req = ChatRequest::from_fields(fields, &Limits::default()).unwrap();
        assert_eq!((req.model.as_str(), req.n), ("m", 2));
        assert!(!req.body.contains_key("model") && !req.body.contains_key("n"));
        let written = write_object(&req.body, &[("model", br#""up""#), ("x", b"null")]);
        let value: Value = serde_json::from_slice(&written).unwrap();
        assert_eq!(
            value,
            serde_json::json!({"A": "é", "messages": [], "model": "up", "tools": [{"a": 1}], "x": null})
        );
        for (bad, not_json) in [
            (&b"{"[..], true),
            (b"[{}]", false),
            (b" 3", false),
            (b"", true),
        ] {
            match split_object(&Bytes::from_static(bad)) {
                Err(NotAnObject::Json(_)) => assert!(not_json, "{bad:?}"),
                Err(NotAnObject::Type) => assert!(!not_json, "{bad:?}"),
                Ok(_) => panic!("{bad:?} was read"),
            }
        }
    }
}
