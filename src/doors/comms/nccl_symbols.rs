//! Every NCCL entry point the door forwards to, resolved together (`RealSymbols`): at
//! load when NCCL is already loaded, else by the first hook.

use std::ffi::CStr;

use crate::doors::real_symbol::RealSymbols;

const fn symbol(name: &'static str) -> &'static CStr {
    match CStr::from_bytes_with_nul(name.as_bytes()) {
        Ok(name) => name,
        Err(_) => panic!("symbol name"),
    }
}

macro_rules! entry_points {
    ($($name:ident),* $(,)?) => {
        /// An entry point's index in `NCCL`, named as NCCL names it.
        #[allow(non_camel_case_types, clippy::enum_variant_names)]
        #[derive(Clone, Copy)]
        pub enum EntryPoint { $($name),* }

        /// Each entry point's name and NCCL's `p`-prefixed alias, NUL-terminated at
        /// compile time: the lookup pass builds no string.
        const NAMES: &[(&CStr, &CStr); [$(stringify!($name)),*].len()] =
            &[$((symbol(concat!(stringify!($name), "\0")), symbol(concat!("p", stringify!($name), "\0")))),*];
    };
}

entry_points! {
    ncclGetVersion, ncclGetUniqueId, ncclCommDestroy, ncclCommAbort, ncclCommCount, ncclCommUserRank,
    ncclCommCuDevice, ncclAllReduce, ncclBroadcast, ncclBcast, ncclReduce, ncclAllGather, ncclReduceScatter,
    ncclAlltoAll, ncclSend, ncclRecv, ncclGroupStart, ncclGroupEnd, ncclGroupSimulateEnd, ncclGather,
    ncclScatter, ncclAllReduceConfig, ncclBroadcastConfig, ncclReduceConfig, ncclAllGatherConfig,
    ncclReduceScatterConfig, ncclAlltoAllConfig, ncclGatherConfig, ncclScatterConfig, ncclPutSignal, ncclSignal,
    ncclWaitSignal, ncclCommFinalize, ncclCommGetAsyncError, ncclCommRevoke, ncclCommSuspend, ncclCommResume,
    ncclCommRegister, ncclCommDeregister, ncclCommWindowRegister, ncclCommWindowDeregister, ncclCommInitRank,
    ncclCommInitRankConfig, ncclCommInitAll, ncclCommSplit, ncclCommInitRankScalable, ncclCommShrink,
    ncclCommGrow,
}

pub static NCCL: RealSymbols<{ NAMES.len() }> = RealSymbols::new(NAMES);

/// Runs when the library is loaded: resolves NCCL if it is already there (the program
/// links it), so that no hook ever looks anything up.
extern "C" fn resolve_at_load() {
    let _ = std::panic::catch_unwind(|| NCCL.resolve_all(EntryPoint::ncclGetVersion as usize));
}

#[used]
#[link_section = ".init_array"]
static RESOLVE_AT_LOAD: extern "C" fn() = resolve_at_load;
