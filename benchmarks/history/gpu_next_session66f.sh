#!/usr/bin/env bash
# RAN in session 66 as calls 12 and 13 (H100; 13 with the settle): results/h100/session66/call12/, call13/; contiguous met, paged256 no verdict.
# Session 66, retake with the bench fixed (one GPU, about 4 minutes). Call 11 found that
# bench_decode.py's correctness spot check (a float32 SDPA over the cache) slowed whatever was timed
# right after it by 12-15 % (cuDNN at B = 1, 128k: 2490 GB/s timed after it, 2934 not); it now runs
# after the peers, and (call 12 found the first timing after it still slow, whatever it times) the
# timing after a spot check is taken twice, the first thrown away. The solo calls 4-6 timed each layout's first variant ("default" without solo)
# right after the previous layout's spot check, so their verdicts are retaken here:
# 1. B = 5, 6, 8, 12, 16; 1k-32k; contiguous, 16- and 256-token pages; the defaults without "solo"
#    (deep+fill+pdl+reserve+spread+longpages) against the defaults (with it); rep 1 in that order,
#    rep 2 reversed. Rule, as in calls 4-6: over the re-planned rows, >= 0.99 at every row in both
#    repeats and geomean >= 1.02; if missed, "solo" leaves DEFAULT_VARIANTS.
# 2. the issue 11 table at the defaults: $R/decode/.
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
BASE=deep+fill+pdl+reserve+spread+longpages
order_reps solo 150 "$BASE" default --batches 5,6,8,12,16 --layouts contiguous,paged16,paged256 \
  --peers sdpa_cudnn --seqlens 1024,2048,4096,8192,16384,32768 --copy-gb 0.25
python3 - "$R" "$BASE" <<'PY' | tee "$R/solo_verdict.txt"
import json, math, sys
r, base_name = sys.argv[1:]
ok, logs = True, []
for rep in (1, 2):
    g = {}
    for x in json.load(open(f"{r}/solo_rep{rep}/bench_decode.json"))["rows"]:
        if "gbps" in x and x["provider"] == "flashattn_triton":
            g[(x.get("variant"), x["layout"], x["batch"], x["seqlen"])] = (x["gbps"], x["num_splits"])
    for (var, lay, b, n), (gb, sp) in sorted(g.items(), key=lambda kv: kv[0][1:]):
        if var != "default":
            continue
        base, bsp = g[(base_name, lay, b, n)]
        ratio, changed = gb / base, sp != bsp
        if changed:
            ok &= ratio >= 0.99
            logs.append(math.log(ratio))
        print(f"rep{rep} {lay:10s} B={b:2d} N={n:6d} splits {bsp}->{sp} {base:.0f} -> {gb:.0f} GB/s "
              f"{ratio:.3f}{'' if changed else ' (same plan)'}")
geo = math.exp(sum(logs) / len(logs)) if logs else 0
ok &= geo >= 1.02
print(f"solo: {len(logs)} changed rows, geomean {geo:.3f}, rule {'met' if ok else 'not met'}")
PY
timeout -k 5 ${T_TABLE:-330} python3 benchmarks/bench_decode.py --max-seconds 300 --out "$R/decode" \
  > "$R/decode.log" 2>&1
echo "rc=$?" >> "$R/decode.log"; el decode
sed -n '/short:begin/,/short:end/p' "$R/decode/bench_decode.md" | cut -c1-600
tar -C "$OUT" -czf "$OUT/results.tgz" r
