//! The incremental parser.

use serde_json::{Map, Number, Value};

use crate::error::{Expected, PartialJsonError};
use crate::snapshot::Snapshot;

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

/// Where the lexer is inside a string.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Esc {
    /// Plain characters.
    Normal,
    /// Right after `\`.
    Backslash,
    /// Inside `\uXXXX`: `count` hex digits read so far, their value `code`.
    Hex { count: u8, code: u16 },
    /// After a high surrogate escape; expecting `\`.
    AfterHigh { high: u16 },
    /// After a high surrogate escape and `\`; expecting `u`.
    AfterHighBackslash { high: u16 },
    /// Inside the `\uXXXX` that must be a low surrogate.
    LowHex { high: u16, count: u8, code: u16 },
}

/// Where the lexer is inside a number (JSON grammar).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Num {
    /// Nothing yet.
    Start,
    /// `-`
    Minus,
    /// `0` or `-0`
    Zero,
    /// Integer digits, not starting with 0.
    Int,
    /// `.`
    Dot,
    /// Fraction digits.
    Frac,
    /// `e` or `E`
    Exp,
    /// Exponent sign.
    ExpSign,
    /// Exponent digits.
    ExpDigits,
}

impl Num {
    /// Whether the number text so far is a complete JSON number.
    fn is_complete(self) -> bool {
        matches!(self, Num::Zero | Num::Int | Num::Frac | Num::ExpDigits)
    }
}

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

/// One open container.
#[derive(Debug, Clone)]
struct Frame {
    /// Object (else array).
    object: bool,
    /// For objects: the key of the member being parsed (the last complete
    /// key). The buffer is reused across members and frames.
    key: String,
    /// For objects: where the open child is in the map's iteration order.
    /// While a child is open its map does not change, so this reaches it
    /// without comparing keys.
    position: Position,
}

/// Where the open child of an object is in its map's iteration order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Position {
    /// Not known: found by its key.
    Unknown,
    /// The last entry.
    Last,
    /// This many entries before the last.
    FromEnd(usize),
    /// This many entries after the first.
    FromFront(usize),
}

/// Initial capacity of a string value that is still open at the end of a
/// fragment.
const STRING_START_CAPACITY: usize = 64;

/// Strings below this capacity grow 4x at a time (see [`append`]).
const FAST_GROWTH_LIMIT: usize = 4096;

/// How many entries from either end of a map are searched for the open
/// child.
const POSITION_SEARCH_LIMIT: usize = 8;

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
        if self.deepest > RECURSIVE_DROP_LIMIT {
            if let Some(root) = self.root.take() {
                drop_iteratively(root);
            }
        }
    }
}

/// Drops a value of any depth without recursion.
fn drop_iteratively(value: Value) {
    let mut pending = vec![value];
    while let Some(v) = pending.pop() {
        match v {
            Value::Array(items) => pending.extend(items),
            Value::Object(map) => pending.extend(map.into_iter().map(|(_, v)| v)),
            _ => {}
        }
    }
}

impl Default for Frame {
    fn default() -> Self {
        Frame {
            object: false,
            key: String::new(),
            position: Position::Unknown,
        }
    }
}

/// The open child of container `v` (`frame` being the frame of `v`).
#[inline(always)]
fn child_mut<'a>(v: &'a mut Value, frame: &Frame) -> Option<&'a mut Value> {
    match v {
        Value::Object(map) => {
            let (key, child) = match frame.position {
                Position::Last => map.iter_mut().next_back(),
                Position::FromEnd(n) => {
                    let mut entries = map.iter_mut();
                    for _ in 0..n {
                        entries.next_back();
                    }
                    entries.next_back()
                }
                Position::FromFront(n) => {
                    let mut entries = map.iter_mut();
                    for _ in 0..n {
                        entries.next();
                    }
                    entries.next()
                }
                Position::Unknown => return map.get_mut(frame.key.as_str()),
            }?;
            debug_assert_eq!(key, &frame.key);
            Some(child)
        }
        Value::Array(items) => items.last_mut(),
        _ => None,
    }
}

/// Where `key` is in `map`, if among the first or last few entries (the
/// nearer end is taken). Works for any map order (sorted or insertion).
fn find_position(map: &Map<String, Value>, key: &str) -> Position {
    let len = map.len();
    if let Some(n) = map
        .keys()
        .rev()
        .take(POSITION_SEARCH_LIMIT)
        .position(|k| k == key)
    {
        let from_front = len - 1 - n;
        return if n == 0 {
            Position::Last
        } else if from_front < n {
            Position::FromFront(from_front)
        } else {
            Position::FromEnd(n)
        };
    }
    match map
        .keys()
        .take(POSITION_SEARCH_LIMIT)
        .position(|k| k == key)
    {
        Some(n) => Position::FromFront(n),
        None => Position::Unknown,
    }
}

/// The node reached from the root by following the open child of each of
/// `path` (open frames from the root).
#[inline(never)]
fn descend<'a>(root: &'a mut Option<Value>, path: &[Frame]) -> Option<&'a mut Value> {
    let mut v = root.as_mut()?;
    for frame in path {
        v = child_mut(v, frame)?;
    }
    Some(v)
}

/// The container of the last of `frames` (`frames` being all open frames
/// from the root).
#[inline(always)]
fn container_mut<'a>(root: &'a mut Option<Value>, frames: &[Frame]) -> Option<&'a mut Value> {
    let (_, path) = frames.split_last()?;
    descend(root, path)
}

/// Why [`lex_string`] stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StrStop {
    /// At the end of the fragment, in this escape state.
    End(Esc),
    /// After the closing quote.
    Closed,
    /// At a raw control character.
    Control(u8),
    /// At a character that cannot appear here.
    Unexpected(Expected),
    /// At the character that showed a surrogate escape unpaired.
    LoneSurrogate,
}

/// Lexes string content of `bytes` (= `text`) from `i` in escape state
/// `esc`, appending the decoded text to `out`, until the closing quote
/// (consumed), the end, or an error. Returns where it stopped and why.
#[inline(always)]
fn lex_string(
    bytes: &[u8],
    text: &str,
    mut i: usize,
    mut esc: Esc,
    out: &mut String,
) -> (usize, StrStop) {
    let len = bytes.len();
    while i < len {
        let c = bytes[i];
        esc = match esc {
            Esc::Normal => {
                let start = i;
                while i < len && !is_special_in_string(bytes[i]) {
                    i += 1;
                }
                if i > start {
                    // `start` and `i` are at ASCII bytes or the end: both
                    // are character boundaries.
                    append(out, &text[start..i]);
                }
                match bytes.get(i) {
                    None => break,
                    Some(b'"') => return (i + 1, StrStop::Closed),
                    Some(b'\\') => Esc::Backslash,
                    Some(&c) => return (i, StrStop::Control(c)),
                }
            }
            Esc::Backslash => {
                let decoded = match c {
                    b'"' => '"',
                    b'\\' => '\\',
                    b'/' => '/',
                    b'b' => '\u{8}',
                    b'f' => '\u{c}',
                    b'n' => '\n',
                    b'r' => '\r',
                    b't' => '\t',
                    b'u' => '\0',
                    _ => return (i, StrStop::Unexpected(Expected::EscapeCharacter)),
                };
                if c == b'u' {
                    Esc::Hex { count: 0, code: 0 }
                } else {
                    out.push(decoded);
                    Esc::Normal
                }
            }
            Esc::Hex { count, code } => {
                let Some(d) = hex_value(c) else {
                    return (i, StrStop::Unexpected(Expected::HexDigit));
                };
                let code = (code << 4) | d;
                if count < 3 {
                    Esc::Hex {
                        count: count + 1,
                        code,
                    }
                } else if (0xD800..0xDC00).contains(&code) {
                    Esc::AfterHigh { high: code }
                } else if (0xDC00..0xE000).contains(&code) {
                    return (i, StrStop::LoneSurrogate);
                } else {
                    out.push(char::from_u32(u32::from(code)).unwrap_or('\u{FFFD}'));
                    Esc::Normal
                }
            }
            Esc::AfterHigh { high } => {
                if c != b'\\' {
                    return (i, StrStop::LoneSurrogate);
                }
                Esc::AfterHighBackslash { high }
            }
            Esc::AfterHighBackslash { high } => {
                if c != b'u' {
                    return (i, StrStop::LoneSurrogate);
                }
                Esc::LowHex {
                    high,
                    count: 0,
                    code: 0,
                }
            }
            Esc::LowHex { high, count, code } => {
                let Some(d) = hex_value(c) else {
                    return (i, StrStop::Unexpected(Expected::HexDigit));
                };
                let code = (code << 4) | d;
                if count < 3 {
                    Esc::LowHex {
                        high,
                        count: count + 1,
                        code,
                    }
                } else if (0xDC00..0xE000).contains(&code) {
                    let cp =
                        0x10000 + ((u32::from(high) - 0xD800) << 10) + (u32::from(code) - 0xDC00);
                    out.push(char::from_u32(cp).unwrap_or('\u{FFFD}'));
                    Esc::Normal
                } else {
                    return (i, StrStop::LoneSurrogate);
                }
            }
        };
        i += 1;
    }
    (i, StrStop::End(esc))
}

/// The open value string in the tree (`frames`: all open frames).
#[inline]
fn leaf_mut<'a>(root: &'a mut Option<Value>, frames: &[Frame]) -> Option<&'a mut String> {
    match descend(root, frames) {
        Some(Value::String(s)) => Some(s),
        _ => None,
    }
}

/// Exact powers of ten representable in an `f64`.
const POW10: [f64; 23] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
    1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
];

/// Converts a (grammatically valid) JSON number the way `serde_json` does,
/// for the common cases, without going through its parser; `None` for the
/// rest, which the caller hands to `serde_json`.
///
/// Integers become `u64` (non-negative) or `i64` (negative), as in
/// `serde_json`. A number with a fraction or exponent becomes an `f64`; the
/// fast path only takes those whose decimal significand is below 2^53 and
/// whose decimal exponent is within ±22: then both the significand and the
/// power of ten are exact `f64`s and one IEEE multiplication or division
/// gives the correctly rounded result, which is what `serde_json` computes
/// too (with or without its `float_roundtrip` feature).
#[inline]
fn fast_number(text: &str) -> Option<Number> {
    let bytes = text.as_bytes();
    let len = bytes.len();
    let negative = bytes.first() == Some(&b'-');
    let mut i = usize::from(negative);
    let mut significand: u64 = 0;
    let mut digits = 0;
    let mut exponent: i32 = 0;
    while i < len && bytes[i].is_ascii_digit() {
        significand = significand * 10 + u64::from(bytes[i] - b'0');
        digits += 1;
        if digits > 18 {
            return None;
        }
        i += 1;
    }
    if i == len {
        return if !negative {
            Some(Number::from(significand))
        } else if significand == 0 {
            // `-0` is an f64 in serde_json.
            None
        } else {
            // At most 18 digits: the negation fits in an i64.
            i64::try_from(significand).ok().map(|m| Number::from(-m))
        };
    }
    if bytes[i] == b'.' {
        i += 1;
        while i < len && bytes[i].is_ascii_digit() {
            significand = significand * 10 + u64::from(bytes[i] - b'0');
            digits += 1;
            if digits > 18 {
                return None;
            }
            exponent -= 1;
            i += 1;
        }
    }
    if i < len && (bytes[i] == b'e' || bytes[i] == b'E') {
        i += 1;
        let exp_negative = bytes.get(i) == Some(&b'-');
        if matches!(bytes.get(i), Some(b'-' | b'+')) {
            i += 1;
        }
        let mut exp: i32 = 0;
        while i < len && bytes[i].is_ascii_digit() {
            exp = exp * 10 + i32::from(bytes[i] - b'0');
            if exp > 1000 {
                return None;
            }
            i += 1;
        }
        exponent += if exp_negative { -exp } else { exp };
    }
    if i != len || significand >= 1 << 53 {
        return None;
    }
    let pow = *POW10.get(exponent.unsigned_abs() as usize)?;
    let magnitude = significand as f64;
    let f = if exponent >= 0 {
        magnitude * pow
    } else {
        magnitude / pow
    };
    Number::from_f64(if negative { -f } else { f })
}

/// Bytes that end a run of plain string text: `"`, `\` and control
/// characters.
static SPECIAL_IN_STRING: [bool; 256] = {
    let mut table = [false; 256];
    let mut c = 0;
    while c < 0x20 {
        table[c] = true;
        c += 1;
    }
    table[b'"' as usize] = true;
    table[b'\\' as usize] = true;
    table
};

/// Whether `c` ends a run of plain string text.
#[inline(always)]
fn is_special_in_string(c: u8) -> bool {
    SPECIAL_IN_STRING[usize::from(c)]
}

/// Appends `text` to `s`, a string that grows a few bytes at a time:
/// small strings grow 4x per reallocation instead of 2x (reallocations
/// dominated the cost of short strings arriving in 4-byte fragments).
#[inline(always)]
fn append(s: &mut String, text: &str) {
    let spare = s.capacity() - s.len();
    if text.len() > spare {
        let cap = s.capacity();
        let extra = if cap < FAST_GROWTH_LIMIT {
            3 * cap
        } else {
            cap
        };
        s.reserve(text.len().max(extra).max(STRING_START_CAPACITY));
    }
    s.push_str(text);
}

#[inline]
fn hex_value(c: u8) -> Option<u16> {
    match c {
        b'0'..=b'9' => Some(u16::from(c - b'0')),
        b'a'..=b'f' => Some(u16::from(c - b'a' + 10)),
        b'A'..=b'F' => Some(u16::from(c - b'A' + 10)),
        _ => None,
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
            return self.push_general(fragment);
        };
        let Some(leaf) = leaf_mut(&mut self.root, &self.frames[..self.depth]) else {
            debug_assert!(false, "open string not found in the tree");
            return self.push_general(fragment);
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
        self.changed = grew;
        let result = match stop {
            StrStop::Closed => {
                self.close_string(false);
                self.feed(fragment, i)
            }
            stop => Err(self.string_error(fragment, i, stop)),
        };
        self.end_push(fragment, result)
    }

    /// [`push`](Self::push) for everything but the fast path.
    #[inline(never)]
    fn push_general(&mut self, fragment: &str) -> Result<(), PartialJsonError> {
        if let Some(err) = &self.error {
            return Err(err.clone());
        }
        if self.finished {
            return Err(PartialJsonError::AlreadyFinished);
        }
        self.changed = false;
        let result = self.feed(fragment, 0);
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

    /// The best-effort value as a tree of [`Snapshot`] nodes that also say
    /// whether each part is final (closed) or still provisional.
    ///
    /// ```
    /// use choicewise_partial_json::PartialJson;
    ///
    /// let mut p = PartialJson::new();
    /// p.push(r#"{"title": "Done", "body": "Still wri"#).unwrap();
    /// let snap = p.snapshot().unwrap();
    /// assert!(!snap.is_final()); // the object is still open
    /// assert!(snap.get("title").unwrap().is_final());
    /// assert!(!snap.get("body").unwrap().is_final());
    /// ```
    pub fn snapshot(&self) -> Option<Snapshot<'_>> {
        let root = self.root.as_ref()?;
        Some(Snapshot::root(self, root, self.open_count() > 0))
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
            State::Number(num) if num.is_complete() => self.complete_number(),
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
        if let State::Number(num) = self.state {
            if !num.is_complete() {
                return Expected::Digit;
            }
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

    // ----- lexer -----------------------------------------------------------

    /// Processes `text` from byte `start`; on error returns the index of the
    /// offending byte.
    #[inline(always)]
    fn feed(&mut self, text: &str, start: usize) -> Result<(), (usize, PartialJsonError)> {
        let bytes = text.as_bytes();
        let len = bytes.len();
        let base = self.consumed;
        let mut i = start;
        let unexpected = |i: usize, expected: Expected| {
            (
                i,
                PartialJsonError::UnexpectedCharacter {
                    offset: base + i as u64,
                    found: char_at(text, i),
                    expected,
                },
            )
        };
        while i < len {
            match self.state {
                State::Str { key, esc } => {
                    let stop;
                    (i, stop) = if !key && self.leaf_in_tree {
                        // Continue the string already in the tree: decode
                        // straight into it (one lookup per fragment).
                        match leaf_mut(&mut self.root, &self.frames[..self.depth]) {
                            Some(leaf) => {
                                let before = leaf.len();
                                let r = lex_string(bytes, text, i, esc, leaf);
                                self.changed |= leaf.len() != before;
                                r
                            }
                            None => {
                                debug_assert!(false, "open string not found in the tree");
                                lex_string(bytes, text, i, esc, &mut self.scratch)
                            }
                        }
                    } else {
                        lex_string(bytes, text, i, esc, &mut self.scratch)
                    };
                    match stop {
                        StrStop::End(esc) => self.state = State::Str { key, esc },
                        StrStop::Closed => self.close_string(key),
                        stop => return Err(self.string_error(text, i, stop)),
                    }
                }
                State::Number(mut num) => {
                    let start = i;
                    while i < len {
                        let c = bytes[i];
                        if c.is_ascii_digit()
                            && matches!(num, Num::Int | Num::Frac | Num::ExpDigits)
                        {
                            i += 1;
                            continue;
                        }
                        let next = match (num, c) {
                            (Num::Int | Num::Frac | Num::ExpDigits, b'0'..=b'9') => num,
                            (Num::Start, b'-') => Num::Minus,
                            (Num::Start | Num::Minus, b'0') => Num::Zero,
                            (Num::Start | Num::Minus, b'1'..=b'9') => Num::Int,
                            (Num::Zero | Num::Int, b'.') => Num::Dot,
                            (Num::Zero | Num::Int | Num::Frac, b'e' | b'E') => Num::Exp,
                            (Num::Dot, b'0'..=b'9') => Num::Frac,
                            (Num::Exp, b'+' | b'-') => Num::ExpSign,
                            (Num::Exp | Num::ExpSign, b'0'..=b'9') => Num::ExpDigits,
                            _ => break,
                        };
                        num = next;
                        i += 1;
                    }
                    self.state = State::Number(num);
                    // Number characters are ASCII: `start..i` is on boundaries.
                    let part = &text[start..i];
                    if i == len {
                        self.scratch.push_str(part);
                    } else {
                        if !num.is_complete() {
                            return Err(unexpected(i, Expected::Digit));
                        }
                        // Complete; the delimiter is processed by the next
                        // state.
                        if self.scratch.is_empty() {
                            // The whole number is in this fragment.
                            self.complete_number_text(part).map_err(|e| (i, e))?;
                        } else {
                            self.scratch.push_str(part);
                            self.complete_number().map_err(|e| (i, e))?;
                        }
                    }
                }
                State::Literal { lit, matched } => {
                    let want = lit.text().as_bytes();
                    if want.get(usize::from(matched)) != Some(&bytes[i]) {
                        return Err(unexpected(i, Expected::Literal(lit.text())));
                    }
                    i += 1;
                    let matched = matched + 1;
                    if usize::from(matched) == want.len() {
                        self.complete_scalar(lit.value());
                    } else {
                        self.state = State::Literal { lit, matched };
                    }
                }
                State::Value
                | State::ArrayFirst
                | State::ObjectFirst
                | State::Key
                | State::Colon
                | State::AfterValue
                | State::Done => {
                    while i < len && matches!(bytes[i], b' ' | b'\t' | b'\n' | b'\r') {
                        i += 1;
                    }
                    let Some(&c) = bytes.get(i) else {
                        break;
                    };
                    match (self.state, c) {
                        (State::AfterValue, b',') => {
                            self.state = if self.top_is_object {
                                State::Key
                            } else {
                                State::Value
                            };
                        }
                        (State::ObjectFirst | State::Key, b'"') => {
                            self.scratch.clear();
                            self.state = State::Str {
                                key: true,
                                esc: Esc::Normal,
                            };
                        }
                        (State::Colon, b':') => self.state = State::Value,
                        (State::Value | State::ArrayFirst, b'"') => {
                            self.scratch.clear();
                            self.leaf_in_tree = false;
                            self.state = State::Str {
                                key: false,
                                esc: Esc::Normal,
                            };
                        }
                        (State::Value | State::ArrayFirst, b'-' | b'0'..=b'9') => {
                            self.scratch.clear();
                            self.token_start = base + i as u64;
                            self.state = State::Number(Num::Start);
                            // Lex `c` in the number state.
                            continue;
                        }
                        (State::AfterValue, b'}') if self.top_is_object => self.close(),
                        (State::AfterValue, b']') if !self.top_is_object => self.close(),
                        (State::Value | State::ArrayFirst, b'{') => {
                            self.open(true, base + i as u64).map_err(|e| (i, e))?;
                        }
                        (State::Value | State::ArrayFirst, b'[') => {
                            self.open(false, base + i as u64).map_err(|e| (i, e))?;
                        }
                        (State::Value | State::ArrayFirst, b't') => {
                            self.state = State::Literal {
                                lit: Lit::True,
                                matched: 1,
                            };
                        }
                        (State::Value | State::ArrayFirst, b'f') => {
                            self.state = State::Literal {
                                lit: Lit::False,
                                matched: 1,
                            };
                        }
                        (State::Value | State::ArrayFirst, b'n') => {
                            self.state = State::Literal {
                                lit: Lit::Null,
                                matched: 1,
                            };
                        }
                        (State::ArrayFirst, b']') => self.close(),
                        (State::ObjectFirst, b'}') => self.close(),
                        (State::Done, _) => {
                            return Err((
                                i,
                                PartialJsonError::TrailingCharacters {
                                    offset: base + i as u64,
                                    found: char_at(text, i),
                                },
                            ));
                        }
                        (state, _) => {
                            let expected = match state {
                                State::ArrayFirst => Expected::ValueOrArrayEnd,
                                State::ObjectFirst => Expected::KeyOrObjectEnd,
                                State::Key => Expected::Key,
                                State::Colon => Expected::Colon,
                                State::AfterValue if self.top_is_object => {
                                    Expected::CommaOrObjectEnd
                                }
                                State::AfterValue => Expected::CommaOrArrayEnd,
                                _ => Expected::Value,
                            };
                            return Err(unexpected(i, expected));
                        }
                    }
                    i += 1;
                }
            }
        }
        Ok(())
    }

    // ----- tree maintenance --------------------------------------------------

    /// Attaches `value` as the current child of the innermost open container
    /// (or as the root). `open`: the value is an open string or container
    /// (so it will be navigated to).
    fn attach(&mut self, value: Value, open: bool) {
        self.changed = true;
        if self.depth == 0 {
            self.root = Some(value);
            return;
        }
        let frames = &self.frames[..self.depth];
        let Some(container) = container_mut(&mut self.root, frames) else {
            debug_assert!(false, "open path does not match the tree");
            return;
        };
        let mut position = Position::Unknown;
        match container {
            Value::Object(map) => {
                if let Some(frame) = frames.last() {
                    map.insert(frame.key.clone(), value);
                    if open {
                        position = find_position(map, &frame.key);
                    }
                }
            }
            Value::Array(items) => items.push(value),
            _ => debug_assert!(false, "open frame is not a container"),
        }
        if let Some(frame) = self.frames.get_mut(self.depth - 1) {
            frame.position = position;
        }
    }

    /// Moves the decoded text in `scratch` into the open value string,
    /// attaching it first if needed.
    fn flush_string(&mut self) {
        if self.leaf_in_tree {
            if !self.scratch.is_empty() {
                self.changed = true;
                let scratch = std::mem::take(&mut self.scratch);
                match leaf_mut(&mut self.root, &self.frames[..self.depth]) {
                    Some(s) => s.push_str(&scratch),
                    None => debug_assert!(false, "open string not found in the tree"),
                }
                self.scratch = scratch;
                self.scratch.clear();
            }
        } else {
            // The string continues in later fragments: leave it room to grow
            // instead of reallocating at 8, 16, 32, ... bytes.
            let mut s = String::with_capacity(self.scratch.len().max(STRING_START_CAPACITY));
            s.push_str(&self.scratch);
            self.attach(Value::String(s), true);
            self.scratch.clear();
            self.leaf_in_tree = true;
        }
    }

    /// Handles the closing quote of a string.
    fn close_string(&mut self, key: bool) {
        if key {
            if let Some(frame) = self
                .depth
                .checked_sub(1)
                .and_then(|t| self.frames.get_mut(t))
            {
                std::mem::swap(&mut frame.key, &mut self.scratch);
            }
            self.scratch.clear();
            self.state = State::Colon;
        } else {
            self.flush_string();
            self.leaf_in_tree = false;
            self.state = self.after_value_state();
        }
    }

    /// Parses the number text in `scratch` and attaches it.
    fn complete_number(&mut self) -> Result<(), PartialJsonError> {
        let text = std::mem::take(&mut self.scratch);
        let result = self.complete_number_text(&text);
        self.scratch = text;
        self.scratch.clear();
        result
    }

    /// Parses a complete, grammatically valid number and attaches it.
    fn complete_number_text(&mut self, text: &str) -> Result<(), PartialJsonError> {
        // Common cases are converted directly (bit-identical to serde_json);
        // the rest by serde_json itself. Only out-of-range numbers fail.
        let number = match fast_number(text) {
            Some(number) => number,
            None => text
                .parse::<Number>()
                .map_err(|_| PartialJsonError::NumberOutOfRange {
                    offset: self.token_start,
                })?,
        };
        self.complete_scalar(Value::Number(number));
        Ok(())
    }

    fn complete_scalar(&mut self, value: Value) {
        self.attach(value, false);
        self.state = self.after_value_state();
    }

    fn after_value_state(&self) -> State {
        if self.depth == 0 {
            State::Done
        } else {
            State::AfterValue
        }
    }

    /// Opens a container whose bracket is at byte `offset`.
    fn open(&mut self, object: bool, offset: u64) -> Result<(), PartialJsonError> {
        if self.depth >= self.max_depth {
            return Err(PartialJsonError::DepthLimitExceeded {
                offset,
                max_depth: self.max_depth,
            });
        }
        self.attach(
            if object {
                Value::Object(Map::new())
            } else {
                Value::Array(Vec::new())
            },
            true,
        );
        if self.frames.len() == self.depth {
            self.frames.push(Frame::default());
        }
        if let Some(frame) = self.frames.get_mut(self.depth) {
            frame.object = object;
            frame.key.clear();
            frame.position = Position::Unknown;
        }
        self.depth += 1;
        self.top_is_object = object;
        self.deepest = self.deepest.max(self.depth);
        self.state = if object {
            State::ObjectFirst
        } else {
            State::ArrayFirst
        };
        Ok(())
    }

    /// Closes the innermost container.
    fn close(&mut self) {
        self.depth = self.depth.saturating_sub(1);
        self.top_is_object = self
            .depth
            .checked_sub(1)
            .and_then(|top| self.frames.get(top))
            .is_some_and(|f| f.object);
        self.state = self.after_value_state();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn serde_number(text: &str) -> Option<Number> {
        text.parse::<Number>().ok()
    }

    #[test]
    fn fast_number_matches_serde_json_on_edge_cases() {
        for text in [
            "0",
            "-0",
            "1",
            "-1",
            "0.0",
            "-0.0",
            "1.5",
            "-0.5e-10",
            "1E+2",
            "1e2",
            "1e-2",
            "1e22",
            "1e23",
            "1e-22",
            "1e-23",
            "9007199254740991",
            "9007199254740992",
            "9007199254740993",
            "999999999999999999",
            "9999999999999999999",
            "18446744073709551615",
            "18446744073709551616",
            "-9223372036854775808",
            "-9223372036854775809",
            "0.1",
            "0.2",
            "0.30000000000000004",
            "123456.789",
            "1.7976931348623157e308",
            "5e-324",
            "2.2250738585072014e-308",
            "0.000001",
            "100e-2",
            "4.35",
            "142857.14285714287",
            "0e999",
            "0.0000000000000000000000001",
            "1.0e0",
            "10",
            "-10.25E-3",
        ] {
            if let Some(fast) = fast_number(text) {
                assert_eq!(Some(fast), serde_number(text), "{text}");
            }
        }
        // The common cases do take the fast path.
        for text in ["0", "42", "-7", "0.5", "-0.5e-10", "1E+2", "3.14159"] {
            assert!(fast_number(text).is_some(), "{text}");
        }
    }

    fn number_text() -> impl Strategy<Value = String> {
        (
            any::<bool>(),
            prop_oneof![Just("0".to_owned()), "[1-9][0-9]{0,20}"],
            prop::option::of("[0-9]{1,20}"),
            prop::option::of(("[eE]", "[+-]?", "[0-9]{1,3}")),
        )
            .prop_map(|(neg, int, frac, exp)| {
                let mut s = String::new();
                if neg {
                    s.push('-');
                }
                s.push_str(&int);
                if let Some(frac) = frac {
                    s.push('.');
                    s.push_str(&frac);
                }
                if let Some((e, sign, digits)) = exp {
                    s.push_str(&e);
                    s.push_str(&sign);
                    s.push_str(&digits);
                }
                s
            })
    }

    proptest! {
        #[test]
        fn fast_number_matches_serde_json(text in number_text()) {
            if let Some(fast) = fast_number(&text) {
                prop_assert_eq!(Some(fast), serde_number(&text));
            }
        }

        #[test]
        fn fast_number_matches_serde_json_on_floats(f in any::<f64>().prop_filter("finite", |f| f.is_finite())) {
            for text in [serde_json::to_string(&f).unwrap_or_default(), format!("{f:e}"), format!("{f:.3}")] {
                if let Some(fast) = fast_number(&text) {
                    prop_assert_eq!(Some(fast), serde_number(&text), "{}", text);
                }
            }
        }
    }
}
