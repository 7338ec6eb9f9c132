//! `sf ls`'s list of jobs, for a log root holding several.

use std::io::{self, Write};

use super::table::{self, Align};
use crate::cli::Format;
use stagefrontier::report::jobs::{JobRow, JobsReport};

pub fn write<W: Write>(format: Format, out: W, report: &JobsReport) -> io::Result<()> {
    super::report(format, out, report, human)
}

fn human<W: Write>(out: &mut W, r: &JobsReport) -> io::Result<()> {
    let columns = [
        ("JOB", Align::Left),
        ("RANKS", Align::Right),
        ("STATE", Align::Left),
        ("STARTED", Align::Left),
        ("LAST_BEAT", Align::Left),
        ("DIR", Align::Left),
    ];
    let dash = || "-".to_string();
    let rows: Vec<Vec<String>> = r
        .jobs
        .iter()
        .map(|j| {
            vec![
                j.job_id.clone(),
                ranks(j),
                state(j),
                j.started.clone().unwrap_or_else(dash),
                j.last_beat.clone().unwrap_or_else(dash),
                j.dir.clone(),
            ]
        })
        .collect();
    table::write(out, &columns, &rows)?;
    if let Some(newest) = r.jobs.first() {
        human_line!(
            out,
            "{} jobs in {}, newest first: sf COMMAND {} --latest reads {}; sf ls DIR lists one job's ranks",
            r.jobs.len(),
            r.dir,
            r.dir,
            newest.job_id
        )?;
    }
    Ok(())
}

/// Ranks found of the world, or the logs when none has a rank identity.
fn ranks(j: &JobRow) -> String {
    match j.world_size {
        Some(world) => format!("{}/{world}", j.ranks),
        None => format!("{} logs", j.logs),
    }
}

/// Its logs by liveness, e.g. `1 live, 1 dead`.
fn state(j: &JobRow) -> String {
    let counts =
        [(j.live, "live"), (j.stalled, "stalled"), (j.dead, "dead"), (j.disabled, "disabled"), (j.ended, "ended")];
    let said: Vec<String> = counts.iter().filter(|(n, _)| *n > 0).map(|(n, what)| format!("{n} {what}")).collect();
    if said.is_empty() {
        "-".to_string()
    } else {
        said.join(", ")
    }
}
