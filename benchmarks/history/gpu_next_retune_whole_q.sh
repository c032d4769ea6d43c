#!/usr/bin/env bash
# Causal dK/dV configs retuned with WHOLE_Q_TILES on (session 21: on for causal calls after
# gpu_next_whole_q.sh). Why: without the row checks the 64 x 128 masked loop no longer spills
# 612 B (compile_check: 204 B), so the causal d = 64 / 128 entries for N <= 1k (tuned when it
# spilled: 32 x 64 and 32 x 128 at 4 warps) may no longer be the fastest. One H200, ~2 min:
# tune.py --kernels BWD_DKDV, bf16, d 64 / 128, causal, N 512 / 1k, FLASHATTN_TRITON_HOPPER_BWD=0
# (the portable backward, where these entries are used), --merge into a COPY of sm90.json.
# Rule, fixed before the run (session 21): per key, the tuned best replaces what the library
# takes today (the committed entry of that bucket, or for n512 the n1024 entry it falls back
# to) if that config was timed in the same run and the best is >= 3% faster; the verdict
# writes those entries to $OUT/adopt.json. No entry passing: no edit.
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
unset FLASHATTN_TRITON_BWD_WHOLE_Q FLASHATTN_TRITON_AUTOTUNE FLASHATTN_TRITON_CONFIG_BWD_DKDV FLASHATTN_TRITON_TABLE_DIR
export FLASHATTN_TRITON_HOPPER_BWD=0
mkdir -p "$R/table"
cp flashattn_triton/kernels/configs/sm90.json "$R/table/sm90.json"
timeout -k 10 ${T_TUNE:-240} python3 benchmarks/tune.py --kernels BWD_DKDV --head-dims 64,128 \
  --seqlens 512,1024 --causal causal --dtype bfloat16 --jobs ${JOBS:-15} --out "$R/table/sm90.json" --merge \
  --log "$R/tune_log.json" > "$R/tune.out" 2>&1
echo "rc=$?" >> "$R/tune.out"; el tune; grep -v "Warning\|warn" "$R/tune.out" | cut -c1-300 | tail -8
python3 - flashattn_triton/kernels/configs/sm90.json "$R/tune_log.json" "$OUT/adopt.json" <<'PY' | tee "$OUT/verdict.txt"
import json, sys
committed = json.load(open(sys.argv[1]))["configs"]
log = json.load(open(sys.argv[2]))["results"]
adopt = {}
for e in log:
    if "ranking" not in e:
        continue
    key = f"BWD_DKDV|bfloat16|d{e['d']}|causal|n{1024 if e['n'] <= 1024 else e['n']}"
    own = f"BWD_DKDV|bfloat16|d{e['d']}|causal|n{e['n']}"
    today = committed.get(own, committed.get(key))
    times = {tuple(c): ms for c, ms, _ in e["ranking"]}
    best_c, best_ms, _ = e["ranking"][0]
    t_today = times.get(tuple(today)) if today else None
    gain = t_today / best_ms if t_today else None
    ok = gain is not None and gain >= 1.03
    print(f"{own}: today {today} {t_today} ms, best {best_c} {best_ms} ms, gain "
          f"{'n/a' if gain is None else f'{gain:.3f}'}: {'ADOPT' if ok else 'keep'}")
    if ok:
        adopt[own] = list(best_c)
json.dump(adopt, open(sys.argv[3], "w"), indent=1)
print(f"RULE: {len(adopt)} entries to merge into kernels/configs/sm90.json" if adopt else "RULE: no edit")
PY
tar -C "$OUT" -czf "$OUT/results.tgz" r
