//! What `sf run` changes in the job's environment, decided from the current one: a pure
//! function, so every rule (prepend, move, skip, job id) is tested without a process.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

use crate::core::runtime::config::sanitize_job_id;

/// One way into the job, as `--doors` names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Door {
    Preload,
    Profiler,
    Nvtx,
    Cuda,
    Python,
}

impl Door {
    pub const ALL: [Door; 5] = [Door::Preload, Door::Profiler, Door::Nvtx, Door::Cuda, Door::Python];

    pub fn name(self) -> &'static str {
        match self {
            Door::Preload => "preload",
            Door::Profiler => "profiler",
            Door::Nvtx => "nvtx",
            Door::Cuda => "cuda",
            Door::Python => "python",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunOptions {
    /// Sorted, no repeats.
    pub doors: Vec<Door>,
    pub job_id: Option<String>,
    pub log_dir: Option<PathBuf>,
    pub report: bool,
    /// Program first; never empty (the parser requires it).
    pub command: Vec<OsString>,
}

/// Where the doors' files are, and what the job id derivation needs of the moment.
pub struct Places<'a> {
    /// The library, an absolute path.
    pub library: &'a Path,
    /// The directory holding the Python door's sitecustomize, when one was found.
    pub python_boot: Option<&'a Path>,
    /// The working directory, to make a relative --log-dir absolute.
    pub cwd: &'a Path,
    pub uid: u32,
    pub pid: u32,
    /// `YYYYMMDDTHHMMSSZ`, for a job id derived from the time.
    pub utc_now: &'a str,
}

/// The environment sf run gives the job.
#[derive(Debug, PartialEq, Eq)]
pub struct Plan {
    /// Variables to set, in order.
    pub set: Vec<(String, OsString)>,
    /// The doors opened, in `Door` order.
    pub opened: Vec<Door>,
    /// One line per door skipped or value moved, printed before the job starts.
    pub notes: Vec<String>,
    /// The job id the ranks will use (already sanitized as the library does).
    pub job_id: String,
    /// The root of the log tree: the job's logs are in `log_root/job_id`.
    pub log_root: PathBuf,
}

impl Plan {
    pub fn job_dir(&self) -> PathBuf {
        self.log_root.join(&self.job_id)
    }
}

/// Decides the job's environment. `var` reads the current environment.
pub fn plan(options: &RunOptions, var: impl Fn(&str) -> Option<OsString>, places: &Places) -> Result<Plan, String> {
    let text = |name: &str| var(name).filter(|v| !v.is_empty());
    let library = places.library.as_os_str();
    let mut plan = Plan {
        set: Vec::new(),
        opened: Vec::new(),
        notes: Vec::new(),
        job_id: String::new(),
        log_root: PathBuf::new(),
    };
    for &door in &options.doors {
        let opened = match door {
            Door::Preload => {
                let value = match text("LD_PRELOAD") {
                    Some(existing) if preload_holds(&existing, places.library) => existing,
                    Some(existing) => join(library, ":", &existing),
                    None => library.to_os_string(),
                };
                plan.set.push(("LD_PRELOAD".into(), value));
                true
            }
            Door::Profiler => match text("NCCL_PROFILER_PLUGIN") {
                Some(existing) if existing == library => true,
                Some(existing) => match text("SF_CHAIN_PROFILER") {
                    Some(chain) if chain != existing => {
                        plan.notes.push(format!(
                            "sf run: NCCL_PROFILER_PLUGIN={} is set and SF_CHAIN_PROFILER={} already chains another \
                             plugin: the profiler door stays shut",
                            shown(&existing),
                            shown(&chain)
                        ));
                        false
                    }
                    _ => {
                        plan.notes.push(format!(
                            "sf run: NCCL_PROFILER_PLUGIN={} moves to SF_CHAIN_PROFILER: the profiler door forwards \
                             every call to it",
                            shown(&existing)
                        ));
                        plan.set.push(("SF_CHAIN_PROFILER".into(), existing));
                        plan.set.push(("NCCL_PROFILER_PLUGIN".into(), library.to_os_string()));
                        true
                    }
                },
                None => {
                    plan.set.push(("NCCL_PROFILER_PLUGIN".into(), library.to_os_string()));
                    true
                }
            },
            Door::Nvtx => injection(&mut plan, "NVTX_INJECTION64_PATH", text("NVTX_INJECTION64_PATH"), library, "nvtx"),
            Door::Cuda => injection(&mut plan, "CUDA_INJECTION64_PATH", text("CUDA_INJECTION64_PATH"), library, "cuda"),
            Door::Python => match places.python_boot {
                Some(boot) => {
                    let value = match text("PYTHONPATH") {
                        Some(existing) => join(boot.as_os_str(), ":", &existing),
                        None => boot.as_os_str().to_os_string(),
                    };
                    plan.set.push(("PYTHONPATH".into(), value));
                    true
                }
                None => {
                    plan.notes.push(
                        "sf run: the Python door (stagefrontier_boot) was not found next to the library, beside \
                         sf's package, in ../share/stagefrontier/python or in the checkout above target/: it \
                         stays shut"
                            .into(),
                    );
                    false
                }
            },
        };
        if opened {
            plan.opened.push(door);
        }
        // KernelCh events (off in NCCL by default) tie each NCCL kernel's channels to its
        // collective: the device's own evidence when no CUPTI is there. A user's setting stays.
        if opened && door == Door::Profiler && text("SF_PROFILER_KERNEL_CH").is_none() {
            plan.set.push(("SF_PROFILER_KERNEL_CH".into(), "1".into()));
        }
    }

    plan.log_root = match (&options.log_dir, text("SF_LOG_DIR")) {
        (Some(dir), _) => {
            let dir = places.cwd.join(dir);
            plan.set.push(("SF_LOG_DIR".into(), dir.clone().into_os_string()));
            dir
        }
        // A relative SF_LOG_DIR is made absolute as --log-dir is, so the start line says
        // where the logs really go and a rank that changes directory writes there too.
        (None, Some(dir)) if Path::new(&dir).is_relative() => {
            let dir = places.cwd.join(dir);
            plan.set.push(("SF_LOG_DIR".into(), dir.clone().into_os_string()));
            dir
        }
        (None, Some(dir)) => PathBuf::from(dir),
        (None, None) => PathBuf::from(format!("/dev/shm/stagefrontier-{}", places.uid)),
    };

    let (job_id, set) = job_id(options, &text, places)?;
    if set {
        plan.set.push(("SF_JOB_ID".into(), job_id.clone().into()));
    }
    plan.job_id = job_id;
    Ok(plan)
}

/// The injection variables serve one tool each: one another tool set stays its.
fn injection(plan: &mut Plan, name: &str, existing: Option<OsString>, library: &OsStr, door: &str) -> bool {
    match existing {
        Some(existing) if existing != library => {
            plan.notes.push(format!(
                "sf run: {name} is already set ({}): another tool holds it, so the {door} door stays shut",
                shown(&existing)
            ));
            false
        }
        _ => {
            plan.set.push((name.into(), library.to_os_string()));
            true
        }
    }
}

/// Whether an LD_PRELOAD list (colon- or space-separated, as ld.so reads it) already
/// names the library.
fn preload_holds(list: &OsStr, library: &Path) -> bool {
    list.to_string_lossy().split([':', ' ']).any(|entry| Path::new(entry) == library)
}

fn join(first: &OsStr, separator: &str, rest: &OsStr) -> OsString {
    let mut value = first.to_os_string();
    value.push(separator);
    value.push(rest);
    value
}

/// A value as a warning shows it: quoted, cut, control characters escaped.
fn shown(value: &OsStr) -> String {
    crate::core::record::notice::echo(value.as_encoded_bytes())
}

/// The job id and whether sf run must set SF_JOB_ID for the ranks to use it (docs/running.md
/// and `sf run --help`, JOB ID, give the order).
fn job_id(
    options: &RunOptions,
    text: &impl Fn(&str) -> Option<OsString>,
    places: &Places,
) -> Result<(String, bool), String> {
    let clean = |raw: &OsStr, from: &str| {
        sanitize_job_id(&raw.to_string_lossy())
            .ok_or_else(|| format!("{from}={} has no usable character for a job id", shown(raw)))
    };
    if let Some(id) = &options.job_id {
        return Ok((clean(OsStr::new(id), "--job-id")?, true));
    }
    if let Some(id) = text("SF_JOB_ID") {
        return Ok((clean(&id, "SF_JOB_ID")?, false));
    }
    let torchrun = Torchrun::of(&options.command);
    if let Some(torchrun) = &torchrun {
        let rdzv_id = torchrun.value(&["--rdzv-id", "--rdzv_id"]).or_else(|| text("PET_RDZV_ID"));
        if let Some(id) = rdzv_id.filter(|id| id != "none") {
            return Ok((clean(&id, "--rdzv-id")?, false));
        }
    }
    if let Some(id) = text("SLURM_JOB_ID") {
        // Every node's ranks agree on it; set it so that ranks launched by torchrun or
        // mpirun under Slurm use it too.
        return Ok((clean(&id, "SLURM_JOB_ID")?, true));
    }
    if let Some(endpoint) = torchrun.as_ref().and_then(Torchrun::endpoint) {
        return Ok((clean(OsStr::new(&endpoint), "the rendezvous address")?, true));
    }
    let program = options.command.first().map(|p| Path::new(p).file_name().unwrap_or(p.as_os_str()));
    let program = program.map(|p| p.to_string_lossy().into_owned()).unwrap_or_default();
    let derived = format!("{program}-{}-{}", places.utc_now, places.pid);
    let id = sanitize_job_id(&derived).unwrap_or_else(|| format!("run-{}-{}", places.utc_now, places.pid));
    Ok((id, true))
}

/// A torchrun command line: `torchrun ...` or `python -m torch.distributed.run ...`; its
/// options are the arguments before the training script.
struct Torchrun<'a> {
    args: &'a [OsString],
}

impl<'a> Torchrun<'a> {
    fn of(command: &'a [OsString]) -> Option<Torchrun<'a>> {
        let name = |arg: &OsString| Path::new(arg).file_name().map(|n| n.to_string_lossy().into_owned());
        let program = name(command.first()?)?;
        if program == "torchrun" {
            return Some(Torchrun { args: &command[1..] });
        }
        if program.starts_with("python") {
            let module = command.iter().position(|a| a == "-m")?;
            let target = command.get(module + 1)?;
            if target == "torch.distributed.run" || target == "torch.distributed.launch" {
                return Some(Torchrun { args: &command[module + 2..] });
            }
        }
        None
    }

    /// The value of the first of `names` given, as `--name value` or `--name=value`.
    fn value(&self, names: &[&str]) -> Option<OsString> {
        let mut args = self.args.iter();
        while let Some(arg) = args.next() {
            let arg = arg.to_string_lossy();
            // The training script and its own arguments start at the first non-option
            // that is not an option's value; torchrun's options all take `--`.
            for name in names {
                if arg == *name {
                    return args.next().cloned();
                }
                if let Some(value) = arg.strip_prefix(name).and_then(|rest| rest.strip_prefix('=')) {
                    return Some(value.into());
                }
            }
        }
        None
    }

    /// `torchrun-<host>-<port>` of the rendezvous address every node was given (static:
    /// --master-addr and --master-port, default 29500; c10d: --rdzv-endpoint), or None
    /// when the command names none (a single-node job).
    fn endpoint(&self) -> Option<String> {
        if let Some(endpoint) = self.value(&["--rdzv-endpoint", "--rdzv_endpoint"]) {
            let endpoint = endpoint.to_string_lossy().into_owned();
            return (!endpoint.is_empty()).then(|| format!("torchrun-{}", endpoint.replace(':', "-")));
        }
        let addr = self.value(&["--master-addr", "--master_addr"])?;
        let port = self.value(&["--master-port", "--master_port"]).unwrap_or_else(|| "29500".into());
        Some(format!("torchrun-{}-{}", addr.to_string_lossy(), port.to_string_lossy()))
    }
}

#[cfg(test)]
#[path = "run_env_tests.rs"]
mod tests;
