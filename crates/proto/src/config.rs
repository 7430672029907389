//! What every reader of a stream is configured with: its limits, its framing and its dialect.

use crate::{Dialect, LogprobsKept};

/// The largest SSE event accepted unless told otherwise (bytes of one event's data).
///
/// ```
/// assert_eq!(choicewise_proto::DEFAULT_MAX_EVENT_SIZE, 8 * 1024 * 1024);
/// ```
pub const DEFAULT_MAX_EVENT_SIZE: usize = choicewise_sse::DEFAULT_MAX_EVENT_SIZE;

/// The most choices one stream may have unless told otherwise.
///
/// ```
/// assert_eq!(choicewise_proto::DEFAULT_MAX_CHOICES, 128);
/// ```
pub const DEFAULT_MAX_CHOICES: usize = 128;

/// The most tool calls one choice may have unless told otherwise.
///
/// ```
/// assert_eq!(choicewise_proto::DEFAULT_MAX_TOOL_CALLS, 128);
/// ```
pub const DEFAULT_MAX_TOOL_CALLS: usize = 128;

/// How a stream is read: its limits, its framing and its dialect. The same for
/// [`Demux`](crate::Demux) and for the actors of `choicewise-core`.
///
/// ```
/// use choicewise_proto::{Demux, Dialect, StreamConfig};
/// let mut config = StreamConfig::default();
/// config.max_choices = 4;
/// config.dialect = Some(Dialect::Chat);
/// let demux = Demux::with_config(config);
/// # drop(demux);
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct StreamConfig {
    /// The largest SSE event, in bytes of data ([`DEFAULT_MAX_EVENT_SIZE`]).
    pub max_event_size: usize,
    /// The most choices ([`DEFAULT_MAX_CHOICES`]).
    pub max_choices: usize,
    /// The most tool calls per choice ([`DEFAULT_MAX_TOOL_CALLS`]).
    pub max_tool_calls: usize,
    /// The most bytes of raw updates (each choice's JSON element of a chunk's `choices`) one
    /// choice may take; past it that choice fails alone
    /// ([`ErrorDetail::ChoiceTooLarge`](crate::ErrorDetail::ChoiceTooLarge)) and its later
    /// updates are dropped unparsed. `None` (the default): no bound but the event size's.
    /// Updates of a typed dialect (Messages, Responses: one choice per stream) are not
    /// counted: bound their stream's bytes instead.
    pub max_choice_bytes: Option<usize>,
    /// WHATWG framing only, without the tolerance for events written without the blank line
    /// between them (`false` by default).
    pub strict_sse: bool,
    /// The stream's dialect (`None` by default: recognised from its first event).
    pub dialect: Option<Dialect>,
    /// What is kept of the log-probabilities the stream carries ([`LogprobsKept::Raw`] by
    /// default: their JSON text).
    pub logprobs: LogprobsKept,
    /// Message data that arrives for a choice after its finish is left out, reported as
    /// [`WarningKind::DataAfterFinishDropped`](crate::WarningKind::DataAfterFinishDropped),
    /// so that the message is what it was at the finish, as a stream relayed up to each
    /// choice's finish shows it (`false` by default: applied, reported as
    /// [`WarningKind::DataAfterFinish`](crate::WarningKind::DataAfterFinish)).
    pub drop_after_finish: bool,
    /// The names of the request's custom tools (`"type": "custom"`, free-text input) that
    /// an Anthropic upstream was sent as tools of one string property, `input`: their
    /// `tool_use` blocks are read back as custom tools' calls, the input their arguments
    /// (none by default).
    pub custom_tools: std::sync::Arc<[String]>,
    /// The most tokens of output one choice may take ([`TokenBound`]): past it the choice
    /// finishes there with `finish_reason: "length"`, its later updates are dropped, and
    /// its upstream is no longer read for it (an upstream that ignores the `max_tokens` it
    /// was sent). `None` (the default): no bound.
    pub max_choice_tokens: Option<TokenBound>,
}

/// A bound of tokens on each choice's output (content, refusal, reasoning and calls'
/// arguments), counted by `count`. An output is first counted by its bytes (a token is a
/// byte at least: an output shorter in bytes than the bound is never tokenized); past the
/// bound in bytes, by its tokens, each update's texts as they come, and the whole output
/// again before the choice is stopped, so that adding pieces' counts never stops a choice
/// under its bound. A choice is stopped at the update that passes the bound, which it keeps
/// whole. `count` must never count a text as more tokens than it has bytes.
///
/// ```
/// use choicewise_proto::TokenBound;
/// let words = |text: &str| text.split_whitespace().count() as u64;
/// let bound = TokenBound::new(4096, words);
/// assert_eq!((bound.max, (bound.count)("two words")), (4096, 2));
/// ```
#[derive(Clone, Copy)]
pub struct TokenBound {
    /// The most tokens.
    pub max: u64,
    /// The tokens of a text.
    pub count: fn(&str) -> u64,
}

impl TokenBound {
    /// At most `max` tokens, as `count` counts them.
    pub fn new(max: u64, count: fn(&str) -> u64) -> TokenBound {
        TokenBound { max, count }
    }
}

/// An output's count against a [`TokenBound`], as a choice grows: an upper bound of its
/// tokens so far, first its texts' bytes (a token is a byte at least: an output shorter in
/// bytes than the bound is never tokenized); once the bytes pass the bound, the whole output
/// counted, then each piece's tokens. The one count of the bound: a choice's own (its
/// lifecycle) and a relay's that passes a choice on unparsed.
///
/// ```
/// use choicewise_proto::{TokenBound, TokenCount};
/// let words = |text: &str| text.split_whitespace().count() as u64;
/// let mut count = TokenCount::new(TokenBound::new(3, words));
/// let mut output = String::new();
/// for piece in ["one two", " three", " four"] {
///     output.push_str(piece);
///     count.add(piece);
///     if count.passes(|| output.as_str()) {
///         break;
///     }
/// }
/// assert_eq!(output, "one two three four");
/// ```
#[derive(Debug, Clone, Copy)]
pub struct TokenCount {
    bound: TokenBound,
    /// At least the output's tokens.
    at_most: u64,
    /// `at_most` adds the pieces' tokens (not their bytes).
    counting: bool,
}

impl TokenCount {
    /// Nothing counted yet against `bound`.
    pub fn new(bound: TokenBound) -> TokenCount {
        TokenCount {
            bound,
            at_most: 0,
            counting: false,
        }
    }

    /// Adds one piece of the output.
    pub fn add(&mut self, piece: &str) {
        let more = match self.counting {
            true => (self.bound.count)(piece),
            false => piece.len() as u64,
        };
        self.at_most = self.at_most.saturating_add(more);
    }

    /// Whether the output, now `whole` (read only when the pieces' count passes the bound),
    /// passes the bound: past it by the pieces, the whole output is counted, so that adding
    /// pieces' counts never stops an output under its bound.
    pub fn passes<S: AsRef<str>>(&mut self, whole: impl FnOnce() -> S) -> bool {
        if self.at_most <= self.bound.max {
            return false;
        }
        self.at_most = (self.bound.count)(whole().as_ref());
        self.counting = true;
        self.at_most > self.bound.max
    }
}

impl std::fmt::Debug for TokenBound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenBound")
            .field("max", &self.max)
            .finish_non_exhaustive()
    }
}

impl PartialEq for TokenBound {
    /// By their bounds: counters are functions, never compared.
    fn eq(&self, other: &Self) -> bool {
        self.max == other.max
    }
}

impl Default for StreamConfig {
    fn default() -> Self {
        StreamConfig {
            max_event_size: DEFAULT_MAX_EVENT_SIZE,
            max_choices: DEFAULT_MAX_CHOICES,
            max_tool_calls: DEFAULT_MAX_TOOL_CALLS,
            max_choice_bytes: None,
            strict_sse: false,
            dialect: None,
            logprobs: LogprobsKept::Raw,
            drop_after_finish: false,
            custom_tools: std::sync::Arc::from([]),
            max_choice_tokens: None,
        }
    }
}
