#!/usr/bin/env bash
# The next session's first call (one H200, about 5-6 minutes): gpu_next_short_bwd.sh, the backward's
# short-sequence rule (_dispatch.hopper_backward_pays) re-measured now that the Hopper backward writes
# dK / dV by TMA stores (TMA_DKV, session 36: 1.12-1.15x kernel-only at 2k, the gain growing as a
# program's query tiles get fewer). Session 28 had the Hopper tier at 1.085x / 1.100x the portable
# one's time at d = 128 N = 512 full / causal, the cells where our backward trails FlexAttention
# (0.92x / 0.98x in session 36's sweep). Rule in that script's header; results $OUT/short_bwd.tgz.
# Then gpu_next_session37b.sh.
#
#     OUT=/tmp/out bash benchmarks/history/gpu_next_session37a.sh
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
TAIL=40 run_each short_bwd:gpu_next_short_bwd
