//! Frontier analyzer throughput on a synthetic job: 10,000 ranks × 1,000 steps × 6 stages
//! (60 million durations), one rank stalling in data and the others waiting in backward.
//!
//!     cargo run --release --example frontier_bench [-- RANKS STEPS]
//!
//! The matrix is generated before the clock starts; only the analyzer is timed, by the
//! wall clock and by the thread's CPU clock (which other processes on a shared machine do
//! not inflate).

use std::sync::Arc;
use std::time::Instant;

use stagefrontier::analysis::frontier::{Analyzer, Context, Schema, Step};

const STAGES: [&str; 6] = ["data", "forward", "backward", "callbacks", "optimizer", "step.other_cpu_wall"];
/// Stage means in seconds, before jitter.
const BASE: [f64; 6] = [0.020, 0.050, 0.090, 0.004, 0.030, 0.002];
const STALL_S: f64 = 0.120;

/// xorshift64*: a fixed sequence, so every run analyzes the same numbers.
struct Rng(u64);

impl Rng {
    fn unit(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 / (1u64 << 53) as f64
    }
}

fn thread_cpu_s() -> f64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec, which `ts` is.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
}

fn main() {
    let mut args = std::env::args().skip(1).map(|a| a.parse::<usize>().expect("RANKS and STEPS are integers"));
    let ranks = args.next().unwrap_or(10_000);
    let steps = args.next().unwrap_or(1_000);
    let straggler = ranks / 2;
    let schema = Arc::new(Schema::new(STAGES.iter().map(|s| s.to_string()).collect()).expect("stage list"));
    let world: Vec<u32> = (0..ranks as u32).collect();

    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let per_step = ranks * STAGES.len();
    let mut matrix = Vec::with_capacity(steps * per_step);
    for _ in 0..steps {
        for r in 0..ranks {
            let mut row: Vec<f64> = BASE.iter().map(|b| b * (0.9 + 0.2 * rng.unit())).collect();
            if r == straggler {
                row[0] += STALL_S;
            } else {
                row[2] += STALL_S;
            }
            matrix.extend(row);
        }
    }

    let (start, cpu_start) = (Instant::now(), thread_cpu_s());
    let mut analyzer = Analyzer::new(Context::default(), None);
    let mut windows = Vec::new();
    for (t, durations) in matrix.chunks_exact(per_step).enumerate() {
        let step = Step {
            index: t as u64,
            schema: &schema,
            world: ranks,
            ranks: &world,
            missing: &[],
            durations,
            overlap_s: &[],
            device: &[],
        };
        windows.extend(analyzer.push(step).expect("valid step"));
    }
    windows.extend(analyzer.finish());
    let elapsed = start.elapsed().as_secs_f64();
    let cpu = thread_cpu_s() - cpu_start;

    let values = matrix.len() as f64;
    println!("{ranks} ranks x {steps} steps x {} stages = {} durations", STAGES.len(), matrix.len());
    println!(
        "analyzer: {elapsed:.3} s wall, {cpu:.3} s CPU; {:.1} million values/s (wall), {:.1} (CPU)",
        values / elapsed / 1e6,
        values / cpu / 1e6
    );
    for w in &windows {
        let routing = w.routing.as_ref().expect("shares");
        let names = |set: &[usize]| set.iter().map(|&s| w.schema.name(s)).collect::<Vec<_>>().join(",");
        let labels: Vec<&str> = w.labels.iter().map(|l| l.kind.name()).collect();
        println!(
            "window {}-{}: exposed {:.3} s, routing {}, top-2 {}, data leaders {:?}, labels {}",
            w.first_step,
            w.last_step,
            w.exposed_s,
            names(&routing.set),
            names(&routing.top2),
            w.leaders[0].ranks,
            labels.join(",")
        );
    }
}
