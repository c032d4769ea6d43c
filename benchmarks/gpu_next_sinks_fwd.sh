#!/usr/bin/env bash
# Learnable sinks on the Hopper forward (FLASHATTN_TRITON_HOPPER_SINKS, _dispatch.HOPPER_SINKS_DEFAULT
# "0"; built in session 22): a dense call whose only kernel-side variant is its sinks runs the
# Hopper forward without them, then ops._fold_sinks folds each head's sink into O and the base-2
# LSE in place (kernels/combine.py's merge, one part, LSE_BASE2); the backward reads the sinks
# only through the LSE, so it is unchanged. Why: the variant table (session 22 call 3) runs the
# sinks forward on the portable kernels at 0.357 ms against the plain causal row's 0.232 ms
# (Hopper) at the same shape. One H200, about 4-6 minutes:
#   1. GPU tests (T_TESTS 200 s, -n 4): tests/test_hopper.py -k sinks_folded (the real Hopper
#      forward with the fold, d 64 / 128, causal / full / window 128, GQA, Nq != Nk, output,
#      LSE and the gradients of q, k, v, sinks against float64), tests/test_variants.py -k sinks
#      and tests/test_kvcache.py -k "sinks or combine" (the combine kernel changed: LSE_BASE2),
#      each file once with FLASHATTN_TRITON_HOPPER_SINKS=1.
#   2. bench_variants.py --only sinks --no-peer (forward and backward ms, do_bench medians) at
#      B=2 N=4k Hq16 Hkv4 d=128 and B=2 N=4k Hq64 Hkv8 d=64 (gpt-oss' head dim), causal, with
#      the switch 0 and 1 in separate processes (T_BENCH 90 s each), alternated over 3 rounds;
#      a round does not start after T_STOP (440 s) of the call.
# Rule, fixed before the run: HOPPER_SINKS_DEFAULT becomes "1" if the tests pass (rc=0), at
# least 2 rounds completed, and on every row of every completed round the forward with the
# switch on takes <= 0.95x the time with it off and the backward <= 1.03x.
source "$(dirname "${BASH_SOURCE[0]}")/gpu_lib.sh"
export FLASHATTN_TRITON_HOPPER_SINKS=1
gpu_tests tests_sinks ${T_TESTS:-200} -n 4 tests/test_hopper.py tests/test_variants.py tests/test_kvcache.py \
  -k "sinks or combine"
unset FLASHATTN_TRITON_HOPPER_SINKS
SHAPES="2,4096,16,4,128,1;2,4096,64,8,64,1"
for round in 1 2 3; do
  [ $(( $(date +%s) - t0 )) -gt ${T_STOP:-440} ] && break
  for sw in 0 1; do
    FLASHATTN_TRITON_HOPPER_SINKS=$sw timeout -k 5 ${T_BENCH:-90} python3 benchmarks/bench_variants.py \
      --only sinks --no-peer --shapes "$SHAPES" --rep ${REP:-50} --out "$R/bench_${round}_$sw" \
      > "$R/bench_${round}_$sw.log" 2>&1
    echo "rc=$?" >> "$R/bench_${round}_$sw.log"
  done
  el "round $round"
done
python3 - "$R" <<'PY' | tee "$OUT/verdict.txt"
import sys
sys.path.insert(0, "benchmarks")
from rules import tests_state, variant_rows
r = sys.argv[1]
tests_ok, tests_cut, _ = tests_state(f"{r}/tests_sinks.log")
ok = tests_ok and not tests_cut
print(f"tests: {'passed' if tests_ok else 'FAILED or cut'}")
import os
done = 0
for rnd in (1, 2, 3):
    if not os.path.exists(f"{r}/bench_{rnd}_0.log"):
        print(f"round {rnd}: not started (T_STOP)")
        continue
    off, on = (variant_rows(f"{r}/bench_{rnd}_{sw}.log") for sw in (0, 1))
    if len(off) != 2 or len(on) != 2:
        print(f"round {rnd}: rows off {len(off)} / on {len(on)} of 2")
        ok = False
        continue
    done += 1
    for key in off:
        a, b = off[key], on.get(key, {})
        f = (b.get("ours_fwd_ms") or 1e9) / (a.get("ours_fwd_ms") or 1e-9)
        g = (b.get("ours_bwd_ms") or 1e9) / (a.get("ours_bwd_ms") or 1e-9)
        ok &= f <= 0.95 and g <= 1.03
        print(f"round {rnd} {key}: fwd off {a.get('ours_fwd_ms')} on {b.get('ours_fwd_ms')} ms ({f:.3f}x time), "
              f"bwd off {a.get('ours_bwd_ms')} on {b.get('ours_bwd_ms')} ms ({g:.3f}x time)")
ok &= done >= 2
print(f"{done} rounds complete; RULE: HOPPER_SINKS_DEFAULT = " + ('"1"' if ok else '"0" (stays)'))
PY
tar czf "$OUT/results.tgz" -C "$OUT" r
