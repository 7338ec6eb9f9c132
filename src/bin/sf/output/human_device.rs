//! `sf dump`'s human lines for the device records: host synchronizations, NCCL kernels
//! linked to their calls, and the device's unfinished work.

use stagefrontier::core::log::records::RecordBody;

use super::human::json_name;

pub(super) fn record_line(seq: u64, body: &RecordBody, base_mono_ns: u64) -> Option<String> {
    let since_start = |t_ns: u64| format!("{:.6}", (t_ns as i128 - base_mono_ns as i128) as f64 / 1e9);
    let ms = |ns: u64| format!("{:.3}", ns as f64 / 1e6);
    Some(match body {
        RecordBody::HostSync(s) => format!(
            "{seq:>8}  {:>12}  {:<12}  sync={} waited_ms={} tid={} stream={}",
            since_start(s.t_enter_ns),
            "host_sync",
            json_name(&s.sync),
            ms(s.t_exit_ns.saturating_sub(s.t_enter_ns)),
            s.tid,
            s.stream
        ),
        RecordBody::DeviceColl(c) => format!(
            "{seq:>8}  {:>12}  {:<12}  {:<21}  {:#018x}  {:>8}  device_ms={} launched_at={} stream={} link={}",
            since_start(c.t_start_ns),
            "device_coll",
            c.op.name(),
            c.comm_id,
            c.seq,
            ms(c.t_end_ns.saturating_sub(c.t_start_ns)),
            if c.t_launch_ns == 0 { "-".to_string() } else { since_start(c.t_launch_ns) },
            c.stream,
            json_name(&c.link)
        ),
        RecordBody::DeviceState(s) => {
            let oldest = s.oldest.map_or("oldest=-".to_string(), |o| {
                let call =
                    o.op.map_or("compute".to_string(), |op| format!("{} {:#018x} #{}", op.name(), o.comm_id, o.seq));
                format!(
                    "oldest=kernel:{} ({call}) launched_at={} stream={}",
                    o.name_id,
                    since_start(o.t_launch_ns),
                    o.stream
                )
            });
            let sync = s.sync.map_or("sync=-".to_string(), |k| {
                format!("sync={} since={}", json_name(&k), since_start(s.sync_since_ns))
            });
            format!(
                "{seq:>8}  {:>12}  {:<12}  launched={} completed={} {oldest} {sync}",
                since_start(s.t_ns),
                "device_state",
                s.launched,
                s.completed
            )
        }
        _ => return None,
    })
}
