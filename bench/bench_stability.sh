#!/usr/bin/env bash
# 004's stability study (López-Ávila et al. 2024, Tables 5-6) on Beauty: every study encoding trained
# over several seeds with SASRec (MODEL=sasrec, the default) or CARCA (MODEL=carca, 004's own backbone,
# here on S3-Rec's Beauty without CARCA's attributes and context), then `seqpe report` gives mean, sd and
# 95% CI per encoding and the paired tests against a baseline. Results: bench/results/reproduction.md
# (issue 15).
#
#   DATA=/path/to/canonical PROFILE=cpu bench/bench_stability.sh              # SASRec, 2 shared vCPUs
#   DATA=/path/to/canonical PROFILE=cpu MODEL=carca bench/bench_stability.sh  # CARCA, 2 shared vCPUs
#   DATA=/path/to/canonical PROFILE=gpu bench/bench_stability.sh              # the papers' schedules (GPU)
#   (PROFILE=gpu also runs on a CPU, each encoding as one 1-thread process: a SASRec run is 10.5-12.5
#   CPU-minutes, e.g. ENCODINGS="none abs learnt" took 1 h 50 min on 2 vCPUs, "abs_con learnt_con
#   rotatory_con" 2 h 2 min, the ablation ENCODINGS=none_con 1 h 24 min; reproduction.md, sessions 14-17. Several invocations may share one OUT (side
#   by side once the first has imported Beauty):
#   each one's report covers every encoding trained there)
#
# Every run: the model's `--preset paper`, one-negative BCE (SASRec's, CARCA's and 004's loss), 004's
# evaluation protocol (target among 100 sampled negatives, the input's items never ranked), 004's first
# five seeds.
#   sasrec  the preset: d 50, 2 blocks, 1 head, batch 128, max_len 50, no W_O, the sequence objective.
#           cpu: lr 5e-3, dropout 0.2, 5 epochs, no early stopping (~35 min of 2 shared cores as two
#           1-thread queues side by side; not converged). gpu: the preset's lr 1e-3, dropout 0.5 and a
#           fixed 200 epochs (= `--preset original`: Kang & McAuley's schedule and 004's fixed ones; with
#           early stopping, BCE's early sag in valid NDCG@10 stops some seeds at epoch ~15).
#   carca   the preset: d 90, 3 blocks, 1 head, batch 128, max_len 75, every prefix a sample, l2 1e-4 on
#           the id table, residual cross-attention. cpu: lr 1e-3, dropout 0.2, 3 epochs, no early
#           stopping (~70 min as two queues; not converged). gpu: the preset's lr 1e-4, dropout 0.5 and
#           1,801 epochs (CARCA's Beauty schedule: long; add e.g. EXTRA="--set train.patience=20"), with
#           `--preset study`: 004's reading of CARCA's l2 1e-4 as a 1e-4 bound on the id rows' norm (nmax).
# Variables: DATA (required: the folder holding amazon-s3rec/Beauty.txt; not read once OUT has the
# imported samples), OUT (default /tmp/stability; never inside the repo; absent, or made by an earlier run
# of this script, which marks it with OUT/.bench_stability: any other existing folder is refused; a
# folder of a run from before the mark: touch OUT/.bench_stability), MODEL (sasrec | carca), SEEDS
# (default "42 43 44 45 46"),
# ENCODINGS (default: cpu none, abs, learnt, rotatory, rope, rope_one, rmha; gpu those and abs_con,
# learnt_con, rotatory_con), EXTRA (more `seqpe train` options, appended last; e.g. the +Con start
# ablation of session 18: EXTRA="--set encodings.none_con.init=identity --tag idinit").
# Every variable and input is checked before anything is written, and every run with `seqpe train --check`
# once Beauty is imported into OUT, before the first trains; a bad one stops the script with one line
# (exit 2). Each run's log (OUT/logs/MODEL-ENCODING.log) gains a section per call; a run that fails is
# listed at the end with its error, and the script exits 1.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd -P)
die() { echo "bench_stability.sh: $*" >&2; exit 2; }
SEQPE=${SEQPE:-$PWD/.venv/bin/seqpe}
[ -n "${DATA:-}" ] || die "set DATA to the folder of the canonical prepared files (pipeline/REFERENCE.md §8)"
OUT=${OUT:-/tmp/stability}
# shellcheck source=bench/queue.sh
. "$REPO/bench/queue.sh"
words SEEDS "42 43 44 45 46"; ints SEEDS
PROFILE=${PROFILE:-cpu}
MODEL=${MODEL:-sasrec}
if [ "$PROFILE" = cpu ]; then           # what ran on CPU: the +Con variants did not fit the budget
  words ENCODINGS "none abs learnt rotatory rope rope_one rmha"
else                                     # every study encoding of 004 Table 6 (and None)
  words ENCODINGS "none abs abs_con learnt learnt_con rotatory rotatory_con rope rope_one rmha"
fi
PRESET=paper
[ "$PROFILE/$MODEL" = gpu/carca ] && PRESET=study     # 004's port: nmax 1e-4 for the L2 term (models/carca.py)
args=(--model "$MODEL" --preset "$PRESET" --set train.loss=bce --set train.threads=1
      --set evaluate.candidates=100 --set evaluate.mask_history=true --params "$PWD/params.yaml" --quiet)
case $PROFILE/$MODEL in
  cpu/sasrec) args+=(--set train.lr=0.005 --set train.dropout=0.2 --set train.epochs=5 --set train.patience=0) ;;
  cpu/carca) args+=(--set train.lr=0.001 --set train.dropout=0.2 --set train.epochs=3) ;;
  gpu/sasrec) args+=(--set train.patience=0) ;;
  gpu/carca) ;;
  */sasrec|*/carca) die "PROFILE must be cpu or gpu, got '$PROFILE'" ;;
  *) die "MODEL must be sasrec or carca, got '$MODEL'" ;;
esac
read -r -a extra <<< "${EXTRA:-}"
args+=(${extra[@]+"${extra[@]}"})
seeds=(); for s in $SEEDS; do seeds+=(--seed "$s"); done
[ -x "$SEQPE" ] || die "no seqpe at $SEQPE: create the repo's .venv (README) or set SEQPE"
# OUT: absent or this script's (its .bench_stability mark): runs are added to a folder only this script made
# shellcheck source=bench/claim_out.sh
. "$REPO/bench/claim_out.sh"; claim_out stability /tmp/stability
[ -f "$OUT/samples/beauty/manifest.json" ] || [ -f "$DATA/amazon-s3rec/Beauty.txt" ] \
  || die "no $DATA/amazon-s3rec/Beauty.txt: set DATA to the folder holding amazon-s3rec/Beauty.txt (pipeline/REFERENCE.md §8)"

mkdir -p "$OUT/logs"; touch "$OUT/.bench_stability"
[ -f "$OUT/samples/beauty/manifest.json" ] || "$SEQPE" import beauty "$DATA/amazon-s3rec/Beauty.txt" \
    --format sasrec --sessions "$OUT/sessions/beauty" --samples "$OUT/samples/beauty" --quiet

read -r -a encs <<< "$ENCODINGS"
for e in "${encs[@]}"; do planned beauty "$OUT/samples/beauty" "$OUT/runs/beauty" --encoding "$e" "${seeds[@]}" "${args[@]}"; done
checked
one() {   # one encoding, every seed, in one process
  run_logged "$OUT/logs/$MODEL-$1.log" beauty "$OUT/samples/beauty" "$OUT/runs/beauty" --encoding "$1" "${seeds[@]}" \
      "${args[@]}" || true
}
if [ "$PROFILE" = cpu ]; then            # two queues side by side, alternating encodings
  ( for i in "${!encs[@]}"; do [ $((i % 2)) = 0 ] && one "${encs[$i]}"; done ) &
  ( for i in "${!encs[@]}"; do [ $((i % 2)) = 1 ] && one "${encs[$i]}"; done ) &
  wait
else
  for e in "${encs[@]}"; do one "$e" & done; wait
fi
compgen -G "$OUT/runs/beauty/*/seed-*/run.json" > /dev/null || failures   # nothing trained: say why
if compgen -G "$OUT/runs/*/$MODEL-none/seed-*/run.json" > /dev/null; then
  "$SEQPE" report "$OUT/runs" --baseline "$MODEL-none" --out "$OUT/report_vs_none.md" --quiet
else      # ENCODINGS without none (a follow-up into another OUT): its runs are elsewhere; compare by hand
  echo "no $MODEL-none runs in $OUT/runs: report_vs_none.md skipped (seqpe report THOSE_RUNS $OUT/runs --baseline $MODEL-none)" >&2
fi
"$SEQPE" report "$OUT/runs" --out "$OUT/report.md"

# 004's columns (Tables 5-7): mean and sample sd of HIT@10 and NDCG@10 (x100) over seeds, and the
# CI-length as 004 computes it (a normal interval, 2 x 1.96 sd / sqrt(n) of HIT@10: its Table 7
# rows check out this way), next to the Student-t length `seqpe report` uses (2 t(0.975, n-1) sd / sqrt(n)).
"$(dirname "$SEQPE")/python" - "$OUT/runs/beauty" <<'PY'
import json, math, statistics as st, sys
from pathlib import Path
from scipy.stats import t
print("| encoding | seeds | HIT@10 mean | HIT@10 sd | NDCG@10 mean | NDCG@10 sd | CI-length (004, normal) | CI-length (Student t) |")
print("|---|---:|---:|---:|---:|---:|---:|---:|")
for conf in sorted(Path(sys.argv[1]).iterdir()):
    runs = [json.loads(p.read_text()) for p in sorted(conf.glob("seed-*/run.json"))]
    hit = [100 * r["test"]["hr@10"] for r in runs]
    ndcg = [100 * r["test"]["ndcg@10"] for r in runs]
    n = len(hit)
    if n < 2:                                            # one seed: the mean only, as `seqpe report`
        print(f"| {conf.name} | {n} | {st.mean(hit):.2f} | | {st.mean(ndcg):.2f} | | | |")
        continue
    sd = st.stdev(hit)
    print(f"| {conf.name} | {n} | {st.mean(hit):.2f} | {sd:.2f} | {st.mean(ndcg):.2f} | {st.stdev(ndcg):.2f} "
          f"| {2 * 1.96 * sd / math.sqrt(n):.2f} | {2 * t.ppf(0.975, n - 1) * sd / math.sqrt(n):.2f} |")
PY
