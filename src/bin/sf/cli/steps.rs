//! `sf steps`'s arguments and help.

use std::path::PathBuf;

use clap::Args;

pub const LONG_ABOUT: &str = "\
Export the per-rank, per-step stage vectors a job's rank logs hold (from sf_step/sf_stage
markers, NVTX ranges or Python's stagefrontier; with none, the inferred.* phases sf
infers from the NCCL schedule), so they can be taken to pandas, DuckDB or a spreadsheet.

--csv writes the long format sf frontier --csv reads back, one row per step, rank and
stage, steps and ranks ascending, stages in the order the rank recorded them:
  step,rank,stage,seconds,overlap_seconds,wait_seconds,caused_seconds[,device_seconds,spill_seconds]
seconds are the stage's duration on the rank's own clock, as recorded (waits included),
written exactly (the shortest decimal that reads back to the same number);
overlap_seconds, by how much the rank's explicit stages exceeded the step's wall time,
repeats on each row of the step. wait_seconds and caused_seconds are sf frontier's wait
attribution from the NCCL calls: the seconds the rank waited inside collectives it
entered in that stage, and the seconds of other ranks' waiting it caused, charged to that
stage (blank where none was attributed); the rank's own time is seconds - wait_seconds.
The device columns come when the CUDA door sampled steps (blank for a step not sampled).
Stage names holding a comma or a quote are quoted (RFC 4180).
  sf steps JOBDIR --csv | sf frontier --csv /dev/stdin   gives sf frontier JOBDIR's answer

--json prints one object: the stages in order, and per rank its host, local rank and
steps, each with its start (t_begin_ns and the same instant in UTC), wall and overlap time,
seconds per stage by name, and wait_s and caused_s per stage (the CSV's wait columns).

Without either, a table: one row per rank and step, its start in UTC, wall time and each
stage's seconds.

A step counts when all of its parts are held (a step whose oldest part wrapped away is
left out). Exit status: 0, or 1 when the logs cannot be read or hold no step vectors.";

pub const EXAMPLES: &str = "\
Examples:
  sf steps JOBDIR --csv > steps.csv
  sf steps JOBDIR --csv | sf frontier --csv /dev/stdin
  sf steps JOBDIR --json | jq '.ranks[] | {rank, steps: (.steps | length)}'
  sf steps /dev/shm/stagefrontier-$(id -u) --latest --csv > steps.csv   the newest job in the log root
  python -c 'import pandas as pd; print(pd.read_csv(\"steps.csv\").pivot_table(index=\"rank\", columns=\"stage\", values=\"seconds\"))'";

/// How `sf steps` writes the vectors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StepsFormat {
    Human,
    Json,
    Csv,
}

#[derive(Args)]
pub struct StepsArgs {
    /// Job directories (one per node of a multi-node job), or directories holding them
    /// (sf snapshot's DEST, a log root): searched for the logs of one job
    #[arg(value_name = "DIR", required = true)]
    pub dir: Vec<PathBuf>,
    /// Write the long CSV sf frontier --csv reads
    #[arg(long, conflicts_with = "json")]
    csv: bool,
    /// Print JSON instead of a table
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    pub pick: super::PickArgs,
}

impl StepsArgs {
    pub fn format(&self) -> StepsFormat {
        match (self.csv, self.json) {
            (true, _) => StepsFormat::Csv,
            (_, true) => StepsFormat::Json,
            _ => StepsFormat::Human,
        }
    }
}
