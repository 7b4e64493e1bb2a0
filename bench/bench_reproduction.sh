#!/usr/bin/env bash
# Reproduction benchmark (issue 5, pipeline/REFERENCE.md §6): import the canonical prepared files and train
# SASRec / FPARec on Beauty, Toys, Sports (leave-one-out, full ranking) and SASRec / PosRec on
# Diginetica and Yoochoose 1/64 (SR-GNN protocol). Results: bench/results/reproduction.md.
#
#   PROFILE=cpu bench/bench_reproduction.sh      # what reproduction.md's CPU rows ran (2-core machine)
#   PROFILE=gpu SEEDS="1 2 3" bench/bench_reproduction.sh   # what its GPU rows ran (one H100, 16 cores)
#   PROFILE=paper bench/bench_reproduction.sh    # the presets' / params.yaml's own settings, one queue
#
# Profiles (epochs / early-stopping patience per run; presets as named below):
#   cpu    PosRec --preset paper (4 epochs, lr x0.1 after epoch 3); SASRec on Diginetica/Yoochoose
#          params.yaml settings, 8 epochs, patience 2; SASRec and FPARec --preset paper with the
#          sequence objective (every position of a user's train sequence predicts its next item, as
#          SASRec's code and 003 Eq. 11 train) on Beauty/Toys/Sports: the presets' 200 epochs with
#          early stopping after 10 without a better valid NDCG@10. Two queues of 1-thread runs side by side
#          (1.33x the work per second of one 2-thread run on 2 cores: bench/results/train.md).
#   gpu    every run and seed at once, each its own 1-thread process sharing the GPU (small models
#          leave it mostly idle, so side by side beats one queue); as cpu, except SASRec on
#          Diginetica/Yoochoose trains up to 30 epochs with patience 3. TIME_LIMIT=MIN adds
#          --set train.time_limit=MIN; the same command with a longer limit continues the runs.
#   paper  the presets' / params.yaml's own epochs and patience (FPARec 200 / 10), one queue, all threads.
# gpu and paper also train SASRec and FPARec on the three Amazon sets with the one-negative BCE
# objective (`train.loss=bce`, SASRec's own; run folders tagged `bce`) for a fixed 200 epochs, next to the CE rows.
# Variables: DATA (required: the folder holding diginetica-srgnn/, yoochoose1_64-srgnn/ and
# amazon-s3rec/ with the canonical files; where to get them: pipeline/REFERENCE.md §8; a dataset's files
# are not read once OUT has its imported samples), PROFILE (cpu, gpu or paper; default cpu), OUT (default
# /tmp/repro; never inside the repo; absent, or made by an earlier run of this script, which marks it with
# OUT/.bench_reproduction: any other existing folder is refused; a folder of a run from before the mark:
# touch OUT/.bench_reproduction), SEEDS (default "1"), ONLY ("beauty:sasrec diginetica:posrec ..." subset
# of the DATASET:MODEL pairs above; only the datasets it names are imported, so only their files are
# needed), EXTRA (more `seqpe train` options, appended last to every run).
# Every variable and input is checked before anything is written, and every run with `seqpe train --check`
# once the datasets are imported into OUT, before the first trains; a bad one stops the script with one
# line (exit 2). Each run's log gains a section per call; a run that fails is listed at the end with its
# error, and the script exits 1. The closing table lists every run under OUT, this call's and earlier ones'.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd -P)
die() { echo "bench_reproduction.sh: $*" >&2; exit 2; }
SEQPE=${SEQPE:-$PWD/.venv/bin/seqpe}
[ -n "${DATA:-}" ] || die "set DATA to the folder of the canonical prepared files (pipeline/REFERENCE.md §8)"
OUT=${OUT:-/tmp/repro}
# shellcheck source=bench/queue.sh
. "$REPO/bench/queue.sh"
words SEEDS 1; ints SEEDS
PROFILE=${PROFILE:-cpu}
[ -z "${ONLY+set}" ] || [ -n "${ONLY//[[:space:]]/}" ] || die "ONLY is set but empty: unset it for every pair, or name some"
ONLY=${ONLY:-}
read -r -a extra <<< "${EXTRA:-}"
case $PROFILE in
  cpu|gpu|paper) ;;
  *) die "PROFILE must be cpu, gpu or paper, got '$PROFILE'" ;;
esac
# every DATASET:MODEL pair the queues below train
PAIRS="diginetica:posrec yoochoose_1_64:posrec diginetica:sasrec yoochoose_1_64:sasrec beauty:sasrec beauty:fparec \
toys:sasrec toys:fparec sports:sasrec sports:fparec"
for p in $ONLY; do
  [[ " $PAIRS " == *" $p "* ]] || die "ONLY takes DATASET:MODEL pairs of $PAIRS; got '$p'"
done
[ -x "$SEQPE" ] || die "no seqpe at $SEQPE: create the repo's .venv (README) or set SEQPE"
# OUT: absent or this script's (its .bench_reproduction mark): runs are added to a folder only this script made
# shellcheck source=bench/claim_out.sh
. "$REPO/bench/claim_out.sh"; claim_out reproduction /tmp/repro

wanted() { [ -z "$ONLY" ] || [[ " $ONLY " == *" $1:"* ]]; }   # wanted DATASET: ONLY names it (or is empty)

# each dataset ONLY wants: NAME, FORMAT, its file or folder under DATA
SOURCES="beauty sasrec amazon-s3rec/Beauty.txt
toys sasrec amazon-s3rec/Toys_and_Games.txt
sports sasrec amazon-s3rec/Sports_and_Outdoors.txt
diginetica srgnn diginetica-srgnn
yoochoose_1_64 srgnn yoochoose1_64-srgnn"
while read -r n fmt f; do
  wanted "$n" || continue
  [ -f "$OUT/samples/$n/manifest.json" ] || [ -e "$DATA/$f" ] \
    || die "no $DATA/$f (for $n): set DATA to the folder of the canonical prepared files (pipeline/REFERENCE.md §8), or leave $n out with ONLY"
done <<< "$SOURCES"
mkdir -p "$OUT/logs"; touch "$OUT/.bench_reproduction"

import_all() {
  local n fmt f
  while read -r n fmt f; do
    wanted "$n" || continue
    [ -f "$OUT/samples/$n/manifest.json" ] || "$SEQPE" import "$n" "$DATA/$f" --format "$fmt" \
        --sessions "$OUT/sessions/$n" --samples "$OUT/samples/$n" --quiet
  done <<< "$SOURCES"
}

# train DATASET MODEL CPU_EPOCHS CPU_PATIENCE GPU_EPOCHS GPU_PATIENCE [extra seqpe args...]
# (- -: the preset's / params.yaml's own)
train() {
  local ds=$1 model=$2 epochs=$3 patience=$4 gpu_epochs=$5 gpu_patience=$6; shift 6
  if [ -n "$ONLY" ] && [[ " $ONLY " != *" $ds:$model "* ]]; then return; fi
  local args=() s
  case $PROFILE in
    cpu) args+=(--set train.threads=1); [ "$epochs" = - ] || args+=(--set "train.epochs=$epochs" --set "train.patience=$patience") ;;
    gpu) args+=(--set train.threads=1); [ "$gpu_epochs" = - ] || args+=(--set "train.epochs=$gpu_epochs" --set "train.patience=$gpu_patience")
         [ -z "${TIME_LIMIT:-}" ] || args+=(--set "train.time_limit=$TIME_LIMIT") ;;
  esac
  if [ -n "${CHECKING:-}" ]; then       # the run checked (bench/queue.sh), every seed in one check
    for s in $SEEDS; do args+=(--seed "$s"); done
    planned "$ds" "$OUT/samples/$ds" "$OUT/runs/$ds" --model "$model" "$@" "${args[@]}" ${extra[@]+"${extra[@]}"}
    return
  fi
  if [ "$PROFILE" = gpu ]; then
    for s in $SEEDS; do one "$ds" "$model" "$s" "$@" "${args[@]}" --seed "$s" & done; return
  fi
  for s in $SEEDS; do args+=(--seed "$s"); done
  one "$ds" "$model" all "$@" "${args[@]}"
}

# one DATASET MODEL LOGSUFFIX seqpe-args...: one `seqpe train` process, logged
one() {
  local ds=$1 model=$2 suffix=$3; shift 3
  local log="$OUT/logs/${ds}_${model}_${suffix}.log" rc=0
  echo "$(date -u +%FT%TZ) start $ds $model $* ${extra[*]+${extra[*]}}" >> "$OUT/logs/queue.log"
  run_logged "$log" "$ds" "$OUT/samples/$ds" "$OUT/runs/$ds" --model "$model" "$@" ${extra[@]+"${extra[@]}"} || rc=$?
  echo "$(date -u +%FT%TZ) end $ds $model $suffix rc=$rc" >> "$OUT/logs/queue.log"   # a failure does not stop the rest
}

queue_a() {
  train diginetica posrec 4 0 - - --preset paper          # 000 preset: lambda2 = 1 on Diginetica
  train yoochoose_1_64 posrec 4 0 - - --preset paper      # lambda2 = 0.5 picked from the dataset name
  train yoochoose_1_64 sasrec 8 2 30 3 --encoding lpe
  train toys sasrec - - - - --preset paper --set train.objective=sequence   # SASRec's own settings and training
  train toys fparec - - - - --preset paper --set train.objective=sequence   # 003: k = 40, max_len 50, Eq. 11
}
queue_b() {
  train diginetica sasrec 8 2 30 3 --encoding lpe
  train beauty sasrec - - - - --preset paper --set train.objective=sequence
  train beauty fparec - - - - --preset paper --set train.objective=sequence
  train sports sasrec - - - - --preset paper --set train.objective=sequence
  train sports fparec - - - - --preset paper --set train.objective=sequence
}
queue_bce() {   # 003 Table 3 with SASRec's own objective (one sampled negative per position, BCE): gpu / paper
  local ds m       # a fixed 200 epochs as Kang & McAuley's code (SASRec: = --preset original): patience
  for ds in beauty toys sports; do for m in sasrec fparec; do     # stops some BCE seeds in an early sag
    train "$ds" "$m" - - - - --preset paper --set train.objective=sequence --set train.loss=bce --set train.patience=0 --tag bce
  done; done
}

import_all
CHECKING=1                              # every run of this call, checked before the first trains
queue_a; queue_b; [ "$PROFILE" = cpu ] || queue_bce
checked; CHECKING=
case $PROFILE in
  cpu) queue_a & queue_b & wait ;;
  gpu) queue_a; queue_b; queue_bce; wait ;;      # every train call started its seeds in the background
  paper) queue_a; queue_b; queue_bce ;;
esac

# test metrics (x100) of every run folder
"$(dirname "$SEQPE")/python" - "$OUT/runs" <<'PY'
import json, sys
from pathlib import Path
for p in sorted(Path(sys.argv[1]).glob("*/*/seed-*/run.json")):
    r = json.loads(p.read_text()); t = json.loads((p.parent / "timing.json").read_text())
    per = [e["train_s"] for e in t["epochs"]]
    print(f"{p.parts[-4]:15s} {r['name']:18s} seed {r['seed']} epochs {r['epochs_run']} best {r['best_epoch']} "
          f"train s/epoch {sum(per) / max(len(per), 1):7.0f}  test HR@10 {100 * r['test']['hr@10']:.2f} "
          f"MRR@10 {100 * r['test']['mrr@10']:.2f} NDCG@10 {100 * r['test']['ndcg@10']:.2f}")
PY
