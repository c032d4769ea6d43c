#!/usr/bin/env bash
# Session 56 call 6: why the packed Hopper backward loses at d = 64 on long documents (call 3:
# 0.81-0.91x the portable one from 64..4096 tokens). Hypothesis: _make_plan turns on HEADS_FIRST
# (HEADS_FIRST_GQA_UNSPLIT_MIN_N {64: 2048}, a dense-call rule) from the batch's longest sequence,
# though most sequences are short. Each row: bench_varlen with _dispatch.HOPPER_VARLEN_BWD_LONG
# cleared in-process, "ours varlen" (portable backward, FLASHATTN_TRITON_HOPPER_VARLEN_BWD=0) against
# "ours varlen hopper bwd", with the heads-first table as is (hf) or cleared (nohf).
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
for lens in 64,4096 64,8192; do
  for hf in hf nohf; do
    n="d64_${lens/,/_}_$hf"
    FLASHATTN_TRITON_HOPPER_VARLEN_BWD=0 timeout -k 5 70 python3 - "$hf" --batches 2 --head-dim 64 \
      --doc-lengths $lens --providers "ours varlen,ours varlen hopper bwd" --out "$R/$n" > "$R/$n.log" 2>&1 <<'PY'
import runpy, sys
sys.path.insert(0, "benchmarks")
from flashattn_triton import _dispatch
from flashattn_triton.kernels.hopper import bwd
_dispatch.HOPPER_VARLEN_BWD_LONG.clear()
if sys.argv[1] == "nohf":
    bwd.HEADS_FIRST_GQA_UNSPLIT_MIN_N.clear()
sys.argv = ["bench_varlen.py"] + sys.argv[2:]
runpy.run_path("benchmarks/bench_varlen.py", run_name="__main__")
PY
    echo "rc=$?" >> "$R/$n.log"; el "$n"
    sed -n '/^| seed/,/^$/p' "$R/$n/bench_varlen.md" | grep -v -e '^|---' -e '^| seed' | cut -d'|' -f2-9
  done
done
tar -C "$OUT" -czf "$OUT/results.tgz" r
