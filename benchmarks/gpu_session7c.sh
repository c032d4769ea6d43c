#!/usr/bin/env bash
# Device call: GPU tests of the fused backward, the dropout RNG and the host
# fast path (names of failures kept), the variant benchmark after the
# variant tuning, dropout tuning, the first-call / host-overhead benchmark and
# the varlen benchmark.
set -u -o pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1 MPLBACKEND=Agg
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT/r"
python3 -c "import torch, triton; print(torch.__version__, triton.__version__, torch.cuda.get_device_name())" | tee "$OUT/r/env.txt"
git log -1 --format='commit %h %s' 2>/dev/null | tee -a "$OUT/r/env.txt"
T=flashattn_triton/kernels/configs/sm90.json
( timeout -k 5 ${TO:-80} python3 benchmarks/bench_overhead.py --out "$OUT/r" > "$OUT/r/bench_overhead.log" 2>&1; echo "overhead rc=$?" >> "$OUT/r/bench_overhead.log" )
( FLASHATTN_TRITON_TEST_DEVICE=cuda timeout -k 5 ${TT:-200} python3 -m pytest -v -p no:cacheprovider -rfE --tb=line -n 14 -m "not gpu" \
  --deselect tests/test_ops.py::test_cuda_graph_capture \
  tests/test_backward.py tests/test_variants.py tests/test_fastlaunch.py tests/test_ops.py tests/test_attention.py \
  2>&1 | grep -E "FAILED|ERROR|passed|failed|^E |Error" | head -80 > "$OUT/r/tests.log"; echo "tests rc=$?" >> "$OUT/r/tests.log" )
( timeout -k 5 ${TU:-70} python3 benchmarks/tune.py --out $T --merge --variants dropout --causal causal --head-dims 128 \
  --kernels FWD,BWD_DKDV,BWD_DQ --seqlens 4096 > "$OUT/r/tune_dropout.log" 2>&1; echo "tune rc=$?" >> "$OUT/r/tune_dropout.log" )
cp $T "$OUT/r/sm90.json"
( timeout -k 5 ${TB:-150} python3 benchmarks/bench_variants.py --out "$OUT/r" > "$OUT/r/bench_variants.log" 2>&1; echo "variants rc=$?" >> "$OUT/r/bench_variants.log" )
( timeout -k 5 ${TV:-60} python3 benchmarks/bench_varlen.py --out "$OUT/r" --batches 1 > "$OUT/r/bench_varlen.log" 2>&1; echo "varlen rc=$?" >> "$OUT/r/bench_varlen.log" )
tar -C "$OUT" -czf "$OUT/results.tgz" r
cat "$OUT/r/tests.log" | tail -30; grep -E "rc=" "$OUT"/r/*.log; tail -12 "$OUT/r/bench_overhead.md" 2>/dev/null
