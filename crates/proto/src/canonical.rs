//! Canonical JSON written straight from a text: object keys sorted, no insignificant
//! whitespace, strings and numbers as serde_json writes them; no tree built.

use std::fmt::{self, Write as _};

/// Appends `json` (one JSON value) to `out` in canonical form: object keys sorted by their
/// bytes (of two equal keys the later one kept, as a parsed object keeps it), no
/// insignificant whitespace, strings and numbers as serde_json writes them. Streamed from the
/// text with serde_json's parser; never a tree. An outermost object (one inside no other
/// object) is sorted by where its members are in `json`: it costs 4 bytes a member and no
/// copy, its members' values read twice. An object inside another is written to a buffer
/// and sorted there: it costs its canonical text once more while it is written, and a few
/// words per member. So `out` may be a hash or a counter that keeps nothing (any
/// [`fmt::Write`]): the canonical text of an object of many small members costs a fraction
/// of its bytes. An error (not JSON, nested deeper than serde_json's limit of 128, a writer
/// that failed) leaves `out` partly written.
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
///
/// // Any writer: here one that counts the bytes and keeps none.
/// struct Count(usize);
/// impl std::fmt::Write for Count {
///     fn write_str(&mut self, s: &str) -> std::fmt::Result {
///         self.0 += s.len();
///         Ok(())
///     }
/// }
/// let mut count = Count(0);
/// choicewise_proto::write_canonical_json(r#"{"z": {"b": 1, "a": 2}, "y": [ 1e2 ]}"#, &mut count).unwrap();
/// assert_eq!(count.0, r#"{"y":[100.0],"z":{"a":2,"b":1}}"#.len());
/// ```
pub fn write_canonical_json<W: fmt::Write>(
    json: &str,
    out: &mut W,
) -> Result<(), serde_json::Error> {
    use serde::de::DeserializeSeed;
    let mut de = serde_json::Deserializer::from_str(json);
    Streamed {
        out,
        input: json,
        depth: 0,
        in_object: false,
        first: true,
    }
    .deserialize(&mut de)?;
    de.end()
}

/// The deepest serde_json nests containers: entering the 128th fails, as its parser does.
const DEPTH_LIMIT: usize = 128;

fn too_deep<E: serde::de::Error>(depth: usize) -> Result<(), E> {
    match depth + 1 >= DEPTH_LIMIT {
        true => Err(E::custom("recursion limit exceeded")),
        false => Ok(()),
    }
}

fn wrote<E: serde::de::Error>(result: fmt::Result) -> Result<(), E> {
    result.map_err(|_| E::custom("the canonical text's writer failed"))
}

/// Writes one JSON value canonically into any writer ([`write_canonical_json`]): arrays and
/// scalars as they are read; an outermost object (`in_object` false) sorted by its members'
/// places in `input`, the text being read; an object inside another through a [`Buffered`]
/// copy. `first` is false for an array's element after its first: it writes the comma.
struct Streamed<'a, 'de, W: fmt::Write> {
    out: &'a mut W,
    input: &'de str,
    /// The containers around the value, in the whole text.
    depth: usize,
    in_object: bool,
    first: bool,
}

impl<'de, W: fmt::Write> serde::de::DeserializeSeed<'de> for Streamed<'_, 'de, W> {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        if !self.first {
            wrote::<D::Error>(self.out.write_char(','))?;
        }
        d.deserialize_any(self)
    }
}

impl<'de, W: fmt::Write> serde::de::Visitor<'de> for Streamed<'_, 'de, W> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<(), E> {
        wrote(self.out.write_str(if v { "true" } else { "false" }))
    }

    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<(), E> {
        wrote(write!(self.out, "{v}"))
    }

    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<(), E> {
        wrote(write!(self.out, "{v}"))
    }

    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<(), E> {
        wrote(self.out.write_str(&float(v)))
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<(), E> {
        wrote(write_json_string(v, self.out))
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<(), E> {
        wrote(self.out.write_str("null"))
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        too_deep(self.depth)?;
        wrote::<A::Error>(self.out.write_char('['))?;
        let mut first = true;
        while seq
            .next_element_seed(Streamed {
                out: &mut *self.out,
                input: self.input,
                depth: self.depth + 1,
                in_object: self.in_object,
                first,
            })?
            .is_some()
        {
            first = false;
        }
        wrote(self.out.write_char(']'))
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        use serde::de::Error;
        too_deep(self.depth)?;
        if self.in_object {
            // Inside another object, which reads this one's text again: sorted in a copy,
            // so that no text is read more than twice however deep objects nest.
            let mut text = String::new();
            Buffered {
                out: &mut text,
                depth: self.depth,
            }
            .visit_map(map)?;
            return wrote(self.out.write_str(&text));
        }
        let input = self.input;
        let base = input.as_ptr() as usize;
        // Each member by where its key's opening quote is in `input`: 4 bytes a member.
        let mut members: Vec<u32> = Vec::new();
        while let Some(key) = map.next_key::<&'de serde_json::value::RawValue>()? {
            let key = key.get();
            let at = (key.as_ptr() as usize)
                .checked_sub(base)
                .filter(|at| at + key.len() <= input.len())
                .ok_or_else(|| A::Error::custom("a key outside the text being read"))?;
            let at =
                u32::try_from(at).map_err(|_| A::Error::custom("an object of more than 4 GiB"))?;
            // The key read as a string: the raw read checks its syntax only, not its
            // surrogates and control characters, which its comparisons below rely on.
            let mut de = serde_json::Deserializer::from_str(key);
            serde::Deserializer::deserialize_str(&mut de, Key(&mut Discard))
                .map_err(A::Error::custom)?;
            map.next_value::<&'de serde_json::value::RawValue>()?;
            members.push(at);
        }
        let key = |at: &u32| &input[*at as usize + 1..];
        members.sort_unstable_by(|a, b| compare_keys(key(a), key(b)).then(a.cmp(b)));
        // Of equal keys the last in the text is kept; the others are checked as JSON (a
        // parsed object reads them too), written nowhere.
        let mut dropped: Vec<u32> = Vec::new();
        members.dedup_by(|later, kept| {
            let same = compare_keys(key(later), key(kept)).is_eq();
            if same {
                dropped.push(*kept);
                *kept = *later;
            }
            same
        });
        let value = |at: u32, mut out: &mut dyn fmt::Write| {
            let mut de = serde_json::Deserializer::from_str(&input[value_start(input, at)..]);
            serde::de::DeserializeSeed::deserialize(
                Streamed {
                    out: &mut out,
                    input,
                    depth: self.depth + 1,
                    in_object: true,
                    first: true,
                },
                &mut de,
            )
        };
        for at in dropped {
            value(at, &mut Discard).map_err(A::Error::custom)?;
        }
        wrote::<A::Error>(self.out.write_char('{'))?;
        for (i, at) in members.into_iter().enumerate() {
            if i > 0 {
                wrote::<A::Error>(self.out.write_char(','))?;
            }
            let mut de = serde_json::Deserializer::from_str(&input[at as usize..]);
            serde::Deserializer::deserialize_str(&mut de, Key(&mut *self.out))
                .map_err(A::Error::custom)?;
            wrote::<A::Error>(self.out.write_char(':'))?;
            value(at, &mut *self.out).map_err(A::Error::custom)?;
        }
        wrote(self.out.write_char('}'))
    }
}

/// A writer that keeps nothing: a value read only to be checked.
struct Discard;

impl fmt::Write for Discard {
    fn write_str(&mut self, _: &str) -> fmt::Result {
        Ok(())
    }
}

/// A float as a parsed number writes itself (ryu's shortest form; JSON has no other floats).
fn float(v: f64) -> String {
    serde_json::Number::from_f64(v).map_or_else(|| "null".to_string(), |n| n.to_string())
}

/// Where the value of the member whose key opens at `at` begins: past the key's closing
/// quote, the colon and any whitespace (the member was read whole: both are there).
fn value_start(input: &str, at: u32) -> usize {
    let bytes = input.as_bytes();
    let mut i = at as usize + 1;
    while i < bytes.len() && bytes[i] != b'"' {
        i += if bytes[i] == b'\\' { 2 } else { 1 };
    }
    i += 1;
    while i < bytes.len() && matches!(bytes[i], b' ' | b'\t' | b'\n' | b'\r' | b':') {
        i += 1;
    }
    i
}

/// Two JSON strings, each from past its opening quote (as read, or as [`write_json_string`]
/// wrote it), ordered by their unescaped bytes: how two object keys compare. Their common
/// prefix without an escape is compared as it is; from the first escape on, they are
/// unescaped as they are compared.
fn compare_keys(a: &str, b: &str) -> std::cmp::Ordering {
    use std::cmp::Ordering;
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let mut at = 0;
    loop {
        match (a.get(at).copied(), b.get(at).copied()) {
            (Some(b'\\'), _) | (_, Some(b'\\')) => {
                return unescaped_input(&a[at..]).cmp(unescaped_input(&b[at..]));
            }
            (Some(b'"') | None, Some(b'"') | None) => return Ordering::Equal,
            (Some(b'"') | None, Some(_)) => return Ordering::Less,
            (Some(_), Some(b'"') | None) => return Ordering::Greater,
            (Some(x), Some(y)) if x != y => return x.cmp(&y),
            _ => at += 1,
        }
    }
}

/// The bytes of a JSON string as read (from past its opening quote to its closing one),
/// unescaped: `\uXXXX` (surrogate pairs joined) as UTF-8, the short escapes as their byte.
/// The string was checked as JSON before: a lone surrogate is not met.
fn unescaped_input(raw: &[u8]) -> impl Iterator<Item = u8> + '_ {
    let mut bytes = raw.iter().copied();
    let mut pending = [0u8; 4];
    let (mut next, mut end) = (0usize, 0usize);
    let hex4 = |bytes: &mut std::iter::Copied<std::slice::Iter<'_, u8>>| -> u32 {
        (0..4).fold(0u32, |n, _| {
            let digit = bytes
                .next()
                .map_or(0, |b| char::from(b).to_digit(16).unwrap_or(0));
            (n << 4) | digit
        })
    };
    std::iter::from_fn(move || {
        if next < end {
            next += 1;
            return Some(pending[next - 1]);
        }
        let byte = bytes.next()?;
        match byte {
            b'"' => None,
            b'\\' => Some(match bytes.next()? {
                b'b' => b'\x08',
                b't' => b'\t',
                b'n' => b'\n',
                b'f' => b'\x0c',
                b'r' => b'\r',
                b'u' => {
                    let mut code = hex4(&mut bytes);
                    if (0xD800..0xDC00).contains(&code) {
                        // A high surrogate: its low one follows as `\uXXXX`.
                        bytes.next();
                        bytes.next();
                        let low = hex4(&mut bytes);
                        code =
                            0x10000 + ((code - 0xD800) << 10) + (low.wrapping_sub(0xDC00) & 0x3ff);
                    }
                    let c = char::from_u32(code).unwrap_or(char::REPLACEMENT_CHARACTER);
                    end = c.encode_utf8(&mut pending).len();
                    next = 1;
                    pending[0]
                }
                other => other,
            }),
            byte => Some(byte),
        }
    })
}

/// Appends `text` as a JSON string, escaped as serde_json escapes it (`"`, `\`, and control
/// characters: the short escapes where JSON has one, else `\u00XX`).
///
/// ```
/// let mut out = String::new();
/// choicewise_proto::write_json_string("a \"b\"\n\u{1}", &mut out).unwrap();
/// assert_eq!(out, r#""a \"b\"\n\u0001""#);
/// ```
pub fn write_json_string<W: fmt::Write + ?Sized>(text: &str, out: &mut W) -> fmt::Result {
    out.write_char('"')?;
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
        out.write_str(&text[from..at])?;
        match escape {
            "" => {
                const HEX: &[u8; 16] = b"0123456789abcdef";
                out.write_str("\\u00")?;
                out.write_char(HEX[(byte >> 4) as usize] as char)?;
                out.write_char(HEX[(byte & 0xf) as usize] as char)?;
            }
            escape => out.write_str(escape)?,
        }
        from = at + 1;
    }
    out.write_str(&text[from..])?;
    out.write_char('"')
}

/// Writes one JSON value canonically into the string it holds ([`write_canonical_json`]),
/// each object's members sorted in place as ranges of what it wrote. `depth`: the containers
/// around the value in the whole text.
pub(crate) struct Buffered<'a> {
    out: &'a mut String,
    depth: usize,
}

impl<'a> Buffered<'a> {
    /// A value at the top of what is read, written into `out`.
    pub(crate) fn new(out: &'a mut String) -> Self {
        Buffered { out, depth: 0 }
    }
}

impl<'de> serde::de::DeserializeSeed<'de> for Buffered<'_> {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

/// Writes an object's key, escaped, into the writer it holds.
struct Key<'a, W: fmt::Write + ?Sized>(&'a mut W);

impl<'de, W: fmt::Write + ?Sized> serde::de::DeserializeSeed<'de> for Key<'_, W> {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de, W: fmt::Write + ?Sized> serde::de::Visitor<'de> for Key<'_, W> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string")
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<(), E> {
        wrote(write_json_string(v, self.0))
    }
}

impl<'de> serde::de::Visitor<'de> for Buffered<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<(), E> {
        self.out.push_str(if v { "true" } else { "false" });
        Ok(())
    }

    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<(), E> {
        wrote(write!(self.out, "{v}"))
    }

    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<(), E> {
        wrote(write!(self.out, "{v}"))
    }

    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<(), E> {
        self.out.push_str(&float(v));
        Ok(())
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<(), E> {
        wrote(write_json_string(v, self.out))
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<(), E> {
        self.out.push_str("null");
        Ok(())
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        too_deep(self.depth)?;
        let (out, depth) = (self.out, self.depth + 1);
        out.push('[');
        let mut first = true;
        loop {
            let mark = out.len();
            if !first {
                out.push(',');
            }
            if seq.next_element_seed(Buffered { out, depth })?.is_none() {
                out.truncate(mark);
                break;
            }
            first = false;
        }
        out.push(']');
        Ok(())
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        too_deep(self.depth)?;
        let (out, depth) = (self.out, self.depth + 1);
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
            map.next_value_seed(Buffered { out, depth })?;
            members.push([begin, key_end, offset(out.len())?]);
        }
        let text = out.split_off(start);
        let key = |m: &[u32; 3]| &text[m[0] as usize + 1..m[1] as usize];
        members.sort_by(|a, b| compare_keys(key(a), key(b)));
        // Of equal keys the last written is kept (a stable sort leaves them in that order).
        members.dedup_by(|later, kept| {
            let same = compare_keys(key(later), key(kept)).is_eq();
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
            // Keys with and without escapes, equal once unescaped, in both orders.
            r#"{"b": 1, "\u0061": 2, "a": 3, "\u0062": 4, "ab": 5, "a\u0062": 6, "a": 7}"#,
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

    #[test]
    fn objects_sorted_in_place_or_by_their_places_agree_with_the_tree() {
        let cases = [
            // Escaped keys compare by their bytes: `\u00e9` is `é`, a surrogate pair one
            // character, `\/` a slash; the later of two equal keys is kept.
            r#"{"\u00e9": 1, "é": 2, "\ud83d\ude00": 3, "😀": 4, "a\/b": 5, "a/b": 6, "\"": 7}"#,
            r#"{"b": {"d": {"f": 1, "e": [{"z": 1, "y": 2}]}, "c": 0}, "a": [{"k": {"j": 1, "i": 2}}]}"#,
            r#"{"x": {"b": 1}, "x": {"a": 2}, "w": [], "w": {}}"#,
            // A dropped member is read all the same: not JSON, not JSON to either.
            r#"{"x": "\ud800", "x": 1}"#,
            r#"{"x": 1e400, "x": 1}"#,
            r#"{"x": [1, {"y": "\ud800"}], "x": 1}"#,
            r#"{"\ud800": 1}"#,
            r#"{"\ud800": 1, "\ud800": 2}"#,
            r#"{"\ud800": 1, "\ufffd": 2, "a": 3}"#,
            r#"{"\udc00x": 1, "y": 2}"#,
            "{\"a\u{1}\": 1, \"b\": 2}",
            r#"{"a": {"\ud800": 1, "b": 2}}"#,
            r#"{"k\u0000": 1, "k": 2, "k\u001f": 3}"#,
            // Keys in an object read again, compared as written: escaped, or not.
            r#"{"o": {"k\u0000": 1, "k": 2, "k\u001f": 3, "\"": 4, "\\": 5, "k\n": 6, "k": 7}}"#,
            "{ \"a\" \t:\n 1 , \"b\"\r\n: {\"c\" : 2 } }",
        ];
        for json in cases {
            let (streamed, tree) = both(json);
            assert_eq!(streamed, tree, "{json}");
        }
        // serde_json's limit of 128, met through objects read again and arrays alike.
        let mut refused = 0;
        for depth in 124..132 {
            // Each pair of levels as two objects, two arrays, or an array and an object.
            for (open, close) in [
                ("{\"a\":{\"b\":", "}}"),
                ("[[", "]]"),
                ("[{\"a\":", "}]"),
                ("{\"a\":[", "]}"),
            ] {
                let json = format!("{}1{}", open.repeat(depth / 2), close.repeat(depth / 2));
                let (streamed, tree) = both(&json);
                assert_eq!(streamed, tree, "{depth} deep: {open}");
                refused += usize::from(tree.is_none());
            }
        }
        assert!((4..32).contains(&refused), "the limit crossed: {refused}");
        // A writer that keeps nothing gets the same text, piece by piece.
        struct Pieces(String);
        impl std::fmt::Write for Pieces {
            fn write_str(&mut self, s: &str) -> std::fmt::Result {
                self.0.push_str(s);
                Ok(())
            }
        }
        let json = r#"{"z": [3, {"b": 1, "a": 2}], "y": "é\n", "x": 1.50}"#;
        let mut pieces = Pieces(String::new());
        super::write_canonical_json(json, &mut pieces).unwrap();
        assert_eq!(Some(pieces.0), both(json).1);
    }
}
