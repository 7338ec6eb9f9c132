//! Collectives the ranks disagree on: the same (communicator, sequence number) issued with
//! another op, count, datatype, root or reduction. NCCL requires them to match; when they
//! do not, the job hangs or computes garbage, and nothing else tells which rank is wrong.
//!
//! In bounded memory, whatever the number of ranks: each rank's newest calls are folded
//! into a [`Tally`] as the rank is read (one reference per collective and the fields some
//! rank differs in, never every rank's entry), and only the few collectives that will be
//! listed have every rank's values gathered, in a second, cheap step ([`Gather`]).

use std::collections::{hash_map, BTreeMap, HashMap};
use std::hash::{BuildHasherDefault, Hasher};

use serde::Serialize;

use super::facts::{Facts, WaitKind};
use super::RankInput;
use crate::core::fnv::mix64;
use crate::core::log::nccl_op::{dtype_name, redop_name, NcclOp};
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

impl MismatchField {
    /// In the order a collective's mismatches are listed.
    const ALL: [MismatchField; 5] =
        [MismatchField::Op, MismatchField::Count, MismatchField::Dtype, MismatchField::Root, MismatchField::Redop];

    fn bit(self) -> u8 {
        1 << self as u8
    }
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

/// What one rank says about its collectives: its records, and the op of each collective
/// still in flight as (communicator, sequence number, op).
pub struct Said<'a> {
    pub rank: i32,
    pub calls: &'a [NcclCall],
    pub in_flight: Vec<(u64, u64, NcclOp)>,
}

/// A collective: (communicator, sequence number).
type Key = (u64, u64);

/// Hashes a key's two words with SplitMix64's finaliser: the maps below take a key per
/// call of every rank, where the default hasher's cost would show.
#[derive(Default)]
struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = mix64(self.0 ^ u64::from(b));
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = mix64(self.0 ^ n);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

type KeyMap<K, V> = HashMap<K, V, BuildHasherDefault<KeyHasher>>;

/// The fields besides the op that the ranks' records of one collective must agree on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Fields {
    count: u64,
    dtype: i32,
    peer: i32,
    redop: i32,
}

/// What one rank says collective #s was: from its record, or only the op of a call still
/// in flight.
#[derive(Clone, Copy, Debug)]
struct Entry {
    op: NcclOp,
    fields: Option<Fields>,
}

impl Entry {
    fn of(c: &NcclCall) -> Entry {
        Entry { op: c.op, fields: Some(Fields { count: c.count, dtype: c.dtype, peer: c.peer, redop: c.redop }) }
    }

    fn in_flight(op: NcclOp) -> Entry {
        Entry { op, fields: None }
    }
}

fn collective(c: &&NcclCall) -> bool {
    c.comm_id != 0 && c.seq != 0 && c.op.is_collective()
}

fn named(name: &'static str, raw: i32) -> FieldValue {
    if name == "unknown" || name == "custom" {
        FieldValue::Number(raw)
    } else {
        FieldValue::Name(name)
    }
}

/// Whether `field` means something for `op`: a root only for rooted collectives, a
/// reduction only for reducing ones.
fn applies(field: MismatchField, op: NcclOp) -> bool {
    match field {
        MismatchField::Root => {
            matches!(op.plain(), NcclOp::Broadcast | NcclOp::Bcast | NcclOp::Reduce | NcclOp::Gather | NcclOp::Scatter)
        }
        MismatchField::Redop => matches!(op.plain(), NcclOp::AllReduce | NcclOp::Reduce | NcclOp::ReduceScatter),
        _ => true,
    }
}

/// An entry's value of `field`: `None` for a call in flight (but its op) or a field that
/// does not apply. Distinct raw values are distinct values, so comparing the raw fields
/// compares these.
fn value(field: MismatchField, e: &Entry) -> Option<FieldValue> {
    if field == MismatchField::Op {
        return Some(FieldValue::Name(e.op.name()));
    }
    let f = e.fields?;
    applies(field, e.op).then(|| match field {
        MismatchField::Count => FieldValue::Count(f.count),
        MismatchField::Dtype => named(dtype_name(f.dtype), f.dtype),
        MismatchField::Root => FieldValue::Number(f.peer),
        _ => named(redop_name(f.redop), f.redop),
    })
}

/// What the ranks said of one collective, in constant space: one reference (an op, and
/// the fields of a record) and the fields some rank's entry differs from it in. Equality
/// is transitive, so "some entry differs from the reference" is "not all entries agree",
/// whichever entry the reference came from and in whatever order tallies are merged.
#[derive(Clone, Copy, Debug)]
struct Agreement {
    op: NcclOp,
    fields: Option<Fields>,
    /// `MismatchField::bit`s.
    differs: u8,
    /// Ranks that said something of it.
    ranks: u32,
}

impl Agreement {
    fn of(e: Entry) -> Agreement {
        Agreement { op: e.op, fields: e.fields, differs: 0, ranks: 1 }
    }

    fn add(&mut self, other: &Agreement) {
        if self.op.name() != other.op.name() {
            self.differs |= MismatchField::Op.bit();
        }
        match (self.fields, other.fields) {
            (Some(a), Some(b)) => {
                let differ = [
                    (MismatchField::Count, a.count != b.count),
                    (MismatchField::Dtype, a.dtype != b.dtype),
                    (MismatchField::Root, a.peer != b.peer),
                    (MismatchField::Redop, a.redop != b.redop),
                ];
                for (field, differs) in differ {
                    if differs {
                        self.differs |= field.bit();
                    }
                }
            }
            (None, fields) => self.fields = fields,
            (Some(_), None) => {}
        }
        self.differs |= other.differs;
        self.ranks += other.ranks;
    }

    /// The fields reported: none for a collective only one rank spoke of; once the op
    /// differs the other fields compare different things, so only the op.
    fn mismatched(&self) -> impl Iterator<Item = MismatchField> + '_ {
        let op_differs = self.differs & MismatchField::Op.bit() != 0;
        MismatchField::ALL.into_iter().filter(move |&field| {
            self.ranks > 1
                && self.differs & field.bit() != 0
                && (field == MismatchField::Op || (!op_differs && applies(field, self.op)))
        })
    }
}

/// How a rank came to say something of a collective.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Claim {
    Record,
    /// A record, then a call in flight: the call counts only if the record falls outside
    /// the window (records outside it are not compared).
    RecordThenInFlight,
    InFlight,
}

/// What one rank's logs say, each collective once (the first word counts), ready to be
/// folded into a [`Tally`]: prepared outside any lock a caller folds under.
pub struct Say {
    records: Vec<(Key, Entry)>,
    /// Calls in flight, each with whether a record of the rank named it first.
    in_flight: Vec<(Key, Entry, bool)>,
    /// Per communicator, the newest collective the rank recorded.
    newest: Vec<(u64, u64)>,
}

impl Say {
    /// `said`: every log of one rank number, in input order (normally one). A call with a
    /// record already says more than its op.
    pub fn of<'s, 'c: 's>(said: impl IntoIterator<Item = &'s Said<'c>>) -> Say {
        let said: Vec<&Said> = said.into_iter().collect();
        let calls = said.iter().map(|s| s.calls.len()).sum();
        let mut claims: KeyMap<Key, Claim> = KeyMap::with_capacity_and_hasher(calls, Default::default());
        let mut say = Say { records: Vec::with_capacity(calls), in_flight: Vec::new(), newest: Vec::new() };
        for s in said {
            for c in s.calls.iter().filter(collective) {
                let key = (c.comm_id, c.seq);
                if let hash_map::Entry::Vacant(v) = claims.entry(key) {
                    v.insert(Claim::Record);
                    say.records.push((key, Entry::of(c)));
                }
            }
            for &(comm_id, seq, op) in &s.in_flight {
                let key = (comm_id, seq);
                match claims.entry(key) {
                    hash_map::Entry::Vacant(v) => {
                        v.insert(Claim::InFlight);
                        say.in_flight.push((key, Entry::in_flight(op), false));
                    }
                    hash_map::Entry::Occupied(mut o) if *o.get() == Claim::Record => {
                        o.insert(Claim::RecordThenInFlight);
                        say.in_flight.push((key, Entry::in_flight(op), true));
                    }
                    hash_map::Entry::Occupied(_) => {}
                }
            }
        }
        // A collective out of this rank's window is out of the job's (whose newest is at
        // least the rank's): fold only the rest. Its claim above still stands.
        let mut newest: KeyMap<u64, u64> = KeyMap::default();
        for &((comm_id, seq), _) in &say.records {
            let n = newest.entry(comm_id).or_default();
            *n = (*n).max(seq);
        }
        say.records.retain(|&((comm_id, seq), _)| seq + WINDOW > newest[&comm_id]);
        say.newest = newest.into_iter().collect();
        say
    }
}

/// Every rank's say folded together: per collective an [`Agreement`], per communicator
/// its newest sequence number; memory bounded by the collectives in the window, not by
/// the ranks.
#[derive(Default)]
pub struct Tally {
    records: KeyMap<Key, Agreement>,
    newest: KeyMap<u64, u64>,
    in_flight: Vec<(Key, Entry, bool)>,
}

impl Tally {
    pub fn add(&mut self, say: Say) {
        for (comm_id, seq) in say.newest {
            let newest = self.newest.entry(comm_id).or_default();
            *newest = (*newest).max(seq);
        }
        let newest = &self.newest;
        for (key, entry) in say.records {
            // Out of the window as far as the ranks folded so far say: out for good.
            if key.1 + WINDOW <= newest[&key.0] {
                continue;
            }
            let said = Agreement::of(entry);
            self.records.entry(key).and_modify(|a| a.add(&said)).or_insert(said);
        }
        self.in_flight.extend(say.in_flight);
        // A collective out of the window now stays out: forget them now and then, so
        // ranks far apart cannot grow the table past what the window holds.
        if self.records.len() > 2 * WINDOW as usize * self.newest.len().max(1) {
            let newest = &self.newest;
            self.records.retain(|&(comm_id, seq), _| seq + WINDOW > newest.get(&comm_id).copied().unwrap_or(0));
        }
    }

    /// The collectives whose ranks disagree: per communicator the first `LIST_AT_MOST`
    /// mismatches by sequence number, and how many there are in all.
    pub fn finish(self) -> Findings {
        let Tally { mut records, newest, in_flight } = self;
        let in_window = |&(comm_id, seq): &Key| seq + WINDOW > newest.get(&comm_id).copied().unwrap_or(0);
        records.retain(|key, _| in_window(key));
        for (key, entry, behind_record) in in_flight {
            if behind_record && in_window(&key) {
                continue;
            }
            let said = Agreement::of(entry);
            // Out of the window only calls in flight are compared.
            records.entry(key).and_modify(|a| a.add(&said)).or_insert(said);
        }
        let mut differing: Vec<(Key, Agreement)> =
            records.into_iter().filter(|(_, a)| a.mismatched().next().is_some()).collect();
        differing.sort_unstable_by_key(|&(key, _)| key);
        let mut found: BTreeMap<u64, (Vec<(u64, MismatchField)>, usize)> = BTreeMap::new();
        for ((comm_id, seq), agreement) in differing {
            for field in agreement.mismatched() {
                let (list, total) = found.entry(comm_id).or_default();
                *total += 1;
                if list.len() < LIST_AT_MOST {
                    list.push((seq, field));
                }
            }
        }
        Findings { newest, found }
    }
}

/// The mismatches a [`Tally`] found, without the ranks' values yet.
pub struct Findings {
    newest: KeyMap<u64, u64>,
    found: BTreeMap<u64, (Vec<(u64, MismatchField)>, usize)>,
}

impl Findings {
    pub fn is_empty(&self) -> bool {
        self.found.is_empty()
    }

    /// The second step: every rank's values of the collectives listed.
    pub fn gather(self) -> Gather {
        let entries = self
            .found
            .iter()
            .flat_map(|(&comm_id, (list, _))| list.iter().map(move |&(seq, _)| ((comm_id, seq), BTreeMap::new())))
            .collect();
        Gather { findings: self, entries }
    }
}

/// Every rank's entry of each collective listed, gathered from the same input the
/// tally folded (every `Said`, in input order: a rank's first word counts).
pub struct Gather {
    findings: Findings,
    entries: BTreeMap<Key, BTreeMap<i32, Entry>>,
}

impl Gather {
    /// Whether `add` would keep anything of this call: what a caller that reads the logs
    /// again need hold of them.
    pub fn wants(&self, c: &NcclCall) -> bool {
        self.entries.contains_key(&(c.comm_id, c.seq))
    }

    pub fn add(&mut self, s: &Said) {
        let newest = &self.findings.newest;
        let in_window = |comm_id: u64, seq: u64| seq + WINDOW > newest.get(&comm_id).copied().unwrap_or(0);
        for c in s.calls.iter().filter(collective).filter(|c| in_window(c.comm_id, c.seq)) {
            if let Some(entries) = self.entries.get_mut(&(c.comm_id, c.seq)) {
                entries.entry(s.rank).or_insert(Entry::of(c));
            }
        }
        for &(comm_id, seq, op) in &s.in_flight {
            if let Some(entries) = self.entries.get_mut(&(comm_id, seq)) {
                entries.entry(s.rank).or_insert(Entry::in_flight(op));
            }
        }
    }

    /// Per communicator: its mismatches, the first `LIST_AT_MOST` by sequence number, and
    /// how many there are in all.
    pub fn finish(self) -> BTreeMap<u64, (Vec<Mismatch>, usize)> {
        let Gather { findings, entries } = self;
        findings
            .found
            .into_iter()
            .map(|(comm_id, (list, total))| {
                let listed = list
                    .into_iter()
                    .map(|(seq, field)| Mismatch {
                        comm_seq: seq,
                        field,
                        values: entries[&(comm_id, seq)]
                            .iter()
                            .filter_map(|(&rank, e)| Some((rank, value(field, e)?)))
                            .collect(),
                    })
                    .collect();
                (comm_id, (listed, total))
            })
            .collect()
    }
}

/// Both steps over input held in memory: `said` in input order.
fn find_in(said: &[Said]) -> BTreeMap<u64, (Vec<Mismatch>, usize)> {
    let mut by_rank: BTreeMap<i32, Vec<&Said>> = BTreeMap::new();
    for s in said {
        by_rank.entry(s.rank).or_default().push(s);
    }
    let mut tally = Tally::default();
    for logs in by_rank.values() {
        tally.add(Say::of(logs.iter().copied()));
    }
    let mut gather = tally.finish().gather();
    if !gather.entries.is_empty() {
        said.iter().for_each(|s| gather.add(s));
    }
    gather.finish()
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
    use crate::core::rng::SplitMix64;

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

    /// One random call: mostly an allreduce the ranks agree on, odd in some field with
    /// odds `disagree` in 4; sequence numbers on both sides of the window when `base` says.
    fn random_call(rng: &mut SplitMix64, base: u64, span: u64, disagree: u64) -> NcclCall {
        const OPS: [NcclOp; 7] = [
            NcclOp::AllReduce,
            NcclOp::AllReduceConfig,
            NcclOp::Broadcast,
            NcclOp::Reduce,
            NcclOp::AllGather,
            NcclOp::Send,
            NcclOp::GroupStart,
        ];
        let odd = |rng: &mut SplitMix64| rng.below(4) < disagree;
        let op = if odd(rng) { OPS[rng.below(7) as usize] } else { OPS[0] };
        let comm_id = rng.below(3);
        let seq = if rng.below(8) == 0 { 0 } else { 1 + rng.below(span) + base * rng.below(2) };
        let count = if odd(rng) { rng.below(3) } else { 8 };
        let dtype = if odd(rng) { [0, 7, 99, -1][rng.below(4) as usize] } else { 7 };
        let peer = if odd(rng) { rng.below(3) as i32 - 1 } else { 0 };
        let redop = if odd(rng) { [0, 2, 7][rng.below(3) as usize] } else { 0 };
        NcclCall { op, comm_id, seq, count, dtype, peer, redop, ..coll(1, 1, NcclOp::AllReduce, SEC) }
    }

    /// A log's rank, calls and calls in flight.
    type RandomLog = (i32, Vec<NcclCall>, Vec<(u64, u64, NcclOp)>);

    /// Random ranks' words on a few collectives: duplicated and unranked logs, records
    /// repeated and out of order, calls in flight with and without a record.
    fn random_job(rng: &mut SplitMix64) -> Vec<RandomLog> {
        let logs = 1 + rng.below(6);
        let base = [0, WINDOW - 20][rng.below(2) as usize];
        let (disagree, span) = (rng.below(4), [40, 100][rng.below(2) as usize]);
        let logs: Vec<(i32, Vec<NcclCall>)> = (0..logs)
            .map(|_| {
                (
                    rng.below(5) as i32 - 1,
                    (0..rng.below(2 * span)).map(|_| random_call(rng, base, span, disagree)).collect(),
                )
            })
            .collect();
        let recorded: Vec<NcclCall> = logs.iter().flat_map(|(_, calls)| calls.iter().copied()).collect();
        logs.into_iter()
            .map(|(rank, calls)| {
                let in_flight = (0..rng.below(4))
                    .map(|_| {
                        let c = random_call(rng, base, span, disagree);
                        // Half of them a collective some log has a record of.
                        match recorded.get(rng.below(2 * recorded.len() as u64) as usize) {
                            Some(r) => (r.comm_id, r.seq, c.op),
                            None => (c.comm_id, c.seq, c.op),
                        }
                    })
                    .collect();
                (rank, calls, in_flight)
            })
            .collect()
    }

    /// `sf ls` folds each rank as a worker finishes reading it: in any order.
    #[test]
    fn ranks_folded_in_any_order_find_the_same() {
        let mut rng = SplitMix64::new(0x5eed);
        let (mut mismatched, mut cut) = (0, 0);
        for case in 0..1000 {
            let job = random_job(&mut rng);
            let said: Vec<Said> = job
                .iter()
                .map(|(rank, calls, in_flight)| Said { rank: *rank, calls, in_flight: in_flight.clone() })
                .collect();
            let found = find_in(&said);
            let mut by_rank: BTreeMap<i32, Vec<&Said>> = BTreeMap::new();
            for s in &said {
                by_rank.entry(s.rank).or_default().push(s);
            }
            let mut tally = Tally::default();
            for logs in by_rank.values().rev() {
                tally.add(Say::of(logs.iter().copied()));
            }
            let mut gather = tally.finish().gather();
            said.iter().for_each(|s| gather.add(s));
            assert_eq!(gather.finish(), found, "case {case}");
            mismatched += usize::from(!found.is_empty());
            cut += usize::from(found.values().any(|&(_, total)| total > LIST_AT_MOST));
        }
        assert!(mismatched > 150 && cut > 5, "{mismatched} cases disagree on something, {cut} past the list");
    }
}
