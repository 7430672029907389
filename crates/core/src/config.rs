//! The options of a completion: how its streams are read ([`StreamConfig`]) and what the
//! runtime adds (timeouts, hibernation, estimates).

use std::time::Duration;

use choicewise_proto::StreamConfig;

/// How long the upstream stays quiet before the choice actors retire, unless told otherwise.
///
/// ```
/// use choicewise_core::defaults::DEFAULT_HIBERNATE_AFTER;
/// assert_eq!(DEFAULT_HIBERNATE_AFTER, std::time::Duration::from_millis(250));
/// ```
pub const DEFAULT_HIBERNATE_AFTER: Duration = Duration::from_millis(250);

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Config {
    pub stream: StreamConfig,
    pub idle_timeout: Option<Duration>,
    pub hibernate_after: Option<Duration>,
    pub model: Option<String>,
    pub estimate_usage: bool,
    /// Failed samples replaced, for samples made on demand.
    pub replace_failed: usize,
    #[cfg(feature = "fault-injection")]
    pub fault_hook: crate::fault::Hook,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            stream: StreamConfig::default(),
            idle_timeout: None,
            hibernate_after: Some(DEFAULT_HIBERNATE_AFTER),
            model: None,
            estimate_usage: cfg!(feature = "estimate"),
            replace_failed: 0,
            #[cfg(feature = "fault-injection")]
            fault_hook: crate::fault::Hook::default(),
        }
    }
}
