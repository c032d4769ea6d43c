#!/usr/bin/env bash
# Hopper forward, persistent grid (issue 7): one single-H200 call, under 5 minutes.
#   1. hopper_fwd_probe.py (budget 190 s): correctness of the default, the
#      persistent variants (real grid, and 5 or 7 programs so that every
#      program runs several work tiles: ping-pong off, PAIRED, 1 and 3
#      consumers), nc3 and nc3_persistent at d = 64, against float64 (ragged N
#      with batch > 1, GQA, causal bottom-right and top-left, Nq > Nk with
#      key-less rows, Nq = 1, packed and padded views); compute-sanitizer on
#      six cases (two persistent); then TFLOP/s of default / persistent /
#      nc3 / nc3_persistent next to SDPA cuDNN in one process (bf16, B*N =
#      16k tokens, H = 2048/d, d 64/128/256 x N 2k/8k x causal or not) and the
#      ratios that decide the defaults;
#   2. tests/test_hopper.py -k persistent (GPU tests of the switch) in the
#      time left.
# Results: $OUT/r (probe/hopper_probe.{log,jsonl}, probe.log, tests.log, env.txt).
set -u -o pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
OUT="${OUT:-/tmp/out}"; R="$OUT/r"; mkdir -p "$R"
[ -d .hopper_cache ] && export TRITON_CACHE_DIR="$PWD/.hopper_cache"
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
left() { local l=$(( ${END:-285} - ($(date +%s) - t0) )); [ $l -lt 20 ] && l=20; echo $l; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader > "$R/env.txt" 2>&1
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" >> "$R/env.txt"
git log -1 --format=%H >> "$R/env.txt" 2>/dev/null
cat "$R/env.txt"

VARIANTS=default,persistent,nc3,nc3_persistent,persistent_g7,persistent_g7_nopp,persistent_g7_paired
VARIANTS=$VARIANTS,persistent_g5_nc1,persistent_g5_nc3
timeout -k 5 ${T_PROBE:-205} python3 benchmarks/hopper_fwd_probe.py --budget ${B_PROBE:-190} --out "$R/probe" \
  --only $VARIANTS --rows grid --baselines sdpa:cudnn > "$R/probe.log" 2>&1
echo "rc=$?" >> "$R/probe.log"; el probe
grep -E "^correctness|^FAIL|^memcheck|^Triton cache|rc=" "$R/probe.log" | cut -c1-300
sed -n '/^bf16 forward TFLOP/,$p' "$R/probe.log" | cut -c1-300

FLASHATTN_TRITON_TEST_DEVICE=cuda timeout -k 5 $(left) python3 -m pytest -q -p no:cacheprovider -rfE --tb=line \
  -n 6 tests/test_hopper.py -k persistent > "$R/tests.log" 2>&1
echo "rc=$?" >> "$R/tests.log"; el tests
grep -E "FAILED|ERROR|passed|failed|rc=" "$R/tests.log" | cut -c1-300 | tail -25
tar -C "$OUT" -czf "$OUT/results.tgz" r
