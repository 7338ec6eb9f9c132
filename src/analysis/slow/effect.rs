//! What turns a detector's output into a finding (Law 4: no false alarms). A statistic is
//! not enough: on a loaded host every detector fires now and then on a descheduled step.
//! A finding needs an effect an operator would act on, the time it adds per step of the
//! analysed run, at least the effect floor: `min_effect` of the job's median step time and
//! at least `min_effect_s`. And ranks are compared only in groups large enough to compare.

use std::collections::BTreeMap;
use std::ops::Range;

use super::job::RankSeries;

/// Fewest ranks a group needs for L2 and expected time: one rank has no peer to be slower
/// than, and expected time would name it for every slow step of its own.
pub const MIN_GROUP_RANKS: usize = 2;

/// The smallest time per step a finding must add, in seconds.
pub fn floor_s(min_effect: f64, min_effect_s: f64, median_step_s: f64) -> f64 {
    (min_effect * median_step_s).max(min_effect_s)
}

/// What a spike of `wall_s[run]` over `baseline_s` added per step of the whole series: a
/// descheduled step or two of a long run is not worth acting on, a long stall is.
pub fn spike_effect_s(wall_s: &[f64], run: Range<usize>, baseline_s: f64) -> f64 {
    if wall_s.is_empty() {
        return 0.0;
    }
    let excess: f64 =
        wall_s[run.start.min(wall_s.len())..run.end.min(wall_s.len())].iter().map(|t| (t - baseline_s).max(0.0)).sum();
    excess / wall_s.len() as f64
}

/// The groups L2 and expected time compare, and what became of those too small.
#[derive(Debug)]
pub struct Grouping<'a> {
    pub groups: BTreeMap<String, Vec<&'a RankSeries>>,
    /// Groups under `MIN_GROUP_RANKS` merged into one (`MERGED`) that is large enough.
    pub merged: Vec<String>,
    /// Groups left out, with their rank counts: too small, and too few to merge.
    pub skipped: Vec<(String, usize)>,
}

/// The name of the group made of the merged small groups.
pub const MERGED: &str = "merged";

/// The ranks by `RankSeries::group`; groups under `MIN_GROUP_RANKS` (one rank each, as
/// `--group-by local-rank` makes on one node) are merged into one group when together they
/// reach it, and skipped otherwise (a one-rank job).
pub fn comparable_groups(ranks: &[RankSeries]) -> Grouping<'_> {
    let mut groups: BTreeMap<String, Vec<&RankSeries>> = BTreeMap::new();
    for r in ranks {
        groups.entry(r.group.clone()).or_default().push(r);
    }
    let small: Vec<String> =
        groups.iter().filter(|(_, members)| members.len() < MIN_GROUP_RANKS).map(|(g, _)| g.clone()).collect();
    let mut pooled = Vec::new();
    let mut sizes = Vec::new();
    for g in &small {
        let members = groups.remove(g).unwrap_or_default();
        sizes.push((g.clone(), members.len()));
        pooled.extend(members);
    }
    let (mut merged, mut skipped) = (Vec::new(), Vec::new());
    if small.len() > 1 && pooled.len() >= MIN_GROUP_RANKS {
        merged = small;
        groups.insert(MERGED.to_string(), pooled);
    } else {
        skipped = sizes;
    }
    Grouping { groups, merged, skipped }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rank(rank: u32, group: &str) -> RankSeries {
        RankSeries { rank, group: group.into(), steps: vec![0], wall_s: vec![1.0], durations: vec![vec![1.0]] }
    }

    #[test]
    fn the_floor_is_a_share_of_the_step_and_at_least_the_absolute_floor() {
        assert!((floor_s(0.05, 0.001, 0.2) - 0.01).abs() < 1e-12);
        assert_eq!(floor_s(0.05, 0.001, 0.01), 0.001);
    }

    #[test]
    fn a_spike_counts_per_step_of_the_run() {
        let mut wall = vec![0.1; 40];
        (10..13).for_each(|i| wall[i] = 0.35);
        assert!((spike_effect_s(&wall, 10..13, 0.1) - 0.75 / 40.0).abs() < 1e-12);
        assert_eq!(spike_effect_s(&[], 0..3, 0.1), 0.0);
    }

    #[test]
    fn one_rank_groups_are_merged_or_skipped() {
        // One node, --group-by local-rank: eight groups of one, compared together.
        let one_node: Vec<RankSeries> = (0..8).map(|r| rank(r, &format!("local_rank {r}"))).collect();
        let g = comparable_groups(&one_node);
        assert_eq!(g.groups.keys().collect::<Vec<_>>(), [MERGED]);
        assert_eq!((g.groups[MERGED].len(), g.merged.len(), g.skipped.len()), (8, 8, 0));
        // Two nodes: groups of two stay as they are.
        let two_nodes: Vec<RankSeries> = (0..8).map(|r| rank(r, &format!("local_rank {}", r % 4))).collect();
        let g = comparable_groups(&two_nodes);
        assert_eq!((g.groups.len(), g.merged.len(), g.skipped.len()), (4, 0, 0));
        // A one-rank job: nothing to compare, skipped.
        let alone = [rank(0, "job")];
        let g = comparable_groups(&alone);
        assert!(g.groups.is_empty() && g.merged.is_empty());
        assert_eq!(g.skipped, [("job".to_string(), 1)]);
    }
}
