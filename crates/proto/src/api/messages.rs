//! A Chat Completions request's `messages` translated from their JSON text one message at a
//! time: a visitor over the array on a borrowed deserializer parses one message, translates
//! it ([`tools::AnthropicMessages`], [`tools::responses_items`]) and writes what it made as
//! JSON text at once, so that the list never exists as a parsed tree, in or out.

use serde_json::{Value, json};

use super::tools::{self, Sink};
use super::{Dialect, MessagesError};

/// A list of translated messages or items written as JSON text as they come, at the end of
/// a buffer: the same bytes as the list of their values serialised whole.
pub(super) struct ListText<'o> {
    pub(super) out: &'o mut Vec<u8>,
    /// Whether an item has been written.
    any: bool,
    /// A user turn of tool results whose `content` list is still open, and whether that list
    /// has a block yet.
    open: Option<bool>,
    /// A user turn of tool results written whole is `prefix`, its blocks (Gemini's parts),
    /// `suffix`.
    prefix: String,
    suffix: String,
    /// One item's text, before it is copied into `out`.
    scratch: Vec<u8>,
}

impl<'o> ListText<'o> {
    /// An empty list, started at the end of `out`.
    pub(super) fn new(out: &'o mut Vec<u8>) -> Self {
        Self::with_results_in(out, "content")
    }

    /// An empty list, started at the end of `out`, whose user turns of tool results hold
    /// them in their field `key` (`content`; Gemini's `parts`).
    pub(super) fn with_results_in(out: &'o mut Vec<u8>, key: &str) -> Self {
        // The turn's own serialisation says where its blocks go, whatever the keys' order.
        let turn = json!({"role": "user", key: []}).to_string();
        let at = turn.find("[]").map_or(turn.len(), |at| at + 1);
        out.push(b'[');
        ListText {
            out,
            any: false,
            open: None,
            prefix: turn[..at].to_string(),
            suffix: turn[at..].to_string(),
            scratch: Vec::new(),
        }
    }

    /// Closes the open turn of tool results, if any.
    fn close(&mut self) {
        if self.open.take().is_some() {
            let suffix = std::mem::take(&mut self.suffix);
            self.put(suffix.as_bytes());
            self.suffix = suffix;
        }
    }

    /// Starts the next item.
    pub(super) fn next(&mut self) {
        self.close();
        if std::mem::replace(&mut self.any, true) {
            self.put(b",");
        }
    }

    /// Copies `bytes` into the list: a buffer that is full grows by an eighth (or by what
    /// `bytes` needs), not twice its size, so that a list longer than its room costs little
    /// more than itself.
    pub(super) fn put(&mut self, bytes: &[u8]) {
        let room = self.out.capacity() - self.out.len();
        if room < bytes.len() {
            (self.out).reserve_exact(bytes.len().max(self.out.len() / 8));
        }
        self.out.extend_from_slice(bytes);
    }

    pub(super) fn write(&mut self, value: &Value) {
        self.scratch.clear();
        // A value always serialises into a vector.
        let _ = serde_json::to_writer(&mut self.scratch, value);
        let scratch = std::mem::take(&mut self.scratch);
        self.put(&scratch);
        self.scratch = scratch;
    }

    /// Copies the JSON text `json` (known to be JSON) into the list without its
    /// insignificant whitespace, room made for it as [`put`](Self::put) makes it.
    pub(super) fn put_compact(&mut self, json: &str) {
        let room = self.out.capacity() - self.out.len();
        if room < json.len() {
            (self.out).reserve_exact(json.len().max(self.out.len() / 8));
        }
        write_compact(self.out, json);
    }

    /// Writes the JSON text a JSON string (`literal`, with its quotes) holds, unescaped and
    /// without its insignificant whitespace, straight into the list (no copy of it on the
    /// way); `false`, with the list as it was, when that text is not JSON (or the string
    /// holds a lone surrogate escape). Nothing is written for text that is only whitespace.
    pub(super) fn put_unescaped_compact(&mut self, literal: &str) -> bool {
        let room = self.out.capacity() - self.out.len();
        if room < literal.len() {
            (self.out).reserve_exact(literal.len().max(self.out.len() / 8));
        }
        let start = self.out.len();
        let ok = write_unescaped_compact(self.out, literal)
            && (self.out.len() == start
                || serde_json::from_slice::<serde::de::IgnoredAny>(&self.out[start..]).is_ok());
        if !ok {
            self.out.truncate(start);
        }
        ok
    }

    /// A block given as its JSON text (`block`), written as [`join`](Sink::join) writes
    /// one when `into_open` (the last turn open for results takes it), else as
    /// [`results`](Sink::results) of it alone.
    pub(super) fn join_text(&mut self, block: &[u8], into_open: bool) {
        match self.open.filter(|_| into_open) {
            Some(any) => {
                if any {
                    self.put(b",");
                }
            }
            None => {
                self.next();
                let prefix = std::mem::take(&mut self.prefix);
                self.put(prefix.as_bytes());
                self.prefix = prefix;
            }
        }
        self.put(block);
        self.open = Some(true);
    }

    /// Ends the list.
    pub(super) fn finish(mut self) {
        self.close();
        self.put(b"]");
    }
}

impl Sink for ListText<'_> {
    fn item(&mut self, item: Value) {
        self.next();
        self.write(&item);
    }

    fn raw(&mut self, item: Box<serde_json::value::RawValue>) {
        self.next();
        self.put(item.get().as_bytes());
    }

    fn results(&mut self, blocks: Vec<Value>) {
        self.next();
        let prefix = std::mem::take(&mut self.prefix);
        self.put(prefix.as_bytes());
        self.prefix = prefix;
        for (k, block) in blocks.iter().enumerate() {
            if k > 0 {
                self.put(b",");
            }
            self.write(block);
        }
        self.open = Some(!blocks.is_empty());
    }

    fn join(&mut self, block: Value) {
        match self.open {
            None => self.results(vec![block]),
            Some(any) => {
                if any {
                    self.put(b",");
                }
                self.write(&block);
                self.open = Some(true);
            }
        }
    }
}

/// Where a message goes: `Some(content)` for the first one when it is a system or developer
/// message (its content becomes the request's `system` or `instructions`), else None.
fn first_system(i: usize, m: &Value) -> Option<&Value> {
    (i == 0 && matches!(m["role"].as_str(), Some("system" | "developer"))).then(|| &m["content"])
}

/// Translates the messages of a list given as its items (a tree's, cloned one at a time, or
/// a text's, parsed one at a time by `read`) into `out`; the first system message's content.
pub(super) fn translate(
    api: Dialect,
    read: impl FnOnce(&mut dyn FnMut(usize, Value) -> Result<(), String>) -> Result<(), String>,
    out: &mut impl Sink,
) -> Result<Option<Value>, String> {
    let mut system = None;
    let mut turns = tools::AnthropicMessages::new(api);
    let mut custom_calls = std::collections::HashSet::new();
    // A message's errors name it by its index in the client's list (the system message
    // taken out still counts).
    read(&mut |i, m| {
        if let Some(content) = first_system(i, &m) {
            system = Some(content.clone());
            return Ok(());
        }
        match api.takes_anthropic_shape() {
            true => turns.message(i, m, out),
            false => tools::responses_items(i, m, out, &mut custom_calls),
        }
    })?;
    Ok(system)
}

/// A message's text up to this many bytes is parsed whole (the same bytes as the tree's
/// translation); a larger one is read one field and one part at a time ([`large`]).
pub(super) const LARGE: usize = 64 * 1024;

/// [`translate`] of a list's text: each message parsed on its own, a large one
/// ([`LARGE`]) read without its tree ([`large`]).
fn translate_text(
    api: Dialect,
    text: &[u8],
    out: &mut ListText<'_>,
) -> Result<Option<Value>, String> {
    let mut system = None;
    let mut turns = tools::AnthropicMessages::new(api);
    let mut custom_calls = std::collections::HashSet::new();
    let read = choicewise_partial_json::for_each_raw_entry(text, |i, raw| {
        let not_json = |e: serde_json::Error| format!("\"messages\" could not be read: {e}");
        let m = match raw.get().len() <= LARGE {
            true => serde_json::from_str::<Value>(raw.get()).map_err(not_json)?,
            false => match large(api, i, raw, (&mut turns, &mut custom_calls), out)? {
                Some(m) => m,
                None => return Ok(()),
            },
        };
        if let Some(content) = first_system(i, &m) {
            system = Some(content.clone());
            return Ok(());
        }
        match api.takes_anthropic_shape() {
            true => turns.message(i, m, out),
            false => tools::responses_items(i, m, out, &mut custom_calls),
        }
    });
    match read {
        Ok(read) => read.map(|()| system),
        Err(e) => Err(format!("\"messages\" could not be read: {e}")),
    }
}

/// A large message read from its text without its tree (issue 63): its `role`,
/// `tool_call_id` and `name` parsed, its `tool_calls` parsed (small, but for their
/// arguments' strings), other fields left out; its content, when a list of parts, read one
/// part at a time: a user, system or developer message's parts translated and written as
/// they are read (the message written here: `None`), a tool result's or an assistant's
/// text parts joined into one string. What is not written here is given back as the
/// message to translate as any (`Some`); the first message, when a system or developer one,
/// and the rarer shapes (an Anthropic user turn of `tool_result` parts, a tool result with
/// images) are parsed whole.
fn large(
    api: Dialect,
    i: usize,
    raw: &serde_json::value::RawValue,
    (turns, custom_calls): (
        &mut tools::AnthropicMessages,
        &mut std::collections::HashSet<String>,
    ),
    out: &mut ListText<'_>,
) -> Result<Option<Value>, String> {
    use choicewise_partial_json::{for_each_raw_entry, for_each_raw_field};
    let not_json = |e: serde_json::Error| format!("\"messages\" could not be read: {e}");
    let whole = || serde_json::from_str::<Value>(raw.get()).map_err(not_json);
    if !raw.get().starts_with('{') {
        return whole().map(Some);
    }
    let at = format!("messages[{i}]");
    let mut m = serde_json::Map::new();
    let (mut content, mut calls) = (None, None);
    for_each_raw_field(raw.get().as_bytes(), |k, v| {
        match k {
            "role" | "tool_call_id" | "name" => {
                m.insert(k.to_string(), serde_json::from_str(v.get())?);
            }
            "content" => content = Some(v),
            "tool_calls" => calls = Some(v),
            _ => {}
        }
        Ok(())
    })
    .map_err(not_json)?
    .map_err(not_json)?;
    let role = m
        .get("role")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let anthropic = api.takes_anthropic_shape();
    // A list of one call or more (anything else, as the tree reads it, is none).
    let calls = calls.filter(|c| {
        let t = c.get();
        t.starts_with('[') && !t[1..].trim_start().starts_with(']')
    });
    let no_calls = calls.is_none();
    if let (Some(calls), "assistant") = (calls, role.as_str()) {
        assistant_calls(api, content, calls, out, custom_calls)?;
        turns.wrote_turn();
        return Ok(None);
    }
    let first_system = i == 0 && matches!(role.as_str(), "system" | "developer");
    // A string content written as the client wrote it (JSON already), never unescaped,
    // where the translation keeps it as it is.
    let as_is = match role.as_str() {
        "user" => true,
        "system" | "developer" => !first_system,
        "assistant" => anthropic && no_calls,
        _ => false,
    };
    if let Some(c) = content.filter(|c| c.get().starts_with('"') && as_is) {
        let role = match (anthropic, role.as_str()) {
            (true, "developer") => "system",
            (_, role) => role,
        };
        // Written straight into the list: no copy of the message on the way.
        out.next();
        out.put(br#"{"content":"#);
        out.put(c.get().as_bytes());
        out.put(b",\"role\":");
        out.put(json!(role).to_string().as_bytes());
        out.put(b"}");
        turns.wrote_turn();
        return Ok(None);
    }
    let Some(content) = content.filter(|c| c.get().starts_with('[')) else {
        // A string (parsed into about its size), null or no content: as any message.
        if let Some(c) = content {
            m.insert(
                "content".into(),
                serde_json::from_str(c.get()).map_err(not_json)?,
            );
        }
        return Ok(Some(Value::Object(m)));
    };
    let parts = content.get().as_bytes();
    // What the parts are, read first (their types only).
    let (mut all_results, mut any_image) = (true, false);
    for_each_raw_entry(parts, |_, p| {
        let mut kind = None;
        if p.get().starts_with('{') {
            for_each_raw_field(p.get().as_bytes(), |k, v| {
                if k == "type" {
                    kind = serde_json::from_str::<String>(v.get()).ok();
                }
                Ok::<(), ()>(())
            })
            .ok();
        }
        all_results &= kind.as_deref() == Some("tool_result");
        any_image |= kind.as_deref() == Some("image_url");
        Ok::<(), ()>(())
    })
    .map_err(not_json)?
    .ok();
    if !matches!(
        role.as_str(),
        "user" | "system" | "developer" | "assistant" | "tool"
    ) {
        // Refused for its role, which is all that is read of it.
        return Ok(Some(Value::Object(m)));
    }
    let written_here = match role.as_str() {
        // An Anthropic user turn of tool results only (none included) joins the results
        // that follow: as any message.
        "user" => !(anthropic && all_results),
        "system" | "developer" => !first_system,
        "assistant" => anthropic && no_calls,
        _ => false,
    };
    if role == "tool" || (role == "assistant" && !written_here) {
        if role == "tool" && any_image {
            return whole().map(Some);
        }
        // Its text parts joined, as the translation reads them.
        let mut text = String::new();
        for_each_raw_entry(parts, |k, p| {
            let mut part: (Option<String>, Option<String>) = (None, None);
            if p.get().starts_with('{') {
                for_each_raw_field(p.get().as_bytes(), |key, v| {
                    match key {
                        "type" => part.0 = serde_json::from_str(v.get()).ok(),
                        "text" => part.1 = serde_json::from_str(v.get()).ok(),
                        _ => {}
                    }
                    Ok::<(), ()>(())
                })
                .ok();
            }
            if role == "tool" {
                match part.0.as_deref() {
                    Some("text" | "image_url") => {}
                    Some(other) => {
                        return Err(format!(
                            "{at}.content[{k}]: a tool result's {} part cannot be sent to the {api} API (text and images can)",
                            json!(other),
                        ));
                    }
                    None => return Err(format!("{at}.content[{k}]: a part without its type")),
                }
            }
            text.push_str(part.1.as_deref().unwrap_or_default());
            Ok(())
        })
        .map_err(not_json)??;
        m.insert("content".into(), Value::String(text));
        return Ok(Some(Value::Object(m)));
    }
    if !written_here {
        return whole().map(Some);
    }
    // Written here, straight into the list: the message's content, its parts translated one
    // at a time (on an error the request is refused, whatever the list holds).
    out.next();
    out.put(br#"{"content":["#);
    for_each_raw_entry(parts, |k, p| {
        let at = format!("{at}.content[{k}]");
        let mut kind = None;
        let mut text = None;
        let mut image: Option<(Option<String>, Option<Value>)> = None;
        if p.get().starts_with('{') {
            for_each_raw_field(p.get().as_bytes(), |key, v| {
                match key {
                    "type" => kind = serde_json::from_str::<String>(v.get()).ok(),
                    "text" => text = Some(serde_json::from_str::<Value>(v.get())?),
                    "image_url" => {
                        let mut url = (None, None);
                        if v.get().starts_with('{') {
                            for_each_raw_field(v.get().as_bytes(), |key, v| {
                                match key {
                                    "url" => url.0 = serde_json::from_str(v.get()).ok(),
                                    "detail" => url.1 = Some(serde_json::from_str(v.get())?),
                                    _ => {}
                                }
                                Ok::<(), serde_json::Error>(())
                            })??;
                        }
                        image = Some(url);
                    }
                    _ => {}
                }
                Ok::<(), serde_json::Error>(())
            })
            .map_err(not_json)?
            .map_err(not_json)?;
        }
        if k > 0 {
            out.put(b",");
        }
        let translated = match (kind.as_deref(), anthropic) {
            // An assistant's parts go to Anthropic as they are.
            (_, true) if role == "assistant" => {
                out.put_compact(p.get());
                return Ok(());
            }
            (Some("image_url"), _) => {
                let (url, detail) = image.unwrap_or((None, None));
                let Some(url) = url else {
                    return Err(format!("{at}.image_url.url is missing"));
                };
                match anthropic {
                    true => tools::anthropic_image(&url, &at)?,
                    false => {
                        let mut image = json!({"type": "input_image", "image_url": url});
                        if let Some(detail) = detail {
                            image["detail"] = detail;
                        }
                        image
                    }
                }
            }
            (Some("text"), false) => {
                json!({"type": "input_text", "text": text.unwrap_or(Value::Null)})
            }
            _ => {
                out.put_compact(p.get());
                return Ok(());
            }
        };
        out.write(&translated);
        Ok(())
    })
    .map_err(not_json)??;
    out.put(b"],\"role\":");
    let role = match (anthropic, role.as_str()) {
        (true, "developer") => "system",
        (_, role) => role,
    };
    out.put(json!(role).to_string().as_bytes());
    out.put(b"}");
    turns.wrote_turn();
    Ok(None)
}

/// The text parts of a content (`content`'s text) joined, as the translation reads an
/// assistant's or a tool result's text: a string as it is, the `text` strings of a list's
/// parts (read one at a time), else none.
fn joined_text(content: Option<&serde_json::value::RawValue>) -> Result<String, String> {
    let not_json = |e: serde_json::Error| format!("\"messages\" could not be read: {e}");
    let Some(content) = content else {
        return Ok(String::new());
    };
    match content.get().as_bytes()[0] {
        b'"' => serde_json::from_str(content.get()).map_err(not_json),
        b'[' => {
            let mut text = String::new();
            choicewise_partial_json::for_each_raw_entry(content.get().as_bytes(), |_, p| {
                if p.get().starts_with('{') {
                    choicewise_partial_json::for_each_raw_field(p.get().as_bytes(), |k, v| {
                        if k == "text"
                            && let Ok(t) =
                                serde_json::from_str::<std::borrow::Cow<'_, str>>(v.get())
                        {
                            text.push_str(&t);
                        }
                        Ok::<(), ()>(())
                    })
                    .ok();
                }
                Ok::<(), ()>(())
            })
            .map_err(not_json)?
            .ok();
            Ok(text)
        }
        _ => Ok(String::new()),
    }
}

/// Writes the text the JSON string `literal` (with its quotes, known to be a JSON string)
/// holds, unescaped, without the whitespace outside the strings of that text (as
/// [`write_compact`] of the string's value, with neither in memory); `false` at a lone
/// surrogate escape, with part of it written.
fn write_unescaped_compact(out: &mut Vec<u8>, literal: &str) -> bool {
    let bytes = literal.as_bytes();
    let inner = match bytes.len() >= 2 {
        true => &bytes[1..bytes.len() - 1],
        false => return false,
    };
    let mut compact = choicewise_partial_json::Compacting::default();
    let mut emit = |out: &mut Vec<u8>, b: u8| {
        if compact.keeps(b) {
            out.push(b);
        }
    };
    let hex = |at: usize| -> Option<u32> {
        let digits = std::str::from_utf8(inner.get(at..at + 4)?).ok()?;
        u32::from_str_radix(digits, 16).ok()
    };
    let mut i = 0;
    while i < inner.len() {
        let b = inner[i];
        if b != b'\\' {
            emit(out, b);
            i += 1;
            continue;
        }
        let decoded = match inner.get(i + 1) {
            Some(b'"') => b'"',
            Some(b'\\') => b'\\',
            Some(b'/') => b'/',
            Some(b'b') => 0x08,
            Some(b'f') => 0x0c,
            Some(b'n') => b'\n',
            Some(b'r') => b'\r',
            Some(b't') => b'\t',
            Some(b'u') => {
                let Some(unit) = hex(i + 2) else {
                    return false;
                };
                let (code, len) = match unit {
                    0xD800..=0xDBFF => match (inner.get(i + 6..i + 8), hex(i + 8)) {
                        (Some(b"\\u"), Some(low @ 0xDC00..=0xDFFF)) => {
                            (0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00), 12)
                        }
                        _ => return false,
                    },
                    0xDC00..=0xDFFF => return false,
                    unit => (unit, 6),
                };
                let Some(c) = char::from_u32(code) else {
                    return false;
                };
                for &b in c.encode_utf8(&mut [0; 4]).as_bytes() {
                    emit(out, b);
                }
                i += len;
                continue;
            }
            _ => return false,
        };
        emit(out, decoded);
        i += 2;
    }
    true
}

/// Writes the JSON text `json` (known to be JSON) without its insignificant whitespace
/// (`choicewise_partial_json::compact_json`, written at once).
fn write_compact(out: &mut Vec<u8>, json: &str) {
    let mut compact = choicewise_partial_json::Compacting::default();
    out.extend(json.bytes().filter(|&b| compact.keeps(b)));
}

/// A large assistant message with tool calls, read one call at a time and
/// written as the tree's translation writes it: Anthropic's turn of its text block and
/// `tool_use` blocks (each `input` the call's arguments, unescaped once and written
/// compact), or Responses' text item and `function_call` items (the arguments' string
/// copied as written).
fn assistant_calls(
    api: Dialect,
    content: Option<&serde_json::value::RawValue>,
    calls: &serde_json::value::RawValue,
    out: &mut ListText<'_>,
    custom_calls: &mut std::collections::HashSet<String>,
) -> Result<(), String> {
    use choicewise_partial_json::{for_each_raw_entry, for_each_raw_field};
    let not_json = |e: serde_json::Error| format!("\"messages\" could not be read: {e}");
    let text = joined_text(content)?;
    let anthropic = api.takes_anthropic_shape();
    if anthropic {
        // The turn written straight into the list as its calls are read.
        out.next();
        out.put(br#"{"content":["#);
        if !text.is_empty() {
            out.put(br#"{"text":"#);
            out.put(json!(text).to_string().as_bytes());
            out.put(br#","type":"text"}"#);
        }
    } else if !text.is_empty() {
        out.item(json!({"role": "assistant", "content": text}));
    }
    let mut first = text.is_empty();
    for_each_raw_entry(calls.get().as_bytes(), |_, call| {
        let (mut id, mut name, mut arguments) = (String::new(), String::new(), None);
        let (mut kind, mut custom) = (String::new(), None);
        if call.get().starts_with('{') {
            for_each_raw_field(call.get().as_bytes(), |key, v| {
                match key {
                    "id" => id = serde_json::from_str(v.get()).unwrap_or_default(),
                    "type" => kind = serde_json::from_str(v.get()).unwrap_or_default(),
                    "custom" => custom = serde_json::from_str::<Value>(v.get()).ok(),
                    "function" if v.get().starts_with('{') => {
                        for_each_raw_field(v.get().as_bytes(), |key, v| {
                            match key {
                                "name" => name = serde_json::from_str(v.get()).unwrap_or_default(),
                                "arguments" => arguments = Some(v),
                                _ => {}
                            }
                            Ok::<(), ()>(())
                        })
                        .ok();
                    }
                    _ => {}
                }
                Ok::<(), ()>(())
            })
            .map_err(not_json)?
            .ok();
        }
        let arguments = arguments.filter(|a| a.get() != "null");
        if let Some(custom) = custom.filter(|_| kind == "custom") {
            // A custom tool's call, written as the tree's translation writes it.
            let call = json!({"id": id, "type": "custom", "custom": custom});
            let (name, input) = tools::custom_call(&call).unwrap_or_default();
            if !anthropic {
                custom_calls.insert(id.clone());
                out.item(
                    json!({"type": "custom_tool_call", "call_id": id, "name": name,
                    "input": input}),
                );
                return Ok(());
            }
            if !std::mem::take(&mut first) {
                out.put(b",");
            }
            out.put(br#"{"id":"#);
            out.put(json!(id).to_string().as_bytes());
            out.put(br#","input":"#);
            out.put(tools::custom_input(input).get().as_bytes());
            out.put(br#","name":"#);
            out.put(json!(name).to_string().as_bytes());
            out.put(br#","type":"tool_use"}"#);
            return Ok(());
        }
        if !anthropic {
            // Written straight into the list: the arguments' string copied once.
            out.next();
            out.put(br#"{"arguments":"#);
            match arguments {
                None => out.put(br#""{}""#),
                Some(a) if a.get().starts_with('"') => out.put(a.get().as_bytes()),
                Some(a) => {
                    let compact = choicewise_partial_json::compact_json(a.get());
                    out.put(json!(compact).to_string().as_bytes());
                }
            }
            out.put(br#","call_id":"#);
            out.put(json!(id).to_string().as_bytes());
            out.put(br#","name":"#);
            out.put(json!(name).to_string().as_bytes());
            out.put(br#","type":"function_call"}"#);
            return Ok(());
        }
        if !std::mem::take(&mut first) {
            out.put(b",");
        }
        out.put(br#"{"id":"#);
        out.put(json!(id).to_string().as_bytes());
        out.put(br#","input":"#);
        match arguments {
            None => out.put(b"{}"),
            Some(a) if a.get().starts_with('"') => {
                // Unescaped and written compact straight into the list, then checked to be
                // JSON there (no tree, no copy of the arguments); whitespace alone is `{}`.
                let start = out.out.len();
                if out.put_unescaped_compact(a.get()) {
                    if out.out.len() == start {
                        out.put(b"{}");
                    }
                } else {
                    // Not JSON (a sample's broken call sent back in the history): passed on
                    // as the text it was, in the object an input must be.
                    out.out.truncate(start);
                    let args: std::borrow::Cow<'_, str> =
                        serde_json::from_str(a.get()).map_err(not_json)?;
                    if args.trim().is_empty() {
                        out.put(b"{}");
                    } else {
                        out.put(tools::raw_input(&args).as_bytes());
                    }
                }
            }
            Some(a) => out.put_compact(a.get()),
        }
        out.put(br#","name":"#);
        out.put(json!(name).to_string().as_bytes());
        out.put(br#","type":"tool_use"}"#);
        Ok::<(), String>(())
    })
    .map_err(not_json)??;
    if anthropic {
        out.put(br#"],"role":"assistant"}"#);
    }
    Ok(())
}

/// [`Dialect::write_messages_from_chat_json`] for Anthropic and Responses.
pub(crate) fn write_messages(
    api: Dialect,
    text: &[u8],
    out: &mut Vec<u8>,
) -> Result<Option<Vec<u8>>, MessagesError> {
    let first = (text.iter()).find(|b| !matches!(b, b' ' | b'\t' | b'\n' | b'\r'));
    if first != Some(&b'[') {
        // Not a list: what it is, once it is JSON.
        let value = serde_json::from_slice::<Value>(text)
            .map_err(|e| MessagesError::Invalid(format!("\"messages\" could not be read: {e}")))?;
        return Err(MessagesError::NotAnArray {
            found: json_kind(&value),
        });
    }
    let mut list = ListText::new(out);
    let system = translate_text(api, text, &mut list).map_err(MessagesError::Invalid)?;
    list.finish();
    // A value always serialises.
    Ok(system.map(|content| serde_json::to_vec(&content).unwrap_or_else(|_| b"null".to_vec())))
}

/// What a JSON value is, as an error names it.
pub(crate) fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::write_unescaped_compact;
    use crate::{Dialect, MessagesError};

    /// Every shape of message the translation reshapes, in an order that joins and splits
    /// the user turns of tool results.
    fn shapes() -> Vec<Value> {
        vec![
            json!({"role": "user", "content": "Weather in Paris and Rome?"}),
            json!({"role": "user", "content": [
                {"type": "text", "text": "what is it?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBO"}},
                {"type": "image_url", "image_url": {"url": "https://example.com/a.png", "detail": "low"}},
                {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}]}),
            json!({"role": "assistant", "content": "Looking.", "tool_calls": [
                {"id": "a", "type": "function", "function": {"name": "w", "arguments": "{\"c\":\"Paris\"}"}},
                {"id": "b", "type": "function", "function": {"name": "w", "arguments": ""}},
                {"id": "c", "type": "function", "function": {"name": "w", "arguments": null}},
                {"id": "d", "type": "function", "function": {"name": "w", "arguments": {"c": 1}}}]}),
            json!({"role": "tool", "tool_call_id": "a", "content": "18C"}),
            json!({"role": "tool", "tool_call_id": "b", "content": [{"type": "text", "text": "2"}, {"type": "text", "text": "1C"}]}),
            json!({"role": "tool", "tool_call_id": "c", "content": null}),
            json!({"role": "assistant", "content": null, "refusal": null, "tool_calls": []}),
            json!({"role": "assistant", "content": [{"type": "text", "text": "It is "}, {"type": "text", "text": "warm."}],
                "name": "bot"}),
            json!({"role": "tool", "tool_call_id": "late", "content": "alone"}),
            json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "x", "content": "sent as Anthropic's"}]}),
            json!({"role": "tool", "tool_call_id": "y", "content": "joins it"}),
            json!({"role": "user", "content": []}),
            json!({"role": "tool", "tool_call_id": "z", "content": "joins the empty turn"}),
            json!({"role": "developer", "content": [{"type": "text", "text": "later"}]}),
            json!({"role": "system", "content": "a later system turn"}),
            json!({"role": "tool", "tool_call_id": "last", "content": "é \" \\ \u{1F600}"}),
        ]
    }

    /// The list and system `messages_from_chat_json` writes are those of `request_from_chat`,
    /// byte for byte, and its errors are the same.
    fn same_as_the_tree(api: Dialect, messages: &Value) {
        let text = api.messages_from_chat_json(messages.to_string().as_bytes());
        let tree = api.request_from_chat(&json!({"model": "m", "messages": messages}));
        let (text, tree) = match (text, tree) {
            (Ok(text), Ok(tree)) => (text, tree),
            (Err(text), Err(tree)) => {
                return assert_eq!(text.to_string(), tree.to_string(), "{api}: {messages}");
            }
            (text, tree) => panic!("{api}: {text:?} but {tree:?}"),
        };
        assert_eq!(
            String::from_utf8(text.list).unwrap(),
            tree[text.key].to_string(),
            "{api}"
        );
        let system_key = match api {
            Dialect::Responses => "instructions",
            _ => "system",
        };
        assert_eq!(
            text.system,
            (tree.get(system_key)).map(|s| (system_key, s.to_string().into_bytes())),
            "{api}"
        );
    }

    #[test]
    fn each_shape_is_written_as_the_tree_is() {
        let all = shapes();
        for api in [Dialect::Anthropic, Dialect::Responses] {
            same_as_the_tree(api, &json!(all));
            // Each shape alone, first (a tool result opening the list) and after a user turn.
            for m in &all {
                same_as_the_tree(api, &json!([m]));
                same_as_the_tree(api, &json!([{"role": "user", "content": "x"}, m]));
            }
            for first in ["system", "developer"] {
                let mut with_system = vec![json!({"role": first, "content": "Be brief."})];
                with_system.extend(all.clone());
                same_as_the_tree(api, &json!(with_system));
                same_as_the_tree(
                    api,
                    &json!([{"role": first, "content": [{"type": "text", "text": "only"}]}]),
                );
            }
            // An empty list is no messages; anything else not a list, an error in both.
            for not_a_list in [
                json!([]),
                json!(null),
                json!("not a list"),
                json!({"role": "user"}),
            ] {
                same_as_the_tree(api, &not_a_list);
            }
        }
    }

    #[test]
    fn messages_not_a_list_are_a_typed_error_naming_the_field() {
        for api in [Dialect::Anthropic, Dialect::Responses] {
            for (text, found) in [
                ("null", "null"),
                (r#""hi""#, "a string"),
                (r#" {"role": "user"}"#, "an object"),
                ("3", "a number"),
            ] {
                let e = api.messages_from_chat_json(text.as_bytes()).unwrap_err();
                assert_eq!(e, MessagesError::NotAnArray { found }, "{api}: {text}");
                assert_eq!(e.field(), "messages");
                assert_eq!(
                    e.to_string(),
                    format!("\"messages\" must be an array, not {found}")
                );
            }
            // Not JSON at all: unreadable, still the field's.
            let e = api.messages_from_chat_json(b"{oops").unwrap_err();
            assert!(matches!(&e, MessagesError::Invalid(why) if why.contains("could not be read")));
            // The tree refuses the same.
            let tree = api.request_from_chat(&json!({"model": "m", "messages": "hi"}));
            let e = tree.unwrap_err();
            assert_eq!(e.param(), Some("messages"));
            assert_eq!(e.message(), "\"messages\" must be an array, not a string");
            // No messages at all is still no messages.
            assert!(api.request_from_chat(&json!({"model": "m"})).is_ok());
        }
    }

    #[test]
    fn the_tree_and_the_text_fail_alike() {
        let system = json!({"role": "system", "content": "s"});
        for bad in [
            json!({"role": "robot", "content": "x"}),
            json!({"content": "no role"}),
            json!("a string"),
            json!({"role": "assistant", "tool_calls": [{"id": "a", "function": {"name": "w", "arguments": "{oops"}}]}),
            json!({"role": "user", "content": [{"type": "image_url", "image_url": {}}]}),
            json!({"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png,raw"}}]}),
        ] {
            for api in [Dialect::Anthropic, Dialect::Responses] {
                same_as_the_tree(api, &json!([bad]));
                // Its index is the client's (the system message taken out counts), as the tree's.
                same_as_the_tree(api, &json!([system, {"role": "user", "content": "x"}, bad]));
            }
        }
        let e = Dialect::Anthropic
            .messages_from_chat_json(br#"[{"role":"user","content":"x"},{"role":"robot"}]"#)
            .unwrap_err();
        assert_eq!(e.to_string(), "messages[1]: unknown role \"robot\"");
        let e = Dialect::Responses
            .messages_from_chat_json(
                br#"[{"role":"system","content":"s"},{"role":"user","content":"x"},{"role":"robot"}]"#,
            )
            .unwrap_err();
        assert_eq!(e.to_string(), "messages[2]: unknown role \"robot\"");
        for not_json in [
            &br#"[{"role":"user","content":"x"},"#[..],
            br#"[{"role":"user","content":"x"} {"role":"user","content":"y"}]"#,
            b"nul",
            b"",
        ] {
            for api in [Dialect::Anthropic, Dialect::Responses] {
                let e = api.messages_from_chat_json(not_json).unwrap_err();
                let e = e.to_string();
                assert!(e.starts_with("\"messages\" could not be read: "), "{e}");
            }
        }
    }

    /// A string of JSON text is written unescaped and compact as the text read whole and
    /// compacted is, escapes of every kind included; a lone surrogate is no text.
    #[test]
    fn arguments_are_unescaped_and_compacted_in_one_pass() {
        for args in [
            r#"{ "a" : [1, 2.50, "x y\n"], "b": "é😀\u00e9\ud83d\ude00 \"q\" \\ /" }"#,
            "\t{\n\"k\":\r true }",
            "",
            "  ",
            "123456789012345678901234567890",
        ] {
            let literal = serde_json::to_string(args).unwrap();
            let mut out = b"x".to_vec();
            assert!(write_unescaped_compact(&mut out, &literal), "{args}");
            let want = format!("x{}", choicewise_partial_json::compact_json(args));
            assert_eq!(String::from_utf8(out).unwrap(), want, "{args}");
        }
        // Escapes in the string itself (`\u0041` is `A`, `\/` is `/`).
        let mut out = Vec::new();
        assert!(write_unescaped_compact(
            &mut out,
            r#""{\"\u0041\/\ud83d\ude00\": 1}""#
        ));
        assert_eq!(String::from_utf8(out).unwrap(), "{\"A/😀\":1}");
        for lone in [r#""\ud800""#, r#""\udc00 x""#, r#""\ud800\u0041""#] {
            assert!(!write_unescaped_compact(&mut Vec::new(), lone), "{lone}");
        }
    }

    /// A tool call's arguments reach Anthropic's `input` as written: a 30-digit integer
    /// digit for digit, not a float (only the insignificant whitespace goes).
    #[test]
    fn a_30_digit_integer_in_arguments_is_kept() {
        let text = br#"[{"role":"assistant","content":"On it.","tool_calls":[{"id":"a","type":"function","function":{"name":"w","arguments":"{ \"id\": 123456789012345678901234567890, \"x\": 1.50 }"}}]}]"#;
        let out = Dialect::Anthropic.messages_from_chat_json(text).unwrap();
        assert_eq!(
            String::from_utf8(out.list).unwrap(),
            r#"[{"content":[{"text":"On it.","type":"text"},{"id":"a","input":{"id":123456789012345678901234567890,"x":1.50},"name":"w","type":"tool_use"}],"role":"assistant"}]"#
        );
    }

    /// An image in a tool's result reaches the upstream (Anthropic's `tool_result` image
    /// block, Responses' `input_image` output part), never dropped; a part neither text nor
    /// image is refused naming where; a result of text only stays one string.
    #[test]
    fn an_image_in_a_tool_result_is_translated_or_refused() {
        let with_image = json!([
            {"role": "user", "content": "look"},
            {"role": "tool", "tool_call_id": "a", "content": [
                {"type": "text", "text": "the plot:"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBO"}}]}]);
        let anthropic = Dialect::Anthropic
            .request_from_chat(&json!({"model": "m", "messages": with_image}))
            .unwrap();
        assert_eq!(
            anthropic["messages"][1]["content"][0]["content"],
            json!([{"type": "text", "text": "the plot:"},
                   {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBO"}}])
        );
        let responses = Dialect::Responses
            .request_from_chat(&json!({"model": "m", "messages": with_image}))
            .unwrap();
        assert_eq!(
            responses["input"][1]["output"],
            json!([{"type": "input_text", "text": "the plot:"},
                   {"type": "input_image", "image_url": "data:image/png;base64,iVBO"}])
        );
        for api in [Dialect::Anthropic, Dialect::Responses] {
            same_as_the_tree(api, &with_image);
            let audio = json!([{"role": "tool", "tool_call_id": "a", "content": [
                {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}]}]);
            let e = api
                .request_from_chat(&json!({"model": "m", "messages": audio}))
                .unwrap_err();
            assert_eq!(e.param(), Some("messages"));
            assert!(e.message().starts_with("messages[0].content[0]: "), "{e}");
            assert!(e.message().contains("\"input_audio\""), "{e}");
            let text = json!([{"role": "tool", "tool_call_id": "a", "content": [
                {"type": "text", "text": "2"}, {"type": "text", "text": "1C"}]}]);
            let tree = api
                .request_from_chat(&json!({"model": "m", "messages": text}))
                .unwrap();
            let out = match api {
                Dialect::Anthropic => &tree["messages"][0]["content"][0]["content"],
                _ => &tree["input"][0]["output"],
            };
            assert_eq!(out, "21C");
        }
    }

    /// A message larger than 64 KiB is read one part at a time (issue 63): what it is
    /// translated into reads as the tree's translation (its JSON equal, not its bytes: its
    /// parts are copied as the client wrote them).
    #[test]
    fn large_messages_translate_as_the_tree_does() {
        let texts: Vec<Value> = (0..5_000)
            .map(|i| json!({"type": "text", "text": format!("part {i} ")}))
            .collect();
        let long = format!("é \" \\ {}", "x".repeat(70_000));
        let mut with_image = texts.clone();
        with_image.push(json!({"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBO", "detail": "low"}}));
        let call =
            json!({"id": "a", "type": "function", "function": {"name": "w", "arguments": "{}"}});
        let shapes = [
            json!({"role": "user", "content": with_image}),
            json!({"role": "user", "content": texts, "zz": [0, 0]}),
            json!({"role": "assistant", "content": texts}),
            json!({"role": "assistant", "content": texts, "tool_calls": [call]}),
            json!({"role": "tool", "tool_call_id": "a", "content": texts}),
            json!({"role": "tool", "tool_call_id": "a", "content": with_image}),
            json!({"role": "developer", "content": with_image}),
            json!({"role": "robot", "content": texts}),
            json!({"role": "user", "content": long}),
            json!({"role": "developer", "content": long}),
            json!({"role": "assistant", "content": long}),
            json!({"role": "assistant", "content": long, "tool_calls": [call]}),
            json!({"role": "tool", "tool_call_id": "a", "content": long}),
            json!({"role": "assistant", "content": null, "tool_calls": [
                {"id": "b", "type": "function", "function": {"name": "w",
                 "arguments": json!({"z": vec![0; 40_000], "s": "é \" x"}).to_string()}},
                call,
                {"id": "c", "function": {"name": "w", "arguments": " "}},
                {"id": "d", "function": {"name": "w", "arguments": null}},
                {"id": "e", "function": {"name": "w", "arguments": {"k": [1, 2]}}}]}),
            json!({"role": "assistant", "content": texts, "tool_calls": [
                {"id": "f", "function": {"name": "w", "arguments": "{oops"}}]}),
        ];
        for api in [Dialect::Anthropic, Dialect::Responses] {
            for m in &shapes {
                for list in [json!([{"role": "user", "content": "x"}, m]), json!([m])] {
                    let text = api.messages_from_chat_json(list.to_string().as_bytes());
                    let tree = api.request_from_chat(&json!({"model": "m", "messages": list}));
                    match (text, tree) {
                        (Ok(text), Ok(tree)) => {
                            let written: Value = serde_json::from_slice(&text.list).unwrap();
                            assert_eq!(written, tree[text.key], "{api}: {}", m["role"]);
                        }
                        (Err(text), Err(tree)) => assert_eq!(text.to_string(), tree.to_string()),
                        (text, tree) => panic!("{api}: {text:?} but {tree:?}"),
                    }
                }
            }
        }
    }

    /// A custom tool's call and its result, in a small or large assistant turn: written from
    /// the text as the tree writes them (Anthropic's `tool_use` of `{"input": TEXT}`,
    /// Responses' `custom_tool_call` and `custom_tool_call_output` items).
    #[test]
    fn custom_calls_are_written_as_the_tree_writes_them() {
        let custom = json!({"id": "p", "type": "custom",
            "custom": {"name": "apply_patch", "input": "*** Begin Patch\n\"é\""}});
        let function = json!({"id": "f", "type": "function",
            "function": {"name": "w", "arguments": "{\"a\":1}"}});
        for content in [json!("short"), json!("x".repeat(super::LARGE + 1))] {
            let list = json!([
                {"role": "user", "content": "x"},
                {"role": "assistant", "content": content, "tool_calls": [custom, function]},
                {"role": "tool", "tool_call_id": "p", "content": "patched"},
                {"role": "tool", "tool_call_id": "f", "content": "ok"}]);
            for api in [Dialect::Anthropic, Dialect::Responses] {
                same_as_the_tree(api, &list);
            }
            let r = Dialect::Responses
                .request_from_chat(&json!({"model": "m", "messages": list}))
                .unwrap();
            let items = r["input"].as_array().unwrap();
            assert_eq!(
                items[2],
                json!({"type": "custom_tool_call", "call_id": "p", "name": "apply_patch",
                    "input": "*** Begin Patch\n\"é\""})
            );
            assert_eq!(items[4]["type"], "custom_tool_call_output");
            assert_eq!(items[5]["type"], "function_call_output");
            let a = Dialect::Anthropic
                .request_from_chat(&json!({"model": "m", "messages": list}))
                .unwrap();
            assert_eq!(
                a["messages"][1]["content"][1]["input"],
                json!({"input": "*** Begin Patch\n\"é\""})
            );
        }
    }

    #[test]
    fn many_messages_are_written_as_the_tree_is() {
        let all = shapes();
        let mut many = vec![json!({"role": "system", "content": "Be brief."})];
        many.extend((0..5_000).map(|i| all[i % all.len()].clone()));
        for api in [Dialect::Anthropic, Dialect::Responses] {
            same_as_the_tree(api, &json!(many));
        }
        let text = Dialect::Anthropic
            .messages_from_chat_json(json!(many).to_string().as_bytes())
            .unwrap();
        let list: Vec<Value> = serde_json::from_slice(&text.list).unwrap();
        // The 16 shapes make 12 turns (the results that follow a turn of results join it),
        // the 8 left over 6; the system message is the request's `system`.
        assert_eq!(list.len(), 5_000 / 16 * 12 + 6);
        assert_eq!(
            Dialect::Chat.messages_from_chat_json(b"[1]").unwrap().list,
            b"[1]"
        );
    }
}
