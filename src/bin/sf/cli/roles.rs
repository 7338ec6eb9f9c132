//! `sf roles`' arguments and help, apart from cli.rs so that file stays a table of commands.

use std::path::PathBuf;

use clap::Args;

use super::{OutputArgs, PickArgs};

pub const LONG_ABOUT: &str = "\
The layout of a tensor-, pipeline- and data-parallel job (Megatron, NeMo, torchtitan), read
from the logs alone: nobody tells sf the layout. Each communicator gets a role (world, tp,
pp, dp, ep, cp or other) with the evidence for it, and each rank its 0-based coordinates.

The evidence: communicator creation (parent, colour, key, members' global ranks), the
calls each communicator carries and in what order, and send/recv peers. The rules:
  world  the first communicator made that spans every rank
  pp     send/recv joining ranks into a chain; a rank's stage is its place in the flow of
         activations (the first transfer between neighbours is a forward one)
  cp     send/recv around a ring (ring attention)
  ep     alltoall
  dp     reduce-scatter or all-gather (a distributed optimizer's gradient and parameter
         sync); or allreduce only, once per step apart from the pipeline's passes
  tp     allreduce only, between the pipeline's exchanges in more than half of the
         stretches (inside every forward and backward pass); without a pipeline, beside a
         dp communicator or with at least 2x the calls per member of the quietest
         allreduce-only communicator
  other  anything else; a communicator with no calls takes the role of one with the same
         members (a pipeline's group when its stages talk on 2-rank communicators)
A job with nothing but the world communicator is data parallel on it: dp = its size,
every rank tp=0 pp=0 dp=rank. tp and dp coordinates are the position in that group by
global rank; pp is the pipeline stage.

Group names confirm, never decide: where the Python door runs, each member records its
process groups' names (Megatron's group_desc: TENSOR_MODEL_PARALLEL_GROUP,
DATA_PARALLEL_GROUP, PIPELINE_MODEL_PARALLEL_GROUP, ...; torch's default_pg) with their
members; a communicator with the same members shows them and whether one names the role
inferred (`names_agree`), and a disagreement is a note, the inferred role standing.

--json: `layout` {tp, pp, dp, and ep, cp when found}, `ranks` [{rank, tp, pp, dp, ...}],
`communicators` [{comm_id, role, members, traffic, evidence, names, names_agree}],
`pipelines` (each a list of ranks in stage order), `flat`, `world_size`, `notes` (what
kept the answer from being whole) and `errors`.

Logs that hold no communicator's creation have no layout to tell: one line says so.

Exit status: 0; 1 when DIR holds no log or a log cannot be read.";

pub const EXAMPLES: &str = "\
Example: an 8-rank job, tp=2 pp=2 dp=2:
  $ sf roles /dev/shm/stagefrontier-$(id -u)/job-7
  /dev/shm/stagefrontier-1000/job-7: 8 ranks, layout tp=2 pp=2 dp=2
  ...

Examples:
  sf roles JOBDIR
  sf roles JOBDIR --json | jq -c '.ranks[] | select(.pp == 0)'   the ranks of the first stage
  sf roles /dev/shm/stagefrontier-$(id -u) --latest              the newest job of a log root";

#[derive(Args)]
pub struct RolesArgs {
    /// Job directories (one per node of a multi-node job), or directories holding them
    #[arg(value_name = "DIR", required = true)]
    pub dir: Vec<PathBuf>,
    #[command(flatten)]
    pub pick: PickArgs,
    #[command(flatten)]
    pub output: OutputArgs,
}

#[cfg(test)]
mod tests {
    use super::super::{parse_from, Command, Dirs, Format};

    #[test]
    fn takes_directories_and_json() {
        let parsed = parse_from("sf roles a b --json".split(' ')).ok();
        let dirs = Dirs::new(vec!["a".into(), "b".into()]);
        assert_eq!(parsed, Some(Command::Roles { dir: dirs, format: Format::Json }));
        assert!(parse_from(["sf", "roles"]).is_err());
    }
}
