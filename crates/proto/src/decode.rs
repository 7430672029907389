//! The choice's share of the work: the typed parse of its raw updates. Pure and synchronous.
//!
//! The reader hands each choice its updates as raw JSON (see `split`); the choice's actor
//! parses them here, on whichever core it runs, into [`ChoiceUpdate`]s for the merge. A
//! malformed update is that choice's error ([`ErrorDetail::InvalidUpdate`](crate::ErrorDetail::InvalidUpdate),
//! [`ErrorDetail::InvalidToolCall`](crate::ErrorDetail::InvalidToolCall)), never the stream's.

use std::borrow::Cow;
use std::fmt;

use serde::Deserialize;
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::value::RawValue;

use crate::error::{Error, ErrorDetail};
use crate::event::Text;
use crate::logprobs::{Logprobs, LogprobsKept, confidences_of, nests_within};
use crate::merge::{CallFragment, ChoiceUpdate, ToolFragment, UpdateLogprobs, text};
use crate::split::{Batch, Body, RawUpdate};
use crate::wire::{self, ChunkChoice, FunctionCallDelta, ToolCallDelta};

mod repeat;

pub(crate) use repeat::Repeats;

/// A batch's parse error: the error, and how many updates followed the malformed one (not
/// parsed: the choice has failed) with the first one's line.
#[derive(Debug)]
pub(crate) struct DecodeError {
    pub error: Error,
    pub after: u64,
    pub after_line: u64,
}

/// Parses every update of `batch` into `out`, in order, and empties the batch, keeping its
/// buffers for the next one (see [`BatchPool`](crate::split::BatchPool)). On error, `out` holds the updates
/// before the malformed one. Log-probabilities are kept as `kept` says. An element that
/// repeats the one `repeats` kept but for its text is not parsed again ([`Repeats`]).
pub(crate) fn decode_batch(
    index: u32,
    kept: LogprobsKept,
    batch: &mut Batch,
    repeats: &mut Repeats,
    out: &mut Vec<ChoiceUpdate>,
) -> Result<(), DecodeError> {
    out.reserve(batch.updates.len());
    let Batch { text, updates } = batch;
    let total = updates.len() as u64;
    let mut updates = updates.drain(..).enumerate();
    let mut result = Ok(());
    while let Some((k, RawUpdate { line, offset, body })) = updates.next() {
        let decoded = match body {
            Body::Json(range) => {
                // Parsed where it will stay: an update is some 200 bytes, moved at every layer
                // it passes through.
                out.push(ChoiceUpdate {
                    line,
                    offset,
                    ..ChoiceUpdate::default()
                });
                let update = out.last_mut().expect("an update was just pushed");
                let element = &text[range];
                if repeats.fill(element, kept, update) {
                    Ok(())
                } else {
                    let decoded = decode_into(element, index, kept, update);
                    match decoded {
                        Ok(()) => repeats.keep(element, kept, update),
                        Err(_) => drop(out.pop()),
                    }
                    decoded
                }
            }
            Body::Parsed(choice) => {
                convert(*choice, index, kept, line, offset).map(|u| out.push(u))
            }
            Body::Update(update) => {
                out.push(*update);
                Ok(())
            }
        };
        if let Err(error) = decoded {
            result = Err(DecodeError {
                error,
                after: total - k as u64 - 1,
                after_line: updates.next().map_or(0, |(_, u)| u.line),
            });
            break;
        }
    }
    // The rest of a failed batch is dropped with the drain (counted in `after`).
    drop(updates);
    text.clear();
    result
}

/// serde_json's message without its " at line L column C": the position is within the
/// choice's rebuilt fields, not the stream, so the error names the stream line instead.
fn without_position(e: &serde_json::Error) -> String {
    let message = e.to_string();
    match message.rfind(" at line ") {
        Some(at) => message[..at].to_string(),
        None => message,
    }
}

fn non_empty(s: Option<Cow<'_, str>>) -> Option<Text> {
    s.filter(|s| !s.is_empty()).map(|s| text(&s))
}

fn fragment(f: Option<FunctionCallDelta<'_>>) -> CallFragment {
    let Some(f) = f else {
        return CallFragment::default();
    };
    let (arguments, arguments_not_string) = match f.arguments {
        None => (None, false),
        Some(crate::wire::Arguments::Text(t)) => (Some(text(&t)), false),
        Some(crate::wire::Arguments::Json(j)) => (Some(text(&j)), true),
    };
    CallFragment {
        name: non_empty(f.name),
        arguments,
        arguments_not_string,
    }
}

/// The tool-call fragments of an update: empty ids, names and types dropped; an index that
/// is no `u32` is the choice's [`ErrorDetail::InvalidToolCall`].
fn tool_fragments(
    calls: Vec<ToolCallDelta<'_>>,
    index: u32,
    update: &mut ChoiceUpdate,
) -> Result<(), Error> {
    update.tool_calls.reserve_exact(calls.len());
    for call in calls {
        let call_index = match call.index {
            None => None,
            Some(i) => Some(u32::try_from(i).map_err(|_| ErrorDetail::InvalidToolCall {
                choice: index,
                what: format!("tool call index {i} is out of range (0..=4294967295)"),
                line: update.line,
                offset: update.offset,
            })?),
        };
        // A custom tool's call: its name, and its input as the call's arguments (free text).
        let function = match call.custom {
            Some(custom) => CallFragment {
                name: non_empty(custom.name),
                arguments: custom.input.map(|t| text(&t)),
                arguments_not_string: false,
            },
            None => fragment(call.function),
        };
        update.tool_calls.push(ToolFragment {
            index: call_index,
            id: non_empty(call.id),
            kind: non_empty(call.kind),
            function,
        });
    }
    Ok(())
}

/// One parsed chunk choice as an update: empty ids, names, types and roles dropped,
/// `finish_reason: ""` as none, every text one shared [`Text`].
pub(crate) fn convert(
    choice: ChunkChoice<'_>,
    index: u32,
    kept: LogprobsKept,
    line: u64,
    offset: u64,
) -> Result<ChoiceUpdate, Error> {
    let logprobs = choice.logprobs.filter(|v| !v.is_null());
    let mut update = ChoiceUpdate {
        line,
        offset,
        finish_reason: non_empty(choice.finish_reason),
        logprobs: logprobs
            .and_then(|v| serde_json::value::to_raw_value(&v).ok())
            .and_then(|raw| keep(&raw, kept)),
        content_filter_results: choice.content_filter_results.filter(|v| !v.is_null()),
        ..ChoiceUpdate::default()
    };
    let Some(delta) = choice.delta else {
        return Ok(update);
    };
    update.role = non_empty(delta.role);
    update.content = delta.content.map(|t| text(&t));
    update.refusal = delta.refusal.map(|t| text(&t));
    update.reasoning = delta
        .reasoning_content
        .or(delta.reasoning)
        .map(|t| text(&t));
    if let Some(f) = delta.function_call {
        update.function_call = Some(Box::new(fragment(Some(*f))));
    }
    if let Some(calls) = delta.tool_calls {
        tool_fragments(calls, index, &mut update)?;
    }
    Ok(update)
}

/// Parses one element of `choices` (a JSON object) into `update`, whose line and offset are
/// set: what `serde_json::from_str::<ChunkChoice>` and then [`convert`] give, without the
/// intermediate wire values. Each field goes through the same deserializer as
/// [`ChunkChoice`]'s, so the values, the checks (duplicate fields among them) and the error
/// messages are the same (a property test compares the two), but the texts are written
/// straight into the update instead of the ~200-byte `ChunkChoice` and `Delta` being moved
/// through serde's `Option`, `Result` and object layers, then into [`convert`]: at n = 16
/// those moves were 7.8% of all samples.
fn decode_into(
    json: &str,
    index: u32,
    kept: LogprobsKept,
    update: &mut ChoiceUpdate,
) -> Result<(), Error> {
    let mut de = serde_json::Deserializer::from_str(json);
    let calls = ChoiceSeed(update, kept)
        .deserialize(&mut de)
        .and_then(|calls| de.end().map(|()| calls))
        .map_err(|e| ErrorDetail::InvalidUpdate {
            choice: index,
            line: update.line,
            offset: update.offset,
            message: without_position(&e),
        })?;
    match calls {
        Some(calls) => tool_fragments(calls, index, update),
        None => Ok(()),
    }
}

/// The tool calls of a delta, converted once the whole element has parsed (so that a
/// malformed element is reported as that, whatever its tool-call indexes).
type Calls<'de> = Option<Vec<ToolCallDelta<'de>>>;

/// Deserializes its value with [`wire::cow_str`], as the wire types' text fields do.
#[derive(Deserialize)]
#[serde(transparent)]
struct Str<'a>(#[serde(borrow, deserialize_with = "wire::cow_str")] Option<Cow<'a, str>>);

/// A delta's `function_call`, as [`Delta::function_call`](wire::Delta::function_call) reads it.
#[derive(Deserialize)]
#[serde(transparent)]
struct FunctionCall<'a>(
    #[serde(borrow, deserialize_with = "wire::opt_object")] Option<FunctionCallDelta<'a>>,
);

/// A delta's `tool_calls`, as [`Delta::tool_calls`](wire::Delta::tool_calls) reads them.
#[derive(Deserialize)]
#[serde(transparent)]
struct ToolCalls<'a>(#[serde(borrow, deserialize_with = "wire::opt_objects")] Calls<'a>);

/// The fields of [`ChunkChoice`], in the order of [`CHOICE_FIELDS`].
#[derive(Clone, Copy, PartialEq, Deserialize)]
#[serde(field_identifier, rename_all = "snake_case")]
enum ChoiceField {
    Index,
    Delta,
    FinishReason,
    Logprobs,
    ContentFilterResults,
    /// A choicewise gateway's own field on a choice: `{"error": "why"}` on a failed one.
    Choicewise,
    #[serde(other)]
    Other,
}

/// The names of [`ChoiceField`]'s fields, by discriminant.
const CHOICE_FIELDS: &[&str] = &[
    "index",
    "delta",
    "finish_reason",
    "logprobs",
    "content_filter_results",
    "choicewise",
];

/// The fields of [`Delta`](wire::Delta), in the order of [`DELTA_FIELDS`].
#[derive(Clone, Copy, PartialEq, Deserialize)]
#[serde(field_identifier, rename_all = "snake_case")]
enum DeltaField {
    Role,
    Content,
    Refusal,
    ReasoningContent,
    Reasoning,
    FunctionCall,
    ToolCalls,
    #[serde(other)]
    Other,
}

/// The names of [`DeltaField`]'s fields, by discriminant.
const DELTA_FIELDS: &[&str] = &[
    "role",
    "content",
    "refusal",
    "reasoning_content",
    "reasoning",
    "function_call",
    "tool_calls",
];

/// Fields seen so far, for the duplicate check serde's derived structs make.
#[derive(Default)]
struct Seen(u16);

impl Seen {
    /// Marks field `field` (a discriminant, naming `names[field]`) seen; a second time is
    /// serde's `duplicate field` error.
    fn first<E: serde::de::Error>(
        &mut self,
        field: usize,
        names: &'static [&'static str],
    ) -> Result<(), E> {
        if self.0 & (1 << field) != 0 {
            return Err(E::duplicate_field(names[field]));
        }
        self.0 |= 1 << field;
        Ok(())
    }
}

/// An update's log-probabilities from their JSON text (not `null`), as `kept` says: the
/// text, or each token's confidence (tokens without one left out), or nothing.
fn keep(raw: &RawValue, kept: LogprobsKept) -> Option<UpdateLogprobs> {
    match kept {
        LogprobsKept::Raw => Some(UpdateLogprobs::Raw(Logprobs::from_raw(raw))),
        LogprobsKept::Confidence(measure) => {
            let mut confidences = Vec::new();
            confidences_of(raw.get(), measure, |c| confidences.extend(c));
            Some(UpdateLogprobs::Confidence(confidences.into_boxed_slice()))
        }
        LogprobsKept::Nothing => None,
    }
}

/// How deep log-probabilities kept as text may nest: as deep as `serde_json` parses a value
/// inside an element of `choices`, so that whoever parses the text later can.
const LOGPROBS_DEPTH: usize = 127;

/// An element of `choices`, parsed into the update it borrows; log-probabilities kept as the
/// second field says.
struct ChoiceSeed<'u>(&'u mut ChoiceUpdate, LogprobsKept);

impl<'de> DeserializeSeed<'de> for ChoiceSeed<'_> {
    type Value = Calls<'de>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Calls<'de>, D::Error> {
        d.deserialize_struct("ChunkChoice", CHOICE_FIELDS, self)
    }
}

impl<'de> Visitor<'de> for ChoiceSeed<'_> {
    type Value = Calls<'de>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("struct ChunkChoice")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Calls<'de>, A::Error> {
        let (update, kept) = (self.0, self.1);
        let mut seen = Seen::default();
        let mut calls = None;
        while let Some(field) = map.next_key::<ChoiceField>()? {
            if field != ChoiceField::Other {
                seen.first(field as usize, CHOICE_FIELDS)?;
            }
            match field {
                ChoiceField::Index => {
                    // The reader routed the update by it; only its type is checked here.
                    map.next_value::<Option<i64>>()?;
                }
                ChoiceField::Delta => {
                    calls = map.next_value_seed(DeltaSeed(&mut *update))?;
                }
                ChoiceField::FinishReason => {
                    update.finish_reason = non_empty(map.next_value::<Str<'de>>()?.0);
                }
                ChoiceField::Logprobs if kept == LogprobsKept::Nothing => {
                    map.next_value::<IgnoredAny>()?;
                    update.logprobs = None;
                }
                ChoiceField::Logprobs => {
                    // Kept as text (or read for the numbers only): never a tree.
                    let raw = map.next_value::<&'de RawValue>()?;
                    if kept == LogprobsKept::Raw && !nests_within(raw.get(), LOGPROBS_DEPTH) {
                        return Err(serde::de::Error::custom(
                            "logprobs: recursion limit exceeded",
                        ));
                    }
                    update.logprobs = match raw.get() {
                        "null" => None,
                        _ => keep(raw, kept),
                    };
                }
                ChoiceField::ContentFilterResults => {
                    // A tree within its budget (else left out, as if not sent).
                    let raw = map.next_value::<&'de RawValue>()?;
                    update.content_filter_results = (raw.get() != "null")
                        .then(|| crate::tree::bounded_or_none(raw.get()))
                        .flatten()
                        .map(Box::new);
                }
                ChoiceField::Choicewise => {
                    // Only its `error` string is read: no tree.
                    #[derive(serde::Deserialize)]
                    struct Marker<'a> {
                        #[serde(borrow)]
                        error: Option<Cow<'a, str>>,
                    }
                    let raw = map.next_value::<&'de RawValue>()?;
                    update.gateway_error = serde_json::from_str::<Option<Marker<'_>>>(raw.get())
                        .ok()
                        .flatten()
                        .and_then(|m| m.error)
                        .map(|e| Box::from(&*e));
                }
                ChoiceField::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(calls)
    }
}

/// A choice's `delta`: `null` (nothing) or an object, parsed into the update it borrows.
struct DeltaSeed<'u>(&'u mut ChoiceUpdate);

impl<'de> DeserializeSeed<'de> for DeltaSeed<'_> {
    type Value = Calls<'de>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Calls<'de>, D::Error> {
        d.deserialize_option(self)
    }
}

impl<'de> Visitor<'de> for DeltaSeed<'_> {
    type Value = Calls<'de>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("option")
    }

    fn visit_none<E: serde::de::Error>(self) -> Result<Calls<'de>, E> {
        Ok(None)
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<Calls<'de>, E> {
        Ok(None)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Calls<'de>, D::Error> {
        d.deserialize_map(DeltaFields(self.0))
    }
}

/// The fields of a delta object.
struct DeltaFields<'u>(&'u mut ChoiceUpdate);

impl<'de> Visitor<'de> for DeltaFields<'_> {
    type Value = Calls<'de>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        // As `wire`'s object check says it.
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Calls<'de>, A::Error> {
        let update = self.0;
        let mut seen = Seen::default();
        let (mut reasoning_content, mut reasoning) = (None, None);
        let mut calls = None;
        let text_of = |map: &mut A| -> Result<Option<Text>, A::Error> {
            Ok(map.next_value::<Str<'de>>()?.0.map(|t| text(&t)))
        };
        while let Some(field) = map.next_key::<DeltaField>()? {
            if field != DeltaField::Other {
                seen.first(field as usize, DELTA_FIELDS)?;
            }
            match field {
                DeltaField::Role => {
                    update.role = non_empty(map.next_value::<Str<'de>>()?.0);
                }
                DeltaField::Content => {
                    update.content = text_of(&mut map)?;
                }
                DeltaField::Refusal => {
                    update.refusal = text_of(&mut map)?;
                }
                DeltaField::ReasoningContent => {
                    reasoning_content = map.next_value::<Str<'de>>()?.0;
                }
                DeltaField::Reasoning => {
                    reasoning = map.next_value::<Str<'de>>()?.0;
                }
                DeltaField::FunctionCall => {
                    update.function_call = map
                        .next_value::<FunctionCall<'de>>()?
                        .0
                        .map(|f| Box::new(fragment(Some(f))));
                }
                DeltaField::ToolCalls => {
                    calls = map.next_value::<ToolCalls<'de>>()?.0;
                }
                DeltaField::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        // Either key, `reasoning_content` first, as `convert` reads them.
        update.reasoning = reasoning_content.or(reasoning).map(|t| text(&t));
        Ok(calls)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Measure;
    use proptest::prelude::*;

    /// The update as the wire types give it: `ChunkChoice` parsed whole, then converted.
    fn reference(json: &str, index: u32) -> Result<ChoiceUpdate, Error> {
        match serde_json::from_str::<ChunkChoice<'_>>(json) {
            Ok(choice) => convert(choice, index, LogprobsKept::Raw, 7, 70),
            Err(e) => Err(ErrorDetail::InvalidUpdate {
                choice: index,
                line: 7,
                offset: 70,
                message: without_position(&e),
            }
            .into()),
        }
    }

    fn in_place(json: &str, index: u32) -> Result<ChoiceUpdate, Error> {
        let mut update = ChoiceUpdate {
            line: 7,
            offset: 70,
            ..ChoiceUpdate::default()
        };
        decode_into(json, index, LogprobsKept::Raw, &mut update).map(|()| update)
    }

    fn assert_same(json: &str) {
        match (in_place(json, 3), reference(json, 3)) {
            (Ok(a), Ok(b)) => assert_eq!(a, b, "{json}"),
            (Err(a), Err(b)) => assert_eq!(format!("{a:?}"), format!("{b:?}"), "{json}"),
            (a, b) => panic!("{json}: in place {a:?}, reference {b:?}"),
        }
    }

    /// A JSON object of these members, in this order (duplicates allowed).
    fn object(members: Vec<(&'static str, String)>) -> String {
        let members: Vec<String> = members
            .iter()
            .map(|(k, v)| format!("\"{k}\":{v}"))
            .collect();
        format!("{{{}}}", members.join(","))
    }

    /// Any JSON value but a text: what a text field holds when it is malformed.
    fn wrong() -> impl Strategy<Value = String> {
        prop::sample::select(vec![
            "5",
            "-4",
            "1.5",
            "true",
            "[]",
            "[1]",
            "{}",
            r#"{"a":1}"#,
        ])
        .prop_map(str::to_owned)
    }

    /// A text field's value: mostly texts (with and without escapes) or null, now and then
    /// another type.
    fn text_value() -> impl Strategy<Value = String> {
        let texts = prop::sample::select(vec![
            "null",
            r#""""#,
            r#""x""#,
            r#""y z""#,
            r#""a\u0062""#,
            r#""é\n""#,
        ])
        .prop_map(str::to_owned);
        prop_oneof![12 => texts, 1 => wrong()]
    }

    fn function() -> impl Strategy<Value = String> {
        let key = prop::sample::select(vec!["name", "arguments", "other"]);
        let arguments = prop_oneof![text_value(), Just(r#"{"a":[1,{"b":null}]}"#.to_owned())];
        let member = prop_oneof![
            (key, text_value()),
            arguments.prop_map(|v| ("arguments", v)),
        ];
        prop_oneof![
            8 => prop::collection::vec(member, 0..4).prop_map(object),
            1 => text_value(),
        ]
    }

    fn tool_calls() -> impl Strategy<Value = String> {
        let index = prop::sample::select(vec!["0", "1", "2", "-4", "4294967296", "null", r#""a""#])
            .prop_map(str::to_owned);
        let member = prop_oneof![
            index.prop_map(|v| ("index", v)),
            text_value().prop_map(|v| ("id", v)),
            text_value().prop_map(|v| ("type", v)),
            function().prop_map(|v| ("function", v)),
        ];
        let call = prop::collection::vec(member, 0..5).prop_map(object);
        prop_oneof![
            8 => prop::collection::vec(call, 0..3)
                .prop_map(|calls| format!("[{}]", calls.join(","))),
            1 => text_value(),
        ]
    }

    fn delta() -> impl Strategy<Value = String> {
        let text = prop::sample::select(vec![
            "role",
            "content",
            "refusal",
            "reasoning_content",
            "reasoning",
            "extra",
            "con\\u0074ent",
        ]);
        let member = prop_oneof![
            6 => (text, text_value()),
            1 => function().prop_map(|v| ("function_call", v)),
            1 => tool_calls().prop_map(|v| ("tool_calls", v)),
        ];
        prop_oneof![
            10 => prop::collection::vec(member, 0..6).prop_map(object),
            1 => text_value(),
        ]
    }

    fn element() -> impl Strategy<Value = String> {
        let text = prop::sample::select(vec!["finish_reason", "other", "fin\\u0069sh_reason"]);
        let annotation = prop::sample::select(vec!["logprobs", "content_filter_results"]);
        let annotation_value = prop_oneof![
            Just("null".to_owned()),
            Just(r#"{"content":[{"token":"a"}]}"#.to_owned()),
            wrong(),
        ];
        let index = prop::sample::select(vec!["0", "3", "null", r#""a""#]).prop_map(str::to_owned);
        let member = prop_oneof![
            2 => (text, text_value()),
            1 => (annotation, annotation_value),
            1 => index.prop_map(|v| ("index", v)),
            4 => delta().prop_map(|v| ("delta", v)),
        ];
        prop::collection::vec(member, 0..5).prop_map(object)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(3000))]

        /// The in-place parse is the wire types' parse and `convert`: the same update, or
        /// the same error, on valid and malformed elements alike.
        #[test]
        fn parsing_in_place_equals_the_wire_types_then_convert(json in element()) {
            assert_same(&json);
        }
    }

    #[test]
    fn parsing_in_place_equals_the_wire_types_on_edge_cases() {
        for json in [
            r#"{"delta":{"content":"a","content":"b"}}"#,
            r#"{"delta":{"content":"a"},"delta":null}"#,
            r#"{"delta":{"reasoning":"r","reasoning_content":"rc"}}"#,
            r#"{"delta":{"reasoning":"r","reasoning_content":null}}"#,
            r#"{"delta":{"role":"","content":""},"finish_reason":""}"#,
            r#"{"delta":{"function_call":{"name":"f","arguments":{"a":[1,2]}}}}"#,
            r#"{"delta":{"tool_calls":[{"index":-4}],"content":5}}"#,
            r#"{"delta":{"tool_calls":[{"index":-4}]}}"#,
            r#"{"delta":{"tool_calls":null}}"#,
            r#"{"delta":[1]}"#,
            r#"{"logprobs":null,"content_filter_results":{"hate":{"filtered":false}}}"#,
            r#"{"index":"a"}"#,
            r#"{"index":0} x"#,
            r#"{"index":0,}"#,
            r#"{"delta":{"content":"unterminated}"#,
        ] {
            assert_same(json);
        }
    }

    pub(super) fn batch(jsons: &[&str]) -> Batch {
        let mut b = Batch::default();
        for (k, j) in jsons.iter().enumerate() {
            let start = b.text.len();
            b.text.push_str(j);
            b.updates.push(RawUpdate {
                line: 10 + k as u64,
                offset: 100 * k as u64,
                body: Body::Json(start..b.text.len()),
            });
        }
        b
    }

    #[test]
    fn parses_a_batch_in_order() {
        let mut out = Vec::new();
        decode_batch(3, LogprobsKept::Raw,
            &mut batch(&[
                r#"{"delta":{"role":"assistant","content":"a"}}"#,
                r#"{"delta":{"role":"","tool_calls":[{"index":0,"id":"","function":{"name":"","arguments":""}}]},"finish_reason":""}"#,
                r#"{"delta":{"content":"b"},"finish_reason":"stop"}"#,
            ]),
            &mut Repeats::default(),
            &mut out,
        )
        .unwrap();
        assert_eq!(out.len(), 3);
        assert_eq!(out[0].content.as_deref(), Some("a"));
        assert_eq!(out[1].role, None);
        assert_eq!(out[1].finish_reason, None);
        assert_eq!(out[1].tool_calls[0].id, None);
        assert_eq!(out[1].tool_calls[0].function.name, None);
        assert_eq!((out[2].line, out[2].offset), (12, 200));
        assert_eq!(out[2].finish_reason.as_deref(), Some("stop"));
    }

    #[test]
    fn logprobs_are_kept_as_text_as_numbers_or_not_at_all() {
        let lp = r#"{"content": [{"token": "a", "logprob": -0.5, "bytes": [97],
            "top_logprobs": [{"token": "a", "logprob": -0.5}, {"token": "b", "logprob": -1.5}]},
            {"token": "c", "top_logprobs": []}]}"#;
        let jsons = [
            format!(r#"{{"delta":{{"content":"a"}},"logprobs":{lp}}}"#),
            r#"{"delta":{"content":"b"},"logprobs":null}"#.to_string(),
        ];
        let jsons: Vec<&str> = jsons.iter().map(String::as_str).collect();
        let decoded = |kept| {
            let mut out = Vec::new();
            decode_batch(
                0,
                kept,
                &mut batch(&jsons),
                &mut Repeats::default(),
                &mut out,
            )
            .unwrap();
            out.into_iter().map(|u| u.logprobs).collect::<Vec<_>>()
        };
        // As text: verbatim, the spaces and line breaks as sent; `null` is none.
        let raw = decoded(LogprobsKept::Raw);
        match &raw[0] {
            Some(UpdateLogprobs::Raw(kept)) => assert_eq!(kept.json(), lp),
            other => panic!("{other:?}"),
        }
        assert_eq!(raw[1], None);
        // As numbers: each token's confidence, those without one left out.
        assert_eq!(
            decoded(LogprobsKept::Confidence(Measure::TopK)),
            [Some(UpdateLogprobs::Confidence(Box::new([1.0]))), None]
        );
        assert_eq!(decoded(LogprobsKept::Nothing), [None, None]);
        // The wire types' path (a parsed chunk) keeps the same.
        let parsed: ChunkChoice<'_> = serde_json::from_str(jsons[0]).unwrap();
        match convert(parsed, 0, LogprobsKept::Raw, 1, 1)
            .unwrap()
            .logprobs
        {
            Some(UpdateLogprobs::Raw(kept)) => {
                assert_eq!(
                    kept.to_value(),
                    serde_json::from_str::<serde_json::Value>(lp).unwrap()
                )
            }
            other => panic!("{other:?}"),
        }
        let parsed: ChunkChoice<'_> = serde_json::from_str(jsons[0]).unwrap();
        assert_eq!(
            convert(parsed, 0, LogprobsKept::Confidence(Measure::TopK), 1, 1)
                .unwrap()
                .logprobs,
            Some(UpdateLogprobs::Confidence(Box::new([1.0])))
        );
    }

    #[test]
    fn logprobs_too_deep_to_parse_later_fail_the_update_unless_dropped() {
        let deep = "[".repeat(200) + &"]".repeat(200);
        let json = format!(r#"{{"delta":{{}},"logprobs":{deep}}}"#);
        let e = decode_batch(
            0,
            LogprobsKept::Raw,
            &mut batch(&[&json]),
            &mut Repeats::default(),
            &mut Vec::new(),
        )
        .unwrap_err()
        .error;
        assert!(e.to_string().contains("recursion limit"), "{e}");
        for kept in [
            LogprobsKept::Confidence(Measure::TopK),
            LogprobsKept::Nothing,
        ] {
            decode_batch(
                0,
                kept,
                &mut batch(&[&json]),
                &mut Repeats::default(),
                &mut Vec::new(),
            )
            .unwrap();
        }
        let fine = format!(r#"{{"logprobs":{}}}"#, "[".repeat(120) + &"]".repeat(120));
        decode_batch(
            0,
            LogprobsKept::Raw,
            &mut batch(&[&fine]),
            &mut Repeats::default(),
            &mut Vec::new(),
        )
        .unwrap();
    }

    #[test]
    fn a_parsed_batch_is_left_empty_with_its_buffers() {
        for jsons in [
            &[
                r#"{"delta":{"content":"a"}}"#,
                r#"{"delta":{"content":"b"}}"#,
            ][..],
            // A malformed update ends the parse; what follows it is emptied all the same.
            &[r#"{"delta":{"content":5}}"#, r#"{"delta":{"content":"b"}}"#][..],
        ] {
            let mut b = batch(jsons);
            let (text, updates) = (b.text.capacity(), b.updates.capacity());
            let _ = decode_batch(
                0,
                LogprobsKept::Raw,
                &mut b,
                &mut Repeats::default(),
                &mut Vec::new(),
            );
            assert!(b.is_empty() && b.text.is_empty(), "{jsons:?}");
            assert_eq!((b.text.capacity(), b.updates.capacity()), (text, updates));
        }
    }

    #[test]
    fn malformed_updates_are_the_choices_own_typed_errors() {
        for (json, what) in [
            (r#"{"delta":{"content":5}}"#, "invalid type: integer `5`"),
            (r#"{"delta":"x"}"#, "expected a JSON object"),
            (
                r#"{"delta":{"tool_calls":{"index":0}}}"#,
                "expected a sequence",
            ),
            (r#"{"finish_reason":7}"#, "invalid type: integer `7`"),
        ] {
            let mut out = Vec::new();
            let e = decode_batch(
                2,
                LogprobsKept::Raw,
                &mut batch(&[r#"{"delta":{"content":"kept"}}"#, json]),
                &mut Repeats::default(),
                &mut out,
            )
            .unwrap_err()
            .error;
            match e.detail() {
                ErrorDetail::InvalidUpdate {
                    choice: 2,
                    line: 11,
                    offset: 100,
                    message,
                } => assert!(
                    message.contains(what) && !message.contains("column"),
                    "{json}: {message}"
                ),
                other => panic!("{json}: {other:?}"),
            }
            assert_eq!(out.len(), 1, "the update before the bad one is kept");
        }
        let mut out = Vec::new();
        let e = decode_batch(
            1,
            LogprobsKept::Raw,
            &mut batch(&[r#"{"delta":{"tool_calls":[{"index":-4}]}}"#]),
            &mut Repeats::default(),
            &mut out,
        )
        .unwrap_err()
        .error;
        assert!(
            matches!(
                e.detail(),
                ErrorDetail::InvalidToolCall {
                    choice: 1,
                    line: 10,
                    offset: 0,
                    ..
                }
            ),
            "{e:?}"
        );
    }
}
