//! The error type of the parser.

use std::fmt;

/// What the parser expected where it found something else (or the end of
/// the input).
///
/// Its [`Display`](fmt::Display) form is a short English phrase used in the
/// messages of [`PartialJsonError`].
///
/// ```
/// use choicewise_partial_json::{Expected, PartialJson, PartialJsonError};
///
/// let mut p = PartialJson::new();
/// let err = p.push(r#"{"a" 1}"#).unwrap_err();
/// assert!(matches!(
///     err,
///     PartialJsonError::UnexpectedCharacter { offset: 5, found: '1', expected: Expected::Colon }
/// ));
/// assert_eq!(Expected::Colon.to_string(), "':'");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Expected {
    /// The start of a JSON value.
    Value,
    /// The start of a JSON value or `]` (right after `[`).
    ValueOrArrayEnd,
    /// An object key (a string) or `}` (right after `{`).
    KeyOrObjectEnd,
    /// An object key (a string), after a `,` in an object.
    Key,
    /// The `:` after an object key.
    Colon,
    /// `,` or `]` after an array element.
    CommaOrArrayEnd,
    /// `,` or `}` after an object member.
    CommaOrObjectEnd,
    /// A decimal digit (inside a number).
    Digit,
    /// A character that may follow `\` in a string (`"\/bfnrtu`).
    EscapeCharacter,
    /// A hexadecimal digit (inside a `\uXXXX` escape).
    HexDigit,
    /// The closing `"` of a string (at the end of the input).
    ClosingQuote,
    /// The rest of a `true`, `false` or `null` literal (the whole literal).
    Literal(&'static str),
}

impl fmt::Display for Expected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            Expected::Value => "a JSON value",
            Expected::ValueOrArrayEnd => "a JSON value or ']'",
            Expected::KeyOrObjectEnd => "an object key or '}'",
            Expected::Key => "an object key (a string)",
            Expected::Colon => "':'",
            Expected::CommaOrArrayEnd => "',' or ']'",
            Expected::CommaOrObjectEnd => "',' or '}'",
            Expected::Digit => "a digit",
            Expected::EscapeCharacter => "an escape character (one of \"\\/bfnrtu)",
            Expected::HexDigit => "a hexadecimal digit",
            Expected::ClosingQuote => "the closing '\"' of a string",
            Expected::Literal(lit) => return write!(f, "the literal `{lit}`"),
        };
        f.write_str(s)
    }
}

/// Why the input is not (the beginning of) a single valid JSON value.
///
/// Offsets are byte offsets from the start of the whole input (all fragments
/// pushed so far). Once a [`PartialJson`](crate::PartialJson) has returned an
/// error it stays failed: every later `push` or `finish` returns the same
/// error.
///
/// ```
/// use choicewise_partial_json::{PartialJson, PartialJsonError};
///
/// let mut p = PartialJson::new();
/// p.push("{\"a\": \"line one").unwrap();
/// let err = p.push("\nline two\"}").unwrap_err();
/// assert_eq!(err, PartialJsonError::ControlCharacterInString { offset: 15, byte: b'\n' });
/// assert_eq!(err.offset(), Some(15));
/// // The parser stays failed.
/// assert_eq!(p.push("}").unwrap_err(), err);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PartialJsonError {
    /// A character that cannot appear here.
    #[error("unexpected {found:?} at byte {offset}: expected {expected}")]
    UnexpectedCharacter {
        /// Byte offset of the offending character.
        offset: u64,
        /// The offending character.
        found: char,
        /// What would have been valid here.
        expected: Expected,
    },
    /// A raw control character (U+0000 to U+001F) inside a string. JSON
    /// requires these to be escaped; models sometimes emit raw newlines or
    /// tabs. [`repair_control_characters`](crate::repair_control_characters)
    /// can fix the complete text.
    #[error(
        "raw control character {byte:#04x} inside a string at byte {offset} (it must be escaped)"
    )]
    ControlCharacterInString {
        /// Byte offset of the control character.
        offset: u64,
        /// The control character (`0x00..=0x1f`).
        byte: u8,
    },
    /// A `\uXXXX` escape of a UTF-16 surrogate that is not part of a valid
    /// high-low surrogate pair.
    #[error("unpaired UTF-16 surrogate in a \\u escape at byte {offset}")]
    LoneSurrogate {
        /// Byte offset of the character that showed the surrogate unpaired.
        offset: u64,
    },
    /// A number too large in magnitude for an `f64` (as `serde_json` rejects
    /// it too).
    #[error("number out of range at byte {offset}")]
    NumberOutOfRange {
        /// Byte offset of the first character of the number.
        offset: u64,
    },
    /// Containers nested deeper than the maximum depth.
    #[error("nesting deeper than the maximum depth {max_depth} at byte {offset}")]
    DepthLimitExceeded {
        /// Byte offset of the `[` or `{` that went too deep.
        offset: u64,
        /// The configured maximum depth.
        max_depth: usize,
    },
    /// Something other than whitespace after the complete top-level value.
    #[error("trailing {found:?} at byte {offset} after the top-level value")]
    TrailingCharacters {
        /// Byte offset of the first trailing character.
        offset: u64,
        /// The first trailing character.
        found: char,
    },
    /// [`finish`](crate::PartialJson::finish) was called on an incomplete value.
    #[error("unexpected end of input at byte {offset}: expected {expected}")]
    UnexpectedEnd {
        /// Total number of bytes of input.
        offset: u64,
        /// What was still expected.
        expected: Expected,
    },
    /// [`finish`](crate::PartialJson::finish) was called but the input was
    /// empty or whitespace only.
    #[error("no value: the input ({offset} bytes) is empty or whitespace only")]
    NoValue {
        /// Total number of bytes of input.
        offset: u64,
    },
    /// `push` or `finish` was called after a successful
    /// [`finish`](crate::PartialJson::finish).
    #[error("the parser has already finished")]
    AlreadyFinished,
}

impl PartialJsonError {
    /// The byte offset the error refers to, if any.
    ///
    /// ```
    /// use choicewise_partial_json::PartialJson;
    ///
    /// let mut p = PartialJson::new();
    /// assert_eq!(p.push("[1, 2 x").unwrap_err().offset(), Some(6));
    /// ```
    pub fn offset(&self) -> Option<u64> {
        match *self {
            PartialJsonError::UnexpectedCharacter { offset, .. }
            | PartialJsonError::ControlCharacterInString { offset, .. }
            | PartialJsonError::LoneSurrogate { offset }
            | PartialJsonError::NumberOutOfRange { offset }
            | PartialJsonError::DepthLimitExceeded { offset, .. }
            | PartialJsonError::TrailingCharacters { offset, .. }
            | PartialJsonError::UnexpectedEnd { offset, .. }
            | PartialJsonError::NoValue { offset } => Some(offset),
            PartialJsonError::AlreadyFinished => None,
        }
    }
}
