#!/usr/bin/env bash
# Boolean masks in the Hopper forward (HAS_MASK in kernels/hopper/fwd.py: the
# mask bytes loaded in the S accumulator's layout; written and checked on
# CPU only: compile_check --hopper --mask, the fake-driver launch test, the
# dispatch tests) on one H200, under 4 minutes:
#   1. GPU tests tests/test_hopper_mask.py (-n 8): the kernel against float64
#      with the mask applied by reference.attention_ref, outputs NaN-poisoned:
#      masks (B,1,N,N), (1,H,N,N), (B,H,N,N), (1,1,1,Nk), rows with no key and
#      rows whose first 300 keys are masked, GQA / MQA, ragged N, Nq != Nk, a
#      row-padded mask, causal + mask, window + mask, an all-False mask,
#      d = 64/128/256 (and 192 / dv = 128), bf16 and fp16, the persistent and
#      dynamic schedules;
#      the SDPA entry with and without FLASHATTN_TRITON_HOPPER_MASK=1
#      (forward tier, output and gradients through the portable backward);
#   2. bench_variants.py --only "bool mask" (bf16, B=2, N=4096, Hq=16, Hkv=4,
#      d=128, not causal, mask = rand(B,1,N,N) > 0.1, through the SDPA entry,
#      against SDPA's attn_mask), with FLASHATTN_TRITON_HOPPER_MASK=0 (the
#      portable kernel) and =1 (the Hopper forward; the backward is portable
#      in both).
# Rule, fixed before the run: if every test passes (rc=0 in tests_mask.log)
# and the opt-in row's forward is >= 1.0x SDPA's (speedup_fwd of
# bench_mask1) and >= 1.1x the portable forward (ours_fwd_ms of bench_mask0
# / bench_mask1), make the Hopper mask path the default
# (_dispatch.HOPPER_MASK_DEFAULT = "1"; FLASHATTN_TRITON_HOPPER_MASK=0 still
# turns it off); otherwise keep the opt-in and record the numbers (docs/hopper.md
# "Masks"); any test failure keeps the opt-in.  The verdict line says which.
#
#     OUT=/tmp/out bash benchmarks/history/gpu_next_mask.sh
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
git log -1 --format='commit %h %s' >> "$R/env.txt" 2>/dev/null
gpu_tests tests_mask ${T_TESTS:-130} -n 8 tests/test_hopper_mask.py
for opt in 0 1; do
  FLASHATTN_TRITON_HOPPER_MASK=$opt timeout -k 5 ${T_BENCH:-50} python3 benchmarks/bench_variants.py \
    --only "bool mask" --out "$R/bench_mask$opt" > "$R/bench_mask$opt.log" 2>&1
  echo "rc=$?" >> "$R/bench_mask$opt.log"; el "bench_mask$opt"
done
python3 - "$R" <<'PY'
import re, sys
sys.path.insert(0, "benchmarks")
from rules import tier_rows, tier_speedup
R = sys.argv[1]
rows = tier_rows(lambda opt: f"{R}/bench_mask{opt}")
vs_portable = tier_speedup(rows, "fwd")
log = open(f"{R}/tests_mask.log").read()
rc = re.findall(r"^rc=(\d+)", log, re.M)
tests_ok = bool(rc) and rc[-1] == "0"
vs_sdpa = rows.get(1, {}).get("speedup_fwd") or 0
default_on = tests_ok and vs_sdpa >= 1.0 and (vs_portable or 0) >= 1.1
print(f"rule: tests pass {tests_ok}, opt-in fwd vs SDPA {vs_sdpa:.2f}x (>= 1.0), "
      f"vs portable {vs_portable or 0:.2f}x (>= 1.1)")
print("VERDICT:", "default on (set _dispatch.HOPPER_MASK_DEFAULT = \"1\")" if default_on
      else "keep the opt-in (HOPPER_MASK_DEFAULT stays \"0\"); record the numbers")
PY
tar -C "$OUT" -czf "$OUT/results.tgz" r
