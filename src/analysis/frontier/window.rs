//! A window's running sums, and what it reports once closed.

use std::sync::Arc;

use super::baselines::{BaselineAcc, Baselines};
use super::context::Context;
use super::counterfactual::CounterfactualAcc;
use super::device::{DeviceAcc, DeviceSummary};
use super::labels::{self, Evidence, Label};
use super::leaders::{LeaderAcc, StageLeaders};
use super::role::RoleAcc;
use super::routing::{route, Routing};
use super::schema::Schema;
use super::step::{DeviceTime, Step};
use super::step_view::StepView;

/// Why a window ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Close {
    /// It held the requested number of steps.
    Length,
    /// The next step had another stage list.
    SchemaChange,
    /// The next step came from a world of another size.
    WorldChange,
    /// The next step had other ranks missing (or none where this window had some).
    RanksChange,
    /// The input ended.
    End,
}

impl Close {
    pub fn name(self) -> &'static str {
        match self {
            Close::Length => "length",
            Close::SchemaChange => "schema_change",
            Close::WorldChange => "world_change",
            Close::RanksChange => "ranks_change",
            Close::End => "end",
        }
    }
}

/// One window's accounting, localization evidence, baselines and labels. Vectors indexed
/// by stage follow `schema`.
#[derive(Clone, Debug, PartialEq)]
pub struct Window {
    pub schema: Arc<Schema>,
    pub first_step: u64,
    pub last_step: u64,
    pub steps: usize,
    /// Ranks present (R), and the world they belong to.
    pub ranks: usize,
    pub world: usize,
    pub missing_ranks: Vec<u32>,
    pub closed_by: Close,
    /// Σ_t F_{t,S}: the window's exposed time.
    pub exposed_s: f64,
    /// Σ_t a_{t,s}; they sum to `exposed_s` (Theorem 1).
    pub advances_s: Vec<f64>,
    /// A_s (eq. 2); `None` when `exposed_s` is below the denominator floor.
    pub shares: Option<Vec<f64>>,
    pub routing: Option<Routing>,
    /// G_s (eq. 4) against the cohort-median baseline; `None` with `shares`.
    pub gains: Option<Vec<f64>>,
    /// Σ_t a_{t,j} once the top-1 stage is clipped to the cohort median: where exposed time
    /// goes if that stage is fixed by itself.
    pub clipped_top1_advances_s: Option<Vec<f64>>,
    pub leaders: Vec<StageLeaders>,
    /// Window means of L_s = F_s − median_r P_{r,s} and of its increment ΔL_s = L_s − L_{s−1}.
    pub lag_s: Vec<f64>,
    pub delta_lag_s: Vec<f64>,
    /// Window mean of the max-minus-second prefix gap; `None` for a single rank.
    pub gap_s: Option<Vec<f64>>,
    /// Ranks whose window stage profile stands apart from the cohort's (role evidence).
    pub deviating_ranks: Vec<u32>,
    /// The residual stage's share of all rank time, when the schema has that stage.
    pub residual_share: Option<f64>,
    /// Overlap error (explicit stages exceeding the step's wall time) as a share of all
    /// rank time, when the source reports it.
    pub overlap_share: Option<f64>,
    /// Device time per rank and stage over the sampled steps; `None` without device evidence.
    pub device: Option<DeviceSummary>,
    pub baselines: Baselines,
    pub labels: Vec<Label>,
    /// The ambiguity set E_amb when `co_critical` is among the labels, in schema order.
    pub co_critical_stages: Vec<usize>,
}

pub(super) struct WindowAcc {
    schema: Arc<Schema>,
    world: usize,
    ranks: Vec<u32>,
    missing: Vec<u32>,
    first_step: u64,
    last_step: u64,
    steps: usize,
    exposed: f64,
    advances: Vec<f64>,
    lag: Vec<f64>,
    gap: Vec<f64>,
    leaders: LeaderAcc,
    counterfactual: CounterfactualAcc,
    baselines: BaselineAcc,
    role: RoleAcc,
    /// Σ overlap seconds, when the source reports overlap.
    overlap: Option<f64>,
    device: DeviceAcc,
}

impl WindowAcc {
    pub fn new(step: &Step, context: &Context) -> WindowAcc {
        let (ranks, stages) = (step.ranks.len(), step.schema.len());
        WindowAcc {
            schema: Arc::clone(step.schema),
            world: step.world,
            ranks: step.ranks.to_vec(),
            missing: step.missing.to_vec(),
            first_step: step.index,
            last_step: step.index,
            steps: 0,
            exposed: 0.0,
            advances: vec![0.0; stages],
            lag: vec![0.0; stages],
            gap: vec![0.0; stages],
            leaders: LeaderAcc::new(ranks, stages, context.gates.leader_gap),
            counterfactual: CounterfactualAcc::new(stages),
            baselines: BaselineAcc::new(ranks, stages),
            role: RoleAcc::new(ranks, stages),
            overlap: None,
            device: DeviceAcc::new(stages),
        }
    }

    pub fn steps(&self) -> usize {
        self.steps
    }

    /// Why `step` cannot join this window, if it cannot.
    pub fn closed_by(&self, step: &Step) -> Option<Close> {
        if !(Arc::ptr_eq(&self.schema, step.schema) || *self.schema == **step.schema) {
            Some(Close::SchemaChange)
        } else if self.world != step.world {
            Some(Close::WorldChange)
        } else if self.ranks != step.ranks {
            // Same world, same ranks present: the same ranks missing (`Step::missing`),
            // without comparing a list as long as the world at every step.
            Some(Close::RanksChange)
        } else {
            None
        }
    }

    pub fn add(&mut self, index: u64, v: &StepView, overlap_s: &[f64], device: &[Option<DeviceTime>]) {
        self.device.add(v.durations, device);
        if !overlap_s.is_empty() {
            *self.overlap.get_or_insert(0.0) += overlap_s.iter().sum::<f64>();
        }
        self.last_step = index;
        self.steps += 1;
        self.exposed += v.frontier[v.stages - 1];
        for s in 0..v.stages {
            self.advances[s] += v.advances[s];
            self.lag[s] += v.frontier[s] - v.median_prefixes[s];
            self.gap[s] += v.frontier[s] - v.second[s];
        }
        self.leaders.add(v);
        self.counterfactual.add(v);
        self.baselines.add(v);
        self.role.add(v);
    }

    pub fn finish(self, closed_by: Close, context: &Context) -> Window {
        let gates = &context.gates;
        let steps = self.steps as f64;
        let reported = self.exposed >= gates.min_denominator_s;
        let shares: Option<Vec<f64>> = reported.then(|| self.advances.iter().map(|a| a / self.exposed).collect());
        let routing = shares.as_ref().map(|shares| route(shares, gates.route_threshold));
        let counterfactual = self.counterfactual.finish();
        let gains = reported.then(|| (0..self.schema.len()).map(|s| counterfactual.gain(s, self.exposed)).collect());
        let clipped_top1_advances_s = routing.as_ref().map(|r| counterfactual.advances_after_clipping(r.top1));
        let lag_s: Vec<f64> = self.lag.iter().map(|l| l / steps).collect();
        let mut previous = 0.0;
        let delta_lag_s = lag_s
            .iter()
            .map(|&l| {
                let d = l - previous;
                previous = l;
                d
            })
            .collect();
        let rank_time = self.baselines.rank_time();
        let residual_share = context.residual_stage.as_deref().and_then(|name| self.schema.index(name)).map(|s| {
            let total: f64 = rank_time.iter().sum();
            if total > 0.0 {
                rank_time[s] / total
            } else {
                0.0
            }
        });
        let total_rank_time: f64 = rank_time.iter().sum();
        let overlap_share = self.overlap.map(|o| if total_rank_time > 0.0 { o / total_rank_time } else { 0.0 });
        let mut window = Window {
            first_step: self.first_step,
            last_step: self.last_step,
            steps: self.steps,
            ranks: self.ranks.len(),
            world: self.world,
            missing_ranks: self.missing.clone(),
            closed_by,
            exposed_s: self.exposed,
            advances_s: self.advances.clone(),
            shares,
            routing,
            gains,
            clipped_top1_advances_s,
            leaders: self.leaders.finish(&self.ranks, gates.share_tie),
            lag_s,
            delta_lag_s,
            gap_s: (self.ranks.len() > 1).then(|| self.gap.iter().map(|g| g / steps).collect()),
            deviating_ranks: self.role.deviating(&self.ranks, gates.role_deviation),
            residual_share,
            overlap_share,
            device: self.device.finish(&self.ranks),
            baselines: self.baselines.finish(&self.ranks),
            labels: Vec::new(),
            co_critical_stages: Vec::new(),
            schema: self.schema,
        };
        let model_fit: Vec<bool> =
            window.schema.stages().iter().map(|name| context.model_fit.iter().any(|m| m == name)).collect();
        let (labels, co_critical_stages) = labels::label(&Evidence {
            window: &window,
            model_fit: &model_fit,
            accumulation: context.accumulation,
            forward_stage: context.forward_stage.as_deref().and_then(|name| window.schema.index(name)),
            gates,
        });
        window.labels = labels;
        window.co_critical_stages = co_critical_stages;
        window
    }
}
