//! Synthetic NCCL schedules for the tests: ranks in lockstep through blocking collectives.

use super::{Call, RankCalls, Signature};
use crate::core::log::nccl_op::NcclOp;

const MS: u64 = 1_000_000;
/// Time a collective takes once its last rank has arrived.
const CALL_MS: u64 = 1;

/// A float32 collective on `comm` (op allreduce unless `count` is small: allgather).
pub fn sig(comm: u64, count: u64) -> Signature {
    let op = if count < 16 { NcclOp::AllGather } else { NcclOp::AllReduce };
    Signature { comm_id: comm, op, count, dtype: 7 }
}

/// One rank: `set_up` calls, then `steps` times the calls of `step`, each followed by its
/// gap in ms.
pub fn schedule(set_up: &[Signature], step: &[(Signature, u64)], steps: usize) -> Vec<Call> {
    job(1, set_up, step, steps, |_, _, _| 0).remove(0).calls
}

/// `ranks` ranks running `step` (as in [`schedule`]); `extra(rank, step, call)` ms are added
/// to the gap before the step's call on that rank. Every collective returns on all ranks
/// [`CALL_MS`] after its last rank enters.
pub fn job(
    ranks: u32,
    set_up: &[Signature],
    step: &[(Signature, u64)],
    steps: usize,
    extra: impl Fn(u32, usize, usize) -> u64,
) -> Vec<RankCalls> {
    let mut out: Vec<RankCalls> = (0..ranks).map(|rank| RankCalls { rank, calls: Vec::new() }).collect();
    let mut seq = std::collections::BTreeMap::<u64, u64>::new();
    let mut now = vec![1_000 * MS; ranks as usize];
    let mut issue = |signature: Signature, gaps: &dyn Fn(u32) -> u64, out: &mut Vec<RankCalls>| {
        let s = seq.entry(signature.comm_id).or_default();
        *s += 1;
        let enters: Vec<u64> = (0..ranks).map(|r| now[r as usize] + gaps(r) * MS).collect();
        let exit = enters.iter().max().copied().unwrap_or(0) + CALL_MS * MS;
        for r in 0..ranks as usize {
            let key = (signature.comm_id, *s);
            out[r].calls.push(Call { signature, key, enter_ns: enters[r], exit_ns: exit });
            now[r] = exit;
        }
    };
    for &signature in set_up {
        issue(signature, &|_| 5, &mut out);
    }
    // The gap before a call is the previous call's gap in `step` (cyclically).
    for t in 0..steps {
        for (i, &(signature, _)) in step.iter().enumerate() {
            let before = step[(i + step.len() - 1) % step.len()].1;
            issue(signature, &|r| before + extra(r, t, i), &mut out);
        }
    }
    out
}
