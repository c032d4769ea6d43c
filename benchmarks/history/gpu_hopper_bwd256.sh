#!/usr/bin/env bash
# d = 256 Hopper backward (kernels/hopper/bwd.py SPLIT_D path; in CONFIGS
# since session 10 call 7, CONFIGS_UNVERIFIED before) on one H200, under 150 s:
#   1. benchmarks/hopper_bwd_smoke.py --d 256: one ragged GQA case (B=2, Hq=8,
#      Hkv=2, Nq=333, Nk=1201, causal and not) vs float64, default config, then
#      the one-stage variant; "x.xx of tol" must be <= 1 everywhere, rc=0;
#   2. the GPU tests of d=256 and of the SPLIT_D path (-k "d256 or split");
#   3. hopper_bwd_probe.py at d=256, N 2k / 8k, causal and not, one GQA row:
#      default vs the one-stage variant vs HEADS_FIRST, the API, cuDNN and
#      SDPA flash (FA2); "default/fa2" >= 1.00 is issue 8's bar.
set -u -o pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1 MPLBACKEND=Agg
OUT="${OUT:-/tmp/out}"; R="$OUT/r"; mkdir -p "$R"
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
git log -1 --format=%H > "$R/env.txt" 2>/dev/null
ONE_STAGE="NUM_STAGES=1+DS_BUFS=2+DQ_CHUNK=128"
{ timeout -k 3 ${T_SMOKE:-20} python3 benchmarks/hopper_bwd_smoke.py --d 256; echo "rc=$?"
  timeout -k 3 ${T_SMOKE2:-12} python3 benchmarks/hopper_bwd_smoke.py --d 256 --variant $ONE_STAGE; echo "rc=$?"
} > "$R/smoke.log" 2>&1
el smoke; cut -c1-300 "$R/smoke.log" | tail -16
FLASHATTN_TRITON_TEST_DEVICE=cuda timeout -k 3 ${T_TESTS:-68} python3 -m pytest -q -p no:cacheprovider -rfE \
  --tb=short -n 4 tests/test_hopper_bwd.py -k "d256 or split" > "$R/tests.log" 2>&1
echo "rc=$?" >> "$R/tests.log"; el tests; grep -E "^(FAILED|ERROR)" "$R/tests.log" | cut -c1-300 | head -12
tail -3 "$R/tests.log" | cut -c1-300
timeout -k 3 ${T_PROBE:-36} python3 benchmarks/hopper_bwd_probe.py --out "$R" --head-dims 256 --seqlens 2048,8192 \
  --variants default,$ONE_STAGE,HEADS_FIRST=true --variants256 "" --gqa 2,8,2,8192,256,1 --rep 40 \
  > "$R/probe.log" 2>&1
echo "rc=$?" >> "$R/probe.log"; el probe; cut -c1-400 "$R/probe.log"
tar -C "$OUT" -czf "$OUT/results.tgz" r
