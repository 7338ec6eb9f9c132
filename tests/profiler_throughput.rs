//! The profiler door under proxy-step volume: every event NCCL (fakenccl) starts is either
//! recorded or counted as dropped, and at this rate none is dropped. Prints the events per
//! second each rank's door sustained (a lower bound: the job also waits for its peers).

mod common;

use std::time::Instant;

use common::*;
use stagefrontier::core::log::records::{Drops, ProfProxy, RecordBody};

const RANKS: u32 = 2;
const STEPS: u32 = 100;
/// Proxy steps per proxy operation: 64 per channel and direction, 8 in flight at a time.
const PROXY_STEPS: usize = 64;
const CHANNELS: usize = 2;

#[test]
fn proxy_step_volume_is_recorded_without_loss_and_losses_would_be_counted() {
    let root = log_root("throughput");
    let mut cmd = preloaded(&trainer_sim(), &root, "job");
    cmd.args(trainer_args(RANKS, STEPS))
        .arg("--p2p")
        .env("NCCL_PROFILER_PLUGIN", library())
        .env("FAKENCCL_PROFILER_VERSION", "7")
        .env("FAKENCCL_PROFILER_STEPS", PROXY_STEPS.to_string())
        .env("SF_LOG_RECORDS", "1048576");
    let started = Instant::now();
    run_ok(&mut cmd);
    let wall = started.elapsed().as_secs_f64();
    for path in rank_logs(&root, "job") {
        let (mut calls, mut apis, mut colls, mut p2ps, mut ops, mut steps) =
            (0usize, 0usize, 0usize, 0usize, 0usize, 0usize);
        let mut drops: Option<Drops> = None;
        for body in bodies(&path) {
            match body {
                RecordBody::NcclCall(c) if c.op.is_collective() || c.op.is_p2p() => calls += 1,
                RecordBody::ProfOp(p) if p.api => apis += 1,
                RecordBody::ProfOp(p) if p.p2p => p2ps += 1,
                RecordBody::ProfOp(_) => colls += 1,
                RecordBody::ProfProxy(p) if p.unit == ProfProxy::OP => ops += 1,
                RecordBody::ProfProxy(p) if p.unit == ProfProxy::STEP => steps += 1,
                RecordBody::Drops(d) => drops = Some(d),
                _ => {}
            }
        }
        let events = apis + colls + p2ps + ops + steps;
        assert_eq!(drops, None, "nothing dropped, so no drops record: {drops:?}");
        // At v7 (NCCL >= 2.29.2) a Broadcast is an AllGatherV task with no task event: every
        // call has its API record, every other call its task record.
        assert_eq!(apis, calls, "every NCCL call has its API record");
        assert!(colls + p2ps < calls && colls + p2ps >= calls / 2, "{colls} + {p2ps} tasks of {calls} calls");
        assert_eq!(ops, CHANNELS * (2 * colls + p2ps), "every proxy operation");
        assert_eq!(steps, PROXY_STEPS * ops, "every proxy step");
        println!(
            "{}: {events} profiler events in {wall:.2} s: {:.0} events/s sustained without loss",
            path.file_name().unwrap().to_string_lossy(),
            events as f64 / wall
        );
        assert!(events > 10_000, "{events}");
    }
    let _ = std::fs::remove_dir_all(&root);
}
