#!/usr/bin/env bash
# Backward plans (ops.BwdPlan, switch ops.BWD_PLANS; on since this run, session 19 call 1): the backward of a
# planned flash_attn_func call replays its recorded launches (portable backward at short N;
# docs/performance.md, "Backward plans") instead of running the op layer's host code.  One
# H200, about 2.5 minutes under the timeouts:
#   1. GPU tests (-n 12, 90 s): tests/test_plans.py but its fake-driver test (among them the
#      backward plans' gradients against float64 over repeated calls with fresh inputs, bit for
#      bit the backward without plans, and the replay taken on CUDA; the Hopper backward's
#      replay with DQ_CONVERT_KERNEL) and tests/test_backward.py -k "not slow";
#   2. timing (benchmarks/bench_bwd_plan.py, 80 s): out.backward(dout, retain_graph=True) as
#      triton.testing.do_bench times it (grad_to_none=[q, k, v]), ops.BWD_PLANS on ("replay")
#      against off, alternated over 3 rounds, bf16, B*N = 16k, H = 2048/d, d 64 / 128,
#      N 512 / 1024, causal and not (8 rows; N = 1024 not causal takes the Hopper backward,
#      not replayed by default: expected ~1.0); ratio = off / replay; also the host time per
#      backward call (40 calls, no synchronization).
# Rule, fixed before the run: turn the switch on (BWD_PLANS = True) if the tests pass (rc=0)
# and no row has ratio below 0.98; otherwise it stays off and the rows are written up.
# Fewer than 8 rows measured (the timing cut short, e.g. by cold compiles) with the tests
# passed and no measured row below 0.98: inconclusive, rerun with SKIP_TESTS=1 T_BENCH=150.
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
if [ -z "${SKIP_TESTS:-}" ]; then
gpu_tests tests_bwd_plan ${T_TESTS:-90} -n 12 tests/test_plans.py tests/test_backward.py -k "not fake and not slow"
fi
timeout -k 5 ${T_BENCH:-80} python3 benchmarks/bench_bwd_plan.py --out "$R" > "$R/bench_bwd_plan.log" 2>&1
echo "rc=$?" >> "$R/bench_bwd_plan.log"; el bench_bwd_plan; cut -c1-300 "$R/bench_bwd_plan.log" | tail -12
python3 - "$R/tests_bwd_plan.log" "$R/bench_bwd_plan.json" <<'PY' | tee "$OUT/verdict.txt"
import os, sys
sys.path.insert(0, "benchmarks")
from rules import json_rows
skipped = bool(os.environ.get("SKIP_TESTS"))  # a timing rerun: the first run's tests decide
try:
    tests_ok = skipped or open(sys.argv[1]).read().strip().splitlines()[-1] == "rc=0"
except (OSError, IndexError):
    tests_ok = False
rows = json_rows(sys.argv[2])
for r in rows:
    print(f"d={r['d']} N={r['n']} causal={r['causal']}: off/replay {r['ratio']:.3f} "
          f"({r['ms_off'] * 1e3:.0f} -> {r['ms_replay'] * 1e3:.0f} us; host {r['host_us_off']:.0f} -> "
          f"{r['host_us_replay']:.0f} us/call; recorded {r['recorded']})")
low = [r for r in rows if r["ratio"] < 0.98]
if tests_ok and not low and len(rows) < 8:
    verdict = "inconclusive (rows missing): rerun with SKIP_TESTS=1 T_BENCH=150"
else:
    verdict = "turn BWD_PLANS on (True)" if tests_ok and not low else "BWD_PLANS stays off"
print(f"tests {'skipped (SKIP_TESTS)' if skipped else 'passed' if tests_ok else 'FAILED or missing'}, "
      f"{len(rows)} of 8 rows, "
      f"{len(low)} below 0.98; RULE: {verdict}")
PY
tar -C "$OUT" -czf "$OUT/results.tgz" r
