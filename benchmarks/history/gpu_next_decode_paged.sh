#!/usr/bin/env bash
# Small-batch decoding on paged caches (session 31).  The full bench_decode.py run of session 31
# call 3 (results/h200/decode/) has 16-token pages at B = 1 at 70-81 % of the contiguous
# cache's bandwidth from 4k (2897 against 4143 GB/s at 128k), where the run at 7da8f36 (before
# session 16 made deep+fill+pdl+reserve the small-batch default, timed on contiguous caches
# only) had 94 % (3617 against 3846): the small-batch variants, one program per SM with five
# stages of 64-key tiles, suit the contiguous cache but not the page gathers, whose addresses
# wait on a block-table load.  Candidates for paged caches at small batch, each timed against
# today's default: none (session 15's plan: 3 stages, up to two programs per SM),
# fill+pdl+reserve (the default less deep), pair+pdl+reserve (two programs per SM, 4 stages,
# the split rule counting two per SM), pair+merge+pdl+reserve, wide+fill+pdl+reserve (128-key
# tiles: 8 pages per tile).
# Timing: bench_decode.py, B = 1, N = 4k, 16k, 64k,
# 16- and 256-token pages, ours only, two processes with the variant order reversed.
# Rule, fixed before the run, per page size P separately: ratio = V's GB/s / the default's on
# the same row of the same process.  V qualifies for P if in both processes ratio >= 1.05 on
# every row of P with N >= 16k and >= 0.98 on the 4k rows, and every spot check ran.  The
# qualifying V with the highest geometric mean over P's rows (both processes) becomes the
# small-batch variant set of P-token pages (kernels/decode.py, by page size); none: unchanged.
# Then, exploratory (no rule): B = 64 reads 3.9 TB/s unsplit against B = 8's 4.5 (4 splits,
# 256 programs, one wave) and cuDNN's 4.5; 512 programs at up to 3 per SM are 1.3 waves.
# bench_decode.py at B = 64 and 16, N = 8k and 32k, contiguous, fixed splits 1-4 beside the
# automatic count (T_SPLITS 70 s); B = 1 at 2k / 4k with 4-12 splits (T_SPLITS1 40 s).
# One H200, about 5 minutes (VARIANTS=... a shorter list, SKIP_SPLITS=1 without the sweeps,
# SKIP_PAGED=1 the sweeps alone: session 31 call 6 ran the rule, not the sweeps).
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
V=${VARIANTS:-"default,none,fill+pdl+reserve,pair+pdl+reserve,pair+merge+pdl+reserve,wide+fill+pdl+reserve"}
VR=$(tr ',' '\n' <<< "$V" | tac | paste -sd, -)
for i in $([ -z "${SKIP_PAGED:-}" ] && echo 1 2); do
  vs=$V; [ $i = 2 ] && vs=$VR
  timeout -k 5 ${T_BENCH:-120} python3 benchmarks/bench_decode.py --batches 1 --seqlens 4096,16384,65536 \
    --layouts paged16,paged256 --peers "" --variants "$vs" --max-seconds ${STOP:-105} --out "$R/rep$i" \
    > "$R/rep$i.log" 2>&1
  echo "rc=$?" >> "$R/rep$i.log"; el "rep$i"
done
if [ -z "${SKIP_SPLITS:-}" ]; then
timeout -k 5 ${T_SPLITS:-70} python3 benchmarks/bench_decode.py --batches 64,16 --seqlens 8192,32768 \
  --layouts contiguous --peers "" --splits 0,1,2,3,4 --max-seconds 60 --out "$R/splits" > "$R/splits.log" 2>&1
echo "rc=$?" >> "$R/splits.log"; el splits
# and B = 1 at 2k / 4k (0.87x / 0.95x cuDNN at 16 splits in call 3): 4, 8, 12 splits
timeout -k 5 ${T_SPLITS1:-40} python3 benchmarks/bench_decode.py --batches 1 --seqlens 2048,4096 \
  --layouts contiguous --peers "" --splits 0,4,8,12 --max-seconds 30 --out "$R/splits1" > "$R/splits1.log" 2>&1
echo "rc=$?" >> "$R/splits1.log"; el splits1
python3 - "$R/splits/bench_decode.json" "$R/splits1/bench_decode.json" <<'PY'
import json, sys
for r in [r for f in sys.argv[1:] for r in json.load(open(f))["rows"]]:
    if r.get("provider") == "flashattn_triton" and "gbps" in r:
        print(f"B={r['batch']} N={r['seqlen']} splits={r['num_splits']}{' (auto)' if r['auto_splits'] else ''}: "
              f"{r['gbps']:.0f} GB/s")
PY
fi
[ -z "${SKIP_PAGED:-}" ] && python3 - "$R" <<'PY' | tee "$OUT/verdict.txt"
import json, math, sys
sys.path.insert(0, "benchmarks")
from rules import decode_paged_verdict
reps = [json.load(open(f"{sys.argv[1]}/rep{i}/bench_decode.json")) for i in (1, 2)]
print(decode_paged_verdict(reps))
PY
tar -C "$OUT" -czf "$OUT/results.tgz" r
