//! Who this process is in the job, as its log's header records it: global rank, world
//! size, local rank and job id (read from the launcher's environment by
//! `runtime::identity::detect`).

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    /// -1 for a forced process with no rank identity.
    pub global_rank: i32,
    pub world_size: i32,
    pub local_rank: i32,
    pub job_id: String,
    /// Which launcher's variables were used: torchrun, ompi, slurm or forced.
    pub source: &'static str,
}

impl Identity {
    /// The log file name within the job directory.
    pub fn file_name(&self, pid: u32) -> String {
        if self.global_rank >= 0 {
            format!("rank-{:05}.sflog", self.global_rank)
        } else {
            format!("pid-{pid}.sflog")
        }
    }
}
