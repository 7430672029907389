//! JSON values as Python objects, and `PartialJson`: the incremental partial-JSON parser of
//! `choicewise-partial-json`.

use choicewise_partial_json::{PartialJson as Parser, Snapshot};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyList, PyString};
use serde_json::Value;

use crate::errors;

/// A JSON value as the Python object `json.loads` gives for it.
pub(crate) fn to_py<'py>(py: Python<'py>, value: &Value) -> PyResult<Bound<'py, PyAny>> {
    Ok(match value {
        Value::Null => py.None().into_bound(py),
        Value::Bool(b) => PyBool::new(py, *b).to_owned().into_any(),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                i.into_pyobject(py)?.into_any()
            } else if let Some(u) = n.as_u64() {
                u.into_pyobject(py)?.into_any()
            } else {
                n.as_f64().unwrap_or(f64::NAN).into_pyobject(py)?.into_any()
            }
        }
        Value::String(s) => PyString::new(py, s).into_any(),
        Value::Array(items) => {
            let list = PyList::empty(py);
            for item in items {
                list.append(to_py(py, item)?)?;
            }
            list.into_any()
        }
        Value::Object(map) => {
            let dict = PyDict::new(py);
            for (k, v) in map {
                dict.set_item(k, to_py(py, v)?)?;
            }
            dict.into_any()
        }
    })
}

/// The Python objects of a value's closed parts, kept between snapshots: a closed value never
/// changes, so each is converted once and shared by every later snapshot. Only the open path
/// (the containers still open, and at most one open string) is converted again.
#[derive(Default)]
enum Mirror {
    /// Not converted yet, or open: converted afresh at each snapshot.
    #[default]
    Open,
    /// An open container: its children, each with its mirror (by position for an array, by
    /// key for an object).
    Array(Vec<Mirror>),
    Object(Vec<(String, Mirror)>),
    /// A closed value, converted.
    Closed(Py<PyAny>),
}

impl Mirror {
    /// The Python object of `snapshot`, reusing what this mirror holds for its closed parts.
    fn convert<'py>(
        &mut self,
        py: Python<'py>,
        snapshot: Snapshot<'_>,
    ) -> PyResult<Bound<'py, PyAny>> {
        if let Mirror::Closed(obj) = self {
            return Ok(obj.bind(py).clone());
        }
        if snapshot.is_final() {
            let obj = to_py(py, snapshot.value())?;
            *self = Mirror::Closed(obj.clone().unbind());
            return Ok(obj);
        }
        match snapshot.value() {
            Value::Array(_) => {
                if !matches!(self, Mirror::Array(_)) {
                    *self = Mirror::Array(Vec::new());
                }
                let Mirror::Array(children) = self else {
                    unreachable!("set just above")
                };
                let list = PyList::empty(py);
                for (i, child) in snapshot.elements().enumerate() {
                    if children.len() <= i {
                        children.push(Mirror::Open);
                    }
                    list.append(children[i].convert(py, child)?)?;
                }
                Ok(list.into_any())
            }
            Value::Object(_) => {
                if !matches!(self, Mirror::Object(_)) {
                    *self = Mirror::Object(Vec::new());
                }
                let Mirror::Object(children) = self else {
                    unreachable!("set just above")
                };
                let dict = PyDict::new(py);
                for (i, (key, child)) in snapshot.entries().enumerate() {
                    // Entries keep their order; a key replaced by a duplicate starts afresh.
                    if children.get(i).is_none_or(|(k, _)| k != key) {
                        children.truncate(i);
                        children.push((key.to_string(), Mirror::Open));
                    }
                    dict.set_item(key, children[i].1.convert(py, child)?)?;
                }
                Ok(dict.into_any())
            }
            other => to_py(py, other),
        }
    }
}

/// An incremental parser of one JSON value arriving in fragments (function-call arguments
/// streamed a few bytes at a time): `feed()` each fragment, read `.value` at any time.
///
/// `.value` is the best-effort value of what arrived (`None` until something usable did): an
/// open string shows its prefix, an open container what it holds so far, and a number or
/// `true`/`false`/`null` shows once complete (`12` never shows before `123`). Each fragment
/// costs time in proportion to its length, and each `.value` only re-converts the parts still
/// open: the closed parts are the same Python objects from one snapshot to the next (do not
/// mutate them). `finish()` gives what `json.loads` gives for the whole text.
#[pyclass(module = "choicewise")]
pub(crate) struct PartialJson {
    parser: Parser,
    mirror: Mirror,
    /// The value as last converted, and the parser's revision then.
    cached: Option<(u64, Py<PyAny>)>,
}

#[pymethods]
impl PartialJson {
    #[new]
    fn new() -> Self {
        PartialJson {
            parser: Parser::new(),
            mirror: Mirror::Open,
            cached: None,
        }
    }

    /// Feeds the next fragment (`str`, or UTF-8 `bytes`). Raises `PartialJsonError` as soon
    /// as the text cannot be JSON; the parser stays failed, `.value` keeps the last good value.
    fn feed(&mut self, py: Python<'_>, fragment: &Bound<'_, PyAny>) -> PyResult<()> {
        let result = if let Ok(s) = fragment.cast::<PyString>() {
            let text = s.to_cow()?;
            if text.len() > 4096 {
                let parser = &mut self.parser;
                py.detach(|| parser.push(&text))
            } else {
                self.parser.push(&text)
            }
        } else if let Ok(b) = fragment.cast::<pyo3::types::PyBytes>() {
            let text = std::str::from_utf8(b.as_bytes())
                .map_err(|e| errors::value_error(format!("the fragment is not UTF-8: {e}")))?;
            self.parser.push(text)
        } else {
            return Err(pyo3::exceptions::PyTypeError::new_err(
                "PartialJson.feed takes str or bytes",
            ));
        };
        result.map_err(|e| errors::partial_json(py, &e))
    }

    /// The best-effort value so far, or `None`.
    #[getter]
    fn value(&mut self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let revision = self.parser.revision();
        if let Some((at, obj)) = &self.cached
            && *at == revision
        {
            return Ok(obj.clone_ref(py));
        }
        let obj = match self.parser.snapshot() {
            None => py.None(),
            Some(snapshot) => self.mirror.convert(py, snapshot)?.unbind(),
        };
        self.cached = Some((revision, obj.clone_ref(py)));
        Ok(obj)
    }

    /// Whether the value is complete (its last character arrived).
    #[getter]
    fn complete(&self) -> bool {
        self.parser.is_complete()
    }

    /// Bytes fed so far.
    #[getter]
    fn bytes_consumed(&self) -> u64 {
        self.parser.bytes_consumed()
    }

    /// The whole value, as `json.loads` would give it for everything fed; raises
    /// `PartialJsonError` if it is incomplete or invalid.
    fn finish(&mut self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let value = self
            .parser
            .finish()
            .map_err(|e| errors::partial_json(py, &e))?;
        Ok(to_py(py, &value)?.unbind())
    }

    fn __repr__(&mut self, py: Python<'_>) -> PyResult<String> {
        let value = self.value(py)?;
        Ok(format!("PartialJson(value={})", value.bind(py).repr()?))
    }
}
