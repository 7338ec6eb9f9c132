//! Tables and lines for people at a terminal.

use std::io::{self, Write};

use serde::Serialize;

use super::human_frontier::{frontier_columns, window_head, window_rows, window_tail};
use super::human_hang::{self, mismatch_lines};
use super::table::{self, Align};
use super::Output;
use stagefrontier::analysis::log::ends::FirstEnd;
use stagefrontier::report::frontier::FrontierReport;
use stagefrontier::report::hang::HangReport;
use stagefrontier::report::ls::{Gap, LsReport, RankRow};
use stagefrontier::report::read_budget::RECORDS;
use stagefrontier::report::wall::rfc3339_ms;

/// Enough names to act on; the JSON output has them all.
pub(super) use stagefrontier::report::rank_list::{ranges, LIST_AT_MOST};

pub struct Human<W> {
    out: W,
}

impl<W: Write> Human<W> {
    pub fn new(out: W) -> Human<W> {
        Human { out }
    }
}

impl<W: Write> Output for Human<W> {
    fn ls(&mut self, report: &LsReport) -> io::Result<()> {
        if !report.ranks.is_empty() {
            let rows: Vec<Vec<String>> = report.ranks.iter().map(rank_cells).collect();
            table::write(&mut self.out, &LS_COLUMNS, &rows)?;
            human_line!(self.out, "{}", evidence_line(&report.ranks))?;
        }
        for line in summary_lines(report) {
            human_line!(self.out, "{line}")?;
        }
        if let Some(first) = &report.first_end {
            human_line!(self.out, "{}", first_end_line(first))?;
        }
        if !report.ranks.is_empty() {
            human_line!(self.out, "waits from: {}", report.waits_from_reason)?;
        }
        // Only a job on several hosts compares times across clocks.
        if report.clocks.len() > 1 {
            let hosts: Vec<String> = report
                .clocks
                .iter()
                .map(|c| format!("{} ±{:.3} ms ({} ranks)", c.host, c.uncertainty_ns as f64 / 1e6, c.ranks))
                .collect();
            human_line!(
                self.out,
                "clocks: {} hosts put on one wall-clock timeline through the headers' calibration: {}; \
                 beyond that, as far as the hosts' clocks agree (NTP/PTP)",
                report.clocks.len(),
                hosts.join(", ")
            )?;
        }
        let comms = report.mismatches.iter().map(|c| (c.comm_id, &c.mismatches[..], c.mismatches_total));
        for line in mismatch_lines(comms) {
            human_line!(self.out, "{line}")?;
        }
        self.out.flush()
    }

    fn frontier(&mut self, report: &FrontierReport) -> io::Result<()> {
        let windows = plural(report.windows.len() as u64, "window");
        human_line!(self.out, "{}: {} stages, {} ranks, {windows}", report.file, report.stages.len(), report.world)?;
        if let Some(inferred) = &report.inferred {
            human_line!(self.out, "{}", inferred.line())?;
        }
        if let Some(step) = report.history_starts_at_step {
            human_line!(self.out, "{}", stagefrontier::report::history_note(step))?;
        }
        if let Some(window) = &report.call_window {
            human_line!(self.out, "{}", window.note())?;
        }
        if let Some(step) = report.waits_start_at_step {
            human_line!(self.out, "{}", stagefrontier::report::waits_note(step))?;
        }
        if let Some(reason) = report.waits_from_reason {
            human_line!(self.out, "waits from: {reason}")?;
        }
        if let Some(layout) = &report.layout {
            human_line!(self.out, "layout {layout}: each pipeline stage's ranks are compared among themselves")?;
        }
        if let Some(f) = &report.path_finding {
            human_line!(self.out, "{}", super::path::path_finding_line(f))?;
        }
        for window in &report.windows {
            writeln!(self.out)?;
            if let Some(stage) = window.pp_stage {
                human_line!(self.out, "pipeline stage {stage}:")?;
            }
            for line in window_head(window) {
                human_line!(self.out, "{line}")?;
            }
            let columns = frontier_columns(window);
            let columns: Vec<(&str, Align)> = columns.iter().map(|(title, align)| (title.as_str(), *align)).collect();
            table::write(&mut self.out, &columns, &window_rows(window))?;
            for line in window_tail(window) {
                human_line!(self.out, "{line}")?;
            }
        }
        self.out.flush()
    }

    fn hang(&mut self, report: &HangReport) -> io::Result<()> {
        human_hang::write(&mut self.out, report)?;
        self.out.flush()
    }
}

const LS_COLUMNS: [(&str, Align); 16] = [
    ("RANK", Align::Right),
    ("WORLD", Align::Right),
    ("HOST", Align::Left),
    ("PID", Align::Right),
    ("LIVENESS", Align::Left),
    ("HEARTBEAT", Align::Right),
    ("LAST_BEAT", Align::Left),
    ("COMMITTED", Align::Right),
    ("HELD", Align::Right),
    ("WRAPPED", Align::Right),
    ("MISSING", Align::Right),
    ("DROPPED", Align::Right),
    ("COMMS", Align::Right),
    ("SCHEMA", Align::Right),
    ("NCCL", Align::Left),
    ("DOORS", Align::Left),
];

/// One line: the evidence every log has, or each log's when they differ.
fn evidence_line(ranks: &[RankRow]) -> String {
    let names = |r: &RankRow| if r.evidence.is_empty() { "none".to_string() } else { r.evidence.join(", ") };
    if ranks.iter().all(|r| r.evidence == ranks[0].evidence) {
        return format!("evidence: {}", names(&ranks[0]));
    }
    let per_log: Vec<String> = ranks
        .iter()
        .map(|r| {
            if r.rank >= 0 {
                format!("rank {}: {}", r.rank, names(r))
            } else {
                format!("pid {}: {}", r.pid, names(r))
            }
        })
        .collect();
    format!("evidence: {}", per_log.join("; "))
}

fn rank_cells(r: &RankRow) -> Vec<String> {
    let ranked = |v: i32| if r.rank >= 0 { v.to_string() } else { "-".to_string() };
    vec![
        ranked(r.rank),
        ranked(r.world_size),
        r.host.clone(),
        r.pid.to_string(),
        json_name(&r.liveness),
        r.heartbeat_age_s.map_or_else(|| "never".to_string(), age),
        r.heartbeat_wall.clone().unwrap_or_else(|| "-".to_string()),
        r.committed.to_string(),
        r.held.to_string(),
        r.lost_to_wrap.to_string(),
        r.missing.to_string(),
        r.dropped.to_string(),
        r.comms.to_string(),
        r.schema.to_string(),
        r.nccl_version.clone().unwrap_or_else(|| "-".to_string()),
        r.doors
            .as_ref()
            .map_or_else(|| "?".to_string(), |d| if d.open.is_empty() { "-".to_string() } else { d.open.join(",") }),
    ]
}

/// The word `--json` uses for a unit variant (liveness, origin), so both outputs say the
/// same and cannot drift apart.
/// `rank 2 exited first (status 1) at …Z; ranks 0, 1, 3 ended 0.120 s later (a teardown
/// by SIGTERM)`: `sf ls` and `sf hang` say it alike.
pub(super) fn first_end_line(f: &FirstEnd) -> String {
    let at = rfc3339_ms(f.at_wall_ns);
    let when = if f.at_or_after { format!("at or after its last heartbeat, {at}") } else { format!("at {at}") };
    let after = if f.at_or_after { "after that heartbeat" } else { "later" };
    let teardown = match (&f.teardown_signal, f.teardown) {
        (Some(signal), true) => format!(" (a teardown by {signal})"),
        (None, true) => " (a teardown)".to_string(),
        _ => String::new(),
    };
    let noun = if f.rest.len() == 1 { "rank" } else { "ranks" };
    format!(
        "rank {} {} first ({}) {when}; {noun} {} ended {:.3} s {after}{teardown}",
        f.rank,
        f.verb,
        f.cause,
        ranges(&f.rest),
        f.rest_within_s
    )
}

pub(super) fn json_name<T: Serialize>(value: &T) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(name)) => name,
        _ => "?".to_string(),
    }
}

/// Heartbeat age at the precision that matters: sub-second while live, coarse once stale.
pub(super) fn age(seconds: f64) -> String {
    let whole = seconds as u64;
    match whole {
        0..=59 => format!("{seconds:.1}s"),
        60..=3_599 => format!("{}m{:02}s", whole / 60, whole % 60),
        3_600..=86_399 => format!("{}h{:02}m", whole / 3_600, whole % 3_600 / 60),
        _ => format!("{}d{:02}h", whole / 86_400, whole % 86_400 / 3_600),
    }
}

/// For snapshot copies: the moments they show, which the verdicts are judged at, since a
/// copy read an hour later still says `live`.
pub(super) fn snapshot_note<'a>(walls: impl Iterator<Item = &'a Option<String>>) -> Option<String> {
    let walls: Vec<&String> = walls.flatten().collect();
    let (first, last) = (walls.iter().min()?, walls.iter().max()?);
    let when = if first == last { format!("at {first}") } else { format!("from {first} to {last}") };
    Some(format!("as of the snapshots taken {when}: liveness, heartbeat ages and stuck times are judged then"))
}

fn summary_lines(report: &LsReport) -> Vec<String> {
    let s = &report.summary;
    let mut parts = Vec::new();
    match s.world_size {
        Some(world) => {
            parts.push(format!("{} of {world} ranks have a log", s.ranks_found));
            if !report.missing_ranks.is_empty() {
                let noun = if report.missing_ranks.len() == 1 { "rank" } else { "ranks" };
                parts.push(format!("missing {noun} {}", ranges(&report.missing_ranks)));
            }
            if s.unranked > 0 {
                parts.push(format!("plus {} without rank identity", plural(s.unranked as u64, "log")));
            }
        }
        None if s.unranked > 0 => parts.push(format!("{}, none with rank identity", plural(s.unranked as u64, "log"))),
        None => parts.push("no readable rank log".to_string()),
    }
    if !report.errors.is_empty() {
        parts.push(format!("{} unreadable (see stderr)", plural(report.errors.len() as u64, "file")));
    }
    parts.push(match s.dropped_total {
        0 => "no events dropped".to_string(),
        n => format!("{} dropped in total", plural(n, "event")),
    });
    let mut lines = vec![parts.join("; ")];
    // A flat job's layout (data parallel on the world) is what every job was before: only a
    // job with more than one dimension gets the line.
    if let Some(layout) = report.layout.as_ref().filter(|_| !report.layout_flat) {
        lines.push(format!("layout: {} (sf roles tells how)", layout.line()));
    }
    lines.extend(snapshot_note(report.ranks.iter().map(|r| &r.snapshot_wall)));
    if !report.attempts.is_empty() {
        let kept: Vec<String> = report
            .attempts
            .iter()
            .map(|a| format!("attempt-{} ({})", a.attempt, plural(a.logs as u64, "log")))
            .collect();
        lines.push(format!(
            "earlier attempts kept: {}; the rows above are the latest; pass {}/attempt-N to read an earlier one",
            kept.join(", "),
            report.dir.trim_end_matches('/')
        ));
    }
    if !s.gaps.is_empty() {
        let mut named: Vec<String> = s.gaps.iter().take(LIST_AT_MOST).map(gap).collect();
        if s.gaps.len() > LIST_AT_MOST {
            named.push(format!("and {} more", s.gaps.len() - LIST_AT_MOST));
        }
        let mut line = format!("warning: history incomplete: {}", named.join(", "));
        if s.dropped_total > 0 {
            line += "; events are dropped when the library's ring is full, SF_RING_EVENTS makes it larger";
        }
        lines.push(line);
    }
    if !s.unnamed.is_empty() {
        let mut named: Vec<String> =
            s.unnamed.iter().take(LIST_AT_MOST).map(|(who, n)| format!("{who} {}", plural(*n, "marker"))).collect();
        if s.unnamed.len() > LIST_AT_MOST {
            named.push(format!("and {} more", s.unnamed.len() - LIST_AT_MOST));
        }
        lines.push(format!(
            "warning: stage or value markers lost: {}; the job named more than {} stages and values, and a log \
             keeps that many names",
            named.join(", "),
            stagefrontier::core::log::format::stage_names::SLOTS
        ));
    }
    if let Some(all) = report.budget_for_all {
        let unread = report.ranks.iter().filter(|r| r.not_read > 0).count();
        lines.push(format!(
            "note: the newest {} event records of each log were read and checked ({} shared by {}); {} hold older \
             ones, not counted in HELD nor checked; {}={all} reads every record",
            report.records_read_per_log,
            RECORDS.var,
            plural(report.ranks.len() as u64, "log"),
            plural(unread as u64, "log"),
            RECORDS.var,
        ));
    }
    if let Some(note) = s.nvtx_note {
        lines.push(format!("note: no step markers seen; {note}"));
    }
    if !s.duplicated_ranks.is_empty() {
        let claims: Vec<String> =
            s.duplicated_ranks.iter().take(LIST_AT_MOST).map(|(rank, logs)| format!("rank {rank} by {logs}")).collect();
        lines.push(format!(
            "warning: ranks claimed by more than one log ({}): {} holds copies or mixes runs",
            claims.join(", "),
            report.dir
        ));
    }
    if !s.conflicting_world_sizes.is_empty() {
        let sizes: Vec<String> = s.conflicting_world_sizes.iter().map(i32::to_string).collect();
        lines.push(format!(
            "warning: logs disagree on world size ({}): {} mixes runs of different sizes",
            sizes.join(", "),
            report.dir
        ));
    }
    lines
}

fn gap(g: &Gap) -> String {
    match (g.dropped, g.missing) {
        (0, m) => format!("{} has {} missing", g.who, plural(m, "record")),
        (d, 0) => format!("{} dropped {}", g.who, plural(d, "event")),
        (d, m) => format!("{} dropped {} and has {} missing", g.who, plural(d, "event"), plural(m, "record")),
    }
}

pub(super) fn plural(n: u64, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

pub(super) fn as_i32(ranks: &[u32]) -> Vec<i32> {
    ranks.iter().map(|&r| r as i32).collect()
}

#[cfg(test)]
mod tests {
    use super::super::human_records::record_line;
    use super::*;
    use stagefrontier::core::log::nccl_op::NcclOp;
    use stagefrontier::core::log::reader::Record;
    use stagefrontier::core::log::records::{NcclCall, RecordBody};
    use stagefrontier::report::dump::LogNames;
    use stagefrontier::report::ls::Summary;

    #[test]
    fn ages_read_at_a_glance() {
        assert_eq!(age(0.05), "0.1s");
        assert_eq!(age(59.9), "59.9s");
        assert_eq!(age(125.0), "2m05s");
        assert_eq!(age(7_260.0), "2h01m");
        assert_eq!(age(180_000.0), "2d02h");
    }

    #[test]
    fn summary_warns_of_mixed_runs() {
        let report = LsReport {
            dir: "job".into(),
            ranks: Vec::new(),
            missing_ranks: vec![1, 2, 3, 7],
            errors: Vec::new(),
            attempts: Vec::new(),
            mismatches: Vec::new(),
            clocks: Vec::new(),
            records_read_per_log: 65_536,
            budget_for_all: None,
            first_end: None,
            waits_from: stagefrontier::analysis::blame::waits_from::WaitsFrom::None,
            waits_from_reason: "none: no collective was recorded",
            layout: None,
            layout_flat: false,
            summary: Summary {
                world_size: Some(8),
                conflicting_world_sizes: vec![4, 8],
                ranks_found: 4,
                duplicated_ranks: vec![(0, 2)],
                ..Summary::default()
            },
        };
        assert_eq!(
            summary_lines(&report),
            [
                "4 of 8 ranks have a log; missing ranks 1-3, 7; no events dropped",
                "warning: ranks claimed by more than one log (rank 0 by 2): job holds copies or mixes runs",
                "warning: logs disagree on world size (4, 8): job mixes runs of different sizes",
            ]
        );
    }

    #[test]
    fn gaps_and_plurals() {
        let g = Gap { who: "rank 1".into(), dropped: 17, missing: 1 };
        assert_eq!(gap(&g), "rank 1 dropped 17 events and has 1 record missing");
    }

    #[test]
    fn a_call_line_has_its_operation_and_result() {
        let call = NcclCall {
            op: NcclOp::AllReduce,
            t_enter_ns: 2_000_000_000,
            t_exit_ns: 2_000_012_500,
            comm_id: 0xabc,
            seq: 7,
            count: 1024,
            bytes: 4096,
            stream: 0x10,
            tid: 5,
            peer: -1,
            dtype: 7,
            redop: 0,
            result: 0,
            group_depth: 0,
        };
        let names = LogNames::new(Vec::new());
        let line = record_line(&Record { seq: 3, body: RecordBody::NcclCall(call) }, 1_000_000_000, &names);
        let words: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(
            words[..12].join(" "),
            "3 1.000000 nccl_call allreduce 0x0000000000000abc 7 1024 float32 4096 sum 12.500 ncclSuccess"
        );
        let group_end = NcclCall { op: NcclOp::GroupEnd, comm_id: 0, ..call };
        let words: Vec<String> = record_line(&Record { seq: 4, body: RecordBody::NcclCall(group_end) }, 0, &names)
            .split_whitespace()
            .map(str::to_string)
            .collect();
        assert_eq!(words[3..10], ["group_end", "-", "-", "-", "-", "-", "-"]);
    }
}
