//! `sf kernels`' arguments and help, apart from cli.rs so that file stays a table of commands.

use std::path::PathBuf;

use clap::Args;

use super::GroupBy;
use super::{OutputArgs, PickArgs};
use stagefrontier::report::kernels::KernelsOptions;

pub const LONG_ABOUT: &str = "\
Find ranks whose GPU kernels run differently from their peers' (ARGUS L3), from the
kernel summaries the library writes when the job runs with
CUDA_INJECTION64_PATH=/path/to/libstagefrontier.so.

Per kernel name and rank, the KDE clusters (count, p50, p99) of every window in the log
become one log-normal mixture: weights from the counts, mu = ln p50,
sigma = ln(p99/p50) / 2.326. Among the ranks of one role (--group-by, as sf slow's: job,
every rank; local-rank, ranks with the same local rank; host, ranks on one host) with at
least 4 ranks, the pairwise Wasserstein-1 distances
form a matrix; a rank's SCORE is its mean distance to the others. A rank is anomalous for
a kernel when its score is above the IQR fence Q3 + k (Q3 - Q1) of the scores (--iqr-k,
default 1.5) and at least 5% of the kernel's typical duration.

--json also lists every comparison (kernel, group, ranks, each rank's score, the fence,
the floor and the anomalous ranks); --matrix adds each comparison's full W1 matrix.

Beside the findings: per rank the windows, kernel names and launches summarized, NCCL
kernels (count, mean and longest duration), each stream's busy share of its windows,
and LOST: activity counted late, truncated by the 4 KiB-per-window cap or untracked.

Exit status: 0 nothing anomalous; 4 an anomalous kernel (as sf slow's 4); 1 an error (no
logs; no kernel records at all, which the output explains; or an unreadable log, when the
others show nothing).";

pub const EXAMPLES: &str = "\
Example: rank 5's GEMM runs 30% longer than on the other 7 ranks:
  $ sf kernels /dev/shm/stagefrontier-$(id -u)/job-7
  /dev/shm/stagefrontier-1000/job-7: 8 ranks, 3 kernels compared (grouped by job, IQR k 1.5): ANOMALOUS: rank 5 in gemm_bf16 (1 finding(s))

  RANK  GROUP  SCORE_US  FENCE_US  PAST_US  P50_US  GROUP_P50_US  KERNEL
     5  job        14.3       2.1     12.2    65.0          50.0  gemm_bf16
  ...

Examples:
  sf kernels JOBDIR; echo $?                         4 when a rank's kernel stands out
  sf kernels JOBDIR --group-by local-rank --iqr-k 3  pipeline stages by GPU position, a wider fence
  sf kernels JOBDIR --json | jq '.anomalies[] | {rank, kernel, past_fence_ns}'
  sf kernels JOBDIR --json --matrix | jq '.comparisons[0].w1_ns'   the distances themselves
  sf kernels /dev/shm/stagefrontier-$(id -u) --latest   the newest job in the log root";

#[derive(Args)]
pub struct KernelsArgs {
    /// Job directories (one per node of a multi-node job), or directories holding them
    /// (sf snapshot's DEST, a log root): searched for the logs of one job
    #[arg(value_name = "DIR", required = true)]
    pub dir: Vec<PathBuf>,
    /// Which ranks share a role and are compared with each other (as sf slow's; --role-by and
    /// its value `all` still work)
    #[arg(long, visible_alias = "role-by", value_name = "ROLE", value_enum, default_value = "job")]
    pub group_by: GroupBy,
    /// IQR fence coefficient k: anomalous above Q3 + k (Q3 - Q1) of the ranks' scores
    #[arg(long, default_value_t = 1.5, value_parser = parse_k)]
    pub iqr_k: f64,
    /// With --json: add each comparison's pairwise W1 matrix (ns), rows and columns in its ranks' order
    #[arg(long)]
    pub matrix: bool,
    #[command(flatten)]
    pub pick: PickArgs,
    #[command(flatten)]
    pub output: OutputArgs,
}

fn parse_k(v: &str) -> Result<f64, String> {
    match v.parse::<f64>() {
        Ok(k) if k.is_finite() && k >= 0.0 => Ok(k),
        _ => Err("a non-negative number, e.g. 1.5 (Tukey) or 3 (far outliers only)".into()),
    }
}

impl KernelsArgs {
    pub fn options(&self) -> KernelsOptions {
        KernelsOptions { group_by: self.group_by, iqr_k: self.iqr_k, matrix: self.matrix }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{parse_from, Command, Dirs, Format};
    use super::*;
    use clap::error::ErrorKind;

    fn parse(args: &str) -> Result<Command, ErrorKind> {
        parse_from(args.split(' ')).map_err(|e| e.kind())
    }

    #[test]
    fn takes_a_directory_a_role_and_a_fence() {
        let defaults = KernelsOptions { group_by: GroupBy::Job, iqr_k: 1.5, matrix: false };
        assert_eq!(
            parse("sf kernels job"),
            Ok(Command::Kernels { dir: Dirs::one("job"), options: defaults, format: Format::Human })
        );
        assert_eq!(
            parse("sf kernels job --json --group-by local-rank --iqr-k 3 --matrix"),
            Ok(Command::Kernels {
                dir: Dirs::one("job"),
                options: KernelsOptions { group_by: GroupBy::LocalRank, iqr_k: 3.0, matrix: true },
                format: Format::Json
            })
        );
        // The older spelling: --role-by, and `all` for the whole job.
        assert_eq!(parse("sf kernels job --role-by all"), parse("sf kernels job --group-by job"));
        assert_eq!(parse("sf kernels job --role-by local-rank"), parse("sf kernels job --group-by local-rank"));
        assert_eq!(
            parse("sf kernels job --group-by host")
                .map(|c| matches!(c, Command::Kernels { options: KernelsOptions { group_by: GroupBy::Host, .. }, .. })),
            Ok(true)
        );
        assert_eq!(parse("sf kernels job --iqr-k=-1"), Err(ErrorKind::ValueValidation));
        assert_eq!(parse("sf kernels"), Err(ErrorKind::MissingRequiredArgument));
    }
}
