#!/usr/bin/env bash
# The Hopper backward at d = 192 with dv = 128 (DeepSeek MLA; split Q K^T on the SPLIT_D
# path, kernels/hopper/bwd.py _attn_bwd_step_qk1), first GPU run, on one H200, under 5
# minutes.  Built and checked on CPU only so far (compile_check --hopper-bwd --d 192:128:
# 173,568 B of shared memory, no spill; the float64 model of its tiling; plan and
# fake-driver launch tests); its config is in CONFIGS_UNVERIFIED, so flash_attn_func's
# backward runs the portable kernels at this shape (0.55x SDPA before this work) unless
# FLASHATTN_TRITON_HOPPER_BWD_UNVERIFIED=1.
#   1. GPU tests: test_hopper_bwd.py -k "192 or split_qk" (the d = 192 reference tests
#      with UNVERIFIED=True: bf16 / fp16, causal both alignments and not, GQA / MQA,
#      ragged N, NaN-poisoned outputs; persistent / ring / buffer / group-split variants;
#      the API opt-in), -n 8;
#   2. timing (hopper_bwd_probe.py, bf16, B*N = 16k tokens, H = 16, N = 2k / 4k / 8k,
#      causal and not): "default" (hopper_attention_backward alone), "api"
#      (flash_attn_func's backward with the opt-in), "portable" (the same with
#      FLASHATTN_TRITON_HOPPER_BWD=0: what users get now) and SDPA cuDNN.
# Rule, fixed before the run: move 192 from CONFIGS_UNVERIFIED to CONFIGS (the default
# backward then takes it) if every test passes, every check is ok (the api's gradients
# within 2e-2 of the portable ones), and api / portable >= 1.1 on every one of the 6 rows;
# otherwise it stays unverified and the rows are written up (docs/hopper.md).
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
if [ -z "${SKIP_TESTS:-}" ]; then  # SKIP_TESTS=1: timing only
gpu_tests tests_bwd192 ${T_TESTS:-160} -n 8 tests/test_hopper_bwd.py -k "(192 or split_qk) and not fake_driver"
fi
G="8,16,16,2048,192,0;8,16,16,2048,192,1;4,16,16,4096,192,0;4,16,16,4096,192,1;2,16,16,8192,192,0;2,16,16,8192,192,1"
timeout -k 5 ${T_BENCH:-130} python3 benchmarks/hopper_bwd_probe.py --head-dims none --gqa "$G" \
  --variants default --variants64 "" --variants256 "" --baselines api,portable,cudnn --rep 30 \
  --out "$R/timing" > "$R/timing_log.txt" 2>&1
echo "rc=$?" >> "$R/timing_log.txt"; el timing; cat "$R/timing_log.txt" | cut -c1-400
python3 - "$R/timing/hopper_bwd_probe.json" "$R/tests_bwd192.log" <<'PY'
import json, re, sys
try:
    rows = json.load(open(sys.argv[1]))["rows"]
except (OSError, ValueError) as exc:
    sys.exit(f"no timing in {sys.argv[1]}: {exc}")
try:
    log = open(sys.argv[2]).read()
    tests_ok = "rc=0" in log and not re.search(r"\d+ (failed|error)", log)
except OSError:
    tests_ok = False
ok = True
for r in rows:
    t = r["tflops"]
    checks = all(c in ("ok", "ref") for c in r["check"].values() if c)
    ratio = t["api"] / t["portable"] if t.get("api") and t.get("portable") else None
    row_ok = checks and ratio is not None and ratio >= 1.1
    ok &= row_ok
    cells = "  ".join(f"{k} {v:.0f}" if v else f"{k} -" for k, v in t.items())
    extra = "".join(f"  {a}/{b} {t[a] / t[b]:.2f}" for a, b in (("default", "portable"), ("api", "cudnn"),
                                                                 ("portable", "cudnn")) if t.get(a) and t.get(b))
    print(f"B={r['b']} H={r['hq']} N={r['n']} d={r['d']}/{r.get('dv', r['d'])} causal={r['causal']!s:5}: {cells}"
          f"  api/portable {ratio if ratio is None else f'{ratio:.2f}'}{extra}"
          + ("" if row_ok else "  BELOW 1.1" + ("" if checks else f" checks {r['check']}")))
print(f"{len(rows)} rows, tests {'passed' if tests_ok else 'NOT all passed (tests_bwd192.log)'}; rule:",
      "met: move 192 from CONFIGS_UNVERIFIED to CONFIGS" if ok and tests_ok and len(rows) == 6
      else "NOT met: 192 stays in CONFIGS_UNVERIFIED")
PY
tar -C "$OUT" -czf "$OUT/results.tgz" r
