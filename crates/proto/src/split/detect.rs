//! A stream's dialect, read from its first JSON event: its `type` (the truth), the API whose
//! untyped records carry one of its top-level keys, or its `event:` line; Chat Completions
//! otherwise.

use std::borrow::Cow;

use serde::Deserialize;

use crate::dialect::Dialect;
use crate::upstream::{dialect_of, dialect_of_record};

/// The dialect of a stream from its first JSON event: the `type` in its data (the truth), or
/// its `event:` line; Chat Completions otherwise.
pub(super) fn detect(event: &str, data: &str) -> Dialect {
    match serde_json::from_str::<FirstEvent<'_>>(data) {
        Ok(FirstEvent {
            kind: None,
            record: Some(dialect),
        }) => dialect,
        Ok(first) => dialect_from(first.kind.as_deref(), event),
        Err(_) => dialect_from(None, event),
    }
}

/// What a stream's first JSON event says of its dialect: its `type`, and the API whose
/// untyped records carry one of its top-level keys ([`dialect_of_record`]). Read key by
/// key, the values skipped, nothing but an escaped key or type copied.
struct FirstEvent<'a> {
    kind: Option<Cow<'a, str>>,
    record: Option<Dialect>,
}

impl<'de> Deserialize<'de> for FirstEvent<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::{Error as _, IgnoredAny, MapAccess, Visitor};
        struct Text<'a>(Cow<'a, str>);
        impl<'de> Deserialize<'de> for Text<'de> {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct V;
                impl<'de> Visitor<'de> for V {
                    type Value = Text<'de>;
                    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                        f.write_str("a string")
                    }
                    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Text<'de>, E> {
                        Ok(Text(Cow::Borrowed(v)))
                    }
                    fn visit_str<E>(self, v: &str) -> Result<Text<'de>, E> {
                        Ok(Text(Cow::Owned(v.to_string())))
                    }
                }
                d.deserialize_str(V)
            }
        }
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = FirstEvent<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<FirstEvent<'de>, A::Error> {
                let mut first = FirstEvent {
                    kind: None,
                    record: None,
                };
                let mut typed = false;
                while let Some(Text(key)) = map.next_key::<Text<'de>>()? {
                    if key == "type" {
                        if std::mem::replace(&mut typed, true) {
                            return Err(A::Error::duplicate_field("type"));
                        }
                        first.kind = map.next_value::<Option<Text<'de>>>()?.map(|t| t.0);
                        continue;
                    }
                    if first.record.is_none() {
                        first.record = dialect_of_record(|k| k == key);
                    }
                    map.next_value::<IgnoredAny>()?;
                }
                Ok(first)
            }
        }
        d.deserialize_map(V)
    }
}

/// The dialect an event's `type` (the truth) or, without one, its `event:` name says;
/// Chat Completions when neither names a typed dialect's event.
pub(super) fn dialect_from(kind: Option<&str>, event: &str) -> Dialect {
    kind.and_then(dialect_of)
        .or_else(|| dialect_of(event))
        .unwrap_or(Dialect::Chat)
}
