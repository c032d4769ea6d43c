#!/usr/bin/env bash
# Session 31, second call: records at today's defaults (GROUP_PARTIALS_16BIT on since call 1).
#   1. GPU tests (T_TESTS 120 s): the GQA / group-split tests of test_hopper_bwd.py and the
#      plan-world tests of test_plans.py, with the new default;
#   2. the variant table (gpu_next_variants.sh, T_BENCH 170 s): the plain causal GQA row
#      (S = 4 at B = 2, N = 4k, Hq 16 / Hkv 4) beside cuDNN with 16-bit partials;
#   3. bench_decode.py, the issue 11 table (B 1 / 8 / 64, N 1k-128k, contiguous and 16- /
#      256-token pages, SDPA flash and cuDNN, Flex at 8k / 64k, the copy ceiling), its first
#      full run since commit 7da8f36 (session 16 timed only B = 1 / 8 subsets); T_DEC 270 s,
#      no new shape after 230 s.
# One H200, about 9 minutes. A record, no rule.
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
gpu_tests tests_s31b ${T_TESTS:-120} -n 8 tests/test_hopper_bwd.py tests/test_plans.py \
  -k "(group and not 16bit and not f32) or partials or world"
OUT="$R/variants" bash benchmarks/gpu_next_variants.sh 2>&1 | tail -16
timeout -k 5 ${T_DEC:-270} python3 benchmarks/bench_decode.py --max-seconds ${DEC_STOP:-230} --out "$R/decode" \
  > "$R/bench_decode.log" 2>&1
echo "rc=$?" >> "$R/bench_decode.log"; el bench_decode
sed -n '/^| B/,/^$/p' "$R/decode/bench_decode.md" 2>/dev/null | head -30
grep -E "^- " "$R/decode/bench_decode.md" 2>/dev/null | cut -c1-300 | head -8
tar -C "$OUT" -czf "$OUT/results.tgz" r
