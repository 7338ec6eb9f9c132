//! L3 over many kernels: for each (kernel, stream) key, the W1 matrix among the ranks of one
//! role and the IQR verdict on it. Callers pass only ranks that share a parallel role,
//! since ranks with different roles run different kernels by design.

use std::collections::BTreeMap;

use super::fence::{judge, FenceParams, Verdict};
use super::mixture::Mixture;
use super::wasserstein::{distance_matrix, DistanceMatrix, W1Params};
use crate::core::kernels::kde::Cluster;
use crate::core::quantile::select_quantile;

#[derive(Clone, Debug, Default, PartialEq)]
pub struct L3Params {
    pub w1: W1Params,
    pub fence: FenceParams,
}

/// One kernel's L3 comparison among the ranks of one role: the W1 matrix (rows in `ranks`
/// order) and the fence's verdict on it.
#[derive(Clone, Debug, PartialEq)]
pub struct KernelComparison<K> {
    pub kernel: K,
    /// Row `i` of `matrix` is rank `ranks[i]`, ascending.
    pub ranks: Vec<u32>,
    pub matrix: DistanceMatrix,
    pub verdict: Verdict,
}

impl<K> KernelComparison<K> {
    /// The W1 matrix's quadrature error bound, for judging a score near the fence.
    pub fn error_bound(&self) -> f64 {
        self.matrix.error_bound()
    }
}

/// Every kernel with at least 4 ranks to compare, in key order. Ranks whose clusters are
/// empty are left out of that kernel's comparison.
pub fn compare_kernels<K: Ord + Clone>(
    per_kernel: &BTreeMap<K, Vec<(u32, Vec<Cluster>)>>,
    params: &L3Params,
) -> Vec<KernelComparison<K>> {
    let mut comparisons = Vec::new();
    for (kernel, ranks) in per_kernel {
        let mut rows: Vec<(u32, Mixture)> =
            ranks.iter().filter_map(|(r, c)| Mixture::from_clusters(c).map(|m| (*r, m))).collect();
        rows.sort_by_key(|(r, _)| *r);
        let ids: Vec<u32> = rows.iter().map(|(r, _)| *r).collect();
        let mixtures: Vec<Mixture> = rows.into_iter().map(|(_, m)| m).collect();
        if mixtures.len() < 4 {
            continue;
        }
        let mut means: Vec<f64> = mixtures.iter().map(Mixture::mean).collect();
        let scale = select_quantile(&mut means, 0.5);
        let matrix = distance_matrix(&mixtures, &params.w1);
        if let Some(verdict) = judge(&ids, &matrix, scale, &params.fence) {
            comparisons.push(KernelComparison { kernel: kernel.clone(), ranks: ids, matrix, verdict });
        }
    }
    comparisons
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::kernels::kde::{cluster_durations, KdeParams};
    use crate::core::kernels::reservoir::{Reservoir, DEFAULT_RESERVOIR_CAP};
    use crate::core::rng::SplitMix64;

    /// The comparisons with at least one anomalous rank.
    fn anomalous_kernels<K: Ord + Clone>(
        per_kernel: &BTreeMap<K, Vec<(u32, Vec<Cluster>)>>,
        params: &L3Params,
    ) -> Vec<KernelComparison<K>> {
        compare_kernels(per_kernel, params).into_iter().filter(|c| !c.verdict.anomalous.is_empty()).collect()
    }

    /// 16 ranks of one role. Ranks of one role launch the same kernels the same number of
    /// times, so each mode gets a fixed count (`(count, median, log-sd)`) and only the
    /// durations are random. `slow` ranks run every "gemm" launch `factor` times longer.
    fn job(seed: u64, slow: &[(u32, f64)]) -> BTreeMap<&'static str, Vec<(u32, Vec<Cluster>)>> {
        let kernels = [("gemm", vec![(1200, 10.0, 0.08), (800, 40.0, 0.1)]), ("nccl", vec![(2000, 100.0, 0.2)])];
        let mut per_kernel = BTreeMap::new();
        for (k, (name, modes)) in kernels.iter().enumerate() {
            let rows = (0..16u32)
                .map(|r| {
                    let f = slow.iter().find(|s| s.0 == r && *name == "gemm").map_or(1.0, |s| s.1);
                    let mut rng = SplitMix64::new(seed * 1000 + k as u64 * 100 + u64::from(r));
                    let d: Vec<f64> = modes
                        .iter()
                        .flat_map(|&(count, median, s)| (0..count).map(move |_| (median, s)))
                        .map(|(median, s)| f * median * (s * rng.normal()).exp())
                        .collect();
                    (r, cluster_durations(&d, &KdeParams::default()))
                })
                .collect();
            per_kernel.insert(*name, rows);
        }
        per_kernel
    }

    #[test]
    fn finds_a_planted_slow_rank_among_sixteen() {
        for seed in 0..10 {
            let found = anomalous_kernels(&job(seed, &[(11, 1.1)]), &L3Params::default());
            assert_eq!(found.len(), 1, "seed {seed}: {found:?}");
            assert_eq!(found[0].kernel, "gemm");
            assert_eq!(found[0].verdict.anomalous, vec![11]);
            assert!(found[0].error_bound() < found[0].verdict.floor);
        }
    }

    #[test]
    fn healthy_jobs_raise_nothing() {
        for seed in 0..50 {
            let found = anomalous_kernels(&job(seed, &[]), &L3Params::default());
            assert!(found.is_empty(), "seed {seed}: {found:?}");
        }
    }

    /// The collector's path: many launches per window, a bounded reservoir per series, so
    /// cluster shares carry sampling noise again. Still quiet when healthy, still finds 10%.
    #[test]
    fn through_a_reservoir_per_series() {
        let summarize = |seed: u64, slow: Option<u32>| {
            let rows: Vec<(u32, Vec<Cluster>)> = (0..16u32)
                .map(|r| {
                    let f = if slow == Some(r) { 1.1 } else { 1.0 };
                    let mut rng = SplitMix64::new(seed * 100 + u64::from(r));
                    let mut res = Reservoir::new(DEFAULT_RESERVOIR_CAP, seed ^ u64::from(r));
                    for i in 0..20_000 {
                        let (median, s) = if i % 5 < 3 { (10.0, 0.08) } else { (40.0, 0.1) };
                        res.push(f * median * (s * rng.normal()).exp());
                    }
                    (r, res.summarize(&KdeParams::default()))
                })
                .collect();
            BTreeMap::from([("gemm", rows)])
        };
        for seed in 0..10 {
            assert!(anomalous_kernels(&summarize(seed, None), &L3Params::default()).is_empty(), "seed {seed}");
            let found = anomalous_kernels(&summarize(seed, Some(6)), &L3Params::default());
            assert_eq!(found.len(), 1, "seed {seed}");
            assert_eq!(found[0].verdict.anomalous, vec![6]);
        }
    }

    #[test]
    fn too_few_ranks_are_not_judged() {
        let mut per_kernel = job(0, &[(1, 2.0)]);
        per_kernel.values_mut().for_each(|rows| rows.truncate(3));
        assert!(anomalous_kernels(&per_kernel, &L3Params::default()).is_empty());
    }
}
