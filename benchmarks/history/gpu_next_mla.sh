#!/usr/bin/env bash
# DeepSeek MLA head dims (d = 192, dv = 128) in the Hopper forward: split
# Q K^T (kernels/hopper/fwd.py HEAD_DIM_V: Q and K as 128 + 64 columns, two
# wgmmas into one S), written and checked on CPU only (tests/hopper_model.py's
# emulation and protocol simulation, compile_check --d 192:128, the fake-driver
# launch); one H200, under 4 minutes:
#   1. GPU tests -k split (tests/test_hopper.py, -n 8): bf16 and fp16, ragged
#      N with batch > 1, GQA, causal bottom-right / top-left and not, Nq > Nk
#      (rows with no key), one query row, packed-qkv views, NaN past N in the
#      inputs and NaN-filled outputs, every schedule switch (the bn64 tiles,
#      persistent / dynamic on a few programs, no ping-pong, one consumer,
#      SKIP_TILES), left windows, N = 4096, other d/dv pairs declined, and
#      flash_attn_func with and without FLASHATTN_TRITON_HOPPER_SPLIT_QK=1
#      (and its portable backward on the Hopper forward's LSE);
#   2. forward timing in one process (hopper_fwd_probe.py --rows mla: bf16,
#      B*N = 16k tokens, H = 16, N = 2k / 4k / 8k, causal and not): the kernel
#      with CONFIGS[192] (hopper:default, 128-key tiles, 2 stages) and the other
#      tile config that fits (hopper:bn64: 64-key tiles, 3 stages), the
#      persistent and dynamic grids; flash_attn_func on the portable forward
#      (api:portable) and with the opt-in (api:split, the Hopper forward);
#      torch SDPA as it chooses (sdpa:auto; the kernels it ran are recorded in
#      the row's "sdpa:auto:kernels") and forced to cuDNN / flash / efficient
#      (a backend that cannot take dv != d shows its error).
# Rule, fixed before the run:
#   * the tile config: CONFIGS[192] becomes bn64 (BLOCK_N=64, NUM_STAGES=3)
#     if hopper:bn64 / hopper:default >= 1.02 on at least 4 of the 6 rows and
#     >= 0.98 on every row; otherwise it stays (BLOCK_N=128, NUM_STAGES=2);
#   * the schedule: PERSISTENT_DEFAULT[192][causal] / DYNAMIC_DEFAULT[192][causal]
#     on where hopper:persistent / hopper:dynamic >= 1.02x hopper:default at
#     N = 2k, 4k and 8k of that mask (both qualifying: the higher minimum);
#   * the dispatch: if every -k split test passes and api:split >= 1.1x
#     api:portable on every row, _dispatch.HOPPER_SPLIT_QK_DEFAULT = "1" (d = 192,
#     dv = 128 take the Hopper forward by default; docs/hopper.md and README
#     then drop "not GPU-validated"); otherwise it stays "0" (opt-in only).
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
FLASHATTN_TRITON_TEST_DEVICE=cuda timeout -k 5 ${T_TESTS:-150} python3 -m pytest -q -p no:cacheprovider -rfE \
  --tb=short -n 8 tests/test_hopper.py -k split > "$R/tests_split.log" 2>&1
echo "rc=$?" >> "$R/tests_split.log"; el tests_split; tail -4 "$R/tests_split.log" | cut -c1-300
timeout -k 5 ${T_BENCH:-90} python3 benchmarks/hopper_fwd_probe.py --stage bench --rows mla \
  --variants default,bn64,persistent,dynamic \
  --baselines api:portable,api:split,sdpa:auto,sdpa:cudnn,sdpa:flash,sdpa:efficient > "$R/bench_mla.log" 2>&1
echo "rc=$?" >> "$R/bench_mla.log"; el bench_mla
python3 - "$R/bench_mla.log" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    if line.startswith("RESULT ") and '"bench"' in line:
        r = json.loads(line[7:])
        num = lambda k: r.get(k) if isinstance(r.get(k), float) else None  # noqa: E731
        base, port = num("hopper:default"), num("api:portable")
        cells = [f"{k} {num(k)}" + (f" ({num(k) / base:.3f} of default)" if base and k.startswith("hopper:")
                                    and k != "hopper:default" else "")
                 for k in ("hopper:default", "hopper:bn64", "hopper:persistent", "hopper:dynamic", "api:portable",
                           "api:split", "sdpa:auto", "sdpa:cudnn", "sdpa:flash", "sdpa:efficient") if num(k)]
        ratio = f" | api:split / api:portable {num('api:split') / port:.3f}" if num("api:split") and port else ""
        ratio += f" | default / sdpa:auto {base / num('sdpa:auto'):.3f}" if base and num("sdpa:auto") else ""
        errs = {k: v for k, v in r.items() if isinstance(v, str) and k not in ("kind", "dtype")}
        print(f"d={r['d']}/{r.get('dv', r['d'])} N={r['n']} causal={r['causal']} H={r['h']} TFLOP/s: "
              + " | ".join(cells) + ratio + f" | sdpa:auto ran {r.get('sdpa:auto:kernels')}"
              + (f" errors {errs}" if errs else ""))
PY
tar -C "$OUT" -czf "$OUT/results.tgz" r
