//! A file counter on stderr for reads long enough to leave an operator wondering: the
//! report layer's progress events, drawn on a terminal.

use std::io::{IsTerminal, Write};

use stagefrontier::report::progress::{self, Event};

/// Below this many files a read is quick enough to need no counter.
const SHOW_ABOVE_FILES: usize = 64;

/// From now on, long reads show their counter on stderr.
pub fn show_on_terminal() {
    progress::observe(draw);
}

/// Shown only on a terminal, so redirected stderr never collects counter lines.
fn draw(event: Event) {
    let total = match event {
        Event::Done { total, .. } | Event::End { total } => total,
    };
    if total <= SHOW_ABOVE_FILES || !std::io::stderr().is_terminal() {
        return;
    }
    // A failed write to stderr only loses the counter.
    let _ = match event {
        Event::Done { done, total } => write!(std::io::stderr(), "\rsf: reading logs {done}/{total}"),
        // Clears the counter's line, so what follows starts on a clean one.
        Event::End { .. } => write!(std::io::stderr(), "\r\x1b[K"),
    };
}
