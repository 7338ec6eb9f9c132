//! Output formats. Each command's report is computed once; an `Output` only formats it.

/// `writeln!` for human output: every line a human writer writes goes through
/// `terminal::line`, so a name from a log cannot end it early or send the terminal a
/// control sequence. A blank line is `writeln!(out)`.
macro_rules! human_line {
    ($out:expr, $($arg:tt)*) => {
        $crate::output::terminal::line($out.by_ref(), format_args!($($arg)*))
    };
}

pub mod dump;
mod error;
mod human;
mod human_device;
mod human_frontier;
mod human_hang;
mod human_hang_profiler;
mod human_kernels;
mod human_ports;
mod human_records;
mod human_stacks;
mod json;
pub mod openmetrics;
pub use error::error as json_error;
pub mod jobs;
pub mod kernels;
pub mod net;
pub mod path;
pub mod roles;
pub mod slow;
pub mod snapshot;
pub mod steps;
mod table;
pub(crate) mod terminal;
pub mod trace;
pub use terminal::escaped;

use std::io::{self, Write};

use serde::Serialize;
use stagefrontier::core::log::reader::ScanStats;

use crate::cli::Format;
use stagefrontier::report::frontier::FrontierReport;
use stagefrontier::report::hang::HangReport;
use stagefrontier::report::ls::LsReport;

pub trait Output {
    fn ls(&mut self, report: &LsReport) -> io::Result<()>;
    fn frontier(&mut self, report: &FrontierReport) -> io::Result<()>;
    fn hang(&mut self, report: &HangReport) -> io::Result<()>;
}

/// Writes one command's report: one JSON object on one line for scripts, or `human`'s
/// text for people; flushed either way.
pub fn report<W: Write, T: Serialize>(
    format: Format,
    mut out: W,
    report: &T,
    human: impl FnOnce(&mut W, &T) -> io::Result<()>,
) -> io::Result<()> {
    match format {
        Format::Json => json::line(&mut out, report)?,
        Format::Human => human(&mut out, report)?,
    }
    out.flush()
}

pub fn new<'a, W: Write + 'a>(format: Format, out: W) -> Box<dyn Output + 'a> {
    match format {
        Format::Human => Box::new(human::Human::new(out)),
        Format::Json => Box::new(json::Json::new(out)),
    }
}

/// What a dump's scan found, for stderr after the records in either format: it must not
/// mix into the records a script parses, yet an operator should see it.
pub fn scan_summary(file: &str, stats: &ScanStats) -> String {
    let mut line = format!("{file}: {} records held", stats.valid);
    // Each ring numbers its own records: the event ring's range, then the history's.
    let history = stats.history.as_deref().filter(|h| h.valid > 0);
    let mut ranges = Vec::new();
    if stats.valid > history.map_or(0, |h| h.valid) {
        ranges.push(format!("seq {}..{}", stats.first_seq, stats.last_seq));
    }
    if let Some(h) = history {
        ranges.push(format!("history seq {}..{}", h.first_seq, h.last_seq));
    }
    if !ranges.is_empty() {
        line += &format!(" ({})", ranges.join(", "));
    }
    line += &format!(
        ", {} lost to wraparound, {} missing, {} invalid slots",
        stats.lost_to_wrap, stats.missing, stats.invalid_slots
    );
    if stats.unknown_kind > 0 {
        line += &format!(", {} of a kind this sf does not know (written by a newer library)", stats.unknown_kind);
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scan_summary_names_every_count() {
        let stats =
            ScanStats { valid: 1024, first_seq: 1977, last_seq: 3000, lost_to_wrap: 1976, ..Default::default() };
        assert_eq!(
            scan_summary("r.sflog", &stats),
            "r.sflog: 1024 records held (seq 1977..3000), 1976 lost to wraparound, 0 missing, 0 invalid slots"
        );
        let empty = ScanStats { unknown_kind: 2, ..Default::default() };
        assert!(scan_summary("r", &empty).starts_with("r: 0 records held, 0 lost"));
        assert!(scan_summary("r", &empty).ends_with("2 of a kind this sf does not know (written by a newer library)"));
    }
}
