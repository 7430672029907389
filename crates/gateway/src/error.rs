//! Errors as the gateway answers them: OpenAI's shape, `{"error": {"message", "type",
//! "code"}}`, with the status that says what went wrong.

use std::fmt;

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
    /// Headers of its own (a limited key's `x-ratelimit-*`), boxed: most errors have none,
    /// and an error stays small where it is returned.
    pub headers: Option<Box<OwnHeaders>>,
}

/// Headers of an answer's own, made once (a limited key's `x-ratelimit-*`).
pub(crate) type Headers = Vec<(axum::http::HeaderName, axum::http::HeaderValue)>;

/// `headers` written on `response` (a limited key's `x-ratelimit-*`: an error's own, or an
/// answer's from its reservation).
pub(crate) fn with_headers(response: &mut Response, headers: Headers) {
    let map = response.headers_mut();
    for (name, value) in headers {
        map.insert(name, value);
    }
}

/// An error's headers of its own, behind one pointer in [`ApiError`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct OwnHeaders(pub Headers);

impl ApiError {
    pub fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            message: message.into(),
            kind,
            code: None,
            param: None,
            retry_after: None,
            headers: None,
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

    /// With these headers of its own.
    pub fn headers(mut self, headers: Headers) -> Self {
        self.headers = (!headers.is_empty()).then(|| Box::new(OwnHeaders(headers)));
        self
    }

    /// Its headers written on `response`: `Retry-After` and its own.
    pub fn head(&self, response: &mut Response) {
        if let Some(wait) = self.retry_after {
            (response.headers_mut()).insert(axum::http::header::RETRY_AFTER, wait.into());
        }
        if let Some(own) = &self.headers {
            with_headers(response, own.0.clone());
        }
    }

    /// The JSON body.
    pub fn body(&self) -> Value {
        json!({"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}})
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, axum::Json(self.body())).into_response();
        self.head(&mut response);
        response
    }
}

/// A request refused before it runs, in the terms of the client's API: a status, the field
/// concerned when there is one, a message naming it, and (Responses) OpenAI's error code.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct IngressError {
    /// The HTTP status.
    pub status: StatusCode,
    /// The field concerned, in the API's own path notation (`messages.0.content.1.type`,
    /// `input[0].type`), if any.
    pub param: Option<String>,
    /// What is wrong, naming the field.
    pub message: String,
    /// OpenAI's `code` (`missing_required_parameter`, `invalid_value`, ...), if any.
    pub code: Option<&'static str>,
}

impl IngressError {
    /// 400: the field `param` is wrong; `what` says how (the message is `param: what`).
    pub fn invalid(param: impl Into<String>, what: impl fmt::Display) -> Self {
        let param = param.into();
        IngressError {
            status: StatusCode::BAD_REQUEST,
            message: format!("{param}: {what}"),
            param: Some(param),
            code: Some("invalid_value"),
        }
    }

    /// 400: the required field `param` is missing.
    pub fn missing(param: impl Into<String>) -> Self {
        let mut e = IngressError::invalid(param, "Field required");
        e.code = Some("missing_required_parameter");
        e
    }

    /// 400: a field naming something the gateway does not serve (server state, server-side
    /// tools); `what` says which and why.
    pub fn unsupported(param: impl Into<String>, what: impl fmt::Display) -> Self {
        let mut e = IngressError::invalid(param, what);
        e.code = Some("unsupported_parameter");
        e
    }

    /// 400 about the body as a whole (not JSON, not an object).
    pub fn body_error(message: impl Into<String>) -> Self {
        IngressError {
            status: StatusCode::BAD_REQUEST,
            param: None,
            message: message.into(),
            code: Some("invalid_json"),
        }
    }
}

impl fmt::Display for IngressError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.status.as_u16(), self.message)
    }
}

/// A refused request as the gateway answers it (its shape chosen by the API it came in).
impl From<IngressError> for ApiError {
    fn from(e: IngressError) -> Self {
        ApiError {
            status: e.status,
            message: e.message,
            kind: "invalid_request_error",
            code: e.code.map(str::to_string),
            param: e.param,
            retry_after: None,
            headers: None,
        }
    }
}
