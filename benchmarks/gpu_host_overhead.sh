#!/usr/bin/env bash
# Device calls (issue 6, host side): the launch fast path and the backward
# prefetch on the GPU.  Two parts, each under 10 minutes on an H200:
#   PART=1  profile_host.py --check (fast path on/off: bitwise-equal outputs and
#           gradients; the backward prefetch builds every kernel the backward
#           launches), then the GPU tests the host changes touch (Hopper
#           forward, op layer incl. CUDA-graph capture, fast path);
#   PART=2  profile_host.py (host time per call by section) and
#           bench_overhead.py --diagnose (first call cold / warm with and without
#           the prefetch, autograd pre-warmed rows, torch.profiler tables of
#           the first backward, host time per call with the fast path on / off).
#   bash benchmarks/gpu_host_overhead.sh            # both parts (~8 minutes)
#   PART=1 bash benchmarks/gpu_host_overhead.sh     # or one at a time
# Results in $OUT (default /tmp/out); copy them to benchmarks/results/h200/<session>/.
set -u -o pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
PART="${PART:-all}"
export GIT_COMMIT="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
nvidia-smi --query-gpu=name,driver_version --format=csv > "$OUT/nvidia_smi.txt" 2>&1
if [ "$PART" != 2 ]; then
  timeout -k 5 200 python3 benchmarks/profile_host.py --check > "$OUT/profile_host_check.log" 2>&1
  echo "check exit $?" >> "$OUT/profile_host_check.log"
  FLASHATTN_TRITON_TEST_DEVICE=cuda timeout -k 5 240 python3 -m pytest -q -p no:cacheprovider -rfE --tb=short -n 4 \
    -k "not randomized_differential" tests/test_hopper.py tests/test_ops.py tests/test_fastlaunch.py \
    > "$OUT/tests_host.log" 2>&1
  grep -E ": ok|MISMATCH|MISSED|exit" "$OUT/profile_host_check.log" | cut -c1-200
  tail -3 "$OUT/tests_host.log"
fi
if [ "$PART" != 1 ]; then
  timeout -k 5 120 python3 benchmarks/profile_host.py --out "$OUT" > "$OUT/profile_host.log" 2>&1
  timeout -k 5 330 python3 benchmarks/bench_overhead.py --out "$OUT" --diagnose > "$OUT/bench_overhead.log" 2>&1
  grep -E "us/call \(" "$OUT/profile_host.log"
  cat "$OUT/bench_overhead.md" 2>/dev/null || tail -20 "$OUT/bench_overhead.log"
fi
