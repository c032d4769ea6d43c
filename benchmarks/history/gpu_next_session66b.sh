#!/usr/bin/env bash
# RAN in session 66 as call 4 (H100): results/h100/session66/call4/; rule not met (16-token pages 0.91-0.98x).
# Session 66, second call (one GPU, about 2 minutes): variant "solo" (kernels/decode.py: the split
# rule counts one program per SM, not two, while SMs / 4 <= programs <= SMs). Calls 2-3's sweeps on an
# H100 (results/h100/session66/) found the fixed counts that make about one program per SM faster
# than the automatic ones: batch 8 (64 programs) 2 splits over 4, 1.01-1.07x; batch 16 (128) 1 over
# 2, 1.01-1.08x; batch 4 and 32 already so.
# 1. the solo GPU test and the plan tests: $R/tests.log.
# 2. batch 5, 6, 8, 12, 16; 1k-32k; contiguous and 16-token pages; default against default+solo,
#    cuDNN beside them; two repeats. Rule, fixed before the run: over the rows whose split counts
#    differ, solo / default (same repeat) >= 0.99 at every row in both repeats and the geomean
#    >= 1.02; then "solo" joins DEFAULT_VARIANTS. (LAYOUTS: the layouts timed; calls 5 and 6 ran
#    this script with 256-token pages added, gpu_next_session66c.sh / 66d.sh.)
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
gpu_tests tests 200 -n 4 tests/test_kvcache.py -k "solo or plan"
for rep in 1 2; do
  timeout -k 5 150 python3 benchmarks/bench_decode.py --batches 5,6,8,12,16 --layouts "${LAYOUTS:-contiguous,paged16}" \
    --peers sdpa_cudnn --seqlens 1024,2048,4096,8192,16384,32768 --copy-gb 0.25 --variants default,default+solo \
    --out "$R/solo_rep$rep" > "$R/solo_rep$rep.log" 2>&1
  echo "rc=$?" >> "$R/solo_rep$rep.log"; el "solo_rep$rep"
done
python3 - "$R" <<'PY' | tee "$R/solo_verdict.txt"
import json, math, sys
r = sys.argv[1]
ok, logs = "passed" in open(f"{r}/tests.log").read() and "rc=0" in open(f"{r}/tests.log").read(), []
for rep in (1, 2):
    g = {}
    for x in json.load(open(f"{r}/solo_rep{rep}/bench_decode.json"))["rows"]:
        if "gbps" in x and x["provider"] == "flashattn_triton":
            g[(x.get("variant"), x["layout"], x["batch"], x["seqlen"])] = (x["gbps"], x["num_splits"])
        elif "gbps" in x:
            g[("cudnn", "", x["batch"], x["seqlen"])] = (x["gbps"], 0)
    for (var, lay, b, n), (gb, sp) in sorted(g.items(), key=lambda kv: kv[0][1:]):
        if var != "default+solo":
            continue
        base, bsp = g[("default", lay, b, n)]
        cud = g.get(("cudnn", "", b, n), (0, 0))[0]
        ratio = gb / base
        changed = sp != bsp
        if changed:
            ok &= ratio >= 0.99
            logs.append(math.log(ratio))
        print(f"rep{rep} {lay:10s} B={b:2d} N={n:6d} splits {bsp}->{sp} {base:.0f} -> {gb:.0f} GB/s "
              f"{ratio:.3f}{'' if changed else ' (same plan)'}  cudnn {cud:.0f}")
geo = math.exp(sum(logs) / len(logs)) if logs else 0
ok &= geo >= 1.02
print(f"solo: {len(logs)} changed rows, geomean {geo:.3f}, rule {'met' if ok else 'not met'}")
PY
tar -C "$OUT" -czf "$OUT/results.tgz" r
