#!/usr/bin/env bash
# The next session's first call (one H200, about 5 minutes): gpu_next_gqa_unsplit_heads_first.sh
# (heads-first order for unsplit causal GQA backward calls at d = 64 / 128, its rule in its header;
# $OUT/unsplit_hf.tgz, $OUT/unsplit_hf_verdict.txt).
#
#     OUT=/tmp/out bash benchmarks/gpu_next_session36a.sh
source "$(dirname "${BASH_SOURCE[0]}")/gpu_lib.sh"
run_each unsplit_hf:gpu_next_gqa_unsplit_heads_first
