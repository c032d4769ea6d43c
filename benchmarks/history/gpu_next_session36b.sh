#!/usr/bin/env bash
# The next session's second call (one H200, about 5 minutes): gpu_next_gqa_unsplit_heads_first.sh,
# heads-first order for unsplit causal GQA backward calls at d = 64 / 128, under the rule in its header
# ($OUT/unsplit_hf.tgz, $OUT/unsplit_hf_verdict.txt).
#
#     OUT=/tmp/out bash benchmarks/history/gpu_next_session36b.sh
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
run_each unsplit_hf:gpu_next_gqa_unsplit_heads_first
