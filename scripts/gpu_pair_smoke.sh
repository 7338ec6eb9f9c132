#!/usr/bin/env bash
# Two NCCL ranks on one GPU, for a GPU node with a single device: cuda/shared_gpu.py gives
# each rank a host of its own (NCCL_HOSTID), so NCCL joins them through sockets on
# loopback as it joins two nodes, and every collective runs real NCCL kernels that wait on
# the device for their peer. Under `sf run`, four jobs:
#   ddp    cuda/ddp_smoke.py, healthy: NCCL kernels in the logs; sf hang not hung;
#          sf slow and sf frontier name nobody
#   late   cuda/async_smoke.py --late-rank 1: rank 1's device arrives late at every
#          allreduce while its host returns at once; sf slow must name rank 1
#   stall  cuda/async_smoke.py --stall-rank 1: a spin kernel of 90 s on rank 1 alone;
#          sf hang, live, must name rank 1 (exit 3)
#   blind  the same stall with the CUDA door shut (preload, profiler and python doors):
#          what sf hang says from NCCL's profiler events alone (reported, not checked)
# Each job's sf answers (text and --json) and logs stay in the output directory.
#
# Build here (cargo build --release) and carry target/release/{libstagefrontier.so,sf}.
# Usage: scripts/gpu_pair_smoke.sh [--dry-run]
# Environment: SF_SMOKE_SF, SF_SMOKE_OUT, SF_SMOKE_NO_GPU, PYTHON (as scripts/gpu_smoke.sh)
# Exit status: 0 all checks passed (or no GPU: skipped), 1 a check failed, 2 a missing
# prerequisite.
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
SF=${SF_SMOKE_SF:-$ROOT/target/release/sf}
PYTHON=${PYTHON:-python3}
say() { echo "gpu_pair_smoke: $*"; }
missing() { echo "gpu_pair_smoke: $*" >&2; exit 2; }
failed=()
check() { # check CONDITION-STATUS WHAT
    if [ "$1" = 0 ]; then say "ok   $2"; else say "FAIL $2"; failed+=("$2"); fi
}

job() { # job NAME [sf run options...] -- SCRIPT ARGS...: runs one two-rank job under sf run
    local name=$1
    shift
    local opts=()
    while [ "$1" != -- ]; do opts+=("$1"); shift; done
    shift
    JOB_LINE=("$SF" run --log-dir "$OUT/$name" --job-id "$name" "${opts[@]}" -- torchrun --standalone
        --nproc-per-node 2 "$ROOT/cuda/$1" "${@:2}")
}

case "${1:-}" in
    --dry-run)
        OUT=OUT
        job late -- async_smoke.py --late-rank 1 --out OUT/late.json
        say "would run: SF_SMOKE_HOSTID_PER_RANK=1 NCCL_SOCKET_IFNAME=lo ${JOB_LINE[*]} (and ddp, stall, blind)"
        exit 0
        ;;
    "") ;;
    *) echo "usage: $0 [--dry-run]" >&2; exit 2 ;;
esac

gpus=0
if [ "${SF_SMOKE_NO_GPU:-0}" != 1 ] && command -v nvidia-smi >/dev/null 2>&1; then
    gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
fi
if [ "$gpus" -lt 1 ]; then
    say "no GPU: skipped (nvidia-smi lists none; run this on a GPU node)"
    exit 0
fi
[ -x "$SF" ] || missing "$SF is missing: run cargo build --release here and carry target/release to the GPU node"
command -v torchrun >/dev/null 2>&1 || missing "torchrun not found: activate the Python environment with torch"
OUT=${SF_SMOKE_OUT:-$(mktemp -d "${TMPDIR:-/tmp}/sf-gpu-pair.XXXXXX")}
mkdir -p "$OUT"
say "output in $OUT"
export SF_SMOKE_HOSTID_PER_RANK=1 NCCL_SOCKET_IFNAME=lo

answers() { # answers NAME: every sf answer over one job's logs, text and JSON, with exit codes
    local dir=$OUT/$1/$1 cmd status
    for cmd in ls hang slow frontier kernels; do
        status=0
        timeout 60 "$SF" "$cmd" "$dir" >"$OUT/$1.$cmd.txt" 2>&1 || status=$?
        timeout 60 "$SF" "$cmd" "$dir" --json >"$OUT/$1.$cmd.json" 2>/dev/null || true
        echo "$status" >"$OUT/$1.$cmd.status"
        say "$1: sf $cmd exit $status: $(head -1 "$OUT/$1.$cmd.txt")"
    done
}

live_hang() { # live_hang PID NAME: polls sf hang while the job runs, up to 60 s, then stops it
    local pid=$1 name=$2 status=0
    for _ in $(seq 60); do
        sleep 1
        status=0
        SF_HANG_MIN_S=1 timeout 30 "$SF" hang "$OUT/$name/$name" >"$OUT/$name.live_hang.txt" 2>&1 || status=$?
        [ "$status" = 3 ] && break
    done
    timeout 30 "$SF" hang "$OUT/$name/$name" --json >"$OUT/$name.live_hang.json" 2>/dev/null || true
    echo "$status" >"$OUT/$name.live_hang.status"
    say "$name: sf hang live exit $status: $(head -1 "$OUT/$name.live_hang.txt")"
    kill -TERM "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
}

say "1/4 ddp: a healthy two-rank DDP job"
job ddp -- ddp_smoke.py --steps 30 --warmup 5 --width 1024 --out "$OUT/ddp.json"
timeout -k 5 180 "${JOB_LINE[@]}" >"$OUT/ddp.log" 2>&1
check $? "ddp: the two-rank job on one GPU ran to the end under sf run (see $OUT/ddp.log)"
answers ddp
nccl_kernels=$("$PYTHON" -c 'import json,sys; print(sum(r["nccl"]["kernels"] for r in json.load(open(sys.argv[1])).get("ranks", [])))' "$OUT/ddp.kernels.json" 2>/dev/null || echo 0)
[ "${nccl_kernels:-0}" -gt 0 ]
check $? "ddp: $nccl_kernels NCCL kernels seen on the GPU"
[ "$(cat "$OUT/ddp.hang.status")" = 0 ]
check $? "ddp: sf hang post-mortem: not hung"

say "2/4 late: rank 1's device 40 ms late at every allreduce"
job late -- async_smoke.py --steps 30 --late-rank 1 --late-ms 40 --out "$OUT/late.json"
timeout -k 5 180 "${JOB_LINE[@]}" >"$OUT/late.log" 2>&1
check $? "late: the job ran to the end under sf run (see $OUT/late.log)"
answers late
grep -q "rank 1" "$OUT/late.slow.txt"
check $? "late: sf slow names rank 1: $(head -1 "$OUT/late.slow.txt")"

say "3/4 stall: a spin kernel of 90 s on rank 1 at step 5, every door open"
job stall -- async_smoke.py --stall-after 5 --stall-s 90 --stall-rank 1 --out "$OUT/stall.json"
timeout -k 5 150 "${JOB_LINE[@]}" >"$OUT/stall.log" 2>&1 &
live_hang $! stall
answers stall
[ "$(cat "$OUT/stall.live_hang.status")" = 3 ] && head -1 "$OUT/stall.live_hang.txt" | grep -q "rank 1"
check $? "stall: sf hang live names rank 1 (exit 3): $(head -1 "$OUT/stall.live_hang.txt")"

say "4/4 blind: the same stall, CUDA door shut (reported, not checked)"
job blind --doors preload,profiler,python -- async_smoke.py --stall-after 5 --stall-s 90 --stall-rank 1 \
    --out "$OUT/blind.json"
timeout -k 5 150 "${JOB_LINE[@]}" >"$OUT/blind.log" 2>&1 &
live_hang $! blind
answers blind

if [ "${#failed[@]}" -gt 0 ]; then
    say "FAIL: ${#failed[@]} check(s) failed: ${failed[*]}"
    exit 1
fi
say "all checks passed"
