//! A file counter on stderr for reads long enough to leave an operator wondering.

use std::io::{IsTerminal, Write};

/// Below this many files a read is quick enough to need no counter.
const SHOW_ABOVE_FILES: usize = 64;

pub struct Progress {
    total: usize,
    shown: bool,
}

impl Progress {
    /// Shown only on a terminal, so redirected stderr never collects counter lines.
    pub fn new(total: usize) -> Progress {
        Progress { total, shown: total > SHOW_ABOVE_FILES && std::io::stderr().is_terminal() }
    }

    pub fn done(&mut self, files: usize) {
        if self.shown {
            // A failed write to stderr only loses the counter.
            let _ = write!(std::io::stderr(), "\rsf: reading logs {files}/{}", self.total);
        }
    }
}

impl Drop for Progress {
    /// Clears the counter's line, so what follows starts on a clean one.
    fn drop(&mut self) {
        if self.shown {
            let _ = write!(std::io::stderr(), "\r\x1b[K");
        }
    }
}
