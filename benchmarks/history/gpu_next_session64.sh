#!/usr/bin/env bash
# RAN in session 65 (H100, SHORT=1, call 1): gathered met the rule at batch 1 (1.07-1.26x, geomean
# 1.151, both repeats), not batch 8's floor (0.978-1.005x): DEFAULT_COMBINE_SMALL = "gathered".
# Results: results/h100/session65/ (README there). ms1 was not run (SHORT).
# Queued by session 64 (its device time went to failed starts after its first call; about 7-8 minutes,
# one GPU; SHORT=1 for about 3). Run the whole script where the time allows: OUT=$OUT bash
# benchmarks/gpu_next_session64.sh. Commit under results/<gpu>/session65/ with the environment.
# history/gpu_next_session63b.sh found the fused merge is the
# batch-1 tail at 2k: ours' decode kernel's longest program runs 20.2k cycles with the merge in it and
# 12.1k without (FLASHATTN_TRITON_DECODE_COMBINE=separate), about 8k cycles (4 us) for the counter and
# merging 16 partials; cuDNN merges in a second kernel (3.8k cycles). Two candidates:
#   gathered: FLASHATTN_TRITON_DECODE_COMBINE=gathered, the merge in a second kernel
#             (combine.py's _gather_combine: 4 rows x 32 columns per program, every partial in one
#             load, weights from the LSEs alone, launched with PDL) and no counter in the decode;
#   ms1:      the fused merge with MERGE_STAGES = 1 (a copy of this tree with the constant changed:
#             plain .cg loads, no shared-memory ring, no per-partial CTA barriers; session 17's 8
#             stages read 0.91-0.98x).
# 1. GPU tests of the gathered combine (splits, sinks, chunks, CUDA graphs with PDL, plans).
# 2. bench_decode.py, B = 1 and 8, contiguous, N = 1k..16k, with SDPA cuDNN, ours fused and gathered;
#    and ms1 (fused) at B = 1; two repeats, the tree order reversed in the second.
# 3. The 2k batch-1 row under Nsight Compute with the gathered combine, beside cuDNN's two kernels.
# Rule, fixed before the run: a candidate wins if its GB/s over today's fused merge (same repeat) is
# >= 1.02 at every B=1 row from 1k to 8k in both repeats and >= 0.99 at 16k (and its tests pass);
# gathered must also be >= 0.99 at every B=8 row to become the default everywhere, else it becomes
# the default only where the split rule's small batch applies. The best geomean of the winners is taken.
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
# (SHORT=1, for a call with little device time left: the gathered tests only, no ms1 tree.)
# (Session 64 made the gathered merge a switch of combine.py's one kernel, _combine_fwd: PARTS > 0.
# The running merge's build kept its registers, shared memory and loop; the whole of
# test_kvcache.py / test_kvcache_chunk.py and the sink tests of test_variants.py (ops._fold_sinks
# runs the running merge) take it on the GPU.)
K="gathered or cuda_graph or plans"; [ -n "${SHORT:-}" ] && K=gathered  # (SHORT: after the timing)
[ -z "${SHORT:-}" ] && gpu_tests gathered 300 -n 4 tests/test_kvcache.py tests/test_kvcache_chunk.py \
  && gpu_tests sinks 150 -n 4 tests/test_variants.py -k sink
rm -rf /tmp/ms1 && mkdir -p /tmp/ms1 && cp -r flashattn_triton benchmarks /tmp/ms1/
sed -i "s/^MERGE_STAGES = 3 /MERGE_STAGES = 1 /" /tmp/ms1/flashattn_triton/kernels/decode.py
grep -H "^MERGE_STAGES" /tmp/ms1/flashattn_triton/kernels/decode.py | tee "$R/trees.txt"
bench() {  # bench TREE_DIR TAG BATCHES COMBINES
  (cd "$1" && PYTHONPATH="$1" timeout -k 5 150 python3 benchmarks/bench_decode.py --batches "$3" \
     --layouts contiguous --peers sdpa_cudnn --seqlens 1024,2048,4096,8192,16384 --copy-gb 0.25 \
     --combine "$4" --out "$R/$2" > "$R/$2.log" 2>&1; echo "rc=$?" >> "$R/$2.log")
  el "$2"
}
bench "$PWD" base_rep1 1,8 fused,gathered
[ -z "${SHORT:-}" ] && bench /tmp/ms1 ms1_rep1 1 fused && bench /tmp/ms1 ms1_rep2 1 fused
bench "$PWD" base_rep2 1,8 gathered,fused
[ -n "${SHORT:-}" ] && gpu_tests gathered 150 -n 4 tests/test_kvcache.py tests/test_kvcache_chunk.py -k "$K"
python3 - "$R" <<'PY' | tee "$R/verdict.txt"
import json, math, sys
r = sys.argv[1]
def gb(tag):
    try:
        p = json.load(open(f"{r}/{tag}/bench_decode.json"))
    except OSError as e:
        print(tag, "missing:", e); return {}
    out = {}
    for x in p["rows"]:
        if "gbps" in x:
            who = x["provider"] + ("" if x["provider"] != "flashattn_triton" else "/" + x.get("combine", "fused"))
            out[(x["batch"], x["seqlen"], who)] = x["gbps"]
    return out
ns = (1024, 2048, 4096, 8192, 16384)
base = {rep: gb(f"base_rep{rep}") for rep in (1, 2)}
ms1 = {rep: gb(f"ms1_rep{rep}") for rep in (1, 2)}
ours = "flashattn_triton/fused"
winners = []
for name, src, who, batches in (("gathered", base, "flashattn_triton/gathered", (1, 8)), ("ms1", ms1, ours, (1,))):
    ok, logs, b8ok = True, [], True
    for rep in (1, 2):
        for b in batches:
            try:
                ratios = [src[rep][(b, n, who)] / base[rep][(b, n, ours)] for n in ns]
            except KeyError as e:
                print(name, rep, b, "missing", e); ok = False; continue
            peer = [v for (bb, n, w), v in sorted(base[rep].items()) if bb == b and not w.startswith("flashattn")]
            print(f"{name} rep{rep} B={b}: ratio " + " ".join(f"{x:.3f}" for x in ratios)
                  + " | fused GB/s " + " ".join(f"{base[rep][(b, n, ours)]:.0f}" for n in ns)
                  + " | peer " + " ".join(f"{x:.0f}" for x in peer))
            if b == 1:
                logs += ratios
                ok &= all(x >= 1.02 for x in ratios[:4]) and ratios[4] >= 0.99
            else:
                b8ok &= all(x >= 0.99 for x in ratios)
    geo = math.exp(sum(map(math.log, logs)) / len(logs)) if logs else 0
    print(f"{name}: rule {'met' if ok else 'not met'}, B=1 geomean {geo:.3f}" + ("" if name == "ms1" else f", B=8 floor {'met' if b8ok else 'not met'}"))
    if ok:
        winners.append((geo, name))
print("winner:", max(winners)[1] if winners else "none")
PY
FLASHATTN_TRITON_DECODE_COMBINE=gathered PLANS62=default ROWS62="decode:1:2048" LAUNCHES62=4 \
  KERNELS62="regex:_decode_fwd|_combine_fwd|cudnn|lean" OUT="$OUT/ncu_gathered" timeout -k 5 80 \
  bash benchmarks/history/gpu_next_session62.sh > "$R/ncu_gathered.log" 2>&1
echo "rc=$?" >> "$R/ncu_gathered.log"; el ncu_gathered; cat "$OUT/ncu_gathered"/r/cycles_default.txt
tar -C "$OUT" -czf "$OUT/results.tgz" r ncu_gathered/r
