//! What a relay of a Chat Completions stream needs to know of each chunk, found by the
//! reader's structural scan rather than a parse: where its top-level `id`, `model`,
//! `created`, `usage` and `error` are, and where each element of `choices` starts and ends,
//! with its `index` and whether it finishes. A relay passes the chunk's bytes on, rewriting
//! only what it must (its own id and model), and parses no more than what it accounts.

use std::ops::Range;

use crate::scan::{Head, Scanned, choice_text, scan_into};

pub use crate::scan::ScannedChoice as ChoiceFacts;

/// Where one chunk's facts are: byte ranges of its data (see [`ChunkScanner`]).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ChunkFacts {
    scanned: Scanned,
}

impl ChunkFacts {
    /// The value of `id` (its quotes included), if the chunk has one.
    pub fn id(&self) -> Option<Range<usize>> {
        self.scanned.id.clone()
    }

    /// The value of `model`.
    pub fn model(&self) -> Option<Range<usize>> {
        self.scanned.model.clone()
    }

    /// The value of `created`.
    pub fn created(&self) -> Option<Range<usize>> {
        self.scanned.created.clone()
    }

    /// The value of `usage`.
    pub fn usage(&self) -> Option<Range<usize>> {
        self.scanned.usage.clone()
    }

    /// The value of `error`.
    pub fn error(&self) -> Option<Range<usize>> {
        self.scanned.error.clone()
    }

    /// Each element of `choices`, in order.
    pub fn choices(&self) -> &[ChoiceFacts] {
        &self.scanned.choices
    }

    /// Of a chunk of one choice whose `delta` is an object of one member, a string (as most
    /// of a stream's are): that member's key and the string's contents as they came in
    /// `data` (the chunk scanned), as [`element_text`] reads them, found by the scan.
    ///
    /// ```
    /// use choicewise_proto::chunks::ChunkScanner;
    /// let mut scanner = ChunkScanner::new();
    /// let data = r#"{"id":"c1","choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}]}"#;
    /// let facts = scanner.scan(data).unwrap();
    /// assert_eq!(facts.sole_text(data), Some(("content", "Hi")));
    /// ```
    pub fn sole_text<'a>(&self, data: &'a str) -> Option<(&'a str, &'a str)> {
        let contents = self.scanned.text.clone()?;
        Some((member_key(data, contents.start)?, data.get(contents)?))
    }
}

/// Scans the chunks of one stream for their facts ([`ChunkFacts`]). The chunks of a stream
/// repeat their head (`id`, `object`, `created`, `model`), so a chunk that starts with the
/// last one's head bytes is scanned from its choices, its head's fields where they were in
/// the chunk that had them; the facts' vector of choices is reused from chunk to chunk.
///
/// ```
/// use choicewise_proto::chunks::ChunkScanner;
/// let mut scanner = ChunkScanner::new();
/// let data = r#"{"id":"c1","model":"m","choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":"stop"}]}"#;
/// let facts = scanner.scan(data).unwrap();
/// assert_eq!(&data[facts.model().unwrap()], "\"m\"");
/// assert!(facts.choices()[0].finishes);
/// assert!(scanner.scan("{\"a\":").is_none());
/// ```
#[derive(Debug, Default)]
pub struct ChunkScanner {
    head: Head,
    /// The head's `id`, `model` and `created`, where the chunk that set it had them.
    in_head: [Option<Range<usize>>; 3],
    facts: ChunkFacts,
}

impl ChunkScanner {
    /// A scanner that has seen no chunk.
    pub fn new() -> Self {
        ChunkScanner::default()
    }

    /// Scans one chunk's data (an event's `data`, a JSON object) for its facts; `None` when
    /// the scan cannot vouch for it (a key with escapes, a duplicate key, a field of an
    /// unexpected type, invalid JSON outside the choices, nesting past 128 levels): such a
    /// chunk is for a parser to read. The choices' contents are walked, not checked.
    pub fn scan(&mut self, data: &str) -> Option<&ChunkFacts> {
        let Some(repeated) = scan_into(data, &mut self.facts.scanned, &mut self.head) else {
            // The scan may have remembered this chunk's head before it gave up: forgotten,
            // with the places of its fields, which were not read; and what it found is no
            // chunk's facts.
            self.head = Head::default();
            self.facts.scanned.clear();
            return None;
        };
        let s = &mut self.facts.scanned;
        let fields = [&mut s.id, &mut s.model, &mut s.created];
        if repeated {
            // The same bytes up to the choices: the same fields there at the same places
            // (those after the choices were scanned).
            for (field, in_head) in fields.into_iter().zip(&self.in_head) {
                if field.is_none() {
                    field.clone_from(in_head);
                }
            }
        } else if self.head.repeats(data.as_bytes()) {
            // This chunk's head is remembered: the fields in it are the next ones'.
            let head = self.head.len();
            for (field, in_head) in fields.into_iter().zip(&mut self.in_head) {
                *in_head = field.clone().filter(|r| r.end <= head);
            }
        }
        Some(&self.facts)
    }

    /// The facts of the last chunk [`scan`](Self::scan) vouched for (none after one it did
    /// not).
    ///
    /// ```
    /// use choicewise_proto::chunks::ChunkScanner;
    /// let mut scanner = ChunkScanner::new();
    /// assert!(scanner.scan(r#"{"choices":[{"index":2}]}"#).is_some());
    /// assert_eq!(scanner.facts().choices()[0].index, Some(2));
    /// ```
    pub fn facts(&self) -> &ChunkFacts {
        &self.facts
    }
}

/// The sole text of a choice's element (braces included), as most elements of a stream
/// carry one: when its `delta` is an object of one member whose value is a string, that
/// member's key and the string's contents as they came (its quotes left out, its escapes
/// kept); `None` for any other element, or one the scan cannot vouch for. The element's
/// other members are walked, not checked: a parser says whether it is valid.
///
/// ```
/// use choicewise_proto::chunks::element_text;
/// let element = r#"{"index":0,"delta":{"content":"Say \"hi\""},"finish_reason":null}"#;
/// assert_eq!(element_text(element), Some(("content", r#"Say \"hi\""#)));
/// let two = r#"{"index":0,"delta":{"role":"assistant","content":""}}"#;
/// assert_eq!(element_text(two), None);
/// ```
pub fn element_text(element: &str) -> Option<(&str, &str)> {
    let contents = choice_text(element.as_bytes())?;
    Some((member_key(element, contents.start)?, element.get(contents)?))
}

/// The key of the member whose string's contents start at `start` in `data`, a member the
/// scan found (its key without escapes).
fn member_key(data: &str, start: usize) -> Option<&str> {
    let b = data.as_bytes();
    // Back from the string's opening quote: `"key"`, then `:`, each maybe after spaces. The
    // scan took the key only without escapes, so its opening quote is the quote before.
    let mut p = start.checked_sub(1)?;
    let back = |mut p: usize| {
        while p > 0 && b[p - 1].is_ascii_whitespace() {
            p -= 1;
        }
        p
    };
    p = back(p);
    if b.get(p.checked_sub(1)?) != Some(&b':') {
        return None;
    }
    p = back(p - 1);
    let close = p.checked_sub(1)?;
    if b.get(close) != Some(&b'"') {
        return None;
    }
    let open = memchr::memrchr(b'"', &b[..close])?;
    data.get(open + 1..close)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_chunk_names_its_fields_and_its_choices() {
        let data = r#"{"id":"c1","object":"chat.completion.chunk","created":7,"model":"m","choices":[{"index":0,"delta":{"content":"a"}},{"index":1,"delta":{},"finish_reason":"length"}],"usage":{"prompt_tokens":3}}"#;
        let other = r#"{"id":"c2","model":"n","choices":[]}"#;
        let mut scanner = ChunkScanner::new();
        for data in [data, data, other, data, data] {
            // Repeated or not, every chunk's own fields are found.
            let facts = scanner.scan(data).unwrap();
            let id = &data[facts.id().unwrap()];
            assert!(id == "\"c1\"" || id == "\"c2\"", "{id}");
            assert_eq!(data[facts.model().unwrap()].len(), 3);
            if data == other {
                assert!(facts.choices().is_empty() && facts.created().is_none());
                continue;
            }
            assert_eq!(&data[facts.created().unwrap()], "7");
            assert_eq!(&data[facts.usage().unwrap()], r#"{"prompt_tokens":3}"#);
            let indexes: Vec<_> = facts.choices().iter().map(|c| c.index).collect();
            assert_eq!(indexes, [Some(0), Some(1)]);
            assert_eq!(
                &data[facts.choices()[0].range.clone()],
                r#"{"index":0,"delta":{"content":"a"}}"#
            );
            assert!(!facts.choices()[0].finishes && facts.choices()[1].finishes);
        }
        let error = scanner.scan(r#"{"error":{"message":"boom"}}"#).unwrap();
        assert!(error.error().is_some() && error.choices().is_empty());
        let not = scanner.scan(r#"{"id":1,"choices":[]}"#);
        assert!(not.is_none(), "an id must be a string");
    }

    #[test]
    fn a_chunk_the_scan_gives_up_on_leaves_no_head_behind() {
        // Its head is read before its choices, where the scan gives up (a key with an
        // escape): the next chunk that repeats that head has its own fields' places.
        let given_up = r#"{"id":"a","model":"m","choices":[{"index":0}],"u\u0073age":{}}"#;
        let next = r#"{"id":"a","model":"m","choices":[{"index":0}],"xxxxxxxxxx":1}"#;
        let mut scanner = ChunkScanner::new();
        assert!(scanner.scan(next).is_some());
        assert!(scanner.scan(given_up).is_none());
        let facts = scanner.scan(next).unwrap();
        assert_eq!(&next[facts.model().unwrap()], "\"m\"");
        assert_eq!(&next[facts.id().unwrap()], "\"a\"");
    }

    #[test]
    fn fields_after_the_choices_are_each_chunks_own() {
        // Keys in sorted order (a `serde_json::Value` written): the head is `{"choices":`,
        // and the fields after the choices move with their length.
        let chunks = [
            r#"{"choices":[{"index":0,"delta":{"content":"a"}}],"created":1,"id":"c","model":"m"}"#,
            r#"{"choices":[{"index":0,"delta":{"content":"longer"}}],"created":1,"id":"c","model":"m"}"#,
            r#"{"choices":[],"id":"c","model":"m"}"#,
        ];
        let mut scanner = ChunkScanner::new();
        for data in chunks {
            let facts = scanner.scan(data).unwrap();
            assert_eq!(&data[facts.id().unwrap()], "\"c\"", "{data}");
            assert_eq!(&data[facts.model().unwrap()], "\"m\"", "{data}");
            let created = facts.created().map(|r| &data[r]);
            assert_eq!(created, data.contains("created").then_some("1"), "{data}");
        }
    }

    #[test]
    fn no_fact_of_a_chunk_is_the_next_ones() {
        // The facts are kept from chunk to chunk (their vector reused): each field after the
        // choices, and the sole text, found in one chunk and not in the next, is not there.
        let head = r#"{"id":"c","model":"m","choices":"#;
        let bare = format!(r#"{head}[{{"index":0,"delta":{{"content":"a"}}}}]}}"#);
        let after = [
            r#","usage":{"prompt_tokens":1}"#,
            r#","error":{"message":"x"}"#,
            r#","created":2"#,
            r#","system_fingerprint":"f""#,
        ];
        for field in after {
            let with = format!(r#"{head}[{{"index":0,"delta":{{"content":"b"}}}}]{field}}}"#);
            let mut scanner = ChunkScanner::new();
            for data in [&bare, &with, &bare, &with] {
                let facts = scanner.scan(data).unwrap();
                let named = [facts.usage(), facts.error(), facts.created()]
                    .into_iter()
                    .flatten()
                    .count();
                let expected = usize::from(data == &with && !field.contains("fingerprint"));
                assert_eq!(named, expected, "{data}");
                let text = if data == &with { "b" } else { "a" };
                assert_eq!(facts.sole_text(data), Some(("content", text)), "{data}");
            }
        }
        // A chunk the scan gives up on leaves no facts behind.
        let mut scanner = ChunkScanner::new();
        assert!(scanner.scan(&bare).is_some());
        assert!(
            scanner
                .scan(r#"{"id":"c","choices":[{"index":0}],"usage":{"#)
                .is_none()
        );
        assert_eq!(scanner.facts(), &ChunkFacts::default());
        let with_usage = format!(r#"{head}[{{"index":0}}],"usage":{{"prompt_tokens":1}}}}"#);
        assert!(scanner.scan(&with_usage).unwrap().usage().is_some());
        assert!(scanner.scan("{\"id\\u0041\":1}").is_none());
        assert_eq!(scanner.facts(), &ChunkFacts::default());
        assert!(scanner.scan(&bare).unwrap().usage().is_none());
    }

    #[test]
    fn a_head_with_usage_is_not_taken_for_the_next_chunks() {
        // A head holding `usage` is not remembered: the head before it stays, with its own
        // fields' places.
        let plain = r#"{"id":"a","model":"m","choices":[{"index":0}]}"#;
        let with_usage = r#"{"id":"bb","usage":{"x":1},"model":"mm","choices":[]}"#;
        let mut scanner = ChunkScanner::new();
        for data in [plain, with_usage, plain] {
            let facts = scanner.scan(data).unwrap();
            let model = &data[facts.model().unwrap()];
            assert!(model == "\"m\"" || model == "\"mm\"", "{data}: {model}");
            assert_eq!(model.len(), if data == plain { 3 } else { 4 });
        }
    }

    #[test]
    fn an_elements_sole_text_is_found_with_its_key() {
        let cases = [
            (
                r#"{"index":0,"delta":{"content":"Hi"},"finish_reason":null}"#,
                Some(("content", "Hi")),
            ),
            (
                r#"{ "delta" : { "refusal" : "No \u0021" } , "index":1}"#,
                Some(("refusal", "No \\u0021")),
            ),
            (
                r#"{"index":0,"delta":{"role":"assistant"}}"#,
                Some(("role", "assistant")),
            ),
            (
                r#"{"index":0,"delta":{"content":""}}"#,
                Some(("content", "")),
            ),
            (r#"{"index":0,"delta":{"content":null}}"#, None),
            (
                r#"{"index":0,"delta":{"content":"a","refusal":null}}"#,
                None,
            ),
            (r#"{"index":0,"delta":{"c\u006fntent":"a"}}"#, None),
            (r#"{"index":0,"delta":{}}"#, None),
            (r#"{"index":0}"#, None),
        ];
        for (element, want) in cases {
            assert_eq!(element_text(element), want, "{element}");
        }
    }

    #[test]
    fn a_chunks_sole_text_is_found_in_every_chunk_templated_or_not() {
        let chunk = |key: &str, text: &str| {
            format!(
                r#"{{"id":"c1","object":"chat.completion.chunk","created":7,"model":"m","choices":[{{"index":0,"delta":{{"{key}":"{text}"}},"finish_reason":null}}],"obfuscation":"ab"}}"#
            )
        };
        let mut scanner = ChunkScanner::new();
        let texts = ["Hi", "", " there", r#"\"q\""#, "longer text here", "x"];
        // Repeated chunks are filled from a template after the first few: each says its own.
        for round in 0..3 {
            for (k, text) in texts.iter().enumerate() {
                let key = if (k + round) % 4 == 0 {
                    "refusal"
                } else {
                    "content"
                };
                let data = chunk(key, text);
                let facts = scanner.scan(&data).unwrap();
                assert_eq!(facts.sole_text(&data), Some((key, *text)), "{data}");
            }
        }
        // Two members, two choices, none: no sole text.
        for data in [
            r#"{"id":"c1","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}"#,
            r#"{"id":"c1","choices":[{"index":0,"delta":{"content":"a"}},{"index":1,"delta":{"content":"b"}}]}"#,
            r#"{"id":"c1","choices":[]}"#,
        ] {
            let facts = scanner.scan(data).unwrap();
            assert_eq!(facts.sole_text(data), None, "{data}");
        }
    }
}
