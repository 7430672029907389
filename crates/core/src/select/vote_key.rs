//! What a choice votes with: its trimmed content, or what a pattern captures in it, compared
//! as written or normalised. One rule for every vote a program states (the gateway's
//! `vote_by`, the CLI's `--vote-by` and `--vote-normalize`).

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

/// The key a finished choice votes with in [`Completions::vote`](crate::Completions::vote):
/// its content trimmed, or the first capture group of a pattern in it (the whole match when
/// the pattern has no group); with [`normalize`](Self::normalize), case-folded and without
/// trailing punctuation. A choice without content, without a match, or whose key is empty
/// does not vote.
///
/// ```
/// use choicewise_core::{ChoiceOutput, Message, VoteKey};
/// let answer = |text: &str| ChoiceOutput::new(0, Message::assistant(text));
/// let key = VoteKey::pattern(r"Answer: (\w+)").unwrap().normalize(true);
/// assert_eq!(key.of(&answer("So... Answer: Paris.")), Some("paris".to_string()));
/// assert_eq!(key.of(&answer("no idea")), None);
/// assert_eq!(VoteKey::content().of(&answer("  42 ")), Some("42".to_string()));
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
    /// Whether the pattern compiles to more than [`VOTE_PATTERN_SIZE_LIMIT`] (else it is not
    /// a valid regular expression).
    ///
    /// ```
    /// let huge = format!("({})", vec!["\\w{50}"; 400].join("|"));
    /// assert!(choicewise_core::VoteKey::pattern(&huge).unwrap_err().too_large());
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
    /// group). Refused when it is not a regular expression, or when it compiles to more than
    /// [`VOTE_PATTERN_SIZE_LIMIT`].
    ///
    /// ```
    /// use choicewise_core::{ChoiceOutput, Message, VoteKey};
    /// let key = VoteKey::pattern(r"\d+").unwrap();
    /// assert_eq!(key.of(&ChoiceOutput::new(0, Message::assistant("it is 221."))), Some("221".to_string()));
    /// ```
    pub fn pattern(pattern: &str) -> Result<Self, VoteKeyError> {
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
        let content = output.message.content.as_deref()?;
        let key = match &self.pattern {
            None => content.trim().to_string(),
            Some(re) => {
                let caps = re.captures(content)?;
                caps.get(1).or_else(|| caps.get(0))?.as_str().to_string()
            }
        };
        let key = match self.normalize {
            true => normalized(&key),
            false => key,
        };
        Some(key).filter(|k| !k.is_empty())
    }
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
}
