#!/usr/bin/env bash
# The GPU test suite in one device call: the CUDA-graph test alone first (its
# failure would leave the CUDA generator in capture state for the rest of a
# worker), then every other test compiled on the GPU, then the realistic-size
# `gpu`-marked tests and the forced Hopper tier.  Logs go to $OUT/tests.log.
# Any -n is safe for GPU memory: the tests marked `bigmem` (dense float64
# references of many GiB) take turns on a file lock across the xdist workers
# (tests/conftest.py); -n spreads the others.
# PART=a runs the graph capture, the non-gpu tests of the kernel files ($PART_A)
# and the forced Hopper tier; PART=a1 the graph capture and the Hopper files of
# $PART_A, PART=a2 its other files and the forced Hopper tier (PART=a in two
# calls: its cold compiles no longer fit one, session 21 cut it at 86%); PART=a3
# the forced Hopper tier alone (T4 300 s: session 22 cut it at 36% after a2's
# files); PART=b
# the non-gpu tests of every other file, the gpu-marked tests and the forced
# portable tier (PART=b1: its non-gpu tests and the forced portable tier, PART=b2:
# its gpu-marked tests, T3 420 s: part b has not fitted one call since session 32;
# PART=b1's steps take T2 330 s and T5 120 s: at 260 / 90 s session 73 cut them at 89 % / 99 %);
# PART=all (default) everything: two or three device calls of
# under 10 minutes each at one commit when the whole does not fit one call.
set -u -o pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1 FLASHATTN_TRITON_TEST_DEVICE=cuda
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"; LOG="$OUT/tests.log"
[ -d .hopper_cache ] && export TRITON_CACHE_DIR="$PWD/.hopper_cache"
python3 -c "import torch, triton; print(torch.__version__, triton.__version__, torch.cuda.get_device_name())" | tee "$LOG"
git log -1 --format='commit %h %s' 2>/dev/null | tee -a "$LOG"
PART="${PART:-all}"
PART_A="tests/test_hopper.py tests/test_hopper_bwd.py tests/test_hopper_dropout.py tests/test_attention.py tests/test_backward.py tests/test_ops.py tests/test_varlen.py"
case "$PART" in
  a) FILES="$PART_A" ;;
  a1) FILES="tests/test_hopper.py tests/test_hopper_bwd.py tests/test_hopper_dropout.py" ;;
  a2) FILES="tests/test_attention.py tests/test_backward.py tests/test_ops.py tests/test_varlen.py" ;;
  a3) FILES="" ;;
  b|b1) FILES=$(ls tests/test_*.py | grep -v -x -F -f <(tr ' ' '\n' <<< "$PART_A") | tr '\n' ' ') ;;
  b2) FILES="" ;;
  *) FILES="tests/" ;;
esac
echo "part $PART: $FILES" | tee -a "$LOG"
# -q -vv: one line per test in tests_main_$PART.log ("[gwN] [ p%] PASSED / FAILED name"), so a
# step cut by its time limit still names its failures (session 38's PART=a1 showed three F's at
# 52-56 % and, cut at 60 %, no names).
PY="python3 -m pytest -q -p no:cacheprovider -rfE"
GRAPH="tests/test_ops.py::test_cuda_graph_capture"
case "$PART" in b|b1|b2|a2|a3) ;; *)
echo "== graph capture alone" | tee -a "$LOG"
timeout -k 5 ${T1:-120} $PY --tb=long $GRAPH tests/test_variants.py::test_gpu_dropout_cuda_graph_fresh_mask 2>&1 | tail -${GRAPH_TAIL:-60} >> "$LOG"
esac
if [ -n "$FILES" ]; then
echo "== every test but the gpu-marked (-n ${N1:-8})" | tee -a "$LOG"
timeout -k 5 ${T2:-$([ "$PART" = b1 ] && echo 330 || echo 260)} $PY -vv --tb=short -n ${N1:-8} -m "not gpu" --deselect $GRAPH $FILES 2>&1 | tee "$OUT/tests_main_$PART.log" | grep -E "FAILED|ERROR|passed|failed|Timeout" | head -60 >> "$LOG"
fi
if [ "$PART" = b ] || [ "$PART" = all ] || [ "$PART" = b2 ]; then
echo "== gpu-marked (-n ${N2:-2})" | tee -a "$LOG"
timeout -k 5 ${T3:-$([ "$PART" = b2 ] && echo 420 || echo 150)} $PY -vv --tb=short -n ${N2:-2} -m gpu -k "not cuda_graph" tests/ 2>&1 | tee "$OUT/tests_gpu_$PART.log" | grep -E "FAILED|ERROR|passed|failed|Timeout" | head -60 >> "$LOG"
fi
if [ "$PART" = b ] || [ "$PART" = all ] || [ "$PART" = b1 ]; then
echo "== forced portable tier: test_attention + test_backward" | tee -a "$LOG"
FLASHATTN_TRITON_BACKEND=portable timeout -k 5 ${T5:-$([ "$PART" = b1 ] && echo 120 || echo 90)} $PY --tb=short -n ${N1:-8} -m "not gpu" tests/test_attention.py tests/test_backward.py 2>&1 | tail -20 >> "$LOG"
fi
case "$PART" in b|b1|b2|a1) ;; *)
echo "== forced hopper tier: test_attention + test_hopper" | tee -a "$LOG"
FLASHATTN_TRITON_BACKEND=hopper timeout -k 5 ${T4:-$([ "$PART" = a3 ] && echo 300 || echo 60)} $PY --tb=short -n 8 -m "not gpu" tests/test_attention.py tests/test_hopper.py 2>&1 | tail -20 >> "$LOG"
esac
tail -40 "$LOG"
