//! The labeler's thresholds. Values are Table 13's defaults where the paper gives one; the
//! gates it names without a value (leader switches) and the ones this implementation adds
//! to read its evidence from durations alone (lag, role, denominator floor) say so.

#[derive(Clone, Debug, PartialEq)]
pub struct Gates {
    /// τ_C: the routing set is the smallest leading-share prefix reaching this cumulative share.
    pub route_threshold: f64,
    /// γ_A: a stage label needs the top stage's share above this.
    pub share_dominance: f64,
    /// γ_G: a clipped static gain G_s at or above this is direct exposure.
    pub gain_threshold: f64,
    /// η_A: shares (and window leader-rank credits) this close count as tied.
    pub share_tie: f64,
    /// η_G: gains this close count as tied.
    pub gain_tie: f64,
    /// η_Q, as a fraction of the step's exposed time F_S: ranks whose prefix is within
    /// this of the frontier form the boundary's tie set; a leader is confident and unique
    /// when it is alone in it (max-minus-second gap larger than this). Not valued in the
    /// paper; 0.05 mirrors η_A.
    pub leader_gap: f64,
    /// γ_elig: the switch test applies only when at least this fraction of the window's
    /// steps has a confident unique leader at the top stage. Not valued in the paper.
    pub leader_eligibility: f64,
    /// γ_switch: a window whose top-stage leader rank switches between confident unique
    /// leaders at more than this rate (switches per confident-step transition) is
    /// co-critical across ranks. Not valued in the paper.
    pub switch_rate: f64,
    /// Closure residual share: the residual stage's part of all rank time above this makes
    /// the window telemetry-limited.
    pub closure_residual_max: f64,
    /// Overlap error share: explicit stages exceeding their step's wall time by more than
    /// this share of all rank time (nested or double-counted ordered stages) make the window
    /// telemetry-limited.
    pub overlap_error_max: f64,
    /// Missing ranks tolerated before distributed labels are withheld.
    pub missing_ranks_max: usize,
    /// Window denominator Σ_t F_{t,S} below this (seconds) gives raw advances only: no
    /// shares, routing set or stage labels (Sec. 3's denominator floor).
    pub min_denominator_s: f64,
    /// likely_sync_wait needs the lag to grow at the top stage by at least this share of
    /// the exposed time: Σ_t ΔL_{t,s1} / Σ_t F_{t,S}, the signature of a few late ranks
    /// the others then wait for.
    pub lag_share: f64,
    /// A rank's window-mean stage profile deviates when its L1 distance to the cohort's
    /// median profile exceeds this fraction of the median rank's mean step total.
    pub role_deviation: f64,
    /// role_aware_needed when at least this fraction of the ranks deviates (and at least
    /// two do): one or two stragglers are a finding, a quarter of the ranks is a role.
    pub role_min_fraction: f64,
    /// Fewer ranks than this cannot tell a group from a straggler: no role label.
    pub role_min_ranks: usize,
    /// Event-ready ratio (Table 13, >= 0.8): device labels need the forward stage sampled
    /// in at least this fraction of the window's rank-steps (of the ranks judged); below
    /// it, forward_event_scope_limited.
    pub event_ready_ratio: f64,
    /// Minimum event samples (Table 13, >= 5): fewer sampled forward stages, no device label.
    pub min_event_samples: u64,
    /// Device forward time is high when it is at least this fraction of the CPU-wall
    /// forward time of the same rank-steps. Not valued in the paper.
    pub device_high: f64,
    /// ...and low below this fraction. Not valued in the paper.
    pub device_low: f64,
    /// forward_spillover_suspected needs at least this fraction of the forward device time
    /// to run after forward ended on the host. Not valued in the paper.
    pub spill_high: f64,
}

impl Default for Gates {
    fn default() -> Gates {
        Gates {
            route_threshold: 0.80,
            share_dominance: 0.4,
            gain_threshold: 0.1,
            share_tie: 0.05,
            gain_tie: 0.05,
            leader_gap: 0.05,
            leader_eligibility: 0.5,
            switch_rate: 0.5,
            closure_residual_max: 0.05,
            overlap_error_max: 0.01,
            missing_ranks_max: 0,
            min_denominator_s: 1e-3,
            lag_share: 0.1,
            role_deviation: 0.25,
            role_min_fraction: 0.25,
            role_min_ranks: 4,
            event_ready_ratio: 0.8,
            min_event_samples: 5,
            device_high: 0.5,
            device_low: 0.2,
            spill_high: 0.5,
        }
    }
}
