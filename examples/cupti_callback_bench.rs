//! What the CUDA door's CUPTI callback costs per kernel launch and per host
//! synchronization: the door's `api_callback` called as CUPTI calls it (ENTER, then EXIT,
//! with a `CUpti_CallbackData`), recording into a live runtime whose collector drains the
//! ring, against an empty callback through the same function pointer.
//!
//!     cargo run --release --example cupti_callback_bench [-- BATCHES]
//!
//! Times BATCHES (default 2,000) batches of 1,000 launches or synchronizations, alternating
//! the three, and prints each one's median ns per operation (ENTER + EXIT) and the events
//! the ring dropped (0, or the figures count drops, not pushes).

use std::ffi::c_void;
use std::hint::black_box;
use std::ptr::null_mut;
use std::time::{Duration, Instant};

use cudarc::cupti::sys::{CUpti_ApiCallbackSite, CUpti_CallbackData};
use stagefrontier::core::kernels::cupti::callbacks::RUNTIME_DOMAIN;
use stagefrontier::core::live::runtime;
use stagefrontier::doors::kernels::cuda::api_callback;

type Callback = unsafe extern "C" fn(*mut c_void, u32, u32, *const c_void);

unsafe extern "C" fn empty_callback(_: *mut c_void, _: u32, _: u32, data: *const c_void) {
    black_box(data);
}

const BATCH: u32 = 1000;
/// `CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000` and `cudaStreamSynchronize_v3020`.
const LAUNCH: u32 = 211;
const SYNC: u32 = 131;

/// Nanoseconds per operation of one batch: `BATCH` ENTER/EXIT pairs of `cbid`.
fn batch(callback: Callback, cbid: u32, data: &mut CUpti_CallbackData) -> f64 {
    let start = Instant::now();
    for i in 0..BATCH {
        data.correlationId = i;
        data.callbackSite = CUpti_ApiCallbackSite::CUPTI_API_ENTER;
        // SAFETY: a callback data block valid for the call, as CUPTI passes one.
        unsafe { callback(null_mut(), RUNTIME_DOMAIN, cbid, black_box(&*data as *const _ as *const c_void)) };
        data.callbackSite = CUpti_ApiCallbackSite::CUPTI_API_EXIT;
        // SAFETY: as above.
        unsafe { callback(null_mut(), RUNTIME_DOMAIN, cbid, black_box(&*data as *const _ as *const c_void)) };
    }
    start.elapsed().as_nanos() as f64 / BATCH as f64
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let batches: usize = std::env::args().nth(1).map_or(2000, |a| a.parse().expect("BATCHES"));
    let dir = std::env::temp_dir().join(format!("sf-cupti-bench-{}", std::process::id()));
    // The runtime reads its settings at its first use, below; nothing else runs yet.
    for (key, value) in [("RANK", "0"), ("WORLD_SIZE", "1"), ("SF_QUIET", "1"), ("SF_HEARTBEAT_MS", "1")] {
        std::env::set_var(key, value);
    }
    std::env::set_var("SF_LOG_DIR", &dir);
    let rt = runtime::active().expect("the runtime starts");
    let name = c"ncclDevKernel_AllReduce_Sum_f32_RING_LL";
    // SAFETY: all-zero is a valid CUpti_CallbackData (null pointers, site ENTER).
    let mut data: CUpti_CallbackData = unsafe { std::mem::zeroed() };
    data.symbolName = name.as_ptr();
    data.functionName = c"cudaLaunchKernel".as_ptr();
    let door: Callback = api_callback;
    let (mut empty, mut launches, mut syncs) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..batches + 50 {
        let times =
            (batch(empty_callback, LAUNCH, &mut data), batch(door, LAUNCH, &mut data), batch(door, SYNC, &mut data));
        // The collector drains every millisecond: the next batch finds the ring empty.
        std::thread::sleep(Duration::from_millis(3));
        if round >= 50 {
            empty.push(times.0);
            launches.push(times.1);
            syncs.push(times.2);
        }
    }
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "cupti callback, median of {batches} batches of {BATCH}: launch {:.1} ns, sync {:.1} ns (ENTER + EXIT each), empty callback {:.1} ns; ring dropped {} (load average {})",
        median(launches),
        median(syncs),
        median(empty),
        rt.ring.dropped(),
        load.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
    );
    let _ = std::fs::remove_dir_all(&dir);
}
