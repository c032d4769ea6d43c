#!/usr/bin/env bash
# The backward's short-sequence rule re-measured (_dispatch.hopper_backward_pays, set in session 11:
# the portable backward at causal N = 512 every d, causal N = 1024 d <= 128, full N = 512 d <= 128).
# The Hopper backward changed much since (persistent loop, ROW_BOUND, config table); session 25's
# ncu profiles had the rows this rule sends to the portable tier as the only backward rows behind
# FlexAttention (d = 128, N <= 1k: +2 % to +8 %). One H200, about 4 minutes.
#   bench_attention.py --modes bwd, bf16 then fp16, B*N = 16k, H = 2048 / d, d 64 / 128 / 256,
#   N 512 / 1024 / 2048, causal and not, no GQA rows; providers: ours (default rule), ours forced
#   onto the Hopper tier (flashattn_triton_hopper), ours forced onto the portable tier, cuDNN
#   (Flex's rows are in the flex_all sweep); --rounds 2 (each time the median of the two rounds).
# Rule, fixed before the run: a (N, d, causal) cell the rule now sends to the portable backward
# moves to the Hopper one when, in both dtypes, the Hopper tier's time is <= 0.98x the portable
# tier's; a cell it sends to the Hopper backward at N <= 2048 moves back to the portable one when,
# in both dtypes, the Hopper time is >= 1.02x. Every other cell stays as it is.
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
for dt in bf16 fp16; do
  timeout -k 5 ${T_BENCH:-150} python3 benchmarks/bench_attention.py --full --modes bwd --dtype $dt \
    --providers flashattn_triton,flashattn_triton_hopper,flashattn_triton_portable,sdpa_cudnn \
    --head-dims 64,128,256 --seqlens 512,1024,2048 --causal both --no-gqa --rounds 2 \
    --max-seconds ${B_BENCH:-140} --no-progress --no-plot --out "$R/bench_$dt" > "$R/bench_$dt.log" 2>&1
  echo "rc=$?" >> "$R/bench_$dt.log"; el "bench $dt"
done
python3 - "$R" <<'PY' 2>&1 | tee "$R/verdict.txt"
import json, sys
from flashattn_triton._dispatch import hopper_backward_pays
R = sys.argv[1]
ms = {}
for dt in ("bf16", "fp16"):
    try:
        rows = json.load(open(f"{R}/bench_{dt}/bench_attention.json"))["rows"]
    except OSError as e:
        print("no results for", dt, e); continue
    for r in rows:
        if r["status"] == "ok" and r["mode"] == "bwd":
            ms[(r["provider"], dt, r["head_dim"], r["causal"], r["seqlen_q"])] = r["ms"]
cells = sorted({k[2:] for k in ms})
print("d causal N | rule | hopper/portable bf16 fp16 | cudnn/ours time (bf16) | verdict")
for d, c, n in cells:
    rule = "hopper" if hopper_backward_pays(n, d, c) else "portable"
    rat = [ms.get(("flashattn_triton_hopper", dt, d, c, n), float("nan")) /
           ms.get(("flashattn_triton_portable", dt, d, c, n), float("nan")) for dt in ("bf16", "fp16")]
    ours = ms.get(("flashattn_triton", "bf16", d, c, n), float("nan"))
    vs = [ms.get(("sdpa_cudnn", "bf16", d, c, n), float("nan")) / ours]
    if rule == "portable":
        verdict = "MOVE to hopper" if all(x <= 0.98 for x in rat) else "stay"
    else:
        verdict = "MOVE to portable" if all(x >= 1.02 for x in rat) else "stay"
    print(f"{d} {c} {n} | {rule} | {rat[0]:.3f} {rat[1]:.3f} | {vs[0]:.3f} | {verdict}")
PY
tar -C "$OUT" -czf "$OUT/results.tgz" r
