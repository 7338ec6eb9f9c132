//! What NCCL's KernelCh events cost in the profiler door (what `sf run` turns on with
//! SF_PROFILER_KERNEL_CH=1): the door's `ncclProfiler_v5` table called as NCCL's proxy
//! thread calls it for one channel of a collective's kernel (startEvent with the task as
//! parent, recordEventState KernelChStop, stopEvent), into a live runtime whose collector
//! drains the ring, against empty functions through the same pointers.
//!
//!     cargo run --release --example kernel_ch_bench [-- BATCHES]
//!
//! Times BATCHES (default 2,000) batches of 1,000 channel events and prints the median ns
//! per event (start + record + stop) and the events the ring dropped. The descriptors are
//! NCCL's v5 layout (`profiler_v5.h`): type, parent, rank, then the union at offset 24.

use std::ffi::{c_char, c_int, c_void};
use std::hint::black_box;
use std::ptr::{null, null_mut};
use std::time::{Duration, Instant};

use stagefrontier::core::live::runtime;
use stagefrontier::core::net::profiler::{state, ty};
use stagefrontier::doors::net::profiler::ncclProfiler_v5;

/// `ncclProfilerEventDescr_v5_t`'s collective member (v4's fields, then the parent group).
#[repr(C)]
struct Coll {
    seq: u64,
    func: *const c_char,
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    root: c_int,
    datatype: *const c_char,
    n_channels: u8,
    n_warps: u8,
    algo: *const c_char,
    proto: *const c_char,
    parent_group: *mut c_void,
}

/// The KernelCh member: the channel and the GPU timer at its start.
#[repr(C)]
#[derive(Clone, Copy)]
struct KernelCh {
    channel: u8,
    p_timer: u64,
}

#[repr(C)]
union Member {
    coll: std::mem::ManuallyDrop<Coll>,
    kernel_ch: KernelCh,
}

#[repr(C)]
struct Descr {
    ty: u64,
    parent: *mut c_void,
    rank: c_int,
    member: Member,
}

type Start = unsafe extern "C" fn(*mut c_void, *mut *mut c_void, *mut c_void) -> c_int;
type Stop = unsafe extern "C" fn(*mut c_void) -> c_int;
type Record = unsafe extern "C" fn(*mut c_void, c_int, *mut c_void) -> c_int;

unsafe extern "C" fn empty_start(_: *mut c_void, handle: *mut *mut c_void, descr: *mut c_void) -> c_int {
    black_box((handle, descr));
    0
}
unsafe extern "C" fn empty_stop(handle: *mut c_void) -> c_int {
    black_box(handle);
    0
}
unsafe extern "C" fn empty_record(handle: *mut c_void, state: c_int, args: *mut c_void) -> c_int {
    black_box((handle, state, args));
    0
}

const BATCH: u32 = 1000;

/// Nanoseconds per channel event of one batch of `BATCH`.
fn batch(context: *mut c_void, task: *mut c_void, (start, stop, record): (Start, Stop, Record)) -> f64 {
    let mut descr = Descr {
        ty: ty::KERNEL_CH,
        parent: task,
        rank: 0,
        member: Member { kernel_ch: KernelCh { channel: 0, p_timer: 0 } },
    };
    let began = Instant::now();
    for i in 0..BATCH {
        descr.member.kernel_ch = KernelCh { channel: (i % 4) as u8, p_timer: u64::from(i) };
        let mut handle = null_mut();
        let mut timer = u64::from(i) + 1;
        // SAFETY: a descriptor and state argument valid for the calls, as NCCL passes them.
        unsafe {
            start(context, &mut handle, black_box(&mut descr as *mut Descr as *mut c_void));
            record(handle, state::KERNEL_CH_STOP, &mut timer as *mut u64 as *mut c_void);
            stop(handle);
        }
    }
    began.elapsed().as_nanos() as f64 / f64::from(BATCH)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let batches: usize = std::env::args().nth(1).map_or(2000, |a| a.parse().expect("BATCHES"));
    let dir = std::env::temp_dir().join(format!("sf-kernel-ch-bench-{}", std::process::id()));
    // The runtime reads its settings at its first use, below; nothing else runs yet.
    for (key, value) in [
        ("RANK", "0"),
        ("WORLD_SIZE", "1"),
        ("SF_QUIET", "1"),
        ("SF_HEARTBEAT_MS", "1"),
        ("SF_PROFILER_KERNEL_CH", "1"),
    ] {
        std::env::set_var(key, value);
    }
    std::env::set_var("SF_LOG_DIR", &dir);
    let rt = runtime::active().expect("the runtime starts");
    let plugin = &ncclProfiler_v5;
    let (mut context, mut mask) = (null_mut(), 0);
    // SAFETY: NCCL's init arguments: out-pointers, a communicator id and name, one rank.
    let ok = unsafe { (plugin.init)(&mut context, 0x5eed, &mut mask, c"bench".as_ptr(), 1, 1, 0, null_mut()) };
    assert_eq!(ok, 0, "init");
    assert_ne!(mask as u64 & ty::KERNEL_CH, 0, "the door asks for KernelCh events");
    let mut coll = Descr {
        ty: ty::COLL,
        parent: null_mut(),
        rank: 0,
        member: Member {
            coll: std::mem::ManuallyDrop::new(Coll {
                seq: 1,
                func: c"AllReduce".as_ptr(),
                send: null(),
                recv: null_mut(),
                count: 4096,
                root: 0,
                datatype: c"ncclFloat32".as_ptr(),
                n_channels: 4,
                n_warps: 16,
                algo: c"RING".as_ptr(),
                proto: c"SIMPLE".as_ptr(),
                parent_group: null_mut(),
            }),
        },
    };
    let mut task = null_mut();
    // SAFETY: a collective's descriptor, as NCCL starts a task's.
    unsafe { (plugin.start)(context, &mut task, &mut coll as *mut Descr as *mut c_void) };
    let door: (Start, Stop, Record) = (plugin.start, plugin.stop, plugin.record);
    let empty: (Start, Stop, Record) = (empty_start, empty_stop, empty_record);
    let (mut events, mut baseline) = (Vec::new(), Vec::new());
    for round in 0..batches + 50 {
        let times = (batch(context, task, empty), batch(context, task, door));
        // The collector drains every millisecond: the next batch finds the ring empty.
        std::thread::sleep(Duration::from_millis(3));
        if round >= 50 {
            baseline.push(times.0);
            events.push(times.1);
        }
    }
    // SAFETY: the task and the context this run started.
    unsafe {
        (plugin.stop)(task);
        (plugin.finalize)(context);
    }
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "KernelCh through the profiler door, median of {batches} batches of {BATCH}: {:.1} ns per channel event \
         (start + record + stop), empty functions {:.1} ns; ring dropped {} (load average {})",
        median(events),
        median(baseline),
        rt.ring.dropped(),
        load.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
    );
    let _ = std::fs::remove_dir_all(&dir);
}
