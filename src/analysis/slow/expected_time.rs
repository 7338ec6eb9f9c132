//! Expected-time tracking and slow-node detection (VenusTrace §3 and Alg. 2).
//!
//! Worker side, per node (a forward or backward of one micro-batch on the critical path,
//! or a whole batch): `D_i` is its duration in iteration `i`. Iteration 1 is skipped (warm-up),
//! iteration 2 sets `T_expect = D_2`, and from iteration 3 on a duration within `α` of the
//! expectation, `|D_i - T_expect| < α · T_expect`, updates it. The paper's text says this
//! update keeps "the mean value", its listing writes `T_expect = D_i`; we keep the running
//! mean of the accepted durations, which is the text's reading and does not let one
//! borderline sample move the baseline by up to α at a time. Durations that differ by
//! more than `α` but are not slow leave `T_expect` alone, so a slow phase cannot teach the
//! tracker that slow is normal.
//!
//! Manager side: a node on the critical path is slow when `T_v > T_expect · (1 + β)` (the
//! listing's line 24 calls this margin `m`; the text calls it β, e.g. 50%). The slow node
//! belongs to a TP or DP group, and the rank reported is the one with the largest time for
//! that node in the group, `r_max = argmax_r time(r)` (line 25). Which nodes lie on the
//! critical path (the paper's Alg. 3) and which group's times to compare is the caller's
//! input; this module only keeps the expectations and applies the thresholds.

use std::collections::BTreeMap;

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ExpectedTimeParams {
    /// `α`: relative distance within which a duration updates the expectation. Default 0.05.
    pub alpha: f64,
    /// `β`: relative excess over the expectation that makes a node slow. Default 0.5.
    pub beta: f64,
}

impl Default for ExpectedTimeParams {
    fn default() -> Self {
        Self { alpha: 0.05, beta: 0.5 }
    }
}

/// What one duration meant to its tracker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Observation {
    /// Iteration 1, ignored.
    Warmup,
    /// Iteration 2, which set `T_expect`.
    Initialized,
    /// Within `α`: the expectation absorbed it.
    Expected,
    /// Beyond `α` but not slow: noted, not learned.
    Drift,
    /// Above `T_expect · (1 + β)`.
    Slow,
}

/// `T_expect` for one node.
#[derive(Clone, Debug, PartialEq)]
pub struct ExpectedTime {
    params: ExpectedTimeParams,
    iteration: u64,
    expect: Option<f64>,
    accepted: u64,
}

impl ExpectedTime {
    pub fn new(params: ExpectedTimeParams) -> Self {
        Self { params, iteration: 0, expect: None, accepted: 0 }
    }

    /// `T_expect`, once iteration 2 has been seen.
    pub fn expected(&self) -> Option<f64> {
        self.expect
    }

    /// Feed `D_i` for the next iteration.
    pub fn observe(&mut self, d: f64) -> Observation {
        self.iteration += 1;
        let Some(t) = self.expect else {
            if self.iteration < 2 {
                return Observation::Warmup;
            }
            self.expect = Some(d);
            self.accepted = 1;
            return Observation::Initialized;
        };
        if (d - t).abs() < self.params.alpha * t {
            self.accepted += 1;
            self.expect = Some(t + (d - t) / self.accepted as f64);
            Observation::Expected
        } else if d > t * (1.0 + self.params.beta) {
            Observation::Slow
        } else {
            Observation::Drift
        }
    }
}

/// One node's timing in one iteration.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeTiming<K> {
    pub node: K,
    /// `T_v`: the node's duration this iteration.
    pub duration: f64,
    /// Whether the node is on this iteration's critical path.
    pub on_critical_path: bool,
    /// `(rank, time)` for the node across its TP/DP group; the largest names the rank.
    pub rank_times: Vec<(u32, f64)>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct SlowNode<K> {
    pub node: K,
    pub duration: f64,
    /// `T_expect` it was judged against.
    pub expected: f64,
    /// `r_max`; `None` if no rank times were given. Ties go to the lowest rank.
    pub slow_rank: Option<u32>,
}

/// Expectations for every node seen, keyed by node.
#[derive(Clone, Debug)]
pub struct SlowNodeDetector<K> {
    params: ExpectedTimeParams,
    nodes: BTreeMap<K, ExpectedTime>,
}

impl<K: Ord + Clone> SlowNodeDetector<K> {
    pub fn new(params: ExpectedTimeParams) -> Self {
        Self { params, nodes: BTreeMap::new() }
    }

    /// One iteration's nodes. Every node's expectation is tracked (a node off the critical
    /// path now may be on it later), but only critical-path nodes are reported, since only
    /// they set the iteration time. Slow nodes come back in key order.
    pub fn observe_iteration(&mut self, nodes: &[NodeTiming<K>]) -> Vec<SlowNode<K>> {
        let mut slow = Vec::new();
        for n in nodes {
            let tracker = self.nodes.entry(n.node.clone()).or_insert_with(|| ExpectedTime::new(self.params));
            let expected = tracker.expected();
            if tracker.observe(n.duration) == Observation::Slow && n.on_critical_path {
                let slow_rank = n.rank_times.iter().min_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0))).map(|r| r.0);
                slow.push(SlowNode {
                    node: n.node.clone(),
                    duration: n.duration,
                    expected: expected.expect("a slow verdict needs an expectation"),
                    slow_rank,
                });
            }
        }
        slow.sort_by(|a, b| a.node.cmp(&b.node));
        slow
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::rng::SplitMix64;

    #[test]
    fn tracker_follows_the_paper_steps() {
        let mut t = ExpectedTime::new(ExpectedTimeParams::default());
        assert_eq!(t.observe(500.0), Observation::Warmup);
        assert_eq!(t.expected(), None);
        assert_eq!(t.observe(100.0), Observation::Initialized);
        assert_eq!(t.observe(102.0), Observation::Expected);
        assert_eq!(t.expected(), Some(101.0));
        assert_eq!(t.observe(120.0), Observation::Drift);
        assert_eq!(t.observe(80.0), Observation::Drift);
        assert_eq!(t.expected(), Some(101.0));
        assert_eq!(t.observe(160.0), Observation::Slow);
        assert_eq!(t.expected(), Some(101.0));
    }

    /// 4 stages x 8 TP ranks, 30 iterations of 1% noise; from iteration 20 rank 3 runs
    /// stage "s2" twice as long. `on_path` picks the stages on the critical path.
    fn run(on_path: &[&str]) -> Vec<(usize, SlowNode<&'static str>)> {
        let mut r = SplitMix64::new(42);
        let mut det = SlowNodeDetector::new(ExpectedTimeParams::default());
        let mut found = Vec::new();
        for it in 0..30 {
            let nodes: Vec<NodeTiming<&str>> = ["s0", "s1", "s2", "s3"]
                .iter()
                .map(|&s| {
                    let rank_times: Vec<(u32, f64)> = (0..8)
                        .map(|rank| {
                            let f = if it >= 20 && s == "s2" && rank == 3 { 2.0 } else { 1.0 };
                            (rank, 10.0 * f * (1.0 + 0.01 * r.normal()))
                        })
                        .collect();
                    // A synchronous group finishes with its slowest member.
                    let duration = rank_times.iter().map(|x| x.1).fold(0.0, f64::max);
                    NodeTiming { node: s, duration, on_critical_path: on_path.contains(&s), rank_times }
                })
                .collect();
            found.extend(det.observe_iteration(&nodes).into_iter().map(|s| (it, s)));
        }
        found
    }

    #[test]
    fn flags_the_planted_slow_rank_on_the_critical_path() {
        let found = run(&["s0", "s2", "s3"]);
        assert_eq!(found.len(), 10, "{found:?}");
        assert!(found.iter().all(|(it, s)| *it >= 20 && s.node == "s2" && s.slow_rank == Some(3)));
        assert!(found.iter().all(|(_, s)| (s.expected / 10.0 - 1.0).abs() < 0.05));
    }

    #[test]
    fn a_slow_node_off_the_critical_path_is_not_reported() {
        assert!(run(&["s0", "s1", "s3"]).is_empty());
    }
}
