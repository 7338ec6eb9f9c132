pub const NCCL_CALL: u16 = 1;
pub const COMM_CREATED: u16 = 2;
pub const DROPS: u16 = 3;
pub const INJECTION: u16 = 4;
pub const HANG_EVIDENCE: u16 = 5;
pub const STEP_VECTOR: u16 = 6;
pub const SIDE_VALUE: u16 = 7;
/// A collective or point-to-point task seen through the NCCL profiler plugin door.
pub const PROF_OP: u16 = 8;
/// A proxy operation or proxy step seen through the profiler plugin door.
pub const PROF_PROXY: u16 = 9;
/// A network-plugin event (an IB QP work request) seen through the profiler door.
pub const PROF_NET: u16 = 10;
/// A kernel name interned on this rank (records_kernels.rs).
pub const KERNEL_NAME: u16 = 11;
/// KDE clusters of kernel durations per (name, device, stream) and window.
pub const KERNEL_CLUSTER: u16 = 12;
/// NCCL kernels' start offsets and durations per window.
pub const NCCL_KERNELS: u16 = 13;
/// GPU busy time per (device, stream) and window.
pub const STREAM_BUSY: u16 = 14;
/// Device time per stage of one step.
pub const STAGE_DEVICE: u16 = 16;
/// The CUDA door's state and drop counts (records_cupti.rs).
pub const CUPTI_STATUS: u16 = 15;
/// Periodic per-QP work-request sample (records_net.rs).
pub const QP_WINDOW: u16 = 17;
/// A work request in flight longer than SF_WR_TIMEOUT_MS.
pub const QP_STUCK: u16 = 18;
/// A QP's window bandwidth below its baseline by more than SF_WR_DEGRADED.
pub const QP_DEGRADED: u16 = 19;
/// An RDMA port counter's device, port and name, by id (records_ports.rs).
pub const PORT_COUNTER_NAME: u16 = 20;
/// RDMA port counters that changed in one sysfs sample.
pub const PORT_COUNTERS: u16 = 21;
/// A device context the verbs door (SF_VERBS=1) adopted, refused or saw closed.
pub const VERBS_DEVICE: u16 = 22;
/// A completed host synchronization (records_device.rs).
pub const HOST_SYNC: u16 = 23;
/// A completed NCCL kernel linked to the call that launched it.
pub const DEVICE_COLL: u16 = 24;
/// The collector's view of the device's unfinished work.
pub const DEVICE_STATE: u16 = 25;
/// How the process ended (records_end.rs).
pub const PROCESS_END: u16 = 26;
/// One frame of a sampled Python stack (records_stacks.rs).
pub const STACK_FRAME: u16 = 27;
/// One thread of a sampled stack, after its frames.
pub const STACK_THREAD: u16 = 28;
/// A stack sample's header, after its threads.
pub const STACK_SAMPLE: u16 = 29;
/// A process group's description, as the Python door saw it (records_groups.rs).
pub const GROUP_DESC: u16 = 30;

/// Each kind's name: the `kind` of its JSON form, and what `sf dump --kind` takes.
pub const NAMES: [(u16, &str); 30] = [
    (NCCL_CALL, "nccl_call"),
    (COMM_CREATED, "comm_created"),
    (DROPS, "drops"),
    (INJECTION, "injection"),
    (HANG_EVIDENCE, "hang_evidence"),
    (STEP_VECTOR, "step_vector"),
    (SIDE_VALUE, "side_value"),
    (PROF_OP, "prof_op"),
    (PROF_PROXY, "prof_proxy"),
    (PROF_NET, "prof_net"),
    (KERNEL_NAME, "kernel_name"),
    (KERNEL_CLUSTER, "kernel_cluster"),
    (NCCL_KERNELS, "nccl_kernels"),
    (STREAM_BUSY, "stream_busy"),
    (STAGE_DEVICE, "stage_device"),
    (CUPTI_STATUS, "cupti_status"),
    (QP_WINDOW, "qp_window"),
    (QP_STUCK, "qp_stuck"),
    (QP_DEGRADED, "qp_degraded"),
    (PORT_COUNTER_NAME, "port_counter_name"),
    (PORT_COUNTERS, "port_counters"),
    (VERBS_DEVICE, "verbs_device"),
    (HOST_SYNC, "host_sync"),
    (DEVICE_COLL, "device_coll"),
    (DEVICE_STATE, "device_state"),
    (PROCESS_END, "process_end"),
    (STACK_FRAME, "stack_frame"),
    (STACK_THREAD, "stack_thread"),
    (STACK_SAMPLE, "stack_sample"),
    (GROUP_DESC, "group_desc"),
];

/// The code of a kind's name.
pub fn code(name: &str) -> Option<u16> {
    NAMES.iter().find(|(_, n)| *n == name).map(|(code, _)| *code)
}
