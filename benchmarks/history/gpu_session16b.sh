#!/usr/bin/env bash
# Session 16, one H200 call of about 8.5 minutes: the two candidates built on CPU in
# session 15, each script with its tests, timing and the decision rule in its header:
#   1. gpu_next_mask.sh: the Hopper forward's boolean mask (HAS_MASK, opt-in), ~3.5 min;
#   2. gpu_next_decode.sh: batch-1 decoding variants (deep, wide, fill, pdl, reserve), ~4.7 min.
# Each script's results come back as $OUT/<name>.tgz (the device returns at most 8 files).
#     OUT=$OUT bash benchmarks/history/gpu_session16b.sh
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
TAIL=${TAIL:-40} run_each mask:gpu_next_mask decode:gpu_next_decode
