//! The paper's theorems as properties (Sec. 3, Appendix D): Theorem 1 (advances telescope
//! to the exposed time), Propositions 1 and 2 (max overcounts by at most min(R, S), the
//! average undercounts by at most R, both bounds tight) and Proposition 3 (measurement-error
//! stability), on random matrices, through the streaming analyzer as well as eq. 1.

mod common;

use std::sync::Arc;

use proptest::prelude::*;
use stagefrontier::analysis::frontier::{slack_advances, step_frontier, Context, Schema, Window};

/// Round-off allowance relative to the magnitudes involved: far above f64's 1e-16, far
/// below any real disagreement.
const ROUND_OFF: f64 = 1e-12;

fn schema(stages: usize) -> Arc<Schema> {
    Arc::new(Schema::new((0..stages).map(|s| format!("s{s}")).collect()).unwrap())
}

/// A step: R×S durations in [0, 10) s, some exactly zero.
fn matrix() -> impl Strategy<Value = (usize, usize, Vec<f64>)> {
    (1usize..9, 1usize..8).prop_flat_map(|(r, s)| {
        let value = prop_oneof![1 => Just(0.0), 4 => 0.0..10.0f64];
        (Just(r), Just(s), prop::collection::vec(value, r * s))
    })
}

fn window_of(ranks: usize, stages: usize, steps: &[Vec<f64>]) -> Window {
    common::single_window(&schema(stages), ranks, steps, Context::default())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn theorem_1_advances_telescope_to_the_exposed_time((r, s, d) in matrix()) {
        let f = step_frontier(&d, s);
        let total: f64 = f.advances.iter().sum();
        let exposed = (0..r).map(|i| d[i * s..(i + 1) * s].iter().sum::<f64>()).fold(0.0, f64::max);
        prop_assert!((total - f.exposed()).abs() <= ROUND_OFF * (1.0 + exposed));
        prop_assert!((f.exposed() - exposed).abs() <= ROUND_OFF * (1.0 + exposed));
        prop_assert!(f.advances.iter().all(|&a| a >= 0.0), "advances are non-negative: {:?}", f.advances);
    }

    #[test]
    fn slack_identity_gives_the_same_advances((_r, s, d) in matrix()) {
        let f = step_frontier(&d, s);
        for (a, b) in slack_advances(&d, s).iter().zip(&f.advances) {
            prop_assert!((a - b).abs() <= ROUND_OFF * (1.0 + f.exposed()));
        }
    }

    #[test]
    fn theorem_1_holds_for_window_sums((r, s, first) in matrix(), seeds in prop::collection::vec(0.0..3.0f64, 1..6)) {
        // Further steps scale the first one's rows differently, so leaders move around.
        let mut steps = vec![first.clone()];
        for (k, seed) in seeds.iter().enumerate() {
            steps.push(first.iter().enumerate().map(|(i, v)| v * ((seed + (i * (k + 2)) as f64) % 3.0)).collect());
        }
        let w = window_of(r, s, &steps);
        let total: f64 = w.advances_s.iter().sum();
        prop_assert!((total - w.exposed_s).abs() <= ROUND_OFF * (1.0 + w.exposed_s));
        if let Some(shares) = &w.shares {
            prop_assert!((shares.iter().sum::<f64>() - 1.0).abs() <= ROUND_OFF);
        }
    }

    #[test]
    fn proposition_1_per_stage_max_overcounts_at_most_min_r_s((r, s, d) in matrix()) {
        let w = window_of(r, s, &[d]);
        let m: f64 = w.baselines.per_stage_max_s.iter().sum();
        let f = w.exposed_s;
        prop_assert!(f <= m + ROUND_OFF * (1.0 + m));
        prop_assert!(m <= r.min(s) as f64 * f + ROUND_OFF * (1.0 + m));
    }

    #[test]
    fn proposition_1_bound_is_tight(r in 1usize..9, s in 1usize..8, big_d in 0.001..100.0f64) {
        // D on min(R, S) distinct rank-stage pairs, no rank holding two.
        let mut d = vec![0.0; r * s];
        for i in 0..r.min(s) {
            d[i * s + i] = big_d;
        }
        let w = window_of(r, s, &[d]);
        let m: f64 = w.baselines.per_stage_max_s.iter().sum();
        prop_assert_eq!(w.exposed_s, big_d);
        prop_assert!((m - r.min(s) as f64 * big_d).abs() <= ROUND_OFF * m);
    }

    #[test]
    fn proposition_2_per_stage_average_undercounts_at_most_r((r, s, d) in matrix()) {
        let w = window_of(r, s, &[d]);
        let avg: f64 = w.baselines.per_stage_avg_s.iter().sum();
        let f = w.exposed_s;
        prop_assert!(f / r as f64 <= avg + ROUND_OFF * (1.0 + f));
        prop_assert!(avg <= f + ROUND_OFF * (1.0 + f));
    }

    #[test]
    fn proposition_2_bound_is_tight(r in 1usize..9, s in 1usize..8, row in prop::collection::vec(0.0..10.0f64, 7)) {
        // One rank carries all the time, every other rank none.
        let mut d = vec![0.0; r * s];
        d[..s].copy_from_slice(&row[..s]);
        let w = window_of(r, s, &[d]);
        let avg: f64 = w.baselines.per_stage_avg_s.iter().sum();
        prop_assert!((avg - w.exposed_s / r as f64).abs() <= ROUND_OFF * (1.0 + w.exposed_s));
    }

    #[test]
    fn proposition_3_errors_stay_within_s_eps_and_2s_minus_1_eps(
        (_r, s, d) in matrix(),
        eps in 0.0..0.5f64,
        noise in prop::collection::vec(-1.0..1.0f64, 56),
    ) {
        // |d' - d| <= eps, d' still non-negative (clamping only shrinks the error).
        let perturbed: Vec<f64> = d.iter().zip(noise.iter().cycle()).map(|(v, n)| (v + n * eps).max(0.0)).collect();
        let (f, g) = (step_frontier(&d, s), step_frontier(&perturbed, s));
        for k in 0..s {
            let boundary = (k + 1) as f64;
            let slack = ROUND_OFF * (1.0 + f.exposed() + g.exposed());
            prop_assert!((f.frontier[k] - g.frontier[k]).abs() <= boundary * eps + slack);
            prop_assert!((f.advances[k] - g.advances[k]).abs() <= (2.0 * boundary - 1.0) * eps + slack);
        }
    }

    /// Sec. 6.1's sync-wait fixture: one rank stalls `stall` in upstream stage u, every
    /// other rank waits those seconds in downstream stage v. The frontier charges u; the
    /// per-stage max picks v whenever v's own work is larger than u's.
    #[test]
    fn the_stall_is_charged_once_to_its_upstream_stage(
        r in 2usize..9,
        (s, u, v) in (2usize..7).prop_flat_map(|s| (Just(s), 0..s - 1)).prop_flat_map(|(s, u)| (Just(s), Just(u), u + 1..s)),
        base in prop::collection::vec(0.01..1.0f64, 6),
        late in 0usize..8,
    ) {
        let late = late % r;
        let stall = 1.0 + base.iter().sum::<f64>();
        let mut d = Vec::new();
        for rank in 0..r {
            let mut row = base[..s].to_vec();
            if rank == late { row[u] += stall } else { row[v] += stall }
            d.extend(row);
        }
        let w = window_of(r, s, &[d]);
        prop_assert_eq!(w.routing.as_ref().unwrap().top1, u);
        prop_assert_eq!(&w.leaders[u].ranks, &vec![late as u32]);
        prop_assert!((w.advances_s[v] - base[v]).abs() <= ROUND_OFF * stall, "the wait is not charged again");
        let max_top = stagefrontier::analysis::frontier::ranked(&w.baselines.per_stage_max_s)[0];
        if base[v] > base[u] {
            prop_assert_eq!(max_top, v);
        }
    }
}
