#!/usr/bin/env bash
# One device call for the GPU figures issue 14 still lacks, in order of need, each step under the time left
# to a deadline so that the call comes back inside the tool's 10 minutes with what ran (a lent task has 15
# device minutes in all, start-up included: plan on one call). Session 46 ran it with its steps then (PosRec
# graphs, tests, SASRec fp32 against tf32 at batch 4,096, profiles: bench/results/train.md, "Session 46");
# it now runs what that session changed and could not measure (the device time was spent):
#   1. posrec   PosRec --preset paper (batch 100) with train.compile reduce-overhead, whose static step now
#               compiles once for every width (models/graph.py: min-plus doublings): two epochs, the first
#               holding compilation; train.time_limit ends the run after epoch 1 if that alone takes the
#               step's share (a run is written only at its end). TORCH_LOGS names any recompile.
#   2. profile  bench_train.py steady steps, PosRec at the paper's shape eager and compiled (reduce-overhead,
#               --explain: graphs and breaks), the same machine's ratio for 1
#   3. tests    pytest -m cuda (reduce-overhead's and tf32's CUDA tests among them)
# There (device tool `run`, carry [".gpu/whl/polars", ".gpu/whl/kernels", ".gpu/samples/diginetica"]):
#   bash bench/bench_gpu_call.sh          # $OUT gets call.log, each step's .md / .txt and logs.tar.gz
# Variables: BUDGET (seconds for all steps, default 540), STEPS (which of them, default "posrec profile tests"), DEVICE (cuda; cpu runs the flow on the CPU with
# KIT's samples, as a check before spending device time: reduce-overhead is refused there in one line).
set -u
RET=$(realpath -m -- "${OUT:?"OUT: the folder whose files come back"}")    # (relative: to where it was called)
WORK=$(realpath -m -- "${WORK:-/tmp/bench_gpu_call}")
cd "$(dirname "$0")/.."
rm -rf "$WORK"; mkdir -p "$WORK" "$RET"
export OUT=$WORK PYTHONUNBUFFERED=1
BUDGET=${BUDGET:-540}
start=$(date +%s)
log() { echo "[$(( $(date +%s) - start ))s] $*" | tee -a "$RET/call.log"; }
left() { echo $(( BUDGET - ($(date +%s) - start) )); }

# step NAME CAP COMMAND...: COMMAND under min(CAP, time left) seconds (its whole process group on expiry)
STEPS=" ${STEPS:-posrec profile tests} "
step() {
  local name=$1 cap=$2 t; shift 2
  case $STEPS in *" $name "*) ;; *) return ;; esac
  t=$(left); [ "$t" -lt "$cap" ] && cap=$t
  if [ "$cap" -lt 20 ]; then log "$name: skipped, ${cap}s left"; return; fi
  log "$name: start (limit ${cap}s)"
  timeout -k 5 "$cap" "$@" >> "$WORK/$name.out" 2>&1
  log "$name: rc $? ($(tail -n 1 "$WORK/$name.out" 2>/dev/null | cut -c1-160))"
  for f in "$WORK"/*.md "$WORK"/machine.txt; do [ -f "$f" ] && cp "$f" "$RET/"; done
}

{ nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader 2>/dev/null \
    || echo "no nvidia-smi"; } | tee -a "$RET/call.log"
step posrec 270 env EPOCHS=2 CONFIGS="paper-fp32-graphs --set train.precision=fp32 --set train.compile=reduce-overhead --set train.time_limit=2.5" \
    TORCH_LOGS=recompiles bash bench/bench_gpu.sh posrec
paper="--model posrec --encoding ldpe --layers 1 --dim 100 --dropout 0 --batch-size 100 --precision fp32 --ce-impl plain --max-len 200 --eval-samples 2000"
step profile 150 env PROFILES="posrec-paper-eager $paper
posrec-paper-graphs $paper --compile reduce-overhead --explain --warm 1000 --batches 3000" bash bench/bench_gpu.sh profile
step tests 150 bash bench/bench_gpu.sh tests
tail -n 12 "$WORK"/profile_*.txt > "$RET/profiles.txt" 2>/dev/null
tar -czf "$RET/logs.tar.gz" -C "$WORK" --exclude='*.pt' --exclude='*.parquet' . 2>/dev/null
log "done"
