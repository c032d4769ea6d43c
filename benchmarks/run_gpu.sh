#!/usr/bin/env bash
# One GPU device call (< 10 min): the GPU test suite, then the memory, IO and
# attention benchmarks, all results flat in $OUT (8 files at most):
#   run.log tests.log summary.md bench_attention.{json,png} bench_memory.{json,png} bench_io.json
#
# Environment knobs:
#   OUT=dir               results folder (default benchmarks/results/h200)
#   SKIP_TESTS=1          skip the test suite
#   BENCH_ARGS="--quick"  extra arguments for bench_attention.py (default: the full sweep)
#   COMPARE_JSON=file     a previous bench_attention.json: report run-to-run spread against it
#   TOTAL_BUDGET_S=560    wall budget of the whole script; TESTS_TIMEOUT_S=180 for the tests
#
# The attention sweep runs last and gets whatever time is left (its --max-seconds
# is derived from the remaining budget), so the whole script stays under the budget.
set -u -o pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
export FLASHATTN_TRITON_TEST_DEVICE=cuda
export MPLBACKEND=Agg

OUT="${OUT:-$PWD/benchmarks/results/h200}"
PY="${PYTHON:-python3}"
TOTAL_BUDGET_S="${TOTAL_BUDGET_S:-560}"
TESTS_TIMEOUT_S="${TESTS_TIMEOUT_S:-180}"
MEMORY_TIMEOUT_S=75
IO_TIMEOUT_S=120
RESERVE_END_S=20      # summary at the end
MIN_ATTENTION_S=60    # below this the attention sweep is not started

mkdir -p "$OUT"
LOG="$OUT/run.log"
: > "$LOG"
START=$(date +%s)
STATUS_ROWS=()

log() { printf '%s\n' "$*" | tee -a "$LOG"; }
elapsed() { echo $(( $(date +%s) - START )); }
remaining() { echo $(( TOTAL_BUDGET_S - $(elapsed) )); }
min() { if [ "$1" -lt "$2" ]; then echo "$1"; else echo "$2"; fi; }

# step NAME LIMIT_S LOGFILE CMD... : run under `timeout`, tee into LOGFILE, record the status.
step() {
  local name=$1 limit=$2 logfile=$3 t0 rc status
  shift 3
  if [ "$limit" -lt 15 ]; then
    STATUS_ROWS+=("| $name | not started: no time left | 0 s |")
    log "=== $name not started: no time left (${limit}s) ==="
    return
  fi
  t0=$(date +%s)
  log ""
  log "=== $name (timeout ${limit}s, started at $(elapsed)s) ==="
  timeout -k 20 "$limit" "$@" 2>&1 | tee -a "$logfile"
  rc=$?
  case $rc in
    0) status="ok" ;;
    124|137) status="TIMEOUT" ;;
    *) status="FAILED" ;;
  esac
  STATUS_ROWS+=("| $name | $status (rc=$rc) | $(( $(date +%s) - t0 )) s |")
  log "=== $name: $status (rc=$rc) after $(( $(date +%s) - t0 ))s ==="
}

log "run_gpu.sh: $(date -u +%Y-%m-%dT%H:%M:%SZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo none), budget ${TOTAL_BUDGET_S}s"
nvidia-smi 2>&1 | tee -a "$LOG" || log "nvidia-smi failed"
"$PY" -c 'import torch, triton; print("torch", torch.__version__, "cuda", torch.version.cuda, "triton", triton.__version__, "gpu", torch.cuda.get_device_name(0) if torch.cuda.is_available() else None)' 2>&1 | tee -a "$LOG"

# 1. tests (leave at least ~5 min for the benchmarks)
if [ "${SKIP_TESTS:-0}" = "1" ]; then
  STATUS_ROWS+=("| tests | skipped (SKIP_TESTS=1) | 0 s |")
  log "tests skipped (SKIP_TESTS=1)"
else
  limit=$(min "$TESTS_TIMEOUT_S" $(( $(remaining) - 300 )))
  if [ "$limit" -lt 30 ]; then limit=30; fi
  : > "$OUT/tests.log"
  # The default suite in 8 processes (it is compile-bound: many head dims and
  # dtypes), then the memory-heavy realistic sizes one at a time.  Autotuning
  # off: the tests check correctness of the first valid config of each kernel.
  step tests "$limit" "$OUT/tests.log" env FLASHATTN_TRITON_AUTOTUNE=0 bash -c \
    "$PY -m pytest -q -n 8 -m 'not gpu' tests/ && $PY -m pytest -q -m gpu tests/"
  log "--- tests.log (last lines) ---"
  tail -n 15 "$OUT/tests.log" >> "$LOG"
  tail -n 3 "$OUT/tests.log"
fi

# The README's self-check (correctness table with default configs, short benchmark).
step self_check "$(min 150 $(( $(remaining) - 200 )))" "$LOG" env FLASHATTN_TRITON_AUTOTUNE=0 "$PY" -m flashattn_triton check

# 2. memory and 3. IO: short, fixed-size steps
step bench_memory "$(min $MEMORY_TIMEOUT_S $(( $(remaining) - RESERVE_END_S )))" "$LOG" \
  "$PY" benchmarks/bench_memory.py --out "$OUT" --max-seconds 50
step bench_io "$(min $IO_TIMEOUT_S $(( $(remaining) - RESERVE_END_S )))" "$LOG" \
  "$PY" benchmarks/bench_io.py --out "$OUT"

# 4. attention sweep: the rest of the budget
limit=$(( $(remaining) - RESERVE_END_S ))
if [ "$limit" -lt "$MIN_ATTENTION_S" ]; then
  STATUS_ROWS+=("| bench_attention | not started: only ${limit}s left | 0 s |")
  log "bench_attention not started: only ${limit}s left"
else
  max_seconds=$(( limit - 45 ))  # grace for the measurement in flight, outputs and the plot
  compare=()
  if [ -n "${COMPARE_JSON:-}" ]; then compare=(--compare "$COMPARE_JSON"); fi
  # shellcheck disable=SC2086  # BENCH_ARGS is a list of words on purpose
  step bench_attention "$limit" "$LOG" "$PY" benchmarks/bench_attention.py --out "$OUT" \
    --max-seconds "$max_seconds" ${compare[@]+"${compare[@]}"} ${BENCH_ARGS:-}
fi

# Merge the markdown into summary.md (keeps the number of returned files small).
SUMMARY="$OUT/summary.md"
{
  echo "# GPU run summary"
  echo
  echo "$(date -u +%Y-%m-%dT%H:%M:%SZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo none), total $(elapsed) s"
  echo
  echo "| step | status | time |"
  echo "|---|---|---|"
  printf '%s\n' "${STATUS_ROWS[@]}"
  if [ -s "$OUT/tests.log" ]; then
    echo
    echo "Tests: \`$(grep -E '(passed|failed|error|skipped|no tests ran)' "$OUT/tests.log" | tail -n 1)\`"
  fi
  for name in bench_attention bench_memory bench_io; do
    if [ -f "$OUT/$name.md" ]; then echo; cat "$OUT/$name.md"; fi
  done
} > "$SUMMARY"
rm -f "$OUT"/bench_attention.md "$OUT"/bench_memory.md "$OUT"/bench_io.md "$OUT"/*.tmp

# Short summary last: only the end of the output is seen.
echo
echo "================ SUMMARY (full tables in $SUMMARY) ================"
awk '/^## / {in_bench = 1; print; next}
     !in_bench {print; next}
     /^GPU / && !env_shown {env_shown = 1; print; next}
     /<!-- short:begin -->/ {p = 1; next}
     /<!-- short:end -->/ {p = 0; print ""; next}
     p {print}' "$SUMMARY"
echo "files in $OUT ($(ls -1 "$OUT" | wc -l)):"
ls -la "$OUT"
