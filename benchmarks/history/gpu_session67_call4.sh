#!/usr/bin/env bash
# RAN in session 67 as call 4 (H100, tree 4e86f8f): results/h100/session67/call4/; no split count beats 16.
# Session 67 call 4 (one GPU, about 1.5 minutes; exploration, no rule): batch 1 at 64k / 128k keys,
# where the table reads 1.00x / 0.997x of cuDNN at the defaults ("longtiles" on): fixed split counts
# around the default 16 beside cuDNN, three repeats: $R/splits_rep1..3.
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
for rep in 1 2 3; do
  timeout -k 5 ${T_REP:-60} python3 benchmarks/bench_decode.py --batches 1 --seqlens 65536,131072 \
    --layouts contiguous --peers sdpa_cudnn --splits 0,12,20,24,32 --copy-gb 0.25 --no-copy-gauge \
    --out "$R/splits_rep$rep" > "$R/splits_rep$rep.log" 2>&1
  echo "rc=$?" >> "$R/splits_rep$rep.log"; el "splits_rep$rep"
done
python3 - "$R" <<'PY' | tee "$R/splits.txt"
import json, sys
for rep in (1, 2, 3):
    try:
        rows = json.load(open(f"{sys.argv[1]}/splits_rep{rep}/bench_decode.json"))["rows"]
    except (OSError, ValueError) as e:
        print("missing", e); continue
    for n in (65536, 131072):
        cudnn = next(x["gbps"] for x in rows if x["provider"] == "sdpa_cudnn" and x["seqlen"] == n)
        ours = [(("auto " if x["auto_splits"] else "") + str(x["num_splits"]), x["gbps"]) for x in rows
                if x["provider"] == "flashattn_triton" and x["seqlen"] == n and "gbps" in x]
        print(f"rep{rep} N={n}: cuDNN {cudnn:.0f}; " + ", ".join(f"{s}: {g:.0f} ({g / cudnn:.3f}x)" for s, g in ours))
PY
tar -C "$OUT" -czf "$OUT/results.tgz" r
