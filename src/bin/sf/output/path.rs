//! `sf path` output: JSON as the report is, or the headline and one line per slow pass.

use std::io::{self, Write};

use crate::cli::Format;
use stagefrontier::analysis::path::Phase;
use stagefrontier::report::path::{PathReport, SlowdownView};

pub fn write<W: Write>(format: Format, out: W, report: &PathReport) -> io::Result<()> {
    super::report(format, out, report, human)
}

/// Slow passes listed for people, the largest additions first.
const LISTED: usize = 8;

fn ms(ns: u64) -> String {
    format!("{:.1} ms", ns as f64 / 1e6)
}

fn phase(phase: Phase) -> &'static str {
    if phase == Phase::Fwd {
        "fwd"
    } else {
        "bwd"
    }
}

/// `pipeline stage 2, microbatch 4, bwd`, or `every microbatch` for a stage's spread one;
/// a span of two passes is named as both: `microbatch 4, fwd+bwd`, `microbatch 1 bwd +
/// microbatch 5 fwd`.
fn pass(s: &SlowdownView) -> String {
    let j = &s.judged;
    let microbatch = |m: Option<usize>| m.map_or_else(|| "every microbatch".to_string(), |m| format!("microbatch {m}"));
    let what = match j.merged_with {
        None => format!("{}, {}", microbatch(j.microbatch), phase(j.phase)),
        Some(other) if other.microbatch == j.microbatch => {
            format!("{}, {}+{}", microbatch(j.microbatch), phase(j.phase), phase(other.phase))
        }
        Some(other) => format!(
            "{} {} + {} {}",
            microbatch(j.microbatch),
            phase(j.phase),
            microbatch(other.microbatch),
            phase(other.phase)
        ),
    };
    format!("pipeline stage {}, {what}", j.stage)
}

/// A pipelined job's critical-path finding, as `sf slow` and `sf frontier` head with it.
pub(super) fn path_finding_line(f: &SlowdownView) -> String {
    format!(
        "SLOW {}: added {} to step {} on the critical path (rank {}{}; sf path walks it)",
        pass(f),
        ms(f.judged.added_ns),
        f.step,
        f.rank,
        held(f)
    )
}

/// `, held up by rank 5` when a peer of the stage held the pass up.
fn held(s: &SlowdownView) -> String {
    s.held_by.filter(|&r| r != s.rank).map_or_else(String::new, |r| format!(", held up by rank {r}"))
}

fn human<W: Write>(out: &mut W, report: &PathReport) -> io::Result<()> {
    // Nothing judged: the note says why, and is all there is to say.
    if let (Some(note), 0) = (&report.note, report.steps_judged) {
        return human_line!(out, "{}: {note}", report.dir);
    }
    let stages = report.pipelines.first().map_or(0, Vec::len);
    let head = format!(
        "{}: {} pipelines of {stages} stages, {} steps judged, passes timed on the {}",
        report.dir,
        report.pipelines.len(),
        report.steps_judged,
        report.timed_on
    );
    match &report.finding {
        Some(f) => human_line!(
            out,
            "{head}: SLOW: {} added {} to step {} (rank {}: {} against {} expected{}; the step took {})",
            pass(f),
            ms(f.judged.added_ns),
            f.step,
            f.rank,
            ms(f.judged.duration_ns),
            ms(f.judged.expected_ns),
            held(f),
            ms(f.judged.step_ns)
        )?,
        None => human_line!(out, "{head}: no slow pass on the critical path")?,
    }
    let on_path = report.slow.iter().filter(|s| s.judged.on_path).count();
    let findings = report.slow.iter().filter(|s| s.judged.finding).count();
    human_line!(
        out,
        "slowdowns (a pass {:.0}% over its expected duration, or a stage's passes together): {on_path} on the \
         critical path ({findings} adding {:.0}% of their step or more), {} absorbed by bubbles",
        report.excess_share * 100.0,
        report.step_share * 100.0,
        report.slow.len() - on_path
    )?;
    for s in report.slow.iter().take(LISTED) {
        let verdict = if s.judged.added_ns == 0 {
            format!("absorbed, within its {} of slack", ms(s.judged.slack_ns))
        } else {
            format!("added {} to the step", ms(s.judged.added_ns))
        };
        human_line!(
            out,
            "  step {} {} (rank {}{}): {} against {} expected, {verdict}",
            s.step,
            pass(s),
            s.rank,
            held(s),
            ms(s.judged.duration_ns),
            ms(s.judged.expected_ns)
        )?;
    }
    if report.slow.len() > LISTED {
        human_line!(out, "  ... {} more in --json", report.slow.len() - LISTED)?;
    }
    if let Some(note) = &report.note {
        human_line!(out, "note: {note}")?;
    }
    Ok(())
}
