//! `sf dump`'s human lines for the RDMA port-counter and verbs-door records.

use std::io::{self, Write};

use stagefrontier::core::log::records::{CounterState, RecordBody};

use super::human::json_name;
use super::table::{self, Align};
use stagefrontier::report::net::RankNet;

pub(super) fn record_line(seq: u64, body: &RecordBody, base_mono_ns: u64) -> Option<String> {
    let since_start = |t_ns: u64| format!("{:.6}", (t_ns as i128 - base_mono_ns as i128) as f64 / 1e9);
    Some(match body {
        RecordBody::PortCounterName(n) => format!(
            "{seq:>8}  {:>12}  {:<12}  id={} {}/{}/{}{} state={}",
            since_start(n.t_ns),
            "port_counter_name",
            n.name_id,
            n.device.to_string_lossy(),
            n.port,
            if n.hw { "hw_counters/" } else { "counters/" },
            n.counter.to_string_lossy(),
            json_name(&n.state)
        ),
        RecordBody::PortCounters(p) => {
            let values: Vec<String> =
                p.values().iter().map(|v| format!("{}={}(+{})", v.name_id, v.value, v.delta)).collect();
            format!(
                "{seq:>8}  {:>12}  {:<12}  interval={:.3}s over_cap={} {}",
                since_start(p.t_ns),
                "port_counters",
                p.interval_ns as f64 / 1e9,
                p.over_cap,
                values.join(" ")
            )
        }
        RecordBody::VerbsDevice(d) => format!(
            "{seq:>8}  {:>12}  {:<12}  device={} name={} state={} qp_table_full={} notes_lost={}",
            since_start(d.t_ns),
            "verbs_device",
            d.device,
            d.name.to_string_lossy(),
            d.state.name(),
            d.qp_table_full,
            d.notes_lost
        ),
        _ => return None,
    })
}

/// `sf net`'s port-counter section: the counters that moved or whose file changed state,
/// per rank; one line when every counter stayed quiet; nothing when none was sampled.
pub(super) fn port_table<W: Write>(out: &mut W, ranks: &[RankNet]) -> io::Result<()> {
    let all: Vec<_> = ranks.iter().flat_map(|r| r.ports.iter().map(move |p| (r.rank, p))).collect();
    if all.is_empty() {
        return Ok(());
    }
    let moved: Vec<_> = all.iter().filter(|(_, p)| p.delta > 0 || p.state != CounterState::Present).collect();
    writeln!(out)?;
    human_line!(out, "port counters: {} sampled, {} moved or changed state", all.len(), moved.len())?;
    if moved.is_empty() {
        return Ok(());
    }
    let rows: Vec<Vec<String>> = moved
        .iter()
        .map(|(rank, p)| {
            vec![
                rank.to_string(),
                p.device.clone(),
                p.port.to_string(),
                format!("{}{}", if p.hw { "hw:" } else { "" }, p.counter),
                p.first.to_string(),
                p.last.to_string(),
                p.delta.to_string(),
                format!("{:.1}", p.rate_per_s),
                p.bytes_per_s.map_or("-".into(), |b| format!("{:.3}", b * 8.0 / 1e9)),
                json_name(&p.state),
            ]
        })
        .collect();
    use Align::{Left, Right};
    table::write(
        out,
        &[
            ("RANK", Right),
            ("DEVICE", Left),
            ("PORT", Right),
            ("COUNTER", Left),
            ("FIRST", Right),
            ("LAST", Right),
            ("DELTA", Right),
            ("PER_S", Right),
            ("GBIT/S", Right),
            ("STATE", Left),
        ],
        &rows,
    )
}
