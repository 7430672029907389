//! Errors as the gateway answers them: OpenAI's shape, `{"error": {"message", "type",
//! "code"}}`, with the status that says what went wrong.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// An error answer.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ApiError {
    pub status: StatusCode,
    pub message: String,
    pub kind: &'static str,
    pub code: Option<String>,
    /// The request field concerned, when there is one.
    pub param: Option<String>,
    /// Seconds the client should wait before another try (a `Retry-After` header).
    pub retry_after: Option<u64>,
}

impl ApiError {
    pub fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            message: message.into(),
            kind,
            code: None,
            param: None,
            retry_after: None,
        }
    }

    /// 400: the request is not one the gateway serves.
    pub fn invalid(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::BAD_REQUEST, "invalid_request_error", message)
    }

    pub fn code(mut self, code: &str) -> Self {
        self.code = Some(code.to_string());
        self
    }

    /// Naming the request field concerned.
    pub fn param(mut self, param: &str) -> Self {
        self.param = Some(param.to_string());
        self
    }

    /// With a `Retry-After` of `seconds`.
    pub fn wait(mut self, seconds: u64) -> Self {
        self.retry_after = Some(seconds);
        self
    }

    /// The JSON body.
    pub fn body(&self) -> Value {
        json!({"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}})
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, axum::Json(self.body())).into_response();
        if let Some(wait) = self.retry_after {
            response
                .headers_mut()
                .insert(axum::http::header::RETRY_AFTER, wait.into());
        }
        response
    }
}
