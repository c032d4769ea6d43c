#!/usr/bin/env bash
# The Hopper dropout forward by query length (_dispatch.HOPPER_DROPOUT_FWD_MIN_N; set by this rule in session 18),
# on one H200, about 5 minutes.  Session 16 call 2 (gpu_next_dropout_default.sh) measured the
# Hopper dropout forward at 1.03-1.73x the portable one on 13 of 16 rows and 0.82-0.98x on the
# three N = 2k causal rows, so the forward stayed portable by default; bench_variants' dropout row
# (B=2 N=4k Hq16/Hkv4 d128 causal) is then 0.96x SDPA where the Hopper forward gives 1.14x.
#   1. GPU tests: tests/test_hopper_dropout.py (-n 8; SKIP_TESTS=1 skips them when an earlier
#      call of the same kernels ran them: session 17 call 5);
#   2. timing, two repeats, each FLASHATTN_TRITON_HOPPER_DROPOUT=0 (the portable forward) then =1
#      (the Hopper forward): bench_variants.py --only dropout (flash_attn_func, dropout_p = 0.1,
#      bf16, forward ms) on 28 rows: d 64 / 128 / 256 with H = 2048/d and Hq 16 / Hkv 4 at
#      d = 128; causal at N 2k / 3k / 4k / 6k / 8k (B = 8 / 5 / 4 / 3 / 2), not causal at 2k / 8k.
# Rule, fixed before the run (ratio = portable forward ms / Hopper forward ms, per row and repeat;
# the tests must pass, rows missing or with errors count as failing), per head dim d (its MHA rows,
# and at d = 128 its GQA rows too):
#   not causal: HOPPER_DROPOUT_FWD_MIN_N[(d, False)] = 0 if every non-causal row of d has
#     ratio >= 1.05 in both repeats;
#   causal: HOPPER_DROPOUT_FWD_MIN_N[(d, True)] = the least N of {2k, 3k, 4k, 6k, 8k} such that
#     every causal MHA row of d of that N or longer has ratio >= 1.05 in both repeats (none: no
#     entry); since session 22 the GQA rows (d = 128, Hq 16 / Hkv 4) decide a key of their own,
#     (128, True, "gqa"), by the same test over them alone, None where no length passes (the
#     dispatch reads it for calls with fewer KV heads; session 18's run had them ahead from 4k,
#     the MHA rows from 6k).
#
#     OUT=/tmp/out bash benchmarks/history/gpu_next_dropout_fwd.sh
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
S=""
for nb in 2048,8 3072,5 4096,4 6144,3 8192,2; do
  n=${nb%,*}; b=${nb#*,}
  S="$S;$b,$n,32,32,64,1;$b,$n,16,16,128,1;$b,$n,8,8,256,1;$b,$n,16,4,128,1"
done
for nb in 2048,8 8192,2; do
  n=${nb%,*}; b=${nb#*,}
  S="$S;$b,$n,32,32,64,0;$b,$n,16,16,128,0;$b,$n,8,8,256,0;$b,$n,16,4,128,0"
done
S=${DROPOUT_SHAPES:-${S#;}}
pids=()
for opt in 0 1; do  # compile while the tests run (timings not used)
  mkdir -p "$R/warm$opt"
  FLASHATTN_TRITON_HOPPER_DROPOUT=$opt timeout -k 5 ${T_WARM:-110} python3 benchmarks/bench_variants.py \
    --only dropout --shapes "$S" --warmup 1 --rep 1 --out "$R/warm$opt" > "$R/warm$opt/log.txt" 2>&1 &
  pids+=($!)
done
if [ -z "${SKIP_TESTS:-}" ]; then
  gpu_tests tests_dropout ${T_TESTS:-100} -n 8 tests/test_hopper_dropout.py
else
  echo "rc=0 (SKIP_TESTS: passed in an earlier call on the same kernels)" > "$R/tests_dropout.log"
fi
for p in "${pids[@]}"; do wait "$p"; done; el warm
for rep in 1 2; do
  for opt in 0 1; do
    d="$R/rep$rep/opt$opt"; mkdir -p "$d"
    FLASHATTN_TRITON_HOPPER_DROPOUT=$opt timeout -k 5 ${T_BENCH:-55} python3 benchmarks/bench_variants.py \
      --only dropout --shapes "$S" --rep 40 --out "$d" > "$d/log.txt" 2>&1
    echo "rc=$?" >> "$d/log.txt"; el "rep$rep opt$opt"
  done
done
python3 - "$R" <<'PY' 2>&1 | tee "$R/verdict.txt"
import sys
sys.path.insert(0, "benchmarks")
from rules import tests_passed, variant_rows
R, NEED = sys.argv[1], 1.05
reps = [{opt: variant_rows(f"{R}/rep{rep}/opt{opt}/log.txt") for opt in (0, 1)} for rep in (1, 2)]
tests_ok = tests_passed(f"{R}/tests_dropout.log")
keys = sorted({k for rep in reps for opt in rep.values() for k in opt}, key=lambda k: (k[5], k[1], k[4], k[3]))
good = {}  # row key -> ratio >= NEED in both repeats
for k in keys:
    cells, ok = [], True
    for rep in reps:
        p, h = rep[0].get(k, {}), rep[1].get(k, {})
        x = p["ours_fwd_ms"] / h["ours_fwd_ms"] if p.get("ours_fwd_ms") and h.get("ours_fwd_ms") else None
        ok &= x is not None and x >= NEED and not (p.get("ours_error") or h.get("ours_error"))
        cells.append(f"{x:.3f}" if x else "-")
    good[k] = ok
    b, n, hq, hkv, d, c = k
    sdpa = " ".join(f"{rep[1].get(k, {}).get('speedup_fwd') or 0:.2f}" for rep in reps)
    print(f"B={b} N={n} {hq}/{hkv} d={d} {'causal' if c else 'full  '}: portable/hopper fwd {' '.join(cells)}"
          f"  hopper vs SDPA fwd {sdpa}" + ("" if ok else f"  <- below {NEED} (or missing)"))
print(f"tests: {'passed' if tests_ok else 'NOT passed'}; rows per run: "
      + ", ".join(f"rep{i + 1} opt{o} {len(rep[o])}" for i, rep in enumerate(reps) for o in (0, 1)) + " of 28")
entries = {}
for d in sorted({k[4] for k in keys}):
    full = [k for k in keys if k[4] == d and not k[5]]
    if tests_ok and len(full) == (4 if d == 128 else 2) and all(good[k] for k in full):
        entries[(d, False)] = 0
    causal = [k for k in keys if k[4] == d and k[5]]
    if tests_ok and len(causal) == (10 if d == 128 else 5):
        for key, group in (((d, True), [k for k in causal if k[2] == k[3]]),
                           ((d, True, "gqa"), [k for k in causal if k[2] != k[3]])):
            for n in sorted({k[1] for k in group}):
                if all(good[k] for k in group if k[1] >= n):
                    entries[key] = n
                    break
            else:  # measured and never ahead: GQA calls must not fall back on the MHA entry
                if group and len(key) == 3:
                    entries[key] = None
print(f"RULE: HOPPER_DROPOUT_FWD_MIN_N = {entries or None}")
PY
tar -C "$OUT" -czf "$OUT/results.tgz" r
