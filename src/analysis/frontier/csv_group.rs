//! A table's rows of some ranks only: the ranks that do the same work (one pipeline
//! stage), compared among themselves as the frontier assumes all ranks are.

use std::sync::Arc;

use super::{Row, StageTable};

impl StageTable {
    /// The rows of `ranks` (those of the table's world), with their device and overlap
    /// telemetry; the stage list stays the table's, and the waits stay taken out.
    pub fn only_ranks(&self, ranks: &[u32]) -> StageTable {
        let keep = |rank: u32| ranks.contains(&rank);
        let kept: Vec<usize> = (0..self.rows.len()).filter(|&i| keep(self.rows[i].rank)).collect();
        let rows = kept.iter().map(|&i| Row { ..self.rows[i] }).collect();
        let devices =
            if self.devices.is_empty() { Vec::new() } else { kept.iter().map(|&i| self.devices[i]).collect() };
        StageTable {
            schema: Arc::clone(&self.schema),
            world: self.world.iter().copied().filter(|&r| keep(r)).collect(),
            rows,
            overlaps: self.overlaps.iter().copied().filter(|((_, rank), _)| keep(*rank)).collect(),
            devices,
            attribution: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::from_durations;

    #[test]
    fn a_group_keeps_its_ranks_rows_and_the_stage_list() {
        let durations = (0..2u64).flat_map(|step| {
            (0..4u32).flat_map(move |rank| {
                [("fwd", 1.0 + f64::from(rank)), ("bwd", 2.0)].map(|(s, secs)| (step, rank, s.to_string(), secs))
            })
        });
        let table = from_durations(vec![0, 1, 2, 3], durations, [(0, 2, 0.5), (1, 1, 0.25)], []).unwrap();
        let group = table.only_ranks(&[1, 3]);
        assert_eq!(group.world(), [1, 3]);
        assert_eq!(group.schema().stages(), table.schema().stages());
        // fwd: ranks 1 and 3, two steps each.
        assert_eq!(group.stage_time_s(), vec![2.0 * (2.0 + 4.0), 2.0 * 2.0 * 2.0]);
        assert_eq!(group.overlaps, [((1, 1), 0.25)]);
    }
}
