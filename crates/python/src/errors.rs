//! The package's exceptions: `ChoicewiseError`, the base of everything that ends a completion
//! or one of its choices (with `.kind`, `.line`, `.offset`, `.choice`, `.upstream`,
//! `.retryable`, and `.partial`: what was assembled before the error, where there is one), and
//! one subclass per kind of `choicewise::Error` (`UpstreamError`, `TransportError`...: see
//! [`new_err`]); `PartialJsonError` for invalid JSON given to `PartialJson`.

use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyValueError};
use pyo3::prelude::*;

create_exception!(
    choicewise,
    ChoicewiseError,
    PyException,
    "A completion or one of its choices ended in error: `.kind` says what (\"framing\", \
     \"chunk\", \"update\", \"upstream\", \"transport\", \"truncated\"...), `.line`, `.offset`, \
     `.choice` and `.upstream` where (each `None` when unknown), `.retryable` whether sending \
     the request again may succeed, `.partial` what was assembled before it (for `collect()` \
     and `message()`)."
);

create_exception!(
    choicewise,
    PartialJsonError,
    ChoicewiseError,
    "Invalid JSON fed to `PartialJson`: `.offset` is the byte offset of the offending \
     character, `.kind` is \"partial_json\"."
);

create_exception!(
    choicewise,
    FramingError,
    ChoicewiseError,
    "The bytes are not a valid event stream (`.kind` \"framing\")."
);
create_exception!(
    choicewise,
    ChunkError,
    ChoicewiseError,
    "An event's data is not a chunk, or names an impossible choice index (`.kind` \"chunk\")."
);
create_exception!(
    choicewise,
    DialectError,
    ChoicewiseError,
    "An event of another dialect than the stream's (`.kind` \"dialect\")."
);
create_exception!(
    choicewise,
    UpdateError,
    ChoicewiseError,
    "One choice's update or tool call is malformed; only that choice failed (`.kind` \"update\")."
);
create_exception!(
    choicewise,
    ArgumentsError,
    ChoicewiseError,
    "A call's complete arguments are not valid JSON or not the requested type (`.kind` \"arguments\")."
);
create_exception!(
    choicewise,
    LimitError,
    ChoicewiseError,
    "More choices than the configured maximum (`.kind` \"limit\")."
);
create_exception!(
    choicewise,
    UpstreamError,
    ChoicewiseError,
    "The provider reported an error in the stream (`.kind` \"upstream\")."
);
create_exception!(
    choicewise,
    TransportError,
    ChoicewiseError,
    "Reading the stream failed: a connection closed, an I/O error (`.kind` \"transport\")."
);
create_exception!(
    choicewise,
    OpenError,
    ChoicewiseError,
    "The request failed before its stream began (`.kind` \"open\")."
);
create_exception!(
    choicewise,
    TruncatedError,
    ChoicewiseError,
    "The stream ended while something was unfinished (`.kind` \"truncated\")."
);
create_exception!(
    choicewise,
    IdleTimeoutError,
    ChoicewiseError,
    "Nothing arrived for longer than the idle timeout (`.kind` \"timeout\")."
);
create_exception!(
    choicewise,
    InternalError,
    ChoicewiseError,
    "An actor failed: a bug, reported rather than hidden (`.kind` \"internal\")."
);

/// Every exception class of the package, by its Python name, for the module to export.
pub(crate) fn classes(py: Python<'_>) -> Vec<(&'static str, Bound<'_, pyo3::types::PyType>)> {
    vec![
        ("ChoicewiseError", py.get_type::<ChoicewiseError>()),
        ("PartialJsonError", py.get_type::<PartialJsonError>()),
        ("FramingError", py.get_type::<FramingError>()),
        ("ChunkError", py.get_type::<ChunkError>()),
        ("DialectError", py.get_type::<DialectError>()),
        ("UpdateError", py.get_type::<UpdateError>()),
        ("ArgumentsError", py.get_type::<ArgumentsError>()),
        ("LimitError", py.get_type::<LimitError>()),
        ("UpstreamError", py.get_type::<UpstreamError>()),
        ("TransportError", py.get_type::<TransportError>()),
        ("OpenError", py.get_type::<OpenError>()),
        ("TruncatedError", py.get_type::<TruncatedError>()),
        ("IdleTimeoutError", py.get_type::<IdleTimeoutError>()),
        ("InternalError", py.get_type::<InternalError>()),
    ]
}

/// The exception of an error's kind (the base class for a kind added later).
fn new_err(kind: choicewise::ErrorKind, message: String) -> PyErr {
    use choicewise::ErrorKind as K;
    match kind {
        K::Framing => FramingError::new_err(message),
        K::Chunk => ChunkError::new_err(message),
        K::Dialect => DialectError::new_err(message),
        K::Update => UpdateError::new_err(message),
        K::Arguments => ArgumentsError::new_err(message),
        K::Limit => LimitError::new_err(message),
        K::Upstream => UpstreamError::new_err(message),
        K::Transport => TransportError::new_err(message),
        K::Open => OpenError::new_err(message),
        K::Truncated => TruncatedError::new_err(message),
        K::Timeout => IdleTimeoutError::new_err(message),
        K::Internal => InternalError::new_err(message),
        _ => ChoicewiseError::new_err(message),
    }
}

/// The lowercase name of an error's kind, for `.kind`.
fn kind_name(kind: choicewise::ErrorKind) -> String {
    format!("{kind:?}").to_lowercase()
}

/// The exception of this error's kind (a `ChoicewiseError`), with its accessors as
/// attributes and `partial` (what was assembled before it, or `None`).
pub(crate) fn to_py(
    py: Python<'_>,
    error: &choicewise::Error,
    partial: Option<Py<PyAny>>,
) -> PyErr {
    let err = new_err(error.kind(), error.to_string());
    let value = err.value(py);
    let attributes = (|| -> PyResult<()> {
        value.setattr("kind", kind_name(error.kind()))?;
        value.setattr("line", error.line())?;
        value.setattr("offset", error.offset())?;
        value.setattr("choice", error.choice())?;
        value.setattr("upstream", error.upstream())?;
        value.setattr("retryable", error.kind().is_retryable())?;
        value.setattr("partial", partial)?;
        Ok(())
    })();
    match attributes {
        Ok(()) => err,
        Err(e) => e,
    }
}

/// A `PartialJsonError` for this parse error.
pub(crate) fn partial_json(
    py: Python<'_>,
    error: &choicewise_partial_json::PartialJsonError,
) -> PyErr {
    let err = PartialJsonError::new_err(error.to_string());
    let value = err.value(py);
    let attributes = (|| -> PyResult<()> {
        value.setattr("kind", "partial_json")?;
        value.setattr("line", None::<u64>)?;
        value.setattr("offset", error.offset())?;
        value.setattr("choice", None::<u32>)?;
        value.setattr("upstream", None::<usize>)?;
        value.setattr("retryable", false)?;
        value.setattr("partial", None::<Py<PyAny>>)?;
        Ok(())
    })();
    match attributes {
        Ok(()) => err,
        Err(e) => e,
    }
}

/// A `ValueError` for an argument of the wrong shape.
pub(crate) fn value_error(message: impl Into<String>) -> PyErr {
    PyValueError::new_err(message.into())
}
