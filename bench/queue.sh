# Sourced by the reproduction scripts (bench_posrec_000.sh, bench_reproduction.sh, bench_stability.sh) for what
# they share around their queues of `seqpe train` runs. Each needs the caller's `die`
# (one line, exit 2), SEQPE and OUT.
#
# words NAME DEFAULT: the variable NAME, or DEFAULT when it is unset; set but blank is an error (SEEDS= from an
#   unset shell variable silently meant the whole default grid)
# ints NAME: every word of the variable NAME is a whole number (SEEDS=abc failed run by run, in the logs)
# planned ARGS... / checked: each planned run's `seqpe train ARGS --check` (settings, preset, model and
#   encoding, samples, output folders; the model built once), four at a time, then, before the first run
#   trains, the first failure stops the script with its one line. A misspelt encoding or EXTRA key used to
#   surface in a log file once its queue got to it.
# run_logged LOG ARGS...: one `seqpe train ARGS` appended to LOG under a header naming the call (a rerun kept
#   no trace of the run it replaced); a failure is noted, with where this call's part of LOG begins
# failures (the EXIT trap, set here): each failed run with the error of its own call (or its exit code when
#   it left none: a kill), and exit 1; the scripts used to exit 0 beside an older report

words() {
  local name=$1 default=$2
  if [ -z "${!name+set}" ]; then
    printf -v "$name" '%s' "$default"
  elif [ -z "${!name//[[:space:]]/}" ]; then
    die "$name is set but empty: unset it for the default ($default), or name at least one"
  fi
}

ints() {
  local w
  for w in ${!1}; do [[ $w =~ ^[0-9]+$ ]] || die "$1 takes whole numbers, got '$w'"; done
}

_planned=0
planned() {
  local dir="$OUT/logs/check"
  [ "$_planned" != 0 ] || { rm -rf "$dir"; mkdir -p "$dir"; }
  _planned=$((_planned + 1))
  printf '%q ' "$@" > "$dir/$_planned.args"
  { "$SEQPE" train "$@" --check > /dev/null 2> "$dir/$_planned.err" || : > "$dir/$_planned.failed"; } &
  [ $((_planned % 4)) != 0 ] || wait
}

checked() {
  local dir="$OUT/logs/check" i err run
  wait
  for i in $(seq 1 "$_planned"); do
    if [ -f "$dir/$i.failed" ]; then
      err=$(grep -m1 '^error: ' "$dir/$i.err" || tail -n 1 "$dir/$i.err"); run=$(cat "$dir/$i.args")
      rm -rf "$dir"
      die "\`seqpe train ${run% }\` would fail: ${err#error: } (nothing trained)"
    fi
  done
  rm -rf "$dir"; _planned=0
}

run_logged() {
  local log=$1 rc=0 from; shift
  from=$(($(stat -c %s "$log" 2>/dev/null || echo 0) + 1))
  echo "=== $(date -u +%FT%TZ) seqpe train $*" >> "$log"
  /usr/bin/time -f "wall %e s, cpu %U+%S s, maxrss %M KB" "$SEQPE" train "$@" >> "$log" 2>&1 || rc=$?
  [ "$rc" = 0 ] || printf '%s\t%s\t%s\n' "$rc" "$from" "$log" >> "$OUT/logs/failed.$$"
  return "$rc"
}

failures() {
  local status=$? rc from log said
  [ -f "$OUT/logs/failed.$$" ] || return "$status"
  echo "$(basename "$0"): $(wc -l < "$OUT/logs/failed.$$") run(s) failed:" >&2
  while IFS=$'\t' read -r rc from log; do       # seqpe's one-line error in this call's part of the log
    said=$(tail -c "+$from" "$log" | grep '^error: ' | tail -n 1 || true)
    echo "  $log: ${said:-exit code $rc, no error line (killed? out of memory?)}" >&2
  done < "$OUT/logs/failed.$$"
  rm -f "$OUT/logs/failed.$$"
  exit 1
}
trap failures EXIT
