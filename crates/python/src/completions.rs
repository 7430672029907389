//! `Completions`, `Choice` and `Selection`: the Python face of `choicewise::Completions`.
//!
//! Methods that wait come in pairs: `collect()`, `message()`, `vote()`... wait with the GIL
//! released and return the result; `acollect()`, `amessage()`, `avote()`... return an awaitable
//! of it, for a coroutine (cancelling it drops the Rust future). For the callers written
//! before the pairs, the first kind still returns an awaitable where an asyncio loop runs in
//! the thread ([`Mode::Dual`]).

use std::future::Future;
use std::time::Duration;

use futures::StreamExt;
use pyo3::prelude::*;
use pyo3::types::{PyList, PyModule};
use serde::Serialize;

use crate::pump::{
    Calls, ChoiceIterator, Choices, FunctionCallIterator, Pump, TextIterator, Texts,
};
use crate::{errors, in_event_loop, json, runtime, source, wait};

/// How a waiting method gives its result.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// `collect()`...: the result, waited for with the GIL released; an awaitable where an
    /// asyncio loop runs in the thread (as before the `a` methods, for the callers that
    /// await it).
    Dual,
    /// `acollect()`...: always an awaitable, to await in the running loop.
    Async,
}

/// Runs `future` as `mode` asks: an awaitable, or the result, waited for with the GIL
/// released. `convert` makes the Python result (with the GIL).
fn dual<F, T, C>(py: Python<'_>, mode: Mode, future: F, convert: C) -> PyResult<Py<PyAny>>
where
    F: Future<Output = T> + Send + 'static,
    T: Send + 'static,
    C: FnOnce(Python<'_>, T) -> PyResult<Py<PyAny>> + Send + 'static,
{
    if mode == Mode::Async || in_event_loop(py) {
        let awaitable = pyo3_async_runtimes::tokio::future_into_py(py, async move {
            let output = future.await;
            Python::attach(|py| convert(py, output))
        })?;
        Ok(awaitable.unbind())
    } else {
        let output = wait(py, future)?;
        convert(py, output)
    }
}

/// A serializable value as the Python object `json.loads` would give for its JSON.
fn to_py_value<T: Serialize>(py: Python<'_>, value: &T) -> PyResult<Py<PyAny>> {
    let value = serde_json::to_value(value)
        .map_err(|e| errors::value_error(format!("cannot convert to JSON: {e}")))?;
    Ok(json::to_py(py, &value)?.unbind())
}

/// A completion as an openai `ChatCompletion` when openai is importable, else a dict
/// (`choicewise._compat.chat_completion` decides).
fn chat_completion(py: Python<'_>, completion: &choicewise::ChatCompletion) -> PyResult<Py<PyAny>> {
    let d = to_py_value(py, completion)?;
    let compat = PyModule::import(py, "choicewise._compat")?;
    Ok(compat.call_method1("chat_completion", (d,))?.unbind())
}

/// A Python dict (or any JSON-serializable object) as a JSON value, through `json.dumps`.
fn from_py_value(py: Python<'_>, obj: &Bound<'_, PyAny>) -> PyResult<serde_json::Value> {
    let text: String = PyModule::import(py, "json")?
        .call_method1("dumps", (obj,))?
        .extract()?;
    serde_json::from_str(&text).map_err(|e| errors::value_error(format!("not JSON: {e}")))
}

/// A source of byte chunks with its options.
fn make_source(
    py: Python<'_>,
    chunks: &Bound<'_, PyAny>,
    n: Option<u32>,
    request: Option<&Bound<'_, PyAny>>,
    idle_timeout: Option<f64>,
) -> PyResult<choicewise::Source> {
    let stream = source::chunks(py, chunks)?;
    let mut source = choicewise::Source::sse(stream);
    if let Some(n) = n {
        source = source.n(n);
    }
    if let Some(request) = request {
        source = source.request(from_py_value(py, request)?);
    }
    if let Some(seconds) = idle_timeout {
        source = source.idle_timeout(seconds_to_duration(seconds)?);
    }
    Ok(source)
}

fn seconds_to_duration(seconds: f64) -> PyResult<Duration> {
    Duration::try_from_secs_f64(seconds)
        .map_err(|_| errors::value_error(format!("{seconds} is not a duration in seconds")))
}

/// One streamed chat completion with several choices, demultiplexed by choice.
///
/// `Completions(chunks)` reads SSE bytes from `chunks`: `bytes`, a list of them, or any sync
/// or async iterable of `bytes` (an async one is driven on the event loop running where the
/// `Completions` is made). Reading starts at once, on the process's Rust runtime; each choice
/// is parsed and assembled there, concurrently. When the object and every choice and stream
/// taken from it are gone, reading stops and the iterable is dropped.
#[pyclass(module = "choicewise", frozen)]
pub(crate) struct Completions {
    inner: choicewise::Completions,
}

#[pymethods]
impl Completions {
    #[new]
    #[pyo3(signature = (chunks, *, n = None, request = None, idle_timeout = None))]
    fn new(
        py: Python<'_>,
        chunks: &Bound<'_, PyAny>,
        n: Option<u32>,
        request: Option<&Bound<'_, PyAny>>,
        idle_timeout: Option<f64>,
    ) -> PyResult<Self> {
        let source = make_source(py, chunks, n, request, idle_timeout)?;
        let _runtime = runtime().enter();
        Ok(Completions {
            inner: choicewise::Completions::new(source),
        })
    }

    /// Several streams (one per request) as one completion: their choices numbered across
    /// them, in the order given (the first stream's `n` must be known to number the next:
    /// pass `n=` for streams of more than one choice).
    #[staticmethod]
    #[pyo3(signature = (streams, *, n = None))]
    fn fan_out(py: Python<'_>, streams: &Bound<'_, PyList>, n: Option<Vec<u32>>) -> PyResult<Self> {
        let mut sources = Vec::new();
        for (i, stream) in streams.iter().enumerate() {
            let count = match &n {
                Some(n) => *n
                    .get(i)
                    .ok_or_else(|| errors::value_error("n= needs one count per stream"))?,
                None => 1,
            };
            sources.push(make_source(py, &stream, Some(count), None, None)?);
        }
        let _runtime = runtime().enter();
        Ok(Completions {
            inner: choicewise::Completions::builder().fan_out(sources),
        })
    }

    /// The choices, each once, in order of first appearance (not index order): a `for` and
    /// `async for` iterator of `Choice`.
    fn choices(&self) -> ChoiceIterator {
        let stream = self.inner.choices().map(Ok).boxed();
        ChoiceIterator::new(Pump::new(
            stream,
            Choices(|py, choice| Ok(Py::new(py, Choice::new(choice))?.into_any())),
        ))
    }

    /// The choice with this index once it appears, or `None` if the stream ends without it.
    fn choice(&self, py: Python<'_>, index: u32) -> PyResult<Py<PyAny>> {
        self.choice_as(py, Mode::Dual, index)
    }

    /// `choice(index)`, awaitable.
    fn achoice(&self, py: Python<'_>, index: u32) -> PyResult<Py<PyAny>> {
        self.choice_as(py, Mode::Async, index)
    }

    /// The whole completion once the stream is over: an openai `ChatCompletion` (a dict
    /// without openai), choices by index. On error raises the `ChoicewiseError` of its kind,
    /// whose `.partial` is everything assembled.
    fn collect(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.collect_as(py, Mode::Dual)
    }

    /// `collect()`, awaitable.
    fn acollect(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.collect_as(py, Mode::Async)
    }

    /// Token usage once the stream is over: a `choicewise.Usage` (openai's `CompletionUsage`
    /// with `source`, `estimate` and `upstreams`; a dict without openai): the provider's
    /// figures, else an estimate.
    fn usage(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.usage_as(py, Mode::Dual)
    }

    /// `usage()`, awaitable.
    fn ausage(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.usage_as(py, Mode::Async)
    }

    /// Once every choice is settled: `[(index, ChoicewiseError)]` for each failed choice.
    fn choice_errors(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.choice_errors_as(py, Mode::Dual)
    }

    /// `choice_errors()`, awaitable.
    fn achoice_errors(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.choice_errors_as(py, Mode::Async)
    }

    /// Cancels every choice still open (and every one still to appear), waits until the
    /// completion is over and gives the indexes of the choices that ended cancelled.
    fn cancel(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.cancel_as(py, Mode::Dual)
    }

    /// `cancel()`, awaitable.
    fn acancel(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.cancel_as(py, Mode::Async)
    }

    /// Cancels every choice but those in `keep`, without waiting.
    fn cancel_except(&self, keep: Vec<u32>) {
        let _runtime = runtime().enter();
        self.inner.cancel_except(&keep);
    }

    /// Plurality vote over the choices that finish (`stop` or `tool_calls`): each votes with
    /// `pattern`'s first group in its content (the whole match if no group; no match, no
    /// vote), decided early, the rest cancelled (unless `keep_rest`). A key needs
    /// `min_votes` votes to win (default 2: one vote out of several is no majority). Gives a
    /// `Selection`. The `vote-K` rows of docs/picks.md; with `window=4` over 64 samples, its
    /// `adaptive` row.
    #[pyo3(signature = (pattern, *, min_votes = None, window = None, deadline = None, keep_rest = false))]
    fn vote(
        &self,
        py: Python<'_>,
        pattern: &str,
        min_votes: Option<usize>,
        window: Option<usize>,
        deadline: Option<f64>,
        keep_rest: bool,
    ) -> PyResult<Py<PyAny>> {
        let policy = vote_policy(pattern, min_votes, window, deadline)?;
        self.run(py, Mode::Dual, policy, keep_rest)
    }

    /// `vote(...)`, awaitable.
    #[pyo3(signature = (pattern, *, min_votes = None, window = None, deadline = None, keep_rest = false))]
    fn avote(
        &self,
        py: Python<'_>,
        pattern: &str,
        min_votes: Option<usize>,
        window: Option<usize>,
        deadline: Option<f64>,
        keep_rest: bool,
    ) -> PyResult<Py<PyAny>> {
        let policy = vote_policy(pattern, min_votes, window, deadline)?;
        self.run(py, Mode::Async, policy, keep_rest)
    }

    /// The first choice to finish (`stop` or `tool_calls`); the rest cancelled (unless
    /// `keep_rest`). Gives a `Selection`. The `first-finished` row of docs/picks.md (over 4
    /// samples).
    #[pyo3(signature = (*, deadline = None, keep_rest = false))]
    fn first_finished(
        &self,
        py: Python<'_>,
        deadline: Option<f64>,
        keep_rest: bool,
    ) -> PyResult<Py<PyAny>> {
        self.run(py, Mode::Dual, first_finished_policy(deadline)?, keep_rest)
    }

    /// `first_finished(...)`, awaitable.
    #[pyo3(signature = (*, deadline = None, keep_rest = false))]
    fn afirst_finished(
        &self,
        py: Python<'_>,
        deadline: Option<f64>,
        keep_rest: bool,
    ) -> PyResult<Py<PyAny>> {
        self.run(py, Mode::Async, first_finished_policy(deadline)?, keep_rest)
    }

    /// The pick a policy states, as a dict with the gateway's extension's fields (`select`,
    /// `vote_by`, `min_votes`, `window`, `confidence`, `deadline_ms`, ...), checked as the
    /// gateway checks it (`ValueError` naming the field). Gives a `Selection`. Each row of
    /// docs/picks.md is such a policy (its `choicewise` column), e.g. `sampled-low`:
    /// `{"samples": 64, "select": "vote", "vote_by": "#### (\\d+)", "window": 4,
    /// "confidence": {"measure": "sampled", "warmup": 8, "keep": 0.1, "group_tokens": 4}}`.
    /// `confidence.measure` is `"sampled"` (the default: each token's own log-probability)
    /// or `"top_k"` (DeepConf's), each with its own defaults.
    #[pyo3(signature = (policy, *, keep_rest = false))]
    fn pick(
        &self,
        py: Python<'_>,
        policy: &Bound<'_, PyAny>,
        keep_rest: bool,
    ) -> PyResult<Py<PyAny>> {
        self.run(py, Mode::Dual, policy_of(py, policy)?, keep_rest)
    }

    /// `pick(policy)`, awaitable.
    #[pyo3(signature = (policy, *, keep_rest = false))]
    fn apick(
        &self,
        py: Python<'_>,
        policy: &Bound<'_, PyAny>,
        keep_rest: bool,
    ) -> PyResult<Py<PyAny>> {
        self.run(py, Mode::Async, policy_of(py, policy)?, keep_rest)
    }

    /// The tolerated irregularities of the input so far, one line each.
    fn warnings(&self) -> Vec<String> {
        self.inner
            .warnings()
            .iter()
            .map(|w| format!("{w:?}"))
            .collect()
    }

    fn __repr__(&self) -> String {
        format!("{:?}", self.inner)
    }
}

impl Completions {
    /// Runs `policy` (the rest cancelled unless `keep_rest`), giving a `Selection` with its
    /// first selected choice.
    fn run(
        &self,
        py: Python<'_>,
        mode: Mode,
        policy: choicewise::Policy,
        keep_rest: bool,
    ) -> PyResult<Py<PyAny>> {
        let inner = self.inner.clone();
        let future = async move {
            let pick = inner.pick(&policy);
            let selection = match keep_rest {
                true => pick.keep_rest().await,
                false => pick.await,
            };
            let first = match selection.selected.first() {
                Some(&index) => inner.choice(index).await,
                None => None,
            };
            (selection, first)
        };
        dual(py, mode, future, Selection::to_py)
    }

    fn choice_as(&self, py: Python<'_>, mode: Mode, index: u32) -> PyResult<Py<PyAny>> {
        let inner = self.inner.clone();
        dual(
            py,
            mode,
            async move { inner.choice(index).await },
            |py, choice| match choice {
                Some(choice) => Ok(Py::new(py, Choice::new(choice))?.into_any()),
                None => Ok(py.None()),
            },
        )
    }

    fn collect_as(&self, py: Python<'_>, mode: Mode) -> PyResult<Py<PyAny>> {
        let inner = self.inner.clone();
        dual(
            py,
            mode,
            async move { inner.collect().await },
            |py, result| match result {
                Ok(completion) => chat_completion(py, &completion),
                Err(incomplete) => {
                    let partial = chat_completion(py, &incomplete.partial)?;
                    Err(errors::to_py(py, &incomplete.error, Some(partial)))
                }
            },
        )
    }

    fn usage_as(&self, py: Python<'_>, mode: Mode) -> PyResult<Py<PyAny>> {
        let inner = self.inner.clone();
        dual(py, mode, async move { inner.usage().await }, |py, usage| {
            let d = to_py_value(py, &usage)?;
            let compat = PyModule::import(py, "choicewise._compat")?;
            Ok(compat.call_method1("usage", (d,))?.unbind())
        })
    }

    fn choice_errors_as(&self, py: Python<'_>, mode: Mode) -> PyResult<Py<PyAny>> {
        let inner = self.inner.clone();
        dual(
            py,
            mode,
            async move { inner.choice_errors().await },
            |py, errors| {
                let list = PyList::empty(py);
                for (index, error) in errors {
                    list.append((index, errors::to_py(py, &error, None).into_value(py)))?;
                }
                Ok(list.into_any().unbind())
            },
        )
    }

    fn cancel_as(&self, py: Python<'_>, mode: Mode) -> PyResult<Py<PyAny>> {
        let inner = self.inner.clone();
        dual(
            py,
            mode,
            async move { inner.cancel().await },
            |py, indexes| Ok(PyList::new(py, indexes)?.into_any().unbind()),
        )
    }
}

/// The policy of `vote(...)`, checked (a `ValueError` naming the argument).
fn vote_policy(
    pattern: &str,
    min_votes: Option<usize>,
    window: Option<usize>,
    deadline: Option<f64>,
) -> PyResult<choicewise::Policy> {
    let mut policy = choicewise::Policy::builder()
        .select(choicewise::PickRule::Vote)
        .vote_by(pattern);
    if let Some(votes) = min_votes {
        policy = policy.min_votes(votes);
    }
    if let Some(size) = window {
        policy = policy.window(size);
    }
    if let Some(seconds) = deadline {
        policy = policy.deadline(seconds_to_duration(seconds)?);
    }
    policy
        .build(&choicewise::policy::PolicyLimits::default())
        .map_err(|e| refused(&e))
}

/// The policy of `first_finished(...)`, checked.
fn first_finished_policy(deadline: Option<f64>) -> PyResult<choicewise::Policy> {
    let mut policy = choicewise::Policy::builder().select(choicewise::PickRule::FirstFinished);
    if let Some(seconds) = deadline {
        policy = policy.deadline(seconds_to_duration(seconds)?);
    }
    policy
        .build(&choicewise::policy::PolicyLimits::default())
        .map_err(|e| refused(&e))
}

/// The policy a dict states, checked as the gateway checks its extension.
fn policy_of(py: Python<'_>, policy: &Bound<'_, PyAny>) -> PyResult<choicewise::Policy> {
    let serde_json::Value::Object(fields) = from_py_value(py, policy)? else {
        return Err(errors::value_error("a policy is a dict"));
    };
    choicewise::Policy::from_json(&fields, &choicewise::policy::PolicyLimits::default())
        .map_err(|e| errors::value_error(e.to_string()))
}

/// One choice of a completion. Each of its streams can be opened at any time, any number of
/// times, and replays from the start; a slow reader never slows the others.
#[pyclass(module = "choicewise", frozen)]
pub(crate) struct Choice {
    inner: choicewise::Choice,
}

impl Choice {
    pub(crate) fn new(inner: choicewise::Choice) -> Self {
        Choice { inner }
    }
}

#[pymethods]
impl Choice {
    /// The choice's index.
    #[getter]
    fn index(&self) -> u32 {
        self.inner.index()
    }

    /// The content, delta by delta (`str`), `for` or `async for`; cancelling a task awaiting
    /// it cancels the choice.
    fn content(&self) -> TextIterator {
        let stream = self.inner.content().boxed();
        TextIterator::new(Pump::new(stream, Texts(self.inner.clone())))
    }

    /// The reasoning text (`reasoning_content`), delta by delta.
    fn reasoning(&self) -> TextIterator {
        let stream = self.inner.reasoning().boxed();
        TextIterator::new(Pump::new(stream, Texts(self.inner.clone())))
    }

    /// The refusal text, delta by delta.
    fn refusal(&self) -> TextIterator {
        let stream = self.inner.refusal().boxed();
        TextIterator::new(Pump::new(stream, Texts(self.inner.clone())))
    }

    /// The function calls, event by event: dicts with `type` ("started", "arguments",
    /// "finished") and `call` (the call's position); "finished" has the whole `arguments`,
    /// their parsed `value` (or `error`).
    fn function_calls(&self) -> FunctionCallIterator {
        let stream = self.inner.function_calls().boxed();
        FunctionCallIterator::new(Pump::new(stream, Calls(self.inner.clone())))
    }

    /// The assembled choice once it is over (a dict: `index`, `message`, `finish_reason`...);
    /// on error raises `ChoicewiseError` whose `.partial` is what was assembled.
    fn message(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.message_as(py, Mode::Dual)
    }

    /// `message()`, awaitable.
    fn amessage(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.message_as(py, Mode::Async)
    }

    /// Cancels the choice: it ends after the updates it already received; the upstream is
    /// dropped once no choice of it is still open. `False` if it had already ended.
    fn cancel(&self) -> bool {
        let _runtime = runtime().enter();
        self.inner.cancel()
    }

    /// Whether the choice ended cancelled.
    #[getter]
    fn cancelled(&self) -> bool {
        self.inner.is_cancelled()
    }

    /// Why the choice was cancelled, if it was: `"asked"` (`cancel()`), `"reader_gone"` (a
    /// task awaiting it was cancelled), `"decided"` (a pick decided without it),
    /// `"low_confidence"` (a confidence stop), `"closing"` (the completion's `cancel()` or
    /// `cancel_except()`), `"deadline"`, `"shutting_down"`; `None` otherwise.
    #[getter]
    fn cancel_reason(&self) -> Option<&'static str> {
        self.inner.cancel_reason().map(|r| r.as_str())
    }

    fn __repr__(&self) -> String {
        format!("<choicewise.Choice index={}>", self.inner.index())
    }
}

/// What `vote()` or `first_finished()` picked: `.choice` (the first selected `Choice`, or
/// `None`), `.selected` and `.cancelled` (indexes), `.key` and `.votes` (a vote's winner),
/// `.reason` (why nothing was selected), `.timed_out`. False when nothing was selected.
#[pyclass(module = "choicewise", frozen, get_all)]
pub(crate) struct Selection {
    choice: Option<Py<Choice>>,
    selected: Vec<u32>,
    cancelled: Vec<u32>,
    key: Option<String>,
    votes: Option<usize>,
    counted: Option<usize>,
    reason: Option<String>,
    timed_out: bool,
}

impl Selection {
    fn to_py(
        py: Python<'_>,
        (selection, first): (choicewise::Selection, Option<choicewise::Choice>),
    ) -> PyResult<Py<PyAny>> {
        let choice = first.map(|c| Py::new(py, Choice::new(c))).transpose()?;
        let tally = selection.vote.as_ref();
        let s = Selection {
            choice,
            key: tally.map(|t| t.key.clone()),
            votes: tally.map(|t| t.votes),
            counted: tally.map(|t| t.counted),
            selected: selection.selected,
            cancelled: selection.cancelled,
            reason: selection.reason,
            timed_out: selection.timed_out,
        };
        Ok(Py::new(py, s)?.into_any())
    }
}

impl Choice {
    fn message_as(&self, py: Python<'_>, mode: Mode) -> PyResult<Py<PyAny>> {
        let inner = self.inner.clone();
        dual(
            py,
            mode,
            async move { inner.message().await },
            |py, result| match result {
                Ok(output) => to_py_value(py, &output),
                Err(incomplete) => {
                    let partial = to_py_value(py, &incomplete.partial)?;
                    Err(errors::to_py(py, &incomplete.error, Some(partial)))
                }
            },
        )
    }
}

#[pymethods]
impl Selection {
    fn __bool__(&self) -> bool {
        !self.selected.is_empty()
    }

    fn __repr__(&self) -> String {
        format!(
            "Selection(selected={:?}, cancelled={:?}, key={:?}, votes={:?}, reason={:?})",
            self.selected, self.cancelled, self.key, self.votes, self.reason
        )
    }
}

/// A policy that `vote()` or `first_finished()` states from its arguments, refused: a
/// `ValueError` naming each field as its argument (`pattern`, `deadline`, `min_votes`).
fn refused(e: &choicewise::PolicyError) -> PyErr {
    let argument = |field: &str| {
        match field {
            "vote_by" => "pattern",
            "deadline_ms" => "deadline",
            field => field,
        }
        .to_string()
    };
    let problem = e.problem_naming(argument);
    errors::value_error(format!("{}: {problem}", argument(e.field())))
}
