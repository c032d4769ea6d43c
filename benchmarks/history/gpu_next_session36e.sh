#!/usr/bin/env bash
# Session 36, call 5 (one H200, about 7 minutes): with TMA_DKV_DEFAULT = {64: (True, True), 128: (True,
# False)} (call 4's rule), the default-plan GPU tests (-k default: heads-first and TMA_DKV plans against
# float64), then the backward rows of the side-by-side sweep at d = 64 / 128 (bf16, N 512..16k, causal
# and not, the GQA rows; ours, SDPA flash, SDPA cuDNN, FlexAttention on every row, --rounds 1) for
# the README / docs/performance.md tables. Flex compiles first in four untimed processes.
#
#     OUT=/tmp/out bash benchmarks/history/gpu_next_session36e.sh
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
gpu_tests tests ${T_TESTS:-100} tests/test_hopper_bwd.py -k "default or tma_dkv_plan" -n 4
T_WARM=${T_WARM:-90} flex_warm bf16 bwd 64 128
timeout -k 5 ${T_BENCH:-250} python3 benchmarks/bench_attention.py --full --modes bwd --dtype bf16 --head-dims 64,128 \
  --providers flashattn_triton,sdpa_flash,sdpa_cudnn,flex --flex-all --max-seconds ${B_BENCH:-220} \
  --no-progress --no-plot --out "$R/bench" > "$R/bench.log" 2>&1
echo "rc=$?" >> "$R/bench.log"; el bench
python3 - "$R/bench/bench_attention.json" <<'PY' 2>&1 | tee "$OUT/verdict.txt"
import json, sys
rows = json.load(open(sys.argv[1]))["rows"]
key = lambda r: (r["head_dim"], r["causal"], r["heads_kv"], r["seqlen_q"])  # noqa: E731
by = {}
for r in rows:
    if r["status"] == "ok":
        by.setdefault(key(r), {})[r["provider"]] = r["tflops"]
print("d causal Hkv N: ours | cudnn flash flex | ours/cudnn ours/flash ours/flex")
for k in sorted(by):
    t = by[k]
    o = t.get("flashattn_triton")
    if not o:
        continue
    f = lambda p: f"{o / t[p]:.2f}" if t.get(p) else "-"  # noqa: E731
    print(k, f"{o:.0f} | {t.get('sdpa_cudnn', 0):.0f} {t.get('sdpa_flash', 0):.0f} {t.get('flex', 0):.0f} | "
          f"{f('sdpa_cudnn')} {f('sdpa_flash')} {f('flex')}")
PY
tar -C "$OUT" -czf "$OUT/results.tgz" r
