//! Token estimates of assembled choices, counted with tiktoken (`choicewise-usage`), and each
//! choice's own usage. Blocking: counting runs on a blocking thread once the stream is over,
//! never on the reader's path.

use std::collections::BTreeMap;

use choicewise_usage::{
    CompletionParts, EncodingName, ToolCallPart, count_completion, count_prompt, encoding_for_model,
};
use serde_json::{Map, Value};

use crate::response::ChoiceOutput;
use crate::usage::{ChoiceUsage, Estimate, Usage, UsageSource};

impl Usage {
    /// Counts an estimate. Blocking: loads the BPE table on first use and encodes every text.
    pub(crate) fn estimate(
        model: Option<String>,
        request: Option<&Value>,
        choices: &[ChoiceOutput],
    ) -> Usage {
        let encoding = encoding_for_model(model.as_deref().unwrap_or_default());
        let mut per_choice = BTreeMap::new();
        for c in choices {
            per_choice.insert(c.index, c.completion_tokens(encoding.name));
        }
        let completion: u64 = per_choice.values().sum();
        let (prompt, prompt_counted, prompt_error) =
            match request.map(|r| count_prompt(encoding.name, r)) {
                None => (0, false, None),
                Some(Ok(count)) => (count.total, true, None),
                Some(Err(e)) => (0, false, Some(e.to_string())),
            };
        Usage {
            prompt_tokens: prompt,
            completion_tokens: completion,
            total_tokens: prompt + completion,
            source: UsageSource::Estimated,
            estimate: Some(Estimate {
                encoding: encoding.name.as_str().to_string(),
                model,
                model_known: encoding.known,
                prompt_counted,
                prompt_error,
                choices: per_choice,
            }),
            upstreams: Vec::new(),
            details: Map::new(),
        }
    }
}

/// Gives each choice its [`ChoiceUsage`]: the provider's figure for that choice when the
/// stream carried one (`reported`, see [`ReportedUsage::per_choice`]), else the estimate's
/// count when `usage` is an estimate. A reported total shared by several choices (OpenAI with
/// n > 1) is no choice's figure: those choices get `None` here, so that `collect()` never
/// loads a BPE table for a completion whose usage was reported
/// ([`Choice::usage`](crate::Choice::usage) estimates on demand).
pub(crate) fn fill_choice_usage(
    reported: &BTreeMap<u32, u64>,
    choices: &mut [ChoiceOutput],
    usage: Option<&Usage>,
) {
    for c in choices.iter_mut() {
        let estimated = usage
            .and_then(|u| u.estimate.as_ref())
            .and_then(|e| e.choices.get(&c.index));
        c.usage = match (reported.get(&c.index), estimated) {
            (Some(&n), _) => Some(ChoiceUsage {
                completion_tokens: n,
                source: UsageSource::Reported,
            }),
            (None, Some(&n)) => Some(ChoiceUsage {
                completion_tokens: n,
                source: UsageSource::Estimated,
            }),
            (None, None) => None,
        };
    }
}

impl ChoiceOutput {
    /// The choice's completion tokens as the usage estimate counts them (content, reasoning,
    /// refusal, tool calls and the legacy function call), with `encoding`. Blocking: it loads
    /// the tiktoken table the first time and counts on the calling thread.
    ///
    /// ```
    /// # use choicewise_core::{Completions, EncodingName};
    /// # #[tokio::main] async fn main() {
    /// let sse = "data: {\"choices\":[{\"delta\":{\"content\":\"Hello!\"},\"finish_reason\":\"stop\"}]}\n\n";
    /// let completion = Completions::from_reader(sse.as_bytes()).collect().await.unwrap();
    /// assert_eq!(completion.choices[0].completion_tokens(EncodingName::O200kBase), 2);
    /// # }
    /// ```
    pub fn completion_tokens(&self, encoding: EncodingName) -> u64 {
        let m = &self.message;
        fn part(f: &crate::response::FunctionCall) -> ToolCallPart<'_> {
            ToolCallPart {
                name: &f.name,
                arguments: &f.arguments,
            }
        }
        let calls: Vec<ToolCallPart<'_>> = m.tool_calls.iter().map(|t| part(&t.function)).collect();
        count_completion(
            encoding,
            &CompletionParts {
                content: m.content.as_deref(),
                reasoning: m.reasoning_content.as_deref(),
                refusal: m.refusal.as_deref(),
                tool_calls: &calls,
                function_call: m.function_call.as_ref().map(part),
            },
        )
    }
}
