//! Reading a JSON array one entry at a time.

use serde_json::Value;

/// Calls `each` with every entry of the JSON array `text` in order, each parsed on its own
/// as the array is read (a visitor over the sequence): at most one entry's tree exists at a
/// time. `Err` when the text is not an array of JSON values; `Ok(Err(e))` when `each`
/// stopped with `e`. The project's one reader of a large array one item at a time: the
/// prompt's count (`choicewise-usage`), the translation of messages to other APIs
/// (`choicewise-proto`) and the gateway's ingresses.
///
/// ```
/// let mut roles = Vec::new();
/// let read = choicewise_partial_json::for_each_entry(br#"[{"role":"user"},{"role":"assistant"}]"#, |i, m| {
///     roles.push((i, m["role"].as_str().unwrap_or_default().to_string()));
///     Ok::<(), ()>(())
/// });
/// assert!(matches!(read, Ok(Ok(()))));
/// assert_eq!(roles, [(0, "user".to_string()), (1, "assistant".to_string())]);
/// assert!(choicewise_partial_json::for_each_entry(b"{}", |_, _| Ok::<(), ()>(())).is_err());
/// ```
pub fn for_each_entry<E>(
    text: &[u8],
    each: impl FnMut(usize, Value) -> Result<(), E>,
) -> Result<Result<(), E>, serde_json::Error> {
    each_element(text, each)
}

/// As [`for_each_entry`], each entry given as its JSON text as written
/// ([`RawValue`](serde_json::value::RawValue), borrowed from `text`): a reader that must keep
/// part of an entry as written (a number no `f64` holds) parses what it needs of it.
///
/// ```
/// let mut seen = Vec::new();
/// let read = choicewise_partial_json::for_each_raw_entry(br#"[{"n": 123456789012345678901234567890}, 2]"#, |i, raw| {
///     seen.push((i, raw.get().to_string()));
///     Ok::<(), ()>(())
/// });
/// assert!(matches!(read, Ok(Ok(()))));
/// assert_eq!(seen[0].1, r#"{"n": 123456789012345678901234567890}"#);
/// assert_eq!(seen[1], (1, "2".to_string()));
/// ```
pub fn for_each_raw_entry<'t, E>(
    text: &'t [u8],
    each: impl FnMut(usize, &'t serde_json::value::RawValue) -> Result<(), E>,
) -> Result<Result<(), E>, serde_json::Error> {
    each_element(text, each)
}

/// The one visitor of an array's elements, each deserialized as `T` (a tree, or its raw
/// text borrowed from `text`) and handed to `each` before the next is read.
fn each_element<'t, T: serde::Deserialize<'t>, E>(
    text: &'t [u8],
    mut each: impl FnMut(usize, T) -> Result<(), E>,
) -> Result<Result<(), E>, serde_json::Error> {
    use serde::de::{Deserializer as _, Error as _, SeqAccess, Visitor};

    struct Entries<'f, T, E> {
        each: &'f mut dyn FnMut(usize, T) -> Result<(), E>,
        stopped: Option<E>,
    }
    impl<'t, T: serde::Deserialize<'t>, E> Visitor<'t> for &mut Entries<'_, T, E> {
        type Value = ();
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("an array")
        }
        fn visit_seq<A: SeqAccess<'t>>(self, mut seq: A) -> Result<(), A::Error> {
            let mut i = 0;
            while let Some(entry) = seq.next_element::<T>()? {
                if let Err(e) = (self.each)(i, entry) {
                    self.stopped = Some(e);
                    return Err(A::Error::custom("stopped"));
                }
                i += 1;
            }
            Ok(())
        }
    }
    let mut entries = Entries {
        each: &mut each,
        stopped: None,
    };
    let mut de = serde_json::Deserializer::from_slice(text);
    let read = de.deserialize_seq(&mut entries).and_then(|()| de.end());
    match (entries.stopped.take(), read) {
        (Some(e), _) => Ok(Err(e)),
        (None, Err(e)) => Err(e),
        (None, Ok(())) => Ok(Ok(())),
    }
}

/// The JSON text `json` without its insignificant whitespace, everything else as written:
/// its numbers digit for digit (a 30-digit integer stays one, never a float), its strings'
/// escapes as they are. For text already known to be JSON (a
/// [`RawValue`](serde_json::value::RawValue)'s): it is not checked here.
///
/// ```
/// let raw = "{ \"id\" : 123456789012345678901234567890,\n \"s\": \"a b\\\" c\" }";
/// assert_eq!(
///     choicewise_partial_json::compact_json(raw),
///     r#"{"id":123456789012345678901234567890,"s":"a b\" c"}"#
/// );
/// ```
pub fn compact_json(json: &str) -> String {
    let mut compact = Compacting::default();
    let kept: Vec<u8> = json.bytes().filter(|&b| compact.keeps(b)).collect();
    // Only ASCII whitespace was left out: the rest is the text's own UTF-8.
    String::from_utf8(kept).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// The rule of [`compact_json`] one byte at a time, for a writer that leaves out a JSON
/// text's insignificant whitespace as it copies the text somewhere of its own (escaped into
/// a JSON string, or unescaped out of one) without the compact text in memory.
///
/// ```
/// let mut compact = choicewise_partial_json::Compacting::default();
/// let text = br#"{ "a b": [1, "\" x"] }"#;
/// let kept: Vec<u8> = text.iter().copied().filter(|&b| compact.keeps(b)).collect();
/// assert_eq!(kept, br#"{"a b":[1,"\" x"]}"#);
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct Compacting {
    in_string: bool,
    escaped: bool,
}

impl Compacting {
    /// Whether `b`, the next byte of the JSON text, is kept: everything but the whitespace
    /// between tokens.
    pub fn keeps(&mut self, b: u8) -> bool {
        if self.in_string {
            match (self.escaped, b) {
                (true, _) => self.escaped = false,
                (false, b'\\') => self.escaped = true,
                (false, b'"') => self.in_string = false,
                _ => {}
            }
            true
        } else if matches!(b, b' ' | b'\t' | b'\n' | b'\r') {
            false
        } else {
            self.in_string = b == b'"';
            true
        }
    }
}

/// Calls `each` with every field of the JSON object `text` in order, its key (unescaped) and
/// its value as its JSON text as written ([`RawValue`](serde_json::value::RawValue),
/// borrowed from `text`), by a visitor over the map on a borrowed deserializer: nothing of
/// the object is parsed into a tree, and a key is copied only when it has an escape. A key
/// sent twice is given twice (a reader keeping the last one reads as a parsed tree would).
/// `Err` when the text is not a JSON object; `Ok(Err(e))` when `each` stopped with `e`.
///
/// ```
/// let mut seen = Vec::new();
/// let read = choicewise_partial_json::for_each_raw_field(br#"{"role": "user", "content": [1, {"a": 2}]}"#, |key, raw| {
///     seen.push((key.to_string(), raw.get().to_string()));
///     Ok::<(), ()>(())
/// });
/// assert!(matches!(read, Ok(Ok(()))));
/// assert_eq!(seen[1], ("content".to_string(), r#"[1, {"a": 2}]"#.to_string()));
/// assert!(choicewise_partial_json::for_each_raw_field(b"[]", |_, _| Ok::<(), ()>(())).is_err());
/// ```
pub fn for_each_raw_field<'t, E>(
    text: &'t [u8],
    mut each: impl FnMut(&str, &'t serde_json::value::RawValue) -> Result<(), E>,
) -> Result<Result<(), E>, serde_json::Error> {
    use serde::de::{Deserializer as _, Error as _, MapAccess, Visitor};
    use serde_json::value::RawValue;
    use std::borrow::Cow;

    /// A key, borrowed from the text unless it has an escape.
    struct Key<'t>(Cow<'t, str>);
    impl<'t> serde::Deserialize<'t> for Key<'t> {
        fn deserialize<D: serde::Deserializer<'t>>(d: D) -> Result<Self, D::Error> {
            struct KeyVisitor;
            impl<'t> Visitor<'t> for KeyVisitor {
                type Value = Key<'t>;
                fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                    f.write_str("a key")
                }
                fn visit_borrowed_str<E>(self, s: &'t str) -> Result<Key<'t>, E> {
                    Ok(Key(Cow::Borrowed(s)))
                }
                fn visit_str<E>(self, s: &str) -> Result<Key<'t>, E> {
                    Ok(Key(Cow::Owned(s.to_string())))
                }
            }
            d.deserialize_str(KeyVisitor)
        }
    }
    struct Fields<'f, 't, E> {
        each: &'f mut dyn FnMut(&str, &'t RawValue) -> Result<(), E>,
        stopped: Option<E>,
    }
    impl<'t, E> Visitor<'t> for &mut Fields<'_, 't, E> {
        type Value = ();
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("an object")
        }
        fn visit_map<A: MapAccess<'t>>(self, mut map: A) -> Result<(), A::Error> {
            while let Some(key) = map.next_key::<Key<'t>>()? {
                let value: &'t RawValue = map.next_value()?;
                if let Err(e) = (self.each)(&key.0, value) {
                    self.stopped = Some(e);
                    return Err(A::Error::custom("stopped"));
                }
            }
            Ok(())
        }
    }
    let mut fields = Fields {
        each: &mut each,
        stopped: None,
    };
    let mut de = serde_json::Deserializer::from_slice(text);
    let read = de.deserialize_map(&mut fields).and_then(|()| de.end());
    match (fields.stopped.take(), read) {
        (Some(e), _) => Ok(Err(e)),
        (None, Err(e)) => Err(e),
        (None, Ok(())) => Ok(Ok(())),
    }
}
