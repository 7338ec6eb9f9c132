//! The period of one rank's collectives, from their signatures and the gaps between them.

use super::{Call, Signature};

/// Calls the period search reads (a window in the middle of the log, past set-up).
pub const SEARCH_CALLS: usize = 16_384;
/// Longest period tried, in calls.
pub const MAX_PERIOD: usize = 2048;
/// Multiples of the signature period tried when the gaps may say the step is longer.
const MAX_MULTIPLE: usize = 32;
/// Share of the window's calls that must repeat at the period: set-up, tear-down and an
/// odd evaluation call are allowed around it.
const MATCH_SHARE: f64 = 0.9;
/// The pattern must repeat at least this many times to be a step.
pub const MIN_REPEATS: usize = 3;
/// A multiple of the signature period is the step when the gap after one of its positions
/// is reliably longer than every other position's: its lower quartile over its upper
/// quartiles by this factor.
const SEPARATION: f64 = 1.5;

/// The step's length in calls, and the first call of a steady run of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Period {
    pub length: usize,
    pub start: usize,
}

/// The period of `calls` (one rank's collectives in enter order), or `None` when they do
/// not repeat [`MIN_REPEATS`] times.
pub fn find_period(calls: &[Call]) -> Option<Period> {
    let n = calls.len();
    let window = if n > SEARCH_CALLS { (n - SEARCH_CALLS) / 2..(n + SEARCH_CALLS) / 2 } else { 0..n };
    let signatures: Vec<Signature> = calls[window].iter().map(|c| c.signature).collect();
    let base = signature_period(&signatures)?;
    let start = steady_start(calls, base)?;
    let steady = &calls[start..calls.len().min(start + SEARCH_CALLS)];
    let length = (2..=MAX_MULTIPLE)
        .map(|k| k * base)
        .take_while(|&q| q <= MAX_PERIOD && steady.len() / q >= MIN_REPEATS)
        .find(|&q| separated(steady, q))
        .unwrap_or(base);
    Some(Period { length, start })
}

/// The shortest period at which `signatures` repeat, for [`MATCH_SHARE`] of them.
fn signature_period(signatures: &[Signature]) -> Option<usize> {
    let m = signatures.len();
    (1..=MAX_PERIOD.min(m / MIN_REPEATS)).find(|&p| {
        let allowed = ((m - p) as f64 * (1.0 - MATCH_SHARE)) as usize;
        let mut misses = 0;
        for i in 0..m - p {
            if signatures[i] != signatures[i + p] {
                misses += 1;
                if misses > allowed {
                    return false;
                }
            }
        }
        true
    })
}

/// The first call from which one whole period repeats exactly.
fn steady_start(calls: &[Call], p: usize) -> Option<usize> {
    let mut run = 0;
    for i in 0..calls.len().saturating_sub(p) {
        run = if calls[i].signature == calls[i + p].signature { run + 1 } else { 0 };
        if run == p {
            return Some(i + 1 - p);
        }
    }
    None
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
        assert_eq!(p, Period { length: 5, start: 1 });
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
