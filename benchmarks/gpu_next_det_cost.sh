#!/usr/bin/env bash
# What deterministic=True costs today (issue 8: "with the deterministic path's cost stated"; the
# figure in docs/performance.md, 0.73-0.84x at d = 64 / 128 and 0.43-0.51x at d = 256, is session
# 11's, before the Hopper backward's later gains). One H200, about 2 minutes.
#   bench_attention.py --full --modes bwd, bf16, d 64 / 128 / 256, N 512..16k, causal and not, the
#   causal GQA rows; providers: ours (default), ours with deterministic=True (flashattn_triton_det:
#   the portable three-kernel backward, bit-identical gradients), SDPA flash (FA2, also
#   deterministic in its backward as shipped), --rounds 1.
# Results $R/det (bench_attention.json / .md); the ratio det / default per row is printed.
source "$(dirname "${BASH_SOURCE[0]}")/gpu_lib.sh"
timeout -k 5 ${T_DET:-200} python3 benchmarks/bench_attention.py --full --modes bwd --dtype bf16 \
  --providers flashattn_triton,flashattn_triton_det,sdpa_flash --max-seconds ${B_DET:-180} \
  --no-progress --no-plot --out "$R/det" > "$R/det.log" 2>&1
echo "rc=$?" >> "$R/det.log"; el det
python3 - "$R/det/bench_attention.json" <<'PY' 2>&1 | tee "$OUT/verdict.txt"
import json, sys
rows = json.load(open(sys.argv[1]))["rows"]
by = {}
for r in rows:
    if r["status"] == "ok":
        by.setdefault((r["head_dim"], r["causal"], r["heads_kv"], r["seqlen_q"]), {})[r["provider"]] = r["tflops"]
print("d causal Hkv N: default det fa2 TFLOP/s | det/default det/fa2")
for k in sorted(by):
    t = by[k]
    if "flashattn_triton" in t and "flashattn_triton_det" in t:
        o, d, f = t["flashattn_triton"], t["flashattn_triton_det"], t.get("sdpa_flash")
        print(*k, f": {o:.0f} {d:.0f} {f or 0:.0f} | {d / o:.2f} {d / f if f else float('nan'):.2f}")
PY
tar czf "$OUT/results.tgz" -C "$OUT" r
