#!/usr/bin/env bash
# RAN in session 66 as call 6 (H100): results/h100/session66/call6/; rule missed at one row (0.988 / 0.998).
# Session 66, fourth call (one GPU, about 2 minutes; "solo" restricted twice): variant "solo" (kernels/decode.py: the split
# rule counts one program per SM, not two, while SMs / 4 <= programs <= SMs). Calls 2-3's sweeps on an
# H100 (results/h100/session66/) found the fixed counts that make about one program per SM faster
# than the automatic ones: batch 8 (64 programs) 2 splits over 4, 1.01-1.07x; batch 16 (128) 1 over
# 2, 1.01-1.08x; batch 4 and 32 already so.
# The second call (gpu_next_session66b.sh, results/h100/session66/call4/) missed its rule: contiguous
# caches read 1.01-1.22x at every changed row, 16-token pages 0.91-0.98x from 4k keys. "solo" now
# leaves pages smaller than a tile alone; this call retakes the rule on fresh repeats, with
# 256-token pages added (paged16 rows must keep the default's plan).
# The third call (gpu_next_session66c.sh, call5/) missed it by one row of 104: batch 12 at 2k keys in
# 256-token pages, 0.977x, where the one-per-SM rule took 4 splits for the default's 2 (geomean 1.058).
# "solo" now never takes more splits than the default rule; fresh repeats, the same rule.
# It is gpu_next_session66b.sh with 256-token pages added (as it ran: commit 6706440).
LAYOUTS=contiguous,paged16,paged256 exec bash "$(dirname "${BASH_SOURCE[0]}")/gpu_next_session66b.sh"
