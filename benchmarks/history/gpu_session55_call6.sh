#!/usr/bin/env bash
# Session 55 call 6: where the packed Hopper forward (on by default since call 5) is slower than
# the portable one. bench_varlen (forward and backward of "ours varlen" = the default, and
# "ours varlen hopper"; FLASHATTN_TRITON_HOPPER_VARLEN=0 for the portable row) over head dims 64 /
# 128 / 256, short documents (64..1024) and long ones, causal and not. Rule: rows where the
# portable forward is faster in the same run get a length rule (as HOPPER_FWD_SHORT for dense calls).
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
echo "call 6 of session 55: packed Hopper forward across head dims and lengths"
i=0
for spec in "128 64,1024 causal" "64 64,8192 causal" "64 64,1024 causal" "256 64,8192 causal" \
            "128 64,8192 full" "64 64,1024 full"; do
  set -- $spec; i=$((i + 1))
  extra=""; [ "$3" = full ] && extra="--no-causal"
  heads="32,8"; [ "$1" = 256 ] && heads="8,2"; [ "$1" = 64 ] && heads="32,8"
  FLASHATTN_TRITON_HOPPER_VARLEN=0 timeout -k 5 60 python3 benchmarks/bench_varlen.py --batches 1 --head-dim "$1" \
    --heads "$heads" --doc-lengths "$2" $extra --providers "ours varlen,ours varlen hopper" --out "$R/v$i" \
    > "$R/v$i.log" 2>&1; echo "rc=$?" >> "$R/v$i.log"; el "v$i $spec"
  grep -E "^\| 0 \| ours" "$R/v$i/bench_varlen.md" 2>/dev/null | cut -c1-120
done
tar -C "$OUT" -czf "$OUT/results.tgz" r
