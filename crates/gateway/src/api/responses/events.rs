//! The Responses stream's events that repeat a long text (a part's, a call's arguments) or
//! borrow an item, as typed values: written field by field in the order a JSON object of them
//! writes them (by name), their texts as marks ([`super::texts`]).

use serde::Serialize;
use serde_json::{Value, json};

use super::texts::Pieces;

#[derive(Debug)]
pub(super) struct Part {
    pub(super) refusal: bool,
    pub(super) text: Pieces,
}

impl Part {
    /// A part as the output lists it, of this text (or its mark).
    pub(super) fn value(refusal: bool, text: Value) -> Value {
        match refusal {
            true => {
                let mut part = json!({"type": "refusal", "refusal": null});
                part["refusal"] = text;
                part
            }
            false => {
                let mut part = json!({"type": "output_text", "text": null, "annotations": [],
                                      "logprobs": []});
                part["text"] = text;
                part
            }
        }
    }
}

/// `response.output_text.done` or `response.refusal.done`, its fields in the order a JSON
/// object of them writes them (by name), with the part's text (its mark).
#[derive(Serialize)]
pub(super) struct TextDone<'a> {
    pub(super) content_index: usize,
    pub(super) item_id: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) logprobs: Option<[u8; 0]>,
    pub(super) output_index: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) refusal: Option<&'a Value>,
    pub(super) sequence_number: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) text: Option<&'a Value>,
    #[serde(rename = "type")]
    pub(super) kind: &'static str,
}

/// `response.content_part.done`, borrowing its part.
#[derive(Serialize)]
pub(super) struct PartDone<'a> {
    pub(super) content_index: usize,
    pub(super) item_id: &'a str,
    pub(super) output_index: usize,
    pub(super) part: &'a Value,
    pub(super) sequence_number: u64,
    #[serde(rename = "type")]
    pub(super) kind: &'static str,
}

/// A text delta event (`response.output_text.delta`, `response.refusal.delta`,
/// `response.reasoning_summary_text.delta`, `response.function_call_arguments.delta`).
#[derive(Serialize)]
pub(super) struct DeltaEvent<'a> {
    #[serde(rename = "type")]
    pub(super) kind: &'static str,
    pub(super) sequence_number: u64,
    pub(super) item_id: &'a str,
    pub(super) output_index: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) content_index: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) summary_index: Option<usize>,
    pub(super) delta: &'a str,
    /// `[]` on output text deltas.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) logprobs: Option<[u8; 0]>,
}

/// `response.function_call_arguments.done`, its fields in the order a JSON object of them
/// writes them (by name), with the call's arguments (their mark).
#[derive(Serialize)]
pub(super) struct ArgumentsDone<'a> {
    pub(super) arguments: &'a Value,
    pub(super) item_id: &'a str,
    pub(super) name: &'a str,
    pub(super) output_index: usize,
    pub(super) sequence_number: u64,
    #[serde(rename = "type")]
    pub(super) kind: &'static str,
}

/// `response.output_item.done`, borrowing its item.
#[derive(Serialize)]
pub(super) struct ItemDone<'a> {
    pub(super) item: &'a Value,
    pub(super) output_index: usize,
    pub(super) sequence_number: u64,
    #[serde(rename = "type")]
    pub(super) kind: &'static str,
}
