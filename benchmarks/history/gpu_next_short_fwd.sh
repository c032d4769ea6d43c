#!/usr/bin/env bash
# Short sequences on the portable forward (_dispatch.HOPPER_FWD_SHORT): one H200, about 2
# minutes (most of it compiles).  The session 18 sweeps (calls 4 and 5, bf16 and fp16, B*N =
# 16k) had the portable forward ahead of the Hopper one at d = 64 only: causal N = 512 / 1k
# 1.15-1.19x, non-causal N = 512 1.11-1.13x, equal at 1k non-causal and 2k causal.
#   1. GPU tests: tests/test_hopper.py -k short_sequences (the dispatch, stubbed kernels; both
#      tiers' forward at these shapes are GPU-tested already, test_forward.py / test_hopper.py);
#   2. timing, two repeats in fresh processes: bench_attention.py --modes fwd, bf16, B*N = 16k,
#      H = 2048/d, d 64 / 128, N 512 / 1k / 2k, causal and not, providers flashattn_triton (the
#      Hopper forward: FLASHATTN_TRITON_BACKEND=hopper for the run, which the table does not
#      apply to) and flashattn_triton_portable (FLASHATTN_TRITON_BACKEND=portable around its calls).
# Rule, fixed before the run: for each (d, causal), N* = the largest N of 512 / 1k / 2k such
# that at N* and at every smaller N of the list portable / Hopper >= 1.05 in both repeats; if
# the tests passed, HOPPER_FWD_SHORT becomes {(d, causal): N*} over the cells where N* exists.
# Session 18 call 10 ran it with T_BENCH=50 and the table empty: {(64, False): 512}; the first
# repeat ran out of time before the portable causal rows, so d = 64 causal is open.
# Session 19 call 1 (the rule above): {(64, True): 1024, (64, False): 512}; d = 64 non-causal
# 1k read 1.043 / 1.035 (below 1.05), where the Hopper forward trails Flex (0.984-0.992x).
# A rerun for that cell: NEED=1.02 REPEATS=3 (rule: >= NEED in every repeat), fixed in
# session 19 before any run of it.
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
if [ -z "${SKIP_TESTS:-}" ]; then
  gpu_tests tests_short ${T_TESTS:-100} -n 8 tests/test_hopper.py -k short_sequences
else
  echo "rc=0 (SKIP_TESTS)" > "$R/tests_short.log"
fi
for rep in $(seq 1 ${REPEATS:-2}); do
  FLASHATTN_TRITON_BACKEND=hopper timeout -k 5 ${T_BENCH:-100} python3 benchmarks/bench_attention.py --modes fwd --dtype bf16 \
    --head-dims 64,128 --seqlens 512,1024,2048 --causal both \
    --providers flashattn_triton,flashattn_triton_portable --warmup 10 --rep 50 \
    --no-progress --no-plot --out "$R/rep$rep" > "$R/rep$rep.log" 2>&1
  echo "rc=$?" >> "$R/rep$rep.log"; el "rep$rep"
done
python3 - "$R" <<'PY' 2>&1 | tee "$R/verdict.txt"
import json, os, sys
sys.path.insert(0, "benchmarks")
from rules import tests_passed
R, LENGTHS = sys.argv[1], (512, 1024, 2048)
NEED, REPEATS = float(os.environ.get("NEED", "1.05")), int(os.environ.get("REPEATS", "2"))
reps = []
for rep in range(1, REPEATS + 1):
    try:
        rows = json.load(open(f"{R}/rep{rep}/bench_attention.json"))["rows"]
    except (OSError, ValueError, KeyError):
        rows = []
    reps.append({(r["provider"], r["head_dim"], r["causal"], r["seqlen_q"]): r["ms"]
                 for r in rows if r.get("status") == "ok"})
tests_ok = tests_passed(f"{R}/tests_short.log")
table = {}
for d in (64, 128):
    for causal in (True, False):
        short = None
        for n in LENGTHS:
            ratios = []
            for rep in reps:
                h, p = rep.get(("flashattn_triton", d, causal, n)), rep.get(("flashattn_triton_portable", d, causal, n))
                ratios.append(h / p if h and p else None)
            ok = all(x is not None and x >= NEED for x in ratios)
            print(f"d={d} {'causal' if causal else 'full  '} N={n}: portable/hopper "
                  + " ".join(f"{x:.3f}" if x else "-" for x in ratios) + (f"  >= {NEED} in all" if ok else ""))
            if not ok:
                break
            short = n
        if short is not None:
            table[(d, causal)] = short
print(f"tests: {'passed' if tests_ok else 'NOT passed'}")
print(f"RULE: HOPPER_FWD_SHORT = {table if tests_ok else {}}")
PY
tar czf "$OUT/results.tgz" -C "$OUT" r
