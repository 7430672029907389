//! Limits and options of a completion stream.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

/// Default maximum size of one SSE event: 8 MiB.
///
/// ```
/// assert_eq!(choicewise_core::DEFAULT_MAX_EVENT_SIZE, 8 << 20);
/// ```
pub const DEFAULT_MAX_EVENT_SIZE: usize = choicewise_sse::DEFAULT_MAX_EVENT_SIZE;
/// Default maximum number of distinct choices in one stream (as openai-node): 128.
///
/// ```
/// # use choicewise_core::{Completions, DEFAULT_MAX_CHOICES};
/// let builder = Completions::builder().max_choices(2 * DEFAULT_MAX_CHOICES);
/// # drop(builder);
/// ```
pub const DEFAULT_MAX_CHOICES: usize = 128;
/// Default maximum number of tool calls in one choice (as openai-node): 128.
///
/// ```
/// assert_eq!(choicewise_core::DEFAULT_MAX_TOOL_CALLS, 128);
/// ```
pub const DEFAULT_MAX_TOOL_CALLS: usize = 128;

/// Default quiet time of the upstream after which the choice actors retire: 250 ms.
///
/// ```
/// assert_eq!(choicewise_core::DEFAULT_HIBERNATE_AFTER.as_millis(), 250);
/// ```
pub const DEFAULT_HIBERNATE_AFTER: Duration = Duration::from_millis(250);

/// The options of a completion stream; see [`CompletionsBuilder`](crate::CompletionsBuilder).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Config {
    pub max_event_size: usize,
    pub max_choices: usize,
    pub max_tool_calls: usize,
    pub idle_timeout: Option<Duration>,
    /// Quiet time of the upstream after which the choice actors retire (`None`: never).
    pub hibernate_after: Option<Duration>,
    /// The model, for choosing the encoding of usage estimates.
    pub model: Option<String>,
    /// The request body, for counting prompt tokens.
    pub request: Option<Arc<Value>>,
    /// Whether `collect()` estimates usage when the stream carried none.
    pub estimate_usage: bool,
    /// Strict WHATWG SSE framing instead of the tolerant mode.
    pub strict_sse: bool,
    /// The wire dialect (recognised from the stream by default).
    pub dialect: crate::wire::Dialect,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            max_event_size: DEFAULT_MAX_EVENT_SIZE,
            max_choices: DEFAULT_MAX_CHOICES,
            max_tool_calls: DEFAULT_MAX_TOOL_CALLS,
            idle_timeout: None,
            hibernate_after: Some(DEFAULT_HIBERNATE_AFTER),
            model: None,
            request: None,
            estimate_usage: true,
            strict_sse: false,
            dialect: crate::wire::Dialect::Detect,
        }
    }
}
