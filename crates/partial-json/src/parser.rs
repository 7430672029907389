//! The incremental parser: its state and its public interface. The
//! lexer, the number conversion and the maintenance of the value live in
//! the submodules.

mod lexer;
mod number;
mod tree;

use serde_json::Value;

use crate::error::{Expected, PartialJsonError};
use lexer::{Esc, StrStop, append, is_special_in_string, lex_string};
use number::{Digits, Num};
use tree::{Frame, drop_iteratively, leaf_mut};

/// The default maximum nesting depth of [`PartialJson`].
///
/// ```
/// use choicewise_partial_json::{PartialJson, DEFAULT_MAX_DEPTH};
///
/// assert_eq!(PartialJson::new().max_depth(), DEFAULT_MAX_DEPTH);
/// ```
pub const DEFAULT_MAX_DEPTH: usize = 512;

/// Trees at most this deep are dropped by `serde_json`'s own (recursive)
/// `Drop`; deeper ones are taken apart iteratively.
const RECURSIVE_DROP_LIMIT: usize = DEFAULT_MAX_DEPTH;

/// Initial capacity of a string value that is still open at the end of a
/// fragment.
const STRING_START_CAPACITY: usize = 64;

/// A literal being matched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lit {
    True,
    False,
    Null,
}

impl Lit {
    fn text(self) -> &'static str {
        match self {
            Lit::True => "true",
            Lit::False => "false",
            Lit::Null => "null",
        }
    }

    fn value(self) -> Value {
        match self {
            Lit::True => Value::Bool(true),
            Lit::False => Value::Bool(false),
            Lit::Null => Value::Null,
        }
    }
}

/// The lexer/grammar state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Expecting a value: at the very start, after `:`, or after `,` in an
    /// array.
    Value,
    /// Right after `[`: a value or `]`.
    ArrayFirst,
    /// Right after `{`: a key or `}`.
    ObjectFirst,
    /// After `,` in an object: a key.
    Key,
    /// After a key: `:`.
    Colon,
    /// After a value inside a container: `,` or the closing bracket.
    AfterValue,
    /// The top-level value is complete; only whitespace may follow.
    Done,
    /// Inside a string (an object key if `key`).
    Str { key: bool, esc: Esc },
    /// Inside a number; its text so far is in `scratch`.
    Number(Num),
    /// Inside a literal; `matched` bytes of it seen.
    Literal { lit: Lit, matched: u8 },
}

/// Which child of an open container is open too.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OpenChild<'a> {
    /// None (all children are final).
    None,
    /// The member with this key.
    Key(&'a str),
    /// The last element.
    Last,
}

/// An incremental, best-effort parser for one JSON value arriving in
/// fragments.
///
/// Feed fragments with [`push`](Self::push); after each one,
/// [`value`](Self::value) borrows the best-effort value so far (kept up to
/// date in place, so reading it is free) and [`snapshot`](Self::snapshot)
/// tells which parts of it are final. [`finish`](Self::finish) ends the input
/// and returns the complete value. See the [crate documentation](crate) for
/// exactly what the best-effort value contains.
///
/// The parser never recurses over the input's nesting; containers nested
/// deeper than [`max_depth`](Self::max_depth) are an error.
///
/// ```
/// use choicewise_partial_json::PartialJson;
/// use serde_json::json;
///
/// let mut p = PartialJson::new();
/// p.push(r#"{"city": "Par"#).unwrap();
/// assert_eq!(p.value(), Some(&json!({"city": "Par"})));
/// p.push(r#"is", "days": 3"#).unwrap();
/// // `3` might still be the start of `30`: left out until a delimiter arrives.
/// assert_eq!(p.value(), Some(&json!({"city": "Paris"})));
/// p.push("}").unwrap();
/// assert_eq!(p.value(), Some(&json!({"city": "Paris", "days": 3})));
/// assert_eq!(p.finish().unwrap(), json!({"city": "Paris", "days": 3}));
/// ```
#[derive(Debug, Clone)]
pub struct PartialJson {
    /// The materialised best-effort value.
    root: Option<Value>,
    /// Open containers: `frames[..depth]` (the rest are reusable buffers).
    frames: Vec<Frame>,
    /// Number of open containers.
    depth: usize,
    state: State,
    max_depth: usize,
    /// Bytes accepted so far.
    consumed: u64,
    /// Sticky error.
    error: Option<PartialJsonError>,
    /// `finish` succeeded.
    finished: bool,
    /// The last push changed `value()`.
    changed: bool,
    /// Number of pushes that changed `value()`.
    revision: u64,
    /// Decoded text of the open string not yet in the tree (or the key being
    /// read), or the text of the open number.
    scratch: String,
    /// The open value string has been attached to the tree.
    leaf_in_tree: bool,
    /// Offset of the first byte of the open number.
    token_start: u64,
    /// The digits of the open number, for its conversion.
    digits: Digits,
    /// Deepest nesting reached (to choose how to drop the tree).
    deepest: usize,
    /// The innermost open container is an object.
    top_is_object: bool,
    /// No error, and inside an open value string already in the tree: the
    /// state of the fast path of `push`.
    in_tree_string: bool,
}

impl Default for PartialJson {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for PartialJson {
    fn drop(&mut self) {
        if self.deepest > RECURSIVE_DROP_LIMIT
            && let Some(root) = self.root.take()
        {
            drop_iteratively(root);
        }
    }
}

/// The character starting at byte `i` of `text` (for error messages).
fn char_at(text: &str, i: usize) -> char {
    text.get(i..)
        .and_then(|s| s.chars().next())
        .unwrap_or(char::REPLACEMENT_CHARACTER)
}

impl PartialJson {
    /// A parser with the default maximum depth ([`DEFAULT_MAX_DEPTH`]).
    ///
    /// ```
    /// use choicewise_partial_json::PartialJson;
    ///
    /// let p = PartialJson::new();
    /// assert_eq!(p.value(), None);
    /// assert_eq!(p.bytes_consumed(), 0);
    /// ```
    pub fn new() -> Self {
        Self::with_max_depth(DEFAULT_MAX_DEPTH)
    }

    /// A parser that rejects containers nested more than `depth` deep
    /// (`[[1]]` has depth 2; a scalar has depth 0).
    ///
    /// Parsing never recurses, at any depth. But the [`Value`] handed out by
    /// [`finish`](Self::finish), and `Clone`/`Debug` of the parser, use
    /// `serde_json`'s recursive implementations, and each fragment costs
    /// time proportional to the current depth; keep the limit in the
    /// hundreds unless you know better.
    ///
    /// ```
    /// use choicewise_partial_json::{PartialJson, PartialJsonError};
    ///
    /// let mut p = PartialJson::with_max_depth(2);
    /// assert!(p.push("[[1]]").is_ok());
    /// let mut p = PartialJson::with_max_depth(2);
    /// assert_eq!(
    ///     p.push("[[[1]]]").unwrap_err(),
    ///     PartialJsonError::DepthLimitExceeded { offset: 2, max_depth: 2 }
    /// );
    /// ```
    pub fn with_max_depth(depth: usize) -> Self {
        PartialJson {
            root: None,
            frames: Vec::new(),
            depth: 0,
            state: State::Value,
            max_depth: depth,
            consumed: 0,
            error: None,
            finished: false,
            changed: false,
            revision: 0,
            scratch: String::new(),
            leaf_in_tree: false,
            token_start: 0,
            digits: Digits::default(),
            deepest: 0,
            in_tree_string: false,
            top_is_object: false,
        }
    }

    /// The maximum nesting depth.
    ///
    /// ```
    /// use choicewise_partial_json::PartialJson;
    ///
    /// assert_eq!(PartialJson::with_max_depth(8).max_depth(), 8);
    /// ```
    pub fn max_depth(&self) -> usize {
        self.max_depth
    }

    /// Feeds the next fragment of the input.
    ///
    /// Fragments may split the input anywhere between characters, including
    /// inside escapes (`\n`, `\uD83D\uDE00`), numbers, literals and keys.
    /// The work done is proportional to the fragment's length (plus the
    /// current nesting depth), not to the input so far.
    ///
    /// # Errors
    ///
    /// If the input so far cannot be the beginning of a JSON value
    /// ([`PartialJsonError`] says where and why). The parser then stays
    /// failed: this and every later call return the same error, and
    /// [`value`](Self::value) keeps the value parsed before the error.
    /// After a successful [`finish`](Self::finish):
    /// [`PartialJsonError::AlreadyFinished`].
    ///
    /// ```
    /// use choicewise_partial_json::PartialJson;
    /// use serde_json::json;
    ///
    /// let mut p = PartialJson::new();
    /// for fragment in ["{\"t\": \"a\\", "u00e9\\uD83", "D\\uDE00", "\"}"] {
    ///     p.push(fragment).unwrap();
    /// }
    /// assert_eq!(p.value(), Some(&json!({"t": "a\u{e9}\u{1F600}"})));
    /// ```
    #[inline]
    pub fn push(&mut self, fragment: &str) -> Result<(), PartialJsonError> {
        // Fast paths: the fragment continues the open string value (the bulk
        // of a typical call).
        if self.in_tree_string {
            if self.state
                == (State::Str {
                    key: false,
                    esc: Esc::Normal,
                })
                && !fragment.bytes().any(is_special_in_string)
            {
                // Plain text: append it as it is.
                if !fragment.is_empty() {
                    match leaf_mut(&mut self.root, &self.frames[..self.depth]) {
                        Some(s) => append(s, fragment),
                        None => debug_assert!(false, "open string not found in the tree"),
                    }
                    self.revision += 1;
                }
                self.changed = !fragment.is_empty();
                self.consumed += fragment.len() as u64;
                return Ok(());
            }
            return self.push_in_string(fragment);
        }
        self.push_general(fragment)
    }

    /// [`push`](Self::push) inside an open string value already in the tree
    /// (no error): decodes the fragment straight into it, with one lookup of
    /// the string; whatever follows a closing quote takes the general path.
    #[inline(never)]
    fn push_in_string(&mut self, fragment: &str) -> Result<(), PartialJsonError> {
        let State::Str { key: false, esc } = self.state else {
            debug_assert!(false, "fast path outside a value string");
            return self.push_from(fragment, 0, false);
        };
        let Some(leaf) = leaf_mut(&mut self.root, &self.frames[..self.depth]) else {
            debug_assert!(false, "open string not found in the tree");
            return self.push_from(fragment, 0, false);
        };
        let before = leaf.len();
        let (i, stop) = lex_string(fragment.as_bytes(), fragment, 0, esc, leaf);
        let grew = leaf.len() != before;
        if let StrStop::End(esc) = stop {
            self.state = State::Str { key: false, esc };
            self.changed = grew;
            self.revision += u64::from(grew);
            self.consumed += fragment.len() as u64;
            return Ok(());
        }
        if stop == StrStop::Closed {
            // The rest of the fragment follows the string.
            self.close_string(false);
            return self.push_from(fragment, i, grew);
        }
        self.changed = grew;
        let result = Err(self.string_error(fragment, i, stop));
        self.end_push(fragment, result)
    }

    /// [`push`](Self::push) for everything but the fast paths.
    fn push_general(&mut self, fragment: &str) -> Result<(), PartialJsonError> {
        self.push_from(fragment, 0, false)
    }

    /// Processes `fragment` from byte `start` with the general state
    /// machine (`changed`: whether the bytes before `start` changed the
    /// value).
    #[inline(never)]
    fn push_from(
        &mut self,
        fragment: &str,
        start: usize,
        changed: bool,
    ) -> Result<(), PartialJsonError> {
        if let Some(err) = &self.error {
            return Err(err.clone());
        }
        if self.finished {
            return Err(PartialJsonError::AlreadyFinished);
        }
        self.changed = changed;
        let result = self.feed(fragment, start);
        self.end_push(fragment, result)
    }

    /// The end of a push that went through [`feed`](Self::feed).
    #[inline(always)]
    fn end_push(
        &mut self,
        fragment: &str,
        result: Result<(), (usize, PartialJsonError)>,
    ) -> Result<(), PartialJsonError> {
        if matches!(self.state, State::Str { key: false, .. }) {
            self.flush_string();
        }
        if self.changed {
            self.revision += 1;
        }
        self.in_tree_string = result.is_ok()
            && self.leaf_in_tree
            && matches!(self.state, State::Str { key: false, .. });
        match result {
            Ok(()) => {
                self.consumed += fragment.len() as u64;
                Ok(())
            }
            Err((at, err)) => {
                self.consumed += at as u64;
                self.error = Some(err.clone());
                Err(err)
            }
        }
    }

    /// The error for a string that stopped at byte `i` of `text` for
    /// anything but its end or closing quote.
    #[cold]
    fn string_error(&self, text: &str, i: usize, stop: StrStop) -> (usize, PartialJsonError) {
        let offset = self.consumed + i as u64;
        let err = match stop {
            StrStop::Control(byte) => PartialJsonError::ControlCharacterInString { offset, byte },
            StrStop::Unexpected(expected) => PartialJsonError::UnexpectedCharacter {
                offset,
                found: char_at(text, i),
                expected,
            },
            StrStop::LoneSurrogate => PartialJsonError::LoneSurrogate { offset },
            StrStop::End(_) | StrStop::Closed => {
                debug_assert!(false, "not an error");
                PartialJsonError::LoneSurrogate { offset }
            }
        };
        (i, err)
    }

    /// The best-effort value of the input so far, or `None` if nothing
    /// usable has arrived yet (or after a successful
    /// [`finish`](Self::finish), which moves the value out).
    ///
    /// The value is maintained in place as fragments arrive, so this is a
    /// plain borrow and costs nothing.
    ///
    /// ```
    /// use choicewise_partial_json::PartialJson;
    /// use serde_json::json;
    ///
    /// let mut p = PartialJson::new();
    /// p.push(r#"  {"items": [1, tr"#).unwrap();
    /// assert_eq!(p.value(), Some(&json!({"items": [1]})));
    /// p.push("ue, {\"k").unwrap();
    /// assert_eq!(p.value(), Some(&json!({"items": [1, true, {}]})));
    /// ```
    pub fn value(&self) -> Option<&Value> {
        self.root.as_ref()
    }

    /// Number of provisional nodes on the open path (open containers plus
    /// an open string).
    pub(crate) fn open_count(&self) -> usize {
        self.depth + usize::from(matches!(self.state, State::Str { key: false, .. }))
    }

    /// Which child of the node at `level` of the open path is itself open.
    pub(crate) fn open_child(&self, level: usize) -> OpenChild<'_> {
        if level + 1 >= self.open_count() {
            return OpenChild::None;
        }
        match self.frames.get(level) {
            Some(frame) if frame.object => OpenChild::Key(&frame.key),
            Some(_) => OpenChild::Last,
            None => OpenChild::None,
        }
    }

    /// Ends the input and returns the complete value.
    ///
    /// A number at the very end (`42` as the whole input) is completed here.
    /// On success the value is moved out: afterwards [`value`](Self::value)
    /// is `None` and `push`/`finish` return
    /// [`PartialJsonError::AlreadyFinished`].
    ///
    /// # Errors
    ///
    /// The sticky error of an earlier `push`;
    /// [`PartialJsonError::NoValue`] for empty or whitespace-only input;
    /// [`PartialJsonError::UnexpectedEnd`] for an incomplete value.
    ///
    /// ```
    /// use choicewise_partial_json::{Expected, PartialJson, PartialJsonError};
    /// use serde_json::json;
    ///
    /// let mut p = PartialJson::new();
    /// p.push("-0.5e-10").unwrap();
    /// assert_eq!(p.value(), None); // a number is only complete at a delimiter
    /// assert_eq!(p.finish().unwrap(), json!(-0.5e-10));
    ///
    /// let mut p = PartialJson::new();
    /// p.push("[1, 2").unwrap();
    /// assert_eq!(
    ///     p.finish().unwrap_err(),
    ///     PartialJsonError::UnexpectedEnd { offset: 5, expected: Expected::CommaOrArrayEnd }
    /// );
    ///
    /// let mut p = PartialJson::new();
    /// p.push(" \n ").unwrap();
    /// assert_eq!(p.finish().unwrap_err(), PartialJsonError::NoValue { offset: 3 });
    /// ```
    pub fn finish(&mut self) -> Result<Value, PartialJsonError> {
        if let Some(err) = &self.error {
            return Err(err.clone());
        }
        if self.finished {
            return Err(PartialJsonError::AlreadyFinished);
        }
        // Whatever happens next, later pushes take the general path.
        self.in_tree_string = false;
        let offset = self.consumed;
        let result = match self.state {
            State::Number(num) if num.is_complete() => self.complete_number(num, ""),
            _ => Ok(()),
        };
        let result = result.and_then(|()| match self.state {
            State::Done => self.root.take().ok_or(PartialJsonError::NoValue { offset }),
            State::Value if self.depth == 0 => Err(PartialJsonError::NoValue { offset }),
            state => Err(PartialJsonError::UnexpectedEnd {
                offset,
                expected: self.expected_at_end(state),
            }),
        });
        match result {
            Ok(value) => {
                self.finished = true;
                Ok(value)
            }
            Err(err) => {
                self.error = Some(err.clone());
                Err(err)
            }
        }
    }

    /// What `finish` reports as missing in `state`.
    fn expected_at_end(&self, state: State) -> Expected {
        match state {
            State::Value => Expected::Value,
            State::ArrayFirst => Expected::ValueOrArrayEnd,
            State::ObjectFirst => Expected::KeyOrObjectEnd,
            State::Key => Expected::Key,
            State::Colon => Expected::Colon,
            State::AfterValue | State::Done | State::Number(_) => self.after_value_expected(),
            State::Str { esc, .. } => match esc {
                Esc::Normal => Expected::ClosingQuote,
                Esc::Backslash | Esc::AfterHighBackslash { .. } => Expected::EscapeCharacter,
                Esc::AfterHigh { .. } => Expected::EscapeCharacter,
                Esc::Hex { .. } | Esc::LowHex { .. } => Expected::HexDigit,
            },
            State::Literal { lit, .. } => Expected::Literal(lit.text()),
        }
    }

    /// What may follow a value in the innermost open container (or, when a
    /// number is incomplete, a digit).
    fn after_value_expected(&self) -> Expected {
        if let State::Number(num) = self.state
            && !num.is_complete()
        {
            return Expected::Digit;
        }
        match self
            .depth
            .checked_sub(1)
            .and_then(|top| self.frames.get(top))
        {
            Some(frame) if frame.object => Expected::CommaOrObjectEnd,
            Some(_) => Expected::CommaOrArrayEnd,
            None => Expected::Value,
        }
    }

    /// Total number of bytes accepted so far (up to, not including, the
    /// offending character after an error).
    ///
    /// ```
    /// use choicewise_partial_json::PartialJson;
    ///
    /// let mut p = PartialJson::new();
    /// p.push("[\"é\"").unwrap();
    /// assert_eq!(p.bytes_consumed(), 5);
    /// ```
    pub fn bytes_consumed(&self) -> u64 {
        self.consumed
    }

    /// Whether the last [`push`](Self::push) changed [`value`](Self::value)
    /// (a member, element or string text was added). A push that only
    /// closes strings or containers, or only adds whitespace or part of a
    /// number or key, leaves it `false`. (With duplicate keys, a member
    /// replaced by an equal value also counts as a change.)
    ///
    /// ```
    /// use choicewise_partial_json::PartialJson;
    ///
    /// let mut p = PartialJson::new();
    /// p.push(r#"{"n": 1"#).unwrap();
    /// assert!(p.changed()); // `{}` appeared
    /// p.push("2").unwrap();
    /// assert!(!p.changed()); // still `{}`: 12 is not complete yet
    /// p.push("}").unwrap();
    /// assert!(p.changed()); // `{"n": 12}`
    /// ```
    pub fn changed(&self) -> bool {
        self.changed
    }

    /// Number of pushes so far that changed [`value`](Self::value): a cheap
    /// version stamp for "has it changed since I last looked".
    ///
    /// ```
    /// use choicewise_partial_json::PartialJson;
    ///
    /// let mut p = PartialJson::new();
    /// p.push("[1,").unwrap();
    /// p.push(" ").unwrap();
    /// p.push("2,").unwrap();
    /// assert_eq!(p.revision(), 2);
    /// ```
    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// Whether the top-level value is complete (only whitespace may follow).
    ///
    /// ```
    /// use choicewise_partial_json::PartialJson;
    ///
    /// let mut p = PartialJson::new();
    /// p.push("{}").unwrap();
    /// assert!(p.is_complete());
    /// let mut p = PartialJson::new();
    /// p.push("12").unwrap();
    /// assert!(!p.is_complete()); // could still become 123
    /// ```
    pub fn is_complete(&self) -> bool {
        self.state == State::Done
    }

    /// The error that stopped the parser, if any.
    ///
    /// ```
    /// use choicewise_partial_json::PartialJson;
    ///
    /// let mut p = PartialJson::new();
    /// assert!(p.error().is_none());
    /// let _ = p.push("}");
    /// assert_eq!(p.error().and_then(|e| e.offset()), Some(0));
    /// ```
    pub fn error(&self) -> Option<&PartialJsonError> {
        self.error.as_ref()
    }
}
