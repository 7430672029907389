//! What goes wrong before a stream starts: [`ClientError`], and a non-2xx response read into
//! one.

use std::time::Duration;

use futures::StreamExt;
use serde_json::Value;

#[cfg(doc)]
use crate::Client;

/// The most of an error body read (the rest is ignored).
const MAX_ERROR_BODY: usize = 64 * 1024;

/// Everything that can go wrong before a stream starts: one opaque error that says what kind
/// it is ([`kind`](Self::kind)) and carries what is known ([`status`](Self::status),
/// [`url`](Self::url), [`body`](Self::body)); the underlying transport error, if any, is its
/// [`source`](std::error::Error::source). Once [`Client::chat`] succeeded, errors are the
/// stream's own [`choicewise_core::Error`].
///
/// ```
/// use choicewise_client::{Client, ClientErrorKind};
/// let err = Client::builder().base_url("no scheme").build().unwrap_err();
/// assert_eq!(err.kind(), ClientErrorKind::InvalidUrl);
/// ```
pub struct ClientError {
    inner: Box<Inner>,
}

#[derive(Debug)]
struct Inner {
    kind: ClientErrorKind,
    message: String,
    url: Option<String>,
    status: Option<u16>,
    body: Option<Value>,
    retry_after: Option<Duration>,
    source: Option<BoxError>,
}

use crate::transport::{BoxError, Failure, chain};

/// What kind of [`ClientError`] it is.
///
/// ```
/// use choicewise_client::ClientErrorKind;
/// assert_ne!(ClientErrorKind::Status, ClientErrorKind::Connect);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ClientErrorKind {
    /// The provider answered with a non-2xx status ([`ClientError::status`]).
    Status,
    /// Could not connect (refused, no such host, TLS), after the retries.
    Connect,
    /// The connection was not established within the connect timeout (after the retries),
    /// or the response headers did not arrive within the idle timeout.
    Timeout,
    /// The request failed after it was sent (connection reset, invalid response, ...), or
    /// the HTTP client could not be built.
    Request,
    /// The base URL is not an absolute `http` or `https` URL.
    InvalidUrl,
    /// A header name or value given to the builder (or the API key) is not valid in HTTP.
    InvalidHeader,
    /// The request body is not a JSON object.
    InvalidRequest,
    /// A response that is not what the endpoint answers (e.g. `GET /models` that is not a
    /// JSON model list).
    InvalidResponse,
}

impl ClientError {
    fn new(kind: ClientErrorKind, message: String) -> Self {
        ClientError {
            inner: Box::new(Inner {
                kind,
                message,
                url: None,
                status: None,
                body: None,
                retry_after: None,
                source: None,
            }),
        }
    }

    /// A non-2xx answer: its status, the provider's message, its JSON body.
    pub(crate) fn status_error(status: u16, message: String, body: Option<Value>) -> Self {
        let mut e = ClientError::new(ClientErrorKind::Status, message);
        e.inner.status = Some(status);
        e.inner.body = body;
        e
    }

    /// An exchange with `url` (redacted) that failed before the answer's head: a connect
    /// timeout is a [`ClientErrorKind::Timeout`], another connection failure a
    /// [`ClientErrorKind::Connect`], a failure once connected a [`ClientErrorKind::Request`].
    pub(crate) fn failed(url: &str, failure: Failure) -> Self {
        match failure {
            Failure::Connect {
                timed_out: true, ..
            } => ClientError::timeout(url),
            Failure::Connect { source, .. } => ClientError::connect(url, source),
            Failure::Request(source) => ClientError::request(Some(url), source),
        }
    }

    /// No connection to `url` (redacted): `source` says why.
    fn connect(url: &str, source: BoxError) -> Self {
        let mut e = ClientError::new(ClientErrorKind::Connect, connect_cause(&*source));
        e.inner.url = Some(url.to_string());
        e.inner.source = Some(source);
        e
    }

    /// Nothing from `url` in time.
    pub(crate) fn timeout(url: &str) -> Self {
        let mut e = ClientError::new(ClientErrorKind::Timeout, String::new());
        e.inner.url = Some(url.to_string());
        e
    }

    /// The request to `url` (redacted), if it was sent, failed after it was sent: `source`
    /// says why, its whole chain in the message (`client error (SendRequest): connection
    /// closed before message completed`). The transport's errors never hold the URL.
    pub(crate) fn request(url: Option<&str>, source: BoxError) -> Self {
        let mut e = ClientError::new(
            ClientErrorKind::Request,
            crate::transport::describe(&*source),
        );
        e.inner.url = url.map(str::to_string);
        e.inner.source = Some(source);
        e
    }

    /// Invalid input or an unexpected answer, saying why.
    pub(crate) fn invalid(kind: ClientErrorKind, why: String) -> Self {
        ClientError::new(kind, why)
    }

    /// What kind of error it is.
    ///
    /// ```
    /// use choicewise_client::{Client, ClientErrorKind};
    /// let err = Client::builder().header("bad name", "x").build().unwrap_err();
    /// assert_eq!(err.kind(), ClientErrorKind::InvalidHeader);
    /// ```
    pub fn kind(&self) -> ClientErrorKind {
        self.inner.kind
    }

    /// The HTTP status the provider answered with ([`ClientErrorKind::Status`]).
    ///
    /// ```
    /// # use choicewise_client::Client;
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = choicewise_testserver::TestServer::builder()
    /// #     .fail(choicewise_testserver::Failure::status(429).message("slow down")).start().await?;
    /// let client = Client::builder().base_url(server.base_url()).max_retries(0).build()?;
    /// let err = client.chat(serde_json::json!({"messages": []})).await.unwrap_err();
    /// assert_eq!(err.status(), Some(429));
    /// assert_eq!(err.to_string(), "the provider answered 429: slow down");
    /// # Ok(()) }
    /// ```
    pub fn status(&self) -> Option<u16> {
        self.inner.status
    }

    /// The provider's JSON error body, when it answered with one ([`ClientErrorKind::Status`]).
    ///
    /// ```
    /// # use choicewise_client::Client;
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = choicewise_testserver::TestServer::builder()
    /// #     .fail(choicewise_testserver::Failure::status(400).message("bad n")).start().await?;
    /// let client = Client::builder().base_url(server.base_url()).build()?;
    /// let err = client.chat(serde_json::json!({"messages": []})).await.unwrap_err();
    /// assert_eq!(err.body().unwrap()["error"]["message"], "bad n");
    /// # Ok(()) }
    /// ```
    pub fn body(&self) -> Option<&Value> {
        self.inner.body.as_ref()
    }

    /// The provider's message ([`ClientErrorKind::Status`]: `error.message` of its JSON
    /// body, else the body's text, else the status's reason), or what was wrong.
    ///
    /// ```
    /// use choicewise_client::Client;
    /// let err = Client::builder().base_url("ftp://example.com").build().unwrap_err();
    /// assert!(err.message().contains("ftp"));
    /// ```
    pub fn message(&self) -> &str {
        &self.inner.message
    }

    /// The wait the server asked for before another try (`retry-after-ms`, else
    /// `Retry-After` in seconds or as an HTTP date), on a [`ClientErrorKind::Status`] error
    /// whose answer said one.
    ///
    /// ```
    /// # use choicewise_client::Client;
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = choicewise_testserver::TestServer::builder()
    /// #     .fail(choicewise_testserver::Failure::status(429).retry_after("3")).start().await?;
    /// let client = Client::builder().base_url(server.base_url()).max_retries(0).build()?;
    /// let request = serde_json::json!({"model": "m", "messages": []});
    /// let err = client.chat(request).await.unwrap_err();
    /// assert_eq!(err.retry_after(), Some(std::time::Duration::from_secs(3)));
    /// # Ok(()) }
    /// ```
    pub fn retry_after(&self) -> Option<Duration> {
        self.inner.retry_after
    }

    /// The URL requested, when the error is about one (connect, timeout, request).
    ///
    /// ```no_run
    /// # use choicewise_client::Client;
    /// # #[tokio::main] async fn main() {
    /// let client = Client::builder().base_url("http://127.0.0.1:9/v1").max_retries(0).build().unwrap();
    /// let err = client.chat(serde_json::json!({"messages": []})).await.unwrap_err();
    /// assert_eq!(err.url(), Some("http://127.0.0.1:9/v1/chat/completions"));
    /// # }
    /// ```
    pub fn url(&self) -> Option<&str> {
        self.inner.url.as_deref()
    }
}

impl std::fmt::Debug for ClientError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&self.inner, f)
    }
}

impl std::fmt::Display for ClientError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Inner {
            kind,
            message,
            url,
            status,
            ..
        } = &*self.inner;
        let url = url.as_deref().unwrap_or("the server");
        match kind {
            ClientErrorKind::Status => {
                write!(
                    f,
                    "the provider answered {}: {message}",
                    status.unwrap_or(0)
                )
            }
            ClientErrorKind::Connect => write!(f, "could not connect to {url}: {message}"),
            ClientErrorKind::Timeout => write!(f, "timed out waiting for {url}"),
            ClientErrorKind::Request => write!(f, "the request failed: {message}"),
            ClientErrorKind::InvalidUrl => write!(f, "invalid base URL: {message}"),
            ClientErrorKind::InvalidHeader => write!(f, "invalid header: {message}"),
            ClientErrorKind::InvalidRequest => write!(f, "invalid request: {message}"),
            ClientErrorKind::InvalidResponse => write!(f, "invalid response: {message}"),
        }
    }
}

impl std::error::Error for ClientError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.inner
            .source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

/// Why a connection failed, in plain words: the kind of the innermost cause (`connection
/// refused`, `no such host`, `timed out`, a TLS failure), then its own message.
fn connect_cause(error: &(dyn std::error::Error + 'static)) -> String {
    let mut words = None;
    let mut last = error;
    for cause in chain(error) {
        last = cause;
        if let Some(io) = cause.downcast_ref::<std::io::Error>() {
            words = match io.kind() {
                std::io::ErrorKind::ConnectionRefused => Some("connection refused"),
                std::io::ErrorKind::TimedOut => Some("timed out"),
                std::io::ErrorKind::ConnectionReset => Some("connection reset"),
                std::io::ErrorKind::AddrNotAvailable => Some("address not available"),
                _ => words,
            };
        }
        let text = cause.to_string().to_ascii_lowercase();
        if words.is_none() {
            if text.contains("dns error")
                || text.contains("failed to lookup")
                || text.contains("name or service not known")
            {
                words = Some("no such host");
            } else if text.contains("certificate")
                || text.contains("tls")
                || text.contains("handshake")
            {
                words = Some("TLS handshake failed");
            }
        }
    }
    let last = last.to_string();
    match words {
        Some(words) if !last.to_ascii_lowercase().contains(words) => format!("{words} ({last})"),
        Some(words) => words.to_string(),
        None => last,
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
/// # let e = choicewise_client::Client::builder().base_url("oops").build().unwrap_err();
/// let e: Error = e.into();
/// assert_eq!(e.kind(), ErrorKind::Open);
/// assert!(e.to_string().contains("invalid base URL"));
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

/// A non-2xx response as a [`ClientErrorKind::Status`] error, with its body (read within `timeout`, at
/// most [`MAX_ERROR_BODY`] bytes).
pub(crate) async fn status_error(
    response: crate::transport::Response,
    timeout: Duration,
) -> ClientError {
    let status = response.status();
    let retry_after = crate::retry::retry_after(response.headers(), std::time::SystemTime::now());
    let mut bytes = Vec::new();
    let mut stream = http_body_util::BodyDataStream::new(response.into_body());
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
    let mut e = ClientError::status_error(status.as_u16(), message, body);
    e.inner.retry_after = retry_after;
    e
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
    fn a_failure_before_the_head_is_said_in_the_clients_kinds() {
        let io = |kind| -> BoxError { Box::new(std::io::Error::from(kind)) };
        let url = "http://h/v1/chat/completions";
        let timed = Failure::Connect {
            timed_out: true,
            source: io(std::io::ErrorKind::TimedOut),
        };
        assert_eq!(
            ClientError::failed(url, timed).kind(),
            ClientErrorKind::Timeout
        );
        let refused = Failure::Connect {
            timed_out: false,
            source: io(std::io::ErrorKind::ConnectionRefused),
        };
        let e = ClientError::failed(url, refused);
        assert_eq!(e.kind(), ClientErrorKind::Connect);
        assert_eq!(e.url(), Some(url));
        assert!(e.to_string().contains("connection refused"), "{e}");
        let reset = Failure::Request(io(std::io::ErrorKind::ConnectionReset));
        assert_eq!(
            ClientError::failed(url, reset).kind(),
            ClientErrorKind::Request
        );
    }

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
