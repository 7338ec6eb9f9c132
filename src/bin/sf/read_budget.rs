//! How many event-ring records a command reads of each rank when a job is too big to read
//! whole within seconds. Reading and checking a record costs about 0.1 µs of CPU here, so a
//! job's whole event rings (65,536 records a rank by default) are read within seconds up
//! to a few hundred ranks; past that, each rank gets an equal share of a job-wide budget
//! and the command reads its rank's newest records (`RankLog::scan_newest`), saying where
//! the window it read starts. `SF_READ_BUDGET` (records, job-wide) widens or narrows it.

/// Records read across the job: about 7 s of CPU, every rank's whole default event ring
/// up to 1,024 ranks, the newest 16,384 a rank at 4,096.
pub const JOB_RECORDS: u64 = 1 << 26;
/// The fewest records a rank is read for, whatever the budget says: enough for a few
/// seconds of a busy rank's QP windows and calls.
const MIN_PER_RANK: u64 = 4096;

/// The newest event records to read of each of `ranks` logs.
pub fn per_rank(ranks: usize) -> u64 {
    per_rank_of(job_records(std::env::var("SF_READ_BUDGET").ok().as_deref()), ranks)
}

fn job_records(setting: Option<&str>) -> u64 {
    match setting.map(|s| s.trim().replace('_', "").parse::<u64>()) {
        Some(Ok(n)) if n > 0 => n,
        Some(_) => {
            eprintln!(
                "sf: SF_READ_BUDGET={:?} is not a positive record count; using {JOB_RECORDS}",
                setting.unwrap_or("")
            );
            JOB_RECORDS
        }
        None => JOB_RECORDS,
    }
}

fn per_rank_of(job_records: u64, ranks: usize) -> u64 {
    (job_records / ranks.max(1) as u64).max(MIN_PER_RANK)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_is_shared_by_the_ranks_with_a_floor() {
        assert_eq!(per_rank_of(JOB_RECORDS, 1024), 65_536);
        assert_eq!(per_rank_of(JOB_RECORDS, 4096), 16_384);
        assert_eq!(per_rank_of(JOB_RECORDS, 1 << 20), MIN_PER_RANK);
        assert_eq!(per_rank_of(JOB_RECORDS, 0), JOB_RECORDS);
        assert_eq!(job_records(Some("1_000_000")), 1_000_000);
        assert_eq!(job_records(Some("0")), JOB_RECORDS);
        assert_eq!(job_records(Some("lots")), JOB_RECORDS);
        assert_eq!(job_records(None), JOB_RECORDS);
    }
}
