//! `sf hang`'s stack lines: the culprit's Python stack under the headline, then the other
//! ranks grouped by where their code stands, and what `--stacks` got back.

use stagefrontier::core::log::records::StackStatus;
use stagefrontier::report::hang::HangReport;
use stagefrontier::report::stacks::RankStacks;

use super::human::{age, json_name, ranges};

/// Frames of a culprit's stack shown; `--json` has them all.
const FRAMES_SHOWN: usize = 12;

/// Whether stacks belong in the human report: a verdict names ranks, or the operator
/// asked for them.
fn shown(report: &HangReport) -> bool {
    report.hung || report.post_mortem.is_some() || report.stacks.stacks_asked.is_some()
}

/// Seconds between a sample and the report, by the wall clock.
fn age_s(s: &RankStacks) -> f64 {
    stagefrontier::core::record::clock::wall_ns().saturating_sub(s.wall_ns) as f64 / 1e9
}

/// Under the headline: each culprit group's stack, frame by frame, for one rank of it.
pub(super) fn culprit_lines(report: &HangReport) -> Vec<String> {
    if !shown(report) {
        return Vec::new();
    }
    let mut lines = Vec::new();
    for group in report.stacks.stack_groups.iter().filter(|g| g.culprit) {
        let Some(s) = report.stacks.stacks.iter().find(|s| s.rank == group.ranks[0]) else { continue };
        let Some(thread) = s.lead_thread() else { continue };
        let others =
            if group.ranks.len() > 1 { format!(" (and ranks {})", ranges(&group.ranks[1..])) } else { String::new() };
        lines.push(format!(
            "  rank {}'s Python stack{others}, {} sample at {} ({} ago), {} thread{}:",
            s.rank,
            json_name(&s.reason),
            stagefrontier::report::wall::rfc3339_ms(s.wall_ns),
            age(age_s(s)),
            if thread.main { "main".to_string() } else { format!("{:?}", thread.name) },
            if thread.active { "" } else { ", idle" }
        ));
        for frame in thread.frames.iter().take(FRAMES_SHOWN) {
            lines.push(format!("    {}", frame.short()));
        }
        let more = usize::from(thread.depth).saturating_sub(FRAMES_SHOWN.min(thread.frames.len()));
        if more > 0 {
            lines.push(format!("    … {more} more frames (--json has the {} recorded)", thread.frames.len()));
        }
    }
    lines
}

/// After the verdict: where every rank with a current stack stands, one line a group.
pub(super) fn group_lines(report: &HangReport) -> Vec<String> {
    if !shown(report) {
        return Vec::new();
    }
    let mut lines = Vec::new();
    let groups = &report.stacks.stack_groups;
    if !groups.is_empty() {
        lines.push("where each rank's Python code stands:".to_string());
        for g in groups {
            let who = format!("{} {}", if g.ranks.len() == 1 { "rank" } else { "ranks" }, ranges(&g.ranks));
            lines.push(format!("  {who}: {}", g.summary));
        }
    }
    let failed: Vec<&RankStacks> = report.stacks.stacks.iter().filter(|s| s.status == StackStatus::Failed).collect();
    if report.stacks.stacks_asked.is_some() {
        for s in failed {
            lines.push(format!(
                "  rank {}: stack not read: {}",
                s.rank,
                s.note.as_deref().unwrap_or("no reason given")
            ));
        }
    }
    if let Some(answers) = &report.stacks.stacks_asked {
        let answered: Vec<i32> = answers.iter().filter(|a| a.answered).map(|a| a.rank).collect();
        let slowest = answers.iter().filter(|a| a.answered).map(|a| a.waited_s).fold(0.0, f64::max);
        lines.push(format!(
            "asked {} live {} for stacks: {} answered within {slowest:.2} s",
            answers.len(),
            if answers.len() == 1 { "rank" } else { "ranks" },
            answered.len()
        ));
        for a in answers.iter().filter(|a| !a.answered) {
            lines.push(format!("  rank {}: no stacks: {}", a.rank, a.note.as_deref().unwrap_or("no answer")));
        }
    }
    lines
}
