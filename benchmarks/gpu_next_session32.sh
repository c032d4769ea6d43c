#!/usr/bin/env bash
# Session 32's first call (one H200, about 3 minutes): the decoding split sweeps session 31
# could not run (device time), exploratory, no rule: gpu_next_decode_paged.sh with
# SKIP_PAGED=1 (B = 64 / 16 at 8k / 32k with 1-4 splits against the automatic count: B = 64
# reads 3.9 TB/s unsplit, 512 programs in 1.3 waves, against cuDNN's 4.5; B = 1 at 2k / 4k
# with 4-12 splits: 0.87x / 0.95x cuDNN at 16). A gain there is a change of
# kernels/decode.py choose_num_splits to time with its own rule next.
source "$(dirname "${BASH_SOURCE[0]}")/gpu_lib.sh"
SKIP_PAGED=1 OUT="$R/sweeps" bash benchmarks/gpu_next_decode_paged.sh 2>&1 | tail -30
tar -C "$OUT" -czf "$OUT/results.tgz" r
