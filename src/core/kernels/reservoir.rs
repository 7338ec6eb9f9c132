//! A bounded sample of one series per window, so clustering memory does not grow with
//! the launch rate: Vitter's Algorithm R keeps a uniform sample of at most `cap`
//! durations (8 bytes each) from however many arrive, driven by a seeded SplitMix64 so the
//! same launches and seed always keep the same sample.

use crate::core::kernels::kde::{cluster_durations, Cluster, KdeParams};
use crate::core::rng::SplitMix64;

/// Cap that keeps 32 KiB per series; sampling error on a cluster holding a fraction `p` of
/// launches is then about `sqrt(p(1-p)/4096) ≤ 0.8%` of the window.
pub const DEFAULT_RESERVOIR_CAP: usize = 4096;

#[derive(Clone, Debug)]
pub struct Reservoir {
    cap: usize,
    seen: u64,
    samples: Vec<f64>,
    rng: SplitMix64,
}

impl Reservoir {
    /// `seed` should differ per series (e.g. a hash of kernel, stream and window) so two
    /// series do not drop the same positions.
    pub fn new(cap: usize, seed: u64) -> Self {
        Self { cap: cap.max(1), seen: 0, samples: Vec::new(), rng: SplitMix64::new(seed) }
    }

    /// Offer one duration. Non-finite and non-positive ones are dropped and not counted,
    /// as clustering would drop them anyway.
    pub fn push(&mut self, duration: f64) {
        if !(duration.is_finite() && duration > 0.0) {
            return;
        }
        self.seen += 1;
        if self.samples.len() < self.cap {
            self.samples.push(duration);
        } else {
            // Keep the new one with probability cap/seen, in a uniformly chosen slot.
            let j = self.rng.below(self.seen) as usize;
            if j < self.cap {
                self.samples[j] = duration;
            }
        }
    }

    /// Durations offered so far.
    pub fn seen(&self) -> u64 {
        self.seen
    }

    /// Clusters of the kept sample with counts scaled to every launch seen (largest
    /// remainder, so they sum to `seen()` exactly).
    pub fn summarize(&self, params: &KdeParams) -> Vec<Cluster> {
        let mut clusters = cluster_durations(&self.samples, params);
        let kept = self.samples.len() as u128;
        if kept == 0 || kept == u128::from(self.seen) {
            return clusters;
        }
        let seen = u128::from(self.seen);
        let mut rest: Vec<(u128, usize)> = Vec::with_capacity(clusters.len());
        let mut assigned = 0u128;
        for (i, c) in clusters.iter_mut().enumerate() {
            let exact = u128::from(c.count) * seen;
            c.count = (exact / kept) as u64;
            assigned += u128::from(c.count);
            rest.push((exact % kept, i));
        }
        // Ties go to the earlier (shorter) cluster so the result is deterministic.
        rest.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        for &(_, i) in rest.iter().take((seen - assigned) as usize) {
            clusters[i].count += 1;
        }
        clusters
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::kernels::kde::tests::lognormal_mix;

    #[test]
    fn bounded_deterministic_and_scaled() {
        let d = lognormal_mix(11, 100_000, &[(0.7, 10.0, 0.1), (0.3, 40.0, 0.1)]);
        let fill = |seed| {
            let mut r = Reservoir::new(DEFAULT_RESERVOIR_CAP, seed);
            d.iter().for_each(|&x| r.push(x));
            r
        };
        let (a, b) = (fill(1), fill(1));
        assert_eq!(a.samples, b.samples);
        assert_eq!(a.samples.len(), DEFAULT_RESERVOIR_CAP);
        assert_ne!(a.samples, fill(2).samples);
        let c = a.summarize(&KdeParams::default());
        assert_eq!(c.len(), 2);
        assert_eq!(c.iter().map(|k| k.count).sum::<u64>(), 100_000);
        assert!((c[0].count as f64 / 70_000.0 - 1.0).abs() < 0.03, "{c:?}");
    }

    #[test]
    fn sample_is_uniform_over_positions() {
        // Push positions 1..=n; a uniform sample has mean position ≈ n/2.
        let n = 200_000u64;
        let mut r = Reservoir::new(2000, 9);
        (1..=n).for_each(|i| r.push(i as f64));
        let mean = r.samples.iter().sum::<f64>() / r.samples.len() as f64;
        assert!((mean / (n as f64 / 2.0) - 1.0).abs() < 0.03, "{mean}");
        r.push(-1.0);
        r.push(f64::NAN);
        assert_eq!(r.seen(), n);
    }

    #[test]
    fn under_the_cap_nothing_is_dropped() {
        let mut r = Reservoir::new(10, 0);
        [1.0, 2.0, 3.0].iter().for_each(|&x| r.push(x));
        assert_eq!(r.summarize(&KdeParams::default())[0].count, 3);
    }
}
