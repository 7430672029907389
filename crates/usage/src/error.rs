//! The error of [`count_prompt`](crate::count_prompt) on a malformed request.

use serde_json::Value;

/// A chat request body that cannot be counted, naming the offending place as
/// a path into the request (`messages[3].content`,
/// `tools[0].function.parameters.properties.unit.enum`; `request` is the
/// body itself).
///
/// ```
/// use choicewise_usage::{count_prompt, EncodingName, UsageError};
/// use serde_json::json;
///
/// let body = json!({"messages": [{"role": "user", "content": 42}]});
/// let err = count_prompt(EncodingName::O200kBase, &body).unwrap_err();
/// assert_eq!(err.path(), "messages[0].content");
/// assert_eq!(
///     err.to_string(),
///     "messages[0].content: expected a string, an array of content parts or null, found a number"
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum UsageError {
    /// A value has the wrong JSON type.
    #[error("{path}: expected {expected}, found {found}")]
    WrongType {
        /// Where the value is.
        path: String,
        /// What the counter needs there.
        expected: &'static str,
        /// The JSON type found (`a number`, `an object`, ...).
        found: &'static str,
    },
    /// A required field is absent.
    #[error("{path}: required field is missing")]
    Missing {
        /// The path of the absent field.
        path: String,
    },
    /// A JSON schema nests deeper than the counter follows.
    #[error("{path}: schema nested deeper than {limit} levels")]
    TooDeep {
        /// Where the limit was hit.
        path: String,
        /// The limit ([`MAX_SCHEMA_DEPTH`](crate::MAX_SCHEMA_DEPTH)).
        limit: usize,
    },
    /// A field given as JSON text ([`count_prompt_fields`](crate::count_prompt_fields)) is
    /// not JSON, or nests deeper than the parser goes.
    #[error("{path}: not readable JSON: {message}")]
    NotJson {
        /// Where the text is.
        path: String,
        /// The parser's message.
        message: String,
    },
}

impl UsageError {
    /// The path of the offending value.
    ///
    /// ```
    /// use choicewise_usage::{count_prompt, EncodingName};
    /// use serde_json::json;
    ///
    /// let err = count_prompt(EncodingName::O200kBase, &json!({})).unwrap_err();
    /// assert_eq!(err.path(), "messages");
    /// ```
    pub fn path(&self) -> &str {
        match self {
            UsageError::WrongType { path, .. }
            | UsageError::Missing { path }
            | UsageError::TooDeep { path, .. }
            | UsageError::NotJson { path, .. } => path,
        }
    }
}

/// A path into the request, kept as a chain of stack frames and rendered only
/// when an error is built.
#[derive(Clone, Copy)]
pub(crate) enum Path<'a> {
    Root,
    Key(&'a Path<'a>, &'a str),
    Index(&'a Path<'a>, usize),
}

impl<'a> Path<'a> {
    pub(crate) fn key(&'a self, key: &'a str) -> Path<'a> {
        Path::Key(self, key)
    }

    pub(crate) fn index(&'a self, index: usize) -> Path<'a> {
        Path::Index(self, index)
    }

    pub(crate) fn render(&self) -> String {
        let mut out = String::new();
        self.render_into(&mut out);
        if out.is_empty() {
            out.push_str("request");
        }
        out
    }

    fn render_into(&self, out: &mut String) {
        match self {
            Path::Root => {}
            Path::Key(parent, key) => {
                parent.render_into(out);
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(key);
            }
            Path::Index(parent, index) => {
                parent.render_into(out);
                out.push('[');
                out.push_str(&index.to_string());
                out.push(']');
            }
        }
    }

    pub(crate) fn wrong_type(&self, expected: &'static str, found: &Value) -> UsageError {
        UsageError::WrongType {
            path: self.render(),
            expected,
            found: json_type(found),
        }
    }

    pub(crate) fn missing(&self) -> UsageError {
        UsageError::Missing {
            path: self.render(),
        }
    }

    pub(crate) fn not_json(&self, e: &serde_json::Error) -> UsageError {
        UsageError::NotJson {
            path: self.render(),
            message: e.to_string(),
        }
    }

    pub(crate) fn too_deep(&self, limit: usize) -> UsageError {
        UsageError::TooDeep {
            path: self.render(),
            limit,
        }
    }
}

/// How an error message names the type of a JSON value: "null", "a boolean", "a number",
/// "a string", "an array" or "an object".
///
/// ```
/// use choicewise_usage::json_type;
/// assert_eq!(json_type(&serde_json::json!({"total_tokens": 5})), "an object");
/// assert_eq!(json_type(&serde_json::json!("5")), "a string");
/// ```
pub fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}
