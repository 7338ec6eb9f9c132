//! L2: one stage's duration across the ranks of one parallel group (ARGUS §6.1, App. B,
//! Eq. 5). With `x̄_r` the stage's mean duration on rank `r` over the window,
//! `μ_G = Σ x̄_r / |G|`, `σ_G = sqrt(Σ (x̄_r - μ_G)² / (|G| - 1))`, `CV = σ_G / μ_G` grades the
//! group (balanced below 0.02, mild imbalance below 0.05, severe above) and
//! `z_r = (x̄_r - μ_G) / σ_G` names the stragglers. Which ranks form a group (same TP, DP, EP,
//! PP role for the stage) is the caller's routing decision, as in the paper's Table 3.
//!
//! Two choices of ours, both about small groups. Stragglers are only reported in a group
//! that is not balanced: z-scores are scale-free, so a balanced group's slowest rank can
//! have a large z from noise alone. And one rank's z in a group of n is at most
//! `(n - 1)/√n` (the rest equal), which is 1.5 for n = 4 and 0.71 for n = 2: below the usual
//! threshold of 2. The threshold used is `min(z_threshold, small_group_fraction · (n - 1)/√n)`
//! so a lone straggler in a TP pair or a group of four can still be named.

#[derive(Clone, Debug, PartialEq)]
pub struct StragglerParams {
    /// z above which a rank is a straggler. Default 2.0.
    pub z_threshold: f64,
    /// CV from which a group is mildly imbalanced. Default 0.02 (the paper's).
    pub mild_cv: f64,
    /// CV from which a group is severely imbalanced. Default 0.05 (the paper's).
    pub severe_cv: f64,
    /// Fraction of the largest attainable z used as the threshold in small groups.
    /// Default 0.9.
    pub small_group_fraction: f64,
}

impl Default for StragglerParams {
    fn default() -> Self {
        Self { z_threshold: 2.0, mild_cv: 0.02, severe_cv: 0.05, small_group_fraction: 0.9 }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Imbalance {
    Balanced,
    Mild,
    Severe,
}

#[derive(Clone, Debug, PartialEq)]
pub struct GroupAssessment {
    pub mean: f64,
    pub sd: f64,
    pub cv: f64,
    pub imbalance: Imbalance,
    /// `(rank, z)` of the stragglers, ascending by rank.
    pub stragglers: Vec<(u32, f64)>,
}

/// `members` are `(rank, x̄_r)` for one stage in one group. `None` for fewer than two
/// members or a non-positive mean, where neither CV nor z is defined.
pub fn assess_group(members: &[(u32, f64)], params: &StragglerParams) -> Option<GroupAssessment> {
    let n = members.len();
    if n < 2 {
        return None;
    }
    let mean = members.iter().map(|m| m.1).sum::<f64>() / n as f64;
    if mean <= 0.0 {
        return None;
    }
    let sd = (members.iter().map(|m| (m.1 - mean).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt();
    let cv = sd / mean;
    let imbalance = if cv >= params.severe_cv {
        Imbalance::Severe
    } else if cv >= params.mild_cv {
        Imbalance::Mild
    } else {
        Imbalance::Balanced
    };
    let threshold = params.z_threshold.min(params.small_group_fraction * (n - 1) as f64 / (n as f64).sqrt());
    let mut stragglers: Vec<(u32, f64)> = if imbalance == Imbalance::Balanced || sd == 0.0 {
        Vec::new()
    } else {
        members.iter().map(|&(r, x)| (r, (x - mean) / sd)).filter(|&(_, z)| z > threshold).collect()
    };
    stragglers.sort_by_key(|s| s.0);
    Some(GroupAssessment { mean, sd, cv, imbalance, stragglers })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::rng::SplitMix64;

    fn group(seed: u64, n: u32, noise: f64, slow: Option<(u32, f64)>) -> Vec<(u32, f64)> {
        let mut r = SplitMix64::new(seed);
        (0..n)
            .map(|rank| {
                let f = slow.filter(|s| s.0 == rank).map_or(1.0, |s| s.1);
                (rank, 50.0 * f * (1.0 + noise * r.normal()))
            })
            .collect()
    }

    #[test]
    fn flags_the_planted_straggler_and_no_one_else() {
        for seed in 0..50 {
            for n in [2, 4, 8, 16] {
                let a = assess_group(&group(seed, n, 0.003, Some((1, 1.2))), &StragglerParams::default()).unwrap();
                assert_eq!(a.stragglers.len(), 1, "seed {seed}, n {n}: {a:?}");
                assert_eq!(a.stragglers[0].0, 1);
                assert_ne!(a.imbalance, Imbalance::Balanced);
            }
        }
    }

    #[test]
    fn balanced_groups_name_no_one() {
        for seed in 0..50 {
            for n in [2, 4, 8, 64] {
                let a = assess_group(&group(seed, n, 0.005, None), &StragglerParams::default()).unwrap();
                assert_eq!(a.imbalance, Imbalance::Balanced, "seed {seed}, n {n}: {a:?}");
                assert!(a.stragglers.is_empty());
            }
        }
    }

    #[test]
    fn grades_follow_the_paper_and_degenerate_groups_are_none() {
        let grade = |xs: &[f64]| {
            let m: Vec<(u32, f64)> = xs.iter().enumerate().map(|(i, &x)| (i as u32, x)).collect();
            assess_group(&m, &StragglerParams::default()).unwrap().imbalance
        };
        // sd of [1-d, 1+d] is d·√2.
        assert_eq!(grade(&[0.98, 1.02]), Imbalance::Mild);
        assert_eq!(grade(&[0.99, 1.01]), Imbalance::Balanced);
        assert_eq!(grade(&[0.96, 1.04]), Imbalance::Severe);
        assert!(assess_group(&[(0, 1.0)], &StragglerParams::default()).is_none());
        assert!(assess_group(&[(0, 0.0), (1, 0.0)], &StragglerParams::default()).is_none());
    }
}
