//! Tables and lines for people at a terminal.

use std::io::{self, Write};

use serde::Serialize;
use stagefrontier::analysis::hang::Mismatch;
use stagefrontier::core::net::proxy_progress::ProxyLink;
use stagefrontier::core::net::work_requests::WrSource;

use super::human_frontier::{frontier_columns, window_head, window_rows, window_tail};
use super::table::{self, Align};
use super::Output;
use crate::commands::frontier::FrontierReport;
use crate::commands::hang::{CommReport, HangReport, InjectionReport, PostMortemReport, RankReport};
use crate::commands::ls::{Gap, LsReport, RankRow};

/// Enough names to act on; the JSON output has them all.
const LIST_AT_MOST: usize = 16;

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
        }
        for line in summary_lines(report) {
            writeln!(self.out, "{line}")?;
        }
        // Only a job on several hosts compares times across clocks.
        if report.clocks.len() > 1 {
            let hosts: Vec<String> = report
                .clocks
                .iter()
                .map(|c| format!("{} ±{:.3} ms ({} ranks)", c.host, c.uncertainty_ns as f64 / 1e6, c.ranks))
                .collect();
            writeln!(
                self.out,
                "clocks: {} hosts put on one wall-clock timeline through the headers' calibration: {}; \
                 beyond that, as far as the hosts' clocks agree (NTP/PTP)",
                report.clocks.len(),
                hosts.join(", ")
            )?;
        }
        let comms = report.mismatches.iter().map(|c| (c.comm_id, &c.mismatches[..], c.mismatches_total));
        for line in mismatch_lines(comms) {
            writeln!(self.out, "{line}")?;
        }
        self.out.flush()
    }

    fn frontier(&mut self, report: &FrontierReport) -> io::Result<()> {
        let windows = plural(report.windows.len() as u64, "window");
        writeln!(self.out, "{}: {} stages, {} ranks, {windows}", report.file, report.stages.len(), report.world)?;
        if let Some(inferred) = &report.inferred {
            writeln!(self.out, "{}", inferred.line())?;
        }
        if let Some(step) = report.history_starts_at_step {
            writeln!(self.out, "{}", crate::commands::history_note(step))?;
        }
        for window in &report.windows {
            writeln!(self.out)?;
            for line in window_head(window) {
                writeln!(self.out, "{line}")?;
            }
            let columns = frontier_columns(window);
            let columns: Vec<(&str, Align)> = columns.iter().map(|(title, align)| (title.as_str(), *align)).collect();
            table::write(&mut self.out, &columns, &window_rows(window))?;
            for line in window_tail(window) {
                writeln!(self.out, "{line}")?;
            }
        }
        self.out.flush()
    }

    fn hang(&mut self, report: &HangReport) -> io::Result<()> {
        for line in hang_head(report) {
            writeln!(self.out, "{line}")?;
        }
        let stuck: Vec<Vec<String>> = stuck_comms(report).map(stuck_comm_cells).collect();
        if !stuck.is_empty() {
            writeln!(self.out)?;
            table::write(&mut self.out, &STUCK_COMM_COLUMNS, &stuck)?;
        }
        let (rows, ok_hidden) = hang_rank_rows(report);
        writeln!(self.out)?;
        table::write(&mut self.out, &HANG_RANK_COLUMNS, &rows)?;
        if ok_hidden > 0 {
            writeln!(self.out, "and {} ok (--json lists every rank)", plural(ok_hidden as u64, "more rank"))?;
        }
        for line in hang_tail(report) {
            writeln!(self.out, "{line}")?;
        }
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

/// Sorted ranks as runs, `0-3, 7, 9-10`, at most `LIST_AT_MOST` runs.
pub(crate) fn ranges(ranks: &[i32]) -> String {
    let mut runs: Vec<(i32, i32)> = Vec::new();
    for &r in ranks {
        match runs.last_mut() {
            Some((_, end)) if *end + 1 == r => *end = r,
            _ => runs.push((r, r)),
        }
    }
    let mut named: Vec<String> =
        runs.iter().take(LIST_AT_MOST).map(|&(a, b)| if a == b { a.to_string() } else { format!("{a}-{b}") }).collect();
    if runs.len() > LIST_AT_MOST {
        named.push(format!("and {} more", runs[LIST_AT_MOST..].iter().map(|(a, b)| b - a + 1).sum::<i32>()));
    }
    named.join(", ")
}

pub(super) fn as_i32(ranks: &[u32]) -> Vec<i32> {
    ranks.iter().map(|&r| r as i32).collect()
}

/// Communicators on which some wait is stuck.
fn stuck_comms(report: &HangReport) -> impl Iterator<Item = &CommReport> {
    report.communicators.iter().filter(|c| c.stuck_s.is_some())
}

/// `allreduce #41`, `collective #41`, or `send/recv` for a communicator's stuck call.
fn stuck_call(c: &CommReport) -> String {
    match (c.stuck_seq, c.stuck_op) {
        (Some(seq), Some(op)) => format!("{} #{seq}", op.name()),
        (Some(seq), None) => format!("collective #{seq}"),
        (None, _) => "send/recv".to_string(),
    }
}

fn rank_noun(ranks: &[i32]) -> String {
    format!("{} {}", if ranks.len() == 1 { "rank" } else { "ranks" }, ranges(ranks))
}

/// One sentence per stuck communicator: who holds it up, and who waits.
fn comm_verdict(c: &CommReport) -> String {
    let call = stuck_call(c);
    let mut causes = Vec::new();
    for q in &c.stuck_qps {
        // A link of proxy steps (stock NCCL) is no QP: name its channel, direction and peer.
        let what = match ProxyLink::of(WrSource::Proxy, q.device, q.qp_num).filter(|_| q.source == "proxy") {
            Some(link) => link.describe(),
            None => format!("QP {:#x} ({} door, device {})", q.qp_num, q.source, q.device),
        };
        causes.push(format!(
            "rank {} {what} has had a work request in flight for {}, so {call} cannot complete",
            q.rank,
            age(q.stuck_s)
        ));
    }
    let gone = [
        (&c.dead_ranks, "dead"),
        (&c.stalled_ranks, "stopped (stalled)"),
        (&c.exited_ranks, "exited"),
        (&c.disabled_ranks, "not recording (disabled), so unknown"),
    ];
    // The culprit first: a rank that never entered, and what became of it since.
    if !c.missing_ranks.is_empty() {
        let mut line = format!("{} never entered {call}", rank_noun(&c.missing_ranks));
        for (ranks, what) in gone {
            let since: Vec<i32> = c.missing_ranks.iter().copied().filter(|r| ranks.contains(r)).collect();
            if since == c.missing_ranks {
                let verb = if since.len() == 1 { "is" } else { "are" };
                line += &format!(" and {verb} {what} since");
            } else if !since.is_empty() {
                let verb = if since.len() == 1 { "is" } else { "are" };
                line += &format!(" ({} {verb} {what} since)", rank_noun(&since));
            }
        }
        causes.push(line);
    }
    for (ranks, what) in gone {
        let others: Vec<i32> = ranks.iter().copied().filter(|r| !c.missing_ranks.contains(r)).collect();
        if !others.is_empty() {
            let verb = if others.len() == 1 { "is" } else { "are" };
            causes.push(format!("{} {verb} {what}", rank_noun(&others)));
        }
    }
    if !c.no_log_comm_ranks.is_empty() {
        causes.push(format!("communicator {} no log", rank_noun(&c.no_log_comm_ranks) + " with"));
    }
    if !c.wedged_ranks.is_empty() {
        causes
            .push(format!("{call} does not complete though its ranks are there ({} wedged)", ranges(&c.wedged_ranks)));
    }
    if !c.slow_ranks.is_empty() {
        causes.push(format!("{} behind but still making progress (slow)", rank_noun(&c.slow_ranks)));
    }
    let mut line = format!("{} on {:#018x}", causes.join("; "), c.comm_id);
    if !c.waiting_ranks.is_empty() {
        let n = c.waiting_ranks.len();
        let have = if n == 1 { "has" } else { "have" };
        line += &format!("; {} {have} waited {}", plural(n as u64, "rank"), age(c.stuck_s.unwrap_or(0.0)));
    } else if let Some(stuck) = c.stuck_s {
        line += &format!("; stuck for {}", age(stuck));
    }
    line
}

/// The hang a torn-down job's logs saw last, ahead of "ranks 0-7 are dead".
fn post_mortem_line(p: &PostMortemReport) -> String {
    let call = match (p.op, p.comm_seq, p.comm_id) {
        (Some(op), Some(seq), Some(comm)) => format!("{} #{seq} on {comm:#018x}", op.name()),
        (None, Some(seq), Some(comm)) => format!("collective #{seq} on {comm:#018x}"),
        _ => "the stuck call".to_string(),
    };
    let held = if p.culprit_ranks.is_empty() {
        "no rank the logs can name held it up".to_string()
    } else {
        format!("{} held up {call}", rank_noun(&p.culprit_ranks))
    };
    let waited = if p.waiting_ranks.is_empty() {
        String::new()
    } else {
        format!(", {} waiting in it", rank_noun(&p.waiting_ranks))
    };
    format!(
        "HUNG (post-mortem: all {} ranks are gone; from their last live tables): {held}{waited}",
        p.gone_ranks.len()
    )
}

fn hang_head(report: &HangReport) -> Vec<String> {
    // A mismatch first: it is the usual cause of the hang that follows it.
    let mut lines =
        mismatch_lines(report.communicators.iter().map(|c| (c.comm_id, &c.mismatches[..], c.mismatches_total)));
    let hung = lines.len();
    lines.extend(stuck_comms(report).map(|c| {
        let verdict = if report.hung { "HUNG" } else { "not hung, but slow" };
        format!("{verdict}: {}", comm_verdict(c))
    }));
    let t = &report.threshold;
    if lines.len() == hung {
        lines.push(format!("not hung: no rank has been stuck for more than {:.3}s", t.threshold_s));
    }
    if let Some(p) = &report.post_mortem {
        lines.insert(0, post_mortem_line(p));
    }
    // The same nanoseconds on both sides when the floor decides.
    let floor = t.threshold_s <= t.min_stuck_s;
    lines.push(match (t.step_s, t.period, t.cadence_comm_id, t.longest_call_s, t.longest_gap_s) {
        (Some(step), Some(period), Some(comm), Some(call), Some(gap)) => {
            let pace = format!(
                "{} x the longest of: step {step:.3}s ({} per step on {comm:#018x}), call {call:.3}s, \
                 gap between calls {gap:.3}s",
                t.factor,
                plural(period as u64, "collective")
            );
            if floor {
                format!("threshold {:.3}s, the --min-stuck-s floor, over {pace}", t.threshold_s)
            } else {
                format!("threshold {:.3}s = {pace}", t.threshold_s)
            }
        }
        _ if floor => {
            format!("threshold {:.3}s, the --min-stuck-s floor: the logs hold too few steps to time one", t.threshold_s)
        }
        _ => format!("threshold {:.3}s (--fallback-stuck-s): the logs hold too few steps to time one", t.threshold_s),
    });
    lines
}

const STUCK_COMM_COLUMNS: [(&str, Align); 7] = [
    ("COMMUNICATOR", Align::Left),
    ("NRANKS", Align::Right),
    ("STUCK AT", Align::Left),
    ("FOR", Align::Right),
    ("MISSING", Align::Left),
    ("WAITING", Align::Left),
    ("OTHERS", Align::Left),
];

fn stuck_comm_cells(c: &CommReport) -> Vec<String> {
    let listed = |ranks: &[i32]| if ranks.is_empty() { "-".to_string() } else { ranges(ranks) };
    let others: Vec<String> = [
        ("wedged", &c.wedged_ranks),
        ("dead", &c.dead_ranks),
        ("stalled", &c.stalled_ranks),
        ("exited", &c.exited_ranks),
        ("slow", &c.slow_ranks),
        ("disabled", &c.disabled_ranks),
        ("no log: comm rank", &c.no_log_comm_ranks),
    ]
    .iter()
    .filter(|(_, ranks)| !ranks.is_empty())
    .map(|(what, ranks)| format!("{what} {}", ranges(ranks)))
    .collect();
    vec![
        format!("{:#018x}", c.comm_id),
        c.nranks.to_string(),
        stuck_call(c),
        c.stuck_s.map_or("-".to_string(), age),
        listed(&c.missing_ranks),
        listed(&c.waiting_ranks),
        if others.is_empty() { "-".to_string() } else { others.join("; ") },
    ]
}

const HANG_RANK_COLUMNS: [(&str, Align); 9] = [
    ("RANK", Align::Right),
    ("STATE", Align::Left),
    ("STEP", Align::Right),
    ("STAGE", Align::Left),
    ("STUCK", Align::Right),
    ("WHERE", Align::Left),
    ("COMM", Align::Left),
    ("HEARTBEAT", Align::Right),
    ("WAITING FOR", Align::Left),
];

/// Every rank of a small job; of a large one, those not ok. Returns the rows and how many
/// ok ranks were left out.
fn hang_rank_rows(report: &HangReport) -> (Vec<Vec<String>>, usize) {
    const SHOW_ALL_UP_TO: usize = 32;
    let all = report.ranks.len() <= SHOW_ALL_UP_TO;
    let shown: Vec<Vec<String>> =
        report.ranks.iter().filter(|r| all || json_name(&r.state) != "ok").map(hang_rank_cells).collect();
    let hidden = report.ranks.len() - shown.len();
    (shown, hidden)
}

/// Where a rank is: `in allreduce #41`, `before allreduce #41` (not entered), `past
/// allreduce #41` (entered, returned, now blocked outside NCCL).
fn where_cell(r: &RankReport) -> String {
    let call = match (r.op, r.comm_seq) {
        (Some(op), Some(seq)) => format!("{} #{seq}", op.name()),
        (None, Some(seq)) => format!("collective #{seq}"),
        (Some(op), None) => op.name().to_string(),
        (None, None) if r.comm_id.is_some() => "send/recv".to_string(),
        (None, None) => return "-".to_string(),
    };
    match (r.in_flight, json_name(&r.role).as_str()) {
        (true, _) if r.grouped => format!("in {call} (group end)"),
        (true, _) => format!("in {call}"),
        (false, "waiting") => format!("past {call}"),
        (false, _) => format!("before {call}"),
    }
}

fn hang_rank_cells(r: &RankReport) -> Vec<String> {
    let (state, role) = (json_name(&r.state), json_name(&r.role));
    let waiting_for: Vec<String> =
        r.waiting_for.iter().map(|&w| if w < 0 { "no-log".to_string() } else { w.to_string() }).collect();
    vec![
        r.rank.to_string(),
        if role == "ok" || role == state { state } else { format!("{state} (was {role})") },
        r.step.map_or("-".to_string(), |s| s.to_string()),
        r.stage.clone().unwrap_or_else(|| "-".to_string()),
        r.stuck_s.map_or("-".to_string(), age),
        where_cell(r),
        r.comm_id.map_or("-".to_string(), |c| format!("{c:#018x}")),
        r.heartbeat_age_s.map_or("never".to_string(), age),
        if waiting_for.is_empty() { "-".to_string() } else { compact(&r.waiting_for, &waiting_for) },
    ]
}

/// Rank runs when every entry is a rank, the plain list otherwise.
fn compact(ranks: &[i32], words: &[String]) -> String {
    if ranks.iter().all(|&r| r >= 0) {
        ranges(ranks)
    } else {
        words.join(", ")
    }
}

fn hang_tail(report: &HangReport) -> Vec<String> {
    let mut lines = Vec::new();
    for r in &report.ranks {
        if let Some(last) = r.injections.last() {
            let times =
                if r.injections.len() > 1 { format!(" {} times, last", r.injections.len()) } else { String::new() };
            lines.push(format!("injected on rank {}{times}: {}", r.rank, injection(last)));
        }
    }
    // The watchdog reports one stuck collective on every rank waiting in it: one line each.
    /// (op, comm_seq, comm_id, threshold_ns) of a watchdog report.
    type Evidence = (&'static str, u64, u64, u64);
    let mut evidence: Vec<(Evidence, Vec<i32>)> = Vec::new();
    for r in &report.ranks {
        if let Some(h) = r.hang_evidence.last() {
            let key = (h.op.name(), h.comm_seq, h.comm_id, h.threshold_ns);
            match evidence.iter_mut().find(|(k, _)| *k == key) {
                Some((_, ranks)) => ranks.push(r.rank),
                None => evidence.push((key, vec![r.rank])),
            }
        }
    }
    for ((op, seq, comm, threshold_ns), ranks) in evidence {
        lines.push(format!(
            "watchdog: {op} #{seq} on {comm:#018x} in flight over {} on {}",
            age(threshold_ns as f64 / 1e9),
            rank_noun(&ranks)
        ));
    }
    lines.extend(super::human_hang_profiler::lines(report));
    if let Some(quiet) = report.quiet_s {
        lines.push(format!(
            "note: every live rank has been outside NCCL for {}: the job is stuck outside NCCL or in a long \
             phase without collectives (checkpoint, evaluation); the logs cannot tell which",
            age(quiet)
        ));
    }
    if !lines.is_empty() {
        lines.insert(0, String::new());
    }
    lines
}

/// `MISMATCH on 0x.. #21: count differs: 1048576 on ranks 0-1, 3; 524288 on rank 2`, one
/// per mismatch of each (communicator, mismatches listed, mismatches in all), up to
/// `LIST_AT_MOST` in all.
pub(super) fn mismatch_lines<'a>(comms: impl Iterator<Item = (u64, &'a [Mismatch], usize)>) -> Vec<String> {
    let mut lines = Vec::new();
    let mut listed = 0;
    for (comm_id, mismatches, total) in comms {
        for m in mismatches.iter().take(LIST_AT_MOST.saturating_sub(listed)) {
            let mut by_value: Vec<(String, Vec<i32>)> = Vec::new();
            for (rank, value) in &m.values {
                let value = serde_json::to_string(value).unwrap_or_default().trim_matches('"').to_string();
                match by_value.iter_mut().find(|(v, _)| *v == value) {
                    Some((_, ranks)) => ranks.push(*rank),
                    None => by_value.push((value, vec![*rank])),
                }
            }
            let values: Vec<String> =
                by_value.iter().map(|(v, ranks)| format!("{v} on {}", rank_noun(ranks))).collect();
            lines.push(format!(
                "MISMATCH on {comm_id:#018x} #{}: {} differs: {}",
                m.comm_seq,
                json_name(&m.field),
                values.join("; ")
            ));
            listed += 1;
        }
        if total > mismatches.len() {
            lines.push(format!("and {} more on {comm_id:#018x} (--json lists them)", total - mismatches.len()));
        }
    }
    lines
}

fn injection(i: &InjectionReport) -> String {
    let r = &i.record;
    let mut text = format!("{} (rule {})", json_name(&r.action), r.rule);
    if r.delay_ns > 0 {
        text += &format!(" of {:.0} ms", r.delay_ns as f64 / 1e6);
    }
    match r.op {
        Some(op) => text += &format!(" before {} #{} on {:#018x}", op.name(), r.comm_seq, r.comm_id),
        None => text += &format!(" at the end of stage {}", i.stage_name.as_deref().unwrap_or("?")),
    }
    if let Some(step) = r.step {
        text += &format!(" in step {step}");
    }
    text
}

#[cfg(test)]
mod tests {
    use super::super::human_records::record_line;
    use super::*;
    use crate::commands::dump::LogNames;
    use crate::commands::ls::Summary;
    use stagefrontier::core::comms::nccl_op::NcclOp;
    use stagefrontier::core::log::reader::Record;
    use stagefrontier::core::log::records::{NcclCall, RecordBody};

    #[test]
    fn ages_read_at_a_glance() {
        assert_eq!(age(0.05), "0.1s");
        assert_eq!(age(59.9), "59.9s");
        assert_eq!(age(125.0), "2m05s");
        assert_eq!(age(7_260.0), "2h01m");
        assert_eq!(age(180_000.0), "2d02h");
    }

    #[test]
    fn rank_runs() {
        assert_eq!(ranges(&[3]), "3");
        assert_eq!(ranges(&[0, 1, 2, 3, 7, 9, 10]), "0-3, 7, 9-10");
        let scattered: Vec<i32> = (0..40).map(|r| r * 2).collect();
        assert!(ranges(&scattered).ends_with("30, and 24 more"), "{}", ranges(&scattered));
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
