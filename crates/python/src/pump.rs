//! Rust streams as Python iterators that are both sync (`for`) and async (`async for`).
//!
//! A [`Pump`] owns the stream and a buffer. Each time it has to wait, it then also takes
//! every item already available without waiting, so a fast stream crosses from Rust to Python
//! in batches: the next calls are served from the buffer without releasing the GIL or waking
//! the event loop. `__next__` waits with the GIL released; `__anext__` returns an awaitable
//! already resolved when an item is ready ([`Ready`]), else an asyncio future on the runtime.
//! An error is raised after every item received before it; the iterator ends after it.
//! Inside a running event loop, `__next__` serves what is ready but will not wait (that would
//! block the loop, and an async source driven by it): it raises `RuntimeError`, use
//! `async for`.

use std::collections::VecDeque;
use std::sync::Arc;

use futures::stream::BoxStream;
use futures::{FutureExt, StreamExt};
use pyo3::exceptions::{PyRuntimeError, PyStopAsyncIteration, PyStopIteration};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};

use choicewise::{CallKind, FunctionCallEvent};

use crate::{errors, in_event_loop, json, runtime, wait};

/// Most items taken at once without waiting.
const BATCH: usize = 1024;

type Item<T> = Result<T, choicewise::Error>;

/// A stream and the items taken from it but not yet handed out.
struct State<T> {
    stream: BoxStream<'static, Item<T>>,
    buffer: VecDeque<Item<T>>,
    ended: bool,
}

impl<T> State<T> {
    /// Moves what is ready into the buffer, without waiting.
    fn take_ready(&mut self) {
        let _runtime = runtime().enter();
        while !self.ended && self.buffer.len() < BATCH {
            match self.stream.next().now_or_never() {
                Some(Some(item)) => {
                    let failed = item.is_err();
                    self.buffer.push_back(item);
                    if failed {
                        self.ended = true;
                    }
                }
                Some(None) => self.ended = true,
                None => break,
            }
        }
    }

    /// The next item if one is ready: `Some(None)` at the end, `None` if it must wait.
    fn ready(&mut self) -> Option<Option<Item<T>>> {
        if self.buffer.is_empty() {
            self.take_ready();
        }
        match self.buffer.pop_front() {
            Some(item) => Some(Some(item)),
            None if self.ended => Some(None),
            None => None,
        }
    }

    /// The next item, waiting for it; `None` at the end.
    async fn next(&mut self) -> Option<Item<T>> {
        if let Some(ready) = self.ready() {
            return ready;
        }
        match self.stream.next().await {
            Some(item) => {
                if item.is_err() {
                    self.ended = true;
                } else {
                    self.take_ready();
                }
                Some(item)
            }
            None => {
                self.ended = true;
                None
            }
        }
    }
}

/// How the items of a pump become Python objects.
pub(crate) trait Convert: Send + Sync + 'static {
    /// The Rust item.
    type Item: Send + 'static;
    /// The item as a Python object.
    fn convert(&self, py: Python<'_>, item: Self::Item) -> PyResult<Py<PyAny>>;
    /// Called when an `__anext__` is cancelled before its item came (the Python task awaiting
    /// it was cancelled): a choice's stream cancels its choice.
    fn cancelled(&self) {}
}

/// A stream handed out to Python item by item.
pub(crate) struct Pump<C: Convert> {
    state: Arc<tokio::sync::Mutex<State<C::Item>>>,
    convert: Arc<C>,
}

impl<C: Convert> Pump<C> {
    pub(crate) fn new(stream: BoxStream<'static, Item<C::Item>>, convert: C) -> Self {
        Pump {
            state: Arc::new(tokio::sync::Mutex::new(State {
                stream,
                buffer: VecDeque::new(),
                ended: false,
            })),
            convert: Arc::new(convert),
        }
    }

    /// `__next__`: the next item, waiting with the GIL released; `StopIteration` at the end.
    fn next(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let ready = match self.state.try_lock() {
            Ok(mut state) => state.ready(),
            Err(_) => None,
        };
        let item = match ready {
            Some(item) => item,
            None => {
                if in_event_loop(py) {
                    // Waiting here would stall the loop, and with it an async source.
                    return Err(PyRuntimeError::new_err(
                        "the next item is not there yet, and waiting for it would block the \
                         running event loop: use `async for` here",
                    ));
                }
                let state = self.state.clone();
                wait(py, async move { state.lock().await.next().await })?
            }
        };
        match item {
            Some(Ok(item)) => self.convert.convert(py, item),
            Some(Err(e)) => Err(errors::to_py(py, &e, None)),
            None => Err(PyStopIteration::new_err(())),
        }
    }

    /// `__anext__`: an awaitable of the next item; `StopAsyncIteration` at the end.
    fn anext<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let ready = match self.state.try_lock() {
            Ok(mut state) => state.ready(),
            Err(_) => None,
        };
        if let Some(item) = ready {
            return match item {
                Some(Ok(item)) => {
                    let value = self.convert.convert(py, item)?;
                    Ok(Bound::new(py, Ready { value: Some(value) })?.into_any())
                }
                Some(Err(e)) => Err(errors::to_py(py, &e, None)),
                None => Err(PyStopAsyncIteration::new_err(())),
            };
        }
        let state = self.state.clone();
        let convert = self.convert.clone();
        pyo3_async_runtimes::tokio::future_into_py(py, async move {
            let mut guard = CancelGuard(Some(convert));
            let item = state.lock().await.next().await;
            let convert = guard.0.take().expect("taken once");
            Python::attach(|py| match item {
                Some(Ok(item)) => convert.convert(py, item),
                Some(Err(e)) => Err(errors::to_py(py, &e, None)),
                None => Err(PyStopAsyncIteration::new_err(())),
            })
        })
    }
}

/// Calls [`Convert::cancelled`] if dropped while still armed: the future of an `__anext__`
/// dropped before its item came.
struct CancelGuard<C: Convert>(Option<Arc<C>>);

impl<C: Convert> Drop for CancelGuard<C> {
    fn drop(&mut self) {
        if let Some(convert) = self.0.take() {
            convert.cancelled();
        }
    }
}

/// An awaitable already resolved: `await` gives its value at once, without a trip through
/// the event loop.
#[pyclass(module = "choicewise._choicewise")]
pub(crate) struct Ready {
    value: Option<Py<PyAny>>,
}

#[pymethods]
impl Ready {
    fn __await__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&mut self, py: Python<'_>) -> PyResult<()> {
        let value = self.value.take().unwrap_or_else(|| py.None());
        Err(PyStopIteration::new_err((value,)))
    }
}

/// Makes a pyclass wrapping a [`Pump`] an iterator and an async iterator.
macro_rules! iterator {
    ($name:ident, $convert:ty, $doc:literal) => {
        #[doc = $doc]
        #[pyclass(module = "choicewise", frozen)]
        pub(crate) struct $name {
            pump: Pump<$convert>,
        }

        impl $name {
            pub(crate) fn new(pump: Pump<$convert>) -> Self {
                $name { pump }
            }
        }

        #[pymethods]
        impl $name {
            fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
                slf
            }

            fn __next__(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
                self.pump.next(py)
            }

            fn __aiter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
                slf
            }

            fn __anext__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
                self.pump.anext(py)
            }
        }
    };
}

/// The choices of a completion, as Python objects: made by the function the completion
/// gives (its `Choice` class), so that this module names no class of the completion's.
pub(crate) struct Choices(pub(crate) fn(Python<'_>, choicewise::Choice) -> PyResult<Py<PyAny>>);

impl Convert for Choices {
    type Item = choicewise::Choice;

    fn convert(&self, py: Python<'_>, item: choicewise::Choice) -> PyResult<Py<PyAny>> {
        (self.0)(py, item)
    }
}

/// A choice's text (content, reasoning or refusal), as `str` deltas; cancelling an awaited
/// delta cancels the choice.
pub(crate) struct Texts(pub(crate) choicewise::Choice);

impl Convert for Texts {
    type Item = choicewise::Text;

    fn convert(&self, py: Python<'_>, item: choicewise::Text) -> PyResult<Py<PyAny>> {
        Ok(PyString::new(py, &item).into_any().unbind())
    }

    fn cancelled(&self) {
        self.0
            .cancel_for(choicewise::cancel::CancelReason::ReaderGone);
    }
}

/// A choice's function calls, as dicts; cancelling an awaited event cancels the choice.
pub(crate) struct Calls(pub(crate) choicewise::Choice);

impl Convert for Calls {
    type Item = FunctionCallEvent;

    fn convert(&self, py: Python<'_>, item: FunctionCallEvent) -> PyResult<Py<PyAny>> {
        let d = PyDict::new(py);
        let call = |d: &Bound<'_, PyDict>, call: &choicewise::CallRef| -> PyResult<()> {
            d.set_item("call", call.position)?;
            d.set_item(
                "kind",
                match call.kind {
                    CallKind::Tool => "tool",
                    CallKind::Function => "function",
                },
            )
        };
        match &item {
            FunctionCallEvent::Started {
                call: c, id, name, ..
            } => {
                d.set_item("type", "started")?;
                call(&d, c)?;
                d.set_item("id", id.as_deref())?;
                d.set_item("name", name.as_deref())?;
            }
            FunctionCallEvent::Arguments { call: c, fragment } => {
                d.set_item("type", "arguments")?;
                call(&d, c)?;
                d.set_item("fragment", &**fragment)?;
            }
            FunctionCallEvent::Finished {
                call: c,
                id,
                name,
                arguments,
                value,
                repaired,
            } => {
                d.set_item("type", "finished")?;
                call(&d, c)?;
                d.set_item("id", id.as_deref())?;
                d.set_item("name", name.as_deref())?;
                d.set_item("arguments", &**arguments)?;
                match value {
                    Ok(v) => {
                        d.set_item("value", json::to_py(py, &v.to_value())?)?;
                        d.set_item("error", py.None())?;
                    }
                    Err(e) => {
                        d.set_item("value", py.None())?;
                        d.set_item("error", e.to_string())?;
                    }
                }
                d.set_item("repaired", *repaired)?;
            }
            other => {
                d.set_item("type", "other")?;
                d.set_item("repr", format!("{other:?}"))?;
            }
        }
        Ok(d.into_any().unbind())
    }

    fn cancelled(&self) {
        self.0
            .cancel_for(choicewise::cancel::CancelReason::ReaderGone);
    }
}

iterator!(
    ChoiceIterator,
    Choices,
    "The choices of a completion in order of first appearance: `for` or `async for`."
);
iterator!(
    TextIterator,
    Texts,
    "A choice's text, delta by delta (`str`): `for` or `async for`; raises the choice's error \
     after every delta received before it."
);
iterator!(
    FunctionCallIterator,
    Calls,
    "A choice's function calls, event by event (dicts with `type`: \"started\", \"arguments\" \
     or \"finished\", and `call`, the call's position): `for` or `async for`."
);
