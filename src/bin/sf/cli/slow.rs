//! `sf slow`'s arguments and help, apart from cli.rs so that file stays a table of commands.

use std::path::PathBuf;

use clap::Args;

use super::{non_negative, GroupBy, OutputArgs, PickArgs, SlowOptions};

pub const LONG_ABOUT: &str = concat!(
    "\
Find slow ranks and the stage they are slow in, from the step and stage markers the job
records (C API, NVTX ranges or Python's stagefrontier), or that sf infers from the NCCL
schedule when the job records none (inferred.* phases, \"source\": \"inferred\" in
--json): three detectors, and how many of them agree.

L1, per rank, over its step wall times (ARGUS Sec. 6.1, App. B):
  jitter      a window of --jitter-window steps whose max/min exceeds --jitter-ratio;
              overlapping windows merge, and the EFFECTIVE WIDTH is the longest run in it
              above 1.2 x the median of the steps outside it: the spike's own width
  regression  the split with the largest ratio of mean step time after/before, at least
              --min-regression, both sides stable (CV at most --max-cv, 10 steps or more)
  Each event names the stage of the rank's own vector that grew the most. L1 reads each
  rank's own step time (wall time less its waiting in collectives): in a synchronous job
  the late rank shows the change, and the peers that only waited for it do not.
L2, per stage within each group of same-role ranks (--group-by): CV of the ranks' mean
  stage durations (balanced < 0.02 <= mild < 0.05 <= severe) and z-scores; a rank above
  --z (lower in groups too small to reach it) in a group that is not balanced is a
  straggler.
EXPECTED TIME (VenusTrace Alg. 2), per stage of each group, step by step: the first step
  is warm-up, the second sets T_expect, a duration within --alpha of it updates it (the
  mean of those accepted), and one above T_expect x (1 + --beta) is slow. The stage's
  duration is its frontier advance (StageFrontier eq. 1: how far the group's slowest
  cumulative time moved in it), so a wait for a late peer is charged to the stage where
  the peer fell behind; the rank named is the one furthest behind at the stage's end.

No false alarms: a finding must cost the job at least --min-effect of the median step
time and at least --min-effect-ms per step (the EFFECT FLOOR): an L2 straggler over its
group's mean, a slow stage over T_expect in each slow step and, its slow steps together,
over the run; a regression over the steps before it; a jitter spike over the run. Expected
time needs --min-slow-steps slow steps of one (stage, rank). Ranks are compared in groups
of 2 or more: groups of one rank (--group-by local-rank on one node) are merged into one
group, and a one-rank job has no stragglers (a line says so). A regression most ranks
share, as every rank of a synchronous job slows with a late one, is reported once as a
job-wide REGRESSION, with the rank that caused it when the frontier names one (the stage
whose frontier advance grew, and the rank furthest behind at its end in most steps since);
with no rank behind it, every rank slowed alike as a host's load does, and it is a
finding only at twice the effect floor.
The first --skip-steps steps of each rank (start-up) are left out.

WAIT ATTRIBUTION, from the NCCL calls in the logs: each collective is matched across
  ranks by communicator and sequence number; a rank's time inside it beyond the shortest
  is waiting, charged to the ranks that arrived late, in the stage that made them late
  (a rank late only for leaving its previous call late, as gloo's ranks leave in turn, is
  charged nothing: wait_attribution.carried_in_s).
  The detectors read each rank's own time (its stages less that waiting), so a rank whose
  stage grew only by waiting for a late peer is never named. A (rank, stage) whose caused
  waiting costs each peer at least max(1 ms, 2% of the step) per step, in 3 or more steps
  and 20% of them, and 3x the median rank's in that stage, is a CULPRIT: a finding alone,
  once its count of such steps is under a 1% chance for ranks late at random (one of two
  ranks late in 3 of 4 steps is luck: a short job on a busy host names no one).
",
    call_budget_help!(),
    "
SLOW lists culprits first (with the waiting they caused), then each (rank, stage) named
by L2 or expected time, by the waiting it caused and with every detector that agrees:
1 of 3 is a lead, 2 or 3 a finding.

Exit status: 0 nothing found; 4 a culprit, a slow rank or a regression found, above the
effect floor (a jitter spike counts with the slow rank it grew on; one no detector pins on
a rank paused the whole job, as a loaded host does, and is shown but no finding);
1 an error (no logs, an unreadable log, no step vectors)."
);

pub const EXAMPLES: &str = "\
Example: 4 ranks of sf-trainer-sim, rank 3's data wait 80 ms longer from step 20 on
(SF_INJECT=delay:rank=3,stage=data.next_wait,ms=80,step=20-39):
  $ sf slow /dev/shm/stagefrontier-$(id -u)/job-7
  /dev/shm/stagefrontier-1000/job-7: 4 ranks of a world of 4, up to 39 steps each (first 1 skipped), 6 stages, \
median step 0.282 s, compared by job
  SLOW rank 3 in data.next_wait: made the other ranks wait 4.901 s (40.9 ms per step each, 94% of all waiting); \
3 of 3 detectors: L2 z 1.50 (CV 0.497, severe); expected time 20 of 39 steps (worst 3.5 x T_expect 0.0318 s); \
L1 regression grew there
  ...
  $ echo $?
  4

Examples:
  sf slow JOBDIR; echo $?                               4 when something is slow, 0 when not
  sf slow JOBDIR --json | jq '.slow_ranks[] | select(.culprit or .detectors >= 2) | {rank, stage}'
  sf slow JOBDIR --group-by local-rank                  compare each GPU index across nodes
  sf slow JOBDIR --alpha 0.1 --beta 0.3                 VenusTrace thresholds
  sf slow /dev/shm/stagefrontier-$(id -u) --latest      the newest job in the log root";

#[derive(Args)]
pub struct SlowArgs {
    /// Job directories (one per node of a multi-node job), or directories holding them
    /// (sf snapshot's DEST, a log root): searched for the logs of one job
    #[arg(value_name = "DIR", required = true)]
    pub dir: Vec<PathBuf>,
    /// Leave out each rank's first N steps (start-up: communicator creation, caches)
    #[arg(long, value_name = "N", default_value = "1")]
    skip_steps: usize,
    /// Which ranks share a role and are compared in L2 and expected time
    #[arg(long, value_name = "ROLE", value_enum, default_value = "job")]
    group_by: GroupBy,
    /// L1 jitter: window width W in steps
    #[arg(long, value_name = "W", default_value = "8", value_parser = clap::value_parser!(u32).range(2..))]
    jitter_window: u32,
    /// L1 jitter: a window is anomalous when its max/min exceeds this
    #[arg(long, value_name = "R", default_value = "1.5", value_parser = non_negative)]
    jitter_ratio: f64,
    /// L1 regression: smallest ratio of mean step time after/before the change point
    #[arg(long, value_name = "R", default_value = "1.05", value_parser = non_negative)]
    min_regression: f64,
    /// L1 regression: largest CV (sd/mean) of the steps on either side
    #[arg(long, value_name = "CV", default_value = "0.1", value_parser = non_negative)]
    max_cv: f64,
    /// L2: z-score above which a rank is a straggler
    #[arg(long, value_name = "Z", default_value = "2", value_parser = non_negative)]
    z: f64,
    /// Expected time: a duration within this fraction of T_expect updates it
    #[arg(long, value_name = "A", default_value = "0.05", value_parser = non_negative)]
    alpha: f64,
    /// Expected time: a duration above T_expect x (1 + B) is slow
    #[arg(long, value_name = "B", default_value = "0.5", value_parser = non_negative)]
    beta: f64,
    /// Effect floor: smallest time per step a finding adds, as a fraction of the median
    /// step time
    #[arg(long, value_name = "F", default_value = "0.05", value_parser = non_negative)]
    min_effect: f64,
    /// Effect floor: ...and at least this many milliseconds per step
    #[arg(long, value_name = "MS", default_value = "1", value_parser = non_negative)]
    min_effect_ms: f64,
    /// Expected time: fewest slow steps that make a (stage, rank) a finding
    #[arg(long, value_name = "N", default_value = "2")]
    min_slow_steps: usize,
    #[command(flatten)]
    pub pick: PickArgs,
    #[command(flatten)]
    pub output: OutputArgs,
}

impl SlowArgs {
    pub fn options(&self) -> SlowOptions {
        SlowOptions {
            skip_steps: self.skip_steps,
            group_by: self.group_by,
            jitter_window: self.jitter_window as usize,
            jitter_ratio: self.jitter_ratio,
            min_regression: self.min_regression,
            max_cv: self.max_cv,
            z: self.z,
            alpha: self.alpha,
            beta: self.beta,
            min_effect: self.min_effect,
            min_effect_ms: self.min_effect_ms,
            min_slow_steps: self.min_slow_steps,
        }
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
    fn defaults_are_the_papers() {
        let Ok(Command::Slow { dir, options, format }) = parse("sf slow job") else { panic!() };
        assert_eq!((dir, format), (Dirs::one("job"), Format::Human));
        assert_eq!(
            (options.jitter_window, options.jitter_ratio, options.min_regression, options.max_cv),
            (8, 1.5, 1.05, 0.1)
        );
        assert_eq!((options.z, options.alpha, options.beta), (2.0, 0.05, 0.5));
        assert_eq!((options.skip_steps, options.group_by, options.min_slow_steps), (1, GroupBy::Job, 2));
        assert_eq!((options.min_effect, options.min_effect_ms), (0.05, 1.0), "the effect floor");
    }

    #[test]
    fn settings_and_their_errors() {
        let Ok(Command::Slow { options, format, .. }) =
            parse("sf slow job --json --group-by local-rank --alpha 0.1 --beta 0.3 --skip-steps 0 --jitter-window 4")
        else {
            panic!()
        };
        assert_eq!(format, Format::Json);
        assert_eq!(
            (options.group_by, options.alpha, options.beta, options.skip_steps, options.jitter_window),
            (GroupBy::LocalRank, 0.1, 0.3, 0, 4)
        );
        assert_eq!(parse("sf slow"), Err(ErrorKind::MissingRequiredArgument));
        assert_eq!(parse("sf slow job --group-by rack"), Err(ErrorKind::InvalidValue));
        assert_eq!(parse("sf slow job --beta=-1"), Err(ErrorKind::ValueValidation));
        assert_eq!(parse("sf slow job --jitter-window 1"), Err(ErrorKind::ValueValidation));
        assert_eq!(parse("sf slow --help"), Err(ErrorKind::DisplayHelp));
    }
}
