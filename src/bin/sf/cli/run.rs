//! `sf run`'s arguments and help, apart from cli.rs so that file stays a table of commands.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::Args;

use stagefrontier::report::run_env::{Door, RunOptions};

pub const LONG_ABOUT: &str = "\
Run an unmodified training job with every door of libstagefrontier.so open, and return its
exit status unchanged. Nothing in the job's code or launch line changes: put `sf run --`
in front of it.

For COMMAND and everything it starts (torchrun, srun, mpirun and their ranks) sf run sets:
  LD_PRELOAD               the library, prepended to any existing value (never replacing it):
                           every NCCL call (door `preload`)
  NCCL_PROFILER_PLUGIN     the library: NCCL's own collective, proxy and network events
                           (door `profiler`); an existing value moves to SF_CHAIN_PROFILER,
                           which the library loads and forwards every call to
  NVTX_INJECTION64_PATH    the library: NVTX ranges as stages (door `nvtx`); skipped, with
                           one line, when another tool (Nsight Systems) already set it
  CUDA_INJECTION64_PATH    the library: GPU kernel activity through CUPTI (door `cuda`);
                           skipped, with one line, when another tool already set it
  PYTHONPATH               python/stagefrontier_boot prepended (door `python`): its
                           sitecustomize chains any existing sitecustomize and, once the
                           program imports torch, records the stages data.next_wait,
                           model.fwd_loss_cpu_wall, model.backward_cpu_wall and
                           optim.step_cpu_wall of every training step, with no marker in
                           the job's code
  SF_JOB_ID                when the launcher gives no job id (see JOB ID)
  SF_LOG_DIR               with --log-dir

It prints one line on stderr before COMMAND starts: the log directory and the doors
opened. Signals sent to sf run (kill, scancel, a timeout) are forwarded to COMMAND; a
Ctrl-C at the terminal reaches COMMAND directly. sf run then waits for COMMAND and exits
with its status (killed by a signal: sf run ends by the same signal). With --report it
first prints the headlines of sf frontier, sf slow, sf hang and sf net over the job's logs.

THE LIBRARY is SF_LIBRARY when set, else libstagefrontier.so next to the sf binary (the
wheel; target/<profile>/ in a checkout), else in ../lib/ from it (a release tarball's bin/
and lib/; after `cargo install`, copy the library next to sf or set SF_LIBRARY). The Python
door is stagefrontier_boot, found next to the library, one directory up from the sf binary
(the wheel's site-packages), in ../share/stagefrontier/python/ from it, or in the checkout's
python/ two directories up from target/<profile>/sf.

JOB ID, the directory name of the logs, in this order: --job-id; SF_JOB_ID; torchrun's
--rdzv-id (PET_RDZV_ID); SLURM_JOB_ID; a torchrun with --master-addr or --rdzv-endpoint
and no --rdzv-id: torchrun-<host>-<port> of that address, which sf run on every node of a
multi-node job derives alike; otherwise <program>-<UTC time>-<pid of sf run>. Plain
torchrun without --rdzv-id gives its ranks TORCHELASTIC_RUN_ID=none; the library treats
none as no id and derives torchrun-<MASTER_ADDR>-<MASTER_PORT>, which every rank of the
job shares and no concurrent job can (a port serves one job at a time); a later job on the
same address and port is a new attempt of that directory (attempt-N, SF_KEEP_ATTEMPTS).

Exit status: COMMAND's; 1 when COMMAND cannot start or the library cannot be found (the
message names the places searched); 2 a usage error.";

pub const EXAMPLES: &str = "\
Examples:
  sf run -- torchrun --nproc-per-node 8 train.py
  sf run --report -- torchrun --nproc-per-node 4 train.py --epochs 1
  sf run --job-id exp-42 --log-dir /scratch/sf -- srun python train.py
  sf run --doors preload,python -- python train.py          only NCCL calls and the Python stages
  SF_LIBRARY=/opt/sf/lib/libstagefrontier.so sf run -- mpirun -np 8 ./a.out";

#[derive(Args)]
pub struct RunArgs {
    /// Doors to open, comma-separated: preload, profiler, nvtx, cuda, python [default: all]
    #[arg(long, value_name = "LIST", value_delimiter = ',', value_parser = parse_door)]
    doors: Option<Vec<Door>>,
    /// Job id, the log directory's name (default: the launcher's, else derived; see JOB ID)
    #[arg(long, value_name = "ID")]
    job_id: Option<String>,
    /// Root of the log tree (SF_LOG_DIR) [default: $SF_LOG_DIR, else /dev/shm/stagefrontier-<uid>]
    #[arg(long, value_name = "DIR")]
    log_dir: Option<PathBuf>,
    /// After COMMAND ends, print the headlines of sf frontier, sf slow, sf hang and sf net
    #[arg(long)]
    report: bool,
    /// The job's command line, after `--`
    #[arg(value_name = "COMMAND", required = true, num_args = 1.., last = true)]
    command: Vec<OsString>,
}

fn parse_door(text: &str) -> Result<Door, String> {
    Door::ALL
        .into_iter()
        .find(|door| door.name() == text)
        .ok_or_else(|| format!("unknown door '{text}': the doors are preload, profiler, nvtx, cuda, python"))
}

impl RunArgs {
    pub fn options(self) -> RunOptions {
        let mut doors = self.doors.unwrap_or_else(|| Door::ALL.to_vec());
        doors.sort();
        doors.dedup();
        RunOptions { doors, job_id: self.job_id, log_dir: self.log_dir, report: self.report, command: self.command }
    }
}
