//! `sf slow` for people (the answer first, then each detector's table) and for scripts.

use std::io::{self, Write};

use super::human::plural;
use super::table::{self, Align};
use crate::cli::Format;
use stagefrontier::report::slow::{JobRegressionReport, L1Report, RegressionReport, SlowRankReport, SlowReport};

/// Step runs shown before "and N more"; the JSON output has every step.
const RUNS_AT_MOST: usize = 8;

pub fn write<W: Write>(format: Format, out: W, report: &SlowReport) -> io::Result<()> {
    super::report(format, out, report, human)
}

fn human<W: Write>(out: &mut W, r: &SlowReport) -> io::Result<()> {
    let steps = r.l1.iter().map(|l| l.steps).max().unwrap_or(0) as u64;
    human_line!(
        out,
        "{}: {} of a world of {}, up to {} each (first {} skipped), {}, median step {:.3} s, compared by {}",
        r.dir,
        plural(r.ranks as u64, "rank"),
        r.world,
        plural(steps, "step"),
        r.skip_steps,
        plural(r.stages.len() as u64, "stage"),
        r.median_step_s,
        r.group_by
    )?;
    if let Some(inferred) = &r.inferred {
        human_line!(out, "{}", inferred.line())?;
    }
    if let Some(step) = r.history_starts_at_step {
        human_line!(out, "{}", stagefrontier::report::history_note(step))?;
    }
    if let Some(window) = &r.call_window {
        human_line!(out, "{}", window.note())?;
    }
    if let Some(step) = r.waits_start_at_step {
        human_line!(out, "{}", stagefrontier::report::waits_note(step))?;
    }
    if !r.ranks_without_steps.is_empty() {
        human_line!(out, "no steps to judge on ranks {}", list(&r.ranks_without_steps))?;
    }
    if !r.merged_groups.is_empty() {
        human_line!(
            out,
            "note: groups {} have one rank each, too few to compare: compared together as one group, merged",
            r.merged_groups.join(", ")
        )?;
    }
    for g in &r.skipped_groups {
        human_line!(
            out,
            "note: group {} has {}, too few to compare: no stragglers there (L2 and expected time skipped it)",
            g.group,
            plural(g.ranks as u64, "rank")
        )?;
    }
    if let Some(f) = &r.path_finding {
        human_line!(out, "{}", super::path::path_finding_line(f))?;
    }
    if let Some(g) = &r.job_regression {
        human_line!(out, "{}", job_regression_line(g, r.ranks))?;
    }
    for s in &r.slow_ranks {
        human_line!(out, "{}", slow_line(s, r))?;
    }
    for s in &r.leads {
        human_line!(out, "{}", lead_line(s, r))?;
    }
    if !r.found && r.leads.is_empty() {
        human_line!(
            out,
            "nothing slow: no straggler, slow stage or regression found above the effect floor, {:.4} s per step \
             (--min-effect {} of the step, at least --min-effect-ms {})",
            r.floor_s,
            r.params.min_effect,
            r.params.min_effect_ms
        )?;
    } else if r.slow_ranks.is_empty() && r.job_regression.is_none() {
        // The finding is a rank's own regression, which no other detector placed in a
        // stage: the headline names it, as the exit status (4) says a finding.
        for l in &r.l1 {
            if let Some(g) = l.regression.as_ref().filter(|g| g.finding) {
                human_line!(out, "{}", own_regression_line(l.rank, g))?;
            }
        }
    }
    for l in &r.l1 {
        if let Some(g) = l.regression.as_ref().filter(|g| !g.job_wide && !g.finding) {
            human_line!(
                out,
                "note: rank {}'s own step time rose x{:.2} from step {} ({:.4} s per step), L1 alone and under twice \
                 the effect floor: not a finding",
                l.rank,
                g.ratio,
                g.step,
                g.mean_after_s - g.mean_before_s
            )?;
        }
    }
    if r.slow_ranks.is_empty() && r.l1.iter().any(|l| l.jitter.iter().any(|j| j.effective_first_step.is_some())) {
        human_line!(
            out,
            "note: L1 saw jitter spikes that no detector pins on a rank: the whole job paused (a loaded host, a \
             shared stall); shown below, not a finding"
        )?;
    }
    human_line!(out, "waits from: {}", r.waits_from_reason)?;

    writeln!(out)?;
    human_line!(
        out,
        "L1: each rank's own step time, wall less its waiting in collectives (jitter window {}, max/min > {})",
        r.params.jitter_window,
        r.params.jitter_ratio
    )?;
    let rows: Vec<Vec<String>> = r.l1.iter().flat_map(l1_rows).collect();
    table::write(
        out,
        &[
            ("RANK", Align::Right),
            ("STEPS", Align::Right),
            ("MEDIAN_S", Align::Right),
            ("CLASS", Align::Left),
            ("EVENT", Align::Left),
        ],
        &rows,
    )?;

    let uneven: Vec<_> = r.l2.iter().filter(|g| g.imbalance != "balanced" || !g.stragglers.is_empty()).collect();
    writeln!(out)?;
    human_line!(
        out,
        "L2: mean stage time across each group's ranks ({} of {} group stages balanced, CV < {})",
        r.l2.len() - uneven.len(),
        r.l2.len(),
        r.params.mild_cv
    )?;
    if !uneven.is_empty() {
        let rows: Vec<Vec<String>> = uneven
            .iter()
            .map(|g| {
                let stragglers: Vec<String> =
                    g.stragglers.iter().map(|s| format!("{} (z {:.2}, {:.4} s)", s.rank, s.z, s.mean_s)).collect();
                vec![
                    g.group.clone(),
                    g.stage.clone(),
                    format!("{:.4}", g.mean_s),
                    format!("{:.3}", g.cv),
                    g.imbalance.to_string(),
                    if stragglers.is_empty() { "-".to_string() } else { stragglers.join(", ") },
                ]
            })
            .collect();
        table::write(
            out,
            &[
                ("GROUP", Align::Left),
                ("STAGE", Align::Left),
                ("MEAN_S", Align::Right),
                ("CV", Align::Right),
                ("GRADE", Align::Left),
                ("STRAGGLERS", Align::Left),
            ],
            &rows,
        )?;
    }

    writeln!(out)?;
    human_line!(
        out,
        "EXPECTED TIME: stage advances above T_expect x {} (alpha {}, beta {})",
        1.0 + r.params.beta,
        r.params.alpha,
        r.params.beta
    )?;
    if r.expected_time.is_empty() {
        human_line!(out, "no stage was slow in {} or more steps", r.params.min_slow_steps)?;
    } else {
        let rows: Vec<Vec<String>> = r
            .expected_time
            .iter()
            .map(|e| {
                vec![
                    e.group.clone(),
                    e.stage.clone(),
                    e.rank.to_string(),
                    format!("{} of {}", e.slow_steps.len(), e.observed_steps),
                    step_runs(&e.slow_steps),
                    format!("{:.1}x", e.worst_ratio),
                    format!("{:.4}", e.expected_s),
                ]
            })
            .collect();
        table::write(
            out,
            &[
                ("GROUP", Align::Left),
                ("STAGE", Align::Left),
                ("RANK", Align::Right),
                ("SLOW", Align::Right),
                ("STEPS", Align::Left),
                ("WORST", Align::Right),
                ("T_EXPECT_S", Align::Right),
            ],
            &rows,
        )?;
    }
    Ok(())
}

/// `REGRESSION from step 20 on every rank: ... caused by rank 3 in data.next_wait ...`.
fn job_regression_line(g: &JobRegressionReport, ranks: usize) -> String {
    let who = if g.ranks.len() == ranks { "every rank".to_string() } else { format!("ranks {}", list(&g.ranks)) };
    let cause = match &g.cause {
        Some(c) => format!(
            "caused by rank {} in {}: that stage's frontier advance grew {:.4} s per step, and rank {} was alone \
             furthest behind at its end in {} of {} steps since",
            c.rank, c.stage, c.growth_s, c.rank, c.led_steps, c.steps
        ),
        None if g.finding => "the frontier names no single rank that caused it".to_string(),
        None => "the frontier names no single rank that caused it: every rank slowed alike, as a host's load \
                 does, by less than twice the effect floor; no finding"
            .to_string(),
    };
    format!(
        "REGRESSION from step {} on {who}, one event of the job: {:.4} -> {:.4} s per step (x{:.2}); {cause}",
        g.step, g.mean_before_s, g.mean_after_s, g.ratio
    )
}

/// `SLOW rank 2: its own step time regressed from step 20 ...`: a rank's L1 regression that
/// neither L2, expected time nor the wait attribution placed in a stage.
fn own_regression_line(rank: u32, g: &RegressionReport) -> String {
    let stage = match (&g.stage, g.stage_delta_s) {
        (Some(stage), Some(delta)) => format!(", most of it in {stage} (+{delta:.4} s)"),
        _ => String::new(),
    };
    format!(
        "SLOW rank {rank}: its own step time (less its waiting) regressed from step {}: {:.4} -> {:.4} s (x{:.2}){stage}; \
         L1 alone: no other rank or detector confirms it",
        g.step, g.mean_before_s, g.mean_after_s, g.ratio
    )
}

/// `SLOW rank 3 in data.next_wait: made the other ranks wait ...; 3 of 3 detectors: ...`:
/// the answer, with its evidence.
fn slow_line(s: &SlowRankReport, r: &SlowReport) -> String {
    let caused = s.culprit.as_ref().map(|c| {
        format!(
            "made the other ranks wait {:.3} s ({:.1} ms per step each, {:.0}% of all waiting)",
            c.caused_s,
            c.delay_per_step_s * 1e3,
            c.wait_share * 100.0
        )
    });
    let mut evidence = Vec::new();
    if let Some(l2) = &s.l2 {
        let grade = if l2.cv >= r.params.severe_cv { "severe" } else { "mild" };
        evidence.push(format!("L2 z {:.2} (CV {:.3}, {grade})", l2.z, l2.cv));
    }
    if let Some(e) = &s.expected_time {
        let worst = r.expected_time.iter().find(|x| x.rank == s.rank && x.stage == s.stage && x.group == s.group);
        let worst = worst
            .map_or_else(String::new, |x| format!(" (worst {:.1} x T_expect {:.4} s)", x.worst_ratio, x.expected_s));
        evidence.push(format!("expected time {} of {} steps{worst}", e.slow_steps, e.observed_steps));
    }
    match (s.l1_regression, s.l1_jitter) {
        (true, true) => evidence.push("L1 regression and jitter grew there".into()),
        (true, false) => evidence.push("L1 regression grew there".into()),
        (false, true) => evidence.push("L1 jitter grew there".into()),
        (false, false) => {}
    }
    let detectors = match (s.detectors, &caused) {
        (0, _) => String::new(),
        (n, None) if n < 2 => format!("{n} of 3 detectors (a lead: one detector): {}", evidence.join("; ")),
        (n, _) => format!("{n} of 3 detectors: {}", evidence.join("; ")),
    };
    let answer: Vec<String> = caused.into_iter().chain((!detectors.is_empty()).then_some(detectors)).collect();
    format!("SLOW rank {} in {}: {}", s.rank, s.stage, answer.join("; "))
}

/// `LEAD rank 3 in model.backward_cpu_wall: ...`: what a finding would say, when the waits
/// could not be seen and the rank may have been waiting.
fn lead_line(s: &SlowRankReport, r: &SlowReport) -> String {
    let line = slow_line(s, r);
    let said = line.strip_prefix("SLOW").unwrap_or(&line);
    format!("LEAD{said}; a lead, not a finding: the waits could not be seen, and the rank may have waited")
}

fn l1_rows(l: &L1Report) -> Vec<Vec<String>> {
    let mut events: Vec<String> = Vec::new();
    if let Some(g) = &l.regression {
        let mut e = if g.job_wide {
            format!("in the job-wide regression from step {} (x{:.2})", g.step, g.ratio)
        } else {
            format!(
                "regression from step {}: {:.4} -> {:.4} s (x{:.2}, CV {:.3} / {:.3})",
                g.step, g.mean_before_s, g.mean_after_s, g.ratio, g.cv_before, g.cv_after
            )
        };
        if let (Some(stage), Some(d)) = (&g.stage, g.stage_delta_s) {
            e += &format!(", grew in {stage} (+{d:.4} s)");
        }
        events.push(e);
    }
    for j in &l.jitter {
        let mut e = format!("jitter in steps {}-{}, max/min {:.2}", j.first_step, j.last_step, j.max_ratio);
        match (j.effective_first_step, j.effective_last_step) {
            (Some(a), Some(b)) => {
                e += &format!(": spike {} over {:.4} s", step_span(a, b, j.effective_width), j.baseline_s);
            }
            _ => e += ": a dip, no spike",
        }
        if let (Some(stage), Some(d)) = (&j.stage, j.stage_excess_s) {
            e += &format!(", grew in {stage} (+{d:.4} s)");
        }
        events.push(e);
    }
    if events.is_empty() {
        events.push("-".into());
    }
    events
        .into_iter()
        .enumerate()
        .map(|(i, event)| {
            let first = i == 0;
            let cell = |text: String| if first { text } else { String::new() };
            vec![
                cell(l.rank.to_string()),
                cell(l.steps.to_string()),
                cell(format!("{:.4}", l.median_step_s)),
                cell(l.class.to_string()),
                event,
            ]
        })
        .collect()
}

fn step_span(a: u64, b: u64, width: usize) -> String {
    if a == b {
        format!("at step {a}")
    } else {
        format!("in steps {a}-{b} ({width} steps)")
    }
}

/// Sorted steps as runs, `20-38, 41`.
fn step_runs(steps: &[u64]) -> String {
    stagefrontier::report::rank_list::runs(steps, RUNS_AT_MOST)
}

fn list(ranks: &[u32]) -> String {
    ranks.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_as_runs() {
        assert_eq!(step_runs(&[20, 21, 22, 25, 30, 31]), "20-22, 25, 30-31");
        let many: Vec<u64> = (0..40).step_by(2).collect();
        assert!(step_runs(&many).ends_with("14, and 12 more"), "{}", step_runs(&many));
        assert_eq!(step_span(7, 7, 1), "at step 7");
    }

    #[test]
    fn a_ranks_own_regression_is_a_slow_line() {
        let g = RegressionReport {
            step: 20,
            mean_before_s: 0.1,
            mean_after_s: 0.15,
            ratio: 1.5,
            cv_before: 0.01,
            cv_after: 0.01,
            stage: Some("fwd".into()),
            stage_delta_s: Some(0.05),
            job_wide: false,
            finding: true,
        };
        let line = own_regression_line(2, &g);
        assert!(line.starts_with("SLOW rank 2: its own step time"), "{line}");
        assert!(line.contains("from step 20: 0.1000 -> 0.1500 s (x1.50), most of it in fwd"), "{line}");
    }
}
