//! `sf frontier` and `sf slow` on jobs whose waits show on the device, on the host's
//! blocking calls, or nowhere: logs written by the real writer, one per rank.

use std::path::{Path, PathBuf};

use crate::analysis::blame::waits_from::WaitsFrom;
use crate::core::log::identity::Identity;
use crate::core::log::nccl_op::NcclOp;
use crate::core::log::records::{
    CommCreated, CommOrigin, CuptiState, CuptiStatus, DeviceColl, DeviceState, HostSync, KernelName, LinkSource,
    RecordBody, StageDevice, StepVector, SyncKind, Unfinished, STAGES_PER_PART,
};
use crate::core::log::stage_names::StageNames;
use crate::core::log::synth::allreduce;
use crate::core::log::writer::{HeaderInfo, LogWriter};
use crate::core::record::clock::{Calibration, ClockSource};
use crate::report::discover::Dirs;
use crate::report::frontier::{self, FrontierOptions, FrontierSource};
use crate::report::slow::{self, GroupBy, SlowOptions};

const MS: u64 = 1_000_000;
const STAGES: [&str; 5] = [
    "data.next_wait",
    "model.fwd_loss_cpu_wall",
    "model.backward_cpu_wall",
    "callbacks.cpu_wall",
    "optim.step_cpu_wall",
];
const BWD: &str = "model.backward_cpu_wall";
const STEPS: u64 = 20;
const WORLD: u32 = 4;
const COMM: u64 = 0x77;
/// Steps start this far apart; every stage of a step fits well inside.
const PERIOD_MS: u64 = 200;
const T0: u64 = 1_000_000_000_000;

/// How the job's ranks run.
#[derive(Clone, Copy, PartialEq)]
enum Shape {
    /// NCCL calls that block until every rank arrived.
    Blocking,
    /// Calls that return at once; the device waits, and the host in callbacks' sync.
    /// `device`: the CUDA door saw kernels, syncs and stage device time.
    Async { device: bool },
    /// No NCCL call at all (gloo).
    NoCollective,
}

/// One step of one rank: stage ms, and (async) when the allreduce's kernel started and
/// ended, ms into the step.
struct Step {
    stages_ms: [f64; 5],
    launch_ms: f64,
    exit_ms: f64,
    kernel_ms: (f64, f64),
    bwd_device_ms: f64,
}

/// Rank 2 is late: its host's backward takes `host_extra_ms` more, or its device's
/// backward kernels `device_extra_ms` more. Every step's allreduce is launched 5 ms
/// before backward's end and its kernel follows the device's backward work (ready 32 ms
/// after the launch), then runs 8 ms once the last rank's kernel started.
fn plan(rank: u32, step: u64, host_extra_ms: f64, device_extra_ms: f64, shape: Shape) -> Step {
    let jitter = ((rank as u64 * 7 + step * 13) % 5) as f64 * 0.05;
    let host_bwd = |r: u32| 40.0 + if r == 2 { host_extra_ms } else { 0.0 };
    let launch = |r: u32| 30.0 + host_bwd(r) - 5.0;
    let ready = |r: u32| launch(r).max(35.0) + 32.0 + if r == 2 { device_extra_ms } else { 0.0 };
    let last_start = (0..WORLD).map(ready).fold(0.0, f64::max);
    let kernel_ms = (ready(rank), last_start + 8.0);
    let callbacks_begin = 30.0 + jitter + host_bwd(rank);
    let (launch_ms, exit_ms, bwd, callbacks) = match shape {
        // The host waits inside the call, in backward, until the last rank is in.
        Shape::Blocking => {
            let exit = (0..WORLD).map(launch).fold(0.0, f64::max) + 1.0;
            (launch(rank) + jitter, exit + jitter, host_bwd(rank) + exit - launch(rank), 10.0)
        }
        // The loss's .item(): the host waits for its device to finish the step's work.
        _ => (
            launch(rank) + jitter,
            launch(rank) + jitter + 0.02,
            host_bwd(rank),
            (kernel_ms.1 - callbacks_begin).max(10.0),
        ),
    };
    Step {
        stages_ms: [10.0 + jitter, 20.0, bwd, callbacks, 20.0],
        launch_ms,
        exit_ms,
        kernel_ms,
        bwd_device_ms: 38.0 + if rank == 2 { device_extra_ms } else { 0.0 },
    }
}

fn write_job(name: &str, shape: Shape, host_extra_ms: f64, device_extra_ms: f64) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sf-waits-from-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for rank in 0..WORLD {
        write_rank(&dir, rank, shape, host_extra_ms, device_extra_ms);
    }
    dir
}

/// Rank `rank`'s log in `dir`, its clock at `T0` when the wall clock read `wall_ns`, and
/// the ids of `STAGES` in it.
fn rank_writer(dir: &Path, rank: u32, wall_ns: u64) -> (LogWriter, [u16; STAGES_PER_PART]) {
    let identity = Identity {
        global_rank: rank as i32,
        world_size: WORLD as i32,
        local_rank: 0,
        job_id: "w".into(),
        source: "torchrun",
    };
    let calibration = Calibration::new(ClockSource::Monotonic, 0, T0, wall_ns, 1e9);
    let info = HeaderInfo {
        identity: &identity,
        pid: 1,
        host: "h",
        calibration: &calibration,
        slot_count: 4096,
        ring_capacity: 64,
    };
    let w = LogWriter::create(&dir.join(format!("rank-{rank:05}.sflog")), &info).unwrap();
    let names = StageNames::in_map(w.map());
    let mut ids = [0u16; STAGES_PER_PART];
    for (id, name) in ids.iter_mut().zip(STAGES) {
        *id = names.intern(name.as_bytes()).unwrap();
    }
    (w, ids)
}

fn step_vector(step: u64, t_begin_ns: u64, ids: [u16; STAGES_PER_PART], stages_ms: [f64; 5]) -> RecordBody {
    let mut durations_ns = [0u64; STAGES_PER_PART];
    for (d, ms) in durations_ns.iter_mut().zip(stages_ms) {
        *d = (ms * MS as f64) as u64;
    }
    RecordBody::StepVector(StepVector {
        step,
        t_begin_ns,
        wall_ns: durations_ns.iter().sum(),
        overlap_ns: 0,
        schema_hash: 1,
        part: 0,
        stages_total: 5,
        nested_rejected: 0,
        count: 5,
        stage_ids: ids,
        durations_ns,
    })
}

fn write_rank(dir: &Path, rank: u32, shape: Shape, host_extra_ms: f64, device_extra_ms: f64) {
    let (mut w, ids) = rank_writer(dir, rank, 1_795_392_000_000_000_000);
    let ns = |ms: f64| (ms * MS as f64) as u64;
    for step in 0..STEPS {
        let p = plan(rank, step, host_extra_ms, device_extra_ms, shape);
        let base = T0 + step * PERIOD_MS * MS;
        let bwd_begin = base + ns(p.stages_ms[0] + p.stages_ms[1]);
        let callbacks_begin = bwd_begin + ns(p.stages_ms[2]);
        if shape != Shape::NoCollective {
            let (enter, exit) = (base + ns(p.launch_ms), base + ns(p.exit_ms));
            w.append(&RecordBody::NcclCall(allreduce(COMM, step + 1, enter, exit)));
        }
        if shape == (Shape::Async { device: true }) {
            w.append(&RecordBody::DeviceColl(DeviceColl {
                comm_id: COMM,
                seq: step + 1,
                op: NcclOp::AllReduce,
                t_launch_ns: base + ns(p.launch_ms),
                t_start_ns: base + ns(p.kernel_ms.0),
                t_end_ns: base + ns(p.kernel_ms.1),
                stream: 2,
                link: LinkSource::Callback,
            }));
            w.append(&RecordBody::HostSync(HostSync {
                t_enter_ns: callbacks_begin,
                t_exit_ns: callbacks_begin + ns(p.stages_ms[3]),
                sync: SyncKind::Stream,
                tid: 1,
                stream: 1,
            }));
            let mut stages = [(0u16, 0u32, 0u32); StageDevice::STAGES];
            stages[0] = (ids[1], 20_000, 0);
            stages[1] = (ids[2], (p.bwd_device_ms * 1e3) as u32, 0);
            w.append(&RecordBody::StageDevice(StageDevice {
                step,
                kernels: 10,
                correlated: 10,
                part: 0,
                stages,
                count: 2,
            }));
        }
        w.append(&step_vector(step, base, ids, p.stages_ms));
    }
}

fn frontier_of(dir: &Path) -> frontier::FrontierReport {
    let options = FrontierOptions {
        source: FrontierSource::Logs(Dirs::one(dir)),
        stages: None,
        window: None,
        residual: None,
        sync_wait: Vec::new(),
        accumulation: None,
    };
    frontier::build(&options).unwrap_or_else(|e| panic!("{e:?}"))
}

fn slow_of(dir: &Path) -> slow::SlowReport {
    let options = SlowOptions {
        skip_steps: 1,
        group_by: GroupBy::Job,
        jitter_window: 8,
        jitter_ratio: 1.5,
        min_regression: 1.05,
        max_cv: 0.1,
        z: 2.0,
        alpha: 0.05,
        beta: 0.5,
        min_effect: 0.05,
        min_effect_ms: 1.0,
        min_slow_steps: 2,
    };
    slow::build(&Dirs::one(dir), &options).unwrap_or_else(|e| panic!("{e:?}"))
}

#[test]
fn a_rank_whose_device_runs_late_in_backward_is_named_there_from_the_device() {
    let dir = write_job("device-late", Shape::Async { device: true }, 0.0, 15.0);
    let f = frontier_of(&dir);
    assert_eq!(f.waits_from, Some(WaitsFrom::Device));
    let culprits: Vec<(u32, &str)> =
        f.windows.iter().flat_map(|w| &w.culprits).map(|c| (c.rank, c.stage.as_str())).collect();
    assert_eq!(culprits, [(2, BWD)], "{:?}", f.windows[0].blame);
    let s = slow_of(&dir);
    assert_eq!(s.waits_from, WaitsFrom::Device);
    assert!(s.found);
    assert_eq!((s.slow_ranks[0].rank, s.slow_ranks[0].stage.as_str()), (2, BWD));
    assert!(s.slow_ranks[0].culprit.is_some());
    assert!(s.slow_ranks.iter().all(|r| r.rank == 2), "no waiter is named: {:?}", s.slow_ranks);
    assert_eq!(crate::report::ls::build(&Dirs::one(&dir)).unwrap().waits_from, WaitsFrom::Device);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn an_asynchronous_job_without_device_evidence_gives_leads_not_findings() {
    let dir = write_job("async-blind", Shape::Async { device: false }, 15.0, 0.0);
    let f = frontier_of(&dir);
    assert_eq!(f.waits_from, Some(WaitsFrom::None));
    assert!(f.waits_from_reason.unwrap().contains("asynchronous"), "{:?}", f.waits_from_reason);
    assert!(!f.found_culprit());
    assert!(!f.own_time, "no wait was taken out");
    let leads: Vec<(u32, &str)> = f.windows.iter().flat_map(|w| &w.leads).map(|l| (l.rank, l.stage.as_str())).collect();
    assert_eq!(leads, [(2, BWD)], "the frontier's leader, as a lead");
    let s = slow_of(&dir);
    assert_eq!(s.waits_from, WaitsFrom::None);
    assert!(!s.found, "exit 0");
    assert!(s.slow_ranks.is_empty(), "{:?}", s.slow_ranks);
    assert!(s.leads.iter().any(|l| l.rank == 2 && l.stage == BWD), "{:?}", s.leads);
    assert_eq!(crate::report::ls::build(&Dirs::one(&dir)).unwrap().waits_from, WaitsFrom::None);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn blocking_calls_still_carry_the_waits() {
    let dir = write_job("blocking", Shape::Blocking, 15.0, 0.0);
    let s = slow_of(&dir);
    assert_eq!(s.waits_from, WaitsFrom::HostCalls);
    assert_eq!(crate::report::ls::build(&Dirs::one(&dir)).unwrap().waits_from, WaitsFrom::HostCalls);
    assert_eq!((s.slow_ranks[0].rank, s.slow_ranks[0].stage.as_str()), (2, BWD));
    assert!(s.leads.is_empty());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A gloo job: rank 2's backward runs long, and no door saw a collective. Its peers may
/// have waited for it inside their stages (DDP's allreduce runs in C++), or it for them:
/// leads, never a finding.
#[test]
fn a_job_without_collectives_says_so_and_gives_leads_not_findings() {
    let dir = write_job("gloo", Shape::NoCollective, 15.0, 0.0);
    let f = frontier_of(&dir);
    assert_eq!(f.waits_from, Some(WaitsFrom::None));
    assert_eq!(f.waits_from_reason, Some("none: no collective was recorded"));
    assert!(f.windows.iter().all(|w| w.culprits.is_empty()));
    assert!(
        f.windows.iter().any(|w| w.leads.iter().any(|l| l.rank == 2 && l.stage == BWD)),
        "{:?}",
        f.windows[0].leads
    );
    let s = slow_of(&dir);
    assert_eq!(s.waits_from_reason, "none: no collective was recorded");
    assert!(s.slow_ranks.is_empty() && !s.found, "{:?}", s.slow_ranks);
    assert_eq!((s.leads[0].rank, s.leads[0].stage.as_str()), (2, BWD));
    assert_eq!(crate::report::ls::build(&Dirs::one(&dir)).unwrap().waits_from_reason, s.waits_from_reason);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Every host launched allreduce #41 (the host counts agree) and returned; rank 3's
/// device is stuck behind a backward kernel that never ends, so the others' devices spin
/// in #41 and every host waits in the loss's synchronization. Step 10 began `stuck_ms`
/// before the heartbeat; `flush_ms` is the door's buffer-read period its status gives;
/// `launch_stage` the stage index (in `STAGES`) the library saw the stuck kernel launched
/// in, `None` for a log written before launches carried it.
fn write_stuck_kernel_job(name: &str, stuck_ms: u64, flush_ms: Option<u32>, launch_stage: Option<usize>) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sf-device-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let wall_now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64;
    // The logs' clocks: T0 when they were created, 100 s ago; the heartbeat is now.
    let now = T0 + 100_000 * MS;
    let step_begin = |step: u64| now - stuck_ms * MS - 1_000 * MS + step * 100 * MS;
    for rank in 0..WORLD {
        let (mut w, ids) = rank_writer(&dir, rank, wall_now - 100_000 * MS);
        if let Some(flush_ms) = flush_ms {
            w.append(&RecordBody::CuptiStatus(CuptiStatus {
                t_ns: T0,
                state: CuptiState::Enabled,
                cupti_version: 130_401,
                cupti_result: 0,
                dropped_by_cupti: 0,
                pool_refusals: 0,
                buffers: 0,
                records: 0,
                skipped: 0,
                pool_buffers: 16,
                buffer_bytes: 1 << 20,
                correlation: false,
                flush_ms,
            }));
        }
        w.append(&RecordBody::CommCreated(CommCreated {
            t_ns: T0,
            comm_id: COMM,
            parent_id: 0,
            rank: rank as i32,
            nranks: WORLD as i32,
            global_rank: rank as i32,
            color: -1,
            key: 0,
            origin: CommOrigin::InitRank,
        }));
        for (id, name) in [(1, "sim_bwd_0"), (2, "ncclDevKernel_AllReduce_Sum_f32_RING_LL")] {
            w.append(&RecordBody::KernelName(KernelName::new(id, name.as_bytes())));
        }
        // Steps 0-9 done, four allreduces each; step 10's backward launched #41.
        for step in 0..10 {
            for k in 0..4 {
                let t = step_begin(step) + (35 + k * 5) * MS;
                w.append(&RecordBody::NcclCall(allreduce(COMM, step * 4 + k + 1, t, t + 20_000)));
            }
            w.append(&step_vector(step, step_begin(step), ids, [10.0, 20.0, 40.0, 10.0, 20.0]));
        }
        let launch_41 = step_begin(10) + 65 * MS;
        w.append(&RecordBody::NcclCall(allreduce(COMM, 41, launch_41, launch_41 + 20_000)));
        let oldest = if rank == 3 {
            let stage = launch_stage.map_or(0, |i| ids[i] + 1);
            Unfinished {
                name_id: 1,
                t_launch_ns: step_begin(10) + 35 * MS,
                stream: 1,
                comm_id: 0,
                seq: 0,
                op: None,
                stage,
            }
        } else {
            let op = Some(NcclOp::AllReduce);
            Unfinished { name_id: 2, t_launch_ns: launch_41, stream: 2, comm_id: COMM, seq: 41, op, stage: 0 }
        };
        let sync_since_ns = step_begin(10) + 75 * MS;
        // A log of today (the CUPTI period written) holds the collector's forced flushes,
        // one a second while a host waits on its device; an older one neither time.
        let waited_s = (now - sync_since_ns) / (1_000 * MS);
        let complete_ns = if waited_s == 0 { 0 } else { sync_since_ns + waited_s * 1_000 * MS };
        w.append(&RecordBody::DeviceState(DeviceState {
            t_ns: complete_ns.max(launch_41 + MS),
            launched: 500,
            completed: 480,
            oldest: Some(oldest),
            sync_since_ns,
            sync: Some(SyncKind::Stream),
            // Its last progress: the last launch, before every host blocked.
            changed_ns: flush_ms.map(|_| launch_41 + MS),
            complete_ns: flush_ms.map(|_| complete_ns),
        }));
        w.heartbeat(now, wall_now, 1e9);
    }
    dir
}

#[test]
fn a_stuck_compute_kernel_is_named_by_sf_hang_though_the_host_counts_agree() {
    let dir = write_stuck_kernel_job("hang", 10_000, Some(500), None);
    let report = crate::report::hang::build(&Dirs::one(&dir), &crate::report::hang::DEFAULT_HANG)
        .unwrap_or_else(|e| panic!("{e:?}"));
    assert_eq!(report.waits_from, WaitsFrom::Device);
    let stall = report.device_stall.as_ref().expect("the device names the culprit");
    assert_eq!((stall.rank, stall.kernel.as_deref(), stall.stage.as_deref()), (3, Some("sim_bwd_0"), Some(BWD)));
    assert_eq!((stall.comm_id, stall.comm_seq, stall.op), (COMM, 41, NcclOp::AllReduce));
    assert_eq!(stall.waiting_ranks, [0, 1, 2], "ranks in a host sync wait, they are not guilty");
    assert!((stall.unfinished_s - 10.065).abs() < 0.5, "{}", stall.unfinished_s);
    assert!(report.hung, "exit 3");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// CUPTI keeps back every buffer behind a kernel still running: until the collector forced
/// a flush (once a host has waited on its device for a second), an unfinished kernel may
/// long have ended unseen, and nothing is a stall yet (CI's false stall, early in a job on
/// a loaded host, was one). An older log, without the flush's time, is judged as before.
#[test]
fn a_state_younger_than_two_buffer_reads_is_not_a_stall_yet() {
    let dir = write_stuck_kernel_job("young", 700, Some(500), None);
    let report = crate::report::hang::build(&Dirs::one(&dir), &crate::report::hang::DEFAULT_HANG)
        .unwrap_or_else(|e| panic!("{e:?}"));
    assert!(report.device_stall.is_none(), "{:?}", report.device_stall);
    std::fs::remove_dir_all(&dir).unwrap();
    let dir = write_stuck_kernel_job("after-a-forced-flush", 1_200, Some(500), None);
    let report = crate::report::hang::build(&Dirs::one(&dir), &crate::report::hang::DEFAULT_HANG)
        .unwrap_or_else(|e| panic!("{e:?}"));
    assert_eq!(
        report.device_stall.map(|s| s.rank),
        Some(3),
        "complete as of the flush, a second into the wait: {:?}",
        report.threshold
    );
    std::fs::remove_dir_all(&dir).unwrap();
    let dir = write_stuck_kernel_job("young-old-log", 700, None, None);
    let report = crate::report::hang::build(&Dirs::one(&dir), &crate::report::hang::DEFAULT_HANG)
        .unwrap_or_else(|e| panic!("{e:?}"));
    assert_eq!(report.device_stall.as_ref().map(|s| s.rank), Some(3), "{:?}", report.threshold);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The library saw the stuck kernel launched in the forward stage (a launch at a stage
/// boundary, or a step whose stages ran shorter than the last complete one's): the stall
/// names that stage, not the one the offset into the step would guess (backward here).
#[test]
fn a_stuck_kernel_is_named_in_the_stage_its_launch_was_seen_in() {
    let dir = write_stuck_kernel_job("launch-stage", 10_000, Some(500), Some(1));
    let report = crate::report::hang::build(&Dirs::one(&dir), &crate::report::hang::DEFAULT_HANG)
        .unwrap_or_else(|e| panic!("{e:?}"));
    let stall = report.device_stall.as_ref().expect("the device names the culprit");
    assert_eq!((stall.rank, stall.stage.as_deref()), (3, Some(STAGES[1])));
    std::fs::remove_dir_all(&dir).unwrap();
}
