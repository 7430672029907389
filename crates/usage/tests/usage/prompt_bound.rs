//! `count_prompt_fields_at_most` is never below `count_prompt_fields`, for either encoding,
//! whatever the messages hold: the hostile texts of `hostile_text.rs`, escapes, image parts
//! as small as JSON can write them, tool calls, names, definitions and `tool_choice`.

use choicewise_usage::{
    EncodingName, count_prompt_fields, count_prompt_fields_at_most, count_text,
};
use proptest::prelude::*;

const ENCODINGS: [EncodingName; 2] = [EncodingName::O200kBase, EncodingName::Cl100kBase];

/// The units the hostile texts are made of, and a few of ordinary text.
const UNITS: &[&str] = &[
    "a\u{301}",
    "\u{5d0}\u{5b8}",
    "\u{915}\u{94d}",
    "a",
    "%",
    "7",
    "a%",
    "a7",
    " ",
    "\n",
    "\t",
    "\u{3000}",
    "\u{4e2d}",
    "\u{e01}",
    "\u{1f44d}\u{1f3fd}",
    "'s",
    "Hello, world. ",
    "<|endoftext|>",
    "\"",
    "\\",
    "\u{1}",
];

/// A text of hostile units, each repeated.
fn text() -> impl Strategy<Value = String> {
    prop::collection::vec((prop::sample::select(UNITS), 1..40usize), 0..8)
        .prop_map(|runs| runs.into_iter().map(|(u, n)| u.repeat(n)).collect())
}

/// `s` as a JSON string literal: as serde_json writes it, or with every character that is
/// not printable ASCII written as `\u` escapes (as Python's `json.dumps` does).
fn literal(s: &str, ascii: bool) -> String {
    if !ascii {
        return serde_json::to_string(s).unwrap();
    }
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            ' '..='~' => out.push(c),
            _ => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
        }
    }
    out.push('"');
    out
}

/// A content part, in as few bytes as JSON allows.
fn part() -> impl Strategy<Value = String> {
    prop_oneof![
        (text(), any::<bool>())
            .prop_map(|(t, a)| format!(r#"{{"type":"text","text":{}}}"#, literal(&t, a))),
        (text(), any::<bool>())
            .prop_map(|(t, a)| format!(r#"{{"type":"refusal","refusal":{}}}"#, literal(&t, a))),
        Just(r#"{"type":"image_url"}"#.to_string()),
        Just(r#"{"type":"image\u005furl"}"#.to_string()),
        Just(r#"{"type":"\u0069mage_url","image_url":{"url":"x"}}"#.to_string()),
        Just(r#"{"type":"input_audio"}"#.to_string()),
    ]
}

/// A tool call, in as few bytes as JSON allows.
fn call() -> impl Strategy<Value = String> {
    prop_oneof![
        (text(), text()).prop_map(|(n, a)| format!(
            r#"{{"function":{{"name":{},"arguments":{}}}}}"#,
            literal(&n, false),
            literal(&a, false)
        )),
        text().prop_map(|n| format!(r#"{{"function":{{"name":{}}}}}"#, literal(&n, false))),
        (text(), text()).prop_map(|(n, i)| format!(
            r#"{{"type":"custom","custom":{{"name":{},"input":{}}}}}"#,
            literal(&n, false),
            literal(&i, true)
        )),
    ]
}

/// A message of any shape the count reads, in as few bytes as JSON allows.
fn message() -> impl Strategy<Value = String> {
    let role = prop_oneof![
        Just("system".to_string()),
        Just("developer".to_string()),
        Just("user".to_string()),
        Just("assistant".to_string()),
        Just("tool".to_string()),
        Just("function".to_string()),
        text(),
    ];
    let content = prop_oneof![
        Just(None),
        Just(Some("null".to_string())),
        (text(), any::<bool>()).prop_map(|(t, a)| Some(literal(&t, a))),
        prop::collection::vec(part(), 0..6).prop_map(|p| Some(format!("[{}]", p.join(",")))),
    ];
    (
        role,
        content,
        prop::option::of(text()),
        prop::option::of(text()),
        prop::option::of((text(), text())),
        prop::collection::vec(call(), 0..4),
    )
        .prop_map(|(role, content, name, refusal, function_call, calls)| {
            let mut m = format!(r#"{{"role":{}"#, literal(&role, false));
            if let Some(c) = content {
                m.push_str(&format!(r#","content":{c}"#));
            }
            if let Some(n) = name {
                m.push_str(&format!(r#","name":{}"#, literal(&n, false)));
            }
            if let Some(r) = refusal {
                m.push_str(&format!(r#","refusal":{}"#, literal(&r, false)));
            }
            if let Some((n, a)) = function_call {
                m.push_str(&format!(
                    r#","function_call":{{"name":{},"arguments":{}}}"#,
                    literal(&n, false),
                    literal(&a, false)
                ));
            }
            if !calls.is_empty() {
                m.push_str(&format!(r#","tool_calls":[{}]"#, calls.join(",")));
            }
            m.push('}');
            m
        })
}

/// Definitions, sometimes: functions of properties, enums and nesting.
fn tools() -> impl Strategy<Value = Option<String>> {
    prop::option::of((text(), text(), text()).prop_map(|(name, desc, value)| {
        serde_json::json!([{"type": "function", "function": {
            "name": name, "description": desc,
            "parameters": {"type": "object", "properties": {
                "p": {"type": "string", "enum": [value, "b"], "description": desc},
                "q": {"type": "object", "properties": {"r": {"type": "number", "enum": [1e15, 2]}}},
            }, "required": ["p"]}}},
            {"type": "web_search", "n": 1e15}])
        .to_string()
    }))
}

fn tool_choice() -> impl Strategy<Value = Option<String>> {
    prop::option::of(prop_oneof![
        Just(r#""none""#.to_string()),
        Just(r#""auto""#.to_string()),
        text().prop_map(|n| format!(r#"{{"name":{}}}"#, literal(&n, false))),
        text().prop_map(|n| format!(
            r#"{{"type":"function","function":{{"name":{}}}}}"#,
            literal(&n, true)
        )),
    ])
}

/// The bound, and the count (0 where it fails, as the gateway takes it).
fn both(fields: &[(&str, &[u8])]) -> Vec<(EncodingName, u64, u64)> {
    (ENCODINGS.iter())
        .map(|&enc| {
            let exact = count_prompt_fields(enc, fields.iter().copied()).map_or(0, |c| c.total);
            let bound = count_prompt_fields_at_most(enc, fields.iter().copied());
            (enc, exact, bound)
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn the_bound_is_never_below_the_count(
        messages in prop::collection::vec(message(), 0..6),
        tools in tools(),
        choice in tool_choice(),
    ) {
        let messages = format!("[{}]", messages.join(","));
        let mut fields: Vec<(&str, &[u8])> = vec![("messages", messages.as_bytes())];
        if let Some(t) = &tools {
            fields.push(("tools", t.as_bytes()));
        }
        if let Some(c) = &choice {
            fields.push(("tool_choice", c.as_bytes()));
        }
        for (enc, exact, bound) in both(&fields) {
            prop_assert!(exact <= bound, "{enc:?}: counted {exact}, bound {bound}: {messages}");
        }
    }

    #[test]
    fn a_texts_tokens_are_never_more_than_its_bytes(t in text()) {
        for enc in ENCODINGS {
            prop_assert!(count_text(enc, &t) <= t.len() as u64);
        }
    }
}

/// The shapes that count the most tokens for their bytes: image parts as small as JSON
/// writes them (plain and escaped), tool calls and names of nothing, floods of every hostile
/// unit past the lengths where the count estimates.
#[test]
fn the_densest_shapes_are_bounded() {
    let images = |part: &str| {
        format!(
            r#"[{{"role":"user","content":[{}]}}]"#,
            vec![part; 1000].join(",")
        )
    };
    let calls = format!(
        r#"[{{"role":"assistant","name":"","tool_calls":[{}]}}]"#,
        vec![r#"{"function":{"name":""}}"#; 1000].join(",")
    );
    let empty = format!("[{}]", vec![r#"{"role":""}"#; 1000].join(","));
    let mut shapes = vec![
        images(r#"{"type":"image_url"}"#),
        images(r#"{"type":"image\u005furl"}"#),
        calls,
        empty,
    ];
    for unit in [
        "a\u{301}",
        " ",
        "\n",
        "7",
        "%",
        "\u{4e2d}",
        "a",
        "\u{1f44d}\u{1f3fd}",
    ] {
        // Past the 4,096-character whitespace runs, the 64 KiB pieces and the 256 KiB texts.
        let flood = unit.repeat((300 << 10) / unit.len());
        shapes.push(format!(
            r#"[{{"role":"system","content":{}}}]"#,
            serde_json::to_string(&flood).unwrap()
        ));
    }
    for messages in &shapes {
        for (enc, exact, bound) in both(&[("messages", messages.as_bytes())]) {
            assert!(exact > 0, "{enc:?}: {}", &messages[..60]);
            assert!(exact <= bound, "{enc:?}: counted {exact}, bound {bound}");
        }
    }
    // A thousand images of 20 bytes: 85 tokens each, bounded by that and not much more.
    let plain = images(r#"{"type":"image_url"}"#);
    let (_, exact, bound) = both(&[("messages", plain.as_bytes())])[0];
    assert_eq!(exact, 1000 * 85 + 3 + 1 + 3);
    assert!(bound < exact + plain.len() as u64, "{bound}");
}

/// A request without definitions is bounded without counting: the bound is its bytes, and
/// a request with them counts them as the count does.
#[test]
fn definitions_are_counted_and_the_rest_is_bounded_from_its_bytes() {
    let messages = br#"[{"role":"user","content":"What is the weather in Paris?"}]"#;
    let tools = br#"[{"type":"function","function":{"name":"weather","description":"The weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}]"#;
    for enc in ENCODINGS {
        let bare = count_prompt_fields_at_most(enc, [("messages", &messages[..])]);
        assert_eq!(bare, messages.len() as u64 + 3);
        let with = [("messages", &messages[..]), ("tools", &tools[..])];
        let definitions = count_prompt_fields(enc, with).unwrap().tools;
        assert!(definitions > 10);
        assert_eq!(count_prompt_fields_at_most(enc, with), bare + definitions);
        // Empty definitions count nothing.
        let empty = [("messages", &messages[..]), ("tools", &b"[]"[..])];
        assert_eq!(count_prompt_fields_at_most(enc, empty), bare);
    }
}
