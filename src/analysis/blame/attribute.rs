//! Waits placed in the waiters' stages, and caused waits charged to the late ranks' stages.

use super::carry::{blend, inherited_share, normalized, Carried, Carries};
use super::collective::{for_each_collective, CallTiming, Collective, Participant};
use super::stage_seconds::StageSeconds;

/// One stage of one step of a rank, on that rank's clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StageSpan {
    pub step: u64,
    /// Index in the job's stage list.
    pub stage: usize,
    pub begin_ns: u64,
    pub end_ns: u64,
}

/// What one rank's log holds for the attribution.
#[derive(Clone, Debug, PartialEq)]
pub struct RankTimeline {
    pub rank: u32,
    /// Every completed NCCL call, in call order.
    pub calls: Vec<CallTiming>,
    /// Its steps' stages, in time order, not overlapping.
    pub spans: Vec<StageSpan>,
    /// Where its host waited outside the calls (synchronizations with the device, for
    /// asynchronous launches), as (begin, end) in time order: taken out of its own time,
    /// as the waits inside blocking calls are.
    pub waits: Vec<(u64, u64)>,
}

/// The job's waits and who caused them, keyed by (rank, step, stage).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Attribution {
    /// Seconds the rank waited inside collectives it entered during that stage.
    pub waits: StageSeconds,
    /// Seconds of other ranks' waiting the rank caused, charged to the stage that made it
    /// late.
    pub caused: StageSeconds,
    /// Collectives matched.
    pub collectives: usize,
    /// Caused wait whose late rank was outside every step (set-up, tear-down).
    pub unstaged_s: f64,
    /// Caused wait of blocking calls that a late rank carried in from leaving its
    /// previous call late, charged to no stage (see [`charge`]).
    pub carried_in_s: f64,
}

impl Attribution {
    /// The wait inside (rank, step, stage), 0 when none.
    pub fn wait(&self, rank: u32, step: u64, stage: usize) -> f64 {
        self.waits.get(&(rank, step, stage)).unwrap_or(0.0)
    }
}

/// The part of a late participant's caused wait that its device made, not its host
/// (`device::attribute_device`): `share` (0 to 1) of it, charged over its stage spans
/// (indexes into its timeline's spans) in proportion to their weights; and `host_late_s`,
/// how much later than its peers its host launched the collective, which it carries on to
/// its next launches (see [`carry`](super::carry)).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DeviceCharge {
    pub share: f64,
    pub spans: Vec<(usize, f64)>,
    pub host_late_s: f64,
}

/// Matches every rank's collectives and attributes their waits, one collective at a time
/// (`for_each_collective`): what is held beyond the timelines is one collective's worth,
/// and two sums per stage span (waited, caused), added up in place of a map lookup per
/// participant. The tables are filled once at the end, with the spans that have some.
pub fn attribute(ranks: &[RankTimeline]) -> Attribution {
    attribute_split(ranks, Since::PreviousExit, |_, _| None)
}

/// Where the segment a late participant's host time is compared over starts: at its
/// previous call's exit (a blocking call: the host was back at work), or at its previous
/// call's enter (a launch: the host went on at once).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Since {
    PreviousExit,
    PreviousEnter,
}

/// [`attribute`], where `device` may say of a late participant (the collective, its
/// participant) which part of its caused wait its device made, and where to charge it;
/// the rest is its host's, charged as [`attribute`] charges it.
pub(super) fn attribute_split(
    ranks: &[RankTimeline],
    since: Since,
    mut device: impl FnMut(&Collective, &Participant) -> Option<DeviceCharge>,
) -> Attribution {
    let calls: Vec<&[CallTiming]> = ranks.iter().map(|r| r.calls.as_slice()).collect();
    let spans: Vec<Spans> = ranks.iter().map(|r| Spans::new(&r.spans)).collect();
    let mut sums: Vec<SpanSums> = ranks.iter().map(|r| SpanSums::new(r.spans.len())).collect();
    let mut a = Attribution::default();
    let mut scratch = Scratch::default();
    let carries = (since == Since::PreviousEnter).then(|| Carries::new(ranks.len()));
    let mut split = Split { since, carries, device: &mut device };
    for_each_collective(&calls, |c| {
        a.collectives += 1;
        for p in &c.participants {
            let r = &ranks[p.rank];
            if p.wait_s > 0.0 {
                if let Some(span) = spans[p.rank].at(r.calls[p.call].enter_ns) {
                    sums[p.rank].waits[span] += p.wait_s;
                }
            }
        }
        let mut uncharged = Uncharged { unstaged_s: &mut a.unstaged_s, carried_in_s: &mut a.carried_in_s };
        charge(ranks, &spans, c, &mut sums, &mut uncharged, &mut scratch, &mut split);
    });
    let (mut waits, mut caused) = (Vec::new(), Vec::new());
    for ((r, sums), rank_spans) in ranks.iter().zip(&sums).zip(&spans) {
        for ((span, &waited), &charged) in rank_spans.spans.iter().zip(&sums.waits).zip(&sums.caused) {
            let key = (r.rank, span.step, span.stage);
            // Only a span that some collective added to has an entry, as a table filled
            // per participant would (every amount added is positive).
            if waited > 0.0 {
                waits.push((key, waited));
            }
            if charged > 0.0 {
                caused.push((key, charged));
            }
        }
    }
    a.waits = StageSeconds::summed(waits);
    a.caused = StageSeconds::summed(caused);
    a
}

/// One rank's waited and caused seconds per stage span (the index of the span in its
/// timeline): 16 bytes a span, and no lookup beyond the span's own.
struct SpanSums {
    waits: Vec<f64>,
    caused: Vec<f64>,
}

impl SpanSums {
    fn new(spans: usize) -> SpanSums {
        SpanSums { waits: vec![0.0; spans], caused: vec![0.0; spans] }
    }
}

/// Buffers `charge` reuses from one collective to the next.
#[derive(Default)]
struct Scratch {
    /// Every participant's own time per stage span (its index), back to back; `ends[i]`
    /// closes participant `i`'s.
    own: Vec<(usize, f64)>,
    ends: Vec<usize>,
    /// Per stage index, the participants' own time in it (`None`: no participant's
    /// segment touched the stage), then its median.
    columns: Vec<Option<Vec<f64>>>,
    medians: Vec<f64>,
    /// The participants' waits, for their median.
    waits: Vec<f64>,
}

/// Where caused wait that no stage of the late rank is charged with is counted.
struct Uncharged<'a> {
    unstaged_s: &'a mut f64,
    carried_in_s: &'a mut f64,
}

/// How `charge` splits a late participant's caused wait between its host and its device.
struct Split<'d> {
    since: Since,
    /// Lateness carried between launches; `None` for blocking calls, which absorb it.
    carries: Option<Carries>,
    device: &'d mut dyn FnMut(&Collective, &Participant) -> Option<DeviceCharge>,
}

/// Charges each late participant's caused wait to the stages where its own time since its
/// previous call ran over the participants' median, in proportion to the overrun.
///
/// A blocking call's participant is charged only the part of its lateness that the
/// overrun explains. Its lateness behind the median participant is the median wait less
/// its own; what the overrun leaves of it, it carried in from leaving its previous call
/// late, which no stage of its own made: gloo's ranks leave a collective in turn (its
/// algorithm's order, so the same rank every time), a descheduled rank leaves late, and a
/// rank that waited for a peer in another communicator left that call late (the peer is
/// charged there). Charged to the stage the rank entered the call from, gloo's exit order
/// alone made one rank of a 3-rank job a culprit in the stage holding its loss allreduce.
fn charge(
    ranks: &[RankTimeline],
    spans: &[Spans],
    c: &Collective,
    sums: &mut [SpanSums],
    uncharged: &mut Uncharged,
    s: &mut Scratch,
    split: &mut Split,
) {
    // Own time per (step, stage) in each participant's segment before the call.
    s.own.clear();
    s.ends.clear();
    for p in &c.participants {
        let r = &ranks[p.rank];
        let enter = r.calls[p.call].enter_ns;
        let start = p.call.checked_sub(1).map_or(enter, |i| match split.since {
            Since::PreviousExit => r.calls[i].exit_ns.min(enter),
            Since::PreviousEnter => r.calls[i].enter_ns.min(enter),
        });
        let from = s.own.len();
        spans[p.rank].own_time(start, enter, &mut s.own);
        spans[p.rank].take_out_waits(&r.waits, start, enter, &mut s.own[from..]);
        s.ends.push(s.own.len());
    }
    // The participants' median own time per stage (a stage is compared by its index
    // alone: the segment rarely spans two steps' copies of one stage). Once per
    // collective, so a large job stays linear in its ranks.
    let n = c.participants.len();
    for column in s.columns.iter_mut().flatten() {
        column.clear();
    }
    let mut from = 0;
    for (i, &to) in s.ends.iter().enumerate() {
        let rank_spans = spans[c.participants[i].rank].spans;
        for &(span, t) in &s.own[from..to] {
            let stage = rank_spans[span].stage;
            if s.columns.len() <= stage {
                s.columns.resize_with(stage + 1, || None);
                s.medians.resize(stage + 1, 0.0);
            }
            let column = s.columns[stage].get_or_insert_with(Vec::new);
            if column.is_empty() {
                column.resize(n, 0.0);
            }
            column[i] += t;
        }
        from = to;
    }
    for (column, median_of) in s.columns.iter_mut().zip(&mut s.medians) {
        if let Some(column) = column.as_mut().filter(|c| !c.is_empty()) {
            *median_of = median(column);
        }
    }
    s.waits.clear();
    s.waits.extend(c.participants.iter().map(|p| p.wait_s));
    let median_wait_s = median(&mut s.waits);
    for (i, p) in c.participants.iter().enumerate() {
        let carried = split.carries.as_mut().and_then(|k| k.take(p.rank, c.comm_id));
        if p.caused_s <= 0.0 {
            continue;
        }
        let mut caused_s = p.caused_s;
        let device = (split.device)(c, p);
        if let Some(d) = &device {
            let caused = &mut sums[p.rank].caused;
            let spans = || d.spans.iter().filter(|&&(span, w)| span < caused.len() && w > 0.0);
            let weight: f64 = spans().map(|&(_, w)| w).sum();
            if weight > 0.0 && d.share > 0.0 {
                let by_device = p.caused_s * d.share.min(1.0);
                for &(span, w) in spans().collect::<Vec<_>>() {
                    caused[span] += by_device * w / weight;
                }
                caused_s -= by_device;
            }
        }
        if caused_s <= 0.0 {
            continue;
        }
        let segment = &s.own[if i == 0 { 0 } else { s.ends[i - 1] }..s.ends[i]];
        let over = host_overrun(segment, spans[p.rank].spans, &s.medians);
        let over_s: f64 = over.clone().map(|(_, o)| o).sum();
        // A launch with no overrun was late for what its host carried: the stage it
        // entered the call from.
        let entered = || spans[p.rank].at(ranks[p.rank].calls[p.call].enter_ns);
        let caused = &mut sums[p.rank].caused;
        let (Some(carries), Some(late_s)) = (split.carries.as_mut(), device.map(|d| d.host_late_s)) else {
            // Nothing allocated per participant.
            if split.since == Since::PreviousExit {
                // A blocking call: the overrun's share of its lateness, the rest carried in.
                let late_s = median_wait_s - p.wait_s;
                let own = match (late_s > 0.0, over_s > 0.0) {
                    (true, _) => (over_s / late_s).min(1.0),
                    (false, true) => 1.0,
                    (false, false) => 0.0,
                };
                over.for_each(|(span, o)| caused[span] += caused_s * own * o / over_s);
                *uncharged.carried_in_s += caused_s * (1.0 - own);
            } else if over_s > 0.0 {
                over.for_each(|(span, o)| caused[span] += caused_s * o / over_s);
            } else {
                match entered() {
                    Some(span) => caused[span] += caused_s,
                    None => *uncharged.unstaged_s += caused_s,
                }
            }
            continue;
        };
        let new = if over_s > 0.0 {
            Some(over.map(|(span, o)| (span, o / over_s)).collect::<Vec<_>>())
        } else {
            entered().map(|span| vec![(span, 1.0)])
        };
        // What of the host's lateness its segment does not explain, it carried in: that
        // part goes where the carried lateness went.
        let carried = carried.map(|k| Carried { spans: valid(k.spans, caused.len()), ..k }).unwrap_or_default();
        let unexplained_s = (late_s - over_s).max(0.0);
        let share = if carried.spans.is_empty() { 0.0 } else { inherited_share(carried.late_s, unexplained_s, late_s) };
        charge_over(caused, Some(&carried.spans), caused_s * share, uncharged.unstaged_s);
        charge_over(caused, new.as_deref(), caused_s * (1.0 - share), uncharged.unstaged_s);
        if late_s > 0.0 {
            let spans = blend(&carried.spans, share, new.as_deref().unwrap_or_default());
            carries.put(p.rank, c.comm_id, Carried { late_s, spans });
        }
    }
}

/// Each span of a segment whose own time ran over the participants' median, by how much.
fn host_overrun<'a>(
    segment: &'a [(usize, f64)],
    rank_spans: &'a [StageSpan],
    medians: &'a [f64],
) -> impl Iterator<Item = (usize, f64)> + Clone + 'a {
    segment
        .iter()
        .map(|&(span, own)| (span, own - medians[rank_spans[span].stage]))
        // Under the clocks' nanosecond it is the rounding of the waits taken out.
        .filter(|&(_, o)| o > 1e-9)
}

/// Adds `amount` over `spans` (normalized weights) to `caused`; with no span, to the
/// unstaged sum.
fn charge_over(caused: &mut [f64], spans: Option<&[(usize, f64)]>, amount: f64, unstaged_s: &mut f64) {
    if amount <= 0.0 {
        return;
    }
    match spans.filter(|s| !s.is_empty()) {
        Some(spans) => {
            for &(span, w) in spans {
                caused[span] += amount * w;
            }
        }
        None => *unstaged_s += amount,
    }
}

/// `spans` that index one of `len` spans, normalized again.
fn valid(mut spans: Vec<(usize, f64)>, len: usize) -> Vec<(usize, f64)> {
    spans.retain(|&(span, w)| span < len && w > 0.0);
    normalized(spans)
}

/// One rank's spans with a cursor: collectives come in key order, which for one
/// communicator is time order, so the next lookup usually lands near the last.
struct Spans<'a> {
    spans: &'a [StageSpan],
    /// Whether the ends rise with the begins (not overlapping, as an undamaged log's
    /// spans are): only then may a lookup start from the cursor and find the very span a
    /// binary search over the whole list finds.
    ordered: bool,
    cursor: std::cell::Cell<usize>,
}

impl<'a> Spans<'a> {
    fn new(spans: &'a [StageSpan]) -> Spans<'a> {
        let ordered = spans.windows(2).all(|w| w[0].end_ns <= w[1].end_ns);
        Spans { spans, ordered, cursor: std::cell::Cell::new(0) }
    }

    /// The index of the first span ending after `t`.
    fn first_ending_after(&self, t: u64) -> usize {
        let spans = self.spans;
        if !self.ordered {
            return spans.partition_point(|s| s.end_ns <= t);
        }
        // Gallop from the cursor towards `t`, then search the bracket found.
        let at = self.cursor.get().min(spans.len());
        let (mut lo, mut hi) = (at, at);
        if at < spans.len() && spans[at].end_ns <= t {
            let mut step = 1;
            lo = at + 1;
            hi = (at + step).min(spans.len());
            while hi < spans.len() && spans[hi].end_ns <= t {
                lo = hi + 1;
                step *= 2;
                hi = (hi + step).min(spans.len());
            }
        } else {
            let mut step = 1;
            while lo > 0 && spans[lo - 1].end_ns > t {
                hi = lo - 1;
                lo = lo.saturating_sub(step);
                step *= 2;
            }
        }
        let found = lo + spans[lo..hi].partition_point(|s| s.end_ns <= t);
        self.cursor.set(found);
        found
    }

    /// The index of the span holding instant `t`.
    fn at(&self, t: u64) -> Option<usize> {
        let at = self.first_ending_after(t);
        self.spans.get(at).filter(|s| s.begin_ns <= t).map(|_| at)
    }

    /// Seconds of each span (its index) inside [start, end), appended to `out`.
    fn own_time(&self, start: u64, end: u64, out: &mut Vec<(usize, f64)>) {
        let first = self.first_ending_after(start);
        out.extend(
            self.spans[first..]
                .iter()
                .take_while(|s| s.begin_ns < end)
                .enumerate()
                // Saturating: a damaged log may hold overlapping spans, breaking the sort this assumes.
                .map(|(i, s)| (first + i, s.end_ns.min(end).saturating_sub(s.begin_ns.max(start)) as f64 / 1e9)),
        );
    }

    /// Takes the parts of `waits` inside [start, end) out of `own` (what
    /// [`Spans::own_time`] gave for that segment).
    fn take_out_waits(&self, waits: &[(u64, u64)], start: u64, end: u64, own: &mut [(usize, f64)]) {
        let first = waits.partition_point(|&(_, until)| until <= start);
        for &(begin, until) in waits[first..].iter().take_while(|&&(begin, _)| begin < end) {
            let (begin, until) = (begin.max(start), until.min(end));
            for (span, t) in own.iter_mut() {
                let s = &self.spans[*span];
                let overlap = s.end_ns.min(until).saturating_sub(s.begin_ns.max(begin));
                *t = (*t - overlap as f64 / 1e9).max(0.0);
            }
        }
    }
}

fn median(values: &mut [f64]) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    /// A rank whose step 0 runs stages of `stage_ms`, then one allreduce (comm 1, seq 1)
    /// that ends at `exit_ms` for everyone; `delay_ms` passes before it enters the call.
    fn rank(rank: u32, stage_ms: &[u64], delay_ms: u64, exit_ms: u64) -> RankTimeline {
        let mut spans = Vec::new();
        let mut t = 0;
        for (stage, &ms) in stage_ms.iter().enumerate() {
            spans.push(StageSpan { step: 0, stage, begin_ns: t * MS, end_ns: (t + ms) * MS });
            t += ms;
        }
        // The call sits inside the last stage, like a bucket allreduce inside backward.
        let enter = t - 1 + delay_ms;
        spans.last_mut().unwrap().end_ns = (exit_ms + 1) * MS;
        let set_up = CallTiming::new(None, 0, 0);
        let calls = vec![set_up, CallTiming::new(Some((1, 1)), enter * MS, exit_ms * MS)];
        RankTimeline { rank, calls, spans, waits: Vec::new() }
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn the_cursor_finds_the_span_a_binary_search_finds_in_any_query_order() {
        let mut rng = crate::core::rng::SplitMix64::new(14);
        for overlapping in [false, true] {
            let mut spans = Vec::new();
            let mut t = 0;
            for i in 0..200 {
                let len = 1 + rng.below(50);
                let begin = if overlapping && i % 7 == 3 { t - t.min(rng.below(80)) } else { t + rng.below(3) };
                spans.push(StageSpan { step: i / 4, stage: (i % 4) as usize, begin_ns: begin, end_ns: begin + len });
                t = begin + len;
            }
            spans.sort_by_key(|s| s.begin_ns);
            let cursor = Spans::new(&spans);
            assert_eq!(cursor.ordered, !overlapping);
            for _ in 0..5000 {
                let q = rng.below(t + 20);
                assert_eq!(cursor.first_ending_after(q), spans.partition_point(|s| s.end_ns <= q), "t = {q}");
            }
        }
    }

    #[test]
    fn a_slow_data_stage_is_charged_for_the_wait_in_the_peers_backward() {
        // Stages data, fwd, bwd; rank 2's data takes 25 ms instead of 20.
        let ranks: Vec<RankTimeline> =
            (0..4).map(|r| rank(r, &[if r == 2 { 25 } else { 20 }, 30, 40], 0, 100)).collect();
        let a = attribute(&ranks);
        assert_eq!(a.collectives, 1);
        for r in [0, 1, 3] {
            assert!(close(a.wait(r, 0, 2), 0.005), "rank {r} waits in backward: {:?}", a.waits);
        }
        assert_eq!(a.wait(2, 0, 2), 0.0);
        assert_eq!(a.caused.len(), 1, "{:?}", a.caused);
        assert!(close(a.caused[&(2, 0, 0)], 0.015), "rank 2's data stage caused 3 x 5 ms: {:?}", a.caused);
    }

    #[test]
    fn a_delay_before_the_call_is_charged_to_the_stage_it_happened_in() {
        let ranks: Vec<RankTimeline> =
            (0..4).map(|r| rank(r, &[20, 30, 40], if r == 1 { 12 } else { 0 }, 110)).collect();
        let a = attribute(&ranks);
        assert!(close(a.caused[&(1, 0, 2)], 0.036), "{:?}", a.caused);
        assert!(a.caused.keys().all(|k| k.0 == 1));
    }

    #[test]
    fn a_rank_late_only_for_leaving_its_previous_call_late_is_charged_nothing() {
        // Rank 3's previous call exited late (gloo's ranks leave in turn), so its segment
        // is short, not long: no stage of its own made it 5 ms late.
        let mut ranks: Vec<RankTimeline> = (0..3).map(|r| rank(r, &[20, 30, 40], 0, 100)).collect();
        let mut late = rank(3, &[20, 30, 40], 5, 100);
        late.calls[0].exit_ns = 94 * MS;
        ranks.push(late);
        let a = attribute(&ranks);
        assert!(a.caused.is_empty(), "{:?}", a.caused);
        assert!(close(a.carried_in_s, 0.015), "{}", a.carried_in_s);
        assert!(close(a.wait(0, 0, 2), 0.005), "the peers' waits stand: {:?}", a.waits);
    }

    #[test]
    fn a_rank_partly_late_from_its_previous_call_is_charged_its_overrun_alone() {
        // Rank 3 left its previous call 2 ms late and then ran data 6 ms over: 8 ms late,
        // 6 of them its data stage's.
        let mut ranks: Vec<RankTimeline> = (0..3).map(|r| rank(r, &[20, 30, 40], 0, 100)).collect();
        let mut late = rank(3, &[26, 30, 40], 0, 100);
        late.calls[0].exit_ns = 2 * MS;
        for span in &mut late.spans {
            span.begin_ns += 2 * MS;
            span.end_ns += 2 * MS;
        }
        late.calls[1].enter_ns += 2 * MS;
        ranks.push(late);
        let a = attribute(&ranks);
        assert!(close(a.caused[&(3, 0, 0)], 3.0 * 0.006), "{:?}", a.caused);
        assert!(close(a.carried_in_s, 3.0 * 0.002), "{}", a.carried_in_s);
    }
}
