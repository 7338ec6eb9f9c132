#!/usr/bin/env bash
# Blame matrix: planted stragglers on 8-rank sf-trainer-sim jobs under the library, scored
# on the headlines of `sf slow` (its first SLOW line) and `sf frontier` (its CULPRIT line):
#
#   slow stage   one stage of a random rank runs 5, 20 or 100 ms long (5%, 20%, 100% of
#                a ~100 ms step): a headline must name that rank and stage (target >= 14/15)
#   late         a random rank sleeps 10-30 ms before each of its allreduces: it must be
#                named, and no other rank (a waiter) in any SLOW line (target >= 7/8); with
#                asynchronous launches every other late rank is late on the device instead
#                (its backward kernels run 10-30 ms long)
#   two faults   two stages on two ranks run 20-40 ms long at once: sf slow or sf
#                frontier must name both ranks with their stages (target >= 4/5)
#   kernel       (asynchronous launches only) one rank's device work in fwd, bwd or optim
#                runs 5, 20 or 100 ms long (--slow-kernel): its host runs ahead, its device
#                arrives late; a headline must name that rank and stage (target >= 14/15)
#   healthy      no fault: no culprit from wait attribution, in sf slow or sf frontier
#                (target: all); the detectors' own false alarms on a loaded host are
#                the healthy matrix's business; they show here in the sf slow column
#
# Prints every row and the tally per kind, and fails when a target is missed.
#
# The job launches as a GPU job does (SF_MATRIX_LAUNCH=async, the default: NCCL calls
# return once enqueued on the fake CUDA runtime's streams, the ranks wait on the device,
# the CUDA door records it) or with NCCL calls that block the host (SF_MATRIX_LAUNCH=blocking).
#
#   scripts/blame_matrix.sh                   # 15 + 8 + 5 + 3 runs (+ 15 kernel runs, async)
#   SF_MATRIX_QUICK=1 scripts/blame_matrix.sh   # 3 + 2 + 1 + 1 runs (+ 3, async) (CI)
# SF_MATRIX_KEEP=1 keeps the logs and each row's sf slow / sf frontier JSON.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/matrix-binaries

ranks=8
steps=${SF_MATRIX_STEPS:-12}
launch=${SF_MATRIX_LAUNCH:-async}
case $launch in
  async) device_env=(CUDA_INJECTION64_PATH="$lib") ;;
  blocking) device_env=() ;;
  *) echo "SF_MATRIX_LAUNCH=$launch: use async or blocking" >&2; exit 2 ;;
esac
if [ "${SF_MATRIX_QUICK:-0}" = 1 ]; then seeds=(1); late_seeds=(1 2); double_seeds=(1); healthy_seeds=(1)
else seeds=(1 2 3 4 5); late_seeds=(1 2 3 4 5 6 7 8); double_seeds=(1 2 3 4 5); healthy_seeds=(1 2 3); fi
stages=(data.next_wait model.fwd_loss_cpu_wall model.backward_cpu_wall callbacks.cpu_wall optim.step_cpu_wall)
root=$(mktemp -d /tmp/sf-blame.XXXXXX)
cleanup() { if [ "${SF_MATRIX_KEEP:-0}" = 1 ]; then echo "logs kept in $root"; else rm -rf "$root"; fi; }
trap cleanup EXIT
rows=$root/rows.jsonl

# run NAME KIND TRUTH SEED SF_INJECT [SIM_ARGS...]: runs the job, sf slow and sf frontier,
# adds a row. TRUTH is a space-separated list of RANK@STAGE (STAGE may be '*').
run() {
  local name=$1 kind=$2 truth=$3 seed=$4 inject=$5 dir=$root/$1
  shift 5
  env "${device_env[@]}" LD_PRELOAD="$lib" SF_LOG_DIR="$dir" SF_JOB_ID=job \
    SF_INJECT="$inject" "$bin/sf-trainer-sim" --ranks $ranks --steps "$steps" --seed "$seed" \
    --jitter-ms 2 --stage-ms data=20,fwd=30,bwd=40,callbacks=2,optim=10 --launch "$launch" "$@" >/dev/null
  "$sf" slow "$dir/job" --json >"$dir/slow.json" || true
  "$sf" frontier "$dir/job" --json >"$dir/frontier.json" || true
  printf '{"name":"%s","kind":"%s","truth":"%s","inject":"%s","dir":"%s"}\n' \
    "$name" "$kind" "$truth" "$inject" "$dir" >>"$rows"
}

# Deterministic "random" choices from the seed (a multiplicative hash of seed and salt),
# so a row can be rerun.
pick() { echo $(( ((($1 * 7919 + $2) * 2654435761) >> 11) % $3 )); }

for ms in 5 20 100; do
  for seed in "${seeds[@]}"; do
    rank=$(pick "$seed" "$ms" $ranks)
    stage=${stages[$(pick "$((seed + ms))" 7 ${#stages[@]})]}
    run "stage-${ms}ms-$seed" stage "$rank@$stage" "$seed" \
      "delay:rank=$rank,stage=$stage,ms=$ms,step=2-$((steps - 1))"
  done
done
if [ "$launch" = async ]; then
  # Device-side: the rank's kernels in one stage run long; the sim's stage names as the
  # markers call them.
  kernel_stages=(fwd:model.fwd_loss_cpu_wall bwd:model.backward_cpu_wall optim:optim.step_cpu_wall)
  for ms in 5 20 100; do
    for seed in "${seeds[@]}"; do
      rank=$(pick "$seed" "$((ms + 1))" $ranks)
      IFS=: read -r short stage <<<"${kernel_stages[$(pick "$((seed + ms))" 29 3)]}"
      run "kernel-${ms}ms-$seed" kernel "$rank@$stage" "$seed" "" --slow-kernel "$rank:$short:$ms@2-$((steps - 1))"
    done
  done
fi
for seed in "${late_seeds[@]}"; do
  rank=$(pick "$seed" 11 $ranks)
  ms=$(( 10 + $(pick "$seed" 3 21) ))
  if [ "$launch" = async ] && [ $((seed % 2)) = 0 ]; then
    run "late-dev-${ms}ms-$seed" late "$rank@*" "$seed" "" --slow-kernel "$rank:bwd:$ms@2-$((steps - 1))"
  else
    run "late-${ms}ms-$seed" late "$rank@*" "$seed" "delay:rank=$rank,op=allreduce,ms=$ms,step=2-$((steps - 1))"
  fi
done
for seed in "${double_seeds[@]}"; do
  a=$(pick "$seed" 5 $ranks); b=$(( (a + 1 + $(pick "$seed" 9 $((ranks - 1)))) % ranks ))
  sa=${stages[$(pick "$seed" 13 ${#stages[@]})]}; sb=${stages[$(pick "$seed" 17 ${#stages[@]})]}
  ma=$(( 20 + $(pick "$seed" 19 21) )); mb=$(( 20 + $(pick "$seed" 23 21) ))
  run "two-$seed" two "$a@$sa $b@$sb" "$seed" \
    "delay:rank=$a,stage=$sa,ms=$ma,step=2-$((steps - 1));delay:rank=$b,stage=$sb,ms=$mb,step=2-$((steps - 1))"
done
for seed in "${healthy_seeds[@]}"; do
  run "healthy-$seed" healthy "" "$seed" ""
done

python3 - "$rows" <<'PY'
import json, sys

rows = [json.loads(line) for line in open(sys.argv[1])]

def load(path):
    try:
        return json.load(open(path))
    except (OSError, ValueError):
        return {}

def slow_named(slow, culprits_only=False):
    return [(s["rank"], s["stage"]) for s in slow.get("slow_ranks", []) if s.get("culprit") or not culprits_only]

def frontier_culprits(frontier):
    named = []
    for w in frontier.get("windows", []):
        named += [(c["rank"], c["stage"]) for c in w.get("culprits", [])]
    return named

tally = {}
print(f"{'row':<20} {'truth':<52} {'sf slow headline':<36} {'sf frontier culprit':<36} ok")
for row in rows:
    slow, frontier = load(row["dir"] + "/slow.json"), load(row["dir"] + "/frontier.json")
    s, f = slow_named(slow), frontier_culprits(frontier)
    truth = [(int(t.split("@")[0]), t.split("@")[1]) for t in row["truth"].split()]
    kind = row["kind"]
    hit = lambda named, t: any(n[0] == t[0] and t[1] in ("*", n[1]) for n in named)
    if kind in ("stage", "kernel"):
        ok = bool(s and hit(s[:1], truth[0])) or bool(f and hit(f[:1], truth[0]))
    elif kind == "late":
        ok = (hit(s, truth[0]) or hit(f[:1], truth[0])) and all(n[0] == truth[0][0] for n in s)
    elif kind == "two":
        ok = all(hit(s, t) or hit(f, t) for t in truth)
    else:
        ok = not slow_named(slow, culprits_only=True) and not f
    t = tally.setdefault(kind, [0, 0])
    t[0] += ok
    t[1] += 1
    show = lambda named: ", ".join(f"{r}@{st}" for r, st in named[:2]) or "-"
    print(f"{row['name']:<20} {row['truth'] or '-':<52} {show(s):<36} {show(f):<36} {'yes' if ok else 'NO'}")

targets = {"stage": 14 / 15, "kernel": 14 / 15, "late": 7 / 8, "two": 4 / 5, "healthy": 1.0}
failed = False
print()
for kind in ["stage", "kernel", "late", "two", "healthy"]:
    hits, n = tally.get(kind, [0, 0])
    need = targets[kind]
    met = n == 0 or hits / n >= need - 1e-9
    failed |= not met
    print(f"{kind:<8} {hits}/{n} named right (target {need:.0%}){'' if met else '  MISSED'}")
sys.exit(1 if failed else 0)
PY
