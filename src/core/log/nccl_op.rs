//! What an intercepted NCCL call was, in the vocabulary of records and reports.

use serde::{Serialize, Serializer};

/// One NCCL API entry point. The discriminant is stored in records: append, never renumber.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u16)]
pub enum NcclOp {
    GetVersion = 1,
    GetUniqueId = 2,
    CommInitRank = 3,
    CommInitRankConfig = 4,
    CommInitAll = 5,
    CommSplit = 6,
    CommDestroy = 7,
    CommAbort = 8,
    CommCount = 9,
    CommUserRank = 10,
    CommCuDevice = 11,
    AllReduce = 16,
    Broadcast = 17,
    Bcast = 18,
    Reduce = 19,
    AllGather = 20,
    ReduceScatter = 21,
    AlltoAll = 22,
    Send = 23,
    Recv = 24,
    GroupStart = 32,
    GroupEnd = 33,
    // Entry points wrapped since NCCL 2.32 (issue 10): appended, never renumbered.
    CommInitRankScalable = 12,
    CommShrink = 13,
    CommGrow = 14,
    CommFinalize = 15,
    Gather = 25,
    Scatter = 26,
    AllReduceConfig = 27,
    BroadcastConfig = 28,
    ReduceConfig = 29,
    AllGatherConfig = 30,
    ReduceScatterConfig = 31,
    GroupSimulateEnd = 34,
    AlltoAllConfig = 35,
    GatherConfig = 36,
    ScatterConfig = 37,
    PutSignal = 38,
    Signal = 39,
    WaitSignal = 40,
    CommGetAsyncError = 41,
    CommRevoke = 42,
    CommSuspend = 43,
    CommResume = 44,
    CommRegister = 45,
    CommDeregister = 46,
    CommWindowRegister = 47,
    CommWindowDeregister = 48,
}

impl NcclOp {
    pub const ALL: [NcclOp; 48] = [
        NcclOp::GetVersion,
        NcclOp::GetUniqueId,
        NcclOp::CommInitRank,
        NcclOp::CommInitRankConfig,
        NcclOp::CommInitAll,
        NcclOp::CommSplit,
        NcclOp::CommDestroy,
        NcclOp::CommAbort,
        NcclOp::CommCount,
        NcclOp::CommUserRank,
        NcclOp::CommCuDevice,
        NcclOp::AllReduce,
        NcclOp::Broadcast,
        NcclOp::Bcast,
        NcclOp::Reduce,
        NcclOp::AllGather,
        NcclOp::ReduceScatter,
        NcclOp::AlltoAll,
        NcclOp::Send,
        NcclOp::Recv,
        NcclOp::GroupStart,
        NcclOp::GroupEnd,
        NcclOp::CommInitRankScalable,
        NcclOp::CommShrink,
        NcclOp::CommGrow,
        NcclOp::CommFinalize,
        NcclOp::Gather,
        NcclOp::Scatter,
        NcclOp::AllReduceConfig,
        NcclOp::BroadcastConfig,
        NcclOp::ReduceConfig,
        NcclOp::AllGatherConfig,
        NcclOp::ReduceScatterConfig,
        NcclOp::GroupSimulateEnd,
        NcclOp::AlltoAllConfig,
        NcclOp::GatherConfig,
        NcclOp::ScatterConfig,
        NcclOp::PutSignal,
        NcclOp::Signal,
        NcclOp::WaitSignal,
        NcclOp::CommGetAsyncError,
        NcclOp::CommRevoke,
        NcclOp::CommSuspend,
        NcclOp::CommResume,
        NcclOp::CommRegister,
        NcclOp::CommDeregister,
        NcclOp::CommWindowRegister,
        NcclOp::CommWindowDeregister,
    ];

    pub fn from_u16(raw: u16) -> Option<NcclOp> {
        NcclOp::ALL.iter().copied().find(|op| *op as u16 == raw)
    }

    /// Collectives share one per-communicator sequence: every rank issues them in the same
    /// order, so equal sequence numbers name the same collective on every rank.
    pub fn is_collective(self) -> bool {
        matches!(
            self,
            NcclOp::AllReduce
                | NcclOp::Broadcast
                | NcclOp::Bcast
                | NcclOp::Reduce
                | NcclOp::AllGather
                | NcclOp::ReduceScatter
                | NcclOp::AlltoAll
                | NcclOp::Gather
                | NcclOp::Scatter
                | NcclOp::AllReduceConfig
                | NcclOp::BroadcastConfig
                | NcclOp::ReduceConfig
                | NcclOp::AllGatherConfig
                | NcclOp::ReduceScatterConfig
                | NcclOp::AlltoAllConfig
                | NcclOp::GatherConfig
                | NcclOp::ScatterConfig
        )
    }

    /// Point-to-point calls have their own per-communicator sequence, because the two sides
    /// of a transfer issue different calls. The one-sided signal calls of 2.29 are
    /// point-to-point too: one side puts or signals, the other waits.
    pub fn is_p2p(self) -> bool {
        matches!(self, NcclOp::Send | NcclOp::Recv | NcclOp::PutSignal | NcclOp::Signal | NcclOp::WaitSignal)
    }

    /// Closes the calling thread's innermost group, as `ncclGroupEndInternal` does for
    /// both entry points (NCCL's src/group.cc).
    pub fn ends_group(self) -> bool {
        matches!(self, NcclOp::GroupEnd | NcclOp::GroupSimulateEnd)
    }

    /// The entry point with a trailing `ncclCollConfig_t*` records as its plain
    /// collective does; this names that collective.
    pub fn plain(self) -> NcclOp {
        match self {
            NcclOp::AllReduceConfig => NcclOp::AllReduce,
            NcclOp::BroadcastConfig => NcclOp::Broadcast,
            NcclOp::ReduceConfig => NcclOp::Reduce,
            NcclOp::AllGatherConfig => NcclOp::AllGather,
            NcclOp::ReduceScatterConfig => NcclOp::ReduceScatter,
            NcclOp::AlltoAllConfig => NcclOp::AlltoAll,
            NcclOp::GatherConfig => NcclOp::Gather,
            NcclOp::ScatterConfig => NcclOp::Scatter,
            other => other,
        }
    }

    /// The name operators type (`SF_INJECT`'s `op=`, report columns).
    pub fn name(self) -> &'static str {
        match self {
            NcclOp::GetVersion => "get_version",
            NcclOp::GetUniqueId => "get_unique_id",
            NcclOp::CommInitRank => "comm_init_rank",
            NcclOp::CommInitRankConfig => "comm_init_rank_config",
            NcclOp::CommInitAll => "comm_init_all",
            NcclOp::CommSplit => "comm_split",
            NcclOp::CommDestroy => "comm_destroy",
            NcclOp::CommAbort => "comm_abort",
            NcclOp::CommCount => "comm_count",
            NcclOp::CommUserRank => "comm_user_rank",
            NcclOp::CommCuDevice => "comm_cu_device",
            NcclOp::AllReduce => "allreduce",
            NcclOp::Broadcast => "broadcast",
            NcclOp::Bcast => "bcast",
            NcclOp::Reduce => "reduce",
            NcclOp::AllGather => "allgather",
            NcclOp::ReduceScatter => "reducescatter",
            NcclOp::AlltoAll => "alltoall",
            NcclOp::Send => "send",
            NcclOp::Recv => "recv",
            NcclOp::GroupStart => "group_start",
            NcclOp::GroupEnd => "group_end",
            NcclOp::CommInitRankScalable => "comm_init_rank_scalable",
            NcclOp::CommShrink => "comm_shrink",
            NcclOp::CommGrow => "comm_grow",
            NcclOp::CommFinalize => "comm_finalize",
            NcclOp::Gather => "gather",
            NcclOp::Scatter => "scatter",
            NcclOp::AllReduceConfig => "allreduce_config",
            NcclOp::BroadcastConfig => "broadcast_config",
            NcclOp::ReduceConfig => "reduce_config",
            NcclOp::AllGatherConfig => "allgather_config",
            NcclOp::ReduceScatterConfig => "reducescatter_config",
            NcclOp::GroupSimulateEnd => "group_simulate_end",
            NcclOp::AlltoAllConfig => "alltoall_config",
            NcclOp::GatherConfig => "gather_config",
            NcclOp::ScatterConfig => "scatter_config",
            NcclOp::PutSignal => "put_signal",
            NcclOp::Signal => "signal",
            NcclOp::WaitSignal => "wait_signal",
            NcclOp::CommGetAsyncError => "comm_get_async_error",
            NcclOp::CommRevoke => "comm_revoke",
            NcclOp::CommSuspend => "comm_suspend",
            NcclOp::CommResume => "comm_resume",
            NcclOp::CommRegister => "comm_register",
            NcclOp::CommDeregister => "comm_deregister",
            NcclOp::CommWindowRegister => "comm_window_register",
            NcclOp::CommWindowDeregister => "comm_window_deregister",
        }
    }
}

impl Serialize for NcclOp {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

/// Size in bytes of an `ncclDataType_t`, 0 for a value this version does not know.
pub fn dtype_size(dtype: i32) -> u64 {
    match dtype {
        0 | 1 | 10 | 11 => 1,
        6 | 9 => 2,
        2 | 3 | 7 => 4,
        4 | 5 | 8 => 8,
        _ => 0,
    }
}

pub fn dtype_name(dtype: i32) -> &'static str {
    match dtype {
        0 => "int8",
        1 => "uint8",
        2 => "int32",
        3 => "uint32",
        4 => "int64",
        5 => "uint64",
        6 => "float16",
        7 => "float32",
        8 => "float64",
        9 => "bfloat16",
        10 => "float8e4m3",
        11 => "float8e5m2",
        _ => "unknown",
    }
}

pub fn redop_name(redop: i32) -> &'static str {
    match redop {
        0 => "sum",
        1 => "prod",
        2 => "max",
        3 => "min",
        4 => "avg",
        r if r >= 5 => "custom",
        _ => "none",
    }
}

/// `ncclResult_t` names, for reports: every code nccl.h 2.32 declares (`ncclTimeout`
/// arrived in 2.30.3).
pub fn result_name(result: i32) -> &'static str {
    match result {
        0 => "ncclSuccess",
        1 => "ncclUnhandledCudaError",
        2 => "ncclSystemError",
        3 => "ncclInternalError",
        4 => "ncclInvalidArgument",
        5 => "ncclInvalidUsage",
        6 => "ncclRemoteError",
        7 => "ncclInProgress",
        8 => "ncclTimeout",
        _ => "unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_op_round_trips_through_its_code() {
        for op in NcclOp::ALL {
            assert_eq!(NcclOp::from_u16(op as u16), Some(op));
        }
        assert_eq!(NcclOp::from_u16(999), None);
    }

    #[test]
    fn sequences_split_collectives_from_p2p() {
        let colls = NcclOp::ALL.iter().filter(|op| op.is_collective()).count();
        let p2p = NcclOp::ALL.iter().filter(|op| op.is_p2p()).count();
        assert_eq!((colls, p2p), (17, 5));
        assert!(!NcclOp::GroupEnd.is_collective() && !NcclOp::GroupEnd.is_p2p());
        assert!(NcclOp::GroupSimulateEnd.ends_group() && !NcclOp::GroupStart.ends_group());
        assert_eq!(NcclOp::ScatterConfig.plain(), NcclOp::Scatter);
    }

    #[test]
    fn discriminants_and_names_are_unique() {
        let codes: std::collections::BTreeSet<u16> = NcclOp::ALL.iter().map(|op| *op as u16).collect();
        let names: std::collections::BTreeSet<&str> = NcclOp::ALL.iter().map(|op| op.name()).collect();
        assert_eq!((codes.len(), names.len()), (NcclOp::ALL.len(), NcclOp::ALL.len()));
    }

    #[test]
    fn every_result_code_of_nccl_2_32_has_its_name() {
        let names: Vec<&str> = (0..=8).map(result_name).collect();
        assert_eq!(names[8], "ncclTimeout");
        assert!(names.iter().all(|n| n.starts_with("nccl")), "{names:?}");
        assert_eq!(result_name(9), "unknown", "ncclNumResults is a count, not a result");
    }

    #[test]
    fn dtype_sizes_follow_nccl_h() {
        assert_eq!(dtype_size(7), 4);
        assert_eq!(dtype_size(9), 2);
        assert_eq!(dtype_size(8), 8);
        assert_eq!(dtype_size(42), 0);
    }
}
