//! `sf dump`'s human lines for the RDMA port-counter and verbs-door records.

use stagefrontier::core::log::records::RecordBody;

use super::human::json_name;

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
