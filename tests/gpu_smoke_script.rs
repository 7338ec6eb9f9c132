//! scripts/gpu_smoke.sh where there is no GPU: it parses, skips with a clear line and exit
//! 0, and its dry run names the three doors; cuda/ddp_smoke.py parses. The real run needs
//! a GPU node (docs/gpu-smoke.md).

use std::path::Path;
use std::process::Command;

fn script() -> Command {
    let mut cmd = Command::new("bash");
    cmd.arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/gpu_smoke.sh"));
    cmd
}

#[test]
fn the_script_parses_and_skips_without_a_gpu() {
    let script_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/gpu_smoke.sh");
    assert!(Command::new("bash").arg("-n").arg(script_path).output().unwrap().status.success());
    let out = script().env("SF_SMOKE_NO_GPU", "1").output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("no GPU: skipped"), "{out:?}");
    assert_eq!(script().arg("--bogus").output().unwrap().status.code(), Some(2));
}

#[test]
fn the_dry_run_names_the_three_runs_and_all_three_doors() {
    let out =
        script().args(["--dry-run"]).env("SF_SMOKE_NO_GPU", "1").env("SF_SMOKE_LIB", "/x/libsf.so").output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    for door in ["LD_PRELOAD=/x/libsf.so", "CUDA_INJECTION64_PATH=/x/libsf.so", "NVTX_INJECTION64_PATH=/x/libsf.so"] {
        assert!(text.contains(door), "{door} missing:\n{text}");
    }
    assert_eq!(text.matches("would run: ").count(), 3, "{text}");
    assert!(text.contains("run --log-dir OUT/runlogs --job-id smoke -- torchrun"), "the sf run pass:\n{text}");
    assert!(text.contains("--nproc-per-node 1"), "at least one rank:\n{text}");
}

#[test]
fn the_training_script_is_valid_python() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("cuda/ddp_smoke.py");
    let check = "import ast, sys; ast.parse(open(sys.argv[1]).read())";
    let out = Command::new("python3").args(["-c", check]).arg(&path).output().expect("python3 (scripts/install-deps)");
    assert!(out.status.success(), "{out:?}");
    let text = std::fs::read_to_string(&path).unwrap();
    for stage in ["data.next_wait", "model.fwd_loss_cpu_wall", "model.backward_cpu_wall", "range_push", "range_pop"] {
        assert!(text.contains(stage), "{stage}");
    }
}

#[test]
fn the_asynchronous_script_is_valid_python_and_spins_before_its_allreduce() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("cuda/async_smoke.py");
    let check = "import ast, sys; ast.parse(open(sys.argv[1]).read())";
    let out = Command::new("python3").args(["-c", check]).arg(&path).output().expect("python3 (scripts/install-deps)");
    assert!(out.status.success(), "{out:?}");
    let text = std::fs::read_to_string(&path).unwrap();
    let spin = text.find("torch.cuda._sleep(cycles_for").expect("a spin kernel per step");
    let allreduce = text.find("dist.all_reduce(tensor)").expect("an allreduce per step");
    assert!(spin < allreduce, "the spin kernel goes before the allreduce on the stream");
    assert!(text.contains(".item()"), "the host synchronizes as training loops do");
}

#[test]
fn the_two_ranks_on_one_gpu_script_parses_skips_without_a_gpu_and_gives_each_rank_a_host() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/gpu_pair_smoke.sh");
    assert!(Command::new("bash").arg("-n").arg(&path).output().unwrap().status.success());
    let out = Command::new("bash").arg(&path).env("SF_SMOKE_NO_GPU", "1").output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("no GPU: skipped"), "{out:?}");
    let dry = Command::new("bash").arg(&path).arg("--dry-run").output().unwrap();
    let text = String::from_utf8_lossy(&dry.stdout);
    assert!(dry.status.success() && text.contains("SF_SMOKE_HOSTID_PER_RANK=1"), "{text}");
    assert!(text.contains("--nproc-per-node 2") && text.contains("--late-rank 1"), "{text}");
    // NCCL refuses two ranks on one device unless their host hashes differ (NCCL_HOSTID).
    let helper = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("cuda/shared_gpu.py")).unwrap();
    assert!(helper.contains("NCCL_HOSTID") && helper.contains("SF_SMOKE_HOSTID_PER_RANK"), "{helper}");
}
