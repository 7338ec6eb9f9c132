//! `sf hang`'s human output: the headline, the stuck communicators, the rank table and
//! the lines under it.

use std::io::{self, Write};

use stagefrontier::analysis::blame::waits_from::Why;
use stagefrontier::analysis::hang::Mismatch;
use stagefrontier::analysis::path::Phase;
use stagefrontier::core::log::nccl_op::NcclOp;
use stagefrontier::core::log::records_net::WrSource;
use stagefrontier::core::net::proxy_progress::ProxyLink;

use super::human::{age, first_end_line, json_name, plural, ranges, snapshot_note, LIST_AT_MOST};
use super::table::{self, Align};
use stagefrontier::report::hang::{
    CommReport, DeviceChainReport, DeviceStallReport, DeviceWaitReport, HangEvidenceUsed, HangReport, InjectionReport,
    PostMortemReport, ProfilerStallReport, ProgressStallReport, RankReport, TransferPass,
};

/// The report as a person reads it.
pub(super) fn write<W: Write>(out: &mut W, report: &HangReport) -> io::Result<()> {
    for (index, line) in hang_head(report).iter().enumerate() {
        human_line!(out, "{line}")?;
        if index == 0 {
            for line in super::human_stacks::culprit_lines(report) {
                human_line!(out, "{line}")?;
            }
        }
    }
    for line in super::human_stacks::group_lines(report) {
        human_line!(out, "{line}")?;
    }
    let stuck: Vec<Vec<String>> = stuck_comms(report).map(|c| stuck_comm_cells(c, report.source)).collect();
    if !stuck.is_empty() {
        writeln!(out)?;
        table::write(out, &STUCK_COMM_COLUMNS, &stuck)?;
    }
    let (rows, ok_hidden) = hang_rank_rows(report);
    writeln!(out)?;
    table::write(out, &HANG_RANK_COLUMNS, &rows)?;
    if ok_hidden > 0 {
        human_line!(out, "and {} ok (--json lists every rank)", plural(ok_hidden as u64, "more rank"))?;
    }
    for line in hang_tail(report) {
        human_line!(out, "{line}")?;
    }
    Ok(())
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

/// A stuck communicator whose missing ranks are all waiting in other calls themselves:
/// they did not enter because something else holds them, not of themselves.
fn chained(c: &CommReport, report: &HangReport) -> bool {
    !c.missing_ranks.is_empty()
        && c.missing_ranks.iter().all(|m| report.ranks.iter().any(|r| r.rank == *m && json_name(&r.role) == "waiting"))
}

/// A stuck communicator whose only holdup is ranks still making progress.
fn slow_only(c: &CommReport) -> bool {
    let culprits = [
        &c.missing_ranks,
        &c.dead_ranks,
        &c.stalled_ranks,
        &c.exited_ranks,
        &c.disabled_ranks,
        &c.wedged_ranks,
        &c.no_log_comm_ranks,
    ];
    !c.slow_ranks.is_empty() && c.stuck_qps.is_empty() && culprits.iter().all(|ranks| ranks.is_empty())
}

/// The send/recv calls ranks wait in on a communicator: `rank 6's recv #25`. With ranks
/// missing, only the calls that wait for them: further down a pipeline's chain of receives
/// a rank waits for a peer that waits itself, and its call matches that peer's, not the
/// missing rank's.
fn p2p_waits(c: &CommReport, report: &HangReport) -> Vec<String> {
    let for_missing =
        |r: &RankReport| c.missing_ranks.is_empty() || r.waiting_for.iter().any(|w| c.missing_ranks.contains(w));
    report
        .ranks
        .iter()
        .filter(|r| c.waiting_ranks.contains(&r.rank) && r.comm_id == Some(c.comm_id) && r.in_flight)
        .filter(|r| for_missing(r))
        .filter_map(|r| Some(format!("rank {}'s {} #{}{}", r.rank, r.op?.name(), r.comm_seq?, of_pass(&r.transfer))))
        .collect()
}

/// ` (microbatch 3, forward)`: the pipeline pass a send/recv carries, when the schedule
/// places it; nothing otherwise.
fn of_pass(t: &TransferPass) -> String {
    match (t.microbatch, t.phase) {
        (Some(m), Some(Phase::Fwd)) => format!(" (microbatch {m}, forward)"),
        (Some(m), Some(Phase::Bwd)) => format!(" (microbatch {m}, backward)"),
        _ => String::new(),
    }
}

/// One sentence per stuck communicator: who holds it up, and who waits.
fn comm_verdict(c: &CommReport, report: &HangReport) -> String {
    let source = report.source;
    let call = stuck_call(c);
    // A send/recv: the half a missing peer never posted, and the call waiting for it.
    let waits = if c.stuck_p2p && c.stuck_seq.is_none() { p2p_waits(c, report) } else { Vec::new() };
    let call = if waits.is_empty() { call } else { format!("the send/recv matching {}", waits.join(", ")) };
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
        let without = if source == "prometheus" { "no exporter reported" } else { "with no log" };
        causes.push(format!("communicator {} {without}", rank_noun(&c.no_log_comm_ranks)));
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
    let from = if p.named_by == "first_end" {
        "the first to end while the others waited in a call, from the ranks' end records"
    } else {
        "from their last live tables"
    };
    format!("HUNG (post-mortem: all {} ranks are gone; {from}): {held}{waited}", p.gone_ranks.len())
}

fn hang_head(report: &HangReport) -> Vec<String> {
    // A mismatch first: it is the usual cause of the hang that follows it.
    let mut lines =
        mismatch_lines(report.communicators.iter().map(|c| (c.comm_id, &c.mismatches[..], c.mismatches_total)));
    let hung = lines.len();
    // The communicators a culprit holds up first; those whose missing ranks wait
    // themselves elsewhere (a chain back to the culprit) in one line after them.
    let (mut root, chained): (Vec<&CommReport>, Vec<&CommReport>) =
        stuck_comms(report).partition(|c| !chained(c, report));
    // A culprit's communicators lead: one held up only by a slow rank (a peer of the
    // culprit's that has only just blocked in a receive from it, say) is not the headline.
    root.sort_by_key(|c| slow_only(c));
    let verdict = match (report.hung, report.device_pending.is_empty()) {
        (true, _) => "HUNG",
        (false, true) => "not hung, but slow",
        (false, false) => "not yet judged",
    };
    lines.extend(root.iter().map(|c| format!("{verdict}: {}", comm_verdict(c, report))));
    if !chained.is_empty() && !root.is_empty() {
        let mut behind: Vec<i32> = chained.iter().flat_map(|c| c.missing_ranks.iter().copied()).collect();
        behind.sort_unstable();
        behind.dedup();
        let (n, s) = (chained.len(), if chained.len() == 1 { "" } else { "s" });
        lines.push(format!(
            "{n} more communicator{s} held up in a chain: {} never entered their calls there because they wait \
             themselves (the table below)",
            rank_noun(&behind)
        ));
    } else {
        lines.extend(chained.iter().map(|c| format!("{verdict}: {}", comm_verdict(c, report))));
    }
    let t = &report.threshold;
    // A teardown faster than the threshold leaves no stuck wait: the post-mortem says it;
    // a device stall has its own lines.
    if !report.device_pending.is_empty() {
        lines.push(format!(
            "not hung yet: the host counts name {}, whose host{} wait{} on {} device{}: the devices' evidence will say \
             whom they wait for once it is {} old (the device threshold)",
            rank_noun(&report.device_pending),
            if report.device_pending.len() == 1 { "" } else { "s" },
            if report.device_pending.len() == 1 { "s" } else { "" },
            if report.device_pending.len() == 1 { "its" } else { "their" },
            if report.device_pending.len() == 1 { "" } else { "s" },
            t.device_threshold_s.map_or("as".to_string(), |s| format!("{s:.3}s"))
        ));
    } else if let Some(s) = &report.progress_stall {
        lines.push(progress_stall_line(s));
    } else if lines.len() == hung
        && report.post_mortem.is_none()
        && report.device_stall.is_none()
        && report.profiler_stall.is_none()
    {
        lines.push(format!("not hung: no rank has been stuck for more than {:.3}s", t.threshold_s));
    }
    if let Some(first) = &report.first_end {
        lines.insert(0, first_end_line(first));
    }
    if let Some(p) = &report.post_mortem {
        lines.insert(0, post_mortem_line(p));
    }
    // The device's culprit first: the host counts agree, so nothing above names it.
    if let Some(s) = &report.device_stall {
        lines.insert(0, device_stall_line(s));
    }
    // The head of a chain of device waits: the host counts above name waiters too.
    if let Some(c) = &report.device_chain {
        lines.insert(0, device_chain_line(c));
    }
    if let Some(s) = &report.profiler_stall {
        lines.insert(0, profiler_stall_line(s));
    }
    if report.hang_evidence != HangEvidenceUsed::None {
        lines.push(format!("hang evidence: {}", report.hang_evidence.describe()));
    }
    lines.push(format!("waits from: {}", report.waits_from_reason));
    // The same nanoseconds on both sides when the floor decides.
    let floor = t.threshold_s <= t.min_stuck_s;
    lines.push(match (t.step_s, t.period, t.cadence_comm_id, t.longest_call_s, t.longest_gap_s) {
        _ if t.source == "exporters" => {
            format!("threshold {:.3}s, the largest the nodes' exporters computed from their logs", t.threshold_s)
        }
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
        _ if floor => format!("threshold {:.3}s, the --min-stuck-s floor: {}", t.threshold_s, untimed(report)),
        _ => format!("threshold {:.3}s (--fallback-stuck-s): {}", t.threshold_s, untimed(report)),
    });
    if let Some(line) = progress_threshold_line(report) {
        lines.push(line);
    }
    lines
}

/// The progress threshold, when the job has no collective cadence to pace the other or
/// progress named the hang.
fn progress_threshold_line(report: &HangReport) -> Option<String> {
    let t = &report.threshold;
    let threshold = t.progress_threshold_s?;
    if t.step_s.is_some() && report.progress_stall.is_none() {
        return None;
    }
    Some(match t.progress_longest_step_s {
        Some(step) => format!(
            "progress threshold {threshold:.3}s = max(--min-stuck-s, {} x the longest of {} recent steps, {step:.3}s)",
            t.factor,
            t.progress_steps_measured.unwrap_or(0)
        ),
        None => {
            format!("progress threshold {threshold:.3}s (--fallback-stuck-s): fewer than 3 steps past the first two")
        }
    })
}

/// `HUNG: rank 2 has not advanced for 12.3 s, at step 29 ...`: the culprit step and stage
/// progress names when no call or device shows the hang.
fn progress_stall_line(s: &ProgressStallReport) -> String {
    let place = |step: Option<u64>, stage: &Option<String>| {
        let step = step.map_or("before its first step".to_string(), |n| format!("at step {n}"));
        match stage {
            Some(stage) => format!("{step} in {stage}"),
            None => format!("{step} between stages"),
        }
    };
    let others = if s.ahead_ranks.is_empty() {
        String::new()
    } else {
        let verb = if s.ahead_ranks.len() == 1 { "is" } else { "are" };
        format!("; {} {verb} ahead, most {}", rank_noun(&s.ahead_ranks), place(s.ahead_step, &s.ahead_stage))
    };
    let also = match s.behind_ranks.len() {
        1 => String::new(),
        _ => format!(" (behind with it: {})", rank_noun(&s.behind_ranks[1..])),
    };
    format!(
        "HUNG (from step and stage progress): rank {} has not advanced for {}, {}{also}{others}; no rank has \
         advanced for {}",
        s.behind_ranks[0],
        age(s.idle_s),
        place(s.step, &s.stage),
        age(s.job_idle_s)
    )
}

/// `HUNG: rank 1 never launched the send rank 5's device waits for in recv #25 on 0x...;
/// ...`: the head of a chain of device waits.
fn device_chain_line(c: &DeviceChainReport) -> String {
    // The half the culprit owes: a receive waits for a send, a send for a receive.
    let owed = match c.op {
        NcclOp::Recv => "send",
        NcclOp::Send => "recv",
        op => op.name(),
    };
    let peers = c.peer_ranks.iter().map(|r| format!("rank {r}'s")).collect::<Vec<_>>().join(", ");
    let behind: Vec<i32> =
        c.waiting_ranks.iter().copied().filter(|r| !c.peer_ranks.contains(r) && !c.culprit_ranks.contains(r)).collect();
    let behind = if behind.is_empty() {
        String::new()
    } else {
        format!(
            "; {} wait behind {} on their devices",
            rank_noun(&behind),
            if c.peer_ranks.len() == 1 { "it" } else { "them" }
        )
    };
    // A send/recv is numbered by the rank that waits: each rank counts its own.
    format!(
        "HUNG: {} never launched the {owed} {peers} device{} wait{} for in {} #{}{} on {:#018x}{behind}",
        rank_noun(&c.culprit_ranks),
        if c.peer_ranks.len() == 1 { "" } else { "s" },
        if c.peer_ranks.len() == 1 { "s" } else { "" },
        c.op.name(),
        c.comm_seq,
        of_pass(&c.transfer),
        c.comm_id,
    )
}

/// Why the logs give no step time to pace the threshold by.
fn untimed(report: &HangReport) -> &'static str {
    if report.waits_from_reason.contains(NO_COLLECTIVE) {
        return "no collective was recorded, so the logs give no step time to pace it by";
    }
    "the logs hold too few steps to time one"
}

const NO_COLLECTIVE: &str = "no collective was recorded";

/// `HUNG: rank 1's device never began AllReduce #5 ...`: the culprit NCCL's profiler shows
/// with the CUDA door shut.
fn profiler_stall_line(s: &ProfilerStallReport) -> String {
    let verb = if s.waiting_ranks.len() == 1 { "began it and waits" } else { "began it and wait" };
    format!(
        "HUNG: rank {}'s device never began {} #{} (NCCL's numbering, communicator tag {:#06x}); {} {verb} \
         {} on the device; what rank {} is stuck behind is unknown: the CUDA door was shut (sf run opens it)",
        s.rank,
        s.func,
        s.nccl_seq,
        s.comm_tag,
        rank_noun(&s.waiting_ranks),
        age(s.waiting_s),
        s.rank
    )
}

/// `HUNG: rank 3's device is stuck behind kernel sim_bwd_0 ...`: the culprit the devices
/// name when every host launched the collective.
fn device_stall_line(s: &DeviceStallReport) -> String {
    let kernel = s.kernel.as_deref().unwrap_or("an unnamed kernel");
    let stage = s.stage.as_ref().map_or(String::new(), |stage| format!(" in {stage}"));
    let host = s.syncing_s.map_or(String::new(), |w| format!("; its host has waited {} in a synchronization", age(w)));
    let waiting = if s.waiting_ranks.is_empty() {
        String::new()
    } else {
        let verb = if s.waiting_ranks.len() == 1 { "waits" } else { "wait" };
        format!("; {} {verb} in it on the device", rank_noun(&s.waiting_ranks))
    };
    format!(
        "HUNG: rank {} is stuck behind kernel {kernel} (launched{stage} {} ago, unfinished for {}): {} #{} on \
         {:#018x} cannot complete{waiting}{host}",
        s.rank,
        age(s.unfinished_s),
        age(s.unfinished_s),
        s.op.name(),
        s.comm_seq,
        s.comm_id
    )
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

fn stuck_comm_cells(c: &CommReport, source: &str) -> Vec<String> {
    let listed = |ranks: &[i32]| if ranks.is_empty() { "-".to_string() } else { ranges(ranks) };
    let others: Vec<String> = [
        ("wedged", &c.wedged_ranks),
        ("dead", &c.dead_ranks),
        ("stalled", &c.stalled_ranks),
        ("exited", &c.exited_ranks),
        ("slow", &c.slow_ranks),
        ("disabled", &c.disabled_ranks),
        (if source == "prometheus" { "no exporter: comm rank" } else { "no log: comm rank" }, &c.no_log_comm_ranks),
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
    let mut lines: Vec<String> = snapshot_note(report.ranks.iter().map(|r| &r.snapshot_wall)).into_iter().collect();
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
    // The devices tell what the quiet hosts cannot: the stall named first.
    if let Some(quiet) = report.quiet_s.filter(|_| report.device_stall.is_none()) {
        // With launches that return at once and no device records, a stuck kernel leaves
        // the hosts exactly so: say that it could not be seen.
        let device_unseen = if report.waits_from_reason == Why::AsynchronousCalls.describe() {
            "; the NCCL calls return at once and the CUDA door was shut, so a kernel stuck on a device \
             looks the same (sf run opens the door)"
        } else {
            ""
        };
        match report.device_waits.first() {
            // The device says where the hosts wait: in a synchronization, behind a kernel.
            Some(w) => lines.push(format!(
                "note: every live rank has been outside NCCL for {}; {}: a device busy this long with one kernel \
                 is stuck or very slow, and no peer waits for it in a collective to tell which",
                age(quiet),
                device_wait_clause(w, report.device_waits.len())
            )),
            None => lines.push(format!(
                "note: every live rank has been outside NCCL for {}: the job is stuck outside NCCL or in a long \
                 phase without collectives (checkpoint, evaluation); the logs cannot tell which{device_unseen}",
                age(quiet)
            )),
        }
    }
    if !lines.is_empty() {
        lines.insert(0, String::new());
    }
    lines
}

/// `rank 0's host has waited 31.9s in a synchronization behind kernel K (launched 32.0s
/// ago)`, and how many other ranks wait so.
fn device_wait_clause(w: &DeviceWaitReport, waiting: usize) -> String {
    let behind = match (&w.kernel, w.unfinished_s) {
        (kernel, Some(unfinished)) => {
            format!(
                " behind kernel {} (launched {} ago)",
                kernel.as_deref().unwrap_or("an unnamed kernel"),
                age(unfinished)
            )
        }
        _ => String::new(),
    };
    let others = match waiting {
        0 | 1 => String::new(),
        n => format!(" ({} more rank{} wait so)", n - 1, if n == 2 { "" } else { "s" }),
    };
    format!("rank {}'s host has waited {} in a synchronization on its device{behind}{others}", w.rank, age(w.syncing_s))
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
