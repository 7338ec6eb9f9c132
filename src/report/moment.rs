//! The moment a rank log is judged at: now for a live log, the instant `sf snapshot` copied
//! it for a snapshot. Liveness, heartbeat age and stuck times are differences between that
//! moment and what the log says, so a copy read an hour later still says what the job was
//! doing when it was copied, never "every rank dead".
//!
//! A snapshot directory keeps the moments in `snapshot.json` next to the copies: for each
//! log, the copying host's `CLOCK_MONOTONIC` and `CLOCK_REALTIME` read right after its live
//! state, its boot id (the monotonic clock means something only on that boot), and what
//! that host could tell about the writer's process then.

use std::path::Path;

use crate::analysis::log::heartbeat::{heartbeat_age_ns, same_host, ReaderClock};
use crate::analysis::log::liveness::{classify, Liveness};
use crate::core::log::process_stamp::{ProcessCheck, ProcessStamp};
use crate::core::log::reader::{LiveState, LogHeader};
use crate::core::record::clock::{monotonic_ns, wall_ns};
use serde::{Deserialize, Serialize};

/// The manifest's file name inside a snapshot's job directory.
pub const MANIFEST: &str = "snapshot.json";
/// Bumped on an incompatible change of the manifest.
pub const MANIFEST_VERSION: u32 = 1;
/// A manifest larger than this is not one `sf snapshot` wrote (a 4096-rank job's is
/// about 1 MiB).
const MANIFEST_MAX_BYTES: u64 = 16 << 20;

/// `snapshot.json`; its field names are a contract (scripts read `taken_wall`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Manifest {
    pub sf_snapshot: u32,
    /// The host that took the snapshot (`SF_HOST` or its host name).
    pub host: String,
    /// The directory the logs were copied from.
    pub source: String,
    /// When the first log was copied, RFC 3339 UTC, for people.
    pub taken_wall: String,
    pub logs: Vec<Taken>,
}

/// When one log was copied.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Taken {
    /// The copy's file name in this directory.
    pub file: String,
    pub mono_ns: u64,
    pub wall_ns: u64,
    /// The copying host's boot id, 32 hex digits ("" when unknown).
    pub boot_id: String,
    /// What the copying host could tell about the writer's process then:
    /// `pid_exists`, `pid_gone`, `writer_gone` or `unknown`.
    pub process: String,
    /// Whole records copied, and slots left empty because they held no whole record.
    pub records: u64,
    pub torn_slots: u64,
}

/// Reads `dir/snapshot.json`, if there is one. A manifest that cannot be read or parsed is
/// an error naming the file: a snapshot judged against the reader's now would invent a hang.
pub fn manifest_in(dir: &Path) -> Result<Option<Manifest>, String> {
    let path = dir.join(MANIFEST);
    let file = match std::fs::File::open(&path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("{}: cannot read the snapshot manifest: {e}", path.display())),
    };
    let mut text = String::new();
    use std::io::Read;
    file.take(MANIFEST_MAX_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(|e| format!("{}: cannot read the snapshot manifest: {e}", path.display()))?;
    if text.len() as u64 > MANIFEST_MAX_BYTES {
        return Err(format!("{}: larger than {MANIFEST_MAX_BYTES} bytes: not a snapshot manifest", path.display()));
    }
    let manifest: Manifest = serde_json::from_str(&text)
        .map_err(|e| format!("{}: not a snapshot manifest ({e}); take the snapshot again", path.display()))?;
    if manifest.sf_snapshot != MANIFEST_VERSION {
        return Err(format!(
            "{}: snapshot manifest version {}, this sf reads {MANIFEST_VERSION}: use the sf that took it",
            path.display(),
            manifest.sf_snapshot
        ));
    }
    Ok(Some(manifest))
}

/// How one log is judged: the clocks its heartbeat is compared with, whether its monotonic
/// times compare with them, and what is known about its writer's process.
#[derive(Clone, Copy, Debug)]
pub struct Judged {
    pub clock: ReaderClock,
    /// The log's monotonic times mean something on `clock.mono_ns`.
    pub same_clock: bool,
    pub process: ProcessCheck,
}

/// The moment to judge a log with header `h` at: `taken` for a snapshot's copy, else the
/// reader's clocks now (`reader_host` is this host's name).
pub fn judge(h: &LogHeader, taken: Option<&Taken>, reader_host: &str) -> Judged {
    match taken {
        Some(t) => Judged {
            clock: ReaderClock { mono_ns: t.mono_ns, wall_ns: t.wall_ns },
            same_clock: h.stamp.is_known() && !t.boot_id.is_empty() && hex(&h.stamp.boot_id) == t.boot_id,
            process: process_from_name(&t.process),
        },
        None => {
            let here = same_host(&h.host, reader_host);
            Judged {
                clock: ReaderClock { mono_ns: monotonic_ns(), wall_ns: wall_ns() },
                same_clock: here,
                process: h.stamp.check(h.pid, here),
            }
        }
    }
}

/// A log's liveness and heartbeat age (`None`: the writer never beat), judged at the
/// moment `judge` picks.
pub fn liveness(h: &LogHeader, live: &LiveState, taken: Option<&Taken>, reader_host: &str) -> (Liveness, Option<u64>) {
    let at = judge(h, taken, reader_host);
    let age_ns = heartbeat_age_ns(at.same_clock, live.heartbeat_mono_ns, live.heartbeat_wall_ns, at.clock);
    (classify(live.writer_state, age_ns.unwrap_or(u64::MAX), at.process), age_ns)
}

/// This host's boot id as a manifest records it.
pub fn boot_id_here() -> String {
    ProcessStamp::of_self().map_or_else(String::new, |s| hex(&s.boot_id))
}

pub fn process_name(check: ProcessCheck) -> &'static str {
    match check {
        ProcessCheck::Unknown => "unknown",
        ProcessCheck::PidExists => "pid_exists",
        ProcessCheck::PidGone => "pid_gone",
        ProcessCheck::WriterGone => "writer_gone",
    }
}

fn process_from_name(name: &str) -> ProcessCheck {
    match name {
        "pid_exists" => ProcessCheck::PidExists,
        "pid_gone" => ProcessCheck::PidGone,
        "writer_gone" => ProcessCheck::WriterGone,
        _ => ProcessCheck::Unknown,
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn process_checks_round_trip_through_their_names() {
        use ProcessCheck::*;
        for check in [Unknown, PidExists, PidGone, WriterGone] {
            assert_eq!(process_from_name(process_name(check)), check);
        }
        assert_eq!(process_from_name("zombie"), Unknown, "an unknown word decides nothing");
    }

    #[test]
    fn a_bad_manifest_is_an_error_naming_it() {
        let dir = std::env::temp_dir().join(format!("sf-moment-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        assert!(manifest_in(&dir).unwrap().is_none());
        std::fs::write(dir.join(MANIFEST), b"{\"sf_snapshot\": 1").unwrap();
        let error = manifest_in(&dir).unwrap_err();
        assert!(error.contains("snapshot.json: not a snapshot manifest"), "{error}");
        std::fs::write(dir.join(MANIFEST), br#"{"sf_snapshot":9,"host":"h","source":"s","taken_wall":"t","logs":[]}"#)
            .unwrap();
        assert!(manifest_in(&dir).unwrap_err().contains("version 9"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
