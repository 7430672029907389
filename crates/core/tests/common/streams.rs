//! Multi-choice completions for property tests: each choice's updates, the orderly stream,
//! and interleavings of it.

use choicewise_test_support::sse_stream;
use proptest::prelude::*;
use serde_json::{Value, json};

/// One choice's updates, as `choices[]` entries.
pub fn choice_updates(index: u32) -> impl Strategy<Value = Vec<Value>> {
    let text = prop::collection::vec(
        prop_oneof!["[a-z ]{0,6}", "[é—😀\"\\\\\n]{1,3}", Just(String::new())],
        0..6,
    );
    let call = (
        "[a-z_]{1,8}",
        "call_[A-Za-z0-9]{4}",
        prop::collection::vec("[{}\":a-z0-9 ,\\[\\]]{0,5}", 0..4),
    );
    let calls = prop::collection::vec(call, 0..3);
    let finish = prop_oneof![
        Just("stop"),
        Just("length"),
        Just("tool_calls"),
        Just("error")
    ];
    (text, calls, finish).prop_map(move |(text, calls, finish)| {
        let mut out = vec![json!({"index": index, "delta": {"role": "assistant", "content": ""}})];
        for t in text {
            out.push(json!({"index": index, "delta": {"content": t}, "finish_reason": null}));
        }
        for (i, (name, id, args)) in calls.into_iter().enumerate() {
            out.push(json!({"index": index, "delta": {"tool_calls": [
                {"index": i, "id": id, "type": "function", "function": {"name": name, "arguments": ""}}
            ]}}));
            for a in args {
                out.push(json!({"index": index, "delta": {"tool_calls": [
                    {"index": i, "function": {"arguments": a}}
                ]}}));
            }
        }
        out.push(json!({"index": index, "delta": {}, "finish_reason": finish}));
        out
    })
}

pub fn completion() -> impl Strategy<Value = Vec<Vec<Value>>> {
    (1u32..=4).prop_flat_map(|n| (0..n).map(choice_updates).collect::<Vec<_>>())
}

/// The stream of these chunks (each the `choices` of one chunk), ending with `[DONE]`.
pub fn sse(chunks: &[Vec<Value>]) -> Vec<u8> {
    sse_stream(chunks.iter().enumerate().map(|(i, entries)| {
        json!({"id": "chatcmpl-x", "object": "chat.completion.chunk", "created": 1,
               "model": "m", "choices": entries, "seq": i})
    }))
    .into_bytes()
}

/// Each choice's updates in one run, one per chunk.
pub fn orderly(choices: &[Vec<Value>]) -> Vec<Vec<Value>> {
    choices.iter().flatten().map(|e| vec![e.clone()]).collect()
}

/// Interleaves the choices' updates following `picks` (which choice goes next) and groups
/// consecutive updates of different choices into one chunk where `group` says so.
pub fn interleave(choices: &[Vec<Value>], picks: &[usize], group: &[bool]) -> Vec<Vec<Value>> {
    let mut cursors = vec![0usize; choices.len()];
    let mut chunks: Vec<Vec<Value>> = Vec::new();
    let total: usize = choices.iter().map(Vec::len).sum();
    for k in 0..total {
        let mut c = picks.get(k).copied().unwrap_or(0) % choices.len();
        while cursors[c] == choices[c].len() {
            c = (c + 1) % choices.len();
        }
        let entry = choices[c][cursors[c]].clone();
        cursors[c] += 1;
        let entry_index = entry["index"].clone();
        let joins = group.get(k).copied().unwrap_or(false)
            && chunks
                .last()
                .is_some_and(|last| last.iter().all(|e| e["index"] != entry_index));
        match chunks.last_mut() {
            Some(last) if joins => last.push(entry),
            _ => chunks.push(vec![entry]),
        }
    }
    chunks
}
