//! Writer and reader against each other on real files.

use std::path::{Path, PathBuf};

use super::format::{self, Region};
use super::reader::{RankLog, ReadError};
use super::records::{Drops, RecordBody, StepVector};
use super::writer::{HeaderInfo, LogWriter};
use crate::core::log::identity::Identity;
use crate::core::record::clock::{Calibration, ClockSource};

fn temp_log(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sf-roundtrip-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir.join("rank-00002.sflog")
}

/// A writer of a small log (1,024 slots) at `path` for `rank` of a 2-rank job: what the
/// copy and tail tests write through.
pub(super) fn small_writer(path: &Path, rank: i32) -> LogWriter {
    let identity =
        Identity { global_rank: rank, world_size: 2, local_rank: rank, job_id: "j".into(), source: "torchrun" };
    let calibration = Calibration::new(ClockSource::Monotonic, 1, 1, 1, 1e9);
    let info = HeaderInfo {
        identity: &identity,
        pid: 1,
        host: "h",
        calibration: &calibration,
        slot_count: 1024,
        ring_capacity: 1024,
    };
    LogWriter::create(path, &info).unwrap()
}

fn write_log(path: &Path, slot_count: u32, records: u64) -> Calibration {
    let identity =
        Identity { global_rank: 2, world_size: 4, local_rank: 2, job_id: "job-7".into(), source: "torchrun" };
    // Built by hand: `clock::select` would change the process-wide source under other tests.
    let calibration = Calibration::new(ClockSource::Monotonic, 0, 0, 0, 1e9);
    let info = HeaderInfo {
        identity: &identity,
        pid: 4242,
        host: "node-a",
        calibration: &calibration,
        slot_count,
        ring_capacity: 64,
    };
    let mut writer = LogWriter::create(path, &info).unwrap();
    for i in 0..records {
        writer.append(&drops(i));
    }
    calibration
}

fn drops(i: u64) -> RecordBody {
    RecordBody::Drops(Drops { t_ns: i, dropped_total: i * 3, ring_capacity: 64, profiler_dropped: i })
}

#[test]
fn every_record_reads_back_with_its_header() {
    let path = temp_log("all");
    write_log(&path, 128, 100);
    let log = RankLog::open(&path).unwrap();
    assert_eq!((log.header.global_rank, log.header.world_size, log.header.pid), (2, 4, 4242));
    assert_eq!((log.header.job_id.as_str(), log.header.host.as_str()), ("job-7", "node-a"));
    assert_eq!(log.live().committed, 100);
    let (records, stats) = log.records();
    assert_eq!(records.len(), 100);
    assert!(records.iter().enumerate().all(|(i, r)| r.seq == i as u64 + 1 && r.body == drops(i as u64)));
    assert_eq!((stats.first_seq, stats.last_seq, stats.missing, stats.lost_to_wrap), (1, 100, 0, 0));
}

#[test]
fn wraparound_keeps_the_newest_and_counts_the_rest() {
    let path = temp_log("wrap");
    write_log(&path, 16, 40);
    let (records, stats) = RankLog::open(&path).unwrap().records();
    assert_eq!(records.first().map(|r| r.seq), Some(25));
    assert_eq!(records.len(), 16);
    assert_eq!((stats.lost_to_wrap, stats.missing), (24, 0));
}

#[test]
fn a_damaged_slot_is_a_counted_gap_not_a_record() {
    let path = temp_log("torn");
    write_log(&path, 32, 10);
    let mut bytes = std::fs::read(&path).unwrap();
    let slot_of_seq_5 = format::records_offset() + 4 * format::SLOT_SIZE;
    bytes[slot_of_seq_5 + format::SLOT_HEADER_SIZE + 3] ^= 0x40;
    std::fs::write(&path, &bytes).unwrap();
    let (records, stats) = RankLog::open(&path).unwrap().records();
    assert_eq!(records.len(), 9);
    assert!(records.iter().all(|r| r.seq != 5));
    assert_eq!((stats.invalid_slots, stats.missing), (1, 1));
}

#[test]
fn bad_files_are_named_errors() {
    let path = temp_log("bad");
    write_log(&path, 64, 3);
    let good = std::fs::read(&path).unwrap();

    std::fs::write(&path, &good[..good.len() / 2]).unwrap();
    assert!(matches!(RankLog::open(&path), Err(ReadError::Truncated { .. })));

    let mut future = good.clone();
    future[format::header::FORMAT_VERSION] = 99;
    std::fs::write(&path, &future).unwrap();
    assert!(matches!(RankLog::open(&path), Err(ReadError::UnsupportedVersion { found: 99, .. })));

    let mut damaged = good.clone();
    damaged[format::header::JOB_ID] ^= 1;
    std::fs::write(&path, &damaged).unwrap();
    assert!(matches!(RankLog::open(&path), Err(ReadError::CorruptHeader { .. })));

    std::fs::write(&path, b"hello, not a log at all").unwrap();
    let error = RankLog::open(&path).err().unwrap();
    assert!(matches!(error, ReadError::NotALog { .. }));
    assert!(error.to_string().contains("rank-00002.sflog"), "names the file: {error}");
}

/// A one-stage step vector (a history-ring record), for tests of the log.
pub(super) fn step(step: u64) -> RecordBody {
    RecordBody::StepVector(StepVector {
        step,
        t_begin_ns: step * 10,
        wall_ns: 10,
        overlap_ns: 0,
        schema_hash: 7,
        part: 0,
        stages_total: 1,
        nested_rejected: 0,
        count: 1,
        stage_ids: [0; 6],
        durations_ns: [10, 0, 0, 0, 0, 0],
    })
}

#[test]
fn step_vectors_keep_their_history_while_calls_wrap() {
    let path = temp_log("regions");
    // 16 event slots, 32 history slots.
    let identity = Identity { global_rank: 2, world_size: 4, local_rank: 2, job_id: "j".into(), source: "env" };
    let calibration = Calibration::new(ClockSource::Monotonic, 0, 0, 0, 1e9);
    let info = HeaderInfo {
        identity: &identity,
        pid: 1,
        host: "h",
        calibration: &calibration,
        slot_count: 16,
        ring_capacity: 8,
    };
    let mut writer = LogWriter::create(&path, &info).unwrap();
    // 20 steps of 50 calls each: the event ring holds the last 16 calls, the history all 20 steps.
    for s in 0..20 {
        writer.append(&step(s));
        for i in 0..50 {
            writer.append(&drops(s * 50 + i));
        }
    }
    let log = RankLog::open(&path).unwrap();
    assert_eq!((log.header.slot_count, log.header.history_slot_count), (16, 32));
    assert_eq!((log.live().committed, log.live().history_committed), (1000, 20));
    let mut steps = Vec::new();
    let stats = log.scan_region(Region::History, |r| steps.push(r.body));
    assert_eq!(steps, (0..20).map(step).collect::<Vec<_>>(), "every step, oldest first");
    assert_eq!((stats.valid, stats.lost_to_wrap, stats.first_seq, stats.last_seq), (20, 0, 1, 20));

    let (records, stats) = log.records();
    assert_eq!(records.len(), 36, "20 steps, then the 16 newest calls");
    assert!(records[..20].iter().all(|r| matches!(r.body, RecordBody::StepVector(_))));
    assert_eq!(records[20].body, drops(984));
    assert_eq!((stats.valid, stats.lost_to_wrap, stats.first_seq, stats.last_seq), (36, 984, 985, 1000));
    assert_eq!(stats.of_steps().lost_to_wrap, 0);

    // 60 more steps wrap the history ring: the oldest 48 go, and the scan counts them.
    for s in 20..80 {
        writer.append(&step(s));
    }
    let stats = log.scan_region(Region::History, |_| {});
    assert_eq!((stats.valid, stats.lost_to_wrap, stats.first_seq), (32, 48, 49));
}

/// A format 1 log (one ring for everything) is still read: the history region is the
/// event ring then.
#[test]
fn a_format_1_log_reads_as_one_ring() {
    let path = temp_log("v1");
    write_log(&path, 32, 10);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes.truncate(format::history_offset(32));
    bytes[format::header::FORMAT_VERSION..format::header::FORMAT_VERSION + 4].copy_from_slice(&1u32.to_le_bytes());
    bytes[format::header::HISTORY_SLOT_COUNT..format::header::HISTORY_OFFSET + 8].fill(0);
    let crc = crc32fast::hash(&bytes[..format::STATIC_HEADER_LEN]);
    bytes[format::STATIC_CRC_OFFSET..format::STATIC_CRC_OFFSET + 4].copy_from_slice(&crc.to_le_bytes());
    std::fs::write(&path, &bytes).unwrap();
    let log = RankLog::open(&path).unwrap();
    assert_eq!((log.header.format_version, log.header.history_slot_count), (1, 0));
    let (records, stats) = log.records();
    assert_eq!(records.len(), 10);
    assert!(stats.history.is_none());
    assert_eq!(log.scan_region(Region::History, |_| {}).valid, 10, "one ring holds every kind");
    assert_eq!(log.rings().len(), 1);
}

#[test]
fn a_history_ring_the_file_cannot_hold_is_refused() {
    let path = temp_log("short-history");
    write_log(&path, 32, 3);
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..format::history_offset(32) + 100]).unwrap();
    assert!(matches!(RankLog::open(&path), Err(ReadError::Truncated { .. })));
}
