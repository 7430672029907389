//! [`Failure`]: the error answers a server is told to give.

use serde_json::{Value, json};

/// An error answer: a status with an OpenAI-style body
/// `{"error": {"message", "type", "param", "code"}}`, optionally a `Retry-After` header.
///
/// [`Failure::status`] fills in the message, type and code OpenAI uses for that status.
///
/// ```
/// use choicewise_testserver::Failure;
/// let f = Failure::status(429).retry_after("1");
/// assert_eq!(f.code.as_deref(), Some("rate_limit_exceeded"));
/// assert_eq!(f.body()["error"]["type"], "requests");
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Failure {
    /// The HTTP status.
    pub status: u16,
    /// `error.message`.
    pub message: String,
    /// `error.type`.
    pub kind: String,
    /// `error.code` (`null` when `None`).
    pub code: Option<String>,
    /// The `Retry-After` header, as sent (seconds or an HTTP date).
    pub retry_after: Option<String>,
    /// A body sent as is instead of the JSON error (e.g. a proxy's HTML page).
    pub text_body: Option<String>,
}

impl Failure {
    /// The error OpenAI answers with this status (message, type, code), no `Retry-After`.
    ///
    /// ```
    /// use choicewise_testserver::Failure;
    /// assert_eq!(Failure::status(401).code.as_deref(), Some("invalid_api_key"));
    /// assert_eq!(Failure::status(500).kind, "server_error");
    /// ```
    pub fn status(status: u16) -> Self {
        let (message, kind, code) = match status {
            400 => (
                "Invalid request.",
                "invalid_request_error",
                Some("invalid_request"),
            ),
            401 => (
                "Incorrect API key provided: sk-test. You can find your API key at https://platform.openai.com/account/api-keys.",
                "invalid_request_error",
                Some("invalid_api_key"),
            ),
            404 => (
                "The model `gpt-test` does not exist or you do not have access to it.",
                "invalid_request_error",
                Some("model_not_found"),
            ),
            429 => (
                "Rate limit reached for gpt-4o-mini on requests per min (RPM): Limit 3, Used 3, Requested 1. Please try again in 1s.",
                "requests",
                Some("rate_limit_exceeded"),
            ),
            500 => (
                "The server had an error while processing your request. Sorry about that!",
                "server_error",
                None,
            ),
            503 => (
                "The engine is currently overloaded, please try again later.",
                "server_error",
                Some("overloaded"),
            ),
            _ => ("Request failed.", "server_error", None),
        };
        Failure {
            status,
            message: message.to_string(),
            kind: kind.to_string(),
            code: code.map(str::to_string),
            retry_after: None,
            text_body: None,
        }
    }

    /// Sets `error.message`.
    ///
    /// ```
    /// # use choicewise_testserver::Failure;
    /// assert_eq!(Failure::status(500).message("boom").body()["error"]["message"], "boom");
    /// ```
    pub fn message(mut self, message: impl Into<String>) -> Self {
        self.message = message.into();
        self
    }

    /// Sets `error.type`.
    ///
    /// ```
    /// # use choicewise_testserver::Failure;
    /// assert_eq!(Failure::status(500).kind("api_error").body()["error"]["type"], "api_error");
    /// ```
    pub fn kind(mut self, kind: impl Into<String>) -> Self {
        self.kind = kind.into();
        self
    }

    /// Sets `error.code`.
    ///
    /// ```
    /// # use choicewise_testserver::Failure;
    /// assert_eq!(Failure::status(500).code(Some("x")).body()["error"]["code"], "x");
    /// ```
    pub fn code(mut self, code: Option<&str>) -> Self {
        self.code = code.map(str::to_string);
        self
    }

    /// Sends `Retry-After: VALUE` (seconds, or an HTTP date).
    ///
    /// ```
    /// # use choicewise_testserver::Failure;
    /// assert_eq!(Failure::status(503).retry_after("2").retry_after.as_deref(), Some("2"));
    /// ```
    pub fn retry_after(mut self, value: impl Into<String>) -> Self {
        self.retry_after = Some(value.into());
        self
    }

    /// Sends this text as the body (`text/plain`) instead of the JSON error.
    ///
    /// ```
    /// # use choicewise_testserver::Failure;
    /// let f = Failure::status(502).text_body("<html>Bad gateway</html>");
    /// assert!(f.text_body.is_some());
    /// ```
    pub fn text_body(mut self, body: impl Into<String>) -> Self {
        self.text_body = Some(body.into());
        self
    }

    /// The JSON error body.
    ///
    /// ```
    /// # use choicewise_testserver::Failure;
    /// let body = Failure::status(401).body();
    /// assert_eq!(body["error"]["code"], "invalid_api_key");
    /// assert!(body["error"]["param"].is_null());
    /// ```
    pub fn body(&self) -> Value {
        json!({"error": {
            "message": self.message,
            "type": self.kind,
            "param": null,
            "code": self.code,
        }})
    }
}
