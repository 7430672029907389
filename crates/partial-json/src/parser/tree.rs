//! The best-effort value: walking its open path and maintaining it as
//! tokens complete.

use serde_json::{Map, Number, Value};

use super::number::Num;
use super::{PartialJson, STRING_START_CAPACITY, State};
use crate::error::PartialJsonError;

/// One open container.
#[derive(Debug, Clone)]
pub(super) struct Frame {
    /// Object (else array).
    pub(super) object: bool,
    /// For objects: the key of the member being parsed (the last complete
    /// key). The buffer is reused across members and frames.
    pub(super) key: String,
    /// For objects: where the open child is in the map's iteration order.
    /// While a child is open its map does not change, so this reaches it
    /// without comparing keys.
    position: Position,
}

/// Where the open child of an object is in its map's iteration order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Position {
    /// Not known: found by its key.
    Unknown,
    /// The last entry.
    Last,
    /// This many entries before the last.
    FromEnd(usize),
    /// This many entries after the first.
    FromFront(usize),
}

/// How many entries from either end of a map are searched for the open
/// child.
const POSITION_SEARCH_LIMIT: usize = 8;

/// Drops a value of any depth without recursion.
pub(super) fn drop_iteratively(value: Value) {
    let mut pending = vec![value];
    while let Some(v) = pending.pop() {
        match v {
            Value::Array(items) => pending.extend(items),
            Value::Object(map) => pending.extend(map.into_iter().map(|(_, v)| v)),
            _ => {}
        }
    }
}

impl Default for Frame {
    fn default() -> Self {
        Frame {
            object: false,
            key: String::new(),
            position: Position::Unknown,
        }
    }
}

/// The open child of the object `map` (`frame` being its frame).
#[inline(never)]
fn object_child<'a>(map: &'a mut Map<String, Value>, frame: &Frame) -> Option<&'a mut Value> {
    debug_assert!(position_matches_key(map, frame));
    match frame.position {
        Position::FromFront(n) => map.values_mut().nth(n),
        Position::FromEnd(n) => map.values_mut().nth_back(n),
        Position::Last => map.values_mut().next_back(),
        Position::Unknown => map.get_mut(frame.key.as_str()),
    }
}

/// Whether the open child of `map` found through `frame.position` has the
/// frame's key (for debug assertions).
fn position_matches_key(map: &Map<String, Value>, frame: &Frame) -> bool {
    let key = match frame.position {
        Position::FromFront(n) => map.keys().nth(n),
        Position::FromEnd(n) => map.keys().nth_back(n),
        Position::Last => map.keys().next_back(),
        Position::Unknown => return true,
    };
    key == Some(&frame.key)
}

/// Where `key` is in `map`, if among the first or last few entries (the
/// nearer end is taken). Works for any map order (sorted or insertion).
fn find_position(map: &Map<String, Value>, key: &str) -> Position {
    let len = map.len();
    if let Some(n) = map
        .keys()
        .rev()
        .take(POSITION_SEARCH_LIMIT)
        .position(|k| k == key)
    {
        let from_front = len - 1 - n;
        return if n == 0 {
            Position::Last
        } else if from_front < n {
            Position::FromFront(from_front)
        } else {
            Position::FromEnd(n)
        };
    }
    match map
        .keys()
        .take(POSITION_SEARCH_LIMIT)
        .position(|k| k == key)
    {
        Some(n) => Position::FromFront(n),
        None => Position::Unknown,
    }
}

/// The node reached from the root by following the open child of each of
/// `path` (open frames from the root).
///
/// Inlined (a call with its saved registers cost as much as a step down):
/// the last element of an array and the last member of an object are
/// reached here, other members of objects by [`object_child`].
#[inline(always)]
fn descend<'a>(root: &'a mut Option<Value>, path: &[Frame]) -> Option<&'a mut Value> {
    let mut v = root.as_mut()?;
    for frame in path {
        v = match v {
            Value::Array(items) => items.last_mut()?,
            Value::Object(map) => {
                if frame.position == Position::Last {
                    debug_assert!(position_matches_key(map, frame));
                    map.values_mut().next_back()?
                } else {
                    object_child(map, frame)?
                }
            }
            _ => return None,
        };
    }
    Some(v)
}

/// The container of the last of `frames` (`frames` being all open frames
/// from the root).
#[inline(always)]
fn container_mut<'a>(root: &'a mut Option<Value>, frames: &[Frame]) -> Option<&'a mut Value> {
    let (_, path) = frames.split_last()?;
    descend(root, path)
}

/// The open value string in the tree (`frames`: all open frames).
#[inline]
pub(super) fn leaf_mut<'a>(
    root: &'a mut Option<Value>,
    frames: &[Frame],
) -> Option<&'a mut String> {
    match descend(root, frames) {
        Some(Value::String(s)) => Some(s),
        _ => None,
    }
}

impl PartialJson {
    /// Attaches `value` as the current child of the innermost open container
    /// (or as the root). `open`: the value is an open string or container
    /// (so it will be navigated to).
    fn attach(&mut self, value: Value, open: bool) {
        self.changed = true;
        if self.depth == 0 {
            self.root = Some(value);
            return;
        }
        let frames = &self.frames[..self.depth];
        let Some(container) = container_mut(&mut self.root, frames) else {
            debug_assert!(false, "open path does not match the tree");
            return;
        };
        let mut position = Position::Unknown;
        match container {
            Value::Object(map) => {
                if let Some(frame) = frames.last() {
                    map.insert(frame.key.clone(), value);
                    if open {
                        position = find_position(map, &frame.key);
                    }
                }
            }
            Value::Array(items) => items.push(value),
            _ => debug_assert!(false, "open frame is not a container"),
        }
        if let Some(frame) = self.frames.get_mut(self.depth - 1) {
            frame.position = position;
        }
    }

    /// Moves the decoded text in `scratch` into the open value string,
    /// attaching it first if needed.
    pub(super) fn flush_string(&mut self) {
        if self.leaf_in_tree {
            if !self.scratch.is_empty() {
                self.changed = true;
                let scratch = std::mem::take(&mut self.scratch);
                match leaf_mut(&mut self.root, &self.frames[..self.depth]) {
                    Some(s) => s.push_str(&scratch),
                    None => debug_assert!(false, "open string not found in the tree"),
                }
                self.scratch = scratch;
                self.scratch.clear();
            }
        } else {
            // The string continues in later fragments: leave it room to grow
            // instead of reallocating at 8, 16, 32, ... bytes.
            let mut s = String::with_capacity(self.scratch.len().max(STRING_START_CAPACITY));
            s.push_str(&self.scratch);
            self.attach(Value::String(s), true);
            self.scratch.clear();
            self.leaf_in_tree = true;
        }
    }

    /// Handles the closing quote of a string.
    pub(super) fn close_string(&mut self, key: bool) {
        if key {
            if let Some(frame) = self
                .depth
                .checked_sub(1)
                .and_then(|t| self.frames.get_mut(t))
            {
                std::mem::swap(&mut frame.key, &mut self.scratch);
            }
            self.scratch.clear();
            self.state = State::Colon;
        } else {
            self.flush_string();
            self.leaf_in_tree = false;
            self.state = self.after_value_state();
        }
    }

    /// Converts the complete number that ended in grammar state `num`,
    /// whose text is `scratch` followed by `part`, and attaches it.
    pub(super) fn complete_number(&mut self, num: Num, part: &str) -> Result<(), PartialJsonError> {
        // Common cases are converted directly (bit-identical to serde_json);
        // the rest by serde_json itself. Only out-of-range numbers fail.
        let number = match self.digits.to_number(num) {
            Some(number) => Ok(number),
            None if self.scratch.is_empty() => part.parse::<Number>(),
            None => {
                self.scratch.push_str(part);
                self.scratch.parse::<Number>()
            }
        };
        self.scratch.clear();
        let number = number.map_err(|_| PartialJsonError::NumberOutOfRange {
            offset: self.token_start,
        })?;
        self.complete_scalar(Value::Number(number));
        Ok(())
    }

    pub(super) fn complete_scalar(&mut self, value: Value) {
        self.attach(value, false);
        self.state = self.after_value_state();
    }

    fn after_value_state(&self) -> State {
        if self.depth == 0 {
            State::Done
        } else {
            State::AfterValue
        }
    }

    /// Opens a container whose bracket is at byte `offset`.
    pub(super) fn open(&mut self, object: bool, offset: u64) -> Result<(), PartialJsonError> {
        if self.depth >= self.max_depth {
            return Err(PartialJsonError::DepthLimitExceeded {
                offset,
                max_depth: self.max_depth,
            });
        }
        self.attach(
            if object {
                Value::Object(Map::new())
            } else {
                Value::Array(Vec::new())
            },
            true,
        );
        if self.frames.len() == self.depth {
            self.frames.push(Frame::default());
        }
        if let Some(frame) = self.frames.get_mut(self.depth) {
            frame.object = object;
            frame.key.clear();
            frame.position = Position::Unknown;
        }
        self.depth += 1;
        self.top_is_object = object;
        self.deepest = self.deepest.max(self.depth);
        self.state = if object {
            State::ObjectFirst
        } else {
            State::ArrayFirst
        };
        Ok(())
    }

    /// Closes the innermost container.
    pub(super) fn close(&mut self) {
        self.depth = self.depth.saturating_sub(1);
        self.top_is_object = self
            .depth
            .checked_sub(1)
            .and_then(|top| self.frames.get(top))
            .is_some_and(|f| f.object);
        self.state = self.after_value_state();
    }
}
