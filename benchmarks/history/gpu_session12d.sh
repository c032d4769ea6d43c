#!/usr/bin/env bash
# Session 12, call 5 (about 7 minutes on one H200): the Hopper forward with
# SKIP_TILES on at d = 64 only (d = 128 / 256 builds identical to before).
#   1. tests/test_hopper.py on the GPU (whole: SKIP_TILES on and off at every
#      head dim, grid and persistent, both causal alignments);
#   2. A/B in one process, five repeats: d = 64 causal N 1k-8k, the current
#      forward vs the previous commit's (prev_fwd.py), with cuDNN;
#   3. the forced-hopper API suite (FLASHATTN_TRITON_BACKEND=hopper:
#      test_attention.py, test_backward.py);
#   4. forward d = 64, bf16 and fp16, N 1k-16k, ours vs FA2 and cuDNN.
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
FLASHATTN_TRITON_TEST_DEVICE=cuda timeout -k 5 ${T_FWD:-120} python3 -m pytest -q -p no:cacheprovider -rfE \
  --tb=short -n 6 tests/test_hopper.py > "$R/tests_fwd.log" 2>&1
echo "rc=$?" >> "$R/tests_fwd.log"; el tests_fwd; tail -3 "$R/tests_fwd.log" | cut -c1-300
for rep in 1 2 3 4 5; do
  timeout -k 5 60 python3 benchmarks/hopper_fwd_probe.py --stage bench --variants default --rows causal64 \
    --baselines sdpa:cudnn --prev prev_fwd.py > "$R/ab$rep.log" 2>&1
done
el ab
python3 - "$R" <<'PY'
import json, sys, collections
rows = collections.defaultdict(list)
for rep in range(1, 6):
    for line in open(f"{sys.argv[1]}/ab{rep}.log"):
        if line.startswith("RESULT ") and '"bench"' in line:
            r = json.loads(line[7:])
            rows[r["n"]].append((r.get("hopper:default"), r.get("hopper:prev"), r.get("sdpa:cudnn")))
for n, v in sorted(rows.items()):
    ratios = [a / b for a, b, _ in v if isinstance(a, float) and isinstance(b, float)]
    print(f"d=64 causal N={n}: new/prev per repeat {' '.join(f'{x:.3f}' for x in ratios)}; "
          f"new {[a for a, _, _ in v]} prev {[b for _, b, _ in v]} cudnn {[c for _, _, c in v]}")
PY
FLASHATTN_TRITON_BACKEND=hopper FLASHATTN_TRITON_TEST_DEVICE=cuda timeout -k 5 ${T_FORCED:-170} python3 -m pytest -q \
  -p no:cacheprovider -rfE --tb=short -n 8 tests/test_attention.py tests/test_backward.py > "$R/tests_forced.log" 2>&1
echo "rc=$?" >> "$R/tests_forced.log"; el tests_forced; tail -3 "$R/tests_forced.log" | cut -c1-300
timeout -k 5 ${T_BENCH:-90} python3 benchmarks/bench_attention.py --modes fwd --dtype bf16,fp16 --head-dims 64 \
  --seqlens 1024,2048,4096,8192,16384 --no-gqa --peers sdpa_flash,sdpa_cudnn --max-seconds 80 \
  --no-progress --no-plot --out "$R/fwd64" > "$R/fwd64.log" 2>&1
echo "rc=$?" >> "$R/fwd64.log"; el fwd64
sed -n '/short:begin/,/short:end/p' "$R/fwd64/bench_attention.md" | cut -c1-200 | tail -8
tar -C "$OUT" -czf "$OUT/results.tgz" r
