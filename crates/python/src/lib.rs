//! `choicewise._choicewise`, the extension module under the Python package `choicewise`: a thin
//! PyO3 layer over the Rust crates (the `choicewise` facade, `choicewise-partial-json` and the
//! `choicewise` command of `choicewise-cli`). The Python conventions (the `stream()` context
//! manager over an openai client, the `ChatCompletion` of `collect()`) live in the package's
//! Python files (`python/choicewise`); this module does the work.
//!
//! - One tokio runtime per process (pyo3-async-runtimes' own, started at first use) runs the
//!   reader and choice actors and every future awaited from Python.
//! - Every blocking wait releases the GIL ([`wait`]), and wakes every 100 ms to let a
//!   Ctrl-C through as `KeyboardInterrupt`.
//! - Every Rust error becomes an exception of the package ([`errors`]); PyO3 turns a panic in a
//!   method into `PanicException`, so none crosses into Python's C code.

mod completions;
mod errors;
mod json;
mod pump;
mod source;

use std::future::Future;
use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::PyList;

/// The process's tokio runtime, started on first use (pyo3-async-runtimes' own, so that the
/// futures it turns into awaitables and the actors share it).
pub(crate) fn runtime() -> &'static tokio::runtime::Runtime {
    pyo3_async_runtimes::tokio::get_runtime()
}

/// Waits for `future` on the runtime with the GIL released, waking every 100 ms to check for
/// signals: a Ctrl-C raises `KeyboardInterrupt` (and drops the future) as in plain Python.
pub(crate) fn wait<F>(py: Python<'_>, future: F) -> PyResult<F::Output>
where
    F: Future + Send,
    F::Output: Send,
{
    let mut future = std::pin::pin!(future);
    loop {
        let step = py.detach(|| {
            runtime().block_on(async {
                tokio::time::timeout(Duration::from_millis(100), future.as_mut())
                    .await
                    .ok()
            })
        });
        if let Some(output) = step {
            return Ok(output);
        }
        py.check_signals()?;
    }
}

/// Whether an asyncio event loop runs in this thread: the dual methods (`collect()`,
/// `vote()`...) return an awaitable then, and their result directly otherwise.
pub(crate) fn in_event_loop(py: Python<'_>) -> bool {
    pyo3_async_runtimes::get_running_loop(py).is_ok()
}

/// Runs the `choicewise` command with these arguments (`sys.argv`: the program's name first)
/// and returns its exit status. The GIL is released while it runs.
#[pyfunction]
fn run_cli(py: Python<'_>, argv: &Bound<'_, PyList>) -> PyResult<u8> {
    let args: Vec<std::ffi::OsString> = argv
        .iter()
        .map(|a| a.extract::<String>().map(std::ffi::OsString::from))
        .collect::<Result<_, _>>()?;
    Ok(py.detach(move || choicewise_cli::run(args)))
}

/// The extension module.
#[pymodule]
fn _choicewise(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    for (name, class) in errors::classes(py) {
        m.add(name, class)?;
    }
    m.add_class::<completions::Completions>()?;
    m.add_class::<completions::Choice>()?;
    m.add_class::<completions::Selection>()?;
    m.add_class::<pump::ChoiceIterator>()?;
    m.add_class::<pump::TextIterator>()?;
    m.add_class::<pump::FunctionCallIterator>()?;
    m.add_class::<pump::Ready>()?;
    m.add_class::<json::PartialJson>()?;
    m.add_function(wrap_pyfunction!(run_cli, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
