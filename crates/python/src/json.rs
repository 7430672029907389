//! JSON values as Python objects, and `PartialJson`: the incremental partial-JSON parser of
//! `choicewise-partial-json`.

use std::collections::HashMap;

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

/// The one Python object of a [`PartialJson`] made with `live=True`, updated in place: an
/// open array or object is the same `list` or `dict` from one `.value` to the next, gaining
/// its new members; only an open string is a new `str` each time (set into its container).
/// Each `.value` walks the open path and what arrived since the last one, not the whole.
#[derive(Default)]
enum Live {
    /// Nothing shown yet.
    #[default]
    Empty,
    /// An open array shown as `list`: its elements' mirrors (only the last can be open).
    Array(Py<PyList>, Vec<Live>),
    /// An open object shown as `dict`: its members' mirrors.
    Object(Py<PyDict>, Members),
    /// An open string as last shown, and its length in bytes then: the text that arrives
    /// is appended to it (a copy, not a decoding of the whole text again).
    Text(Py<PyString>, usize),
    /// A closed value: shown once (its container holds it), never touched again.
    Closed,
}

/// What showing a node did: its container must store `New` (a new object) and keeps `Same`.
enum Shown<'py> {
    New(Bound<'py, PyAny>),
    Same,
}

impl Live {
    /// Brings the Python object of this node up to `snapshot`.
    fn show<'py>(&mut self, py: Python<'py>, snapshot: Snapshot<'_>) -> PyResult<Shown<'py>> {
        let created = match (&*self, snapshot.value()) {
            (Live::Closed, _) => return Ok(Shown::Same),
            (Live::Array(..), Value::Array(_)) | (Live::Object(..), Value::Object(_)) => false,
            (_, Value::Array(_)) if !snapshot.is_final() => {
                *self = Live::Array(PyList::empty(py).unbind(), Vec::new());
                true
            }
            (_, Value::Object(_)) if !snapshot.is_final() => {
                *self = Live::Object(PyDict::new(py).unbind(), Members::default());
                true
            }
            (Live::Text(shown, len), Value::String(text)) if text.is_char_boundary(*len) => {
                // The same string, grown (or closed).
                let obj = match &text[*len..] {
                    "" => shown.bind(py).clone(),
                    more => shown.bind(py).add(PyString::new(py, more))?.cast_into()?,
                };
                let grown = text.len() > *len;
                *self = match snapshot.is_final() {
                    true => Live::Closed,
                    false => Live::Text(obj.clone().unbind(), text.len()),
                };
                return Ok(if grown {
                    Shown::New(obj.into_any())
                } else {
                    Shown::Same
                });
            }
            (_, Value::String(text)) if !snapshot.is_final() => {
                let obj = PyString::new(py, text);
                *self = Live::Text(obj.clone().unbind(), text.len());
                return Ok(Shown::New(obj.into_any()));
            }
            (_, value) => {
                // A scalar, a closed string, or a container closed before it was ever shown.
                let obj = to_py(py, value)?;
                *self = Live::Closed;
                return Ok(Shown::New(obj));
            }
        };
        let obj = match self {
            Live::Array(list, elements) => {
                let list = list.bind(py).clone();
                show_elements(py, &list, elements, snapshot)?;
                list.into_any()
            }
            Live::Object(dict, members) => {
                let dict = dict.bind(py).clone();
                show_members(py, &dict, members, snapshot)?;
                dict.into_any()
            }
            // Not reached: a container was set just above.
            Live::Empty | Live::Text(..) | Live::Closed => return Ok(Shown::Same),
        };
        if snapshot.is_final() {
            *self = Live::Closed;
        }
        Ok(if created {
            Shown::New(obj)
        } else {
            Shown::Same
        })
    }
}

/// An open array's elements: the last one shown (it may have changed or closed), then those
/// that arrived since.
fn show_elements(
    py: Python<'_>,
    list: &Bound<'_, PyList>,
    elements: &mut Vec<Live>,
    snapshot: Snapshot<'_>,
) -> PyResult<()> {
    let len = snapshot.value().as_array().map_or(0, Vec::len);
    for i in elements.len().saturating_sub(1)..len {
        let Some(element) = snapshot.index(i) else {
            break;
        };
        if i == elements.len() {
            elements.push(Live::Empty);
        }
        if let Shown::New(obj) = elements[i].show(py, element)? {
            if i < list.len() {
                list.set_item(i, obj)?;
            } else {
                list.append(obj)?;
            }
        }
    }
    Ok(())
}

/// An open object's members: the one open when last shown, the keys new since (looked for
/// only when the count of members grew), and the one open now. Members appear in the dict in
/// the order they arrived, as `json.loads` keeps them.
fn show_members(
    py: Python<'_>,
    dict: &Bound<'_, PyDict>,
    members: &mut Members,
    snapshot: Snapshot<'_>,
) -> PyResult<()> {
    let count = snapshot.value().as_object().map_or(0, |m| m.len());
    if let Some(key) = members.open.take()
        && let Some(member) = snapshot.get(&key)
    {
        members.show(py, dict, &key, member)?;
    }
    if count != members.shown.len() {
        for (key, member) in snapshot.entries() {
            if !members.shown.contains_key(key) {
                members.show(py, dict, key, member)?;
            }
        }
    }
    if !snapshot.is_final()
        && let Some((key, member)) = snapshot.entries().find(|(_, m)| !m.is_final())
    {
        members.show(py, dict, key, member)?;
        members.open = Some(key.to_string());
    }
    Ok(())
}

/// The members of an open object shown live: each key's mirror, and the key open when last
/// shown.
#[derive(Default)]
struct Members {
    shown: HashMap<String, Live>,
    open: Option<String>,
}

impl Members {
    fn show(
        &mut self,
        py: Python<'_>,
        dict: &Bound<'_, PyDict>,
        key: &str,
        member: Snapshot<'_>,
    ) -> PyResult<()> {
        let live = match self.shown.get_mut(key) {
            Some(live) => live,
            None => self.shown.entry(key.to_string()).or_default(),
        };
        if !member.is_final() && matches!(live, Live::Closed) {
            // A duplicate key: its new value replaces the one shown.
            *live = Live::Empty;
        }
        if let Shown::New(obj) = live.show(py, member)? {
            dict.set_item(key, obj)?;
        }
        Ok(())
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
///
/// `PartialJson(live=True)` shows one live object instead of snapshots: the open list or dict
/// is the same object at every `.value`, gaining members in place (a value read earlier shows
/// the later members too; `copy.deepcopy` keeps a snapshot), so a `.value` costs what arrived
/// since the last one and the open path, not the open containers' size. An object's members
/// keep their order of arrival.
#[pyclass(module = "choicewise")]
pub(crate) struct PartialJson {
    parser: Parser,
    shown: Shows,
    /// The value as last converted, and the parser's revision then.
    cached: Option<(u64, Py<PyAny>)>,
}

/// How `.value` shows the value: a fresh snapshot each time, or one live object.
enum Shows {
    Snapshots(Mirror),
    Live(Live),
}

#[pymethods]
impl PartialJson {
    #[new]
    #[pyo3(signature = (*, live = false))]
    fn new(live: bool) -> Self {
        PartialJson {
            parser: Parser::new(),
            shown: match live {
                true => Shows::Live(Live::Empty),
                false => Shows::Snapshots(Mirror::Open),
            },
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
        let obj = match (self.parser.snapshot(), &mut self.shown) {
            (None, _) => py.None(),
            (Some(snapshot), Shows::Snapshots(mirror)) => mirror.convert(py, snapshot)?.unbind(),
            (Some(snapshot), Shows::Live(live)) => match live.show(py, snapshot)? {
                Shown::New(obj) => obj.unbind(),
                // The live root, updated in place.
                Shown::Same => match &self.cached {
                    Some((_, obj)) => obj.clone_ref(py),
                    // Not reached: a live root is new the first time it is shown.
                    None => py.None(),
                },
            },
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
