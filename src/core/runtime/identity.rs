//! Who this process is in the job. In this order, the first that applies wins:
//!
//! 1. `torch.distributed.init_process_group`'s rank and world size (the Python door calls
//!    `sf_declare_rank` once it returns): the job's own world, whatever its environment says.
//! 2. The first communicator the process creates with `ncclCommInitRank*`, when no launcher
//!    variable names a rank, or when the communicator is at least as large as the
//!    launcher's world (a communicator larger than the world says the world was wrong;
//!    a smaller one is a subgroup).
//! 3. The launcher's variables: torchrun (`RANK`/`WORLD_SIZE`), Open MPI
//!    (`OMPI_COMM_WORLD_RANK`/`_SIZE`), PMI (`PMI_RANK`/`PMI_SIZE`: MPICH, Intel MPI, srun
//!    --mpi=pmi2), Slurm (`SLURM_PROCID`/`SLURM_NTASKS`).
//!
//! So an environment `RANK` that the job contradicts (a test harness's `RANK=0` inherited
//! by every child of `torch.multiprocessing.spawn`) loses. A process with none of these
//! waits for a declaration (`runtime::start`); SF_FORCE=1 records it at once as `pid-N`.

use crate::core::log::format::caps;
use crate::core::log::identity::Identity;
use crate::core::runtime::config::sanitize_job_id;
use crate::core::runtime::declared::{Declaration, DeclaredBy};

/// Reads the identity. `job_override` is SF_JOB_ID, already sanitized; `declared` what the
/// job said itself (`runtime::declared`).
pub fn detect(
    var: impl Fn(&str) -> Option<String>,
    job_override: Option<&str>,
    force: bool,
    declared: Option<Declaration>,
) -> Option<Identity> {
    let from_env = from_launcher(&var, job_override);
    if let Some(declared) = declared {
        let wins = match &from_env {
            None => true,
            Some(env) => declared.by == DeclaredBy::ProcessGroup || declared.world_size >= env.world_size,
        };
        if wins {
            let same_rank = from_env.as_ref().filter(|env| env.global_rank == declared.rank);
            return Some(Identity {
                global_rank: declared.rank,
                world_size: declared.world_size,
                // The launcher's local rank only where its rank was right.
                local_rank: same_rank.map_or(-1, |env| env.local_rank),
                job_id: from_env
                    .map(|env| env.job_id)
                    .unwrap_or_else(|| job_id(&var, job_override, &["TORCHELASTIC_RUN_ID"])),
                source: declared.by.source(),
            });
        }
    }
    from_env.or_else(|| {
        force.then(|| Identity {
            global_rank: -1,
            world_size: -1,
            local_rank: -1,
            job_id: job_id(&var, job_override, &[]),
            source: "forced",
        })
    })
}

/// The rank the launcher's variables give, if any.
fn from_launcher(var: &impl Fn(&str) -> Option<String>, job_override: Option<&str>) -> Option<Identity> {
    let int = |name: &str| var(name).and_then(|v| v.trim().parse::<i32>().ok());
    // torchrun first: under Slurm or MPI the workers it spawns also carry those variables,
    // but only RANK names the worker's own rank; Slurm last, for the same reason under
    // mpirun or srun --mpi.
    let launchers: [(&str, &str, &str, &str, &[&str]); 4] = [
        ("torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", &["TORCHELASTIC_RUN_ID"]),
        (
            "ompi",
            "OMPI_COMM_WORLD_RANK",
            "OMPI_COMM_WORLD_SIZE",
            "OMPI_COMM_WORLD_LOCAL_RANK",
            &["OMPI_MCA_ess_base_jobid", "PMIX_NAMESPACE"],
        ),
        ("pmi", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", &["SLURM_JOB_ID"]),
        ("slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", &["SLURM_JOB_ID"]),
    ];
    for (source, rank, size, local, job_vars) in launchers {
        if let (Some(global_rank), Some(world_size)) = (int(rank), int(size)) {
            // Within the reader's caps, so that every log written is one `sf` reads.
            if global_rank >= 0 && world_size > global_rank && world_size <= caps::WORLD_SIZE {
                return Some(Identity {
                    global_rank,
                    world_size,
                    local_rank: int(local).filter(|l| (0..world_size).contains(l)).unwrap_or(-1),
                    job_id: job_id(var, job_override, job_vars),
                    source,
                });
            }
        }
    }
    None
}

/// SF_JOB_ID, else the first of `names` set, else (for torchrun's variables, and for a
/// job that declared its rank, which sets MASTER_ADDR/MASTER_PORT for its store) the
/// rendezvous endpoint, else "default".
fn job_id(var: &impl Fn(&str) -> Option<String>, job_override: Option<&str>, names: &[&str]) -> String {
    job_override
        .map(str::to_string)
        .or_else(|| names.iter().find_map(|n| var(n).filter(|v| v != "none").as_deref().and_then(sanitize_job_id)))
        .or_else(|| names.contains(&"TORCHELASTIC_RUN_ID").then(|| torchrun_endpoint_id(var)).flatten())
        .unwrap_or_else(|| "default".to_string())
}

/// Plain torchrun without --rdzv-id gives every job TORCHELASTIC_RUN_ID=none, which would
/// put unrelated jobs into one directory. MASTER_ADDR and MASTER_PORT are the same in every
/// rank of a job, on every node, and no two running jobs share them (the port is bound by
/// the job's store), so `torchrun-<addr>-<port>` names the job; a later job on the same
/// address and port becomes a new attempt of that directory (attempt-N).
fn torchrun_endpoint_id(var: &impl Fn(&str) -> Option<String>) -> Option<String> {
    let (addr, port) = (var("MASTER_ADDR")?, var("MASTER_PORT")?);
    sanitize_job_id(&format!("torchrun-{addr}-{port}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn detect_in(pairs: &[(&str, &str)], job: Option<&str>, force: bool) -> Option<Identity> {
        let env: HashMap<&str, &str> = pairs.iter().copied().collect();
        detect(|k| env.get(k).map(|v| v.to_string()), job, force, None)
    }

    #[test]
    fn torchrun_worker() {
        let id = detect_in(
            &[("RANK", "5"), ("WORLD_SIZE", "8"), ("LOCAL_RANK", "1"), ("TORCHELASTIC_RUN_ID", "abc")],
            None,
            false,
        )
        .unwrap();
        assert_eq!(
            (id.global_rank, id.world_size, id.local_rank, id.job_id.as_str(), id.source),
            (5, 8, 1, "abc", "torchrun")
        );
        assert_eq!(id.file_name(1), "rank-00005.sflog");
    }

    #[test]
    fn torchrun_run_id_none_is_no_id() {
        let id = |pairs: &[(&str, &str)]| detect_in(pairs, None, false).unwrap().job_id;
        let worker = [("RANK", "1"), ("WORLD_SIZE", "2"), ("TORCHELASTIC_RUN_ID", "none")];
        let with_master = [&worker[..], &[("MASTER_ADDR", "node-1"), ("MASTER_PORT", "29500")]].concat();
        assert_eq!(id(&with_master), "torchrun-node-1-29500", "every rank of the job derives the same");
        assert_eq!(id(&worker), "default", "nothing to derive from");
        assert_eq!(detect_in(&with_master, Some("mine"), false).unwrap().job_id, "mine");
        let slurm = [("SLURM_PROCID", "1"), ("SLURM_NTASKS", "2"), ("SLURM_JOB_ID", "none"), ("MASTER_ADDR", "a")];
        assert_eq!(id(&slurm), "default", "only torchrun's none is derived");
    }

    #[test]
    fn torchrun_wins_over_slurm_and_sf_job_id_over_all() {
        let env =
            [("RANK", "3"), ("WORLD_SIZE", "16"), ("SLURM_PROCID", "0"), ("SLURM_NTASKS", "2"), ("SLURM_JOB_ID", "77")];
        let id = detect_in(&env, None, false).unwrap();
        assert_eq!((id.global_rank, id.source, id.job_id.as_str()), (3, "torchrun", "default"));
        let id = detect_in(&env, Some("mine"), false).unwrap();
        assert_eq!(id.job_id, "mine");
    }

    #[test]
    fn slurm_and_open_mpi() {
        let id = detect_in(
            &[("SLURM_PROCID", "2"), ("SLURM_NTASKS", "4"), ("SLURM_LOCALID", "0"), ("SLURM_JOB_ID", "991")],
            None,
            false,
        )
        .unwrap();
        assert_eq!((id.global_rank, id.world_size, id.job_id.as_str(), id.source), (2, 4, "991", "slurm"));
        let id = detect_in(
            &[("OMPI_COMM_WORLD_RANK", "1"), ("OMPI_COMM_WORLD_SIZE", "2"), ("OMPI_COMM_WORLD_LOCAL_RANK", "1")],
            None,
            false,
        )
        .unwrap();
        assert_eq!((id.global_rank, id.local_rank, id.source), (1, 1, "ompi"));
    }

    #[test]
    fn no_identity_is_inert_unless_forced() {
        assert_eq!(detect_in(&[("LOCAL_RANK", "0")], None, false), None);
        assert_eq!(detect_in(&[("RANK", "9"), ("WORLD_SIZE", "4")], None, false), None, "rank outside world");
        assert_eq!(detect_in(&[("RANK", "0"), ("WORLD_SIZE", "99999999")], None, false), None, "world over the cap");
        let id = detect_in(&[("RANK", "1"), ("WORLD_SIZE", "4"), ("LOCAL_RANK", "-7")], None, false).unwrap();
        assert_eq!(id.local_rank, -1, "a local rank outside the world is unknown");
        let forced = detect_in(&[], None, true).unwrap();
        assert_eq!((forced.global_rank, forced.source), (-1, "forced"));
        assert_eq!(forced.file_name(42), "pid-42.sflog");
    }

    fn declared_in(pairs: &[(&str, &str)], by: DeclaredBy, rank: i32, world: i32) -> Identity {
        let env: HashMap<&str, &str> = pairs.iter().copied().collect();
        let declared = Declaration::new(by, rank, world);
        detect(|k| env.get(k).map(|v| v.to_string()), None, false, declared).unwrap()
    }

    #[test]
    fn the_documented_order() {
        let shape = |id: Identity| (id.global_rank, id.world_size, id.local_rank, id.source);
        // mp.spawn: nothing in the environment, the rank from init_process_group.
        let spawn = [("MASTER_ADDR", "localhost"), ("MASTER_PORT", "12355")];
        let id = declared_in(&spawn, DeclaredBy::ProcessGroup, 3, 4);
        assert_eq!(id.job_id, "torchrun-localhost-12355", "every rank of the job derives the same");
        assert_eq!(shape(id), (3, 4, -1, "process_group"));
        // A harness's RANK=0 inherited by every child: the job's own declaration wins,
        // and the launcher's local rank goes with its wrong rank.
        let stray = [("RANK", "0"), ("WORLD_SIZE", "4"), ("LOCAL_RANK", "0"), ("TORCHELASTIC_RUN_ID", "t")];
        let id = declared_in(&stray, DeclaredBy::ProcessGroup, 2, 4);
        assert_eq!((shape(id.clone()), id.job_id.as_str()), ((2, 4, -1, "process_group"), "t"));
        assert_eq!(shape(declared_in(&stray, DeclaredBy::ProcessGroup, 0, 4)), (0, 4, 0, "process_group"));
        // The first NCCL communicator: the world when nothing else names a rank, or when it
        // is at least as large as the launcher's world; a smaller one is a subgroup.
        assert_eq!(shape(declared_in(&[], DeclaredBy::Nccl, 1, 2)), (1, 2, -1, "nccl"));
        assert_eq!(shape(declared_in(&stray, DeclaredBy::Nccl, 3, 4)), (3, 4, -1, "nccl"));
        assert_eq!(shape(declared_in(&stray, DeclaredBy::Nccl, 1, 2)), (0, 4, 0, "torchrun"));
        // PMI between Open MPI and Slurm.
        let pmi = [("PMI_RANK", "1"), ("PMI_SIZE", "2"), ("SLURM_PROCID", "0"), ("SLURM_NTASKS", "1")];
        let id = detect_in(&pmi, None, false).unwrap();
        assert_eq!((id.global_rank, id.source), (1, "pmi"));
        let ompi = [("OMPI_COMM_WORLD_RANK", "1"), ("OMPI_COMM_WORLD_SIZE", "2"), ("PMI_RANK", "0"), ("PMI_SIZE", "2")];
        assert_eq!(detect_in(&ompi, None, false).unwrap().source, "ompi");
    }
}
