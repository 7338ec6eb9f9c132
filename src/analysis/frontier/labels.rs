//! The deterministic labeler (Appendix C) for the labels of Table 12 whose evidence lives
//! in stage durations. Labels are evidence axes, not a confidence ladder: a window can be
//! accounted exactly, route compactly, and still be co-critical.
//!
//! The forward_* labels read device evidence (`Window::device`); `labels_device` decides them.

use std::collections::BTreeSet;

use super::gates::Gates;
use super::labels_device;
use super::routing::ranked;
use super::window::Window;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LabelKind {
    FrontierAccounting,
    TelemetryLimited,
    RoleAwareNeeded,
    GradientAccumulationAmbiguous,
    DirectExposure,
    SyncWaitDependent,
    LikelySyncWait,
    CoCritical,
    ForwardDeviceSupported,
    ForwardHostOverheadSuspected,
    ForwardSpilloverSuspected,
    ForwardEventScopeLimited,
}

impl LabelKind {
    /// A strong label: it names a bottleneck stage (the paper's stage labels behind the
    /// share-dominance gate). No healthy run may get one (Sec. 6: 0 of 105 no-fault rows).
    pub fn is_strong(self) -> bool {
        matches!(self, LabelKind::DirectExposure | LabelKind::SyncWaitDependent | LabelKind::LikelySyncWait)
    }

    /// The paper's label name.
    pub fn name(self) -> &'static str {
        match self {
            LabelKind::FrontierAccounting => "frontier_accounting",
            LabelKind::TelemetryLimited => "telemetry_limited",
            LabelKind::RoleAwareNeeded => "role_aware_needed",
            LabelKind::GradientAccumulationAmbiguous => "gradient_accumulation_ambiguous",
            LabelKind::DirectExposure => "direct_exposure",
            LabelKind::SyncWaitDependent => "sync_wait_dependent",
            LabelKind::LikelySyncWait => "likely_sync_wait",
            LabelKind::CoCritical => "co_critical",
            LabelKind::ForwardDeviceSupported => "forward_device_supported",
            LabelKind::ForwardHostOverheadSuspected => "forward_host_overhead_suspected",
            LabelKind::ForwardSpilloverSuspected => "forward_spillover_suspected",
            LabelKind::ForwardEventScopeLimited => "forward_event_scope_limited",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Label {
    pub kind: LabelKind,
    /// The evidence and the gate it passed, in words.
    pub reason: String,
}

/// Everything a window's labels are decided from.
pub struct Evidence<'a> {
    /// The window's accounting and evidence (its own labels are not read).
    pub window: &'a Window,
    /// W_s per stage of the window's schema.
    pub model_fit: &'a [bool],
    /// Microsteps per optimizer step, when the caller knows the job accumulates.
    pub accumulation: Option<u32>,
    /// The forward/loss stage's index in the window's schema, when it has one.
    pub forward_stage: Option<usize>,
    pub gates: &'a Gates,
}

/// The labels, in a fixed order, and the co-critical ambiguity set.
pub fn label(e: &Evidence) -> (Vec<Label>, Vec<usize>) {
    let w = e.window;
    let mut labels = vec![Label { kind: LabelKind::FrontierAccounting, reason: accounting_reason(w) }];
    let mut push = |kind, reason: Option<String>| {
        if let Some(reason) = reason {
            labels.push(Label { kind, reason });
        }
    };
    let telemetry = telemetry_reasons(w, e.gates);
    let limited = !telemetry.is_empty();
    push(LabelKind::TelemetryLimited, limited.then(|| telemetry.join("; ")));
    let role = role_reason(w, e.gates);
    let roles_differ = role.is_some();
    push(LabelKind::RoleAwareNeeded, role);
    push(LabelKind::GradientAccumulationAmbiguous, accumulation_reason(w, e.accumulation));
    // Device labels speak about the forward stage's routing: they need shares and complete
    // telemetry, but not comparable ranks (one GPU has a forward stage too).
    if !limited {
        for (kind, reason) in labels_device::device_labels(w, e.forward_stage, e.gates) {
            push(kind, Some(reason));
        }
    }
    // Stage labels compare ranks: they need two or more, complete telemetry, and ranks
    // doing comparable work.
    if w.ranks < 2 || limited || roles_differ {
        return (labels, Vec::new());
    }
    let stage = StageLabels::new(e);
    push(LabelKind::DirectExposure, stage.direct_exposure());
    push(LabelKind::SyncWaitDependent, stage.sync_wait_dependent());
    push(LabelKind::LikelySyncWait, stage.likely_sync_wait());
    let (co_reasons, co_stages) = stage.co_critical();
    push(LabelKind::CoCritical, (!co_reasons.is_empty()).then(|| co_reasons.join("; ")));
    (labels, co_stages)
}

fn accounting_reason(w: &Window) -> String {
    let steps = if w.steps == 1 { "1 step".to_string() } else { format!("{} steps", w.steps) };
    let mut reason = format!("stage advances sum to the exposed time, {:.6} s over {steps}", w.exposed_s);
    if w.ranks == 1 {
        reason += "; a single rank: the frontier is its own stage vector, with no cross-rank evidence";
    }
    reason
}

fn telemetry_reasons(w: &Window, g: &Gates) -> Vec<String> {
    let mut reasons = Vec::new();
    if w.missing_ranks.len() > g.missing_ranks_max {
        reasons.push(format!(
            "{} of a world of {} missing or incomplete ({}): the frontier covers the present ranks only",
            plural(w.missing_ranks.len(), "rank"),
            w.world,
            list(&w.missing_ranks)
        ));
    }
    if w.shares.is_none() {
        reasons.push(format!(
            "the window exposes {:.6} s, under the {} s floor: raw advances only, no shares",
            w.exposed_s, g.min_denominator_s
        ));
    }
    if let Some(share) = w.residual_share.filter(|&s| s > g.closure_residual_max) {
        reasons.push(format!(
            "the residual stage holds {share:.3} of all rank time (gate {}): the explicit stages do not close the step",
            g.closure_residual_max
        ));
    }
    if let Some(share) = w.overlap_share.filter(|&s| s > g.overlap_error_max) {
        reasons.push(format!(
            "explicit stages exceed their steps' wall time by {share:.3} of all rank time (gate {}): nested or double-counted ordered stages",
            g.overlap_error_max
        ));
    }
    reasons
}

fn role_reason(w: &Window, g: &Gates) -> Option<String> {
    let n = w.deviating_ranks.len();
    if w.ranks < g.role_min_ranks || n < 2 || (n as f64) < g.role_min_fraction * w.ranks as f64 {
        return None;
    }
    Some(format!(
        "{n} of {} ranks ({}) have stage profiles more than {} of a typical step from the cohort's: \
         ranks seem to play different roles; analyze each role's ranks apart",
        w.ranks,
        list(&w.deviating_ranks),
        g.role_deviation
    ))
}

fn accumulation_reason(w: &Window, accumulation: Option<u32>) -> Option<String> {
    let m = accumulation.filter(|&m| m > 1)?;
    let have = w.schema.microsteps();
    if have >= m as usize {
        return None;
    }
    let carried = match have {
        0 => "no microstep index".to_string(),
        n => format!("only {} microstep indices", n),
    };
    Some(format!(
        "the job accumulates {m} microsteps per step but the stages carry {carried}: data and backward waits of \
         different microsteps are mixed; record accumulation-indexed stages (data@0, backward@0, data@1, ...)"
    ))
}

/// The stage-level evidence of one window with shares (guaranteed by the caller).
struct StageLabels<'a> {
    e: &'a Evidence<'a>,
    shares: &'a [f64],
    gains: &'a [f64],
    top1: usize,
    dominant: bool,
}

impl<'a> StageLabels<'a> {
    fn new(e: &'a Evidence<'a>) -> StageLabels<'a> {
        let w = e.window;
        let shares = w.shares.as_deref().expect("stage labels need shares");
        let top1 = w.routing.as_ref().expect("shares come with routing").top1;
        StageLabels {
            e,
            shares,
            gains: w.gains.as_deref().expect("shares come with gains"),
            top1,
            dominant: shares[top1] > e.gates.share_dominance,
        }
    }

    fn name(&self, stage: usize) -> &str {
        self.e.window.schema.name(stage)
    }

    fn low_gain(&self) -> bool {
        self.dominant && self.gains[self.top1] < self.e.gates.gain_threshold
    }

    fn lead(&self) -> String {
        format!(
            "{} leads with share {:.3} (> {})",
            self.name(self.top1),
            self.shares[self.top1],
            self.e.gates.share_dominance
        )
    }

    /// Raw duration, spread and the clipped gain agree with the frontier stage.
    fn direct_exposure(&self) -> Option<String> {
        let (g, s1) = (self.e.gates, self.top1);
        if !self.dominant || self.gains[s1] < g.gain_threshold {
            return None;
        }
        let b = &self.e.window.baselines;
        let agrees = |values: &[f64]| {
            let total: f64 = values.iter().sum();
            let best = values.iter().copied().fold(0.0, f64::max);
            total > 0.0 && values[s1] >= best - g.share_tie * total
        };
        if !(agrees(&b.per_stage_max_s) && agrees(&b.rank_spread_s)) {
            return None;
        }
        Some(format!(
            "{}; clipping it to the cohort median removes {:.3} of exposed time (>= {}); per-stage max and rank \
             spread rank it first too",
            self.lead(),
            self.gains[s1],
            g.gain_threshold
        ))
    }

    fn sync_wait_dependent(&self) -> Option<String> {
        if !(self.low_gain() && self.e.model_fit[self.top1]) {
            return None;
        }
        Some(format!(
            "{}, but clipping it removes only {:.3} of exposed time (< {}): its exposure rests on other ranks \
             waiting for it, which the model-fit indicator for {} asserts",
            self.lead(),
            self.gains[self.top1],
            self.e.gates.gain_threshold,
            self.name(self.top1)
        ))
    }

    /// Model fit plus the lag signature of late ranks: the frontier's lead over the median
    /// rank grows at the top stage, and that stage leads by a margin.
    fn likely_sync_wait(&self) -> Option<String> {
        let (w, g, s1) = (self.e.window, self.e.gates, self.top1);
        if !(self.dominant && self.e.model_fit[s1]) {
            return None;
        }
        let runner_up = ranked(self.shares).get(1).map_or(0.0, |&s| self.shares[s]);
        let margin = self.shares[s1] - runner_up;
        let lag_share = w.delta_lag_s[s1] * w.steps as f64 / w.exposed_s;
        if margin <= g.share_tie || lag_share < g.lag_share {
            return None;
        }
        Some(format!(
            "{} by a margin of {margin:.3}, and the frontier's lead over the median rank grows there by {lag_share:.3} \
             of exposed time (>= {}): late ranks the others wait for, as the model-fit indicator for {} says",
            self.lead(),
            g.lag_share,
            self.name(s1)
        ))
    }

    fn co_critical(&self) -> (Vec<String>, Vec<usize>) {
        let (w, g, s1) = (self.e.window, self.e.gates, self.top1);
        let mut reasons = Vec::new();
        let mut stages = BTreeSet::new();

        let tied: Vec<usize> = (0..self.shares.len())
            .filter(|&s| self.shares[s] > 0.0 && self.shares[s] >= self.shares[s1] - g.share_tie)
            .collect();
        if tied.len() > 1 {
            reasons.push(format!("{} have shares within {} of each other", self.names(&tied), g.share_tie));
            stages.extend(&tied);
        }

        let best_gain = self.gains.iter().copied().fold(0.0, f64::max);
        let gain_tied: Vec<usize> = (0..self.gains.len())
            .filter(|&s| self.gains[s] >= g.gain_threshold && self.gains[s] >= best_gain - g.gain_tie)
            .collect();
        if gain_tied.len() > 1 {
            reasons.push(format!("clipping {} gains within {} of each other", self.names(&gain_tied), g.gain_tie));
            stages.extend(&gain_tied);
        }

        if self.low_gain() && !self.e.model_fit[s1] {
            if let Some(after) = w.clipped_top1_advances_s.as_deref() {
                let total: f64 = after.iter().sum();
                let best = after.iter().copied().fold(0.0, f64::max);
                let next: Vec<usize> = (0..after.len())
                    .filter(|&s| s != s1 && total > 0.0 && after[s] >= best - g.share_tie * total)
                    .collect();
                if !next.is_empty() {
                    reasons.push(format!(
                        "{}, but clipping it removes only {:.3} of exposed time (< {}) and {} then leads: with no \
                         model-fit indicator for {} the stall and that time are as consistent with a wait as with \
                         independent work",
                        self.lead(),
                        self.gains[s1],
                        g.gain_threshold,
                        self.names(&next),
                        self.name(s1)
                    ));
                    stages.insert(s1);
                    stages.extend(next);
                }
            }
        }

        let leaders = &w.leaders[s1];
        let confident = leaders.confident_steps;
        if self.dominant && confident >= 2 && confident as f64 >= g.leader_eligibility * w.steps as f64 {
            let rate = leaders.switches as f64 / (confident - 1) as f64;
            if rate > g.switch_rate {
                reasons.push(format!(
                    "the rank leading {} changed in {} of {} transitions between confident unique leaders \
                     (> {}): several ranks can remain the bottleneck",
                    self.name(s1),
                    leaders.switches,
                    confident - 1,
                    g.switch_rate
                ));
                stages.insert(s1);
            }
        }
        (reasons, stages.into_iter().collect())
    }

    fn names(&self, stages: &[usize]) -> String {
        let names: Vec<&str> = stages.iter().map(|&s| self.name(s)).collect();
        match names.as_slice() {
            [one] => one.to_string(),
            [init @ .., last] => format!("{} and {last}", init.join(", ")),
            [] => String::new(),
        }
    }
}

fn plural(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

/// At most 16 ranks by number, then how many more.
fn list(ranks: &[u32]) -> String {
    let mut named: Vec<String> = ranks.iter().take(16).map(u32::to_string).collect();
    if ranks.len() > 16 {
        named.push(format!("and {} more", ranks.len() - 16));
    }
    named.join(", ")
}
