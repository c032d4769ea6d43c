#!/usr/bin/env bash
# One device call: the GPU test suite (both tiers where they exist), then the
# offline tuning of the config table.  Results under $OUT:
#   tests.log  sm90.json (the table)  tune_log.json  tune.out
set -u -o pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 FLASHATTN_TRITON_TEST_DEVICE=cuda
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
python3 -c "import torch, triton; print(torch.__version__, triton.__version__, torch.cuda.get_device_name())" | tee "$OUT/tests.log"
git log -1 --format='commit %H' 2>/dev/null | tee -a "$OUT/tests.log"
TESTS="${TESTS:-tests/test_attention.py tests/test_varlen.py tests/test_ops.py tests/test_validation.py tests/test_gpu.py tests/test_configs.py}"
timeout -k 10 "${TESTS_TIMEOUT_S:-240}" python3 -m pytest -q -x -n "${JOBS:-12}" -p no:cacheprovider $TESTS 2>&1 | tail -40 | tee -a "$OUT/tests.log"
if [ "${SKIP_TUNE:-0}" != 1 ]; then
  timeout -k 10 "${TUNE_TIMEOUT_S:-300}" python3 benchmarks/tune.py --out "$OUT/sm90.json" --log "$OUT/tune_log.json" \
    --jobs 14 ${TUNE_ARGS:-} 2>&1 | tee "$OUT/tune.out" | tail -60
fi
