//! What a relay of a Chat Completions stream needs to know of each chunk, found by the
//! reader's structural scan rather than a parse: where its top-level `id`, `model`,
//! `created`, `usage` and `error` are, and where each element of `choices` starts and ends,
//! with its `index` and whether it finishes. A relay passes the chunk's bytes on, rewriting
//! only what it must (its own id and model), and parses no more than what it accounts.

use std::ops::Range;

use crate::scan::{Head, scan};

/// Where one chunk's facts are: byte ranges of its data (see [`chunk_facts`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChunkFacts {
    /// The value of `id` (its quotes included), if the chunk has one.
    pub id: Option<Range<usize>>,
    /// The value of `model`.
    pub model: Option<Range<usize>>,
    /// The value of `created`.
    pub created: Option<Range<usize>>,
    /// The value of `usage`.
    pub usage: Option<Range<usize>>,
    /// The value of `error`.
    pub error: Option<Range<usize>>,
    /// Each element of `choices`, in order.
    pub choices: Vec<ChoiceFacts>,
}

/// One element of a chunk's `choices`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChoiceFacts {
    /// The element, its braces included.
    pub range: Range<usize>,
    /// Its `index` (absent or `null`: `None`).
    pub index: Option<i64>,
    /// Its `finish_reason` is a non-empty string.
    pub finishes: bool,
}

/// Scans one chunk's data (an event's `data`, a JSON object) for its facts; `None` when the
/// scan cannot vouch for it (a key with escapes, a duplicate key, a field of an unexpected
/// type, invalid JSON outside the choices, nesting past 128 levels): such a chunk is for a
/// parser to read. The choices' contents are walked, not checked.
///
/// ```
/// use choicewise_proto::chunks::chunk_facts;
/// let data = r#"{"id":"c1","model":"m","choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":"stop"}]}"#;
/// let facts = chunk_facts(data).unwrap();
/// assert_eq!(&data[facts.model.clone().unwrap()], "\"m\"");
/// assert_eq!(facts.choices.len(), 1);
/// assert!(facts.choices[0].finishes);
/// assert!(chunk_facts("{\"a\":").is_none());
/// ```
pub fn chunk_facts(data: &str) -> Option<ChunkFacts> {
    // A head of its own: every chunk's fields are found, none left out as repeated.
    let scanned = scan(data, Vec::new(), &mut Head::default())?;
    Some(ChunkFacts {
        id: scanned.id,
        model: scanned.model,
        created: scanned.created,
        usage: scanned.usage,
        error: scanned.error,
        choices: (scanned.choices.into_iter())
            .map(|c| ChoiceFacts {
                range: c.range,
                index: c.index,
                finishes: c.finishes,
            })
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_chunk_names_its_fields_and_its_choices() {
        let data = r#"{"id":"c1","object":"chat.completion.chunk","created":7,"model":"m","choices":[{"index":0,"delta":{"content":"a"}},{"index":1,"delta":{},"finish_reason":"length"}],"usage":{"prompt_tokens":3}}"#;
        for _ in 0..2 {
            // The same chunk twice: nothing is left out as a repeated head.
            let facts = chunk_facts(data).unwrap();
            assert_eq!(&data[facts.id.clone().unwrap()], "\"c1\"");
            assert_eq!(&data[facts.created.clone().unwrap()], "7");
            assert_eq!(
                &data[facts.usage.clone().unwrap()],
                r#"{"prompt_tokens":3}"#
            );
            let indexes: Vec<_> = facts.choices.iter().map(|c| c.index).collect();
            assert_eq!(indexes, [Some(0), Some(1)]);
            assert_eq!(
                &data[facts.choices[0].range.clone()],
                r#"{"index":0,"delta":{"content":"a"}}"#
            );
            assert!(!facts.choices[0].finishes && facts.choices[1].finishes);
        }
        let error = chunk_facts(r#"{"error":{"message":"boom"}}"#).unwrap();
        assert!(error.error.is_some() && error.choices.is_empty());
        assert_eq!(
            chunk_facts(r#"{"id":1,"choices":[]}"#),
            None,
            "an id must be a string"
        );
    }
}
