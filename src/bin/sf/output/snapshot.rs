//! `sf snapshot`'s output: where the copies went and what they hold.

use std::io::{self, Write};

use crate::cli::Format;
use stagefrontier::report::snapshot::SnapshotReport;

pub fn write<W: Write>(format: Format, out: W, report: &SnapshotReport) -> io::Result<()> {
    super::report(format, out, report, human)
}

fn human<W: Write>(out: &mut W, r: &SnapshotReport) -> io::Result<()> {
    human_line!(
        out,
        "copied {} logs in {:.3} s: {} whole records, {} slots caught mid-write left out, {:.1} MiB",
        r.logs,
        r.seconds,
        r.records,
        r.torn_slots,
        r.bytes as f64 / (1 << 20) as f64
    )?;
    for d in &r.dirs {
        human_line!(out, "  {}  host {}, job {}, {} logs, taken {}", d.dir, d.host, d.job_id, d.logs, d.taken_wall)?;
    }
    Ok(())
}
