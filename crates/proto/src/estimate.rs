//! Token estimates of assembled choices, counted with tiktoken (`choicewise-usage`), and each
//! choice's own usage. Blocking: counting runs on a blocking thread once the stream is over,
//! never on the reader's path.

use std::collections::BTreeMap;

use choicewise_usage::{
    CompletionParts, EncodingName, ToolCallPart, count_completion, count_prompt, encoding_for_model,
};
use serde_json::{Map, Value};

use crate::response::ChoiceOutput;
use crate::usage::{Estimate, Usage, UsageSource};

impl Usage {
    /// Counts an estimate of these choices' tokens, with the encoding `model` uses (the
    /// default encoding if it is unknown, said so in [`Estimate::model_known`]), and of the
    /// prompt when `request` (a Chat Completions request body) is given. Blocking: loads the
    /// BPE table on first use and encodes every text.
    ///
    /// ```
    /// # use choicewise_proto::{ChoiceOutput, Message, Usage};
    /// let request = serde_json::json!({"messages": [{"role": "user", "content": "Hi"}]});
    /// let choices = [ChoiceOutput::new(0, Message::assistant("Hello!"))];
    /// let usage = Usage::estimate(Some("gpt-4o".to_string()), Some(&request), &choices);
    /// assert_eq!(usage.completion_tokens, 2);
    /// assert!(usage.estimate.unwrap().prompt_counted);
    /// ```
    pub fn estimate(
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

impl ChoiceOutput {
    /// The choice's completion tokens as the usage estimate counts them (content, reasoning,
    /// refusal, tool calls and the legacy function call), with `encoding`. Blocking: it loads
    /// the tiktoken table the first time and counts on the calling thread.
    ///
    /// ```
    /// # use choicewise_proto::{Demux, EncodingName};
    /// let sse = "data: {\"choices\":[{\"delta\":{\"content\":\"Hello!\"},\"finish_reason\":\"stop\"}]}\n\n";
    /// let mut demux = Demux::new();
    /// demux.feed(sse.as_bytes()).unwrap();
    /// let completion = demux.finish().unwrap();
    /// assert_eq!(completion.choices[0].completion_tokens(EncodingName::O200kBase), 2);
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

    /// The bytes of the texts [`completion_tokens`](Self::completion_tokens) counts: with
    /// [`counts_quickly`](choicewise_usage::counts_quickly), whether counting them is quick
    /// enough for an async runtime's worker.
    ///
    /// ```
    /// # use choicewise_proto::Demux;
    /// let sse = "data: {\"choices\":[{\"delta\":{\"content\":\"Hello!\"},\"finish_reason\":\"stop\"}]}\n\n";
    /// let mut demux = Demux::new();
    /// demux.feed(sse.as_bytes()).unwrap();
    /// let completion = demux.finish().unwrap();
    /// assert_eq!(completion.choices[0].text_bytes(), 6);
    /// ```
    pub fn text_bytes(&self) -> usize {
        let m = &self.message;
        let text = |t: &Option<String>| t.as_ref().map_or(0, String::len);
        let calls: usize = (m.tool_calls.iter().map(|t| &t.function))
            .chain(m.function_call.as_ref())
            .map(|f| f.name.len() + f.arguments.len())
            .sum();
        text(&m.content) + text(&m.reasoning_content) + text(&m.refusal) + calls
    }
}
