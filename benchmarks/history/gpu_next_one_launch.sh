#!/usr/bin/env bash
# The portable backward's dK/dV and dQ programs in one launch (kernels/bwd.py ONE_LAUNCH,
# _bwd_dkdv_dq; built in session 19, off by default) instead of two: no gap between the two
# kernels, and the dQ programs fill the dK/dV programs' tail (issue 8: at d = 128 N = 512-1k
# the separate kernels take 263 + 188 us causal against FlexAttention's 439 in one kernel,
# results/h200/session19/call5_short_bwd_kernels.txt). One H200, 5-9.5 minutes (the limits add up
# to 570 s, under a device call's 600):
#   1. GPU tests (-n 8, T_TESTS 150 s): tests/test_backward.py -k one_launch (6: ragged lengths,
#      MHA / GQA / MQA, d 64 / 40 / 96, bf16 / fp16 / fp32 against float64 with one launch
#      counted, and the two-launch form on the same inputs; dropout + softcap + ALiBi + sinks +
#      window against the two-launch form; the scope and the launch config);
#   2. timing (benchmarks/bench_dq_convert.py --switch one-launch --causal both, T_BENCH 300 s),
#      FLASHATTN_TRITON_HOPPER_BWD=0 for the whole run so that every row takes the portable
#      backward (without it the Hopper backward takes the longer rows and ONE_LAUNCH is never
#      reached there): bf16, B*N = 16k, H = 2048/d, d 64 / 128 x N 512 / 1k / 2k, causal and
#      not (12 rows); ONE_LAUNCH's entry of the row's flag on against off, alternated over 3
#      rounds, each setting from a fresh call plan (the backward plans replay either); wall
#      (do_bench median of out.backward) and kernel time (torch.profiler's sum per call),
#      off / on of the medians.
#   3. information only, not in the rule (T_BENCH2 120 s): the 3 causal d = 128 rows again with
#      FLASHATTN_TRITON_CONFIG_BWD_ONE="BLOCK_M1=64,BLOCK_N1=128,num_warps=8,num_stages=3"
#      (FlexAttention's configs; the table's causal dK/dV config is 32 x 64 with 4 warps, so the
#      default one launch runs it with the dQ config's 8 warps: compile_check, d = 128, 226
#      registers and no spill for 32 x 64 + 128 x 64 with 8 warps and 2 stages), in $R/flexcfg.
# Rule, fixed before the run (session 19), per causal flag: ONE_LAUNCH[flag] = True if the
# tests pass (rc=0), all 6 rows of the flag are measured with the one launch taken
# (convert_ran: _bwd_dkdv_dq ran on and not off), the median wall ratio off/on is >= 0.99 on
# every row and its geometric mean over the 6 rows >= 1.02; otherwise that entry stays off.
# (Note: at d = 64 the dQ programs may run with the dK/dV programs' registers, compile_check's
# first candidates: 234-255 instead of 128-165, one block per SM instead of two; the d = 64 rows
# may lose.) Tests cut by their limit with no failure, or rows missing with none failing:
# inconclusive (rerun as printed).
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
unset FLASHATTN_TRITON_BWD_ONE_LAUNCH  # the module switch is what is measured
export FLASHATTN_TRITON_HOPPER_BWD=0  # every row on the portable backward (see the header)
if [ -z "${SKIP_TESTS:-}" ]; then
  gpu_tests tests_one_launch ${T_TESTS:-150} -n 8 tests/test_backward.py -k one_launch
fi
timeout -k 5 ${T_BENCH:-300} python3 benchmarks/bench_dq_convert.py --switch one-launch --causal both \
  --head-dims 64,128 --seqlens 512,1024,2048 --gqa "" --out "$R" > "$R/bench_one_launch.log" 2>&1
echo "rc=$?" >> "$R/bench_one_launch.log"; el bench_one_launch; cut -c1-400 "$R/bench_one_launch.log" | tail -14
mkdir -p "$R/flexcfg"
FLASHATTN_TRITON_CONFIG_BWD_ONE="BLOCK_M1=64,BLOCK_N1=128,num_warps=8,num_stages=3" timeout -k 5 ${T_BENCH2:-120} \
  python3 benchmarks/bench_dq_convert.py --switch one-launch --causal causal --head-dims 128 \
  --seqlens 512,1024,2048 --gqa "" --out "$R/flexcfg" > "$R/flexcfg/bench_one_launch.log" 2>&1
echo "rc=$?" >> "$R/flexcfg/bench_one_launch.log"; el bench_one_launch_flexcfg
echo "information (Flex's configs for the one launch, causal):"; cut -c1-400 "$R/flexcfg/bench_one_launch.log" | tail -8
python3 - "$R/tests_one_launch.log" "$R/bench_dq_convert.json" <<'PY' | tee "$OUT/verdict.txt"
import os, sys
sys.path.insert(0, "benchmarks")
from rules import json_rows, switch_rule, tests_state
skipped = bool(os.environ.get("SKIP_TESTS"))  # a timing rerun: the first run's tests decide
tests_ok, tests_cut, tests = tests_state(sys.argv[1], skipped)
table, notes = switch_rule(json_rows(sys.argv[2]), 6, tests_ok, tests_cut, geo_min=1.02)
edit = {c: table.get(c, False) for c in (False, True)}
if len(table) == 2:
    edit = True
verdict = (f"set the default of ONE_LAUNCH to {edit} in flashattn_triton/kernels/bwd.py (the last argument of "
           f"ONE_LAUNCH = {{...}}.get(..., False) becomes {edit})" if table else "ONE_LAUNCH stays False (no edit)")
if notes:
    verdict += "; " + ", ".join(notes) + ": rerun with " + ("T_TESTS=300" if tests_cut else "SKIP_TESTS=1 T_BENCH=450")
print(f"tests {tests}; RULE: {verdict}")
PY
tar -C "$OUT" -czf "$OUT/results.tgz" r
