//! Frontier accounting (StageFrontier, Sec. 3-4 and Appendices A-D): from aligned per-rank
//! stage durations to an exact, additive decomposition of each step's exposed time, the
//! stages and ranks where group-visible delay first appears, the cheap baselines it is
//! compared with, and evidence labels that say when the stage reading needs more proof.
//!
//! Input is a plain R×S duration matrix per step ([`Step`]); a CSV reader ([`csv`]) feeds
//! it today, the rank logs' stage vectors will later. [`Analyzer`] streams steps into
//! windows ([`Window`]) in O(R·S) memory.

mod analyzer;
mod baselines;
mod context;
mod counterfactual;
pub mod csv;
mod device;
mod gates;
mod labels;
mod labels_device;
mod leaders;
mod median;
mod recurrence;
mod role;
mod routing;
mod schema;
mod step;
mod step_view;
mod window;

pub use analyzer::{analyze, Analyzer};
pub use baselines::Baselines;
pub use context::{Context, DEFAULT_FORWARD_STAGE, DEFAULT_RESIDUAL_STAGE};
pub use device::{DeviceSummary, DeviceTotals};
pub use gates::Gates;
pub use labels::{Label, LabelKind};
pub use leaders::{StageLeaders, LEADERS_LISTED};
pub use recurrence::{advances_of, prefixes_into, slack_advances, step_frontier, StepFrontier};
pub use routing::{ranked, route, Routing};
pub use schema::{Schema, SchemaError};
pub use step::{DeviceTime, Step, StepError};
pub use window::{Close, Window};
