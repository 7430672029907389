//! Log-probabilities an upstream refuses: a confidence-guided vote asks a Chat Completions
//! upstream for them on its own, and some servers refuse them for some requests (llama.cpp's
//! server: "logprobs is not supported with tools + stream"). Such a refusal is the gateway's
//! doing, not the client's: the sample is asked again without them, the vote goes on as a
//! plain vote where no sample carries them, and the refusal is remembered by upstream and by
//! the request's shape so that the next request of that shape is not refused first.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use choicewise_client::ClientError;

/// How long a refusal is remembered: an upstream upgraded meanwhile is asked again after it.
const REMEMBERED: Duration = Duration::from_secs(3600);

/// What a request asks that changes whether an upstream takes log-probabilities.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shape {
    /// The request carries tools (every upstream request is streamed).
    WithTools,
    Plain,
}

impl Shape {
    /// The shape of a request whose Chat Completions fields are `body`.
    pub(crate) fn of(body: &crate::request::Fields) -> Shape {
        // A list with something in it: not `null`, not `[]` (spaces inside or not).
        let tools = body.get("tools").is_some_and(|t| {
            t.trim_ascii()
                .strip_prefix(b"[")
                .is_some_and(|rest| !rest.trim_ascii_start().starts_with(b"]"))
        });
        match tools {
            true => Shape::WithTools,
            false => Shape::Plain,
        }
    }

    /// The shape in words, for the answer's `confidence.unavailable` and the log.
    pub(crate) fn words(self) -> &'static str {
        match self {
            Shape::WithTools => "a streamed request with tools",
            Shape::Plain => "a streamed request",
        }
    }
}

/// One upstream's refusals of log-probabilities, by shape: when each was learnt and the
/// upstream's own message.
#[derive(Debug, Default)]
pub(crate) struct Refusals {
    by_shape: Mutex<[Option<(Instant, String)>; 2]>,
}

impl Refusals {
    fn slot(shape: Shape) -> usize {
        match shape {
            Shape::WithTools => 0,
            Shape::Plain => 1,
        }
    }

    /// The upstream's message, when it refused log-probabilities for requests of `shape`
    /// within the last hour.
    pub(crate) fn refused(&self, shape: Shape, now: Instant) -> Option<String> {
        let by_shape = self.by_shape.lock().unwrap_or_else(|p| p.into_inner());
        let (at, message) = by_shape[Self::slot(shape)].as_ref()?;
        (now.saturating_duration_since(*at) < REMEMBERED).then(|| message.clone())
    }

    /// Remembers that the upstream refused log-probabilities for requests of `shape`.
    pub(crate) fn remember(&self, shape: Shape, message: String, now: Instant) {
        let mut by_shape = self.by_shape.lock().unwrap_or_else(|p| p.into_inner());
        by_shape[Self::slot(shape)] = Some((now, message));
    }
}

/// Whether `e`, the answer to a request that asked for log-probabilities the client did not
/// ask for, refuses them: a 400 or 422 whose message names them. Its message when so.
pub(crate) fn refuses_logprobs(e: &ClientError) -> Option<String> {
    if !matches!(e.status(), Some(400 | 422)) {
        return None;
    }
    let message = e.message();
    message
        .to_ascii_lowercase()
        .contains("logprob")
        .then(|| message.chars().take(200).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_is_remembered_by_shape_for_an_hour() {
        let refusals = Refusals::default();
        let now = Instant::now();
        assert_eq!(refusals.refused(Shape::WithTools, now), None);
        refusals.remember(Shape::WithTools, "no logprobs with tools".into(), now);
        let said = refusals.refused(Shape::WithTools, now + Duration::from_secs(60));
        assert_eq!(said.as_deref(), Some("no logprobs with tools"));
        assert_eq!(refusals.refused(Shape::Plain, now), None);
        assert_eq!(refusals.refused(Shape::WithTools, now + REMEMBERED), None);
    }

    #[test]
    fn a_request_has_tools_when_it_lists_some() {
        let shape = |body: &str| {
            let fields = crate::request::split_object(&bytes::Bytes::from(body.to_string()));
            Shape::of(&fields.unwrap())
        };
        assert_eq!(
            shape(r#"{"tools": [{"type": "function"}]}"#),
            Shape::WithTools
        );
        assert_eq!(shape(r#"{"tools": []}"#), Shape::Plain);
        assert_eq!(shape(r#"{"tools": [ ]}"#), Shape::Plain);
        assert_eq!(shape(r#"{"tools": null}"#), Shape::Plain);
        assert_eq!(shape(r#"{"messages": []}"#), Shape::Plain);
    }
}
