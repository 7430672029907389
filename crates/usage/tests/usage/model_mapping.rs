//! Model name → encoding.

use choicewise_usage::{DEFAULT_ENCODING, EncodingChoice, EncodingName, encoding_for_model};

#[test]
fn o200k_models() {
    for model in [
        "gpt-4o",
        "gpt-4o-mini",
        "gpt-4o-2024-08-06",
        "gpt-4o-mini-2024-07-18",
        "gpt-4o-audio-preview",
        "chatgpt-4o-latest",
        "gpt-4.1",
        "gpt-4.1-mini",
        "gpt-4.1-nano-2025-04-14",
        "gpt-4.5-preview",
        "gpt-5",
        "gpt-5-mini",
        "gpt-5.1",
        "gpt-5-codex",
        "o1",
        "o1-mini",
        "o1-preview-2024-09-12",
        "o3",
        "o3-mini",
        "o3-pro",
        "o4-mini",
        "o4-mini-2025-04-16",
        "gpt-oss-120b",
        "ft:gpt-4o-mini:org::id",
        "ft:gpt-4o-2024-08-06:acme:custom-suffix:9abc",
        "openai/gpt-4o",
        "openrouter/openai/o3-mini",
        "  GPT-4o-Mini  ",
    ] {
        assert_eq!(
            encoding_for_model(model),
            EncodingChoice {
                name: EncodingName::O200kBase,
                known: true
            },
            "{model}"
        );
    }
}

#[test]
fn cl100k_models() {
    for model in [
        "gpt-4",
        "gpt-4-0613",
        "gpt-4-32k",
        "gpt-4-turbo",
        "gpt-4-turbo-2024-04-09",
        "gpt-4-1106-preview",
        "gpt-4-vision-preview",
        "gpt-3.5-turbo",
        "gpt-3.5-turbo-0125",
        "gpt-3.5-turbo-16k",
        "gpt-35-turbo",
        "text-embedding-3-small",
        "text-embedding-3-large",
        "text-embedding-ada-002",
        "ft:gpt-3.5-turbo-0613:org::abc",
        "azure/gpt-4-turbo",
    ] {
        assert_eq!(
            encoding_for_model(model),
            EncodingChoice {
                name: EncodingName::Cl100kBase,
                known: true
            },
            "{model}"
        );
    }
}

#[test]
fn unknown_models_fall_back_to_o200k_unknown() {
    assert_eq!(DEFAULT_ENCODING, EncodingName::O200kBase);
    for model in [
        "",
        "   ",
        "llama-3.1-70b-instruct",
        "claude-3-5-sonnet",
        "my-deployment",
        "gpt-4.2",
        "gpt-4x",
        "o10",
        "o",
        "gpt",
        "ft:",
        "ft:unknown-base:org::id",
        "openai/",
        "gpt-4o\u{0}",
        "ünïcödé-model",
    ] {
        assert_eq!(
            encoding_for_model(model),
            EncodingChoice {
                name: DEFAULT_ENCODING,
                known: false
            },
            "{model:?}"
        );
    }
}
