//! Collectives the ranks disagree on: the same (communicator, sequence number) issued with
//! another op, count, datatype, root or reduction. NCCL requires them to match; when they
//! do not, the job hangs or computes garbage, and nothing else tells which rank is wrong.

use std::collections::BTreeMap;

use serde::Serialize;

use super::facts::{Facts, WaitKind};
use super::RankInput;
use crate::core::comms::nccl_op::{dtype_name, redop_name, NcclOp};
use crate::core::log::records::NcclCall;

/// Mismatches listed per communicator; a sequence shifted by one extra call makes every
/// later collective differ, and the first few say it.
pub const LIST_AT_MOST: usize = 32;
/// Newest collective sequence numbers compared per communicator.
const WINDOW: u64 = 4096;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MismatchField {
    Op,
    Count,
    Dtype,
    /// Root of a broadcast or reduce.
    Root,
    Redop,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum FieldValue {
    Count(u64),
    Number(i32),
    Name(&'static str),
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Mismatch {
    pub comm_seq: u64,
    pub field: MismatchField,
    /// Each rank's value, by global rank.
    pub values: BTreeMap<i32, FieldValue>,
}

/// What one rank says collective #s was: from its record, or only the op of a call still
/// in flight.
#[derive(Clone, Copy)]
struct Entry {
    op: NcclOp,
    call: Option<NcclCall>,
}

fn named(name: &'static str, raw: i32) -> FieldValue {
    if name == "unknown" || name == "custom" {
        FieldValue::Number(raw)
    } else {
        FieldValue::Name(name)
    }
}

fn value(field: MismatchField, call: &NcclCall) -> Option<FieldValue> {
    let rooted = matches!(
        call.op.plain(),
        NcclOp::Broadcast | NcclOp::Bcast | NcclOp::Reduce | NcclOp::Gather | NcclOp::Scatter
    );
    let reduces = matches!(call.op.plain(), NcclOp::AllReduce | NcclOp::Reduce | NcclOp::ReduceScatter);
    match field {
        MismatchField::Op => Some(FieldValue::Name(call.op.name())),
        MismatchField::Count => Some(FieldValue::Count(call.count)),
        MismatchField::Dtype => Some(named(dtype_name(call.dtype), call.dtype)),
        MismatchField::Root => rooted.then_some(FieldValue::Number(call.peer)),
        MismatchField::Redop => reduces.then(|| named(redop_name(call.redop), call.redop)),
    }
}

/// The fields that differ among the ranks' entries for one collective. Once the op
/// differs the other fields compare different things, so only the op is reported.
fn differences(entries: &BTreeMap<i32, Entry>) -> Vec<(MismatchField, BTreeMap<i32, FieldValue>)> {
    // Most collectives agree in every field the comparison below could look at: say so
    // without building its maps (the exporter runs this on every scrape).
    let first = entries.values().next();
    let fields = |e: &Entry| e.call.map(|c| (c.count, c.dtype, c.peer, c.redop));
    let first_call = entries.values().find_map(fields);
    if entries.values().all(|e| Some(e.op) == first.map(|f| f.op) && e.call.is_none_or(|_| fields(e) == first_call)) {
        return Vec::new();
    }
    let differs = |values: &BTreeMap<i32, FieldValue>| values.values().any(|v| Some(v) != values.values().next());
    let ops: BTreeMap<i32, FieldValue> = entries.iter().map(|(&r, e)| (r, FieldValue::Name(e.op.name()))).collect();
    if differs(&ops) {
        return vec![(MismatchField::Op, ops)];
    }
    [MismatchField::Count, MismatchField::Dtype, MismatchField::Root, MismatchField::Redop]
        .into_iter()
        .filter_map(|field| {
            let values: BTreeMap<i32, FieldValue> =
                entries.iter().filter_map(|(&r, e)| Some((r, value(field, e.call.as_ref()?)?))).collect();
            differs(&values).then_some((field, values))
        })
        .collect()
}

/// What one rank says about its collectives: its records, and the op of each collective
/// still in flight as (communicator, sequence number, op).
pub struct Said<'a> {
    pub rank: i32,
    pub calls: &'a [NcclCall],
    pub in_flight: Vec<(u64, u64, NcclOp)>,
}

/// Per communicator: its mismatches, the first `LIST_AT_MOST` by sequence number, and how
/// many there are in all. One pass over the records, however many communicators.
pub fn find_in(ranks: &[Said]) -> BTreeMap<u64, (Vec<Mismatch>, usize)> {
    let collective = |c: &&NcclCall| c.comm_id != 0 && c.seq != 0 && c.op.is_collective();
    let mut newest: BTreeMap<u64, u64> = BTreeMap::new();
    for c in ranks.iter().flat_map(|r| r.calls.iter().filter(collective)) {
        let seq = newest.entry(c.comm_id).or_default();
        *seq = (*seq).max(c.seq);
    }
    let in_window = |comm_id: u64, seq: u64| seq + WINDOW > newest.get(&comm_id).copied().unwrap_or(0);
    let mut by_seq: BTreeMap<(u64, u64), BTreeMap<i32, Entry>> = BTreeMap::new();
    for r in ranks {
        for c in r.calls.iter().filter(collective).filter(|c| in_window(c.comm_id, c.seq)) {
            by_seq.entry((c.comm_id, c.seq)).or_default().entry(r.rank).or_insert(Entry { op: c.op, call: Some(*c) });
        }
        // A call with a record already says more than its op.
        for &(comm_id, seq, op) in &r.in_flight {
            by_seq.entry((comm_id, seq)).or_default().entry(r.rank).or_insert(Entry { op, call: None });
        }
    }
    let mut found: BTreeMap<u64, (Vec<Mismatch>, usize)> = BTreeMap::new();
    for (&(comm_id, seq), entries) in by_seq.iter().filter(|(_, e)| e.len() > 1) {
        for (field, values) in differences(entries) {
            let (list, total) = found.entry(comm_id).or_default();
            *total += 1;
            if list.len() < LIST_AT_MOST {
                list.push(Mismatch { comm_seq: seq, field, values });
            }
        }
    }
    found
}

/// `find_in` over the hang analysis' input: a grouped collective has a record already;
/// one in flight has only its op so far.
pub(super) fn find(ranks: &[RankInput], facts: &[Facts]) -> BTreeMap<u64, (Vec<Mismatch>, usize)> {
    let said: Vec<Said> = ranks
        .iter()
        .zip(facts)
        .map(|(r, f)| Said {
            rank: r.rank,
            calls: &r.calls,
            in_flight: f
                .waits
                .iter()
                .filter(|w| w.kind == WaitKind::Coll && !w.grouped)
                .filter_map(|w| Some((w.comm_id, w.seq, w.op?)))
                .collect(),
        })
        .collect();
    find_in(&said)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::hang::testkit::*;

    fn find_on_world(ranks: &[RankInput]) -> (Vec<Mismatch>, usize) {
        let facts: Vec<Facts> = ranks.iter().map(Facts::of).collect();
        find(ranks, &facts).remove(&WORLD).unwrap_or_default()
    }

    fn three_ranks_agreeing() -> Vec<RankInput> {
        (0..3)
            .map(|r| {
                let mut input = rank(r, 3);
                input.calls = vec![
                    coll(WORLD, 1, NcclOp::Broadcast, SEC),
                    coll(WORLD, 2, NcclOp::AllReduce, 2 * SEC),
                    coll(WORLD, 3, NcclOp::AllGather, 3 * SEC),
                ];
                input
            })
            .collect()
    }

    #[test]
    fn agreement_is_no_mismatch() {
        assert_eq!(find_on_world(&three_ranks_agreeing()), (Vec::new(), 0));
    }

    #[test]
    fn every_field_that_must_match() {
        /// Which call of rank 2 to change, how, and the field and values that must show.
        type Case = (usize, fn(&mut NcclCall), MismatchField, FieldValue, FieldValue);
        let cases: [Case; 5] = [
            (1, |c| c.count = 512, MismatchField::Count, FieldValue::Count(1024), FieldValue::Count(512)),
            (1, |c| c.dtype = 9, MismatchField::Dtype, FieldValue::Name("float32"), FieldValue::Name("bfloat16")),
            (0, |c| c.peer = 2, MismatchField::Root, FieldValue::Number(0), FieldValue::Number(2)),
            (1, |c| c.redop = 2, MismatchField::Redop, FieldValue::Name("sum"), FieldValue::Name("max")),
            (
                2,
                |c| c.op = NcclOp::ReduceScatter,
                MismatchField::Op,
                FieldValue::Name("allgather"),
                FieldValue::Name("reducescatter"),
            ),
        ];
        for (index, change, field, agreed, odd) in cases {
            let mut ranks = three_ranks_agreeing();
            change(&mut ranks[2].calls[index]);
            let (found, total) = find_on_world(&ranks);
            assert_eq!(total, 1, "{field:?}: {found:?}");
            assert_eq!((found[0].comm_seq, found[0].field), (index as u64 + 1, field));
            assert_eq!(found[0].values, BTreeMap::from([(0, agreed), (1, agreed), (2, odd)]));
        }
    }

    #[test]
    fn another_op_says_only_that() {
        let mut ranks = three_ranks_agreeing();
        ranks[1].calls[1] = NcclCall { count: 7, ..coll(WORLD, 2, NcclOp::Broadcast, 2 * SEC) };
        let (found, total) = find_on_world(&ranks);
        assert_eq!((total, found[0].field), (1, MismatchField::Op));
    }

    #[test]
    fn a_call_in_flight_is_compared_by_its_op() {
        let mut ranks = three_ranks_agreeing();
        for r in &mut ranks[..2] {
            r.calls.push(coll(WORLD, 4, NcclOp::AllReduce, 4 * SEC));
        }
        in_flight(&mut ranks[2], WORLD, 3, NcclOp::Broadcast, 4 * SEC);
        let (found, _) = find_on_world(&ranks);
        assert_eq!((found[0].comm_seq, found[0].field), (4, MismatchField::Op));
        assert_eq!(found[0].values[&2], FieldValue::Name("broadcast"));
    }

    #[test]
    fn a_shifted_sequence_is_listed_up_to_the_limit_and_counted() {
        let mut ranks = three_ranks_agreeing();
        for r in &mut ranks {
            r.calls = (1..=100).map(|s| NcclCall { count: s, ..coll(WORLD, s, NcclOp::AllReduce, s * SEC) }).collect();
        }
        // Rank 1 issued one extra collective at #10: every later one is off by one.
        for c in &mut ranks[1].calls[9..] {
            c.count -= 1;
        }
        let (found, total) = find_on_world(&ranks);
        assert_eq!((found.len(), total), (LIST_AT_MOST, 91));
        assert_eq!(found[0].comm_seq, 10);
    }
}
