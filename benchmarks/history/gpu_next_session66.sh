#!/usr/bin/env bash
# RAN in session 66 as call 1 (H100, no H200 came): results/h100/session66/call1_results.tgz; split sweep: no winner.
# Queued by session 65 (one GPU, about 6 minutes; meant for an H200, where issue 11's table lives):
# the decoding table at the defaults since session 65 (the gathered merge at small batch,
# kernels/decode.py DEFAULT_COMBINE_SMALL), which ran only on an H100 so far
# (results/h100/session65/). OUT=$OUT bash benchmarks/gpu_next_session66.sh; commit $R/decode/
# as results/<gpu>/decode/ (the H200's replaces session 33's) with the environment.
# 1. tests/test_kvcache.py + tests/test_kvcache_chunk.py on the GPU at the defaults: $R/kvcache.log.
# 2. bench_decode.py's issue 11 table (B = 1, 8, 64; 1k-128k; contiguous, 16- and 256-token pages;
#    SDPA flash and cuDNN, Flex at 8k / 64k; copy ceiling in the same run): $R/decode/.
# 3. (about 1 minute) Batch 1 with the gathered merge, more splits: the split rule counts an eighth
#    of a key tile per split for the fused merge's serial reads (choose_num_splits), and session 8
#    found 16 splits faster than 29-32 with that merge. With the gathered merge a split costs less
#    at the end, so two candidates against today's default (16 splits from 4k): the variant "pair"
#    (two programs per SM, 22-32 splits, 4 stages of 64-key tiles) and a fixed 32 splits. B = 1,
#    contiguous, 1k-64k, two repeats. Rule, fixed before the run: a candidate wins if its GB/s over
#    the default (same repeat) is >= 1.02 at every row from 4k to 32k in both repeats and >= 0.99
#    at the others; the best geomean of the winners is taken ("pair": DEFAULT_VARIANTS gains it
#    where the gathered merge runs; "s32": choose_num_splits counts two programs per SM at small
#    batch under the gathered merge).
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
decode_tests_and_table
for rep in 1 2; do
  timeout -k 5 60 python3 benchmarks/bench_decode.py --batches 1 --layouts contiguous --peers sdpa_cudnn \
    --seqlens 1024,4096,8192,16384,32768,65536 --copy-gb 0.25 --variants default,default+pair --splits 0,32 \
    --out "$R/splits_rep$rep" > "$R/splits_rep$rep.log" 2>&1
  echo "rc=$?" >> "$R/splits_rep$rep.log"; el "splits_rep$rep"
done
python3 - "$R" <<'PY' | tee "$R/splits_verdict.txt"
import json, math, sys
r = sys.argv[1]
ns, mid = (1024, 4096, 8192, 16384, 32768, 65536), (4096, 8192, 16384, 32768)
winners = []
reps = []
for rep in (1, 2):
    try:
        p = json.load(open(f"{r}/splits_rep{rep}/bench_decode.json"))
    except OSError as e:
        print("missing", e); reps = []; break
    g = {}
    for x in p["rows"]:
        if "gbps" in x and x["provider"] == "flashattn_triton":
            splits = "auto" if x.get("auto_splits") else x["num_splits"]
            g[(x.get("variant"), splits, x["seqlen"])] = x["gbps"]
    reps.append(g)
for name, key in (("pair", ("default+pair", "auto")), ("s32", ("default", 32))):
    ok, logs = bool(reps), []
    for i, g in enumerate(reps):
        try:
            ratios = {n: g[key + (n,)] / g[("default", "auto", n)] for n in ns}
        except KeyError as e:
            print(name, "missing", e); ok = False; continue
        print(f"{name} rep{i + 1}: " + " ".join(f"{n // 1024}k {x:.3f}" for n, x in ratios.items()))
        ok &= all(ratios[n] >= (1.02 if n in mid else 0.99) for n in ns)
        logs += [math.log(x) for x in ratios.values()]
    geo = math.exp(sum(logs) / len(logs)) if logs else 0
    print(f"{name}: rule {'met' if ok else 'not met'}, geomean {geo:.3f}")
    if ok:
        winners.append((geo, name))
print("winner:", max(winners)[1] if winners else "none")
PY
tar -C "$OUT" -czf "$OUT/results.tgz" r
