//! Usage: the provider's figures pass through unchanged; without them, an estimate equal to
//! what tiktoken counts for the same strings, flagged as estimated.

mod common;

use choicewise::{Completions, UsageSource};
use choicewise_usage::{
    CompletionParts, EncodingName, ToolCallPart, count_completion, count_prompt, count_text,
};
use serde_json::{Value, json};

/// The usage object of the last chunk that carried one, as sent.
fn last_raw_usage(sse: &[u8]) -> Value {
    String::from_utf8_lossy(sse)
        .lines()
        .rev()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .find_map(|c| c.get("usage").cloned().filter(|u| u.is_object()))
        .unwrap()
}

#[tokio::test]
async fn reported_usage_passes_through_unchanged() {
    for name in [
        "openai_n3_tools.sse",
        "vllm_n4_reasoning.sse",
        "missing_done_finished.sse",
    ] {
        let bytes = common::fixture(name);
        let raw = last_raw_usage(&bytes);
        let completion = common::collect_reads(vec![bytes]).await.unwrap();
        let usage = completion.usage.unwrap();
        assert_eq!(usage.source, UsageSource::Reported, "{name}");
        let mut ours = serde_json::to_value(&usage).unwrap();
        assert_eq!(ours["source"], "reported");
        ours.as_object_mut().unwrap().remove("source");
        assert_eq!(ours, raw, "{name}");
    }
}

#[tokio::test]
async fn a_later_chunk_without_usage_never_erases_it() {
    let sse = concat!(
        "data: {\"choices\":[{\"delta\":{\"content\":\"a\"},\"finish_reason\":\"stop\"}],\"usage\":null}\n\n",
        "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":1,\"total_tokens\":6}}\n\n",
        "data: {\"choices\":[],\"usage\":null}\n\n",
        "data: {\"choices\":[],\"usage\":{}}\n\n",
        "data: [DONE]\n\n",
    );
    let usage = Completions::from_reader(sse.as_bytes()).usage().await;
    assert_eq!(
        (usage.total_tokens, usage.source),
        (6, UsageSource::Reported)
    );
}

#[tokio::test]
async fn without_usage_the_estimate_is_what_tiktoken_counts_for_the_same_strings() {
    // The tool-call fixture with its usage chunk removed.
    let text = String::from_utf8(common::fixture("openai_n3_tools.sse")).unwrap();
    let stripped: String = text
        .split("\n\n")
        .filter(|e| !e.contains("\"choices\":[]"))
        .map(|e| format!("{e}\n\n"))
        .collect();
    let completions = Completions::from_reader(std::io::Cursor::new(stripped));
    let completion = completions.collect().await.unwrap();
    let usage = completion.usage.clone().unwrap();
    assert_eq!(usage.source, UsageSource::Estimated);
    let estimate = usage.estimate.clone().unwrap();
    assert_eq!(estimate.encoding, "o200k_base"); // gpt-4o-mini, named by the stream
    assert!(estimate.model_known);
    assert!(!estimate.prompt_counted);

    let mut total = 0;
    for c in &completion.choices {
        let m = &c.message;
        let calls: Vec<ToolCallPart> = m
            .tool_calls
            .iter()
            .map(|t| ToolCallPart {
                name: &t.function.name,
                arguments: &t.function.arguments,
            })
            .collect();
        let expected = count_completion(
            EncodingName::O200kBase,
            &CompletionParts {
                content: m.content.as_deref(),
                tool_calls: &calls,
                ..CompletionParts::default()
            },
        );
        if calls.is_empty() {
            let content = m.content.as_deref().unwrap();
            assert_eq!(expected, count_text(EncodingName::O200kBase, content));
        }
        assert_eq!(estimate.choices[&c.index], expected, "choice {}", c.index);
        let choice = completions.choice(c.index).await.unwrap();
        assert_eq!(
            choice.completion_tokens().await,
            expected,
            "choice {}",
            c.index
        );
        total += expected;
    }
    assert_eq!(usage.completion_tokens, total);
    assert_eq!(usage.total_tokens, total);
}

#[tokio::test]
async fn the_request_body_adds_the_prompt_count() {
    let request = json!({
        "model": "gpt-4",
        "n": 2,
        "messages": [
            {"role": "system", "content": "You are terse."},
            {"role": "user", "name": "ada", "content": "Name a colour."}
        ],
        "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather",
                   "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]
    });
    let sse = concat!(
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Teal.\"},\"finish_reason\":\"stop\"}]}\n\n",
        "data: {\"choices\":[{\"index\":1,\"delta\":{\"content\":\"Red.\"},\"finish_reason\":\"stop\"}]}\n\n",
        "data: [DONE]\n\n",
    );
    let usage = Completions::builder()
        .request(request.clone())
        .from_reader(sse.as_bytes())
        .usage()
        .await;
    let prompt = count_prompt(EncodingName::Cl100kBase, &request)
        .unwrap()
        .total;
    let completion = count_text(EncodingName::Cl100kBase, "Teal.")
        + count_text(EncodingName::Cl100kBase, "Red.");
    assert_eq!(usage.estimate.as_ref().unwrap().encoding, "cl100k_base");
    assert!(usage.estimate.as_ref().unwrap().prompt_counted);
    assert_eq!(
        (usage.prompt_tokens, usage.completion_tokens),
        (prompt, completion)
    );
    assert_eq!(usage.total_tokens, prompt + completion);
}

#[tokio::test]
async fn an_unknown_model_falls_back_to_the_default_encoding_and_says_so() {
    let sse = "data: {\"model\":\"llama-3.1-8b\",\"choices\":[{\"delta\":{\"content\":\"Hi\"},\"finish_reason\":\"stop\"}]}\n\n";
    let usage = Completions::from_reader(sse.as_bytes()).usage().await;
    let estimate = usage.estimate.unwrap();
    assert_eq!(
        (estimate.encoding.as_str(), estimate.model_known),
        ("o200k_base", false)
    );
    assert_eq!(estimate.model.as_deref(), Some("llama-3.1-8b"));
}
