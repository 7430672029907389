//! One limit of one scope and the name of its counter ([`Rule`]), and the numbers the
//! process gives counters ([`Slots`]): read by the keys (their own limits and their tags')
//! and by the limits' reservations; it uses only the configuration.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::config::{RateLimit, RateLimits};

/// The prefix of every counter's name (a Redis key).
pub(crate) const PREFIX: &str = "choicewise:";

/// One limit of one scope, and the name of its counter.
#[derive(Debug, Clone)]
pub(crate) struct Rule {
    /// `choicewise:key:team-a:requests_per_minute`.
    pub counter: Arc<str>,
    /// The counter's number in the process ([`crate::quota`]'s in-process store keeps it
    /// there).
    pub slot: usize,
    pub limit: RateLimit,
    /// As a refusal names it: "key `team-a`".
    pub scope: Arc<str>,
    /// As the metrics name it: `key:team-a`.
    pub label: Arc<str>,
}

/// The numbers of the counters, one per counter name for the life of the process: a key's
/// counters keep their numbers (and so their counts) when the keys are read again, and a
/// request's counters are found in the process by number, without hashing a name. The
/// table grows by the counters of every key ever known to the process (a few dozen bytes
/// each).
#[derive(Debug, Default)]
pub(crate) struct Slots {
    numbers: Mutex<HashMap<Arc<str>, usize>>,
}

impl Slots {
    /// The rules of a scope's `limits` (`kind` `key`, `tag` or `model`, named `name`).
    pub(crate) fn rules(&self, kind: &str, name: &str, limits: &RateLimits) -> Vec<Rule> {
        let mut numbers = self.numbers.lock().unwrap_or_else(|p| p.into_inner());
        (limits.iter())
            .map(|limit| {
                let counter: Arc<str> =
                    Arc::from(format!("{PREFIX}{kind}:{name}:{}", limit.name()));
                let next = numbers.len();
                let slot = *numbers.entry(counter.clone()).or_insert(next);
                Rule {
                    counter,
                    slot,
                    limit: *limit,
                    scope: Arc::from(format!("{kind} `{name}`")),
                    label: Arc::from(format!("{kind}:{name}")),
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_counter_keeps_its_number_when_its_rules_are_made_again() {
        let config = crate::Config::from_toml(
            "[[models]]\nname = \"m\"\n[models.limits]\nrequests_per_minute = 2\ntokens_per_day = 9\n[[models.upstreams]]\napi = \"chat\"\nbase_url = \"http://127.0.0.1:9/v1\"",
        )
        .unwrap();
        let limits = &config.models[0].limits;
        let slots = Slots::default();
        let first = slots.rules("key", "a", limits);
        let other = slots.rules("key", "b", limits);
        let again = slots.rules("key", "a", limits);
        let numbers = |rules: &[Rule]| rules.iter().map(|r| r.slot).collect::<Vec<_>>();
        assert_eq!(numbers(&first), numbers(&again));
        assert_eq!(numbers(&first), [0, 1]);
        assert_eq!(numbers(&other), [2, 3]);
        assert_eq!(&*first[0].counter, "choicewise:key:a:requests_per_minute");
        assert_eq!(&*first[0].scope, "key `a`");
    }
}
