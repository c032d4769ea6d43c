#!/usr/bin/env bash
# Device call (issue 6, host overhead): the call plans and the Triton 3.6 direct
# launch with cached TMA descriptors on the H200:
#   1. profile_host.py --check: every case with the fast paths off (full path,
#      Triton's launch) and on (plan made, replayed, replayed at other addresses),
#      outputs and gradients bitwise equal; cases sharing shapes with another
#      (strides, dtype, requires_grad, return_lse) must not take its plan; how
#      many repeated calls replayed (expected: all); the backward prefetch;
#   2. the GPU tests of the touched code (plans, fast path/replay, op layer with
#      CUDA-graph capture and torch.compile, Hopper forward, validation, the
#      deterministic backward);
#   3. profile_host.py --compare-plans: host time per call by section, with the
#      plans on and off (the tiny shape; torch SDPA rows for the target);
#   4. bench_overhead.py's host-overhead rows (its "[fast launch off, plans off]"
#      rows take the full path, as FLASHATTN_TRITON_FAST_LAUNCH=0; the run of
#      session 9 call 4, at 5e7200d, had "[fast launch off]" rows with the plans on).
# Two parts of about 5 minutes each (a device call may last 10):
#   PART=1 bash benchmarks/history/gpu_host_plans.sh     # 1 and 2
#   PART=2 bash benchmarks/history/gpu_host_plans.sh     # 3 and 4
#   bash benchmarks/history/gpu_host_plans.sh            # both
# Results in $OUT (default /tmp/out); copy them to benchmarks/results/h200/<session>/.
set -u -o pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
PART="${PART:-all}"
export GIT_COMMIT="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
python3 -c "import torch, triton; print(torch.__version__, triton.__version__, torch.cuda.get_device_name())" \
  | tee "$OUT/env.txt"
t0=$(date +%s)
if [ "$PART" != 2 ]; then
  timeout -k 5 ${TC:-200} python3 benchmarks/profile_host.py --check > "$OUT/profile_host_check.log" 2>&1
  echo "check rc=$?" >> "$OUT/profile_host_check.log"
  FLASHATTN_TRITON_TEST_DEVICE=cuda timeout -k 5 ${TT:-330} python3 -m pytest -q -p no:cacheprovider -rfE --tb=short \
    -n 4 -k "not randomized_differential" tests/test_plans.py tests/test_fastlaunch.py tests/test_ops.py \
    tests/test_hopper.py tests/test_validation.py > "$OUT/tests_host.log" 2>&1
  echo "tests rc=$?" >> "$OUT/tests_host.log"
  grep -E "MISMATCH|MISSED|replays:|rc=" "$OUT/profile_host_check.log"
  echo "$(grep -c ': ok' "$OUT/profile_host_check.log") checks ok"
  tail -4 "$OUT/tests_host.log"
fi
if [ "$PART" != 1 ]; then
  timeout -k 5 ${TP:-200} python3 benchmarks/profile_host.py --compare-plans --out "$OUT" > "$OUT/profile_host.log" 2>&1
  echo "profile rc=$?" >> "$OUT/profile_host.log"
  timeout -k 5 ${TB:-120} python3 benchmarks/bench_overhead.py --out "$OUT" --skip-first-call \
    > "$OUT/bench_overhead.log" 2>&1
  echo "bench_overhead rc=$?" >> "$OUT/bench_overhead.log"
  grep -E "us/call \(|rc=" "$OUT/profile_host.log"
  tail -16 "$OUT/bench_overhead.log"
fi
echo "total $(( $(date +%s) - t0 )) s"
