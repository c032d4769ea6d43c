#!/usr/bin/env bash
# Nsight Compute on the rows where the Hopper kernels still trail SDPA's cuDNN backend
# (issues 7 and 8): our kernels and cuDNN's on the same shape, every kernel of one call
# each. One H200 on Firecracker (ncu reads the counters there); about 6-8 minutes: no row
# starts after BUDGET (500 s) - 40 s, and the exports, summary and tar take under 50 s more.
#   Rows (DTYPE bf16, B*N = 16k tokens, H = 2048/d; ours / cuDNN in session 16's sweep),
#   largest gap first, the eight required ones:
#     bwd d128 causal 2k (0.78-0.79x), bwd d128 full 2k (0.81-0.87x), fwd d128 causal 2k
#     (0.84-0.88x), bwd d128 causal 4k (0.84-0.86x), fwd d64 causal 2k (0.86-0.88x),
#     bwd d64 causal 2k (0.88-0.89x), fwd d128 full 2k (0.92-0.95x), fwd d128 causal 4k
#     (0.93-0.94x);
#   then, while the budget lasts (EXTRA_ROWS): fwd d64 causal 4k (0.88-0.90x), bwd d64 full
#     2k (0.90-0.91x), bwd d128 full 4k (0.92x), bwd d128 causal 8k (0.92-0.93x).
#   Each row is one process under ncu (benchmarks/ncu_cases.py): both providers warmed up,
#   then ours' call and cuDNN's call, each between cudaProfilerStart/Stop after a marker
#   kernel (--profile-from-start off, no kernel filter: the forward kernel; the backward's
#   dQ zeroing, preprocess, main kernel and dQ conversion; cuDNN's kernels likewise; no
#   memsets, which are not kernels). --clock-control none (the benchmark's clocks); ncu
#   flushes the caches before each kernel, as do_bench flushes L2. Sections SpeedOfLight,
#   LaunchStats, Occupancy, ComputeWorkloadAnalysis, InstructionStats,
#   MemoryWorkloadAnalysis, SchedulerStats, WarpStateStats, and the metrics: tensor pipe
#   (wgmma, whole, mma.sync), DRAM bytes read / written, L2 sector hit rate, the warp
#   stall reasons per issued instruction. Sections and metrics are checked against
#   `ncu --list-sections` / `--query-metrics` first; a row whose run fails on a metric
#   is run again with the sections alone (and so are the rows after it).
#   T_ROW (75 s) per row; a row starts only with 40 s left before BUDGET.
# Results under $R: <row>.ncu-rep, <row>.txt (details page), <row>.csv (details page, CSV,
#   base units), <row>.raw.csv (raw page: every collected metric, the sections' chart
#   metrics too), <row>.log, <row>.windows.json; summary.md (benchmarks/ncu_summary.py).
#   $OUT (nothing else: the device returns at most 8 files): results.tgz (all but the
#   reports), reps.tgz (the reports; in 15 MiB parts reps.tgz.part-aa... when larger, none
#   past four parts), summary.md, verdict.txt.
# Rule, fixed before the run: a row is PROFILED when both its calls (ours, cuDNN) hold at
#   least one kernel with a duration, and ADDS UP when each call's kernel time is
#   0.80-1.25x the sweep's time of that row (BENCH: session 16 call 1's
#   bench_attention.json, when committed; without it the sums are not checked).
#   "VERDICT: complete" when all eight required rows are profiled and add up; otherwise
#   "VERDICT: incomplete", naming the rows. Which kernel and which stall make each gap is
#   read from summary.md afterwards (docs/performance.md, "Nsight Compute on the short rows").
source "$(dirname "${BASH_SOURCE[0]}")/gpu_lib.sh"
DTYPE=${DTYPE:-bf16}; PROVIDERS=${PROVIDERS:-ours,cudnn}; T_ROW=${T_ROW:-75}; BUDGET=${BUDGET:-500}
# (other callers: PROVIDERS may add flash / flex; PEER, the provider ours is compared with, default cudnn)
ROWS=${ROWS:-"bwd:128:2048:causal bwd:128:2048:full fwd:128:2048:causal bwd:128:4096:causal \
fwd:64:2048:causal bwd:64:2048:causal fwd:128:2048:full fwd:128:4096:causal"}
EXTRA_ROWS=${EXTRA_ROWS-"fwd:64:4096:causal bwd:64:2048:full bwd:128:4096:full bwd:128:8192:causal"}
BENCH=${BENCH-$(find benchmarks/results/h200/session16/call1 -name bench_attention.json 2>/dev/null | sort | head -1)}
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | tail -1)
# A row whose d is a name (plain, dropout, d192, window) is ncu_cases.py --variant's row of
# bench_variants.py's table (causal, bf16): run it with PROVIDERS=ours,peer PEER=peer BENCH=.
stem() {  # N in thousands ("2k"), or as is where not a multiple of 1024 ("512")
  local mode d n mask; IFS=: read -r mode d n mask <<< "$1"
  if [ $((n % 1024)) = 0 ]; then n="$((n / 1024))k"; fi
  case "$d" in [0-9]*) echo "${mode}_${DTYPE}_d${d}_${n}_${mask}" ;; *) echo "${mode}_variant_${d}_${n}" ;; esac
}
finish() {  # summary, verdict, tar
  local i
  for i in $(seq 45); do [ -z "$(jobs -rp)" ] && break; sleep 1; done  # the last exports
  python3 benchmarks/ncu_summary.py "$R" ${BENCH:+--bench "$BENCH"} --peer "${PEER:-cudnn}" --out "$R/summary.md" \
    --require "$(for r in $ROWS; do stem "$r"; done | paste -sd,)" > "$R/summary_stdout.txt" 2>&1
  cat "$R/summary_stdout.txt"; grep -E "^[a-z0-9_]+: |^VERDICT" "$R/summary_stdout.txt" > "$OUT/verdict.txt"
  [ -n "${1:-}" ] && echo "VERDICT: incomplete ($1)" | tee -a "$OUT/verdict.txt"
  cp "$R/summary.md" "$OUT/summary.md" 2>/dev/null
  tar -C "$OUT" --exclude='*.ncu-rep' -czf "$OUT/results.tgz" r
  local reps; reps=$(cd "$R" && ls *.ncu-rep 2>/dev/null)
  [ -n "$reps" ] && tar -C "$R" -czf "$OUT/reps.tgz" $reps
  if [ -f "$OUT/reps.tgz" ] && [ "$(stat -c %s "$OUT/reps.tgz")" -gt 15728640 ]; then
    split -b 15M "$OUT/reps.tgz" "$OUT/reps.tgz.part-" && rm "$OUT/reps.tgz"
    [ "$(ls "$OUT"/reps.tgz.part-* | wc -l)" -gt 4 ] && rm "$OUT"/reps.tgz.part-* && echo "reports too large: not returned"
  fi
  rm -rf "$R"
  el done; ls -la "$OUT"
  exit 0
}
[ -x "$NCU" ] || { echo "ncu not found"; finish "ncu not found"; }
"$NCU" --version | tail -1 | tee -a "$R/env.txt"; echo "sweep JSON: ${BENCH:-none}"

timeout 60 "$NCU" --list-sections > "$R/sections.txt" 2>&1
SECTIONS=(); NAMES=()
for s in SpeedOfLight LaunchStats Occupancy ComputeWorkloadAnalysis InstructionStats MemoryWorkloadAnalysis \
         SchedulerStats WarpStateStats; do
  if ! grep -q SpeedOfLight "$R/sections.txt" || grep -qw "$s" "$R/sections.txt"; then SECTIONS+=(--section "$s"); NAMES+=("$s"); fi
done
timeout 60 "$NCU" --query-metrics --chip gh100 > "$R/query_metrics.txt" 2>&1 \
  || timeout 60 "$NCU" --query-metrics > "$R/query_metrics.txt" 2>&1
# with every full name too (a ratio metric may be listed only so); large, kept out of $R
{ cat "$R/query_metrics.txt"; timeout 60 "$NCU" --query-metrics --query-metrics-mode all --chip gh100 2>&1; } > /tmp/qm.txt
WANT=(sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active
      sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active
      sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active
      dram__bytes_read.sum dram__bytes_write.sum lts__t_sector_hit_rate.pct)
for r in barrier branch_resolving dispatch_stall drain imc_miss lg_throttle long_scoreboard math_pipe_throttle \
         membar mio_throttle misc no_instruction not_selected selected short_scoreboard sleeping tex_throttle wait; do
  WANT+=("smsp__average_warps_issue_stalled_${r}_per_issue_active.ratio")
done
KEEP=()
if grep -qw dram__bytes_read /tmp/qm.txt; then
  for m in "${WANT[@]}"; do grep -qw -- "${m%%.*}" /tmp/qm.txt && KEEP+=("$m"); done
else
  KEEP=(dram__bytes_read.sum dram__bytes_write.sum)  # no list to check against: the two bench_io.py ran with here
fi
METRICS=$(IFS=,; echo "${KEEP[*]}")
echo "sections: ${NAMES[*]}; metrics kept ${#KEEP[@]} of ${#WANT[@]}: $METRICS" | cut -c1-600
el setup

profile() {  # name, seconds, metrics ("" for the sections alone), ncu_cases.py arguments...
  local name=$1 limit=$2 metrics=$3; shift 3
  local extra=(); [ -n "$metrics" ] && extra=(--metrics "$metrics")
  rm -f "$R/$name.ncu-rep"
  timeout -k 5 "$limit" "$NCU" --clock-control none --target-processes all --profile-from-start off \
    --launch-count "${LAUNCHES:-60}" "${SECTIONS[@]}" "${extra[@]}" -o "$R/$name" -f \
    python3 benchmarks/ncu_cases.py "$@" --windows-json "$R/$name.windows.json" > "$R/$name.log" 2>&1
  echo "rc=$?" >> "$R/$name.log"
}
export_pages() {  # in the background, while the next row runs on the GPU
  ( timeout 40 "$NCU" --import "$R/$1.ncu-rep" --page details > "$R/$1.txt" 2>&1
    timeout 40 "$NCU" --import "$R/$1.ncu-rep" --page details --csv --print-units base > "$R/$1.csv" 2> "$R/$1.csv.err"
    timeout 40 "$NCU" --import "$R/$1.ncu-rep" --page raw --csv --print-units base > "$R/$1.raw.csv" 2> "$R/$1.raw.err" ) &
}
left() { echo $((BUDGET - $(date +%s) + t0)); }

first=1
for r in $ROWS $EXTRA_ROWS; do
  name=$(stem "$r"); IFS=: read -r mode d n mask <<< "$r"
  args=(--case "$mode" --d "$d" --n "$n" --dtype "$DTYPE" --providers "$PROVIDERS")
  case "$d" in [0-9]*) ;; *) args=(--case "$mode" --variant "$d" --n "$n" --providers "$PROVIDERS") ;; esac
  [ "$mask" = causal ] && args+=(--causal)
  [ "$(left)" -lt 40 ] && { el "$name: skipped (budget)"; continue; }
  lim=$(( $(left) < T_ROW ? $(left) : T_ROW ))
  profile "$name" "$lim" "$METRICS" "${args[@]}"
  if [ ! -s "$R/$name.ncu-rep" ] && [ -n "$METRICS" ] && grep -qi "==ERROR==.*metric" "$R/$name.log" \
     && [ "$(left)" -ge 40 ]; then
    grep "==ERROR==" "$R/$name.log" | head -3; echo "$name: again with the sections alone"
    mv "$R/$name.log" "$R/$name.metrics_failed.log"; METRICS=""
    lim=$(( $(left) < T_ROW ? $(left) : T_ROW ))
    profile "$name" "$lim" "" "${args[@]}"
  fi
  el "$name: $(tail -1 "$R/$name.log"), $(grep -c '==PROF== Profiling' "$R/$name.log") launches profiled"
  grep -E "==ERROR==|not profiled|Error" "$R/$name.log" | head -3 | cut -c1-300
  if [ -s "$R/$name.ncu-rep" ]; then
    export_pages "$name"
  elif [ $first = 1 ] && grep -qE "ERR_NVGPUCTRPERM|LibraryNotLoaded|Failed to initialize the profiler" "$R/$name.log"; then
    finish "ncu cannot read the counters on this machine"
  fi
  first=0
done
finish
