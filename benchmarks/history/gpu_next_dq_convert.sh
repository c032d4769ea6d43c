#!/usr/bin/env bash
# The one-pass float32 -> dq conversion kernel (kernels/bwd.py convert_dq / _bwd_dq_convert, switch
# DQ_CONVERT_KERNEL, env FLASHATTN_TRITON_DQ_CONVERT) in place of torch's strided copy at the end of
# the Hopper backward (session 17 ncu: 94 us at 42% DRAM for ~190 MB at B*N = 16k, d = 128, H = 16;
# cuDNN's convert_dq_to_16bits 54 us) and of the portable fused form's multiply-then-copy.
# One H200, about 3.5 min:
#   1. GPU tests with FLASHATTN_TRITON_DQ_CONVERT=1: tests/test_dq_convert.py (the kernel bit for bit
#      against the torch expression, the fused backward against float64), tests/test_hopper_bwd.py's
#      dq_convert tests (dq bit for bit torch's copy of the same buffer, dk / dv the switch-off bits),
#      its test_matches_reference at d = 64 / 128 (mbarrier level) and its prefetch test (compile-only
#      on meta tensors), tests/test_backward.py's fused-form tests;
#   2. timing, two repeats, fresh process each: "default" (torch's copy) against
#      pmod:DQ_CONVERT_KERNEL=True, through the cached plans (hopper_attention_backward, the
#      buffer's zeroing and conversion included), d 64/128, N 2k/4k/8k, causal and not, bf16,
#      B*N = 16k, H = 2048/d (12 rows), with cuDNN.
# Rule, fixed before the run: adopt (DQ_CONVERT_KERNEL = True for both tiers) if the tests pass,
# every check is ok, and in each repeat new/default has a geometric mean >= 1.01 over the 12 rows
# with no row below 0.99; otherwise the switch stays off.
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
NEW="pmod:DQ_CONVERT_KERNEL=True"
if [ -z "${SKIP_TESTS:-}" ]; then
( export FLASHATTN_TRITON_DQ_CONVERT=1
  gpu_tests tests_convert ${T_TESTS:-120} -n 8 tests/test_dq_convert.py tests/test_hopper_bwd.py tests/test_backward.py \
    -k "not fake_driver and (dq_convert or (test_matches_reference and mbar and not d256) or prefetch_compiles_it or fused)" )
fi
# (the probe's "default" must be the switch's off state: no FLASHATTN_TRITON_DQ_CONVERT here)
probe_reps ${T_BENCH:-90} --head-dims 64,128 --seqlens 2048,4096,8192 --gqa none \
  --variants "default,$NEW" --variants64 "" --variants256 "" --baselines cudnn --rep 40
python3 - "$R/rep1/hopper_bwd_probe.json" "$R/rep2/hopper_bwd_probe.json" "$R/tests_convert.log" "$NEW" <<'PY' | tee "$OUT/verdict.txt"
import math, sys
sys.path.insert(0, "benchmarks")
from rules import load_reps, probe_checks_ok, tests_passed
reps = load_reps(sys.argv[1:3])
tests_ok = tests_passed(sys.argv[3])
new = sys.argv[4]
checks = probe_checks_ok(reps)
logs, low = [[] for _ in reps], False
for rows in zip(*reps):
    r0 = rows[0]
    ratios = [r["tflops"][new] / r["tflops"]["default"] if r["tflops"].get("default") and r["tflops"].get(new)
              else None for r in rows]
    vs = " ".join(f"{r['tflops']['default'] / r['tflops']['cudnn']:.2f}->{r['tflops'][new] / r['tflops']['cudnn']:.2f}"
                  if r["tflops"].get("cudnn") and r["tflops"].get("default") and r["tflops"].get(new) else "-"
                  for r in rows)
    shape = {k: r0.get(k) for k in ("b", "hq", "n", "d", "causal")}
    print(f"{shape}: new/default " + " ".join(f"{x:.3f}" if x else "-" for x in ratios) + f"  vs cuDNN {vs}")
    low |= not all(x is not None and x >= 0.99 for x in ratios)
    for log, x in zip(logs, ratios):
        log.append(x)
geo = [math.exp(sum(map(math.log, log)) / len(log)) if log and all(log) else 0.0 for log in logs]
adopt = tests_ok and checks and not low and len(logs[0]) == 12 and all(g >= 1.01 for g in geo)
bad = sorted({c for rows in reps for r in rows for c in r["check"].values() if c and c not in ("ok", "ref")})
print(f"geomean new/default " + " ".join(f"{g:.3f}" for g in geo) + f" over {len(logs[0])} rows"
      + ("" if not low else ", a row below 0.99"))
print(f"tests {'passed' if tests_ok else 'FAILED'}, checks {'ok' if checks else bad}; RULE: "
      + ("adopt (DQ_CONVERT_KERNEL = True for both tiers)" if adopt else "the switch stays off"))
PY
tar -C "$OUT" -czf "$OUT/results.tgz" r
