#!/usr/bin/env bash
# Session 43, call B (one H200, under 10 minutes): gpu_next_decode_tma.sh (the "tma" decode
# candidate: its tests, two timing processes, the rule's verdict), then gpu_next_session43c.sh with
# shorter limits (GPU tests of sessions 42-43's host changes: test_configs.py with the forced
# oversize config's fallback, test_kvcache.py, test_nn.py, test_validation.py, test_backward.py,
# test_plans.py; the forced portable tier). Results: $OUT/verdict.txt, $OUT/results.tgz (tma),
# $OUT/tests.log, $OUT/tests_main.log.
#
#     OUT=/tmp/out bash benchmarks/history/gpu_next_session43b.sh
D="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
T_TESTS=${T_TESTS:-120} T_BENCH=${T_BENCH:-100} STOP=${STOP:-85} bash "$D/gpu_next_decode_tma.sh"
rm -rf "$OUT/r"
T_MAIN=${T_MAIN:-170} T_PORT=${T_PORT:-70} bash "$D/gpu_next_session43c.sh" | tail -30
