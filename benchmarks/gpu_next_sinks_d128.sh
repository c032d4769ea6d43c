#!/usr/bin/env bash
# Learnable sinks on the Hopper forward by head dim (_dispatch.HOPPER_SINKS_DIMS, empty until this
# rule). Session 23 call 1 (gpu_next_sinks_fwd.sh, 3 rounds) timed the fold's forward at
# 0.708-0.721x the portable forward with sinks at d = 128 and 0.960-0.969x at d = 64; its rule (one
# switch for all dims, every round's backward <= 1.03x) failed on d = 64's forward and on one
# round's 1.30x backward (the backward does not change with the switch: a stalled iteration).
# Same steps, tests and shapes as gpu_next_sinks_fwd.sh (GPU tests with the switch on, then
# bench_variants.py --only sinks --no-peer with FLASHATTN_TRITON_HOPPER_SINKS 0 / 1, 3 rounds).
# Rule, fixed before the run, per head dim d of the two rows (128: B=2 N=4k Hq16 Hkv4; 64: B=2 N=4k
# Hq64 Hkv8; causal): d joins HOPPER_SINKS_DIMS if the tests pass, at least 2 rounds completed, the
# forward on/off time ratio is <= 0.95 in every completed round and the median over the rounds of
# the backward's on/off ratio is <= 1.03.
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
fw, bw = {}, {}
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
        fw.setdefault(key[4], []).append((on[key].get("ours_fwd_ms") or 1e9) / (off[key].get("ours_fwd_ms") or 1e-9))
        bw.setdefault(key[4], []).append((on[key].get("ours_bwd_ms") or 1e9) / (off[key].get("ours_bwd_ms") or 1e-9))
    for key in off:
        a, b = off[key], on.get(key, {})
        f = (b.get("ours_fwd_ms") or 1e9) / (a.get("ours_fwd_ms") or 1e-9)
        g = (b.get("ours_bwd_ms") or 1e9) / (a.get("ours_bwd_ms") or 1e-9)
        print(f"round {rnd} {key}: fwd off {a.get('ours_fwd_ms')} on {b.get('ours_fwd_ms')} ms ({f:.3f}x time), "
              f"bwd off {a.get('ours_bwd_ms')} on {b.get('ours_bwd_ms')} ms ({g:.3f}x time)")
import statistics
dims = sorted(d for d in fw if ok and done >= 2 and max(fw[d]) <= 0.95 and statistics.median(bw[d]) <= 1.03)
for d in sorted(fw):
    print(f"d={d}: fwd ratios {[round(x, 3) for x in fw[d]]}, bwd median {statistics.median(bw[d]):.3f}")
print(f"{done} rounds complete; RULE: HOPPER_SINKS_DIMS = frozenset({set(dims) or ''})")
PY
tar czf "$OUT/results.tgz" -C "$OUT" r
