//! `sf hang`'s lines on what NCCL's profiler saw of the calls ranks are stuck in
//! (`commands::hang_profiler`): the ranks whose network part is still running first.

use super::human::{age, plural};
use stagefrontier::report::hang::HangReport;
use stagefrontier::report::hang_profiler::ProfilerCallReport;

/// Ranks and links shown; `--json` has them all.
const RANKS_AT_MOST: usize = 4;
const LINKS_AT_MOST: usize = 8;

pub(super) fn lines(report: &HangReport) -> Vec<String> {
    let mut seen: Vec<(i32, &ProfilerCallReport)> =
        report.ranks.iter().filter_map(|r| r.profiler.as_ref().map(|p| (r.rank, p))).collect();
    if !report.hung || seen.is_empty() {
        return Vec::new();
    }
    // Links with steps in flight first: that is where the call waits on the network.
    let waiting = |p: &ProfilerCallReport| p.proxies.iter().any(|x| x.in_flight.unwrap_or(0) > 0);
    seen.sort_by_key(|&(rank, p)| (!waiting(p), rank));
    let mut lines = Vec::new();
    for &(rank, p) in seen.iter().take(RANKS_AT_MOST) {
        lines.push(head(rank, p));
        for x in p.proxies.iter().take(LINKS_AT_MOST) {
            let to = if x.direction == "send" { "send to" } else { "recv from" };
            let mut words = vec![format!("{} done", plural(x.steps_done as u64, "step"))];
            if let Some(n) = x.in_flight.filter(|&n| n > 0) {
                words.push(format!("{n} in flight on the link{}", if x.stuck { " (stuck)" } else { "" }));
            }
            if let Some(s) = x.last_done_s {
                words.push(format!("last {} ago", age(s)));
            }
            lines.push(format!("  channel {} {to} peer {}: {}", x.channel, x.peer, words.join(", ")));
        }
        if p.proxies.len() > LINKS_AT_MOST {
            lines.push(format!(
                "  and {} (--json lists them)",
                plural((p.proxies.len() - LINKS_AT_MOST) as u64, "more link")
            ));
        }
    }
    if seen.len() > RANKS_AT_MOST {
        lines.push(format!(
            "and {} seen by the profiler (--json)",
            plural((seen.len() - RANKS_AT_MOST) as u64, "more rank")
        ));
    }
    lines
}

fn head(rank: i32, p: &ProfilerCallReport) -> String {
    let call = p.op.map_or("its group (ncclGroupEnd)", |op| op.name());
    if p.records.is_empty() {
        return format!("profiler, rank {rank}: {call}: {}", p.note.unwrap_or("no record"));
    }
    let first = &p.records[0];
    let mut what: Vec<String> = p.records.iter().take(4).map(|r| format!("{} #{}", r.func, r.nccl_seq)).collect();
    if p.records.len() > 4 {
        what.push(format!("{} more", p.records.len() - 4));
    }
    let what = what.join(", ");
    let kind = if first.api { "API" } else { "task" };
    let progress = match p.last_progress_s {
        Some(s) => format!("last network progress {} ago", age(s)),
        None => "no proxy step done yet".to_string(),
    };
    format!(
        "profiler, rank {rank}: {call} is NCCL's {what} (v{} {kind}, started {} ago); {progress}",
        p.abi,
        age(first.age_s)
    )
}
