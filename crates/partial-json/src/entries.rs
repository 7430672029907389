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
    mut each: impl FnMut(usize, Value) -> Result<(), E>,
) -> Result<Result<(), E>, serde_json::Error> {
    use serde::de::{Deserializer as _, Error as _, SeqAccess, Visitor};

    struct Entries<'f, E> {
        each: &'f mut dyn FnMut(usize, Value) -> Result<(), E>,
        stopped: Option<E>,
    }
    impl<'de, E> Visitor<'de> for &mut Entries<'_, E> {
        type Value = ();
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("an array")
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
            let mut i = 0;
            while let Some(entry) = seq.next_element::<Value>()? {
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
