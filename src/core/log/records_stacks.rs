//! A rank's Python stacks, sampled in process (kinds 27-29, history ring).
//!
//! One sample is its threads' `stack_frame` records, then one `stack_thread` record per
//! thread, then the `stack_sample` record, written last: a reader takes a sample as
//! whole only when its header follows frames and threads in the counts it gives, so a
//! sample cut short by a kill reads as absent, never as a shorter stack. A sample equal
//! to the one before it is its header alone (`StackStatus::Unchanged`, naming the sample
//! it repeats); one the sampler could not take is its header with the reason.

use serde::Serialize;

use super::records::{Decoder, Encoder};
use super::records_ports::Text;

/// Bytes of a frame's text: the function, a NUL, then the file (its tail when longer).
pub const FRAME_TEXT: usize = 100;
/// Bytes of a thread's name kept.
pub const THREAD_NAME: usize = 64;
/// Bytes of a failed sample's reason kept.
pub const SAMPLE_NOTE: usize = 64;

/// Why the library took a sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[repr(u8)]
pub enum StackReason {
    /// The rank stopped advancing for longer than a few steps' time.
    Stall = 1,
    /// `sf hang --stacks` set the request word in the log's header.
    Request = 2,
}

/// What a `stack_sample` record stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[repr(u8)]
pub enum StackStatus {
    /// Its threads and frames came just before it.
    Taken = 1,
    /// The same stacks as sample `same_as`: nothing else was written.
    Unchanged = 2,
    /// The stacks could not be read (`note` says why).
    Failed = 3,
}

/// Kind 29: a sample's header, committed after its threads and frames.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct StackSample {
    /// `CLOCK_MONOTONIC` ns when the sampler began reading.
    pub t_ns: u64,
    /// `CLOCK_REALTIME` ns of the same moment.
    pub wall_ns: u64,
    /// Numbers the rank's samples from 1.
    pub sample: u32,
    pub reason: StackReason,
    /// The request word it answers (`StackReason::Request`), else 0.
    pub request: u64,
    pub status: StackStatus,
    /// The sample whose stacks this one repeats (`Unchanged`), else its own number.
    pub same_as: u32,
    /// `stack_thread` records of the sample.
    pub threads: u8,
    /// Samples taken but not written since the previous header: the log's budget for
    /// stacks was spent.
    pub dropped: u32,
    /// How long the read took, in microseconds: the sampling's cost, in every log.
    pub read_us: u32,
    pub note: Text<SAMPLE_NOTE>,
}

/// Kind 28: one thread of a sample, after its frames.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct StackThread {
    pub sample: u32,
    /// Position in the sample, from 0.
    pub thread: u8,
    /// Frames recorded (the innermost ones), and how deep the stack was.
    pub frames: u8,
    pub depth: u16,
    /// The OS thread id (0 unknown); the process's main thread has the pid's.
    pub os_tid: u32,
    pub main: bool,
    /// Running (not waiting in a lock, a sleep or I/O), as py-spy judges it.
    pub active: bool,
    pub owns_gil: bool,
    pub name: Text<THREAD_NAME>,
}

/// Kind 27: one frame of a thread, innermost first (`depth` 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StackFrame {
    pub sample: u32,
    pub thread: u8,
    pub depth: u8,
    pub line: i32,
    /// `function\0file`: see `StackFrame::function` and `StackFrame::file`.
    pub text: Text<FRAME_TEXT>,
}

impl StackFrame {
    /// Packs the function and the file into the record's text: the function whole when it
    /// fits in half, the file's tail (its name) in the rest.
    pub fn new(sample: u32, thread: u8, depth: u8, function: &str, file: &str, line: i32) -> StackFrame {
        let function = clip_head(function, FRAME_TEXT / 2);
        let file = clip_tail(file, FRAME_TEXT - function.len() - 1);
        let mut text = Vec::with_capacity(FRAME_TEXT);
        text.extend_from_slice(function.as_bytes());
        text.push(0);
        text.extend_from_slice(file.as_bytes());
        StackFrame { sample, thread, depth, line, text: Text::new(&text) }
    }

    pub fn function(&self) -> String {
        let bytes = self.text.as_bytes();
        let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
        String::from_utf8_lossy(&bytes[..end]).into_owned()
    }

    pub fn file(&self) -> String {
        let bytes = self.text.as_bytes();
        let start = bytes.iter().position(|&b| b == 0).map_or(bytes.len(), |at| at + 1);
        String::from_utf8_lossy(&bytes[start..]).into_owned()
    }
}

/// JSON: the frame's fields with its text split into `function` and `file`.
impl Serialize for StackFrame {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let f = self;
        let mut st = s.serialize_struct("StackFrame", 6)?;
        st.serialize_field("sample", &f.sample)?;
        st.serialize_field("thread", &f.thread)?;
        st.serialize_field("depth", &f.depth)?;
        st.serialize_field("function", &f.function())?;
        st.serialize_field("file", &f.file())?;
        st.serialize_field("line", &f.line)?;
        st.end()
    }
}

/// At most `max` bytes of `s` from its start, cut at a character boundary.
fn clip_head(s: &str, max: usize) -> &str {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// At most `max` bytes of `s` from its end (a path's file name and nearest folders).
fn clip_tail(s: &str, max: usize) -> &str {
    let mut start = s.len().saturating_sub(max);
    while !s.is_char_boundary(start) {
        start += 1;
    }
    &s[start..]
}

impl StackReason {
    fn from_u8(raw: u8) -> Option<StackReason> {
        [Self::Stall, Self::Request].into_iter().find(|r| *r as u8 == raw)
    }
}

impl StackStatus {
    fn from_u8(raw: u8) -> Option<StackStatus> {
        [Self::Taken, Self::Unchanged, Self::Failed].into_iter().find(|s| *s as u8 == raw)
    }
}

pub(super) fn encode_sample(s: &StackSample, w: &mut Encoder) {
    for v in [s.t_ns, s.wall_ns, s.request] {
        w.u64(v);
    }
    for v in [s.sample, s.same_as, s.dropped, s.read_us] {
        w.u32(v);
    }
    w.u8(s.reason as u8);
    w.u8(s.status as u8);
    w.u8(s.threads);
    s.note.encode(w);
}

pub(super) fn decode_sample(r: &mut Decoder) -> Option<StackSample> {
    let (t_ns, wall_ns, request) = (r.u64()?, r.u64()?, r.u64()?);
    let (sample, same_as, dropped, read_us) = (r.u32()?, r.u32()?, r.u32()?, r.u32()?);
    Some(StackSample {
        t_ns,
        wall_ns,
        request,
        sample,
        same_as,
        dropped,
        read_us,
        reason: StackReason::from_u8(r.u8()?)?,
        status: StackStatus::from_u8(r.u8()?)?,
        threads: r.u8()?,
        note: Text::decode(r)?,
    })
}

pub(super) fn encode_thread(t: &StackThread, w: &mut Encoder) {
    w.u32(t.sample);
    w.u8(t.thread);
    w.u8(t.frames);
    w.u16(t.depth);
    w.u32(t.os_tid);
    w.u8(u8::from(t.main) | u8::from(t.active) << 1 | u8::from(t.owns_gil) << 2);
    t.name.encode(w);
}

pub(super) fn decode_thread(r: &mut Decoder) -> Option<StackThread> {
    let (sample, thread, frames, depth, os_tid, flags) = (r.u32()?, r.u8()?, r.u8()?, r.u16()?, r.u32()?, r.u8()?);
    Some(StackThread {
        sample,
        thread,
        frames,
        depth,
        os_tid,
        main: flags & 1 != 0,
        active: flags & 2 != 0,
        owns_gil: flags & 4 != 0,
        name: Text::decode(r)?,
    })
}

pub(super) fn encode_frame(f: &StackFrame, w: &mut Encoder) {
    w.u32(f.sample);
    w.u8(f.thread);
    w.u8(f.depth);
    w.i32(f.line);
    f.text.encode(w);
}

pub(super) fn decode_frame(r: &mut Decoder) -> Option<StackFrame> {
    Some(StackFrame { sample: r.u32()?, thread: r.u8()?, depth: r.u8()?, line: r.i32()?, text: Text::decode(r)? })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_keeps_its_function_and_the_tail_of_a_long_path() {
        let long = format!("/{}/train.py", "venv/lib/python3.11/site-packages".repeat(4));
        let f = StackFrame::new(1, 0, 0, "train", &long, 139);
        assert_eq!(f.function(), "train");
        assert!(f.file().ends_with("/train.py") && f.file().len() < long.len(), "{}", f.file());
        assert_eq!(f.function().len() + f.file().len() + 1, f.text.as_bytes().len());
        let wide = StackFrame::new(1, 0, 0, &"é".repeat(80), "ü.py", 1);
        assert!(wide.function().chars().all(|c| c == 'é') && wide.file() == "ü.py");
    }
}
