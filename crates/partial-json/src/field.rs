//! Streaming the text of one string field.

use crate::parser::PartialJson;

/// Follows the string at one JSON pointer (for example `"/answer"` or
/// `"/items/0/text"`) and hands out the decoded text appended to it since
/// the previous [`poll`](Self::poll): the way to stream one field of the
/// arguments to a UI while the rest is still arriving.
///
/// Poll after every [`PartialJson::push`]; concatenating the deltas gives
/// the field's decoded text exactly (escapes decoded, a split escape
/// delivered once complete).
///
/// ```
/// use choicewise_partial_json::{PartialJson, TextField};
///
/// let mut parser = PartialJson::new();
/// let mut answer = TextField::new("/answer");
/// let mut shown = String::new();
/// for fragment in ["{\"answer\": \"Hel", "lo\\", "nwor", "ld\", \"n\": 1}"] {
///     parser.push(fragment).unwrap();
///     if let Some(delta) = answer.poll(&parser) {
///         shown.push_str(delta.text);
///         if delta.is_final {
///             assert_eq!(shown, "Hello\nworld");
///         }
///     }
/// }
/// assert!(answer.is_closed());
/// assert_eq!(shown, "Hello\nworld");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TextField {
    pointer: String,
    emitted: usize,
    closed: bool,
}

/// What [`TextField::poll`] found.
///
/// ```
/// use choicewise_partial_json::{PartialJson, TextDelta, TextField};
///
/// let mut p = PartialJson::new();
/// let mut f = TextField::new("");
/// p.push("\"ab").unwrap();
/// assert_eq!(f.poll(&p), Some(TextDelta { text: "ab", is_final: false }));
/// p.push("c\"").unwrap();
/// assert_eq!(f.poll(&p), Some(TextDelta { text: "c", is_final: true }));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TextDelta<'a> {
    /// Decoded text appended since the previous poll (may be empty).
    pub text: &'a str,
    /// The string is closed: no more text will follow.
    pub is_final: bool,
}

impl TextField {
    /// Follows the string at `pointer` (RFC 6901 JSON pointer; `""` is the
    /// top-level value).
    ///
    /// ```
    /// use choicewise_partial_json::TextField;
    ///
    /// assert_eq!(TextField::new("/items/0/text").pointer(), "/items/0/text");
    /// ```
    pub fn new(pointer: impl Into<String>) -> Self {
        TextField {
            pointer: pointer.into(),
            emitted: 0,
            closed: false,
        }
    }

    /// The JSON pointer followed.
    ///
    /// ```
    /// use choicewise_partial_json::TextField;
    ///
    /// assert_eq!(TextField::new("/answer").pointer(), "/answer");
    /// ```
    pub fn pointer(&self) -> &str {
        &self.pointer
    }

    /// Length in bytes of the text handed out so far.
    ///
    /// ```
    /// use choicewise_partial_json::{PartialJson, TextField};
    ///
    /// let mut p = PartialJson::new();
    /// let mut f = TextField::new("/a");
    /// p.push(r#"{"a": "héllo"#).unwrap();
    /// f.poll(&p);
    /// assert_eq!(f.emitted_len(), 6);
    /// ```
    pub fn emitted_len(&self) -> usize {
        self.emitted
    }

    /// Whether a poll has reported the string closed.
    ///
    /// ```
    /// use choicewise_partial_json::{PartialJson, TextField};
    ///
    /// let mut p = PartialJson::new();
    /// let mut f = TextField::new("/a");
    /// p.push(r#"{"a": "x", "#).unwrap();
    /// assert!(!f.is_closed());
    /// f.poll(&p);
    /// assert!(f.is_closed());
    /// ```
    pub fn is_closed(&self) -> bool {
        self.closed
    }

    /// The text appended to the field since the previous poll, or `None`
    /// while the pointer does not lead to a string (not arrived yet, or not
    /// a string at all).
    ///
    /// Text is never taken back: if the field's string is replaced by a
    /// later duplicate key, only text beyond what was already handed out is
    /// reported.
    ///
    /// ```
    /// use choicewise_partial_json::{PartialJson, TextField};
    ///
    /// let mut p = PartialJson::new();
    /// let mut f = TextField::new("/answer");
    /// p.push(r#"{"answ"#).unwrap();
    /// assert_eq!(f.poll(&p), None);
    /// p.push(r#"er": "4"#).unwrap();
    /// assert_eq!(f.poll(&p).map(|d| d.text), Some("4"));
    /// p.push(r#"2"}"#).unwrap();
    /// let delta = f.poll(&p).unwrap();
    /// assert_eq!((delta.text, delta.is_final), ("2", true));
    /// ```
    pub fn poll<'a>(&mut self, parser: &'a PartialJson) -> Option<TextDelta<'a>> {
        let node = parser.snapshot()?.pointer(&self.pointer)?;
        let s = node.value().as_str()?;
        let text = match s.get(self.emitted..) {
            Some(text) => {
                self.emitted = s.len();
                text
            }
            None => "",
        };
        self.closed = node.is_final();
        Some(TextDelta {
            text,
            is_final: self.closed,
        })
    }
}
