//! Helpers shared by the integration tests.

#![allow(dead_code)]

use choicewise_partial_json::{PartialJson, PartialJsonError};
pub use choicewise_test_support::is_prefix_consistent;
use serde_json::Value;

/// Feeds `fragments`, checking after each push that the snapshot is
/// consistent with `expected` (when given) and that `changed()` reports
/// exactly whether `value()` changed; returns the result of `finish`.
pub fn feed_checked(
    fragments: &[&str],
    expected: Option<&Value>,
) -> Result<Value, PartialJsonError> {
    feed_checked_with(fragments, expected, true)
}

/// [`feed_checked`]; with `exact_changed` false, only checks that a change
/// of `value()` is reported (with duplicate keys a value can be replaced by
/// an equal one).
pub fn feed_checked_with(
    fragments: &[&str],
    expected: Option<&Value>,
    exact_changed: bool,
) -> Result<Value, PartialJsonError> {
    let mut parser = PartialJson::new();
    let mut previous: Option<Value> = None;
    for fragment in fragments {
        parser.push(fragment)?;
        let current = parser.value().cloned();
        if exact_changed || current != previous {
            assert_eq!(
                parser.changed(),
                current != previous,
                "changed() wrong after {fragment:?} (fragments {fragments:?})"
            );
        }
        if let (Some(expected), Some(snapshot)) = (expected, parser.snapshot()) {
            assert!(
                is_prefix_consistent(snapshot, expected),
                "inconsistent snapshot {snapshot:?} for {expected} (fragments {fragments:?})"
            );
        }
        previous = current;
    }
    parser.finish()
}

/// Splits `text` at the given byte positions (moved down to character
/// boundaries, sorted, deduplicated).
pub fn split_at<'a>(text: &'a str, cuts: &[usize]) -> Vec<&'a str> {
    let mut cuts: Vec<usize> = cuts
        .iter()
        .map(|&c| {
            let mut c = c.min(text.len());
            while !text.is_char_boundary(c) {
                c -= 1;
            }
            c
        })
        .collect();
    cuts.sort_unstable();
    cuts.dedup();
    let mut out = Vec::new();
    let mut start = 0;
    for c in cuts {
        out.push(&text[start..c]);
        start = c;
    }
    out.push(&text[start..]);
    out
}

/// The character boundaries of `text`, including 0 and its length.
pub fn boundaries(text: &str) -> Vec<usize> {
    (0..=text.len())
        .filter(|&i| text.is_char_boundary(i))
        .collect()
}

/// All ways to split `text` into two fragments, many ways into three (all
/// for short texts), and one fragment per character.
pub fn all_splits(text: &str) -> Vec<Vec<&str>> {
    let b = boundaries(text);
    // Keep the number of three-way splits around 2,000.
    let stride = (b.len() * b.len() / 4000).max(1);
    let mut out = vec![vec![text]];
    for (n, &i) in b.iter().enumerate() {
        out.push(split_at(text, &[i]));
        for &j in b[n + 1..].iter().skip((n * 7) % stride).step_by(stride) {
            out.push(split_at(text, &[i, j]));
        }
    }
    out.push(split_at(text, &b));
    out
}

/// Escapes every non-ASCII character of serialized JSON as `\uXXXX`
/// (surrogate pairs for astral characters).
pub fn ensure_ascii(json: &str) -> String {
    let mut out = String::with_capacity(json.len() * 2);
    for c in json.chars() {
        if c.is_ascii() {
            out.push(c);
        } else {
            let mut buf = [0u16; 2];
            for unit in c.encode_utf16(&mut buf) {
                out.push_str(&format!("\\u{unit:04x}"));
            }
        }
    }
    out
}

/// Parses `text` in one push.
pub fn parse_whole(text: &str) -> Result<Value, PartialJsonError> {
    let mut parser = PartialJson::new();
    parser.push(text)?;
    parser.finish()
}
