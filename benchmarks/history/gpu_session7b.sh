#!/usr/bin/env bash
# Device call: GPU tests of the fused backward, the dropout RNG and the host
# fast path; offline tuning of the backward kernels (separate dK/dV, dQ and
# the fused dK/dV+dQ) for d 64/128/256; then both backward forms against
# SDPA's cuDNN and flash backends (bench_bwd_forms.py).
set -u -o pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1 MPLBACKEND=Agg
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
python3 -c "import torch, triton; print(torch.__version__, triton.__version__, torch.cuda.get_device_name())" | tee "$OUT/env.txt"
git log -1 --format='commit %h %s' 2>/dev/null | tee -a "$OUT/env.txt"
( FLASHATTN_TRITON_TEST_DEVICE=cuda timeout -k 5 ${TT:-130} python3 -m pytest -q -p no:cacheprovider -rfE --tb=short -n 12 -m "not gpu" \
  --deselect tests/test_ops.py::test_cuda_graph_capture \
  tests/test_backward.py tests/test_variants.py tests/test_fastlaunch.py tests/test_attention.py tests/test_ops.py tests/test_configs.py \
  > "$OUT/tests.log" 2>&1; echo "tests rc=$?" >> "$OUT/tests.log" )
T=flashattn_triton/kernels/configs/sm90.json
( timeout -k 5 ${TU:-260} python3 benchmarks/tune.py --out $T --merge --kernels BWD_DKDV,BWD_FUSED,BWD_DQ \
   --head-dims 64,128,256 --seqlens 1024,4096,16384 --log "$OUT/tune_bwd.json" > "$OUT/tune.log" 2>&1; echo "tune rc=$?" >> "$OUT/tune.log" )
cp $T "$OUT/sm90.json"
( timeout -k 5 ${TB:-130} python3 benchmarks/bench_bwd_forms.py --out "$OUT" > "$OUT/bench_bwd_forms.log" 2>&1; echo "bench rc=$?" >> "$OUT/bench_bwd_forms.log" )
tail -5 "$OUT/tests.log"; grep -E "compiled|wrote|rc=" "$OUT/tune.log"; cat "$OUT/bench_bwd_forms.log" | grep -v Warn | tail -14
