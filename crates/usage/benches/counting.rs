//! Counting throughput. Table load time is a one-off per process and is
//! measured by `examples/load_time.rs` instead.
//!
//! ```text
//! cargo bench -p choicewise-usage --bench counting
//! ```
//!
//! The corpus is ~1 MiB, half English prose (this crate's notes and docs) and
//! half Rust source (this crate's code), repeated up to size. Neither this
//! crate nor tiktoken-rs keeps pieces or counts between calls (only the
//! regex engines' search state), so repetition does not flatter the figures.

use std::hint::black_box;
use std::time::Duration;

use choicewise_usage::{
    CompletionParts, EncodingName, ToolCallPart, count_completion, count_prompt, count_text,
    preload,
};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use serde_json::json;
use tiktoken_rs::{cl100k_base_singleton, o200k_base_singleton};

const TARGET: usize = 1 << 20;

const PROSE: &[&str] = &[
    include_str!("../../../docs/usage.md"),
    "Streamed chat completions often end without a usage object: the client did not ask for it, \
     or the provider ignores the option. Billing, quotas and dashboards still need a number, so \
     the proxy estimates one from what it sent and what it streamed, and says that it did. The \
     estimate counts the prompt the way the model sees it: every message framed by three \
     tokens, its role and its text, names with one more, and the reply primed with three. \
     Function definitions are rendered as the TypeScript namespace the model is shown.\n\n",
];

const CODE: &[&str] = &[
    include_str!("../src/prompt.rs"),
    include_str!("../src/completion.rs"),
    include_str!("../src/encoding.rs"),
    include_str!("../src/error.rs"),
];

fn fill(parts: &[&str], size: usize) -> String {
    let mut out = String::with_capacity(size + 64 * 1024);
    while out.len() < size {
        for p in parts {
            out.push_str(p);
        }
    }
    let mut end = size;
    while !out.is_char_boundary(end) {
        end -= 1;
    }
    out.truncate(end);
    out
}

fn corpus() -> (String, String, String) {
    let prose = fill(PROSE, TARGET / 2);
    let code = fill(CODE, TARGET / 2);
    let mixed = format!("{prose}{code}");
    (prose, code, mixed)
}

fn throughput(c: &mut Criterion) {
    let (prose, code, mixed) = corpus();
    let mut group = c.benchmark_group("encode_ordinary");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4));
    for enc in [EncodingName::O200kBase, EncodingName::Cl100kBase] {
        preload(enc);
        for (label, text) in [
            ("mixed_1MiB", &mixed),
            ("prose_512KiB", &prose),
            ("code_512KiB", &code),
        ] {
            group.throughput(Throughput::Bytes(text.len() as u64));
            group.bench_with_input(
                BenchmarkId::new(format!("count_text/{enc}"), label),
                text,
                |b, t| b.iter(|| count_text(enc, black_box(t))),
            );
        }
        // Raw tiktoken-rs (fancy-regex pre-tokenizer) on the same 1 MiB, against count_text's
        // own pre-tokenizer and the same merges.
        let bpe = match enc {
            EncodingName::O200kBase => o200k_base_singleton(),
            EncodingName::Cl100kBase => cl100k_base_singleton(),
        };
        group.throughput(Throughput::Bytes(mixed.len() as u64));
        group.bench_with_input(
            BenchmarkId::new(format!("tiktoken_rs/{enc}"), "mixed_1MiB"),
            &mixed,
            |b, t| b.iter(|| bpe.encode_ordinary(black_box(t)).len()),
        );
    }
    group.finish();
}

fn requests(c: &mut Criterion) {
    let enc = EncodingName::O200kBase;
    preload(enc);
    let tools_request = json!({
        "model": "gpt-4o",
        "tools": [{"type": "function", "function": {
            "name": "get_current_weather",
            "description": "Get the current weather in a given location",
            "parameters": {"type": "object", "properties": {
                "location": {"type": "string", "description": "The city and state, e.g. San Francisco, CA"},
                "unit": {"type": "string", "description": "The unit of temperature to return", "enum": ["celsius", "fahrenheit"]}
            }, "required": ["location"]}
        }}],
        "messages": [
            {"role": "system", "content": "You are a helpful assistant that can answer to questions about the weather."},
            {"role": "user", "content": "What's the weather like in San Francisco?"}
        ]
    });
    let args = r#"{"location": "San Francisco, CA", "unit": "celsius"}"#;
    let calls = [ToolCallPart {
        name: "get_current_weather",
        arguments: args,
    }];
    let answer = "It is 18 °C and sunny in San Francisco, with a light breeze from the west.";

    let mut group = c.benchmark_group("per_request");
    group
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    group.bench_function("count_prompt/cookbook_tools_example", |b| {
        b.iter(|| count_prompt(enc, black_box(&tools_request)))
    });
    group.bench_function("count_completion/content", |b| {
        b.iter(|| {
            count_completion(
                enc,
                &CompletionParts {
                    content: Some(black_box(answer)),
                    ..CompletionParts::default()
                },
            )
        })
    });
    group.bench_function("count_completion/tool_call", |b| {
        b.iter(|| {
            count_completion(
                enc,
                &CompletionParts {
                    tool_calls: black_box(&calls),
                    ..CompletionParts::default()
                },
            )
        })
    });
    group.finish();
}

criterion_group!(benches, throughput, requests);
criterion_main!(benches);
