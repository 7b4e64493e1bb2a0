#!/usr/bin/env bash
# 003's validation-selected grid (Luo et al., §4.2: "tuned on the validation set") for FPARec on
# Beauty through DVC's experiment queue: a throwaway DVC project (a git repo under OUT) with the
# repo's dvc.yaml and params.yaml, one queued experiment per grid point, `dvc exp show` sorted by
# the valid metric. Beauty comes in as S3-Rec's prepared file through `imports:` in params.yaml: the
# `import@beauty_s3rec` stage (`seqpe import`), the file tracked with `dvc add` so that every queued
# experiment's workspace has it; imported once before the queue, so each experiment re-runs only the
# train and evaluate stages.
# Results: bench/results/reproduction.md (issue 15).
#
#   DATA=/path/to/canonical PROFILE=cpu bench/bench_grid.sh   # what ran on 2 shared vCPUs: lr x dropout, 3 epochs
#   DATA=/path/to/canonical PROFILE=gpu bench/bench_grid.sh   # 003's full schedule, a larger grid, 3 seeds
#
# Both: FPARec (k 40, 2 blocks, 1 head, d 64, batch 128, max_len 50), cross-entropy over all items
# with every position predicting (003 Eq. 11), full ranking, selection of the epoch and of the
# configuration on valid NDCG@10, test reported once per configuration.
# Variables: DATA (required: the folder holding amazon-s3rec/Beauty.txt), OUT (default /tmp/grid;
# never inside the repo; replaced whole, so only when absent or made by an earlier run of this script,
# which marks it with OUT/.bench_grid: any other existing folder is refused), JOBS (queue workers,
# default 1), EPOCHS_OVERRIDE (replaces the profile's: EPOCHS_OVERRIDE=1 is a quick check that the flow
# works). Every input is checked before OUT is touched; a bad one stops the script with one line (exit 2).
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd -P)
die() { echo "bench_grid.sh: $*" >&2; exit 2; }
[ -n "${DATA:-}" ] || die "set DATA to the folder of the canonical prepared files (pipeline/REFERENCE.md §8)"
OUT=${OUT:-/tmp/grid}
PROFILE=${PROFILE:-cpu}
JOBS=${JOBS:-1}
export PATH="$REPO/.venv/bin:$PATH" DVC_NO_ANALYTICS=1
case $PROFILE in
  cpu) EPOCHS=3 PATIENCE=0 SEEDS="[1]"
       GRID=(-S 'train.lr=0.001,0.005' -S 'train.dropout=0.2,0.5') ;;
  gpu) EPOCHS=200 PATIENCE=10 SEEDS="[1, 2, 3]"
       GRID=(-S 'train.lr=0.0005,0.001,0.002' -S 'train.dropout=0.2,0.5' -S 'train.dim=64,128'
             -S 'train.max_len=50,100' -S 'encodings.fparec.rank=20,40') ;;
  *) die "PROFILE must be cpu or gpu, got '$PROFILE'" ;;
esac
[[ $JOBS =~ ^[1-9][0-9]*$ ]] || die "JOBS must be a whole number of queue workers (1 or more), got '$JOBS'"
[[ ${EPOCHS_OVERRIDE:-1} =~ ^[1-9][0-9]*$ ]] || die "EPOCHS_OVERRIDE must be a whole number of epochs (1 or more), got '$EPOCHS_OVERRIDE'"
EPOCHS=${EPOCHS_OVERRIDE:-$EPOCHS}
# every input first: nothing under OUT is touched before they all check out
DATA=$(realpath -m -- "$DATA")          # absolute: the script works from inside OUT
[ -f "$DATA/amazon-s3rec/Beauty.txt" ] \
  || die "no $DATA/amazon-s3rec/Beauty.txt: set DATA to the folder holding amazon-s3rec/Beauty.txt (pipeline/REFERENCE.md §8)"
for tool in git dvc python; do
  command -v "$tool" > /dev/null || die "no $tool on PATH (nor in $REPO/.venv/bin): install the repo (README) first"
done
OUT=$(realpath -m -- "$OUT")
case $OUT/ in
  "$REPO"/*) die "OUT=$OUT lies inside the repository $REPO: name a folder outside it (default /tmp/grid)" ;;
esac
# OUT is replaced whole: only a folder this script made (its .bench_grid mark) or none at all
[ ! -e "$OUT" ] || [ -f "$OUT/.bench_grid" ] \
  || die "$OUT exists and was not made by bench_grid.sh: name another OUT (or move that folder away)"
rm -rf "$OUT"; mkdir -p "$OUT"; touch "$OUT/.bench_grid"; cd "$OUT"
cp "$REPO/dvc.yaml" "$REPO/.gitignore" "$REPO/.dvcignore" .
python - "$REPO/params.yaml" "$EPOCHS" "$PATIENCE" "$SEEDS" <<'PY'
import sys, yaml
p = yaml.safe_load(open(sys.argv[1]))
p["datasets"] = []
p["imports"] = {"beauty_s3rec": {"path": "data/inbox/Beauty.txt", "format": "sasrec"}}
p["train"].update(epochs=int(sys.argv[2]), patience=int(sys.argv[3]), batch_size=128, dim=64, layers=2,
                  heads=1, dropout=0.2, lr=0.001, max_len=50, loss="ce", objective="sequence", threads=1)
p["study"]["seeds"] = yaml.safe_load(sys.argv[4])
p["study"]["next_item"].update(datasets=["beauty_s3rec"], models=["fparec"], encodings=["fparec"], baselines=[])
p["study"]["ctr"].update(datasets=[], models=[], encodings=[], baselines=[])
p["models"] = {"fparec": {}}
p["encodings"] = {"fparec": {"rank": 40}}
yaml.safe_dump(p, open("params.yaml", "w"), sort_keys=False)
PY
git init -q -b main
mkdir -p .git/info; echo /.bench_grid >> .git/info/exclude    # the mark stays out of the experiments' commits
dvc init -q
mkdir -p data/inbox && cp "$DATA/amazon-s3rec/Beauty.txt" data/inbox/
dvc add -q data/inbox/Beauty.txt
dvc repro -q import@beauty_s3rec          # imported once, in dvc.lock: the experiments skip it
git add -A
git -c user.name=bench -c user.email=bench@example.invalid commit -qm "FPARec grid on imported Beauty"
dvc exp run --queue "${GRID[@]}"
dvc queue start -j "$JOBS"
while dvc queue status | grep -E 'Queued|Running' > /dev/null; do sleep 10; done   # no -q: pipefail
dvc queue status
M=data/metrics/beauty_s3rec/fparec-fparec.json
dvc exp show --sort-by "$M:valid.ndcg@10" --sort-order desc --md --drop '.*' \
    --keep 'Experiment|train\.lr$|train\.dropout$|train\.dim$|train\.max_len$|.*rank$|.*ndcg@10$|.*hr@10$'
