#!/usr/bin/env bash
# Dropout in the Hopper tier (HAS_DROPOUT in kernels/hopper/fwd.py and bwd.py,
# the Philox draws of kernels/hopper/dropout.py; written and checked on CPU
# only: the helpers against tl.randint4x and reference.dropout_keep in the
# interpreter, compile_check --hopper / --hopper-bwd --dropout) on one H200,
# under 4 minutes:
#   1. GPU tests tests/test_hopper_dropout.py with FLASHATTN_TRITON_HOPPER_DROPOUT=1
#      (-n 8): the keep mask the Hopper forward applied read back through its
#      output and compared with testing.dropout_mask's (the portable rule) and
#      the portable forward's, bit for bit; out, LSE, dq, dk, dv against
#      float64 with the same mask at d = 64/128/256, bf16 and fp16, causal and
#      not, GQA / MQA, ragged N, Nq != Nk, NaN past N; the backward's keys x
#      queries path (SPLIT_D=False); Hopper forward + portable backward and
#      portable forward + Hopper backward;
#   2. bench_variants.py --only dropout (bf16, B=2, N=4096, Hq=16, Hkv=4,
#      d=128, causal, p=0.1, against SDPA's dropout), without the opt-in (the
#      portable kernels) and with it (the Hopper forward and backward).
# Rule, fixed before the run: if every dropout test passes and the opt-in
# row is >= 1.0x SDPA forward and backward (speedup_fwd and speedup_bwd of
# bench_optin1), drop the opt-in (_dispatch.hopper_takes_variants takes
# dropout without FLASHATTN_TRITON_HOPPER_DROPOUT=1); if the tests pass but a
# speedup is below 1.0x, keep the opt-in and record the numbers (the Philox
# cost per tile, docs/hopper.md "Dropout"); any failure keeps the opt-in.
#
#     OUT=/tmp/out bash benchmarks/history/gpu_next_dropout.sh
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
git log -1 --format='commit %h %s' >> "$R/env.txt" 2>/dev/null
FLASHATTN_TRITON_TEST_DEVICE=cuda FLASHATTN_TRITON_HOPPER_DROPOUT=1 timeout -k 5 ${T_TESTS:-160} \
  python3 -m pytest -q -p no:cacheprovider -rfE --tb=short -n 8 tests/test_hopper_dropout.py \
  > "$R/tests_dropout.log" 2>&1
echo "rc=$?" >> "$R/tests_dropout.log"; el tests_dropout; tail -6 "$R/tests_dropout.log" | cut -c1-300
for opt in 0 1; do
  FLASHATTN_TRITON_HOPPER_DROPOUT=$opt timeout -k 5 ${T_BENCH:-60} python3 benchmarks/bench_variants.py \
    --only dropout --out "$R/bench_optin$opt" > "$R/bench_optin$opt.log" 2>&1
  echo "rc=$?" >> "$R/bench_optin$opt.log"; el "bench_optin$opt"
done
python3 - "$R" <<'PY'
import sys
sys.path.insert(0, "benchmarks")
from rules import tier_rows, tier_speedup
rows = tier_rows(lambda opt: f"{sys.argv[1]}/bench_optin{opt}")
for m in ("fwd", "bwd"):
    tier_speedup(rows, m)
r = rows.get(1, {})
fast = all((r.get(f"speedup_{m}") or 0) >= 1.0 for m in ("fwd", "bwd"))
print("rule (with the tests' rc above): opt-in row >= 1.0x SDPA fwd and bwd:", fast)
PY
tar -C "$OUT" -czf "$OUT/results.tgz" r
