//! The command line, parsed into plain `Command` values. clap stays in this file: the rest
//! of `sf` sees only `Command`, and tests parse argument vectors without running anything.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Human,
    Json,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// One row per rank log found at `path` (a job directory or one log).
    Ls { path: PathBuf, format: Format },
    /// Every record one log holds.
    Dump { file: PathBuf, format: Format },
    /// Frontier accounting over a stage-duration CSV.
    Frontier { options: FrontierOptions, format: Format },
}

/// What `sf frontier` analyzes and how.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FrontierOptions {
    pub source: FrontierSource,
    /// Stage order; `None`: first appearance in the file.
    pub stages: Option<Vec<String>>,
    /// Steps per window; `None`: a window runs until the input changes.
    pub window: Option<usize>,
    pub residual: Option<String>,
    /// Stages with the model-fit indicator W_s = 1.
    pub sync_wait: Vec<String>,
    pub accumulation: Option<u32>,
}

/// Where `sf frontier` reads stage durations from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FrontierSource {
    /// A job directory: the rank logs' step vectors.
    Logs(PathBuf),
    /// A long-format CSV.
    Csv(PathBuf),
}

/// Parses `args`, program name first. Help, version and usage errors come back as the
/// clap error, which prints itself with the right exit status.
pub fn parse_from<I, T>(args: I) -> Result<Command, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let cli = Cli::try_parse_from(args)?;
    Ok(match cli.command {
        Sub::Ls(a) => Command::Ls { path: a.path, format: a.output.format() },
        Sub::Dump(a) => Command::Dump { file: a.file, format: a.output.format() },
        Sub::Frontier(a) => Command::Frontier { format: a.output.format(), options: a.options() },
    })
}

/// `--version` also names the log format this `sf` reads, so a version mismatch reported
/// by a read can be matched with the right build. A unit test keeps the numbers honest.
const LONG_VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (log format 1, record schema 3)");

const ABOUT: &str = "Read the rank logs libstagefrontier.so records during a training job, kept in
$SF_LOG_DIR/<job id>/ (default /dev/shm/stagefrontier-<uid>/<job id>/)";

const LONG_ABOUT: &str = "\
Read the rank logs that libstagefrontier.so records during a training job: while it runs,
after it ended, or after it was killed.

Each rank writes one log, rank-NNNNN.sflog (pid-<pid>.sflog for a process with no rank
identity), into $SF_LOG_DIR/<job id>/, by default /dev/shm/stagefrontier-<uid>/<job id>/,
<uid> being the job's user id (`id -u`). The job id is SF_JOB_ID, else the launcher's
(TORCHELASTIC_RUN_ID, SLURM_JOB_ID, Open MPI's job id), else \"default\".";

const EXAMPLES: &str = "\
Examples:
  sf ls /dev/shm/stagefrontier-$(id -u)/default      which ranks logged, are they alive, is anything lost
  sf ls JOBDIR --json | jq '.ranks[] | select(.liveness != \"live\")'
  sf dump JOBDIR/rank-00003.sflog | less             every record rank 3 still holds
  sf dump JOBDIR/rank-00003.sflog --json > rank3.jsonl";

const LS_LONG_ABOUT: &str = "\
List the rank logs of a job: one row per rank, then which ranks of the world have no log
and whether any history was lost.

DIR is a job directory, $SF_LOG_DIR/<job id>/, by default
/dev/shm/stagefrontier-<uid>/<job id>/, or a single log file. Files not ending in .sflog,
such as the .sflog.prev kept from an earlier attempt of the job, are ignored.

LIVENESS: live (heartbeat under 1 s old), exited (ended through exit(), fully flushed),
dead (heartbeat stale, process gone), stalled (heartbeat stale, process still there:
stopped or wedged), disabled (recording stopped after an internal error). A log from
another host is judged by wall-clock time and cannot tell dead from stalled.
HELD: records still in the log; WRAPPED: older records overwritten (SF_LOG_RECORDS keeps
more); MISSING: records torn by a kill or overwritten while read; DROPPED: events the
library had to drop because its ring was full (SF_RING_EVENTS holds more).

Exit status: 0, or 1 when a log cannot be read or DIR holds none.";

const LS_EXAMPLES: &str = "\
Examples:
  sf ls /dev/shm/stagefrontier-$(id -u)/default
  sf ls /dev/shm/stagefrontier-$(id -u)/12345/rank-00000.sflog
  sf ls JOBDIR --json | jq '.missing_ranks'";

const DUMP_LONG_ABOUT: &str = "\
Print every record one rank log still holds, oldest first, then a summary of what the scan
found on stderr (records held, lost to wraparound, missing, invalid slots).

Human output has one aligned line per record: its sequence number, TIME_S (seconds since
the rank's library started), kind, NCCL operation, communicator id, the call's sequence
number in its communicator, element count, data type, bytes, reduction, duration in
microseconds and result. --json prints JSON Lines: each record's fields, with
dtype_name, redop_name and result_name added to NCCL calls.

Logs live in $SF_LOG_DIR/<job id>/rank-NNNNN.sflog, by default
/dev/shm/stagefrontier-<uid>/<job id>/.";

const DUMP_EXAMPLES: &str = "\
Examples:
  sf dump /dev/shm/stagefrontier-$(id -u)/default/rank-00000.sflog | less
  sf dump rank-00000.sflog --json | jq -c 'select(.kind == \"nccl_call\" and .result != 0)'";

const FRONTIER_LONG_ABOUT: &str = "\
Frontier accounting (StageFrontier) over per-rank stage durations: where each step's
exposed time goes, and which stage and rank to aim a profiler at.

Each rank times an ordered list of stages (data, forward, backward, ...) on its own clock.
At each stage boundary the frontier is the largest cumulative time any rank has reached.
A step's EXPOSED TIME is the frontier after the last stage: the slowest rank's step total.
A stage's ADVANCE is how far the frontier moved during that stage. Advances add up exactly
to the exposed time, and the time other ranks spend waiting in a later stage for an
earlier straggler is charged once, to the stage where the straggler fell behind. Only
durations and step numbers are compared: no clock synchronization is needed.

Example: ranks with (data, fwd, bwd) = (6.0, 1.0, 1.2), (1.0, 1.0, 6.2) and
(1.1, 1.0, 6.0) s. Rank 0 stalls 5 s in data; the others wait for it in backward.
Exposed time 8.2 s = advances data 6.0 + fwd 1.0 + bwd 1.2, while per-stage maxima
add up to 13.2 s because they count that wait twice.

DIR is a job directory: its rank logs' step vectors (from sf_step/sf_stage markers, NVTX
ranges or the Python helper), aligned by step index; a step a rank did not complete
counts that rank missing. --csv FILE instead has the header step,rank,stage,seconds and
one row per step, rank and stage.
Every rank the file names is expected at every step: a step lacking one, or bringing
other stages, closes the current window, and a window with missing ranks is
telemetry_limited.

Per window: exposed time; each stage's advance and SHARE of exposed time; the routing
set (fewest stages whose shares reach 0.80), top-1 and top-2; GAIN, the share of exposed
time removed by clipping a stage to the ranks' median; the ranks leading each stage;
the baselines (per-stage max and average, rank spread, slowest rank, lowest rank) side
by side; and labels with their reasons (frontier_accounting, direct_exposure,
sync_wait_dependent, likely_sync_wait, co_critical, role_aware_needed,
telemetry_limited, gradient_accumulation_ambiguous).

Exit status: 0, or 2 when the input cannot be read, is malformed, or has no steps.";

const FRONTIER_EXAMPLES: &str = "\
Examples:
  sf frontier --csv stages.csv
  sf frontier --csv stages.csv --stages data,fwd,bwd,optim --window 100
  sf frontier --csv stages.csv --sync-wait data --json | jq '.windows[] | {top2, leader_ranks, labels}'";

#[derive(Parser)]
#[command(
    name = "sf",
    version = LONG_VERSION,
    about = ABOUT,
    long_about = LONG_ABOUT,
    after_help = EXAMPLES,
    arg_required_else_help = true
)]
struct Cli {
    #[command(subcommand)]
    command: Sub,
}

#[derive(Subcommand)]
enum Sub {
    /// List a job's rank logs: liveness, records held and lost, missing ranks
    #[command(long_about = LS_LONG_ABOUT, after_help = LS_EXAMPLES)]
    Ls(LsArgs),
    /// Print every record a rank log holds, oldest first
    #[command(long_about = DUMP_LONG_ABOUT, after_help = DUMP_EXAMPLES)]
    Dump(DumpArgs),
    /// Frontier accounting of per-rank stage durations: exposed time, routing, labels
    #[command(long_about = FRONTIER_LONG_ABOUT, after_help = FRONTIER_EXAMPLES)]
    Frontier(FrontierArgs),
}

#[derive(Args)]
struct LsArgs {
    /// Job directory holding rank-*.sflog files, or one log file
    #[arg(value_name = "DIR")]
    path: PathBuf,
    #[command(flatten)]
    output: OutputArgs,
}

#[derive(Args)]
struct DumpArgs {
    /// One rank log, e.g. JOBDIR/rank-00000.sflog
    #[arg(value_name = "FILE")]
    file: PathBuf,
    #[command(flatten)]
    output: OutputArgs,
}

/// Logs carry no stage vectors yet, so the CSV is the only input; a job directory
/// argument comes when they do.
#[derive(Args)]
struct FrontierArgs {
    /// Job directory holding rank-NNNNN.sflog files with stage vectors
    #[arg(value_name = "DIR", required_unless_present = "csv", conflicts_with = "csv")]
    dir: Option<PathBuf>,
    /// CSV with the header step,rank,stage,seconds: one row per step, rank and stage
    #[arg(long, value_name = "FILE")]
    csv: Option<PathBuf>,
    /// Stage order, comma-separated (default: order of first appearance); rows naming
    /// another stage are an error
    #[arg(long, value_name = "A,B,...", value_delimiter = ',')]
    stages: Option<Vec<String>>,
    /// Close each window after N steps (default: a window lasts until the ranks or stages change)
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    window: Option<u32>,
    /// The residual stage absorbing time no other stage covers [default: step.other_cpu_wall]
    #[arg(long, value_name = "STAGE")]
    residual: Option<String>,
    /// Stages the workload is known to expose through synchronization waits (the paper's
    /// model-fit indicator); enables sync_wait_dependent and likely_sync_wait for them
    #[arg(long, value_name = "A,B,...", value_delimiter = ',')]
    sync_wait: Vec<String>,
    /// Microsteps per optimizer step when the job accumulates gradients
    #[arg(long, value_name = "M", value_parser = clap::value_parser!(u32).range(1..))]
    accumulation: Option<u32>,
    #[command(flatten)]
    output: OutputArgs,
}

impl FrontierArgs {
    fn options(self) -> FrontierOptions {
        let trim = |names: Vec<String>| names.into_iter().map(|n| n.trim().to_string()).collect::<Vec<_>>();
        // clap guarantees exactly one of the two.
        let source = match self.csv {
            Some(csv) => FrontierSource::Csv(csv),
            None => FrontierSource::Logs(self.dir.unwrap_or_default()),
        };
        FrontierOptions {
            source,
            stages: self.stages.map(trim),
            window: self.window.map(|n| n as usize),
            residual: self.residual,
            sync_wait: trim(self.sync_wait),
            accumulation: self.accumulation,
        }
    }
}

#[derive(Args)]
struct OutputArgs {
    /// Print JSON instead of a table
    #[arg(long)]
    json: bool,
}

impl OutputArgs {
    fn format(&self) -> Format {
        if self.json {
            Format::Json
        } else {
            Format::Human
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::error::ErrorKind;

    fn parse(args: &[&str]) -> Result<Command, ErrorKind> {
        parse_from(args).map_err(|e| e.kind())
    }

    #[test]
    fn ls_and_dump_with_and_without_json() {
        assert_eq!(parse(&["sf", "ls", "job"]), Ok(Command::Ls { path: "job".into(), format: Format::Human }));
        assert_eq!(parse(&["sf", "ls", "--json", "job"]), Ok(Command::Ls { path: "job".into(), format: Format::Json }));
        assert_eq!(
            parse(&["sf", "dump", "job/rank-00001.sflog", "--json"]),
            Ok(Command::Dump { file: "job/rank-00001.sflog".into(), format: Format::Json })
        );
    }

    #[test]
    fn frontier_takes_a_csv_and_stage_options() {
        let options = FrontierOptions {
            source: FrontierSource::Csv("s.csv".into()),
            stages: Some(vec!["data".into(), "bwd".into()]),
            window: Some(50),
            residual: None,
            sync_wait: vec!["data".into()],
            accumulation: None,
        };
        let args = "sf frontier --csv s.csv --stages data,bwd --window 50 --sync-wait data";
        assert_eq!(
            parse(&args.split(' ').collect::<Vec<_>>()),
            Ok(Command::Frontier { options, format: Format::Human })
        );
        assert_eq!(parse(&["sf", "frontier"]), Err(ErrorKind::MissingRequiredArgument));
        assert_eq!(parse(&["sf", "frontier", "--csv", "s.csv", "--window", "0"]), Err(ErrorKind::ValueValidation));
        assert_eq!(parse(&["sf", "frontier", "--csv", "s.csv", "jobdir"]), Err(ErrorKind::ArgumentConflict));
        match parse(&["sf", "frontier", "jobdir", "--json"]) {
            Ok(Command::Frontier { options, format }) => {
                assert_eq!((options.source, format), (FrontierSource::Logs("jobdir".into()), Format::Json))
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn usage_errors() {
        assert_eq!(parse(&["sf", "ls"]), Err(ErrorKind::MissingRequiredArgument));
        assert_eq!(parse(&["sf", "dump", "a", "b"]), Err(ErrorKind::UnknownArgument));
        assert_eq!(parse(&["sf", "frobnicate"]), Err(ErrorKind::InvalidSubcommand));
        assert_eq!(parse(&["sf", "ls", "x", "--yaml"]), Err(ErrorKind::UnknownArgument));
        assert_eq!(parse(&["sf"]), Err(ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand));
    }

    #[test]
    fn help_and_version() {
        assert_eq!(parse(&["sf", "--help"]), Err(ErrorKind::DisplayHelp));
        assert_eq!(parse(&["sf", "ls", "--help"]), Err(ErrorKind::DisplayHelp));
        assert_eq!(parse(&["sf", "--version"]), Err(ErrorKind::DisplayVersion));
    }

    #[test]
    fn version_names_the_format_this_reader_reads() {
        use stagefrontier::core::log::format::{FORMAT_VERSION, SCHEMA_VERSION};
        let expected = format!("(log format {FORMAT_VERSION}, record schema {SCHEMA_VERSION})");
        assert!(LONG_VERSION.ends_with(&expected), "{LONG_VERSION}");
    }
}
