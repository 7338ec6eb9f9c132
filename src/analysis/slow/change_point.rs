//! L1 regression: the single most significant step up in one rank's iteration times
//! (ARGUS App. B, "full-scan change-point detection").
//!
//! Every split `t` leaving at least `min_segment` points on each side is scored by the
//! regression ratio `μ_R / μ_L` of the segment means. A split is valid when that ratio is at
//! least `min_ratio` (the step matters in practice) and both relative standard deviations
//! `σ_L/μ_L`, `σ_R/μ_R` are at most `max_cv` (both sides are internally stable, so a spike is
//! not mistaken for a step). The valid split with the largest ratio wins; at the true step
//! the ratio peaks, since moving the split either way mixes the other level into a side.
//!
//! Prefix sums of the values and their squares, centred on the series mean to keep the
//! variance free of cancellation, make the scan O(n). σ is the population deviation of a
//! segment (divide by its length): the segments are the whole data, not samples of it.

#[derive(Clone, Debug, PartialEq)]
pub struct ChangePointParams {
    /// Fewest iterations on each side. Default 10, so a side's mean and CV mean something.
    pub min_segment: usize,
    /// Smallest `μ_R / μ_L` reported. Default 1.05: a 5% slower iteration is worth a look.
    pub min_ratio: f64,
    /// Largest `σ/μ` on either side. Default 0.1; iteration noise is usually 1-3%.
    pub max_cv: f64,
}

impl Default for ChangePointParams {
    fn default() -> Self {
        Self { min_segment: 10, min_ratio: 1.05, max_cv: 0.1 }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct ChangePoint {
    /// First index of the slower segment.
    pub at: usize,
    pub mean_before: f64,
    pub mean_after: f64,
    /// `mean_after / mean_before`.
    pub ratio: f64,
    pub cv_before: f64,
    pub cv_after: f64,
}

/// The valid split with the largest regression ratio, if any.
pub fn regression(times: &[f64], params: &ChangePointParams) -> Option<ChangePoint> {
    let n = times.len();
    let m = params.min_segment.max(2);
    if n < 2 * m {
        return None;
    }
    let centre = times.iter().sum::<f64>() / n as f64;
    let (mut s1, mut s2) = (vec![0.0; n + 1], vec![0.0; n + 1]);
    for (i, &t) in times.iter().enumerate() {
        let c = t - centre;
        s1[i + 1] = s1[i] + c;
        s2[i + 1] = s2[i] + c * c;
    }
    // (mean, cv) of times[a..b].
    let stats = |a: usize, b: usize| {
        let len = (b - a) as f64;
        let d = (s1[b] - s1[a]) / len;
        let var = ((s2[b] - s2[a]) / len - d * d).max(0.0);
        let mean = centre + d;
        (mean, var.sqrt() / mean)
    };
    let mut best: Option<ChangePoint> = None;
    for t in m..=n - m {
        let ((mean_before, cv_before), (mean_after, cv_after)) = (stats(0, t), stats(t, n));
        if mean_before <= 0.0 {
            continue;
        }
        let ratio = mean_after / mean_before;
        let valid = ratio >= params.min_ratio && cv_before <= params.max_cv && cv_after <= params.max_cv;
        if valid && best.as_ref().is_none_or(|b| ratio > b.ratio) {
            best = Some(ChangePoint { at: t, mean_before, mean_after, ratio, cv_before, cv_after });
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::slow::jitter::tests::noisy;

    #[test]
    fn locates_a_planted_step_within_three_iterations() {
        for seed in 0..30 {
            let at = 60 + (seed as usize * 7) % 180;
            let mut t = noisy(seed, 300, 100.0);
            t[at..].iter_mut().for_each(|x| *x *= 1.15);
            let cp = regression(&t, &ChangePointParams::default()).unwrap_or_else(|| panic!("seed {seed}"));
            assert!(cp.at.abs_diff(at) <= 3, "seed {seed}: planted {at}, found {cp:?}");
            assert!((cp.ratio - 1.15).abs() < 0.01 && cp.cv_before < 0.02 && cp.cv_after < 0.02);
        }
    }

    #[test]
    fn flat_series_and_steps_down_are_not_regressions() {
        for seed in 0..30 {
            assert_eq!(regression(&noisy(seed, 300, 100.0), &ChangePointParams::default()), None);
            let mut t = noisy(seed, 300, 100.0);
            t[150..].iter_mut().for_each(|x| *x *= 0.8);
            assert_eq!(regression(&t, &ChangePointParams::default()), None);
        }
        assert_eq!(regression(&[1.0; 19], &ChangePointParams::default()), None);
    }

    #[test]
    fn an_unstable_side_is_not_a_step() {
        // Wild alternation after the "step": the mean rises but the right side is not stable.
        let mut t = noisy(4, 200, 100.0);
        t[100..].iter_mut().enumerate().for_each(|(i, x)| *x *= if i % 2 == 0 { 1.6 } else { 0.9 });
        assert_eq!(regression(&t, &ChangePointParams::default()), None);
    }
}
