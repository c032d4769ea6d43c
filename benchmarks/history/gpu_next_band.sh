#!/usr/bin/env bash
# For the next session's first call (about 4 minutes on one H200): the causal
# forward's tile order by bands of M_BAND m-blocks per head (fwd.py
# _dynamic_tile; tests/hopper_model.py's L2 model: K/V hit rate 0.1 -> 0.5
# (bands of 2) / 0.7 (4) at d = 128 N = 2k with the snake's balance
# unchanged; session 12's profile: 13.7% L2 hits, DRAM 76% busy).
#   1. GPU tests: M_BAND schedule variants (3 with a partial last band, 16),
#      persistent and schedule-variant suites;
#   2. A/B in one process, three repeats: default vs band2 / band4 (d = 64
#      dynamic, d = 128 persistent snake) and band2 / band4 with the dynamic
#      scheduler at d = 128; causal N 1k-8k, with cuDNN.
# Rule, fixed before the run: per d, adopt the variant with the best
# geometric mean over N if >= 1.02x the default and no row < 0.98x in any
# repeat (SCHEDULE[True]["M_BAND"] per d then needs a per-d entry, and DYNAMIC
# at d = 128 causal if a *_dynamic variant wins).
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
FLASHATTN_TRITON_TEST_DEVICE=cuda timeout -k 5 ${T_FWD:-90} python3 -m pytest -q -p no:cacheprovider -rfE \
  --tb=short -n 6 tests/test_hopper.py -k "M_BAND or persistent_matches or schedule_variants" \
  > "$R/tests_band.log" 2>&1
echo "rc=$?" >> "$R/tests_band.log"; el tests_band; tail -3 "$R/tests_band.log" | cut -c1-300
for rep in 1 2 3; do
  timeout -k 5 ${T_AB:-120} python3 benchmarks/hopper_fwd_probe.py --stage bench \
    --variants default,band2,band4,band2_dynamic,band4_dynamic --rows causal64_128 --baselines sdpa:cudnn \
    > "$R/band$rep.log" 2>&1; el band$rep
  python3 - "$R/band$rep.log" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    if line.startswith("RESULT ") and '"bench"' in line:
        r = json.loads(line[7:]); base = r.get("hopper:default")
        cells = " ".join(f"{v} {r['hopper:' + v]} ({r['hopper:' + v] / base:.3f})"
                         for v in ("band2", "band4", "band2_dynamic", "band4_dynamic")
                         if isinstance(r.get("hopper:" + v), float) and isinstance(base, float))
        print(f"d={r['d']} N={r['n']} default {base} | {cells} | cudnn {r.get('sdpa:cudnn')}")
PY
done
tar -C "$OUT" -czf "$OUT/results.tgz" r
