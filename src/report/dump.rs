//! `sf dump`: the records one rank log holds, oldest first, streamed through filters; or
//! its header and name tables.

use std::collections::VecDeque;
use std::io;
use std::path::Path;

use crate::core::log::reader::{LiveState, LogHeader, RankLog, Record, ScanStats};
use serde::Serialize;

use super::Failure;
use crate::report::discover;
use crate::report::wall::WallClock;

/// Which records `sf dump` prints, or the header instead.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DumpOptions {
    pub header: bool,
    /// Kind codes to keep; empty keeps every kind.
    pub kinds: Vec<u16>,
    pub since: Option<Since>,
    pub last: Option<usize>,
}

/// Where `--since` starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Since {
    /// A `CLOCK_MONOTONIC` time of the rank's host, in ns.
    MonoNs(u64),
    /// This many ns before the log's last heartbeat.
    Before(u64),
    /// A wall-clock time, ns since the epoch, mapped through the header's calibration.
    WallNs(u64),
}

/// The names a log refers to by id: its stage-name table (stage and value names).
pub struct LogNames {
    stages: Vec<Option<String>>,
}

impl LogNames {
    pub fn of(log: &RankLog) -> LogNames {
        LogNames::new(log.stage_names())
    }

    /// Entry `id` names id `id`.
    pub fn new(stages: Vec<Option<String>>) -> LogNames {
        LogNames { stages }
    }

    /// The stage or value name of `id`; `stage#ID` when the table has no such entry.
    pub fn stage(&self, id: u16) -> String {
        self.stages.get(id as usize).cloned().flatten().unwrap_or_else(|| format!("stage#{id}"))
    }
}

/// `sf dump --header`: who wrote the log, its clock, its live state and its name table.
#[derive(Debug, Serialize)]
pub struct HeaderReport {
    pub file: String,
    pub header: LogHeader,
    /// The library's start in UTC, from the clock calibration.
    pub start_wall: Option<String>,
    pub live: LiveState,
    pub names: Vec<NameEntry>,
}

#[derive(Debug, Serialize)]
pub struct NameEntry {
    pub id: u16,
    pub name: String,
}

pub fn open(file: &Path) -> Result<RankLog, Failure> {
    if file.is_dir() {
        return Err(Failure::Message(directory_given(file)));
    }
    RankLog::open(file).map_err(|e| Failure::Message(e.to_string()))
}

pub fn header(file: &Path, log: &RankLog) -> HeaderReport {
    let names = log.stage_names().into_iter().enumerate();
    let clock = WallClock::of(&log.header);
    HeaderReport {
        file: file.display().to_string(),
        header: log.header.clone(),
        start_wall: clock.wall_ns(log.header.base_mono_ns).map(crate::report::wall::rfc3339_ms),
        live: log.live(),
        names: names.filter_map(|(id, name)| Some(NameEntry { id: id as u16, name: name? })).collect(),
    }
}

/// Hands `emit` every record `options` keeps, oldest first, in memory bounded by `--last`;
/// stops emitting at the first write error and returns it.
pub fn stream(
    log: &RankLog,
    options: &DumpOptions,
    mut emit: impl FnMut(&Record) -> io::Result<()>,
) -> Result<ScanStats, Failure> {
    let cutoff = options.since.map(|since| match since {
        Since::MonoNs(ns) => ns,
        Since::Before(ns) => log.live().heartbeat_mono_ns.saturating_sub(ns),
        Since::WallNs(ns) => WallClock::of(&log.header).mono_ns(ns),
    });
    let mut started = cutoff.is_none();
    let mut failed: Option<io::Error> = None;
    let mut tail: VecDeque<Record> = VecDeque::new();
    let stats = log.scan(|record| {
        if failed.is_some() {
            return;
        }
        // A record without a time of its own follows the records around it.
        match (cutoff, record.body.t_ns()) {
            (Some(cutoff), Some(t)) if t < cutoff => return,
            (Some(_), Some(_)) => started = true,
            _ if !started => return,
            _ => {}
        }
        if !options.kinds.is_empty() && !options.kinds.contains(&record.body.kind()) {
            return;
        }
        match options.last {
            Some(n) => {
                if tail.len() == n {
                    tail.pop_front();
                }
                if n > 0 {
                    tail.push_back(record);
                }
            }
            None => failed = emit(&record).err(),
        }
    });
    if let Some(error) = failed {
        return Err(Failure::Output(error));
    }
    for record in &tail {
        emit(record)?;
    }
    Ok(stats)
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
