# Sourced by the reproduction scripts (bench_posrec_000.sh, bench_reproduction.sh, bench_stability.sh) for what
# they share around their queues of `seqpe train` runs. Each needs the caller's `die`
# (one line, exit 2), SEQPE and OUT.
#
# words NAME DEFAULT: the variable NAME, or DEFAULT when it is unset; set but blank is an error (SEEDS= from an
#   unset shell variable silently meant the whole default grid)
# ints NAME: every word of the variable NAME is a whole number (SEEDS=abc failed run by run, in the logs)
# check_runs: every planned run, one `seqpe train` argument list per line on stdin, checked with
#   `seqpe train ... --check` (settings, preset, model and encoding, samples, output folders; the model
#   built once) before the first trains, four at a time; the first failure stops the script with its one
#   line. A misspelt encoding or EXTRA key used to surface in a log file once its queue got to it.
# run_logged LOG ARGS...: one `seqpe train ARGS` appended to LOG under a header naming the call (a rerun kept
#   no trace of the run it replaced); a failure is noted for failures
# failures: at the end, each failed run with the last line of its log, and exit 1 (the scripts exited 0
#   beside an older report)

words() {
  local name=$1 default=$2
  if [ -z "${!name+set}" ]; then
    printf -v "$name" '%s' "$default"
  elif [ -z "${!name// /}" ]; then
    die "$name is set but empty: unset it for the default ($default), or name at least one"
  fi
}

ints() {
  local w
  for w in ${!1}; do [[ $w =~ ^[0-9]+$ ]] || die "$1 takes whole numbers, got '$w'"; done
}

check_runs() {
  local dir="$OUT/logs/check" n=0 i line
  rm -rf "$dir"; mkdir -p "$dir"
  while read -r line; do
    n=$((n + 1))
    # shellcheck disable=SC2086
    { "$SEQPE" train $line --check > /dev/null 2> "$dir/$n.err" || echo "$line" > "$dir/$n.failed"; } &
    [ $((n % 4)) != 0 ] || wait
  done
  wait
  for i in $(seq 1 "$n"); do
    if [ -f "$dir/$i.failed" ]; then
      local err run; err=$(grep -m1 '^error: ' "$dir/$i.err" || tail -n 1 "$dir/$i.err"); run=$(cat "$dir/$i.failed")
      rm -rf "$dir"
      die "\`seqpe train $run\` would fail: ${err#error: } (nothing trained)"
    fi
  done
  rm -rf "$dir"
}

run_logged() {
  local log=$1 rc=0; shift
  echo "=== $(date -u +%FT%TZ) seqpe train $*" >> "$log"
  /usr/bin/time -f "wall %e s, cpu %U+%S s, maxrss %M KB" "$SEQPE" train "$@" >> "$log" 2>&1 || rc=$?
  [ "$rc" = 0 ] || echo "$log" >> "$OUT/logs/failed.$$"
  return "$rc"
}

failures() {
  [ -f "$OUT/logs/failed.$$" ] || return 0
  local log n; n=$(wc -l < "$OUT/logs/failed.$$")
  echo "$(basename "$0"): $n run(s) failed:" >&2
  while read -r log; do      # seqpe's one-line error (the lines after it are time's)
    echo "  $log: $(grep '^error: ' "$log" | tail -n 1 || true)" >&2
  done < "$OUT/logs/failed.$$"
  rm -f "$OUT/logs/failed.$$"
  exit 1
}
