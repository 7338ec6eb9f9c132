//! Wasserstein-1 distances between ranks' reconstructed CDFs (ARGUS §6.2, Eq. 3):
//! `W1(F_a, F_b) = ∫_0^∞ |F_a(x) - F_b(x)| dx`, by the trapezoid rule on a log-uniform grid.
//!
//! All ranks of one matrix share one grid spanning every component to `k` standard
//! deviations, so each CDF is evaluated once per grid point and the estimate is a weighted
//! ℓ1 distance between the CDFs' grid values: symmetric, zero on the diagonal and obeying
//! the triangle inequality exactly (up to rounding), not merely approximately.
//!
//! Error bound, per pair, from monotonicity alone (no smoothness assumed): on a grid cell
//! `[x_i, x_{i+1}]` both CDFs rise, so `|F_a - F_b|` stays between
//! `L_i = max(0, F_a(x_i) - F_b(x_{i+1}), F_b(x_i) - F_a(x_{i+1}))` and
//! `U_i = max(F_a(x_{i+1}) - F_b(x_i), F_b(x_{i+1}) - F_a(x_i))`; the trapezoid value lies in
//! the same bracket, so the cell's error is at most `(U_i - L_i)Δx_i`. Below the grid,
//! `∫_0^lo |F_a - F_b| ≤ lo · max(F_a(lo), F_b(lo))`; above it, at most
//! `E[(X_a - hi)+] + E[(X_b - hi)+]`; and the CDF evaluation error adds
//! `2 · 1.2e-7 · (hi - lo)`. The sum is reported as the pair's bound. It is first order in the
//! grid step, so it is loose: the actual trapezoid error is second order in the step.

use super::mixture::{Mixture, CDF_ERROR};

#[derive(Clone, Debug, PartialEq)]
pub struct W1Params {
    /// Log-uniform grid points. Default 2048: a cell is then a duration ratio of about
    /// `exp(span / 2047)`, ~0.3% for a typical span of 6 in ln(duration).
    pub grid_points: usize,
    /// The grid spans each component to this many σ either side. Default 8: the mass
    /// left outside is below Φ(-8) ≈ 6e-16 on the left and the right tail's share of the
    /// mean is of the same order.
    pub tail_sigmas: f64,
}

impl Default for W1Params {
    fn default() -> Self {
        Self { grid_points: 2048, tail_sigmas: 8.0 }
    }
}

/// Pairwise W1 among ranks, in the order the mixtures were given.
#[derive(Clone, Debug, PartialEq)]
pub struct DistanceMatrix {
    n: usize,
    values: Vec<f64>,
    error_bound: f64,
}

impl DistanceMatrix {
    pub fn len(&self) -> usize {
        self.n
    }

    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    pub fn get(&self, i: usize, j: usize) -> f64 {
        self.values[i * self.n + j]
    }

    /// The largest of the pairs' error bounds (module docs), in the durations' unit.
    pub fn error_bound(&self) -> f64 {
        self.error_bound
    }
}

pub fn distance_matrix(mixtures: &[Mixture], params: &W1Params) -> DistanceMatrix {
    let n = mixtures.len();
    let mut values = vec![0.0; n * n];
    let (lo, hi) = mixtures
        .iter()
        .map(|m| m.support(params.tail_sigmas))
        .fold((f64::INFINITY, 0.0f64), |(lo, hi), (a, b)| (lo.min(a), hi.max(b)));
    if n < 2 || !(lo > 0.0 && hi > lo) {
        return DistanceMatrix { n, values, error_bound: 0.0 };
    }
    let g = params.grid_points.max(2);
    let ratio = (hi / lo).ln() / (g - 1) as f64;
    let xs: Vec<f64> = (0..g).map(|i| lo * (ratio * i as f64).exp()).collect();
    let cdfs: Vec<Vec<f64>> = mixtures.iter().map(|m| xs.iter().map(|&x| m.cdf(x)).collect()).collect();
    let tails: Vec<f64> = mixtures.iter().map(|m| m.upper_tail_integral(hi)).collect();

    let mut error_bound = 0.0f64;
    for a in 0..n {
        for b in a + 1..n {
            let (fa, fb) = (&cdfs[a], &cdfs[b]);
            let (mut sum, mut slack) = (0.0, 0.0);
            for i in 0..g - 1 {
                let dx = xs[i + 1] - xs[i];
                sum += 0.5 * ((fa[i] - fb[i]).abs() + (fa[i + 1] - fb[i + 1]).abs()) * dx;
                let upper = (fa[i + 1] - fb[i]).max(fb[i + 1] - fa[i]);
                let lower = (fa[i] - fb[i + 1]).max(fb[i] - fa[i + 1]).max(0.0);
                slack += (upper - lower) * dx;
            }
            let bound = slack + lo * fa[0].max(fb[0]) + tails[a] + tails[b] + 2.0 * CDF_ERROR * (hi - lo);
            error_bound = error_bound.max(bound);
            values[a * n + b] = sum;
            values[b * n + a] = sum;
        }
    }
    DistanceMatrix { n, values, error_bound }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::kernels::mixture::Z_99;
    use crate::core::kernels::kde::Cluster;
    use proptest::prelude::*;

    fn lognormal(median: f64, sigma: f64) -> Mixture {
        let p99 = median * (Z_99 * sigma).exp();
        Mixture::from_clusters(&[Cluster { count: 1, p50: median, p99, log_mean: median.ln(), log_sd: sigma }]).unwrap()
    }

    #[test]
    fn stochastic_dominance_gives_the_difference_of_means() {
        // When one CDF lies wholly below the other, W1 is the difference of the means:
        // LN(μ+δ, σ) dominates LN(μ, σ).
        let (a, b) = (lognormal(10.0, 0.2), lognormal(12.0, 0.2));
        let m = distance_matrix(&[a.clone(), b.clone()], &W1Params::default());
        let exact = b.mean() - a.mean();
        let err = (m.get(0, 1) - exact).abs();
        assert!(err <= m.error_bound(), "{err} > {}", m.error_bound());
        assert!(err < 1e-5 * exact, "trapezoid error {err}");
        assert!(m.error_bound() < 0.05 * exact, "bound {}", m.error_bound());
        assert_eq!(m.get(0, 0), 0.0);
        assert_eq!(m.get(1, 0), m.get(0, 1));
    }

    #[test]
    fn a_coarse_grid_still_brackets_the_truth() {
        let (a, b) = (lognormal(10.0, 0.3), lognormal(10.0, 0.6));
        let fine = distance_matrix(&[a.clone(), b.clone()], &W1Params { grid_points: 20_000, ..W1Params::default() });
        let coarse = distance_matrix(&[a, b], &W1Params { grid_points: 64, ..W1Params::default() });
        assert!((coarse.get(0, 1) - fine.get(0, 1)).abs() <= coarse.error_bound());
    }

    #[test]
    fn fewer_than_two_ranks_is_an_empty_comparison() {
        let m = distance_matrix(&[lognormal(1.0, 0.1)], &W1Params::default());
        assert_eq!((m.len(), m.get(0, 0), m.error_bound()), (1, 0.0, 0.0));
        assert!(distance_matrix(&[], &W1Params::default()).is_empty());
    }

    fn arb_mixture() -> impl Strategy<Value = Mixture> {
        prop::collection::vec((1u64..1000, 1.0f64..1000.0, 0.01f64..1.0), 1..4).prop_map(|cs| {
            let clusters: Vec<Cluster> = cs
                .into_iter()
                .map(|(count, p50, s)| Cluster {
                    count,
                    p50,
                    p99: p50 * (Z_99 * s).exp(),
                    log_mean: p50.ln(),
                    log_sd: s,
                })
                .collect();
            Mixture::from_clusters(&clusters).unwrap()
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn w1_is_a_metric(a in arb_mixture(), b in arb_mixture(), c in arb_mixture()) {
            let m = distance_matrix(&[a, b, c], &W1Params { grid_points: 512, ..W1Params::default() });
            let tol = 1e-9 * (m.get(0, 1) + m.get(1, 2) + m.get(0, 2)).max(1e-12);
            for i in 0..3 {
                prop_assert_eq!(m.get(i, i), 0.0);
                for j in 0..3 {
                    prop_assert_eq!(m.get(i, j), m.get(j, i));
                    prop_assert!(m.get(i, j) >= 0.0);
                    for k in 0..3 {
                        prop_assert!(m.get(i, k) <= m.get(i, j) + m.get(j, k) + tol);
                    }
                }
            }
        }

        #[test]
        fn identical_mixtures_are_at_distance_zero(a in arb_mixture()) {
            let m = distance_matrix(&[a.clone(), a], &W1Params { grid_points: 256, ..W1Params::default() });
            prop_assert_eq!(m.get(0, 1), 0.0);
        }
    }
}
