//! report: the questions `sf` answers, one module per question (ls, dump, steps, frontier,
//! slow, hang, net, kernels, trace, snapshot, the exporter's metrics, `sf run`'s
//! environment plan). Each reads rank logs through `core::log`, calls `analysis`, and
//! returns plain values. Imported by the `sf` binary (and tests); imports only `analysis`
//! and `core`. Never formats for a terminal, never prints, never ends the process.

mod call_window;
#[cfg(test)]
mod device_tests;
pub mod discover;
pub mod dump;
pub mod exporter;
mod exporter_metrics;
pub mod frontier;
mod frontier_groups;
mod frontier_waits;
pub mod hang;
mod hang_history;
pub mod hang_profiler;
mod hang_prometheus;
pub mod inferred;
pub mod jobs;
pub mod kernels;
pub mod ls;
pub mod metric_families;
pub mod moment;
pub mod net;
pub mod observer;
pub mod parallel;
pub mod path;
mod path_calls;
pub mod rank_list;
pub mod read_budget;
pub mod roles;
pub mod run_env;
pub mod slow;
mod slow_waits;
pub mod snapshot;
pub mod stacks;
pub mod stacks_request;
pub(crate) mod step_vectors;
pub mod steps;
#[cfg(test)]
mod test_logs;
pub mod trace;
mod waits;
pub mod wall;

pub use call_window::waits_note;
pub use step_vectors::history_note;

use std::io;

/// Why a command stopped.
#[derive(Debug)]
pub enum Failure {
    /// What went wrong and what to do, worded for the operator as one line.
    Message(String),
    /// Writing the output failed; a reader that closed the pipe (`sf dump f | head`)
    /// ends `sf` quietly.
    Output(io::Error),
}

impl From<io::Error> for Failure {
    fn from(error: io::Error) -> Failure {
        Failure::Output(error)
    }
}
