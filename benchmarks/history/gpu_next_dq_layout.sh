#!/usr/bin/env bash
# The Hopper backward's float32 dQ buffer in dq's memory order (DQ_ACC_LIKE_DQ in
# kernels/hopper/bwd.py, dq_acc_strides; written and checked on CPU only) on one
# H200, under 5 minutes.  Session 14 call 3's profile (B=8 H=16 N=2k d=128, window
# 1024): the buffer's conversion into dq took 97.7 us of 858 (a strided elementwise
# copy: the buffer was (B, H, N, d), dq a view of (B, N, H, d)); in dq's order both
# are walked alike and the copy is dense.
#   1. GPU tests: tests/test_hopper_bwd.py whole (-n 12; every case reads dQ
#      through the new buffer), tests/test_hopper_dropout.py;
#   2. the kernel list of the window probe (--profile, d=128 N=2k window 1024):
#      the copy kernel's time against call 3's 97.7 us;
#   3. timing, two repeats: default (the new layout) against
#      mod:DQ_ACC_LIKE_DQ=False (the old buffer), both through the cached plans,
#      d 64/128, N 2k/8k, causal and not, bf16, B*N = 16k, H = 2048/d, with cuDNN.
# Rule, fixed before the run: the layout stays (DQ_ACC_LIKE_DQ = True) if every
# test passes, every check is ok, default / old >= 0.99 on every row in both
# repeats and >= 1.01 on average; otherwise DQ_ACC_LIKE_DQ = False.
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
if [ -z "${SKIP_TESTS:-}" ]; then  # SKIP_TESTS=1: timing only
gpu_tests tests_dq_layout ${T_TESTS:-220} -n 12 tests/test_hopper_bwd.py tests/test_hopper_dropout.py
fi
mkdir -p "$R/profile"
timeout -k 5 ${T_PROF:-60} python3 benchmarks/hopper_bwd_probe.py --rows window --head-dims 128 --seqlens 2048 \
  --windows 1024 --profile --out "$R/profile" > "$R/profile/log.txt" 2>&1
echo "rc=$?" >> "$R/profile/log.txt"; el profile; grep -A5 "^PROFILE" "$R/profile/log.txt" | cut -c1-160 | head -24
probe_reps ${T_BENCH:-80} --head-dims 64,128 --seqlens 2048,8192 --gqa none \
  --variants "default,mod:DQ_ACC_LIKE_DQ=False" --variants64 "" --variants256 "" --baselines cudnn --rep 40
python3 - "$R/rep1/hopper_bwd_probe.json" "$R/rep2/hopper_bwd_probe.json" <<'PY'
import sys
sys.path.insert(0, "benchmarks")
from rules import load_reps
reps = load_reps(sys.argv[1:])
ok, ratios_all = True, []
for rows in zip(*reps):
    r0 = rows[0]
    ratios = [r["tflops"]["default"] / r["tflops"]["mod:DQ_ACC_LIKE_DQ=False"]
              if r["tflops"].get("default") and r["tflops"].get("mod:DQ_ACC_LIKE_DQ=False") else None for r in rows]
    checks = all(c in ("ok", "ref") for r in rows for c in r["check"].values() if c)
    row_ok = checks and all(x is not None and x >= 0.99 for x in ratios)
    ok &= row_ok
    ratios_all += [x for x in ratios if x]
    print(f"N={r0['n']} d={r0['d']} causal={r0['causal']!s:5}: new/old " + " ".join(f"{x:.3f}" if x else "-" for x in ratios)
          + ("" if row_ok else "  below 0.99" + ("" if checks else f" checks {r0['check']}")))
mean = sum(ratios_all) / max(len(ratios_all), 1)
print(f"{len(reps[0])} rows, mean new/old {mean:.3f}; timing rule:",
      "met: the layout stays" if ok and mean >= 1.01 and len(reps[0]) == 8 else "NOT met: DQ_ACC_LIKE_DQ = False",
      "(if the tests in tests_dq_layout.log passed)")
PY
