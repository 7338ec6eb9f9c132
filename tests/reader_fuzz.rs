//! A deterministic mutation fuzzer for the log reader (issue 11): real logs from a real
//! job (finished, wrapped, and copied live with a populated communicator table) are
//! mutated (header fields resealed with a matching CRC, live words, communicator slots,
//! stage names, record slots resealed with a matching CRC so their payloads reach the
//! decoders and the analyses, slots moved, bytes flipped, the file cut short or grown
//! sparse) and read back through the same paths `sf` uses: in this process through
//! `RankLog` under a counting allocator, and every few cases through the real `sf`
//! binary (ls, dump, hang, slow, kernels, net, frontier) under `wait4`.
//!
//! Bounds checked on every run: no panic, no signal, no single allocation and no peak
//! over 256 MiB, no run over 2 s. The budget is `SF_FUZZ_SECS` seconds (default 40), the
//! seed `SF_FUZZ_SEED` (default fixed, so CI is reproducible); a failure prints the seed,
//! the case and its mutations, and keeps the file that failed.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::*;
use proptest::prelude::Rng;
use proptest::test_runner::{RngAlgorithm, TestRng};
use stagefrontier::core::log::format::{self, bytes, comm, header, live, stage_names};
use stagefrontier::core::log::reader::RankLog;

const ALLOCATION_BOUND: usize = 256 << 20;
const RUN_BOUND: Duration = Duration::from_secs(2);

/// Counts what the reader allocates: the largest single request and the peak in use.
struct Counting;

static LARGEST: AtomicUsize = AtomicUsize::new(0);
static IN_USE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn note_alloc(size: usize) {
    LARGEST.fetch_max(size, Ordering::Relaxed);
    let now = IN_USE.fetch_add(size, Ordering::Relaxed) + size;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

// SAFETY: every call forwards to the system allocator with the caller's layout and
// pointer unchanged; the counters are atomics and never allocate.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note_alloc(layout.size());
        // SAFETY: forwarded as is.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note_alloc(layout.size());
        // SAFETY: forwarded as is.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        IN_USE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: forwarded as is.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        IN_USE.fetch_sub(layout.size(), Ordering::Relaxed);
        note_alloc(new_size);
        // SAFETY: forwarded as is.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Values that break arithmetic and sizes: zero, one, all ones, the signed and unsigned
/// edges of every width, and the odd power of two.
const INTERESTING: [u64; 15] = [
    0,
    1,
    2,
    u64::MAX,
    i32::MAX as u64,
    u32::MAX as u64,
    1 << 31,
    1 << 32,
    1 << 63,
    i64::MAX as u64,
    (-2i32) as u32 as u64,
    1 << 18,
    (1 << 18) + 1,
    (1 << 26) + 1,
    4096,
];

struct Mutator {
    rng: TestRng,
}

impl Mutator {
    fn below(&mut self, n: usize) -> usize {
        (self.rng.next_u64() % n.max(1) as u64) as usize
    }

    fn value(&mut self) -> u64 {
        match self.below(4) {
            0 => self.rng.next_u64(),
            1 => self.below(300) as u64,
            _ => INTERESTING[self.below(INTERESTING.len())],
        }
    }

    /// One mutation of `log`, described for the failure report.
    fn mutate(&mut self, log: &mut Vec<u8>) -> String {
        if log.len() < format::records_offset() {
            // Already cut short: only flips and further cuts stay within it.
            if log.is_empty() {
                return "nothing left to mutate".to_string();
            }
            let at = self.below(log.len());
            log[at] ^= 1 << self.below(8);
            return format!("byte {at} flipped");
        }
        let slots = (log.len().saturating_sub(format::records_offset())) / format::SLOT_SIZE;
        match self.below(10) {
            0 | 1 => {
                // A static header field, resealed so the CRC lets it through.
                let fields: [(&str, usize, usize); 16] = [
                    ("header_size", header::HEADER_SIZE, 4),
                    ("schema", header::SCHEMA, 4),
                    ("slot_size", header::SLOT_SIZE, 4),
                    ("slot_count", header::SLOT_COUNT, 4),
                    ("comm_table_offset", header::COMM_TABLE_OFFSET, 8),
                    ("comm_slots", header::COMM_SLOTS, 4),
                    ("records_offset", header::RECORDS_OFFSET, 8),
                    ("pid", header::PID, 4),
                    ("global_rank", header::GLOBAL_RANK, 4),
                    ("world_size", header::WORLD_SIZE, 4),
                    ("local_rank", header::LOCAL_RANK, 4),
                    ("clock_source", header::CLOCK_SOURCE, 4),
                    ("ring_capacity", header::RING_CAPACITY, 4),
                    ("base_ticks", header::BASE_TICKS, 8),
                    ("base_mono_ns", header::BASE_MONO_NS, 8),
                    ("process_start", header::PROCESS_START, 8),
                ];
                let (name, at, width) = fields[self.below(fields.len())];
                let v = self.value();
                log[at..at + width].copy_from_slice(&v.to_le_bytes()[..width]);
                let sealed = self.below(10) != 0;
                if sealed {
                    reseal_header(log);
                }
                format!("header {name} = {v:#x} (resealed: {sealed})")
            }
            2 => {
                let fields = [
                    live::COMMITTED,
                    live::HEARTBEAT_MONO_NS,
                    live::HEARTBEAT_WALL_NS,
                    live::DROPPED_EVENTS,
                    live::WRITER_STATE,
                    live::TICKS_PER_SEC,
                    live::NCCL_VERSION,
                    live::COMM_TABLE_OVERFLOW,
                    live::CURRENT_STEP,
                    live::CURRENT_STAGE,
                ];
                let at = fields[self.below(fields.len())];
                let v = match self.below(5) {
                    0 => [f64::NAN, f64::INFINITY, -1.0, 0.0, 1e-300][self.below(5)].to_bits(),
                    _ => self.value(),
                };
                bytes::put_u64(log, at, v);
                format!("live word at {at} = {v:#x}")
            }
            3 | 4 => {
                // A communicator slot: one word, or all of it.
                let slot = self.below(format::COMM_SLOTS);
                let at = format::HEADER_SIZE + slot * format::COMM_SLOT_SIZE;
                if self.below(3) == 0 {
                    for word in 0..format::COMM_SLOT_SIZE / 8 {
                        let v = self.value();
                        bytes::put_u64(log, at + word * 8, v);
                    }
                    return format!("comm slot {slot} all words random");
                }
                let word = self.below(format::COMM_SLOT_SIZE / 8);
                let v = self.value();
                bytes::put_u64(log, at + word * 8, v);
                if bytes::get_u64(log, at + comm::KEY) <= comm::CLAIMING {
                    bytes::put_u64(log, at + comm::KEY, 0x7f00_0000_1000 + slot as u64);
                    // make it live
                }
                format!("comm slot {slot} word {word} = {v:#x}")
            }
            5 => {
                let slot = self.below(stage_names::SLOTS);
                let at = stage_names::OFFSET + slot * stage_names::SLOT_SIZE;
                let tag = self.value() | 1 << 63;
                bytes::put_u64(log, at, tag);
                for b in &mut log[at + 8..at + stage_names::SLOT_SIZE] {
                    *b = self.rng.next_u64() as u8;
                }
                format!("stage name slot {slot} random")
            }
            6 | 7 if slots > 0 => {
                // A record slot, resealed so it passes the CRC and reaches the decoders.
                let slot = self.below(slots);
                let at = format::records_offset() + slot * format::SLOT_SIZE;
                let what = match self.below(4) {
                    0 => {
                        let i = format::SLOT_HEADER_SIZE + self.below(format::PAYLOAD_CAPACITY);
                        let v = self.value();
                        let n = 8.min(at + format::SLOT_SIZE - (at + i));
                        log[at + i..at + i + n].copy_from_slice(&v.to_le_bytes()[..n]);
                        format!("payload byte {i} = {v:#x}")
                    }
                    1 => {
                        let kind = self.below(26) as u16;
                        bytes::put_u16(log, at + 8, kind);
                        format!("kind = {kind}")
                    }
                    2 => {
                        let len = self.below(200) as u16;
                        bytes::put_u16(log, at + 10, len);
                        format!("len = {len}")
                    }
                    _ => {
                        let seq = self.value();
                        bytes::put_u64(log, at, seq);
                        format!("seq = {seq:#x}")
                    }
                };
                let seq = bytes::get_u64(log, at);
                let kind = bytes::get_u16(log, at + 8);
                let len = (bytes::get_u16(log, at + 10) as usize).min(format::PAYLOAD_CAPACITY);
                let payload = &log[at + format::SLOT_HEADER_SIZE..at + format::SLOT_HEADER_SIZE + len];
                let crc = format::record_crc(seq, kind, payload);
                bytes::put_u32(log, at + 12, crc);
                format!("record slot {slot}: {what}, resealed")
            }
            8 => {
                let cut = match self.below(3) {
                    0 => self.below(format::HEADER_SIZE + 16),
                    _ => self.below(log.len()),
                };
                log.truncate(cut);
                format!("cut to {cut} bytes")
            }
            9 if slots > 1 => {
                let (from, to) = (self.below(slots), self.below(slots));
                let src = format::records_offset() + from * format::SLOT_SIZE;
                let dst = format::records_offset() + to * format::SLOT_SIZE;
                let copy = log[src..src + format::SLOT_SIZE].to_vec();
                log[dst..dst + format::SLOT_SIZE].copy_from_slice(&copy);
                format!("slot {from} copied over slot {to}")
            }
            _ => {
                let at = self.below(log.len());
                let bit = self.below(8);
                log[at] ^= 1 << bit;
                format!("bit {bit} of byte {at} flipped")
            }
        }
    }
}

/// Seed logs: a finished job, a job whose ring wrapped, and a job copied while it runs
/// (communicators registered, calls in flight, writer still running).
fn seeds(root: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut seeds = Vec::new();
    run_ok(preloaded(&trainer_sim(), root, "finished").args(trainer_args(2, 4)).env("SF_LOG_RECORDS", "1024"));
    run_ok(
        preloaded(&trainer_sim(), root, "wrapped")
            .args(trainer_args(2, 40))
            .env("SF_LOG_RECORDS", "1024")
            .env("SF_INJECT", "delay:rank=1,op=allreduce,seq=3-5,ms=1"),
    );
    for job in ["finished", "wrapped"] {
        for log in rank_logs(root, job) {
            seeds.push((log.clone(), std::fs::read(&log).unwrap()));
        }
    }
    let mut running = preloaded(&trainer_sim(), root, "running")
        .args(["--ranks", "2", "--steps", "100000", "--stage-ms", "data=1,fwd=1,bwd=2,callbacks=0,optim=1"])
        .env("SF_LOG_RECORDS", "1024")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let logs = rank_logs(root, "running");
        let live = |p: &PathBuf| RankLog::open(p).is_ok_and(|l| l.live().committed > 200 && !l.comms().is_empty());
        if logs.len() == 2 && logs.iter().all(live) {
            for log in logs {
                seeds.push((log.clone(), std::fs::read(&log).unwrap()));
            }
            break;
        }
        assert!(Instant::now() < deadline, "the running job never got going");
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = running.kill();
    let _ = running.wait();
    seeds
}

/// The reader paths `sf` takes, in this process: open, live words, stage names, position,
/// communicators, records, and the records as `sf dump --json` writes them.
fn read_all(path: &Path) {
    let Ok(log) = RankLog::open(path) else { return };
    let live = log.live();
    let _ = log.stage_names();
    let _ = log.position();
    let comms = log.comms();
    let (records, stats) = log.records();
    assert!(stats.valid as usize == records.len() && stats.first_seq <= stats.last_seq.max(stats.first_seq));
    let _ = serde_json::to_vec(&(&log.header, &live, &comms, &records, &stats)).unwrap();
}

#[test]
fn the_reader_survives_mutated_real_logs_within_its_bounds() {
    let budget = Duration::from_secs(std::env::var("SF_FUZZ_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(40));
    let seed: u64 = std::env::var("SF_FUZZ_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0x5f_11_13_14);
    let root = log_root("fuzz");
    let seeds = seeds(&root);
    let work = root.join("case");
    std::fs::create_dir_all(&work).unwrap();
    let mut seed_bytes = [0u8; 32];
    seed_bytes[..8].copy_from_slice(&seed.to_le_bytes());
    let mut m = Mutator { rng: TestRng::from_seed(RngAlgorithm::ChaCha, &seed_bytes) };
    let started = Instant::now();
    let (mut cases, mut sf_runs, mut opened) = (0u64, 0u64, 0u64);
    let mut slowest = Duration::ZERO;
    let baseline = IN_USE.load(Ordering::Relaxed);
    while started.elapsed() < budget {
        cases += 1;
        let (origin, original) = &seeds[m.below(seeds.len())];
        let mut log = original.clone();
        let mutations: Vec<String> = (0..1 + m.below(4)).map(|_| m.mutate(&mut log)).collect();
        let case = format!("seed {seed:#x} case {cases}: {} with {mutations:?}", origin.display());
        // The case file sits beside an untouched copy of the other rank, as in a job directory.
        let _ = std::fs::remove_dir_all(&work);
        std::fs::create_dir_all(&work).unwrap();
        let path = work.join("rank-00000.sflog");
        std::fs::write(&path, &log).unwrap();
        if m.below(4) == 0 {
            let grown = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
            grown.set_len(log.len() as u64 + (m.below(1 << 20) as u64) * 128).unwrap();
            // a sparse tail
        }
        let other = seeds.iter().find(|(p, _)| p.parent() == origin.parent() && p != origin).unwrap();
        std::fs::write(work.join("rank-00001.sflog"), &other.1).unwrap();

        PEAK.store(IN_USE.load(Ordering::Relaxed), Ordering::Relaxed);
        let run = Instant::now();
        let outcome = std::panic::catch_unwind(|| read_all(&path));
        let took = run.elapsed();
        slowest = slowest.max(took);
        opened += RankLog::open(&path).is_ok() as u64;
        let keep = || {
            let kept = std::env::temp_dir().join(format!("sf-fuzz-failure-{cases}.sflog"));
            let _ = std::fs::copy(&path, &kept);
            kept.display().to_string()
        };
        assert!(outcome.is_ok(), "reader panicked on {case}; file kept at {}", keep());
        assert!(took < RUN_BOUND, "read took {took:?} on {case}; file kept at {}", keep());
        let peak = PEAK.load(Ordering::Relaxed).saturating_sub(baseline);
        assert!(peak < ALLOCATION_BOUND, "{peak} bytes in use reading {case}; file kept at {}", keep());

        // Every 25th case, the whole of sf on the case: its commands, their adapters and
        // analyses, as an operator would run them.
        if cases % 25 == 1 {
            for args in [
                &["ls", "--json"][..],
                &["dump", "--json"],
                &["hang", "--json"],
                &["slow"],
                &["kernels"],
                &["net"],
                &["frontier"],
            ] {
                let target = if args[0] == "dump" { &path } else { &work };
                let r = run_measured(Command::new(artifact("sf")).args(args).arg(target), &root);
                sf_runs += 1;
                let what = format!("sf {args:?} on {case}: {}\n{}", r.status, r.stderr);
                assert!(r.status.code().is_some(), "killed by a signal: {what}; file kept at {}", keep());
                assert!(!r.stderr.contains("panicked"), "panicked: {what}; file kept at {}", keep());
                assert!(r.elapsed < RUN_BOUND, "took {:?}: {what}; file kept at {}", r.elapsed, keep());
                assert!(
                    r.max_rss_kib * 1024 < ALLOCATION_BOUND as u64,
                    "peak RSS {} KiB: {what}; file kept at {}",
                    r.max_rss_kib,
                    keep()
                );
            }
        }
    }
    let largest = LARGEST.load(Ordering::Relaxed);
    assert!(largest < ALLOCATION_BOUND, "one allocation of {largest} bytes");
    eprintln!(
        "reader fuzz: seed {seed:#x}, {cases} cases ({opened} opened), {sf_runs} sf runs in {:?}; slowest read {slowest:?}, \
         largest allocation {largest} bytes",
        started.elapsed()
    );
    assert!(cases > 100 && opened > 10, "too few cases to mean anything: {cases} ({opened} opened)");
    let _ = std::fs::remove_dir_all(&root);
}
