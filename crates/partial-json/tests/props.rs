//! Property tests: any JSON document, serialized compact, pretty or ASCII-only,
//! split anywhere, parses to what `serde_json::from_str` gives, with every
//! intermediate snapshot consistent with the final value; arbitrary input
//! never panics and is accepted exactly when serde_json accepts it.

mod common;

use choicewise_partial_json::{PartialJson, TextField};
use common::{ensure_ascii, feed_checked, split_at};
use proptest::prelude::*;
use serde_json::{Map, Number, Value};

fn arb_char() -> impl Strategy<Value = char> {
    prop_oneof![
        4 => proptest::char::range(' ', '~'),
        1 => prop::sample::select(vec!['"', '\\', '/', '\n', '\t', '\r', '\u{0}', '\u{1f}', '\u{7f}']),
        1 => prop::sample::select(vec!['é', 'ß', '中', '\u{2028}', '\u{feff}', '😀', '🚀', '\u{10FFFF}']),
        1 => any::<char>(),
    ]
}

fn arb_string() -> impl Strategy<Value = String> {
    prop::collection::vec(arb_char(), 0..12).prop_map(|chars| chars.into_iter().collect())
}

fn arb_number() -> impl Strategy<Value = Value> {
    prop_oneof![
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        (-1000i64..1000).prop_map(Value::from),
        any::<f64>().prop_filter_map("finite", |f| Number::from_f64(f).map(Value::Number)),
        (-1_000_000i64..1_000_000, 0u32..6).prop_map(|(m, e)| {
            Value::Number(Number::from_f64(m as f64 / 10f64.powi(e as i32)).unwrap())
        }),
    ]
}

fn arb_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        arb_number(),
        arb_string().prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((arb_string(), inner), 0..6)
                .prop_map(|members| Value::Object(members.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// The value serialized in one of several styles.
fn arb_document() -> impl Strategy<Value = String> {
    (arb_value(), 0..4u8).prop_map(|(v, style)| match style {
        0 => serde_json::to_string(&v).unwrap(),
        1 => serde_json::to_string_pretty(&v).unwrap(),
        2 => ensure_ascii(&serde_json::to_string(&v).unwrap()),
        _ => format!(
            " \n{}\t ",
            ensure_ascii(&serde_json::to_string_pretty(&v).unwrap())
        ),
    })
}

fn arb_cuts() -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(any::<prop::sample::Index>(), 0..24)
        .prop_map(|idx| idx.into_iter().map(|i| i.index(usize::MAX)).collect())
}

/// Cut positions scaled to `len`.
fn scale(cuts: &[usize], len: usize) -> Vec<usize> {
    cuts.iter().map(|c| c % (len + 1)).collect()
}

/// Mostly invalid JSON-ish text.
fn arb_junk() -> impl Strategy<Value = String> {
    let token = prop_oneof![
        3 => prop::sample::select(vec![
            "{", "}", "[", "]", ",", ":", " ", "\"", "\\", "0", "1", "-", ".", "e", "+",
            "true", "false", "null", "\"a\"", "\\u", "D83D", "00", "\n", "x", "é",
        ])
        .prop_map(String::from),
        1 => "[a-z0-9]{1,3}",
    ];
    prop::collection::vec(token, 0..24).prop_map(|parts| parts.concat())
}

proptest! {
    // 512 cases unless PROPTEST_CASES says otherwise.
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(512),
        ..ProptestConfig::default()
    })]

    #[test]
    fn any_document_any_split(doc in arb_document(), cuts in arb_cuts()) {
        let expected: Value = serde_json::from_str(&doc).unwrap();
        let fragments = split_at(&doc, &scale(&cuts, doc.len()));
        prop_assert_eq!(feed_checked(&fragments, Some(&expected)), Ok(expected.clone()));
    }

    #[test]
    fn small_fragments(doc in arb_document(), size in 1usize..6) {
        let expected: Value = serde_json::from_str(&doc).unwrap();
        let cuts: Vec<usize> = (0..doc.len()).step_by(size).collect();
        let fragments = split_at(&doc, &cuts);
        prop_assert_eq!(feed_checked(&fragments, Some(&expected)), Ok(expected.clone()));
    }

    #[test]
    fn field_text_deltas_add_up(
        answer in arb_string(),
        before in arb_value(),
        after in arb_value(),
        ascii in any::<bool>(),
        cuts in arb_cuts(),
    ) {
        let mut doc = Map::new();
        doc.insert("before".into(), before);
        doc.insert("answer".into(), Value::String(answer.clone()));
        doc.insert("items".into(), serde_json::json!([{"text": answer.clone()}]));
        doc.insert("zafter".into(), after);
        let mut text = serde_json::to_string(&Value::Object(doc)).unwrap();
        if ascii {
            text = ensure_ascii(&text);
        }
        let fragments = split_at(&text, &scale(&cuts, text.len()));
        let mut parser = PartialJson::new();
        let mut fields = [TextField::new("/answer"), TextField::new("/items/0/text")];
        let mut streamed = [String::new(), String::new()];
        let mut closed = [false, false];
        for fragment in &fragments {
            parser.push(fragment).unwrap();
            for ((field, out), closed) in fields.iter_mut().zip(&mut streamed).zip(&mut closed) {
                if let Some(delta) = field.poll(&parser) {
                    prop_assert!(!*closed || delta.text.is_empty());
                    out.push_str(delta.text);
                    // Streamed text is always a prefix of the final text.
                    prop_assert!(answer.starts_with(out.as_str()));
                    if delta.is_final {
                        prop_assert_eq!(out.as_str(), answer.as_str());
                        *closed = true;
                    }
                }
            }
        }
        prop_assert!(closed[0] && closed[1]);
        prop_assert_eq!(&streamed[0], &answer);
        prop_assert_eq!(&streamed[1], &answer);
    }

    /// Arbitrary, mostly invalid input: never panics, and is accepted
    /// exactly when serde_json accepts it, with the same value, however it
    /// is split; the error is the same however it is split.
    #[test]
    fn arbitrary_input_agrees_with_serde_json(
        text in arb_junk(),
        cuts in arb_cuts(),
    ) {
        let fragments = split_at(&text, &scale(&cuts, text.len()));
        let whole = {
            let mut p = PartialJson::new();
            p.push(&text).and_then(|()| p.finish())
        };
        let split = {
            let mut p = PartialJson::new();
            fragments.iter().try_for_each(|f| p.push(f)).and_then(|()| p.finish())
        };
        prop_assert_eq!(&whole, &split);
        match serde_json::from_str::<Value>(&text) {
            Ok(v) => prop_assert_eq!(whole, Ok(v)),
            Err(_) => prop_assert!(whole.is_err(), "accepted {:?}", text),
        }
    }

    /// A prefix of a valid document never errors, and its snapshot is
    /// consistent with the complete value.
    #[test]
    fn prefixes_never_error(doc in arb_document(), cut in any::<prop::sample::Index>()) {
        let expected: Value = serde_json::from_str(&doc).unwrap();
        let mut end = cut.index(doc.len() + 1);
        while !doc.is_char_boundary(end) {
            end -= 1;
        }
        let mut p = PartialJson::new();
        prop_assert!(p.push(&doc[..end]).is_ok());
        if let Some(snapshot) = p.snapshot() {
            prop_assert!(common::is_prefix_consistent(snapshot, &expected));
        }
    }
}
