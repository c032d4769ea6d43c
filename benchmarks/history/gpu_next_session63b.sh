#!/usr/bin/env bash
# Ran in session 64 on an H100 (results/h100/session64/). Queued by session 63 (its device time ran out; about 5 minutes, on an H100 to compare with
# results/h100/session63/, or rerun that probe beside it). Session 63's batch-1 probe at 2k found ours' longest
# program (sm__cycles_active.max, about 20k cycles on an H100) far past cuDNN's main kernel's
# (11.5k), under every plan, all with the fused merge. This profiles the same row with the merge
# in its own kernel (FLASHATTN_TRITON_DECODE_COMBINE=separate), and cuDNN's reduction kernel beside
# its main one: is the long program the merge, or a slow split? Commit under
# results/<gpu>/session64/ with the environment; read in docs/decode.md, "The longest program".
# First (about 3 minutes) the GPU tests of session 63's host changes: the packed Hopper switches
# in the call plans' key and worlds (test_plans.py, test_fastlaunch.py, test_hopper_varlen.py) and
# test_varlen.py's NaN-in-one-sequence case (the portable kernels, the Hopper switches at 0).
# Also test_chunk.py (api._chunk_offsets keys on current_stream_handle since session 62; its GPU cases never ran).
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
gpu_tests plans 360 -n 4 tests/test_plans.py tests/test_fastlaunch.py tests/test_hopper_varlen.py tests/test_varlen.py tests/test_chunk.py
for mode in separate fused; do
  FLASHATTN_TRITON_DECODE_COMBINE=$mode PLANS62=default ROWS62="decode:1:2048" LAUNCHES62=4 \
    KERNELS62="regex:_decode_fwd|_combine_fwd|cudnn|lean" OUT="$OUT/$mode" \
    timeout -k 5 100 bash benchmarks/history/gpu_next_session62.sh > "$R/$mode.log" 2>&1
  echo "rc=$?" >> "$R/$mode.log"; el "$mode"; cat "$OUT/$mode"/r/cycles_default.txt
done
tar -C "$OUT" -czf "$OUT/results.tgz" r separate/r fused/r
