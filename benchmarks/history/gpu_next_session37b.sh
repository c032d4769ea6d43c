#!/usr/bin/env bash
# The next session's second call (one H200, about 9 minutes): gpu_next_tma_dkv_variants.sh (TMA_DKV for
# dropout and windowed backward calls) and gpu_next_tma_dkv256.sh (TMA_DKV at d = 256), rules in their
# headers; results $OUT/<name>.tgz and their verdicts. Then gpu_next_session37c.sh.
#
#     OUT=/tmp/out bash benchmarks/history/gpu_next_session37b.sh
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
TAIL=70 run_each tma_dkv_variants:gpu_next_tma_dkv_variants tma_dkv256:gpu_next_tma_dkv256
