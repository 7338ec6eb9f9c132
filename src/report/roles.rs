//! `sf roles`: each communicator's role in a tensor-, pipeline- and data-parallel job and
//! each rank's coordinates, read from the logs alone (`analysis::roles` has the rules).

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use super::ls::FileError;
use super::Failure;
use crate::analysis::comms::grow::Aliases;
use crate::analysis::roles::{self, Call, RankInput, Roles};
use crate::core::log::format::Region;
use crate::core::log::nccl_op::NcclOp;
use crate::core::log::reader::{RankLog, Record};
use crate::core::log::records::{CommCreated, NcclCall, RecordBody};
use crate::report::discover::{self, Dirs};
use crate::report::parallel;
use crate::report::read_budget::RECORDS;

/// The calls kept per rank, oldest of those read first: a few steps show what each
/// communicator carries and which way the pipeline's first transfers go. Bounds memory at
/// 16 bytes a call whatever the logs say.
pub const CALLS_KEPT: usize = 8192;

/// The `--json` object: the analysis' answer and what could not be read.
#[derive(Debug, Serialize)]
pub struct RolesReport {
    pub dir: String,
    #[serde(flatten)]
    pub roles: Roles,
    pub errors: Vec<FileError>,
}

/// What one rank's log gives the analysis.
pub struct RankRoles {
    pub global_rank: i32,
    pub world_size: i32,
    pub created: Vec<CommCreated>,
    pub calls: Vec<Call>,
    /// Where in `calls` each step begins (`analysis::roles::RankInput::step_starts`).
    pub step_starts: Vec<usize>,
    /// The oldest calls were lost to the ring's wraparound or left unread (the budget).
    pub lost_oldest: bool,
    /// The process groups the Python door saw this rank join by name: (members' id, name).
    pub group_names: Vec<(u64, String)>,
}

impl RankRoles {
    /// Reads a log's communicator creations, group names and step starts (its history
    /// ring) and the oldest `CALLS_KEPT` calls of its newest `newest` event records, in
    /// the order they were entered. A log of one ring (format 1) is read as its newest `newest` records.
    pub fn read(log: &RankLog, newest: u64) -> RankRoles {
        let mut created = Vec::new();
        let mut calls: Vec<(u64, Call)> = Vec::new();
        let mut step_begins = Vec::new();
        let mut group_names = Vec::new();
        let mut visit = |record: Record| match record.body {
            RecordBody::CommCreated(c) => created.push(c),
            RecordBody::GroupDesc(g) => group_names.push((g.members_id, g.desc.to_string_lossy())),
            RecordBody::StepVector(v) if v.part == 0 => step_begins.push(v.t_begin_ns),
            RecordBody::NcclCall(c) if calls.len() < CALLS_KEPT => calls.extend(call_of(&c)),
            _ => {}
        };
        if log.header.history_slot_count > 0 {
            log.scan_region(Region::History, &mut visit);
        }
        let events = log.scan_newest(Region::Events, newest, &mut visit);
        let lost_oldest = events.lost_to_wrap > 0 || events.not_read > 0;
        let read =
            RankRoles::of(log.header.global_rank, log.header.world_size, created, calls, step_begins, lost_oldest);
        RankRoles { group_names, ..read }
    }

    /// From a rank's creations, its calls as (entry time, call) (`call_of`) and when its
    /// steps began.
    pub fn of(
        global_rank: i32,
        world_size: i32,
        created: Vec<CommCreated>,
        mut calls: Vec<(u64, Call)>,
        mut step_begins: Vec<u64>,
        lost_oldest: bool,
    ) -> RankRoles {
        calls.sort_by_key(|&(t, _)| t);
        // Only steps that began after the oldest call held: an earlier one's first calls
        // are gone.
        step_begins.sort_unstable();
        let oldest = calls.first().map_or(u64::MAX, |&(t, _)| t);
        let step_starts = step_begins
            .iter()
            .filter(|&&t| t >= oldest)
            .map(|&t| calls.partition_point(|&(entered, _)| entered < t))
            .collect();
        RankRoles {
            global_rank,
            world_size,
            created,
            calls: calls.into_iter().map(|(_, c)| c).collect(),
            step_starts,
            lost_oldest,
            group_names: Vec::new(),
        }
    }
}

/// What the roles read of a call, with its entry time: a call on a communicator, group
/// markers left out.
pub fn call_of(c: &NcclCall) -> Option<(u64, Call)> {
    (c.comm_id != 0 && !matches!(c.op, NcclOp::GroupStart | NcclOp::GroupEnd))
        .then_some((c.t_enter_ns, Call { comm_id: c.comm_id, op: c.op, peer: c.peer }))
}

/// The roles from the logs of ranks already read (those with a rank identity).
pub fn infer(read: &[RankRoles]) -> Roles {
    let aliases = Aliases::of(read.iter().flat_map(|r| &r.created));
    let named: Vec<(Vec<CommCreated>, Vec<Call>)> = read
        .iter()
        .map(|r| {
            let created =
                r.created.iter().map(|c| CommCreated { comm_id: aliases.canonical(c.comm_id), ..*c }).collect();
            let calls = r.calls.iter().map(|c| Call { comm_id: aliases.canonical(c.comm_id), ..*c }).collect();
            (created, calls)
        })
        .collect();
    let inputs: Vec<RankInput> = read
        .iter()
        .zip(&named)
        .filter(|(r, _)| r.global_rank >= 0)
        .map(|(r, (created, calls))| RankInput {
            global_rank: r.global_rank as u32,
            created,
            calls,
            step_starts: &r.step_starts,
        })
        .collect();
    let world_size = read.iter().map(|r| r.world_size.max(0) as usize).max().unwrap_or(0);
    let mut roles = roles::infer(world_size, &inputs);
    let mut named: BTreeMap<u64, BTreeSet<String>> = BTreeMap::new();
    for (members_id, name) in read.iter().flat_map(|r| &r.group_names) {
        named.entry(*members_id).or_default().insert(name.clone());
    }
    roles::names::confirm(&mut roles, &named);
    if read.iter().any(|r| r.lost_oldest && r.step_starts.is_empty()) && !roles.pipelines.is_empty() {
        roles.notes.push(
            "some logs without step markers lost their oldest calls to wraparound (or SF_READ_BUDGET left \
             them unread): the pipeline's flow is read from the oldest calls read, which may begin mid-step"
                .to_string(),
        );
    }
    roles
}

pub fn build(dirs: &Dirs) -> Result<RolesReport, Failure> {
    let files = discover::job_log_paths(dirs, "roles").map_err(Failure::Message)?;
    let newest = RECORDS.per_log(RECORDS.total()?, files.len());
    let mut errors = Vec::new();
    let mut read = Vec::new();
    for (file, result) in files
        .iter()
        .zip(parallel::read_all(&files, |file| RankLog::open(file).map(|log| RankRoles::read(&log, newest))))
    {
        match result {
            Ok(rank) => read.push(rank),
            Err(e) => errors.push(FileError { file: file.display().to_string(), error: e.to_string() }),
        }
    }
    Ok(RolesReport { dir: dirs.display(), roles: infer(&read), errors })
}
