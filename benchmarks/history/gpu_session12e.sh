#!/usr/bin/env bash
# Session 12, call 6 (about 5 minutes on one H200; ran at 8330638, whose fwd.py
# had HEAD_GROUP, since replaced by M_BAND): the causal tile order by
# groups of heads (HEAD_GROUP, fwd.py SCHEDULE; call 2's Nsight profile of
# d=128 causal N=2k: L2 hit rate 13.7%, DRAM 76% busy, K/V read ~7 times).
#   1. GPU tests of HEAD_GROUP (persistent, 5 programs, static and dynamic,
#      groups of 3 with a partial last group and of 16) and the HEAD_GROUP
#      emulation-covered order;
#   2. A/B in one process, two repeats: default (HEAD_GROUP=0) vs 4 / 8 / 16,
#      d = 64 (dynamic) and 128 (persistent) causal, N 1k-8k, with cuDNN.
#      Rule fixed before the run: per d, adopt the group with the best
#      geometric mean over N if it is >= 1.02x the default and no row is
#      below 0.98x in either repeat.
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
FLASHATTN_TRITON_TEST_DEVICE=cuda timeout -k 5 ${T_FWD:-80} python3 -m pytest -q -p no:cacheprovider -rfE \
  --tb=short -n 6 tests/test_hopper.py -k "HEAD_GROUP or persistent_matches" > "$R/tests_hg.log" 2>&1
echo "rc=$?" >> "$R/tests_hg.log"; el tests_hg; tail -3 "$R/tests_hg.log" | cut -c1-300
for rep in 1 2; do
  timeout -k 5 ${T_AB:-120} python3 benchmarks/hopper_fwd_probe.py --stage bench --variants default,hg4,hg8,hg16 \
    --rows causal64_128 --baselines sdpa:cudnn > "$R/hg$rep.log" 2>&1; el hg$rep
  python3 - "$R/hg$rep.log" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    if line.startswith("RESULT ") and '"bench"' in line:
        r = json.loads(line[7:]); base = r.get("hopper:default")
        cells = " ".join(f"{v} {r.get('hopper:' + v)} ({r.get('hopper:' + v) / base:.3f})"
                         if isinstance(r.get("hopper:" + v), float) and isinstance(base, float) else f"{v} -"
                         for v in ("hg4", "hg8", "hg16"))
        print(f"d={r['d']} N={r['n']} default {base} | {cells} | cudnn {r.get('sdpa:cudnn')}")
PY
done
tar -C "$OUT" -czf "$OUT/results.tgz" r
