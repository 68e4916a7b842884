//! Pure statistics for the benchmark: medians, ratios and their formatting.

/// The median of `values` (the mean of the two middle values for an even count); `None` when empty
/// or when a value is NaN.
pub fn median(values: &[f64]) -> Option<f64> {
    if values.is_empty() || values.iter().any(|v| v.is_nan()) {
        return None;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(|a, b| a.total_cmp(b));
    let mid = sorted.len() / 2;
    Some(if sorted.len() % 2 == 1 {
        sorted[mid]
    } else {
        (sorted[mid - 1] + sorted[mid]) / 2.0
    })
}

/// `a / b`, or `None` when `b` is zero (or either is not finite).
pub fn ratio(a: f64, b: f64) -> Option<f64> {
    (b != 0.0 && a.is_finite() && b.is_finite()).then(|| a / b)
}

/// Ratios of paired measurements (`with[i] / without[i]`): the A/B pairs of an alternating run.
pub fn pair_ratios(with: &[f64], without: &[f64]) -> Vec<f64> {
    with.iter()
        .zip(without)
        .filter_map(|(&w, &wo)| ratio(w, wo))
        .collect()
}

/// The smallest and largest value.
pub fn min_max(values: &[f64]) -> Option<(f64, f64)> {
    let mut it = values.iter().copied().filter(|v| !v.is_nan());
    let first = it.next()?;
    Some(it.fold((first, first), |(lo, hi), v| (lo.min(v), hi.max(v))))
}

/// Relative error of `measured` against the reference `truth` (0.01 = 1 % too high).
pub fn relative_error(measured: f64, truth: f64) -> Option<f64> {
    ratio(measured - truth, truth)
}

/// Marginal cost: what `loaded` cost more than `idle`, per unit of work it did more.
/// `None` when the loaded run did no more work.
pub fn marginal(loaded_cost: f64, idle_cost: f64, loaded_work: f64, idle_work: f64) -> Option<f64> {
    let work = loaded_work - idle_work;
    (work > 0.0).then(|| (loaded_cost - idle_cost) / work)
}

/// A number with `digits` significant digits, without an exponent for everyday magnitudes
/// (1234.6 -> "1235", 0.012345 -> "0.0123").
pub fn sig(value: f64, digits: usize) -> String {
    if !value.is_finite() {
        return "n/a".to_string();
    }
    if value == 0.0 {
        return "0".to_string();
    }
    let magnitude = value.abs().log10().floor() as i32;
    let decimals = (digits as i32 - 1 - magnitude).max(0) as usize;
    format!("{value:.decimals$}")
}

/// A ratio as `1.023×`.
pub fn times(value: f64) -> String {
    format!("{value:.3}×")
}

/// A share as a percentage with two decimals: 0.12345 -> "12.35 %".
pub fn percent(share: f64) -> String {
    format!("{:.2} %", share * 100.0)
}

/// A relative error as a signed percentage: -0.0123 -> "-1.23 %".
pub fn signed_percent(share: f64) -> String {
    format!("{:+.2} %", share * 100.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(&[7.0]), Some(7.0));
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[1.0, f64::NAN]), None);
    }

    #[test]
    fn ratios_skip_zero_denominators() {
        assert_eq!(ratio(3.0, 2.0), Some(1.5));
        assert_eq!(ratio(3.0, 0.0), None);
        assert_eq!(
            pair_ratios(&[2.0, 3.0, 4.0], &[1.0, 0.0, 2.0]),
            vec![2.0, 2.0]
        );
        assert_eq!(
            median(&pair_ratios(&[1.1, 1.0, 1.3], &[1.0, 1.0, 1.0])),
            Some(1.1)
        );
    }

    #[test]
    fn pairs_stop_at_the_shorter_side() {
        assert_eq!(pair_ratios(&[2.0, 4.0, 8.0], &[1.0, 2.0]), vec![2.0, 2.0]);
    }

    #[test]
    fn min_max_and_relative_error() {
        assert_eq!(min_max(&[2.0, -1.0, 5.0]), Some((-1.0, 5.0)));
        assert_eq!(min_max(&[]), None);
        assert_eq!(relative_error(101.0, 100.0), Some(0.01));
        assert_eq!(relative_error(1.0, 0.0), None);
    }

    #[test]
    fn marginal_cost_per_unit_of_extra_work() {
        assert_eq!(marginal(3.0, 1.0, 1000.0, 0.0), Some(0.002));
        assert_eq!(marginal(3.0, 1.0, 10.0, 10.0), None);
    }

    #[test]
    fn formatting() {
        assert_eq!(sig(1234.6, 3), "1235");
        assert_eq!(sig(0.012345, 3), "0.0123");
        assert_eq!(sig(1.5, 3), "1.50");
        assert_eq!(sig(0.0, 3), "0");
        assert_eq!(sig(f64::NAN, 3), "n/a");
        assert_eq!(times(1.02345), "1.023×");
        assert_eq!(percent(0.12345), "12.35 %");
        assert_eq!(signed_percent(-0.0123), "-1.23 %");
        assert_eq!(signed_percent(0.5), "+50.00 %");
    }
}
