#!/usr/bin/env bash
# Pipeline matrix: 8-rank 3-D jobs (sf-trainer-sim --tp/--pp/--dp, 1F1B, f = 20 ms and
# b = 30 ms per pass) with one slow pipeline stage or one slow rank, on the critical path
# or inside a bubble, read by `sf roles` and `sf path`. Labels come from the schedule, not
# from sf: with P stages and M microbatches a step is (M + P - 1)(f + b) long; the last
# stage's backward passes in the steady state have no slack, so a slowdown there lengthens
# the step by itself (on path); stage 0's forward of microbatch m < P has m*b of slack, so
# a delay of 60% of that is absorbed. Sizes are shares of the step (5% to 100%) as the
# layout's healthy run measured it.
#
# A missing exchange: one rank never posts its send (rank 1, pipeline stage 0) or its recv
# (rank 7, the last stage) of step 3; `sf hang`, live, must name it within 30 s: exit 3
# with the first HUNG line (the headline) "rank R never entered ..." (asynchronous: "never
# launched ...") from the first answer that exits 3 on (ranks further down the pipeline
# wait in their own receives and must not take the headline), and a HUNG line naming the
# exchange: "rank R never entered the send/recv ..." (asynchronous: "rank R never
# launched the send rank P's device waits for in recv #S ...").
#
# Pass criteria: `sf roles` reads the layout; every missing exchange is named; on-path cases exit 4 with the slow stage
# (pipeline stage N, 0-based) in the headline, and for a slow rank that rank (as the pass's
# rank or the one that held it up), in at least 90% of them; absorbed and healthy cases
# exit 0 with no finding.
#
#   scripts/pipeline_matrix.sh                    # 2 layouts x sizes {5,10,20,50,100}% x 2 seeds
#   SF_MATRIX_QUICK=1 scripts/pipeline_matrix.sh  # 2 layouts x sizes {10,50}% x 1 seed (CI)
#
# A 5% plant sits on the finding threshold (5% of the step without it): on a loaded host a
# hiccup in the slowed step can pull it under, so CI's subset starts at 10%; the full
# matrix keeps the 5% cases.
#
# SF_MATRIX_LAUNCH=async runs every job with asynchronous launches, as NCCL on a GPU does
# (collectives and send/recv return once enqueued; the fake device runs the passes'
# kernels), with the CUDA door open so that passes are timed on the device; the default
# is blocking (the host waits inside each call).
#
# SF_MATRIX_PASSES=none runs every job without per-microbatch pass markers (a job that
# marks its steps only): sf path takes the passes from the pipeline's sends and receives,
# and names the last stage's forward and backward of a microbatch as one span ("fwd+bwd");
# the default, each, marks every pass.
#
# SF_MATRIX_KEEP=1 keeps the logs; SF_MATRIX_PROFILE=debug uses the debug build.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/matrix-binaries
launch=${SF_MATRIX_LAUNCH:-blocking}
passes=${SF_MATRIX_PASSES:-each}
# The slow rank: its host (blocking), or its device (asynchronous, where a GPU straggles).
case $launch in
  blocking) door=() slow_rank=--slow ;;
  async) door=(CUDA_INJECTION64_PATH="$lib") slow_rank=--slow-kernel ;;
  *) echo "SF_MATRIX_LAUNCH: blocking or async, not '$launch'" >&2; exit 2 ;;
esac

if [ "${SF_MATRIX_QUICK:-0}" = 1 ]; then sizes=(10 50); seeds=(1); else sizes=(5 10 20 50 100); seeds=(1 2); fi
fwd=20 bwd=30 steps=6 slow_step=3
root=$(mktemp -d /tmp/sf-pipeline.XXXXXX)
cleanup() { if [ "${SF_MATRIX_KEEP:-0}" = 1 ]; then echo "logs kept in $root"; else rm -rf "$root"; fi; }
trap cleanup EXIT

on_total=0 on_hits=0 failures=0

# One run: prints a row; on-path rows count towards the hit rate, the others must be quiet.
# Arguments: name, layout "T P D", kind (on|absorbed|healthy), expected stage, expected
# rank (- for a whole stage), seed, sim flags...
run_case() {
  local name=$1 layout=$2 kind=$3 stage=$4 rank=$5 seed=$6
  shift 6
  local t p d
  read -r t p d <<<"$layout"
  local dir=$root/$name
  mkdir -p "$dir"
  env "${door[@]}" LD_PRELOAD="$lib" SF_LOG_DIR="$dir" SF_JOB_ID=job SF_QUIET=1 \
    "$bin/sf-trainer-sim" --ranks 8 --steps "$steps" --seed "$seed" --bucket-elems 64 --launch "$launch" \
    --pass-markers "$passes" --stage-ms "data=1,fwd=$fwd,bwd=$bwd,callbacks=1,optim=1" --tp "$t" --pp "$p" --dp "$d" "$@" \
    >"$dir/job.out" 2>"$dir/job.err" || { echo "$name: job failed: $(tail -2 "$dir/job.err")" >&2; failures=$((failures + 1)); return; }
  local layout_seen
  layout_seen=$("$sf" roles "$dir/job" --json | python3 -c 'import json,sys; l=json.load(sys.stdin)["layout"]; print(l["tp"], l["pp"], l["dp"])')
  local code=0
  "$sf" path "$dir/job" >"$dir/path.txt" 2>&1 || code=$?
  local headline result
  headline=$(head -1 "$dir/path.txt")
  case $kind in
    on)
      on_total=$((on_total + 1))
      if [ "$code" = 4 ] && grep -q "SLOW: pipeline stage $stage," <<<"$headline" &&
        { [ "$rank" = - ] || grep -Eq "\(rank $rank:|held up by rank $rank;" <<<"$headline"; }; then
        on_hits=$((on_hits + 1)) result=hit
      else
        result=miss
      fi
      ;;
    *) if [ "$code" = 0 ]; then result=pass; else result=FAIL failures=$((failures + 1)); fi ;;
  esac
  [ "$layout_seen" = "$t $p $d" ] || { result="$result,LAYOUT($layout_seen)"; failures=$((failures + 1)); }
  printf '%-34s %-8s %4s  %-5s %s\n' "$name" "$kind" "$code" "$result" "${headline#*: }"
}

# One missing exchange: name, layout "T P D", rank, op (send|recv). The job runs until
# `sf hang` names the rank or 30 s pass, then is killed.
hang_case() {
  local name=$1 layout=$2 rank=$3 op=$4
  local t p d
  read -r t p d <<<"$layout"
  local dir=$root/$name
  mkdir -p "$dir"
  env "${door[@]}" LD_PRELOAD="$lib" SF_LOG_DIR="$dir" SF_JOB_ID=job SF_QUIET=1 SF_INJECT="hang:rank=$rank,op=$op,step=3" \
    setsid "$bin/sf-trainer-sim" --ranks 8 --steps 100000 --bucket-elems 64 --launch "$launch" \
    --pass-markers "$passes" --stage-ms "data=2,fwd=2,bwd=4,callbacks=1,optim=1" --tp "$t" --pp "$p" --dp "$d" >/dev/null 2>&1 &
  local pid=$! code=0 headline="" deadline=$((SECONDS + 30)) result=miss first=""
  while [ $SECONDS -lt $deadline ]; do
    sleep 0.5
    code=0
    "$sf" hang "$dir/job" >"$dir/hang.txt" 2>&1 || code=$?
    headline=$(head -1 "$dir/hang.txt")
    [ "$code" = 3 ] || continue
    # The first answer that says HUNG decides whom the headline names.
    [ -n "$first" ] || first=$headline
    grep -Eq "^HUNG: rank $rank never (entered|launched) " <<<"$first" || { headline=$first; break; }
    # The exchange named: blocking, the host waits in it ("never entered the send/recv");
    # asynchronous, the peer's device does ("never launched the send rank P's device ...").
    if grep -Eq "^HUNG: rank $rank never (entered the send/recv|launched the (send|recv) )" "$dir/hang.txt"; then
      result=hit
      break
    fi
  done
  kill -KILL -- -"$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  hang_total=$((hang_total + 1))
  if [ $result = hit ]; then hang_hits=$((hang_hits + 1)); else failures=$((failures + 1)); fi
  printf '%-34s %-8s %4s  %-5s %s\n' "$name" "hang" "$code" "$result" "${headline#HUNG: }"
}
hang_total=0 hang_hits=0

printf '%-34s %-8s %4s  %-5s %s\n' CASE KIND EXIT RESULT HEADLINE
for layout in "1 4 2" "2 2 2"; do
  read -r t p d <<<"$layout"
  m=$((2 * p))
  step_ms=$(((m + p - 1) * (fwd + bwd)))
  last=$((p - 1))
  tag="tp$t-pp$p-dp$d"
  for seed in "${seeds[@]}"; do
    run_case "$tag-healthy-s$seed" "$layout" healthy - - "$seed"
    # A step as the healthy run measured it: the schedule's (M + P - 1)(f + b) plus the
    # other stages and the exchanges, some 5% more (the share a finding must add).
    measured_ms=$("$sf" slow "$root/$tag-healthy-s$seed/job" --json 2>/dev/null |
      python3 -c 'import json,sys; print(round(json.load(sys.stdin)["median_step_s"] * 1000))' || echo "$step_ms")
    for pct in "${sizes[@]}"; do
      # At least pct% of the measured step, rounded up.
      ms=$(((measured_ms * pct + 99) / 100))
      run_case "$tag-stage$last-bwd-$pct%-s$seed" "$layout" on "$last" - "$seed" \
        --slow-stage "$last:bwd:$ms@$slow_step-$slow_step#$((m / 2))"
      # One rank of the last stage, every backward pass of the step: the same share in all.
      run_case "$tag-rank$((8 - 1))-bwd-$pct%-s$seed" "$layout" on "$last" 7 "$seed" \
        "$slow_rank" "7:bwd:$((ms / m + 1))@$slow_step-$slow_step"
    done
    hang_case "$tag-missing-send-r1-s$seed" "$layout" 1 send
    [ "${SF_MATRIX_QUICK:-0}" = 1 ] || hang_case "$tag-missing-recv-r7-s$seed" "$layout" 7 recv
    # Stage 0's forward of microbatch P-1 has (P-1)*b of slack: 60% of it is absorbed.
    run_case "$tag-stage0-fwd-absorbed-s$seed" "$layout" absorbed - - "$seed" \
      --slow-stage "0:fwd:$(((p - 1) * bwd * 6 / 10))@$slow_step-$slow_step#$last"
  done
done

echo "on path: $on_hits of $on_total named; missing exchanges: $hang_hits of $hang_total named in the headline; quiet cases failed: $((failures - hang_total + hang_hits))"
[ "$failures" = 0 ] && [ $((on_hits * 10)) -ge $((on_total * 9)) ]
