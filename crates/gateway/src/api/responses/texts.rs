//! A Responses answer's long texts (a call's arguments, a part's text, a reasoning summary)
//! written by reference rather than copied into every event that repeats them.
//!
//! The API repeats a text whole in up to four events (a part's `.done`, the part's
//! `response.content_part.done`, the item's `response.output_item.done`, the last
//! `response.completed` or `response.incomplete`). The encoder keeps each text once
//! ([`Pieces`]: the fragments as they came, the long ones shared with the choice's events)
//! and builds its events with a mark in their place ([`Marks`]); an event with marks is cut
//! at them into [`Seg`]ments, written in turn by [`Owed`] a bounded piece at a time, the
//! texts escaped as they are written. What the answer holds of an event is then the piece
//! being written, never the event whole.
//!
//! A mark is a JSON string no upstream or client can write: a NUL, a secret made for the
//! answer, the text's number, a NUL. Written by serde_json it is
//! `"\u0000SECRETk\u0000"`; only those bytes are taken for a mark.

use std::collections::VecDeque;
use std::hash::{BuildHasher, Hasher};

use choicewise_core::Text;
use serde_json::Value;

/// A fragment at least this long is kept shared with its event; a shorter one is copied
/// into a chunk of its own text (a pointer per token would cost more than the token).
const SHARED_FROM: usize = 1024;

/// The longest chunk of copied fragments.
const CHUNK: usize = 64 * 1024;

/// One piece of a text: a fragment shared with its event, or short fragments copied.
#[derive(Debug, Clone)]
enum Piece {
    Shared(Text),
    Copied(String),
}

impl Piece {
    fn as_str(&self) -> &str {
        match self {
            Piece::Shared(t) => t,
            Piece::Copied(s) => s,
        }
    }
}

/// A text kept as its fragments: long ones shared with the events that carried them, short
/// ones copied together into chunks of at most 64 KiB.
#[derive(Debug, Clone, Default)]
pub(super) struct Pieces {
    pieces: Vec<Piece>,
    len: usize,
}

impl Pieces {
    /// A text kept whole (shared).
    pub(super) fn whole(text: Text) -> Self {
        let len = text.len();
        Pieces {
            pieces: vec![Piece::Shared(text)],
            len,
        }
    }

    /// Appends a fragment.
    pub(super) fn push(&mut self, fragment: &Text) {
        if fragment.is_empty() {
            return;
        }
        self.len += fragment.len();
        if fragment.len() >= SHARED_FROM {
            self.pieces.push(Piece::Shared(fragment.clone()));
            return;
        }
        match self.pieces.last_mut() {
            Some(Piece::Copied(s)) if s.len() + fragment.len() <= CHUNK => s.push_str(fragment),
            _ => self.pieces.push(Piece::Copied(fragment.to_string())),
        }
    }

    /// The text's length in bytes.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// The text's fragments in order.
    pub(super) fn iter(&self) -> impl Iterator<Item = &str> {
        self.pieces.iter().map(Piece::as_str)
    }

    /// The text in one string (a copy).
    pub(super) fn joined(&self) -> String {
        let mut out = String::with_capacity(self.len);
        self.iter().for_each(|p| out.push_str(p));
        out
    }
}

/// The marks of one answer: strings standing for its long texts in the events' JSON.
#[derive(Debug)]
pub(super) struct Marks {
    /// The answer's secret, hex digits.
    secret: String,
    /// How a mark starts once serde_json wrote it: `"\u0000SECRET`.
    written: Vec<u8>,
}

impl Default for Marks {
    fn default() -> Self {
        Self::new()
    }
}

impl Marks {
    /// Marks with a secret of their own (64 bits from the process's random hash keys).
    pub(super) fn new() -> Self {
        let hasher = std::collections::hash_map::RandomState::new().build_hasher();
        let secret = format!("{:016x}", hasher.finish());
        let written = format!("\"\\u0000{secret}").into_bytes();
        Marks { secret, written }
    }

    /// The mark of text `k`.
    pub(super) fn mark(&self, k: usize) -> Value {
        Value::String(format!("\0{}{k}\0", self.secret))
    }

    /// `json` (written by serde_json) cut at its marks: the bytes between them, and the
    /// number of the text at each (one below `texts`; anything else is left as bytes).
    pub(super) fn split(&self, json: Vec<u8>, texts: usize) -> Vec<Seg> {
        let finder = memchr::memmem::Finder::new(&self.written);
        let mut segs = Vec::new();
        let mut from = 0;
        let mut search = 0;
        while let Some(at) = finder.find(&json[search..]).map(|i| i + search) {
            let digits = at + self.written.len();
            let end = digits
                + json[digits..]
                    .iter()
                    .take_while(|b| b.is_ascii_digit())
                    .count();
            let close = b"\\u0000\"";
            let k = std::str::from_utf8(&json[digits..end])
                .ok()
                .and_then(|d| d.parse::<usize>().ok())
                .filter(|k| *k < texts && json[end..].starts_with(close));
            match k {
                Some(k) => {
                    if at > from {
                        segs.push(Seg::Json(json[from..at].to_vec()));
                    }
                    segs.push(Seg::Text(k));
                    from = end + close.len();
                    search = from;
                }
                None => search = at + 1,
            }
        }
        match from {
            0 => segs.push(Seg::Json(json)),
            _ if from < json.len() => segs.push(Seg::Json(json[from..].to_vec())),
            _ => {}
        }
        segs
    }
}

/// A piece of an event to write: its JSON bytes, or a long text (by number) as a JSON
/// string.
#[derive(Debug)]
pub(super) enum Seg {
    Json(Vec<u8>),
    Text(usize),
}

/// Segments owed to the answer, written in order a bounded piece at a time.
#[derive(Debug, Default)]
pub(super) struct Owed {
    segs: VecDeque<Seg>,
    /// Where the first segment's text is: its piece and the byte in it; `None` before its
    /// opening quote.
    at: Option<(usize, usize)>,
}

impl Owed {
    /// Whether nothing is owed.
    pub(super) fn is_empty(&self) -> bool {
        self.segs.is_empty()
    }

    /// Owes `segs` after what is owed already.
    pub(super) fn extend(&mut self, segs: impl IntoIterator<Item = Seg>) {
        self.segs.extend(segs);
    }

    /// Writes what is owed into `out` until it holds `limit` bytes or more (a text is cut
    /// at a character), or until nothing is owed. Whether it wrote anything.
    pub(super) fn write(&mut self, texts: &[Pieces], out: &mut Vec<u8>, limit: usize) -> bool {
        let start = out.len();
        while out.len() < limit {
            let Some(seg) = self.segs.front() else { break };
            match seg {
                Seg::Json(bytes) => {
                    out.extend_from_slice(bytes);
                    self.segs.pop_front();
                }
                Seg::Text(k) => {
                    let pieces = &texts[*k].pieces;
                    let (mut piece, mut byte) = match self.at {
                        Some(at) => at,
                        None => {
                            out.push(b'"');
                            (0, 0)
                        }
                    };
                    while piece < pieces.len() && out.len() < limit {
                        let text = pieces[piece].as_str();
                        let mut to = text.len().min(byte + (limit - out.len()).max(64));
                        while !text.is_char_boundary(to) {
                            to += 1;
                        }
                        escape_into(out, &text[byte..to]);
                        byte = to;
                        if byte == text.len() {
                            (piece, byte) = (piece + 1, 0);
                        }
                    }
                    if piece < pieces.len() {
                        self.at = Some((piece, byte));
                    } else {
                        out.push(b'"');
                        self.at = None;
                        self.segs.pop_front();
                    }
                }
            }
        }
        out.len() > start
    }
}

/// Appends `text` escaped as the contents of a JSON string, as serde_json escapes it.
pub(super) fn escape_into(out: &mut Vec<u8>, text: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let bytes = text.as_bytes();
    let mut from = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let short: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0x08 => b"\\b",
            0x0c => b"\\f",
            0..=0x1f => b"",
            _ => continue,
        };
        out.extend_from_slice(&bytes[from..i]);
        match short.is_empty() {
            true => out.extend_from_slice(&[
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX[usize::from(b >> 4)],
                HEX[usize::from(b & 0xf)],
            ]),
            false => out.extend_from_slice(short),
        }
        from = i + 1;
    }
    out.extend_from_slice(&bytes[from..]);
}

/// The length of `text` written as a JSON string, quotes included.
pub(super) fn escaped_len(text: &str) -> usize {
    2 + text
        .bytes()
        .map(|b| match b {
            b'"' | b'\\' | b'\n' | b'\r' | b'\t' | 0x08 | 0x0c => 2,
            0..=0x1f => 6,
            _ => 1,
        })
        .sum::<usize>()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn texts_are_escaped_as_serde_json_escapes_them() {
        let all: String = (0u32..0x80)
            .chain([0xe9, 0x2028, 0x1f600])
            .filter_map(char::from_u32)
            .collect();
        for text in [all.as_str(), "", "plain", "a\"b\\c\nd\u{1}"] {
            let mut out = vec![b'"'];
            escape_into(&mut out, text);
            out.push(b'"');
            assert_eq!(out, serde_json::to_vec(text).unwrap(), "{text:?}");
            assert_eq!(escaped_len(text), out.len());
        }
    }

    #[test]
    fn an_event_with_marks_is_written_piece_by_piece_as_serde_json_writes_it() {
        let marks = Marks::new();
        let long = "é\"x\n".repeat(5000);
        let mut pieces = Pieces::default();
        for fragment in [&long[..5], &long[5..3005], &long[3005..]] {
            pieces.push(&Text::from(fragment));
        }
        assert_eq!(pieces.joined(), long);
        assert_eq!(pieces.len(), long.len());
        let texts = vec![Pieces::whole(Text::from("short")), pieces];
        let event = serde_json::json!({"a": marks.mark(1), "b": [marks.mark(0), "\u{0}x"],
            "c": marks.mark(7)});
        let segs = marks.split(serde_json::to_vec(&event).unwrap(), texts.len());
        assert_eq!(segs.iter().filter(|s| matches!(s, Seg::Text(_))).count(), 2);
        let mut owed = Owed::default();
        owed.extend(segs);
        let mut written = Vec::new();
        let mut writes = 0;
        loop {
            let mut out = Vec::new();
            if !owed.write(&texts, &mut out, 1000) {
                break;
            }
            // Past the limit by at most one escaped run of text.
            assert!(out.len() <= 6 * 1000 + 2, "a piece of {}", out.len());
            written.extend(out);
            writes += 1;
        }
        assert!(owed.is_empty() && writes > 10, "{writes} writes");
        let expected = serde_json::json!({"a": long, "b": ["short", "\u{0}x"],
            "c": marks.mark(7)});
        assert_eq!(written, serde_json::to_vec(&expected).unwrap());
    }

    #[test]
    fn a_mark_of_another_answer_is_text() {
        let (ours, theirs) = (Marks::new(), Marks::new());
        let json = serde_json::to_vec(&serde_json::json!([theirs.mark(0)])).unwrap();
        let segs = ours.split(json.clone(), 1);
        assert!(matches!(&segs[..], [Seg::Json(j)] if *j == json));
    }
}
