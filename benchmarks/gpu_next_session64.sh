#!/usr/bin/env bash
# Session 64 (about 4 minutes, one GPU). gpu_next_session63b.sh found the fused merge is the batch-1
# tail at 2k: ours' decode kernel's longest program runs 20.2k cycles with the merge in it and 12.1k
# without (FLASHATTN_TRITON_DECODE_COMBINE=separate), about 8k cycles (4 us) for merging 16 partials.
# Session 17 timed 8 loop stages (7 partials in flight; variant "merge") at 0.91-0.98x: more in flight
# was slower. This times the other direction: MERGE_STAGES (kernels/decode.py) 1 (no pipelining:
# plain .cg loads into registers, no shared-memory ring, no per-partial CTA barriers) and 2, against
# today's 3, each tree a copy of this one with the constant changed.
# Timing: bench_decode.py, B = 1, contiguous, N = 1k..16k, with SDPA cuDNN, two repeats, tree order
# rotated. Then the 2k row under Nsight Compute (SM-active max / avg) for MERGE_STAGES = 1.
# Rule, fixed before the run: a tree wins if its GB/s over the base's, same repeat, is >= 1.02 at
# every N from 1k to 8k in both repeats and >= 0.99 at 16k; the best geomean of the winners becomes
# MERGE_STAGES (after its GPU tests). Otherwise the figures go into docs/decode.md.
source "$(dirname "${BASH_SOURCE[0]}")/gpu_lib.sh"
for s in 1 2; do
  rm -rf "/tmp/ms$s" && mkdir -p "/tmp/ms$s" && cp -r flashattn_triton benchmarks "/tmp/ms$s/"
  sed -i "s/^MERGE_STAGES = 3 /MERGE_STAGES = $s /" "/tmp/ms$s/flashattn_triton/kernels/decode.py"
  grep -H "^MERGE_STAGES" "/tmp/ms$s/flashattn_triton/kernels/decode.py" | tee -a "$R/trees.txt"
done
bench() {  # bench TREE_DIR TAG
  (cd "$1" && PYTHONPATH="$1" timeout -k 5 120 python3 benchmarks/bench_decode.py --batches 1 \
     --layouts contiguous --peers sdpa_cudnn --seqlens 1024,2048,4096,8192,16384 --copy-gb 0.25 \
     --out "$R/$2" > "$R/$2.log" 2>&1; echo "rc=$?" >> "$R/$2.log")
  el "$2"
}
for rep in 1 2; do
  if [ "$rep" = 1 ]; then order="base ms1 ms2"; else order="ms2 ms1 base"; fi
  for t in $order; do
    d="$PWD"; [ "$t" != base ] && d="/tmp/$t"
    bench "$d" "${t}_rep$rep"
  done
done
python3 - "$R" <<'PY' | tee "$R/verdict.txt"
import json, math, sys
r = sys.argv[1]
def gb(tag):
    p = json.load(open(f"{r}/{tag}/bench_decode.json"))
    return {(x["seqlen"], x["provider"]): x["gbps"] for x in p["rows"] if "gbps" in x}
ns = (1024, 2048, 4096, 8192, 16384)
best = None
for t in ("ms1", "ms2"):
    ok, logs = True, []
    for rep in (1, 2):
        b, c = gb(f"base_rep{rep}"), gb(f"{t}_rep{rep}")
        ratios = [c[(n, "flashattn_triton")] / b[(n, "flashattn_triton")] for n in ns]
        cud = [b[(n, k)] for n in ns for k in [next(k for (m, k) in b if m == n and k != "flashattn_triton")]]
        logs.append(ratios)
        print(f"{t} rep{rep}: ratio " + " ".join(f"{x:.3f}" for x in ratios)
              + " | base GB/s " + " ".join(f"{b[(n, 'flashattn_triton')]:.0f}" for n in ns)
              + " | cuDNN " + " ".join(f"{x:.0f}" for x in cud))
        ok &= all(x >= 1.02 for x in ratios[:4]) and ratios[4] >= 0.99
    geo = math.exp(sum(math.log(x) for l in logs for x in l) / 10)
    print(f"{t}: rule {'met' if ok else 'not met'}, geomean {geo:.3f}")
    if ok and (best is None or geo > best[1]):
        best = (t, geo)
print("winner:", best[0] if best else "none")
PY
# The 2k row under Nsight Compute with MERGE_STAGES = 1 (its decode kernel's longest program).
(cd /tmp/ms1 && FLASHATTN_TRITON_DECODE_COMBINE=fused PLANS62=default ROWS62="decode:1:2048" LAUNCHES62=2 \
  KERNELS62="regex:_decode_fwd" OUT="$OUT/ncu_ms1" timeout -k 5 60 bash benchmarks/history/gpu_next_session62.sh \
  > "$R/ncu_ms1.log" 2>&1; echo "rc=$?" >> "$R/ncu_ms1.log")
el ncu_ms1; cat "$OUT/ncu_ms1"/r/cycles_default.txt
tar -C "$OUT" -czf "$OUT/results.tgz" r ncu_ms1/r
