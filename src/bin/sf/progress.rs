//! What the report layer tells while it works, shown to the operator: a file counter on
//! stderr for reads long enough to leave one wondering, and its notes as `sf:` lines.

use std::io::{IsTerminal, Write};

use stagefrontier::report::observer::{self, Event};

use crate::output::terminal::error_line;

/// Below this many files a read is quick enough to need no counter.
const SHOW_ABOVE_FILES: usize = 64;

/// From now on, long reads show their counter on stderr and notes are said there.
pub fn show_on_terminal() {
    observer::observe(show);
}

fn show(event: Event) {
    let total = match event {
        Event::Note(note) => return error_line(note),
        Event::Read { total, .. } | Event::ReadEnd { total } => total,
    };
    // Shown only on a terminal, so redirected stderr never collects counter lines.
    if total <= SHOW_ABOVE_FILES || !std::io::stderr().is_terminal() {
        return;
    }
    // A failed write to stderr only loses the counter.
    let _ = match event {
        Event::Read { done, total } => write!(std::io::stderr(), "\rsf: reading logs {done}/{total}"),
        // Clears the counter's line, so what follows starts on a clean one.
        _ => write!(std::io::stderr(), "\r\x1b[K"),
    };
}
