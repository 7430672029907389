//! Small statistics helpers: medians and percentiles of measurements.

/// The median of `v` (the mean of the two middle values for an even count); 0 if empty.
pub fn median(v: &[f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let m = s.len() / 2;
    if s.len() % 2 == 1 {
        s[m]
    } else {
        (s[m - 1] + s[m]) / 2.0
    }
}

/// The `p`-th percentile (0..=100) of already sorted values, nearest rank; 0 if empty.
pub fn percentile_sorted<T: Copy + Default>(sorted: &[T], p: f64) -> T {
    if sorted.is_empty() {
        return T::default();
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Each of `v` to three decimals, comma-separated (a run's rounds, as the reports list them).
pub fn listed(v: &[f64]) -> String {
    let texts: Vec<String> = v.iter().map(|x| format!("{x:.3}")).collect();
    texts.join(", ")
}

/// Minimum and maximum of `v`.
pub fn min_max(v: &[f64]) -> (f64, f64) {
    v.iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &x| {
            (lo.min(x), hi.max(x))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_are_listed_to_three_decimals() {
        assert_eq!(listed(&[1.0, 0.98765, -0.1]), "1.000, 0.988, -0.100");
        assert_eq!(listed(&[]), "");
    }

    #[test]
    fn medians_and_percentiles() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile_sorted(&v, 50.0), 50);
        assert_eq!(percentile_sorted(&v, 99.0), 99);
        assert_eq!(percentile_sorted(&v, 100.0), 100);
        assert_eq!(min_max(&[2.0, 5.0, 1.0]), (1.0, 5.0));
    }
}
