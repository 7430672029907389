//! What goes wrong before a stream starts: [`ClientError`], and a non-2xx response read into
//! one.

use std::time::Duration;

use futures::StreamExt;
use serde_json::Value;

#[cfg(doc)]
use crate::Client;

/// The most of an error body read (the rest is ignored).
const MAX_ERROR_BODY: usize = 64 * 1024;

/// Everything that can go wrong before a stream starts. Once [`Client::send`] or
/// [`Client::chat`] succeeded, errors are the stream's own [`choicewise_core::Error`].
///
/// ```
/// use choicewise_client::{Client, ClientError};
/// let err = Client::builder().base_url("no scheme").build().unwrap_err();
/// assert!(matches!(err, ClientError::InvalidUrl(_)));
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// The provider answered with a non-2xx status.
    ///
    /// ```
    /// use choicewise_client::ClientError;
    /// let e = ClientError::Status { status: 401, message: "Incorrect API key".into(), body: None };
    /// assert_eq!(e.to_string(), "the provider answered 401: Incorrect API key");
    /// ```
    #[error("the provider answered {status}: {message}")]
    Status {
        /// The HTTP status.
        status: u16,
        /// The provider's message (`error.message` of its JSON body), else the body's text,
        /// else the status's reason.
        message: String,
        /// The provider's JSON error body, when it was JSON.
        body: Option<Value>,
    },
    /// Could not connect (refused, DNS, TLS), after the retries.
    ///
    /// ```no_run
    /// # use choicewise_client::{Client, ClientError};
    /// # #[tokio::main] async fn main() {
    /// let client = Client::builder().base_url("http://127.0.0.1:9/v1").build().unwrap();
    /// let err = client.send(&serde_json::json!({})).await.unwrap_err();
    /// assert!(matches!(err, ClientError::Connect { .. }));
    /// # }
    /// ```
    #[error("could not connect to {url}: {source}")]
    Connect {
        /// The URL requested.
        url: String,
        /// What failed.
        source: reqwest::Error,
    },
    /// The connection was not established within the connect timeout (after the retries),
    /// or the response headers did not arrive within the idle timeout.
    ///
    /// ```
    /// use choicewise_client::ClientError;
    /// let e = ClientError::Timeout { url: "https://api.openai.com/v1/chat/completions".into() };
    /// assert!(e.to_string().starts_with("timed out"));
    /// ```
    #[error("timed out waiting for {url}")]
    Timeout {
        /// The URL requested.
        url: String,
    },
    /// The request failed after it was sent (connection reset, invalid response, ...), or the
    /// HTTP client could not be built.
    ///
    /// ```
    /// # use choicewise_client::ClientError;
    /// fn is_transport(e: &ClientError) -> bool { matches!(e, ClientError::Request(_)) }
    /// # assert!(!is_transport(&ClientError::InvalidUrl(String::new())));
    /// ```
    #[error("the request failed: {0}")]
    Request(#[from] reqwest::Error),
    /// The base URL is not an absolute `http` or `https` URL.
    ///
    /// ```
    /// # use choicewise_client::{Client, ClientError};
    /// let err = Client::builder().base_url("ftp://example.com").build().unwrap_err();
    /// assert!(matches!(err, ClientError::InvalidUrl(_)));
    /// ```
    #[error("invalid base URL: {0}")]
    InvalidUrl(String),
    /// A header name or value given to the builder (or the API key) is not valid in HTTP.
    ///
    /// ```
    /// # use choicewise_client::{Client, ClientError};
    /// let err = Client::builder().header("bad name", "x").build().unwrap_err();
    /// assert!(matches!(err, ClientError::InvalidHeader(_)));
    /// ```
    #[error("invalid header: {0}")]
    InvalidHeader(String),
    /// The request body is not a JSON object.
    ///
    /// ```
    /// # use choicewise_client::{Client, ClientError};
    /// # #[tokio::main] async fn main() {
    /// let client = Client::builder().build().unwrap();
    /// let err = client.send(&serde_json::json!([1, 2])).await.unwrap_err();
    /// assert!(matches!(err, ClientError::InvalidRequest(_)));
    /// # }
    /// ```
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// A response that is not what the endpoint answers (e.g. `GET /models` that is not a
    /// JSON model list).
    ///
    /// ```
    /// use choicewise_client::ClientError;
    /// let e = ClientError::InvalidResponse("http://127.0.0.1:8080/v1/models: not a JSON model list".into());
    /// assert!(e.to_string().starts_with("invalid response: "));
    /// ```
    #[error("invalid response: {0}")]
    InvalidResponse(String),
}

impl ClientError {
    /// The HTTP status the provider answered with, for [`ClientError::Status`].
    ///
    /// ```
    /// use choicewise_client::ClientError;
    /// let e = ClientError::Status { status: 429, message: "slow down".into(), body: None };
    /// assert_eq!(e.status(), Some(429));
    /// ```
    pub fn status(&self) -> Option<u16> {
        match self {
            ClientError::Status { status, .. } => Some(*status),
            _ => None,
        }
    }
}

/// A request that failed before its stream began is, to the stream's callers, an
/// [`ErrorDetail::Open`](choicewise_core::ErrorDetail::Open) (the kind a fan-out reports for
/// a refused upstream), with this error as its source: so `?` works in functions returning
/// [`choicewise_core::Error`].
///
/// ```
/// use choicewise_client::ClientError;
/// use choicewise_core::{Error, ErrorKind};
/// let e: Error = ClientError::Status { status: 500, message: "oops".into(), body: None }.into();
/// assert_eq!(e.kind(), ErrorKind::Open);
/// assert!(e.to_string().ends_with("the provider answered 500: oops"));
/// ```
impl From<ClientError> for choicewise_core::Error {
    fn from(e: ClientError) -> Self {
        choicewise_core::ErrorDetail::Open {
            message: e.to_string(),
            source: Some(std::sync::Arc::new(e)),
        }
        .into()
    }
}

/// A non-2xx response as [`ClientError::Status`], with its body (read within `timeout`, at
/// most [`MAX_ERROR_BODY`] bytes).
pub(crate) async fn status_error(response: reqwest::Response, timeout: Duration) -> ClientError {
    let status = response.status();
    let mut bytes = Vec::new();
    let mut stream = response.bytes_stream();
    let read = async {
        while let Some(Ok(chunk)) = stream.next().await {
            bytes.extend_from_slice(&chunk);
            if bytes.len() >= MAX_ERROR_BODY {
                bytes.truncate(MAX_ERROR_BODY);
                break;
            }
        }
    };
    let _ = tokio::time::timeout(timeout, read).await;
    let body: Option<Value> = serde_json::from_slice(&bytes).ok();
    let message = body
        .as_ref()
        .and_then(json_message)
        .or_else(|| {
            let text = String::from_utf8_lossy(&bytes);
            let text = text.trim();
            (!text.is_empty()).then(|| text.chars().take(500).collect())
        })
        .unwrap_or_else(|| {
            status
                .canonical_reason()
                .unwrap_or("no reason given")
                .to_string()
        });
    ClientError::Status {
        status: status.as_u16(),
        message,
        body,
    }
}

/// The message of a provider's JSON error: `error.message`, `error` as text, `message`,
/// `detail`.
fn json_message(body: &Value) -> Option<String> {
    let text = |v: &Value| v.as_str().map(str::to_string);
    body.pointer("/error/message")
        .and_then(text)
        .or_else(|| body.get("error").and_then(text))
        .or_else(|| body.get("message").and_then(text))
        .or_else(|| body.get("detail").and_then(text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_messages() {
        let m = |v: Value| json_message(&v);
        assert_eq!(
            m(serde_json::json!({"error": {"message": "a"}})).as_deref(),
            Some("a")
        );
        assert_eq!(m(serde_json::json!({"error": "b"})).as_deref(), Some("b"));
        assert_eq!(
            m(serde_json::json!({"object": "error", "message": "c"})).as_deref(),
            Some("c")
        );
        assert_eq!(m(serde_json::json!({"detail": "d"})).as_deref(), Some("d"));
        assert_eq!(m(serde_json::json!([1])), None);
    }
}
