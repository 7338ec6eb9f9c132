//! Rank logs written by the real writer, for the commands' unit tests.

use std::path::PathBuf;

use crate::core::log::identity::Identity;
use crate::core::log::records::RecordBody;
use crate::core::log::synth::allreduce;
use crate::core::log::writer::{HeaderInfo, LogWriter};
use crate::core::record::clock::select;

/// Allreduce number `seq` on communicator 0x77, 1 us after the one before.
pub fn call(seq: u64) -> RecordBody {
    let t_enter_ns = 1_000_000 + seq * 1_000;
    RecordBody::NcclCall(allreduce(0x77, seq, t_enter_ns, t_enter_ns + 500))
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
