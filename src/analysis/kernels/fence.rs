//! Which ranks stand out of a W1 matrix (ARGUS §6.2, Eq. 4): a rank's deviation score is
//! its mean W1 to every other rank, and ranks above Tukey's upper fence
//! `Q3 + α (Q3 - Q1)` of the scores are anomalous.
//!
//! The fence is scale-free, so on a healthy group, where every score is sampling noise,
//! it still flags the noisiest rank now and then (with 16 ranks, often enough to matter).
//! A rank is therefore flagged only if its score is also at least `min_relative_score` of
//! the group's typical duration: W1 is in duration units, and a rank whose distribution is
//! on average less than 5% away from its peers is not a slow rank worth an alert. The noise
//! it sits above is real: with a few thousand launches per window, the binomial noise in
//! cluster counts alone moves healthy ranks' W1 by 1-2% of the mean duration when a
//! kernel's modes are far apart (a 1% share moved between modes 30 µs apart is 0.3 µs).

use super::wasserstein::DistanceMatrix;
use crate::core::quantile::select_quantile;

#[derive(Clone, Debug, PartialEq)]
pub struct FenceParams {
    /// The paper's anomaly coefficient α. Default 1.5, Tukey's outlier fence.
    pub alpha: f64,
    /// Floor on a flagged score, relative to the median of the ranks' mean durations.
    /// Default 0.05.
    pub min_relative_score: f64,
}

impl Default for FenceParams {
    fn default() -> Self {
        Self { alpha: 1.5, min_relative_score: 0.05 }
    }
}

/// One rank's mean W1 to the others.
#[derive(Clone, Debug, PartialEq)]
pub struct RankScore {
    pub rank: u32,
    pub score: f64,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Verdict {
    /// Every rank's score, in the order the ranks were given.
    pub scores: Vec<RankScore>,
    /// `Q3 + α (Q3 - Q1)`.
    pub upper_fence: f64,
    /// `min_relative_score · scale`: the least score that can be flagged.
    pub floor: f64,
    /// Ranks above both, ascending.
    pub anomalous: Vec<u32>,
}

/// `ranks[i]` names row `i` of `matrix`; `scale` is the group's typical duration (the
/// median of the ranks' mixture means). Needs at least 4 ranks: fewer have no quartiles
/// worth the name, and `None` says so.
pub fn judge(ranks: &[u32], matrix: &DistanceMatrix, scale: f64, params: &FenceParams) -> Option<Verdict> {
    let n = matrix.len();
    if n < 4 || ranks.len() != n {
        return None;
    }
    let scores: Vec<RankScore> = ranks
        .iter()
        .enumerate()
        .map(|(i, &rank)| RankScore { rank, score: (0..n).map(|j| matrix.get(i, j)).sum::<f64>() / (n - 1) as f64 })
        .collect();
    let mut s: Vec<f64> = scores.iter().map(|r| r.score).collect();
    let (q1, q3) = (select_quantile(&mut s, 0.25), select_quantile(&mut s, 0.75));
    let upper_fence = q3 + params.alpha * (q3 - q1);
    let floor = params.min_relative_score * scale;
    let mut anomalous: Vec<u32> =
        scores.iter().filter(|r| r.score > upper_fence && r.score >= floor).map(|r| r.rank).collect();
    anomalous.sort_unstable();
    Some(Verdict { scores, upper_fence, floor, anomalous })
}
