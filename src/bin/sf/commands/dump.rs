//! `sf dump`: every record one rank log holds, oldest first.

use std::path::Path;

use serde::Serialize;
use stagefrontier::core::log::reader::{LogHeader, RankLog, Record, ScanStats};

use super::Failure;
use crate::discover;

#[derive(Debug, Serialize)]
pub struct DumpReport {
    pub file: String,
    pub header: LogHeader,
    pub records: Vec<Record>,
    pub stats: ScanStats,
}

pub fn build(file: &Path) -> Result<DumpReport, Failure> {
    if file.is_dir() {
        return Err(Failure::Message(directory_given(file)));
    }
    let log = RankLog::open(file).map_err(|e| Failure::Message(e.to_string()))?;
    let (records, stats) = log.records();
    Ok(DumpReport { file: file.display().to_string(), header: log.header.clone(), records, stats })
}

/// The likely mistake is passing the job directory; name a log in it to pass instead.
fn directory_given(dir: &Path) -> String {
    let example = discover::logs_in(dir).ok().and_then(|logs| logs.into_iter().next());
    let example = example.unwrap_or_else(|| dir.join("rank-00000.sflog"));
    format!(
        "{} is a directory; sf dump reads one rank log: pass a file, e.g. sf dump {} (sf ls {} lists them)",
        dir.display(),
        example.display(),
        dir.display()
    )
}
