#!/usr/bin/env bash
# 000 (PosRec, Qiu et al. TOIS 2021) Figs. 3-4 and Table 3 (issue 15). Results: bench/results/reproduction.md.
#
#   Figs. 3-4  PosRec `--preset paper` with each encoding of 000 §5.3 in its readout (none = the blue
#              line, DPE, LDPE, SPE, LPE, RSPE, LRPE, ASPE, ALPE, 2DSPE, 2DLPE) on Yoochoose 1/64 and
#              Diginetica (SR-GNN protocol, the canonical files)
#   Table 3    STAMP and SASRec with and without LDPE on the same two datasets: STAMP `--preset paper`
#              (LDPE) against `--encoding none`; SASRec (params.yaml: d 64, 2 blocks) with LPE, its own
#              encoding, against LDPE
#
#   PROFILE=gpu bench/bench_posrec_000.sh     # the paper's schedule, SEEDS (default 1 2 3), every run at
#                                             # once, each its own 1-thread process sharing the GPU
#   PROFILE=cpu bench/bench_posrec_000.sh     # what reproduction.md's reduced CPU rows ran: EPOCHS (default
#                                             # 1) epochs per run, Yoochoose 1/64 only, SEEDS (default
#                                             # 1 2), two queues of 1-thread runs side by side
#
# Variables: DATA (required: the folder holding yoochoose1_64-srgnn/ and diginetica-srgnn/; where to get
# them: pipeline/REFERENCE.md §8; a dataset's files are not read once OUT has its imported samples), OUT
# (default /tmp/repro000; never inside the repo; absent, or made by an earlier run of this script, which
# marks it with OUT/.bench_posrec_000: any other existing folder is refused; a folder of a run from before
# the mark: touch OUT/.bench_posrec_000), SEEDS, EPOCHS, DATASETS (yoochoose_1_64 and/or diginetica;
# default: both on gpu, yoochoose_1_64 on cpu), ENCODINGS (default: the eleven above), MODELS
# (default "posrec stamp sasrec"; "stamp sasrec" runs Table 3 alone), EXTRA (more `seqpe train` options,
# appended last to every run). Afterwards:
#   seqpe report $OUT/runs/DS --baseline posrec-none --out $OUT/figs_DS.md
# Every variable and input is checked before anything is written, and every run with `seqpe train --check`
# once the datasets are imported into OUT, before the first trains; a bad one stops the script with one
# line (exit 2). Each run's log (OUT/logs/DS_NAME.log) gains a section per call; a run that fails is listed
# at the end with its error, and the script exits 1.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd -P)
die() { echo "bench_posrec_000.sh: $*" >&2; exit 2; }
SEQPE=${SEQPE:-$PWD/.venv/bin/seqpe}
[ -n "${DATA:-}" ] || die "set DATA to the folder of the canonical prepared files (pipeline/REFERENCE.md §8)"
OUT=${OUT:-/tmp/repro000}
PROFILE=${PROFILE:-cpu}
# shellcheck source=bench/queue.sh
. "$REPO/bench/queue.sh"
case $PROFILE in
  cpu) words SEEDS "1 2"; EPOCHS=${EPOCHS-1}; words DATASETS yoochoose_1_64 ;;
  gpu) words SEEDS "1 2 3"; EPOCHS=${EPOCHS-}; words DATASETS "yoochoose_1_64 diginetica" ;;
  *) die "PROFILE must be cpu or gpu, got '$PROFILE'" ;;
esac
ints SEEDS; ints EPOCHS
[[ $EPOCHS != *" "* ]] || die "EPOCHS takes one number, got '$EPOCHS'"
words ENCODINGS "none ldpe dpe lpe lrpe spe rspe aspe alpe 2dspe 2dlpe"
words MODELS "posrec stamp sasrec"
read -r -a extra <<< "${EXTRA:-}"
for m in $MODELS; do
  case $m in posrec|stamp|sasrec) ;; *) die "MODELS takes posrec, stamp and sasrec, got '$m'" ;; esac
done
[ -n "${DATASETS// /}" ] || die "DATASETS is empty: name yoochoose_1_64 and/or diginetica"
for ds in $DATASETS; do
  case $ds in yoochoose_1_64|diginetica) ;; *) die "DATASETS takes yoochoose_1_64 and diginetica, got '$ds'" ;; esac
done
[ -x "$SEQPE" ] || die "no seqpe at $SEQPE: create the repo's .venv (README) or set SEQPE"
# OUT: absent or this script's (its .bench_posrec_000 mark): runs are added to a folder only this script made
# shellcheck source=bench/claim_out.sh
. "$REPO/bench/claim_out.sh"; claim_out posrec_000 /tmp/repro000
srgnn() { if [ "$1" = yoochoose_1_64 ]; then echo yoochoose1_64-srgnn; else echo "$1-srgnn"; fi; }   # DATA's folder
for ds in $DATASETS; do
  [ -f "$OUT/samples/$ds/manifest.json" ] || [ -d "$DATA/$(srgnn "$ds")" ] \
    || die "no $DATA/$(srgnn "$ds")/: set DATA to the folder holding the canonical SR-GNN files (pipeline/REFERENCE.md §8)"
done
mkdir -p "$OUT/logs"; touch "$OUT/.bench_posrec_000"

for ds in $DATASETS; do
  [ -f "$OUT/samples/$ds/manifest.json" ] || "$SEQPE" import "$ds" "$DATA/$(srgnn "$ds")" --format srgnn \
      --sessions "$OUT/sessions/$ds" --samples "$OUT/samples/$ds" --quiet
done

# what every run adds to its own arguments: threads, epochs, every seed, EXTRA last
common=(--set train.threads=1)
[ -z "$EPOCHS" ] || common+=(--set "train.epochs=$EPOCHS" --set train.patience=0)
for s in $SEEDS; do common+=(--seed "$s"); done
common+=(${extra[@]+"${extra[@]}"} --quiet)

# one DATASET NAME seqpe-train-args...: one logged `seqpe train` process with every seed
one() {
  local ds=$1 name=$2 rc=0; shift 2
  echo "$(date -u +%FT%TZ) start $ds $name $* ${common[*]}" >> "$OUT/logs/queue.log"
  run_logged "$OUT/logs/${ds}_$name.log" "$ds" "$OUT/samples/$ds" "$OUT/runs/$ds" "$@" "${common[@]}" || rc=$?
  echo "$(date -u +%FT%TZ) end $ds $name rc=$rc" >> "$OUT/logs/queue.log"   # a failure does not stop the rest
}

# every run of one dataset, as "NAME ARGS..." lines
runs() {
  local e m
  for m in $MODELS; do
    case $m in
      posrec) for e in $ENCODINGS; do echo "posrec-$e --model posrec --preset paper --encoding $e"; done ;;
      stamp) echo "stamp-ldpe --model stamp --preset paper"
             echo "stamp-none --model stamp --preset paper --encoding none" ;;
      sasrec) echo "sasrec-lpe --model sasrec --encoding lpe"
              echo "sasrec-ldpe --model sasrec --encoding ldpe" ;;
    esac
  done
}

for ds in $DATASETS; do
  # shellcheck disable=SC2086
  while read -r name args; do planned "$ds" "$OUT/samples/$ds" "$OUT/runs/$ds" $args "${common[@]}"; done < <(runs)
done
checked
if [ "$PROFILE" = gpu ]; then
  for ds in $DATASETS; do
    while read -r name args; do
      # shellcheck disable=SC2086
      one "$ds" "$name" $args &
    done < <(runs)
  done
  wait
else
  : > "$OUT/logs/queue_0.txt"; : > "$OUT/logs/queue_1.txt"     # both, even for a single run
  for ds in $DATASETS; do
    i=0
    while read -r name args; do
      # shellcheck disable=SC2086
      echo "$ds $name $args" >> "$OUT/logs/queue_$((i % 2)).txt"; i=$((i + 1))
    done < <(runs)
  done
  for q in 0 1; do
    ( while read -r ds name args; do
        # shellcheck disable=SC2086
        one "$ds" "$name" $args
      done < "$OUT/logs/queue_$q.txt" ) &
  done
  wait
fi
case " $MODELS " in   # the report's baseline: posrec-none when PosRec ran, else stamp-none, else sasrec-lpe
  *" posrec "*) base=posrec-none ;; *" stamp "*) base=stamp-none ;; *) base=sasrec-lpe ;;
esac
for ds in $DATASETS; do
  "$SEQPE" report "$OUT/runs/$ds" --baseline "$base" --out "$OUT/report_$ds.md" --quiet || true
done
