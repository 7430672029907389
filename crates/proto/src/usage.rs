//! Token usage: the provider's figures when the stream carried them, otherwise an estimate
//! counted with tiktoken (see `choicewise-usage` and `docs/usage.md`).
//!
//! Counting runs on a blocking thread once the stream is over, never on the reader's path.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::event::{Warning, WarningKind};

/// Where a [`Usage`] comes from.
///
/// ```
/// use choicewise_proto::UsageSource;
/// assert_eq!(serde_json::to_value(UsageSource::Estimated).unwrap(), "estimated");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UsageSource {
    /// The provider's own figures, from the stream.
    Reported,
    /// Counted here with tiktoken, because the stream carried no usage.
    Estimated,
}

/// Token usage of a completion.
///
/// Serialised in the shape of OpenAI's `usage` object plus `"source"`; a reported usage keeps
/// every field the provider sent (such as `completion_tokens_details`) in [`Usage::details`].
///
/// ```
/// # use choicewise_proto::{ChoiceOutput, Message, Usage, UsageSource};
/// let choice = ChoiceOutput::new(0, Message::assistant("Hello!"));
/// let usage = Usage::estimate(Some("gpt-4o".to_string()), None, &[choice]);
/// assert_eq!(usage.source, UsageSource::Estimated);
/// assert_eq!(usage.completion_tokens, 2);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Usage {
    /// Tokens of the prompt (0 when estimated without the request).
    pub prompt_tokens: u64,
    /// Tokens of all choices' output.
    pub completion_tokens: u64,
    /// Their sum, or the provider's total.
    pub total_tokens: u64,
    /// Reported or estimated.
    pub source: UsageSource,
    /// How an estimate was made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimate: Option<Estimate>,
    /// In a fan-out (`Completions::builder().fan_out`), each upstream's
    /// own usage in the order they were added, each reported or estimated; the figures above
    /// are their sums. Empty for a single stream.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub upstreams: Vec<Usage>,
    /// The provider's other usage fields, unchanged.
    #[serde(flatten)]
    pub details: Map<String, Value>,
}

/// How an estimated [`Usage`] was counted.
///
/// ```
/// # use choicewise_proto::{ChoiceOutput, Message, Usage};
/// let choice = ChoiceOutput::new(0, Message::assistant("Hi"));
/// let usage = Usage::estimate(Some("my-local-model".to_string()), None, &[choice]);
/// let estimate = usage.estimate.unwrap();
/// assert_eq!(estimate.encoding, "o200k_base");
/// assert!(!estimate.model_known); // unknown model: the default encoding, said so
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Estimate {
    /// The BPE encoding used.
    pub encoding: String,
    /// The model the encoding was chosen for (from the builder, the request, or the stream).
    pub model: Option<String>,
    /// Whether that model is known; if not, the default encoding was used.
    pub model_known: bool,
    /// Whether the prompt was counted (the request body was given and could be read).
    pub prompt_counted: bool,
    /// Why the prompt could not be counted, if it was given but unreadable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_error: Option<String>,
    /// Each choice's estimated completion tokens, by index.
    pub choices: BTreeMap<u32, u64>,
}

/// One choice's completion tokens, as the provider reported them or as counted here.
///
/// On [`ChoiceOutput::usage`](crate::ChoiceOutput::usage) (filled by
/// `Completions::collect`) and from
/// `Choice::usage`. Reported when the stream carried that
/// choice's own figure (llama.cpp's usage-only chunk per choice, vLLM's running per-choice
/// counts, or the one usage of a one-choice completion); otherwise estimated with tiktoken.
///
/// ```
/// use choicewise_proto::{ChoiceUsage, UsageSource};
/// let u = ChoiceUsage::new(12, UsageSource::Reported);
/// assert_eq!(serde_json::to_value(u).unwrap(),
///            serde_json::json!({"completion_tokens": 12, "source": "reported"}));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ChoiceUsage {
    /// The choice's completion tokens.
    pub completion_tokens: u64,
    /// Reported by the provider, or estimated.
    pub source: UsageSource,
}

impl ChoiceUsage {
    /// A choice's completion tokens, reported or estimated.
    ///
    /// ```
    /// use choicewise_proto::{ChoiceUsage, UsageSource};
    /// assert_eq!(ChoiceUsage::new(3, UsageSource::Estimated).completion_tokens, 3);
    /// ```
    pub fn new(completion_tokens: u64, source: UsageSource) -> Self {
        ChoiceUsage {
            completion_tokens,
            source,
        }
    }
}

/// A usage-only chunk (`choices: []`) and the choice it was attributed to, if any.
#[derive(Debug, Clone)]
pub(crate) struct UsageOnly {
    pub usage: Value,
    /// The one finished choice that had no usage yet when the chunk arrived (llama.cpp sends
    /// a choice's usage right after its finish); `None` when there were none or several.
    pub choice: Option<u32>,
}

/// The usage objects the stream carried, as the router gathered them.
///
/// Usage-only chunks (`choices: []`) are told apart so:
///
/// - **one** in the stream: the total, as sent (OpenAI's final chunk; llama.cpp with n = 1);
/// - **several, each attributable to its own choice** (each arrived when exactly one finished
///   choice had no usage yet) **and all with the same `prompt_tokens`**: one per choice, as
///   llama.cpp sends them; the total is the prompt once plus the sum of their completion tokens;
/// - **several otherwise** (a chunk with no or several candidate choices, or differing prompts):
///   ambiguous. Nothing is added up: the one with the most completion tokens is the total, and a
///   [`WarningKind::UsageAmbiguous`] says so.
#[derive(Debug, Clone, Default)]
pub struct ReportedUsage {
    /// The usage-only chunks, in arrival order.
    pub(crate) usage_only: Vec<UsageOnly>,
    /// The last usage seen on a chunk carrying exactly one choice, by choice: vLLM's running
    /// per-choice counts.
    pub(crate) running: BTreeMap<u32, Value>,
    /// The last usage seen on a chunk carrying several choices.
    pub(crate) last_shared: Option<Value>,
    /// The ambiguity warning was given.
    warned: bool,
}

/// The most tokens one reported figure counts for: 2^32. A provider's usage above it is
/// clamped to it, so that sums over many answers (a gateway's counters, a client's totals)
/// cannot wrap.
///
/// ```
/// use choicewise_proto::MAX_REPORTED_TOKENS;
/// assert_eq!(MAX_REPORTED_TOKENS, 1 << 32);
/// ```
pub const MAX_REPORTED_TOKENS: u64 = 1 << 32;

/// A reported figure, clamped to [`MAX_REPORTED_TOKENS`]; 0 when absent or not a count.
fn number(v: &Value, key: &str) -> u64 {
    v.get(key)
        .and_then(Value::as_u64)
        .unwrap_or(0)
        .min(MAX_REPORTED_TOKENS)
}

impl ReportedUsage {
    /// Records the usage of a chunk whose choices had these `indexes` (`None`: an element
    /// without one): of none, a usage-only chunk (see
    /// [`record_usage_only`](Self::record_usage_only)); of one, that choice's running count
    /// (vLLM's; one not a choice's number is left out); of several, a total they share.
    /// `finished` lists the choices finished so far; a warning is returned the first time
    /// the usage-only chunks stop being one per choice.
    ///
    /// ```
    /// use choicewise_proto::chunks::ReportedUsage;
    /// use serde_json::json;
    /// // llama.cpp with n = 2: a usage-only chunk after each choice's finish.
    /// let mut reported = ReportedUsage::default();
    /// let usage = |c| json!({"prompt_tokens": 7, "completion_tokens": c});
    /// reported.record(usage(3), [], [1], 4);
    /// reported.record(usage(5), [], [1, 0], 6);
    /// assert_eq!(reported.usage().unwrap().completion_tokens, 8);
    /// assert_eq!(reported.per_choice().into_iter().collect::<Vec<_>>(), [(0, 5), (1, 3)]);
    /// ```
    pub fn record(
        &mut self,
        usage: Value,
        indexes: impl IntoIterator<Item = Option<i64>>,
        finished: impl IntoIterator<Item = u32>,
        line: u64,
    ) -> Option<Warning> {
        let mut indexes = indexes.into_iter();
        match (indexes.next(), indexes.next()) {
            (None, _) => return self.record_usage_only(usage, finished, line),
            (Some(one), None) => {
                if let Ok(index) = u32::try_from(one.unwrap_or(0)) {
                    self.running.insert(index, usage);
                }
            }
            _ => self.last_shared = Some(usage),
        }
        None
    }

    /// Records a usage-only chunk. `finished` lists the choices finished so far; a warning is
    /// returned the first time the usage-only chunks stop being one per choice.
    pub fn record_usage_only(
        &mut self,
        usage: Value,
        finished: impl IntoIterator<Item = u32>,
        line: u64,
    ) -> Option<Warning> {
        let mut candidates = finished
            .into_iter()
            .filter(|c| !self.usage_only.iter().any(|u| u.choice == Some(*c)));
        let choice = match (candidates.next(), candidates.next()) {
            (Some(one), None) => Some(one),
            _ => None,
        };
        self.usage_only.push(UsageOnly { usage, choice });
        if self.usage_only.len() < 2 || self.per_choice_chunks() || self.warned {
            return None;
        }
        self.warned = true;
        Some(Warning {
            choice: None,
            line,
            kind: WarningKind::UsageAmbiguous {
                chunks: self.usage_only.len(),
            },
        })
    }

    /// Whether the usage-only chunks are several, one per choice, about the same prompt.
    fn per_choice_chunks(&self) -> bool {
        let prompt = self
            .usage_only
            .first()
            .map(|u| number(&u.usage, "prompt_tokens"));
        self.usage_only.len() >= 2
            && self
                .usage_only
                .iter()
                .all(|u| u.choice.is_some() && Some(number(&u.usage, "prompt_tokens")) == prompt)
    }

    /// The reported usage, if any (see the type's documentation for usage-only chunks).
    /// Without any: when every running count belongs to one choice, the last count of each
    /// choice (the prompt once, the completions summed across choices, never across one
    /// choice's cumulative counts); else the last.
    pub fn usage(&self) -> Option<Usage> {
        match &self.usage_only[..] {
            [] => {}
            [one] => return Some(Usage::reported(&one.usage)),
            several if self.per_choice_chunks() => {
                return Some(Usage::summed(several.iter().map(|u| &u.usage)));
            }
            several => {
                let largest = several
                    .iter()
                    .max_by_key(|u| number(&u.usage, "completion_tokens"))?;
                return Some(Usage::reported(&largest.usage));
            }
        }
        match (self.running.len(), &self.last_shared) {
            (0, None) => None,
            (0, Some(last)) => Some(Usage::reported(last)),
            (1, _) => self.running.values().next().map(Usage::reported),
            _ => {
                let prompt = self
                    .running
                    .values()
                    .map(|v| number(v, "prompt_tokens"))
                    .max()
                    .unwrap_or(0);
                let completion = (self.running.values())
                    .map(|v| number(v, "completion_tokens"))
                    .fold(0u64, u64::saturating_add);
                Some(Usage {
                    prompt_tokens: prompt,
                    completion_tokens: completion,
                    total_tokens: prompt.saturating_add(completion),
                    source: UsageSource::Reported,
                    estimate: None,
                    upstreams: Vec::new(),
                    details: Map::new(),
                })
            }
        }
    }

    /// The completion tokens the provider reported for individual choices, by index: the
    /// usage-only chunks when they are one per choice (or the one chunk, when it was
    /// attributable to a choice), else vLLM's running counts. A total shared by several
    /// choices is no choice's figure.
    pub fn per_choice(&self) -> BTreeMap<u32, u64> {
        let of = |v: &Value| number(v, "completion_tokens");
        match &self.usage_only[..] {
            [] => self.running.iter().map(|(&c, v)| (c, of(v))).collect(),
            [one] => one
                .choice
                .map(|c| (c, of(&one.usage)))
                .into_iter()
                .collect(),
            several if self.per_choice_chunks() => several
                .iter()
                .filter_map(|u| Some((u.choice?, of(&u.usage))))
                .collect(),
            _ => BTreeMap::new(),
        }
    }
}

impl Usage {
    /// Per-choice usage objects of one request: the prompt (and its details) once, the
    /// completion tokens (and their numeric details) summed.
    fn summed<'a>(parts: impl Iterator<Item = &'a Value>) -> Usage {
        let mut total: Option<Usage> = None;
        for part in parts {
            let u = Usage::reported(part);
            let Some(t) = &mut total else {
                total = Some(u);
                continue;
            };
            t.completion_tokens = t.completion_tokens.saturating_add(u.completion_tokens);
            if let (Some(Value::Object(sum)), Some(Value::Object(add))) = (
                t.details.get_mut("completion_tokens_details"),
                u.details.get("completion_tokens_details"),
            ) {
                for (key, value) in add {
                    if let (Some(a), Some(b)) =
                        (sum.get(key).and_then(Value::as_u64), value.as_u64())
                    {
                        sum.insert(key.clone(), Value::from(a.saturating_add(b)));
                    }
                }
            }
        }
        let mut total = total.unwrap_or_else(|| Usage::reported(&Value::Null));
        total.total_tokens = total.prompt_tokens.saturating_add(total.completion_tokens);
        total
    }

    fn reported(raw: &Value) -> Usage {
        let mut details = raw.as_object().cloned().unwrap_or_default();
        for key in [
            "prompt_tokens",
            "completion_tokens",
            "total_tokens",
            "source",
            "estimate",
        ] {
            details.remove(key);
        }
        let prompt = number(raw, "prompt_tokens");
        let completion = number(raw, "completion_tokens");
        Usage {
            prompt_tokens: prompt,
            completion_tokens: completion,
            total_tokens: match raw.get("total_tokens").and_then(Value::as_u64) {
                Some(total) => total.min(MAX_REPORTED_TOKENS),
                None => prompt.saturating_add(completion),
            },
            source: UsageSource::Reported,
            estimate: None,
            upstreams: Vec::new(),
            details,
        }
    }

    /// The sum of several requests' usages (each request's prompt counted once): reported
    /// if every part was, else estimated, with the estimates' per-choice counts merged.
    #[doc(hidden)]
    pub fn sum(parts: Vec<Usage>) -> Usage {
        let mut total = Usage {
            prompt_tokens: 0,
            completion_tokens: 0,
            total_tokens: 0,
            source: UsageSource::Reported,
            estimate: None,
            upstreams: Vec::new(),
            details: Map::new(),
        };
        for part in &parts {
            total.prompt_tokens = total.prompt_tokens.saturating_add(part.prompt_tokens);
            total.completion_tokens =
                (total.completion_tokens).saturating_add(part.completion_tokens);
            total.total_tokens = total.total_tokens.saturating_add(part.total_tokens);
            if part.source == UsageSource::Estimated {
                total.source = UsageSource::Estimated;
            }
            if let Some(e) = &part.estimate {
                match &mut total.estimate {
                    None => total.estimate = Some(e.clone()),
                    Some(t) => t.choices.extend(e.choices.iter().map(|(k, v)| (*k, *v))),
                }
            }
        }
        total.upstreams = parts;
        total
    }

    /// An estimate whose counting failed (a panic in the tokenizer): zeros, saying why.
    #[doc(hidden)]
    pub fn failed_estimate(why: String) -> Usage {
        Usage {
            prompt_tokens: 0,
            completion_tokens: 0,
            total_tokens: 0,
            source: UsageSource::Estimated,
            estimate: Some(Estimate {
                encoding: String::new(),
                model: None,
                model_known: false,
                prompt_counted: false,
                prompt_error: Some(format!("counting failed: {why}")),
                choices: BTreeMap::new(),
            }),
            upstreams: Vec::new(),
            details: Map::new(),
        }
    }
}
