//! Python stacks, sampled in process when the rank stops advancing or when `sf hang
//! --stacks` asks (`format::live::STACK_REQUEST`), and kept in the log's history ring:
//! the evidence py-spy gives an operator, taken before anyone thinks to run it, and still
//! there after the process is gone.
//!
//! The collector drives `StackWatch` every round: a compare of counters, nothing more,
//! while the rank advances. The reading happens on the sampler's own thread, started at
//! the first need.

pub mod sample;
pub mod sampler;

use crate::core::log::records::{RecordBody, StackReason, StackSample, StackStatus};
use crate::core::log::records_ports::Text;
use sample::Sample;
use sampler::{Ask, Poll, Sampler, Taken};

/// A rank that has not advanced for this many of its recent steps is sampled.
pub const STALL_STEPS: u64 = 3;
/// ... and never sooner than this, whatever its steps take.
pub const STALL_MIN_NS: u64 = 1_000_000_000;
/// While it stays stuck, sampled again at most this often (an unchanged stack costs one
/// record).
pub const RESAMPLE_NS: u64 = 5_000_000_000;
/// Records a process may spend on stacks: 785 at most a sample (16 threads of 48 frames),
/// and 6% of the default history ring, which step vectors need most of.
pub const RECORD_BUDGET: usize = 8_192;

/// What the collector keeps between rounds.
#[derive(Default)]
pub struct StackWatch {
    sampler: Option<Sampler>,
    /// Set when the sampler thread could not start or went away: no more samples.
    broken: bool,
    in_flight: bool,
    /// The progress counters last seen, since when (mono ns), and whether they ever moved:
    /// a process that never advanced (no marker, no collective) gives no cadence to stall
    /// against, and is sampled only on request.
    progress: u64,
    still_since_ns: u64,
    advanced: bool,
    last_stall_sample_ns: Option<u64>,
    /// A stall sample failed (not a Python process, an interpreter py-spy cannot read):
    /// stalls are not sampled again, requests still are.
    stall_failed: bool,
    answered: u64,
    samples: u32,
    /// The newest sample written with its stacks, and their fingerprint.
    last_taken: Option<(u32, u64)>,
    records_written: usize,
    dropped: u32,
}

/// What one round saw of the rank.
pub struct Seen {
    pub now_ns: u64,
    /// A sum of the counters that move when the rank advances (markers, calls).
    pub progress: u64,
    /// The median of the rank's recent steps, when known.
    pub step_ns: Option<u64>,
    /// The header's request word.
    pub request: u64,
}

impl StackWatch {
    /// One collector round: writes a sample the sampler finished (and returns the
    /// request word it answers, for `STACK_ANSWERED`), and asks for the next when due.
    pub fn round(&mut self, seen: &Seen, write: &mut dyn FnMut(&RecordBody)) -> Option<u64> {
        let answered = self.collect(write);
        if seen.progress != self.progress {
            self.advanced |= self.still_since_ns != 0;
            self.progress = seen.progress;
            self.still_since_ns = seen.now_ns;
            self.last_stall_sample_ns = None;
        }
        if self.in_flight || self.broken {
            return answered;
        }
        if seen.request != 0 && seen.request != self.answered {
            self.ask(Ask { reason: StackReason::Request, request: seen.request });
        } else if self.stall_due(seen) {
            self.last_stall_sample_ns = Some(seen.now_ns);
            self.ask(Ask { reason: StackReason::Stall, request: 0 });
        }
        answered
    }

    fn stall_due(&self, seen: &Seen) -> bool {
        let after = seen.step_ns.map_or(0, |s| s.saturating_mul(STALL_STEPS)).max(STALL_MIN_NS);
        self.advanced
            && !self.stall_failed
            && seen.now_ns.saturating_sub(self.still_since_ns) >= after
            && self.last_stall_sample_ns.is_none_or(|t| seen.now_ns.saturating_sub(t) >= RESAMPLE_NS)
    }

    fn ask(&mut self, ask: Ask) {
        if self.sampler.is_none() {
            match Sampler::start() {
                Ok(sampler) => self.sampler = Some(sampler),
                Err(why) => {
                    crate::core::record::notice::say(&why);
                    self.broken = true;
                    return;
                }
            }
        }
        let sent = self.sampler.as_ref().is_some_and(|s| s.ask(ask));
        self.in_flight = sent;
        self.broken = !sent;
    }

    fn collect(&mut self, write: &mut dyn FnMut(&RecordBody)) -> Option<u64> {
        let taken = match self.sampler.as_ref().map(Sampler::try_take) {
            Some(Poll::Taken(taken)) => taken,
            Some(Poll::Gone) => {
                self.broken = true;
                return None;
            }
            Some(Poll::Pending) | None => return None,
        };
        self.in_flight = false;
        let ask = taken.ask;
        if ask.reason == StackReason::Stall && taken.outcome.is_err() {
            self.stall_failed = true;
        }
        self.write(taken, write);
        (ask.reason == StackReason::Request).then(|| {
            self.answered = ask.request;
            ask.request
        })
    }

    /// The sample's records, its header last; an unchanged stack is its header alone,
    /// and past the budget only a request's answer is written (its header, counting the
    /// samples left out).
    fn write(&mut self, taken: Taken, write: &mut dyn FnMut(&RecordBody)) {
        self.samples += 1;
        let sample = self.samples;
        let mut header = StackSample {
            t_ns: taken.t_ns,
            wall_ns: taken.wall_ns,
            sample,
            reason: taken.ask.reason,
            request: taken.ask.request,
            status: StackStatus::Taken,
            same_as: sample,
            threads: 0,
            dropped: self.dropped,
            read_us: (taken.read_ns / 1_000).min(u64::from(u32::MAX)) as u32,
            note: Text::new(b""),
        };
        let print = taken.outcome.as_ref().ok().map(Sample::fingerprint);
        let body: Vec<RecordBody> = match &taken.outcome {
            Err(why) => {
                header.status = StackStatus::Failed;
                header.note = Text::new(why.as_bytes());
                Vec::new()
            }
            Ok(stacks) => match self.last_taken {
                Some((earlier, last)) if print == Some(last) => {
                    header.status = StackStatus::Unchanged;
                    header.same_as = earlier;
                    Vec::new()
                }
                _ => {
                    header.threads = stacks.threads.len() as u8;
                    stacks.records(sample)
                }
            },
        };
        let over = self.records_written + body.len() + 1 > RECORD_BUDGET;
        if over && taken.ask.reason == StackReason::Stall {
            self.dropped += 1;
            return;
        }
        let body = if over {
            header.status = StackStatus::Failed;
            header.note = Text::new(b"the log's budget for stacks is spent");
            header.threads = 0;
            Vec::new()
        } else {
            body
        };
        if let (Some(print), StackStatus::Taken) = (print, header.status) {
            self.last_taken = Some((sample, print));
        }
        for record in &body {
            write(record);
        }
        write(&RecordBody::StackSample(header));
        self.records_written += body.len() + 1;
        self.dropped = 0;
    }
}

#[cfg(test)]
mod tests;
