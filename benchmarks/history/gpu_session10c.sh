#!/usr/bin/env bash
# Third single-H200 call of session 10 (about 4 minutes): variants of the Gluon
# backward (benchmarks/hopper_bwd_probe.py: PIPELINE, d=64 tiles and stages)
# next to SDPA cuDNN in one process, then the backward's GPU tests (incl. every variant).
set -u -o pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1 MPLBACKEND=Agg
OUT="${OUT:-/tmp/out}"; R="$OUT/r"; mkdir -p "$R"
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
git log -1 --format=%H > "$R/env.txt" 2>/dev/null
timeout -k 5 ${T_PROBE:-170} python3 benchmarks/hopper_bwd_probe.py --out "$R" > "$R/probe.log" 2>&1
echo "rc=$?" >> "$R/probe.log"; el probe; cut -c1-400 "$R/probe.log"
FLASHATTN_TRITON_TEST_DEVICE=cuda timeout -k 5 ${T_TESTS:-90} \
  python3 -m pytest -q -p no:cacheprovider -rfE --tb=short -n 4 tests/test_hopper_bwd.py > "$R/tests.log" 2>&1
echo "rc=$?" >> "$R/tests.log"; el tests; tail -4 "$R/tests.log" | cut -c1-300
tar -C "$OUT" -czf "$OUT/results.tgz" r
