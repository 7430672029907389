//! Canonical JSON written straight from a text: object keys sorted, no insignificant
//! whitespace, strings and numbers as serde_json writes them; no tree built.

use std::fmt;

/// Appends `json` (one JSON value) to `out` in canonical form: object keys sorted by their
/// bytes (of two equal keys the later one kept, as a parsed object keeps it), no
/// insignificant whitespace, strings and numbers as serde_json writes them. Streamed from the
/// text with serde_json's parser, so it costs the canonical text and, while an object's
/// members are sorted, one copy of that object's text and a few words per member; never a
/// tree. An error (not JSON, nested deeper than serde_json's limit of 128) leaves `out`
/// partly written.
///
/// This is the text `serde_json::Value`'s `to_string` writes for the same JSON, without the
/// tree: vote keys compare calls with it, and arguments an upstream sent as a JSON value
/// rather than a string are kept in it.
///
/// ```
/// let mut out = String::new();
/// choicewise_proto::write_canonical_json(r#"{ "b": [1, 2.50], "a": "xA", "b": null }"#, &mut out).unwrap();
/// assert_eq!(out, r#"{"a":"xA","b":null}"#);
/// assert!(choicewise_proto::write_canonical_json("[1,", &mut String::new()).is_err());
/// ```
pub fn write_canonical_json(json: &str, out: &mut String) -> Result<(), serde_json::Error> {
    use serde::de::DeserializeSeed;
    let mut de = serde_json::Deserializer::from_str(json);
    Canonical(out).deserialize(&mut de)?;
    de.end()
}

/// Appends `text` as a JSON string, escaped as serde_json escapes it (`"`, `\`, and control
/// characters: the short escapes where JSON has one, else `\u00XX`).
///
/// ```
/// let mut out = String::new();
/// choicewise_proto::write_json_string("a \"b\"\n\u{1}", &mut out);
/// assert_eq!(out, r#""a \"b\"\n\u0001""#);
/// ```
pub fn write_json_string(text: &str, out: &mut String) {
    out.push('"');
    let mut from = 0;
    for (at, byte) in text.bytes().enumerate() {
        let escape = match byte {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            b'\x08' => "\\b",
            b'\t' => "\\t",
            b'\n' => "\\n",
            b'\x0c' => "\\f",
            b'\r' => "\\r",
            0..=0x1f => "",
            _ => continue,
        };
        out.push_str(&text[from..at]);
        match escape {
            "" => {
                const HEX: &[u8; 16] = b"0123456789abcdef";
                out.push_str("\\u00");
                out.push(HEX[(byte >> 4) as usize] as char);
                out.push(HEX[(byte & 0xf) as usize] as char);
            }
            escape => out.push_str(escape),
        }
        from = at + 1;
    }
    out.push_str(&text[from..]);
    out.push('"');
}

/// The bytes of a string [`write_json_string`] wrote (its quotes excluded), unescaped: how two
/// object keys compare.
fn unescaped(written: &str) -> impl Iterator<Item = u8> + '_ {
    let mut bytes = written.bytes();
    std::iter::from_fn(move || {
        let byte = bytes.next()?;
        if byte != b'\\' {
            return Some(byte);
        }
        Some(match bytes.next()? {
            b'b' => b'\x08',
            b't' => b'\t',
            b'n' => b'\n',
            b'f' => b'\x0c',
            b'r' => b'\r',
            b'u' => {
                // `\u00XX`: the two last digits are the byte.
                let mut digits = bytes.by_ref().take(4).skip(2);
                let mut hex = || {
                    let digit = digits.next().map_or('0', char::from);
                    digit.to_digit(16).unwrap_or(0) as u8
                };
                (hex() << 4) | hex()
            }
            other => other,
        })
    })
}

/// Writes one JSON value canonically into the string it holds ([`write_canonical_json`]).
pub(crate) struct Canonical<'a>(pub(crate) &'a mut String);

impl<'de> serde::de::DeserializeSeed<'de> for Canonical<'_> {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

/// Writes an object's key, escaped, into the string it holds.
struct Key<'a>(&'a mut String);

impl<'de> serde::de::DeserializeSeed<'de> for Key<'_> {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> serde::de::Visitor<'de> for Key<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string")
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<(), E> {
        write_json_string(v, self.0);
        Ok(())
    }
}

impl<'de> serde::de::Visitor<'de> for Canonical<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<(), E> {
        self.0.push_str(if v { "true" } else { "false" });
        Ok(())
    }

    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<(), E> {
        use fmt::Write;
        let _ = write!(self.0, "{v}");
        Ok(())
    }

    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<(), E> {
        use fmt::Write;
        let _ = write!(self.0, "{v}");
        Ok(())
    }

    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<(), E> {
        // As a parsed number writes itself (ryu's shortest form; JSON has no other floats).
        self.0.push_str(
            &serde_json::Number::from_f64(v).map_or_else(|| "null".to_string(), |n| n.to_string()),
        );
        Ok(())
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<(), E> {
        write_json_string(v, self.0);
        Ok(())
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<(), E> {
        self.0.push_str("null");
        Ok(())
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let out = self.0;
        out.push('[');
        let mut first = true;
        loop {
            let mark = out.len();
            if !first {
                out.push(',');
            }
            if seq.next_element_seed(Canonical(out))?.is_none() {
                out.truncate(mark);
                break;
            }
            first = false;
        }
        out.push(']');
        Ok(())
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let out = self.0;
        out.push('{');
        let start = out.len();
        // Each member as written after `start`: where it begins, where its key ends, where
        // it ends (members written one after the other, without commas), as offsets from
        // `start` of 4 bytes each: a few words per member however small.
        let mut members: Vec<[u32; 3]> = Vec::new();
        let offset = |at: usize| {
            u32::try_from(at - start)
                .map_err(|_| serde::de::Error::custom("an object of more than 4 GiB"))
        };
        loop {
            let begin = offset(out.len())?;
            if map.next_key_seed(Key(out))?.is_none() {
                break;
            }
            let key_end = offset(out.len())?;
            out.push(':');
            map.next_value_seed(Canonical(out))?;
            members.push([begin, key_end, offset(out.len())?]);
        }
        let text = out.split_off(start);
        let key = |m: &[u32; 3]| unescaped(&text[m[0] as usize + 1..m[1] as usize - 1]);
        members.sort_by(|a, b| key(a).cmp(key(b)));
        // Of equal keys the last written is kept (a stable sort leaves them in that order).
        members.dedup_by(|later, kept| {
            let same = key(later).eq(key(kept));
            if same {
                *kept = *later;
            }
            same
        });
        for (i, m) in members.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(&text[m[0] as usize..m[2] as usize]);
        }
        out.push('}');
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    /// The canonical form written from a tree: what [`super::write_canonical_json`] writes without one.
    fn from_tree(value: &serde_json::Value, out: &mut String) {
        use serde_json::Value;
        match value {
            Value::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    from_tree(item, out);
                }
                out.push(']');
            }
            Value::Object(map) => {
                let mut entries: Vec<(&String, &Value)> = map.iter().collect();
                entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
                out.push('{');
                for (i, (k, v)) in entries.into_iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(&Value::from(k.as_str()).to_string());
                    out.push(':');
                    from_tree(v, out);
                }
                out.push('}');
            }
            scalar => out.push_str(&scalar.to_string()),
        }
    }

    fn both(json: &str) -> (Option<String>, Option<String>) {
        let mut streamed = String::new();
        let streamed = super::write_canonical_json(json, &mut streamed)
            .ok()
            .map(|()| streamed);
        let tree = serde_json::from_str::<serde_json::Value>(json)
            .ok()
            .map(|v| {
                let mut out = String::new();
                from_tree(&v, &mut out);
                out
            });
        (streamed, tree)
    }

    #[test]
    fn the_canonical_form_is_the_trees_without_a_tree() {
        let controls: String = (0u8..0x80).map(char::from).collect();
        let control_key = serde_json::to_string(&controls).unwrap();
        let cases = [
            r#"{"b": 1, "a": [1, 2.5, -3, 1e5, 1E-7, 0.1, -0.0, 12345678901234567890123], "c": {}}"#,
            r#"{"a\"": 1, "a#": 2, "a\\": 3, "a\n": 4, "a\u0001": 5, "a": 6, "": 7}"#,
            r#"{"k": 1, "k": 2, "j": {"z": true, "z": false}}"#,
            r#"  [ "é\u00e9\ud83d\ude00", null, true, false, [], {} ]  "#,
            r#""just a string""#,
            "18446744073709551615",
            "-9223372036854775808",
            "1.7976931348623157e308",
            r#"{"x": 1} trailing"#,
            r#"{"x": 1e400}"#,
            r#"{"x": "\ud800"}"#,
            r#"{"cut": "#,
            "[1,]",
        ];
        for json in cases.iter().copied().chain([control_key.as_str()]) {
            let (streamed, tree) = both(json);
            assert_eq!(streamed, tree, "{json}");
        }
        let object = format!(r#"{{{control_key}: {control_key}, "z": 0, "\u0000": 1}}"#);
        let (streamed, tree) = both(&object);
        assert!(streamed.is_some());
        assert_eq!(streamed, tree);
        // Deeper than serde_json's limit: not JSON to either.
        let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
        assert_eq!(both(&deep), (None, None));
        let fine = format!("{}{}", "[".repeat(100), "]".repeat(100));
        assert_eq!(both(&fine).0.as_deref(), Some(fine.as_str()));
    }
}
