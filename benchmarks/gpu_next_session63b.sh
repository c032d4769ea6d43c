#!/usr/bin/env bash
# Queued by session 63 (its device time ran out; about 2 minutes, on an H100 to compare with
# results/h100/session63/, or rerun that probe beside it). Session 63's batch-1 probe at 2k found ours' longest
# program (sm__cycles_active.max, about 20k cycles on an H100) far past cuDNN's main kernel's
# (11.5k), under every plan, all with the fused merge. This profiles the same row with the merge
# in its own kernel (FLASHATTN_TRITON_DECODE_COMBINE=separate), and cuDNN's reduction kernel beside
# its main one: is the long program the merge, or a slow split? Commit under
# results/<gpu>/session64/ with the environment; read in docs/decode.md, "The longest program".
source "$(dirname "${BASH_SOURCE[0]}")/gpu_lib.sh"
for mode in separate fused; do
  FLASHATTN_TRITON_DECODE_COMBINE=$mode ROWS="decode:1:2048" PROVIDERS=ours,cudnn \
    KERNELS="regex:_decode_fwd|_combine_fwd|cudnn|lean" LAUNCHES=4 T_ROW=60 \
    NCU_EXTRA="--metrics sm__cycles_active.max,sm__cycles_active.min,sm__cycles_active.avg" \
    OUT="$OUT/$mode" bash benchmarks/gpu_ncu_source.sh > "$R/ncu_$mode.log" 2>&1
  el "$mode"
  grep -h -E "^  [_a-z].*\(|Duration|Elapsed Cycles|sm__cycles_active" "$OUT/$mode"/r/*.txt \
    | sed 's/   */ /g' | cut -c1-110 | tee "$R/cycles_$mode.txt"
  mkdir -p "$R/$mode" && cp "$OUT/$mode"/r/*.txt "$OUT/$mode"/r/summary.md "$R/$mode/" 2>/dev/null; rm -rf "${OUT:?}/$mode"
done
tar -C "$OUT" -czf "$OUT/results.tgz" r
