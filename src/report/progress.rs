//! Progress of reads long enough to leave an operator wondering: the report layer says how
//! far it is, and whoever drives it decides whether and how to show that (`sf` draws a file
//! counter on a terminal). Nothing is shown unless an observer is registered.

use std::sync::OnceLock;

/// One step of a read over `total` files.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// `done` of `total` files read.
    Done { done: usize, total: usize },
    /// The read is over (finished or abandoned).
    End { total: usize },
}

static OBSERVER: OnceLock<fn(Event)> = OnceLock::new();

/// Registers the process's progress observer; the first registration wins.
pub fn observe(observer: fn(Event)) {
    let _ = OBSERVER.set(observer);
}

/// A read in progress: tells the observer as files finish, and that it ended when dropped.
pub struct Progress {
    total: usize,
}

impl Progress {
    pub fn new(total: usize) -> Progress {
        Progress { total }
    }

    pub fn done(&mut self, files: usize) {
        if let Some(observer) = OBSERVER.get() {
            observer(Event::Done { done: files, total: self.total });
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        if let Some(observer) = OBSERVER.get() {
            observer(Event::End { total: self.total });
        }
    }
}
