//! `sf trace`'s arguments and help.

use std::ops::RangeInclusive;
use std::path::PathBuf;

use clap::Args;

pub const LONG_ABOUT: &str = "\
Write a job's timeline for Perfetto (ui.perfetto.dev) or chrome://tracing: the Chrome
JSON trace-event format, one object {\"traceEvents\": [...]}.

One process per rank, named `<host> rank R` and sorted by host, then rank. Its tracks:
  steps          one slice per step (`step N`, its wall time)
  stages         the step's stages in order, each as long as the rank spent in it
  nccl <comm>    one track per communicator (named by its id): every NCCL call with
                 its operation, sequence number (seq) and bytes
  gpu ...        kernel-window summaries from the CUDA door: busy share per device and
                 stream (a counter per window), NCCL kernels as slices
  qp ...         per RDMA queue pair: work requests in flight and window bandwidth
                 (counters, one sample per qp_window record)
Flow arrows join the calls of one collective (communicator and sequence number) across
ranks, from the first rank to enter it to the last.

Times are the ranks' wall clocks (each log's calibration), in microseconds (to 0.1) from
the earliest log's start: ranks on different hosts line up as well as their clocks agree.
--steps A-B keeps the steps A to B and what happened during them (each rank's own time
span of those steps); --ranks keeps the ranks listed. A trace of 64 ranks x 1000 steps
with 5 collectives a step is about 97 MB; cut big jobs down with --steps and --ranks.

--json prints what was written (file, ranks, events, bytes, collectives) on stdout.

Exit status: 0 written; 1 the logs cannot be read or FILE cannot be written.";

pub const EXAMPLES: &str = "\
Examples:
  sf trace JOBDIR -o job.json                     then open job.json in ui.perfetto.dev
  sf trace JOBDIR -o slow.json --steps 200-220 --ranks 0-7,12
  sf trace /snap/node0/JOB /snap/node1/JOB -o both.json   logs of several hosts
  sf trace /dev/shm/stagefrontier-$(id -u) --latest -o job.json   the newest job in the log root";

#[derive(Args)]
pub struct TraceArgs {
    /// Job directories holding rank-*.sflog files (several: one per host)
    #[arg(value_name = "DIR", required = true)]
    pub dirs: Vec<PathBuf>,
    /// The trace file to write
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: PathBuf,
    /// Keep steps A to B (inclusive), e.g. 100-120, or one step
    #[arg(long, value_name = "A-B", value_parser = step_range)]
    pub steps: Option<RangeInclusive<u64>>,
    /// Keep these ranks, e.g. 0-7,12
    #[arg(long, value_name = "LIST", value_parser = rank_list)]
    pub ranks: Option<RankList>,
    #[command(flatten)]
    pub pick: super::PickArgs,
    #[command(flatten)]
    pub output_format: super::OutputArgs,
}

/// `--ranks`: ranges of ranks (one value for clap, not a list of values).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RankList(pub Vec<RangeInclusive<u32>>);

fn step_range(text: &str) -> Result<RangeInclusive<u64>, String> {
    let (a, b) = text.split_once('-').unwrap_or((text, text));
    let number =
        |s: &str| s.trim().parse::<u64>().map_err(|_| format!("{s:?} is not a step number; use A-B, e.g. 100-120"));
    let (a, b) = (number(a)?, number(b)?);
    if a > b {
        return Err(format!("{a}-{b}: the first step comes after the last"));
    }
    Ok(a..=b)
}

fn rank_list(text: &str) -> Result<RankList, String> {
    text.split(',')
        .map(|part| {
            let (a, b) = part.split_once('-').unwrap_or((part, part));
            let number =
                |s: &str| s.trim().parse::<u32>().map_err(|_| format!("{s:?} is not a rank; use a list like 0-7,12"));
            let (a, b) = (number(a)?, number(b)?);
            if a > b {
                return Err(format!("{a}-{b}: the first rank comes after the last"));
            }
            Ok(a..=b)
        })
        .collect::<Result<_, _>>()
        .map(RankList)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_parse_and_bad_ones_say_why() {
        assert_eq!(step_range("100-120"), Ok(100..=120));
        assert_eq!(step_range("7"), Ok(7..=7));
        assert!(step_range("9-3").unwrap_err().contains("after"));
        assert_eq!(rank_list("0-3,7"), Ok(RankList(vec![0..=3, 7..=7])));
        assert!(rank_list("x").unwrap_err().contains("not a rank"));
    }
}
