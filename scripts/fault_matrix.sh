#!/usr/bin/env bash
# Fault matrix: runs a job once per injected fault, diagnoses each run from the logs alone
# (`sf hang` for hangs, `sf frontier` for a slow stage on one rank: the stage must be in the
# top-2 and the rank among its leaders), and prints injected ground truth against
# diagnosis, pass/fail per case, and hang-localization precision and recall.
#
#   scripts/fault_matrix.sh                 # sf-trainer-sim, 8 ranks, on this machine
#   SF_MATRIX_JOB='torchrun --nproc-per-node 8 train.py' scripts/fault_matrix.sh
#
# SF_MATRIX_JOB is any command that launches the whole job; it runs with LD_PRELOAD set to
# the library and SF_LOG_DIR/SF_JOB_ID/SF_INJECT set per case. SF_MATRIX_RANKS is its world
# size (default 8), SF_MATRIX_QUICK=1 runs a reduced matrix (what CI runs).
#
# sf-trainer-sim launches as a GPU job does (SF_MATRIX_LAUNCH=async, the default: NCCL
# calls return once enqueued on the fake CUDA runtime's streams, the CUDA door records the
# device) or with NCCL calls that block the host (SF_MATRIX_LAUNCH=blocking). Async adds
# stuck-kernel cases (--hang-kernel RANK:STEP): every rank launches the same collectives,
# and only the device says who is stuck.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/matrix-binaries

ranks=${SF_MATRIX_RANKS:-8}
launch=${SF_MATRIX_LAUNCH:-async}
case $launch in async | blocking) ;; *) echo "SF_MATRIX_LAUNCH=$launch: use async or blocking" >&2; exit 2 ;; esac
job=${SF_MATRIX_JOB:-"$bin/sf-trainer-sim --ranks $ranks --steps 100000 --stage-ms data=4,fwd=4,bwd=8,callbacks=1,optim=2 --launch $launch"}
root=$(mktemp -d /tmp/sf-matrix.XXXXXX)
trap 'rm -rf "$root"' EXIT

# name | SF_INJECT | expected: a culprit rank for a hang, STAGE@RANK for a slow stage, - for none
#      [| arguments added to sf-trainer-sim's [| SF_TRAINER_SIM_EXIT]]
# A death (the last field: rank R ends at step S by _exit(1) or SIGKILL, and the launcher
# tears the others down with SIGTERM within milliseconds, as torchrun does) is named post
# mortem, by the rank that ended first.
cases=(
  "hang-r3-s40|hang:rank=3,op=allreduce,seq=40|3"
  "hang-r0-s26|hang:rank=0,op=allgather,seq=26|0"
  "hang-r$((ranks - 1))-s60|hang:rank=$((ranks - 1)),op=allreduce,seq=60|$((ranks - 1))"
  "slow-data-r2|delay:rank=2,stage=data.next_wait,ms=120,step=2-1000|data.next_wait@2"
  "healthy|-|-"
)
if [ "$launch" = async ] && [ -z "${SF_MATRIX_JOB:-}" ]; then
  cases+=("hangk-r3-s20|-|3|--hang-kernel 3:20")
  [ "${SF_MATRIX_QUICK:-0}" = 1 ] || cases+=("hangk-r0-s35|-|0|--hang-kernel 0:35" "hangk-r$((ranks - 1))-s50|-|$((ranks - 1))|--hang-kernel $((ranks - 1)):50")
fi
if [ -z "${SF_MATRIX_JOB:-}" ]; then
  cases+=("died-r2-exit|-|2||2@30:exit1")
  [ "${SF_MATRIX_QUICK:-0}" = 1 ] || cases+=("died-r$((ranks - 1))-kill|-|$((ranks - 1))||$((ranks - 1))@45:kill" "died-r0-exit|-|0||0@20:exit1")
fi
if [ "${SF_MATRIX_QUICK:-0}" != 1 ]; then
  cases+=(
    "hang-r5-s33|hang:rank=5,op=allreduce,seq=33|5"
    "hang-r2-s101|hang:rank=2,seq=101|2"
    "hang-r6-stage|hang:rank=6,op=allreduce,stage=model.backward_cpu_wall,step=7|6"
    "slow-bwd-r4|delay:rank=4,stage=model.backward_cpu_wall,ms=120,step=2-1000|model.backward_cpu_wall@4"
    "slow-fwd-r1|delay:rank=1,stage=model.fwd_loss_cpu_wall,ms=120,step=2-1000|model.fwd_loss_cpu_wall@1"
    "healthy-again|-|-"
  )
fi

# Steps the frontier has accounted so far in a case's logs (0 before the first window).
frontier_steps() {
  "$sf" frontier "$1/job" --json 2>/dev/null | python3 -c '
import json, sys
try:
    print(sum(w.get("steps", 0) for w in json.load(sys.stdin).get("windows", [])))
except Exception:
    print(0)'
}

run_case() {
  local name=$1 inject=$2 dir=$root/$1 sim_args=$4 exit_at=$5
  mkdir -p "$dir"
  local env=(LD_PRELOAD="$lib" SF_LOG_DIR="$dir" SF_JOB_ID=job SF_HANG_MIN_S=1)
  [ "$launch" = async ] && env+=(CUDA_INJECTION64_PATH="$lib")
  [ "$inject" != - ] && env+=(SF_INJECT="$inject")
  [ -n "$exit_at" ] && env+=(SF_TRAINER_SIM_EXIT="$exit_at")
  env "${env[@]}" setsid bash -c "exec $job $sim_args" >"$dir/job.out" 2>&1 &
  local pid=$!
  # Let it run into its fault (or, healthy, through many steps), then diagnose live. A slow
  # stage needs steps past its onset: on a loaded 2-core machine 3 s may hold only the first
  # two, so wait (up to 60 s) until the frontier has seen enough of them.
  sleep "${SF_MATRIX_WAIT_S:-3}"
  if [[ "$3" == *@* ]]; then
    local deadline=$((SECONDS + 60))
    until [ "$(frontier_steps "$dir")" -ge "${SF_MATRIX_MIN_STEPS:-20}" ] || [ $SECONDS -ge $deadline ]; do
      sleep 1
    done
  fi
  "$sf" hang "$dir/job" --json >"$dir/hang.json" 2>"$dir/hang.err" || true
  "$sf" frontier "$dir/job" --json >"$dir/frontier.json" 2>"$dir/frontier.err" || true
  kill -KILL -- -"$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}

printf '%-15s %-62s %-26s %-26s %s\n' CASE INJECTED EXPECTED DIAGNOSED RESULT
tp=0 fp=0 fn=0 failed=0
for entry in "${cases[@]}"; do
  IFS='|' read -r name inject expected sim_args exit_at <<<"$entry"
  run_case "$name" "$inject" "$expected" "$sim_args" "$exit_at"
  diagnosed=$(python3 - "$root/$name" "$expected" <<'PY'
import json, os, sys
case, expected = sys.argv[1], sys.argv[2]
def load(name):
    try:
        return json.load(open(os.path.join(case, name)))
    except Exception:
        return None
hang = load("hang.json") or {}
culprits = sorted({r for c in hang.get("communicators", []) for r in c.get("missing_ranks", [])})
# A device stall (--hang-kernel, async launches) is named by `device_stall`: the rank whose
# oldest unfinished kernel is not the collective its peers wait in.
if (hang.get("device_stall") or {}).get("rank") is not None:
    culprits = [hang["device_stall"]["rank"]]
# A job that ended: the rank that held the others up (post mortem), or the one that ended
# first when the others followed in a teardown.
post_mortem = hang.get("post_mortem") or {}
first_end = hang.get("first_end") or {}
if post_mortem.get("culprit_ranks"):
    print(",".join(map(str, post_mortem["culprit_ranks"])))
elif first_end.get("teardown"):
    print(first_end["rank"])
elif hang.get("hung"):
    print(",".join(map(str, culprits)) or "hung:?")
elif "@" in expected:
    stage, rank = expected.split("@")
    # The window with the most steps (the last on a tie): a live job's last window may hold
    # a single step still being written.
    windows = (load("frontier.json") or {}).get("windows", [])
    window = max(reversed(windows), key=lambda w: w.get("steps", 0)) if windows else {}
    top2 = window.get("top2", [])
    leaders = window.get("leader_ranks", {}).get(stage, [])
    hit = stage in top2 and int(rank) in leaders
    print(expected if hit else f"{window.get('top1')}@{','.join(map(str, window.get('leader_ranks', {}).get(window.get('top1'), [])))}")
else:
    print("-")
PY
)
  result=pass
  if [ "$expected" = - ] || [[ "$expected" == *@* ]]; then
    [ "$diagnosed" = "$expected" ] || result=FAIL
    [[ "$diagnosed" =~ ^[0-9,]+$ ]] && fp=$((fp + 1))  # a hang named where there is none
  elif [ "$diagnosed" = "$expected" ]; then
    tp=$((tp + 1))
  else
    result=FAIL; fn=$((fn + 1))
    [[ "$diagnosed" =~ ^[0-9,]+$ ]] && fp=$((fp + 1))
  fi
  [ $result = pass ] || failed=$((failed + 1))
  printf '%-15s %-62s %-26s %-26s %s\n' "$name" "$inject" "$expected" "$diagnosed" "$result"
done
python3 - "$tp" "$fp" "$fn" <<'PY'
import sys
tp, fp, fn = map(int, sys.argv[1:])
precision = tp / (tp + fp) if tp + fp else 1.0
recall = tp / (tp + fn) if tp + fn else 1.0
print(f"hang localization: precision {precision:.0%} recall {recall:.0%} (tp={tp} fp={fp} fn={fn})")
PY
[ "$failed" = 0 ]
