//! A call's complete arguments checked as one JSON value without building a tree: their
//! depth, their syntax (the byte offset of the first problem named), and raw control
//! characters inside strings repaired.

use choicewise_partial_json::{PartialJson, repair_control_characters};

use crate::event::{ArgumentsError, JsonArguments, Text};

/// The checked complete arguments of a call, as [`FunctionCallEvent::Finished`](crate::event::FunctionCallEvent::Finished) carries them.
pub(crate) struct Parsed {
    pub value: Result<JsonArguments, ArgumentsError>,
    pub repaired: bool,
}

/// The longest arguments that the incremental parser checks when serde_json refuses them (it
/// names the byte offset of the problem, and accepts nesting deeper than serde_json's limit
/// of 128), since it builds a tree as it goes: longer ones are judged by serde_json alone.
pub(crate) const INCREMENTAL_CHECK_BYTES: usize = 64 * 1024;

/// Checks a call's complete arguments as one JSON value, building no tree: `arguments` is
/// the text kept. If they fail only because of raw control characters inside strings (models
/// emit raw newlines), those are escaped, the repaired text kept and the result flagged.
pub(crate) fn parse_final(arguments: &Text) -> Parsed {
    let max_depth = choicewise_partial_json::DEFAULT_MAX_DEPTH;
    // serde_json skips a value without a recursion limit: the depth is checked apart, as the
    // incremental parser would.
    if JsonArguments::check(arguments).is_ok() {
        return Parsed {
            value: within_depth(arguments, max_depth)
                .map(|()| JsonArguments::checked(arguments.clone())),
            repaired: false,
        };
    }
    if let Some(fixed) = repair_control_characters(arguments)
        && JsonArguments::check(&fixed).is_ok()
    {
        return Parsed {
            value: within_depth(&fixed, max_depth)
                .map(|()| JsonArguments::checked(Text::from(fixed))),
            repaired: true,
        };
    }
    if arguments.len() > INCREMENTAL_CHECK_BYTES {
        // Long: checked level by level without a tree (nesting up to the incremental
        // parser's limit), else serde_json's error at its byte offset.
        let value = check_deep(arguments, choicewise_partial_json::DEFAULT_MAX_DEPTH)
            .map(|()| JsonArguments::checked(arguments.clone()));
        return Parsed {
            value,
            repaired: false,
        };
    }
    // The incremental parser names the byte offset of the problem (serde_json gives a line
    // and column); it also accepts nesting deeper than serde_json's recursion limit.
    let mut parser = PartialJson::new();
    let result = parser.push(arguments).and_then(|()| parser.finish());
    match result {
        Ok(_) => Parsed {
            value: Ok(JsonArguments::checked(arguments.clone())),
            repaired: false,
        },
        Err(e) => Parsed {
            value: Err(ArgumentsError {
                offset: e.offset(),
                message: e.to_string(),
            }),
            repaired: false,
        },
    }
}

/// Whether `text` (valid JSON) nests containers at most `max_depth` deep; else the error at
/// the byte of the first container past it (the incremental parser's words). One pass over
/// the bytes, skipping strings.
fn within_depth(text: &str, max_depth: usize) -> Result<(), ArgumentsError> {
    let bytes = text.as_bytes();
    // Fewer openers than the limit: nothing to scan.
    if memchr::memchr2_iter(b'[', b'{', bytes)
        .nth(max_depth)
        .is_none()
    {
        return Ok(());
    }
    let (mut depth, mut at) = (0usize, 0usize);
    while at < bytes.len() {
        match bytes[at] {
            b'"' => {
                // To the closing quote, past escaped characters.
                at += 1;
                while let Some(j) = memchr::memchr2(b'"', b'\\', &bytes[at..]) {
                    at += j + 1;
                    if bytes[at - 1] == b'"' {
                        break;
                    }
                    at += 1;
                }
                continue;
            }
            b'[' | b'{' => {
                depth += 1;
                if depth > max_depth {
                    return Err(ArgumentsError {
                        offset: Some(at as u64),
                        message: format!(
                            "nesting deeper than the maximum depth {max_depth} at byte {at}"
                        ),
                    });
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
        at += 1;
    }
    Ok(())
}

/// Checks `text` as one JSON value nested at most `max_depth` deep, with a stack of one byte
/// per open container and no tree: strings, numbers and literals are each checked by
/// serde_json, the structure here. The error names the byte where the text stops being
/// such a value (nesting too deep, a byte out of place, a bad token, the end too soon).
fn check_deep(text: &str, max_depth: usize) -> Result<(), ArgumentsError> {
    #[derive(Clone, Copy, PartialEq)]
    enum Want {
        Value,
        Key,
        Colon,
        After,
    }
    let bytes = text.as_bytes();
    let error = |offset: usize, message: String| ArgumentsError {
        offset: Some(offset as u64),
        message: format!("{message} at byte {offset}"),
    };
    let mut open: Vec<u8> = Vec::new();
    let mut want = Want::Value;
    let mut at = 0;
    loop {
        while at < bytes.len() && matches!(bytes[at], b' ' | b'\t' | b'\n' | b'\r') {
            at += 1;
        }
        let Some(&byte) = bytes.get(at) else {
            return match (want, open.is_empty()) {
                (Want::After, true) => Ok(()),
                _ => Err(error(at, "the value ends too soon".into())),
            };
        };
        // The end of a token that serde_json checks: a string's closing quote, else the
        // first byte that cannot continue a number or literal.
        let token_end = |from: usize| -> usize {
            if bytes[from] == b'"' {
                let mut i = from + 1;
                while let Some(j) = memchr::memchr2(b'"', b'\\', &bytes[i..]) {
                    match bytes[i + j] {
                        b'"' => return i + j + 1,
                        _ => i += j + 2,
                    }
                }
                bytes.len()
            } else {
                from + (bytes[from..].iter())
                    .take_while(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'+' | b'.'))
                    .count()
            }
        };
        let scalar = |from: usize| -> Result<usize, ArgumentsError> {
            let end = token_end(from).min(bytes.len());
            if end == from {
                return Err(error(from, "expected a value".into()));
            }
            match serde_json::from_str::<serde::de::IgnoredAny>(&text[from..end]) {
                Ok(_) => Ok(end),
                Err(e) => {
                    let shifted = arguments_error(&text[from..end], &e);
                    let offset = from + shifted.offset.unwrap_or(0) as usize;
                    let message = serde_message(&e);
                    Err(error(offset, message))
                }
            }
        };
        match want {
            Want::Value => match byte {
                b'[' | b'{' => {
                    if open.len() >= max_depth {
                        return Err(error(
                            at,
                            format!("nesting deeper than the maximum depth {max_depth}"),
                        ));
                    }
                    open.push(byte);
                    at += 1;
                    want = if byte == b'[' { Want::Value } else { Want::Key };
                    // An empty container closes at once.
                    let mut next = at;
                    while next < bytes.len() && matches!(bytes[next], b' ' | b'\t' | b'\n' | b'\r')
                    {
                        next += 1;
                    }
                    if bytes.get(next) == Some(&(byte + 2)) {
                        open.pop();
                        at = next + 1;
                        want = Want::After;
                    }
                }
                _ => {
                    at = scalar(at)?;
                    want = Want::After;
                }
            },
            Want::Key => match byte {
                b'"' => {
                    at = scalar(at)?;
                    want = Want::Colon;
                }
                _ => return Err(error(at, "expected a key".into())),
            },
            Want::Colon => match byte {
                b':' => {
                    at += 1;
                    want = Want::Value;
                }
                _ => return Err(error(at, "expected ':'".into())),
            },
            Want::After => match (open.last(), byte) {
                (Some(b'['), b',') => {
                    at += 1;
                    want = Want::Value;
                }
                (Some(b'{'), b',') => {
                    at += 1;
                    want = Want::Key;
                }
                (Some(&o), b']' | b'}') if byte == o + 2 => {
                    open.pop();
                    at += 1;
                }
                (None, _) => return Err(error(at, "trailing characters".into())),
                _ => return Err(error(at, format!("unexpected {:?}", byte as char))),
            },
        }
    }
}

/// serde_json's error about `text` with the byte offset of its line and column.
fn arguments_error(text: &str, e: &serde_json::Error) -> ArgumentsError {
    let line_start = match e.line() {
        0 | 1 => 0,
        line => (memchr::memchr_iter(b'\n', text.as_bytes()))
            .nth(line - 2)
            .map_or(text.len(), |at| at + 1),
    };
    let offset = (line_start + e.column().saturating_sub(1)).min(text.len()) as u64;
    ArgumentsError {
        offset: Some(offset),
        message: format!("{} at byte {offset}", serde_message(e)),
    }
}

/// serde_json's message without its position.
fn serde_message(e: &serde_json::Error) -> String {
    let message = e.to_string();
    match message.rfind(" at line ") {
        Some(at) => message[..at].to_string(),
        None => message,
    }
}
