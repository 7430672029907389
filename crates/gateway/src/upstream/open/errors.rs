//! What the client gets when an upstream request failed: the upstream's own 4xx passed on,
//! else a 502 naming the model, the upstream and why; and the run's answer when its tries
//! ran out (all failed, the retry budget spent, the run's bound of upstream requests).

use std::time::{Duration, Instant};

use axum::http::StatusCode;
use choicewise_client::{ClientError, ClientErrorKind};
use serde_json::Value;

use super::{Failed, Opener, UpstreamRoute};
use crate::error::ApiError;
use crate::upstream::resilience::Outcome;

impl Opener {
    /// The answer when the run reached `max_upstream_requests_per_request`: 502 naming the
    /// bound, and the tries that failed before it.
    pub(super) fn too_many_requests(&self, failed: &[Failed]) -> ApiError {
        let mut e = self.failure(failed, false);
        let bound = format!(
            "model {:?}: the request reached its bound of {} upstream requests (max_upstream_requests_per_request)",
            self.model.name, self.max_requests
        );
        e.status = StatusCode::BAD_GATEWAY;
        e.message = match failed.is_empty() {
            true => bound,
            false => format!("{bound}; {}", e.message),
        };
        e.code("upstream_requests_bound")
    }

    /// The answer when every try failed: 429 with the smallest `Retry-After` when every
    /// try was a 429, else 502 listing each try.
    /// A retry a budget refused (`budget`: `model`, or the upstream's label): the probe it
    /// was handed out, if any, is not made (the next try may probe); counted, logged, and
    /// the client's error says the budget is spent.
    pub(super) fn budget_refused(
        &self,
        failed: &[Failed],
        probed: Option<&UpstreamRoute>,
        budget: &str,
    ) -> ApiError {
        if let Some(route) = probed {
            route.health.probe_over();
        }
        self.metrics.retry_budget_exhausted();
        if let Some(left_out) = self.model.warnings.allow("budget", Instant::now()) {
            tracing::warn!(model = %self.model.name, budget, left_out, "retry budget exhausted");
        }
        self.failure(failed, true)
    }

    pub(super) fn failure(&self, failed: &[Failed], budget: bool) -> ApiError {
        let name = &self.model.name;
        if !failed.is_empty() && failed.iter().all(|f| f.outcome == Outcome::TooMany) {
            let wait = (failed.iter())
                .filter_map(|f| f.retry_after)
                .min()
                .map(|w| w.min(Duration::from_secs(300)));
            let mut e = ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "rate_limit_error",
                format!("model {name:?}: every upstream answered 429; retry later"),
            )
            .code("upstream_rate_limited");
            e.retry_after = wait.map(|w| w.as_secs_f64().ceil() as u64);
            return e;
        }
        let tries: Vec<String> = (failed.iter())
            .map(|f| format!("{} {} ({})", f.upstream, f.outcome.as_str(), f.message))
            .collect();
        let mut message = match tries.is_empty() {
            true => format!("model {name:?}: no upstream could be tried (every one is ejected)"),
            false => format!(
                "model {name:?}: every try failed before a first byte: {}",
                tries.join("; ")
            ),
        };
        if budget {
            message.push_str("; the retry budget is spent, so no more tries were made");
        }
        ApiError::new(StatusCode::BAD_GATEWAY, "upstream_error", message).code("upstream_failed")
    }
}

/// A failed try's cause, naming no URL (which may hold credentials).
pub(super) fn why(e: &ClientError) -> String {
    match e.kind() {
        ClientErrorKind::Connect => format!("could not connect: {}", e.message()),
        ClientErrorKind::Timeout => "no answer in time".to_string(),
        _ => e.to_string(),
    }
}

/// The error a failed upstream request is to the client: its own 4xx passed through with the
/// upstream named, anything else (a 3xx, a refused connection, a timeout) a 502 naming the
/// model, the upstream's API and host. A 400 to a request of `samples` > 1 in one (native
/// `n`) says how many were asked, and names `max_n`: the likely cause is a provider serving
/// fewer per request.
pub(crate) fn upstream_error(
    model: &str,
    u: &UpstreamRoute,
    e: &ClientError,
    samples: usize,
) -> ApiError {
    match e.status() {
        // The upstream refused the gateway's own credentials: the gateway's failure, not the
        // client's (whose SDK would blame its own key), and the provider's message is left
        // out (it may quote part of the key).
        Some(status @ (401 | 403 | 407)) => ApiError::new(
            StatusCode::BAD_GATEWAY,
            "upstream_error",
            format!(
                "model {model:?}: the {} upstream at {} refused the gateway's credentials ({status})",
                u.api, u.host
            ),
        )
        .code("upstream_credentials"),
        Some(status @ 400..=499) => {
            let error_field = |key: &str| {
                e.body()
                    .and_then(|b| b.pointer(&format!("/error/{key}")))
                    .and_then(Value::as_str)
                    .map(str::to_string)
            };
            let mut message = format!(
                "the {} upstream {} answered {status}: {}",
                u.api,
                u.host,
                e.message()
            );
            if status == 400 && samples > 1 {
                let limit = match u.max_n {
                    Some(max) => format!("its max_n is {max}"),
                    None => "it has no max_n".to_string(),
                };
                message.push_str(&format!(
                    " (model {model:?} asked it for {samples} samples in one request with n = {samples}, \
                     and {limit}: if it serves fewer per request, set max_n on that upstream \
                     in the config, or n = \"fan-out\")"
                ));
            }
            let mut error = ApiError::new(
                StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST),
                "upstream_error",
                message,
            );
            error.code = error_field("code");
            if let Some(kind) = error_field("type") {
                // The provider's own type, kept when it is one of the usual words.
                error.kind = match kind.as_str() {
                    "invalid_request_error" => "invalid_request_error",
                    "authentication_error" => "authentication_error",
                    "permission_error" => "permission_error",
                    "not_found_error" => "not_found_error",
                    "rate_limit_error" | "rate_limit_exceeded" => "rate_limit_error",
                    _ => "upstream_error",
                };
            }
            error
        }
        _ => ApiError::new(
            StatusCode::BAD_GATEWAY,
            "upstream_error",
            format!(
                "model {model:?}: the {} upstream at {} failed before its stream began: {}",
                u.api,
                u.host,
                why(e)
            ),
        )
        .code("upstream_failed"),
    }
}
