//! JSON trees of an upstream's bytes, built within a budget: a `serde_json::Value` costs 20
//! to 50 times the text of many small values, so every tree the answer side builds from what
//! an upstream sent (a typed dialect's event, a chunk's `usage`, `content_filter_results`,
//! `prompt_filter_results`, an error) goes through [`bounded`], which counts what the tree
//! allocates as it is built and stops past its budget ([`budget`] of an event's length,
//! [`FIELD_BUDGET`] for a field small by nature), and leaves out the members a reader never
//! looks at.

use std::cell::Cell;
use std::fmt;

use serde::de::{DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// What a tree of `len` bytes of text may cost at most: four times the text, and 64 KiB
/// (the request side's bound on a parsed field).
pub(crate) fn budget(len: usize) -> usize {
    len.saturating_mul(4).saturating_add(64 * 1024)
}

/// Why [`bounded`] built no tree.
#[derive(Debug)]
pub(crate) enum TreeError {
    /// Not one JSON value.
    Json(serde_json::Error),
    /// Its tree would cost more than its budget.
    TooCostly,
}

/// The estimated heap cost of one value in a tree: its `Value` (32 bytes), its share of a
/// growing array (up to twice its size), a member's key and map node, a string's bytes.
const VALUE: usize = 32;
const ELEMENT: usize = 32;
const MEMBER: usize = 96;

/// `text` as a tree, members named in `skip` left out at any depth, built only while its
/// cost stays within `budget` bytes ([`TreeError::TooCostly`] past it, the tree dropped).
pub(crate) fn bounded(text: &str, skip: &[&str], budget: usize) -> Result<Value, TreeError> {
    let left = Cell::new(budget);
    let over = Cell::new(false);
    let seed = Seed {
        left: &left,
        over: &over,
        skip,
    };
    let mut de = serde_json::Deserializer::from_str(text);
    let value = seed.deserialize(&mut de);
    if over.get() {
        return Err(TreeError::TooCostly);
    }
    let value = value.map_err(TreeError::Json)?;
    de.end().map_err(TreeError::Json)?;
    Ok(value)
}

/// What the tree of a field that is small by nature (a chunk's `usage`, its filter results,
/// an error) may cost: 64 KiB, whatever the field's length.
pub(crate) const FIELD_BUDGET: usize = 64 * 1024;

/// `text`, a field small by nature, as a tree within [`FIELD_BUDGET`], else `None` (not
/// JSON, or too costly: the field is left out).
pub(crate) fn bounded_or_none(text: &str) -> Option<Value> {
    bounded(text, &[], FIELD_BUDGET).ok()
}

#[derive(Clone, Copy)]
struct Seed<'a> {
    left: &'a Cell<usize>,
    over: &'a Cell<bool>,
    skip: &'a [&'a str],
}

impl Seed<'_> {
    /// Spends `cost`; an error once the budget is spent.
    fn spend<E: serde::de::Error>(&self, cost: usize) -> Result<(), E> {
        match self.left.get().checked_sub(cost) {
            Some(left) => {
                self.left.set(left);
                Ok(())
            }
            None => {
                self.over.set(true);
                Err(E::custom("a JSON tree over its budget"))
            }
        }
    }
}

impl<'de> DeserializeSeed<'de> for Seed<'_> {
    type Value = Value;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Seed<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Value, E> {
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Value, E> {
        self.spend(v.len())?;
        Ok(Value::String(v.to_string()))
    }

    fn visit_string<E: serde::de::Error>(self, v: String) -> Result<Value, E> {
        self.spend(v.len())?;
        Ok(Value::String(v))
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        loop {
            self.spend(VALUE + ELEMENT)?;
            match seq.next_element_seed(self)? {
                Some(item) => items.push(item),
                None => break,
            }
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut members = Map::new();
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            if self.skip.contains(&&*key) {
                map.next_value::<IgnoredAny>()?;
                continue;
            }
            self.spend(VALUE + MEMBER + key.len())?;
            let value = map.next_value_seed(self)?;
            members.insert(key.into_owned(), value);
        }
        Ok(Value::Object(members))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trees_are_built_within_their_budget_and_skip_what_is_not_read() {
        let text = r#"{"type": "x", "usage": {"n": [1, 2.5, -3, null, true]}, "tools": [{"a": 1}], "s": "é\n"}"#;
        let tree = bounded(text, &["tools"], budget(text.len())).unwrap();
        let mut want: Value = serde_json::from_str(text).unwrap();
        want.as_object_mut().unwrap().remove("tools");
        assert_eq!(tree, want);
        // Wide and dense: over its budget, refused as it is built.
        let zeros = format!("[{}0]", "0,".repeat(1_000_000));
        assert!(matches!(
            bounded(&zeros, &[], budget(zeros.len())),
            Err(TreeError::TooCostly)
        ));
        let small = format!("[{}0]", "0,".repeat(100));
        assert!(bounded_or_none(&small).is_some());
        let field = format!("[{}0]", "0,".repeat(10_000));
        assert!(
            bounded_or_none(&field).is_none(),
            "a field's tree over 64 KiB"
        );
        // Not JSON.
        assert!(matches!(
            bounded("{\"a\": ", &[], 1 << 20),
            Err(TreeError::Json(_))
        ));
        assert!(bounded_or_none("[1] 2").is_none());
        // A skipped member costs nothing, however large.
        let skipped = format!(r#"{{"tools": {zeros}, "type": "ping"}}"#);
        assert_eq!(
            bounded(&skipped, &["tools"], budget(100)).unwrap(),
            serde_json::json!({"type": "ping"})
        );
    }
}
