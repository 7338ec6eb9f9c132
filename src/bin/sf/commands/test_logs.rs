//! Rank logs written by the real writer, for the commands' unit tests.

use std::path::PathBuf;

use stagefrontier::core::capture::clock::select;
use stagefrontier::core::capture::identity::Identity;
use stagefrontier::core::comms::nccl_op::NcclOp;
use stagefrontier::core::log::records::{NcclCall, RecordBody};
use stagefrontier::core::log::writer::{HeaderInfo, LogWriter};

/// Allreduce number `seq` on communicator 0x77, 1 us after the one before.
pub fn call(seq: u64) -> RecordBody {
    RecordBody::NcclCall(NcclCall {
        op: NcclOp::AllReduce,
        t_enter_ns: 1_000_000 + seq * 1_000,
        t_exit_ns: 1_000_000 + seq * 1_000 + 500,
        comm_id: 0x77,
        seq,
        count: 1,
        bytes: 4,
        stream: 0,
        tid: 1,
        peer: -1,
        dtype: 7,
        redop: 0,
        result: 0,
        group_depth: 0,
    })
}

/// A fresh log of rank 0 of job `j`, of `slots` event slots, in a directory of its own.
pub fn new_log(name: &str, slots: u32) -> (PathBuf, LogWriter) {
    let dir = std::env::temp_dir().join(format!("sf-test-log-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("rank-00000.sflog");
    let identity = Identity { global_rank: 0, world_size: 1, local_rank: 0, job_id: "j".into(), source: "torchrun" };
    let calibration = select(false);
    let info = HeaderInfo {
        identity: &identity,
        pid: 1,
        host: "h",
        calibration: &calibration,
        slot_count: slots,
        ring_capacity: 64,
    };
    let writer = LogWriter::create(&path, &info).unwrap();
    (path, writer)
}
