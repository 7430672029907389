//! Borrowed views of the best-effort value that know what is final.

use std::fmt;

use serde_json::Value;

use crate::parser::{OpenChild, PartialJson};

/// A node of the best-effort value, borrowed from a [`PartialJson`], that
/// knows whether it is final.
///
/// A node is *provisional* while it is still open: the containers that have
/// not seen their closing bracket yet and a string that has not seen its
/// closing quote. These form a single path from the root (the *open path*).
/// Every other node is *final*: it will not change any more and equals the
/// corresponding part of the complete value. (Numbers, `true`, `false` and
/// `null` only appear once complete, so they are always final.)
///
/// Navigating costs no more than navigating the [`Value`] itself.
///
/// ```
/// use choicewise_partial_json::PartialJson;
/// use serde_json::json;
///
/// let mut p = PartialJson::new();
/// p.push(r#"{"steps": [{"n": 1}, {"n": 2, "say": "hi th"#).unwrap();
/// let root = p.snapshot().unwrap();
/// let steps = root.get("steps").unwrap();
/// assert!(!steps.is_final());
/// assert!(steps.index(0).unwrap().is_final());
/// let second = steps.index(1).unwrap();
/// assert!(!second.is_final());
/// assert!(second.get("n").unwrap().is_final());
/// assert_eq!(second.get("say").unwrap().value(), &json!("hi th"));
/// assert!(!root.pointer("/steps/1/say").unwrap().is_final());
/// ```
#[derive(Clone, Copy)]
pub struct Snapshot<'a> {
    parser: &'a PartialJson,
    value: &'a Value,
    /// Nesting level of this node (the root is 0).
    level: usize,
    /// This node is on the open path.
    open: bool,
}

impl fmt::Debug for Snapshot<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Snapshot")
            .field("final", &!self.open)
            .field("value", self.value)
            .finish()
    }
}

/// Parses one RFC 6901 array index the way `serde_json` does.
fn parse_index(s: &str) -> Option<usize> {
    if s.starts_with('+') || (s.starts_with('0') && s.len() != 1) {
        return None;
    }
    s.parse().ok()
}

impl PartialJson {
    /// The best-effort value as a tree of [`Snapshot`] nodes that also say
    /// whether each part is final (closed) or still provisional.
    ///
    /// ```
    /// use choicewise_partial_json::PartialJson;
    ///
    /// let mut p = PartialJson::new();
    /// p.push(r#"{"title": "Done", "body": "Still wri"#).unwrap();
    /// let snap = p.snapshot().unwrap();
    /// assert!(!snap.is_final()); // the object is still open
    /// assert!(snap.get("title").unwrap().is_final());
    /// assert!(!snap.get("body").unwrap().is_final());
    /// ```
    pub fn snapshot(&self) -> Option<Snapshot<'_>> {
        let root = self.value()?;
        Some(Snapshot::root(self, root, self.open_count() > 0))
    }
}

impl<'a> Snapshot<'a> {
    pub(crate) fn root(parser: &'a PartialJson, value: &'a Value, open: bool) -> Self {
        Snapshot {
            parser,
            value,
            level: 0,
            open,
        }
    }

    /// The value of this node (borrowed, including any provisional parts).
    ///
    /// ```
    /// use choicewise_partial_json::PartialJson;
    /// use serde_json::json;
    ///
    /// let mut p = PartialJson::new();
    /// p.push("[true, \"x").unwrap();
    /// assert_eq!(p.snapshot().unwrap().value(), &json!([true, "x"]));
    /// ```
    pub fn value(&self) -> &'a Value {
        self.value
    }

    /// Whether this node is final: closed, and equal to the corresponding
    /// part of the complete value.
    ///
    /// ```
    /// use choicewise_partial_json::PartialJson;
    ///
    /// let mut p = PartialJson::new();
    /// p.push("[[1], [2").unwrap();
    /// let root = p.snapshot().unwrap();
    /// assert!(!root.is_final());
    /// assert!(root.index(0).unwrap().is_final());
    /// assert!(!root.index(1).unwrap().is_final());
    /// ```
    pub fn is_final(&self) -> bool {
        !self.open
    }

    /// Whether this node is still provisional (the opposite of
    /// [`is_final`](Self::is_final)).
    ///
    /// ```
    /// use choicewise_partial_json::PartialJson;
    ///
    /// let mut p = PartialJson::new();
    /// p.push("\"abc").unwrap();
    /// assert!(p.snapshot().unwrap().is_provisional());
    /// ```
    pub fn is_provisional(&self) -> bool {
        self.open
    }

    fn child(&self, value: &'a Value, open: bool) -> Snapshot<'a> {
        Snapshot {
            parser: self.parser,
            value,
            level: self.level + 1,
            open,
        }
    }

    /// The member `key` of an object node (`None` if absent or not an
    /// object).
    ///
    /// ```
    /// use choicewise_partial_json::PartialJson;
    ///
    /// let mut p = PartialJson::new();
    /// p.push(r#"{"a": 1, "b": {"#).unwrap();
    /// let root = p.snapshot().unwrap();
    /// assert!(root.get("a").unwrap().is_final());
    /// assert!(!root.get("b").unwrap().is_final());
    /// assert!(root.get("c").is_none());
    /// ```
    pub fn get(&self, key: &str) -> Option<Snapshot<'a>> {
        let child = self.value.as_object()?.get(key)?;
        let open = self.open && self.parser.open_child(self.level) == OpenChild::Key(key);
        Some(self.child(child, open))
    }

    /// The element `index` of an array node (`None` if out of bounds or not
    /// an array).
    ///
    /// ```
    /// use choicewise_partial_json::PartialJson;
    ///
    /// let mut p = PartialJson::new();
    /// p.push(r#"["done", "typ"#).unwrap();
    /// let root = p.snapshot().unwrap();
    /// assert!(root.index(0).unwrap().is_final());
    /// assert!(!root.index(1).unwrap().is_final());
    /// assert!(root.index(2).is_none());
    /// ```
    pub fn index(&self, index: usize) -> Option<Snapshot<'a>> {
        let items = self.value.as_array()?;
        let child = items.get(index)?;
        let open = self.open
            && index + 1 == items.len()
            && self.parser.open_child(self.level) == OpenChild::Last;
        Some(self.child(child, open))
    }

    /// The node at a JSON pointer (RFC 6901, as
    /// [`Value::pointer`]) relative to this node: `""` is this node,
    /// `"/answer"` a member, `"/items/0/text"` a nested one (`~1` stands for
    /// `/` and `~0` for `~` in keys).
    ///
    /// ```
    /// use choicewise_partial_json::PartialJson;
    /// use serde_json::json;
    ///
    /// let mut p = PartialJson::new();
    /// p.push(r#"{"items": [{"text": "Hel"#).unwrap();
    /// let text = p.snapshot().unwrap().pointer("/items/0/text").unwrap();
    /// assert_eq!(text.value(), &json!("Hel"));
    /// assert!(!text.is_final());
    /// ```
    pub fn pointer(&self, pointer: &str) -> Option<Snapshot<'a>> {
        if pointer.is_empty() {
            return Some(*self);
        }
        let rest = pointer.strip_prefix('/')?;
        let mut node = *self;
        for token in rest.split('/') {
            let unescaped;
            let token = if token.contains('~') {
                unescaped = token.replace("~1", "/").replace("~0", "~");
                unescaped.as_str()
            } else {
                token
            };
            node = match node.value {
                Value::Object(_) => node.get(token)?,
                Value::Array(_) => node.index(parse_index(token)?)?,
                _ => return None,
            };
        }
        Some(node)
    }

    /// The members of an object node in the map's order (empty for other
    /// nodes).
    ///
    /// ```
    /// use choicewise_partial_json::PartialJson;
    ///
    /// let mut p = PartialJson::new();
    /// p.push(r#"{"a": "x", "b": "y"#).unwrap();
    /// let finality: Vec<(&str, bool)> =
    ///     p.snapshot().unwrap().entries().map(|(k, v)| (k, v.is_final())).collect();
    /// assert_eq!(finality, [("a", true), ("b", false)]);
    /// ```
    pub fn entries(&self) -> impl Iterator<Item = (&'a str, Snapshot<'a>)> + '_ {
        let open_key = match (self.open, self.parser.open_child(self.level)) {
            (true, OpenChild::Key(k)) => Some(k),
            _ => None,
        };
        self.value
            .as_object()
            .into_iter()
            .flat_map(|m| m.iter())
            .map(move |(k, v)| (k.as_str(), self.child(v, open_key == Some(k.as_str()))))
    }

    /// The elements of an array node (empty for other nodes).
    ///
    /// ```
    /// use choicewise_partial_json::PartialJson;
    ///
    /// let mut p = PartialJson::new();
    /// p.push("[{}, [").unwrap();
    /// let finality: Vec<bool> = p.snapshot().unwrap().elements().map(|e| e.is_final()).collect();
    /// assert_eq!(finality, [true, false]);
    /// ```
    pub fn elements(&self) -> impl Iterator<Item = Snapshot<'a>> + '_ {
        let last_open = self.open && self.parser.open_child(self.level) == OpenChild::Last;
        let items: &'a [Value] = self.value.as_array().map_or(&[], |a| a.as_slice());
        let len = items.len();
        items
            .iter()
            .enumerate()
            .map(move |(i, v)| self.child(v, last_open && i + 1 == len))
    }
}
