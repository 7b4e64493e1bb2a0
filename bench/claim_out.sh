# Sourced by the reproduction scripts (bench_cape.sh, bench_posrec_000.sh, bench_reproduction.sh,
# bench_stability.sh), which add runs to OUT over several calls.
# claim_out NAME DEFAULT: makes OUT absolute and stops (the caller's `die`: one line, exit 2) unless it lies
# outside the repository REPO and is absent or carries the mark .bench_NAME, i.e. a folder bench_NAME.sh made;
# the caller marks a new OUT once its inputs are checked. (bench_grid.sh replaces its OUT whole, so it
# keeps its own check: there, advice to mark a user's folder would wipe it.)
claim_out() {
  local name=$1 default=$2
  OUT=$(realpath -m -- "$OUT")
  case $OUT/ in "$REPO"/*) die "OUT=$OUT lies inside the repository $REPO: name a folder outside it (default $default)" ;; esac
  [ ! -e "$OUT" ] || [ -f "$OUT/.bench_$name" ] || die "$OUT exists and was not made by bench_$name.sh: \
name another OUT (an earlier run's folder from before the mark: touch $OUT/.bench_$name)"
}
