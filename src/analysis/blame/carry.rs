//! Lateness an asynchronous host carries from one collective to the next.
//!
//! A blocking NCCL call absorbs its rank's lateness: every member leaves together, and
//! the next call's lateness is only what the host lost since. A launch does not: a host
//! that fell 20 ms behind in data launches every one of its step's allreduces 20 ms late
//! (until a synchronization with the device lets its peers' hosts fall back to it), and
//! each of them makes the peers' kernels wait again. The segment before the second
//! allreduce shows nothing new, so without a memory of the first its wait would go to the
//! stage the launch came from (backward), not to the stage that made the rank late.
//!
//! [`Carries`] remembers, per rank and communicator, how late the rank's host launched its
//! previous collective there and where that lateness was charged. The part of a new
//! lateness its own segment does not explain, up to the carried one, is charged the same
//! way; the rest is new. A rank first to arrive carries nothing further.

/// The most stage spans a carried charge keeps: a rank late for many steps would otherwise
/// gather every step's spans, each with a vanishing weight.
const MAX_SPANS: usize = 16;

/// One rank's host lateness at its last collective on a communicator, and the stage spans
/// (indexes into its timeline's spans) it was charged to, weights summing to 1.
#[derive(Clone, Debug, Default, PartialEq)]
pub(super) struct Carried {
    pub late_s: f64,
    pub spans: Vec<(usize, f64)>,
}

/// Every rank's carried lateness, per communicator (collectives come in sequence order per
/// communicator, which is time order there).
pub(super) struct Carries {
    per_rank: Vec<Vec<(u64, Carried)>>,
}

impl Carries {
    pub fn new(ranks: usize) -> Carries {
        Carries { per_rank: vec![Vec::new(); ranks] }
    }

    /// What `rank` carries on `comm` into its next collective there, and forgets it.
    pub fn take(&mut self, rank: usize, comm: u64) -> Option<Carried> {
        let list = self.per_rank.get_mut(rank)?;
        let at = list.iter().position(|(c, _)| *c == comm)?;
        Some(list.swap_remove(at).1)
    }

    /// `rank` leaves its collective on `comm` late by `carried.late_s`, charged as
    /// `carried.spans` say.
    pub fn put(&mut self, rank: usize, comm: u64, carried: Carried) {
        if let Some(list) = self.per_rank.get_mut(rank) {
            list.push((comm, carried));
        }
    }
}

/// How much of a host lateness of `late_s` was carried in, as a share from 0 to 1: the
/// part of it the segment before the launch does not explain (`unexplained_s`), up to
/// what the previous collective left (`carried_s`). A synchronization in between that let
/// the peers fall back shortens the lateness itself, so nothing is left to inherit.
pub(super) fn inherited_share(carried_s: f64, unexplained_s: f64, late_s: f64) -> f64 {
    if late_s <= 0.0 {
        return 0.0;
    }
    (carried_s.min(unexplained_s).max(0.0) / late_s).clamp(0.0, 1.0)
}

/// `share` of `carried` and the rest of `new`, both normalized, as one normalized charge
/// of at most [`MAX_SPANS`] spans (the heaviest).
pub(super) fn blend(carried: &[(usize, f64)], share: f64, new: &[(usize, f64)]) -> Vec<(usize, f64)> {
    let mut out: Vec<(usize, f64)> = Vec::with_capacity(carried.len() + new.len());
    for (list, weight) in [(carried, share), (new, 1.0 - share)] {
        if weight <= 0.0 {
            continue;
        }
        for &(span, w) in list {
            match out.iter_mut().find(|(s, _)| *s == span) {
                Some((_, sum)) => *sum += w * weight,
                None => out.push((span, w * weight)),
            }
        }
    }
    out.retain(|&(_, w)| w > 0.0);
    if out.len() > MAX_SPANS {
        out.sort_by(|a, b| b.1.total_cmp(&a.1));
        out.truncate(MAX_SPANS);
    }
    normalized(out)
}

/// `spans` with weights scaled to sum to 1 (empty when they sum to nothing).
pub(super) fn normalized(mut spans: Vec<(usize, f64)>) -> Vec<(usize, f64)> {
    let total: f64 = spans.iter().map(|&(_, w)| w).sum();
    if total <= 0.0 {
        return Vec::new();
    }
    for (_, w) in &mut spans {
        *w /= total;
    }
    spans
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_the_segment_does_not_explain_is_inherited_up_to_the_carried() {
        assert_eq!(inherited_share(0.020, 0.020, 0.020), 1.0);
        assert_eq!(inherited_share(0.030, 0.020, 0.020), 1.0);
        assert!((inherited_share(0.005, 0.020, 0.020) - 0.25).abs() < 1e-12);
        assert!((inherited_share(0.020, 0.006, 0.008) - 0.75).abs() < 1e-12);
        assert_eq!(inherited_share(0.008, 0.0, 0.005), 0.0, "a new delay explains it all");
        assert_eq!(inherited_share(0.0, 0.020, 0.020), 0.0);
        assert_eq!(inherited_share(0.010, 0.010, 0.0), 0.0);
    }

    #[test]
    fn a_blend_keeps_the_heaviest_spans_and_sums_to_one() {
        let carried: Vec<(usize, f64)> = (0..20).map(|i| (i, 1.0 / 20.0)).collect();
        let b = blend(&carried, 0.5, &[(3, 1.0)]);
        assert_eq!(b.len(), MAX_SPANS);
        assert!((b.iter().map(|&(_, w)| w).sum::<f64>() - 1.0).abs() < 1e-12);
        let three = b.iter().find(|&&(s, _)| s == 3).unwrap().1;
        assert!(b.iter().all(|&(s, w)| s == 3 || w < three), "{b:?}");
        assert_eq!(blend(&[(1, 1.0)], 1.0, &[(2, 1.0)]), vec![(1, 1.0)]);
    }

    #[test]
    fn a_carry_is_per_rank_and_communicator_and_taken_once() {
        let mut c = Carries::new(2);
        c.put(1, 7, Carried { late_s: 0.02, spans: vec![(4, 1.0)] });
        assert_eq!(c.take(1, 8), None);
        assert_eq!(c.take(0, 7), None);
        assert_eq!(c.take(1, 7).map(|k| k.late_s), Some(0.02));
        assert_eq!(c.take(1, 7), None);
        assert_eq!(c.take(5, 7), None);
    }
}
