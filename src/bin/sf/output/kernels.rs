//! `sf kernels` output: JSON as the report is, or a summary line, the anomalies and a
//! per-rank table for people.

use std::io::{self, Write};

use super::table::{self, Align};
use crate::cli::Format;
use stagefrontier::report::kernels::KernelsReport;

pub fn write<W: Write>(format: Format, out: W, report: &KernelsReport) -> io::Result<()> {
    super::report(format, out, report, human)
}

fn human<W: Write>(out: &mut W, report: &KernelsReport) -> io::Result<()> {
    if !report.kernel_records {
        return human_line!(
            out,
            "{}: no kernel records: was the job run with CUDA_INJECTION64_PATH=/path/to/libstagefrontier.so (and SF_CUPTI not 0)?",
            report.dir
        );
    }
    let verdict = match report.anomalies.first() {
        None => "no anomalous kernel".to_string(),
        Some(a) => format!("ANOMALOUS: rank {} in {} ({} finding(s))", a.rank, a.kernel, report.anomalies.len()),
    };
    human_line!(
        out,
        "{}: {} ranks, {} kernels compared (grouped by {}, IQR k {}): {verdict}",
        report.dir,
        report.ranks.len(),
        report.kernels_compared,
        report.group_by,
        report.iqr_k
    )?;
    if !report.anomalies.is_empty() {
        writeln!(out)?;
        let rows: Vec<Vec<String>> = report
            .anomalies
            .iter()
            .map(|a| {
                vec![
                    a.rank.to_string(),
                    a.group.clone(),
                    us(a.score_ns),
                    us(a.upper_fence_ns),
                    us(a.past_fence_ns),
                    us(a.rank_p50_ns),
                    us(a.group_p50_ns),
                    a.kernel.clone(),
                ]
            })
            .collect();
        table::write(out, &ANOMALY_COLUMNS, &rows)?;
    }
    writeln!(out)?;
    let rows: Vec<Vec<String>> = report
        .ranks
        .iter()
        .map(|r| {
            let busy: Vec<String> =
                r.streams.iter().map(|s| format!("{}:{}={:.0}%", s.device, s.stream, 100.0 * s.utilization)).collect();
            vec![
                r.rank.to_string(),
                r.windows.to_string(),
                r.kernel_names.to_string(),
                r.launches.to_string(),
                r.nccl.kernels.to_string(),
                us(r.nccl.mean_ns as f64),
                us(r.nccl.max_ns as f64),
                (r.late + r.truncated_clusters + r.truncated_nccl + r.untracked).to_string(),
                if busy.is_empty() { "-".into() } else { busy.join(" ") },
            ]
        })
        .collect();
    table::write(out, &RANK_COLUMNS, &rows)
}

fn us(ns: f64) -> String {
    format!("{:.1}", ns / 1e3)
}

const ANOMALY_COLUMNS: [(&str, Align); 8] = [
    ("RANK", Align::Right),
    ("GROUP", Align::Left),
    ("SCORE_US", Align::Right),
    ("FENCE_US", Align::Right),
    ("PAST_US", Align::Right),
    ("P50_US", Align::Right),
    ("GROUP_P50_US", Align::Right),
    ("KERNEL", Align::Left),
];

const RANK_COLUMNS: [(&str, Align); 9] = [
    ("RANK", Align::Right),
    ("WINDOWS", Align::Right),
    ("KERNELS", Align::Right),
    ("LAUNCHES", Align::Right),
    ("NCCL", Align::Right),
    ("NCCL_MEAN_US", Align::Right),
    ("NCCL_MAX_US", Align::Right),
    ("LOST", Align::Right),
    ("BUSY (dev:stream=%)", Align::Left),
];
