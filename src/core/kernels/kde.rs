//! KDE valley clustering of one (kernel, stream) series' durations (ARGUS §5.2).
//!
//! A kernel launched with different shapes runs at a few characteristic durations; ARGUS
//! finds them without being told how many there are: take `x = ln(duration)`, estimate the
//! density `f(x) = 1/n Σ K((x - x_i)/h)` with a Gaussian `K` and Scott's-rule bandwidth
//! `h = 1.06 σ n^(-1/5)` (the paper's form, σ the sample standard deviation of the logs),
//! and cut at the density's local minima (valleys). Two filters drop false valleys:
//! cluster size (both sides of a valley must hold enough samples) and spacing (adjacent
//! boundaries must be far enough apart), plus a valley-depth filter of ours. Each cluster is summarised by count, p50 and p99,
//! which is all L3 needs to rebuild its CDF.
//!
//! Cost is O(n log m + G·J) for n samples, m candidate valleys (a handful), G grid points
//! and J = ⌈4h/Δ⌉ kernel taps: the samples are linearly binned onto the grid (Wand 1994) and
//! the density is the binned counts convolved with the truncated kernel, so n never
//! multiplies G; cluster quantiles come from selection, not sorting. Memory is O(n + G);
//! bound n per window with [`super::reservoir::Reservoir`]. Linear binning moves each
//! sample by less than one grid step Δ, which changes the density by O(Δ²/h²); with the
//! default grid that is far below the depth of any valley the filters keep.

use crate::core::quantile::select_quantile;

/// How the density is evaluated and which valleys survive.
#[derive(Clone, Debug, PartialEq)]
pub struct KdeParams {
    /// Grid points the density is evaluated on. 512 resolves valleys between modes a few
    /// percent apart while keeping the convolution cheap.
    pub grid_points: usize,
    /// The grid reaches this many bandwidths past the smallest and largest log-duration,
    /// so the density has fallen close to zero at both ends. Default 3.
    pub grid_pad_bandwidths: f64,
    /// Cluster-size filter: each side of a kept valley holds at least this fraction of the
    /// samples. Default 0.02, so a noise bump of a few stray launches is not a mode.
    pub min_cluster_fraction: f64,
    /// Cluster-size filter: and at least this many samples. Default 10, because a p99 of
    /// fewer samples is just the maximum.
    pub min_cluster_count: usize,
    /// Spacing filter: adjacent kept boundaries are at least this far apart in ln(duration),
    /// i.e. a ratio of `exp(0.15) ≈ 1.16` in duration. Default 0.15: pseudo-valleys inside
    /// one peak sit closer than that.
    pub min_valley_spacing: f64,
    /// Depth filter (ours, not the paper's): a valley is kept only if its density is at
    /// most this fraction of the lower of the two peaks flanking it. Default 0.7. Scott's
    /// bandwidth is close to optimal for one Gaussian-shaped mode, so sampling noise leaves
    /// shallow dips inside a single mode; when such a dip splits the mode into two large
    /// halves more than the spacing apart, neither paper filter rejects it.
    pub max_valley_depth: f64,
}

impl Default for KdeParams {
    fn default() -> Self {
        Self {
            grid_points: 512,
            grid_pad_bandwidths: 3.0,
            min_cluster_fraction: 0.02,
            min_cluster_count: 10,
            min_valley_spacing: 0.15,
            max_valley_depth: 0.7,
        }
    }
}

/// One mode of a series: how many launches fell in it and how long they took.
#[derive(Clone, Debug, PartialEq)]
pub struct Cluster {
    /// Launches in the cluster (scaled to all launches seen when the series was sampled).
    pub count: u64,
    /// Median duration, in the caller's unit.
    pub p50: f64,
    /// 99th-percentile duration (type-7 interpolation).
    pub p99: f64,
    /// Mean of ln(duration): the moment estimate of the log-normal location.
    pub log_mean: f64,
    /// Sample standard deviation of ln(duration): the moment estimate of the log-normal
    /// scale. L3 rebuilds the CDF from p50/p99 as the paper does (that is what a compact
    /// summary carries); these two let a reader check that fit, since for a log-normal
    /// cluster `(ln p99 - ln p50) / 2.326 ≈ log_sd` and `ln p50 ≈ log_mean`.
    pub log_sd: f64,
}

/// Clusters of one series, ascending by duration. Non-finite and non-positive durations
/// are dropped, since ln is undefined there (a zero-length record is a clock artifact).
pub fn cluster_durations(durations: &[f64], params: &KdeParams) -> Vec<Cluster> {
    let kept: Vec<f64> = durations.iter().copied().filter(|d| d.is_finite() && *d > 0.0).collect();
    let logs: Vec<f64> = kept.iter().map(|d| d.ln()).collect();
    let n = logs.len();
    if n == 0 {
        return Vec::new();
    }
    let mean = logs.iter().sum::<f64>() / n as f64;
    let sd = sample_sd(&logs, mean);
    let boundaries = if sd > 0.0 { valleys(&logs, sd, params) } else { Vec::new() };
    let mut segments: Vec<Vec<f64>> = vec![Vec::new(); boundaries.len() + 1];
    for (&d, &x) in kept.iter().zip(&logs) {
        segments[boundaries.partition_point(|b| *b < x)].push(d);
    }
    segments.into_iter().filter(|s| !s.is_empty()).map(summarize).collect()
}

fn sample_sd(xs: &[f64], mean: f64) -> f64 {
    if xs.len() < 2 {
        return 0.0;
    }
    (xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (xs.len() - 1) as f64).sqrt()
}

fn summarize(mut d: Vec<f64>) -> Cluster {
    let logs: Vec<f64> = d.iter().map(|x| x.ln()).collect();
    let log_mean = logs.iter().sum::<f64>() / logs.len() as f64;
    let log_sd = sample_sd(&logs, log_mean);
    // Quantiles of the durations themselves, as the paper reports them: interpolating in
    // linear space, not log space.
    Cluster {
        count: d.len() as u64,
        p50: select_quantile(&mut d, 0.5),
        p99: select_quantile(&mut d, 0.99),
        log_mean,
        log_sd,
    }
}

/// A candidate boundary: where it is in ln(duration) and how dense the valley is there
/// (the shallower of two competing valleys, the higher density, is the one dropped).
#[derive(Clone, Copy)]
struct Valley {
    at: usize,
    x: f64,
    density: f64,
}

/// The kept cluster boundaries in ln(duration), ascending.
fn valleys(logs: &[f64], sd: f64, params: &KdeParams) -> Vec<f64> {
    let n = logs.len();
    let g = params.grid_points.max(3);
    let h = 1.06 * sd * (n as f64).powf(-0.2);
    let (min, max) = logs.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &x| (a.min(x), b.max(x)));
    let lo = min - params.grid_pad_bandwidths * h;
    let step = (max + params.grid_pad_bandwidths * h - lo) / (g - 1) as f64;

    // Linear binning: each sample splits its unit weight between the two nearest points.
    let mut bins = vec![0.0; g];
    for &x in logs {
        let pos = ((x - lo) / step).clamp(0.0, (g - 1) as f64);
        let i = (pos.floor() as usize).min(g - 2);
        let frac = pos - i as f64;
        bins[i] += 1.0 - frac;
        bins[i + 1] += frac;
    }
    // Convolve with the Gaussian truncated at 4h (its mass beyond is 6e-5 of the total).
    // The density is left unnormalised: valleys and their order do not depend on scale.
    let taps = ((4.0 * h / step).ceil() as usize).min(g - 1);
    let kernel: Vec<f64> = (0..=taps).map(|j| (-0.5 * (j as f64 * step / h).powi(2)).exp()).collect();
    let density: Vec<f64> = (0..g)
        .map(|i| {
            let (a, b) = (i.saturating_sub(taps), (i + taps).min(g - 1));
            (a..=b).map(|k| bins[k] * kernel[k.abs_diff(i)]).sum()
        })
        .collect();

    // Local minima; a flat bottom (a run of equal values, e.g. exact zeros between far
    // apart modes) is one valley at its middle, and only if the density rises after it.
    let mut candidates = Vec::new();
    let mut i = 1;
    while i + 1 < g {
        if density[i] < density[i - 1] {
            let mut k = i;
            while k + 1 < g && density[k + 1] == density[i] {
                k += 1;
            }
            if k + 1 < g && density[k + 1] > density[i] {
                candidates.push(Valley { at: (i + k) / 2, x: lo + step * (i + k) as f64 / 2.0, density: density[i] });
            }
            i = k + 1;
        } else {
            i += 1;
        }
    }
    if candidates.is_empty() {
        return Vec::new();
    }

    // Cluster-size filter: while the smallest segment is too small, drop the shallower of
    // the valleys that bound it, merging it into its neighbour.
    let need = params.min_cluster_count.max((params.min_cluster_fraction * n as f64).ceil() as usize);
    let mut counts = vec![0usize; candidates.len() + 1];
    for &x in logs {
        counts[candidates.partition_point(|v| v.x < x)] += 1;
    }
    while !candidates.is_empty() {
        let (s, &c) = counts.iter().enumerate().min_by_key(|(_, c)| **c).expect("segments");
        if c >= need {
            break;
        }
        let drop = if s == 0 {
            0
        } else if s == candidates.len() || candidates[s - 1].density > candidates[s].density {
            s - 1
        } else {
            s
        };
        candidates.remove(drop);
        let merged = counts.remove(drop + 1);
        counts[drop] += merged;
    }

    // Depth filter: while the shallowest valley is above `max_valley_depth` of the lower of
    // its flanking peaks, drop it. Dropping a valley only widens its neighbours' flanks,
    // so their ratios can only fall and one pass from the worst down is enough.
    loop {
        let worst = (0..candidates.len())
            .map(|j| {
                let from = if j == 0 { 0 } else { candidates[j - 1].at };
                let to = candidates.get(j + 1).map_or(g - 1, |v| v.at);
                let at = candidates[j].at;
                let left = density[from..=at].iter().fold(0.0, |a: f64, b| a.max(*b));
                let right = density[at..=to].iter().fold(0.0, |a: f64, b| a.max(*b));
                (j, candidates[j].density / left.min(right))
            })
            .max_by(|a, b| a.1.total_cmp(&b.1));
        match worst {
            Some((j, ratio)) if ratio > params.max_valley_depth => {
                candidates.remove(j);
            }
            _ => break,
        }
    }

    // Spacing filter: while the closest pair of boundaries is too close, drop the
    // shallower one. Merging only grows segments, so the size filter still holds after.
    loop {
        let closest = (0..candidates.len().saturating_sub(1))
            .map(|j| (j, candidates[j + 1].x - candidates[j].x))
            .min_by(|a, b| a.1.total_cmp(&b.1));
        match closest {
            Some((j, gap)) if gap < params.min_valley_spacing => {
                let drop = if candidates[j].density >= candidates[j + 1].density { j } else { j + 1 };
                candidates.remove(drop);
            }
            _ => break,
        }
    }
    candidates.into_iter().map(|v| v.x).collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::core::rng::SplitMix64;

    /// Durations from a log-normal mixture: `(weight, median, log-sd)` per mode.
    pub(crate) fn lognormal_mix(seed: u64, n: usize, modes: &[(f64, f64, f64)]) -> Vec<f64> {
        let mut r = SplitMix64::new(seed);
        let total: f64 = modes.iter().map(|m| m.0).sum();
        (0..n)
            .map(|_| {
                let mut u = r.uniform() * total;
                let m = modes.iter().find(|m| {
                    u -= m.0;
                    u < 0.0
                });
                let &(_, median, s) = m.unwrap_or(&modes[modes.len() - 1]);
                median * (s * r.normal()).exp()
            })
            .collect()
    }

    fn close(a: f64, b: f64, rel: f64) -> bool {
        (a - b).abs() <= rel * b.abs()
    }

    #[test]
    fn unimodal_is_one_cluster_over_many_seeds() {
        for seed in 0..40 {
            let d = lognormal_mix(seed, 3000, &[(1.0, 20.0, 0.3)]);
            let c = cluster_durations(&d, &KdeParams::default());
            assert_eq!(c.len(), 1, "seed {seed}: {c:?}");
            assert_eq!(c[0].count, 3000);
            assert!(close(c[0].p50, 20.0, 0.05));
            assert!(close(c[0].log_sd, 0.3, 0.1));
            assert!(close((c[0].p99 / c[0].p50).ln() / 2.326, 0.3, 0.15));
        }
    }

    #[test]
    fn bimodal_is_two_clusters_with_the_right_medians_and_shares() {
        for seed in 0..20 {
            let d = lognormal_mix(seed, 4000, &[(0.6, 10.0, 0.1), (0.4, 40.0, 0.1)]);
            let c = cluster_durations(&d, &KdeParams::default());
            assert_eq!(c.len(), 2, "seed {seed}: {c:?}");
            assert!(close(c[0].p50, 10.0, 0.03) && close(c[1].p50, 40.0, 0.03), "{c:?}");
            assert!(close(c[0].count as f64, 2400.0, 0.06), "{c:?}");
            assert_eq!(c[0].count + c[1].count, 4000);
            assert!(c.iter().all(|k| close(k.log_sd, 0.1, 0.15) && k.p99 > k.p50));
        }
    }

    #[test]
    fn trimodal_is_three_clusters() {
        for seed in 0..20 {
            let d = lognormal_mix(seed, 6000, &[(0.5, 10.0, 0.08), (0.3, 40.0, 0.08), (0.2, 160.0, 0.08)]);
            let c = cluster_durations(&d, &KdeParams::default());
            assert_eq!(c.len(), 3, "seed {seed}: {c:?}");
            for (k, m) in c.iter().zip([10.0, 40.0, 160.0]) {
                assert!(close(k.p50, m, 0.03), "{c:?}");
            }
        }
    }

    #[test]
    fn a_few_stray_launches_are_not_a_mode() {
        // 0.5% of launches at 5x: below the 2% size floor, so they fold into the main mode.
        let d = lognormal_mix(3, 4000, &[(0.995, 10.0, 0.1), (0.005, 50.0, 0.05)]);
        assert_eq!(cluster_durations(&d, &KdeParams::default()).len(), 1);
        // With the floor lowered below their share they are a mode of their own.
        let loose = KdeParams { min_cluster_fraction: 0.001, min_cluster_count: 5, ..KdeParams::default() };
        assert_eq!(cluster_durations(&d, &loose).len(), 2);
    }

    #[test]
    fn spacing_filter_merges_modes_closer_than_the_spacing() {
        let d = lognormal_mix(5, 8000, &[(0.5, 10.0, 0.02), (0.5, 11.0, 0.02)]);
        assert_eq!(cluster_durations(&d, &KdeParams::default()).len(), 2);
        // Three modes 10% apart give two boundaries ln(1.1) ≈ 0.095 apart: closer than the
        // default spacing, so the shallower goes; a tighter spacing keeps both.
        let three = lognormal_mix(5, 9000, &[(0.34, 10.0, 0.02), (0.33, 11.0, 0.02), (0.33, 12.1, 0.02)]);
        assert_eq!(cluster_durations(&three, &KdeParams::default()).len(), 2);
        let tight = KdeParams { min_valley_spacing: 0.05, ..KdeParams::default() };
        assert_eq!(cluster_durations(&three, &tight).len(), 3);
    }

    #[test]
    fn degenerate_inputs() {
        assert!(cluster_durations(&[], &KdeParams::default()).is_empty());
        assert!(cluster_durations(&[0.0, -1.0, f64::NAN], &KdeParams::default()).is_empty());
        let c = cluster_durations(&[5.0; 100], &KdeParams::default());
        assert_eq!(c.len(), 1);
        assert_eq!((c[0].count, c[0].p50, c[0].p99), (100, 5.0, 5.0));
        assert!(c[0].log_sd < 1e-12);
        assert_eq!(cluster_durations(&[3.0], &KdeParams::default())[0].count, 1);
    }
}
