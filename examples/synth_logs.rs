//! Writes a synthetic job's rank logs (`core::log::synth`) for `scripts/bench-scale`:
//!   cargo run --release --example synth_logs -- DIR RANKS STEPS CALLS_PER_STEP [SLOTS] [SLOW_RANK]
//! RANKS ranks, 8 per host, STEPS steps of CALLS_PER_STEP allreduces, SLOTS event-ring
//! slots per rank (default 65536, the library's default); SLOW_RANK stalls 20 ms in data
//! from the middle step on. Ranks are written on every core.

use std::path::PathBuf;

use stagefrontier::core::log::synth::SynthJob;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let number = |i: usize, default: Option<u64>| -> u64 {
        match args.get(i) {
            Some(text) => text.parse().unwrap_or_else(|_| panic!("argument {}: {text:?} is not a number", i + 1)),
            None => default
                .unwrap_or_else(|| panic!("usage: synth_logs DIR RANKS STEPS CALLS_PER_STEP [SLOTS] [SLOW_RANK]")),
        }
    };
    let dir =
        PathBuf::from(args.first().expect("usage: synth_logs DIR RANKS STEPS CALLS_PER_STEP [SLOTS] [SLOW_RANK]"));
    let ranks = number(1, None) as u32;
    let job = SynthJob {
        job_id: "synth".into(),
        world: ranks,
        ranks_per_host: 8,
        steps: number(2, None),
        calls_per_step: number(3, None) as u32,
        slot_count: number(4, Some(65_536)) as u32,
        slow_rank: args.get(5).map(|_| number(5, None) as u32),
        stall_us: 20_000,
    };
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get()) as u32;
    std::thread::scope(|scope| {
        for w in 0..workers {
            let (job, dir) = (&job, &dir);
            scope.spawn(move || {
                for rank in (w..ranks).step_by(workers as usize) {
                    job.write(dir, rank..rank + 1).unwrap_or_else(|e| panic!("rank {rank}: {e}"));
                }
            });
        }
    });
}
