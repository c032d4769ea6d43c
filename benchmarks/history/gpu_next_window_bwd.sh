#!/usr/bin/env bash
# The Hopper backward's sliding-window path (HAS_WINDOW in kernels/hopper/bwd.py,
# written and checked on CPU only: tests/hopper_bwd_model.py's window emulation
# and broken forms, compile_check --hopper-bwd --window) on one H200, under 4
# minutes:
#   1. GPU tests -k window (tests/test_hopper_bwd.py, -n 8): d 64/128/256, bf16
#      and fp16, causal both alignments and a left bound only, windows of 0 to
#      past N, Nq != Nk both ways, GQA / MQA, ragged N, rows and key blocks
#      that nothing sees (dK = dV = 0, dQ = 0 there), NaN-poisoned outputs and
#      sentinels past N; every buffer / schedule switch (persistent on a few
#      programs, SPLIT_D at d = 128); N = 4k; flash_attn_func's backward with
#      and without FLASHATTN_TRITON_HOPPER_WINDOW=1;
#   2. timing (hopper_bwd_probe.py --rows window, bf16, B*N = 16k tokens,
#      H = 2048/d, causal windows of 256 and 1024 at d = 64/128, N = 2k/8k):
#      the API's backward with the opt-in (the Hopper backward) against the
#      same without it (the portable backward), the kernel alone, and
#      FlexAttention's backward with the sliding-window block mask, one process.
# Rule, fixed before the run: if every window test passes and api:window
# (the Hopper backward) is >= 1.1x api:portable on every row, the backward's
# opt-in goes (_dispatch.HOPPER_BWD_WINDOW_DEFAULT = "1": left windows take
# the Hopper backward without FLASHATTN_TRITON_HOPPER_WINDOW=1, "0" still
# turns it off); on any failed test, or a row below 1.1x, the opt-in stays.
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
if [ -z "${SKIP_TESTS:-}" ]; then  # SKIP_TESTS=1: timing only (the tests ran in the suite)
gpu_tests tests_window_bwd ${T_TESTS:-150} -n 8 tests/test_hopper_bwd.py -k window
fi
timeout -k 5 ${T_BENCH:-100} python3 benchmarks/hopper_bwd_probe.py --rows window --head-dims 64,128 \
  --seqlens 2048,8192 --windows 256,1024 --out "$R" > "$R/bench_window_bwd.log" 2>&1
echo "rc=$?" >> "$R/bench_window_bwd.log"; el bench_window_bwd; cut -c1-300 "$R/bench_window_bwd.log" | tail -10
python3 - "$R/hopper_bwd_window.json" <<'PY'
import sys
sys.path.insert(0, "benchmarks")
from rules import load_reps
rows = load_reps(sys.argv[1:2])[0]
ratios = []
for r in rows:
    t = r["tflops"]
    ratio = t["api:window"] / t["api:portable"] if t.get("api:window") and t.get("api:portable") else None
    ratios.append(ratio)
    print(f"d={r['d']} N={r['n']} window={r['window']}: win/port "
          + (f"{ratio:.2f}" if ratio else "-") + f" check {r['check']}")
ok = len(rows) == 8 and all(x is not None and x >= 1.1 for x in ratios) \
    and all(r["check"].get("api:window") == "ok" for r in rows)
print("timing rule (>= 1.1x on all 8 rows, gradients ok):", "met" if ok else "NOT met",
      "(the tests' result is in tests_window_bwd.log)")
PY
tar -C "$OUT" -czf "$OUT/results.tgz" r
