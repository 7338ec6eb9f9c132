//! The command line, parsed into plain `Command` values. clap stays in this file: the rest
//! of `sf` sees only `Command`, and tests parse argument vectors without running anything.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::error::ErrorKind;
use clap::{Args, Parser, Subcommand};

pub use stagefrontier::report::discover::{Dirs, Pick};
pub use stagefrontier::report::frontier::{FrontierOptions, FrontierSource};
pub use stagefrontier::report::hang::HangOptions;

#[macro_use]
mod budget_help;
mod dump;
mod exporter;
#[cfg(test)]
mod help_examples;
mod kernels;
mod net;
mod path;
mod roles;
mod run;
mod slow;
mod steps;
mod trace;
pub use stagefrontier::report::slow::{GroupBy, SlowOptions};
pub use steps::StepsFormat;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Human,
    Json,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// One row per rank log found at `path` (a job directory or one log).
    Ls { path: Dirs, format: Format },
    /// The records one log holds (filtered), or its header.
    Dump { file: PathBuf, options: stagefrontier::report::dump::DumpOptions, format: Format },
    /// Frontier accounting over a stage-duration CSV.
    Frontier { options: FrontierOptions, format: Format },
    /// Hang localization over a job directory's logs, or over the metrics a Prometheus
    /// server holds (`prometheus`: its URL and the job id).
    Hang { dir: Dirs, options: HangOptions, format: Format, prometheus: Option<(String, String)>, stacks: bool },
    /// Slow ranks and stages over a job directory's step vectors.
    Slow { dir: Dirs, options: SlowOptions, format: Format },
    /// Kernels whose durations on some rank stand out from their peers' (ARGUS L3).
    Kernels { dir: Dirs, options: stagefrontier::report::kernels::KernelsOptions, format: Format },
    /// RDMA work requests per rank and QP.
    Net { dir: Dirs, series: bool, format: Format },
    /// Each communicator's role and each rank's coordinates in a 3-D parallel job.
    Roles { dir: Dirs, format: Format },
    /// The pipeline's critical path per step, and the slow pass on it.
    Path { dir: Dirs, format: Format },
    /// The per-rank, per-step stage vectors, as a table, JSON or CSV.
    Steps { dir: Dirs, format: StepsFormat },
    /// A consistent copy of a job's logs on this node into `to/<host>/<job id>/`.
    Snapshot { dir: Dirs, to: PathBuf, format: Format },
    /// The node's live logs as Prometheus metrics.
    Exporter { options: stagefrontier::report::exporter::ExporterOptions },
    /// Runs a job with the library's doors open and returns its exit status.
    Run { options: stagefrontier::report::run_env::RunOptions },
    /// The job's timeline as a Chrome JSON trace, for Perfetto.
    Trace { options: stagefrontier::report::trace::TraceOptions, format: Format },
}

impl Command {
    /// How the command prints: its errors follow it (JSON on stdout under `--json`).
    pub fn format(&self) -> Format {
        match self {
            Command::Ls { format, .. }
            | Command::Dump { format, .. }
            | Command::Frontier { format, .. }
            | Command::Hang { format, .. }
            | Command::Slow { format, .. }
            | Command::Kernels { format, .. }
            | Command::Net { format, .. }
            | Command::Roles { format, .. }
            | Command::Path { format, .. }
            | Command::Snapshot { format, .. } => *format,
            Command::Exporter { .. } => Format::Human,
            // CSV is data for another program: its errors stay text, like the table's.
            Command::Steps { format, .. } => match format {
                StepsFormat::Json => Format::Json,
                StepsFormat::Human | StepsFormat::Csv => Format::Human,
            },
            // The job owns stdout; sf run's own lines go to stderr.
            Command::Run { .. } => Format::Human,
            Command::Trace { format, .. } => *format,
        }
    }
}

/// Whether clap's error is a bad command line (not `--help` or `--version`).
pub fn is_usage_error(error: &clap::Error) -> bool {
    !matches!(
        error.kind(),
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    )
}

/// Whether the command line asks for `--json` (before a `--`, after which the words are
/// `sf run`'s job's).
pub fn asks_for_json<I: IntoIterator<Item = OsString>>(args: I) -> bool {
    args.into_iter().take_while(|a| a != "--").any(|a| a == "--json")
}

/// clap's error as one line in sf's form, `usage: what went wrong; what to do`.
pub fn usage_line(error: &clap::Error) -> String {
    let text = error.render().to_string();
    let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
    let what = lines.next().unwrap_or("bad command line");
    let what = what.strip_prefix("error: ").unwrap_or(what);
    format!("usage: {what}; see sf --help")
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
        Sub::Ls(a) => Command::Ls { path: a.pick.dirs(a.path), format: a.output.format() },
        Sub::Dump(a) => Command::Dump { options: a.options(), format: a.output.format(), file: a.file },
        Sub::Frontier(a) => Command::Frontier { format: a.output.format(), options: a.options() },
        Sub::Hang(a) => Command::Hang {
            options: a.options(),
            format: a.output.format(),
            prometheus: a.prometheus.zip(a.job),
            stacks: a.stacks,
            dir: a.pick.dirs(a.dir),
        },
        Sub::Slow(a) => Command::Slow { options: a.options(), format: a.output.format(), dir: a.pick.dirs(a.dir) },
        Sub::Kernels(a) => {
            Command::Kernels { options: a.options(), format: a.output.format(), dir: a.pick.dirs(a.dir) }
        }
        Sub::Net(a) => Command::Net { format: a.output.format(), series: a.series, dir: a.pick.dirs(a.dir) },
        Sub::Roles(a) => Command::Roles { format: a.output.format(), dir: a.pick.dirs(a.dir) },
        Sub::Path(a) => Command::Path { format: a.output.format(), dir: a.pick.dirs(a.dir) },
        Sub::Steps(a) => Command::Steps { format: a.format(), dir: a.pick.dirs(a.dir) },
        Sub::Snapshot(a) => Command::Snapshot { format: a.output.format(), dir: a.pick.dirs(a.dir), to: a.to },
        Sub::Exporter(a) => Command::Exporter { options: a.options() },
        Sub::Run(a) => Command::Run { options: a.options() },
        Sub::Trace(a) => Command::Trace {
            options: stagefrontier::report::trace::TraceOptions {
                dirs: a.pick.dirs(a.dirs),
                output: a.output,
                steps: a.steps,
                ranks: a.ranks.map(|list| list.0),
            },
            format: a.output_format.format(),
        },
    })
}

/// `--version` also names the log format this `sf` reads, so a version mismatch reported
/// by a read can be matched with the right build. A unit test keeps the numbers honest.
const LONG_VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (log format 2, record schema 3)");

const ABOUT: &str = "Read the rank logs libstagefrontier.so records during a training job, kept in
$SF_LOG_DIR/<job id>/ (default /dev/shm/stagefrontier-<uid>/<job id>/)";

const LONG_ABOUT: &str = "\
Read the rank logs that libstagefrontier.so records during a training job: while it runs,
after it ended, or after it was killed.

Each rank writes one log, rank-NNNNN.sflog (pid-<pid>.sflog for a process with no rank
identity), into $SF_LOG_DIR/<job id>/, by default /dev/shm/stagefrontier-<uid>/<job id>/,
<uid> being the job's user id (`id -u`). The job id is SF_JOB_ID, else the launcher's
(TORCHELASTIC_RUN_ID, SLURM_JOB_ID, Open MPI's job id), else \"default\".

Exit status, the same for every command: 0 nothing found, 3 hung, 4 slow, degraded or
anomalous, 5 a mismatch, 1 an error (no logs, an unreadable log, none of the evidence the
command reads), 2 a usage error. Under --json an error is also a JSON object on stdout:
{\"error\", \"file\", \"line\", \"hint\", \"message\"}.";

const EXAMPLES: &str = "\
Examples:
  sf ls /dev/shm/stagefrontier-$(id -u)/default      which ranks logged, are they alive, is anything lost
  sf ls JOBDIR --json | jq '.ranks[] | select(.liveness != \"live\")'
  sf dump JOBDIR/rank-00003.sflog | less             every record rank 3 still holds
  sf dump JOBDIR/rank-00003.sflog --json > rank3.jsonl
  sf hang JOBDIR                                     is the job hung, and who holds it up
  sf slow JOBDIR                                     which rank is slow, in which stage
  sf kernels JOBDIR                                  which rank's GPU kernels stand out
  sf net JOBDIR                                      RDMA work requests: a stuck or degraded QP
  sf roles JOBDIR                                    the tp/pp/dp layout and each rank's coordinates
  sf path JOBDIR                                     the pipeline pass that lengthened a step
  sf steps JOBDIR --csv > steps.csv                  per-rank, per-step stage durations for pandas
  sf frontier JOBDIR                                 which stage and rank expose step time
  sf run -- torchrun --nproc-per-node 8 train.py     record an unmodified job, every door open";

const LS_LONG_ABOUT: &str = concat!(
    "\
List the rank logs of a job: one row per rank, then which ranks of the world have no log
and whether any history was lost.

",
    read_budget_help!(),
    "
DIR is a job directory, $SF_LOG_DIR/<job id>/, by default
/dev/shm/stagefrontier-<uid>/<job id>/, or a single log file. Files not ending in .sflog
are ignored. The logs directly in DIR are the latest attempt of the job; earlier attempts
the library kept (SF_KEEP_ATTEMPTS) are in DIR/attempt-N/, listed at the end (`attempts` in
--json): pass DIR/attempt-N to read one.

DIR may also be a log root, /dev/shm/stagefrontier-<uid>/, or sf snapshot's DEST: searched
for job directories. When it holds several jobs, sf ls lists the jobs instead, newest (the
one started last) first: JOB, RANKS (found/world), STATE (its logs by liveness), STARTED,
LAST_BEAT and the DIR to pass for that job (--json: `jobs`, each with job_id, dir, ranks,
world_size, logs, hosts, live, ended, dead, stalled, disabled, started, last_beat).
--latest reads the newest instead, here and in every command that reads one job.

LIVENESS: live (heartbeat under 1 s old), exited (ended through exit(), fully flushed),
dead (heartbeat stale, process gone), stalled (heartbeat stale, process still there:
stopped or wedged), disabled (recording stopped after an internal error). A log from
another host is judged by wall-clock time and cannot tell dead from stalled.
LAST_BEAT: the last heartbeat in UTC (RFC 3339), to match against Slurm and system logs.
HELD: records still in the log; WRAPPED: older records overwritten (SF_LOG_RECORDS keeps
more); MISSING: records torn by a kill or overwritten while read; DROPPED: events the
library had to drop because its ring was full (SF_RING_EVENTS holds more).
DOORS: the doors that recorded (preload: NCCL calls through LD_PRELOAD; markers: the C
API or Python's stagefrontier; nvtx: NVTX ranges, through NVTX_INJECTION64_PATH; cuda:
CUPTI, through CUDA_INJECTION64_PATH; profiler: NCCL_PROFILER_PLUGIN; verbs: SF_VERBS=1);
? for a log of a library that did not record them. When no rank recorded step markers, a
note says why NVTX ranges were not seen (NVTX_INJECTION64_PATH not set, or no NVTX call).
The line after the table says what evidence the logs hold (`evidence` per rank in --json):
host_calls (NCCL calls), device (NCCL kernels linked to their calls, unfinished device
work), host_sync (host synchronizations), kernels (kernel summaries), profiler, steps, net.
A job with more than one parallel dimension gets a `layout: tp=2 pp=4 dp=2` line, as sf
roles finds it (`layout` in --json, for every job with a communicator).

Exit status: 0; 5 when a collective's ranks disagree on it (a mismatch, listed after the
table, as sf hang does); 1 when a log cannot be read or DIR holds none."
);

const LS_EXAMPLES: &str = "\
Examples:
  sf ls /dev/shm/stagefrontier-$(id -u)/default
  sf ls /dev/shm/stagefrontier-$(id -u)/12345/rank-00000.sflog
  sf ls JOBDIR --json | jq '.missing_ranks'
  sf ls /dev/shm/stagefrontier-$(id -u)                 the jobs in the log root, newest first
  sf ls /dev/shm/stagefrontier-$(id -u) --latest        the newest job's ranks";

const FRONTIER_LONG_ABOUT: &str = concat!(
    "\
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
counts that rank missing. From logs, each stage is read as own time: the time a rank
waited inside collectives (matched across ranks by communicator and sequence number) is
taken out and charged to the rank whose late arrival caused it, in the stage that made
it late; a rank that made the others wait heads its window as CULPRIT rank R in STAGE.
A job with NCCL calls but no step markers gets stages inferred from its NCCL schedule
(the repeating pattern of its collectives; phases inferred.before_first_collective,
inferred.in_collectives, inferred.between_collectives), said on the second line and as
\"source\": \"inferred\" in --json.
--csv FILE instead has the header step,rank,stage,seconds and one row per step, rank and
stage (RFC 4180: a quoted stage name may hold commas; optional columns overlap_seconds,
device_seconds, spill_seconds, wait_seconds, caused_seconds); sf steps DIR --csv writes
it from a job's logs. With wait_seconds (the rank's wait inside collectives it entered in
that stage) and caused_seconds (other ranks' waiting it caused, charged to that stage),
the file reads as the logs do: own time is seconds less wait_seconds, W_s is measured,
and culprits and blame come back, so sf steps DIR --csv | sf frontier --csv /dev/stdin
gives sf frontier DIR's answer. Without them, seconds are analyzed as recorded.
Every rank the file names is expected at every step: a step lacking one, or bringing
other stages, closes the current window, and a window with missing ranks is
telemetry_limited.
",
    call_budget_help!(),
    "
Per window: exposed time; each stage's advance and SHARE of exposed time; the routing
set (fewest stages whose shares reach 0.80), top-1 and top-2; GAIN, the share of exposed
time removed by clipping a stage to the ranks' median; the ranks leading each stage;
the baselines (per-stage max and average, rank spread, slowest rank, lowest rank) side
by side; and labels with their reasons (frontier_accounting, direct_exposure,
sync_wait_dependent, likely_sync_wait, co_critical, role_aware_needed,
telemetry_limited, gradient_accumulation_ambiguous; with device time per stage, from
the CUDA door's stage_device records or the CSV columns device_seconds,spill_seconds:
forward_device_supported, forward_host_overhead_suspected, forward_spillover_suspected,
forward_event_scope_limited).

Exit status: 0 with an answer (its labels are the accounting); 4 when a window names a
CULPRIT (a rank whose lateness the others wait for, from the logs' NCCL calls); 1 when the
input cannot be read, is malformed, or has no steps (as sf slow for no step vectors)."
);

const FRONTIER_EXAMPLES: &str = "\
Examples:
  sf frontier --csv stages.csv
  sf frontier --csv stages.csv --stages data,fwd,bwd,optim --window 100
  sf frontier --csv stages.csv --sync-wait data --json | jq '.windows[] | {top2, leader_ranks, labels}'
  sf frontier /dev/shm/stagefrontier-$(id -u) --latest  the newest job in the log root";

const HANG_LONG_ABOUT: &str =concat!(
    "\
Say whether a job is hung and where: which rank holds it up, in which collective, since
when. Works on a running job even with every rank wedged (the logs are memory-mapped
files), and on the logs of ranks that died.

",
    read_budget_help!(),
    "
DIR is the job directory, $SF_LOG_DIR/<job id>/, by default
/dev/shm/stagefrontier-<uid>/<job id>/.

How it decides. A rank is inside an NCCL call (the live communicator table says which and
since when; a ncclGroupEnd shows as a group its records leave open) or outside one, silent
since its last call. A rank inside collective #k waits for every rank of the communicator
that has not entered #k; a grouped send/recv waits for its peers; a rank outside NCCL but
ahead of others on a communicator (real NCCL returns before the GPU is done) waits for
those furthest behind. A wait is STUCK when it is older than the threshold, when the rank
it waits for has been silent for longer, or when that rank is gone while the waiter lives.
A healthy job always has some ranks inside collective #k and others not there yet: below
the threshold, that is skew.

THRESHOLD = max(--min-stuck-s, --factor x PACE). PACE is the longest of three things
the job's own records show, no markers needed: its step time (on the communicator with
the most collectives, the smallest period P, in collectives, of the repeating (op, count,
dtype) pattern whose measured steps agree, and the median of t_enter[#k+P] - t_enter[#k]
over recent steps of all ranks); the longest call; and the longest gap between two calls
of a thread, in the same recent history, warm-up left out. A healthy rank waits inside a
collective at most the skew between ranks and goes without NCCL calls at most its longest
compute phase, both within one step unless the job's history shows longer (a crowded
host, a checkpoint). The default factor 1.5 allows steps 50% slower than the median and
still reports a hang within 2 steps of its start. While the logs hold fewer than two
steps, --fallback-stuck-s takes the place of factor x pace.

STATE of each rank:
  missing   never entered the call others are stuck in, and silent since: the culprit
  waiting   blocked in a call (or, outside NCCL, ahead of others) that waits for other ranks
  wedged    stuck in a call though every rank it needs is there, or in a call of its own
  stuck_qp  wedged, and its RDMA queue pair holds a work request past SF_WR_TIMEOUT_MS
            (qp_stuck evidence): the culprit; the other ranks of the call wait for it
  dead      heartbeat stale, process gone (killed, crashed)
  stalled   heartbeat stale, process still there (stopped, or frozen as a whole)
  slow      others are stuck waiting for it, but it still makes NCCL calls: behind, not hung
  exited    exited through exit()
  disabled  recording stopped after an internal error; its log says nothing since
  stuck_kernel  its device is stuck behind a kernel that never ends while its peers'
            devices wait for it in a collective every host launched: the culprit
  behind    no rank has advanced for the progress threshold, and it is behind the others
            (an earlier step, or another stage than the rest): the culprit (EVIDENCE below)
  ok        not part of anything stuck
ROLE says what a rank that stopped was doing when it stopped: a job killed while hung
still shows who held it up, and once every rank is gone the first line, HUNG
(post-mortem ...), names the ranks that held the stuck call up. Once every rank is gone
and the job ended badly, a line says which rank went first, from the ranks' own end
records (exit status or signal, with the time): `rank 2 exited first (status 1) at ...Z;
ranks 0-1, 3 ended 0.014 s later (a teardown by SIGTERM)` (`died first` for a signal, or
for a rank with no end record: SIGKILL, at or after its last heartbeat); when the others
were still inside a call as it went, it is the post-mortem's culprit even though the
teardown took milliseconds (`first_end` in --json, `post_mortem.named_by`). STUCK: how long it has waited in its call (waiting, wedged)
or gone without a call (missing, dead, stalled). STEP and STAGE come from the job's
step and stage markers, when it records them.

EVIDENCE, tried in this order, named by the `hang evidence:` line (--json `hang_evidence`):
host NCCL calls (above); the devices' unfinished work (CUDA door: every host launched the
collective, and one device is stuck behind other work); step and stage progress, for any
backend (a gloo job's collectives run where no door sees them; a rank asleep in Python
makes no call): when no rank has advanced (a step or stage marker) for longer than the
progress threshold, max(--min-stuck-s, --factor x the longest of the ranks' recent steps,
the first two steps of the job left out; --fallback-stuck-s with fewer than 3 measured),
the ranks behind the others hold the job up: an earlier step, or, at one step, the few in
another stage than the rest. `HUNG (from step and stage progress): rank 2 has not
advanced for 12.0s, at step 29 between stages; ranks 0-1, 3 are ahead, most at step 30 in
model.backward_cpu_wall; ...` (--json `progress_stall`, each rank's `idle_s`). Every rank
at the same place names nobody: a long phase and a hang they share look alike.

STACKS: in a Python job each rank samples its own Python stacks (py-spy's reader, in
process) once it stops advancing for 3 of its steps (1 s at least), so a hung job's report
shows the culprit's stack under the first line and every rank grouped by where its code
stands (`ranks 0-1, 3: backward (__init__.py:395) ← … ← main (train.py:131)`; --json
`stacks`, `stack_groups`). --stacks asks every live rank for its stacks now: one word
written into its log's header, answers awaited 5 s at most (`stacks_asked`).

Also listed: collective mismatches (one sequence number issued with another op, count,
dtype, root or reduction on some rank), SF_INJECT injections, and the hang evidence the
library's watchdog wrote. A job in which every rank has been outside NCCL for longer
than the threshold is noted: it is stuck outside NCCL, or in a long phase without
collectives (checkpoint, evaluation), which the logs cannot tell apart.

Exit status: 0 nothing hung; 3 a hang is diagnosed; 5 a mismatch (a collective the ranks
issued differently; before 3, as it is the usual cause of the hang), shown first; 1 an
error (no logs; or a log that cannot be read, when nothing is found in the others)."
);

const HANG_EXAMPLES: &str = "\
Example: 8 ranks of sf-trainer-sim, rank 5 stopped before its 42nd collective
(SF_INJECT=hang:rank=5,op=allreduce,seq=42):
  $ sf hang /dev/shm/stagefrontier-$(id -u)/job-42
  HUNG: rank 5 never entered allreduce #42 on 0xe5bcd4f4e5c81503; 7 ranks have waited 5.0s
  hang evidence: host NCCL calls
  waits from: host calls (the collective calls block until every peer arrives)
  threshold 0.250s, the --min-stuck-s floor, over 1.5 x the longest of: step 0.124s (5 collectives per step \
on 0xe5bcd4f4e5c81503), call 0.007s, gap between calls 0.061s

  COMMUNICATOR        NRANKS  STUCK AT        FOR  MISSING  WAITING   OTHERS
  0xe5bcd4f4e5c81503       8  allreduce #42  5.0s  5        0-4, 6-7  -

  RANK  STATE    STEP  STAGE                    STUCK  WHERE                 COMM                HEARTBEAT  WAITING FOR
     0  waiting     8  model.backward_cpu_wall   5.0s  in allreduce #42      0xe5bcd4f4e5c81503       0.0s  5
     ...
     5  missing     8  model.backward_cpu_wall   5.0s  before allreduce #42  0xe5bcd4f4e5c81503       0.0s  -
     ...

  injected on rank 5: hang (rule 0) before allreduce #42 on 0xe5bcd4f4e5c81503 in step 8
  $ echo $?
  3

Examples:
  sf hang JOBDIR; echo $?                              3 while hung, 0 when not
  sf hang JOBDIR --json | jq '.communicators[] | select(.stuck_seq != null) | .missing_ranks'
  sf hang JOBDIR --factor 3 --min-stuck-s 1           more patience on a job with uneven steps
  sf hang DEST                                        sf snapshot's copies of every node, judged when taken
  sf hang --prometheus http://127.0.0.1:9090 --job 12345   from every node's sf exporter metrics
  sf hang /dev/shm/stagefrontier-$(id -u) --latest      the newest job in the log root";

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
    /// Print the records a rank log holds, oldest first, or its header and name tables
    #[command(long_about = dump::LONG_ABOUT, after_help = dump::EXAMPLES)]
    Dump(dump::DumpArgs),
    /// Frontier accounting of per-rank stage durations: exposed time, routing, labels
    #[command(long_about = FRONTIER_LONG_ABOUT, after_help = FRONTIER_EXAMPLES)]
    Frontier(FrontierArgs),
    /// Is the job hung, and where: the rank, the collective, the stage, since when
    #[command(long_about = HANG_LONG_ABOUT, after_help = HANG_EXAMPLES)]
    Hang(HangArgs),
    /// Which rank is slow, in which stage, how sure: jitter, regression, stragglers
    #[command(long_about = slow::LONG_ABOUT, after_help = slow::EXAMPLES)]
    Slow(slow::SlowArgs),
    /// Which rank's GPU kernels run differently from its peers' (needs CUDA_INJECTION64_PATH)
    #[command(long_about = kernels::LONG_ABOUT, after_help = kernels::EXAMPLES)]
    Kernels(kernels::KernelsArgs),
    /// RDMA work requests per rank and QP: bandwidth, in flight, latency, stuck, degraded
    #[command(long_about = net::LONG_ABOUT, after_help = net::EXAMPLES)]
    Net(net::NetArgs),
    /// The job's parallel layout, found alone: each communicator's role (tp, pp, dp, ...), each rank's coordinates
    #[command(long_about = roles::LONG_ABOUT, after_help = roles::EXAMPLES)]
    Roles(roles::RolesArgs),
    /// The pipeline's critical path per step: the slow pass that lengthened a step, or absorbed ones
    #[command(long_about = path::LONG_ABOUT, after_help = path::EXAMPLES)]
    Path(path::PathArgs),
    /// Export the per-rank, per-step stage vectors: a table, --json, or the --csv sf frontier reads
    #[command(long_about = steps::LONG_ABOUT, after_help = steps::EXAMPLES)]
    Steps(steps::StepsArgs),
    /// Run an unmodified job with every door open: sf run -- torchrun ... train.py
    #[command(long_about = run::LONG_ABOUT, after_help = run::EXAMPLES)]
    Run(run::RunArgs),
    /// Copy a job's logs on this node, consistently, into DEST/<host>/<job id>/ for sf on another machine
    #[command(long_about = SNAPSHOT_LONG_ABOUT, after_help = SNAPSHOT_EXAMPLES)]
    Snapshot(SnapshotArgs),
    /// Serve the node's live rank logs as Prometheus metrics (OpenMetrics), or write textfiles
    #[command(long_about = exporter::LONG_ABOUT, after_help = exporter::EXAMPLES)]
    Exporter(exporter::ExporterArgs),
    /// Write the job's timeline for Perfetto: steps, stages, NCCL calls, flows across ranks
    #[command(long_about = trace::LONG_ABOUT, after_help = trace::EXAMPLES)]
    Trace(trace::TraceArgs),
}

const SNAPSHOT_LONG_ABOUT: &str = "\
Copy every rank log of a job on this node into DEST/<host>/<job id>/, consistently: the
header with its live state and tables, then every whole record; a record caught being
written is left out, never copied torn. It only reads, so it is safe while the ranks write
and while they are wedged, and takes well under a second for 8 ranks of default logs.

DEST/<host>/<job id>/snapshot.json records when each log was copied. Every sf command
judges a copy at that moment: liveness, heartbeat ages and stuck times are what they were
when the snapshot was taken, however much later sf reads it, on whatever machine. Copies
made with cp lose that moment and look dead: use sf snapshot.

Gather the snapshots of every node under one DEST (a shared filesystem, or rsync/kubectl cp
afterwards) and pass DEST, or the node directories, to any command: it finds the logs
below, groups them by job and says which ranks of the world are missing.";

const SNAPSHOT_EXAMPLES: &str = "\
Examples:
  sf snapshot /dev/shm/stagefrontier-$(id -u)/$SLURM_JOB_ID --to /shared/sf/$SLURM_JOB_ID
  srun --overlap --ntasks-per-node=1 sf snapshot /dev/shm/stagefrontier-$(id -u)/$SLURM_JOB_ID --to /shared/sf/$SLURM_JOB_ID
  pdsh -w node[0-15] 'sf snapshot /dev/shm/stagefrontier-$(id -u)/JOB --to /shared/sf/JOB'
  sf hang /shared/sf/JOB                             one verdict over every node's copies
  sf snapshot /dev/shm/stagefrontier-$(id -u) --latest --to /shared/sf/last   the newest job on this node";

#[derive(Args)]
struct SnapshotArgs {
    /// The job's directory on this node, $SF_LOG_DIR/<job id>/ (or the log root holding it)
    #[arg(value_name = "DIR", required = true)]
    dir: Vec<PathBuf>,
    /// Where the copies go: DEST/<host>/<job id>/ is created (mode 0700)
    #[arg(long, value_name = "DEST")]
    to: PathBuf,
    #[command(flatten)]
    pick: PickArgs,
    #[command(flatten)]
    output: OutputArgs,
}

#[derive(Args)]
struct LsArgs {
    /// Job directories (one per node), directories holding them (sf snapshot's DEST, a log
    /// root: several jobs are listed), or one log file
    #[arg(value_name = "DIR", required = true)]
    path: Vec<PathBuf>,
    #[command(flatten)]
    pick: PickArgs,
    #[command(flatten)]
    output: OutputArgs,
}

/// Logs carry no stage vectors yet, so the CSV is the only input; a job directory
/// argument comes when they do.
#[derive(Args)]
struct FrontierArgs {
    /// Job directories holding rank-NNNNN.sflog files with stage vectors (one per node), or
    /// directories holding them (sf snapshot's DEST)
    #[arg(value_name = "DIR", required_unless_present = "csv", conflicts_with = "csv")]
    dir: Vec<PathBuf>,
    /// CSV with the header step,rank,stage,seconds: one row per step, rank and stage
    /// (optional wait_seconds, caused_seconds: the logs' wait attribution, as sf steps writes)
    #[arg(long, value_name = "FILE", conflicts_with = "latest")]
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
    /// model-fit indicator); enables sync_wait_dependent and likely_sync_wait for them. On
    /// logs (and a CSV with wait_seconds) it is also measured: stages whose ranks spend 25%
    /// of them waiting in collectives
    #[arg(long, value_name = "A,B,...", value_delimiter = ',')]
    sync_wait: Vec<String>,
    /// Microsteps per optimizer step when the job accumulates gradients
    #[arg(long, value_name = "M", value_parser = clap::value_parser!(u32).range(1..))]
    accumulation: Option<u32>,
    #[command(flatten)]
    pick: PickArgs,
    #[command(flatten)]
    output: OutputArgs,
}

impl FrontierArgs {
    fn options(self) -> FrontierOptions {
        let trim = |names: Vec<String>| names.into_iter().map(|n| n.trim().to_string()).collect::<Vec<_>>();
        // clap guarantees exactly one of the two.
        let source = match self.csv {
            Some(csv) => FrontierSource::Csv(csv),
            None => FrontierSource::Logs(self.pick.dirs(self.dir)),
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
struct HangArgs {
    /// Job directories (one per node of a multi-node job), or directories holding them
    /// (sf snapshot's DEST, a log root): searched for the logs of one job
    #[arg(value_name = "DIR", required_unless_present = "prometheus", conflicts_with = "prometheus")]
    dir: Vec<PathBuf>,
    /// Build the report from the metrics every node's sf exporter gave this Prometheus
    /// server (http://HOST:PORT) instead of from logs; needs --job
    #[arg(long, value_name = "URL", requires = "job", conflicts_with = "latest")]
    prometheus: Option<String>,
    /// The job id (the metrics' job_id label) for --prometheus
    #[arg(long, value_name = "ID", requires = "prometheus")]
    job: Option<String>,
    /// A wait is stuck after this many median step times
    #[arg(long, value_name = "F", default_value = "1.5", value_parser = non_negative)]
    factor: f64,
    /// ...but never before this many seconds
    #[arg(long, value_name = "S", default_value = "0.25", value_parser = non_negative)]
    min_stuck_s: f64,
    /// Seconds after which a wait is stuck while the logs hold too few steps to time one
    #[arg(long, value_name = "S", default_value = "30", value_parser = non_negative)]
    fallback_stuck_s: f64,
    /// Ask every live rank for its Python stacks now (one word written into its log's
    /// header), wait up to 5 s for the answers, and print them with the verdict
    #[arg(long, conflicts_with = "prometheus")]
    stacks: bool,
    #[command(flatten)]
    pick: PickArgs,
    #[command(flatten)]
    output: OutputArgs,
}

impl HangArgs {
    fn options(&self) -> HangOptions {
        HangOptions { factor: self.factor, min_stuck_s: self.min_stuck_s, fallback_stuck_s: self.fallback_stuck_s }
    }
}

/// A finite number >= 0 (seconds, or a factor).
pub(crate) fn non_negative(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err(format!("wants a number >= 0, not '{text}'")),
    }
}

/// `--latest`, for the commands that read one job.
#[derive(Args)]
pub(crate) struct PickArgs {
    /// When DIR holds the logs of several jobs (a log root, sf snapshot's DEST), read the
    /// newest, the one started last, instead of stopping with their list (sf ls DIR lists them)
    #[arg(long)]
    latest: bool,
}

impl PickArgs {
    pub(crate) fn dirs(&self, dirs: Vec<PathBuf>) -> Dirs {
        Dirs(dirs, if self.latest { Pick::Latest } else { Pick::Only })
    }
}

#[derive(Args)]
pub(crate) struct OutputArgs {
    /// Print JSON instead of a table
    #[arg(long)]
    json: bool,
}

impl OutputArgs {
    pub(crate) fn format(&self) -> Format {
        if self.json {
            Format::Json
        } else {
            Format::Human
        }
    }
}

#[cfg(test)]
mod tests;
