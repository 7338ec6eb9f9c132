use super::*;
use std::collections::HashMap;

const LIB: &str = "/opt/sf/lib/libstagefrontier.so";

fn options(command: &[&str]) -> RunOptions {
    RunOptions {
        doors: Door::ALL.to_vec(),
        job_id: None,
        log_dir: None,
        report: false,
        command: command.iter().map(OsString::from).collect(),
    }
}

fn plan_in(options: &RunOptions, env: &[(&str, &str)]) -> Plan {
    try_plan(options, env).unwrap()
}

fn try_plan(options: &RunOptions, env: &[(&str, &str)]) -> Result<Plan, String> {
    let env: HashMap<&str, &str> = env.iter().copied().collect();
    let places = Places {
        library: Path::new(LIB),
        python_boot: Some(Path::new("/opt/sf/lib/python/stagefrontier_boot")),
        cwd: Path::new("/home/op"),
        uid: 1000,
        pid: 4242,
        utc_now: "20261123T113336Z",
    };
    plan(options, |k| env.get(k).map(OsString::from), &places)
}

fn set<'a>(plan: &'a Plan, name: &str) -> Option<&'a str> {
    plan.set.iter().find(|(k, _)| k == name).map(|(_, v)| v.to_str().unwrap())
}

#[test]
fn every_door_opens_on_a_clean_environment() {
    let plan = plan_in(&options(&["python", "train.py"]), &[]);
    assert_eq!(plan.opened, Door::ALL);
    assert!(plan.notes.is_empty(), "{:?}", plan.notes);
    for name in ["LD_PRELOAD", "NCCL_PROFILER_PLUGIN", "NVTX_INJECTION64_PATH", "CUDA_INJECTION64_PATH"] {
        assert_eq!(set(&plan, name), Some(LIB), "{name}");
    }
    assert_eq!(set(&plan, "PYTHONPATH"), Some("/opt/sf/lib/python/stagefrontier_boot"));
    assert_eq!(set(&plan, "SF_CHAIN_PROFILER"), None);
    assert_eq!(set(&plan, "SF_PROFILER_KERNEL_CH"), Some("1"), "the profiler door asks for KernelCh events");
    assert_eq!(set(&plan, "SF_LOG_DIR"), None, "the library's default stays the library's");
    assert_eq!(plan.job_dir(), Path::new("/dev/shm/stagefrontier-1000/python-20261123T113336Z-4242"));
    assert_eq!(set(&plan, "SF_JOB_ID"), Some("python-20261123T113336Z-4242"));
}

#[test]
fn existing_values_are_kept_moved_or_respected() {
    let env = [
        ("LD_PRELOAD", "/usr/lib/libjemalloc.so"),
        ("NCCL_PROFILER_PLUGIN", "/opt/other/libprof.so"),
        ("CUDA_INJECTION64_PATH", "/opt/nsight/libinject.so"),
        ("PYTHONPATH", "/srv/code"),
    ];
    let plan = plan_in(&options(&["python", "train.py"]), &env);
    assert_eq!(set(&plan, "LD_PRELOAD"), Some("/opt/sf/lib/libstagefrontier.so:/usr/lib/libjemalloc.so"));
    assert_eq!(set(&plan, "SF_CHAIN_PROFILER"), Some("/opt/other/libprof.so"), "moved, not lost");
    assert_eq!(set(&plan, "NCCL_PROFILER_PLUGIN"), Some(LIB));
    assert_eq!(set(&plan, "CUDA_INJECTION64_PATH"), None, "another tool's injection stays");
    assert_eq!(set(&plan, "PYTHONPATH"), Some("/opt/sf/lib/python/stagefrontier_boot:/srv/code"));
    assert_eq!(plan.opened, [Door::Preload, Door::Profiler, Door::Nvtx, Door::Python]);
    assert_eq!(plan.notes.len(), 2, "{:?}", plan.notes);
    assert!(plan.notes[0].contains("moves to SF_CHAIN_PROFILER"), "{}", plan.notes[0]);
    assert!(plan.notes[1].contains("CUDA_INJECTION64_PATH is already set") && plan.notes[1].contains("cuda door"));
}

#[test]
fn a_users_kernel_ch_setting_stays_and_no_profiler_door_asks_for_none() {
    let plan = plan_in(&options(&["x"]), &[("SF_PROFILER_KERNEL_CH", "0")]);
    assert_eq!(set(&plan, "SF_PROFILER_KERNEL_CH"), None);
    let no_profiler = RunOptions { doors: vec![Door::Preload], ..options(&["x"]) };
    assert_eq!(set(&plan_in(&no_profiler, &[]), "SF_PROFILER_KERNEL_CH"), None);
}

#[test]
fn a_second_run_inside_the_first_changes_nothing_twice() {
    let env = [("LD_PRELOAD", LIB), ("NCCL_PROFILER_PLUGIN", LIB), ("CUDA_INJECTION64_PATH", LIB)];
    let plan = plan_in(&options(&["x"]), &env);
    assert_eq!(set(&plan, "LD_PRELOAD"), Some(LIB), "not prepended twice");
    assert_eq!(set(&plan, "SF_CHAIN_PROFILER"), None, "the library never chains itself");
    assert_eq!(plan.opened, Door::ALL);
    assert!(plan.notes.is_empty());
}

#[test]
fn a_chained_plugin_already_set_is_not_overwritten() {
    let env = [("NCCL_PROFILER_PLUGIN", "/a.so"), ("SF_CHAIN_PROFILER", "/b.so")];
    let plan = plan_in(&options(&["x"]), &env);
    assert_eq!((set(&plan, "NCCL_PROFILER_PLUGIN"), set(&plan, "SF_CHAIN_PROFILER")), (None, None));
    assert!(!plan.opened.contains(&Door::Profiler));
    assert!(plan.notes[0].contains("stays shut"));
}

#[test]
fn doors_pick_a_subset_and_log_dir_is_made_absolute() {
    let mut opts = options(&["x"]);
    opts.doors = vec![Door::Preload, Door::Python];
    opts.log_dir = Some("logs".into());
    let plan = plan_in(&opts, &[]);
    let names: Vec<&str> = plan.set.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(names, ["LD_PRELOAD", "PYTHONPATH", "SF_LOG_DIR", "SF_JOB_ID"]);
    assert_eq!(set(&plan, "SF_LOG_DIR"), Some("/home/op/logs"));
    assert_eq!(plan.log_root, Path::new("/home/op/logs"));
}

#[test]
fn a_relative_sf_log_dir_is_made_absolute_too() {
    let plan = plan_in(&options(&["x"]), &[("SF_LOG_DIR", "rel/logs")]);
    assert_eq!(set(&plan, "SF_LOG_DIR"), Some("/home/op/rel/logs"));
    assert_eq!(plan.log_root, Path::new("/home/op/rel/logs"));
    // An absolute one is the job's own: left as it is.
    let plan = plan_in(&options(&["x"]), &[("SF_LOG_DIR", "/scratch/logs")]);
    assert_eq!(set(&plan, "SF_LOG_DIR"), None);
    assert_eq!(plan.log_root, Path::new("/scratch/logs"));
}

#[test]
fn job_ids_follow_the_documented_order() {
    let job = |command: &[&str], env: &[(&str, &str)]| {
        let plan = plan_in(&options(command), env);
        (plan.job_id.clone(), set(&plan, "SF_JOB_ID").map(str::to_string))
    };
    let mut opts = options(&["torchrun", "--rdzv-id", "r7", "t.py"]);
    opts.job_id = Some("exp 42".into());
    assert_eq!(plan_in(&opts, &[("SF_JOB_ID", "x")]).job_id, "exp_42", "--job-id first, sanitized");
    assert_eq!(job(&["torchrun", "t.py"], &[("SF_JOB_ID", "mine")]), ("mine".into(), None));
    assert_eq!(job(&["torchrun", "--rdzv-id", "r7", "t.py"], &[("SLURM_JOB_ID", "9")]), ("r7".into(), None));
    assert_eq!(job(&["torchrun", "--rdzv_id=r8", "t.py"], &[]), ("r8".into(), None));
    assert_eq!(job(&["torchrun", "t.py"], &[("PET_RDZV_ID", "r9")]), ("r9".into(), None));
    assert_eq!(job(&["srun", "python", "t.py"], &[("SLURM_JOB_ID", "991")]), ("991".into(), Some("991".into())));
    let static_job = ["torchrun", "--nnodes", "2", "--master-addr", "node1", "--master-port", "6000", "t.py"];
    assert_eq!(job(&static_job, &[]), ("torchrun-node1-6000".into(), Some("torchrun-node1-6000".into())));
    assert_eq!(job(&["torchrun", "--master_addr=10.0.0.1", "t.py"], &[]).0, "torchrun-10.0.0.1-29500");
    let c10d = ["python3", "-m", "torch.distributed.run", "--rdzv-endpoint", "head:29400", "t.py"];
    assert_eq!(job(&c10d, &[]).0, "torchrun-head-29400");
    assert_eq!(job(&["torchrun", "--rdzv-id", "none", "t.py"], &[]).0, "torchrun-20261123T113336Z-4242");
    assert_eq!(job(&["/usr/bin/mpirun", "-np", "2", "a"], &[]).0, "mpirun-20261123T113336Z-4242");
}

#[test]
fn an_unusable_job_id_is_an_error_naming_it() {
    let mut opts = options(&["x"]);
    opts.job_id = Some("///".into());
    assert!(try_plan(&opts, &[]).unwrap_err().contains("--job-id=\"///\""));
}

#[test]
fn no_python_door_is_one_line() {
    let env: HashMap<&str, &str> = HashMap::new();
    let places = Places {
        library: Path::new(LIB),
        python_boot: None,
        cwd: Path::new("/"),
        uid: 0,
        pid: 1,
        utc_now: "20260101T000000Z",
    };
    let plan = plan(&options(&["x"]), |k| env.get(k).map(OsString::from), &places).unwrap();
    assert!(!plan.opened.contains(&Door::Python));
    assert_eq!(plan.notes.len(), 1);
}
