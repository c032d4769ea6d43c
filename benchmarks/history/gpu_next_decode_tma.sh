#!/usr/bin/env bash
# Record: its candidates measured slower and were removed in session 45 (last in 385b20b); at a later
# commit FLASHATTN_TRITON_DECODE_VARIANT refuses their names (ValueError), so this script no longer runs.
# Decoding with TMA tile reads: variant "tma" (kernels/decode.py, session 43; off by default).
# Contiguous caches without left padding, sm_90: the whole K / V tiles below a sequence's end are
# read through tensor descriptors (one copy per tile, issued by one thread, completion on an
# mbarrier) instead of 16 LDGSTS per thread and their address arithmetic; the last partial tile
# keeps the masked loads. Why: at batch 1 one program per SM streams its split, and the loop's
# own latency (468 SASS instructions per 64-key tile at d = 128, 4 warps) is of the order of the
# tile's memory time (docs/decode.md "Batch 1 on the H200"); compile facts in the decode.md
# section and the session 43 notes (compile_check --kernels DECODE --decode-variants tma --sass).
# 1. GPU tests: test_kvcache.py -k "tma or variants_against or garbage or plan_variants" (-n 2;
#    test_tma_against_reference: NaN past each sequence's keys, odd d, GQA / MQA, windows, softcap,
#    ALiBi, sinks, batch index, 1-3 splits, against float64).
# 2. Timing: bench_decode.py, B = 1 and 8, N = 4k, 16k, 64k, contiguous, Hq 32 / Hkv 8, d 128, bf16,
#    30 replays a point, variants default and default+tma in two processes, the order reversed.
# Rule, fixed before the run (rules.decode_spread_verdict, gain_batches=(1,), gain_from=4096):
# "tma" joins DEFAULT_VARIANTS if the tests pass, every spot check ran, and in both processes
# every B = 1 row reads >= 1.03x the default and every B = 8 row >= 0.98x. Otherwise nothing
# changes. One H200, about 3-4 minutes. Session 43 call 2 ran it (verdict: unchanged, 0.87-0.97x
# at B = 1) with the two bench processes written out; gpu_lib.sh's decode_reps runs the same commands.
#
#     OUT=/tmp/out bash benchmarks/history/gpu_next_decode_tma.sh
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
gpu_tests tests ${T_TESTS:-150} -n 2 tests/test_kvcache.py -k "tma or variants_against or garbage or plan_variants"
decode_reps "default,default+tma" --batches 1,8 --seqlens 4096,16384,65536 --layouts contiguous
python3 - "$R" <<'PY' | tee "$OUT/verdict.txt"
import json, sys
sys.path.insert(0, "benchmarks")
from rules import decode_spread_verdict
reps = [json.load(open(f"{sys.argv[1]}/rep{i}/bench_decode.json")) for i in (1, 2)]
print(decode_spread_verdict(reps, variant="default+tma", gain=1.03, floor=0.98, gain_batches=(1,),
                            gain_from=4096, layout="contiguous"))
PY
grep -E "passed|failed|rc=" "$R/tests.log" | tail -2
tar -C "$OUT" -czf "$OUT/results.tgz" r
