//! How the process ended (kind 26, `process_end`): its exit status, or the signal that
//! ended it. The end is first stored in three live header words
//! (`format::live::END_*`): an exit path or a signal handler can do atomic stores and
//! nothing more, and a process killed right after still leaves them in the file. The
//! collector, when it gets its last round (a normal exit), also writes them as a record,
//! so `sf dump` lists the end with the rest. A process that left no end died of a signal
//! no handler could see (SIGKILL, or its handler was replaced), at or after its last
//! heartbeat.

use serde::Serialize;

use super::records::{Decoder, Encoder};

/// How the process ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[repr(u8)]
pub enum EndHow {
    /// `exit(code)` or a return from `main` (`on_exit` sees the status), or `_exit(code)`.
    Exit = 1,
    /// Signal `code`, whose default action ended the process (no handler of the
    /// application's was installed; the library restored the default and raised it again).
    Signal = 2,
    /// Signal `code` arrived and went on to the application's own handler: the process may
    /// have gone on (a later end replaces this one) or ended in that handler.
    HandledSignal = 3,
}

impl EndHow {
    pub fn from_u8(raw: u8) -> Option<EndHow> {
        [Self::Exit, Self::Signal, Self::HandledSignal].into_iter().find(|h| *h as u8 == raw)
    }
}

/// Kind 26.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct ProcessEnd {
    /// `CLOCK_MONOTONIC` ns.
    pub t_ns: u64,
    /// `CLOCK_REALTIME` ns, to order the ends of ranks on different hosts.
    pub wall_ns: u64,
    pub how: EndHow,
    /// The exit status, or the signal number.
    pub code: i32,
}

impl ProcessEnd {
    /// The `END_HOW` header word: 0 while the process has not ended.
    pub fn how_word(how: EndHow, code: i32) -> u64 {
        (how as u64) << 32 | code as u32 as u64
    }

    /// The end the three header words hold, if any.
    pub fn from_words(t_ns: u64, wall_ns: u64, how_word: u64) -> Option<ProcessEnd> {
        let how = EndHow::from_u8((how_word >> 32) as u8)?;
        Some(ProcessEnd { t_ns, wall_ns, how, code: how_word as u32 as i32 })
    }

    /// `status 1`, `SIGTERM`, `SIGTERM (handled by the application)`.
    pub fn cause(&self) -> String {
        match self.how {
            EndHow::Exit => format!("status {}", self.code),
            EndHow::Signal => signal_name(self.code),
            EndHow::HandledSignal => format!("{}, handled by the application", signal_name(self.code)),
        }
    }

    /// Ended by a signal a launcher sends to stop its ranks.
    pub fn is_teardown(&self) -> bool {
        self.how != EndHow::Exit && [libc::SIGTERM, libc::SIGINT, libc::SIGHUP].contains(&self.code)
    }
}

/// `SIGTERM` for 15; `signal 64` for a number with no name here.
pub fn signal_name(signal: i32) -> String {
    let name = match signal {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGTERM => "SIGTERM",
        _ => return format!("signal {signal}"),
    };
    name.to_string()
}

pub(super) fn encode(e: &ProcessEnd, w: &mut Encoder) {
    w.u64(e.t_ns);
    w.u64(e.wall_ns);
    w.u8(e.how as u8);
    w.i32(e.code);
}

pub(super) fn decode(r: &mut Decoder) -> Option<ProcessEnd> {
    Some(ProcessEnd { t_ns: r.u64()?, wall_ns: r.u64()?, how: EndHow::from_u8(r.u8()?)?, code: r.i32()? })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_header_word_round_trips() {
        for (how, code) in [(EndHow::Exit, 0), (EndHow::Exit, -1), (EndHow::Signal, 15), (EndHow::HandledSignal, 2)] {
            let end = ProcessEnd::from_words(5, 6, ProcessEnd::how_word(how, code)).unwrap();
            assert_eq!((end.how, end.code, end.t_ns, end.wall_ns), (how, code, 5, 6));
        }
        assert_eq!(ProcessEnd::from_words(5, 6, 0), None, "not ended");
        let term = ProcessEnd { t_ns: 0, wall_ns: 0, how: EndHow::Signal, code: libc::SIGTERM };
        assert!(term.is_teardown() && term.cause() == "SIGTERM");
        let exit = ProcessEnd { how: EndHow::Exit, code: 1, ..term };
        assert!(!exit.is_teardown() && exit.cause() == "status 1");
    }
}
