//! What a choice votes with: the tool calls it ended in, else its trimmed content or what a
//! pattern captures in it, compared as written or normalised. One rule for every vote a
//! program states (the gateway's `vote_by`, the CLI's `--vote-by` and `--vote-normalize`,
//! Python's `vote_by`).

use std::fmt;

use choicewise_proto::ChoiceOutput;

/// The most memory a key's pattern may compile to (the regex crate's size limits): compiling
/// takes time about proportional to it, so a pattern sent by a client costs a bounded few
/// milliseconds at most.
///
/// ```
/// assert_eq!(choicewise_core::defaults::VOTE_PATTERN_SIZE_LIMIT, 256 * 1024);
/// ```
pub const VOTE_PATTERN_SIZE_LIMIT: usize = 256 * 1024;

/// The longest pattern a key may have, in bytes: checked before the pattern is parsed, so
/// that a client's expression costs a bounded few milliseconds and megabytes whatever it
/// holds (the parser expands each Unicode class into its table of ranges).
///
/// ```
/// assert_eq!(choicewise_core::defaults::VOTE_PATTERN_MAX_BYTES, 1024);
/// ```
pub const VOTE_PATTERN_MAX_BYTES: usize = 1024;

/// The deepest a key's pattern may nest groups and bracketed classes (each `(` or `[` opens
/// one level), checked before the pattern is parsed.
///
/// ```
/// assert_eq!(choicewise_core::defaults::VOTE_PATTERN_MAX_DEPTH, 16);
/// ```
pub const VOTE_PATTERN_MAX_DEPTH: usize = 16;

/// The most Unicode property classes (`\p{..}`, `\P{..}`) and ranges (`a-z`) a
/// case-insensitive pattern (one that sets the `i` flag) may hold: the parser case-folds
/// such a class code point by code point, which costs milliseconds for one spanning much of
/// Unicode (`\p{Any}`, `[\x{0}-\x{10FFFF}]`). Checked before the pattern is parsed.
///
/// ```
/// assert_eq!(choicewise_core::defaults::VOTE_PATTERN_MAX_FOLDED_CLASSES, 4);
/// ```
pub const VOTE_PATTERN_MAX_FOLDED_CLASSES: usize = 4;

/// The key a finished choice votes with in [`Completions::vote`](crate::Completions::vote).
///
/// A choice that ended in tool calls votes with them: the ordered list of its calls, each
/// its function's name and its arguments as canonical JSON (object keys sorted, no
/// insignificant whitespace; empty arguments as `{}`), written as one JSON array:
/// `[["get_weather",{"city":"Paris"}]]`. Two samples that make the same calls in the same
/// order therefore agree whatever their spacing or key order, whatever text came with the
/// calls. A choice with a function call whose arguments are not JSON (cut off, say) does
/// not vote: no program could run that call, so it never outvotes one that could. A custom
/// tool's call (`kind: "custom"`, free-text input) votes with its input's trimmed text.
///
/// Any other choice votes with its content trimmed, or the first capture group of a pattern
/// in it (the whole match when the pattern has no group); with
/// [`normalize`](Self::normalize), case-folded and without trailing punctuation. The pattern
/// and the normalisation apply to text only. A choice without content or tool calls, without
/// a match, or whose key is empty does not vote. Text and tool-call keys share one tally.
///
/// ```
/// use choicewise_core::{ChoiceOutput, Message, ToolCall, VoteKey};
/// let answer = |text: &str| ChoiceOutput::new(0, Message::assistant(text));
/// let key = VoteKey::pattern(r"Answer: (\w+)").unwrap().normalize(true);
/// assert_eq!(key.of(&answer("So... Answer: Paris.")), Some("paris".to_string()));
/// assert_eq!(key.of(&answer("no idea")), None);
/// assert_eq!(VoteKey::content().of(&answer("  42 ")), Some("42".to_string()));
///
/// let mut call = answer("Let me look.");
/// call.message.tool_calls.push(ToolCall::function("call_1", "get_weather", r#"{ "unit": "C", "city": "Paris" }"#));
/// assert_eq!(key.of(&call).as_deref(), Some(r#"[["get_weather",{"city":"Paris","unit":"C"}]]"#));
/// ```
#[derive(Debug, Clone, Default)]
pub struct VoteKey {
    pattern: Option<regex::Regex>,
    normalize: bool,
}

/// Why a vote key's pattern was refused.
///
/// ```
/// let e = choicewise_core::VoteKey::pattern("(").unwrap_err();
/// assert!(!e.too_large());
/// assert!(e.to_string().starts_with("not a valid regular expression"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VoteKeyError {
    too_large: bool,
    message: String,
}

impl VoteKeyError {
    /// Whether the pattern is too large: longer than [`VOTE_PATTERN_MAX_BYTES`], nested
    /// deeper than [`VOTE_PATTERN_MAX_DEPTH`], case-insensitive with more than
    /// [`VOTE_PATTERN_MAX_FOLDED_CLASSES`] property classes and ranges, or compiling to more than
    /// [`VOTE_PATTERN_SIZE_LIMIT`] (else it is not a valid regular expression).
    ///
    /// ```
    /// let huge = format!("({})", vec!["\\w{50}"; 20].join("|"));
    /// assert!(choicewise_core::VoteKey::pattern(&huge).unwrap_err().too_large());
    /// let long = "\\w".repeat(1000);
    /// assert!(choicewise_core::VoteKey::pattern(&long).unwrap_err().too_large());
    /// ```
    pub fn too_large(&self) -> bool {
        self.too_large
    }
}

impl fmt::Display for VoteKeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for VoteKeyError {}

impl VoteKey {
    /// The trimmed content (the default).
    ///
    /// ```
    /// use choicewise_core::{ChoiceOutput, Message, VoteKey};
    /// assert_eq!(VoteKey::content().of(&ChoiceOutput::new(0, Message::assistant(" "))), None);
    /// ```
    pub fn content() -> Self {
        VoteKey::default()
    }

    /// The first capture group of `pattern` in the content (the whole match without a
    /// group). Refused when it is not a regular expression, or when it is too large (see
    /// [`VoteKeyError::too_large`]): its length, nesting and case-folded classes are checked
    /// in one pass over its bytes before it is parsed, its compiled size while it compiles.
    ///
    /// ```
    /// use choicewise_core::{ChoiceOutput, Message, VoteKey};
    /// let key = VoteKey::pattern(r"\d+").unwrap();
    /// assert_eq!(key.of(&ChoiceOutput::new(0, Message::assistant("it is 221."))), Some("221".to_string()));
    /// let deep = format!("{}a{}", "(".repeat(17), ")".repeat(17));
    /// assert!(VoteKey::pattern(&deep).unwrap_err().to_string().contains("nested deeper than 16"));
    /// ```
    pub fn pattern(pattern: &str) -> Result<Self, VoteKeyError> {
        refuse_costly(pattern)?;
        let regex = regex::RegexBuilder::new(pattern)
            .size_limit(VOTE_PATTERN_SIZE_LIMIT)
            .dfa_size_limit(VOTE_PATTERN_SIZE_LIMIT)
            .build()
            .map_err(|e| match e {
                regex::Error::CompiledTooBig(_) => VoteKeyError {
                    too_large: true,
                    message: format!(
                        "too large once compiled (over {} KiB): write a smaller expression",
                        VOTE_PATTERN_SIZE_LIMIT / 1024
                    ),
                },
                e => VoteKeyError {
                    too_large: false,
                    message: format!("not a valid regular expression: {e}"),
                },
            })?;
        Ok(VoteKey {
            pattern: Some(regex),
            normalize: false,
        })
    }

    /// Compares keys case-folded (Unicode lowercase), trimmed, without trailing punctuation
    /// (`Paris.`, `paris` and `PARIS!` are one key).
    ///
    /// ```
    /// use choicewise_core::{ChoiceOutput, Message, VoteKey};
    /// let key = VoteKey::content().normalize(true);
    /// assert_eq!(key.of(&ChoiceOutput::new(0, Message::assistant("¿Sí?"))), Some("¿sí".to_string()));
    /// ```
    pub fn normalize(mut self, normalize: bool) -> Self {
        self.normalize = normalize;
        self
    }

    /// The key `output` votes with, if it votes.
    ///
    /// ```
    /// use choicewise_core::{ChoiceOutput, Message, VoteKey};
    /// assert_eq!(VoteKey::content().of(&ChoiceOutput::new(0, Message::assistant("4"))), Some("4".into()));
    /// ```
    pub fn of(&self, output: &ChoiceOutput) -> Option<String> {
        let mut key = String::new();
        self.write(output, &mut key).then_some(key)
    }

    /// The key `output` votes with as the vote keeps it ([`shown_key`](crate::select::shown_key)
    /// of [`of`](Self::of)), made without the whole key: a call's canonical arguments are
    /// written into its hash as they are read.
    pub(crate) fn shown_of(&self, output: &ChoiceOutput) -> Option<String> {
        let mut key = super::selection::ShownKey::new();
        self.write(output, &mut key).then(|| key.finish())
    }

    /// Writes the key `output` votes with into `out`; whether it votes (when not, `out` may
    /// hold part of a key).
    fn write(&self, output: &ChoiceOutput, out: &mut impl fmt::Write) -> bool {
        match tool_call_key(output, out) {
            Calls::Key => return true,
            // A call the program could not run: no vote, whatever text came with it.
            Calls::Broken => return false,
            Calls::None => {}
        }
        let Some(content) = output.message.content.as_deref() else {
            return false;
        };
        let key = match &self.pattern {
            None => content.trim(),
            Some(re) => {
                let Some(caps) = re.captures(content) else {
                    return false;
                };
                match caps.get(1).or_else(|| caps.get(0)) {
                    Some(m) => m.as_str(),
                    None => return false,
                }
            }
        };
        let key: std::borrow::Cow<'_, str> = match self.normalize {
            true => normalized(key).into(),
            false => key.into(),
        };
        !key.is_empty() && out.write_str(&key).is_ok()
    }
}

/// What a choice's tool calls vote with.
enum Calls {
    /// It made no call.
    None,
    /// Some call's arguments are not JSON: it does not vote.
    Broken,
    /// Its calls' key, written.
    Key,
}

/// Writes the key of a choice that ended in tool calls (or the legacy function call): the
/// JSON array of `[name, arguments]` pairs in call order, arguments in canonical form (empty
/// arguments as `{}`); none when some call's arguments are not JSON. Written straight from
/// the arguments' text (`choicewise_proto::write_canonical_json`): no JSON tree is built, and
/// into a writer that need not keep it.
fn tool_call_key(output: &ChoiceOutput, key: &mut impl fmt::Write) -> Calls {
    let message = &output.message;
    // Each call, and whether its arguments are JSON (a function's) or free text (a custom
    // tool's input).
    let calls: Vec<(&choicewise_proto::FunctionCall, bool)> = match &message.function_call {
        Some(call) if message.tool_calls.is_empty() => vec![(call, true)],
        _ => (message.tool_calls.iter())
            .map(|c| (&c.function, c.kind != "custom"))
            .collect(),
    };
    if calls.is_empty() {
        return Calls::None;
    }
    let written = || -> Result<bool, fmt::Error> {
        key.write_char('[')?;
        for (i, (call, json)) in calls.into_iter().enumerate() {
            if i > 0 {
                key.write_char(',')?;
            }
            key.write_char('[')?;
            choicewise_proto::write_json_string(&call.name, key)?;
            key.write_char(',')?;
            match (json, call.arguments.trim()) {
                (true, "") => key.write_str("{}")?,
                (true, text) => {
                    if choicewise_proto::write_canonical_json(text, key).is_err() {
                        return Ok(false);
                    }
                }
                (false, text) => choicewise_proto::write_json_string(text, key)?,
            }
            key.write_char(']')?;
        }
        key.write_char(']')?;
        Ok(true)
    };
    match written() {
        Ok(true) => Calls::Key,
        _ => Calls::Broken,
    }
}

/// Refuses, before it is parsed, a pattern whose parsing could cost more than a few
/// milliseconds and megabytes: longer than [`VOTE_PATTERN_MAX_BYTES`], nested deeper than
/// [`VOTE_PATTERN_MAX_DEPTH`], or case-insensitive with more than
/// [`VOTE_PATTERN_MAX_FOLDED_CLASSES`] property classes and ranges. One pass over at most
/// the byte limit; it counts conservatively (a `(`, `[` or `-` that is a literal counts
/// too), so it may refuse a pattern that would have been cheap, never let a costly one
/// through.
fn refuse_costly(pattern: &str) -> Result<(), VoteKeyError> {
    let too_large = |message: String| VoteKeyError {
        too_large: true,
        message,
    };
    if pattern.len() > VOTE_PATTERN_MAX_BYTES {
        return Err(too_large(format!(
            "longer than {VOTE_PATTERN_MAX_BYTES} bytes ({} bytes): write a shorter expression",
            pattern.len()
        )));
    }
    let bytes = pattern.as_bytes();
    let (mut depth, mut deepest, mut classes) = (0usize, 0usize, 0usize);
    let mut folded = false;
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => {
                if matches!(bytes.get(i + 1), Some(b'p' | b'P')) {
                    classes += 1;
                }
                i += 2;
                continue;
            }
            b'(' => {
                depth += 1;
                // Flags: `(?i)`, `(?xi:...)`; an `i` after `-` turns it off, counted all the same.
                if bytes.get(i + 1) == Some(&b'?') {
                    let flags = bytes[i + 2..]
                        .iter()
                        .take_while(|b| b.is_ascii_alphabetic() || **b == b'-');
                    folded |= flags.into_iter().any(|b| *b == b'i');
                }
            }
            b'[' => depth += 1,
            b')' | b']' => depth = depth.saturating_sub(1),
            b'-' => classes += 1,
            _ => {}
        }
        deepest = deepest.max(depth);
        i += 1;
    }
    if deepest > VOTE_PATTERN_MAX_DEPTH {
        return Err(too_large(format!(
            "nested deeper than {VOTE_PATTERN_MAX_DEPTH} groups or classes: write a flatter expression"
        )));
    }
    if folded && classes > VOTE_PATTERN_MAX_FOLDED_CLASSES {
        return Err(too_large(format!(
            "case-insensitive with more than {VOTE_PATTERN_MAX_FOLDED_CLASSES} Unicode property classes or ranges: write fewer, or drop the i flag"
        )));
    }
    Ok(())
}

/// A key case-folded (Unicode lowercase), trimmed, without trailing punctuation.
fn normalized(key: &str) -> String {
    let folded = key.trim().to_lowercase();
    folded
        .trim_end_matches(|c: char| {
            c.is_ascii_punctuation() || "。、！？…»”’".contains(c) || c.is_whitespace()
        })
        .trim()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::normalized;

    #[test]
    fn normalized_keys_fold_case_trim_and_drop_trailing_punctuation() {
        for same in ["no", "No", " no. ", "NO!!", "no…", "Nö"] {
            let expected = if same == "Nö" { "nö" } else { "no" };
            assert_eq!(normalized(same), expected, "{same:?}");
        }
        // Inner punctuation stays: "3.5" is not "35".
        assert_eq!(normalized("3.5."), "3.5");
        assert_eq!(normalized("¿Sí?"), "¿sí");
    }

    #[test]
    fn tool_calls_key_by_name_and_canonical_arguments_in_order() {
        use super::VoteKey;
        use choicewise_proto::{ChoiceOutput, FunctionCall, Message, ToolCall};
        let with_calls = |text: &str, calls: &[(&str, &str)]| {
            let mut output = ChoiceOutput::new(0, Message::assistant(text));
            for (i, (name, args)) in calls.iter().enumerate() {
                (output.message.tool_calls).push(ToolCall::function(
                    format!("call_{i}"),
                    *name,
                    *args,
                ));
            }
            output
        };
        let key = VoteKey::pattern(r"Answer: (\d+)").unwrap().normalize(true);
        let a = with_calls(
            "",
            &[(
                "read",
                r#"{"path": "a.rs", "lines": [1, 2], "opt": {"z": 1, "a": null}}"#,
            )],
        );
        let b = with_calls(
            "I will read it.",
            &[(
                "read",
                r#"{"opt":{"a":null,"z":1},"lines":[1,2],"path":"a.rs"}"#,
            )],
        );
        assert_eq!(
            key.of(&a),
            key.of(&b),
            "spacing, key order and text do not matter"
        );
        assert_eq!(
            key.of(&a).unwrap(),
            r#"[["read",{"lines":[1,2],"opt":{"a":null,"z":1},"path":"a.rs"}]]"#
        );
        // Another argument, another function, or another order: another key.
        let other_args = with_calls("", &[("read", r#"{"path": "b.rs"}"#)]);
        assert_ne!(key.of(&a), key.of(&other_args));
        let two = with_calls("", &[("read", "{}"), ("write", r#"{"x":1}"#)]);
        let swapped = with_calls("", &[("write", r#"{"x":1}"#), ("read", "{}")]);
        assert_ne!(key.of(&two), key.of(&swapped));
        assert_eq!(key.of(&two).unwrap(), r#"[["read",{}],["write",{"x":1}]]"#);
        // A function's arguments that are not JSON give no vote, whatever text came with
        // them; none count as {}; a custom tool's input is its text.
        let text_args = with_calls("Answer: 42.", &[("shell", " ls -la ")]);
        assert_eq!(key.of(&text_args), None);
        let cut = with_calls(
            "",
            &[("read", "{}"), ("Bash", r#"{"command": "echo step1""#)],
        );
        assert_eq!(key.of(&cut), None, "one broken call: no vote");
        let mut custom = with_calls("", &[("apply_patch", " *** Begin Patch ")]);
        custom.message.tool_calls[0].kind = "custom".into();
        assert_eq!(
            key.of(&custom).unwrap(),
            r#"[["apply_patch","*** Begin Patch"]]"#
        );
        assert_eq!(
            key.of(&with_calls("", &[("now", "")])).unwrap(),
            r#"[["now",{}]]"#
        );
        // Case and strings are kept as sent: the normalisation is for text only.
        let upper = with_calls("", &[("read", r#"{"path": "A.rs"}"#)]);
        assert_ne!(
            key.of(&upper),
            key.of(&with_calls("", &[("read", r#"{"path": "a.rs"}"#)]))
        );
        // The legacy function call votes the same way.
        let mut legacy = ChoiceOutput::new(0, Message::assistant(""));
        legacy.message.function_call = Some(FunctionCall::new("read", r#"{ "path":"b.rs" }"#));
        assert_eq!(key.of(&legacy), key.of(&other_args));
        // Text without a call keys as before.
        assert_eq!(
            key.of(&with_calls("Answer: 42.", &[])).as_deref(),
            Some("42")
        );
    }

    #[test]
    fn the_kept_key_is_the_whole_key_shown_without_writing_it_whole() {
        use super::VoteKey;
        use crate::select::shown_key;
        use choicewise_proto::{ChoiceOutput, Message, ToolCall};
        let many: String = (0..5000)
            .map(|i| format!("\"k{}\":{i},", 5000 - i))
            .collect();
        let wide = format!("[{}0]", "0,".repeat(3000));
        let accents = "é".repeat(300);
        let cases: Vec<(&str, Vec<(&str, String)>)> = vec![
            ("  42 ", vec![]),
            ("", vec![]),
            (&accents, vec![]),
            ("", vec![("read", r#"{"b": 1, "a": 2}"#.into())]),
            ("", vec![("edit", format!("{{{many}\"k0\":0}}"))]),
            (
                "",
                vec![
                    ("edit", wide.clone()),
                    ("edit", format!("{{{many}\"é\":\"{}\"}}", "é".repeat(200))),
                ],
            ),
            ("", vec![("edit", format!("{{{many}"))]),
            ("", vec![("edit", "ü".repeat(400))]),
        ];
        for key in [
            VoteKey::content(),
            VoteKey::pattern(r"(\S+)").unwrap().normalize(true),
        ] {
            for (text, calls) in &cases {
                let mut output = ChoiceOutput::new(0, Message::assistant(*text));
                for (i, (name, args)) in calls.iter().enumerate() {
                    let mut call = ToolCall::function(format!("call_{i}"), *name, args.as_str());
                    if args.starts_with('ü') {
                        call.kind = "custom".into();
                    }
                    output.message.tool_calls.push(call);
                }
                let whole = key.of(&output);
                assert_eq!(
                    key.shown_of(&output),
                    whole.clone().map(shown_key),
                    "{text:.40} {calls:.80?}"
                );
            }
        }
        // Long keys cut alike stay apart when they differ past the cut.
        let call = |args: &str| {
            let mut output = ChoiceOutput::new(0, Message::assistant(""));
            output
                .message
                .tool_calls
                .push(ToolCall::function("c", "edit", args));
            VoteKey::content().shown_of(&output).unwrap()
        };
        let a = call(&format!("{{{many}\"z\":1}}"));
        assert!(a.len() < 400 && a.contains("sha256"), "{a}");
        assert_ne!(a, call(&format!("{{{many}\"z\":2}}")));
        assert_eq!(
            a,
            call(&format!("{{\"z\":1, {many}\"k0\":0}}").replace(",\"k0\":0", ""))
        );
    }

    #[test]
    fn costly_patterns_are_refused_before_they_are_parsed() {
        use super::*;
        let refused = |p: &str| VoteKey::pattern(p).unwrap_err();
        // What a vote key usually is passes.
        for fine in [
            r"Answer: (\w+)",
            r"(?i)answer:\s*\(?([A-D])\)?",
            r"\\boxed\{([^{}]*(?:\{[^{}]*\}[^{}]*)*)\}",
            r"####\s*(-?[\d,]+(?:\.\d+)?)",
        ] {
            assert!(VoteKey::pattern(fine).is_ok(), "{fine}");
        }
        // Longer than the limit: refused whatever it holds, \w's (each a table of ranges once
        // parsed) or nested repetitions.
        let words = "\\w".repeat(150_000);
        let e = refused(&words);
        assert!(
            e.too_large() && e.to_string().starts_with("longer than 1024 bytes"),
            "{e}"
        );
        let repeated = format!("(?:{})", "a?".repeat(510));
        assert!(repeated.len() <= VOTE_PATTERN_MAX_BYTES);
        assert!(VoteKey::pattern(&repeated).is_ok());
        assert!(refused(&format!("(?:{})", "a?".repeat(600))).too_large());
        // Nesting, counted over groups and classes alike; an escaped bracket is a literal.
        let deep = |n: usize| format!("{}a{}", "(".repeat(n), ")".repeat(n));
        assert!(VoteKey::pattern(&deep(16)).is_ok());
        let e = refused(&deep(17));
        assert!(
            e.too_large() && e.to_string().contains("nested deeper than 16"),
            "{e}"
        );
        assert!(refused(&format!("{}a{}", "[".repeat(17), "]".repeat(17))).too_large());
        assert!(VoteKey::pattern(&"\\(".repeat(40)).is_ok());
        // Case-insensitive: each class is case-folded range by range; wide ones cost
        // milliseconds each.
        let wide = r"[\x{0}-\x{10FFFF}]";
        assert!(
            VoteKey::pattern(&wide.repeat(20)).is_ok(),
            "without the i flag"
        );
        let e = refused(&format!("(?i){}", wide.repeat(5)));
        assert!(
            e.too_large() && e.to_string().contains("case-insensitive"),
            "{e}"
        );
        assert!(refused(&format!("(?i:{})", r"\p{Any}".repeat(5))).too_large());
        assert!(VoteKey::pattern(&format!("(?i){}", r"\p{Any}".repeat(4))).is_ok());
        // Perl classes fold cheaply: not counted.
        assert!(VoteKey::pattern(&format!("(?i){}", r"\w\d\s\W".repeat(2))).is_ok());
        // Not too large: an invalid expression.
        assert!(!refused("(").too_large());
    }
}
