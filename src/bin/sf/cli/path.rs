//! `sf path`'s arguments and help, apart from cli.rs so that file stays a table of commands.

use std::path::PathBuf;

use clap::Args;

use super::{OutputArgs, PickArgs};

pub const LONG_ABOUT: &str = "\
The pipeline's critical path (VenusTrace's approach), per step: which pass made the step
longer, and which slow passes a pipeline bubble absorbed.

The pipelines are sf roles': ranks joined by send/recv, in the order the activations flow.
Each stage's passes come from its step vector: the ordered-stage contract's forward and
backward stages, one per microbatch (model.fwd_loss_cpu_wall@M, model.backward_cpu_wall@M),
timed on the device where the CUDA door sampled them, else on the host. Per step and
pipeline they make a graph: a stage runs its passes in the order it ran them, a forward
needs the previous stage's forward of its microbatch, a backward the next stage's backward
and its own forward. The longest path through it is the step; a pass off it has slack.
The headline says what timed the passes (`timed_on`): in a job that launches its work
asynchronously, host stage times are launch times only and say nothing of the device's;
there the CUDA door's stage samples are needed.

A job that marks its steps only (Megatron with tensor parallelism 1 marks no passes) has
its passes from each stage's sends and receives on the pipeline's communicators, read
against Megatron's 1F1B order (`passes_from`: send_recv): a pass runs from the exchange
before it to the one after it, on the device between the exchanges' kernels where the CUDA
door linked them (an asynchronous job without it is not judged). Two passes with no
exchange between them (the last stage's forward and backward of a microbatch) are judged
as one span, named as both (`fwd+bwd`, JSON `merged_with`).

A pass is slow from 20% over its expected duration, the median of the same pass (stage,
microbatch, forward or backward) over every step and pipeline (DP replicas and TP copies):
a slowdown in more than half of those is the job's normal. It is a finding only when it
lengthened its step, recomputed with the pass at its expected duration, by at least 5% of
the step: VenusTrace's 50% alone would miss a few percent of a step spread over every
microbatch of a stage. A slow pass within its slack is reported as absorbed, never as a
finding. The first step (a warm-up: communicators connect) is left out.

Exit status: 0 nothing found, absorbed slowdowns only, or no pipeline; 4 a slow pass on the
critical path; 1 no logs or an unreadable log.";

pub const EXAMPLES: &str = "\
Examples:
  sf path JOBDIR; echo $?                            4 when a pass lengthened a step
  sf path JOBDIR --json | jq '.finding | {stage, microbatch, phase, added_ns}'
  sf path /dev/shm/stagefrontier-$(id -u) --latest   the newest job of a log root";

#[derive(Args)]
pub struct PathArgs {
    /// Job directories (one per node of a multi-node job), or directories holding them
    #[arg(value_name = "DIR", required = true)]
    pub dir: Vec<PathBuf>,
    #[command(flatten)]
    pub pick: PickArgs,
    #[command(flatten)]
    pub output: OutputArgs,
}
