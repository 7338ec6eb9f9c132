//! `sf steps`' output: a table, one JSON object, or the long CSV `sf frontier --csv` reads.

use std::io::{self, Write};

use super::table::{self, Align};
use crate::cli::{Format, StepsFormat};
use stagefrontier::report::frontier::StageMap;
use stagefrontier::report::steps::StepsReport;

pub fn write<W: Write>(format: StepsFormat, out: W, report: &StepsReport) -> io::Result<()> {
    match format {
        StepsFormat::Json => super::report(Format::Json, out, report, |_, _| Ok(())),
        StepsFormat::Human => super::report(Format::Human, out, report, human),
        StepsFormat::Csv => csv(out, report),
    }
}

fn human<W: Write>(out: &mut W, report: &StepsReport) -> io::Result<()> {
    let steps: usize = report.ranks.iter().map(|r| r.steps.len()).sum();
    human_line!(
        out,
        "{}: {} ranks, {steps} rank steps, {} stages",
        report.dir,
        report.ranks.len(),
        report.stages.len()
    )?;
    for note in notes(report) {
        human_line!(out, "{note}")?;
    }
    let mut columns: Vec<(&str, Align)> =
        vec![("RANK", Align::Right), ("STEP", Align::Right), ("START", Align::Left), ("WALL_S", Align::Right)];
    columns.extend(report.stages.iter().map(|s| (s.as_str(), Align::Right)));
    let mut rows = Vec::new();
    for r in &report.ranks {
        for s in &r.steps {
            let mut row = vec![
                r.rank.to_string(),
                s.step.to_string(),
                s.start.clone().unwrap_or_else(|| "-".into()),
                format!("{:.6}", s.wall_s),
            ];
            row.extend(report.stages.iter().map(|name| {
                s.stages.0.iter().find(|(n, _)| n == name).map_or_else(|| "-".to_string(), |(_, v)| format!("{v:.6}"))
            }));
            rows.push(row);
        }
    }
    table::write(out, &columns, &rows)
}

/// Rows by step, then rank, each vector's stages in its order: first appearance gives
/// `sf frontier --csv` the stage order it uses on the logs. Numbers are written in full
/// (Rust's shortest round-trip form), so they read back exactly. `wait_seconds` and
/// `caused_seconds` carry the wait attribution, so the frontier reads the CSV as the logs.
/// What the steps listed leave out: older steps, or older steps' waits.
fn notes(report: &StepsReport) -> Vec<String> {
    let history = report.history_starts_at_step.map(stagefrontier::report::history_note);
    let window = report.call_window.as_ref().map(|w| w.note());
    let waits = report.waits_start_at_step.map(stagefrontier::report::waits_note);
    history.into_iter().chain(window).chain(waits).collect()
}

fn csv<W: Write>(out: W, report: &StepsReport) -> io::Result<()> {
    // The CSV is data on stdout: its notes go to stderr.
    for note in notes(report) {
        let _ = human_line!(io::stderr(), "sf: {note}");
    }
    let device = report.ranks.iter().flat_map(|r| &r.steps).any(|s| !s.device.0.is_empty());
    let mut rows: Vec<(u64, u32, &stagefrontier::report::steps::StepReport)> =
        report.ranks.iter().flat_map(|r| r.steps.iter().map(move |s| (s.step, r.rank, s))).collect();
    rows.sort_by_key(|&(step, rank, _)| (step, rank));
    let mut w = ::csv::Writer::from_writer(out);
    let mut header = vec!["step", "rank", "stage", "seconds", "overlap_seconds", "wait_seconds", "caused_seconds"];
    if device {
        header.extend(["device_seconds", "spill_seconds"]);
    }
    w.write_record(&header)?;
    for (step, rank, s) in rows {
        for (stage, seconds) in &s.stages.0 {
            // Blank where the attribution holds nothing: an explicit 0 stays an entry.
            let cell = |map: &StageMap<f64>| {
                map.0.iter().find(|(n, _)| n == stage).map_or_else(String::new, |(_, v)| v.to_string())
            };
            let mut record = vec![
                step.to_string(),
                rank.to_string(),
                stage.clone(),
                seconds.to_string(),
                s.overlap_s.to_string(),
                cell(&s.wait_s),
                cell(&s.caused_s),
            ];
            if device {
                match s.device.0.iter().find(|(n, _)| n == stage) {
                    Some((_, d)) => record.extend([d.device_s.to_string(), d.spill_s.to_string()]),
                    None => record.extend([String::new(), String::new()]),
                }
            }
            w.write_record(&record)?;
        }
    }
    w.flush()
}
