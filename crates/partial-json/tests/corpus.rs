//! Hand-written corpus: escapes, numbers, literals, nesting, errors, repair,
//! snapshots and field streaming.

mod common;

use choicewise_partial_json::{
    DEFAULT_MAX_DEPTH, Expected, PartialJson, PartialJsonError, TextDelta, TextField,
    repair_control_characters,
};
use common::{all_splits, feed_checked, parse_whole, split_at};
use serde_json::{Value, json};

/// Every 1-, 2- and 3-way split (and per-character) of `text` parses to
/// `serde_json::from_str(text)`, with consistent snapshots throughout.
fn check_all_splits(text: &str) {
    let expected: Value = serde_json::from_str(text).unwrap();
    for fragments in all_splits(text) {
        let got = feed_checked(&fragments, Some(&expected));
        assert_eq!(got.as_ref(), Ok(&expected), "fragments {fragments:?}");
    }
}

/// `text` is rejected by serde_json and by us, whole and split anywhere.
fn check_invalid(text: &str) -> PartialJsonError {
    assert!(
        serde_json::from_str::<Value>(text).is_err(),
        "serde_json accepts {text:?}"
    );
    let whole = parse_whole(text).unwrap_err();
    for fragments in all_splits(text) {
        let err = feed_checked(&fragments, None).unwrap_err();
        assert_eq!(err, whole, "fragments {fragments:?}");
    }
    whole
}

/// The values after each prefix of `text` pushed one character at a time.
fn values_per_char(text: &str) -> Vec<Option<Value>> {
    let mut p = PartialJson::new();
    text.char_indices()
        .map(|(i, c)| {
            p.push(&text[i..i + c.len_utf8()]).unwrap();
            p.value().cloned()
        })
        .collect()
}

// ----- strings and escapes ---------------------------------------------------

#[test]
fn escapes_split_at_every_position() {
    check_all_splits(r#"{"a":"x\n\"\\\/\b\f\r\ty","b":"\u00e9\u4e2d\uD83D\uDE00z"}"#);
    check_all_splits(r#"["\u0000\u001f\u007f\u2028", "\"", "\\", "", " "]"#);
    check_all_splits("\"caf\u{e9} \u{1F600} \u{4e2d}\u{6587}\"");
}

#[test]
fn partial_escapes_are_not_shown() {
    let text = r#"["a\u00e9\uD83D\uDE00\n"]"#;
    let values = values_per_char(text);
    let shown: Vec<Option<String>> = values
        .iter()
        .map(|v| v.as_ref().and_then(|v| v[0].as_str().map(str::to_owned)))
        .collect();
    // After each character of the escapes the decoded text only grows by
    // whole characters, once the escape is complete.
    let mut expected = vec![None, Some("")];
    expected.extend(std::iter::repeat_n(Some("a"), 6)); // a \u00e
    expected.extend(std::iter::repeat_n(Some("a\u{e9}"), 12)); // 9 \uD83D\uDE0
    expected.extend(std::iter::repeat_n(Some("a\u{e9}\u{1F600}"), 2)); // 0 \
    expected.extend(std::iter::repeat_n(Some("a\u{e9}\u{1F600}\n"), 3)); // n " ]
    let expected: Vec<Option<String>> =
        expected.into_iter().map(|s| s.map(str::to_owned)).collect();
    assert_eq!(shown, expected);
}

#[test]
fn surrogate_pairs_split() {
    for text in [
        r#""\uD83D\uDE00""#,
        r#""\ud83d\ude00x""#,
        r#"{"k\uDBFF\uDFFF":"\uD800\uDC00"}"#,
    ] {
        check_all_splits(text);
    }
}

#[test]
fn lone_surrogates_are_errors() {
    assert_eq!(
        check_invalid(r#""\uD83D""#),
        PartialJsonError::LoneSurrogate { offset: 7 }
    );
    assert_eq!(
        check_invalid(r#""\uDE00""#),
        PartialJsonError::LoneSurrogate { offset: 6 }
    );
    assert_eq!(
        check_invalid(r#""\uD83Dx""#),
        PartialJsonError::LoneSurrogate { offset: 7 }
    );
    assert_eq!(
        check_invalid(r#""\uD83D\n""#),
        PartialJsonError::LoneSurrogate { offset: 8 }
    );
    assert_eq!(
        check_invalid(r#""\uD83D\u0041""#),
        PartialJsonError::LoneSurrogate { offset: 12 }
    );
}

#[test]
fn invalid_escapes() {
    assert!(matches!(
        check_invalid(r#""\x""#),
        PartialJsonError::UnexpectedCharacter {
            offset: 2,
            found: 'x',
            expected: Expected::EscapeCharacter
        }
    ));
    assert!(matches!(
        check_invalid(r#""\u12G4""#),
        PartialJsonError::UnexpectedCharacter {
            offset: 5,
            found: 'G',
            expected: Expected::HexDigit
        }
    ));
    assert!(matches!(
        check_invalid(r#""\uD83D\uDEx0""#),
        PartialJsonError::UnexpectedCharacter {
            offset: 11,
            found: 'x',
            expected: Expected::HexDigit
        }
    ));
}

#[test]
fn control_characters_in_strings() {
    for (text, offset, byte) in [
        ("\"a\nb\"", 2, b'\n'),
        ("{\"k\": \"x\ty\"}", 8, b'\t'),
        ("{\"k\u{0}\": 1}", 3, 0u8),
        ("[\"\u{1f}\"]", 2, 0x1f),
    ] {
        assert_eq!(
            check_invalid(text),
            PartialJsonError::ControlCharacterInString { offset, byte },
            "{text:?}"
        );
    }
    // DEL and C1 controls are allowed.
    check_all_splits("\"\u{7f}\u{85}\"");
    // Control characters are fine as whitespace outside strings.
    check_all_splits("{\n\t\"a\":\r\n1}");
}

// ----- numbers -----------------------------------------------------------------

#[test]
fn numbers() {
    for text in [
        "0",
        "-0",
        "1",
        "-1",
        "0.0",
        "-0.0",
        "-0.5e-10",
        "1E+2",
        "1e2",
        "1e-2",
        "2.5E-3",
        "123",
        "18446744073709551615",
        "18446744073709551616",
        "-9223372036854775808",
        "-9223372036854775809",
        "123456789012345678901234567890",
        "0.1",
        "0.30000000000000004",
        "1.7976931348623157e308",
        "5e-324",
        "2.2250738585072014e-308",
        "1e-400",
        "142857.14285714287",
    ] {
        check_all_splits(text);
        check_all_splits(&format!("[{text}]"));
        check_all_splits(&format!("{{\"n\": {text} , \"m\":[{text},{text}]}}"));
    }
}

#[test]
fn numbers_are_shown_only_when_complete() {
    let values = values_per_char("[123,-4.5e6 ]");
    let expected = [
        json!([]),
        json!([]),
        json!([]),
        json!([]),
        json!([123]),
        json!([123]),
        json!([123]),
        json!([123]),
        json!([123]),
        json!([123]),
        json!([123]),
        json!([123, -4.5e6]),
        json!([123, -4.5e6]),
    ];
    assert_eq!(values, expected.map(Some));
    // A top-level number is only complete at whitespace or finish().
    let mut p = PartialJson::new();
    p.push("12").unwrap();
    assert_eq!(p.value(), None);
    p.push("3").unwrap();
    assert_eq!(p.value(), None);
    assert_eq!(p.finish(), Ok(json!(123)));
    let mut p = PartialJson::new();
    p.push("123 ").unwrap();
    assert_eq!(p.value(), Some(&json!(123)));
    assert!(p.is_complete());
}

#[test]
fn invalid_numbers() {
    let unexpected = |offset, found, expected| PartialJsonError::UnexpectedCharacter {
        offset,
        found,
        expected,
    };
    assert_eq!(check_invalid("[-]"), unexpected(2, ']', Expected::Digit));
    assert_eq!(check_invalid("[1.]"), unexpected(3, ']', Expected::Digit));
    assert_eq!(check_invalid("[1e]"), unexpected(3, ']', Expected::Digit));
    assert_eq!(check_invalid("[1e+]"), unexpected(4, ']', Expected::Digit));
    assert_eq!(
        check_invalid("[.5]"),
        unexpected(1, '.', Expected::ValueOrArrayEnd)
    );
    assert_eq!(
        check_invalid("[+1]"),
        unexpected(1, '+', Expected::ValueOrArrayEnd)
    );
    assert_eq!(
        check_invalid("[01]"),
        unexpected(2, '1', Expected::CommaOrArrayEnd)
    );
    assert_eq!(
        check_invalid("01"),
        PartialJsonError::TrailingCharacters {
            offset: 1,
            found: '1'
        }
    );
    assert_eq!(
        check_invalid("[1x]"),
        unexpected(2, 'x', Expected::CommaOrArrayEnd)
    );
    assert_eq!(
        check_invalid("-"),
        PartialJsonError::UnexpectedEnd {
            offset: 1,
            expected: Expected::Digit
        }
    );
    assert_eq!(
        check_invalid("1."),
        PartialJsonError::UnexpectedEnd {
            offset: 2,
            expected: Expected::Digit
        }
    );
    assert_eq!(
        check_invalid("[1e400]"),
        PartialJsonError::NumberOutOfRange { offset: 1 }
    );
    assert_eq!(
        check_invalid("-1e400"),
        PartialJsonError::NumberOutOfRange { offset: 0 }
    );
    assert_eq!(check_invalid("NaN"), unexpected(0, 'N', Expected::Value));
    assert_eq!(
        check_invalid("[Infinity]"),
        unexpected(1, 'I', Expected::ValueOrArrayEnd)
    );
}

// ----- literals, containers, whitespace -----------------------------------------

#[test]
fn literals_split() {
    check_all_splits("[true,false,null]");
    check_all_splits("true");
    check_all_splits(" null ");
    let mut p = PartialJson::new();
    p.push("[tr").unwrap();
    assert_eq!(p.value(), Some(&json!([])));
    p.push("ue").unwrap();
    assert_eq!(p.value(), Some(&json!([true])));
    let mut p = PartialJson::new();
    p.push("fals").unwrap();
    assert_eq!(p.value(), None);
    assert_eq!(
        p.finish(),
        Err(PartialJsonError::UnexpectedEnd {
            offset: 4,
            expected: Expected::Literal("false")
        })
    );
    assert_eq!(
        check_invalid("[trux]"),
        PartialJsonError::UnexpectedCharacter {
            offset: 4,
            found: 'x',
            expected: Expected::Literal("true")
        }
    );
    assert!(matches!(
        check_invalid("True"),
        PartialJsonError::UnexpectedCharacter { offset: 0, .. }
    ));
    assert!(matches!(
        check_invalid("nul"),
        PartialJsonError::UnexpectedEnd { offset: 3, .. }
    ));
}

#[test]
fn empty_containers() {
    for text in [
        "{}",
        "[]",
        " { } ",
        "[ ]",
        r#"{"a":{},"b":[]}"#,
        "[[],{},[[]]]",
    ] {
        check_all_splits(text);
    }
    let mut p = PartialJson::new();
    p.push(r#"{"a": [{"#).unwrap();
    assert_eq!(p.value(), Some(&json!({"a": [{}]})));
}

#[test]
fn whitespace_only_input_has_no_value() {
    for text in ["", " ", " \n\t\r "] {
        let mut p = PartialJson::new();
        p.push(text).unwrap();
        assert_eq!(p.value(), None);
        assert_eq!(
            p.finish(),
            Err(PartialJsonError::NoValue {
                offset: text.len() as u64
            })
        );
    }
    assert_eq!(
        PartialJsonError::NoValue { offset: 0 }.to_string(),
        "no value: the input (0 bytes) is empty or whitespace only"
    );
}

#[test]
fn whitespace_everywhere() {
    check_all_splits(" \n{ \"a\" : [ 1 , \"x\" , { } , true ] , \"b\"\t:\r\nnull } \n");
}

#[test]
fn top_level_scalars() {
    for text in [r#""abc""#, "42", "-1.5", "true", "false", "null", r#""""#] {
        check_all_splits(text);
    }
    let mut p = PartialJson::new();
    p.push(r#""ab"#).unwrap();
    assert_eq!(p.value(), Some(&json!("ab")));
    assert!(!p.snapshot().unwrap().is_final());
    p.push(r#"c""#).unwrap();
    assert!(p.snapshot().unwrap().is_final());
}

#[test]
fn trailing_garbage() {
    assert_eq!(
        check_invalid("{} x"),
        PartialJsonError::TrailingCharacters {
            offset: 3,
            found: 'x'
        }
    );
    assert_eq!(
        check_invalid("{}}"),
        PartialJsonError::TrailingCharacters {
            offset: 2,
            found: '}'
        }
    );
    assert_eq!(
        check_invalid("1 2"),
        PartialJsonError::TrailingCharacters {
            offset: 2,
            found: '2'
        }
    );
    assert_eq!(
        check_invalid(r#""a" "b""#),
        PartialJsonError::TrailingCharacters {
            offset: 4,
            found: '"'
        }
    );
    assert_eq!(
        check_invalid("[]é"),
        PartialJsonError::TrailingCharacters {
            offset: 2,
            found: 'é'
        }
    );
    // The error comes at push time, not only at finish.
    let mut p = PartialJson::new();
    p.push("{}").unwrap();
    assert!(p.push(" ,").is_err());
    // Trailing whitespace is fine.
    check_all_splits("{} \n\t\r ");
}

#[test]
fn keys_without_values_are_left_out() {
    let text = r#"{"ab": "x", "cd": 1}"#;
    let values = values_per_char(text);
    let expected: Vec<Value> = [
        json!({}), // {
        json!({}), // "
        json!({}), // a
        json!({}), // b
        json!({}), // "
        json!({}), // :
        json!({}), // space
        json!({"ab": ""}),
        json!({"ab": "x"}),
        json!({"ab": "x"}),
        json!({"ab": "x"}),
        json!({"ab": "x"}),
        json!({"ab": "x"}),
        json!({"ab": "x"}),
        json!({"ab": "x"}),
        json!({"ab": "x"}),
        json!({"ab": "x"}),
        json!({"ab": "x"}),
        json!({"ab": "x"}),
        json!({"ab": "x", "cd": 1}),
    ]
    .into();
    assert_eq!(values, expected.into_iter().map(Some).collect::<Vec<_>>());
}

#[test]
fn invalid_structure() {
    let unexpected = |offset, found, expected| PartialJsonError::UnexpectedCharacter {
        offset,
        found,
        expected,
    };
    assert_eq!(
        check_invalid("{'a':1}"),
        unexpected(1, '\'', Expected::KeyOrObjectEnd)
    );
    assert_eq!(check_invalid("[1,]"), unexpected(3, ']', Expected::Value));
    assert_eq!(
        check_invalid(r#"{"a":1,}"#),
        unexpected(7, '}', Expected::Key)
    );
    assert_eq!(
        check_invalid("[,1]"),
        unexpected(1, ',', Expected::ValueOrArrayEnd)
    );
    assert_eq!(
        check_invalid(r#"{"a" 1}"#),
        unexpected(5, '1', Expected::Colon)
    );
    assert_eq!(
        check_invalid("{1:2}"),
        unexpected(1, '1', Expected::KeyOrObjectEnd)
    );
    assert_eq!(
        check_invalid("[1 2]"),
        unexpected(3, '2', Expected::CommaOrArrayEnd)
    );
    assert_eq!(
        check_invalid(r#"{"a":1]"#),
        unexpected(6, ']', Expected::CommaOrObjectEnd)
    );
    assert_eq!(
        check_invalid("[1}"),
        unexpected(2, '}', Expected::CommaOrArrayEnd)
    );
    assert_eq!(
        check_invalid(r#"{"a":}"#),
        unexpected(5, '}', Expected::Value)
    );
    assert_eq!(check_invalid("]"), unexpected(0, ']', Expected::Value));
    assert_eq!(check_invalid(":"), unexpected(0, ':', Expected::Value));
    assert_eq!(
        check_invalid("\u{feff}{}"),
        unexpected(0, '\u{feff}', Expected::Value)
    );
    assert_eq!(
        check_invalid("[\u{a0}1]"),
        unexpected(1, '\u{a0}', Expected::ValueOrArrayEnd)
    );
    for (text, expected) in [
        ("{", Expected::KeyOrObjectEnd),
        ("[", Expected::ValueOrArrayEnd),
        (r#"{"a""#, Expected::Colon),
        (r#"{"a":"#, Expected::Value),
        (r#"{"a":1,"#, Expected::Key),
        (r#"{"a"#, Expected::ClosingQuote),
        (r#"["a\"#, Expected::EscapeCharacter),
        (r#"["\u12"#, Expected::HexDigit),
        ("[1", Expected::CommaOrArrayEnd),
        (r#"{"a":1"#, Expected::CommaOrObjectEnd),
        (r#"{"a":[]"#, Expected::CommaOrObjectEnd),
    ] {
        assert_eq!(
            check_invalid(text),
            PartialJsonError::UnexpectedEnd {
                offset: text.len() as u64,
                expected
            },
            "{text:?}"
        );
    }
}

#[test]
fn errors_are_sticky() {
    let mut p = PartialJson::new();
    p.push(r#"{"a": [1, "x"#).unwrap();
    let err = p.push("\u{1}yz").unwrap_err();
    assert_eq!(
        err,
        PartialJsonError::ControlCharacterInString {
            offset: 12,
            byte: 1
        }
    );
    assert_eq!(p.bytes_consumed(), 12);
    // Plain string text after the error must not sneak through a fast path.
    assert_eq!(p.push("abc"), Err(err.clone()));
    assert_eq!(p.push("\"]}"), Err(err.clone()));
    assert_eq!(p.finish(), Err(err.clone()));
    assert_eq!(p.error(), Some(&err));
    assert_eq!(p.value(), Some(&json!({"a": [1, "x"]})));

    // An incomplete finish is sticky too.
    let mut p = PartialJson::new();
    p.push(r#"["abc"#).unwrap();
    let err = p.finish().unwrap_err();
    assert_eq!(
        err,
        PartialJsonError::UnexpectedEnd {
            offset: 5,
            expected: Expected::ClosingQuote
        }
    );
    assert_eq!(p.push("def"), Err(err.clone()));
    assert_eq!(p.value(), Some(&json!(["abc"])));
}

#[test]
fn finish_moves_the_value_out() {
    let mut p = PartialJson::new();
    p.push(r#"{"a": 1}"#).unwrap();
    assert_eq!(p.finish(), Ok(json!({"a": 1})));
    assert_eq!(p.value(), None);
    assert_eq!(p.finish(), Err(PartialJsonError::AlreadyFinished));
    assert_eq!(p.push(" "), Err(PartialJsonError::AlreadyFinished));
    assert_eq!(PartialJsonError::AlreadyFinished.offset(), None);
}

#[test]
fn error_messages() {
    let err = parse_whole(r#"{"a" 1}"#).unwrap_err();
    assert_eq!(err.to_string(), "unexpected '1' at byte 5: expected ':'");
    let err = parse_whole("\"a\nb\"").unwrap_err();
    assert_eq!(
        err.to_string(),
        "raw control character 0x0a inside a string at byte 2 (it must be escaped)"
    );
    let err = parse_whole("[1,").unwrap_err();
    assert_eq!(
        err.to_string(),
        "unexpected end of input at byte 3: expected a JSON value"
    );
}

#[test]
fn duplicate_keys_last_wins() {
    // As in serde_json. (Snapshots are not prefix-consistent here: the
    // earlier value is final until replaced.)
    for text in [
        r#"{"a": 1, "b": 2, "a": 3}"#,
        r#"{"a": "x", "a": "yz"}"#,
        r#"{"a": [1], "a": {"b": 2}}"#,
    ] {
        let expected: Value = serde_json::from_str(text).unwrap();
        for fragments in all_splits(text) {
            assert_eq!(
                common::feed_checked_with(&fragments, None, false),
                Ok(expected.clone())
            );
        }
    }
}

#[test]
fn bytes_consumed_counts_utf8_bytes() {
    let mut p = PartialJson::new();
    p.push("[\"é").unwrap();
    p.push("😀\"]").unwrap();
    assert_eq!(p.bytes_consumed(), "[\"é😀\"]".len() as u64);
}

// ----- nesting ---------------------------------------------------------------------

#[test]
fn nesting_within_max_depth() {
    let depth = DEFAULT_MAX_DEPTH;
    let text = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
    let mut p = PartialJson::new();
    for chunk in text.as_bytes().chunks(7) {
        p.push(std::str::from_utf8(chunk).unwrap()).unwrap();
    }
    let value = p.finish().unwrap();
    let mut v = &value;
    let mut levels = 1;
    while let Some(inner) = v.as_array().and_then(|a| a.first()) {
        v = inner;
        levels += 1;
    }
    assert_eq!(levels, depth);

    let text = format!("{}1{}", r#"{"a":"#.repeat(depth), "}".repeat(depth));
    let mut p = PartialJson::new();
    p.push(&text).unwrap();
    assert!(p.finish().is_ok());
}

#[test]
fn nesting_beyond_max_depth_is_an_error_without_stack_overflow() {
    let text = "[".repeat(100_000);
    let mut p = PartialJson::new();
    assert_eq!(
        p.push(&text),
        Err(PartialJsonError::DepthLimitExceeded {
            offset: 512,
            max_depth: 512
        })
    );
    let text = r#"{"a":"#.repeat(100_000);
    let mut p = PartialJson::new();
    for chunk in text.as_bytes().chunks(3) {
        if p.push(std::str::from_utf8(chunk).unwrap()).is_err() {
            break;
        }
    }
    assert_eq!(
        p.error(),
        Some(&PartialJsonError::DepthLimitExceeded {
            offset: 512 * 5,
            max_depth: 512
        })
    );
    let mut p = PartialJson::with_max_depth(3);
    assert!(p.push("[[[]]]").is_ok());
    let mut p = PartialJson::with_max_depth(0);
    assert_eq!(
        p.push("[]"),
        Err(PartialJsonError::DepthLimitExceeded {
            offset: 0,
            max_depth: 0
        })
    );
    let mut p = PartialJson::with_max_depth(0);
    p.push("\"scalars are fine\"").unwrap();
}

#[test]
fn very_deep_nesting_with_a_raised_limit_is_dropped_without_recursion() {
    // Parsing, snapshots and dropping the parser never recurse over the
    // depth (serde_json's own Drop/Clone/PartialEq of the Value would).
    // (Each container costs time proportional to the depth, so this stays
    // moderate for debug builds.)
    let depth = 4_000;
    let mut p = PartialJson::with_max_depth(usize::MAX);
    let text = format!("{}\"deep", r#"{"k":["#.repeat(depth));
    for chunk in text.as_bytes().chunks(4096) {
        p.push(std::str::from_utf8(chunk).unwrap()).unwrap();
    }
    let pointer = "/k/0".repeat(depth);
    let leaf = p.snapshot().unwrap().pointer(&pointer).unwrap();
    assert_eq!(leaf.value(), &json!("deep"));
    assert!(!leaf.is_final());
    drop(p);
}

// ----- snapshots, changes, field text ------------------------------------------------

#[test]
fn snapshot_finality() {
    let mut p = PartialJson::new();
    p.push(r#"{"done": [1, {"x": "y"}], "open": [true, {"s": "ab"#)
        .unwrap();
    let root = p.snapshot().unwrap();
    assert!(root.is_provisional());
    assert!(root.get("done").unwrap().is_final());
    assert!(root.pointer("/done/1/x").unwrap().is_final());
    let open = root.get("open").unwrap();
    assert!(!open.is_final());
    assert!(open.index(0).unwrap().is_final());
    assert!(!open.index(1).unwrap().is_final());
    assert!(!root.pointer("/open/1/s").unwrap().is_final());
    assert!(root.pointer("/open/2").is_none());
    assert!(root.pointer("/missing").is_none());
    assert!(root.pointer("open").is_none());
    assert_eq!(root.pointer("").unwrap().value(), root.value());
    let entries: Vec<(&str, bool)> = root.entries().map(|(k, v)| (k, v.is_final())).collect();
    assert_eq!(entries, [("done", true), ("open", false)]);
    assert_eq!(root.elements().count(), 0);
    p.push(r#""}]}"#).unwrap();
    let root = p.snapshot().unwrap();
    assert!(root.is_final());
    assert!(root.pointer("/open/1/s").unwrap().is_final());
    assert!(format!("{root:?}").contains("final: true"));
}

#[test]
fn snapshot_of_pending_number_key() {
    // While a key or a number is pending the container's other children
    // are final.
    let mut p = PartialJson::new();
    p.push(r#"{"a": "x", "b": 12"#).unwrap();
    let root = p.snapshot().unwrap();
    assert_eq!(root.value(), &json!({"a": "x"}));
    assert!(root.get("a").unwrap().is_final());
    p.push(r#", "c"#).unwrap();
    assert!(p.snapshot().unwrap().get("b").unwrap().is_final());
}

#[test]
fn pointer_escapes() {
    let mut p = PartialJson::new();
    p.push(r#"{"a/b": {"m~n": ["x", "y"#).unwrap();
    let root = p.snapshot().unwrap();
    assert_eq!(root.pointer("/a~1b/m~0n/1").unwrap().value(), &json!("y"));
    assert!(root.pointer("/a~1b/m~0n/01").is_none());
    assert!(root.pointer("/a~1b/m~0n/+1").is_none());
}

#[test]
fn changed_and_revision() {
    let mut p = PartialJson::new();
    let mut changes = Vec::new();
    for fragment in [
        "{",
        "\"a",
        "\":",
        " \"",
        "x",
        "\\",
        "n",
        "\"",
        ", \"n\": 4",
        "2",
        "}",
        " ",
    ] {
        p.push(fragment).unwrap();
        changes.push(p.changed());
    }
    assert_eq!(
        changes,
        [
            true, false, false, true, true, false, true, false, false, false, true, false
        ]
    );
    assert_eq!(p.revision(), 5);
}

#[test]
fn text_field_streams_decoded_text() {
    let text =
        r#"{"id": 7, "answer": "Hi \"you\"\n\u00e9\uD83D\uDE00 end", "items": [{"text": "a\tb"}]}"#;
    let expected: Value = serde_json::from_str(text).unwrap();
    for fragments in all_splits(text).into_iter().step_by(7) {
        let mut p = PartialJson::new();
        let mut answer = TextField::new("/answer");
        let mut item = TextField::new("/items/0/text");
        let (mut a, mut b) = (String::new(), String::new());
        let mut closed_at = None;
        for (n, fragment) in fragments.iter().enumerate() {
            p.push(fragment).unwrap();
            if let Some(delta) = answer.poll(&p) {
                assert!(closed_at.is_none() || delta.text.is_empty());
                a.push_str(delta.text);
                if delta.is_final && closed_at.is_none() {
                    closed_at = Some(n);
                    assert_eq!(a, expected["answer"].as_str().unwrap());
                }
            }
            if let Some(delta) = item.poll(&p) {
                b.push_str(delta.text);
            }
        }
        assert_eq!(a, expected["answer"].as_str().unwrap());
        assert_eq!(b, expected["items"][0]["text"].as_str().unwrap());
        assert!(answer.is_closed() && item.is_closed());
    }
}

#[test]
fn text_field_on_non_strings_and_missing_fields() {
    let mut p = PartialJson::new();
    let mut f = TextField::new("/n");
    p.push(r#"{"n": 1, "s": "#).unwrap();
    assert_eq!(f.poll(&p), None);
    let mut f = TextField::new("/s");
    assert_eq!(f.poll(&p), None);
    p.push("\"").unwrap();
    assert_eq!(
        f.poll(&p),
        Some(TextDelta {
            text: "",
            is_final: false
        })
    );
    assert_eq!(f.emitted_len(), 0);
}

// ----- repair ----------------------------------------------------------------------------

#[test]
fn repair_control_characters_cases() {
    let fixed = repair_control_characters("{\"a\": \"x\ny\tz\r\u{1}\"}").unwrap();
    assert_eq!(fixed, r#"{"a": "x\ny\tz\r\u0001"}"#);
    assert_eq!(
        serde_json::from_str::<Value>(&fixed).unwrap(),
        json!({"a": "x\ny\tz\r\u{1}"})
    );
    // Escaped quotes and backslashes are tracked.
    let fixed = repair_control_characters("[\"a\\\"\n\\\\\", \"b\n\"]").unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(&fixed).unwrap(),
        json!(["a\"\n\\", "b\n"])
    );
    // Keys too.
    assert_eq!(
        repair_control_characters("{\"k\u{1f}\": 1}").as_deref(),
        Some(r#"{"k\u001f": 1}"#)
    );
    // Nothing to repair / valid JSON.
    assert_eq!(repair_control_characters(r#"{"a": "b"}"#), None);
    assert_eq!(repair_control_characters("{\n\t\"a\": 1\r\n}"), None);
    // Broken in another way as well.
    assert_eq!(repair_control_characters("{\"a\": \"x\ny\""), None);
    assert_eq!(repair_control_characters("{\"a\": \"x\ny\"}}"), None);
    // A control character right after a backslash is not a repairable case.
    assert_eq!(repair_control_characters("[\"a\\\n\"]"), None);
    assert_eq!(repair_control_characters(""), None);
    // The repaired text parses incrementally too.
    let broken = "{\"poem\": \"roses\nare red\"}";
    let err = parse_whole(broken).unwrap_err();
    assert!(matches!(
        err,
        PartialJsonError::ControlCharacterInString {
            offset: 15,
            byte: b'\n'
        }
    ));
    let fixed = repair_control_characters(broken).unwrap();
    assert_eq!(parse_whole(&fixed), Ok(json!({"poem": "roses\nare red"})));
}

#[test]
fn split_helper_sanity() {
    assert_eq!(split_at("aé", &[2]), ["a", "é"]);
    assert_eq!(split_at("ab", &[0, 2]), ["", "ab", ""]);
}
