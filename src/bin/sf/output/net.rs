//! `sf net` for people (the answer first, then one row per QP, the evidence, and with
//! `--series` each QP's samples) and for scripts (the report as one JSON object).

use std::io::{self, Write};

use stagefrontier::core::log::records::RecordBody;
use stagefrontier::core::log::records_net::WrSource;
use stagefrontier::core::net::proxy_progress::ProxyLink;

use super::human::plural;
use super::table::{self, Align};
use crate::cli::Format;
use stagefrontier::report::net::{NetReport, QpRef, QpReport, RankNet};

pub fn write<W: Write>(format: Format, out: W, report: &NetReport, series: bool) -> io::Result<()> {
    super::report(format, out, report, |out, report| human(out, report, series))
}

fn gbps(bps: u64) -> String {
    if bps == 0 {
        "-".into()
    } else {
        format!("{:.3}", bps as f64 / 1e9)
    }
}

fn us(ns: u64) -> String {
    format!("{:.1}", ns as f64 / 1e3)
}

fn qp_name(q: &QpRef) -> String {
    match ProxyLink::of(WrSource::Proxy, q.device, q.qp_num).filter(|_| q.link.is_some()) {
        Some(link) => format!("rank {} {}", q.rank, link.describe()),
        None => format!("rank {} QP {:#x} ({}, device {})", q.rank, q.qp_num, q.source, q.device),
    }
}

fn qp_ref(r: &RankNet, q: &QpReport) -> QpRef {
    QpRef { rank: r.rank, source: q.source, device: q.device, qp_num: q.qp_num, link: q.link }
}

/// The window and baseline columns: "unknown" where no completion carried a size.
fn rate(q: &QpReport, bps: u64) -> String {
    if q.bandwidth_known {
        gbps(bps)
    } else {
        "unknown".into()
    }
}

fn human<W: Write>(out: &mut W, r: &NetReport, series: bool) -> io::Result<()> {
    let s = &r.summary;
    let verdict = match (s.stuck_qps.is_empty(), s.degraded_qps.is_empty()) {
        (true, true) if s.qps == 0 => "no RDMA work requests recorded".to_string(),
        (true, true) if !s.slower_than_start_qps.is_empty() => format!(
            "no stuck or degraded QP ({} slower than {} own start, not than {} peers)",
            plural(s.slower_than_start_qps.len() as u64, "QP"),
            if s.slower_than_start_qps.len() == 1 { "its" } else { "their" },
            if s.slower_than_start_qps.len() == 1 { "its" } else { "their" },
        ),
        (true, true) => "no stuck or degraded QP".to_string(),
        _ => {
            let mut parts = Vec::new();
            if !s.stuck_qps.is_empty() {
                parts.push(format!("STUCK: {}", s.stuck_qps.iter().map(qp_name).collect::<Vec<_>>().join(", ")));
            }
            if !s.degraded_qps.is_empty() {
                parts.push(format!("DEGRADED: {}", s.degraded_qps.iter().map(qp_name).collect::<Vec<_>>().join(", ")));
            }
            parts.join("; ")
        }
    };
    human_line!(out, "{}: {}, {}: {verdict}", r.dir, plural(s.ranks as u64, "rank"), plural(s.qps as u64, "QP"))?;
    if let Some(start) = &r.series_start {
        let list = |ranks: &[i32]| ranks.iter().map(|r| r.to_string()).collect::<Vec<_>>().join(",");
        let mut why = Vec::new();
        if !r.wrapped_ranks.is_empty() {
            why.push(format!(
                "older windows wrapped out of the event ring on ranks {} (set SF_LOG_RECORDS higher to keep more)",
                list(&r.wrapped_ranks)
            ));
        }
        if !r.unread_ranks.is_empty() {
            why.push(format!(
                "only the newest {} records of each rank were read, and ranks {} hold older ones (SF_READ_BUDGET, records across the job, reads more)",
                r.records_read_per_rank,
                list(&r.unread_ranks)
            ));
        }
        human_line!(
            out,
            "note: the QP series start at {start}, after the job did: {}; stuck and degraded evidence is kept longer and read whole",
            why.join("; ")
        )?;
    }
    if s.qps == 0 {
        human_line!(
            out,
            "work requests come from NCCL_PROFILER_PLUGIN=libstagefrontier.so (NCCL >= 2.23: its QP events in an NCCL built with NET_PROFILER, its proxy steps otherwise) or SF_VERBS=1"
        )?;
    } else if !s.ranks_without_work_requests.is_empty() {
        let ranks: Vec<String> = s.ranks_without_work_requests.iter().map(|r| r.to_string()).collect();
        human_line!(out, "no work requests recorded on ranks {}", ranks.join(", "))?;
    }
    if s.qps > 0 {
        writeln!(out)?;
        qp_table(out, &r.ranks)?;
        let unknown = qps(&r.ranks).filter(|(_, q)| !q.bandwidth_known).count();
        if unknown > 0 {
            human_line!(
                out,
                "bandwidth unknown on {}: no completion carried a size (NCCL's receive-side QP events have no length, proxy steps have none before profiler ABI v4)",
                plural(unknown as u64, "QP")
            )?;
        }
        evidence(out, &r.ranks)?;
        if series {
            samples(out, &r.ranks)?;
        }
    }
    super::human_ports::port_table(out, &r.ranks)?;
    Ok(())
}

fn qps(ranks: &[RankNet]) -> impl Iterator<Item = (&RankNet, &QpReport)> {
    ranks.iter().flat_map(|r| r.qps.iter().map(move |q| (r, q)))
}

fn qp_table<W: Write>(out: &mut W, ranks: &[RankNet]) -> io::Result<()> {
    let rows: Vec<Vec<String>> = qps(ranks)
        .map(|(r, q)| {
            let (dev, qp) = match q.link {
                // A proxy link: its channel, and the peer with the direction.
                Some(l) => (
                    format!("ch{}", l.channel),
                    format!("{} {}", if l.direction == "send" { "to" } else { "from" }, l.peer),
                ),
                None => (q.device.to_string(), format!("{:#x}", q.qp_num)),
            };
            vec![
                r.rank.to_string(),
                q.source.to_string(),
                dev,
                qp,
                q.posted.to_string(),
                q.completed.to_string(),
                q.in_flight.to_string(),
                q.errors.to_string(),
                format!("{:.1}", q.bytes_completed as f64 / (1 << 20) as f64),
                rate(q, q.window_bps),
                rate(q, q.baseline_bps),
                us(q.latency_mean_ns),
                us(q.latency_max_ns),
                if q.stuck.is_empty() { "-".into() } else { q.stuck.len().to_string() },
                match &q.peer_check {
                    Some(c) if c.verdict == "degraded" => "yes".into(),
                    Some(_) => "own-start".into(),
                    None => "-".into(),
                },
            ]
        })
        .collect();
    use Align::{Left, Right};
    table::write(
        out,
        &[
            ("RANK", Right),
            ("SOURCE", Left),
            ("DEV", Right),
            ("QP", Right),
            ("POSTED", Right),
            ("COMPLETED", Right),
            ("IN_FLIGHT", Right),
            ("ERRORS", Right),
            ("MIB", Right),
            ("WINDOW_GB/S", Right),
            ("BASELINE_GB/S", Right),
            ("LAT_MEAN_US", Right),
            ("LAT_MAX_US", Right),
            ("STUCK", Right),
            ("DEGRADED", Right),
        ],
        &rows,
    )
}

fn evidence<W: Write>(out: &mut W, ranks: &[RankNet]) -> io::Result<()> {
    for (r, q) in qps(ranks) {
        let name = qp_name(&qp_ref(r, q));
        for s in &q.stuck {
            human_line!(
                out,
                "{name}: stuck, a work request in flight {:.3} s at {} (t={} ns) (timeout {:.3} s), {} in flight after {} completions; {}",
                s.age_s,
                r.clock.rfc3339(s.t_ns),
                s.t_ns,
                s.timeout_s,
                s.in_flight,
                s.completed,
                if s.resolved { "it moved again later" } else { "no completion since" }
            )?;
        }
        for d in &q.degraded {
            human_line!(
                out,
                "{name}: slower than its own start, window {} GB/s against baseline {} GB/s ({:.0}% below, threshold {:.0}%) for {} windows at {} (t={} ns)",
                gbps(d.window_bps),
                gbps(d.baseline_bps),
                (1.0 - d.window_bps as f64 / d.baseline_bps.max(1) as f64) * 100.0,
                d.threshold * 100.0,
                d.windows,
                r.clock.rfc3339(d.t_ns),
                d.t_ns
            )?;
        }
        match &q.peer_check {
            Some(c) if c.verdict == "degraded" => human_line!(
                out,
                "{name}: DEGRADED, {} GB/s against its {} peers' {} GB/s for {:.1} s",
                gbps(c.own_bps),
                c.peers,
                gbps(c.peers_bps.unwrap_or(0)),
                c.sustained_s.unwrap_or(0.0)
            )?,
            Some(c) => human_line!(
                out,
                "{name}: not degraded: {}{}",
                c.why.unwrap_or(""),
                c.peers_bps.map_or(String::new(), |p| format!(
                    " ({} GB/s against its {} peers' {} GB/s)",
                    gbps(c.own_bps),
                    c.peers,
                    gbps(p)
                ))
            )?,
            None => {}
        }
    }
    Ok(())
}

fn samples<W: Write>(out: &mut W, ranks: &[RankNet]) -> io::Result<()> {
    for (r, q) in qps(ranks) {
        let t0 = q.series.first().map_or(0, |s| s.t_ns);
        writeln!(out)?;
        human_line!(
            out,
            "{}, one row per sample, T_S from {} (t={t0} ns):",
            qp_name(&qp_ref(r, q)),
            r.clock.rfc3339(t0)
        )?;
        let rows: Vec<Vec<String>> = q
            .series
            .iter()
            .map(|s| {
                let mut flags = Vec::new();
                if s.stuck {
                    flags.push("stuck");
                }
                if s.degraded {
                    flags.push("degraded");
                }
                vec![
                    format!("{:.3}", (s.t_ns - t0) as f64 / 1e9),
                    s.posted.to_string(),
                    s.completed.to_string(),
                    s.in_flight.to_string(),
                    rate(q, s.window_bps),
                    us(s.latency_mean_ns),
                    us(s.latency_max_ns),
                    flags.join(","),
                ]
            })
            .collect();
        use Align::{Left, Right};
        table::write(
            out,
            &[
                ("T_S", Right),
                ("POSTED", Right),
                ("COMPLETED", Right),
                ("IN_FLIGHT", Right),
                ("WINDOW_GB/S", Right),
                ("LAT_MEAN_US", Right),
                ("LAT_MAX_US", Right),
                ("STATE", Left),
            ],
            &rows,
        )?;
    }
    Ok(())
}

/// `sf dump`'s line for a work-request record, in its columns: seq, seconds since the
/// rank's library started, kind, then the record's own fields.
pub(super) fn record_line(seq: u64, body: &RecordBody, base_mono_ns: u64) -> Option<String> {
    let at = |t_ns: u64| format!("{:.6}", (t_ns as i128 - base_mono_ns as i128) as f64 / 1e9);
    let qp = |source: WrSource, device: i32, qp_num: u32| match ProxyLink::of(source, device, qp_num) {
        Some(l) => format!(
            "proxy ch={} {}={} comm={:#06x}",
            l.channel,
            if l.is_send { "to" } else { "from" },
            l.peer,
            l.comm_tag
        ),
        None => format!("{} dev={device} qp={qp_num:#x}", source.name()),
    };
    Some(match body {
        RecordBody::QpWindow(w) => format!(
            "{seq:>8}  {:>12}  {:<12}  {} posted={} completed={} in_flight={} errors={} bytes={} window_gbps={} n={} baseline_gbps={} lat_mean_us={} lat_max_us={} (n={}){}{}",
            at(w.t_ns),
            "qp_window",
            qp(w.source, w.device, w.qp_num),
            w.posted,
            w.completed,
            w.in_flight,
            w.errors,
            w.bytes_completed,
            gbps(w.window_bps),
            w.window_n,
            gbps(w.baseline_bps),
            us(w.latency_mean_ns),
            us(w.latency_max_ns),
            w.latency_n,
            if w.stuck { " stuck" } else { "" },
            if w.degraded { " degraded" } else { "" }
        ),
        RecordBody::QpStuck(s) => format!(
            "{seq:>8}  {:>12}  {:<12}  {} oldest in flight {:.3} s (timeout {:.3} s) in_flight={} posted={} completed={}",
            at(s.t_ns),
            "qp_stuck",
            qp(s.source, s.device, s.qp_num),
            s.t_ns.saturating_sub(s.since_ns) as f64 / 1e9,
            s.timeout_ns as f64 / 1e9,
            s.in_flight,
            s.posted,
            s.completed
        ),
        RecordBody::QpDegraded(d) => format!(
            "{seq:>8}  {:>12}  {:<12}  {} window_gbps={} baseline_gbps={} threshold={} windows={} completed={}",
            at(d.t_ns),
            "qp_degraded",
            qp(d.source, d.device, d.qp_num),
            gbps(d.window_bps),
            gbps(d.baseline_bps),
            d.threshold,
            d.windows,
            d.completed
        ),
        _ => return None,
    })
}
