#!/usr/bin/env bash
# RAN in session 66 as call 5 (H100): results/h100/session66/call5/; rule not met (batch 12, 2k, 256-token pages 0.977x).
# Session 66, third call (one GPU, about 2 minutes; the second call with "solo" restricted): variant "solo" (kernels/decode.py: the split
# rule counts one program per SM, not two, while SMs / 4 <= programs <= SMs). Calls 2-3's sweeps on an
# H100 (results/h100/session66/) found the fixed counts that make about one program per SM faster
# than the automatic ones: batch 8 (64 programs) 2 splits over 4, 1.01-1.07x; batch 16 (128) 1 over
# 2, 1.01-1.08x; batch 4 and 32 already so.
# The second call (gpu_next_session66b.sh, results/h100/session66/call4/) missed its rule: contiguous
# caches read 1.01-1.22x at every changed row, 16-token pages 0.91-0.98x from 4k keys. "solo" now
# leaves pages smaller than a tile alone; this call retakes the rule on fresh repeats, with
# 256-token pages added (paged16 rows must keep the default's plan).
# It is gpu_next_session66b.sh with 256-token pages added (as it ran: commit f3a6dc3).
LAYOUTS=contiguous,paged16,paged256 exec bash "$(dirname "${BASH_SOURCE[0]}")/gpu_next_session66b.sh"
