//! `sf frontier --csv` reading throughput: a file as `sf steps --csv` writes it (step,
//! rank, stage, seconds, overlap, wait and caused wait), RANKS × STEPS × 6 stages rows
//! (default 1,000 × 500: 3 million values, about 100 MB), read by the general RFC 4180
//! reader (`read_rfc4180`, the reader before the fast path) and by `read` (the fast path),
//! each alone and followed by the analysis `sf frontier` runs on it (own time out of the
//! waits, then the analyzer over every step).
//!
//!     cargo run --release --example csv_bench [-- RANKS STEPS [fast|general|floor]]
//!     cargo run --release --example csv_bench -- RANKS STEPS write FILE
//!
//! The second form only writes the file (to time `sf frontier --csv FILE` on it).
//!
//! A last row times the floor under any reader (floor.rs): the file mapped and split on
//! two cores, each line cut into fields and its numbers read, nothing checked or built.
//!
//! Durations are whole nanoseconds, as the logs hold them; one stage in six carries a wait
//! and one a caused wait, sums of several waits as the logs' attribution makes them. The
//! file is written to the temporary directory before any clock starts and read back from
//! the page cache. Times are the best of three runs, wall and process CPU (all threads).

use std::fs::File;
use std::io::{BufReader, BufWriter, Write};
use std::path::Path;
use std::time::Instant;

use stagefrontier::analysis::frontier::csv::{self, CsvError, StageTable};
use stagefrontier::analysis::frontier::{Analyzer, Context};

mod floor;

const STAGES: [&str; 6] = ["data", "forward", "backward", "callbacks", "optimizer", "step.other_cpu_wall"];
/// Stage means in nanoseconds, before jitter.
const BASE_NS: [f64; 6] = [20e6, 50e6, 90e6, 4e6, 30e6, 2e6];

fn process_cpu_s() -> f64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec, which `ts` is.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_PROCESS_CPUTIME_ID)");
    ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
}

fn write_file(path: &Path, ranks: u32, steps: u64) -> std::io::Result<()> {
    let mut out = BufWriter::new(File::create(path)?);
    writeln!(out, "step,rank,stage,seconds,overlap_seconds,wait_seconds,caused_seconds")?;
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut unit = move || {
        rng ^= rng >> 12;
        rng ^= rng << 25;
        rng ^= rng >> 27;
        (rng.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 / (1u64 << 53) as f64
    };
    for step in 0..steps {
        for rank in 0..ranks {
            for (s, (stage, base)) in STAGES.iter().zip(BASE_NS).enumerate() {
                let ns = (base * (0.9 + 0.2 * unit())).round();
                let seconds = ns / 1e9;
                // Waits summed over a few collectives, as the attribution sums them.
                let sum = |u: f64| (0..3).map(|k| (u * 1e5).round() * (k + 1) as f64 / 1e9).sum::<f64>();
                let wait = if s == 2 { sum(unit()).to_string() } else { String::new() };
                let caused = if s == 0 { sum(unit()).to_string() } else { String::new() };
                writeln!(out, "{step},{rank},{stage},{seconds},0,{wait},{caused}")?;
            }
        }
    }
    out.flush()
}

type Reader = fn(BufReader<File>, Option<&[String]>) -> Result<StageTable, CsvError>;

/// Reads the file, then with `analyze` runs the analysis; returns (wall, CPU) seconds of
/// both, and of the analysis alone.
fn run(path: &Path, reader: Reader, analyze: bool) -> [(f64, f64); 2] {
    let (start, cpu_start) = (Instant::now(), process_cpu_s());
    let mut table = reader(BufReader::new(File::open(path).expect("open the file")), None).expect("a valid file");
    let (read, cpu_read) = (Instant::now(), process_cpu_s());
    if analyze {
        if let Some(attribution) = table.take_attribution() {
            table.take_out_waits(&attribution);
        }
        let mut analyzer = Analyzer::new(Context::default(), None);
        let mut windows = 0;
        table
            .for_each_step_ahead(|step| {
                windows += usize::from(analyzer.push(step)?.is_some());
                Ok::<(), stagefrontier::analysis::frontier::StepError>(())
            })
            .expect("valid steps");
        windows += usize::from(analyzer.finish().is_some());
        assert!(windows > 0);
    }
    let cpu_end = process_cpu_s();
    [(start.elapsed().as_secs_f64(), cpu_end - cpu_start), (read.elapsed().as_secs_f64(), cpu_end - cpu_read)]
}

/// The best wall and the best CPU time of `runs`.
fn best(runs: impl Iterator<Item = (f64, f64)>) -> (f64, f64) {
    runs.fold((f64::INFINITY, f64::INFINITY), |(w, c), (wall, cpu)| (w.min(wall), c.min(cpu)))
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let number =
        |i: usize, default: u64| args.get(i).map_or(default, |a| a.parse().expect("RANKS and STEPS are integers"));
    let (ranks, steps) = (number(0, 1_000) as u32, number(1, 500));
    // A third argument runs that reader alone (for a profiler), or writes the file only.
    let only = args.get(2).map(String::as_str);
    if only == Some("write") {
        let path = args.get(3).expect("write FILE");
        write_file(Path::new(path), ranks, steps).expect("write the file");
        return;
    }
    let path = std::env::temp_dir().join(format!("sf-csv-bench-{}.csv", std::process::id()));
    write_file(&path, ranks, steps).expect("write the file");
    let values = ranks as f64 * steps as f64 * STAGES.len() as f64;
    let bytes = std::fs::metadata(&path).map_or(0, |m| m.len());
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!(
        "{ranks} ranks x {steps} steps x {} stages = {values} values, {:.1} MB; {cores} cores, load average {}",
        STAGES.len(),
        bytes as f64 / 1e6,
        load.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
    );
    let print = |name: &str, (wall, cpu): (f64, f64)| {
        println!(
            "{name:<36} {wall:.3} s wall, {cpu:.3} s CPU: {:.1} M values/s (wall), {:.1} (CPU)",
            values / wall / 1e6,
            values / cpu / 1e6
        );
    };
    let readers: [(&str, Reader); 2] = [("general (csv crate)", csv::read_rfc4180), ("fast", csv::read)];
    for analyze in [false, true] {
        for (name, reader) in readers.into_iter().filter(|(name, _)| only.is_none_or(|o| name.starts_with(o))) {
            let runs: Vec<[(f64, f64); 2]> = (0..3).map(|_| run(&path, reader, analyze)).collect();
            print(
                &format!("{}{name}", if analyze { "parse+analysis, " } else { "parse, " }),
                best(runs.iter().map(|r| r[0])),
            );
            if analyze {
                print(&format!("  of which analysis, {name}"), best(runs.iter().map(|r| r[1])));
            }
        }
    }
    if only.is_none_or(|o| o == "floor") {
        let runs = (0..3).map(|_| {
            let (start, cpu_start) = (Instant::now(), process_cpu_s());
            let (rows, _) = floor::read(&path, &STAGES);
            assert_eq!(rows as f64, values, "the floor read every row");
            (start.elapsed().as_secs_f64(), process_cpu_s() - cpu_start)
        });
        print("floor: fields and numbers only", best(runs));
    }
    let _ = std::fs::remove_file(&path);
}
