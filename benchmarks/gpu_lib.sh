# Common start of the device scripts (source it from a script in benchmarks/ or benchmarks/history/):
# strict mode, the repository root as working directory and on PYTHONPATH,
# results under $OUT/r ($R), el() printing the elapsed seconds, and the GPU,
# driver, clock, torch and Triton versions in $R/env.txt.
set -u -o pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1 MPLBACKEND=Agg
OUT="${OUT:-/tmp/out}"; R="$OUT/r"; mkdir -p "$R"
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader > "$R/env.txt" 2>&1
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" >> "$R/env.txt" 2>&1
# racecheck_isolate CASE SETTINGS...: one pytest CASE with FLASHATTN_TRITON_HOPPER_VARLEN_ISOLATE at
# each setting, plainly ($R/plain_SETTING.log) and under compute-sanitizer's racecheck
# ($R/racecheck_SETTING.log, exit status 3 on a hazard); prints the summaries, the most frequent
# hazard lines and the number of hazard sites inside the forward's zeroing (_zero_rows_from).
racecheck_isolate() {
  local case=$1 on; shift
  for on in "$@"; do
    FLASHATTN_TRITON_TEST_DEVICE=cuda FLASHATTN_TRITON_HOPPER_VARLEN_ISOLATE=$on timeout -k 5 100 \
      python3 -m pytest -q -p no:cacheprovider -rfE "$case" > "$R/plain_$on.log" 2>&1
    echo "rc=$?" >> "$R/plain_$on.log"; el "plain, switch $on"; tail -2 "$R/plain_$on.log"
    FLASHATTN_TRITON_TEST_DEVICE=cuda FLASHATTN_TRITON_HOPPER_VARLEN_ISOLATE=$on timeout -k 5 170 \
      compute-sanitizer --tool racecheck --error-exitcode 3 python3 -m pytest -q -p no:cacheprovider -rfE \
      "$case" > "$R/racecheck_$on.log" 2>&1
    echo "rc=$?" >> "$R/racecheck_$on.log"; el "racecheck, switch $on"
    grep -E "RACECHECK SUMMARY|ERROR SUMMARY|passed|failed|^rc=" "$R/racecheck_$on.log" | tail -6
    grep -E "hazard" "$R/racecheck_$on.log" | sort | uniq -c | sort -rn | head -5
    echo "hazard sites at _zero_rows_from: $(grep -c '_zero_rows_from' "$R/racecheck_$on.log")"
  done
}
# gpu_tests NAME SECONDS PYTEST_ARGS...: pytest on the GPU (-rfE, short tracebacks),
# the log in $R/NAME.log ending with the exit status, its last lines printed.
gpu_tests() {
  local name=$1 limit=$2; shift 2
  FLASHATTN_TRITON_TEST_DEVICE=cuda timeout -k 5 "$limit" python3 -m pytest -q -p no:cacheprovider -rfE \
    --tb=short "$@" > "$R/$name.log" 2>&1
  echo "rc=$?" >> "$R/$name.log"; el "$name"; tail -4 "$R/$name.log" | cut -c1-300
}
# probe_reps SECONDS PROBE_ARGS...: hopper_bwd_probe.py twice (two repeats), into
# $R/rep1 and $R/rep2 (hopper_bwd_probe.json, log.txt); read them with
# benchmarks/rules.py's load_reps.
probe_reps() {
  local limit=$1 i; shift
  for i in 1 2; do
    mkdir -p "$R/rep$i"
    timeout -k 5 "$limit" python3 benchmarks/hopper_bwd_probe.py "$@" --out "$R/rep$i" > "$R/rep$i/log.txt" 2>&1
    echo "rc=$?" >> "$R/rep$i/log.txt"; el "rep$i"
  done
}
# reps_verdict WANT_ROWS ROW_MIN GEO_MIN "VARIANT=>CHANGE"...: rules.reps_rule_verdict over the two
# probe_reps repeats in $R with $R/tests.log (the tests must have passed), each candidate VARIANT
# mapped to the change it makes; printed and written to $OUT/verdict.txt.
reps_verdict() {
  python3 - "$R" "$@" <<'PY' | tee "$OUT/verdict.txt"
import sys
sys.path.insert(0, "benchmarks")
from rules import reps_rule_verdict
r, rows, row_min, geo_min, *pairs = sys.argv[1:]
reps_rule_verdict(r, dict(p.split("=>", 1) for p in pairs), int(rows), float(row_min), float(geo_min), "tests.log")
PY
}
# dropout_probe_reps VARIANTS: probe_reps of the dropout backward rows (p = 0.1; T_PROBE seconds, REP
# reps): causal (B, Hq, Hkv, N, d) (8,16,16,2048,128), (4,16,16,4096,128), (2,16,4,4096,128),
# (2,16,16,8192,128), (8,32,32,2048,64), (4,32,32,4096,64), (4,32,8,4096,64), (2,32,32,8192,64);
# non-causal (8,16,16,2048,128), (2,16,16,8192,128), (8,32,32,2048,64), (2,32,32,8192,64).
dropout_probe_reps() {
  local rows="8,16,16,2048,128,1;4,16,16,4096,128,1;2,16,4,4096,128,1;2,16,16,8192,128,1"
  rows="$rows;8,32,32,2048,64,1;4,32,32,4096,64,1;4,32,8,4096,64,1;2,32,32,8192,64,1"
  rows="$rows;8,16,16,2048,128,0;2,16,16,8192,128,0;8,32,32,2048,64,0;2,32,32,8192,64,0"
  probe_reps ${T_PROBE:-150} --head-dims none --gqa "$rows" --dropout 0.1 --variants "$1" \
    --variants64 "" --variants256 "" --baselines cudnn --rep ${REP:-30}
}
# probe_alternated SECONDS RUNS A B PROBE_ARGS...: hopper_bwd_probe.py RUNS times, into
# $R/rep1 .. $R/repRUNS, with --variants "A,B" in odd runs and "B,A" in even ones (a
# variant's place in the order moved the timing by up to 6 % in session 30).
probe_alternated() {
  local limit=$1 runs=$2 a=$3 b=$4 i v; shift 4
  for i in $(seq 1 "$runs"); do
    mkdir -p "$R/rep$i"
    if [ $((i % 2)) = 1 ]; then v="$a,$b"; else v="$b,$a"; fi
    timeout -k 5 "$limit" python3 benchmarks/hopper_bwd_probe.py --variants "$v" "$@" --out "$R/rep$i" \
      > "$R/rep$i/log.txt" 2>&1
    echo "rc=$?" >> "$R/rep$i/log.txt"; el "rep$i"
  done
}
# run_each NAME:SCRIPT...: each benchmarks/SCRIPT.sh with OUT=/tmp/NAME (its last lines
# printed), then its /tmp/NAME/results.tgz (and verdict.txt, if any) copied to
# $OUT/NAME.tgz (NAME_verdict.txt): one file per script, as the device returns at most 8.
run_each() {
  local s n f
  for s in "$@"; do
    n=${s%%:*}; s=${s#*:}
    echo "== $s"
    rm -rf "/tmp/$n"
    f="benchmarks/$s.sh"; [ -f "$f" ] || f="benchmarks/history/$s.sh"  # (a decided run's script)
    OUT="/tmp/$n" bash "$f" 2>&1 | tail -${TAIL:-60} | cut -c1-400
    cp "/tmp/$n/results.tgz" "$OUT/$n.tgz" 2>/dev/null || echo "no results.tgz from $s"
    cp "/tmp/$n/verdict.txt" "$OUT/${n}_verdict.txt" 2>/dev/null
    el "$n"
  done
}
# fwd_probe_ab CORRECT_VARIANT VARIANTS ROWS BASELINES: hopper_fwd_probe.py's correctness stage
# for CORRECT_VARIANT at d = 64 ($R/correct.log; T_CORRECT), then its bench stage of VARIANTS on
# ROWS with BASELINES twice, in fresh processes ($R/ab1.log, $R/ab2.log; T_AB1, T_AB2); read them
# with benchmarks/rules.py's probe_correct and fwd_probe_records.
fwd_probe_ab() {
  local rep
  timeout -k 5 ${T_CORRECT:-150} python3 benchmarks/hopper_fwd_probe.py --stage correct --variant "$1" \
    --dims 64 > "$R/correct.log" 2>&1
  echo "rc=$?" >> "$R/correct.log"; el correct; grep RESULT "$R/correct.log" | cut -c1-300
  for rep in 1 2; do
    timeout -k 5 $([ $rep = 1 ] && echo ${T_AB1:-170} || echo ${T_AB2:-100}) python3 benchmarks/hopper_fwd_probe.py \
      --stage bench --variants "$2" --rows "$3" --baselines "$4" > "$R/ab$rep.log" 2>&1
    echo "rc=$?" >> "$R/ab$rep.log"; el "ab$rep"
  done
}
# sinks_rounds: the GPU tests of the sinks fold with FLASHATTN_TRITON_HOPPER_SINKS=1
# (tests_sinks.log), then bench_variants.py --only sinks --no-peer at $SINKS_SHAPES with the
# switch 0 and 1 in separate processes, 3 rounds ($R/bench_ROUND_SWITCH.log; rules.switch_rounds
# reads them); a round does not start after T_STOP seconds of the call.
SINKS_SHAPES="2,4096,16,4,128,1;2,4096,64,8,64,1"
sinks_rounds() {
  local round sw
  FLASHATTN_TRITON_HOPPER_SINKS=1 gpu_tests tests_sinks ${T_TESTS:-200} -n 4 tests/test_hopper.py \
    tests/test_variants.py tests/test_kvcache.py -k "sinks or combine"
  for round in 1 2 3; do
    [ $(( $(date +%s) - t0 )) -gt ${T_STOP:-440} ] && break
    for sw in 0 1; do
      FLASHATTN_TRITON_HOPPER_SINKS=$sw timeout -k 5 ${T_BENCH:-90} python3 benchmarks/bench_variants.py \
        --only sinks --no-peer --shapes "$SINKS_SHAPES" --rep ${REP:-50} --out "$R/bench_${round}_$sw" \
        > "$R/bench_${round}_$sw.log" 2>&1
      echo "rc=$?" >> "$R/bench_${round}_$sw.log"
    done
    el "round $round"
  done
}
# flex_warm DTYPE MODES HEAD_DIMS...: FlexAttention's compiles of bench_attention.py's --full rows
# (every config, --flex-all) in untimed processes, one per (head dim, causal), side by side (Inductor's
# and Triton's on-disk caches keep them for the timed run); T_WARM seconds each, logs $R/warm_<d>_<c>.log.
flex_warm() {
  local dtype=$1 modes=$2 d c pids=(); shift 2
  for d in "$@"; do
    for c in yes no; do
      timeout -k 5 ${T_WARM:-100} python3 benchmarks/bench_attention.py --full --modes "$modes" --dtype "$dtype" \
        --providers flex --flex-all --head-dims $d --causal $c --warmup 1 --rep 1 --no-progress --no-plot \
        --out "/tmp/flexwarm_${d}_$c" > "$R/warm_${d}_$c.log" 2>&1 &
      pids+=($!)
    done
  done
  for d in "${pids[@]}"; do wait "$d"; done; el warm
}
# decode_reps VARIANTS BENCH_ARGS...: bench_decode.py twice (processes rep1, rep2; the comma list
# of decode variants in the second reversed), --peers "" --copy-gb 1 --reps 30, T_BENCH seconds a
# process, stopping new shapes after STOP; results in $R/repN/bench_decode.json, logs $R/repN.log.
decode_reps() {
  local vs=$1 i order; shift
  for i in 1 2; do
    order=$vs; [ $i = 2 ] && order=$(tr ',' '\n' <<< "$vs" | tac | paste -sd, -)
    timeout -k 5 ${T_BENCH:-110} python3 benchmarks/bench_decode.py "$@" --peers "" --variants "$order" \
      --copy-gb 1 --reps 30 --max-seconds ${STOP:-95} --out "$R/rep$i" > "$R/rep$i.log" 2>&1
    echo "rc=$?" >> "$R/rep$i.log"; el "rep$i"
  done
}
# variant_decode_tables: bench_variants (the table, no sweep, 30 repetitions) into $R/bench and
# bench_decode (90 s) into $R/decode, each with its log ending with the exit status.
variant_decode_tables() {
  timeout -k 5 200 python3 benchmarks/bench_variants.py --skip-sweep --rep 30 --out "$R/bench" > "$R/bench_variants.log" 2>&1
  echo "rc=$?" >> "$R/bench_variants.log"; el bench_variants
  timeout -k 5 130 python3 benchmarks/bench_decode.py --out "$R/decode" --max-seconds 90 > "$R/bench_decode.log" 2>&1
  echo "rc=$?" >> "$R/bench_decode.log"; el bench_decode
}
# varlen_tables D...: bench_varlen.py (--batches 2) at each head dim D into $R/varlen_dD, its
# per-seed rows printed.
varlen_tables() {
  local d
  for d in "$@"; do
    timeout -k 5 100 python3 benchmarks/bench_varlen.py --batches 2 --head-dim "$d" --out "$R/varlen_d$d" \
      > "$R/varlen_d$d.log" 2>&1
    echo "rc=$?" >> "$R/varlen_d$d.log"; el "varlen d$d"
    sed -n '/^| seed/,/^$/p' "$R/varlen_d$d/bench_varlen.md" | grep -v -e '^|---' -e '^| seed' | cut -d'|' -f2-9
  done
}
# decode_tests: the decode GPU tests ($R/kvcache.log, T_KV seconds).
decode_tests() {
  gpu_tests kvcache ${T_KV:-200} -n 4 tests/test_kvcache.py tests/test_kvcache_chunk.py
}
# decode_table: bench_decode.py's issue 11 table at the defaults ($R/decode/, T_TABLE seconds), its
# short table printed.
decode_table() {
  timeout -k 5 ${T_TABLE:-330} python3 benchmarks/bench_decode.py --max-seconds 300 --out "$R/decode" \
    > "$R/decode.log" 2>&1
  echo "rc=$?" >> "$R/decode.log"; el decode
  sed -n '/short:begin/,/short:end/p' "$R/decode/bench_decode.md" | cut -c1-600
}
# decode_tests_and_table: both, in that order.
decode_tests_and_table() {
  decode_tests
  decode_table
}
# order_reps NAME SECONDS A B BENCH_DECODE_ARGS...: bench_decode.py twice, timing the variants A
# then B in the first repeat and B then A in the second, into $R/NAME_rep1 and $R/NAME_rep2.
order_reps() {
  local name=$1 limit=$2 a=$3 b=$4 rep order; shift 4
  for rep in 1 2; do
    order="$a,$b"; [ "$rep" = 2 ] && order="$b,$a"
    timeout -k 5 "$limit" python3 benchmarks/bench_decode.py "$@" --variants "$order" \
      --out "$R/${name}_rep$rep" > "$R/${name}_rep$rep.log" 2>&1
    echo "rc=$?" >> "$R/${name}_rep$rep.log"; el "${name}_rep$rep"
  done
}
