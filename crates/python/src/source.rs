//! Python byte chunks as a `choicewise::Source`.
//!
//! - `bytes`, `bytearray`, `memoryview`, `str`, or a `list`/`tuple` of them: copied at once.
//! - An async iterable (`__aiter__`: httpx's `aiter_bytes()`, aiohttp's `content.iter_any()`,
//!   openai's raw response): each `__anext__` is awaited on the event loop running where the
//!   `Completions` was made, driven by the reader actor; the loop must keep running.
//! - Any other iterable (a file opened in binary mode, httpx's `iter_bytes()`, a generator):
//!   each `next()` runs on a blocking thread of the runtime, with the GIL held only there.
//!
//! A chunk of another type, or an exception of the iterable, ends the stream with a
//! `transport` error carrying the Python exception's text.

use bytes::Bytes;
use futures::StreamExt;
use futures::stream::{self, BoxStream};
use pyo3::exceptions::{PyStopAsyncIteration, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyList, PyMemoryView, PyString, PyTuple};

type Chunk = Result<Bytes, PyErr>;

/// One chunk as bytes.
fn chunk(obj: &Bound<'_, PyAny>) -> PyResult<Bytes> {
    if let Ok(b) = obj.cast::<PyBytes>() {
        Ok(Bytes::copy_from_slice(b.as_bytes()))
    } else if let Ok(s) = obj.cast::<PyString>() {
        Ok(Bytes::copy_from_slice(s.to_cow()?.as_bytes()))
    } else if let Ok(b) = obj.cast::<PyByteArray>() {
        Ok(Bytes::from(b.to_vec()))
    } else if obj.is_instance_of::<PyMemoryView>() {
        let b = obj.call_method0("tobytes")?;
        Ok(Bytes::copy_from_slice(b.cast::<PyBytes>()?.as_bytes()))
    } else {
        Err(PyTypeError::new_err(format!(
            "a chunk must be bytes, bytearray, memoryview or str, not {}",
            obj.get_type().name()?
        )))
    }
}

/// Whether `obj` is one chunk rather than an iterable of chunks.
fn is_chunk(obj: &Bound<'_, PyAny>) -> bool {
    obj.is_instance_of::<PyBytes>()
        || obj.is_instance_of::<PyString>()
        || obj.is_instance_of::<PyByteArray>()
        || obj.is_instance_of::<PyMemoryView>()
}

/// The chunks of `obj` as a stream.
pub(crate) fn chunks(
    py: Python<'_>,
    obj: &Bound<'_, PyAny>,
) -> PyResult<BoxStream<'static, Chunk>> {
    if is_chunk(obj) {
        return Ok(stream::iter([Ok(chunk(obj)?)]).boxed());
    }
    if obj.is_instance_of::<PyList>() || obj.is_instance_of::<PyTuple>() {
        let all: Vec<Chunk> = obj
            .try_iter()?
            .map(|item| item.and_then(|item| chunk(&item)).map(Ok))
            .collect::<PyResult<_>>()?;
        return Ok(stream::iter(all).boxed());
    }
    if obj.hasattr("__aiter__")? {
        let locals = pyo3_async_runtimes::tokio::get_current_locals(py).map_err(|_| {
            PyTypeError::new_err(
                "an async iterable of chunks needs a running event loop: make the Completions \
                 inside a coroutine (or pass a sync iterable)",
            )
        })?;
        let aiter = obj.call_method0("__aiter__")?.unbind();
        let state = (aiter, locals);
        return Ok(stream::unfold(Some(state), |state| async move {
            let (aiter, locals) = state?;
            let next = Python::attach(|py| {
                let awaitable = aiter.bind(py).call_method0("__anext__")?;
                pyo3_async_runtimes::into_future_with_locals(&locals, awaitable)
            });
            let result = match next {
                Ok(future) => future.await,
                Err(e) => Err(e),
            };
            let item = Python::attach(|py| match result {
                Ok(obj) => Some(chunk(obj.bind(py))),
                Err(e) if e.is_instance_of::<PyStopAsyncIteration>(py) => None,
                Err(e) => Some(Err(e)),
            })?;
            let failed = item.is_err();
            Some((item, (!failed).then_some((aiter, locals))))
        })
        .boxed());
    }
    let iter = obj.try_iter()?.unbind();
    Ok(stream::unfold(Some(iter), |iter| async move {
        let iter = iter?;
        let (iter, item) = tokio::task::spawn_blocking(move || {
            let item = Python::attach(|py| {
                let mut it = iter.bind(py).clone();
                it.next().map(|item| item.and_then(|item| chunk(&item)))
            });
            (iter, item)
        })
        .await
        .ok()?;
        let item = item?;
        let failed = item.is_err();
        Some((item, (!failed).then_some(iter)))
    })
    .boxed())
}
