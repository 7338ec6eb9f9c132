//! How likely a count is by luck alone: the upper tail of the binomial distribution.

/// The chance that `trials` independent draws, each a hit with chance `p`, give `hits` or
/// more. Summed in log space, so thousands of trials neither underflow nor overflow.
pub fn at_least(hits: usize, trials: usize, p: f64) -> f64 {
    if hits == 0 {
        return 1.0;
    }
    if hits > trials || p <= 0.0 {
        return 0.0;
    }
    if p >= 1.0 {
        return 1.0;
    }
    let (ln_p, ln_q) = (p.ln(), (1.0 - p).ln());
    // ln of C(trials, i) p^i q^(trials-i), from i = 0 up, each term from the one before;
    // those from `hits` up are summed.
    let mut ln_term = trials as f64 * ln_q;
    let mut terms = Vec::with_capacity(trials - hits + 1);
    for i in 1..=trials {
        ln_term += ((trials - i + 1) as f64 / i as f64).ln() + ln_p - ln_q;
        if i >= hits {
            terms.push(ln_term);
        }
    }
    let top = terms.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (top + terms.iter().map(|t| (t - top).exp()).sum::<f64>().ln()).exp().min(1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-12 + 1e-9 * b.abs()
    }

    #[test]
    fn small_tails_match_their_sums() {
        // Two ranks, four steps: 3 or more of 4 is 5/16, all 4 is 1/16.
        assert!(close(at_least(3, 4, 0.5), 5.0 / 16.0));
        assert!(close(at_least(4, 4, 0.5), 1.0 / 16.0));
        assert!(close(at_least(7, 7, 0.5), 1.0 / 128.0));
        // One of eight ranks in 2 of 3 steps: 3 (1/8)^2 (7/8) + (1/8)^3.
        assert!(close(at_least(2, 3, 0.125), 3.0 * 0.125f64.powi(2) * 0.875 + 0.125f64.powi(3)));
        assert_eq!(at_least(0, 5, 0.3), 1.0);
        assert_eq!(at_least(6, 5, 0.3), 0.0);
    }

    #[test]
    fn long_runs_stay_finite() {
        // Half of 10,000 fair draws is about even odds; nine tenths is never luck.
        let half = at_least(5_000, 10_000, 0.5);
        assert!((0.49..0.51).contains(&half), "{half}");
        let most = at_least(9_000, 10_000, 0.5);
        assert!((0.0..1e-300).contains(&most), "{most}");
    }
}
