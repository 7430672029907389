//! Token-count estimates for chat completions whose stream carried no usage.
//!
//! Streamed chat completions often end without a `usage` object (the client
//! did not ask for `stream_options.include_usage`, or the provider ignores
//! it). This crate estimates the counts from what was sent and streamed,
//! with OpenAI's BPE tables from [`tiktoken-rs`](https://docs.rs/tiktoken-rs)
//! (embedded in that crate: nothing is downloaded at run time). Callers must
//! label the numbers as estimates.
//!
//! * [`encoding_for_model`] picks `o200k_base` or `cl100k_base` for a model
//!   name, and says whether the name was recognised.
//! * [`count_completion`] estimates one choice's `completion_tokens` from its
//!   content, reasoning, refusal and tool calls.
//! * [`count_prompt`] estimates `prompt_tokens` from the request body:
//!   messages by the rules of OpenAI's cookbook ("How to count tokens with
//!   tiktoken"), function and tool definitions as the TypeScript namespace
//!   the model is shown.
//!
//! The tables load lazily, once per process, from tiktoken-rs into shared
//! merge tables (counted with tiktoken's pre-tokenizer on `regex-automata`);
//! [`preload`] loads one ahead of time. Everything here is synchronous, pure
//! and never panics on any input: a malformed request gives a [`UsageError`]
//! naming the path of the offending value.
//!
//! The formulas, their sources and their known deviations are in the item
//! docs and in `docs/usage.md` in the repository.
//!
//! ```
//! use choicewise_usage::{count_completion, count_prompt, encoding_for_model, CompletionParts};
//! use serde_json::json;
//!
//! let request = json!({
//!     "model": "gpt-4o-mini",
//!     "messages": [{"role": "user", "content": "Say hello"}]
//! });
//! let enc = encoding_for_model(request["model"].as_str().unwrap_or_default());
//! assert!(enc.known);
//! let prompt = count_prompt(enc.name, &request).unwrap();
//! let completion = count_completion(
//!     enc.name,
//!     &CompletionParts { content: Some("Hello!"), ..CompletionParts::default() },
//! );
//! assert_eq!((prompt.total, completion), (9, 2));
//! ```
#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod bpe;
mod completion;
mod encoding;
mod error;
mod prompt;

pub use choicewise_partial_json::for_each_entry;
pub use completion::{
    CompletionCount, CompletionParts, TOOL_CALL_COMPLETION_OVERHEAD, ToolCallPart,
    count_completion, count_completion_detailed,
};
pub use encoding::{
    DEFAULT_ENCODING, EncodingChoice, EncodingName, QUICK_COUNT_BYTES, count_text, counts_quickly,
    encoding_for_model, preload,
};
pub use error::{UsageError, json_type};
pub use prompt::{
    CookbookConstants, FUNCTION_CALL_PROMPT_OVERHEAD, IMAGE_PART_TOKENS, MAX_SCHEMA_DEPTH,
    PARALLEL_TOOL_CALLS_OVERHEAD, PromptCount, PromptOptions, REPLY_PRIMING, TOKENS_PER_MESSAGE,
    TOKENS_PER_NAME, TOOL_CALL_PROMPT_OVERHEAD, ToolFormula, count_prompt, count_prompt_fields,
    count_prompt_fields_at_most, count_prompt_with,
};
