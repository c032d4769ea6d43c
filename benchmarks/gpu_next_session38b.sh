#!/usr/bin/env bash
# The next session's second call (one H200, about 3-4 minutes): warp-state samples per SASS
# instruction (gpu_ncu_source.sh) of issue 10's dropout row against its plain twin (bench_variants'
# shape: B 2, N 4k, Hq 16 / Hkv 4, d 128, causal; ours and SDPA's backward kernels), the input of
# the next dropout change: in session 37's table the dropout backward read 0.89x SDPA (1.117 ms
# against 0.993) while the plain one read 1.03x (0.794 against 0.819), so dropout adds 0.32 ms to
# ours and 0.17 ms to SDPA's. Which lines hold the extra samples (the Philox rounds, the keep
# compares, spills, the longer programs' tail)? A record for docs/performance.md; no rule.
#
#     OUT=/tmp/out bash benchmarks/gpu_next_session38b.sh
source "$(dirname "${BASH_SOURCE[0]}")/gpu_lib.sh"
ROWS="bwd:dropout:4096:causal bwd:plain:4096:causal" TAIL=80 run_each ncu_dropout:gpu_ncu_source
