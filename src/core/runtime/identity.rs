//! Who this process is in the job, read from the launcher's environment. A process
//! without one (the launcher itself, a compile worker) stays inert unless SF_FORCE=1.

use crate::core::log::format::caps;
use crate::core::log::identity::Identity;
use crate::core::runtime::config::sanitize_job_id;

/// Reads the identity. `job_override` is SF_JOB_ID, already sanitized.
pub fn detect(var: impl Fn(&str) -> Option<String>, job_override: Option<&str>, force: bool) -> Option<Identity> {
    let int = |name: &str| var(name).and_then(|v| v.trim().parse::<i32>().ok());
    let job = |names: &[&str], fallback: &str| -> String {
        job_override
            .map(str::to_string)
            .or_else(|| names.iter().find_map(|n| var(n).filter(|v| v != "none").as_deref().and_then(sanitize_job_id)))
            .or_else(|| names.contains(&"TORCHELASTIC_RUN_ID").then(|| torchrun_endpoint_id(&var)).flatten())
            .unwrap_or_else(|| fallback.to_string())
    };

    // torchrun first: under Slurm or MPI the workers it spawns also carry those variables,
    // but only RANK names the worker's own rank.
    let launchers: [(&str, &str, &str, &str, &[&str]); 3] = [
        ("torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", &["TORCHELASTIC_RUN_ID"]),
        (
            "ompi",
            "OMPI_COMM_WORLD_RANK",
            "OMPI_COMM_WORLD_SIZE",
            "OMPI_COMM_WORLD_LOCAL_RANK",
            &["OMPI_MCA_ess_base_jobid", "PMIX_NAMESPACE"],
        ),
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
                    job_id: job(job_vars, "default"),
                    source,
                });
            }
        }
    }
    force.then(|| Identity {
        global_rank: -1,
        world_size: -1,
        local_rank: -1,
        job_id: job(&[], "default"),
        source: "forced",
    })
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
        detect(|k| env.get(k).map(|v| v.to_string()), job, force)
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
}
