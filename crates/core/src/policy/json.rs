//! A policy's JSON form: the gateway's `choicewise` extension, field for field.

use std::time::Duration;

use choicewise_proto::{Confidence, MEASURES, Measure};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value, json};

use super::error::{
    GROUP_TOKENS, Message, TOP_LOGPROBS, WARMUP, deadline_error, min_votes_error, samples_error,
    share_error, whole_error, window_error,
};
use super::{PickRule, Policy, PolicyError, PolicyErrorKind, PolicyLimits, RULES};

/// The fields of a policy's serde form, in the order its errors list them.
const FIELDS: &str = "samples, select, vote_by, hedge_after_ms, window, confidence, min_votes, vote_normalize, deadline_ms";

/// The fields of `confidence`.
const CONFIDENCE_FIELDS: &str = "measure, warmup, keep, group_tokens, top_logprobs, consensus";

impl Policy {
    /// Reads a policy from its JSON form (the gateway's `choicewise` extension), checked
    /// against `limits`; `null` stands for a field left out. Every error names its field.
    ///
    /// ```
    /// use choicewise_core::policy::PolicyLimits;
    /// use choicewise_core::Policy;
    /// let read = |v: serde_json::Value| Policy::from_json(v.as_object().unwrap(), &PolicyLimits::new(2).max_samples(16));
    /// assert_eq!(read(serde_json::json!({"samples": 1})).unwrap_err().to_string(),
    ///     r#""samples" must be an integer from n (2) to 16 (max_samples), not 1"#);
    /// assert!(read(serde_json::json!({"best": 1})).unwrap_err().to_string().starts_with("unknown field \"best\""));
    /// ```
    pub fn from_json(
        fields: &Map<String, Value>,
        limits: &PolicyLimits,
    ) -> Result<Policy, PolicyError> {
        for key in fields.keys() {
            if !FIELDS.split(", ").any(|f| f == key) {
                return Err(PolicyError::new(
                    key,
                    PolicyErrorKind::UnknownField,
                    Message::text("unknown field ")
                        .then_field(key)
                        .then(format_args!(" ({FIELDS})")),
                ));
            }
        }
        let get = |key: &str| fields.get(key).filter(|v| !v.is_null());
        let mut b = Policy::builder();
        if let Some(v) = get("samples") {
            let k = v.as_u64().and_then(|k| u32::try_from(k).ok());
            b.samples = Some(k.ok_or_else(|| samples_error(v, limits))?);
        }
        if let Some(v) = get("vote_by") {
            match v {
                Value::String(pattern) => b.vote_by = Some(pattern.clone()),
                v => {
                    return Err(PolicyError::invalid(
                        "vote_by",
                        format_args!("must be a string, not {v}"),
                    ));
                }
            }
        }
        if let Some(v) = get("hedge_after_ms") {
            let ms = v.as_u64().ok_or_else(|| {
                PolicyError::invalid(
                    "hedge_after_ms",
                    format_args!("must be a whole number of milliseconds, not {v}"),
                )
            })?;
            b.hedge_after = Some(Duration::from_millis(ms));
        }
        if let Some(v) = get("window") {
            let w = v
                .as_u64()
                .filter(|w| *w >= 1)
                .ok_or_else(|| window_error(v))?;
            b.window = Some(w as usize);
        }
        if let Some(v) = get("select") {
            b.select = Some(match v {
                Value::String(s) => match s.as_str() {
                    "first_token" => PickRule::FirstToken,
                    "first_finished" => PickRule::FirstFinished,
                    "vote" => PickRule::Vote,
                    other => {
                        return Err(PolicyError::new(
                            "select",
                            PolicyErrorKind::UnknownRule,
                            Message::text("unknown ")
                                .then_field("select")
                                .then(format_args!(": {other:?} ({RULES})")),
                        ));
                    }
                },
                v => {
                    return Err(PolicyError::invalid(
                        "select",
                        format_args!("must be a string, not {v}"),
                    ));
                }
            });
        }
        if let Some(v) = get("confidence") {
            let Value::Object(options) = v else {
                return Err(PolicyError::invalid(
                    "confidence",
                    format_args!("must be an object, not {v}"),
                ));
            };
            b.confidence = Some(confidence_of(options)?);
        }
        if let Some(v) = get("min_votes") {
            let m = v
                .as_u64()
                .filter(|m| *m >= 1)
                .ok_or_else(|| min_votes_error(v))?;
            b.min_votes = Some(m as usize);
        }
        if let Some(v) = get("vote_normalize") {
            b.vote_normalize = v.as_bool().ok_or_else(|| {
                PolicyError::invalid(
                    "vote_normalize",
                    format_args!("must be true or false, not {v}"),
                )
            })?;
        }
        if let Some(v) = get("deadline_ms") {
            let ms = v
                .as_u64()
                .filter(|ms| *ms >= 1)
                .ok_or_else(|| deadline_error(v))?;
            b.deadline = Some(Duration::from_millis(ms));
        }
        b.build(limits)
    }

    /// Its JSON form: the fields stated, as the gateway's extension names them.
    pub fn to_json(&self) -> Map<String, Value> {
        let s = &self.stated;
        let mut m = Map::new();
        if let Some(k) = s.samples {
            m.insert("samples".into(), json!(k));
        }
        if let Some(rule) = s.select {
            m.insert("select".into(), json!(rule.as_str()));
        }
        if let Some(pattern) = &s.vote_by {
            m.insert("vote_by".into(), json!(pattern));
        }
        if let Some(after) = s.hedge_after {
            m.insert("hedge_after_ms".into(), json!(after.as_millis() as u64));
        }
        if let Some(w) = s.window {
            m.insert("window".into(), json!(w));
        }
        if let Some(c) = s.confidence {
            m.insert(
                "confidence".into(),
                json!({"measure": c.measure.as_str(), "warmup": c.warmup, "keep": c.keep,
                       "group_tokens": c.group_tokens, "top_logprobs": c.top_logprobs,
                       "consensus": c.consensus}),
            );
        }
        if let Some(v) = s.min_votes {
            m.insert("min_votes".into(), json!(v));
        }
        if s.vote_normalize {
            m.insert("vote_normalize".into(), json!(true));
        }
        if let Some(d) = s.deadline {
            m.insert("deadline_ms".into(), json!(d.as_millis() as u64));
        }
        m
    }
}

/// `confidence`'s options, each optional with the defaults of its `measure` (itself
/// `"sampled"` by default, [`Confidence::for_measure`]); ranges are checked by
/// [`PolicyBuilder::build`].
fn confidence_of(options: &Map<String, Value>) -> Result<Confidence, PolicyError> {
    let measure = match options.get("measure").filter(|v| !v.is_null()) {
        None => Measure::default(),
        Some(Value::String(name)) => name.parse::<Measure>().map_err(|_| {
            PolicyError::new(
                "confidence.measure",
                PolicyErrorKind::Invalid,
                Message::text("unknown ")
                    .then_field("confidence.measure")
                    .then(format_args!(": {name:?} ({MEASURES})")),
            )
        })?,
        Some(v) => {
            return Err(PolicyError::invalid(
                "confidence.measure",
                format_args!("must be a string ({MEASURES}), not {v}"),
            ));
        }
    };
    let mut c = Confidence::for_measure(measure);
    for (key, v) in options {
        let whole = |range: (u64, u64)| {
            v.as_u64()
                .map(|x| x as usize)
                .ok_or_else(|| whole_error(key, range, v))
        };
        let share = || v.as_f64().ok_or_else(|| share_error(key, v));
        match key.as_str() {
            "measure" => {}
            "warmup" => c.warmup = whole(WARMUP)?,
            "keep" => c.keep = share()?,
            "group_tokens" => c.group_tokens = whole(GROUP_TOKENS)?,
            "top_logprobs" => c.top_logprobs = whole(TOP_LOGPROBS)?,
            "consensus" => c.consensus = share()?,
            _ => {
                let field = format!("confidence.{key}");
                return Err(PolicyError::new(
                    &field,
                    PolicyErrorKind::UnknownField,
                    Message::text("unknown field ")
                        .then_field(&field)
                        .then(format_args!(" ({CONFIDENCE_FIELDS})")),
                ));
            }
        }
    }
    Ok(c)
}

impl Serialize for Policy {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.to_json().serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Policy {
    /// Its JSON form, checked against the default limits (`n` = 1, no `max_samples`): a
    /// program with other limits checks it again with [`Policy::checked_for`].
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let fields = Map::<String, Value>::deserialize(deserializer)?;
        Policy::from_json(&fields, &PolicyLimits::default()).map_err(serde::de::Error::custom)
    }
}
