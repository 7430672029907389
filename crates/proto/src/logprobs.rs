//! Log-probabilities as the provider sent them: raw JSON text, parsed only on demand.
//!
//! An upstream asked for `top_logprobs` sends, per token, the token and its top-k
//! alternatives: a JSON tree of that many small objects costs many times its bytes. A stream
//! keeps them as [`Logprobs`], the JSON text shared by every reader, written back verbatim
//! where they pass through; [`Logprobs::tokens`] and [`Logprobs::confidences`] parse them
//! when asked. [`LogprobsKept`] says what a stream keeps of them at all: the text, only each
//! token's confidence (what a confidence-guided vote reads), or nothing.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Serialize, Serializer};
use serde_json::Value;
use serde_json::value::RawValue;

use crate::confidence::{Measure, TokenLogprob, valid};

/// What a stream keeps of the log-probabilities its upstream sends
/// ([`StreamConfig::logprobs`](crate::StreamConfig::logprobs)).
///
/// ```
/// use choicewise_proto::{LogprobsKept, StreamConfig};
/// use choicewise_proto::Measure;
/// assert_eq!(StreamConfig::default().logprobs, LogprobsKept::Raw);
/// let mut config = StreamConfig::default();
/// config.logprobs = LogprobsKept::Confidence(Measure::Sampled); // a confidence-guided vote, nobody else
/// # drop(config);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum LogprobsKept {
    /// The JSON text as sent ([`ChoiceEvent::Logprobs`](crate::ChoiceEvent::Logprobs),
    /// [`ChoiceOutput::logprobs`](crate::ChoiceOutput::logprobs)). The default.
    #[default]
    Raw,
    /// Only each token's confidence by this measure
    /// ([`ChoiceEvent::TokenConfidence`](crate::ChoiceEvent::TokenConfidence)), read as the
    /// update is parsed; the text is dropped. What a confidence-guided vote needs.
    Confidence(Measure),
    /// Nothing: skipped unparsed as the update is read.
    Nothing,
}

/// One update's log-probabilities (or a choice's, merged), as the provider sent them: valid
/// JSON text, shared by every clone and written back verbatim by its [`Serialize`] (with
/// `serde_json`'s serializers, `to_value` among them).
///
/// ```
/// use choicewise_proto::Logprobs;
/// let raw = r#"{"content": [{"token": "4", "logprob": -0.25,
///     "top_logprobs": [{"token": "4", "logprob": -0.25}, {"token": "5", "logprob": -1.75}]}]}"#;
/// let lp = Logprobs::from_json(raw).unwrap();
/// assert_eq!(lp.json(), raw); // verbatim, spaces and all
/// assert_eq!(serde_json::to_string(&lp).unwrap(), raw);
/// assert_eq!(lp.tokens()[0].token, "4");
/// assert_eq!(lp.confidences(), [Some(1.0)]); // -(-0.25 - 1.75) / 2
/// assert!(Logprobs::from_json("{\"content\": [").is_err());
/// ```
#[derive(Clone)]
pub struct Logprobs(Arc<RawValue>);

impl Logprobs {
    /// Log-probabilities from their JSON text, kept verbatim; an error if it is not one valid
    /// JSON value.
    ///
    /// ```
    /// use choicewise_proto::Logprobs;
    /// assert_eq!(Logprobs::from_json(" null ").unwrap().json(), "null");
    /// assert!(Logprobs::from_json("{} {}").is_err());
    /// ```
    pub fn from_json(json: &str) -> Result<Logprobs, serde_json::Error> {
        let raw: &RawValue = serde_json::from_str(json)?;
        Ok(Logprobs::from_raw(raw))
    }

    /// Log-probabilities from a parsed value (written compactly).
    ///
    /// ```
    /// use choicewise_proto::Logprobs;
    /// let lp = Logprobs::from_value(&serde_json::json!({"content": []}));
    /// assert_eq!(lp.json(), r#"{"content":[]}"#);
    /// ```
    pub fn from_value(value: &Value) -> Logprobs {
        let raw = serde_json::value::to_raw_value(value)
            .expect("a JSON value always serialises to JSON text");
        Logprobs(Arc::from(raw))
    }

    pub(crate) fn from_raw(raw: &RawValue) -> Logprobs {
        Logprobs(Arc::from(raw.to_owned()))
    }

    /// The JSON text, as sent.
    ///
    /// ```
    /// use choicewise_proto::Logprobs;
    /// assert_eq!(Logprobs::from_json(r#"{"content":null}"#).unwrap().json(), r#"{"content":null}"#);
    /// ```
    pub fn json(&self) -> &str {
        self.0.get()
    }

    /// Whether the value is JSON `null` (a provider's way of sending none).
    ///
    /// ```
    /// use choicewise_proto::Logprobs;
    /// assert!(Logprobs::from_json("null").unwrap().is_null());
    /// assert!(!Logprobs::from_json("{}").unwrap().is_null());
    /// ```
    pub fn is_null(&self) -> bool {
        self.json() == "null"
    }

    /// The value as a JSON tree (for a program that wants to walk it; it costs many times
    /// the text). `Value::Null` for a value too deeply nested to parse.
    ///
    /// ```
    /// use choicewise_proto::Logprobs;
    /// let lp = Logprobs::from_json(r#"{"content": [{"token": "a"}]}"#).unwrap();
    /// assert_eq!(lp.to_value()["content"][0]["token"], "a");
    /// ```
    pub fn to_value(&self) -> Value {
        serde_json::from_str(self.json()).unwrap_or(Value::Null)
    }

    /// The tokens of `content`, typed, in order: what [`TokenLogprob::parse`] reads of the
    /// value (malformed entries skipped, never an error).
    ///
    /// ```
    /// use choicewise_proto::Logprobs;
    /// let lp = Logprobs::from_json(r#"{"content": [7, {"token": "b", "logprob": -0.5}]}"#).unwrap();
    /// let tokens = lp.tokens();
    /// assert_eq!((tokens.len(), tokens[0].token.as_str(), tokens[0].logprob), (1, "b", Some(-0.5)));
    /// ```
    pub fn tokens(&self) -> Vec<TokenLogprob> {
        TokenLogprob::parse(&self.to_value())
    }

    /// Each token's confidence ([`TokenLogprob::confidence`]), in order, read straight from
    /// the text: only the numbers of `top_logprobs` are parsed, no token string is kept.
    /// One entry per token [`tokens`](Self::tokens) would give, `None` for a token without
    /// valid top log-probabilities.
    ///
    /// ```
    /// use choicewise_proto::Logprobs;
    /// let lp = Logprobs::from_json(r#"{"content": [
    ///     {"token": "a", "top_logprobs": [{"token": "a", "logprob": -1}, {"token": "b", "logprob": -3}]},
    ///     {"token": "b", "top_logprobs": [{"token": "b", "logprob": "x"}]},
    ///     "not a token"]}"#).unwrap();
    /// assert_eq!(lp.confidences(), [Some(2.0), None]);
    /// ```
    pub fn confidences(&self) -> Vec<Option<f64>> {
        self.confidences_by(Measure::TopK)
    }

    /// Each token's confidence by `measure` ([`Measure::of`]), in order, read straight from
    /// the text: only the numbers the measure reads are parsed. One entry per token
    /// [`tokens`](Self::tokens) would give, `None` for a token without what it reads.
    ///
    /// ```
    /// use choicewise_proto::{Logprobs, Measure};
    /// let lp = Logprobs::from_json(r#"{"content": [
    ///     {"token": "a", "logprob": -0.5},
    ///     {"token": "b", "logprob": 2},
    ///     {"token": "c", "logprob": -1, "top_logprobs": [{"token": "c", "logprob": -1}]}]}"#).unwrap();
    /// assert_eq!(lp.confidences_by(Measure::Sampled), [Some(-0.5), None, Some(-1.0)]);
    /// assert_eq!(lp.confidences_by(Measure::TopK), [None, None, Some(1.0)]);
    /// ```
    pub fn confidences_by(&self, measure: Measure) -> Vec<Option<f64>> {
        let mut out = Vec::new();
        confidences_of(self.json(), measure, |c| out.push(c));
        out
    }

    /// Several updates' log-probabilities merged into the choice's, as a provider's
    /// non-streamed answer carries them: objects' arrays concatenated key by key (the text of
    /// each element kept verbatim), any other value replacing the one before, `null` (a whole
    /// value or a key's) changing nothing; the keys in sorted order. One value is kept as it
    /// is. `None` when every value is `null` (or none is given).
    ///
    /// ```
    /// use choicewise_proto::Logprobs;
    /// let parts = [
    ///     Logprobs::from_json(r#"{"content": [{"token": "a"}], "refusal": null}"#).unwrap(),
    ///     Logprobs::from_json("null").unwrap(),
    ///     Logprobs::from_json(r#"{"content": [{"token": "b"}]}"#).unwrap(),
    /// ];
    /// let merged = Logprobs::merged(&parts).unwrap();
    /// assert_eq!(merged.json(), r#"{"content":[{"token": "a"},{"token": "b"}],"refusal":null}"#);
    /// assert!(Logprobs::merged(&[]).is_none());
    /// ```
    pub fn merged<'a>(parts: impl IntoIterator<Item = &'a Logprobs>) -> Option<Logprobs> {
        /// One key's value so far: an array's elements, or any other value.
        enum Kept<'a> {
            Array(Vec<&'a RawValue>),
            Other(&'a RawValue),
        }
        fn kept(value: &RawValue) -> Kept<'_> {
            match elements(value.get()) {
                Some(items) => Kept::Array(items),
                None => Kept::Other(value),
            }
        }
        enum Merged<'a> {
            /// A value that is not an object, as it is.
            Whole(&'a Logprobs),
            Fields(BTreeMap<Cow<'a, str>, Kept<'a>>),
        }
        let mut merged: Option<Merged<'a>> = None;
        let mut count = 0;
        let mut last = None;
        for part in parts {
            if part.is_null() {
                continue;
            }
            count += 1;
            last = Some(part);
            let Some(fields) = fields(part.json()) else {
                merged = Some(Merged::Whole(part));
                continue;
            };
            match &mut merged {
                Some(Merged::Fields(acc)) => {
                    for (key, value) in fields {
                        if value.get() == "null" {
                            continue;
                        }
                        match (acc.get_mut(&key), elements(value.get())) {
                            (Some(Kept::Array(existing)), Some(more)) => existing.extend(more),
                            (_, more) => {
                                let value = more.map_or(Kept::Other(value), Kept::Array);
                                acc.insert(key, value);
                            }
                        }
                    }
                }
                _ => {
                    let acc = fields.into_iter().map(|(k, v)| (k, kept(v))).collect();
                    merged = Some(Merged::Fields(acc));
                }
            }
        }
        match merged? {
            _ if count == 1 => last.cloned(),
            Merged::Whole(part) => Some(part.clone()),
            Merged::Fields(acc) => {
                let mut text = String::from("{");
                for (i, (key, value)) in acc.iter().enumerate() {
                    if i > 0 {
                        text.push(',');
                    }
                    text.push_str(&serde_json::to_string(key).expect("a string serialises"));
                    text.push(':');
                    match value {
                        Kept::Other(raw) => text.push_str(raw.get()),
                        Kept::Array(items) => {
                            text.push('[');
                            for (j, item) in items.iter().enumerate() {
                                if j > 0 {
                                    text.push(',');
                                }
                                text.push_str(item.get());
                            }
                            text.push(']');
                        }
                    }
                }
                text.push('}');
                let raw = RawValue::from_string(text).expect("merged from valid JSON values");
                Some(Logprobs(Arc::from(raw)))
            }
        }
    }
}

impl PartialEq for Logprobs {
    fn eq(&self, other: &Self) -> bool {
        self.json() == other.json()
    }
}

impl Eq for Logprobs {}

impl fmt::Debug for Logprobs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Logprobs").field(&self.json()).finish()
    }
}

impl fmt::Display for Logprobs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.json())
    }
}

impl Serialize for Logprobs {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}

impl<'de> Deserialize<'de> for Logprobs {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = Box::<RawValue>::deserialize(d)?;
        Ok(Logprobs(Arc::from(raw)))
    }
}

/// The first character of a JSON text that is not whitespace.
fn first(json: &str) -> Option<u8> {
    json.bytes().find(|b| !b.is_ascii_whitespace())
}

/// An object key, borrowed unless it has escapes.
#[derive(Deserialize)]
#[serde(transparent)]
struct Key<'a>(#[serde(borrow)] Cow<'a, str>);

/// The fields of a JSON object as raw values, the last one of a repeated key winning (as
/// `serde_json::Value` keeps them); `None` for anything but an object.
fn fields(json: &str) -> Option<BTreeMap<Cow<'_, str>, &RawValue>> {
    if first(json) != Some(b'{') {
        return None;
    }
    serde_json::from_str(json).ok()
}

/// The elements of a JSON array as raw values; `None` for anything but an array.
fn elements(json: &str) -> Option<Vec<&RawValue>> {
    if first(json) != Some(b'[') {
        return None;
    }
    serde_json::from_str(json).ok()
}

/// The value of `key` in a JSON object (the last one of a repeated key); `None` for anything
/// but an object, or without the key.
fn field<'a>(json: &'a str, key: &str) -> Option<&'a RawValue> {
    struct Seed<'k>(&'k str);
    impl<'de> DeserializeSeed<'de> for Seed<'_> {
        type Value = Option<&'de RawValue>;
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_map(self)
        }
    }
    impl<'de> Visitor<'de> for Seed<'_> {
        type Value = Option<&'de RawValue>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a JSON object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut found = None;
            while let Some(Key(k)) = map.next_key()? {
                if k == self.0 {
                    found = Some(map.next_value()?);
                } else {
                    map.next_value::<IgnoredAny>()?;
                }
            }
            Ok(found)
        }
    }
    if first(json) != Some(b'{') {
        return None;
    }
    let mut de = serde_json::Deserializer::from_str(json);
    Seed(key).deserialize(&mut de).ok().flatten()
}

/// Calls `each` with the confidence by `measure` of every token of a `logprobs` value's
/// `content` (an entry that is an object), in order. `top_k`: `-mean` of its
/// `top_logprobs`' numbers, `None` when they are missing, empty, or one is not a finite
/// number at most 0. `sampled`: its `logprob`, `None` when missing or not a finite number at
/// most 0. Only numbers are parsed; what [`TokenLogprob::parse`] and [`Measure::of`] give.
pub(crate) fn confidences_of(json: &str, measure: Measure, mut each: impl FnMut(Option<f64>)) {
    let Some(content) = field(json, "content").and_then(|c| elements(c.get())) else {
        return;
    };
    for entry in content {
        if first(entry.get()) != Some(b'{') {
            continue;
        }
        each(match measure {
            Measure::TopK => token_confidence(entry.get()),
            Measure::Sampled => sampled_logprob(entry.get()),
        });
    }
}

/// One `content` entry's own `logprob` (see [`confidences_of`]).
fn sampled_logprob(entry: &str) -> Option<f64> {
    let logprob: f64 = serde_json::from_str(field(entry, "logprob")?.get()).ok()?;
    valid(logprob).then_some(logprob)
}

/// One `content` entry's confidence (see [`confidences_of`]).
fn token_confidence(entry: &str) -> Option<f64> {
    let top = elements(field(entry, "top_logprobs")?.get())?;
    if top.is_empty() {
        return None;
    }
    let mut sum = 0.0;
    for t in &top {
        let logprob: f64 = serde_json::from_str(field(t.get(), "logprob")?.get()).ok()?;
        if !(logprob.is_finite() && logprob <= 0.0) {
            return None;
        }
        sum += logprob;
    }
    Some(-sum / top.len() as f64)
}

/// Whether a JSON text nests arrays and objects at most `limit` deep (strings skipped).
pub(crate) fn nests_within(json: &str, limit: usize) -> bool {
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for b in json.bytes() {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > limit {
                    return false;
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn lp(json: &str) -> Logprobs {
        Logprobs::from_json(json).unwrap()
    }

    #[test]
    fn the_text_passes_through_verbatim() {
        let raw = "{ \"content\" : [ {\"token\":\"\\u00e9\", \"logprob\": -1.0e-5,\"bytes\":[195,169]} ] }";
        let value = lp(raw);
        assert_eq!(value.json(), raw.trim());
        assert_eq!(serde_json::to_string(&value).unwrap(), raw.trim());
        // Inside a larger value, too.
        #[derive(Serialize)]
        struct Element<'a> {
            logprobs: &'a Logprobs,
        }
        let around = serde_json::to_string(&Element { logprobs: &value }).unwrap();
        assert_eq!(around, format!("{{\"logprobs\":{}}}", raw.trim()));
        // Read back from JSON, as text.
        let back: Logprobs = serde_json::from_str(&format!("[{raw}]"))
            .map(|v: Vec<Logprobs>| v[0].clone())
            .unwrap();
        assert_eq!(back, value);
        // From a parsed value: compact.
        let from_value: Logprobs = serde_json::from_value(json!({"content": null})).unwrap();
        assert_eq!(from_value.json(), r#"{"content":null}"#);
    }

    #[test]
    fn null_stays_null_and_merges_as_nothing() {
        let null = lp("null");
        assert!(null.is_null());
        assert_eq!(serde_json::to_string(&null).unwrap(), "null");
        assert_eq!(Logprobs::merged([&null, &null]), None);
        let one = lp(r#"{"content": [1]}"#);
        assert_eq!(Logprobs::merged([&null, &one, &null]), Some(one.clone()));
        assert!(null.tokens().is_empty() && null.confidences().is_empty());
    }

    #[test]
    fn merging_follows_the_values_rule() {
        // Arrays concatenate key by key, a key's null changes nothing, other values replace,
        // a value that is not an object replaces the whole, an object after it starts anew.
        let merged = Logprobs::merged(&[
            lp(r#"{"content": [{"t": 1}], "refusal": null, "x": 1}"#),
            lp(r#"{"content": [{"t": 2}, {"t": 3}], "refusal": [], "x": null, "y": "z"}"#),
        ])
        .unwrap();
        assert_eq!(
            merged.to_value(),
            json!({"content": [{"t": 1}, {"t": 2}, {"t": 3}], "refusal": [], "x": 1, "y": "z"})
        );
        let whole = Logprobs::merged(&[lp(r#"{"content": [1]}"#), lp("[2]"), lp("[3]")]).unwrap();
        assert_eq!(whole.json(), "[3]");
        let anew = Logprobs::merged(&[lp("[2]"), lp(r#"{"content": [1]}"#)]).unwrap();
        assert_eq!(anew.to_value(), json!({"content": [1]}));
        // A repeated key: the last one, as a parsed value keeps it.
        let repeated = Logprobs::merged(&[
            lp(r#"{"content": [1], "content": [2]}"#),
            lp(r#"{"content": [3]}"#),
        ])
        .unwrap();
        assert_eq!(repeated.to_value(), json!({"content": [2, 3]}));
    }

    #[test]
    fn confidences_are_the_numbers_the_typed_tokens_give() {
        let cases = [
            r#"{"content": [{"token": "a", "logprob": -0.5, "top_logprobs": [{"token": "a", "logprob": -0.5}, {"token": "b", "logprob": -1.5}]}]}"#,
            r#"{"content": [{"top_logprobs": [{"logprob": -1}, {"logprob": -2}]}, 7, {"top_logprobs": []}, {"top_logprobs": null}, {}]}"#,
            r#"{"content": [{"top_logprobs": [{"logprob": 0.5}]}, {"top_logprobs": [{"logprob": "x"}]}, {"top_logprobs": [3]}]}"#,
            r#"{"content": [{"top_logprobs": [{"logprob": -1}], "top_logprobs": [{"logprob": -4}]}]}"#,
            r#"{"content": "oops"}"#,
            r#"{"refusal": [{"top_logprobs": [{"logprob": -1}]}]}"#,
            r#"[{"content": []}]"#,
            "7",
            r#"{"content": [{"logprob": -0.25}, {"logprob": 0.5}, {"logprob": "x"}, {"logprob": null}, {}, {"logprob": -2, "logprob": -3}]}"#,
        ];
        for case in cases {
            let value = lp(case);
            let typed: Vec<Option<f64>> = value.tokens().iter().map(|t| t.confidence()).collect();
            assert_eq!(value.confidences(), typed, "{case}");
            for measure in [Measure::Sampled, Measure::TopK] {
                let typed: Vec<Option<f64>> =
                    value.tokens().iter().map(|t| measure.of(t)).collect();
                assert_eq!(value.confidences_by(measure), typed, "{measure}: {case}");
            }
        }
        assert_eq!(
            lp(cases[8]).confidences_by(Measure::Sampled),
            [Some(-0.25), None, None, None, None, Some(-3.0)],
            "the sampled token's own log-probability, valid or none"
        );
        assert_eq!(
            lp(cases[1]).confidences(),
            [Some(1.5), None, None, None],
            "only the numbers count"
        );
        assert_eq!(lp(cases[3]).confidences(), [Some(4.0)]);
    }

    #[test]
    fn nesting_is_counted_outside_strings() {
        assert!(nests_within(r#"{"a": [[1]], "b": "[[[[\"[["}"#, 3));
        assert!(!nests_within("[[[[]]]]", 3));
        assert!(nests_within("[[[]]][[[]]]", 3));
    }
}
