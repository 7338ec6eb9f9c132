//! What the labeler needs besides the durations: the caller's facts about the job.

use super::gates::Gates;

/// The residual stage's name in the paper's default taxonomy (Table 10).
pub const DEFAULT_RESIDUAL_STAGE: &str = "step.other_cpu_wall";

/// The forward/loss stage's name in the paper's default taxonomy (Table 10): the stage the
/// device-evidence labels (`forward_*`, Table 12) speak about.
pub const DEFAULT_FORWARD_STAGE: &str = "model.fwd_loss_cpu_wall";

#[derive(Clone, Debug, PartialEq)]
pub struct Context {
    pub gates: Gates,
    /// Stages with the model-fit indicator W_s = 1 (Appendix C): the workload is known to
    /// expose them through synchronization waits. Empty by default, the paper's safe W_s = 0:
    /// high share with low gain is then co_critical, never sync_wait_dependent.
    pub model_fit: Vec<String>,
    /// The stage that absorbs closure error (Appendix A), when the schema has one.
    pub residual_stage: Option<String>,
    /// Microsteps per optimizer step when the job accumulates gradients.
    pub accumulation: Option<u32>,
    /// The forward/loss stage, when the schema has one.
    pub forward_stage: Option<String>,
}

impl Default for Context {
    fn default() -> Context {
        Context {
            gates: Gates::default(),
            model_fit: Vec::new(),
            residual_stage: Some(DEFAULT_RESIDUAL_STAGE.to_string()),
            accumulation: None,
            forward_stage: Some(DEFAULT_FORWARD_STAGE.to_string()),
        }
    }
}
