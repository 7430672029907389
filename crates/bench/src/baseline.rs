//! The baselines the library is measured against, on the same reads.
//!
//! - [`borrowed_parse`]: `choicewise_sse::Framer` framing plus a borrowed
//!   `serde_json::from_str::<ChatCompletionChunk>` of every chunk, and nothing else: the
//!   practical limit of any demultiplexer built on the same framer and wire types.
//! - [`HandWritten`]: the same framing and parse, plus the bookkeeping every caller writes
//!   by hand (content and tool-call arguments accumulated per index in hash maps), in one
//!   task, no actors, no per-choice streams.

use std::collections::HashMap;
use std::hint::black_box;
use std::ops::ControlFlow;

use choicewise::wire::{Arguments, ChatCompletionChunk};
use choicewise_sse::Framer;

/// Frames and parses every chunk of `reads`; returns the number of choice updates seen.
pub fn borrowed_parse<R: AsRef<[u8]>>(reads: &[R]) -> usize {
    let mut framer = Framer::new();
    let mut updates = 0;
    'reads: for read in reads {
        let fed = framer
            .feed(read.as_ref(), |ev| {
                if ev.data == "[DONE]" {
                    return ControlFlow::Break(());
                }
                let chunk: ChatCompletionChunk<'_> =
                    serde_json::from_str(ev.data).expect("generated chunks parse");
                updates += chunk.choices.len();
                black_box(&chunk);
                ControlFlow::Continue(())
            })
            .expect("generated streams frame");
        if let choicewise_sse::Feed::Stopped { .. } = fed {
            break 'reads;
        }
    }
    updates
}

/// One tool call as the hand-written loop accumulates it.
#[derive(Debug, Default, Clone)]
pub struct HandCall {
    /// The call id.
    pub id: String,
    /// The function name.
    pub name: String,
    /// The arguments so far.
    pub arguments: String,
}

/// The hand-written accumulator: what an application without the library keeps.
#[derive(Debug, Default)]
pub struct HandWritten {
    framer: Framer,
    /// Content by choice index.
    pub content: HashMap<u32, String>,
    /// Tool calls by (choice index, tool-call index).
    pub calls: HashMap<(u32, u32), HandCall>,
    /// Finish reason by choice index.
    pub finish: HashMap<u32, String>,
    /// Whether `[DONE]` was seen.
    pub done: bool,
}

impl HandWritten {
    /// Applies one parsed chunk.
    pub fn apply(&mut self, chunk: ChatCompletionChunk<'_>) {
        for choice in chunk.choices {
            let index = choice.index.unwrap_or(0) as u32;
            if let Some(delta) = choice.delta {
                if let Some(text) = delta.content {
                    self.content.entry(index).or_default().push_str(&text);
                }
                for call in delta.tool_calls.into_iter().flatten() {
                    let entry = self
                        .calls
                        .entry((index, call.index.unwrap_or(0) as u32))
                        .or_default();
                    if let Some(id) = call.id {
                        entry.id = id.into_owned();
                    }
                    if let Some(f) = call.function {
                        if let Some(name) = f.name {
                            entry.name = name.into_owned();
                        }
                        match f.arguments {
                            Some(Arguments::Text(a)) => entry.arguments.push_str(&a),
                            Some(Arguments::Json(a)) => entry.arguments.push_str(&a),
                            None => {}
                        }
                    }
                }
            }
            if let Some(reason) = choice.finish_reason {
                self.finish.insert(index, reason.into_owned());
            }
        }
    }

    /// Frames, parses and applies one read.
    pub fn feed(&mut self, read: &[u8]) {
        if self.done {
            return;
        }
        let mut framer = std::mem::take(&mut self.framer);
        let fed = framer
            .feed(read, |ev| {
                if ev.data == "[DONE]" {
                    return ControlFlow::Break(());
                }
                let chunk: ChatCompletionChunk<'_> =
                    serde_json::from_str(ev.data).expect("generated chunks parse");
                self.apply(chunk);
                ControlFlow::Continue(())
            })
            .expect("generated streams frame");
        self.framer = framer;
        if let choicewise_sse::Feed::Stopped { .. } = fed {
            self.done = true;
        }
    }
}
