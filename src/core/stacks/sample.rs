//! A sample of the process's Python stacks, bounded before it becomes records.

use crate::core::fnv::Fnv1a;
use crate::core::log::records::{RecordBody, StackFrame, StackThread};
use crate::core::log::records_ports::Text;

/// Threads one sample keeps: the main thread, then running ones, then the rest. A
/// training process has a handful of Python threads; a pool of hundreds would otherwise
/// spend the log's budget for stacks in one sample.
pub const MAX_THREADS: usize = 16;
/// Frames kept per thread, the innermost ones: where the thread stands, and enough of
/// its callers to say which loop it is in.
pub const MAX_FRAMES: usize = 48;

/// One Python frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    pub function: String,
    pub file: String,
    pub line: i32,
}

/// One Python thread's stack, innermost frame first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ThreadStack {
    pub os_tid: u32,
    pub name: String,
    pub main: bool,
    pub active: bool,
    pub owns_gil: bool,
    pub frames: Vec<Frame>,
}

/// What one read of the process gave.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Sample {
    pub threads: Vec<ThreadStack>,
}

impl Sample {
    /// Keeps at most `MAX_THREADS` threads, the main one first and running ones next
    /// (each group in the interpreter's order), and at most `MAX_FRAMES` frames of each.
    pub fn bounded(mut threads: Vec<ThreadStack>) -> Sample {
        threads.sort_by_key(|t| (!t.main, !t.active));
        threads.truncate(MAX_THREADS);
        Sample { threads }
    }

    /// Equal for equal stacks (frames and threads, not activity): a stuck rank sampled
    /// again writes a one-record "unchanged" instead of its stacks again.
    pub fn fingerprint(&self) -> u64 {
        let mut h = Fnv1a::default();
        for t in &self.threads {
            h.write(&t.os_tid.to_le_bytes());
            h.write(&(t.frames.len() as u32).to_le_bytes());
            for f in &t.frames {
                h.write(f.function.as_bytes());
                h.write(&[0]);
                h.write(f.file.as_bytes());
                h.write(&f.line.to_le_bytes());
            }
        }
        h.finish()
    }

    /// Its frame and thread records, frames before their thread: the header comes last.
    pub fn records(&self, sample: u32) -> Vec<RecordBody> {
        let mut records = Vec::new();
        for (index, t) in self.threads.iter().enumerate() {
            let kept = &t.frames[..t.frames.len().min(MAX_FRAMES)];
            for (depth, f) in kept.iter().enumerate() {
                records.push(RecordBody::StackFrame(StackFrame::new(
                    sample,
                    index as u8,
                    depth as u8,
                    &f.function,
                    &f.file,
                    f.line,
                )));
            }
            records.push(RecordBody::StackThread(StackThread {
                sample,
                thread: index as u8,
                frames: kept.len() as u8,
                depth: t.frames.len().min(u16::MAX as usize) as u16,
                os_tid: t.os_tid,
                main: t.main,
                active: t.active,
                owns_gil: t.owns_gil,
                name: Text::new(t.name.as_bytes()),
            }));
        }
        records
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn thread(os_tid: u32, main: bool, active: bool, depth: usize) -> ThreadStack {
        let frames =
            (0..depth).map(|i| Frame { function: format!("f{i}"), file: "train.py".into(), line: i as i32 }).collect();
        ThreadStack { os_tid, name: String::new(), main, active, owns_gil: false, frames }
    }

    #[test]
    fn a_sample_keeps_the_main_thread_first_and_bounds_threads_and_frames() {
        let mut threads: Vec<ThreadStack> = (0..40).map(|i| thread(100 + i, false, i % 2 == 0, 3)).collect();
        threads.push(thread(7, true, false, 200));
        let sample = Sample::bounded(threads);
        assert_eq!(sample.threads.len(), MAX_THREADS);
        assert!(sample.threads[0].main && sample.threads[1..].iter().all(|t| t.active));
        let records = sample.records(3);
        let main = records.iter().find_map(|r| match r {
            RecordBody::StackThread(t) if t.main => Some(*t),
            _ => None,
        });
        let main = main.unwrap();
        assert_eq!((main.frames as usize, main.depth), (MAX_FRAMES, 200));
        assert_eq!(records.len(), MAX_FRAMES + 1 + 15 * (3 + 1));
        assert!(matches!(records.last(), Some(RecordBody::StackThread(_))));
    }

    #[test]
    fn equal_stacks_have_equal_fingerprints_and_a_moved_line_does_not() {
        let a = Sample::bounded(vec![thread(7, true, true, 4)]);
        let mut b = a.clone();
        b.threads[0].active = false;
        assert_eq!(a.fingerprint(), b.fingerprint(), "activity is not the stack");
        b.threads[0].frames[0].line += 1;
        assert_ne!(a.fingerprint(), b.fingerprint());
    }
}
