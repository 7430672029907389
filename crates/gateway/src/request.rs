//! A client's request as the gateway reads it: the model, `n`, `stream`, the usage option, and
//! the `choicewise` extension, each checked against the limits (400 naming what is wrong).

use std::collections::BTreeMap;

use bytes::Bytes;
use choicewise_core::{Policy, PolicyError, PolicyErrorKind};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::config::Limits;
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
    let fields: BTreeMap<String, &RawValue> =
        serde_json::from_slice(bytes).map_err(NotAnObject::Json)?;
    Ok((fields.into_iter())
        .map(|(k, v)| (k, bytes.slice_ref(v.get().as_bytes())))
        .collect())
}

/// Writes a JSON object of `fields`, with `over` replacing (or adding) fields of the same
/// name: each field's text is copied once, in key order.
pub(crate) fn write_object(fields: &Fields, over: &[(&str, &[u8])]) -> Vec<u8> {
    let mut all: BTreeMap<&str, &[u8]> =
        (fields.iter()).map(|(k, v)| (k.as_str(), &v[..])).collect();
    for (k, v) in over {
        all.insert(k, v);
    }
    let size: usize = all.iter().map(|(k, v)| k.len() + v.len() + 4).sum();
    let mut out = Vec::with_capacity(size + 2);
    out.push(b'{');
    for (i, (k, v)) in all.into_iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        // A string always serialises.
        let _ = serde_json::to_writer(&mut out, k);
        out.push(b':');
        out.extend_from_slice(v);
    }
    out.push(b'}');
    out
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

/// The JSON type of a field's text, for messages (`an object`, `a string`, ...).
pub(crate) fn kind_of_text(text: &[u8]) -> &'static str {
    match text.first() {
        Some(b'{') => "an object",
        Some(b'[') => "an array",
        Some(b'"') => "a string",
        Some(b't' | b'f') => "a boolean",
        Some(b'n') => "null",
        _ => "a number",
    }
}

/// A field's text parsed, for a field the gateway reads: a 400 naming `key` when it cannot
/// be (nested deeper than the parser goes).
pub(crate) fn parse_field(key: &str, text: &[u8]) -> Result<Value, String> {
    serde_json::from_slice(text).map_err(|e| format!("{key:?} could not be read: {e}"))
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
    /// How the samples are picked from: the request's `choicewise` extension, else its
    /// model's default ([`with_default`](Self::with_default)), else every sample a choice.
    pub policy: Policy,
    /// Whether the request carried a `choicewise` extension (a model's default then does
    /// not apply).
    pub extension: bool,
    /// The body to send upstream, in Chat Completions' shape, without what the gateway
    /// decides (`model`, `n`, `stream`, `stream_options`, `choicewise`): raw fields.
    pub body: Fields,
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
        let (extension, fields) = match take("choicewise")? {
            None | Some(Value::Null) => (false, Map::new()),
            Some(Value::Object(o)) => (true, o),
            Some(v) => return Err(err(format!("\"choicewise\" must be an object, not {v}"))),
        };
        let policy = Policy::from_json(&fields, &limits.policy_limits(n)).map_err(refused)?;
        let logprobs = body.get("logprobs").map(|t| &t[..]) == Some(b"true");
        if body.get("messages").and_then(|m| m.first()) != Some(&b'[') {
            return Err(err("\"messages\" must be an array".into()).code("invalid_messages"));
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
            body,
        })
    }

    /// Applies its model's default policy (`[models.choicewise]`) when the request carried
    /// no extension: a request's extension replaces the default wholly. The default is
    /// checked again against the request's `n` (its `samples` must be at least `n`).
    pub fn with_default(
        mut self,
        default: Option<&Policy>,
        limits: &Limits,
    ) -> Result<ChatRequest, ApiError> {
        let Some(default) = default.filter(|_| !self.extension) else {
            return Ok(self);
        };
        let policy = default
            .checked_for(&limits.policy_limits(self.n))
            .map_err(|e| {
                let mut e = refused(e);
                e.message.push_str(&format!(
                    " (the default of model {:?}, its [models.choicewise])",
                    self.model
                ));
                e
            })?;
        self.samples = policy.samples();
        self.policy = policy;
        Ok(self)
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
    let mut refused = err(e.to_string());
    refused.param = Some(format!("choicewise.{}", e.field()));
    match code {
        Some(code) => refused.code(code),
        None => refused,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(body: &str) -> Result<ChatRequest, ApiError> {
        ChatRequest::parse(&Bytes::from(body.to_string()), &Limits::default())
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
