//! L1 jitter windows (ARGUS App. B, "sliding-window ratio-gated jitter detection").
//!
//! Phase 1 (sensitivity gate): a window of `W` iterations slides one step at a time and
//! marks itself when `r = max/min` of its values exceeds `θ`; overlapping or touching marked
//! windows merge into intervals. Phase 2 (effective width): a spike much narrower than `W`
//! still marks at least `W` points, so each interval's baseline `b` is the median of every
//! point outside it, and the effective width is the longest run inside it of points above
//! `b · exceed_ratio`: the spike's own width, not the window's.
//!
//! Sliding max and min use monotone deques, so the whole scan is O(n).

use std::collections::VecDeque;

use crate::core::quantile::select_quantile;

#[derive(Clone, Debug, PartialEq)]
pub struct JitterParams {
    /// Window width `W` in iterations. Default 8: short enough that one slow step stands
    /// out against its neighbours, long enough to hold a few normal ones.
    pub window: usize,
    /// Ratio gate `θ` on `max/min` in a window. Default 1.5: ordinary iteration noise is a
    /// few percent, a GC pause or a congested collective is tens of percent or more.
    pub ratio_threshold: f64,
    /// A point "significantly exceeds" the baseline above `b · exceed_ratio`. Default 1.2.
    pub exceed_ratio: f64,
}

impl Default for JitterParams {
    fn default() -> Self {
        Self { window: 8, ratio_threshold: 1.5, exceed_ratio: 1.2 }
    }
}

/// One merged anomalous interval, indices into the series.
#[derive(Clone, Debug, PartialEq)]
pub struct JitterInterval {
    /// First index of the merged windows.
    pub start: usize,
    /// One past the last index.
    pub end: usize,
    /// The largest `max/min` of the windows merged here.
    pub max_ratio: f64,
    /// Median of the points outside the interval (of all points if none are outside).
    pub baseline: f64,
    /// First index of the longest run above `baseline · exceed_ratio`; `start` if none.
    pub effective_start: usize,
    /// Length of that run; 0 when the gate fired on a dip rather than a spike.
    pub effective_width: usize,
}

/// Jitter intervals of one rank's iteration times (positive, in any unit), in order.
/// A series shorter than the window has none.
pub fn jitter_intervals(times: &[f64], params: &JitterParams) -> Vec<JitterInterval> {
    let w = params.window.max(2);
    let n = times.len();
    if n < w {
        return Vec::new();
    }
    // Marked windows, merged on the fly: (start, end, max_ratio).
    let mut merged: Vec<(usize, usize, f64)> = Vec::new();
    let (mut maxq, mut minq) = (VecDeque::new(), VecDeque::new());
    for i in 0..n {
        while maxq.back().is_some_and(|&j| times[j] <= times[i]) {
            maxq.pop_back();
        }
        maxq.push_back(i);
        while minq.back().is_some_and(|&j| times[j] >= times[i]) {
            minq.pop_back();
        }
        minq.push_back(i);
        if i + 1 < w {
            continue;
        }
        let start = i + 1 - w;
        while maxq.front().is_some_and(|&j| j < start) {
            maxq.pop_front();
        }
        while minq.front().is_some_and(|&j| j < start) {
            minq.pop_front();
        }
        let (hi, lo) = (times[maxq[0]], times[minq[0]]);
        // A non-positive minimum is not a duration; call it unbounded jitter.
        let ratio = if lo > 0.0 { hi / lo } else { f64::INFINITY };
        if ratio > params.ratio_threshold {
            match merged.last_mut() {
                Some(last) if start <= last.1 => {
                    last.1 = i + 1;
                    last.2 = last.2.max(ratio);
                }
                _ => merged.push((start, i + 1, ratio)),
            }
        }
    }
    merged
        .into_iter()
        .map(|(start, end, max_ratio)| {
            let mut outside: Vec<f64> = times[..start].iter().chain(&times[end..]).copied().collect();
            if outside.is_empty() {
                outside = times.to_vec();
            }
            let baseline = select_quantile(&mut outside, 0.5);
            let limit = baseline * params.exceed_ratio;
            let (mut best, mut run) = ((start, 0), 0);
            for (i, &t) in times.iter().enumerate().take(end).skip(start) {
                run = if t > limit { run + 1 } else { 0 };
                if run > best.1 {
                    best = (i + 1 - run, run);
                }
            }
            JitterInterval { start, end, max_ratio, baseline, effective_start: best.0, effective_width: best.1 }
        })
        .collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::core::rng::SplitMix64;

    /// `n` iteration times around `base` with 1% Gaussian noise.
    pub(crate) fn noisy(seed: u64, n: usize, base: f64) -> Vec<f64> {
        let mut r = SplitMix64::new(seed);
        (0..n).map(|_| base * (1.0 + 0.01 * r.normal())).collect()
    }

    #[test]
    fn a_planted_spike_is_one_interval_with_its_own_width() {
        for seed in 0..20 {
            let mut t = noisy(seed, 200, 100.0);
            (120..123).for_each(|i| t[i] *= 3.0);
            let found = jitter_intervals(&t, &JitterParams::default());
            assert_eq!(found.len(), 1, "seed {seed}: {found:?}");
            let j = &found[0];
            // The gate smears the spike over every window touching it...
            assert_eq!((j.start, j.end), (113, 130));
            // ...and the baseline recovers exactly the three slow iterations.
            assert_eq!((j.effective_start, j.effective_width), (120, 3));
            assert!((j.baseline - 100.0).abs() < 1.0 && j.max_ratio > 2.5);
        }
    }

    #[test]
    fn steady_noise_is_quiet() {
        for seed in 0..50 {
            assert!(jitter_intervals(&noisy(seed, 500, 100.0), &JitterParams::default()).is_empty());
        }
    }

    #[test]
    fn two_spikes_far_apart_are_two_intervals_and_a_dip_has_no_width() {
        let mut t = noisy(1, 300, 50.0);
        t[40] *= 2.0;
        t[200] *= 0.5;
        let found = jitter_intervals(&t, &JitterParams::default());
        assert_eq!(found.len(), 2, "{found:?}");
        assert_eq!((found[0].effective_start, found[0].effective_width), (40, 1));
        assert_eq!(found[1].effective_width, 0);
        assert!(jitter_intervals(&t[..5], &JitterParams::default()).is_empty());
    }

    #[test]
    fn deques_agree_with_brute_force_ratios() {
        let mut r = SplitMix64::new(3);
        let t: Vec<f64> = (0..300).map(|_| 1.0 + 2.0 * r.uniform()).collect();
        let p = JitterParams { window: 5, ratio_threshold: 2.5, exceed_ratio: 1.2 };
        let marked: Vec<usize> = (0..=t.len() - 5)
            .filter(|&k| {
                let w = &t[k..k + 5];
                w.iter().copied().fold(0.0, f64::max) / w.iter().copied().fold(f64::INFINITY, f64::min) > 2.5
            })
            .collect();
        let found = jitter_intervals(&t, &p);
        for k in 0..=t.len() - 5 {
            let covered = found.iter().any(|j| j.start <= k && k + 5 <= j.end);
            assert!(!marked.contains(&k) || covered, "window {k}");
        }
        assert!(!found.is_empty());
        assert!(found.iter().all(|j| marked.contains(&j.start) && marked.contains(&(j.end - 5))));
    }
}
