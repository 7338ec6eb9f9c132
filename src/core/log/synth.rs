//! Synthetic rank logs of a whole job, written through the real writer: what `sf`'s scale
//! benchmark (`scripts/bench-scale`, via `examples/synth_logs.rs`) and tests that need
//! many ranks read, without starting that many processes.
//!
//! Every rank of the job runs the same steps from the same start: five stages (the stages
//! sf-trainer-sim marks), `calls_per_step` allreduces on one communicator in the backward
//! stage, deterministic jitter, and optionally one rank that stalls in data so the others
//! wait in backward. A collective returns on every rank when its last rank entered it.

use std::io;
use std::path::{Path, PathBuf};

use super::format::{live, WriterState};
use super::records::{CommCreated, CommOrigin, NcclCall, RecordBody, StepVector, STAGES_PER_PART};
use super::writer::{HeaderInfo, LogWriter};
use crate::core::log::identity::Identity;
use crate::core::log::nccl_op::NcclOp;
use crate::core::log::stage_names::StageNames;
use crate::core::record::clock::{Calibration, ClockSource};

/// The stages of each step, and their nominal durations in microseconds.
pub const STAGES: [(&str, u64); 5] = [
    ("data.next_wait", 2_000),
    ("model.fwd_loss_cpu_wall", 6_000),
    ("model.backward_cpu_wall", 8_000),
    ("callbacks.cpu_wall", 1_000),
    ("optim.step_cpu_wall", 2_000),
];
/// The stage the allreduces are in.
const BACKWARD: usize = 2;
/// Every stage varies by up to this much, per rank and step.
const JITTER_US: u64 = 200;
/// The communicator every rank's calls are on.
pub const COMM_ID: u64 = 0x5eed_0000_0000_0001;
/// Where the job's monotonic clock starts, and its wall clock (2026-11-23T00:00:00Z).
const BASE_MONO_NS: u64 = 1_000_000_000_000;
const BASE_WALL_NS: u64 = 1_795_392_000_000_000_000;

/// The allreduce a synthetic rank issues: number `seq` on `comm_id`, 4 MiB of float32,
/// from its one training thread (also what tests and benchmarks that need a plain call use).
pub fn allreduce(comm_id: u64, seq: u64, t_enter_ns: u64, t_exit_ns: u64) -> NcclCall {
    NcclCall {
        op: NcclOp::AllReduce,
        t_enter_ns,
        t_exit_ns,
        comm_id,
        seq,
        count: 1 << 20,
        bytes: 4 << 20,
        stream: 0x7f00_0000_1000,
        tid: 4242,
        peer: -1,
        dtype: 7,
        redop: 0,
        result: 0,
        group_depth: 0,
    }
}

/// A job to write.
#[derive(Clone, Debug)]
pub struct SynthJob {
    pub job_id: String,
    pub world: u32,
    /// Ranks per host: rank r is on host `node<r / ranks_per_host>`.
    pub ranks_per_host: u32,
    pub steps: u64,
    pub calls_per_step: u32,
    /// Event ring slots per rank (`SF_LOG_RECORDS`).
    pub slot_count: u32,
    /// A rank that stalls `stall_us` in data from step `steps / 2` on.
    pub slow_rank: Option<u32>,
    pub stall_us: u64,
}

impl SynthJob {
    /// The rank's log file name, as the library names it.
    pub fn file_name(rank: u32) -> String {
        format!("rank-{rank:05}.sflog")
    }

    /// Writes the logs of ranks `ranks` into `dir` (created if missing); their paths.
    pub fn write(&self, dir: &Path, ranks: std::ops::Range<u32>) -> io::Result<Vec<PathBuf>> {
        std::fs::create_dir_all(dir)?;
        ranks.map(|rank| self.write_rank(dir, rank)).collect()
    }

    fn write_rank(&self, dir: &Path, rank: u32) -> io::Result<PathBuf> {
        let path = dir.join(Self::file_name(rank));
        let _ = std::fs::remove_file(&path);
        let per_host = self.ranks_per_host.max(1);
        let identity = Identity {
            global_rank: rank as i32,
            world_size: self.world as i32,
            local_rank: (rank % per_host) as i32,
            job_id: self.job_id.clone(),
            source: "torchrun",
        };
        let calibration = Calibration::new(ClockSource::Monotonic, 0, BASE_MONO_NS, BASE_WALL_NS, 1e9);
        let host = format!("node{}", rank / per_host);
        let info = HeaderInfo {
            identity: &identity,
            pid: 0,
            host: &host,
            calibration: &calibration,
            slot_count: self.slot_count,
            ring_capacity: 65_536,
        };
        let mut writer = LogWriter::create(&path, &info)?;
        let names = StageNames::in_map(writer.map());
        let mut ids = [0u16; STAGES_PER_PART];
        for (id, (name, _)) in ids.iter_mut().zip(STAGES) {
            *id = names.intern(name.as_bytes()).unwrap_or(0);
        }
        writer.append(&RecordBody::CommCreated(CommCreated {
            t_ns: BASE_MONO_NS,
            comm_id: COMM_ID,
            parent_id: 0,
            rank: rank as i32,
            nranks: self.world as i32,
            global_rank: rank as i32,
            color: -1,
            key: 0,
            origin: CommOrigin::InitRank,
        }));
        let period_ns = self.period_ns();
        let mut seq = 0;
        for step in 0..self.steps {
            let t_step = BASE_MONO_NS + 1_000_000 + step * period_ns;
            let mut durations = [0u64; STAGES_PER_PART];
            for (s, d) in durations.iter_mut().enumerate().take(STAGES.len()) {
                *d = self.stage_ns(rank, step, s);
            }
            // The allreduces: spread over the backward stage; each returns when the
            // latest rank has entered it, which the others wait for inside the stage.
            let bwd_begin = t_step + durations[0] + durations[1];
            let latest_bwd_begin = t_step + self.latest_ns(step, 0) + self.latest_ns(step, 1);
            let spacing = durations[BACKWARD] / (self.calls_per_step as u64 + 1);
            let latest_spacing = self.latest_ns(step, BACKWARD) / (self.calls_per_step as u64 + 1);
            let mut t = bwd_begin;
            for k in 0..self.calls_per_step as u64 {
                seq += 1;
                let enter = t + spacing;
                let exit = (latest_bwd_begin + (k + 1) * latest_spacing).max(enter) + 50_000;
                t = exit;
                writer.append(&RecordBody::NcclCall(allreduce(COMM_ID, seq, enter, exit)));
            }
            durations[BACKWARD] = t + spacing - bwd_begin;
            let wall_ns = durations.iter().sum();
            writer.append(&RecordBody::StepVector(StepVector {
                step,
                t_begin_ns: t_step,
                wall_ns,
                overlap_ns: 0,
                schema_hash: 0x5eed,
                part: 0,
                stages_total: STAGES.len() as u8,
                nested_rejected: 0,
                count: STAGES.len() as u8,
                stage_ids: ids,
                durations_ns: durations,
            }));
        }
        let end_ns = BASE_MONO_NS + 2_000_000 + self.steps * period_ns;
        writer.heartbeat(end_ns, BASE_WALL_NS + (end_ns - BASE_MONO_NS), 1e9);
        writer.set(live::WRITER_STATE, WriterState::Exited as u64);
        Ok(path)
    }

    /// Stage `s` of `rank` in `step`, ns: nominal, jitter, and the slow rank's stall.
    fn stage_ns(&self, rank: u32, step: u64, s: usize) -> u64 {
        let jitter =
            crate::core::fnv::fnv1a(&[rank.to_le_bytes().as_slice(), &step.to_le_bytes(), &[s as u8]].concat())
                % (JITTER_US + 1);
        let stall = if s == 0 && self.slow_rank == Some(rank) && step >= self.steps / 2 { self.stall_us } else { 0 };
        (STAGES[s].1 + jitter + stall) * 1_000
    }

    /// The longest stage `s` any rank can have in `step` (bounds the collectives' waits).
    fn latest_ns(&self, step: u64, s: usize) -> u64 {
        let stall = if s == 0 && self.slow_rank.is_some() && step >= self.steps / 2 { self.stall_us } else { 0 };
        (STAGES[s].1 + JITTER_US + stall) * 1_000
    }

    /// Time between step starts: room for the longest step, waits included (a rank's
    /// backward lasts until the latest rank's last allreduce, plus its own last slice).
    fn period_ns(&self) -> u64 {
        let longest: u64 =
            STAGES.iter().map(|(_, us)| us + JITTER_US).sum::<u64>() + self.stall_us + STAGES[BACKWARD].1 + JITTER_US;
        (longest + 2 * JITTER_US + 100) * 1_000 + self.calls_per_step as u64 * 50_000
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::log::format::Region;
    use crate::core::log::reader::RankLog;

    #[test]
    fn a_synthetic_job_reads_back_as_written() {
        let dir = std::env::temp_dir().join(format!("sf-synth-{}", std::process::id()));
        let job = SynthJob {
            job_id: "synth".into(),
            world: 4,
            ranks_per_host: 2,
            steps: 40,
            calls_per_step: 3,
            slot_count: 1024,
            slow_rank: Some(1),
            stall_us: 5_000,
        };
        let paths = job.write(&dir, 0..4).unwrap();
        let log = RankLog::open(&paths[3]).unwrap();
        assert_eq!((log.header.global_rank, log.header.host.as_str(), log.header.local_rank), (3, "node1", 1));
        let (records, stats) = log.records();
        assert_eq!((records.len(), stats.missing), (1 + 40 + 120, 0));
        let mut walls = Vec::new();
        log.scan_region(Region::History, |r| {
            if let RecordBody::StepVector(v) = r.body {
                assert_eq!(v.durations_ns[..5].iter().sum::<u64>(), v.wall_ns);
                walls.push(v.wall_ns);
            }
        });
        assert_eq!(walls.len(), 40);
        assert!(walls[30] > walls[5] + 4_000_000, "rank 3 waits for the stalled rank 1: {walls:?}");
        assert_eq!(log.stage_names().iter().flatten().count(), 5);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
