//! The thread that reads this process's Python stacks with py-spy, pointed at its own
//! pid: no ptrace, no GIL, no signal. A process cannot suspend itself, so the reads are
//! py-spy's non-blocking ones (a stack may be caught mid-change: the next sample tells),
//! and without native frames (they need ptrace and libunwind). It runs beside the
//! collector, which never waits for it: a read can take tens of milliseconds (the first
//! one parses the interpreter's symbols) and the collector keeps the heartbeat.

use std::sync::mpsc::{channel, Receiver, Sender, TryRecvError};

use super::sample::Sample;
use crate::core::log::records::StackReason;

/// What the collector asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ask {
    pub reason: StackReason,
    /// The request word it answers (`StackReason::Request`), else 0.
    pub request: u64,
}

/// A sample taken, or why none could be.
pub struct Taken {
    pub ask: Ask,
    /// `CLOCK_MONOTONIC` and `CLOCK_REALTIME` ns when the read began, and how long it took.
    pub t_ns: u64,
    pub wall_ns: u64,
    pub read_ns: u64,
    pub outcome: Result<Sample, String>,
}

/// What `Sampler::try_take` found.
pub enum Poll {
    Taken(Taken),
    Pending,
    /// The thread is gone (it cannot be, short of a panic outside its guard).
    Gone,
}

/// The collector's end of the sampler thread.
pub struct Sampler {
    asks: Sender<Ask>,
    taken: Receiver<Taken>,
}

/// The sampler thread's name.
pub const THREAD_NAME: &str = "sf-stacks";

impl Sampler {
    /// Starts the thread; `Err` says why it could not (the process is short of threads).
    pub fn start() -> Result<Sampler, String> {
        let (asks, asked) = channel::<Ask>();
        let (give, taken) = channel::<Taken>();
        std::thread::Builder::new()
            .name(THREAD_NAME.into())
            .spawn(move || {
                let mut reader = read::Reader::default();
                while let Ok(ask) = asked.recv() {
                    let (t_ns, wall_ns) =
                        (crate::core::record::clock::monotonic_ns(), crate::core::record::clock::wall_ns());
                    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| reader.sample()))
                        .unwrap_or_else(|_| Err("the stack reader panicked".into()));
                    let read_ns = crate::core::record::clock::monotonic_ns().saturating_sub(t_ns);
                    if give.send(Taken { ask, t_ns, wall_ns, read_ns, outcome }).is_err() {
                        return;
                    }
                }
            })
            .map(|_| Sampler { asks, taken })
            .map_err(|e| format!("cannot start the stack sampler thread: {e}"))
    }

    /// Hands the thread a request; false when it is gone.
    pub fn ask(&self, ask: Ask) -> bool {
        self.asks.send(ask).is_ok()
    }

    /// The sample the thread finished, if any, without waiting.
    pub fn try_take(&self) -> Poll {
        match self.taken.try_recv() {
            Ok(taken) => Poll::Taken(taken),
            Err(TryRecvError::Empty) => Poll::Pending,
            Err(TryRecvError::Disconnected) => Poll::Gone,
        }
    }
}

#[cfg(feature = "stacks")]
mod read {
    use super::super::sample::{Frame, Sample, ThreadStack};

    /// py-spy's view of this process, kept between samples (finding the interpreter is
    /// the slow part) and dropped after a failed read, to be found again.
    #[derive(Default)]
    pub struct Reader {
        spy: Option<py_spy::PythonSpy>,
    }

    impl Reader {
        pub fn sample(&mut self) -> Result<Sample, String> {
            let pid = std::process::id();
            if self.spy.is_none() {
                let mut config = py_spy::Config::default();
                config.blocking = py_spy::config::LockingStrategy::NonBlocking;
                config.native = false;
                let spy = py_spy::PythonSpy::new(pid as py_spy::Pid, &config).map_err(|e| format!("{e:#}"))?;
                self.spy = Some(spy);
            }
            let spy = self.spy.as_mut().expect("set above");
            let traces = match spy.get_stack_traces() {
                Ok(traces) => traces,
                Err(e) => {
                    self.spy = None;
                    return Err(format!("{e:#}"));
                }
            };
            let threads = traces
                .into_iter()
                .map(|t| {
                    let os_tid = t.os_thread_id.unwrap_or(0) as u32;
                    ThreadStack {
                        os_tid,
                        main: os_tid == pid,
                        name: t.thread_name.unwrap_or_default(),
                        active: t.active,
                        owns_gil: t.owns_gil,
                        frames: t
                            .frames
                            .into_iter()
                            .map(|f| Frame { function: f.name, file: f.filename, line: f.line })
                            .collect(),
                    }
                })
                .collect();
            Ok(Sample::bounded(threads))
        }
    }
}

#[cfg(not(feature = "stacks"))]
mod read {
    use super::super::sample::Sample;

    #[derive(Default)]
    pub struct Reader;

    impl Reader {
        pub fn sample(&mut self) -> Result<Sample, String> {
            Err("this build of the library leaves Python stacks out (feature `stacks`)".into())
        }
    }
}
