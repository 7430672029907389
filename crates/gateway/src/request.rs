//! A client's request as the gateway reads it: the model, `n`, `stream`, the usage option, and
//! the `choicewise` extension, each checked against the limits (400 naming what is wrong).

use std::time::Duration;

use serde_json::{Map, Value};

use crate::config::Limits;
use crate::error::ApiError;

/// How the samples are picked from.
#[derive(Debug, Clone)]
pub(crate) enum Select {
    /// Every sample is a choice (`samples` = `n`).
    All,
    /// The first samples to produce content or a tool call, streamed live; with a hedge, the
    /// next sample starts only if none has produced this long after the last started.
    FirstToken { hedge_after: Option<Duration> },
    /// The first samples to finish with `stop` or `tool_calls`.
    FirstFinished,
    /// A plurality vote over each finished sample's key (its trimmed content, or the first
    /// capture of `by`), decided early; `window`: samples started window by window.
    Vote {
        key: choicewise_core::VoteKey,
        window: Option<usize>,
        /// DeepConf online: samples stopped for low confidence, the vote weighted by it.
        confidence: Option<choicewise_core::Confidence>,
    },
}

/// A checked request.
#[derive(Debug, Clone)]
pub(crate) struct ChatRequest {
    /// The model the client asked for (a configured name).
    pub model: String,
    /// Choices to return.
    pub n: u32,
    /// Samples to take upstream (at least `n`).
    pub samples: u32,
    pub stream: bool,
    pub include_usage: bool,
    /// The client asked for log-probabilities (`"logprobs": true`): they pass through.
    pub logprobs: bool,
    pub select: Select,
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
        let extension = match body.remove("choicewise") {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(o)) => o,
            Some(v) => return Err(err(format!("\"choicewise\" must be an object, not {v}"))),
        };
        let (samples, select) = extension_of(&extension, n, limits)?;
        let logprobs = body.get("logprobs").and_then(Value::as_bool) == Some(true);
        if !matches!(body.get("messages"), Some(Value::Array(_))) {
            return Err(err("\"messages\" must be an array".into()).code("invalid_messages"));
        }
        Ok(ChatRequest {
            model,
            n,
            samples,
            stream,
            include_usage,
            logprobs,
            select,
            body,
        })
    }
}

/// `choicewise.confidence`: DeepConf online's parameters (`warmup`, `keep`, `group_tokens`,
/// `top_logprobs`, `consensus`), each optional with the library's defaults (8, 0.9, 64, 5,
/// 0.95).
fn confidence_of(
    ext: &Map<String, Value>,
) -> Result<Option<choicewise_core::Confidence>, ApiError> {
    let options = match ext.get("confidence") {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Object(o)) => o,
        Some(v) => {
            return Err(err(format!(
                "\"choicewise.confidence\" must be an object, not {v}"
            )));
        }
    };
    let mut c = choicewise_core::Confidence::new();
    for (key, v) in options {
        let whole = |lo: u64, hi: u64| {
            v.as_u64().filter(|x| (lo..=hi).contains(x)).map(|x| x as usize).ok_or_else(|| {
                err(format!(
                    "\"choicewise.confidence.{key}\" must be an integer from {lo} to {hi}, not {v}"
                ))
            })
        };
        let share = || {
            v.as_f64().filter(|x| *x > 0.0 && *x <= 1.0).ok_or_else(|| {
                err(format!(
                    "\"choicewise.confidence.{key}\" must be a number above 0 and at most 1, not {v}"
                ))
            })
        };
        c = match key.as_str() {
            "warmup" => c.warmup(whole(1, 64)?),
            "keep" => c.keep(share()?),
            "group_tokens" => c.group_tokens(whole(1, 100_000)?),
            "top_logprobs" => c.top_logprobs(whole(1, 20)?),
            "consensus" => c.consensus(share()?),
            _ => {
                return Err(err(format!(
                    "unknown field \"choicewise.confidence.{key}\" (warmup, keep, group_tokens, top_logprobs, consensus)"
                )));
            }
        };
    }
    Ok(Some(c))
}

/// The `choicewise` extension: `samples`, `select`, `vote_by`, `hedge_after_ms`, `window`,
/// `confidence`.
fn extension_of(
    ext: &Map<String, Value>,
    n: u32,
    limits: &Limits,
) -> Result<(u32, Select), ApiError> {
    for key in ext.keys() {
        if !matches!(
            key.as_str(),
            "samples" | "select" | "vote_by" | "hedge_after_ms" | "window" | "confidence"
        ) {
            return Err(err(format!(
                "unknown field \"choicewise.{key}\" (samples, select, vote_by, hedge_after_ms, window, confidence)"
            )));
        }
    }
    let samples = match ext.get("samples") {
        None | Some(Value::Null) => n,
        Some(v) => match v.as_u64() {
            Some(k) if k >= u64::from(n) && k <= u64::from(limits.max_samples) => k as u32,
            _ => {
                return Err(err(format!(
                    "\"choicewise.samples\" must be an integer from n ({n}) to {} (max_samples), not {v}",
                    limits.max_samples
                ))
                .code("invalid_samples"));
            }
        },
    };
    let vote_by =
        match ext.get("vote_by") {
            None | Some(Value::Null) => None,
            // Bounded in length and nesting before it is parsed, then compiled within
            // `VOTE_PATTERN_SIZE_LIMIT`: a client's expression costs a bounded few milliseconds
            // and megabytes at most.
            Some(Value::String(re)) => Some(choicewise_core::VoteKey::pattern(re).map_err(
                |e| match e.too_large() {
                    true => err(format!("\"choicewise.vote_by\" is {e}")).code("vote_by_too_large"),
                    false => err(format!("\"choicewise.vote_by\" is {e}")),
                },
            )?),
            Some(v) => {
                return Err(err(format!(
                    "\"choicewise.vote_by\" must be a string, not {v}"
                )));
            }
        };
    let hedge = match ext.get("hedge_after_ms") {
        None | Some(Value::Null) => None,
        Some(v) => match v.as_u64() {
            Some(ms) => Some(Duration::from_millis(ms)),
            None => {
                return Err(err(format!(
                    "\"choicewise.hedge_after_ms\" must be a whole number of milliseconds, not {v}"
                )));
            }
        },
    };
    let window = match ext.get("window") {
        None | Some(Value::Null) => None,
        Some(v) => match v.as_u64() {
            Some(w) if w >= 1 => Some(w as usize),
            _ => {
                return Err(err(format!(
                    "\"choicewise.window\" must be an integer of 1 or more, not {v}"
                )));
            }
        },
    };
    let select = match ext.get("select") {
        None | Some(Value::Null) if samples == n && window.is_none() => Select::All,
        None | Some(Value::Null) => {
            return Err(err(
                "\"choicewise.samples\" above n needs \"choicewise.select\" (first_token, first_finished or vote)".into(),
            ));
        }
        Some(Value::String(s)) => match s.as_str() {
            "first_token" => Select::FirstToken { hedge_after: hedge },
            "first_finished" => Select::FirstFinished,
            "vote" => Select::Vote {
                key: vote_by
                    .clone()
                    .unwrap_or_else(choicewise_core::VoteKey::content),
                window,
                confidence: confidence_of(ext)?,
            },
            other => {
                return Err(err(format!(
                    "unknown \"choicewise.select\": {other:?} (first_token, first_finished or vote)"
                ))
                .code("invalid_select"));
            }
        },
        Some(v) => {
            return Err(err(format!(
                "\"choicewise.select\" must be a string, not {v}"
            )));
        }
    };
    if hedge.is_some() && !matches!(select, Select::FirstToken { .. }) {
        return Err(err(
            "\"choicewise.hedge_after_ms\" goes with \"select\": \"first_token\"".into(),
        ));
    }
    if window.is_some() && !matches!(select, Select::Vote { .. }) {
        return Err(err(
            "\"choicewise.window\" goes with \"select\": \"vote\"".into()
        ));
    }
    if ext.get("confidence").is_some_and(|c| !c.is_null()) && !matches!(select, Select::Vote { .. })
    {
        return Err(err(
            "\"choicewise.confidence\" goes with \"select\": \"vote\"".into(),
        ));
    }
    if vote_by.is_some() && !matches!(select, Select::Vote { .. }) {
        return Err(err(
            "\"choicewise.vote_by\" goes with \"select\": \"vote\"".into()
        ));
    }
    Ok((samples, select))
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
        assert!(matches!(ok.select, Select::All));
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
        assert!(
            matches!(hedged.select, Select::FirstToken { hedge_after: Some(d) } if d == Duration::from_millis(250))
        );
        assert!(!hedged.body.contains_key("choicewise"));
    }
}
