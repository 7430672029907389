//! Incremental, best-effort parsing of one JSON value that arrives in
//! fragments — typically the arguments of an LLM function call, streamed a
//! few bytes at a time.
//!
//! Re-parsing the whole prefix after every fragment (what most "partial
//! JSON" helpers do) costs time quadratic in the length of the arguments.
//! [`PartialJson`] instead keeps its lexer state and the stack of open
//! containers between fragments, and maintains the best-effort
//! [`serde_json::Value`] *in place*: a string grows as its text arrives, an
//! element is pushed as soon as it is complete. Each fragment costs time
//! proportional to its length (plus the current nesting depth), and reading
//! the value after a fragment is a plain borrow, so following a whole call
//! snapshot by snapshot costs about as much as parsing it once.
//!
//! # Example
//!
//! ```
//! use choicewise_partial_json::{PartialJson, TextField};
//! use serde_json::json;
//!
//! let fragments = ["{\"answer\": \"Caf", "\\u00e9 at ", "8\", \"score", "s\": [0.", "5, 1e2]}"];
//! let mut parser = PartialJson::new();
//! let mut answer = TextField::new("/answer");
//! let mut streamed = String::new();
//! for fragment in fragments {
//!     parser.push(fragment).unwrap();
//!     if parser.changed() {
//!         // A typed consumer could deserialize `parser.value()` here.
//!     }
//!     if let Some(delta) = answer.poll(&parser) {
//!         streamed.push_str(delta.text);
//!     }
//! }
//! assert_eq!(streamed, "Café at 8");
//! assert_eq!(parser.finish().unwrap(), json!({"answer": "Café at 8", "scores": [0.5, 100.0]}));
//! ```
//!
//! # What the best-effort value contains
//!
//! [`PartialJson::value`] is `None` until something usable has arrived, then
//! a [`Value`](serde_json::Value) built by these rules. [`PartialJson::snapshot`]
//! gives the same value as a tree of [`Snapshot`] nodes, each of which says
//! whether it is *final* (closed: it equals the corresponding part of the
//! complete value) or *provisional* (still open).
//!
//! | Input so far | Best-effort value | Rule |
//! |---|---|---|
//! | *(empty or whitespace)* | `None` | nothing yet; [`finish`](PartialJson::finish) reports [`PartialJsonError::NoValue`] |
//! | `{"a": "hel` | `{"a": "hel"}` | an open string shows its decoded prefix (provisional) |
//! | `{"a": "x\u00` | `{"a": "x"}` | a partial escape (`\`, `\u00`, half a surrogate pair) is not shown yet |
//! | `{"a": 12` | `{}` | a number is shown only once complete: after a delimiter (`,` `]` `}` or whitespace), or at `finish` — `12` never shows before `123` |
//! | `{"a": tr` | `{}` | `true`/`false`/`null` are shown once all their letters arrived |
//! | `{"a` , `{"a"` , `{"a":` | `{}` | a key without (the start of) a value is left out |
//! | `{"a": [` , `{"a": {` | `{"a": []}` , `{"a": {}}` | an open container shows as soon as it opens (provisional) |
//! | `[1, 2]` | `[1, 2]` | closed containers, closed strings, numbers and literals are final |
//! | `42` (top level) | `None` | a top-level number is completed only by whitespace or `finish` |
//! | `"ab` (top level) | `"ab"` | any JSON type may be the top-level value |
//! | `{"a": 1} x` | error | anything but whitespace after the value: [`PartialJsonError::TrailingCharacters`] |
//!
//! Only the *open path* — the containers not yet closed and at most one
//! open string, each inside the previous — is provisional; everything else
//! is final. With duplicate keys the last one wins, as in `serde_json`
//! (until the replacement value starts, the earlier one stays visible).
//!
//! # Validation and errors
//!
//! The input must be exactly one JSON value (RFC 8259) with optional
//! whitespace around it; anything else is a typed [`PartialJsonError`] with
//! the byte offset and what was expected, reported as soon as the offending
//! character arrives (not only at `finish`). After an error the parser
//! stays failed. [`PartialJson::finish`] returns the same value as
//! `serde_json::from_str` would for the whole text (numbers are converted by
//! `serde_json` itself), except that nesting up to
//! [`max_depth`](PartialJson::max_depth) (default 512) is accepted where
//! `serde_json` stops at 128. Raw control characters inside strings get
//! their own error, [`PartialJsonError::ControlCharacterInString`], and
//! [`repair_control_characters`] can fix the complete text.
//!
//! The parser never recurses over the input's nesting and never panics.
//!
//! # Performance
//!
//! Each fragment costs time proportional to its length plus the current
//! nesting depth (reaching the open string or container in the tree walks
//! the open path; an object member is found by its position, without
//! comparing keys). Reading [`PartialJson::value`] costs nothing, and
//! [`PartialJson::snapshot`] nodes are built lazily as you navigate them.
//! The crate's `ratio` example and `partial_json` benchmark follow a ~100 KB
//! arguments object delivered in 4-byte fragments, reading the value after
//! every fragment: about 2.6x the time of one `serde_json::from_str` of the
//! whole text, where re-parsing the prefix after every fragment costs
//! thousands of times as much. A fragment that only continues the open
//! string (most of them) takes a short path: a check of its bytes, the walk
//! down the open path, and a copy.
//!
//! To avoid reallocating at every fragment, a string that is still open at
//! the end of a fragment reserves at least 64 bytes and grows 4x at a time
//! while below 4 KiB, so the strings of the value may hold up to about 4x
//! their length (or 64 bytes) of capacity.
#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod entries;
mod error;
mod field;
mod parser;
mod repair;
mod snapshot;

pub use entries::{
    Compacting, compact_json, for_each_entry, for_each_raw_entry, for_each_raw_field,
};
pub use error::{Expected, PartialJsonError};
pub use field::{TextDelta, TextField};
pub use parser::{DEFAULT_MAX_DEPTH, PartialJson};
pub use repair::repair_control_characters;
pub use snapshot::Snapshot;
