//! `sf net`'s arguments and help, apart from cli.rs so that file stays a table of commands.

use std::path::PathBuf;

use clap::Args;

use super::{OutputArgs, PickArgs};

pub const LONG_ABOUT: &str = concat!(
    "\
Show the RDMA work requests of every rank and queue pair (QP): how much each moved, at
what bandwidth, with what latency, and whether one is stuck or degraded — VenusTrace's
work-request measurement (Sec. 3.2.2), from the qp_window, qp_stuck and qp_degraded
records the library writes.

Work requests come from the NCCL profiler plugin (NCCL_PROFILER_PLUGIN=libstagefrontier.so,
NCCL >= 2.23): its IB QP events (SOURCE profiler) where NCCL was built with NET_PROFILER,
else its proxy steps (SOURCE proxy: one row per communicator, channel, peer and direction,
DEV chN and QP `to P` or `from P`, each step one work request, posted when NCCL posts the
chunk on the network and completed when the network is done with it); or, with
SF_VERBS=1, from the verbs door. A receive QP event carries no length: its bandwidth is
unknown (the row says so), never 0. Per QP: POSTED, COMPLETED and IN_FLIGHT work requests; MIB completed; the
window bandwidth over the last SF_WR_WINDOW (64) completions, bytes over busy time (from
max(post, previous completion) to each completion, so queueing and idle gaps do not count);
the BASELINE, the median of the QP's first 5 windows; post-to-completion latency.
STUCK counts qp_stuck records: a work request in flight longer than SF_WR_TIMEOUT_MS
(500 ms). A qp_degraded record says the QP is slower than its own start: two windows in a
row more than SF_WR_DEGRADED (20%) below its baseline. A loaded host does that too, so
DEGRADED (yes) needs more: the QP is also more than SF_WR_DEGRADED slower than its peers
doing the same work (the job's other QPs fed by the same door, over the same time when
they share its host) for a sustained time (its episode still open 0.5 s later);
otherwise it is own-start only, named but not a finding. The first line names the stuck
and degraded QPs.

",
    read_budget_help!(),
    "
Exit status: 0 nothing stuck or degraded; 3 stuck evidence (as sf hang's 3: a hang);
4 a degraded QP and nothing stuck (as sf slow's 4); 1 an error (no logs; no work request
nor port counter at all, which the output explains; or an unreadable log, when the others show nothing)."
);

pub const EXAMPLES: &str = "\
Example: rank 1 stops completing its work requests (a broken link), timeout 200 ms:
  $ sf net /dev/shm/stagefrontier-$(id -u)/job-9
  /dev/shm/stagefrontier-1000/job-9: 2 ranks, 2 QPs: STUCK: rank 1 QP 0x101 (profiler, device 0)

  RANK  SOURCE    DEV     QP  POSTED  COMPLETED  IN_FLIGHT  ...  STUCK  DEGRADED
     0  profiler    0  0x100      80         80          0  ...      -         -
     1  profiler    0  0x101      41         40          1  ...      1         -
  rank 1 QP 0x101 (profiler, device 0): stuck, a work request in flight 0.212 s at 2026-11-23T08:51:18.123Z (t=... ns) \
(timeout 0.200 s), 1 in flight after 40 completions; no completion since
  $ echo $?
  3

Examples:
  sf net JOBDIR; echo $?                               3 stuck, 4 degraded, 0 healthy
  sf net JOBDIR --series                               each QP's samples over the run
  sf net JOBDIR --json | jq '.summary.stuck_qps'
  sf net /dev/shm/stagefrontier-$(id -u) --latest       the newest job in the log root";

#[derive(Args)]
pub struct NetArgs {
    /// Job directories (one per node of a multi-node job), or directories holding them
    /// (sf snapshot's DEST, a log root): searched for the logs of one job
    #[arg(value_name = "DIR", required = true)]
    pub dir: Vec<PathBuf>,
    /// Also print each QP's samples (one row per SF_NET_SAMPLE_MS); --json always has them
    #[arg(long)]
    pub series: bool,
    #[command(flatten)]
    pub pick: PickArgs,
    #[command(flatten)]
    pub output: OutputArgs,
}

#[cfg(test)]
mod tests {
    use super::super::{parse_from, Command, Dirs, Format};
    use clap::error::ErrorKind;

    fn parse(args: &str) -> Result<Command, ErrorKind> {
        parse_from(args.split(' ')).map_err(|e| e.kind())
    }

    #[test]
    fn takes_a_directory_and_flags() {
        assert_eq!(
            parse("sf net job"),
            Ok(Command::Net { dir: Dirs::one("job"), series: false, format: Format::Human })
        );
        assert_eq!(
            parse("sf net job --json --series"),
            Ok(Command::Net { dir: Dirs::one("job"), series: true, format: Format::Json })
        );
        assert_eq!(parse("sf net"), Err(ErrorKind::MissingRequiredArgument));
        assert_eq!(parse("sf net --help"), Err(ErrorKind::DisplayHelp));
    }
}
