//! One rule for what every API's request body may hold, decided once, before a model's
//! upstream is chosen: no string with a lone UTF-16 surrogate escape (`"\ud800"`), no number
//! beyond an `f64`'s range (`1e400`), no nesting deeper than [`MAX_DEPTH`]. Each would pass
//! through to an upstream of the client's own API untouched, yet fail wherever the body is
//! translated to another API (a translation parses what it reshapes): refusing them up front
//! gives a request the same answer whichever API its model's upstreams speak.
//!
//! The body is read once, as bytes, with no tree built and nothing allocated but the error:
//! a fixed stack of [`MAX_DEPTH`] frames names where the fault is. Text that is not JSON is
//! left to the parser that follows, which refuses it with its own message.

use crate::error::ApiError;
use axum::http::StatusCode;

/// The deepest nesting a body may have, its own object counting as one level: every value
/// inside it is then at most 127 levels deep, as far as the JSON parser the translations use
/// reads.
pub(crate) const MAX_DEPTH: usize = 128;

/// What in a body breaks the rule, and where.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Malformed {
    /// What is wrong.
    pub kind: Fault,
    /// The field it is in, in the client API's path notation (`messages[0].content`,
    /// Anthropic's `messages.0.content`); empty for the body itself.
    pub path: String,
}

/// The faults the rule refuses.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Fault {
    /// A `\uD800`–`\uDFFF` escape that is not half of a surrogate pair.
    LoneSurrogate(String),
    /// A number whose value is beyond an `f64`'s range: its text (cut to 40 bytes).
    NumberOutOfRange(String),
    /// Nesting deeper than [`MAX_DEPTH`].
    TooDeep,
}

impl Malformed {
    /// The 400 the client gets, in the gateway's error (answered in its API's shape).
    pub fn error(&self) -> ApiError {
        let at = match self.path.is_empty() {
            true => "the request body".to_string(),
            false => format!("{:?}", self.path),
        };
        let (message, code) = match &self.kind {
            Fault::LoneSurrogate(escape) => (
                format!(
                    "{at} holds a string with a lone surrogate escape ({escape}): a \\uD800-\\uDFFF \
                     escape must be half of a surrogate pair"
                ),
                "invalid_unicode",
            ),
            Fault::NumberOutOfRange(number) => (
                format!(
                    "{at} holds the number {number}, beyond the range of a 64-bit float (about \
                     1.8e308)"
                ),
                "number_out_of_range",
            ),
            Fault::TooDeep => (
                format!("{at} is nested deeper than {MAX_DEPTH} levels, the most a body may be"),
                "nesting_too_deep",
            ),
        };
        let mut e =
            ApiError::new(StatusCode::BAD_REQUEST, "invalid_request_error", message).code(code);
        if !self.path.is_empty() {
            e = e.param(&self.path);
        }
        e
    }
}

/// Where the reader is inside a container.
#[derive(Clone, Copy)]
enum Frame {
    /// An array, at its entry of this index.
    Array(usize),
    /// An object, at the field of this key (its text's range in the body, escapes as sent),
    /// or before its first key.
    Object(Option<(usize, usize)>),
}

/// How an error names a field's path: `messages[1].content` (Chat Completions, Responses)
/// or `messages.1.content` (Anthropic Messages), as the client's API does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Paths {
    /// `messages[1].content`.
    Indexed,
    /// `messages.1.content`.
    Dotted,
}

/// The first fault of `body`, if any (see the module). Text that is not JSON ends the read
/// without a fault.
pub(crate) fn find_fault(body: &[u8], api: Paths) -> Option<Malformed> {
    scan(body, api, &[]).fault
}

/// What one pass over a request body learns, before any of it is parsed: the one scan of a
/// body (strings, escapes, numbers, nesting), shared by the memory ceiling's cost, the rule
/// above and the handler's choice of where to parse.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Scan {
    /// The body's first fault, if any ([`find_fault`]).
    pub fault: Option<Malformed>,
    /// The bytes of the body's top-level fields named `heavy` ([`scan`]'s argument); the
    /// whole body when it is not one JSON object, has a fault or could not be read to its
    /// end. Counted high rather than low: a key written with an escape counts as one of
    /// them, and a field sent twice counts twice.
    pub heavy: u64,
    /// An object of the body has a key `vote_by` (a policy's pattern to compile).
    pub vote_by: bool,
    /// A string of the body has a `\u` escape (which could spell a `vote_by`).
    pub escapes: bool,
}

/// Reads `body` once (see [`Scan`]): its fault in `api`'s path notation, and the bytes of
/// its top-level fields named in `heavy` (none: 0).
pub(crate) fn scan(body: &[u8], api: Paths, heavy: &[&str]) -> Scan {
    let mut out = Scan::default();
    let whole = match heavy.is_empty() {
        true => 0,
        false => body.len() as u64,
    };
    let mut stack = [Frame::Array(0); MAX_DEPTH];
    let mut depth = 0;
    // In an object, whether the next string is a key.
    let mut key_next = false;
    // At the top level: whether the last key is a heavy one, and where its value began.
    let mut heavy_key = false;
    let mut value: Option<usize> = None;
    let mut objects = 0;
    let mut i = 0;
    macro_rules! faulted {
        ($kind:expr) => {{
            out.fault = Some(Malformed {
                kind: $kind,
                path: path(body, &stack[..depth], api),
            });
            out.heavy = whole;
            return out;
        }};
    }
    while i < body.len() {
        match body[i] {
            b'"' => {
                let start = i + 1;
                let end = match string_end(body, start, &mut out.escapes) {
                    Ok(end) => end,
                    Err(Some(escape)) => faulted!(Fault::LoneSurrogate(escape)),
                    Err(None) => {
                        // Not JSON: the parser that follows refuses it.
                        out.heavy = whole;
                        return out;
                    }
                };
                if key_next && depth > 0 {
                    stack[depth - 1] = Frame::Object(Some((start, end)));
                    key_next = false;
                    let key = &body[start..end];
                    out.vote_by |= key == b"vote_by";
                    if depth == 1 {
                        heavy_key =
                            key.contains(&b'\\') || heavy.iter().any(|k| k.as_bytes() == key);
                    }
                }
                i = end + 1;
                continue;
            }
            b'{' | b'[' => {
                if depth == MAX_DEPTH {
                    faulted!(Fault::TooDeep);
                }
                if depth == 0 {
                    objects += 1;
                }
                let object = body[i] == b'{';
                stack[depth] = match object {
                    true => Frame::Object(None),
                    false => Frame::Array(0),
                };
                depth += 1;
                key_next = object;
            }
            b':' if depth == 1 => value = heavy_key.then_some(i + 1),
            b'}' | b']' => {
                if depth == 0 {
                    out.heavy = whole;
                    return out;
                }
                if depth == 1
                    && let Some(start) = value.take()
                {
                    out.heavy += (i - start) as u64;
                }
                depth -= 1;
                key_next = false;
            }
            b',' if depth > 0 => {
                if depth == 1
                    && let Some(start) = value.take()
                {
                    out.heavy += (i - start) as u64;
                }
                match &mut stack[depth - 1] {
                    Frame::Array(index) => *index += 1,
                    Frame::Object(_) => key_next = true,
                }
            }
            b'-' | b'0'..=b'9' => {
                let end = (body[i..].iter())
                    .position(|b| !matches!(b, b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E'))
                    .map_or(body.len(), |n| i + n);
                let text = std::str::from_utf8(&body[i..end]).unwrap_or("");
                // Beyond an `f64` only with an exponent or more than 308 digits: other
                // numbers, nearly all, are not parsed.
                let may_overflow = text.len() > 308 || text.contains(['e', 'E']);
                if may_overflow && text.parse::<f64>().is_ok_and(|x| x.is_infinite()) {
                    let shown = match text.len() > 40 {
                        true => format!("{}… ({} characters)", &text[..40], text.len()),
                        false => text.to_string(),
                    };
                    faulted!(Fault::NumberOutOfRange(shown));
                }
                i = end;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    if heavy.is_empty() {
        out.heavy = 0;
    } else if objects != 1 || body.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        // Not one object: the handler refuses it, and nothing here says what it holds.
        out.heavy = whole;
    } else if let Some(start) = value {
        // An object cut short: its last field runs to the end.
        out.heavy += (body.len() - start) as u64;
    }
    out
}

/// The index of the quote that ends the string whose text starts at `start`; `Err(Some)`
/// naming a lone surrogate escape in it, `Err(None)` when the string does not end;
/// `escapes` set when it has a `\u` escape.
fn string_end(body: &[u8], start: usize, escapes: &mut bool) -> Result<usize, Option<String>> {
    let mut i = start;
    // From quote or backslash to the next: a long text is passed over at memchr's pace.
    while let Some(n) = memchr::memchr2(b'"', b'\\', body.get(i..).unwrap_or_default()) {
        i += n;
        match body[i] {
            b'"' => return Ok(i),
            b'\\' if body.get(i + 1) == Some(&b'u') => {
                *escapes = true;
                let Some(unit) = hex4(body, i + 2) else {
                    return Err(None);
                };
                let shown = || String::from_utf8_lossy(&body[i..i + 6]).into_owned();
                match unit {
                    0xDC00..=0xDFFF => return Err(Some(shown())),
                    0xD800..=0xDBFF => {
                        let low = (body.get(i + 6..i + 8) == Some(b"\\u"))
                            .then(|| hex4(body, i + 8))
                            .flatten();
                        if !matches!(low, Some(0xDC00..=0xDFFF)) {
                            return Err(Some(shown()));
                        }
                        i += 12;
                    }
                    _ => i += 6,
                }
            }
            _ => i += 2,
        }
    }
    Err(None)
}

/// The four hex digits at `at` as a number, if they are four hex digits.
fn hex4(body: &[u8], at: usize) -> Option<u16> {
    let digits = std::str::from_utf8(body.get(at..at + 4)?).ok()?;
    u16::from_str_radix(digits, 16).ok()
}

/// The most path components an error names: a deeper fault's path ends with `…`.
const SHOWN_COMPONENTS: usize = 12;

/// The path of the value the frames `stack` lead to, below the body's own object, in `api`'s
/// notation.
fn path(body: &[u8], stack: &[Frame], api: Paths) -> String {
    let mut out = String::new();
    for (n, frame) in stack.iter().skip(1).enumerate() {
        if n == SHOWN_COMPONENTS {
            out.push_str(if api == Paths::Dotted { ".…" } else { "…" });
            break;
        }
        match *frame {
            Frame::Array(index) if api == Paths::Dotted => out.push_str(&format!(".{index}")),
            Frame::Array(index) => out.push_str(&format!("[{index}]")),
            Frame::Object(key) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(&key_text(body, key));
            }
        }
    }
    // The body's own field, where the frames below it begin.
    let top = match stack.first() {
        Some(Frame::Object(key)) => key_text(body, *key),
        _ => String::new(),
    };
    match (top.is_empty(), out.is_empty()) {
        (true, _) => out.trim_start_matches('.').to_string(),
        (false, true) => top,
        (false, false) if out.starts_with('[') => top + &out,
        (false, false) => format!("{top}.{}", out.trim_start_matches('.')),
    }
}

/// A key's text (unescaped when it can be), or `?` when it is not known.
fn key_text(body: &[u8], key: Option<(usize, usize)>) -> String {
    let Some((start, end)) = key else {
        return "?".into();
    };
    let raw = &body[start..end];
    if !raw.contains(&b'\\') {
        return String::from_utf8_lossy(raw).into_owned();
    }
    serde_json::from_slice::<String>(&body[start - 1..=end])
        .unwrap_or_else(|_| String::from_utf8_lossy(raw).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fault(body: &str, api: Paths) -> Option<Malformed> {
        find_fault(body.as_bytes(), api)
    }

    #[test]
    fn well_formed_bodies_pass() {
        for body in [
            r#"{"model": "m", "messages": [{"role": "user", "content": "hi \ud83d\ude00 \"x\" \\ud800"}]}"#,
            r#"{"n": -1.5e300, "a": [1e-400, 123456789012345678901234567890, 0, -0.0, 1.7976931348623157e308]}"#,
            r#"{"tools": [{"parameters": {"type": "object"}}], "x": [[[]]], "t": true, "f": null}"#,
            // Not JSON: left to the parser.
            r#"{"a": "\ud8"#,
            "]]]",
        ] {
            assert_eq!(fault(body, Paths::Indexed), None, "{body}");
        }
        let deepest = format!("{}{}", "[".repeat(MAX_DEPTH - 1), "]".repeat(MAX_DEPTH - 1));
        assert_eq!(
            fault(&format!("{{\"a\": {deepest}}}"), Paths::Indexed),
            None
        );
    }

    #[test]
    fn each_fault_is_named_with_its_place() {
        let lone = r#"{"model": "m", "messages": [{"role": "user", "content": "a"}, {"role": "user", "content": [{"type": "text", "text": "x\ud800y"}]}]}"#;
        let m = fault(lone, Paths::Indexed).unwrap();
        assert_eq!(m.kind, Fault::LoneSurrogate("\\ud800".into()));
        assert_eq!(m.path, "messages[1].content[0].text");
        assert_eq!(
            fault(lone, Paths::Dotted).unwrap().path,
            "messages.1.content.0.text"
        );
        for (body, escape) in [
            (r#"{"a": "\udc00"}"#, "\\udc00"),
            (r#"{"a": "\uD800\u0041"}"#, "\\uD800"),
            (r#"{"a": "\ud800"}"#, "\\ud800"),
            (r#"{"a": "\ud800\ud800\udc00"}"#, "\\ud800"),
        ] {
            let m = fault(body, Paths::Indexed).unwrap();
            assert_eq!(
                (m.kind, m.path.as_str()),
                (Fault::LoneSurrogate(escape.into()), "a")
            );
        }
        let big = r#"{"temperature": 1, "tools": [{"x": {"max": -1e400}}]}"#;
        let m = fault(big, Paths::Indexed).unwrap();
        assert_eq!(m.kind, Fault::NumberOutOfRange("-1e400".into()));
        assert_eq!(m.path, "tools[0].x.max");
        let long = format!(r#"{{"n": 1{}}}"#, "0".repeat(400));
        assert!(
            matches!(fault(&long, Paths::Indexed).unwrap().kind, Fault::NumberOutOfRange(s) if s.contains("401 characters"))
        );
        // Without an exponent, 309 digits may pass an `f64`'s range, 308 may not.
        let at = |digits: usize| format!(r#"{{"n": 9{}}}"#, "9".repeat(digits - 1));
        assert!(fault(&at(308), Paths::Indexed).is_none());
        let m = fault(&at(309), Paths::Indexed).unwrap();
        assert!(matches!(m.kind, Fault::NumberOutOfRange(s) if s.contains("309 characters")));
        // Far into a long text, past escaped quotes and backslashes, a lone surrogate is
        // found, and so is the text's end.
        let text = "ab\\\"cd ".repeat(40);
        let long = format!(r#"{{"a": "{text}", "b": ["{text}\ud800{text}"]}}"#);
        let m = fault(&long, Paths::Indexed).unwrap();
        assert_eq!(
            (m.kind, m.path.as_str()),
            (Fault::LoneSurrogate("\\ud800".into()), "b[0]")
        );
        let ends = format!(r#"{{"a": "{text}", "b": ["{text}\ud83d\ude00"], "c": 1e999}}"#);
        assert_eq!(fault(&ends, Paths::Indexed).unwrap().path, "c");
        let deep = format!(
            r#"{{"a": {}{}}}"#,
            "[".repeat(MAX_DEPTH),
            "]".repeat(MAX_DEPTH)
        );
        let m = fault(&deep, Paths::Indexed).unwrap();
        assert_eq!(m.kind, Fault::TooDeep);
        assert!(
            m.path.starts_with("a[0][0]") && m.path.ends_with('…'),
            "{}",
            m.path
        );
        let e = m.error();
        assert_eq!(
            (e.status.as_u16(), e.code.as_deref()),
            (400, Some("nesting_too_deep"))
        );
        assert!(e.message.contains("deeper than 128"), "{}", e.message);
        // A key's escapes are read; a fault at the top level names the body.
        let m = fault(r#"{"\u0061b": {"c": 2e308}}"#, Paths::Indexed).unwrap();
        assert_eq!(m.path, "ab.c");
        assert_eq!(fault("[\"\\udfff\"]", Paths::Indexed).unwrap().path, "");
        assert!(
            m.error()
                .message
                .contains("\"ab.c\" holds the number 2e308")
        );
    }

    #[test]
    fn one_scan_tells_the_fault_the_heavy_bytes_and_where_to_parse() {
        let heavy = &["messages", "tools"];
        let body = br#"{"model": "m", "messages": [{"content": "a\u0041"}], "tools": []}"#;
        let scan = scan(body, Paths::Indexed, heavy);
        let messages = br#" [{"content": "a\u0041"}]"#.len() as u64;
        assert_eq!(scan.fault, None);
        assert_eq!(scan.heavy, messages + br#" []"#.len() as u64);
        assert!(scan.escapes && !scan.vote_by);
        // Only a key is a vote_by; a value that says it is not.
        let keyed = super::scan(br#"{"c": {"vote_by": "x"}}"#, Paths::Indexed, heavy);
        let valued = super::scan(br#"{"c": "vote_by"}"#, Paths::Indexed, heavy);
        assert!(keyed.vote_by && !valued.vote_by && !valued.escapes);
        // A fault, text that is not JSON, or more than one object: counted whole.
        for text in [
            &br#"{"messages": [1e999], "a": 1}"#[..],
            br#"{"messages": "unterminated"#,
            br#"{"a": 1}]"#,
            br#"{"a": 1}{"messages": 2}"#,
        ] {
            assert_eq!(
                super::scan(text, Paths::Indexed, heavy).heavy,
                text.len() as u64
            );
        }
        assert_eq!(super::scan(body, Paths::Indexed, &[]).heavy, 0);
    }
}
