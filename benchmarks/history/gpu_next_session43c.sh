#!/usr/bin/env bash
# Session 43, GPU tests of the host-side changes of sessions 42-43 (one H200, about 5-6 minutes):
#   1. the files those changes touch, every non-gpu-marked test compiled on the GPU (-n 8, T_MAIN s):
#      test_configs.py (every candidate config; a forced config over the shared-memory limit falls
#      back to a smaller one and computes, session 43), test_kvcache.py (rotary tables of different
#      row strides, backward error, decode plans), test_nn.py (offset / position checks),
#      test_validation.py (cu_seqlens[-1], SDPA 5-D empty), test_backward.py (fused-form refusal,
#      both backward forms), test_plans.py;
#   2. the forced portable tier on test_attention.py + test_backward.py (gpu_tests.sh's step, T_PORT s).
# No decision: pass / fail counts in $OUT/tests.log; per-test lines in $OUT/tests_main.log.
#
#     OUT=/tmp/out bash benchmarks/history/gpu_next_session43c.sh
set -u -o pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1 FLASHATTN_TRITON_TEST_DEVICE=cuda
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"; LOG="$OUT/tests.log"
python3 -c "import torch, triton; print(torch.__version__, triton.__version__, torch.cuda.get_device_name())" | tee "$LOG"
PY="python3 -m pytest -q -p no:cacheprovider -rfE"
echo "== host-change files (-n 8)" | tee -a "$LOG"
timeout -k 5 ${T_MAIN:-240} $PY -vv --tb=short -n 8 -m "not gpu" tests/test_configs.py tests/test_kvcache.py \
  tests/test_nn.py tests/test_validation.py tests/test_backward.py tests/test_plans.py 2>&1 \
  | tee "$OUT/tests_main.log" | grep -E "FAILED|ERROR|passed|failed|Timeout" | head -60 >> "$LOG"
echo "== forced portable tier: test_attention + test_backward" | tee -a "$LOG"
FLASHATTN_TRITON_BACKEND=portable timeout -k 5 ${T_PORT:-100} $PY --tb=short -n 8 -m "not gpu" \
  tests/test_attention.py tests/test_backward.py 2>&1 | tail -20 >> "$LOG"
cat "$LOG"
