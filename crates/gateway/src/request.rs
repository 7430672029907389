//! A client's request as the gateway reads it: the model, `n`, `stream`, the usage option, and
//! the `choicewise` extension, each checked against the limits (400 naming what is wrong).

use choicewise_core::{Policy, PolicyError, PolicyErrorKind};
use serde_json::{Map, Value};

use crate::config::Limits;
use crate::error::ApiError;

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
    /// decides (`model`, `n`, `stream`, `stream_options`, `choicewise`).
    pub body: Map<String, Value>,
}

fn err(message: String) -> ApiError {
    ApiError::invalid(message)
}

impl ChatRequest {
    /// Reads a request body.
    pub fn parse(bytes: &[u8], limits: &Limits) -> Result<ChatRequest, ApiError> {
        let value: Value = serde_json::from_slice(bytes).map_err(|e| {
            err(format!("the request body is not valid JSON: {e}")).code("invalid_json")
        })?;
        let Value::Object(mut body) = value else {
            return Err(err("the request body must be a JSON object".into()));
        };
        let model = match body.remove("model") {
            Some(Value::String(m)) if !m.trim().is_empty() => m,
            Some(_) => return Err(err("\"model\" must be a non-empty string".into())),
            None => return Err(err("\"model\" is required".into()).code("missing_model")),
        };
        let n = match body.remove("n") {
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
        let stream = match body.remove("stream") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => b,
            Some(v) => return Err(err(format!("\"stream\" must be a boolean, not {v}"))),
        };
        let include_usage = match body.remove("stream_options") {
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
        let (extension, fields) = match body.remove("choicewise") {
            None | Some(Value::Null) => (false, Map::new()),
            Some(Value::Object(o)) => (true, o),
            Some(v) => return Err(err(format!("\"choicewise\" must be an object, not {v}"))),
        };
        let policy = Policy::from_json(&fields, &limits.policy_limits(n)).map_err(refused)?;
        let logprobs = body.get("logprobs").and_then(Value::as_bool) == Some(true);
        if !matches!(body.get("messages"), Some(Value::Array(_))) {
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
        ChatRequest::parse(body.as_bytes(), &Limits::default())
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
}
