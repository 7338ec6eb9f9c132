//! Hangs the device holds, seen through NCCL's profiler alone (the CUDA door shut): NCCL
//! reports each channel of a collective's kernel as a KernelCh event, started when the
//! device begins that channel and stopped when it ends it, and the profiler door keeps the
//! newest start and stop of each rank in its live header (`core::log::kernel_ch`). When the
//! hosts agree (every rank launched the same collectives) and some ranks' devices began a
//! collective long ago and never finished it, a rank whose device finished everything it
//! began and began nothing since is holding them: its device is stuck behind other work,
//! which the profiler cannot name.

use crate::core::log::kernel_ch::KernelChKey;

/// What one rank's profiler door says of its device, with the time it is judged at on the
/// rank's clock (the reader's now for a live rank, its last heartbeat for one that is gone).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelChView {
    pub rank: i32,
    pub now_ns: Option<u64>,
    pub started: Option<(KernelChKey, u64)>,
    pub stopped: Option<KernelChKey>,
}

/// A rank whose device never began the collective its peers' devices wait in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelChStall {
    pub rank: i32,
    /// The collective the peers wait in (NCCL's function and per-function sequence).
    pub waited: KernelChKey,
    /// Ranks whose devices began it and have not finished it, and the longest since.
    pub waiting_ranks: Vec<i32>,
    pub waiting_ns: u64,
}

/// The stall, if the views show one: at least one rank's device began collective X more
/// than `threshold_ns` ago and has not finished it, and every other rank's device finished
/// the newest collective it began, which is not X, and began none for as long (it never
/// reached X, and makes no progress towards it); the first of those is named. `None` when
/// anything else is seen (a rank still inside another collective, one that began a
/// collective lately, one the profiler saw nothing of): nothing is certain then.
pub fn kernel_ch_stall(views: &[KernelChView], threshold_ns: u64) -> Option<KernelChStall> {
    let in_flight = |v: &KernelChView| {
        let (key, since) = v.started?;
        let waited = v.now_ns?.saturating_sub(since);
        (v.stopped != Some(key) && waited >= threshold_ns).then_some((key, waited))
    };
    let (waited, _) = views.iter().filter_map(in_flight).max_by_key(|&(k, w)| (w, std::cmp::Reverse(k.seq)))?;
    let mut waiting_ranks = Vec::new();
    let mut culprits = Vec::new();
    let mut waiting_ns = 0;
    for v in views {
        match in_flight(v) {
            Some((key, w)) if key == waited => {
                waiting_ranks.push(v.rank);
                waiting_ns = waiting_ns.max(w);
            }
            _ => {
                let (key, since) = v.started?;
                let idle = v.now_ns?.saturating_sub(since) >= threshold_ns;
                if key == waited || v.stopped != Some(key) || !idle {
                    return None;
                }
                culprits.push(v.rank);
            }
        }
    }
    let rank = *culprits.first()?;
    Some(KernelChStall { rank, waited, waiting_ranks, waiting_ns })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: u64 = 1_000_000_000;

    fn view(rank: i32, started_seq: u64, since_s: u64, stopped_seq: Option<u64>) -> KernelChView {
        let key = |seq| KernelChKey::new(0xf501_4290_478f_a6e3, 4, seq);
        KernelChView {
            rank,
            now_ns: Some(100 * SEC),
            started: Some((key(started_seq), since_s * SEC)),
            stopped: stopped_seq.map(key),
        }
    }

    #[test]
    fn the_rank_whose_device_never_began_the_collective_is_named() {
        // As on the H200 with the CUDA door shut: rank 1's device stuck behind a spin
        // kernel never began allreduce 5; rank 0's began it 30 s ago and waits.
        let views = [view(0, 5, 70, Some(4)), view(1, 4, 69, Some(4))];
        let stall = kernel_ch_stall(&views, SEC).expect("rank 1 holds it");
        assert_eq!(
            (stall.rank, stall.waited.seq, stall.waiting_ranks.clone(), stall.waiting_ns),
            (1, 5, vec![0], 30 * SEC)
        );
    }

    #[test]
    fn the_culprits_last_collective_may_be_another_function() {
        // Its device finished step 1's loss allgather and never began step 2's allreduce.
        let allgather = KernelChKey::new(0xf501_4290_478f_a6e3, 2, 1);
        let behind =
            KernelChView { started: Some((allgather, 60 * SEC)), stopped: Some(allgather), ..view(1, 0, 0, None) };
        let stall = kernel_ch_stall(&[view(0, 5, 70, Some(4)), behind, view(2, 5, 71, Some(4))], SEC).unwrap();
        assert_eq!((stall.rank, stall.waiting_ranks.clone()), (1, vec![0, 2]));
    }

    #[test]
    fn nothing_is_named_when_the_picture_is_not_whole() {
        // Everyone in it: a link or a wedged collective, nobody behind.
        assert_eq!(kernel_ch_stall(&[view(0, 5, 70, Some(4)), view(1, 5, 70, Some(4))], SEC), None);
        // Too recent to be stuck.
        assert_eq!(kernel_ch_stall(&[view(0, 5, 99, Some(4)), view(1, 4, 98, Some(4))], 2 * SEC), None);
        // A rank still inside the one before, or one that began a collective lately (its
        // device makes progress): not this picture.
        assert_eq!(kernel_ch_stall(&[view(0, 5, 70, Some(4)), view(1, 4, 69, Some(3))], SEC), None);
        assert_eq!(kernel_ch_stall(&[view(0, 5, 70, Some(4)), view(1, 4, 99, Some(4))], 2 * SEC), None);
        // A rank the profiler saw nothing of.
        let unseen = KernelChView { rank: 1, now_ns: Some(100 * SEC), started: None, stopped: None };
        assert_eq!(kernel_ch_stall(&[view(0, 5, 70, Some(4)), unseen], SEC), None);
    }
}
