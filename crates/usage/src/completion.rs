//! Estimated `completion_tokens` of one choice, from the text it streamed.

use crate::encoding::{EncodingName, count_text};
use crate::prompt::PARALLEL_TOOL_CALLS_OVERHEAD;

/// Tokens added for each tool call or legacy `function_call` in a completion,
/// on top of the tokens of its name and of its arguments.
///
/// OpenAI does not document how a tool call is serialised in the model's
/// output. The model has to emit a recipient header (`to=functions.NAME`,
/// about four tokens before the name), a separator before the arguments and
/// an end-of-call marker. Seven is what the measurements of
/// [chrisdinn/tokens](https://github.com/chrisdinn/tokens) (gpt-4-1106-preview,
/// completion = `4 + 2 × tokens(name) + tokens(arguments)` per call) give for
/// a three-token name such as `get_current_weather`, and it equals the median
/// per-call overhead that the same measurements show on the prompt side (see
/// [`TOOL_CALL_PROMPT_OVERHEAD`](crate::TOOL_CALL_PROMPT_OVERHEAD)).
/// A choice with two or more tool calls also gets
/// [`PARALLEL_TOOL_CALLS_OVERHEAD`](crate::PARALLEL_TOOL_CALLS_OVERHEAD) once.
/// See `docs/usage.md` in the repository.
///
/// ```
/// use choicewise_usage::{count_completion, count_text, CompletionParts, EncodingName,
///     ToolCallPart, TOOL_CALL_COMPLETION_OVERHEAD};
///
/// let enc = EncodingName::O200kBase;
/// let calls = [ToolCallPart { name: "get_weather", arguments: r#"{"city":"Paris"}"# }];
/// let parts = CompletionParts { tool_calls: &calls, ..CompletionParts::default() };
/// assert_eq!(
///     count_completion(enc, &parts),
///     count_text(enc, "get_weather") + count_text(enc, r#"{"city":"Paris"}"#)
///         + TOOL_CALL_COMPLETION_OVERHEAD
/// );
/// ```
pub const TOOL_CALL_COMPLETION_OVERHEAD: u64 = 7;

/// One tool call (or the legacy `function_call`) as accumulated from a stream:
/// the function name and the concatenated argument fragments.
///
/// ```
/// use choicewise_usage::ToolCallPart;
///
/// let call = ToolCallPart { name: "search", arguments: r#"{"q":"rust"}"# };
/// assert_eq!(call.name, "search");
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct ToolCallPart<'a> {
    /// The function name.
    pub name: &'a str,
    /// The arguments exactly as streamed (normally a JSON object, possibly
    /// truncated when the choice stopped at `length`).
    pub arguments: &'a str,
}

/// Everything one choice produced, borrowed from the caller's accumulators.
///
/// ```
/// use choicewise_usage::CompletionParts;
///
/// let parts = CompletionParts { content: Some("Hello!"), ..CompletionParts::default() };
/// assert!(parts.reasoning.is_none());
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct CompletionParts<'a> {
    /// The visible answer (`delta.content`).
    pub content: Option<&'a str>,
    /// Reasoning text, when the provider streams it (`delta.reasoning_content`
    /// or `delta.reasoning`, as DeepSeek, vLLM or OpenRouter do). OpenAI's own
    /// reasoning models do not stream their reasoning, so their hidden
    /// reasoning tokens cannot be estimated from the stream.
    pub reasoning: Option<&'a str>,
    /// A refusal (`delta.refusal`).
    pub refusal: Option<&'a str>,
    /// Tool calls (`delta.tool_calls`), one entry per call index.
    pub tool_calls: &'a [ToolCallPart<'a>],
    /// The legacy `delta.function_call`.
    pub function_call: Option<ToolCallPart<'a>>,
}

/// The estimate of [`count_completion_detailed`], split by source.
///
/// ```
/// use choicewise_usage::{count_completion_detailed, CompletionParts, EncodingName};
///
/// let parts = CompletionParts {
///     content: Some("42"),
///     reasoning: Some("The answer is 42."),
///     ..CompletionParts::default()
/// };
/// let n = count_completion_detailed(EncodingName::O200kBase, &parts);
/// assert_eq!(n.total, n.content + n.reasoning);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct CompletionCount {
    /// `content + reasoning + refusal + tool_calls`: the estimated
    /// `completion_tokens`.
    pub total: u64,
    /// Tokens of the content text.
    pub content: u64,
    /// Tokens of the reasoning text; the estimate of
    /// `completion_tokens_details.reasoning_tokens`.
    pub reasoning: u64,
    /// Tokens of the refusal text.
    pub refusal: u64,
    /// Tokens of all tool calls and of the legacy function call, each
    /// `tokens(name) + tokens(arguments) + TOOL_CALL_COMPLETION_OVERHEAD`,
    /// plus `PARALLEL_TOOL_CALLS_OVERHEAD` for two or more tool calls.
    pub tool_calls: u64,
}

/// Estimates a choice's `completion_tokens`.
///
/// ```text
/// total = tokens(content) + tokens(reasoning) + tokens(refusal)
///       + Σ over tool calls and the function call of
///           (tokens(name) + tokens(arguments) + TOOL_CALL_COMPLETION_OVERHEAD)
///       + PARALLEL_TOOL_CALLS_OVERHEAD   (once, when there are two or more tool calls)
/// ```
///
/// Every text is counted as `encode_ordinary` of `enc` counts it ([`count_text`]).
/// Plain text carries no overhead: for a text answer the API's
/// `completion_tokens` is the token count of the text itself (no
/// end-of-message token), as far as public measurements go; OpenAI documents
/// nothing here. See [`TOOL_CALL_COMPLETION_OVERHEAD`] for the per-call
/// constant and its source.
///
/// ```
/// use choicewise_usage::{count_completion, count_text, CompletionParts, EncodingName};
///
/// let enc = EncodingName::O200kBase;
/// let text = "Things working well together will increase revenue.";
/// let parts = CompletionParts { content: Some(text), ..CompletionParts::default() };
/// assert_eq!(count_completion(enc, &parts), count_text(enc, text));
/// ```
pub fn count_completion(enc: EncodingName, parts: &CompletionParts<'_>) -> u64 {
    count_completion_detailed(enc, parts).total
}

/// [`count_completion`] with the total split by source.
///
/// ```
/// use choicewise_usage::{count_completion_detailed, CompletionParts, EncodingName, ToolCallPart};
///
/// let calls = [
///     ToolCallPart { name: "a", arguments: "{}" },
///     ToolCallPart { name: "b", arguments: "{}" },
/// ];
/// let parts = CompletionParts { tool_calls: &calls, ..CompletionParts::default() };
/// let enc = EncodingName::Cl100kBase;
/// let n = count_completion_detailed(enc, &parts);
/// assert_eq!(n.total, n.tool_calls);
/// assert_eq!(n.content, 0);
/// // Two calls: each call's own overhead, plus the parallel wrapper once.
/// assert_eq!(n.tool_calls, 2 * (1 + 1 + 7) + 13);
/// ```
pub fn count_completion_detailed(
    enc: EncodingName,
    parts: &CompletionParts<'_>,
) -> CompletionCount {
    let text = |t: Option<&str>| t.map_or(0, |t| count_text(enc, t));
    let call = |c: &ToolCallPart<'_>| {
        count_text(enc, c.name) + count_text(enc, c.arguments) + TOOL_CALL_COMPLETION_OVERHEAD
    };
    let content = text(parts.content);
    let reasoning = text(parts.reasoning);
    let refusal = text(parts.refusal);
    let mut tool_calls = parts
        .tool_calls
        .iter()
        .chain(parts.function_call.as_ref())
        .map(call)
        .fold(0u64, u64::saturating_add);
    if parts.tool_calls.len() >= 2 {
        tool_calls = tool_calls.saturating_add(PARALLEL_TOOL_CALLS_OVERHEAD);
    }
    CompletionCount {
        total: content
            .saturating_add(reasoning)
            .saturating_add(refusal)
            .saturating_add(tool_calls),
        content,
        reasoning,
        refusal,
        tool_calls,
    }
}
