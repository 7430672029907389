//! Elements that repeat the one before them but for their text: most of a choice's.
//!
//! A choice's updates are mostly `{"index":0,"delta":{"content":"…"},"finish_reason":null}`,
//! the same bytes around another text. The scan found that text's place in the element
//! (its `delta` an object of one member, a string: [`crate::scan::choice_text`]); an element
//! of the same bytes around another string, whose first unescaped quote is where the kept
//! element's text ended, has the same tokens but that string's. Its parse is the kept
//! element's but for that one text, so it is not parsed again: the text is read (and
//! checked, as the parse would check it) and put in a copy of the kept update.
//!
//! The text's field is read from the kept update (the delta has one member: the one of
//! `content`, `refusal` and the reasoning that is set is that member's); a member the update
//! drops when empty (`role`) or does not read is not kept. An element whose text does not
//! read as a string (a raw control character, a bad escape) is parsed, so its error is the
//! parse's own.

use crate::logprobs::LogprobsKept;
use crate::merge::{ChoiceUpdate, text};
use crate::scan::{Misses, choice_text, string_end};

/// The most bytes of an element kept around its text.
const MAX_KEPT: usize = 1024;

/// Which text of an update the element's text is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    Content,
    Refusal,
    Reasoning,
}

/// A choice's last element kept ([`Kept`]), allocated with the first one: an idle choice
/// costs a pointer.
#[derive(Debug, Default)]
pub(crate) struct Repeats(Option<Box<Kept>>);

/// An element kept: its bytes around its text, and its update.
#[derive(Debug, Default)]
struct Kept {
    /// Up to the text's contents, its opening quote included.
    before: String,
    /// From the text's closing quote to the element's end.
    after: String,
    /// The kept element's update, its text left out.
    update: ChoiceUpdate,
    /// Where the text goes; `None` while no element is kept.
    field: Option<Field>,
    kept: LogprobsKept,
    /// Elements kept or passed over since one last repeated.
    misses: Misses,
}

impl Repeats {
    /// `element`'s update into `update` (whose line and offset are set), if `element` repeats
    /// the kept one but for its text, and that text reads as a string.
    pub(crate) fn fill(
        &mut self,
        element: &str,
        kept: LogprobsKept,
        update: &mut ChoiceUpdate,
    ) -> bool {
        let Some(k) = self.0.as_deref_mut() else {
            return false;
        };
        let Some(field) = k.field else {
            return false;
        };
        let (before, after) = (k.before.as_bytes(), k.after.as_bytes());
        let b = element.as_bytes();
        if kept != k.kept
            || b.len() < before.len() + after.len()
            || !b.starts_with(before)
            || !b.ends_with(after)
        {
            return false;
        }
        // The text's closing quote: the first unescaped one after its opening quote.
        let close = b.len() - after.len();
        if string_end(b, before.len() - 1) != Some(close + 1) {
            return false;
        }
        let Some(value) = string_value(&element[before.len() - 1..=close]) else {
            return false;
        };
        let (line, offset) = (update.line, update.offset);
        update.clone_from(&k.update);
        (update.line, update.offset) = (line, offset);
        *match field {
            Field::Content => &mut update.content,
            Field::Refusal => &mut update.refusal,
            Field::Reasoning => &mut update.reasoning,
        } = Some(value);
        k.misses.hit();
        true
    }

    /// Keeps `element`, just parsed into `update`, if its `delta` is one text that the
    /// update holds (see [`Misses`]).
    pub(crate) fn keep(&mut self, element: &str, kept: LogprobsKept, update: &ChoiceUpdate) {
        if let Some(k) = self.0.as_deref_mut() {
            if !k.misses.keeps() {
                return;
            }
            k.field = None;
        }
        let field = match (&update.content, &update.refusal, &update.reasoning) {
            (Some(_), None, None) => Field::Content,
            (None, Some(_), None) => Field::Refusal,
            (None, None, Some(_)) => Field::Reasoning,
            _ => return,
        };
        let Some(contents) = choice_text(element.as_bytes()) else {
            return;
        };
        if element.len() - contents.len() > MAX_KEPT {
            return;
        }
        let k = self.0.get_or_insert_with(|| {
            // This element is the first kept: counted as the others are.
            let mut first = Box::<Kept>::default();
            first.misses.keeps();
            first
        });
        k.before.clear();
        k.before.push_str(&element[..contents.start]);
        k.after.clear();
        k.after.push_str(&element[contents.end..]);
        k.update.clone_from(update);
        k.update.content = None;
        k.update.refusal = None;
        k.update.reasoning = None;
        k.field = Some(field);
        k.kept = kept;
    }
}

/// A JSON string's value (`quoted`, its quotes included), as the parse reads it; `None`
/// where the parse would refuse it.
fn string_value(quoted: &str) -> Option<crate::event::Text> {
    let contents = &quoted[1..quoted.len() - 1];
    if !contents.bytes().any(|c| c < 0x20 || c == b'\\') {
        return Some(text(contents));
    }
    serde_json::from_str::<String>(quoted)
        .ok()
        .map(|s| text(&s))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Measure;
    use crate::decode::decode_batch;
    use crate::decode::tests::batch;
    use proptest::prelude::*;

    /// Each element decoded alone, with `repeats` (kept from element to element) or with
    /// none: its updates, or its error's words.
    fn decoded(
        element: &str,
        kept: LogprobsKept,
        repeats: &mut Repeats,
    ) -> Result<ChoiceUpdate, String> {
        let mut out = Vec::new();
        match decode_batch(2, kept, &mut batch(&[element]), repeats, &mut out) {
            Ok(()) => Ok(out.pop().expect("one update")),
            Err(e) => Err(e.error.to_string()),
        }
    }

    #[test]
    fn a_repeated_element_is_filled_from_the_one_kept() {
        let mut repeats = Repeats::default();
        let raw = LogprobsKept::Raw;
        let first = r#"{"index":0,"delta":{"content":"Hello"},"finish_reason":null}"#;
        let kept = decoded(first, raw, &mut repeats).unwrap();
        assert_eq!(kept.content.as_deref(), Some("Hello"));
        let mut update = ChoiceUpdate {
            line: 7,
            offset: 9,
            ..ChoiceUpdate::default()
        };
        let next = r#"{"index":0,"delta":{"content":" w\"o\\rld\n"},"finish_reason":null}"#;
        assert!(repeats.fill(next, raw, &mut update));
        assert_eq!(update.content.as_deref(), Some(" w\"o\\rld\n"));
        assert_eq!((update.line, update.offset), (7, 9));
        // Not the same bytes around the text; a quote that ends the text early; a raw control
        // character; another way of keeping log-probabilities: parsed.
        for other in [
            r#"{"index":1,"delta":{"content":"x"},"finish_reason":null}"#,
            r#"{"index":0,"delta":{"content":"x"},"finish_reason":"x"},"finish_reason":null}"#,
            "{\"index\":0,\"delta\":{\"content\":\"a\u{1}\"},\"finish_reason\":null}",
            r#"{"index":0,"delta":{"content":"\q"},"finish_reason":null}"#,
        ] {
            assert!(!repeats.fill(other, raw, &mut update), "{other}");
        }
        assert!(!repeats.fill(next, LogprobsKept::Nothing, &mut update));
        // A role is dropped when empty: never kept.
        let mut roles = Repeats::default();
        decoded(r#"{"delta":{"role":"assistant"}}"#, raw, &mut roles).unwrap();
        assert!(!roles.fill(r#"{"delta":{"role":""}}"#, raw, &mut update));
    }

    #[test]
    fn elements_that_never_repeat_are_kept_one_in_eight() {
        let mut repeats = Repeats::default();
        let raw = LogprobsKept::Raw;
        let element = |i: usize| format!(r#"{{"delta":{{"content":"t"}},"n":{i}}}"#);
        let mut keeps = 0;
        for i in 0..40 {
            decoded(&element(i), raw, &mut repeats).unwrap();
            if (repeats.0.as_ref()).is_some_and(|k| k.after.contains(&format!(":{i}}}"))) {
                keeps += 1;
            }
        }
        // The first eight, then the 16th, 24th, 32nd and 40th.
        assert_eq!(keeps, 12);
        let mut update = ChoiceUpdate::default();
        assert!(repeats.fill(&element(39), raw, &mut update));
    }

    /// Texts of quotes (escaped or not), backslashes, escapes (valid, bad, a lone
    /// surrogate), control characters and non-ASCII.
    fn texts() -> impl Strategy<Value = String> {
        let piece = prop_oneof![
            Just("a"),
            Just("é"),
            Just(" "),
            Just(r"\n"),
            Just(r#"\""#),
            Just(r"\\"),
            Just(r"\u00e9"),
            Just(r"\ud800"),
            Just(r"\ud83d\ude00"),
            Just(r"\q"),
            Just("\u{1}"),
            Just(r#"\"content\":\""#),
            // Unescaped: the text ends early, the element is another.
            Just(r#"x"},"finish_reason":"stop"#),
        ];
        prop::collection::vec(piece, 0..5).prop_map(|p| p.concat())
    }

    /// An element of shape `shape` around `text`, its delta's member `key`.
    fn element(key: &str, shape: usize, text: &str) -> String {
        match shape {
            0 => format!(r#"{{"index":0,"delta":{{"{key}":"{text}"}},"finish_reason":null}}"#),
            1 => format!(r#"{{"delta":{{"{key}":"{text}"}},"index":0,"finish_reason":"stop"}}"#),
            2 => format!(
                r#"{{"index":0,"delta":{{"{key}":"{text}"}},"logprobs":{{"content":[{{"token":"a","logprob":-0.5}}]}}}}"#
            ),
            3 => format!(r#"{{"x":{{"content":"{text}"}},"delta":{{"{key}":"a"}}}}"#),
            4 => format!(r#"{{"delta":{{"{key}":"{text}","content":"b"}}}}"#),
            _ => format!(r#"{{"delta":{{"{key}":"{text}"}},"{key}":"{text}"}}"#),
        }
    }

    /// Up to three frames (a member's key, a shape, a way of keeping log-probabilities), so
    /// that elements repeat one another's bytes around their texts.
    fn frames() -> impl Strategy<Value = Vec<(&'static str, usize, usize)>> {
        let key = prop_oneof![
            Just("content"),
            Just("refusal"),
            Just("reasoning_content"),
            Just("reasoning"),
            Just("role"),
            Just("other"),
        ];
        prop::collection::vec((key, 0..6usize, 0..3usize), 1..4)
    }

    proptest! {
        #[test]
        fn a_repeat_never_changes_a_result(
            (frames, picks) in frames().prop_flat_map(|f| {
                let n = f.len();
                (Just(f), prop::collection::vec((0..n, texts()), 1..24))
            }),
        ) {
            let mut warm = Repeats::default();
            for (frame, text) in &picks {
                let (key, shape, kept) = frames[*frame];
                let kept = [
                    LogprobsKept::Raw,
                    LogprobsKept::Confidence(Measure::TopK),
                    LogprobsKept::Nothing,
                ][kept];
                let element = element(key, shape, text);
                let cold = decoded(&element, kept, &mut Repeats::default());
                prop_assert_eq!(decoded(&element, kept, &mut warm), cold, "{}", element);
            }
        }
    }
}
