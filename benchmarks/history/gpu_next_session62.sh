#!/usr/bin/env bash
# Ran in session 63 at 2k only, through history/gpu_next_session63.sh (results/h100/session63/call1/probe/).
# Queued by session 61 (its device time went to failed starts; about 4 minutes). One call, on an
# H200 if one comes: `OUT=$OUT bash benchmarks/gpu_next_session62.sh`.
# Session 61's Nsight Compute profile of one batch-1 decoding step (docs/decode.md, "Nsight Compute
# on batch 1") found ours' per-SM active time level with cuDNN's main kernel at 8k, and ours 4-4.5 us
# longer in time when the average SM holds no program. This asks where that time is: per plan
# (the default; none; the default less pdl; the default less deep, whose 134 KiB of shared memory
# sets the carveout), B=1 at 2k and 8k, ours (and cuDNN beside the default), with
# sm__cycles_active.max / .min / .avg. Max active near the elapsed cycles: a program runs that long
# (the merging tail); far below it: the time is outside the programs (start, launch). No rule: a
# record for the next change. Then commit under results/<gpu>/session62/ with the environment.
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
ROWS62=${ROWS62:-"decode:1:2048 decode:1:8192"}  # (a shorter call: ROWS62="decode:1:8192")
# (session 63: PLANS62, KERNELS62 and LAUNCHES62 let gpu_next_session63b.sh reuse this loop)
for v in ${PLANS62:-default none deep,fill,reserve,spread,longpages fill,pdl,reserve,spread,longpages}; do
  p=ours; [ "$v" = default ] && p=ours,cudnn
  tag=${v//,/+}
  FLASHATTN_TRITON_DECODE_VARIANT=$v ROWS="$ROWS62" PROVIDERS=$p \
    KERNELS="${KERNELS62:-regex:_decode_fwd|cudnn}" LAUNCHES=${LAUNCHES62:-3} T_ROW=60 \
    NCU_EXTRA="--metrics sm__cycles_active.max,sm__cycles_active.min,sm__cycles_active.avg" \
    OUT="$OUT/$tag" bash benchmarks/gpu_ncu_source.sh > "$R/ncu_$tag.log" 2>&1
  el "$v"
  grep -h -E "^  [_a-z].*\(|Duration|Elapsed Cycles|sm__cycles_active" "$OUT/$tag"/r/*.txt \
    | sed 's/   */ /g' | cut -c1-110 | tee "$R/cycles_$tag.txt"
  mkdir -p "$R/$tag" && cp "$OUT/$tag"/r/*.txt "$OUT/$tag"/r/summary.md "$R/$tag/" 2>/dev/null; rm -rf "${OUT:?}/$tag"
done
tar -C "$OUT" -czf "$OUT/results.tgz" r
