//! Which ranks `sf frontier` compares: the frontier assumes every rank does the same work,
//! which holds for data parallelism and not across a pipeline's stages (the first stage
//! runs the embedding, the last the loss, and each waits in its bubbles). In a pipelined
//! job the ranks of one pipeline stage (its tensor- and data-parallel ranks) do the same
//! work; `sf roles` finds them from the logs alone.

use super::discover::Dirs;
use super::roles;
use super::Failure;

/// A pipelined job's layout line (`tp=2 pp=2 dp=2`) and each pipeline stage's ranks, by
/// stage (0-based), ascending.
pub struct PipelineStages {
    pub layout: String,
    pub stages: Vec<(usize, Vec<u32>)>,
}

impl PipelineStages {
    /// The ranks of pipeline stage `stage`.
    pub fn ranks_of(&self, stage: usize) -> &[u32] {
        self.stages.iter().find(|(s, _)| *s == stage).map_or(&[], |(_, ranks)| ranks)
    }
}

/// The pipeline stages of the job in `dir`, when `sf roles` finds a pipeline (every
/// rank placed in one); `None` for a job without one, or whose ranks it could not place.
pub fn pipeline_stages(dir: &Dirs) -> Result<Option<PipelineStages>, Failure> {
    let roles = roles::build(dir)?.roles;
    if roles.layout.pp < 2 || roles.ranks.iter().any(|r| r.pp.is_none()) {
        return Ok(None);
    }
    let mut stages: Vec<(usize, Vec<u32>)> = Vec::new();
    for r in &roles.ranks {
        let stage = r.pp.expect("every rank has a stage");
        match stages.iter_mut().find(|(s, _)| *s == stage) {
            Some((_, ranks)) => ranks.push(r.rank),
            None => stages.push((stage, vec![r.rank])),
        }
    }
    stages.sort_unstable();
    Ok(Some(PipelineStages { layout: roles.layout.line(), stages }))
}
