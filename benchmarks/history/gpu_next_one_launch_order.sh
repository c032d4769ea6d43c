#!/usr/bin/env bash
# The one launch's grid order at d = 128 non-causal, where session 20 call 6 adopted the one
# launch (ONE_LAUNCH = {(128, False): True}) with its grid by kind, the order its rule chose
# although the head order measured higher (off/on 1.058 / 1.050 / 1.046 by head against 1.031 /
# 1.035 / 1.030 by kind at N 512 / 1k / 2k, in separate processes). Here the two orders meet in
# one process: bench_dq_convert.py --switch one-launch-order (bf16, B*N = 16k, H = 16, N 512 /
# 1k / 2k, every row on the portable backward, 3 alternated rounds; on = by head, off = by
# kind). The GPU tests of both orders passed in call 6. One H200, about 1 minute.
# Rule, fixed before the run (session 20): ONE_LAUNCH_HEAD_MAJOR = True (default order by head)
# if all 3 rows are measured with both settings in one launch, the median wall ratio kind/head
# is >= 1.01 on every row and its geometric mean >= 1.015; otherwise the order stays by kind.
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
unset FLASHATTN_TRITON_BWD_ONE_LAUNCH FLASHATTN_TRITON_BWD_ONE_LAUNCH_ORDER FLASHATTN_TRITON_CONFIG_BWD_ONE
export FLASHATTN_TRITON_HOPPER_BWD=0  # every row on the portable backward
timeout -k 5 ${T_BENCH:-120} python3 benchmarks/bench_dq_convert.py --switch one-launch-order --causal full \
  --head-dims 128 --seqlens 512,1024,2048 --gqa "" --out "$R" > "$R/bench_order.log" 2>&1
echo "rc=$?" >> "$R/bench_order.log"; el bench_order; cut -c1-300 "$R/bench_order.log" | grep "^d="
python3 - "$R/bench_dq_convert.json" <<'PY' | tee "$OUT/verdict.txt"
import math, sys
sys.path.insert(0, "benchmarks")
from rules import json_rows
rows = json_rows(sys.argv[1])
ok = len(rows) == 3 and all(r["convert_ran"] and r["ratio_wall"] >= 1.01 for r in rows)
geo = math.exp(sum(math.log(r["ratio_wall"]) for r in rows) / len(rows)) if rows else 0.0
for r in rows:
    print(f"d={r['d']} N={r['n']}: wall kind/head {r['ratio_wall']:.3f} (rounds "
          + " ".join(f"{x:.3f}" for x in r["ratio_wall_rounds"]) + f"), kernel kind/head {r['ratio_kernel']:.3f}, "
          f"both one launch {r['convert_ran']}")
verdict = "ONE_LAUNCH_HEAD_MAJOR = True" if ok and geo >= 1.015 else "the order stays by kind (no edit)"
print(f"{len(rows)} of 3 rows, geomean kind/head {geo:.3f}; RULE: {verdict}")
PY
tar -C "$OUT" -czf "$OUT/results.tgz" r
