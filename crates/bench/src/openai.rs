//! The "eventsource-stream + async-openai" baseline: what an async-openai user runs today.
//!
//! It reproduces async-openai 0.43's streaming path without its HTTP client
//! (`client::stream_mapped_raw_events`): a spawned task decodes the bytes with
//! `eventsource_stream::EventStream`, stops at `[DONE]`, parses each event's owned `data`
//! into the owned `CreateChatCompletionStreamResponse`, and sends it through an unbounded
//! channel; the application's task then accumulates content and tool-call arguments by
//! index in hash maps (the bookkeeping every caller writes by hand).

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;

use async_openai::types::chat::CreateChatCompletionStreamResponse;
use futures::StreamExt;

use crate::baseline::HandCall;
use crate::r#gen::Generated;

/// What the application accumulated.
#[derive(Debug, Default)]
pub struct OpenAiAccumulated {
    /// Content by choice index.
    pub content: HashMap<u32, String>,
    /// Tool calls by (choice index, tool-call index).
    pub calls: HashMap<(u32, u32), HandCall>,
    /// Choices that finished.
    pub finished: usize,
    /// Whether the usage chunk arrived.
    pub usage: bool,
}

/// Runs the baseline over `reads`.
pub async fn run(reads: Vec<Arc<[u8]>>) -> OpenAiAccumulated {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let bytes = futures::stream::iter(reads.into_iter().map(Ok::<_, Infallible>));
        let mut events = std::pin::pin!(eventsource_stream::EventStream::new(bytes));
        while let Some(event) = events.next().await {
            let event = event.expect("generated streams decode");
            if event.data == "[DONE]" {
                break;
            }
            if event.event == "keepalive" {
                continue;
            }
            let chunk = serde_json::from_str::<CreateChatCompletionStreamResponse>(&event.data)
                .map_err(|e| e.to_string());
            if tx.send(chunk).is_err() {
                break;
            }
        }
    });
    let mut acc = OpenAiAccumulated::default();
    while let Some(chunk) = rx.recv().await {
        let chunk = chunk.expect("async-openai parses the generated chunks");
        acc.usage |= chunk.usage.is_some();
        for choice in chunk.choices {
            if let Some(text) = choice.delta.content {
                acc.content.entry(choice.index).or_default().push_str(&text);
            }
            for call in choice.delta.tool_calls.into_iter().flatten() {
                let entry = acc.calls.entry((choice.index, call.index)).or_default();
                if let Some(id) = call.id {
                    entry.id = id;
                }
                if let Some(f) = call.function {
                    if let Some(name) = f.name {
                        entry.name = name;
                    }
                    if let Some(a) = f.arguments {
                        entry.arguments.push_str(&a);
                    }
                }
            }
            acc.finished += usize::from(choice.finish_reason.is_some());
        }
    }
    acc
}

/// Checks the accumulated result against the generator.
pub fn check(acc: &OpenAiAccumulated, g: &Generated) -> Result<(), String> {
    if acc.finished != g.expected.len() || !acc.usage {
        return Err("async-openai baseline: finishes or usage missing".into());
    }
    for exp in &g.expected {
        let content = acc.content.get(&exp.index).filter(|c| !c.is_empty());
        if content.map(String::as_str) != exp.content.as_deref() {
            return Err(format!(
                "async-openai baseline: choice {} differs",
                exp.index
            ));
        }
        for (k, (id, name, args)) in exp.tool_calls.iter().enumerate() {
            let c = acc.calls.get(&(exp.index, k as u32));
            if !c.is_some_and(|c| c.id == *id && c.name == *name && c.arguments == *args) {
                return Err(format!(
                    "async-openai baseline: call {k} of {} differs",
                    exp.index
                ));
            }
        }
    }
    Ok(())
}
