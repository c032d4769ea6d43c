#!/usr/bin/env bash
# Device call (the session's last): the host fast path checked on the GPU
# (bitwise equal with it off), GPU tests of the fast path, the fused backward,
# the dropout RNG, the Hopper forward and the op layer (failure names kept),
# the first-call / host-overhead benchmark, and the variant benchmark after
# this session's kernel and config changes.
set -u -o pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1 MPLBACKEND=Agg
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT/r"
export GIT_COMMIT="$(git log -1 --format=%s | cut -d' ' -f1)"
python3 -c "import torch, triton; print(torch.__version__, triton.__version__, torch.cuda.get_device_name())" | tee "$OUT/r/env.txt"
git log -1 --format='%s' 2>/dev/null | cut -c1-100 | tee -a "$OUT/r/env.txt"
( timeout -k 5 ${TC:-90} python3 benchmarks/profile_host.py --check > "$OUT/r/profile_host_check.log" 2>&1; echo "check rc=$?" >> "$OUT/r/profile_host_check.log" )
export FLASHATTN_TRITON_TEST_DEVICE=cuda
PY="python3 -m pytest -p no:cacheprovider -rfE --tb=line"
( timeout -k 5 40 $PY -q tests/test_ops.py::test_cuda_graph_capture > "$OUT/r/tests_graph.log" 2>&1; echo "graph rc=$?" >> "$OUT/r/tests_graph.log" )
( timeout -k 5 ${TT:-190} $PY -v -n 14 -m "not gpu" -k "not randomized_differential" --deselect tests/test_ops.py::test_cuda_graph_capture \
  tests/test_fastlaunch.py tests/test_backward.py tests/test_variants.py tests/test_hopper.py tests/test_ops.py \
  2>&1 | grep -E "FAILED|ERROR|passed|failed|^E " | head -60 > "$OUT/r/tests.log"; echo "tests rc=$?" >> "$OUT/r/tests.log" )
unset FLASHATTN_TRITON_TEST_DEVICE
( timeout -k 5 ${TO:-90} python3 benchmarks/bench_overhead.py --out "$OUT/r" > "$OUT/r/bench_overhead.log" 2>&1; echo "overhead rc=$?" >> "$OUT/r/bench_overhead.log" )
( timeout -k 5 ${TB:-150} python3 benchmarks/bench_variants.py --out "$OUT/r" > "$OUT/r/bench_variants.log" 2>&1; echo "variants rc=$?" >> "$OUT/r/bench_variants.log" )
tar -C "$OUT" -czf "$OUT/results.tgz" r
grep -E ": ok|MISMATCH|MISSED|rc=" "$OUT/r/profile_host_check.log" | cut -c1-160 | tail -12
tail -3 "$OUT/r/tests_graph.log"; tail -25 "$OUT/r/tests.log"; grep -h "rc=" "$OUT"/r/*.log
cat "$OUT/r/bench_overhead.md" 2>/dev/null | tail -16
