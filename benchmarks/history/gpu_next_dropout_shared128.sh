#!/usr/bin/env bash
# Session 22 call 3: DROPOUT_CONFIGS[128] with shared Philox calls, decided on two repeats, then
# the variants table (gpu_next_variants.sh) at the decision. Call 1 (gpu_next_dropout_shared.sh)
# measured the keys x queries path with DROPOUT_SHARED_CALLS at 1.04-1.13x the SPLIT_D default on
# the four d = 128 MHA rows but 0.34x on the GQA row, and its rule kept SPLIT_D; call 2
# (gpu_next_dropout_gqa.sh, two repeats) timed that GQA row at 1.012x and one MHA row's
# GROUP_SPLIT=1 build at 0.443x in one repeat and 1.026x in the other: single slow repeats
# (do_bench's mean over a run that hit a stall), not the build. So here every row runs twice
# and each variant keeps its faster repeat (a stall only slows).
# Rows (bf16, dropout 0.1, kernel-only backward, hopper_bwd_probe.py): B*N = 16k H 16 d 128 N 2k
# / 8k causal and not, and GQA B=2 Hq16 Hkv4 N=4k causal and not; variants default and shared
# (SPLIT_D=0, BLOCK_N 128, BLOCK_M 64, 2 stages, DROPOUT_SHARED_CALLS).
# Rule, fixed before the run: shared replaces DROPOUT_CONFIGS[128] if every row's check is "ok",
# every row's best-of-two ratio over the default's best-of-two is >= 0.98 and their geometric
# mean >= 1.03 (the GPU tests of the build passed in calls 1; PART=a2 in call 2). The
# variants table then runs with the decision applied to this copy of the tree.
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
KF="SPLIT_D=0+BLOCK_N=128+BLOCK_M=64+DQ_CHUNK=0+NUM_STAGES=2"
SH="$KF+DROPOUT_SHARED_CALLS=1"
probe_reps ${T_PROBE:-110} --dropout 0.1 --head-dims 128 --seqlens 2048,8192 \
  --gqa "2,16,4,4096,128,1;2,16,4,4096,128,0" --variants "default,$SH" --variants64 "" --variants256 "" \
  --baselines "" --rep ${REP:-40}
python3 - "$R" "$SH" <<'PY' | tee "$OUT/verdict.txt"
import json, math, sys
r, sh = sys.argv[1:]
reps = []
for i in (1, 2):
    try:
        reps.append(json.load(open(f"{r}/rep{i}/hopper_bwd_probe.json"))["rows"])
    except (OSError, ValueError, KeyError) as exc:
        print(f"rep{i}: unreadable ({exc})")
ratios, ok = [], len(reps) == 2 and len(reps[0]) == 6
for rows in zip(*reps):
    key = f"B={rows[0]['b']} Hq={rows[0]['hq']} Hkv={rows[0]['hkv']} N={rows[0]['n']} causal={rows[0]['causal']}"
    best = {v: max((x["tflops"].get(v) or 0) for x in rows) for v in ("default", sh)}
    checks = [x["check"].get(sh) for x in rows]
    q = best[sh] / best["default"] if best["default"] else 0
    ok &= all(c == "ok" for c in checks) and q >= 0.98
    ratios.append(q)
    print(f"{key}: default {best['default']:.0f} shared {best[sh]:.0f} TFLOP/s ({q:.3f}x), checks {checks}")
geo = math.exp(sum(map(math.log, ratios)) / len(ratios)) if ratios and min(ratios) > 0 else 0
ok &= geo >= 1.03
print(f"geomean {geo:.3f}; RULE: DROPOUT_CONFIGS[128] = " + ("shared calls: ADOPT128" if ok else "stays SPLIT_D"))
PY
if grep -q ADOPT128 "$OUT/verdict.txt"; then
  python3 - <<'PY'
p = "flashattn_triton/kernels/hopper/bwd.py"
s = open(p).read()
old = "    128: dict(SPLIT_D=True, BLOCK_N=64, NUM_STAGES=2, DS_BUFS=2, DQ_CHUNK=64),\n"
new = ("    128: dict(SPLIT_D=False, BLOCK_M=64, BLOCK_N=128, NUM_STAGES=2, DQ_CHUNK=0, "
       "DROPOUT_SHARED_CALLS=True),\n")
assert old in s
open(p, "w").write(s.replace(old, new))
print("applied to this tree's DROPOUT_CONFIGS[128]")
PY
fi
OUT="$OUT/variants" bash benchmarks/gpu_next_variants.sh 2>&1 | tail -16 | cut -c1-300
