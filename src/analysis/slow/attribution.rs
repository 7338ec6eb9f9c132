//! Which stage an L1 event lives in. L1 sees a rank's whole iteration time; the rank's
//! own stage vectors say which stage moved: the one whose typical duration inside the
//! event exceeds its typical duration outside by the most.
//!
//! In a synchronous job every rank's iterations slow down together when one rank is late,
//! and the others' extra time lands in the stage where they wait for it (usually the one
//! holding the gradient allreduce). So the stage named on the late rank is where the delay
//! arose, and the stage named on the others is where they waited: read together with L2.

use std::ops::Range;

use crate::core::quantile::select_quantile;

/// How a set of durations is summarized on each side.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Center {
    /// For a step regression: both sides are long, stable segments.
    Mean,
    /// For a jitter spike: the outside holds the rest of the run, noise and all.
    Median,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StageShift {
    pub stage: usize,
    /// Center inside minus center outside, in the durations' unit. Always positive.
    pub shift: f64,
}

/// `rows[i][s]` is stage `s`'s duration at iteration `i`. Compares the iterations in
/// `inside` with every iteration outside `excluded` and returns the stage whose center grew
/// the most, or `None` when no stage grew or either side is empty.
pub fn largest_shift(
    rows: &[Vec<f64>],
    inside: Range<usize>,
    excluded: Range<usize>,
    center: Center,
) -> Option<StageShift> {
    let outside: Vec<usize> = (0..rows.len()).filter(|i| !excluded.contains(i)).collect();
    let inside: Vec<usize> = inside.filter(|&i| i < rows.len()).collect();
    if inside.is_empty() || outside.is_empty() {
        return None;
    }
    let stages = rows[0].len();
    let summarize = |indices: &[usize], s: usize| {
        let mut values: Vec<f64> = indices.iter().map(|&i| rows[i][s]).collect();
        match center {
            Center::Mean => values.iter().sum::<f64>() / values.len() as f64,
            Center::Median => select_quantile(&mut values, 0.5),
        }
    };
    (0..stages)
        .map(|s| StageShift { stage: s, shift: summarize(&inside, s) - summarize(&outside, s) })
        .filter(|s| s.shift > 0.0)
        .max_by(|a, b| a.shift.total_cmp(&b.shift).then(b.stage.cmp(&a.stage)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(n: usize) -> Vec<Vec<f64>> {
        (0..n).map(|i| vec![20.0 + (i % 3) as f64, 30.0, 40.0 + (i % 2) as f64]).collect()
    }

    #[test]
    fn a_spike_names_the_stage_that_grew() {
        let mut r = rows(40);
        (20..23).for_each(|i| r[i][1] += 150.0);
        // The waiting stage grows a little too, by less.
        (20..23).for_each(|i| r[i][2] += 20.0);
        let found = largest_shift(&r, 20..23, 14..29, Center::Median).unwrap();
        assert_eq!(found.stage, 1);
        assert!((found.shift - 150.0).abs() < 1e-9, "{found:?}");
    }

    #[test]
    fn a_step_names_the_stage_whose_mean_rose() {
        let mut r = rows(60);
        (25..60).for_each(|i| r[i][0] += 80.0);
        let found = largest_shift(&r, 25..60, 25..60, Center::Mean).unwrap();
        assert_eq!(found.stage, 0);
        assert!((found.shift - 80.0).abs() < 1.0, "{found:?}");
    }

    #[test]
    fn nothing_grew_or_nothing_to_compare() {
        let r = rows(30);
        assert_eq!(largest_shift(&r, 0..0, 0..0, Center::Mean), None);
        assert_eq!(largest_shift(&r, 0..30, 0..30, Center::Mean), None);
        let mut down = rows(30);
        (10..30).for_each(|i| down[i].iter_mut().for_each(|d| *d *= 0.5));
        assert_eq!(largest_shift(&down, 10..30, 10..30, Center::Mean), None);
    }
}
