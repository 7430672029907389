//! Worked examples published with a count the OpenAI API returned for them.
//!
//! * OpenAI cookbook, "How to count tokens with tiktoken" (examples/
//!   How_to_count_tokens_with_tiktoken.ipynb, sections 6 and 7): the
//!   `example_messages` list (129 prompt tokens on gpt-3.5-turbo, gpt-4-0613
//!   and gpt-4; 124 on gpt-4o and gpt-4o-mini) and the weather-tool example
//!   (105 on gpt-3.5-turbo and gpt-4; 101 on gpt-4o and gpt-4o-mini). The
//!   notebook prints "N prompt tokens counted by the OpenAI API" next to each.
//! * hmarr/openai-chat-tokens, tests/token-counts.test.ts: cases measured on
//!   gpt-3.5-turbo with the legacy `functions` parameter, reproduced by the
//!   default `Namespace` tool formula (the cookbook formula misses them by
//!   -2..+7 tokens, pinned below).

use choicewise_usage::{EncodingName, PromptOptions, ToolFormula, count_prompt, count_prompt_with};
use serde_json::{Value, json};

const CL100K: EncodingName = EncodingName::Cl100kBase;
const O200K: EncodingName = EncodingName::O200kBase;

fn cookbook_example_messages() -> Value {
    json!([
        {"role": "system", "content": "You are a helpful, pattern-following assistant that translates corporate jargon into plain English."},
        {"role": "system", "name": "example_user", "content": "New synergies will help drive top-line growth."},
        {"role": "system", "name": "example_assistant", "content": "Things working well together will increase revenue."},
        {"role": "system", "name": "example_user", "content": "Let's circle back when we have more bandwidth to touch base on opportunities for increased leverage."},
        {"role": "system", "name": "example_assistant", "content": "Let's talk later when we're less busy about how to do better."},
        {"role": "user", "content": "This late pivot means we don't have time to boil the ocean for the client deliverable."}
    ])
}

#[test]
fn cookbook_example_messages_cl100k_is_129() {
    for model in ["gpt-3.5-turbo", "gpt-4-0613", "gpt-4"] {
        let body = json!({"model": model, "messages": cookbook_example_messages()});
        let n = count_prompt(CL100K, &body).unwrap();
        assert_eq!(n.total, 129, "{model}");
        assert_eq!(n.tools, 0);
    }
}

#[test]
fn cookbook_example_messages_o200k_is_124() {
    for model in ["gpt-4o", "gpt-4o-mini"] {
        let body = json!({"model": model, "messages": cookbook_example_messages()});
        assert_eq!(count_prompt(O200K, &body).unwrap().total, 124, "{model}");
    }
}

fn cookbook_tools_request(model: &str) -> Value {
    json!({
        "model": model,
        "temperature": 0,
        "tools": [{
            "type": "function",
            "function": {
                "name": "get_current_weather",
                "description": "Get the current weather in a given location",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "location": {
                            "type": "string",
                            "description": "The city and state, e.g. San Francisco, CA"
                        },
                        "unit": {
                            "type": "string",
                            "description": "The unit of temperature to return",
                            "enum": ["celsius", "fahrenheit"]
                        }
                    },
                    "required": ["location"]
                }
            }
        }],
        "messages": [
            {"role": "system", "content": "You are a helpful assistant that can answer to questions about the weather."},
            {"role": "user", "content": "What's the weather like in San Francisco?"}
        ]
    })
}

const BOTH_FORMULAS: [ToolFormula; 2] = [ToolFormula::Namespace, ToolFormula::Cookbook];

#[test]
fn cookbook_tools_example_cl100k_is_105() {
    for model in ["gpt-3.5-turbo", "gpt-4"] {
        for tool_formula in BOTH_FORMULAS {
            let opts = PromptOptions { tool_formula };
            let n = count_prompt_with(CL100K, &cookbook_tools_request(model), &opts).unwrap();
            assert_eq!(n.total, 105, "{model} {tool_formula:?}");
        }
    }
}

#[test]
fn cookbook_tools_example_o200k_is_101() {
    for model in ["gpt-4o", "gpt-4o-mini"] {
        for tool_formula in BOTH_FORMULAS {
            let opts = PromptOptions { tool_formula };
            let n = count_prompt_with(O200K, &cookbook_tools_request(model), &opts).unwrap();
            assert_eq!(n.total, 101, "{model} {tool_formula:?}");
        }
    }
}

#[test]
fn default_formula_is_namespace() {
    let body = cookbook_tools_request("gpt-4o");
    assert_eq!(
        count_prompt(O200K, &body).unwrap(),
        count_prompt_with(
            O200K,
            &body,
            &PromptOptions {
                tool_formula: ToolFormula::Namespace
            }
        )
        .unwrap()
    );
}

/// hmarr/openai-chat-tokens `TEST_CASES`: (messages, functions, prompt tokens
/// on gpt-3.5-turbo).
fn hmarr_cases() -> Vec<(Value, Option<Value>, u64)> {
    vec![
        (json!([{"role": "user", "content": "hello"}]), None, 8),
        (json!([{"role": "user", "content": "hello world"}]), None, 9),
        (json!([{"role": "system", "content": "hello"}]), None, 8),
        (json!([{"role": "system", "content": "hello:"}]), None, 9),
        (
            json!([
                {"role": "system", "content": "# Important: you're the best robot"},
                {"role": "user", "content": "hello robot"},
                {"role": "assistant", "content": "hello world"}
            ]),
            None,
            27,
        ),
        (
            json!([{"role": "user", "content": "hello"}]),
            Some(json!([{"name": "foo", "parameters": {"type": "object", "properties": {}}}])),
            31,
        ),
        (
            json!([{"role": "user", "content": "hello"}]),
            Some(
                json!([{"name": "foo", "description": "Do a foo", "parameters": {"type": "object", "properties": {}}}]),
            ),
            36,
        ),
        (
            json!([{"role": "user", "content": "hello"}]),
            Some(json!([{
                "name": "bing_bong",
                "description": "Do a bing bong",
                "parameters": {"type": "object", "properties": {"foo": {"type": "string"}}}
            }])),
            49,
        ),
        (
            json!([{"role": "user", "content": "hello"}]),
            Some(json!([{
                "name": "bing_bong",
                "description": "Do a bing bong",
                "parameters": {"type": "object", "properties": {
                    "foo": {"type": "string"},
                    "bar": {"type": "number", "description": "A number"}
                }}
            }])),
            57,
        ),
        (
            json!([{"role": "user", "content": "hello"}]),
            Some(json!([{
                "name": "bing_bong",
                "description": "Do a bing bong",
                "parameters": {"type": "object", "properties": {
                    "foo": {"type": "object", "properties": {
                        "bar": {"type": "string", "enum": ["a", "b", "c"]},
                        "baz": {"type": "boolean"}
                    }}
                }}
            }])),
            68,
        ),
        (
            json!([
                {"role": "user", "content": "hello world"},
                {"role": "function", "name": "do_stuff", "content": "{}"}
            ]),
            None,
            15,
        ),
        (
            json!([
                {"role": "user", "content": "hello world"},
                {"role": "function", "name": "do_stuff", "content": "{\"foo\": \"bar\", \"baz\": 1.5}"}
            ]),
            None,
            28,
        ),
        (
            json!([{"role": "function", "name": "dance_the_tango", "content": "{\"a\": { \"b\" : { \"c\": false}}}"}]),
            None,
            24,
        ),
        (
            json!([{"role": "assistant", "content": "", "function_call": {"name": "do_stuff", "arguments": "{\"foo\": \"bar\", \"baz\": 1.5}"}}]),
            None,
            26,
        ),
        (
            json!([{"role": "assistant", "content": "", "function_call": {"name": "do_stuff", "arguments": "{\"foo\":\"bar\", \"baz\":\n\n 1.5}"}}]),
            None,
            25,
        ),
        (
            json!([{"role": "system", "content": "Hello"}, {"role": "user", "content": "Hi there"}]),
            Some(json!([{"name": "do_stuff", "parameters": {"type": "object", "properties": {}}}])),
            35,
        ),
        (
            json!([{"role": "system", "content": "Hello:"}, {"role": "user", "content": "Hi there"}]),
            Some(json!([{"name": "do_stuff", "parameters": {"type": "object", "properties": {}}}])),
            35,
        ),
        (
            json!([
                {"role": "system", "content": "Hello:"},
                {"role": "system", "content": "Hello"},
                {"role": "user", "content": "Hi there"}
            ]),
            Some(json!([{"name": "do_stuff", "parameters": {"type": "object", "properties": {}}}])),
            40,
        ),
        (
            json!([{"role": "user", "content": "hello"}]),
            Some(json!([{
                "name": "get_recipe",
                "parameters": {
                    "type": "object",
                    "required": ["ingredients", "instructions", "time_to_cook"],
                    "properties": {
                        "ingredients": {
                            "type": "array",
                            "items": {
                                "type": "object",
                                "required": ["name", "unit", "amount"],
                                "properties": {
                                    "name": {"type": "string"},
                                    "unit": {"enum": ["grams", "ml", "cups", "pieces", "teaspoons"], "type": "string"},
                                    "amount": {"type": "number"}
                                }
                            }
                        },
                        "instructions": {
                            "type": "array",
                            "items": {"type": "string"},
                            "description": "Steps to prepare the recipe (no numbering)"
                        },
                        "time_to_cook": {"type": "number", "description": "Total time to prepare the recipe in minutes"}
                    }
                }
            }])),
            106,
        ),
    ]
}

#[test]
fn hmarr_cases_reproduce_with_namespace_formula() {
    let opts = PromptOptions::default();
    let mut failures = Vec::new();
    for (i, (messages, functions, expected)) in hmarr_cases().into_iter().enumerate() {
        let mut body = json!({"model": "gpt-3.5-turbo", "messages": messages});
        if let Some(f) = functions {
            body["functions"] = f;
        }
        let got = count_prompt_with(CL100K, &body, &opts).unwrap().total;
        if got != expected {
            failures.push(format!("case {i}: got {got}, want {expected}"));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

#[test]
fn message_only_hmarr_cases_match_default_formula_too() {
    // Without definitions the two formulas agree.
    for (i, (messages, functions, expected)) in hmarr_cases().into_iter().enumerate() {
        if functions.is_some() {
            continue;
        }
        let body = json!({"messages": messages});
        assert_eq!(
            count_prompt(CL100K, &body).unwrap().total,
            expected,
            "case {i}"
        );
    }
}

#[test]
fn cookbook_formula_deviations_on_hmarr_cases() {
    // Estimate minus measured count for the cases that define functions.
    let expected: &[(usize, i64)] = &[
        (5, 1),
        (6, -1),
        (7, -1),
        (8, -2),
        (9, 3),
        (15, 4),
        (16, 5),
        (17, 5),
        (18, 7),
    ];
    let opts = PromptOptions {
        tool_formula: ToolFormula::Cookbook,
    };
    let mut got = Vec::new();
    for (i, (messages, functions, measured)) in hmarr_cases().into_iter().enumerate() {
        let Some(f) = functions else { continue };
        let body = json!({"messages": messages, "functions": f});
        let n = count_prompt_with(CL100K, &body, &opts).unwrap().total as i64;
        got.push((i, n - measured as i64));
    }
    assert_eq!(got, expected);
}
