//! The one shape every recording door has: take the reentrancy guard, record the entry,
//! forward, record the return, and hand back exactly what the real library returned.
//! A panic in recording is caught here, turns recording off, and never crosses into C.

use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::core::comms::tracer::{self, CallArgs};
use crate::core::live::runtime;
use crate::core::log::records::NcclCall;
use crate::core::record::thread_state::ReentrancyGuard;

use super::comms::nccl_abi::NcclResult;

/// Runs `forward` (the real call) inside the recording. `after` sees the result of a
/// recorded call only; nested calls (NCCL calling its own API) are forwarded untouched.
#[inline(always)]
pub fn traced(args: CallArgs, forward: impl FnOnce() -> NcclResult, after: impl FnOnce(NcclResult)) -> NcclResult {
    let Some(guard) = ReentrancyGuard::enter() else {
        return forward();
    };
    let pending = shielded(|| tracer::begin(&args, &guard)).flatten();
    let early = begin_early(&pending, &args, &guard);
    let result = match pending.as_ref().and_then(|p| p.forced_result()) {
        Some(injected_failure) => injected_failure,
        None => forward(),
    };
    if let Some(pending) = pending {
        shielded(|| {
            tracer::end(pending, result);
            after(result);
        });
    } else if let Some(call) = early {
        shielded(|| {
            tracer::end_while_starting(call, result);
            after(result);
        });
    }
    result
}

/// A call the runtime did not record (`recorded` is None) while another thread starts it:
/// timed for the start-up queue. Every door that records a call asks this after `begin`.
#[inline(always)]
pub fn begin_early<T>(recorded: &Option<T>, args: &CallArgs, guard: &ReentrancyGuard) -> Option<NcclCall> {
    if recorded.is_none() && runtime::is_starting() {
        begin_while_starting(args, guard)
    } else {
        None
    }
}

/// A call made while another thread starts the runtime, timed for the start-up queue
/// (`tracer::begin_while_starting`). Out of line: the recording path pays nothing for it.
#[cold]
#[inline(never)]
fn begin_while_starting(args: &CallArgs, guard: &ReentrancyGuard) -> Option<NcclCall> {
    shielded(|| tracer::begin_while_starting(args, guard)).flatten()
}

/// Runs recording code that must never unwind into the caller.
#[inline(always)]
pub fn shielded<R>(record: impl FnOnce() -> R) -> Option<R> {
    match catch_unwind(AssertUnwindSafe(record)) {
        Ok(value) => Some(value),
        Err(_) => {
            runtime::disable("internal error in a hook");
            None
        }
    }
}
