#!/usr/bin/env bash
# Session 15 call 2 (one H200, under 10 minutes), from a tree of branch next-gpu:
#   1. tests/test_hopper_dropout.py whole (-n 12): call 1 saw the Hopper forward
#      decline 5 dropout tests, all on one xdist worker; the assertion messages
#      now name the decline reasons and build errors;
#   2. gpu_next_gqa_split.sh (tests, then the timing with its rule);
#   3. gpu_next_window_cfg.sh (timing with its rule).
# Each script's results go to /tmp/<name>/r and come back as one tarball each
# ($OUT/<name>.tgz: the device returns at most 8 files).
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
FLASHATTN_TRITON_TEST_DEVICE=cuda timeout -k 5 ${T_DROP:-110} python3 -m pytest -q -p no:cacheprovider -rfE \
  --tb=short -n 12 tests/test_hopper_dropout.py > "$R/tests_dropout.log" 2>&1
echo "rc=$?" >> "$R/tests_dropout.log"; el tests_dropout; grep -E "^E  |passed|failed" "$R/tests_dropout.log" | cut -c1-600 | tail -12
for s in gqa_split:gpu_next_gqa_split:${T_GQA:-90} window_cfg:gpu_next_window_cfg:${T_WIN:-160}; do
  n=${s%%:*}; s=${s#*:}
  echo "== ${s%%:*}"
  T_BENCH=${s#*:} OUT="/tmp/$n" bash "benchmarks/${s%%:*}.sh" 2>&1 | tail -${TAIL:-26}
  tar -C "/tmp/$n" -czf "$OUT/$n.tgz" r
  el "$n"
done
tar -C "$OUT" -czf "$OUT/session.tgz" r
