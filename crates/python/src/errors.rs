//! The package's exceptions: `ChoicewiseError` for everything that ends a completion or one
//! of its choices (with `.kind`, `.line`, `.offset`, `.choice`, `.upstream`, `.retryable`, and
//! `.partial`: what was assembled before the error, where there is one), `PartialJsonError`
//! for invalid JSON given to `PartialJson`.

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

/// The lowercase name of an error's kind, for `.kind`.
fn kind_name(kind: choicewise::ErrorKind) -> String {
    format!("{kind:?}").to_lowercase()
}

/// A `ChoicewiseError` for this error, with its accessors as attributes and `partial` (what
/// was assembled before it, or `None`).
pub(crate) fn to_py(
    py: Python<'_>,
    error: &choicewise::Error,
    partial: Option<Py<PyAny>>,
) -> PyErr {
    let err = ChoicewiseError::new_err(error.to_string());
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
