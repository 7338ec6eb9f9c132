//! A rank's newest Python stacks, as its log holds them (`core::stacks` wrote them):
//! gathered record by record while a log is scanned, one sample at a time, so a log of
//! crafted records costs at most one sample's bounded frames.

use serde::Serialize;

use crate::core::log::records::{RecordBody, StackFrame, StackReason, StackSample, StackStatus, StackThread};
use crate::core::stacks::sample::{MAX_FRAMES, MAX_THREADS};

/// One frame, innermost first.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FrameReport {
    pub function: String,
    pub file: String,
    pub line: i32,
}

impl FrameReport {
    /// `train (train.py:139)`: the function and the file's name, as py-spy prints them.
    pub fn short(&self) -> String {
        let name = self.file.rsplit('/').next().unwrap_or(&self.file);
        format!("{} ({name}:{})", self.function, self.line)
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct ThreadReport {
    pub os_tid: u32,
    pub name: String,
    pub main: bool,
    pub active: bool,
    pub owns_gil: bool,
    /// How deep the stack was; `frames` holds its innermost ones.
    pub depth: u16,
    pub frames: Vec<FrameReport>,
}

/// A rank's newest sample.
#[derive(Clone, Debug, Serialize)]
pub struct RankStacks {
    pub rank: i32,
    pub sample: u32,
    pub reason: StackReason,
    /// `taken`, or `failed` (then `note` says why and `threads` is empty).
    pub status: StackStatus,
    pub note: Option<String>,
    /// `CLOCK_MONOTONIC` and wall-clock ns of the read.
    pub t_ns: u64,
    pub wall_ns: u64,
    /// Taken after the rank's newest step or stage marker: where it still stands. An
    /// older sample shows where it stood during an earlier stall.
    pub current: bool,
    /// Samples the log's budget left out before this one.
    pub dropped: u32,
    /// How long the read took, in microseconds.
    pub read_us: u32,
    pub threads: Vec<ThreadReport>,
}

impl RankStacks {
    /// The thread a rank's place is read from: the main thread, else the first.
    pub fn lead_thread(&self) -> Option<&ThreadReport> {
        self.threads.iter().find(|t| t.main).or(self.threads.first())
    }
}

/// A thread record with its frames, as read.
type ThreadRecords = (StackThread, Vec<StackFrame>);

/// The sample being read and the newest whole one.
#[derive(Default)]
pub struct StackCollector {
    frames: Vec<StackFrame>,
    threads: Vec<ThreadRecords>,
    pending_sample: Option<u32>,
    /// The newest sample read whole (taken), and the newest header of any status.
    whole: Option<(StackSample, Vec<ThreadRecords>)>,
    newest: Option<StackSample>,
}

impl StackCollector {
    /// Feeds one record, in the order the log holds them.
    pub fn see(&mut self, body: &RecordBody) {
        match body {
            RecordBody::StackFrame(f) => {
                self.restart_if_new(f.sample);
                if self.frames.len() < MAX_FRAMES {
                    self.frames.push(*f);
                }
            }
            RecordBody::StackThread(t) => {
                self.restart_if_new(t.sample);
                let frames = std::mem::take(&mut self.frames);
                let whole = frames.len() == t.frames as usize
                    && frames.iter().enumerate().all(|(d, f)| f.thread == t.thread && f.depth as usize == d);
                if self.threads.len() < MAX_THREADS && whole {
                    self.threads.push((*t, frames));
                }
            }
            RecordBody::StackSample(s) => {
                let threads = std::mem::take(&mut self.threads);
                self.frames.clear();
                let ours = self.pending_sample.take() == Some(s.sample);
                match s.status {
                    StackStatus::Taken if ours && threads.len() == s.threads as usize => {
                        self.whole = Some((*s, threads))
                    }
                    // A sample cut short (a kill between its records) is no sample.
                    StackStatus::Taken => return,
                    StackStatus::Unchanged | StackStatus::Failed => {}
                }
                self.newest = Some(*s);
            }
            _ => {}
        }
    }

    fn restart_if_new(&mut self, sample: u32) {
        if self.pending_sample != Some(sample) {
            self.pending_sample = Some(sample);
            self.frames.clear();
            self.threads.clear();
        }
    }

    /// The rank's newest sample among the records read so far (a trace asks after each
    /// header, `sf hang` once at the end): an unchanged one with the stacks it repeats;
    /// `None` when it has none (or repeats one the ring no longer holds). `progress_ns` is
    /// when the rank last advanced (its newest marker, `CLOCK_MONOTONIC`).
    pub fn newest(&self, rank: i32, progress_ns: Option<u64>) -> Option<RankStacks> {
        let newest = self.newest?;
        let threads = match newest.status {
            StackStatus::Failed => Vec::new(),
            _ => {
                let (whole, threads) = self.whole.as_ref()?;
                if whole.sample != newest.same_as {
                    return None;
                }
                threads.iter().map(thread_report).collect()
            }
        };
        let note = newest.note.to_string_lossy();
        Some(RankStacks {
            rank,
            sample: newest.sample,
            reason: newest.reason,
            status: if newest.status == StackStatus::Failed { StackStatus::Failed } else { StackStatus::Taken },
            note: (!note.is_empty()).then_some(note),
            t_ns: newest.t_ns,
            wall_ns: newest.wall_ns,
            current: progress_ns.is_none_or(|p| newest.t_ns >= p),
            dropped: newest.dropped,
            read_us: newest.read_us,
            threads,
        })
    }
}

fn thread_report((t, frames): &ThreadRecords) -> ThreadReport {
    ThreadReport {
        os_tid: t.os_tid,
        name: t.name.to_string_lossy(),
        main: t.main,
        active: t.active,
        owns_gil: t.owns_gil,
        depth: t.depth,
        frames: frames.iter().map(|f| FrameReport { function: f.function(), file: f.file(), line: f.line }).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::stacks::sample::{Frame, Sample, ThreadStack};

    fn sample_records(sample: u32, line: i32) -> Vec<RecordBody> {
        let frames = vec![Frame { function: "train".into(), file: "/job/train.py".into(), line }];
        let stacks = Sample::bounded(vec![ThreadStack {
            os_tid: 9,
            name: "MainThread".into(),
            main: true,
            active: false,
            owns_gil: false,
            frames,
        }]);
        stacks.records(sample)
    }

    fn header(sample: u32, status: StackStatus, same_as: u32, threads: u8, t_ns: u64) -> RecordBody {
        RecordBody::StackSample(StackSample {
            t_ns,
            wall_ns: t_ns,
            sample,
            reason: StackReason::Stall,
            request: 0,
            status,
            same_as,
            threads,
            dropped: 0,
            read_us: 0,
            note: crate::core::log::records_ports::Text::new(b""),
        })
    }

    fn read(records: &[RecordBody], progress_ns: Option<u64>) -> Option<RankStacks> {
        let mut c = StackCollector::default();
        records.iter().for_each(|r| c.see(r));
        c.newest(3, progress_ns)
    }

    #[test]
    fn the_newest_whole_sample_is_read_and_an_unchanged_one_repeats_it() {
        let mut log = sample_records(1, 10);
        log.push(header(1, StackStatus::Taken, 1, 1, 100));
        log.push(header(2, StackStatus::Unchanged, 1, 0, 200));
        let got = read(&log, Some(150)).unwrap();
        assert_eq!((got.sample, got.t_ns, got.current), (2, 200, true));
        assert_eq!(got.lead_thread().unwrap().frames[0].short(), "train (train.py:10)");
        assert!(!read(&log, Some(250)).unwrap().current, "the rank advanced since");
    }

    #[test]
    fn a_sample_cut_short_or_repeating_a_lost_one_is_no_sample() {
        let mut log = sample_records(1, 10);
        log.pop(); // the thread record never came
        log.push(header(1, StackStatus::Taken, 1, 1, 100));
        assert!(read(&log, None).is_none());
        let mut wrapped = sample_records(5, 10);
        wrapped.push(header(5, StackStatus::Taken, 5, 1, 100));
        wrapped.push(header(6, StackStatus::Unchanged, 4, 0, 200));
        assert!(read(&wrapped, None).is_none(), "sample 4 is gone from the ring");
        // A header claiming more threads than came before it is not whole either.
        let mut short = sample_records(1, 10);
        short.push(header(1, StackStatus::Taken, 1, 2, 100));
        assert!(read(&short, None).is_none());
    }
}
