//! Malformed requests give typed errors naming the path; no input panics.

use choicewise_usage::{
    EncodingName, IMAGE_PART_TOKENS, MAX_SCHEMA_DEPTH, PromptOptions, ToolFormula, UsageError,
    count_prompt, count_prompt_with,
};
use proptest::prelude::*;
use serde_json::{Value, json};

const ENC: EncodingName = EncodingName::O200kBase;

fn err(body: Value) -> UsageError {
    count_prompt(ENC, &body).unwrap_err()
}

#[test]
fn error_paths() {
    let cases: Vec<(Value, &str)> = vec![
        (json!([]), "request"),
        (json!({}), "messages"),
        (json!({"messages": {}}), "messages"),
        (json!({"messages": [1]}), "messages[0]"),
        (json!({"messages": [{"content": "x"}]}), "messages[0].role"),
        (json!({"messages": [{"role": 1}]}), "messages[0].role"),
        (
            json!({"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"},
                                {"role": "user", "content": "c"}, {"role": "user", "content": 3}]}),
            "messages[3].content",
        ),
        (
            json!({"messages": [{"role": "user", "content": [{"text": "x"}]}]}),
            "messages[0].content[0].type",
        ),
        (
            json!({"messages": [{"role": "user", "content": [{"type": "text"}]}]}),
            "messages[0].content[0].text",
        ),
        (
            json!({"messages": [{"role": "user", "content": ["x"]}]}),
            "messages[0].content[0]",
        ),
        (
            json!({"messages": [{"role": "user", "content": "x", "name": 5}]}),
            "messages[0].name",
        ),
        (
            json!({"messages": [{"role": "assistant", "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": {}}}]}]}),
            "messages[0].tool_calls[0].function.arguments",
        ),
        (
            json!({"messages": [{"role": "assistant", "tool_calls": [{"type": "function"}]}]}),
            "messages[0].tool_calls[0].function",
        ),
        (
            json!({"messages": [{"role": "assistant", "tool_calls": {}}]}),
            "messages[0].tool_calls",
        ),
        (
            json!({"messages": [{"role": "assistant", "function_call": {"arguments": "{}"}}]}),
            "messages[0].function_call.name",
        ),
        (json!({"messages": [], "tools": {}}), "tools"),
        (
            json!({"messages": [], "tools": [{"type": "function", "function": {"description": "d"}}]}),
            "tools[0].function.name",
        ),
        (
            json!({"messages": [], "tools": [{"type": "function", "function": {"name": "f", "parameters": {"properties": []}}}]}),
            "tools[0].function.parameters.properties",
        ),
        (
            json!({"messages": [], "tools": [{"type": "function", "function": {"name": "f",
                "parameters": {"type": "object", "properties": {"unit": {"type": "string", "enum": "celsius"}}}}}]}),
            "tools[0].function.parameters.properties.unit.enum",
        ),
        (
            json!({"messages": [], "tools": [{"type": "function", "function": {"name": "f",
                "parameters": {"type": "object", "properties": {"a": {"type": "object", "properties": {"b": {"description": 1}}}}}}}]}),
            "tools[0].function.parameters.properties.a.properties.b.description",
        ),
        (
            json!({"messages": [], "tools": [{"type": "function", "function": {"name": "f",
                "parameters": {"type": "object", "properties": {"a": {"type": ["string", 1]}}}}}]}),
            "tools[0].function.parameters.properties.a.type[1]",
        ),
        (
            json!({"messages": [], "functions": [{"name": "f", "parameters": {"required": [1]}}]}),
            "functions[0].parameters.required[0]",
        ),
        (json!({"messages": [], "tool_choice": 3}), "tool_choice"),
        (
            json!({"messages": [], "tool_choice": {"type": "function", "function": {}}}),
            "tool_choice.function.name",
        ),
        (
            json!({"messages": [], "function_call": {"name": 1}}),
            "function_call.name",
        ),
    ];
    for (body, path) in cases {
        for tool_formula in [ToolFormula::Namespace, ToolFormula::Cookbook] {
            let e = count_prompt_with(ENC, &body, &PromptOptions { tool_formula }).unwrap_err();
            assert_eq!(e.path(), path, "{body} → {e}");
            assert!(e.to_string().starts_with(path), "{e}");
        }
    }
}

#[test]
fn error_messages_read_well() {
    assert_eq!(
        err(json!({})).to_string(),
        "messages: required field is missing"
    );
    assert_eq!(
        err(json!({"messages": [{"role": "user", "content": true}]})).to_string(),
        "messages[0].content: expected a string, an array of content parts or null, found a boolean"
    );
    assert_eq!(
        err(json!({"messages": "hi"})),
        UsageError::WrongType {
            path: "messages".into(),
            expected: "an array of messages",
            found: "a string"
        }
    );
}

#[test]
fn deep_schema_is_rejected_not_overflowed() {
    let mut schema = json!({"type": "string"});
    for _ in 0..(MAX_SCHEMA_DEPTH + 10) {
        schema = json!({"type": "object", "properties": {"x": schema}});
    }
    let body = json!({"messages": [], "tools": [{"type": "function", "function": {"name": "f", "parameters": schema}}]});
    match count_prompt(ENC, &body).unwrap_err() {
        UsageError::TooDeep { path, limit } => {
            assert_eq!(limit, MAX_SCHEMA_DEPTH);
            assert!(
                path.starts_with("tools[0].function.parameters.properties.x.properties.x"),
                "{path}"
            );
        }
        other => panic!("unexpected {other}"),
    }
}

#[test]
fn lenient_where_the_api_is() {
    // null content, null optional fields, unknown fields and unknown part / tool kinds are fine.
    let body = json!({
        "model": "gpt-4o",
        "stream": true,
        "messages": [
            {"role": "developer", "content": "Be brief."},
            {"role": "user", "content": [
                {"type": "text", "text": "What is in this image?"},
                {"type": "image_url", "image_url": {"url": "https://example.invalid/a.png", "detail": "high"}},
                {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}
            ], "name": null},
            {"role": "assistant", "content": null, "refusal": null, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "look", "arguments": ""}},
                {"id": "c2", "type": "custom", "custom": {"name": "sql", "input": "select 1"}},
                {"id": "c3", "type": "mystery"}
            ]},
            {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "a cat"}]}
        ],
        "tools": [
            {"type": "function", "function": {"name": "look"}},
            {"type": "custom", "custom": {"name": "sql", "description": "Run SQL"}},
            {"type": "web_search_preview"}
        ],
        "tool_choice": "required",
        "functions": null,
        "function_call": null
    });
    for tool_formula in [ToolFormula::Namespace, ToolFormula::Cookbook] {
        let n = count_prompt_with(ENC, &body, &PromptOptions { tool_formula }).unwrap();
        assert_eq!(n.image_parts, 1);
        assert_eq!(n.uncounted_parts, 2); // the audio part and the "mystery" tool call
        assert!(n.messages > IMAGE_PART_TOKENS);
        assert!(n.tools > 0);
        assert_eq!(n.total, n.messages + n.tools);
    }
}

#[test]
fn tool_choice_adjustments() {
    let base = json!({"messages": [{"role": "user", "content": "hi"}]});
    let total = |extra: Value| {
        let mut b = base.clone();
        b.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        count_prompt(ENC, &b).unwrap().total
    };
    let plain = total(json!({}));
    assert_eq!(total(json!({"tool_choice": "auto"})), plain);
    assert_eq!(total(json!({"tool_choice": "required"})), plain);
    assert_eq!(total(json!({"tool_choice": "none"})), plain + 1);
    assert_eq!(total(json!({"function_call": "none"})), plain + 1);
    let named = choicewise_usage::count_text(ENC, "get_weather") + 4;
    assert_eq!(
        total(json!({"tool_choice": {"type": "function", "function": {"name": "get_weather"}}})),
        plain + named
    );
    assert_eq!(
        total(json!({"function_call": {"name": "get_weather"}})),
        plain + named
    );
}

fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        prop_oneof![
            Just("user".to_string()),
            Just("system".to_string()),
            Just("function".to_string()),
            Just("text".to_string()),
            Just("object".to_string()),
            Just("string".to_string()),
            Just("array".to_string()),
            ".{0,12}",
        ]
        .prop_map(Value::String),
    ];
    leaf.prop_recursive(6, 96, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec(
                (
                    prop_oneof![
                        Just("role".to_string()),
                        Just("content".to_string()),
                        Just("name".to_string()),
                        Just("type".to_string()),
                        Just("text".to_string()),
                        Just("function".to_string()),
                        Just("arguments".to_string()),
                        Just("tool_calls".to_string()),
                        Just("function_call".to_string()),
                        Just("parameters".to_string()),
                        Just("properties".to_string()),
                        Just("required".to_string()),
                        Just("items".to_string()),
                        Just("enum".to_string()),
                        Just("description".to_string()),
                        Just("custom".to_string()),
                        "[a-z]{1,6}",
                    ],
                    inner,
                ),
                0..6,
            )
            .prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_json_never_panics(v in arb_json(), w in arb_json()) {
        let shapes = [
            v.clone(),
            json!({"messages": v.clone()}),
            json!({"messages": [v.clone(), w.clone()]}),
            json!({"messages": [{"role": "user", "content": v.clone()}], "tool_choice": w.clone()}),
            json!({"messages": [{"role": "assistant", "tool_calls": [v.clone()], "function_call": w.clone()}]}),
            json!({"messages": [{"role": "system", "content": "s"}], "tools": [v.clone()], "functions": [w.clone()]}),
            json!({"messages": [], "tools": [{"type": "function", "function": v.clone()}]}),
            json!({"messages": [], "functions": [{"name": "f", "parameters": v.clone()}]}),
            json!({"messages": [], "functions": [{"name": "f", "parameters": {"type": "object", "properties": {"p": v.clone()}}}]}),
        ];
        for body in &shapes {
            for tool_formula in [ToolFormula::Namespace, ToolFormula::Cookbook] {
                for enc in [EncodingName::O200kBase, EncodingName::Cl100kBase] {
                    match count_prompt_with(enc, body, &PromptOptions { tool_formula }) {
                        Ok(n) => prop_assert_eq!(n.total, n.messages + n.tools),
                        Err(e) => prop_assert!(!e.path().is_empty()),
                    }
                }
            }
        }
    }
}
