#!/usr/bin/env bash
# One device call for the dropout mask (8 keep decisions per Philox call), about 5 minutes:
#   1. the dropout tests compiled on the GPU (the CUDA-graph one alone first: a
#      failure there would leave the CUDA generator in capture state for the
#      rest of a worker), with the gpu-marked realistic sizes;
#   2. bench_variants.py, plain and dropout rows only (bf16, B=2, N=4096,
#      Hq=16, Hkv=4, d=128, causal, p=0.1, against SDPA);
#   3. (TUNE=0 skips) tune.py for the dropout tag at that shape, merged into a
#      copy of the committed table ($OUT/sm90.json, to commit if it helps), then
#      the dropout row again with that table ($OUT/tuned/).
# Results (7 files): $OUT/run.log, bench_variants.{json,md}, sm90.json,
# tune_dropout.json, tuned/bench_variants.{json,md}.
#
#     OUT=/tmp/out bash benchmarks/history/gpu_dropout.sh
set -u -o pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1 MPLBACKEND=Agg
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"; LOG="$OUT/run.log"
PY="python3 -m pytest -q -p no:cacheprovider -rfE --tb=short"
TESTS="tests/test_variants.py tests/test_backward.py"
python3 -c "import torch, triton; print(torch.__version__, triton.__version__, torch.cuda.get_device_name())" | tee "$LOG"
git log -1 --format='commit %h %s' 2>/dev/null | tee -a "$LOG"

echo "== dropout tests: CUDA-graph capture alone" | tee -a "$LOG"
FLASHATTN_TRITON_TEST_DEVICE=cuda timeout -k 5 ${T1:-60} $PY \
  tests/test_variants.py::test_gpu_dropout_cuda_graph_fresh_mask 2>&1 | tail -20 >> "$LOG"
echo "== dropout tests (-n ${NTEST:-4})" | tee -a "$LOG"
FLASHATTN_TRITON_TEST_DEVICE=cuda timeout -k 5 ${T2:-150} $PY -n ${NTEST:-4} \
  -k "(dropout or fused_equals_separate_with_variants) and not cuda_graph" $TESTS 2>&1 | tail -40 >> "$LOG"

echo "== bench_variants --only plain,dropout" | tee -a "$LOG"
timeout -k 5 ${T3:-100} python3 benchmarks/bench_variants.py --only "plain,dropout" --out "$OUT" 2>&1 \
  | tail -20 >> "$LOG"
echo "bench_variants rc=$?" >> "$LOG"

if [ "${TUNE:-1}" = "1" ]; then
  echo "== tune.py --variants dropout (d=128, causal, N=4096)" | tee -a "$LOG"
  cp flashattn_triton/kernels/configs/sm90.json "$OUT/sm90.json"
  timeout -k 5 ${T4:-150} python3 benchmarks/tune.py --variants dropout --causal causal --head-dims 128 \
    --kernels FWD,BWD_DKDV,BWD_DQ --seqlens 4096 --jobs ${JOBS:-12} --merge \
    --out "$OUT/sm90.json" --log "$OUT/tune_dropout.json" 2>&1 | tail -20 >> "$LOG"
  echo "tune rc=$?" >> "$LOG"
  # the library reads the committed path: this machine's copy only
  cp "$OUT/sm90.json" flashattn_triton/kernels/configs/sm90.json
  echo "== bench_variants --only dropout with the tuned table" | tee -a "$LOG"
  timeout -k 5 ${T5:-70} python3 benchmarks/bench_variants.py --only dropout --out "$OUT/tuned" 2>&1 \
    | tail -12 >> "$LOG"
  echo "tuned bench rc=$?" >> "$LOG"
fi
tail -60 "$LOG"
