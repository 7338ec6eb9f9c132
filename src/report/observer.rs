//! What a question has to tell while it works, for whoever drives it: how far a long read
//! is, and notes for the operator it finds on the way (missing ranks, which hosts a job ran
//! on, which copy of a rank was read). The report layer never prints; `sf` registers an
//! observer that draws a file counter on a terminal and writes notes to stderr, escaped.
//! Nothing is shown unless an observer is registered.

use std::sync::OnceLock;

/// One thing to tell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event<'a> {
    /// `done` of `total` files read.
    Read { done: usize, total: usize },
    /// The read of `total` files is over (finished or abandoned).
    ReadEnd { total: usize },
    /// A note for the operator, one line.
    Note(&'a str),
}

static OBSERVER: OnceLock<fn(Event)> = OnceLock::new();

/// Registers the process's observer; the first registration wins.
pub fn observe(observer: fn(Event)) {
    let _ = OBSERVER.set(observer);
}

fn tell(event: Event) {
    if let Some(observer) = OBSERVER.get() {
        observer(event);
    }
}

/// A read in progress: tells the observer as files finish, and that it ended when dropped.
pub struct Progress {
    total: usize,
}

impl Progress {
    pub fn new(total: usize) -> Progress {
        Progress { total }
    }

    pub fn done(&self, files: usize) {
        tell(Event::Read { done: files, total: self.total });
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        tell(Event::ReadEnd { total: self.total });
    }
}

/// Tells `notes` once per process, however many times a command discovers its logs.
pub fn say_once(notes: &[String]) {
    static SAID: std::sync::Once = std::sync::Once::new();
    SAID.call_once(|| notes.iter().for_each(|note| tell(Event::Note(note))));
}
