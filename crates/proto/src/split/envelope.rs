//! A chunk as the reader reads it: its envelope (every field but the choices' contents),
//! each choice's head (its index, whether it finishes), the completion-level facts it
//! carries, and the provider's error beside its choices.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

use crate::error::{Error, ErrorDetail, UpstreamError};
use crate::wire;

/// The chunk envelope, parsed by serde: the reader's path for the chunks the scan leaves to
/// it (see `scan`). Every field but the choices' contents.
#[derive(Debug, Deserialize)]
pub(super) struct Envelope<'a> {
    #[serde(borrow, default, deserialize_with = "wire::cow_str")]
    pub(super) id: Option<Cow<'a, str>>,
    #[serde(default, deserialize_with = "wire::lenient_i64")]
    pub(super) created: Option<i64>,
    #[serde(borrow, default, deserialize_with = "wire::cow_str")]
    pub(super) model: Option<Cow<'a, str>>,
    #[serde(borrow, default, deserialize_with = "wire::cow_str")]
    pub(super) system_fingerprint: Option<Cow<'a, str>>,
    #[serde(borrow, default, deserialize_with = "wire::cow_str")]
    pub(super) service_tier: Option<Cow<'a, str>>,
    #[serde(borrow, default, deserialize_with = "wire::opt_objects")]
    pub(super) choices: Option<Vec<ChoiceHead<'a>>>,
    #[serde(borrow, default)]
    pub(super) usage: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub(super) prompt_filter_results: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub(super) error: Option<&'a RawValue>,
}

/// What the reader reads of one element of `choices`: its index and whether it finishes.
#[derive(Debug, Deserialize)]
pub(super) struct ChoiceHead<'a> {
    #[serde(default)]
    pub(super) index: Option<i64>,
    #[serde(borrow, default)]
    pub(super) finish_reason: Option<&'a RawValue>,
}

/// The elements of `choices` as raw text (a second look at a chunk the serde path took).
#[derive(Debug, Deserialize)]
pub(super) struct RawChoices<'a> {
    #[serde(borrow, default)]
    pub(super) choices: Option<Vec<&'a RawValue>>,
}

/// The created timestamp, leniently.
#[derive(Debug, Deserialize)]
pub(super) struct Created(#[serde(deserialize_with = "wire::lenient_i64")] pub(super) Option<i64>);

/// One chunk's completion-level facts.
#[derive(Debug, Default)]
pub(super) struct Facts<'a> {
    pub(super) id: Option<Cow<'a, str>>,
    pub(super) model: Option<Cow<'a, str>>,
    pub(super) system_fingerprint: Option<Cow<'a, str>>,
    pub(super) service_tier: Option<Cow<'a, str>>,
    pub(super) created: Option<i64>,
    pub(super) prompt_filter_results: Option<Value>,
    pub(super) usage: Option<Value>,
}

/// The provider's error that a chunk carries (beside its choices, which are split first).
pub(super) fn upstream_error(error: Option<Value>, line: u64) -> Result<(), Error> {
    match error.filter(|e| !e.is_null()) {
        Some(e) => Err(Error::from(ErrorDetail::Upstream(std::sync::Arc::new(
            UpstreamError::from_value(&e, line),
        )))),
        None => Ok(()),
    }
}

/// A JSON value worth keeping: not `null`.
pub(super) fn raw_value(raw: Option<&RawValue>) -> Option<Value> {
    raw.filter(|r| r.get() != "null")
        .and_then(|r| crate::tree::bounded_or_none(r.get()))
}
