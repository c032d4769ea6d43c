#!/usr/bin/env bash
# RAN in session 66 as call 14 (H100): results/h100/session66/call14/, the table in results/h100/decode/; 260 passed.
# Session 66, last call (one GPU, about 2.5 minutes): "solo" now re-plans contiguous caches only
# (calls 12-13: 256-token pages moved 0.88-1.31x with the timing order). At the final defaults:
# the decode GPU tests and the issue 11 table (bench_decode.py with the spot-check settle).
# The steps are those of gpu_next_session66e.sh (as it ran: commit 9653a2b).
exec bash "$(dirname "${BASH_SOURCE[0]}")/gpu_next_session66e.sh"
