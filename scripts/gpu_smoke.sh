#!/usr/bin/env bash
# GPU-node smoke run: a real PyTorch DDP job (cuda/ddp_smoke.py) under torchrun, one rank
# per GPU, run once without the library, once with all three doors on
#   LD_PRELOAD=libstagefrontier.so CUDA_INJECTION64_PATH=... NVTX_INJECTION64_PATH=...
# and once under `sf run` (every door: preload, profiler, NVTX, CUDA, Python), then checks
# from the logs, with sf, that NCCL collectives, kernel records and NVTX stage vectors
# arrived (one vector per step under sf run too), and prints throughput with and without
# the library.
#
# Then the asynchronous checks (cuda/async_smoke.py under sf run: PyTorch's spin kernel
# `torch.cuda._sleep` placed before each allreduce): the host returns from the NCCL call
# before the device work ahead of it ends, the real CUPTI records the host's waits in the
# `.item()` synchronizations (host_sync records); with a spin kernel of a minute at one
# step, what `sf hang` says live is printed (one rank has no peer waiting for it in a
# collective; scripts/gpu_pair_smoke.sh checks the verdict with two ranks on one GPU).
#
# The GPU box needs no Rust toolchain and no network: build here (cargo build --release)
# and carry target/release/{libstagefrontier.so,sf} with the repository.
#
# Usage: scripts/gpu_smoke.sh [--dry-run]
#   --dry-run    print what would run, check nothing, exit 0
# Environment:
#   SF_SMOKE_LIB      library      (default target/release/libstagefrontier.so)
#   SF_SMOKE_SF       sf binary    (default target/release/sf)
#   SF_SMOKE_STEPS    steps per run (default 60; the first 10 are warm-up)
#   SF_SMOKE_NPROC    ranks        (default: the number of GPUs)
#   SF_SMOKE_NO_GPU=1 behave as on a machine without a GPU
#   SF_SMOKE_OUT      directory for the runs' output and logs (default: a new one in $TMPDIR)
#   PYTHON            interpreter with torch (default python3)
# Exit status: 0 all checks passed (or no GPU: skipped), 1 a check failed, 2 a missing
# prerequisite (artifacts, torch, torchrun).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
LIB=${SF_SMOKE_LIB:-$ROOT/target/release/libstagefrontier.so}
SF=${SF_SMOKE_SF:-$ROOT/target/release/sf}
STEPS=${SF_SMOKE_STEPS:-60}
PYTHON=${PYTHON:-python3}
DRY_RUN=0
case "${1:-}" in
    --dry-run) DRY_RUN=1 ;;
    "") ;;
    *) echo "usage: $0 [--dry-run]" >&2; exit 2 ;;
esac

say() { echo "gpu_smoke: $*"; }
fail() { echo "gpu_smoke: FAIL: $*" >&2; exit 1; }
missing() { echo "gpu_smoke: $*" >&2; exit 2; }

gpus=0
if [ "${SF_SMOKE_NO_GPU:-0}" != 1 ] && command -v nvidia-smi >/dev/null 2>&1; then
    gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
fi
NPROC=${SF_SMOKE_NPROC:-$((gpus > 0 ? gpus : 1))}

job() { # job OUTFILE: sets JOB_CMD to the torchrun command line of one run
    JOB_CMD=(torchrun --standalone --nproc-per-node "$NPROC" "$ROOT/cuda/ddp_smoke.py" --steps "$STEPS" --out "$1")
}

if [ "$DRY_RUN" = 1 ]; then
    say "dry run: $gpus GPU(s) seen, library $LIB, sf $SF"
    job OUT/base.json
    say "would run: ${JOB_CMD[*]}"
    job OUT/sf.json
    say "would run: SF_LOG_DIR=OUT/logs SF_JOB_ID=smoke LD_PRELOAD=$LIB CUDA_INJECTION64_PATH=$LIB NVTX_INJECTION64_PATH=$LIB ${JOB_CMD[*]}"
    job OUT/run.json
    say "would run: $SF run --log-dir OUT/runlogs --job-id smoke -- ${JOB_CMD[*]}"
    say "would check: sf ls/dump/kernels/frontier --json over OUT/logs/smoke, sf ls/dump over OUT/runlogs/smoke"
    say "would check: $SF run -- torchrun ... cuda/async_smoke.py: a spin kernel before each allreduce"
    say "would check: $SF run -- torchrun ... cuda/async_smoke.py --stall-after 5, then sf hang live"
    exit 0
fi
if [ "$gpus" -lt 1 ]; then
    say "no GPU: skipped (nvidia-smi lists none; run this on a GPU node)"
    exit 0
fi
[ "$NPROC" -ge 1 ] || missing "SF_SMOKE_NPROC=$NPROC: need at least one rank"
[ -f "$LIB" ] || missing "$LIB is missing: run cargo build --release here and carry target/release to the GPU node"
[ -x "$SF" ] || missing "$SF is missing: run cargo build --release here and carry target/release to the GPU node"
command -v torchrun >/dev/null 2>&1 || missing "torchrun not found: activate the Python environment with torch"
"$PYTHON" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' \
    || missing "$PYTHON cannot import torch with CUDA"

if [ -n "${SF_SMOKE_OUT:-}" ]; then
    OUT=$SF_SMOKE_OUT && mkdir -p "$OUT"
else
    OUT=$(mktemp -d "${TMPDIR:-/tmp}/sf-gpu-smoke.XXXXXX")
fi
say "output in $OUT"
LOGS=$OUT/logs
JOB=$LOGS/smoke

say "run 1/3: without the library, $NPROC rank(s), $STEPS steps"
job "$OUT/base.json"
env -u LD_PRELOAD -u CUDA_INJECTION64_PATH -u NVTX_INJECTION64_PATH "${JOB_CMD[@]}" >"$OUT/base.log" 2>&1 \
    || fail "the job without the library failed; see $OUT/base.log"

say "run 2/3: under LD_PRELOAD + CUDA_INJECTION64_PATH + NVTX_INJECTION64_PATH"
job "$OUT/sf.json"
SF_LOG_DIR=$LOGS SF_JOB_ID=smoke LD_PRELOAD=$LIB CUDA_INJECTION64_PATH=$LIB NVTX_INJECTION64_PATH=$LIB \
    "${JOB_CMD[@]}" >"$OUT/sf.log" 2>&1 \
    || fail "the job under the library failed (the same job passed without it); see $OUT/sf.log"

say "run 3/3: under sf run, every door (preload, profiler, nvtx, cuda, python)"
job "$OUT/run.json"
"$SF" run --log-dir "$OUT/runlogs" --job-id smoke -- "${JOB_CMD[@]}" >"$OUT/run.log" 2>&1 \
    || fail "the job under sf run failed (the same job passed without it); see $OUT/run.log"
RUN_JOB=$OUT/runlogs/smoke
"$SF" ls "$RUN_JOB" --json >"$OUT/run_ls.json" || fail "sf ls $RUN_JOB failed"
"$SF" dump "$RUN_JOB/rank-00000.sflog" --json >"$OUT/run_dump0.jsonl" 2>/dev/null || fail "sf dump of $RUN_JOB rank 0 failed"

"$SF" ls "$JOB" --json >"$OUT/ls.json" || fail "sf ls $JOB failed"
"$SF" dump "$JOB/rank-00000.sflog" --json >"$OUT/dump0.jsonl" 2>/dev/null || fail "sf dump of rank 0 failed"
"$SF" kernels "$JOB" --json >"$OUT/kernels.json" || [ $? = 4 ] || fail "sf kernels $JOB failed"
status=0
"$SF" frontier "$JOB" --json >"$OUT/frontier.json" || status=$?
# 4 names a culprit (an answer); anything else but 0 is a failure.
[ "$status" = 0 ] || [ "$status" = 4 ] || fail "sf frontier $JOB failed: no stage vectors from NVTX?"

"$PYTHON" - "$OUT" "$NPROC" <<'EOF'
import json, sys
out, nproc = sys.argv[1], int(sys.argv[2])
def load(name):
    with open(f"{out}/{name}") as f:
        return json.load(f)
failed = []
def check(ok, what):
    print(f"gpu_smoke: {'ok  ' if ok else 'FAIL'} {what}")
    if not ok:
        failed.append(what)

ls = load("ls.json")
check(len(ls["ranks"]) == nproc, f"sf ls: {len(ls['ranks'])} rank logs, want {nproc}")
records = [json.loads(line) for line in open(f"{out}/dump0.jsonl")]
kinds = {}
for r in records:
    kinds[r["kind"]] = kinds.get(r["kind"], 0) + 1
allreduces = sum(1 for r in records if r["kind"] == "nccl_call" and r.get("op") == "allreduce")
check(allreduces > 0, f"sf dump rank 0: {allreduces} allreduce nccl_call records (DDP's gradient buckets)")
kernel_kinds = {k: kinds.get(k, 0) for k in ("kernel_name", "kernel_cluster", "stream_busy", "stage_device")}
check(kernel_kinds["kernel_name"] > 0 and kernel_kinds["kernel_cluster"] > 0,
      f"sf dump rank 0: kernel records {kernel_kinds}")
kernels = load("kernels.json")
check(kernels.get("kernel_records", 0) > 0, f"sf kernels: {kernels.get('kernel_records', 0)} kernel records")
nccl_kernels = sum(r["nccl"]["kernels"] for r in kernels.get("ranks", []))
if nproc > 1:
    check(nccl_kernels > 0, f"sf kernels: {nccl_kernels} NCCL kernels seen on the GPU")
else:
    # NCCL's src/enqueue.cc runs a one-rank collective through ncclLaunchOneRank: an
    # in-place allreduce (DDP's) is no work at all, an out-of-place one a memcpy.
    print(f"gpu_smoke: skip sf kernels: {nccl_kernels} NCCL kernels; one rank launches none (ncclLaunchOneRank)")
frontier = load("frontier.json")
stages = frontier.get("stages", [])
want = ["data.next_wait", "model.fwd_loss_cpu_wall", "model.backward_cpu_wall", "optim.step_cpu_wall", "callbacks.cpu_wall"]
check(all(s in stages for s in want), f"sf frontier: stages from NVTX ranges {stages}")
steps = sum(w["steps"] for w in frontier.get("windows", []))
check(steps > 0, f"sf frontier: {steps} steps of stage vectors")
device = [w.get("forward_device") for w in frontier.get("windows", [])]
check(any(d and d["samples"] > 0 for d in device), f"sf frontier: forward device time per window {device}")

# Under sf run: the Python door leaves the steps to the job's NVTX ranges (one vector per
# step), CUPTI is the one the process runs, the watchdog's quiet polls are only counted.
run_records = [json.loads(line) for line in open(f"{out}/run_dump0.jsonl")]
vectors = [r["step"] for r in run_records if r["kind"] == "step_vector" and r["part"] == 0]
check(len(vectors) > 0 and len(vectors) == len(set(vectors)),
      f"sf run: one stage vector per step ({len(vectors)} vectors, {len(set(vectors))} steps)")
cupti = [r for r in run_records if r["kind"] == "cupti_status"]
last = cupti[-1] if cupti else {}
check(last.get("state") == "enabled" and last.get("records", 0) > 0,
      f"sf run: CUPTI {last.get('state')}, {last.get('records', 0)} activity records")
polls = sum(1 for r in run_records if r["kind"] == "nccl_call" and r.get("op") == "comm_get_async_error")
check(polls == 0, f"sf run: {polls} quiet ncclCommGetAsyncError polls recorded (want 0: counted in the header)")
doors = load("run_ls.json")["ranks"][0]["doors"]["open"]
check(all(d in doors for d in ("preload", "profiler", "nvtx", "cuda")), f"sf run: doors open {doors}")

base, with_sf = load("base.json"), load("sf.json")
a, b = base["samples_per_s"], with_sf["samples_per_s"]
print(f"gpu_smoke: throughput without the library {a:.1f} samples/s, with it {b:.1f} samples/s, ratio {b / a:.4f}")
if failed:
    print(f"gpu_smoke: FAIL: {len(failed)} check(s) failed: " + "; ".join(failed), file=sys.stderr)
    sys.exit(1)
print("gpu_smoke: all checks passed")
EOF

say "async 1/2: a spin kernel before each allreduce, under sf run"
"$SF" run --log-dir "$OUT/async" --job-id async -- torchrun --standalone --nproc-per-node "$NPROC" \
    "$ROOT/cuda/async_smoke.py" --out "$OUT/async.json" >"$OUT/async.log" 2>&1 \
    || fail "the asynchronous job under sf run failed; see $OUT/async.log"
"$SF" dump "$OUT/async/async/rank-00000.sflog" --json >"$OUT/async_dump0.jsonl" 2>/dev/null \
    || fail "sf dump of the asynchronous job's rank 0 failed"

say "async 2/2: a spin kernel of a minute at step 5 stalls the job; sf hang live"
"$SF" run --log-dir "$OUT/stall" --job-id stall -- torchrun --standalone --nproc-per-node "$NPROC" \
    "$ROOT/cuda/async_smoke.py" --stall-after 5 --stall-s 60 --out "$OUT/stall.json" >"$OUT/stall.log" 2>&1 &
stall_pid=$!
hang_status=0
for _ in $(seq 40); do # up to 40 s: the threshold follows the job's own cadence
    sleep 1
    hang_status=0
    SF_HANG_MIN_S=1 "$SF" hang "$OUT/stall/stall" >"$OUT/stall_hang.txt" 2>&1 || hang_status=$?
    [ "$hang_status" = 3 ] && break
done
"$SF" hang "$OUT/stall/stall" --json >"$OUT/stall_hang.json" 2>/dev/null || true
kill -TERM "$stall_pid" 2>/dev/null || true
wait "$stall_pid" 2>/dev/null || true

"$PYTHON" - "$OUT" "$hang_status" <<'EOF'
import json, statistics, sys
out, hang_status = sys.argv[1], int(sys.argv[2])
failed = []
def check(ok, what):
    print(f"gpu_smoke: {'ok  ' if ok else 'FAIL'} {what}")
    if not ok:
        failed.append(what)

result = json.load(open(f"{out}/async.json"))
records = [json.loads(line) for line in open(f"{out}/async_dump0.jsonl")]
calls = [r["t_exit_ns"] - r["t_enter_ns"] for r in records if r["kind"] == "nccl_call" and r.get("op") == "allreduce"]
median_ms = statistics.median(calls) / 1e6 if calls else float("nan")
check(bool(calls) and median_ms < result["spin_ms"] / 10,
      f"async: the allreduce returns before the spin kernel ahead of it ends "
      f"(median host call {median_ms:.3f} ms, the job's own {result['call_ms']:.3f} ms, spin {result['spin_ms']} ms)")
# The host waits after each allreduce, in the .item()'s synchronization: the first
# synchronization of the job's own thread (tid known) after the call, for as long as the
# spin kernel has left to run (the calibrated spin runs short of --spin-ms on a loaded GPU).
# Syncs with no thread are CUPTI's records of other threads' (PyTorch's watchdog's) polls.
own = sorted((r["t_enter_ns"], r["t_exit_ns"]) for r in records if r["kind"] == "host_sync" and r["tid"] != 0)
ends = [r["t_exit_ns"] for r in records if r["kind"] == "nccl_call" and r.get("op") == "allreduce"]
waits = [next(((b - a) / 1e6 for a, b in own if a >= end), 0.0) for end in ends]
long = [w for w in waits if w >= 1.0]
check(len(ends) > 0 and len(long) >= 0.8 * len(ends),
      f"async: CUPTI recorded the host waiting after the allreduce ({len(long)} of {len(ends)} steps "
      f"waited 1 ms or more in a synchronization, median {statistics.median(waits) if waits else 0:.1f} ms)")
colls = [r for r in records if r["kind"] == "device_coll"]
print(f"gpu_smoke: info {len(colls)} device_coll records (one rank runs no NCCL kernel: ncclLaunchOneRank)")
first = open(f"{out}/stall_hang.txt").read().splitlines()[:1]
# One rank has no peer waiting for it in a collective: nothing the device stall verdict
# needs (scripts/gpu_pair_smoke.sh checks it with two ranks); reported, not checked.
print(f"gpu_smoke: info stall with one rank: sf hang live exit {hang_status}: {first}")
if failed:
    print(f"gpu_smoke: FAIL: {len(failed)} asynchronous check(s) failed: " + "; ".join(failed), file=sys.stderr)
    sys.exit(1)
print("gpu_smoke: asynchronous checks passed")
EOF
