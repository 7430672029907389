//! The lexer: the grammar state machine, and the decoding of strings.

use super::number::{Digits, Num};
use super::tree::leaf_mut;
use super::{Lit, PartialJson, STRING_START_CAPACITY, State, char_at};
use crate::error::{Expected, PartialJsonError};

/// Where the lexer is inside a string.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Esc {
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

/// Strings below this capacity grow 4x at a time (see [`append`]).
const FAST_GROWTH_LIMIT: usize = 4096;

/// Why [`lex_string`] stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum StrStop {
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
///
/// Runs of plain text and the two-character escapes are handled here, a
/// `\uXXXX` escape (or an escape split by the end of a fragment) by
/// [`lex_escape`].
#[inline(always)]
pub(super) fn lex_string(
    bytes: &[u8],
    text: &str,
    mut i: usize,
    mut esc: Esc,
    out: &mut String,
) -> (usize, StrStop) {
    let len = bytes.len();
    loop {
        if esc != Esc::Normal {
            match lex_escape(bytes, i, esc, out) {
                Ok((end, Esc::Normal)) => {
                    i = end;
                    esc = Esc::Normal;
                }
                Ok((end, esc)) => return (end, StrStop::End(esc)),
                Err(stop) => return stop,
            }
        }
        let start = i;
        while i < len && !is_special_in_string(bytes[i]) {
            i += 1;
        }
        if i > start {
            // `start` and `i` are at ASCII bytes or the end: both are
            // character boundaries.
            append(out, &text[start..i]);
        }
        let Some(&c) = bytes.get(i) else {
            return (i, StrStop::End(Esc::Normal));
        };
        if c == b'"' {
            return (i + 1, StrStop::Closed);
        }
        if c != b'\\' {
            return (i, StrStop::Control(c));
        }
        // An escape.
        let Some(&e) = bytes.get(i + 1) else {
            return (len, StrStop::End(Esc::Backslash));
        };
        let decoded = SHORT_ESCAPES[usize::from(e)];
        if decoded != 0 {
            out.push(char::from(decoded));
            i += 2;
            continue;
        }
        if e != b'u' {
            return (i + 1, StrStop::Unexpected(Expected::EscapeCharacter));
        }
        i += 2;
        esc = Esc::Hex { count: 0, code: 0 };
    }
}

/// What the two-character escapes `\"`, `\\`, `\/`, `\b`, `\f`, `\n`,
/// `\r` and `\t` stand for, by their second character (0 for the others).
static SHORT_ESCAPES: [u8; 256] = {
    let mut table = [0; 256];
    table[b'"' as usize] = b'"';
    table[b'\\' as usize] = b'\\';
    table[b'/' as usize] = b'/';
    table[b'b' as usize] = 0x08;
    table[b'f' as usize] = 0x0c;
    table[b'n' as usize] = b'\n';
    table[b'r' as usize] = b'\r';
    table[b't' as usize] = b'\t';
    table
};

/// Lexes the escape in progress (state `esc`) from byte `i`, a byte at a
/// time, appending what it decodes to `out`. Returns where it stopped and
/// the escape state there: [`Esc::Normal`] once the escape is complete,
/// another state at the end of `bytes`; or where and why it failed.
#[inline(always)]
fn lex_escape(
    bytes: &[u8],
    mut i: usize,
    mut esc: Esc,
    out: &mut String,
) -> Result<(usize, Esc), (usize, StrStop)> {
    let len = bytes.len();
    while esc != Esc::Normal && i < len {
        let c = bytes[i];
        esc = match esc {
            Esc::Normal => Esc::Normal,
            Esc::Backslash => {
                let decoded = SHORT_ESCAPES[usize::from(c)];
                if decoded != 0 {
                    out.push(char::from(decoded));
                    Esc::Normal
                } else if c == b'u' {
                    Esc::Hex { count: 0, code: 0 }
                } else {
                    return Err((i, StrStop::Unexpected(Expected::EscapeCharacter)));
                }
            }
            Esc::Hex {
                mut count,
                mut code,
            } => {
                // The digits available, then the escape's end.
                loop {
                    let Some(d) = hex_value(bytes[i]) else {
                        return Err((i, StrStop::Unexpected(Expected::HexDigit)));
                    };
                    code = (code << 4) | d;
                    if count == 3 || i + 1 == len {
                        break;
                    }
                    count += 1;
                    i += 1;
                }
                if count < 3 {
                    Esc::Hex {
                        count: count + 1,
                        code,
                    }
                } else if (0xD800..0xDC00).contains(&code) {
                    Esc::AfterHigh { high: code }
                } else if (0xDC00..0xE000).contains(&code) {
                    return Err((i, StrStop::LoneSurrogate));
                } else {
                    out.push(char::from_u32(u32::from(code)).unwrap_or('\u{FFFD}'));
                    Esc::Normal
                }
            }
            Esc::AfterHigh { high } => {
                if c != b'\\' {
                    return Err((i, StrStop::LoneSurrogate));
                }
                Esc::AfterHighBackslash { high }
            }
            Esc::AfterHighBackslash { high } => {
                if c != b'u' {
                    return Err((i, StrStop::LoneSurrogate));
                }
                Esc::LowHex {
                    high,
                    count: 0,
                    code: 0,
                }
            }
            Esc::LowHex { high, count, code } => {
                let Some(d) = hex_value(c) else {
                    return Err((i, StrStop::Unexpected(Expected::HexDigit)));
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
                    return Err((i, StrStop::LoneSurrogate));
                }
            }
        };
        i += 1;
    }
    Ok((i, esc))
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
pub(super) fn is_special_in_string(c: u8) -> bool {
    SPECIAL_IN_STRING[usize::from(c)]
}

/// Appends `text` to `s`, a string that grows a few bytes at a time:
/// small strings grow 4x per reallocation instead of 2x (reallocations
/// dominated the cost of short strings arriving in 4-byte fragments).
#[inline(always)]
pub(super) fn append(s: &mut String, text: &str) {
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
    push_short(s, text);
}

/// `s.push_str(text)`, with the copy inlined for the few bytes a fragment
/// usually brings (instead of a call to `memcpy`).
#[inline(always)]
pub(super) fn push_short(s: &mut String, text: &str) {
    match text.len() {
        1 => s.push_str(text),
        2 => s.push_str(text),
        3 => s.push_str(text),
        4 => s.push_str(text),
        _ => s.push_str(text),
    }
}

/// The value of each hexadecimal digit, by its character (0xFF for the
/// other characters).
static HEX_DIGITS: [u8; 256] = {
    let mut table = [0xFF; 256];
    let mut c = 0;
    while c < 10 {
        table[b'0' as usize + c] = c as u8;
        c += 1;
    }
    let mut c = 0;
    while c < 6 {
        table[b'a' as usize + c] = 10 + c as u8;
        table[b'A' as usize + c] = 10 + c as u8;
        c += 1;
    }
    table
};

#[inline(always)]
fn hex_value(c: u8) -> Option<u16> {
    match HEX_DIGITS[usize::from(c)] {
        0xFF => None,
        d => Some(u16::from(d)),
    }
}

impl PartialJson {
    /// Processes `text` from byte `start`; on error returns the index of the
    /// offending byte.
    #[inline(always)]
    pub(super) fn feed(
        &mut self,
        text: &str,
        start: usize,
    ) -> Result<(), (usize, PartialJsonError)> {
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
                    // A string already in the tree is decoded straight into
                    // it (one lookup per fragment), others into `scratch`.
                    let leaf = if !key && self.leaf_in_tree {
                        let leaf = leaf_mut(&mut self.root, &self.frames[..self.depth]);
                        debug_assert!(leaf.is_some(), "open string not found in the tree");
                        leaf
                    } else {
                        None
                    };
                    let in_tree = leaf.is_some();
                    let out = leaf.unwrap_or(&mut self.scratch);
                    let before = out.len();
                    let stop;
                    (i, stop) = lex_string(bytes, text, i, esc, out);
                    if in_tree && out.len() != before {
                        self.changed = true;
                    }
                    match stop {
                        StrStop::End(esc) => self.state = State::Str { key, esc },
                        StrStop::Closed => self.close_string(key),
                        stop => return Err(self.string_error(text, i, stop)),
                    }
                }
                State::Number(num) => {
                    let start = i;
                    let (end, num) = self.digits.lex(bytes, i, num);
                    i = end;
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
                        self.complete_number(num, part).map_err(|e| (i, e))?;
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
                            self.digits = Digits::default();
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
}
