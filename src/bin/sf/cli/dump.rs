//! `sf dump`'s arguments, help and the `--since` grammar.

use std::path::PathBuf;

use clap::Args;
use stagefrontier::core::log::records::kind;

use super::OutputArgs;
use stagefrontier::report::dump::{DumpOptions, Since};
use stagefrontier::report::wall;

pub const LONG_ABOUT: &str = "\
Print the records one rank log still holds, oldest first, then a summary of what the scan
found on stderr (records held, lost to wraparound, missing, invalid slots). The log is
read in constant memory (--last N keeps N records), so a live or large log streams.

Human output has one aligned line per record: its sequence number, TIME_S (seconds since
the rank's library started), WALL (the same instant in UTC, RFC 3339, from the header's
clock calibration), kind, then the kind's fields: for an NCCL call its operation,
communicator id, the call's sequence number in its communicator, element count, data type,
bytes, reduction, duration in microseconds and result; for a step vector each stage's
name and duration.

--json prints JSON Lines, one record per line, every field of the record and each key
once; the names a record refers to by id come resolved next to the id: dtype_name,
redop_name and result_name of NCCL calls; stage_names of step_vector and stage_device
records (in the order of their stages); name of a side_value; stage_name of an
injection; func_name, dtype_name, algo_name and proto_name of a prof_op; unit_name of a
prof_proxy. NCCL's own sequence number in prof_op, prof_proxy and prof_net is nccl_seq,
apart from the record's seq.

--header prints the header instead of the records: who wrote the log (rank, world, host,
pid, job id), its clock calibration, the live state, the doors the library had open, and
the name table (stage and value names by id).

Filters (combined, applied in this order):
  --kind K,...     only these kinds (the JSON `kind`: nccl_call, step_vector, ...)
  --since WHEN     only records from WHEN on; WHEN is one of
                     NS        a CLOCK_MONOTONIC time in ns, as the records' *_ns fields
                     DURATION  a number and a unit (ns, us, ms, s, m, h), e.g. 30s, 1.5m:
                               the last DURATION before the log's last heartbeat (now,
                               for a live rank; its last moment, for a dead one)
                     RFC 3339  a wall-clock time, e.g. 2026-11-23T08:51:18Z or with an
                               offset, +01:00, converted with the header's calibration
                   Records without a time of their own (side_value, kernel windows, names)
                   are printed once the first record at or after WHEN was.
  --last N         only the newest N records left by the filters above

Logs live in $SF_LOG_DIR/<job id>/rank-NNNNN.sflog, by default
/dev/shm/stagefrontier-<uid>/<job id>/.

Exit status: 0, or 1 when the log cannot be read.";

pub const EXAMPLES: &str = "\
Examples:
  sf dump /dev/shm/stagefrontier-$(id -u)/default/rank-00000.sflog | less
  sf dump rank-00000.sflog --json | jq -c 'select(.kind == \"nccl_call\" and .result != 0)'
  sf dump rank-00000.sflog --kind step_vector --last 5     the 5 newest steps
  sf dump rank-00000.sflog --since 30s --json              the rank's last 30 seconds
  sf dump rank-00000.sflog --since 2026-11-23T08:51:00Z    from a time in a Slurm log on
  sf dump rank-00000.sflog --header                        who wrote it, clock, stage names";

#[derive(Args)]
pub struct DumpArgs {
    /// One rank log, e.g. JOBDIR/rank-00000.sflog
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    /// Print the header and name tables instead of the records
    #[arg(long, conflicts_with_all = ["kind", "since", "last"])]
    header: bool,
    /// Only records of these kinds, comma-separated (nccl_call, step_vector, ...)
    #[arg(long, value_name = "K,...", value_delimiter = ',', value_parser = kind_code)]
    kind: Vec<u16>,
    /// Only records from WHEN on: CLOCK_MONOTONIC ns, a duration before the last heartbeat
    /// (30s, 5m), or an RFC 3339 time
    #[arg(long, value_name = "WHEN", value_parser = since)]
    since: Option<Since>,
    /// Only the newest N records (after --kind and --since)
    #[arg(long, value_name = "N")]
    last: Option<usize>,
    #[command(flatten)]
    pub output: OutputArgs,
}

impl DumpArgs {
    pub fn options(&self) -> DumpOptions {
        DumpOptions { header: self.header, kinds: self.kind.clone(), since: self.since, last: self.last }
    }
}

fn kind_code(name: &str) -> Result<u16, String> {
    kind::code(name.trim()).ok_or_else(|| {
        let names: Vec<&str> = kind::NAMES.iter().map(|(_, n)| *n).collect();
        format!("unknown record kind '{name}'; one of {}", names.join(", "))
    })
}

/// `--since`'s grammar: see `LONG_ABOUT`.
pub fn since(text: &str) -> Result<Since, String> {
    let text = text.trim();
    if let Ok(ns) = text.parse::<u64>() {
        return Ok(Since::MonoNs(ns));
    }
    if let Some(wall_ns) = wall::parse_rfc3339(text) {
        return Ok(Since::WallNs(wall_ns));
    }
    let split = text.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let scale = match unit {
        "ns" => 1.0,
        "us" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        "m" => 60e9,
        "h" => 3600e9,
        _ => f64::NAN,
    };
    match number.parse::<f64>() {
        Ok(v) if v >= 0.0 && (v * scale).is_finite() && v * scale < u64::MAX as f64 => {
            Ok(Since::Before((v * scale) as u64))
        }
        _ => Err(format!(
            "wants monotonic ns (4043720889156), a duration (30s, 1.5m, 200ms) or an RFC 3339 time \
             (2026-11-23T08:51:18Z), not '{text}'"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn since_grammar() {
        assert_eq!(since("4043720889156"), Ok(Since::MonoNs(4_043_720_889_156)));
        assert_eq!(since("30s"), Ok(Since::Before(30_000_000_000)));
        assert_eq!(since("1.5m"), Ok(Since::Before(90_000_000_000)));
        assert_eq!(since("200ms"), Ok(Since::Before(200_000_000)));
        assert_eq!(since("2h"), Ok(Since::Before(7_200_000_000_000)));
        assert_eq!(since("1970-01-01T00:00:01Z"), Ok(Since::WallNs(1_000_000_000)));
        for bad in ["", "soon", "-5s", "5d", "s", "1e400s", "inf s"] {
            assert!(since(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn kinds_are_the_json_names() {
        assert_eq!(kind_code("step_vector"), Ok(kind::STEP_VECTOR));
        assert!(kind_code("stepvector").unwrap_err().contains("nccl_call"));
    }
}
