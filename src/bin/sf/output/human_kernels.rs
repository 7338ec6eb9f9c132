//! Human output of the kernel summaries: `sf dump` lines for kinds 11-14 and 16.

use stagefrontier::core::log::records::RecordBody;

/// `sf dump`'s line for a kernel-summary record; `None` for other kinds.
pub(super) fn kernel_record_line(seq: u64, body: &RecordBody) -> Option<String> {
    let line = match body {
        RecordBody::KernelName(n) => format!(
            "{seq:>8}  {:>12}  {:<12}  name#{} {}{}",
            "-",
            "kernel_name",
            n.name_id,
            n.name(),
            if n.truncated() { "..." } else { "" }
        ),
        RecordBody::KernelCluster(c) => {
            let entries: Vec<String> = c
                .entries()
                .iter()
                .map(|e| {
                    format!(
                        "name#{}[{}] n={} p50={:.1}us p99={:.1}us",
                        e.name_id,
                        e.index,
                        e.launches,
                        e.p50_ns() / 1e3,
                        e.p99_ns() / 1e3
                    )
                })
                .collect();
            format!(
                "{seq:>8}  {:>12}  {:<12}  window={} dev={} stream={}  {}",
                "-",
                "kernel_clust",
                c.window,
                c.device,
                c.stream,
                entries.join("; ")
            )
        }
        RecordBody::NcclKernels(n) => format!(
            "{seq:>8}  {:>12}  {:<12}  window={} dev={} stream={} name#{} kernels={} busy={:.1}us",
            "-",
            "nccl_kernels",
            n.window,
            n.device,
            n.stream,
            n.name_id,
            n.count,
            n.pairs().iter().map(|p| p.1 as f64).sum::<f64>() / 1e3
        ),
        RecordBody::StreamBusy(b) => {
            let streams: Vec<String> = b
                .entries()
                .iter()
                .map(|e| {
                    format!(
                        "dev{}/stream{}={:.3}ms ({} kernels)",
                        e.device,
                        e.stream,
                        e.busy_ns as f64 / 1e6,
                        e.kernels
                    )
                })
                .collect();
            format!(
                "{seq:>8}  {:>12}  {:<12}  window={} part={} late={} truncated={}+{} untracked={}  {}",
                "-",
                "stream_busy",
                b.window,
                b.part,
                b.late,
                b.truncated_clusters,
                b.truncated_nccl,
                b.untracked,
                streams.join(" ")
            )
        }
        RecordBody::StageDevice(d) => {
            let stages: Vec<String> = d
                .stages()
                .map(|(id, dev, spill)| {
                    format!("stage#{id}={:.3}ms(spill {:.3}ms)", dev as f64 / 1e6, spill as f64 / 1e6)
                })
                .collect();
            format!(
                "{seq:>8}  {:>12}  {:<12}  step={} part={} kernels={} correlated={}  {}",
                "-",
                "stage_device",
                d.step,
                d.part,
                d.kernels,
                d.correlated,
                stages.join(" ")
            )
        }
        _ => return None,
    };
    Some(line)
}
