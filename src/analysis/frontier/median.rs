//! Medians over ranks, needed per stage and step for the lag, the rank spread and the
//! clipped baseline: 2·S selections of R values per step, a large part of the analyzer's
//! cost.

/// The median of every column of a row-major matrix with `stages` columns, into `out`: the
/// mean of the two middle values for an even count. Values must be non-negative and finite.
///
/// The IEEE bit patterns of non-negative floats sort like the floats, so the selection
/// compares integers, several times faster than a float comparator. `-0.0` is folded into
/// `+0.0` first (adding `0.0` does that) so it does not sort as the largest. The matrix is
/// transposed in one pass so each selection runs over contiguous memory.
pub(super) fn column_medians(matrix: &[f64], stages: usize, out: &mut Vec<f64>, scratch: &mut Vec<u64>) {
    let rows = matrix.len() / stages;
    scratch.clear();
    scratch.resize(matrix.len(), 0);
    for (r, row) in matrix.chunks_exact(stages).enumerate() {
        for (s, v) in row.iter().enumerate() {
            scratch[s * rows + r] = (v + 0.0).to_bits();
        }
    }
    out.clear();
    out.extend(scratch.chunks_exact_mut(rows).map(median_of_bits));
}

fn median_of_bits(values: &mut [u64]) -> f64 {
    let n = values.len();
    assert!(n > 0, "median of no values");
    let (lower, upper, _) = values.select_nth_unstable(n / 2);
    let upper = f64::from_bits(*upper);
    if n % 2 == 1 {
        return upper;
    }
    let lower_middle = lower.iter().copied().max().map_or(upper, f64::from_bits);
    (lower_middle + upper) / 2.0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn medians(matrix: &[f64], stages: usize) -> Vec<f64> {
        let mut out = Vec::new();
        column_medians(matrix, stages, &mut out, &mut Vec::new());
        out
    }

    #[test]
    fn odd_even_and_signed_zero() {
        // Two columns: medians of (3, 1, 2) and (0, -0.0, 5).
        assert_eq!(medians(&[3.0, 0.0, 1.0, -0.0, 2.0, 5.0], 2), [2.0, 0.0]);
        assert_eq!(medians(&[4.0, 1.0, 10.0, 2.0], 1), [3.0]);
        assert_eq!(medians(&[7.5], 1), [7.5]);
    }
}
