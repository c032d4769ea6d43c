#!/usr/bin/env bash
# The next session's first call (one H200, about 7 minutes): gpu_next_q_halves_late.sh, three forms of
# the d = 192 step's P^T / dS^T exchange (Q_HALVES=2 / 3 / 4) against the default, under the rule in its
# header ($OUT/q_halves_late.tgz, $OUT/q_halves_late_verdict.txt). The second call is
# gpu_next_session36b.sh.
#
#     OUT=/tmp/out bash benchmarks/history/gpu_next_session36a.sh
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
run_each q_halves_late:gpu_next_q_halves_late
