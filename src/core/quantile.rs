//! Quantiles by selection, shared by the kernel summaries and the slow-rank levels.

/// Type-7 quantile (linear interpolation between order statistics, the convention of R's
/// default and numpy's), found by selection in O(n) expected time rather than a sort,
/// because it runs per (kernel, stream) every window. Reorders `xs`; `xs` must be
/// non-empty and `q` in `[0, 1]`.
pub(crate) fn select_quantile(xs: &mut [f64], q: f64) -> f64 {
    let h = (xs.len() - 1) as f64 * q;
    let lo = h.floor() as usize;
    let (_, a, right) = xs.select_nth_unstable_by(lo, f64::total_cmp);
    let a = *a;
    // The next order statistic is the smallest of what selection put to the right.
    let b = right.iter().copied().fold(f64::INFINITY, f64::min);
    if b.is_finite() {
        a + (h - lo as f64) * (b - a)
    } else {
        a
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_sorted_interpolation() {
        let mut xs = vec![5.0, 1.0, 4.0, 2.0, 3.0];
        assert_eq!(select_quantile(&mut xs, 0.5), 3.0);
        assert_eq!(select_quantile(&mut xs, 0.0), 1.0);
        assert_eq!(select_quantile(&mut xs, 1.0), 5.0);
        assert_eq!(select_quantile(&mut xs, 0.25), 2.0);
        assert!((select_quantile(&mut xs, 0.99) - 4.96).abs() < 1e-12);
        assert_eq!(select_quantile(&mut [2.0], 0.3), 2.0);
        assert_eq!(select_quantile(&mut [1.0, 2.0], 0.5), 1.5);
    }
}
