//! Usage: the provider's figures pass through unchanged; without them, an estimate equal to
//! what tiktoken counts for the same strings, flagged as estimated.

use choicewise_core::{Completions, Source, UsageSource, WarningKind};
use choicewise_test_support::upstream;
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
        let bytes = crate::common::fixture(name);
        let raw = last_raw_usage(&bytes);
        let completion = crate::common::collect_reads(vec![bytes]).await.unwrap();
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
    let usage = Completions::new(Source::reader(sse.as_bytes()))
        .usage()
        .await;
    assert_eq!(
        (usage.total_tokens, usage.source),
        (6, UsageSource::Reported)
    );
}

#[tokio::test]
async fn without_usage_the_estimate_is_what_tiktoken_counts_for_the_same_strings() {
    // The tool-call fixture with its usage chunk removed.
    let text = String::from_utf8(crate::common::fixture("openai_n3_tools.sse")).unwrap();
    let stripped: String = text
        .split("\n\n")
        .filter(|e| !e.contains("\"choices\":[]"))
        .map(|e| format!("{e}\n\n"))
        .collect();
    let completions = Completions::new(Source::reader(std::io::Cursor::new(stripped)));
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
    let usage = Completions::new(Source::reader(sse.as_bytes()).request(request.clone()))
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
    let usage = Completions::new(Source::reader(sse.as_bytes()))
        .usage()
        .await;
    let estimate = usage.estimate.unwrap();
    assert_eq!(
        (estimate.encoding.as_str(), estimate.model_known),
        ("o200k_base", false)
    );
    assert_eq!(estimate.model.as_deref(), Some("llama-3.1-8b"));
}

/// llama.cpp's server sends one usage-only chunk per choice, right after that choice's finish,
/// each with the whole prompt and that choice's completion tokens (a recorded stream): the
/// total counts the prompt once and adds the completions, and each choice gets its own.
#[tokio::test]
async fn llama_cpp_usage_chunks_per_choice_add_up_with_the_prompt_once() {
    let bytes = crate::common::fixture("llama_n4_usage_per_choice.sse");
    for split in crate::common::SPLITS {
        let completions =
            Completions::new(Source::sse(upstream(crate::common::split(&bytes, split))));
        let completion = completions.collect().await.unwrap();
        let usage = completion.usage.clone().unwrap();
        assert_eq!(usage.source, UsageSource::Reported);
        assert_eq!(
            (
                usage.prompt_tokens,
                usage.completion_tokens,
                usage.total_tokens
            ),
            (42, 15 + 24 + 24 + 23, 42 + 86),
            "reads of {split:?}"
        );
        // The prompt's details once; no choice's timings.
        assert_eq!(usage.details["prompt_tokens_details"]["cached_tokens"], 0);
        assert!(usage.details.get("timings").is_none());
        let per_choice: Vec<_> = completion
            .choices
            .iter()
            .map(|c| c.usage.unwrap())
            .map(|u| (u.completion_tokens, u.source))
            .collect();
        let reported = UsageSource::Reported;
        assert_eq!(
            per_choice,
            [
                (15, reported),
                (24, reported),
                (24, reported),
                (23, reported)
            ]
        );
        assert!(
            completions.warnings().is_empty(),
            "{:?}",
            completions.warnings()
        );
        // The same from each choice's handle.
        let c3 = completions.choice(3).await.unwrap().usage().await;
        assert_eq!((c3.completion_tokens, c3.source), (23, reported));
        // And in the JSON of `collect()` (`choicewise ... --json`).
        let json = serde_json::to_value(&completion).unwrap();
        assert_eq!(
            json["choices"][1]["usage"],
            json!({"completion_tokens": 24, "source": "reported"})
        );
    }
}

/// OpenAI's single final usage chunk stays the total exactly as sent; with several choices it
/// is no choice's figure: `collect()` gives the choices none (and loads no BPE table for it),
/// `Choice::usage()` estimates one, flagged.
#[tokio::test]
async fn openai_single_final_usage_chunk_is_the_total_and_choices_are_estimated() {
    let bytes = crate::common::fixture("openai_n3_tools.sse");
    let raw = last_raw_usage(&bytes);
    let completions = Completions::new(Source::sse(futures::stream::iter([
        Ok::<_, std::io::Error>(bytes),
    ])));
    let completion = completions.collect().await.unwrap();
    let mut ours = serde_json::to_value(completion.usage.as_ref().unwrap()).unwrap();
    ours.as_object_mut().unwrap().remove("source");
    assert_eq!(ours, raw);
    assert!(completion.choices.iter().all(|c| c.usage.is_none()));
    let json = serde_json::to_value(&completion).unwrap();
    assert!(json["choices"][0].get("usage").is_none());
    for c in &completion.choices {
        let u = completions.choice(c.index).await.unwrap().usage().await;
        assert_eq!(u.source, UsageSource::Estimated, "choice {}", c.index);
        assert_eq!(
            u.completion_tokens,
            c.completion_tokens(EncodingName::O200kBase)
        );
    }
    assert!(completions.warnings().is_empty());
}

/// n = 1: the one usage chunk is the total and the choice's own figure.
#[tokio::test]
async fn one_choice_one_usage_chunk_is_that_choices_usage() {
    let sse = concat!(
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi there\"},\"finish_reason\":\"stop\"}],\"usage\":null}\n\n",
        "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":3,\"total_tokens\":10}}\n\n",
        "data: [DONE]\n\n",
    );
    let completion = Completions::new(Source::reader(sse.as_bytes()))
        .collect()
        .await
        .unwrap();
    assert_eq!(completion.usage.unwrap().total_tokens, 10);
    let u = completion.choices[0].usage.unwrap();
    assert_eq!((u.completion_tokens, u.source), (3, UsageSource::Reported));
}

/// Several usage-only chunks that are not one per choice are never added up: a total repeated
/// at the end, per-choice chunks about different prompts, a usage chunk before any finish.
/// The largest is the usage, and a warning says it was ambiguous.
#[tokio::test]
async fn ambiguous_usage_chunks_are_never_added_up_and_are_warned_about() {
    let finish = |i: u32| {
        format!(
            "data: {{\"choices\":[{{\"index\":{i},\"delta\":{{\"content\":\"x\"}},\"finish_reason\":\"stop\"}}]}}\n\n"
        )
    };
    let usage = |p: u64, c: u64| {
        format!(
            "data: {{\"choices\":[],\"usage\":{{\"prompt_tokens\":{p},\"completion_tokens\":{c},\"total_tokens\":{}}}}}\n\n",
            p + c
        )
    };
    let cases = [
        // OpenAI's total, sent twice after both finishes.
        (
            [finish(0), finish(1), usage(10, 8), usage(10, 8)].concat(),
            (10, 8),
        ),
        // One chunk after each finish, but about different prompts.
        (
            [finish(0), usage(10, 3), finish(1), usage(12, 5)].concat(),
            (12, 5),
        ),
        // A usage chunk before any finish, then one after both.
        (
            [usage(10, 2), finish(0), finish(1), usage(10, 9)].concat(),
            (10, 9),
        ),
    ];
    for (stream, (prompt, completion)) in cases {
        let sse = format!("{stream}data: [DONE]\n\n");
        let completions = Completions::new(Source::reader(std::io::Cursor::new(sse.clone())));
        let whole = completions.collect().await.unwrap();
        let u = whole.usage.unwrap();
        assert_eq!(
            (u.prompt_tokens, u.completion_tokens, u.total_tokens),
            (prompt, completion, prompt + completion),
            "{sse}"
        );
        let warnings = completions.warnings();
        assert_eq!(warnings.len(), 1, "{sse}: {warnings:?}");
        assert!(
            matches!(warnings[0].kind, WarningKind::UsageAmbiguous { chunks: 2 }),
            "{warnings:?}"
        );
        assert!(warnings[0].to_string().contains("none added up"));
        // No choice gets a figure from ambiguous chunks.
        assert!(whole.choices.iter().all(|c| c.usage.is_none()));
        let c1 = completions.choice(1).await.unwrap().usage().await;
        assert_eq!(c1.source, UsageSource::Estimated);
    }
}

/// A llama.cpp stream cut after one of two choices finished: its one usage chunk is that
/// choice's own (it arrived while the other choice was still generating), and the usage is that
/// chunk as sent; the other choice has no reported figure.
#[tokio::test]
async fn one_usage_chunk_while_another_choice_runs_belongs_to_the_finished_choice() {
    let sse = concat!(
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"still \"}}]}\n\n",
        "data: {\"choices\":[{\"index\":1,\"delta\":{\"content\":\"done\"},\"finish_reason\":\"stop\"}]}\n\n",
        "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":4,\"total_tokens\":13}}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"going\"}}]}\n\n",
    );
    let completions = Completions::new(Source::reader(sse.as_bytes()));
    let inc = completions.collect().await.unwrap_err();
    assert!(matches!(
        inc.error.detail(),
        choicewise_core::ErrorDetail::Truncated { .. }
    ));
    let u = inc.partial.usage.unwrap();
    assert_eq!(
        (u.prompt_tokens, u.completion_tokens, u.total_tokens),
        (9, 4, 13)
    );
    let c1 = inc.partial.choices[1].usage.unwrap();
    assert_eq!(
        (c1.completion_tokens, c1.source),
        (4, UsageSource::Reported)
    );
    assert_eq!(inc.partial.choices[0].usage, None);
    assert!(completions.warnings().is_empty());
}

/// An estimate is the same whether it is counted where it is asked for (a small text, the
/// table loaded) or on a blocking thread (a text above `QUICK_COUNT_BYTES`): each equals
/// tiktoken's count of the same text.
#[tokio::test]
async fn small_and_large_estimates_count_alike() {
    choicewise_usage::preload(EncodingName::O200kBase);
    let quick = "Hello there, small text.".to_string();
    let large = "a long answer with words in it. ".repeat(200);
    assert!(large.len() > choicewise_usage::QUICK_COUNT_BYTES);
    for text in [quick, large] {
        let chunk = json!({"model": "gpt-4o", "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": "stop"}]});
        let sse = format!("data: {chunk}\n\ndata: [DONE]\n\n");
        let c = Completions::new(Source::reader(std::io::Cursor::new(sse.into_bytes())));
        let usage = c.usage().await;
        assert_eq!(usage.source, UsageSource::Estimated);
        let expected = count_completion(
            EncodingName::O200kBase,
            &CompletionParts {
                content: Some(&text),
                ..CompletionParts::default()
            },
        );
        assert_eq!(usage.completion_tokens, expected, "{} bytes", text.len());
    }
}
