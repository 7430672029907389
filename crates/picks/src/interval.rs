//! How sure a measured accuracy is: a 95% interval by the bootstrap over items
//! ([`interval`]), and two picks compared over the same items ([`paired`]): the interval of
//! their difference, and how many items would tell them apart. The resampling is seeded, so
//! that a report on the same figures says the same.
//!
//! ```
//! use choicewise_picks::interval::{interval, paired};
//! // 30 items: one pick right on 24, another on the same 24 and 2 more.
//! let a: Vec<f64> = (0..30).map(|i| f64::from(u8::from(i < 24))).collect();
//! let b: Vec<f64> = (0..30).map(|i| f64::from(u8::from(i < 26))).collect();
//! let (low, high) = interval(&a).unwrap();
//! assert!(low < 0.8 && 0.8 < high);
//! let d = paired(&b, &a).unwrap();
//! assert!((d.difference - 2.0 / 30.0).abs() < 1e-12);
//! assert!(d.low >= 0.0, "b is never below a on any item");
//! ```

/// The level of every interval.
pub const LEVEL: f64 = 0.95;

/// Resamples of the items a bootstrap draws.
const RESAMPLES: usize = 2_000;

/// The normal quantile of a two-sided [`LEVEL`].
const Z: f64 = 1.959_963_984_540_054;

/// A seeded generator (splitmix64): the same draws for the same figures.
struct Draws(u64);

impl Draws {
    fn new() -> Draws {
        Draws(0x9E37_79B9_7F4A_7C15)
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// An index below `n`.
    fn below(&mut self, n: usize) -> usize {
        ((u128::from(self.next()) * n as u128) >> 64) as usize
    }
}

/// The percentile interval of the statistic `of` over [`RESAMPLES`] resamples of `n` items.
fn bootstrap(n: usize, mut of: impl FnMut(&[usize]) -> f64) -> (f64, f64) {
    let mut draws = Draws::new();
    let mut picked = vec![0usize; n];
    let mut values: Vec<f64> = (0..RESAMPLES)
        .map(|_| {
            picked.iter_mut().for_each(|p| *p = draws.below(n));
            of(&picked)
        })
        .collect();
    values.sort_by(f64::total_cmp);
    let at = |q: f64| values[((q * (RESAMPLES - 1) as f64).round() as usize).min(RESAMPLES - 1)];
    let tail = (1.0 - LEVEL) / 2.0;
    (at(tail), at(1.0 - tail))
}

/// The [`LEVEL`] interval of the mean of `scores` (each item's accuracy, from 0 to 1), by the
/// bootstrap over items; where each item is right or wrong (0 or 1), never narrower than the
/// Wilson score interval of that proportion: a pick right on all of 10 items is not sure to be right on every item (the
/// bootstrap alone says [1, 1] there; Wilson says [0.72, 1]). `None` without items.
pub fn interval(scores: &[f64]) -> Option<(f64, f64)> {
    if scores.is_empty() {
        return None;
    }
    let n = scores.len();
    let (low, high) = bootstrap(n, |picked| {
        picked.iter().map(|&i| scores[i]).sum::<f64>() / n as f64
    });
    // Right or wrong on each item: a proportion, whose Wilson interval is the floor.
    if !scores.iter().all(|&s| s == 0.0 || s == 1.0) {
        return Some((low, high));
    }
    let (wilson_low, wilson_high) = wilson(scores.iter().sum::<f64>() / n as f64, n);
    Some((low.min(wilson_low), high.max(wilson_high)))
}

/// The Wilson score interval at [`LEVEL`] of a proportion `p` over `n` items.
fn wilson(p: f64, n: usize) -> (f64, f64) {
    let (n, z2) = (n as f64, Z * Z);
    let center = (p + z2 / (2.0 * n)) / (1.0 + z2 / n);
    let half = Z * (p * (1.0 - p) / n + z2 / (4.0 * n * n)).sqrt() / (1.0 + z2 / n);
    ((center - half).max(0.0), (center + half).min(1.0))
}

/// Two picks compared over the same items ([`paired`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Paired {
    /// The mean of `a` less the mean of `b`.
    pub difference: f64,
    /// Its [`LEVEL`] interval, by the bootstrap over items (the same items for both).
    pub low: f64,
    /// See `low`.
    pub high: f64,
    /// About how many items would make the interval exclude 0 at this difference and
    /// spread (`None` when the difference is 0).
    pub items_needed: Option<u64>,
}

impl Paired {
    /// Whether the interval excludes 0: the two are told apart.
    pub fn apart(&self) -> bool {
        self.low > 0.0 || self.high < 0.0
    }
}

/// `a` against `b`, item by item (both in the same items' order): their difference, its
/// interval and the items that would tell them apart; `None` when their lengths differ or
/// there are no items.
pub fn paired(a: &[f64], b: &[f64]) -> Option<Paired> {
    if a.len() != b.len() || a.is_empty() {
        return None;
    }
    let n = a.len();
    let d: Vec<f64> = a.iter().zip(b).map(|(x, y)| x - y).collect();
    let mean = d.iter().sum::<f64>() / n as f64;
    let (low, high) = bootstrap(n, |picked| {
        picked.iter().map(|&i| d[i]).sum::<f64>() / n as f64
    });
    let var = d.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n.max(2) - 1) as f64;
    let items_needed = (mean.abs() > 1e-12).then(|| {
        let needed = (Z * var.sqrt() / mean.abs()).powi(2).ceil();
        (needed as u64).max(1)
    });
    Some(Paired {
        difference: mean,
        low,
        high,
        items_needed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thirty_items_cannot_tell_two_points_apart_and_four_hundred_can() {
        // b is right on 80% of the items, a on 78%, disagreeing on a tenth of them.
        let items = |n: usize| {
            let a: Vec<f64> = (0..n).map(|i| f64::from(u8::from(i % 50 < 39))).collect();
            let b: Vec<f64> = (0..n).map(|i| f64::from(u8::from(i % 50 < 40))).collect();
            (a, b)
        };
        let (a, b) = items(50);
        let small = paired(&b, &a).unwrap();
        assert!(!small.apart(), "{small:?}");
        let needed = small.items_needed.unwrap();
        assert!((100..=400).contains(&needed), "{needed}");
        let (a, b) = items(1000);
        assert!(paired(&b, &a).unwrap().apart());
        // The same figures, the same interval.
        assert_eq!(interval(&a), interval(&a));
        let (low, high) = interval(&a).unwrap();
        assert!(
            low < 0.78 && 0.78 < high && high - low < 0.06,
            "{low} {high}"
        );
        assert_eq!(interval(&[]), None);
        // Right on all of 10 items: not sure of every item.
        let (low, high) = interval(&[1.0; 10]).unwrap();
        assert!((low - 0.722).abs() < 0.001 && high == 1.0, "{low} {high}");
        assert_eq!(paired(&[1.0], &[]), None);
    }
}
