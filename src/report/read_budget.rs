//! How many event-ring records a command reads of each rank when a job is too big to read
//! whole within seconds and bounded memory. Reading and checking a record costs about
//! 0.1 µs of CPU here, so a job's whole event rings (65,536 records a rank by default) are
//! read within seconds up to a few hundred ranks; past that, each rank gets an equal share
//! of a job-wide budget and the command reads its rank's newest records
//! (`RankLog::scan_newest`), saying where the window it read starts. Each budget has its
//! environment variable to widen or narrow it.

use crate::report::Failure;

/// A job-wide number of event records, shared equally by the logs read.
pub struct Budget {
    /// The environment variable that sets it.
    pub var: &'static str,
    pub default: u64,
    /// What the records are, for messages.
    what: &'static str,
    /// The fewest records a log is read for, whatever the budget says.
    floor: u64,
}

/// The event records `ls` checks, `net` reads for QP windows and `hang` reads for each
/// rank's newest calls: every record of 512 default logs, the newest 8,192 a rank at
/// 4,096 (measured there: `ls` 5.4 s, `hang` 5.1 s, `net` 2.4 s on this 2-core machine).
pub const RECORDS: Budget = Budget { var: "SF_READ_BUDGET", default: 1 << 25, what: "records", floor: 4096 };

/// The NCCL calls the wait attribution of `frontier`, `slow` and `steps` holds all at once
/// (32 bytes each, `call_window`): every record of 256 default logs, 512 MiB.
pub const CALLS: Budget = Budget { var: "SF_CALL_BUDGET", default: 1 << 24, what: "NCCL calls", floor: 1 };

impl Budget {
    /// The budget its variable sets, else the default.
    pub fn total(&self) -> Result<u64, Failure> {
        self.total_of(std::env::var(self.var).ok().as_deref())
    }

    fn total_of(&self, setting: Option<&str>) -> Result<u64, Failure> {
        let Some(text) = setting else { return Ok(self.default) };
        text.trim().replace('_', "").parse::<u64>().ok().filter(|&n| n > 0).ok_or_else(|| {
            Failure::Message(format!(
                "{}={text:?}: not a number of {}; give a positive integer (default {})",
                self.var, self.what, self.default
            ))
        })
    }

    /// Records each of `logs` logs may give of `total`: its share, at least the floor.
    pub fn per_log(&self, total: u64, logs: usize) -> u64 {
        (total / logs.max(1) as u64).max(self.floor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_budget_is_shared_by_the_logs_with_a_floor() {
        let total = RECORDS.default;
        assert_eq!(RECORDS.per_log(total, 512), 65_536);
        assert_eq!(RECORDS.per_log(total, 4096), 8192);
        assert_eq!(RECORDS.per_log(total, 1 << 20), 4096);
        assert_eq!(RECORDS.per_log(total, 0), total);
        assert_eq!(CALLS.per_log(CALLS.default, 256), 65_536);
        assert_eq!(CALLS.per_log(10, 100), 1);
    }

    #[test]
    fn a_setting_is_a_positive_count() {
        assert_eq!(RECORDS.total_of(Some("1_000_000")).ok(), Some(1_000_000));
        assert_eq!(RECORDS.total_of(None).ok(), Some(RECORDS.default));
        for bad in ["0", "lots", "-5", ""] {
            let Err(Failure::Message(m)) = CALLS.total_of(Some(bad)) else { panic!("{bad} taken") };
            assert!(m.starts_with(&format!("SF_CALL_BUDGET={bad:?}: not a number of NCCL calls")), "{m}");
        }
    }
}
