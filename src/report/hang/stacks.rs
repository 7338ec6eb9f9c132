//! The Python stacks `sf hang` shows: every rank's newest sample, the culprits' first,
//! and the others grouped by where they stand.

use serde::Serialize;

use super::{PostMortemReport, RankReport};
use crate::analysis::hang::State;
use crate::core::log::records::{StackReason, StackStatus};
use crate::report::stacks::{FrameReport, RankStacks};

/// Frames of a group's stack its summary names, innermost first.
const SUMMARY_FRAMES: usize = 3;

/// What `sf hang` says of the ranks' stacks (flattened into its JSON).
#[derive(Debug, Default, Serialize)]
pub struct HangStacks {
    /// Every rank's newest sample, by rank (ranks without one left out).
    pub stacks: Vec<RankStacks>,
    /// The ranks whose current stacks are the same, culprits' groups first: where each
    /// rank's code stands now.
    pub stack_groups: Vec<StackGroup>,
    /// With `--stacks`: what each live rank answered.
    pub stacks_asked: Option<Vec<StackAnswer>>,
}

/// Ranks whose main threads stand at the same frames.
#[derive(Debug, Serialize)]
pub struct StackGroup {
    pub ranks: Vec<i32>,
    /// Holds a rank the verdict names.
    pub culprit: bool,
    /// `broadcast (distributed_c10d.py:2120) ← _sync_buffers (distributed.py:1712) ← …`.
    pub summary: String,
    /// The group's stack (its main thread's), innermost first.
    pub frames: Vec<FrameReport>,
}

/// One live rank's answer to `sf hang --stacks`.
#[derive(Debug, Serialize)]
pub struct StackAnswer {
    pub rank: i32,
    pub answered: bool,
    pub waited_s: f64,
    /// Why no answer came (not asked, the log could not be written, no reply in time).
    pub note: Option<String>,
}

/// The ranks the verdict names: those it marks as holding the job up, or a post-mortem's.
pub(super) fn culprits(ranks: &[RankReport], post_mortem: Option<&PostMortemReport>) -> Vec<i32> {
    let named = ranks.iter().filter(|r| {
        matches!(r.role, State::Missing | State::Wedged | State::StuckQp | State::Behind | State::StuckKernel)
    });
    let mut culprits: Vec<i32> = named.map(|r| r.rank).collect();
    culprits.extend(post_mortem.iter().flat_map(|p| p.culprit_ranks.iter().copied()));
    culprits.sort_unstable();
    culprits.dedup();
    culprits
}

/// The groups of samples that read (`taken`) and show where the rank stands: current ones,
/// and answers to a request (the operator asked where it is now, and it may have moved on
/// since), culprits' first, then larger first.
pub(super) fn groups(stacks: &[RankStacks], culprits: &[i32]) -> Vec<StackGroup> {
    let mut groups: Vec<StackGroup> = Vec::new();
    let now = |s: &&RankStacks| s.current || s.reason == StackReason::Request;
    for s in stacks.iter().filter(now).filter(|s| s.status == StackStatus::Taken) {
        let Some(thread) = s.lead_thread() else { continue };
        let culprit = culprits.contains(&s.rank);
        match groups.iter_mut().find(|g| g.frames == thread.frames) {
            Some(g) => {
                g.ranks.push(s.rank);
                g.culprit |= culprit;
            }
            None => groups.push(StackGroup {
                ranks: vec![s.rank],
                culprit,
                summary: summary(&thread.frames),
                frames: thread.frames.clone(),
            }),
        }
    }
    groups.sort_by_key(|g| (!g.culprit, std::cmp::Reverse(g.ranks.len()), g.ranks[0]));
    groups
}

/// The innermost frames, then the innermost frame of the job's own code when it is
/// deeper: where the rank stands, and which line of the training script got it there.
fn summary(frames: &[FrameReport]) -> String {
    if frames.is_empty() {
        return "no Python frame (outside the interpreter, or between calls)".into();
    }
    let own = frames.iter().position(|f| !library_file(&f.file));
    // The own frame in reach: every frame down to it. Deeper: a gap marked before it.
    let (inner, tail) = match own {
        Some(at) if at > SUMMARY_FRAMES => (SUMMARY_FRAMES - 1, Some(at)),
        Some(at) => (SUMMARY_FRAMES.max(at + 1), None),
        None => (SUMMARY_FRAMES, None),
    };
    let mut parts: Vec<String> = frames.iter().take(inner).map(FrameReport::short).collect();
    if frames.len() > inner {
        parts.push("…".into());
    }
    if let Some(at) = tail {
        parts.push(frames[at].short());
    }
    parts.join(" ← ")
}

/// A file of Python's own library, an installed package or this tool's door: not the
/// job's code.
fn library_file(file: &str) -> bool {
    file.contains("/site-packages/")
        || file.contains("/dist-packages/")
        || file.starts_with('<')
        || file.rsplit('/').next().is_some_and(|name| name.starts_with("stagefrontier"))
        || file.split('/').any(|part| part.starts_with("python3") || part.starts_with("python2"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::stacks::ThreadReport;

    fn at(rank: i32, lines: &[i32], current: bool) -> RankStacks {
        let frames =
            lines.iter().map(|&line| FrameReport { function: "f".into(), file: "/a/t.py".into(), line }).collect();
        RankStacks {
            rank,
            sample: 1,
            reason: StackReason::Stall,
            status: StackStatus::Taken,
            note: None,
            t_ns: 0,
            wall_ns: 0,
            current,
            dropped: 0,
            read_us: 0,
            threads: vec![ThreadReport {
                os_tid: 1,
                name: "MainThread".into(),
                main: true,
                active: false,
                owns_gil: false,
                depth: lines.len() as u16,
                frames,
            }],
        }
    }

    #[test]
    fn ranks_at_the_same_frames_group_and_the_culprits_group_comes_first() {
        let stacks = [at(0, &[5, 9], true), at(1, &[5, 9], true), at(2, &[7, 9], true), at(3, &[5, 9], true)];
        let g = groups(&stacks, &[2]);
        assert_eq!(g.iter().map(|g| g.ranks.clone()).collect::<Vec<_>>(), vec![vec![2], vec![0, 1, 3]]);
        assert!(g[0].culprit && !g[1].culprit);
        assert_eq!(g[1].summary, "f (t.py:5) ← f (t.py:9)");
    }

    #[test]
    fn a_summary_reaches_down_to_the_jobs_own_line() {
        let frame = |file: &str, line| FrameReport { function: "f".into(), file: file.into(), line };
        let torch = "/venv/lib/python3.11/site-packages/torch/autograd/graph.py";
        let frames = [frame(torch, 1), frame(torch, 2), frame(torch, 3), frame("/home/me/train.py", 131)];
        assert_eq!(summary(&frames), "f (graph.py:1) ← f (graph.py:2) ← f (graph.py:3) ← f (train.py:131)");
        let deeper = [frame(torch, 1), frame(torch, 2), frame(torch, 3), frame(torch, 4), frame("/job/t.py", 9)];
        assert_eq!(summary(&deeper), "f (graph.py:1) ← f (graph.py:2) ← … ← f (t.py:9)");
        let own_first = [frame("/job/t.py", 9), frame(torch, 1), frame(torch, 2), frame(torch, 3)];
        assert_eq!(summary(&own_first), "f (t.py:9) ← f (graph.py:1) ← f (graph.py:2) ← …");
        assert!(library_file("/usr/lib/python3.11/threading.py") && library_file("<frozen runpy>"));
        assert!(!library_file("/work/python/train.py"));
    }

    #[test]
    fn a_sample_from_before_the_rank_last_advanced_is_left_out() {
        let g = groups(&[at(0, &[5], false), at(1, &[5], true)], &[]);
        assert_eq!(g.len(), 1);
        assert_eq!(g[0].ranks, vec![1]);
    }
}
