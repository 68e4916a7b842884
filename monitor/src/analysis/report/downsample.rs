//! Fewer points for long series, keeping their peaks.
//!
//! The rule ("min/max per bucket"): a series of more than `2 × buckets` points is cut into
//! `buckets` equal spans of time; in each span only the lowest and the highest point are kept,
//! in time order, plus the series' first and last points. A plot is about 1,000 pixels wide, so
//! 500 buckets draw the same picture as every point would, and no peak or dip is smoothed away
//! (an average would halve a one-sample spike). It is the idea of M4 (Jugel et al., VLDB 2014)
//! without the per-bucket first/last points, which a line plot this wide does not need.

/// Buckets per plot: two points per bucket, about one per pixel of a 1,000-pixel plot.
pub const BUCKETS: usize = 500;

/// The indices of the points to keep (see the module's rule), increasing. `xs` must be sorted.
pub fn min_max_indices(xs: &[f64], ys: &[f64], buckets: usize) -> Vec<usize> {
    let n = xs.len().min(ys.len());
    if n <= 2 * buckets.max(1) {
        return (0..n).collect();
    }
    let (x0, x1) = (xs[0], xs[n - 1]);
    let span = x1 - x0;
    if span <= 0.0 || !span.is_finite() {
        // All points at one moment: their extremes are all that can be seen.
        return extremes(ys, 0, n);
    }
    let mut keep = Vec::with_capacity(2 * buckets + 2);
    keep.push(0);
    let bucket_of = |x: f64| (((x - x0) / span * buckets as f64) as usize).min(buckets - 1);
    let mut start = 1;
    while start < n - 1 {
        let bucket = bucket_of(xs[start]);
        let mut end = start + 1;
        while end < n - 1 && bucket_of(xs[end]) == bucket {
            end += 1;
        }
        keep.extend(extremes(ys, start, end));
        start = end;
    }
    keep.push(n - 1);
    keep.dedup();
    keep
}

/// The index of the lowest and of the highest `ys` in `start..end`, in index order (one index
/// when they are the same point).
fn extremes(ys: &[f64], start: usize, end: usize) -> Vec<usize> {
    let (mut lo, mut hi) = (start, start);
    for i in start..end {
        if ys[i] < ys[lo] {
            lo = i;
        }
        if ys[i] > ys[hi] {
            hi = i;
        }
    }
    match lo.cmp(&hi) {
        std::cmp::Ordering::Less => vec![lo, hi],
        std::cmp::Ordering::Greater => vec![hi, lo],
        std::cmp::Ordering::Equal => vec![lo],
    }
}

/// The points of a series, downsampled by [`min_max_indices`].
pub fn min_max(points: &[(f64, f64)], buckets: usize) -> Vec<(f64, f64)> {
    if points.len() <= 2 * buckets.max(1) {
        return points.to_vec();
    }
    let xs: Vec<f64> = points.iter().map(|p| p.0).collect();
    let ys: Vec<f64> = points.iter().map(|p| p.1).collect();
    min_max_indices(&xs, &ys, buckets)
        .into_iter()
        .map(|i| points[i])
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_series_are_kept_whole() {
        let points: Vec<(f64, f64)> = (0..10).map(|i| (i as f64, i as f64)).collect();
        assert_eq!(min_max(&points, 5), points);
    }

    #[test]
    fn keeps_every_peak_and_dip_and_the_ends() {
        // 10,000 points of a gentle wave with one single-sample spike and one dip.
        let mut points: Vec<(f64, f64)> = (0..10_000)
            .map(|i| (i as f64 * 0.2, 100.0 + (i as f64 / 300.0).sin()))
            .collect();
        points[4321].1 = 5_000.0;
        points[777].1 = -40.0;
        let kept = min_max(&points, 100);
        assert!(kept.len() <= 2 * 100 + 2, "{}", kept.len());
        assert!(kept.contains(&points[4321]));
        assert!(kept.contains(&points[777]));
        assert_eq!(kept.first(), points.first());
        assert_eq!(kept.last(), points.last());
        // In time order, and the same extremes as the whole series.
        assert!(kept.windows(2).all(|w| w[0].0 < w[1].0));
        let max = |p: &[(f64, f64)]| p.iter().map(|p| p.1).fold(f64::MIN, f64::max);
        let min = |p: &[(f64, f64)]| p.iter().map(|p| p.1).fold(f64::MAX, f64::min);
        assert_eq!(max(&kept), max(&points));
        assert_eq!(min(&kept), min(&points));
    }

    #[test]
    fn every_bucket_keeps_its_own_extremes() {
        // Buckets of 10 points: 0..9 rising, so each keeps its first and last point.
        let points: Vec<(f64, f64)> = (0..100).map(|i| (i as f64, (i % 10) as f64)).collect();
        let kept = min_max(&points, 10);
        let lows = kept.iter().filter(|p| p.1 == 0.0).count();
        let highs = kept.iter().filter(|p| p.1 == 9.0).count();
        assert_eq!((lows, highs), (10, 10), "{kept:?}");
    }

    #[test]
    fn points_at_one_moment() {
        let points = vec![(1.0, 3.0), (1.0, 9.0), (1.0, 1.0), (1.0, 4.0), (1.0, 2.0)];
        assert_eq!(min_max(&points, 1), vec![(1.0, 9.0), (1.0, 1.0)]);
    }
}
