//! The metric families `sf exporter` serves: name, kind, unit and help of each (the list
//! docs/many-nodes.md documents), and the label values of its state sets.

use crate::report::metric_families::Kind;

/// (name, kind, unit, help) of a family: the metric list docs/many-nodes.md documents.
pub type Spec = (&'static str, Kind, &'static str, &'static str);

pub const RANK: Spec = ("sf_rank", Kind::Info, "", "A rank log: job id, rank, local rank, host, pid, world size");
pub const LIVENESS: Spec = ("sf_rank_liveness", Kind::StateSet, "", "Whether the rank's writer is alive (as sf ls)");
pub const HEARTBEAT_AGE: Spec =
    ("sf_heartbeat_age_seconds", Kind::Gauge, "seconds", "Seconds since the rank's collector last beat");
pub const COMMITTED: Spec = ("sf_records_committed", Kind::Counter, "", "Records the rank's log committed");
pub const DROPPED: Spec =
    ("sf_events_dropped", Kind::Counter, "", "Events the hot path dropped because its ring was full");
pub const LOST: Spec = ("sf_records_lost", Kind::Counter, "", "Records overwritten before the exporter read them");
pub const SKIPPED: Spec = (
    "sf_exporter_records_skipped",
    Kind::Counter,
    "",
    "Records the exporter passed over to keep a scrape within its cost (a scrape reads at most a log's newest 2048 events and 4096 history records)",
);
pub const DOOR_OPEN: Spec = ("sf_door_open", Kind::Gauge, "", "1 when the door recorded in this rank");
pub const STEP_CURRENT: Spec = ("sf_step_current", Kind::Gauge, "", "The logical step the rank is in");
pub const STEP_LAST: Spec =
    ("sf_step_last_seconds", Kind::Gauge, "seconds", "Wall time of the rank's last complete step");
pub const STAGE_LAST: Spec =
    ("sf_stage_last_seconds", Kind::Gauge, "seconds", "Duration of each stage in the rank's last complete step");
pub const STEP_WINDOW_HIST: Spec =
    ("sf_step_window_seconds", Kind::GaugeHistogram, "seconds", "Step wall times over the newest complete steps");
pub const STAGE_WINDOW_HIST: Spec =
    ("sf_stage_window_seconds", Kind::GaugeHistogram, "seconds", "Stage durations over the newest complete steps");
pub const COLL_ENTERED: Spec =
    ("sf_nccl_coll_entered_seq", Kind::Gauge, "", "Sequence number of the last collective entered on the communicator");
pub const COLL_RETURNED: Spec = (
    "sf_nccl_coll_returned_seq",
    Kind::Gauge,
    "",
    "Sequence number of the last collective returned on the communicator",
);
pub const P2P_ENTERED: Spec =
    ("sf_nccl_p2p_entered_seq", Kind::Gauge, "", "Sequence number of the last send/recv entered on the communicator");
pub const P2P_RETURNED: Spec =
    ("sf_nccl_p2p_returned_seq", Kind::Gauge, "", "Sequence number of the last send/recv returned on the communicator");
pub const LAST_RETURN_AGE: Spec = (
    "sf_nccl_last_return_age_seconds",
    Kind::Gauge,
    "seconds",
    "Seconds since the rank's newest recorded NCCL call on the communicator returned",
);
pub const INFLIGHT_AGE: Spec =
    ("sf_nccl_inflight_age_seconds", Kind::Gauge, "seconds", "Age of the NCCL call in flight on the communicator");
pub const QP_INFLIGHT: Spec = ("sf_qp_inflight", Kind::Gauge, "", "RDMA work requests in flight on the queue pair");
pub const QP_BANDWIDTH: Spec = (
    "sf_qp_window_bytes_per_second",
    Kind::Gauge,
    "bytes_per_second",
    "Bandwidth of the queue pair's newest completions",
);
pub const QP_BASELINE: Spec =
    ("sf_qp_baseline_bytes_per_second", Kind::Gauge, "bytes_per_second", "The queue pair's own baseline bandwidth");
pub const QP_STUCK: Spec = ("sf_qp_stuck", Kind::Gauge, "", "1 while a work request is in flight past the timeout");
pub const QP_DEGRADED: Spec = ("sf_qp_degraded", Kind::Gauge, "", "1 while the window bandwidth is below baseline");
pub const HANG_HUNG: Spec = ("sf_hang_hung", Kind::Gauge, "", "1 when sf hang's analysis finds the job hung");
pub const HANG_THRESHOLD: Spec =
    ("sf_hang_threshold_seconds", Kind::Gauge, "seconds", "How long a wait must last to count as stuck");
pub const HANG_STATE: Spec = ("sf_hang_state", Kind::StateSet, "", "The rank's part in a hang (as sf hang's STATE)");
pub const HANG_STUCK: Spec = ("sf_hang_stuck_seconds", Kind::Gauge, "seconds", "How long the rank has been stuck");
pub const HANG_MISSING: Spec = (
    "sf_hang_missing_seconds",
    Kind::Gauge,
    "seconds",
    "A rank that never entered the collective its peers are stuck in, and for how long",
);
pub const DEVICE_OLDEST: Spec = (
    "sf_device_oldest_unfinished_seconds",
    Kind::Gauge,
    "seconds",
    "How long the rank's oldest launched kernel has been unfinished (its name, stage and launching collective)",
);
pub const DEVICE_UNCHANGED: Spec = (
    "sf_device_unchanged_seconds",
    Kind::Gauge,
    "seconds",
    "Since the rank's device last launched or completed a kernel the CUDA door saw",
);
pub const DEVICE_SYNC: Spec =
    ("sf_device_host_sync_seconds", Kind::Gauge, "seconds", "How long the rank's host has waited in a synchronization");
pub const KERNEL_CH_STARTED: Spec = (
    "sf_device_kernel_ch_started_seconds",
    Kind::Gauge,
    "seconds",
    "Since the rank's device last began a channel of an NCCL kernel, as NCCL's profiler tells (its collective in labels)",
);
pub const KERNEL_CH_STOPPED: Spec = (
    "sf_device_kernel_ch_stopped_seq",
    Kind::Gauge,
    "",
    "NCCL's sequence of the collective whose kernel channel the rank's device last finished",
);
pub const FRONTIER_EXPOSED: Spec =
    ("sf_frontier_exposed_seconds", Kind::Gauge, "seconds", "Mean exposed step time over the step window");
pub const FRONTIER_ADVANCE: Spec =
    ("sf_frontier_advance_seconds", Kind::Gauge, "seconds", "Mean frontier advance per step of each stage");
pub const FRONTIER_SHARE: Spec =
    ("sf_frontier_share_ratio", Kind::Gauge, "ratio", "Each stage's share of the exposed step time");
pub const FRONTIER_LEADER: Spec =
    ("sf_frontier_leader_rank", Kind::Gauge, "", "The rank credited with most of each stage's frontier advance");
pub const EXPORTER_LOGS: Spec = ("sf_exporter_logs", Kind::Gauge, "", "Rank logs the exporter reads");
pub const EXPORTER_SCRAPES: Spec = ("sf_exporter_scrapes", Kind::Counter, "", "Scrapes served");
pub const EXPORTER_CPU: Spec =
    ("sf_exporter_scrape_cpu_seconds", Kind::Gauge, "seconds", "CPU time of the previous scrape");
pub const EXPORTER_WALL: Spec =
    ("sf_exporter_scrape_duration_seconds", Kind::Gauge, "seconds", "Wall time of the previous scrape");
pub const EXPORTER_RSS: Spec = ("sf_exporter_resident_bytes", Kind::Gauge, "bytes", "The exporter's resident memory");

pub const DOORS: [&str; 6] = ["preload", "markers", "nvtx", "cuda", "profiler", "verbs"];
pub const LIVENESS_STATES: &[&str] = &["live", "exited", "disabled", "dead", "stalled"];
pub const HANG_STATES: &[&str] =
    &["ok", "slow", "waiting", "missing", "wedged", "dead", "stalled", "exited", "stuck_qp", "disabled"];

/// Every family, for the metric list in docs/many-nodes.md and its test.
#[cfg(test)]
pub const ALL: &[Spec] = &[
    RANK,
    LIVENESS,
    HEARTBEAT_AGE,
    COMMITTED,
    DROPPED,
    LOST,
    SKIPPED,
    DOOR_OPEN,
    STEP_CURRENT,
    STEP_LAST,
    STAGE_LAST,
    STEP_WINDOW_HIST,
    STAGE_WINDOW_HIST,
    COLL_ENTERED,
    COLL_RETURNED,
    P2P_ENTERED,
    P2P_RETURNED,
    LAST_RETURN_AGE,
    INFLIGHT_AGE,
    QP_INFLIGHT,
    QP_BANDWIDTH,
    QP_BASELINE,
    QP_STUCK,
    QP_DEGRADED,
    HANG_HUNG,
    HANG_THRESHOLD,
    HANG_STATE,
    HANG_STUCK,
    HANG_MISSING,
    DEVICE_OLDEST,
    DEVICE_UNCHANGED,
    DEVICE_SYNC,
    KERNEL_CH_STARTED,
    KERNEL_CH_STOPPED,
    FRONTIER_EXPOSED,
    FRONTIER_ADVANCE,
    FRONTIER_SHARE,
    FRONTIER_LEADER,
    EXPORTER_LOGS,
    EXPORTER_SCRAPES,
    EXPORTER_CPU,
    EXPORTER_WALL,
    EXPORTER_RSS,
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_readme_lists_every_metric_with_its_unit_in_the_name() {
        let readme = include_str!("../../docs/many-nodes.md");
        let section = readme.split("\n## Many nodes\n").nth(1).expect("docs/many-nodes.md has a Many nodes section");
        for (name, kind, unit, _) in ALL {
            let shown = match kind {
                Kind::Counter => format!("`{name}_total"),
                Kind::Info => format!("`{name}_info"),
                _ => format!("`{name}"),
            };
            assert!(section.contains(&shown), "docs/many-nodes.md metric list lacks {shown}");
            assert!(name.starts_with("sf_") && name.ends_with(unit), "{name} ({unit})");
        }
    }
}
