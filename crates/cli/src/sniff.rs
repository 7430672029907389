//! Telling what an input is before replaying it: an SSE stream (or a recording, which is one),
//! nothing at all, or something else, said in plain words.

/// How much of an input is looked at before deciding.
pub const HEAD: usize = 64 * 1024;

/// What the beginning of an input says it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sniffed {
    /// SSE: its first line that is not blank is an SSE field (`data:`, `event:`, `id:`,
    /// `retry:`) or a comment (`:`, as a recording's header is).
    Sse,
    /// Nothing but blank lines, and the input ended.
    Empty,
    /// Something else; the error to give.
    Not(String),
    /// No line that is not blank yet: read more.
    NeedMore,
}

/// Classifies the first bytes of an input (`at_end`: the input ends here).
pub fn sniff(head: &[u8], at_end: bool) -> Sniffed {
    let head = head.strip_prefix("\u{feff}".as_bytes()).unwrap_or(head);
    let text = match std::str::from_utf8(head) {
        Ok(text) => text,
        // A character cut by the end of the head is not a sign of binary data.
        Err(e) if e.error_len().is_none() && !at_end => {
            std::str::from_utf8(&head[..e.valid_up_to()]).unwrap_or_default()
        }
        Err(_) => return Sniffed::Not(not_sse("binary data (not UTF-8 text)")),
    };
    if text.contains('\0') {
        return Sniffed::Not(not_sse("binary data (NUL bytes)"));
    }
    for line in text.split_inclusive(['\n', '\r']) {
        let complete = line.ends_with(['\n', '\r']) || at_end;
        let content = line.trim_end_matches(['\n', '\r']);
        if content.trim().is_empty() {
            continue;
        }
        if !complete {
            break;
        }
        let field = content.split(':').next().unwrap_or_default();
        if content.starts_with(':') || matches!(field, "data" | "event" | "id" | "retry") {
            return Sniffed::Sse;
        }
        return Sniffed::Not(not_sse(&describe(content)));
    }
    match (at_end, text.trim().is_empty(), head.len() >= HEAD) {
        (true, true, _) => Sniffed::Empty,
        (_, _, true) => Sniffed::Not(not_sse(&describe(text))),
        _ => Sniffed::NeedMore,
    }
}

/// What a first line looks like, for the error.
fn describe(line: &str) -> String {
    let preview: String = line.trim().chars().take(60).collect();
    let more = if line.trim().chars().count() > 60 {
        "…"
    } else {
        ""
    };
    match line.trim_start().chars().next() {
        Some('{' | '[') => format!("it looks like JSON ({preview}{more})"),
        _ => format!("text without data: lines (the first line is {preview:?}{more})"),
    }
}

fn not_sse(what: &str) -> String {
    format!(
        "not an SSE stream or a choicewise recording: {what}; an SSE stream's events are lines starting with \"data:\""
    )
}

/// The error of an input that ended before any SSE event.
pub const EMPTY: &str = "empty input: no SSE events";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inputs_are_told_apart() {
        assert_eq!(sniff(b"data: {}\n\n", true), Sniffed::Sse);
        assert_eq!(
            sniff(b"\n\n: choicewise-recording v1\n", false),
            Sniffed::Sse
        );
        assert_eq!(
            sniff(b"\xef\xbb\xbfevent: message_start\n", false),
            Sniffed::Sse
        );
        assert_eq!(sniff(b"", true), Sniffed::Empty);
        assert_eq!(sniff(b" \n\r\n", true), Sniffed::Empty);
        assert_eq!(sniff(b"data: {\"cho", false), Sniffed::NeedMore);
        let Sniffed::Not(json) = sniff(b"{\"choices\": []}\n", true) else {
            panic!()
        };
        assert!(
            json.starts_with("not an SSE stream or a choicewise recording: it looks like JSON"),
            "{json}"
        );
        let Sniffed::Not(binary) = sniff(&[0x89, b'P', b'N', b'G', 0, 1, 2], true) else {
            panic!()
        };
        assert!(binary.contains("binary data"), "{binary}");
        let Sniffed::Not(text) = sniff(b"hello world\n", false) else {
            panic!()
        };
        assert!(text.contains("text without data: lines"), "{text}");
        // A cut character at the end of the head is not binary.
        assert_eq!(
            sniff("data: é".as_bytes().split_at(7).0, false),
            Sniffed::NeedMore
        );
    }
}
