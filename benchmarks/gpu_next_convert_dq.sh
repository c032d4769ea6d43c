#!/usr/bin/env bash
# The Hopper backward converting dQ itself (kernels/hopper/bwd.py CONVERT_DQ, built in session
# 19, off by default): the last program to add into a chunk of query tiles converts that chunk
# of the float32 buffer into dq, instead of a conversion after the kernel (session 19's profile,
# results/h200/session19/call5_short_bwd_kernels.txt, B*N = 16k, d = 128: the Triton conversion
# kernel 49 us non-causal, torch's copy 97 us causal, of 500-1600 us backward calls). One H200,
# about 4 minutes under the timeouts:
#   1. GPU tests (-n 8, T_TESTS 150 s): tests/test_hopper_bwd.py -k convert_dq_in_the_kernel
#      (126: 9 cases x d 64 / 128 x 7 variants: NAMED_BAR 1 / 2, a GQA group split, heads-first
#      order, chunks of 1 and 3 tiles; dq / dk / dv against float64, dq bit for bit the float32
#      buffer rounded, dk / dv the bits of the build without it, every chunk counter at its
#      number of key blocks; the Nq > Nk causal case converts after the kernel);
#   2. timing (benchmarks/bench_dq_convert.py --switch in-kernel --causal both, T_BENCH 170 s):
#      bf16, B*N = 16k, H = 2048/d, d 64 / 128 x N 2k / 4k / 8k plus GQA d = 128 N = 4k Hkv = 4,
#      causal and not (14 rows); CONVERT_DQ_DEFAULT's entry of the row's flag on against off,
#      alternated over 3 rounds, each setting from a fresh call plan (the backward plans
#      replay either); wall (do_bench median of out.backward) and kernel time (torch.profiler's
#      sum per backward call), off / on of the medians.
# Rule, fixed before the run (session 19), per causal flag: CONVERT_DQ_DEFAULT[flag] = True if
# the tests pass (rc=0), all 7 rows of the flag are measured with the in-kernel conversion
# taken (convert_ran), the kernel time per call is at least 15 us lower on every row, the
# median wall ratio off/on is >= 0.99 on every row and its geometric mean over the 7 rows
# >= 1.01; otherwise that entry stays off. Tests cut by their limit with no failure, or rows
# missing with none failing: inconclusive (rerun as printed).
source "$(dirname "${BASH_SOURCE[0]}")/gpu_lib.sh"
unset FLASHATTN_TRITON_HOPPER_CONVERT_DQ  # the module switch is what is measured
if [ -z "${SKIP_TESTS:-}" ]; then
  gpu_tests tests_convert_dq ${T_TESTS:-150} -n 8 tests/test_hopper_bwd.py -k "convert_dq_in_the_kernel"
fi
timeout -k 5 ${T_BENCH:-170} python3 benchmarks/bench_dq_convert.py --switch in-kernel --causal both \
  --out "$R" > "$R/bench_convert_dq.log" 2>&1
echo "rc=$?" >> "$R/bench_convert_dq.log"; el bench_convert_dq; cut -c1-400 "$R/bench_convert_dq.log" | tail -16
python3 - "$R/tests_convert_dq.log" "$R/bench_dq_convert.json" <<'PY' | tee "$OUT/verdict.txt"
import os, sys
sys.path.insert(0, "benchmarks")
from rules import json_rows, switch_rule, tests_state
skipped = bool(os.environ.get("SKIP_TESTS"))  # a timing rerun: the first run's tests decide
tests_ok, tests_cut, tests = tests_state(sys.argv[1], skipped)
table, notes = switch_rule(json_rows(sys.argv[2]), 7, tests_ok, tests_cut, geo_min=1.01,
                           row_ok=lambda r: r["kernel_us_med"]["off"] - r["kernel_us_med"]["on"] >= 15)
edit = {c: table.get(c, False) for c in (False, True)}
verdict = (f"set CONVERT_DQ_DEFAULT = {edit} in flashattn_triton/kernels/hopper/bwd.py" if table
           else "CONVERT_DQ_DEFAULT stays False (no edit)")
if notes:
    verdict += "; " + ", ".join(notes) + ": rerun with " + ("T_TESTS=240" if tests_cut else "SKIP_TESTS=1 T_BENCH=240")
print(f"tests {tests}; RULE: {verdict}")
PY
tar -C "$OUT" -czf "$OUT/results.tgz" r
