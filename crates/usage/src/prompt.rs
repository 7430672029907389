//! Estimated `prompt_tokens` of a chat completion request body.
//!
//! The public constants, options and entry points are here; the counting of messages is in
//! `messages`, that of function and tool definitions in `tools`.

mod messages;
mod tools;

use serde_json::{Map, Value};

use crate::encoding::EncodingName;
use crate::error::{Path, UsageError};

use messages::Counter;
use tools::FunctionDef;

/// Tokens framing every message (`<|start|>{role}<|message|>…<|end|>` less the
/// role, which is counted as text). OpenAI cookbook, "How to count tokens with
/// tiktoken", `num_tokens_from_messages`: 3 for every model since
/// gpt-3.5-turbo-0613 (only the retired gpt-3.5-turbo-0301 used 4).
///
/// ```
/// assert_eq!(choicewise_usage::TOKENS_PER_MESSAGE, 3);
/// ```
pub const TOKENS_PER_MESSAGE: u64 = 3;

/// Tokens added when a message carries a `name` (besides the name's own
/// tokens). Cookbook `num_tokens_from_messages`: `tokens_per_name = 1`.
///
/// ```
/// assert_eq!(choicewise_usage::TOKENS_PER_NAME, 1);
/// ```
pub const TOKENS_PER_NAME: u64 = 1;

/// Tokens priming the reply, once per request: "every reply is primed with
/// `<|start|>assistant<|message|>`" (cookbook `num_tokens_from_messages`).
///
/// ```
/// assert_eq!(choicewise_usage::REPLY_PRIMING, 3);
/// ```
pub const REPLY_PRIMING: u64 = 3;

/// Tokens added for each entry of an assistant message's `tool_calls`, on top
/// of the tokens of the function's name and arguments.
///
/// Not documented by OpenAI. Seven is the median of the per-call overhead
/// observed in the prompt counts that
/// [chrisdinn/tokens](https://github.com/chrisdinn/tokens) recorded from the
/// API (gpt-4-1106-preview; one call, no content: 8, 7, 7, 7, 5, 3 tokens,
/// the spread coming from the API re-serialising the arguments); a community
/// report for gpt-3.5-turbo shows 4. See `docs/usage.md` in the repository.
///
/// ```
/// assert_eq!(choicewise_usage::TOOL_CALL_PROMPT_OVERHEAD, 7);
/// ```
pub const TOOL_CALL_PROMPT_OVERHEAD: u64 = 7;

/// Tokens added once for an assistant message (or a completion choice)
/// holding two or more tool calls, on top of each call's own overhead.
///
/// The API passes parallel calls to the model through a
/// `multi_tool_use.parallel` wrapper. 13 is the constant chrisdinn/tokens
/// measured for it on gpt-4-1106-preview (`tokensForMultiTool`); a community
/// report for gpt-3.5-turbo suggests about 24. Applied to completions by
/// analogy (the wrapper is what the model writes), not measured there.
///
/// ```
/// assert_eq!(choicewise_usage::PARALLEL_TOOL_CALLS_OVERHEAD, 13);
/// ```
pub const PARALLEL_TOOL_CALLS_OVERHEAD: u64 = 13;

/// Tokens added for an assistant message's legacy `function_call`, on top of
/// its name and arguments: 3, as measured against gpt-3.5-turbo by
/// [hmarr/openai-chat-tokens](https://github.com/hmarr/openai-chat-tokens)
/// (`messageTokensEstimate`).
///
/// ```
/// assert_eq!(choicewise_usage::FUNCTION_CALL_PROMPT_OVERHEAD, 3);
/// ```
pub const FUNCTION_CALL_PROMPT_OVERHEAD: u64 = 3;

/// Tokens counted for each `image_url` content part: 85, what OpenAI's
/// vision guide documents for any `detail: "low"` image on gpt-4o-class
/// models, and the base that every high-detail image adds to its
/// `170 × 512px-tiles` (a 1024×1024 image costs 765). The image's size behind
/// a URL is unknown here, so this is a lower bound for those models; the
/// gpt-4.1-mini/nano and o4-mini family use a 32px-patch formula instead.
/// [`PromptCount::image_parts`] says how many images the estimate includes.
///
/// ```
/// assert_eq!(choicewise_usage::IMAGE_PART_TOKENS, 85);
/// ```
pub const IMAGE_PART_TOKENS: u64 = 85;

/// The deepest JSON-schema nesting that tool definitions are followed to;
/// deeper schemas are rejected with [`UsageError::TooDeep`] rather than
/// risking the stack.
///
/// ```
/// assert_eq!(choicewise_usage::MAX_SCHEMA_DEPTH, 64);
/// ```
pub const MAX_SCHEMA_DEPTH: usize = 64;

/// How function and tool definitions are counted.
///
/// Both formulas reproduce the OpenAI cookbook's tool example exactly (105
/// tokens with `cl100k_base`, 101 with `o200k_base`). Only
/// [`Namespace`](ToolFormula::Namespace) also reproduces the 19 cases of
/// hmarr/openai-chat-tokens (gpt-3.5-turbo) and the tool-definition counts
/// chrisdinn/tokens recorded for gpt-4-1106-preview (84, 94 exactly; 142 for
/// 141); the cookbook formula is off by up to 7 and 9 tokens on those, so
/// `Namespace` is the default.
///
/// ```
/// use choicewise_usage::{PromptOptions, ToolFormula};
///
/// assert_eq!(PromptOptions::default().tool_formula, ToolFormula::Namespace);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum ToolFormula {
    /// Renders the definitions as the TypeScript namespace the model is shown
    /// and counts that text, with the adjustments measured by
    /// hmarr/openai-chat-tokens (`promptTokensEstimate`,
    /// `formatFunctionDefinitions`):
    ///
    /// ```text
    /// namespace functions {
    ///
    /// // Get the current weather in a given location
    /// type get_current_weather = (_: {
    /// // The city and state, e.g. San Francisco, CA
    /// location: string,
    /// // The unit of temperature to return
    /// unit?: "celsius" | "fahrenheit",
    /// }) => any;
    ///
    /// } // namespace functions
    /// ```
    ///
    /// `tools = tokens(rendering) + 9`; when definitions are present the
    /// first `system` (or `developer`) message's content counts as if it ended
    /// with `"\n"`, and the messages count 4 fewer when any such message
    /// exists. The default.
    #[default]
    Namespace,
    /// OpenAI cookbook `num_tokens_for_tools` (constants in
    /// [`CookbookConstants`]): per function `func_init + tokens("name:description")`,
    /// per function with properties `prop_init`, per property
    /// `prop_key + tokens("key:type:description")` (one trailing `.` of a
    /// description dropped), per enum `enum_init + Σ (enum_item + tokens(value))`,
    /// once `func_end`. Extended here to optional descriptions and types
    /// (`key:type`, `key:description`) and to nested object properties
    /// (counted like top-level ones, which the published function ignores).
    Cookbook,
}

/// The constants of the cookbook's `num_tokens_for_tools`.
///
/// ```
/// use choicewise_usage::{CookbookConstants, EncodingName};
///
/// let c = CookbookConstants::for_encoding(EncodingName::O200kBase);
/// assert_eq!((c.func_init, c.prop_init, c.prop_key, c.enum_init, c.enum_item, c.func_end),
///            (7, 3, 3, -3, 3, 12));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CookbookConstants {
    /// Added per function (7 for gpt-4o / gpt-4o-mini, 10 for gpt-3.5-turbo /
    /// gpt-4).
    pub func_init: i64,
    /// Added once per function whose parameters have properties.
    pub prop_init: i64,
    /// Added per property.
    pub prop_key: i64,
    /// Added once per property that has an `enum`.
    pub enum_init: i64,
    /// Added per enum value (besides the value's tokens).
    pub enum_item: i64,
    /// Added once when any function is defined.
    pub func_end: i64,
}

impl CookbookConstants {
    /// The cookbook publishes constants for gpt-4o / gpt-4o-mini and for
    /// gpt-3.5-turbo / gpt-4; they are keyed here by encoding, so every
    /// `o200k_base` model gets the gpt-4o ones and every `cl100k_base` model
    /// the gpt-4 ones.
    ///
    /// ```
    /// use choicewise_usage::{CookbookConstants, EncodingName};
    ///
    /// assert_eq!(CookbookConstants::for_encoding(EncodingName::Cl100kBase).func_init, 10);
    /// ```
    pub fn for_encoding(enc: EncodingName) -> CookbookConstants {
        let func_init = match enc {
            EncodingName::O200kBase => 7,
            EncodingName::Cl100kBase => 10,
        };
        CookbookConstants {
            func_init,
            prop_init: 3,
            prop_key: 3,
            enum_init: -3,
            enum_item: 3,
            func_end: 12,
        }
    }
}

/// Options of [`count_prompt_with`].
///
/// ```
/// use choicewise_usage::{PromptOptions, ToolFormula};
///
/// let opts = PromptOptions { tool_formula: ToolFormula::Cookbook };
/// assert_ne!(opts, PromptOptions::default());
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct PromptOptions {
    /// How function and tool definitions are counted.
    pub tool_formula: ToolFormula,
}

/// The estimate of [`count_prompt`].
///
/// ```
/// use choicewise_usage::{count_prompt, EncodingName};
/// use serde_json::json;
///
/// let body = json!({"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]});
/// let n = count_prompt(EncodingName::O200kBase, &body).unwrap();
/// assert_eq!(n.total, n.messages + n.tools);
/// assert_eq!(n.image_parts, 0);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct PromptCount {
    /// The estimated `prompt_tokens`: `messages + tools`.
    pub total: u64,
    /// Messages, including the reply priming (and, for
    /// [`ToolFormula::Namespace`], its system-message adjustments).
    pub messages: u64,
    /// Function and tool definitions, plus `tool_choice` / `function_call`.
    pub tools: u64,
    /// `image_url` parts, each counted as [`IMAGE_PART_TOKENS`] (a lower bound).
    pub image_parts: u32,
    /// Content parts and tool calls of kinds that are not counted (audio,
    /// files, unknown types): the estimate is low by their cost.
    pub uncounted_parts: u32,
}

/// Estimates the `prompt_tokens` of a chat completion request body with the
/// default options ([`ToolFormula::Namespace`]); see [`count_prompt_with`].
///
/// Reproduces the OpenAI cookbook's worked example exactly: 129 tokens with
/// `cl100k_base` (gpt-3.5-turbo, gpt-4) and 124 with `o200k_base` (gpt-4o,
/// gpt-4o-mini).
///
/// ```
/// use choicewise_usage::{count_prompt, count_text, EncodingName};
/// use serde_json::json;
///
/// let enc = EncodingName::O200kBase;
/// let body = json!({
///     "model": "gpt-4o",
///     "messages": [
///         {"role": "system", "content": "You are terse."},
///         {"role": "user", "name": "ann", "content": "Hi!"}
///     ]
/// });
/// let expected = 3 + count_text(enc, "system") + count_text(enc, "You are terse.")
///     + 3 + count_text(enc, "user") + count_text(enc, "Hi!") + count_text(enc, "ann") + 1
///     + 3;
/// assert_eq!(count_prompt(enc, &body).unwrap().total, expected);
/// ```
///
/// # Errors
///
/// [`UsageError`] naming the path of the first value that is not of the
/// shape a chat request has there (see [`count_prompt_with`]).
pub fn count_prompt(enc: EncodingName, request: &Value) -> Result<PromptCount, UsageError> {
    count_prompt_with(enc, request, &PromptOptions::default())
}

/// Estimates the `prompt_tokens` of a chat completion request body
/// (`{"model", "messages", "tools", "functions", "tool_choice",
/// "function_call", …}`; other fields are ignored).
///
/// Messages (cookbook `num_tokens_from_messages`, generalised):
/// `Σ (TOKENS_PER_MESSAGE + tokens(role) + tokens(content) [+ tokens(name)
/// + TOKENS_PER_NAME]) + REPLY_PRIMING`, where
///
/// * `content` is a string, `null`, or an array of parts: `text` and
///   `refusal` parts count their text, `image_url` parts count
///   [`IMAGE_PART_TOKENS`], other parts count nothing and are reported in
///   [`PromptCount::uncounted_parts`];
/// * an assistant message's string `refusal` counts its text;
/// * each `tool_calls` entry adds `tokens(name) + tokens(arguments) +
///   TOOL_CALL_PROMPT_OVERHEAD` (`custom` tool calls: `name` and `input`);
///   [`PARALLEL_TOOL_CALLS_OVERHEAD`] is added once to a message with two or
///   more; a legacy `function_call` adds `tokens(name) + tokens(arguments) +
///   FUNCTION_CALL_PROMPT_OVERHEAD`;
/// * a `function`-role message counts 2 fewer (hmarr/openai-chat-tokens);
/// * ids (`tool_call_id`, `tool_calls[].id`) are not counted.
///
/// Definitions (`tools` entries of type `function`, and legacy `functions`)
/// are counted by [`PromptOptions::tool_formula`]; other tool types count
/// the tokens of their compact JSON. `tool_choice` / `function_call` add 1
/// for `"none"` and `tokens(name) + 4` for a named function, nothing
/// otherwise (hmarr/openai-chat-tokens, measured for `function_call`).
///
/// ```
/// use choicewise_usage::{count_prompt_with, EncodingName, PromptOptions, ToolFormula};
/// use serde_json::json;
///
/// let body = json!({
///     "messages": [{"role": "user", "content": "hello"}],
///     "functions": [{"name": "foo", "description": "Do a foo",
///                    "parameters": {"type": "object", "properties": {}}}]
/// });
/// // hmarr/openai-chat-tokens test case, measured on gpt-3.5-turbo.
/// let opts = PromptOptions { tool_formula: ToolFormula::Namespace };
/// assert_eq!(count_prompt_with(EncodingName::Cl100kBase, &body, &opts).unwrap().total, 36);
/// // The cookbook formula is one token short on this one.
/// let opts = PromptOptions { tool_formula: ToolFormula::Cookbook };
/// assert_eq!(count_prompt_with(EncodingName::Cl100kBase, &body, &opts).unwrap().total, 35);
/// ```
///
/// # Errors
///
/// [`UsageError::Missing`] when `messages`, a message's `role`, or a
/// function's `name` is absent; [`UsageError::WrongType`] when a value has
/// the wrong JSON type (a message that is not an object, `content` that is
/// a number, `arguments` that is not a string, `properties` that is not an
/// object, …); [`UsageError::TooDeep`] for a parameter schema nested deeper
/// than [`MAX_SCHEMA_DEPTH`].
pub fn count_prompt_with(
    enc: EncodingName,
    request: &Value,
    opts: &PromptOptions,
) -> Result<PromptCount, UsageError> {
    let root = Path::Root;
    let body = request
        .as_object()
        .ok_or_else(|| root.wrong_type("an object", request))?;
    let mut counter = Counter {
        enc,
        images: 0,
        uncounted: 0,
    };
    let mut defs = Definitions::new(enc, opts);
    if let Some(tools) = optional_array(body, "tools", &root)? {
        let tools_path = root.key("tools");
        for (i, tool) in tools.iter().enumerate() {
            defs.tool(tool, &tools_path.index(i), &counter)?;
        }
    }
    if let Some(functions) = optional_array(body, "functions", &root)? {
        let functions_path = root.key("functions");
        for (i, f) in functions.iter().enumerate() {
            defs.function(f, &functions_path.index(i), &counter)?;
        }
    }
    let messages_path = root.key("messages");
    let messages = match body.get("messages") {
        None => return Err(messages_path.missing()),
        Some(Value::Array(a)) => a,
        Some(v) => return Err(messages_path.wrong_type("an array of messages", v)),
    };
    let mut total = MessagesTotal::new(&defs);
    for (i, m) in messages.iter().enumerate() {
        total.add(m, &messages_path.index(i), &mut counter)?;
    }
    defs.finish(total.finish(), body, &counter)
}

/// Estimates the `prompt_tokens` of a chat completion request body given as its top-level
/// fields, each its JSON text (`("messages", b"[...]")`, ...): the same count as
/// [`count_prompt`] of the object they make (a field given twice counts its last text).
/// Each `tools` and `functions` entry is parsed and counted on its own, so that the
/// definitions of a request never exist as one parsed tree.
///
/// ```
/// use choicewise_usage::{count_prompt, count_prompt_fields, EncodingName};
/// use serde_json::json;
///
/// let tools = r#"[{"type": "function", "function": {"name": "f", "parameters": {}}}]"#;
/// let messages = r#"[{"role": "user", "content": "hello"}]"#;
/// let fields = [("tools", tools.as_bytes()), ("messages", messages.as_bytes())];
/// let whole = json!({"tools": serde_json::from_str::<serde_json::Value>(tools).unwrap(),
///                    "messages": serde_json::from_str::<serde_json::Value>(messages).unwrap()});
/// assert_eq!(
///     count_prompt_fields(EncodingName::O200kBase, fields).unwrap(),
///     count_prompt(EncodingName::O200kBase, &whole).unwrap()
/// );
/// ```
///
/// # Errors
///
/// As [`count_prompt`]; [`UsageError::NotJson`] when a field read is not JSON text.
pub fn count_prompt_fields<'a>(
    enc: EncodingName,
    fields: impl IntoIterator<Item = (&'a str, &'a [u8])>,
) -> Result<PromptCount, UsageError> {
    let opts = PromptOptions::default();
    let root = Path::Root;
    let mut read: std::collections::BTreeMap<&str, &[u8]> = std::collections::BTreeMap::new();
    for (key, text) in fields {
        if matches!(
            key,
            "tools" | "functions" | "messages" | "tool_choice" | "function_call"
        ) {
            read.insert(key, text);
        }
    }
    let mut counter = Counter {
        enc,
        images: 0,
        uncounted: 0,
    };
    let mut defs = Definitions::new(enc, &opts);
    for (key, tool) in [("tools", true), ("functions", false)] {
        let Some(items) = raw_array(read.get(key).copied(), key, &root)? else {
            continue;
        };
        let list_path = root.key(key);
        for (i, item) in items.iter().enumerate() {
            let p = list_path.index(i);
            if item.get().len() > LARGE_TOOL {
                // Never a tree (issue 63): its text's tokens, as a tool that is no function
                // definition counts.
                defs.other_tools += counter.text(item.get());
                continue;
            }
            let value = parse(item.get().as_bytes(), &p)?;
            match tool {
                true => defs.tool(&value, &p, &counter)?,
                false => defs.function(&value, &p, &counter)?,
            }
        }
    }
    let messages_path = root.key("messages");
    let mut total = MessagesTotal::new(&defs);
    match read.get("messages") {
        None => return Err(messages_path.missing()),
        Some(text) if text.first() == Some(&b'[') => {
            // One message parsed at a time: the list never exists as a parsed tree.
            // Each message's fields, parts and calls read one at a time too: no message of
            // any shape is ever a tree (issue 63).
            let counted = choicewise_partial_json::for_each_raw_entry(text, |i, m| {
                total.add_raw(m, &messages_path.index(i), &mut counter)
            });
            match counted {
                Ok(result) => result?,
                Err(e) => return Err(messages_path.not_json(&e)),
            }
        }
        Some(text) => {
            let v = parse(text, &messages_path)?;
            return Err(messages_path.wrong_type("an array of messages", &v));
        }
    }
    let msg_total = total.finish();
    let mut choices = Map::new();
    for key in ["tool_choice", "function_call"] {
        if let Some(text) = read.get(key) {
            choices.insert(key.to_string(), parse(text, &root.key(key))?);
        }
    }
    defs.finish(msg_total, &choices, &counter)
}

/// An upper bound of [`count_prompt_fields`]'s total from the fields' bytes, never below it
/// for either encoding (and at least 0 where that count fails): the messages, `tool_choice`
/// and `function_call` bounded by their JSON text's length without being read, only the
/// function and tool definitions counted (as [`count_prompt_fields`] counts them), so that
/// a request without definitions is bounded in a scan of its bytes, hundreds of times
/// faster than its count.
///
/// Why it is a bound: a text's tokens are never more than its UTF-8 bytes ([`count_text`]
/// gives every token a byte at least, and its estimates of long texts and pieces keep to
/// that), and a JSON string's text is never longer than its literal. Every constant a
/// message adds is paid by the JSON that carries it: [`TOKENS_PER_MESSAGE`] by
/// `{"role":""}` (11 bytes), [`TOKENS_PER_NAME`] by `,"name":""`, a tool call's
/// [`TOOL_CALL_PROMPT_OVERHEAD`] by its `{"function":{"name":""}}` (24 bytes; two calls pay
/// for [`PARALLEL_TOOL_CALLS_OVERHEAD`] as well), a legacy call's overhead by its
/// `"function_call":{"name":""}`, a system message's padding newline by its quotes. Only an
/// image part counts more ([`IMAGE_PART_TOKENS`]) than its at least 20 bytes
/// (`{"type":"image_url"}`): its value holds `image_url` or an escape `\u`, so the bound
/// adds the difference for each of those found, and never for more parts than the bytes
/// can hold. [`REPLY_PRIMING`] is added once.
///
/// [`count_text`]: crate::count_text
///
/// ```
/// use choicewise_usage::{count_prompt_fields, count_prompt_fields_at_most, EncodingName};
///
/// let messages = r#"[{"role": "user", "content": "hello, world"}]"#;
/// for enc in [EncodingName::O200kBase, EncodingName::Cl100kBase] {
///     let fields = [("messages", messages.as_bytes())];
///     let exact = count_prompt_fields(enc, fields).unwrap().total;
///     let bound = count_prompt_fields_at_most(enc, fields);
///     assert!(exact <= bound, "{exact} > {bound}");
///     assert_eq!(bound, messages.len() as u64 + 3);
/// }
/// ```
pub fn count_prompt_fields_at_most<'a>(
    enc: EncodingName,
    fields: impl IntoIterator<Item = (&'a str, &'a [u8])>,
) -> u64 {
    let mut bound = REPLY_PRIMING;
    let mut definitions: Vec<(&str, &[u8])> = Vec::new();
    for (key, text) in fields {
        match key {
            "messages" => bound = bound.saturating_add(messages_at_most(text)),
            "tool_choice" | "function_call" => bound = bound.saturating_add(text.len() as u64),
            "tools" | "functions" if !matches!(text, b"[]" | b"null") => {
                definitions.push((key, text));
            }
            _ => {}
        }
    }
    if !definitions.is_empty() {
        // The definitions' own count. Where they cannot be counted, neither can the prompt:
        // its count fails, and they bound nothing.
        definitions.push(("messages", b"[]"));
        let tools = count_prompt_fields(enc, definitions).map_or(0, |c| c.tools);
        bound = bound.saturating_add(tools);
    }
    bound
}

/// The bound of a `messages` field's tokens (without the reply's priming): its bytes, and
/// for each image part it may hold what the part counts beyond its bytes.
fn messages_at_most(text: &[u8]) -> u64 {
    /// The fewest bytes of an image part: `{"type":"image_url"}`.
    const IMAGE_PART_BYTES: u64 = 20;
    use memchr::memmem::Finder;
    use std::sync::LazyLock;
    static IMAGE: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"image_url"));
    static ESCAPE: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"\\u"));
    let bytes = text.len() as u64;
    let named = IMAGE.find_iter(text).count() + ESCAPE.find_iter(text).count();
    let images = (named as u64).min(bytes / IMAGE_PART_BYTES);
    bytes.saturating_add(images.saturating_mul(IMAGE_PART_TOKENS - IMAGE_PART_BYTES))
}

/// A tool (or legacy function) definition of more than this many bytes is counted from its
/// text rather than parsed: its tree would cost many times its bytes.
const LARGE_TOOL: usize = 64 * 1024;

/// A field's JSON text parsed (`p`: where it is).
fn parse(text: &[u8], p: &Path<'_>) -> Result<Value, UsageError> {
    serde_json::from_slice(text).map_err(|e| p.not_json(&e))
}

/// An optional array field's entries, each its JSON text (`null` is no array).
fn raw_array<'t>(
    text: Option<&'t [u8]>,
    key: &str,
    root: &Path<'_>,
) -> Result<Option<Vec<&'t serde_json::value::RawValue>>, UsageError> {
    let p = root.key(key);
    match text {
        None => Ok(None),
        Some(text) if text.first() == Some(&b'[') => serde_json::from_slice(text)
            .map(Some)
            .map_err(|e| p.not_json(&e)),
        Some(text) => match parse(text, &p)? {
            Value::Null => Ok(None),
            v => Err(p.wrong_type("an array", &v)),
        },
    }
}

/// The messages' tokens, added one message at a time; [`finish`](Self::finish) adds the
/// reply's priming.
struct MessagesTotal {
    namespace: bool,
    total: i64,
    padded_system: bool,
    has_system: bool,
}

impl MessagesTotal {
    fn new(defs: &Definitions) -> Self {
        MessagesTotal {
            namespace: defs.namespace(),
            total: 0,
            padded_system: false,
            has_system: false,
        }
    }

    /// One message (`p`: where it is).
    fn add(&mut self, m: &Value, p: &Path<'_>, counter: &mut Counter) -> Result<(), UsageError> {
        let pad = if self.namespace && !self.padded_system {
            let role = m.get("role").and_then(Value::as_str);
            let is_system = matches!(role, Some("system" | "developer"));
            self.padded_system = is_system;
            is_system
        } else {
            false
        };
        let (n, role) = counter.message(m, p, pad)?;
        self.has_system |= matches!(role, "system" | "developer");
        self.total += n;
        Ok(())
    }

    /// [`add`](Self::add) of a message's JSON text ([`Counter::message_raw`]).
    fn add_raw(
        &mut self,
        m: &serde_json::value::RawValue,
        p: &Path<'_>,
        counter: &mut Counter,
    ) -> Result<(), UsageError> {
        let pad = self.namespace && !self.padded_system;
        let (n, role) = counter.message_raw(m, p, pad)?;
        let is_system = matches!(role.as_str(), "system" | "developer");
        if pad {
            self.padded_system = is_system;
        }
        self.has_system |= is_system;
        self.total += n;
        Ok(())
    }

    /// The messages' total, with the reply's priming.
    fn finish(self) -> i64 {
        let mut total = self.total + REPLY_PRIMING as i64;
        if self.namespace && self.has_system {
            total -= 4;
        }
        total
    }
}

/// Function definitions (`tools` entries of type `function`, legacy `functions`) and other
/// tools, counted as they come: the cookbook's sum, or the namespace text written so far.
struct Definitions {
    formula: ToolFormula,
    constants: CookbookConstants,
    /// Definitions seen.
    count: usize,
    /// The cookbook formula's sum of the definitions so far.
    cookbook: i64,
    /// The namespace formula's text so far.
    text: tools::NamespaceText,
    /// Tokens of the tools that are not function definitions.
    other_tools: u64,
}

impl Definitions {
    fn new(enc: EncodingName, opts: &PromptOptions) -> Self {
        Definitions {
            formula: opts.tool_formula,
            constants: CookbookConstants::for_encoding(enc),
            count: 0,
            cookbook: 0,
            text: tools::NamespaceText::new(),
            other_tools: 0,
        }
    }

    /// One `tools` entry.
    fn tool(&mut self, tool: &Value, p: &Path<'_>, counter: &Counter) -> Result<(), UsageError> {
        let obj = tool
            .as_object()
            .ok_or_else(|| p.wrong_type("an object", tool))?;
        let ty = optional_str(obj, "type", p)?;
        match (ty, obj.get("function")) {
            (Some("function"), _) | (None, Some(_)) => {
                let fp = p.key("function");
                let f = obj.get("function").ok_or_else(|| fp.missing())?;
                self.function(f, &fp, counter)
            }
            _ => {
                self.other_tools += counter.text(&tool.to_string());
                Ok(())
            }
        }
    }

    /// One function definition.
    fn function(&mut self, f: &Value, p: &Path<'_>, counter: &Counter) -> Result<(), UsageError> {
        let def = FunctionDef::parse(f, p)?;
        self.count += 1;
        match self.formula {
            ToolFormula::Cookbook => self.cookbook += def.cookbook(counter, &self.constants),
            ToolFormula::Namespace => self.text.add(&def),
        }
        Ok(())
    }

    /// Whether the namespace formula applies (it pads a first system message).
    fn namespace(&self) -> bool {
        self.formula == ToolFormula::Namespace && self.count > 0
    }

    /// The whole count: the messages' (`msg_total`), the definitions', and the request's
    /// `tool_choice` and `function_call` (in `body`).
    fn finish(
        self,
        msg_total: i64,
        body: &Map<String, Value>,
        counter: &Counter,
    ) -> Result<PromptCount, UsageError> {
        let root = Path::Root;
        let mut tools_total: i64 = self.other_tools as i64;
        if self.count > 0 {
            tools_total += match self.formula {
                ToolFormula::Cookbook => self.cookbook + self.constants.func_end,
                ToolFormula::Namespace => counter.text(&self.text.finish()) as i64 + 9,
            };
        }
        tools_total += counter.choice(body, "tool_choice", &root)?;
        tools_total += counter.choice(body, "function_call", &root)?;
        let messages = msg_total.max(0) as u64;
        let tools = tools_total.max(0) as u64;
        Ok(PromptCount {
            total: messages + tools,
            messages,
            tools,
            image_parts: counter.images,
            uncounted_parts: counter.uncounted,
        })
    }
}

fn optional_array<'v>(
    obj: &'v Map<String, Value>,
    key: &str,
    p: &Path<'_>,
) -> Result<Option<&'v Vec<Value>>, UsageError> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Array(a)) => Ok(Some(a)),
        Some(v) => Err(p.key(key).wrong_type("an array", v)),
    }
}

fn optional_str<'v>(
    obj: &'v Map<String, Value>,
    key: &str,
    p: &Path<'_>,
) -> Result<Option<&'v str>, UsageError> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(v) => Err(p.key(key).wrong_type("a string", v)),
    }
}

fn required_str<'v>(
    obj: &'v Map<String, Value>,
    key: &str,
    p: &Path<'_>,
) -> Result<&'v str, UsageError> {
    optional_str(obj, key, p)?.ok_or_else(|| p.key(key).missing())
}
