#!/usr/bin/env bash
# Next session's first call, from a tree of branch next-gpu (main + hopper-bwd-192 +
# hopper-dq-layout), under 10 minutes on one H200:
#   1. tests/test_hopper_bwd.py + tests/test_hopper_dropout.py whole on the GPU (-n 12):
#      the dQ buffer in dq's order under every case, the d = 192 / dv = 128 backward's
#      tests (UNVERIFIED), everything else unchanged by the two branches;
#   2. the timing halves (SKIP_TESTS=1) of gpu_next_bwd192.sh and gpu_next_dq_layout.sh,
#      each with its decision rule in its header, results under $OUT/r/<name>/.
# Results come back only to a depth of a few folders: each script's results are
# copied to $OUT/<name>/ after it.
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
FLASHATTN_TRITON_TEST_DEVICE=cuda timeout -k 5 ${T_TESTS:-230} python3 -m pytest -q -p no:cacheprovider -rfE \
  --tb=short -n 12 tests/test_hopper_bwd.py tests/test_hopper_dropout.py > "$R/tests.log" 2>&1
echo "rc=$?" >> "$R/tests.log"; el tests; tail -8 "$R/tests.log" | cut -c1-300
# gpu_next_bwd192.sh's rule reads its tests' log: the whole-file run above stands for it
mkdir -p /tmp/bwd192/r && cp "$R/tests.log" /tmp/bwd192/r/tests_bwd192.log
for s in bwd192:gpu_next_bwd192 dq_layout:gpu_next_dq_layout; do
  echo "== ${s#*:}"
  SKIP_TESTS=1 OUT="/tmp/${s%%:*}" bash "benchmarks/${s#*:}.sh" 2>&1 | tail -${TAIL:-30}
  mkdir -p "$OUT/${s%%:*}" && cp -r "/tmp/${s%%:*}/r/." "$OUT/${s%%:*}/" 2>/dev/null
  el "${s#*:}"
done
