#!/usr/bin/env bash
# CAPE (paper 001) reproduction grids, one command each, through the real `seqpe` commands (download
# --from, preprocess, augment, train, report), with 001's own values next to every measured row in the
# Markdown report (bench/cape_report.py; the paper's numbers: bench/cape_paper_001.json).
#
#   DATA=/data/bars bench/bench_cape.sh             # Table 2: 5 backbones x 5 encodings x 2 datasets x 5 seeds
#   TABLE=3 DATA=/data/amazon bench/bench_cape.sh   # Table 3: SASRec, 2/8/12/16 blocks x lpe/rope/cape x 5 seeds
#   GENERATED=1 SEEDS=1 SET="train.epochs=3" bench/bench_cape.sh   # Table 2's grid on generated data
#
# Table 2 (001 §5.2): DATA holds AmazonElectronics_x1.zip and KuaiVideo_x1.zip from the reczoo dataset
#   hub (pipeline/REFERENCE.md §1; KuaiVideo may also be its extracted folder KuaiVideo_x1/). Every
#   run is `seqpe train DATASET --model M --encoding E --preset paper` (001 §5.1.5: fields of 64,
#   item + category, context 100, Adam lr 5e-4 / batch 1024 on AmazonElectronics and 1e-3 / 4096 on
#   KuaiVideo, early stopping on valid AUC with patience 3), all seeds in one process. The report
#   compares every encoding with the same backbone's `none` (paired t-test over seeds, Wilcoxon and
#   bootstrap over test rows: `seqpe report --baseline M-none`), as 001 marks significance per backbone.
#   Full KuaiVideo takes 7.9 GB for its train arrays alone (bench/results/ctr.md): a GPU machine, or
#   SET="train.memory_budget=4000" to memory-map them. seqpe's items are ids only: 001's KuaiVideo
#   column (BARS's configs) also fed frozen visual item embeddings, so expect KuaiVideo below it.
# Table 3 (001 §5.3): DATA holds ratings_Books.csv (Amazon 2014 ratings-only Books); dataset
#   books_hllm (HLLM's filter, leave-one-out, pipeline/datasets/amazon.py). SASRec with d 512 and 8
#   heads (001 §5.3), blocks 2/8/12/16 (one --tag bN per depth), naive PE (lpe) / RoPE / CAPE; the
#   rest is HLLM's SASRec recipe (its reproduce/ scripts: lr 1e-3, global batch 128, dropout 0.5,
#   context 50, up to 201 epochs, early stopping after 10, NCE with 512 sampled negatives, every
#   position trained), as seqpe names it: train.objective sequence, train.loss sampled with
#   train.negatives 512 (softmax over the target and 512 uniform items shared by the batch, not
#   HLLM's in-batch + sampled NCE), model selection on valid NDCG@10; Recall@K = HR@K (one target)
#   and NDCG@K for K = 5, 10, 50, 200 by full ranking (pipeline/REFERENCE.md §5).
# GENERATED=1: the same grids on data seqpe generates, for a machine without the files. Table 2 uses
#   `sample_ctr` (AmazonElectronics_x1 format) and `sample_kuai` (KuaiVideo_x1 format), generated
#   by `seqpe download` with GEN_SET (default: 3,000 users); their planted positional signal is
#   not the real data's, and the real files cannot go through `download --from` with another
#   content (their md5 is checked). Table 3 writes a small ratings_Books.csv-format file (seeded).
#   Numbers on generated data are NOT comparable with the paper's; the report still shows both.
#
# Variables: TABLE (2 or 3, default 2), GENERATED (1: generated data; empty or 0: DATA's real files), DATA
# (its files are not read once OUT has a dataset's samples), OUT (default /tmp/cape; never inside the
# repo; absent, or made by an earlier run of this script, which marks it with OUT/.bench_cape: any other
# existing folder is refused; a folder of a run from before the mark: touch OUT/.bench_cape), SEEDS
# (default "1 2 3 4 5"),
# DATASETS (default amazon_electronics kuaivideo; generated: sample_ctr sample_kuai), MODELS (default
# din dien bst dmin sasrec_ctr), ENCODINGS (default none lpe rope cope cape; table 3: lpe rope cape),
# BLOCKS (table 3, default 2 8 12 16), SET (more --set KEY=VALUE for every train, space-separated; they
# win over the preset), GEN_SET (--set for generating/preparing the generated data).
# Every variable and input is checked before anything is written, and every run with `seqpe train --check`
# once the data is prepared, before the first trains; a bad one stops the script with one line (exit 2).
# Each run's log (OUT/logs/DATASET_MODEL_ENCODING[_TAG].log) gains a section per call; a run that fails is
# listed at the end with its error, and the script exits 1 (walk 42a #4: a misspelt encoding failed in its
# log only, and the script printed its report and exited 0).
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd -P)
die() { echo "bench_cape.sh: $*" >&2; exit 2; }
SEQPE=${SEQPE:-$PWD/.venv/bin/seqpe}
PY=$(dirname "$SEQPE")/python
TABLE=${TABLE:-2}
GENERATED=${GENERATED:-}
OUT=${OUT:-/tmp/cape}
SET=${SET:-}
# shellcheck source=bench/queue.sh
. "$REPO/bench/queue.sh"
case $TABLE in 2|3) ;; *) die "TABLE must be 2 or 3, got '$TABLE'" ;; esac
case $GENERATED in
  ""|0) GENERATED= ;;
  1) ;;
  *) die "GENERATED must be 1 (generated data) or empty / 0 (DATA's real files), got '$GENERATED'" ;;
esac
words SEEDS "1 2 3 4 5"; ints SEEDS
if [ "$TABLE" = 2 ]; then
  words MODELS "din dien bst dmin sasrec_ctr"
  words ENCODINGS "none lpe rope cope cape"
  if [ -n "$GENERATED" ]; then words DATASETS "sample_ctr sample_kuai"; else words DATASETS "amazon_electronics kuaivideo"; fi
else
  words ENCODINGS "lpe rope cape"
  words BLOCKS "2 8 12 16"; ints BLOCKS
fi
for kv in $SET; do [[ $kv == *=* ]] || die "SET takes KEY=VALUE words, got '$kv'"; done
[ -n "$GENERATED" ] || [ -n "${DATA:-}" ] || die "set DATA to the folder of the real files (see the header), or GENERATED=1"
[ -x "$SEQPE" ] && [ -x "$PY" ] || die "no seqpe and python at $(dirname "$SEQPE"): create the repo's .venv (README) or set SEQPE"
# OUT: absent or this script's (its .bench_cape mark): runs are added to a folder only this script made
# shellcheck source=bench/claim_out.sh
. "$REPO/bench/claim_out.sh"; claim_out cape /tmp/cape
# need DATASET PATH...: the real file behind DATASET is there (one of PATHs), unless OUT has its samples
need() {
  local ds=$1 f; shift
  [ -f "$OUT/samples/$ds/manifest.json" ] && return
  for f in "$@"; do [ -e "$f" ] && return; done
  die "no $1 for $ds: set DATA to the folder holding it (see the header), or GENERATED=1"
}
if [ -z "$GENERATED" ] && [ "$TABLE" = 2 ]; then
  for ds in $DATASETS; do
    case $ds in
      amazon_electronics) need "$ds" "$DATA/AmazonElectronics_x1.zip" ;;
      kuaivideo) need "$ds" "$DATA/KuaiVideo_x1.zip" "$DATA/KuaiVideo_x1" ;;
      *) need "$ds" "$DATA" ;;
    esac
  done
elif [ -z "$GENERATED" ]; then
  need books_hllm "$DATA/ratings_Books.csv"
fi
mkdir -p "$OUT/logs" "$OUT/report"; touch "$OUT/.bench_cape"

sets() { local kv; for kv in $1; do printf -- '--set\n%s\n' "$kv"; done; }
mapfile -t TRAIN_SET < <(sets "$SET")
seed_args=(); for s in $SEEDS; do seed_args+=(--seed "$s"); done

# prepare DATASET SOURCE|"" [--set ...]: download (--from SOURCE, or generate), preprocess, augment
prepare() {
  local ds=$1 src=$2; shift 2
  [ -f "$OUT/samples/$ds/manifest.json" ] && return
  local from=(); [ -z "$src" ] || from=(--from "$src")
  "$SEQPE" download "$ds" "$OUT/raw/$ds" "${from[@]}" "$@" --quiet
  "$SEQPE" preprocess "$ds" "$OUT/raw/$ds" "$OUT/sessions/$ds" "$@" --quiet
  "$SEQPE" augment "$ds" "$OUT/sessions/$ds" "$OUT/samples/$ds" "$@" --quiet
}

# args DATASET MODEL ENCODING [seqpe args...]: one run's `seqpe train` arguments (every seed in one process)
args() {
  local ds=$1 model=$2 enc=$3; shift 3
  run=("$ds" "$OUT/samples/$ds" "$OUT/runs/$ds" --model "$model" --encoding "$enc" "${seed_args[@]}" "$@"
       ${TRAIN_SET[@]+"${TRAIN_SET[@]}"} --quiet)
}

# train DATASET MODEL ENCODING [seqpe args...]: the run, timed, its section appended to its log; a failure is
# listed at the end (queue.sh) and the grid goes on
train() {
  local ds=$1 model=$2 enc=$3 rc=0
  args "$@"
  echo "$(date -u +%FT%TZ) start $ds $model $enc ${TAG:-}" >> "$OUT/logs/queue.log"
  run_logged "$OUT/logs/${ds}_${model}_${enc}${TAG:+_$TAG}.log" "${run[@]}" || rc=$?
  echo "$(date -u +%FT%TZ) end $ds $model $enc ${TAG:-} rc=$rc" >> "$OUT/logs/queue.log"
}

if [ "$TABLE" = 2 ]; then
  if [ -n "$GENERATED" ]; then
    mapfile -t GEN < <(sets "${GEN_SET:-preprocess.sample_ctr.users=3000}")
    for ds in $DATASETS; do prepare "$ds" "" "${GEN[@]}"; done
  else
    for ds in $DATASETS; do
      case $ds in
        amazon_electronics) prepare "$ds" "$DATA/AmazonElectronics_x1.zip" ;;
        kuaivideo) if [ -d "$DATA/KuaiVideo_x1" ]; then prepare "$ds" "$DATA/KuaiVideo_x1"
                   else prepare "$ds" "$DATA/KuaiVideo_x1.zip"; fi ;;
        *) prepare "$ds" "$DATA" ;;
      esac
    done
  fi
  for ds in $DATASETS; do
    for model in $MODELS; do
      for enc in $ENCODINGS; do args "$ds" "$model" "$enc" --preset paper; planned "${run[@]}"; done
    done
  done
  checked
  for ds in $DATASETS; do
    for model in $MODELS; do
      for enc in $ENCODINGS; do train "$ds" "$model" "$enc" --preset paper; done
    done
  done
  base=${ENCODINGS%% *}
  for ds in $DATASETS; do
    for model in $MODELS; do
      "$SEQPE" report "$OUT/runs/$ds/$model"-* --baseline "$model-$base" --samples "$OUT/samples/$ds" --json \
          > "$OUT/report/$ds-$model.json" || echo "report $ds $model failed" >&2
    done
  done
  "$PY" bench/cape_report.py table2 "$OUT"/report/*.json ${GENERATED:+--generated} --out "$OUT/table2.md"
  echo "report: $OUT/table2.md"
else
  ds=books_hllm
  if [ -n "$GENERATED" ]; then
    mkdir -p "$OUT/gen"
    # a small file of ratings_Books.csv's format (user,item,rating,timestamp, no header), seeded:
    # popular items are rated more (Zipf over 20,000 ids), each user rates 5 to 40 items in time order
    "$PY" - "$OUT/gen/ratings_Books.csv" <<'PY'
import sys
import numpy as np
rng = np.random.default_rng(20240901)
lines = []
for u in range(3000):
    n = int(rng.integers(5, 41))
    items = rng.zipf(1.2, n) % 20000
    t0 = 1_300_000_000 + int(rng.integers(0, 10**8))
    for k, i in enumerate(items):
        lines.append(f"U{u:05d},B{i:05d},{int(rng.integers(1, 6))}.0,{t0 + 86400 * k}")
open(sys.argv[1], "w").write("\n".join(lines) + "\n")
PY
    prepare "$ds" "$OUT/gen/ratings_Books.csv"
  else
    prepare "$ds" "$DATA/ratings_Books.csv"
  fi
  hllm=(--set train.dim=512 --set train.heads=8 --set train.max_len=50 --set train.lr=0.001
        --set train.batch_size=128 --set train.dropout=0.5 --set train.epochs=201 --set train.patience=10
        --set train.objective=sequence --set train.loss=sampled --set train.negatives=512
        --set train.select_metric=ndcg@10 --set "evaluate.ks=[5,10,50,200]")
  for b in $BLOCKS; do
    for enc in $ENCODINGS; do args "$ds" sasrec "$enc" --tag "b$b" "${hllm[@]}" --set "train.layers=$b"; planned "${run[@]}"; done
  done
  checked
  for b in $BLOCKS; do
    for enc in $ENCODINGS; do
      TAG=b$b train "$ds" sasrec "$enc" --tag "b$b" "${hllm[@]}" --set "train.layers=$b"
    done
  done
  for b in $BLOCKS; do                    # each depth against its own first encoding (naive PE), as 001
    "$SEQPE" report "$OUT/runs/$ds"/sasrec-*-b"$b" --baseline "sasrec-${ENCODINGS%% *}-b$b" --json \
        > "$OUT/report/$ds-b$b.json" || echo "report $ds b$b failed" >&2
  done
  "$PY" bench/cape_report.py table3 "$OUT/report/$ds"-b*.json ${GENERATED:+--generated} --out "$OUT/table3.md"
  echo "report: $OUT/table3.md"
fi
