//! `sf frontier`'s human tables: a window's head lines, its stage table and its labels.

use super::human::{as_i32, plural, ranges};
use super::table::Align;
use stagefrontier::report::frontier::{StageMap, WindowReport};

pub(super) fn window_head(w: &WindowReport) -> Vec<String> {
    let per_step = w.exposed_s / w.steps as f64;
    let closed = match w.closed_by {
        "end" => "the end of the input",
        "length" => "its length",
        "schema_change" => "the next step's other stages",
        "world_change" => "the next step's other world size",
        _ => "the next step's other missing ranks",
    };
    let mut lines = vec![format!(
        "steps {}-{} ({}, {} ranks, closed by {closed}): exposed {:.6} s, {:.6} s per step",
        w.first_step,
        w.last_step,
        plural(w.steps as u64, "step"),
        w.ranks,
        w.exposed_s,
        per_step
    )];
    if !w.missing_ranks.is_empty() {
        lines.push(format!("missing ranks {}", ranges(&as_i32(&w.missing_ranks))));
    }
    // When some rank's lateness is what the others spent their time waiting for, that is
    // the answer: the frontier's stages below are read on own time.
    for c in &w.culprits {
        lines.push(format!(
            "CULPRIT rank {} in {}: made the other ranks wait {:.3} s ({:.1} ms per step each, {:.0}% of all waiting)",
            c.rank,
            c.stage,
            c.caused_s,
            c.delay_per_step_s * 1e3,
            c.wait_share * 100.0
        ));
    }
    // Without the waits, the frontier's leader may be a rank that waited: a lead to look at.
    for l in &w.leads {
        let alone = if l.tied == 1 { "alone".to_string() } else { format!("tied with {} other", l.tied - 1) };
        let share = l.share.map_or(String::new(), |s| format!(", {:.0}% of the exposed time", s * 100.0));
        lines.push(format!(
            "LEAD rank {} in {}: last to finish the top stage most often ({alone}{share}); a lead, not a finding: \
             the waits could not be seen",
            l.rank, l.stage
        ));
    }
    lines.push(match &w.top1 {
        Some(top1) => format!("routing set {} (top-1 {top1}; top-2 {})", w.routing_set.join(", "), w.top2.join(", ")),
        None => "no shares: the window's exposed time is under the floor".to_string(),
    });
    lines
}

pub(super) fn frontier_columns(w: &WindowReport) -> Vec<(String, Align)> {
    let local = format!("RANK{}_S", w.baselines.local_rank);
    ["STAGE", "ADVANCE_S", "SHARE", "GAIN", "LEADER_RANKS", "MAX_S", "AVG_S", "SPREAD_S", "SLOWEST_S", &local]
        .iter()
        .enumerate()
        .map(|(i, title)| (title.to_string(), if i == 0 || i == 4 { Align::Left } else { Align::Right }))
        .collect()
}

pub(super) fn window_rows(w: &WindowReport) -> Vec<Vec<String>> {
    let b = &w.baselines;
    let value = |map: &StageMap<f64>, i: usize, digits: usize| {
        map.0.get(i).map_or("-".to_string(), |(_, v)| format!("{v:.digits$}"))
    };
    let total = |map: &StageMap<f64>| format!("{:.6}", map.0.iter().map(|(_, v)| v).sum::<f64>());
    let mut rows: Vec<Vec<String>> = w
        .advances_s
        .0
        .iter()
        .enumerate()
        .map(|(i, (stage, advance))| {
            let leaders = &w.leader_ranks.0[i].1;
            let tied = w.leader_tie_counts.0[i].1;
            let mut cell = if leaders.is_empty() { "-".to_string() } else { ranges(&as_i32(leaders)) };
            if tied > leaders.len() {
                cell += &format!(" (+{})", tied - leaders.len());
            }
            vec![
                stage.clone(),
                format!("{advance:.6}"),
                value(&w.shares, i, 3),
                value(&w.gains, i, 3),
                cell,
                value(&b.per_stage_max_s, i, 6),
                value(&b.per_stage_avg_s, i, 6),
                value(&b.rank_spread_s, i, 6),
                value(&b.slowest_rank_s, i, 6),
                value(&b.local_rank_s, i, 6),
            ]
        })
        .collect();
    let share_total = if w.shares.0.is_empty() { "-".to_string() } else { "1.000".to_string() };
    rows.push(vec![
        "total".to_string(),
        format!("{:.6}", w.exposed_s),
        share_total,
        String::new(),
        String::new(),
        total(&b.per_stage_max_s),
        total(&b.per_stage_avg_s),
        total(&b.rank_spread_s),
        total(&b.slowest_rank_s),
        total(&b.local_rank_s),
    ]);
    rows
}

pub(super) fn window_tail(w: &WindowReport) -> Vec<String> {
    let t = &w.baselines.top1;
    let mut lines = vec![format!(
        "baselines' top stage: per-stage max {}, average {}, rank spread {}, slowest rank ({} most often) {}, rank {} {}",
        t.per_stage_max,
        t.per_stage_avg,
        t.rank_spread,
        w.baselines.slowest_rank,
        t.slowest_rank,
        w.baselines.local_rank,
        t.local_rank
    )];
    let width = w.labels.iter().map(|l| l.label.len()).max().unwrap_or(0);
    for label in &w.labels {
        let mut reason = label.reason.clone();
        if label.label == "co_critical" {
            reason = format!("[{}] {reason}", w.co_critical_stages.join(", "));
        }
        lines.push(format!("  {:<width$}  {reason}", label.label));
    }
    lines
}
