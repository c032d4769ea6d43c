#!/usr/bin/env bash
# Hopper forward, DYNAMIC tile scheduler (persistent grid, tiles claimed from
# an atomic counter, longest first when causal): one single-H200 call, under
# 4 minutes.
#   1. hopper_fwd_probe.py (budget 150 s): correctness against float64 of the
#      default, persistent and dynamic variants, and dynamic on 7 or 5
#      programs (every program claims several tiles: ping-pong off, 1 and 3
#      consumers) -- ragged N with batch > 1, GQA, causal bottom-right and
#      top-left, Nq > Nk with key-less rows, Nq = 1, packed and padded views;
#      then TFLOP/s of default / persistent / dynamic next to SDPA cuDNN in
#      one process (bf16, B*N = 16k tokens, H = 2048/d, d 64/128/256 x N
#      2k/8k x causal or not) and the decision ratios (dynamic / default,
#      dynamic / persistent);
#   2. tests/test_hopper.py -k dynamic (GPU tests of the switch: every case of
#      test_matches_reference on the real grid and on 7 programs, every
#      schedule switch on 5 programs, N = 4k, repeated calls, two streams at
#      once and CUDA graph replays) in the time left.
# Results: $OUT/r (probe/hopper_probe.{log,jsonl}, probe.log, tests.log, env.txt).
#
# Decision rule (kernels/hopper/fwd.py DYNAMIC_DEFAULT, per head dim and mask):
# only if every correctness case and GPU test passed, turn DYNAMIC on for
# (d, causal) where "dynamic / default" is >= 1.02 at N = 2k and >= 1.00 at
# N = 8k (at d = 128 causal the default is already the static persistent
# grid, so that ratio is dynamic / persistent); leave it off elsewhere (at
# not-causal all tiles cost the same and the model expects no gain).  If
# dynamic beats persistent but not the default (d = 64, 256 causal), record
# it in docs/hopper.md and leave both off.
set -u -o pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
OUT="${OUT:-/tmp/out}"; R="$OUT/r"; mkdir -p "$R"
[ -d .hopper_cache ] && export TRITON_CACHE_DIR="$PWD/.hopper_cache"
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
left() { local l=$(( ${END:-230} - ($(date +%s) - t0) )); [ $l -lt 20 ] && l=20; echo $l; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader > "$R/env.txt" 2>&1
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" >> "$R/env.txt"
git log -1 --format=%H >> "$R/env.txt" 2>/dev/null
cat "$R/env.txt"

VARIANTS=default,persistent,dynamic,dynamic_g7,dynamic_g5_nopp,dynamic_g5_nc1,dynamic_g5_nc3
timeout -k 5 ${T_PROBE:-160} python3 benchmarks/hopper_fwd_probe.py --budget ${B_PROBE:-150} --out "$R/probe" \
  --only $VARIANTS --rows grid --baselines sdpa:cudnn --no-memcheck > "$R/probe.log" 2>&1
echo "rc=$?" >> "$R/probe.log"; el probe
grep -E "^correctness|^FAIL|^Triton cache|rc=" "$R/probe.log" | cut -c1-300
sed -n '/^bf16 forward TFLOP/,$p' "$R/probe.log" | cut -c1-300

FLASHATTN_TRITON_TEST_DEVICE=cuda timeout -k 5 $(left) python3 -m pytest -q -p no:cacheprovider -rfE --tb=line \
  -n 6 tests/test_hopper.py -k "dynamic and not fake_driver" > "$R/tests.log" 2>&1
echo "rc=$?" >> "$R/tests.log"; el tests
grep -E "FAILED|ERROR|passed|failed|rc=" "$R/tests.log" | cut -c1-300 | tail -25
tar -C "$OUT" -czf "$OUT/results.tgz" r
