//! The routing candidate set (Sec. 4): the smallest prefix of stages, by decreasing share,
//! whose cumulative share reaches τ_C; top-1 and top-2 are its first entries.

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Routing {
    pub set: Vec<usize>,
    pub top1: usize,
    pub top2: Vec<usize>,
}

/// Stage indices by decreasing value; equal values keep schema order, so the result is
/// deterministic.
pub fn ranked(values: &[f64]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..values.len()).collect();
    order.sort_by(|&a, &b| values[b].total_cmp(&values[a]));
    order
}

/// `shares` sum to 1 up to round-off, so the whole list always reaches a threshold ≤ 1.
pub fn route(shares: &[f64], threshold: f64) -> Routing {
    let order = ranked(shares);
    let mut cumulative = 0.0;
    let mut set = Vec::new();
    for &s in &order {
        set.push(s);
        cumulative += shares[s];
        if cumulative >= threshold {
            break;
        }
    }
    Routing { top1: order[0], top2: order.iter().copied().take(2).collect(), set }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn smallest_prefix_reaching_the_threshold() {
        let r = route(&[0.43, 0.1, 0.4, 0.07], 0.8);
        assert_eq!(r, Routing { set: vec![0, 2], top1: 0, top2: vec![0, 2] });
        assert_eq!(route(&[0.3, 0.3, 0.3, 0.1], 0.8).set, [0, 1, 2]);
        assert_eq!(route(&[1.0], 0.8), Routing { set: vec![0], top1: 0, top2: vec![0] });
        // Ties keep schema order.
        assert_eq!(ranked(&[0.5, 0.5]), [0, 1]);
    }
}
