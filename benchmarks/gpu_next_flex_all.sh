#!/usr/bin/env bash
# The side-by-side sweep with FlexAttention on every row (issues 7 and 8: ">= 1.0x FA2 and
# FlexAttention on every row, N 512..16k, d 64/128/256"; session 16's sweep ran Flex on 22 rows
# per mode, N 2k / 8k only), one dtype per call: DTYPE=bf16 (default) or DTYPE=fp16, one H200,
# about 4 minutes (session 18 calls 4 and 5: 237 / 234 s; the timeouts keep a call under 10;
# Flex compiles each shape, ~3 s a row in session 16, and the untimed warm-up compiles them in
# six parallel processes first).
#   bench_attention.py --full --flex-all: d 64/128/256, N 512..16k, causal and not (and the GQA
#   rows with bf16), forward and backward; ours, SDPA flash (FA2), SDPA cuDNN, FlexAttention and
#   ours on the portable kernels (flashattn_triton_portable: data for a short-sequence rule like
#   the backward's, should the Hopper forward trail a peer at N <= 1k) in one process,
#   --rounds 1; rows past the time budget are left out and listed as missing.
# Results: $OUT/results.tgz (r/bench: bench_attention.json / .md, r/bench.log); the short tables
# and a line per row where ours is below FA2 or Flex are printed (none expected).
source "$(dirname "${BASH_SOURCE[0]}")/gpu_lib.sh"
DTYPE=${DTYPE:-bf16}
if [ "${WARM:-1}" = 1 ]; then
  # FlexAttention compiles each shape (torch.compile; Inductor's and Triton's on-disk caches
  # keep the results): six untimed processes, one per (d, causal), compile them side by side
  # first, so that the timed run below mostly loads them (WARM=0 skips this).
  flex_warm "$DTYPE" fwd,bwd 64 128 256
fi
timeout -k 5 ${T_BENCH:-460} python3 benchmarks/bench_attention.py --full --modes fwd,bwd --dtype "$DTYPE" \
  --providers flashattn_triton,sdpa_flash,sdpa_cudnn,flex,flashattn_triton_portable --flex-all \
  --max-seconds ${B_BENCH:-430} \
  --no-progress --no-plot --out "$R/bench" > "$R/bench.log" 2>&1
echo "rc=$?" >> "$R/bench.log"; el bench
sed -n '/short:begin/,/short:end/p' "$R/bench/bench_attention.md" | cut -c1-200 | head -60
python3 - "$R/bench/bench_attention.json" <<'PY' 2>&1 | tee "$R/verdict.txt"
import json, sys
rows = json.load(open(sys.argv[1]))["rows"]
ours = {(r["mode"], r["dtype"], r["head_dim"], r["causal"], r["heads_kv"], r["seqlen_q"]): r
        for r in rows if r["provider"] == "flashattn_triton" and r["status"] == "ok"}
peers = {}
for r in rows:
    if r["provider"] in ("sdpa_flash", "flex", "flashattn_triton_portable") and r["status"] == "ok":
        peers.setdefault(r["provider"], {})[(r["mode"], r["dtype"], r["head_dim"], r["causal"], r["heads_kv"],
                                             r["seqlen_q"])] = r
for p in ("sdpa_flash", "flex", "flashattn_triton_portable"):
    got = peers.get(p, {})
    ratios = {k: ours[k]["tflops"] / got[k]["tflops"] for k in ours if k in got}
    missing = sorted(k for k in ours if k not in got)
    below = sorted((v, k) for k, v in ratios.items() if v < 1.0)
    print(f"{p}: {len(ratios)} rows with both, ours/{p} {min(ratios.values()):.2f}-{max(ratios.values()):.2f}"
          if ratios else f"{p}: no rows")
    for v, k in below:
        print(f"  BELOW {p}: {k} {v:.3f}")
    if missing:
        print(f"  missing {p}: {len(missing)} rows, e.g. {missing[:3]}")
PY
tar -C "$OUT" -czf "$OUT/results.tgz" r
