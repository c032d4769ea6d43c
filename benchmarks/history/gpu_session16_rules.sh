#!/usr/bin/env bash
# Session 16 (one H200, about 8 minutes; run with timeout_s 600): two measurements whose
# rules are fixed in their scripts' headers, from a tree of branch rules-next:
#   1. gpu_next_window_rule.sh: a size rule for the Hopper window backward
#      (_dispatch.HOPPER_BWD_WINDOW_MIN_LEFT; under 4 minutes);
#   2. gpu_next_dropout_default.sh: dropout on the Hopper tier by default
#      (_dispatch.HOPPER_DROPOUT_DEFAULT; tests, then timing; under 4 minutes).
# Each script's results go to /tmp/<name>/r and come back as one tarball each
# ($OUT/<name>.tgz; the device returns at most 8 files, 2 folders deep); the verdicts
# are the last lines each script prints.
#
#     OUT=$OUT bash benchmarks/history/gpu_session16_rules.sh
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
git log -1 --format='commit %h %s' >> "$R/env.txt" 2>/dev/null
TAIL=${TAIL:-70} run_each window_rule:gpu_next_window_rule dropout_default:gpu_next_dropout_default
tar -C "$OUT" -czf "$OUT/session.tgz" r
