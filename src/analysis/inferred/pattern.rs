//! The period of one rank's collectives, from their signatures and the gaps between them.

use super::{Call, Signature};

/// Calls the period search reads (a window in the middle of the log, past set-up).
pub const SEARCH_CALLS: usize = 16_384;
/// Longest period tried, in calls.
pub const MAX_PERIOD: usize = 2048;
/// Multiples of the signature period tried when the gaps may say the step is longer.
const MAX_MULTIPLE: usize = 32;
/// Share of the window's calls that must repeat at the period (the best period's), and
/// how far below the best share a shorter period may stay and still be the period: set-up,
/// tear-down and calls outside the pattern (an evaluation pass) break it here and there,
/// and a multiple of the period repeats exactly as well as the period does.
const MIN_SHARE: f64 = 0.8;
const SHARE_SLACK: f64 = 0.02;
/// The pattern must repeat at least this many times to be a step.
pub const MIN_REPEATS: usize = 4;
/// A multiple of the signature period is the step when the gap after one of its positions
/// is reliably longer than every other position's: its lower quartile over its upper
/// quartiles by this factor.
const SEPARATION: f64 = 1.5;

/// The step's length in calls, and the longest run of calls that follows it unbroken,
/// `start..end` (whole periods).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Period {
    pub length: usize,
    pub start: usize,
    pub end: usize,
}

/// The period of `calls` (one rank's collectives in enter order), or `None` when they do
/// not repeat [`MIN_REPEATS`] times.
pub fn find_period(calls: &[Call]) -> Option<Period> {
    let n = calls.len();
    let window = if n > SEARCH_CALLS { (n - SEARCH_CALLS) / 2..(n + SEARCH_CALLS) / 2 } else { 0..n };
    let signatures: Vec<Signature> = calls[window].iter().map(|c| c.signature).collect();
    let base = signature_period(&signatures)?;
    let (start, run_end) = longest_run(calls, base)?;
    let steady = &calls[start..run_end.min(start + SEARCH_CALLS)];
    let length = (2..=MAX_MULTIPLE)
        .map(|k| k * base)
        .take_while(|&q| q <= MAX_PERIOD && steady.len() / q >= MIN_REPEATS)
        .find(|&q| separated(steady, q))
        .unwrap_or(base);
    let end = start + (run_end - start) / length * length;
    (end - start >= length).then_some(Period { length, start, end })
}

/// The shortest period whose share of repeating signatures is within [`SHARE_SLACK`] of
/// the best period's, that best being at least [`MIN_SHARE`].
fn signature_period(signatures: &[Signature]) -> Option<usize> {
    let m = signatures.len();
    let shares: Vec<f64> = (1..=MAX_PERIOD.min(m / MIN_REPEATS))
        .map(|p| (0..m - p).filter(|&i| signatures[i] == signatures[i + p]).count() as f64 / (m - p) as f64)
        .collect();
    let best = shares.iter().copied().fold(0.0, f64::max);
    if best < MIN_SHARE {
        return None;
    }
    shares.iter().position(|&share| share >= best - SHARE_SLACK).map(|i| i + 1)
}

/// The longest run of calls in which every call's signature recurs `p` calls later, as
/// `start..end` of the calls it covers; `None` when no whole period repeats.
fn longest_run(calls: &[Call], p: usize) -> Option<(usize, usize)> {
    let (mut best, mut run_start) = ((0, 0), 0);
    for i in 0..calls.len().saturating_sub(p) {
        if calls[i].signature != calls[i + p].signature {
            run_start = i + 1;
        } else if i + 1 - run_start > best.1 - best.0 {
            best = (run_start, i + 1);
        }
    }
    (best.1 - best.0 >= p).then_some((best.0, best.1 + p))
}

/// Time outside collectives after call `i`, before the next one (0 when they overlap).
pub fn gap_after(calls: &[Call], i: usize) -> Option<u64> {
    Some(calls.get(i + 1)?.enter_ns.saturating_sub(calls[i].exit_ns))
}

/// Whether, with period `q`, the gap after one position stands clear of all the others.
fn separated(steady: &[Call], q: usize) -> bool {
    let mut columns: Vec<Vec<u64>> = vec![Vec::new(); q];
    for i in 0..steady.len() - 1 {
        columns[i % q].push(gap_after(steady, i).unwrap_or(0));
    }
    let quartiles: Vec<(u64, u64)> = columns
        .iter_mut()
        .map(|c| {
            c.sort_unstable();
            (c[c.len() / 4], c[(c.len() * 3) / 4])
        })
        .collect();
    let top = (0..q).max_by_key(|&j| (quartiles[j].0, std::cmp::Reverse(j))).unwrap_or(0);
    let others = (0..q).filter(|&j| j != top).map(|j| quartiles[j].1).max().unwrap_or(0);
    quartiles[top].0 as f64 >= SEPARATION * others.max(1) as f64
}

#[cfg(test)]
mod tests {
    use super::super::testkit::{schedule, sig};
    use super::*;

    #[test]
    fn distinct_buckets_give_the_period_and_skip_set_up() {
        // Broadcast at set-up, then per step 4 allreduces and an allgather.
        let calls = schedule(
            &[sig(0, 1)],
            &[(sig(1, 4096), 10), (sig(1, 4096), 10), (sig(1, 4096), 10), (sig(1, 4096), 10), (sig(2, 2), 60)],
            20,
        );
        let p = find_period(&calls).unwrap();
        // The allreduces alone repeat at 1 within a step, but not across it.
        assert_eq!((p.length, p.start, p.end), (5, 1, 101));
    }

    #[test]
    fn identical_buckets_take_the_period_from_the_gaps() {
        // Four identical allreduces per step; 60 ms outside collectives before the first.
        let step: Vec<_> = [10, 10, 10, 60].iter().map(|&gap| (sig(1, 4096), gap)).collect();
        let calls = schedule(&[], &step, 20);
        assert_eq!(find_period(&calls).unwrap().length, 4);
    }

    #[test]
    fn evenly_spaced_identical_calls_are_one_call_per_step() {
        let calls = schedule(&[], &[(sig(1, 4096), 50)], 20);
        assert_eq!(find_period(&calls).unwrap().length, 1);
    }

    #[test]
    fn too_few_repeats_or_no_pattern_is_none() {
        let calls = schedule(&[], &[(sig(1, 1), 5), (sig(1, 2), 5), (sig(1, 3), 5)], 2);
        assert_eq!(find_period(&calls), None);
        let chaos: Vec<_> = (0..50).map(|i| (sig(1, i * 7919 % 101), 5)).collect();
        assert_eq!(find_period(&schedule(&[], &chaos, 1)), None);
    }
}
