//! `sf ls` on a log root holding several jobs: one row per job, newest first, instead of
//! one job's ranks; `--latest` on any command reads the first.

use std::collections::BTreeSet;

use serde::Serialize;

use crate::analysis::log::liveness::Liveness;
use crate::core::log::host as local_host;
use crate::core::log::reader::RankLog;
use crate::report::discover::{self, Dirs, FoundJob, LogFile};
use crate::report::ls::FileError;
use crate::report::wall::rfc3339_ms;
use crate::report::{moment, parallel, Failure};

/// The `--json` object; its field names are a contract.
#[derive(Debug, Serialize)]
pub struct JobsReport {
    pub dir: String,
    /// Newest first: the first is the job `--latest` reads.
    pub jobs: Vec<JobRow>,
    /// Logs whose header cannot be read, so that they name no job.
    pub errors: Vec<FileError>,
}

#[derive(Debug, Serialize)]
pub struct JobRow {
    pub job_id: String,
    /// The directories holding its logs (one per node), space-separated: what to pass
    /// another command for this job.
    pub dir: String,
    /// Distinct ranks with a readable log.
    pub ranks: usize,
    /// The largest world size its logs name; `None` when no log has a rank identity.
    pub world_size: Option<i32>,
    /// Readable logs, with rank identity or not.
    pub logs: usize,
    pub hosts: Vec<String>,
    /// Its logs by liveness, as `sf ls` judges each: heartbeat fresh; ended through
    /// `exit()`; gone without; heartbeat stale with the process still there; recording off.
    pub live: usize,
    pub ended: usize,
    pub dead: usize,
    pub stalled: usize,
    pub disabled: usize,
    /// When its first rank started, UTC (RFC 3339); `None` without a calibration.
    pub started: Option<String>,
    /// Its newest heartbeat, UTC (RFC 3339); `None` when no rank ever beat.
    pub last_beat: Option<String>,
}

/// The jobs in or below `dirs` when there are several and `dirs` picks none; `None` when
/// they hold one job (or one log file is given), which `ls::build` reads.
pub fn build(dirs: &Dirs) -> Result<Option<JobsReport>, Failure> {
    if matches!(dirs.0.as_slice(), [path] if !path.is_dir()) {
        return Ok(None);
    }
    let Some(found) = discover::jobs_found(dirs).map_err(Failure::Message)? else {
        return Ok(None);
    };
    let host = local_host::name();
    let mut errors = Vec::new();
    let mut jobs = Vec::with_capacity(found.jobs.len());
    for job in &found.jobs {
        let (row, unreadable) = row(job, &host);
        jobs.push(row);
        errors.extend(unreadable);
    }
    for file in &found.unreadable {
        if let Err(e) = RankLog::open(&file.path) {
            errors.push(FileError { file: file.path.display().to_string(), error: e.to_string() });
        }
    }
    Ok(Some(JobsReport { dir: dirs.display(), jobs, errors }))
}

/// What the job list shows of one log.
struct Seen {
    rank: i32,
    world_size: i32,
    host: String,
    liveness: Liveness,
    started_wall_ns: u64,
    beat_wall_ns: u64,
}

fn seen(file: &LogFile, reader_host: &str) -> Result<Seen, FileError> {
    let log = RankLog::open(&file.path)
        .map_err(|e| FileError { file: file.path.display().to_string(), error: e.to_string() })?;
    let (h, live) = (&log.header, log.live());
    Ok(Seen {
        rank: h.global_rank,
        world_size: h.world_size,
        host: h.host.clone(),
        liveness: moment::liveness(h, &live, file.taken.as_ref(), reader_host).0,
        started_wall_ns: h.base_wall_ns,
        beat_wall_ns: live.heartbeat_wall_ns,
    })
}

/// A job's row, and its logs that could not be read after all (changed since found).
fn row(job: &FoundJob, reader_host: &str) -> (JobRow, Vec<FileError>) {
    let mut seen_logs = Vec::new();
    let mut errors = Vec::new();
    for read in parallel::read_all(&job.logs, |file| seen(file, reader_host)) {
        match read {
            Ok(s) => seen_logs.push(s),
            Err(e) => errors.push(e),
        }
    }
    let count = |state: Liveness| seen_logs.iter().filter(|s| s.liveness == state).count();
    let dirs: BTreeSet<String> =
        job.logs.iter().filter_map(|f| f.path.parent()).map(|d| d.display().to_string()).collect();
    let ranks: BTreeSet<i32> = seen_logs.iter().map(|s| s.rank).filter(|&r| r >= 0).collect();
    let hosts: BTreeSet<&str> = seen_logs.iter().map(|s| s.host.as_str()).collect();
    let started = seen_logs.iter().map(|s| s.started_wall_ns).filter(|&ns| ns != 0).min();
    let last_beat = seen_logs.iter().map(|s| s.beat_wall_ns).filter(|&ns| ns != 0).max();
    let row = JobRow {
        job_id: job.job_id.clone(),
        dir: dirs.into_iter().collect::<Vec<_>>().join(" "),
        ranks: ranks.len(),
        world_size: seen_logs.iter().filter(|s| s.rank >= 0).map(|s| s.world_size).max(),
        logs: seen_logs.len(),
        hosts: hosts.into_iter().map(String::from).collect(),
        live: count(Liveness::Live),
        ended: count(Liveness::Exited),
        dead: count(Liveness::Dead),
        stalled: count(Liveness::Stalled),
        disabled: count(Liveness::Disabled),
        started: started.map(rfc3339_ms),
        last_beat: last_beat.map(rfc3339_ms),
    };
    (row, errors)
}
