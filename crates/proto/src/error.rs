//! The one error type of the crate, and [`Incomplete`], an error that still carries what was
//! assembled before it.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

/// Everything that can end a completion stream, or one choice of it, early, naming what was
/// wrong and where.
///
/// An error ends every sub-stream that is still open, after all the data received before it;
/// `Choice::message` and
/// `Completions::collect` still give back what was assembled
/// (see [`Incomplete`]).
///
/// It is one pointer wide and cheap to clone (every open sub-stream receives it). Ask it what
/// it is with [`kind`](Error::kind) and where with [`line`](Error::line),
/// [`offset`](Error::offset), [`choice`](Error::choice) and [`upstream`](Error::upstream);
/// every field is in its [`detail`](Error::detail).
///
/// ```
/// use choicewise_proto::{Demux, ErrorKind};
/// let sse = "data: {\"choices\":[{\"index\":-1,\"delta\":{}}]}\n\n";
/// let e = Demux::new().feed(sse.as_bytes()).unwrap_err();
/// assert_eq!(e.kind(), ErrorKind::Chunk);
/// assert_eq!(e.line(), Some(1));
/// assert_eq!(e.to_string(), "line 1: choice index -1 is out of range (0..=4294967295)");
/// ```
#[derive(Clone)]
pub struct Error(Arc<ErrorDetail>);

/// What kind of failure an [`Error`] is, for a program deciding what to do about it
/// (retry, report the input, raise a limit). New kinds may be added.
///
/// ```
/// use choicewise_proto::{Error, ErrorDetail, ErrorKind};
/// let e = Error::from(ErrorDetail::IdleTimeout { after: std::time::Duration::from_secs(30), offset: 512 });
/// assert_eq!(e.kind(), ErrorKind::Timeout);
/// assert!(e.kind().is_retryable());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The bytes are not a valid event stream ([`ErrorDetail::Sse`]).
    Framing,
    /// An event's data is not a chunk, or a chunk names an impossible choice index
    /// ([`ErrorDetail::Json`], [`ErrorDetail::InvalidChoiceIndex`]).
    Chunk,
    /// An event of another dialect than the stream's ([`ErrorDetail::WrongDialect`]).
    Dialect,
    /// One choice's update is malformed or one of its tool calls is invalid; only that choice
    /// failed ([`ErrorDetail::InvalidUpdate`], [`ErrorDetail::InvalidToolCall`]).
    Update,
    /// A call's complete arguments are not valid JSON or not the requested type
    /// ([`ErrorDetail::InvalidArguments`]).
    Arguments,
    /// More choices than the configured maximum ([`ErrorDetail::TooManyChoices`]).
    Limit,
    /// The provider reported an error in the stream ([`ErrorDetail::Upstream`]).
    Upstream,
    /// Reading the stream failed (a connection closed, an I/O error)
    /// ([`ErrorDetail::Transport`]).
    Transport,
    /// The request failed before its stream began ([`ErrorDetail::Open`]).
    Open,
    /// The stream ended while something was unfinished ([`ErrorDetail::Truncated`]).
    Truncated,
    /// Nothing arrived for longer than the idle timeout ([`ErrorDetail::IdleTimeout`]).
    Timeout,
    /// An actor failed ([`ErrorDetail::ActorFailed`]): a bug, reported rather than hidden.
    Internal,
}

impl ErrorKind {
    /// Whether sending the request again may well succeed: the connection or the provider
    /// failed, or the stream stalled; not when the input itself was wrong.
    ///
    /// ```
    /// use choicewise_proto::ErrorKind;
    /// assert!(ErrorKind::Transport.is_retryable());
    /// assert!(!ErrorKind::Chunk.is_retryable());
    /// ```
    pub fn is_retryable(self) -> bool {
        matches!(
            self,
            ErrorKind::Upstream
                | ErrorKind::Transport
                | ErrorKind::Open
                | ErrorKind::Truncated
                | ErrorKind::Timeout
        )
    }
}

impl Error {
    /// Every field of the error, as one variant per failure.
    ///
    /// ```
    /// use choicewise_proto::{Error, ErrorDetail};
    /// let e = Error::from(ErrorDetail::InvalidChoiceIndex { index: -1, line: 7 });
    /// assert!(matches!(e.detail(), ErrorDetail::InvalidChoiceIndex { index: -1, .. }));
    /// ```
    pub fn detail(&self) -> &ErrorDetail {
        &self.0
    }

    /// What kind of failure it is. In a fan-out, the kind of what ended the upstream.
    ///
    /// ```
    /// use choicewise_proto::{Error, ErrorDetail, ErrorKind};
    /// let e = Error::from(ErrorDetail::InvalidChoiceIndex { index: -1, line: 7 });
    /// assert_eq!(e.kind(), ErrorKind::Chunk);
    /// ```
    pub fn kind(&self) -> ErrorKind {
        use ErrorDetail as D;
        match self.detail() {
            D::Sse(_) | D::EventStream { .. } => ErrorKind::Framing,
            D::Json { .. } | D::InvalidChoiceIndex { .. } => ErrorKind::Chunk,
            D::WrongDialect { .. } => ErrorKind::Dialect,
            D::InvalidUpdate { .. } | D::InvalidToolCall { .. } => ErrorKind::Update,
            D::InvalidArguments { .. } => ErrorKind::Arguments,
            D::TooManyChoices { .. } | D::ChoiceTooLarge { .. } => ErrorKind::Limit,
            D::Upstream(_) => ErrorKind::Upstream,
            D::Transport { .. } => ErrorKind::Transport,
            D::Open { .. } => ErrorKind::Open,
            D::Truncated { .. } => ErrorKind::Truncated,
            D::IdleTimeout { .. } => ErrorKind::Timeout,
            D::ActorFailed { .. } => ErrorKind::Internal,
            D::UpstreamFailed { error, .. } => error.kind(),
        }
    }

    /// The line of the stream where it went wrong, when a line is known (with parsed
    /// chunks or events, their count). In a fan-out, the line within the failed upstream.
    ///
    /// ```
    /// use choicewise_proto::{Error, ErrorDetail};
    /// let e = Error::from(ErrorDetail::InvalidChoiceIndex { index: -1, line: 7 });
    /// assert_eq!(e.line(), Some(7));
    /// ```
    pub fn line(&self) -> Option<u64> {
        use ErrorDetail as D;
        match self.detail() {
            D::Sse(e) => Some(e.line()),
            D::EventStream { message, .. } => Some(*message),
            D::Json { line, .. }
            | D::Truncated { line, .. }
            | D::InvalidChoiceIndex { line, .. }
            | D::TooManyChoices { line, .. }
            | D::ChoiceTooLarge { line, .. }
            | D::InvalidToolCall { line, .. }
            | D::InvalidUpdate { line, .. }
            | D::WrongDialect { line, .. } => Some(*line),
            D::Upstream(u) => Some(u.line),
            D::UpstreamFailed { error, .. } => error.line(),
            D::Transport { .. }
            | D::InvalidArguments { .. }
            | D::IdleTimeout { .. }
            | D::ActorFailed { .. }
            | D::Open { .. } => None,
        }
    }

    /// The byte offset in the stream where it went wrong (for a transport failure or a
    /// timeout, how many bytes had been read), when known.
    ///
    /// ```
    /// use choicewise_proto::{Error, ErrorDetail};
    /// let e = Error::from(ErrorDetail::IdleTimeout { after: std::time::Duration::from_secs(30), offset: 512 });
    /// assert_eq!(e.offset(), Some(512));
    /// ```
    pub fn offset(&self) -> Option<u64> {
        use ErrorDetail as D;
        match self.detail() {
            D::Sse(e) => Some(e.offset()),
            D::Json { offset, .. }
            | D::EventStream { offset, .. }
            | D::Transport { offset, .. }
            | D::Truncated { offset, .. }
            | D::InvalidToolCall { offset, .. }
            | D::InvalidUpdate { offset, .. }
            | D::ChoiceTooLarge { offset, .. }
            | D::IdleTimeout { offset, .. } => Some(*offset),
            D::UpstreamFailed { error, .. } => error.offset(),
            D::Upstream(_)
            | D::InvalidChoiceIndex { .. }
            | D::TooManyChoices { .. }
            | D::InvalidArguments { .. }
            | D::WrongDialect { .. }
            | D::ActorFailed { .. }
            | D::Open { .. } => None,
        }
    }

    /// The choice that failed, when the error is one choice's own (the others went on).
    ///
    /// ```
    /// use choicewise_proto::{Error, ErrorDetail};
    /// let e = Error::from(ErrorDetail::InvalidUpdate { choice: 2, line: 9, offset: 700, message: "x".into() });
    /// assert_eq!((e.choice(), e.line(), e.offset()), (Some(2), Some(9), Some(700)));
    /// ```
    pub fn choice(&self) -> Option<u32> {
        use ErrorDetail as D;
        match self.detail() {
            D::InvalidToolCall { choice, .. }
            | D::InvalidUpdate { choice, .. }
            | D::ChoiceTooLarge { choice, .. }
            | D::InvalidArguments { choice, .. } => Some(*choice),
            D::ActorFailed { choice, .. } => *choice,
            D::UpstreamFailed { error, .. } => error.choice(),
            _ => None,
        }
    }

    /// In a fan-out, the upstream whose failure this is (counted from 0 in the order they
    /// were added).
    ///
    /// ```
    /// use choicewise_proto::{Error, ErrorDetail};
    /// let open = Error::from(ErrorDetail::Open { message: "HTTP 500".into(), source: None });
    /// let e = Error::from(ErrorDetail::UpstreamFailed { upstream: 3, error: open });
    /// assert_eq!(e.upstream(), Some(3));
    /// ```
    pub fn upstream(&self) -> Option<usize> {
        match self.detail() {
            ErrorDetail::UpstreamFailed { upstream, .. } => Some(*upstream),
            _ => None,
        }
    }

    /// The provider's error object, when the provider reported the error.
    ///
    /// ```
    /// use choicewise_proto::Demux;
    /// let sse = "data: {\"error\":{\"message\":\"overloaded\",\"code\":503}}\n\n";
    /// let e = Demux::new().feed(sse.as_bytes()).unwrap_err();
    /// assert_eq!(e.provider_error().unwrap().code.as_deref(), Some("503"));
    /// ```
    pub fn provider_error(&self) -> Option<&UpstreamError> {
        match self.detail() {
            ErrorDetail::Upstream(u) => Some(u),
            ErrorDetail::UpstreamFailed { error, .. } => error.provider_error(),
            _ => None,
        }
    }

    /// The choices that had not finished when the stream ended or failed.
    ///
    /// ```
    /// use choicewise_proto::{Error, ErrorDetail};
    /// let e = Error::from(ErrorDetail::Truncated { line: 4, offset: 90, pending_bytes: 0, unfinished: vec![1] });
    /// assert_eq!(e.unfinished(), [1]);
    /// ```
    pub fn unfinished(&self) -> &[u32] {
        match self.detail() {
            ErrorDetail::Transport { unfinished, .. }
            | ErrorDetail::Truncated { unfinished, .. } => unfinished,
            ErrorDetail::UpstreamFailed { error, .. } => error.unfinished(),
            _ => &[],
        }
    }
}

impl From<ErrorDetail> for Error {
    fn from(detail: ErrorDetail) -> Self {
        Error(Arc::new(detail))
    }
}

impl From<choicewise_sse::SseError> for Error {
    fn from(e: choicewise_sse::SseError) -> Self {
        ErrorDetail::Sse(e).into()
    }
}

impl std::fmt::Debug for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self.detail(), f)
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self.detail(), f)
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        std::error::Error::source(self.detail())
    }
}

/// The fields of an [`Error`], one variant per failure (see [`Error::detail`]). Variants
/// may be added.
///
/// ```
/// use choicewise_proto::{Error, ErrorDetail};
/// let e = ErrorDetail::InvalidChoiceIndex { index: -1, line: 7 };
/// assert_eq!(e.to_string(), "line 7: choice index -1 is out of range (0..=4294967295)");
/// let e: Error = e.into();
/// ```
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum ErrorDetail {
    /// The bytes are not a valid event stream (invalid UTF-8, an event over the size limit).
    #[error(transparent)]
    Sse(choicewise_sse::SseError),
    /// The bytes are not a valid AWS event stream (Bedrock's framing): a message whose
    /// length, CRC or headers are wrong, one over the size limit, or a payload that is not
    /// UTF-8.
    ///
    /// ```
    /// use choicewise_proto::ErrorDetail;
    /// let e = ErrorDetail::EventStream { message: 3, offset: 420, what: "bad CRC".into() };
    /// assert_eq!(e.to_string(), "event-stream message 3 (byte 420): bad CRC");
    /// ```
    #[error("event-stream message {message} (byte {offset}): {what}")]
    EventStream {
        /// The message's number in the stream, from 1.
        message: u64,
        /// The byte offset where it starts.
        offset: u64,
        /// What is wrong with it.
        what: String,
    },
    /// An event's data is not a chunk.
    #[error("line {line} (byte {offset}): invalid chunk JSON: {message}")]
    Json {
        /// The line of the JSON error.
        line: u64,
        /// The byte offset of the event in the stream.
        offset: u64,
        /// What the JSON parser found.
        message: String,
    },
    /// The provider reported an error in the stream. Shared, not copied, by every stream
    /// that reports it.
    #[error(transparent)]
    Upstream(Arc<UpstreamError>),
    /// The input stream itself failed (a network read, an I/O error). Said in the user's
    /// terms, the HTTP library's wording kept in `message` and `source`:
    ///
    /// ```
    /// use std::sync::Arc;
    /// use choicewise_proto::ErrorDetail;
    /// let reset = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "os error 104");
    /// let e = ErrorDetail::Transport { offset: 26047, message: reset.to_string(),
    ///                            source: Some(Arc::new(reset)), unfinished: vec![0, 1, 2] };
    /// assert_eq!(e.to_string(), "the connection closed after 26,047 bytes; choices 0, 1, 2 were unfinished");
    /// assert!(std::error::Error::source(&e).is_some());
    /// ```
    #[error("{}", transport_message(.source.as_deref(), .message, *.offset, .unfinished))]
    Transport {
        /// How many bytes had been read.
        offset: u64,
        /// The source error's message.
        message: String,
        /// The source error.
        #[source]
        source: Option<Arc<dyn std::error::Error + Send + Sync>>,
        /// The choices that had not finished.
        unfinished: Vec<u32>,
    },
    /// The input ended without `[DONE]` while something was unfinished.
    #[error("{}", truncated_message(*.line, *.offset, *.pending_bytes, .unfinished))]
    Truncated {
        /// The line where the discarded tail starts (or the last line, if none).
        line: u64,
        /// The byte offset where the discarded tail starts (or the end of input).
        offset: u64,
        /// How many bytes of an incomplete event were discarded.
        pending_bytes: u64,
        /// The choices that had not finished.
        unfinished: Vec<u32>,
    },
    /// A choice index is negative or does not fit in 32 bits.
    #[error("line {line}: choice index {index} is out of range (0..=4294967295)")]
    InvalidChoiceIndex {
        /// The index as sent.
        index: i64,
        /// Where.
        line: u64,
    },
    /// More distinct choices than the configured maximum.
    #[error("line {line}: choice index {index} would be choice number {} but at most {limit} are allowed", .limit + 1)]
    TooManyChoices {
        /// The index that exceeded the limit.
        index: u32,
        /// The limit in force.
        limit: usize,
        /// Where.
        line: u64,
    },
    /// A tool-call index is invalid or more tool calls than allowed arrived for one choice.
    /// Fails that choice only.
    #[error("line {line} (byte {offset}): choice {choice}: {what}")]
    InvalidToolCall {
        /// The choice.
        choice: u32,
        /// What was wrong.
        what: String,
        /// The line of the update.
        line: u64,
        /// The byte offset of the update's event in the stream.
        offset: u64,
    },
    /// One choice's update is malformed (a delta of the wrong shape, such as
    /// `"content": 5` or `"delta": "x"`). Fails that choice only: the other choices go on.
    #[error("line {line} (byte {offset}): choice {choice}: invalid update: {message}")]
    InvalidUpdate {
        /// The choice.
        choice: u32,
        /// The line the choice's update starts on.
        line: u64,
        /// The byte offset of the update's event in the stream.
        offset: u64,
        /// What the JSON parser found.
        message: String,
    },
    /// One choice's updates passed the most bytes one choice may take
    /// ([`StreamConfig::max_choice_bytes`](crate::StreamConfig::max_choice_bytes)): an
    /// upstream that sends one choice without end. Fails that choice only: the other choices
    /// go on, and its later updates are dropped unparsed.
    ///
    /// ```
    /// use choicewise_proto::{Error, ErrorDetail, ErrorKind};
    /// let e = Error::from(ErrorDetail::ChoiceTooLarge { choice: 3, limit: 1024, line: 90, offset: 5000 });
    /// assert_eq!(e.to_string(), "line 90 (byte 5000): choice 3: its updates passed 1024 bytes (max_choice_bytes)");
    /// assert_eq!((e.kind(), e.choice()), (ErrorKind::Limit, Some(3)));
    /// ```
    #[error(
        "line {line} (byte {offset}): choice {choice}: its updates passed {limit} bytes (max_choice_bytes)"
    )]
    ChoiceTooLarge {
        /// The choice.
        choice: u32,
        /// The limit in force, in bytes of the choice's raw updates.
        limit: usize,
        /// The line of the update that passed it.
        line: u64,
        /// The byte offset of that update's event in the stream.
        offset: u64,
    },
    /// A call's complete arguments are not valid JSON, or do not fit the requested type.
    /// Reported by `Choice::arguments`, where it does not end the
    /// stream; the raw arguments stay in the message.
    #[error("choice {choice}, {call}: {error}")]
    InvalidArguments {
        /// The choice.
        choice: u32,
        /// The call.
        call: crate::event::CallRef,
        /// What is wrong, and where in the arguments.
        error: crate::event::ArgumentsError,
    },
    /// An event of another dialect in a typed-dialect stream (a Chat Completions chunk in an
    /// Anthropic stream, a Responses event in an Anthropic one, ...).
    #[error("line {line}: {found:?} is not an event of the {expected} dialect")]
    WrongDialect {
        /// The stream's dialect.
        expected: crate::Dialect,
        /// The event's type.
        found: String,
        /// Where.
        line: u64,
    },
    /// Nothing arrived from upstream for longer than the configured idle timeout.
    #[error("no data for {after:?} after {offset} bytes (idle timeout)")]
    IdleTimeout {
        /// The timeout in force.
        after: Duration,
        /// Bytes read before the stall.
        offset: u64,
    },
    /// An actor of the demultiplexer failed; the affected streams end with this error.
    #[error("{}: internal failure: {message}", match .choice { Some(c) => format!("choice {c}"), None => "reader".to_string() })]
    ActorFailed {
        /// The choice whose actor failed, or `None` for the reader.
        choice: Option<u32>,
        /// The panic or failure message.
        message: String,
    },
    /// The stream could not be opened: the request behind an upstream of a fan-out (see
    /// `FanOut::open`) failed before its first byte, after any retries
    /// (an HTTP error status, a refused connection). Nothing of it was received.
    ///
    /// ```
    /// use choicewise_proto::ErrorDetail;
    /// let e = ErrorDetail::Open { message: "HTTP 500: The server had an error".into(), source: None };
    /// assert_eq!(e.to_string(), "the request failed before its stream began: HTTP 500: The server had an error");
    /// ```
    #[error("the request failed before its stream began: {message}")]
    Open {
        /// What failed, in the source error's words.
        message: String,
        /// The source error.
        #[source]
        source: Option<Arc<dyn std::error::Error + Send + Sync>>,
    },
    /// One upstream of a fan-out (`Completions::builder().fan_out`)
    /// failed: its own unfinished choices end with this error, the other upstreams' choices
    /// go on, and the completion's outcome reports it.
    #[error("upstream {upstream}: {error}")]
    UpstreamFailed {
        /// The upstream, counted from 0 in the order they were added.
        upstream: usize,
        /// What ended it.
        error: Error,
    },
}

/// `the connection closed after 26,047 bytes; choices 0, 1, 2 were unfinished`, or, for other
/// failures, `reading the stream failed after 26,047 bytes (MESSAGE); ...`.
fn transport_message(
    source: Option<&(dyn std::error::Error + Send + Sync + 'static)>,
    message: &str,
    offset: u64,
    unfinished: &[u32],
) -> String {
    let mut msg = if source.is_some_and(|s| connection_closed(s)) {
        format!("the connection closed after {} bytes", thousands(offset))
    } else {
        format!(
            "reading the stream failed after {} bytes ({message})",
            thousands(offset)
        )
    };
    match unfinished {
        [] => {}
        [one] => msg.push_str(&format!("; choice {one} was unfinished")),
        several => {
            let list: Vec<String> = several.iter().map(u32::to_string).collect();
            msg.push_str(&format!("; choices {} were unfinished", list.join(", ")));
        }
    }
    msg
}

/// Whether an error (or one of its sources) says that the connection ended: an I/O error of
/// kind reset, aborted, broken pipe or unexpected end, or an HTTP library's "connection
/// closed before message completed" (hyper, under any client built on it).
fn connection_closed(error: &(dyn std::error::Error + 'static)) -> bool {
    use std::io::ErrorKind;
    let mut current = Some(error);
    while let Some(e) = current {
        if let Some(io) = e.downcast_ref::<std::io::Error>()
            && matches!(
                io.kind(),
                ErrorKind::ConnectionReset
                    | ErrorKind::ConnectionAborted
                    | ErrorKind::BrokenPipe
                    | ErrorKind::UnexpectedEof
            )
        {
            return true;
        }
        let text = e.to_string().to_ascii_lowercase();
        if [
            "connection closed",
            "incompletemessage",
            "connection reset",
            "unexpected eof",
        ]
        .iter()
        .any(|t| text.contains(t))
        {
            return true;
        }
        current = e.source();
    }
    false
}

/// 26047 as `26,047`.
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn truncated_message(line: u64, offset: u64, pending: u64, unfinished: &[u32]) -> String {
    let mut msg = String::from("stream ended without [DONE]");
    if pending > 0 {
        msg.push_str(&format!(
            ": an incomplete event of {pending} bytes at line {line} (byte {offset}) was discarded"
        ));
    } else {
        msg.push_str(&format!(" at line {line} (byte {offset})"));
    }
    if !unfinished.is_empty() {
        let list: Vec<String> = unfinished.iter().map(u32::to_string).collect();
        msg.push_str(&format!(
            "; unfinished choice{} {}",
            if unfinished.len() == 1 { "" } else { "s" },
            list.join(", ")
        ));
    }
    msg
}

/// An error object sent by the provider (`{"error": {...}}` or an `event: error`).
///
/// ```
/// use choicewise_proto::UpstreamError;
/// let e = UpstreamError::from_value(
///     &serde_json::json!({"message": "overloaded", "type": "server_error", "code": 503}), 4);
/// assert_eq!(e.code.as_deref(), Some("503"));
/// assert_eq!(e.to_string(), "line 4: the provider reported an error: overloaded (type server_error, code 503)");
/// ```
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("line {line}: the provider reported an error: {message}{}", details(.kind, .code))]
pub struct UpstreamError {
    /// The provider's message.
    pub message: String,
    /// The provider's error type, e.g. `server_error`.
    pub kind: Option<String>,
    /// The provider's error code, as text.
    pub code: Option<String>,
    /// The SSE line of the error.
    pub line: u64,
    /// The whole error object as sent.
    pub raw: Value,
}

fn details(kind: &Option<String>, code: &Option<String>) -> String {
    match (kind, code) {
        (Some(k), Some(c)) => format!(" (type {k}, code {c})"),
        (Some(k), None) => format!(" (type {k})"),
        (None, Some(c)) => format!(" (code {c})"),
        (None, None) => String::new(),
    }
}

impl UpstreamError {
    /// Reads a provider error object: `{"message", "type", "code", ...}`, the same wrapped in
    /// `{"error": ...}`, or any other value (kept raw, its text as the message).
    ///
    /// ```
    /// use choicewise_proto::UpstreamError;
    /// let e = UpstreamError::from_value(&serde_json::json!("rate limited"), 1);
    /// assert_eq!(e.message, "rate limited");
    /// ```
    pub fn from_value(value: &Value, line: u64) -> Self {
        let obj = match value.get("error") {
            Some(inner) if inner.is_object() => inner,
            _ => value,
        };
        let text = |v: Option<&Value>| match v {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(other) => Some(other.to_string()),
        };
        let message = text(obj.get("message"))
            .or_else(|| value.as_str().map(str::to_owned))
            .unwrap_or_else(|| obj.to_string());
        UpstreamError {
            message,
            kind: text(obj.get("type")),
            code: text(obj.get("code")),
            line,
            raw: value.clone(),
        }
    }
}

/// A result that ended in an error but still carries what was assembled before it.
///
/// ```
/// use choicewise_proto::{ErrorDetail, Incomplete};
/// let inc = Incomplete { partial: "half a message".to_string(),
///                        error: ErrorDetail::InvalidChoiceIndex { index: -1, line: 3 }.into() };
/// assert!(inc.to_string().contains("line 3"));
/// ```
#[derive(Debug, Clone, thiserror::Error)]
#[error("{error}")]
pub struct Incomplete<T> {
    /// Everything assembled before the error.
    pub partial: T,
    /// What went wrong.
    #[source]
    pub error: Error,
}

/// Keeps the error and drops the partial result, so `?` works in functions returning
/// [`Error`].
///
/// ```
/// use choicewise_proto::{Demux, Error, ErrorKind};
/// fn text(demux: &mut Demux) -> Result<Option<String>, Error> {
///     Ok(demux.finish()?.choices[0].message.content.clone())
/// }
/// let mut demux = Demux::new();
/// let _ = demux.feed(b"data: {\"error\":{\"message\":\"x\"}}\n\n");
/// assert!(matches!(text(&mut demux), Err(e) if e.kind() == ErrorKind::Upstream));
/// ```
impl<T> From<Incomplete<T>> for Error {
    fn from(incomplete: Incomplete<T>) -> Self {
        incomplete.error
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_is_at_most_two_words_and_cheap_to_clone() {
        assert!(size_of::<Error>() <= 2 * size_of::<usize>());
        let e = Error::from(ErrorDetail::Truncated {
            line: 1,
            offset: 2,
            pending_bytes: 3,
            unfinished: vec![0; 1000],
        });
        let clone = e.clone();
        assert!(std::ptr::eq(e.detail(), clone.detail()), "a clone shares");
        assert!(size_of::<Result<(), Error>>() <= 2 * size_of::<usize>());
    }
}
