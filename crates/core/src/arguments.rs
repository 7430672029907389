//! Function-call arguments while they stream: the partial value of each call, typed
//! snapshots, the decoded text of one string field, and the parse (with repair) at the end.
//!
//! Partial values are computed on the consumer's side, lazily and incrementally (the
//! `choicewise-partial-json` parser keeps its state between fragments, so the work over a
//! whole call is linear in its length), and only for consumers that ask: the actors never pay
//! for them. The one parse on the actors' side is the final one, when a call ends.
//!
//! The crate root re-exports the types a caller holds ([`PartialArguments`],
//! [`FunctionCalls`], [`ArgumentsSnapshot`]); the errors are named here.

use std::collections::HashMap;
use std::pin::Pin;
use std::task::{Context, Poll};

use choicewise_partial_json::{PartialJson, Snapshot, TextField};
use futures::Stream;
use futures::StreamExt;
use futures::stream::BoxStream;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::stream::EventStream;
use choicewise_proto::{CallRef, Error, ErrorDetail, FunctionCallEvent, Text};

/// Why arguments seen so far are not JSON ([`PartialArguments::error`]).
pub use choicewise_partial_json::PartialJsonError;
/// Why a call's arguments did not parse when it ended (in [`ErrorDetail::InvalidArguments`]).
pub use choicewise_proto::ArgumentsError;

/// Escapes raw control characters inside JSON strings, fragment by fragment (a string may
/// span fragments), so that partial values tolerate what the final parse repairs.
#[derive(Debug, Default, Clone, Copy)]
struct ControlEscaper {
    in_string: bool,
    escaped: bool,
}

impl ControlEscaper {
    fn step(&mut self, b: u8) {
        if !self.in_string {
            self.in_string = b == b'"';
        } else if self.escaped {
            self.escaped = false;
        } else if b == b'\\' {
            self.escaped = true;
        } else if b == b'"' {
            self.in_string = false;
        }
    }

    /// The fragment itself if nothing needs escaping (the usual case), else a fixed copy in
    /// `scratch`. Control bytes are ASCII, so a multi-byte character is copied whole.
    fn apply<'a>(&mut self, fragment: &'a str, scratch: &'a mut String) -> &'a str {
        let before = *self;
        let mut needs = false;
        for b in fragment.bytes() {
            needs |= self.in_string && !self.escaped && b < 0x20;
            self.step(b);
        }
        if !needs {
            return fragment;
        }
        *self = before;
        scratch.clear();
        for c in fragment.chars() {
            if c.is_ascii() && self.in_string && !self.escaped && (c as u32) < 0x20 {
                match c {
                    '\n' => scratch.push_str("\\n"),
                    '\r' => scratch.push_str("\\r"),
                    '\t' => scratch.push_str("\\t"),
                    _ => scratch.push_str(&format!("\\u{:04x}", c as u32)),
                }
            } else {
                scratch.push(c);
            }
            let mut utf8 = [0u8; 4];
            for b in c.encode_utf8(&mut utf8).bytes() {
                self.step(b);
            }
        }
        scratch
    }
}

/// The incremental parse of one call's arguments: feed it the fragments, read the partial
/// value at any time. Raw control characters inside strings (which models emit, and which
/// the final parse repairs) are escaped on the way in. The total work over a call is linear in
/// its length.
///
/// ```
/// use choicewise_core::PartialArguments;
/// let mut args = PartialArguments::new();
/// args.push("{\"answer\": \"Hel");
/// assert_eq!(args.value().unwrap()["answer"], "Hel");
/// args.push("lo\nworld\", \"n\": 4");
/// assert_eq!(args.value().unwrap()["answer"], "Hello\nworld");
/// assert!(args.value().unwrap().get("n").is_none()); // 4 may become 42
/// args.push("2}");
/// assert_eq!(args.value().unwrap()["n"], 42);
/// ```
#[derive(Debug, Default)]
pub struct PartialArguments {
    parser: PartialJson,
    escaper: ControlEscaper,
    scratch: String,
}

impl PartialArguments {
    /// An empty parse.
    ///
    /// ```
    /// assert!(choicewise_core::PartialArguments::new().value().is_none());
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds the next fragment. After invalid JSON the parse stops where it was; the value
    /// stays the last good one and [`error`](Self::error) says what went wrong.
    ///
    /// ```
    /// let mut args = choicewise_core::PartialArguments::new();
    /// args.push("{\"a\": 1, ]");
    /// assert_eq!(args.value().unwrap()["a"], 1);
    /// assert!(args.error().is_some());
    /// ```
    pub fn push(&mut self, fragment: &str) {
        let text = self.escaper.apply(fragment, &mut self.scratch);
        let _ = self.parser.push(text);
    }

    /// The best-effort value so far (see [`FunctionCalls`] for what is shown).
    ///
    /// ```
    /// let mut args = choicewise_core::PartialArguments::new();
    /// args.push("[1, 2");
    /// assert_eq!(args.value().unwrap(), &serde_json::json!([1]));
    /// ```
    pub fn value(&self) -> Option<&Value> {
        self.parser.value()
    }

    /// The value with each node saying whether it is final or provisional.
    ///
    /// ```
    /// let mut args = choicewise_core::PartialArguments::new();
    /// args.push("{\"a\": [1]");
    /// assert!(args.snapshot().unwrap().get("a").unwrap().is_final());
    /// ```
    pub fn snapshot(&self) -> Option<Snapshot<'_>> {
        self.parser.snapshot()
    }

    /// A counter that changes whenever the value changes.
    ///
    /// ```
    /// let mut args = choicewise_core::PartialArguments::new();
    /// args.push("{\"a\": 1");
    /// let r = args.revision();
    /// args.push(","); // completes the number: the value changes
    /// assert_ne!(args.revision(), r);
    /// let r = args.revision();
    /// args.push(" "); // whitespace: no change
    /// assert_eq!(args.revision(), r);
    /// ```
    pub fn revision(&self) -> u64 {
        self.parser.revision()
    }

    /// Why the arguments stopped parsing, if they did.
    ///
    /// ```
    /// let mut args = choicewise_core::PartialArguments::new();
    /// args.push("}");
    /// assert_eq!(args.error().unwrap().offset(), Some(0));
    /// ```
    pub fn error(&self) -> Option<&PartialJsonError> {
        self.parser.error()
    }

    pub(crate) fn parser(&self) -> &PartialJson {
        &self.parser
    }
}

/// One call's parse, fed lazily from the fragments a [`FunctionCalls`] stream yielded.
#[derive(Debug, Default)]
struct CallParse {
    arguments: PartialArguments,
    /// Fragments yielded but not yet pushed.
    pending: Vec<Text>,
}

impl CallParse {
    fn catch_up(&mut self) -> &PartialArguments {
        for fragment in self.pending.drain(..) {
            self.arguments.push(&fragment);
        }
        &self.arguments
    }
}

/// The progress of a choice's function calls (what [`Choice::function_calls`] returns): a
/// stream of [`FunctionCallEvent`]s, plus the partial value of each call's arguments so far.
///
/// [`Choice::function_calls`]: crate::Choice::function_calls
///
/// After the stream yields an [`FunctionCallEvent::Arguments`] event, [`partial`](Self::partial)
/// gives the best-effort JSON value of that call's arguments including the fragment: an open
/// string shows as its prefix, a number or literal still being written is left out until it
/// is complete (`12` never shows before `123`), a key without its value is left out (the
/// table is in `docs/partial-json.md`). The parse is incremental and lazy: a consumer that
/// never asks pays nothing, one that asks after every fragment pays work linear in the
/// arguments' length.
///
/// ```
/// # use choicewise_core::{Completions, FunctionCallEvent, Source};
/// # use futures::StreamExt;
/// # #[tokio::main] async fn main() {
/// let sse = concat!(
///     "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"c\",\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"city\\\": \\\"Par\"}}]}}]}\n\n",
///     "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"is\\\", \\\"days\\\": 1\"}}]}}]}\n\n",
///     "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"2}\"}}]},\"finish_reason\":\"tool_calls\"}]}\n\n",
/// );
/// let choice = Completions::new(Source::reader(sse.as_bytes())).choice(0).await.unwrap();
/// let mut calls = choice.function_calls();
/// let mut seen = Vec::new();
/// while let Some(event) = calls.next().await {
///     match event.unwrap() {
///         FunctionCallEvent::Arguments { call, .. } => seen.push(calls.partial(call).unwrap().to_string()),
///         FunctionCallEvent::Finished { value, .. } => assert_eq!(value.unwrap().to_value()["days"], 12),
///         _ => {}
///     }
/// }
/// assert_eq!(seen, [r#"{"city":"Par"}"#, r#"{"city":"Paris"}"#, r#"{"city":"Paris","days":12}"#]);
/// # }
/// ```
pub struct FunctionCalls {
    events: EventStream<FunctionCallEvent>,
    calls: HashMap<CallRef, CallParse>,
}

impl std::fmt::Debug for FunctionCalls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FunctionCalls")
            .field("events", &self.events)
            .field("calls", &self.calls.len())
            .finish()
    }
}

impl FunctionCalls {
    pub(crate) fn new(events: EventStream<FunctionCallEvent>) -> Self {
        FunctionCalls {
            events,
            calls: HashMap::new(),
        }
    }

    /// The best-effort value of the call's arguments, as of the events yielded so far;
    /// `None` before anything usable arrived.
    ///
    /// ```
    /// # use choicewise_core::{Completions, Source};
    /// # use futures::StreamExt;
    /// # #[tokio::main] async fn main() {
    /// let sse = "data: {\"choices\":[{\"delta\":{\"function_call\":{\"name\":\"f\",\"arguments\":\"{\\\"n\\\": 12\"}}}]}\n\n";
    /// let choice = Completions::new(Source::reader(sse.as_bytes())).choice(0).await.unwrap();
    /// let mut calls = choice.function_calls();
    /// let _started = calls.next().await;
    /// let fragment = calls.next().await.unwrap().unwrap();
    /// // `12` may be the start of `123`: it is left out until complete.
    /// assert_eq!(calls.partial(fragment.call()).unwrap(), &serde_json::json!({}));
    /// # }
    /// ```
    pub fn partial(&mut self, call: CallRef) -> Option<&Value> {
        self.calls.get_mut(&call)?.catch_up().value()
    }

    /// Like [`partial`](Self::partial), with each node saying whether it is final (closed)
    /// or provisional.
    ///
    /// ```
    /// # use choicewise_core::{Completions, Source};
    /// # use futures::StreamExt;
    /// # #[tokio::main] async fn main() {
    /// let sse = "data: {\"choices\":[{\"delta\":{\"function_call\":{\"name\":\"f\",\"arguments\":\"{\\\"a\\\": \\\"x\\\", \\\"b\\\": \\\"y\"}}}]}\n\n";
    /// let choice = Completions::new(Source::reader(sse.as_bytes())).choice(0).await.unwrap();
    /// let mut calls = choice.function_calls();
    /// let _started = calls.next().await;
    /// let call = calls.next().await.unwrap().unwrap().call();
    /// let snapshot = calls.snapshot(call).unwrap();
    /// assert!(snapshot.get("a").unwrap().is_final());
    /// assert!(snapshot.get("b").unwrap().is_provisional());
    /// # }
    /// ```
    pub fn snapshot(&mut self, call: CallRef) -> Option<Snapshot<'_>> {
        self.calls.get_mut(&call)?.catch_up().snapshot()
    }

    /// The call's parser, caught up with the fragments yielded so far.
    fn parser(&mut self, call: CallRef) -> Option<&PartialJson> {
        Some(self.calls.get_mut(&call)?.catch_up().parser())
    }

    /// The parser's revision for the call: changes whenever its value changes.
    fn revision(&mut self, call: CallRef) -> Option<u64> {
        self.parser(call).map(PartialJson::revision)
    }
}

impl Stream for FunctionCalls {
    type Item = Result<FunctionCallEvent, Error>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        let next = Pin::new(&mut this.events).poll_next(cx);
        if let Poll::Ready(Some(Ok(event))) = &next {
            match event {
                FunctionCallEvent::Started { call, .. } => {
                    this.calls.entry(*call).or_default();
                }
                FunctionCallEvent::Arguments { call, fragment } => {
                    this.calls
                        .entry(*call)
                        .or_default()
                        .pending
                        .push(fragment.clone());
                }
                _ => {}
            }
        }
        next
    }
}

/// A typed snapshot of a call's arguments (what [`Choice::arguments`] yields).
///
/// [`Choice::arguments`]: crate::Choice::arguments
///
/// ```
/// use choicewise_core::{ArgumentsSnapshot, CallKind, CallRef};
/// let s = ArgumentsSnapshot { call: CallRef { kind: CallKind::Tool, position: 0 },
///                             name: Some("f".into()), value: 3u8, is_final: false };
/// assert!(!s.is_final);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct ArgumentsSnapshot<T> {
    /// The call.
    pub call: CallRef,
    /// The function name, if known.
    pub name: Option<Text>,
    /// The arguments, deserialised from the partial value (fields not yet written are
    /// missing: use `Option` or `#[serde(default)]` fields).
    pub value: T,
    /// The call has ended and this is its complete value.
    pub is_final: bool,
}

fn matches(filter: &Option<String>, name: &Option<Text>) -> bool {
    match filter {
        None => true,
        Some(f) => name.as_deref() == Some(f.as_str()),
    }
}

pub(crate) fn typed<T>(
    mut calls: FunctionCalls,
    function: Option<String>,
    choice: u32,
) -> BoxStream<'static, Result<ArgumentsSnapshot<T>, Error>>
where
    T: DeserializeOwned + Send + 'static,
{
    async_stream::stream! {
        let mut names: HashMap<CallRef, Option<Text>> = HashMap::new();
        let mut shown: HashMap<CallRef, u64> = HashMap::new();
        while let Some(event) = calls.next().await {
            match event {
                Err(e) => {
                    yield Err(e);
                    break;
                }
                Ok(FunctionCallEvent::Started { call, name, .. }) => {
                    names.insert(call, name);
                }
                Ok(FunctionCallEvent::Arguments { call, .. }) => {
                    let name = names.get(&call).cloned().flatten();
                    if !matches(&function, &name) {
                        continue;
                    }
                    let revision = calls.revision(call);
                    if revision.is_none() || shown.get(&call).copied() == revision {
                        continue;
                    }
                    shown.insert(call, revision.unwrap_or_default());
                    let typed = calls.partial(call).map(T::deserialize);
                    // A partial value that does not fit T yet (a required field not written)
                    // is skipped; the final one is reported either way.
                    if let Some(Ok(value)) = typed {
                        yield Ok(ArgumentsSnapshot { call, name, value, is_final: false });
                    }
                }
                Ok(FunctionCallEvent::Finished { call, name, value, .. }) => {
                    if !matches(&function, &name) {
                        continue;
                    }
                    let error = |e: ArgumentsError| ErrorDetail::InvalidArguments { choice, call, error: e };
                    match value {
                        Err(e) => yield Err(Error::from(error(e))),
                        Ok(v) => match v.deserialize::<T>() {
                            Ok(value) => yield Ok(ArgumentsSnapshot { call, name, value, is_final: true }),
                            Err(e) => yield Err(Error::from(error(ArgumentsError { offset: None, message: e.to_string() }))),
                        },
                    }
                }
                Ok(_) => {}
            }
        }
    }
    .boxed()
}

/// Normalises a field path: `answer` and `/answer` both mean the JSON pointer `/answer`.
fn pointer(path: &str) -> String {
    if path.is_empty() || path.starts_with('/') {
        path.to_string()
    } else {
        format!("/{path}")
    }
}

pub(crate) fn field_text(
    mut calls: FunctionCalls,
    function: Option<String>,
    path: &str,
) -> BoxStream<'static, Result<Text, Error>> {
    let pointer = pointer(path);
    async_stream::stream! {
        let mut names: HashMap<CallRef, Option<Text>> = HashMap::new();
        let mut fields: HashMap<CallRef, TextField> = HashMap::new();
        while let Some(event) = calls.next().await {
            let call = match event {
                Err(e) => {
                    yield Err(e);
                    break;
                }
                Ok(FunctionCallEvent::Started { call, name, .. }) => {
                    names.insert(call, name);
                    continue;
                }
                Ok(FunctionCallEvent::Arguments { call, .. }) => call,
                Ok(_) => continue,
            };
            if !matches(&function, &names.get(&call).cloned().flatten()) {
                continue;
            }
            let field = fields.entry(call).or_insert_with(|| TextField::new(pointer.clone()));
            let Some(parser) = calls.parser(call) else { continue };
            let delta = field.poll(parser).map(|d| d.text).filter(|t| !t.is_empty());
            if let Some(text) = delta {
                yield Ok(Text::from(text));
            }
        }
    }
    .boxed()
}
