//! The prefix-consistency relation between a partial snapshot and the complete value, checked
//! by the partial-JSON crate's tests and by the fuzz targets' invariants alike.

use choicewise_partial_json::Snapshot;
use serde_json::Value;

/// Whether the best-effort `partial` is consistent with the complete value
/// `complete`: final nodes equal their counterpart exactly; a provisional
/// string is a prefix; a provisional array is no longer, its elements before
/// the last are final and all are consistent; a provisional object's keys
/// all exist in `complete` with consistent values. Scalars are always final.
pub fn is_prefix_consistent(partial: Snapshot<'_>, complete: &Value) -> bool {
    if partial.is_final() {
        return partial.value() == complete;
    }
    match (partial.value(), complete) {
        (Value::String(p), Value::String(c)) => c.starts_with(p.as_str()),
        (Value::Array(p), Value::Array(c)) => {
            p.len() <= c.len()
                && partial.elements().enumerate().all(|(i, e)| {
                    (i + 1 == p.len() || e.is_final()) && is_prefix_consistent(e, &c[i])
                })
        }
        (Value::Object(_), Value::Object(c)) => partial
            .entries()
            .all(|(k, v)| c.get(k).is_some_and(|cv| is_prefix_consistent(v, cv))),
        _ => false,
    }
}
