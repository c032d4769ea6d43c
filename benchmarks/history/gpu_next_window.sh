#!/usr/bin/env bash
# The Hopper forward's sliding-window path (HAS_WINDOW in kernels/hopper/fwd.py,
# written and checked on CPU only: tests/hopper_model.py's emulation and
# protocol simulation, compile_check --window) on one H200, under 4 minutes:
#   1. GPU tests -k window (tests/test_hopper.py): every head dim, bf16 and
#      fp16, causal both alignments and a left bound only, windows of 0 to
#      past N, Nq != Nk both ways, GQA, packed-qkv views, NaN past N; the
#      persistent and dynamic schedules on a few programs with SKIP_TILES on
#      and off; every schedule switch; N = 8k; flash_attn_func with and
#      without FLASHATTN_TRITON_HOPPER_WINDOW=1;
#   2. timing (hopper_fwd_probe.py --rows window, bf16, B*N = 16k tokens,
#      H = 2048/d): the kernel (default; SKIP_TILES at d = 128/256; three
#      consumers at d = 64, where WINDOW_CONFIGS takes two) against the
#      portable forward, the API with the opt-in and FlexAttention with a
#      block mask; a window as wide as N next to the same causal row without
#      one gives the window build's own cost.
# Rule, fixed before the run: if every window test passes, the opt-in may go
# (_dispatch.use_hopper_forward taking left windows) where hopper:default is
# >= 1.1x api:portable on every causal row; SKIP_TILES (d = 128/256) or nc3
# (d = 64) become the window config where >= 1.02x default on every row of
# that head dim.
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
FLASHATTN_TRITON_TEST_DEVICE=cuda timeout -k 5 ${T_TESTS:-140} python3 -m pytest -q -p no:cacheprovider -rfE \
  --tb=short -n 8 tests/test_hopper.py -k window > "$R/tests_window.log" 2>&1
echo "rc=$?" >> "$R/tests_window.log"; el tests_window; tail -4 "$R/tests_window.log" | cut -c1-300
timeout -k 5 ${T_BENCH:-80} python3 benchmarks/hopper_fwd_probe.py --stage bench --rows window \
  --variants default,skip_tiles,nc3 --baselines api:portable,api:window,flex > "$R/bench_window.log" 2>&1
echo "rc=$?" >> "$R/bench_window.log"; el bench_window
python3 - "$R/bench_window.log" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    if line.startswith("RESULT ") and '"bench"' in line:
        r = json.loads(line[7:])
        num = lambda k: r.get(k) if isinstance(r.get(k), float) else None  # noqa: E731
        base = num("hopper:default")
        cells = [f"{k[7:] if k.startswith('hopper:') else k} {num(k)}"
                 + (f" ({base / num(k):.2f}x)" if base and num(k) and not k.startswith("hopper:") else "")
                 + (f" ({num(k) / base:.3f})" if base and num(k) and k.startswith("hopper:") and k != "hopper:default"
                    else "")
                 for k in ("hopper:default", "hopper:skip_tiles", "hopper:nc3", "api:portable", "api:window", "flex")
                 if num(k)]
        errs = {k: v for k, v in r.items() if isinstance(v, str) and k not in ("kind", "dtype")}
        print(f"d={r['d']} N={r['n']} causal={r['causal']} window={r['window']} H={r['h']}/{r['hkv']} TFLOP/s: "
              + " | ".join(cells) + (f" errors {errs}" if errs else ""))
PY
# The first call after the import-time warm-up of Triton's cache key (session 12,
# after call 7; CPU emulation 0.41 -> 0.11 s of host time with a 1 s pause).
timeout -k 5 ${T_OVH:-110} python3 benchmarks/bench_overhead.py --out "$R/overhead" --skip-host \
  --only "ours;ours, no key warm-up;sdpa" > "$R/overhead.log" 2>&1
echo "rc=$?" >> "$R/overhead.log"; el overhead; cut -c1-200 "$R/overhead/bench_overhead.md" 2>/dev/null | tail -8
tar -C "$OUT" -czf "$OUT/results.tgz" r
