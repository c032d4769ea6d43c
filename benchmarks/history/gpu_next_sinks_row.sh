#!/usr/bin/env bash
# The variant table's sinks row at today's default (the fold at d = 128, _dispatch.HOPPER_SINKS_DIMS,
# session 23): bench_variants.py --only sinks (B=2 N=4k Hq16 Hkv4 d=128 causal, against eager
# PyTorch), forward and backward ms, do_bench medians, and `info` naming the path taken. A record,
# no decision. One H200, about 1 minute after the start.
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
python3 -m flashattn_triton info --shape 2,4096,16,128 --kv-heads 4 --causal --variant sinks > "$R/info.txt" 2>&1
cat "$R/info.txt"
timeout -k 5 ${T_BENCH:-100} python3 benchmarks/bench_variants.py --only sinks --rep ${REP:-30} --out "$R/bench" \
  > "$R/bench_variants.log" 2>&1
echo "rc=$?" >> "$R/bench_variants.log"; el bench_variants
sed -n '/^| variant/,/^$/p' "$R/bench/bench_variants.md" 2>/dev/null | head -5
tar czf "$OUT/results.tgz" -C "$OUT" r
