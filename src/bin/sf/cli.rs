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
    })
}

/// `--version` also names the log format this `sf` reads, so a version mismatch reported
/// by a read can be matched with the right build. A unit test keeps the numbers honest.
const LONG_VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (log format 1, record schema 2)");

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
