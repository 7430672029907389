//! Repairing raw control characters inside strings.

use std::fmt::Write as _;

/// Escapes raw control characters (U+0000 to U+001F) that occur *inside JSON
/// strings* of a complete JSON text, if that is what keeps it from parsing.
///
/// Models sometimes put a raw newline or tab inside a string, which JSON
/// forbids (the parser reports
/// [`PartialJsonError::ControlCharacterInString`](crate::PartialJsonError::ControlCharacterInString)).
/// This function scans the text, tracking whether it is inside a string
/// (and after a `\`), and escapes each raw control character there: newline
/// as `\n`, carriage return as `\r`, tab as `\t`, any other as `\u00XX`.
/// Control characters outside strings are left alone (the JSON whitespace
/// ones are valid there).
///
/// Returns `Some(repaired)` only if the original text does not parse with
/// `serde_json` and the repaired one does; otherwise `None` (nothing to
/// repair, or the text is broken in some other way too).
///
/// ```
/// use choicewise_partial_json::repair_control_characters;
///
/// let raw = "{\"poem\": \"roses\n\tare red\"}";
/// let fixed = repair_control_characters(raw).unwrap();
/// assert_eq!(fixed, r#"{"poem": "roses\n\tare red"}"#);
/// let v: serde_json::Value = serde_json::from_str(&fixed).unwrap();
/// assert_eq!(v["poem"], "roses\n\tare red");
///
/// // Valid JSON, or JSON broken for another reason, is not "repaired".
/// assert_eq!(repair_control_characters("{\n\"a\": 1\n}"), None);
/// assert_eq!(repair_control_characters("{\"a\": \"x\ny\""), None);
/// ```
pub fn repair_control_characters(s: &str) -> Option<String> {
    let mut out = String::new();
    let mut copied = 0; // bytes of `s` already copied into `out`
    let mut in_string = false;
    let mut escaped = false;
    for (i, b) in s.bytes().enumerate() {
        if !in_string {
            in_string = b == b'"';
            continue;
        }
        if escaped {
            escaped = false;
            continue;
        }
        match b {
            b'\\' => escaped = true,
            b'"' => in_string = false,
            0x00..=0x1f => {
                if out.is_empty() {
                    out.reserve(s.len() + 16);
                }
                // `i` is an ASCII byte: a character boundary.
                out.push_str(&s[copied..i]);
                match b {
                    b'\n' => out.push_str("\\n"),
                    b'\r' => out.push_str("\\r"),
                    b'\t' => out.push_str("\\t"),
                    _ => {
                        let _ = write!(out, "\\u{b:04x}");
                    }
                }
                copied = i + 1;
            }
            _ => {}
        }
    }
    if copied == 0 {
        return None;
    }
    out.push_str(&s[copied..]);
    if parses(s) || !parses(&out) {
        return None;
    }
    Some(out)
}

fn parses(s: &str) -> bool {
    serde_json::from_str::<serde::de::IgnoredAny>(s).is_ok()
}
