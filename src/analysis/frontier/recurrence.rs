//! The frontier recurrence of one aligned step (eq. 1) and its slack form (eq. 3).
//!
//! A step is an R×S matrix of non-negative stage durations, row-major: rank `r`'s stage
//! `s` at `r * stages + s`. Durations are rank-local clock differences, so the recurrence
//! needs step-index agreement between ranks, never synchronized clocks.

/// Rank-local prefixes P_{r,s} = Σ_{j≤s} d_{r,j}, row by row.
pub fn prefixes_into(durations: &[f64], stages: usize, prefixes: &mut [f64]) {
    for (d, p) in durations.chunks_exact(stages).zip(prefixes.chunks_exact_mut(stages)) {
        let mut sum = 0.0;
        for (p, d) in p.iter_mut().zip(d) {
            sum += d;
            *p = sum;
        }
    }
}

/// F_s = max_r P_{r,s} and its advances a_s = F_s − F_{s−1}, F_0 = 0.
#[derive(Clone, Debug, PartialEq)]
pub struct StepFrontier {
    pub frontier: Vec<f64>,
    pub advances: Vec<f64>,
}

impl StepFrontier {
    /// F_S: the step's exposed time, the largest rank-local step total.
    pub fn exposed(&self) -> f64 {
        self.frontier.last().copied().unwrap_or(0.0)
    }
}

/// Eq. 1 over one step.
pub fn step_frontier(durations: &[f64], stages: usize) -> StepFrontier {
    let mut prefixes = vec![0.0; durations.len()];
    prefixes_into(durations, stages, &mut prefixes);
    let mut frontier = vec![0.0; stages];
    for row in prefixes.chunks_exact(stages) {
        for (f, p) in frontier.iter_mut().zip(row) {
            *f = f64::max(*f, *p);
        }
    }
    let advances = advances_of(&frontier);
    StepFrontier { frontier, advances }
}

/// Telescoping differences of a frontier (or any nondecreasing prefix maximum).
pub fn advances_of(frontier: &[f64]) -> Vec<f64> {
    let mut previous = 0.0;
    frontier
        .iter()
        .map(|&f| {
            let a = f - previous;
            previous = f;
            a
        })
        .collect()
}

/// The advances again, through the slack identity (eq. 3): a_s = max_r (d_{r,s} − λ_{r,s})
/// with λ_{r,s} = F_{s−1} − P_{r,s−1}, the time rank r owes the group at boundary s−1.
/// Equal to `step_frontier(..).advances` up to round-off; it shows why a rank that waited
/// for an upstream straggler is not charged again downstream.
pub fn slack_advances(durations: &[f64], stages: usize) -> Vec<f64> {
    let ranks = durations.len() / stages;
    let mut advances = vec![f64::NEG_INFINITY; stages];
    let mut prefix = vec![0.0; ranks];
    let mut frontier_before = 0.0;
    for (s, advance) in advances.iter_mut().enumerate() {
        for (r, p) in prefix.iter_mut().enumerate() {
            let slack = frontier_before - *p;
            let d = durations[r * stages + s];
            *advance = advance.max(d - slack);
            *p += d;
        }
        frontier_before = prefix.iter().copied().fold(0.0, f64::max);
    }
    advances
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figure_1_charges_the_upstream_data_stall_once() {
        let d = [6.0, 1.0, 1.2, 1.0, 1.0, 6.2, 1.1, 1.0, 6.0];
        let step = step_frontier(&d, 3);
        for (got, want) in step.advances.iter().zip([6.0, 1.0, 1.2]) {
            assert!((got - want).abs() < 1e-12, "{:?}", step.advances);
        }
        assert!((step.exposed() - 8.2).abs() < 1e-12);
        for (a, b) in slack_advances(&d, 3).iter().zip(&step.advances) {
            assert!((a - b).abs() < 1e-12);
        }
    }
}
