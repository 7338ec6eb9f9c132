#!/usr/bin/env bash
# Hidden-rank routing matrix (the shape of StageFrontier's E3, Table 4) on CPU: for each
# scenario, rank count and seed, sf-trainer-sim runs under the library with a 120 ms
# delay injected on one hidden rank; `sf frontier DIR --json` then routes it. Prints, for
# StageFrontier and each baseline, top-1 hits, top-2 hits, candidate hits and the mean
# candidate-set size, and fails unless StageFrontier's top-2 holds the injected stage on
# every row.
#
# Then the unmarked matrix (stages inferred from the NCCL schedule): sf-trainer-sim with
# --markers none and one stage of one random rank of 8 planted slow with --slow (20% and
# 100% of the ~100 ms step); `sf frontier` must name the rank and the inferred phase the
# stage runs in on >= 95% of the cases, and name nothing on healthy runs. With blocking
# calls: data, fwd: inferred.before_first_collective; bwd: between the bucket allreduces,
# and optim: before the loss allgather, inferred.between_collectives. With asynchronous
# launches the step turns where the hosts wait for the device: data, fwd and bwd (slowed
# on the device, --slow-kernel) are inferred.between_collectives, optim
# inferred.before_first_collective.
#
#   scripts/routing_matrix.sh                  # 5 scenarios x {8, 32} ranks x 5 seeds;
#                                              # unmarked: 4 stages x 2 sizes x 5 seeds + 4 healthy
#   SF_MATRIX_QUICK=1 scripts/routing_matrix.sh  # 5 scenarios x 8 ranks x 1 seed;
#                                              # unmarked: 4 cases + 1 healthy (CI)
#   SF_MATRIX_ONLY=unmarked scripts/routing_matrix.sh  # only the unmarked matrix
#
# The job launches as a GPU job does (SF_MATRIX_LAUNCH=async, the default: NCCL calls
# return once enqueued on the fake CUDA runtime's streams and the CUDA door records the
# device) or with NCCL calls that block the host (SF_MATRIX_LAUNCH=blocking).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/matrix-binaries

if [ "${SF_MATRIX_QUICK:-0}" = 1 ]; then sizes=(8); seeds=(1); else sizes=(8 32); seeds=(1 2 3 4 5); fi
steps=${SF_MATRIX_STEPS:-12}
launch=${SF_MATRIX_LAUNCH:-async}
case $launch in
  async) device_env=(CUDA_INJECTION64_PATH="$lib") ;;
  blocking) device_env=() ;;
  *) echo "SF_MATRIX_LAUNCH=$launch: use async or blocking" >&2; exit 2 ;;
esac
root=$(mktemp -d /tmp/sf-routing.XXXXXX)
trap 'rm -rf "$root"' EXIT

# scenario | injected stage (ground truth) | SF_INJECT rule body after rank=R,
scenarios=(
  "data|data.next_wait|stage=data.next_wait,ms=120"
  "backward|model.backward_cpu_wall|stage=model.backward_cpu_wall,ms=120"
  "backward/comm|model.backward_cpu_wall|op=allreduce,stage=model.backward_cpu_wall,ms=30"
  "forward/host|model.fwd_loss_cpu_wall|stage=model.fwd_loss_cpu_wall,ms=120"
  "callback/sync|callbacks.cpu_wall|stage=callbacks.cpu_wall,ms=120"
)

hidden_matrix() {
rows=$root/rows.jsonl
for entry in "${scenarios[@]}"; do
  IFS='|' read -r scenario truth rule <<<"$entry"
  for ranks in "${sizes[@]}"; do
    for seed in "${seeds[@]}"; do
      hidden=$(( 1 + (seed * 5 + 2) % (ranks - 1) ))  # never rank 0, which one baseline reads
      dir=$root/$(echo "$scenario" | tr / -)-$ranks-$seed
      env "${device_env[@]}" LD_PRELOAD="$lib" SF_LOG_DIR="$dir" SF_JOB_ID=job \
        SF_INJECT="delay:rank=$hidden,$rule,step=2-$((steps - 1))" \
        "$bin/sf-trainer-sim" --ranks "$ranks" --steps "$steps" --seed "$seed" --jitter-ms 2 --launch "$launch" \
        --stage-ms data=20,fwd=30,bwd=40,callbacks=2,optim=10 >/dev/null
      # Exit 4 is the answer when a window names a culprit; only an error (1) stops the matrix.
      local status=0
      "$sf" frontier "$dir/job" --json >"$dir/frontier.json" || status=$?
      [ "$status" = 0 ] || [ "$status" = 4 ] || { echo "sf frontier $dir/job: exit $status" >&2; exit 1; }
      printf '{"scenario":"%s","ranks":%d,"seed":%d,"hidden":%d,"truth":"%s","report":"%s"}\n' \
        "$scenario" "$ranks" "$seed" "$hidden" "$truth" "$dir/frontier.json" >>"$rows"
    done
  done
done

python3 - "$rows" <<'PY'
import json, sys

TAU = 0.80
rows = [json.loads(line) for line in open(sys.argv[1])]

def ranked(values):
    return [stage for stage, _ in sorted(values.items(), key=lambda kv: -kv[1])]

def candidates(values):
    """Smallest prefix of stages by value whose normalized mass reaches TAU."""
    total = sum(max(v, 0.0) for v in values.values()) or 1.0
    chosen, mass = [], 0.0
    for stage in ranked(values):
        chosen.append(stage)
        mass += max(values[stage], 0.0) / total
        if mass >= TAU:
            break
    return chosen

methods = ["StageFrontier", "per-stage max", "per-stage avg", "rank spread", "slowest rank", "rank 0"]
keys = {"per-stage max": "per_stage_max_s", "per-stage avg": "per_stage_avg_s", "rank spread": "rank_spread_s",
        "slowest rank": "slowest_rank_s", "rank 0": "local_rank_s"}
score = {m: [0, 0, 0, 0] for m in methods}  # top1, top2, candidate hit, candidate-set size sum
sf_top2_misses = []
for row in rows:
    window = json.load(open(row["report"]))["windows"][0]
    truth = row["truth"]
    for method in methods:
        if method == "StageFrontier":
            top1, top2, cands = window["top1"], window["top2"], window["routing_set"]
        else:
            values = window["baselines"][keys[method]]
            order = ranked(values)
            top1, top2, cands = order[0], order[:2], candidates(values)
        s = score[method]
        s[0] += top1 == truth
        s[1] += truth in top2
        s[2] += truth in cands
        s[3] += len(cands)
        if method == "StageFrontier" and truth not in top2:
            sf_top2_misses.append(row)
    leaders = window["leader_ranks"].get(truth, [])
    row["leader_ok"] = row["hidden"] in leaders

n = len(rows)
print(f"hidden-rank routing matrix: {n} rows (120 ms on one hidden rank)")
print(f"{'method':<15} {'top-1':>7} {'top-2':>7} {'cand hit':>9} {'|cand|':>7}")
for method in methods:
    t1, t2, ch, size = score[method]
    print(f"{method:<15} {t1:>4}/{n:<2} {t2:>4}/{n:<2} {ch:>6}/{n:<2} {size / n:>7.2f}")
named = sum(r["leader_ok"] for r in rows)
print(f"StageFrontier names the hidden rank as a leader of the injected stage on {named}/{n} rows")
for row in sf_top2_misses:
    print(f"MISS top-2: {row['scenario']} ranks={row['ranks']} seed={row['seed']}")
sys.exit(1 if sf_top2_misses else 0)
PY
}

# Unmarked matrix: stage | the inferred phase it runs in | how it is slowed (see the header).
# With blocking calls the step turns after the loss allgather (the longest gap: data and
# forward); with asynchronous launches after the last bucket allreduce, where the hosts
# wait for the device in callbacks, so data and forward run between the allgather and
# the allreduces, and optim before the step's first collective. There a slower host in
# backward hides behind the device it is ahead of (no effect, nothing to find): backward
# is slowed on the device (--slow-kernel).
if [ "$launch" = async ]; then
  unmarked=(
    "data|inferred.between_collectives|--slow"
    "fwd|inferred.between_collectives|--slow"
    "bwd|inferred.between_collectives|--slow-kernel"
    "optim|inferred.before_first_collective|--slow"
  )
else
  unmarked=(
    "data|inferred.before_first_collective|--slow"
    "fwd|inferred.before_first_collective|--slow"
    "bwd|inferred.between_collectives|--slow"
    "optim|inferred.between_collectives|--slow"
  )
fi
unmarked_matrix() {
  local rows=$root/unmarked.jsonl case=0 seeds_u=(1 2 3 4 5) healthy=(1 2 3 4)
  [ "${SF_MATRIX_QUICK:-0}" = 1 ] && { seeds_u=(1); healthy=(1); }
  run_case() {  # name hidden stage ms truth fault-flag
    local dir=$root/unmarked-$1
    env "${device_env[@]}" LD_PRELOAD="$lib" SF_LOG_DIR="$dir" SF_JOB_ID=job \
      "$bin/sf-trainer-sim" --ranks 8 --steps "$steps" --seed "$case" --jitter-ms 2 --markers none --launch "$launch" \
      --stage-ms "$stage_ms" ${3:+"$6" "$2:$3:$4@2-$((steps - 1))"} \
      >/dev/null 2>&1
    local status=0
    "$sf" frontier "$dir/job" --json >"$dir/frontier.json" || status=$?
    [ "$status" = 0 ] || [ "$status" = 4 ] || { echo "sf frontier $dir/job: exit $status" >&2; exit 1; }
    status=0
    "$sf" slow "$dir/job" --json >"$dir/slow.json" || status=$?
    [ "$status" = 0 ] || [ "$status" = 4 ] || { echo "sf slow $dir/job: exit $status" >&2; exit 1; }
    printf '{"case":"%s","hidden":%s,"stage":"%s","ms":%s,"truth":"%s","dir":"%s"}\n' \
      "$1" "${2:-null}" "${3:-}" "${4:-0}" "${5:-}" "$dir" >>"$rows"
  }
  local stage_ms=data=20,fwd=30,bwd=40,callbacks=2,optim=10
  for seed in "${seeds_u[@]}"; do
    for entry in "${unmarked[@]}"; do
      IFS='|' read -r stage truth fault <<<"$entry"
      for ms in 20 100; do
        case=$((case + 1))
        # Quick mode: one size per stage, alternating.
        [ "${SF_MATRIX_QUICK:-0}" = 1 ] && [ $(( ((case - 1) / 2 + (ms == 100)) % 2 )) = 1 ] && continue
        hidden=$(( (case * 5 + seed * 3 + 1) % 8 ))  # every rank, 0 included, over the matrix
        run_case "$stage-$ms-$seed" "$hidden" "$stage" "$ms" "$truth" "$fault"
      done
    done
  done
  # Healthy runs take ~200 ms steps, as tests/slow_cli.rs does: a 60-100 ms stall of a
  # loaded 2-core machine must stay under sf slow's L1 jitter gate (max/min 1.5), which
  # has nothing to do with where the stages came from.
  stage_ms=data=30,fwd=60,bwd=80,callbacks=5,optim=20
  for h in "${healthy[@]}"; do
    case=$((100 + h))
    run_case "healthy-$h"
  done
  python3 - "$rows" <<'PY'
import json, sys

rows = [json.loads(line) for line in open(sys.argv[1])]
planted = [r for r in rows if r["stage"]]
healthy = [r for r in rows if not r["stage"]]
hits = slow_hits = 0
for r in planted:
    f = json.load(open(r["dir"] + "/frontier.json"))
    s = json.load(open(r["dir"] + "/slow.json"))
    assert f["source"] == "inferred" and s["source"] == "inferred", r["dir"]
    culprits = f["windows"][0]["culprits"] if f["windows"] else []
    got = (culprits[0]["rank"], culprits[0]["stage"]) if culprits else None
    ok = got == (r["hidden"], r["truth"])
    hits += ok
    slow = s["slow_ranks"][0] if s["slow_ranks"] else None
    slow_ok = slow is not None and (slow["rank"], slow["stage"]) == (r["hidden"], r["truth"])
    slow_hits += slow_ok
    if not ok or not slow_ok:
        print(f"MISS {r['case']} rank {r['hidden']} {r['truth']}: frontier named {got}, "
              f"sf slow {slow and (slow['rank'], slow['stage'])}")
false_alarms = []
for r in healthy:
    f = json.load(open(r["dir"] + "/frontier.json"))
    s = json.load(open(r["dir"] + "/slow.json"))
    named = [c["stage"] for w in f["windows"] for c in w["culprits"]]
    named += [l["label"] for w in f["windows"] for l in w["labels"] if l["strong"]]
    if named or s["found"]:
        false_alarms.append(r["case"])
        print(f"FALSE ALARM {r['case']}: frontier {named}, sf slow found={s['found']}")
n = len(planted)
print(f"unmarked matrix (stages inferred from the NCCL schedule, 8 ranks): frontier names the rank and phase "
      f"on {hits}/{n}, sf slow on {slow_hits}/{n}; healthy runs with a finding: {len(false_alarms)}/{len(healthy)}")
sys.exit(0 if hits >= 0.95 * n and slow_hits >= 0.95 * n and not false_alarms else 1)
PY
}

failed=0
if [ "${SF_MATRIX_ONLY:-}" != unmarked ]; then hidden_matrix || failed=1; fi
if [ "${SF_MATRIX_ONLY:-}" != hidden ]; then unmarked_matrix || failed=1; fi
exit $failed
