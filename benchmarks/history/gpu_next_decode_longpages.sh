#!/usr/bin/env bash
# Decoding at batch 1 on long caches in small pages: variant "longpages" (kernels/decode.py;
# session 32): from LONGPAGES_FROM = 64k keys in pages smaller than a 64-key tile, the plan of
# "pair,pdl,reserve" (two programs per SM, 29-30 splits) instead of the default's one program
# per SM with 16.  Session 31 call 6 timed that plan on 16-token pages at B = 1: 1.14-1.20x the
# default at 64k in both processes, 0.93x at 16k, 0.82-0.83x at 4k (hence the threshold), and
# 0.90-0.98x on 256-token pages (which the variant leaves alone).
# 1. GPU tests: test_kvcache.py -k "longpages or plan_variants" ($R/tests.log; test_gpu_longpages:
#    a 64k cache in 16-token pages against float64).
# 2. Timing: bench_decode.py, B = 1, N = 16k, 32k, 64k, 128k, 16- and 256-token pages, Hq 32 /
#    Hkv 8, d 128, bf16, 30 replays a point, variants default and default+longpages in two
#    processes with the order reversed.
# Rule, fixed before the run (rules.decode_spread_verdict with gauges=True, per layout):
# "longpages" joins DEFAULT_VARIANTS if the tests pass, every spot check ran and, in both
# processes and on both page sizes, every row whose two plans differ (16-token pages at 64k and
# 128k) reads >= 1.03x the default, while every row with the same plan both ways lies within
# 0.94-1.06x (else no decision).  One H200, about 2 minutes.
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
gpu_tests tests ${T_TESTS:-120} -n 2 tests/test_kvcache.py -k "longpages or plan_variants"
V="default,default+longpages"; VR="default+longpages,default"
for i in 1 2; do
  vs=$V; [ $i = 2 ] && vs=$VR
  timeout -k 5 ${T_BENCH:-100} python3 benchmarks/bench_decode.py --batches 1 --seqlens 16384,32768,65536,131072 \
    --layouts paged16,paged256 --peers "" --variants "$vs" --copy-gb 1 --reps 30 --max-seconds ${STOP:-85} \
    --out "$R/rep$i" > "$R/rep$i.log" 2>&1
  echo "rc=$?" >> "$R/rep$i.log"; el "rep$i"
done
python3 - "$R" <<'PY' | tee "$OUT/verdict.txt"
import json, sys
sys.path.insert(0, "benchmarks")
from rules import decode_spread_verdict
reps = [json.load(open(f"{sys.argv[1]}/rep{i}/bench_decode.json")) for i in (1, 2)]
lines = [decode_spread_verdict(reps, variant="default+longpages", gauges=True, layout=lay) for lay in ("paged16", "paged256")]
print("\n".join(lines))
adopt = all(line.splitlines()[-1].startswith("default+longpages: adopt") for line in lines)
print("longpages: adopt" if adopt else "longpages: unchanged")
PY
grep -E "passed|failed|rc=" "$R/tests.log" | tail -2
tar -C "$OUT" -czf "$OUT/results.tgz" r
