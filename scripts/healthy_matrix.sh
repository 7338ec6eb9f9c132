#!/usr/bin/env bash
# Healthy-run matrix: fault-free 8-rank jobs (sf-trainer-sim over fakenccl, under the
# library's preload and profiler-plugin doors, so steps, NCCL calls and RDMA work requests
# are all recorded) with stage jitter 0, 2 and 5 ms and several seeds, each run once on a
# quiet machine and once with a busy loop on every core. Every run is then read by
# `sf slow`, `sf net`, `sf hang` and `sf frontier`; the matrix fails on any finding: an
# exit status of 3 (hung) or 4 (slow/degraded) from slow, net or hang, any other status
# but 0, or a strong label (`"strong": true`: direct_exposure, sync_wait_dependent,
# likely_sync_wait) from frontier. Law 4: healthy jobs on noisy hosts report nothing.
#
#   scripts/healthy_matrix.sh                    # jitter {0,2,5} x 4 seeds x {quiet, hog}
#   SF_MATRIX_QUICK=1 scripts/healthy_matrix.sh  # jitter {0,2,5} x 1 seed x {quiet, hog} (CI)
#
# SF_MATRIX_STEPS (default 40) sets the steps per run, SF_MATRIX_KEEP=1 keeps the logs.
# SF_MATRIX_LAUNCH=async (the default) launches as a GPU job does (NCCL calls enqueue on
# the fake CUDA runtime's streams, the CUDA door records kernels and synchronizations, and
# `sf kernels` is read too); SF_MATRIX_LAUNCH=blocking keeps NCCL calls blocking the host.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/matrix-binaries

if [ "${SF_MATRIX_QUICK:-0}" = 1 ]; then seeds=(1); else seeds=(1 2 3 4); fi
jitters=(0 2 5)
steps=${SF_MATRIX_STEPS:-40}
ranks=8
launch=${SF_MATRIX_LAUNCH:-async}
case $launch in
  async) device_env=(CUDA_INJECTION64_PATH="$lib"); commands=(slow net hang kernels) ;;
  blocking) device_env=(); commands=(slow net hang) ;;
  *) echo "SF_MATRIX_LAUNCH=$launch: use async or blocking" >&2; exit 2 ;;
esac
root=$(mktemp -d /tmp/sf-healthy.XXXXXX)
hogs=()
stop_hogs() {
  for pid in "${hogs[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${hogs[@]}"; do wait "$pid" 2>/dev/null || true; done
  hogs=()
}
cleanup() {
  stop_hogs
  if [ "${SF_MATRIX_KEEP:-0}" = 1 ]; then echo "logs kept in $root"; else rm -rf "$root"; fi
}
trap cleanup EXIT

start_hogs() {
  local cores
  cores=$(nproc)
  for _ in $(seq "$cores"); do
    bash -c 'while :; do :; done' &
    hogs+=($!)
  done
}

# One run: the job, then the four commands. Prints one table row; returns 1 on a finding.
run_case() {
  local load=$1 jitter=$2 seed=$3 dir=$root/$1-j$2-s$3
  mkdir -p "$dir"
  env "${device_env[@]}" LD_PRELOAD="$lib" NCCL_PROFILER_PLUGIN="$lib" FAKENCCL_PROFILER_VERSION=7 \
    FAKENCCL_NET_PROFILER=1 SF_LOG_DIR="$dir" SF_JOB_ID=job \
    "$bin/sf-trainer-sim" --ranks "$ranks" --steps "$steps" --seed "$seed" --jitter-ms "$jitter" \
    --stage-ms data=20,fwd=30,bwd=40,callbacks=2,optim=10 --launch "$launch" >"$dir/job.out" 2>"$dir/job.err" ||
    { echo "job failed: $(tail -3 "$dir/job.err")" >&2; return 1; }
  local codes=() c
  for cmd in "${commands[@]}"; do
    c=0
    "$sf" "$cmd" "$dir/job" >"$dir/$cmd.txt" 2>&1 || c=$?
    codes+=("$c")
  done
  c=0
  "$sf" frontier "$dir/job" --json >"$dir/frontier.json" 2>"$dir/frontier.err" || c=$?
  local strong
  strong=$(python3 - "$dir/frontier.json" <<'PY'
import json, sys
try:
    windows = json.load(open(sys.argv[1]))["windows"]
except Exception:
    print("unreadable"); sys.exit()
found = sorted({l["label"] for w in windows for l in w["labels"] if l.get("strong")})
print(",".join(found) or "-")
PY
)
  local result=pass
  for code in "${codes[@]}" "$c"; do [ "$code" = 0 ] || result=FAIL; done
  [ "$strong" = - ] || result=FAIL
  printf '%-6s %6s %4s %5s %4s %5s %7s %9s  %-30s %s\n' "$load" "$jitter" "$seed" "${codes[0]}" "${codes[1]}" \
    "${codes[2]}" "${codes[3]:--}" "$c" "$strong" "$result"
  if [ "$result" = FAIL ]; then
    for cmd in "${commands[@]}"; do head -3 "$dir/$cmd.txt" | sed "s/^/    $cmd: /"; done
    return 1
  fi
}

printf '%-6s %6s %4s %5s %4s %5s %7s %9s  %-30s %s\n' LOAD JITTER SEED SLOW NET HANG KERNELS FRONTIER STRONG_LABELS RESULT
failed=0 total=0
for load in quiet hog; do
  [ "$load" = hog ] && start_hogs
  for jitter in "${jitters[@]}"; do
    for seed in "${seeds[@]}"; do
      total=$((total + 1))
      run_case "$load" "$jitter" "$seed" || failed=$((failed + 1))
    done
  done
  stop_hogs
done
echo "healthy matrix: $((total - failed)) of $total runs report nothing"
[ "$failed" = 0 ]
