//! The CUPTI callbacks the CUDA door subscribes to, and what its callback does with one: a
//! kernel launch (at ENTER: its correlation id, host time, the NCCL call the thread is
//! inside, its stream and name) or the ENTER and EXIT of a host synchronization, each one
//! ring push. Only these few (domain, cbid) pairs are enabled, so the rest of the CUDA API
//! pays nothing. No allocation, no lock, no syscall beyond the clock (and `gettid` once per
//! thread); a full ring drops and counts.

use cudarc::cupti::sys::{
    CUpti_CallbackDomain, CUpti_driver_api_trace_cbid as Driver, CUpti_runtime_api_trace_cbid as Runtime,
};

use crate::core::live::event::{DeviceEvent, Event, Launch, SyncCall};
use crate::core::live::runtime;
use crate::core::log::format::live;
use crate::core::log::records::SyncKind;
use crate::core::record::clock::now_ticks;
use crate::core::record::thread_state;

/// What a traced callback is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Traced {
    Launch,
    Sync(SyncKind),
}

pub const RUNTIME_DOMAIN: u32 = CUpti_CallbackDomain::CUPTI_CB_DOMAIN_RUNTIME_API as u32;
pub const DRIVER_DOMAIN: u32 = CUpti_CallbackDomain::CUPTI_CB_DOMAIN_DRIVER_API as u32;

/// Runtime API callbacks traced (cudarc's `CUpti_runtime_api_trace_cbid`).
const RUNTIME: [(Runtime, Traced); 8] = [
    (Runtime::CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000, Traced::Launch),
    (Runtime::CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_ptsz_v7000, Traced::Launch),
    (Runtime::CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_v3020, Traced::Sync(SyncKind::Stream)),
    (Runtime::CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_ptsz_v7000, Traced::Sync(SyncKind::Stream)),
    (Runtime::CUPTI_RUNTIME_TRACE_CBID_cudaEventSynchronize_v3020, Traced::Sync(SyncKind::Event)),
    (Runtime::CUPTI_RUNTIME_TRACE_CBID_cudaDeviceSynchronize_v3020, Traced::Sync(SyncKind::Device)),
    (Runtime::CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy_v3020, Traced::Sync(SyncKind::Copy)),
    (Runtime::CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy_ptds_v7000, Traced::Sync(SyncKind::Copy)),
];

/// Driver API callbacks traced (cudarc's `CUpti_driver_api_trace_cbid`).
const DRIVER: [(Driver, Traced); 10] = [
    (Driver::CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, Traced::Launch),
    (Driver::CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz, Traced::Launch),
    (Driver::CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx, Traced::Launch),
    (Driver::CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz, Traced::Launch),
    (Driver::CUPTI_DRIVER_TRACE_CBID_cuStreamSynchronize, Traced::Sync(SyncKind::Stream)),
    (Driver::CUPTI_DRIVER_TRACE_CBID_cuStreamSynchronize_ptsz, Traced::Sync(SyncKind::Stream)),
    (Driver::CUPTI_DRIVER_TRACE_CBID_cuEventSynchronize, Traced::Sync(SyncKind::Event)),
    (Driver::CUPTI_DRIVER_TRACE_CBID_cuCtxSynchronize, Traced::Sync(SyncKind::Device)),
    (Driver::CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoH_v2, Traced::Sync(SyncKind::Copy)),
    (Driver::CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoH_v2_ptds, Traced::Sync(SyncKind::Copy)),
];

/// Every (domain, cbid) the door enables.
pub fn enabled() -> impl Iterator<Item = (CUpti_CallbackDomain, u32)> {
    let runtime = RUNTIME.iter().map(|(cbid, _)| (CUpti_CallbackDomain::CUPTI_CB_DOMAIN_RUNTIME_API, *cbid as u32));
    runtime.chain(DRIVER.iter().map(|(cbid, _)| (CUpti_CallbackDomain::CUPTI_CB_DOMAIN_DRIVER_API, *cbid as u32)))
}

/// What the callback for (domain, cbid) traces; `None` for one the door did not enable.
#[inline]
pub fn traced(domain: u32, cbid: u32) -> Option<Traced> {
    match domain {
        RUNTIME_DOMAIN => RUNTIME.iter().find(|(id, _)| *id as u32 == cbid).map(|(_, t)| *t),
        DRIVER_DOMAIN => DRIVER.iter().find(|(id, _)| *id as u32 == cbid).map(|(_, t)| *t),
        _ => None,
    }
}

/// One traced callback, its CUDA-side values already read by the door.
#[derive(Clone, Copy)]
pub struct ApiCall<'a> {
    pub exit: bool,
    pub correlation: u32,
    /// The launched kernel's name (at most `Launch::NAME_BYTES + 1` bytes read: more means
    /// it was cut), empty when CUPTI gave none.
    pub symbol: &'a [u8],
    pub stream_handle: u64,
}

/// The callback's work: one ring push for a launch's ENTER and for a synchronization's
/// ENTER and EXIT; nothing for the calls nested in a traced one. `false` when the ring
/// was full (the drop is counted) or nothing is recorded.
#[inline]
pub fn on_api(what: Traced, call: &ApiCall) -> bool {
    let Some(rt) = runtime::active() else { return false };
    let event = if call.exit {
        let Some(tid) = thread_state::cuda_api_exit() else { return false };
        match what {
            Traced::Launch => return false,
            Traced::Sync(sync) => {
                DeviceEvent::Sync(SyncCall { ticks: now_ticks(), correlation: call.correlation, tid, sync, exit: true })
            }
        }
    } else {
        let Some((nccl, tid)) = thread_state::cuda_api_enter() else { return false };
        match what {
            Traced::Launch => {
                let stage = rt.live(live::CURRENT_STAGE).load(std::sync::atomic::Ordering::Relaxed);
                DeviceEvent::Launch(launch(call, nccl, u16::try_from(stage).unwrap_or(0)))
            }
            Traced::Sync(sync) => DeviceEvent::Sync(SyncCall {
                ticks: now_ticks(),
                correlation: call.correlation,
                tid,
                sync,
                exit: false,
            }),
        }
    };
    rt.ring.push(Event::Device(event))
}

#[inline]
fn launch(call: &ApiCall, nccl: thread_state::NcclLink, stage: u16) -> Launch {
    let kept = call.symbol.len().min(Launch::NAME_BYTES);
    let mut name = [0u8; Launch::NAME_BYTES];
    name[..kept].copy_from_slice(&call.symbol[..kept]);
    Launch {
        ticks: now_ticks(),
        correlation: call.correlation,
        stream_handle: call.stream_handle,
        nccl,
        name_len: kept as u8,
        name_cut: call.symbol.len() > kept,
        name,
        stage,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_contract_callbacks_and_no_others() {
        assert_eq!(enabled().count(), 18);
        assert_eq!(traced(RUNTIME_DOMAIN, 211), Some(Traced::Launch), "cudaLaunchKernel_v7000");
        assert_eq!(traced(DRIVER_DOMAIN, 652), Some(Traced::Launch), "cuLaunchKernelEx");
        assert_eq!(traced(RUNTIME_DOMAIN, 131), Some(Traced::Sync(SyncKind::Stream)), "cudaStreamSynchronize");
        assert_eq!(traced(RUNTIME_DOMAIN, 31), Some(Traced::Sync(SyncKind::Copy)), "cudaMemcpy");
        assert_eq!(traced(DRIVER_DOMAIN, 17), Some(Traced::Sync(SyncKind::Device)), "cuCtxSynchronize");
        assert_eq!(traced(DRIVER_DOMAIN, 211), None, "a driver cbid with a runtime launch's number");
        assert_eq!(traced(3, 1), None, "the resource domain");
    }

    #[test]
    fn a_long_name_is_cut_and_says_so() {
        let long = [b'k'; Launch::NAME_BYTES + 1];
        let call = ApiCall { exit: false, correlation: 7, symbol: &long, stream_handle: 0x10 };
        let l = launch(&call, thread_state::NcclLink::NONE, 3);
        assert!(l.name_cut && l.name().len() == Launch::NAME_BYTES);
        let short = launch(&ApiCall { symbol: b"gemm", ..call }, thread_state::NcclLink::NONE, 0);
        assert!(!short.name_cut && short.name() == b"gemm" && short.correlation == 7 && short.stream_handle == 0x10);
    }
}
