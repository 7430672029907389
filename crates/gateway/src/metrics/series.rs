//! A metric family's series, each found once by its labels: a request's counts look their
//! series up by borrowed labels, hashed with foldhash, without making the labels' strings
//! or hashing them with SipHash as the family's own map does (`Family::get_or_create`).
//!
//! The family stays the registry's, and the one place a series is made: a series is looked
//! up in the family the first time its labels come, and kept here beside it. Both hold the
//! same series (a counter or a histogram is a shared handle), so what is counted here is
//! what `/metrics` shows. The series are as many as the family's, whose labels are bounded
//! where they are made (a configured model, a known finish reason, a labelled key).

use std::hash::BuildHasher;
use std::sync::RwLock;

use hashbrown::HashTable;
use prometheus_client::metrics::family::{Family, MetricConstructor};

use super::labels::Labels;

/// A family and its series found so far (see the module's documentation).
pub(crate) struct Series<L, M, C = fn() -> M> {
    family: Family<L, M, C>,
    found: RwLock<HashTable<(L, M)>>,
    hasher: foldhash::fast::RandomState,
}

impl<L: Labels, M: Clone, C: MetricConstructor<M>> Series<L, M, C> {
    /// The series of `family`, which the registry holds.
    pub(crate) fn new(family: Family<L, M, C>) -> Self {
        Series {
            family,
            found: RwLock::default(),
            hasher: foldhash::fast::RandomState::default(),
        }
    }

    /// `f` applied to the series `key` names, made in the family the first time.
    pub(crate) fn with<R>(&self, key: L::Key<'_>, f: impl FnOnce(&M) -> R) -> R {
        let hash = self.hasher.hash_one(key);
        let found = self.found.read().unwrap_or_else(|p| p.into_inner());
        if let Some((_, metric)) = found.find(hash, |(labels, _)| labels.is(key)) {
            return f(metric);
        }
        drop(found);
        let labels = L::owned(key);
        let metric = self.family.get_or_create_owned(&labels);
        let mut found = self.found.write().unwrap_or_else(|p| p.into_inner());
        // Another thread may have kept it meanwhile: the family made it once either way.
        if found.find(hash, |(labels, _)| labels.is(key)).is_none() {
            let rehash = |(labels, _): &(L, M)| self.hasher.hash_one(labels.key());
            found.insert_unique(hash, (labels, metric.clone()), rehash);
        }
        drop(found);
        f(&metric)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::labels::KeyLabels;
    use prometheus_client::metrics::counter::Counter;

    #[test]
    fn a_series_counted_by_its_key_is_the_familys() {
        let family = Family::<KeyLabels, Counter>::default();
        let series = Series::new(family.clone());
        for (key, status, n) in [("a", 200, 3), ("b", 200, 1), ("a", 429, 2)] {
            for _ in 0..n {
                series.with((key, status), |c| c.inc());
            }
        }
        let count = |key: &str, status| {
            let labels = KeyLabels::owned((key, status));
            family.get(&labels).map(|c| c.get())
        };
        assert_eq!(count("a", 200), Some(3));
        assert_eq!(count("b", 200), Some(1));
        assert_eq!(count("a", 429), Some(2));
        assert_eq!(count("b", 429), None, "a series is made only when counted");
        assert_eq!(series.found.read().unwrap().len(), 3);
    }

    #[test]
    fn threads_that_meet_a_new_series_together_count_into_one() {
        let family = Family::<KeyLabels, Counter>::default();
        let series = std::sync::Arc::new(Series::new(family.clone()));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let series = series.clone();
                std::thread::spawn(move || {
                    for i in 0..1000u16 {
                        series.with(("m", i % 50), |c| c.inc());
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        let total: u64 = (0..50u16)
            .map(|status| family.get(&KeyLabels::owned(("m", status))).unwrap().get())
            .sum();
        assert_eq!(total, 4000);
        assert_eq!(series.found.read().unwrap().len(), 50);
    }
}
