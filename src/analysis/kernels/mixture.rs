//! The log-normal mixture CDF a rank's clusters stand for (ARGUS §6.2, Eq. 2).
//!
//! Cluster `c` becomes a log-normal with `μ_c = ln(p50_c)` (the median fixes the centre)
//! and `σ_c = (ln(p99_c) - ln(p50_c)) / z_0.99` with `z_0.99 = 2.326` (the tail fixes the
//! spread), weighted by its share of launches:
//! `F(x) = Σ_c count_c / Σ count · Φ((ln x - μ_c) / σ_c)`.

use crate::core::kernels::kde::Cluster;

/// The standard normal's 99th percentile as the paper rounds it.
pub const Z_99: f64 = 2.326;

/// Smallest `σ_c` used: a cluster whose p99 equals its p50 (identical durations) would be
/// a step, which a quadrature grid can only bracket to one grid step; a 0.1% spread in
/// duration changes W1 by at most 0.1% of the duration and keeps the CDF continuous.
pub const MIN_SIGMA: f64 = 1e-3;

/// Absolute error of `normal_cdf` (below): the erfc approximation below has fractional error
/// under 1.2e-7 (Press et al., Numerical Recipes §6.2) and Φ = erfc/2 with erfc ≤ 2.
pub const CDF_ERROR: f64 = 1.2e-7;

#[derive(Clone, Debug, PartialEq)]
pub struct Component {
    pub weight: f64,
    pub mu: f64,
    pub sigma: f64,
}

/// A rank's reconstructed duration distribution for one (kernel, stream).
#[derive(Clone, Debug, PartialEq)]
pub struct Mixture {
    components: Vec<Component>,
}

impl Mixture {
    /// `None` when no cluster has a launch or a positive p50: nothing to compare.
    pub fn from_clusters(clusters: &[Cluster]) -> Option<Self> {
        let usable: Vec<&Cluster> = clusters.iter().filter(|c| c.count > 0 && c.p50 > 0.0).collect();
        let total: u64 = usable.iter().map(|c| c.count).sum();
        if total == 0 {
            return None;
        }
        let components = usable
            .iter()
            .map(|c| Component {
                weight: c.count as f64 / total as f64,
                mu: c.p50.ln(),
                sigma: ((c.p99.max(c.p50).ln() - c.p50.ln()) / Z_99).max(MIN_SIGMA),
            })
            .collect();
        Some(Self { components })
    }

    pub fn components(&self) -> &[Component] {
        &self.components
    }

    pub fn cdf(&self, x: f64) -> f64 {
        if x <= 0.0 {
            return 0.0;
        }
        let lx = x.ln();
        self.components.iter().map(|c| c.weight * normal_cdf((lx - c.mu) / c.sigma)).sum()
    }

    /// `E[X] = Σ w_c exp(μ_c + σ_c²/2)`: the duration scale L3's noise floor is relative to.
    pub fn mean(&self) -> f64 {
        self.components.iter().map(|c| c.weight * (c.mu + c.sigma * c.sigma / 2.0).exp()).sum()
    }

    /// `∫_x^∞ (1 - F(t)) dt = E[(X - x)+]`, per component
    /// `exp(μ + σ²/2) Φ(σ - z) - x (1 - Φ(z))` with `z = (ln x - μ)/σ`: bounds the mass of
    /// `|F_a - F_b|` a grid ending at `x` leaves out.
    pub(crate) fn upper_tail_integral(&self, x: f64) -> f64 {
        let lx = x.ln();
        let tail: f64 = self
            .components
            .iter()
            .map(|c| {
                let z = (lx - c.mu) / c.sigma;
                c.weight * ((c.mu + c.sigma * c.sigma / 2.0).exp() * normal_cdf(c.sigma - z) - x * normal_cdf(-z))
            })
            .sum();
        tail.max(0.0)
    }

    /// `[min exp(μ_c - kσ_c), max exp(μ_c + kσ_c)]`.
    pub(crate) fn support(&self, k: f64) -> (f64, f64) {
        self.components.iter().fold((f64::INFINITY, 0.0), |(lo, hi), c| {
            (lo.min((c.mu - k * c.sigma).exp()), hi.max((c.mu + k * c.sigma).exp()))
        })
    }
}

/// Φ(z) = erfc(-z/√2) / 2.
pub(crate) fn normal_cdf(z: f64) -> f64 {
    0.5 * erfc(-z / std::f64::consts::SQRT_2)
}

/// Chebyshev-fitted erfc (Numerical Recipes `erfcc`), fractional error < 1.2e-7 everywhere.
fn erfc(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let poly = -z * z - 1.265_512_23
        + t * (1.000_023_68
            + t * (0.374_091_96
                + t * (0.096_784_18
                    + t * (-0.186_288_06
                        + t * (0.278_868_07
                            + t * (-1.135_203_98 + t * (1.488_515_87 + t * (-0.822_152_23 + t * 0.170_872_77))))))));
    let r = t * poly.exp();
    if x >= 0.0 {
        r
    } else {
        2.0 - r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster(count: u64, p50: f64, p99: f64) -> Cluster {
        Cluster { count, p50, p99, log_mean: p50.ln(), log_sd: 0.0 }
    }

    #[test]
    fn normal_cdf_matches_known_values() {
        for (z, p) in
            [(0.0, 0.5), (1.0, 0.841_344_746), (-1.96, 0.024_997_895), (2.326, 0.989_990_725), (-6.0, 9.866e-10)]
        {
            assert!((normal_cdf(z) - p).abs() < CDF_ERROR.max(p * 1.2e-7), "{z}");
        }
    }

    #[test]
    fn one_cluster_puts_its_median_and_p99_back() {
        let m = Mixture::from_clusters(&[cluster(100, 10.0, 20.0)]).unwrap();
        assert!((m.cdf(10.0) - 0.5).abs() < 1e-6);
        assert!((m.cdf(20.0) - 0.99).abs() < 1e-4);
        assert_eq!(m.cdf(0.0), 0.0);
        let s = (2.0f64).ln() / Z_99;
        assert!((m.mean() - 10.0 * (s * s / 2.0).exp()).abs() < 1e-9);
    }

    #[test]
    fn weights_follow_counts_and_degenerate_clusters_are_handled() {
        let m = Mixture::from_clusters(&[cluster(300, 10.0, 11.0), cluster(100, 100.0, 110.0), cluster(0, 5.0, 6.0)])
            .unwrap();
        assert_eq!(m.components().len(), 2);
        assert!((m.cdf(30.0) - 0.75).abs() < 1e-6);
        let point = Mixture::from_clusters(&[cluster(5, 10.0, 10.0)]).unwrap();
        assert_eq!(point.components()[0].sigma, MIN_SIGMA);
        assert!(Mixture::from_clusters(&[cluster(0, 10.0, 11.0)]).is_none());
    }

    #[test]
    fn upper_tail_integral_matches_the_mean_at_zero_and_vanishes_far_out() {
        let m = Mixture::from_clusters(&[cluster(1, 10.0, 30.0), cluster(2, 50.0, 60.0)]).unwrap();
        assert!((m.upper_tail_integral(1e-9) - m.mean()).abs() < 1e-5 * m.mean());
        assert!(m.upper_tail_integral(m.support(8.0).1) < 1e-9 * m.mean());
    }
}
