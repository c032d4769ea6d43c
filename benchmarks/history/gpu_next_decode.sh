#!/usr/bin/env bash
# Batch-1 decoding candidates (kernels/decode.py VARIANTS, FLASHATTN_TRITON_DECODE_VARIANT,
# all off by default), on one H200: about 4 minutes, at most 5 under the timeouts.
# docs/decode.md, "Batch 1 on the H200".
#   deep: 5 pipeline stages of 64-key tiles at one program per SM (3 K+V tiles in flight);
#   wide: 128-key tiles, 3 stages (one 64 KiB K+V tile in flight, half the loop trips);
#   fill: the least-cost split count (16 splits at B=1 from 4k keys: 128 programs, not 120);
#   pdl:  programmatic dependent launch (griddepcontrol), every batch size;
#   reserve: a call captured in a CUDA graph takes its merge counters from a reserve zeroed
#         by an eager call, not from a torch.zeros captured with it (today every captured
#         call adds that zero-fill node: the benchmark's graphs run two kernels per call).
# Steps (results under $R, tarred into $OUT/results.tgz; the rule's verdict also in $OUT/verdict.txt):
#   1. GPU tests, test_kvcache.py -k "variant or cuda_graph or reserve or split_counters"
#      (-n 4): every variant at B=1 (Hq=32, Hkv=8, d=128, 16k cache; contiguous, 16- and
#      256-token pages; append, rotary; against float64), the small CPU cases compiled,
#      CUDA-graph replay (default, pdl, reserve, deep+fill+pdl+reserve) equal to eager;
#   2. timing, two repeats: bench_decode.py --batches 1,8, N = 1k, 4k, 8k, 16k, 64k, contiguous,
#      ours default / deep / wide / fill / pdl / reserve / pdl+reserve / deep+fill+pdl+reserve
#      / wide+fill+pdl+reserve, with SDPA flash and cuDNN (Hq=32, Hkv=8, d=128, bf16, one
#      query token, CUDA graphs);
#   3. a B=1 launch-config sweep at 16k and 64k (exploratory, not in the rule): 128-key tiles
#      with 8 warps, 64-key tiles x 5 stages with 8 warps, 128-key tiles x 4 stages.
# Rule, fixed before the run.  For each variant V, ratio = V's GB/s / default's GB/s on the
# same row of the same repeat.  V qualifies if no step-1 test failed that names one of V's
# parts in its id or names no variant at all (and the test run finished), and in both repeats
# ratio >= 1.05 on every B=1 row with N >= 4k, ratio >= 0.98 on every B=1 row, and
# ratio >= 0.97 on every B=8 row (deep / wide / fill leave B=8's plan unchanged: noise).
# The qualifying V with the highest geometric mean ratio over B=1, N >= 4k (both repeats)
# becomes the default at small batch (decode_plan's one-program-per-SM launches; pdl and
# reserve, which pass the B=8 clause too, for every launch / every captured call); if none
# qualifies the defaults stay and the rows are written up.  Printed too: the issue's bars for
# the default and the winner, >= 85% of 4.2 TB/s (3570 GB/s) at N >= 8k and >= every peer at
# B=1 and B=8.  SKIP_TESTS=1 times only (then no variant qualifies: no test log).
# Reused by gpu_next_decode2.sh, which sets its own rule in its header through GAIN (1.05),
# GAIN_FROM / GAIN_TO (the B=1 rows held to GAIN: 4096 and up), FLOOR_B1 (0.98), FLOOR_B8
# (0.97), SWEEP=0 (no step 3) or SWEEP_CONFIGS (step 3's configs); unset, they are this
# header's values.
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
VARIANTS=${VARIANTS:-"default,deep,wide,fill,pdl,reserve,pdl+reserve,deep+fill+pdl+reserve,wide+fill+pdl+reserve"}
if [ -z "${SKIP_TESTS:-}" ]; then  # SKIP_TESTS=1: timing only
gpu_tests tests_decode ${T_TESTS:-75} -n 4 tests/test_kvcache.py -k "variant or cuda_graph or reserve or split_counters"
fi
for i in 1 2; do  # the second repeat finds the kernels compiled (Triton's disk cache)
  timeout -k 5 $([ $i = 1 ] && echo ${T_BENCH:-100} || echo ${T_BENCH2:-75}) python3 benchmarks/bench_decode.py \
    --batches 1,8 --seqlens 1024,4096,8192,16384,65536 --layouts contiguous --peers sdpa_flash,sdpa_cudnn \
    --variants "$VARIANTS" --max-seconds $([ $i = 1 ] && echo 85 || echo 62) --out "$R/rep$i" > "$R/rep$i.log" 2>&1
  echo "rc=$?" >> "$R/rep$i.log"; el "rep$i"; tail -1 "$R/rep$i.log"
done
if [ "${SWEEP:-1}" != 0 ]; then
timeout -k 5 ${T_SWEEP:-30} python3 benchmarks/bench_decode.py --batches 1 --seqlens 16384,65536 \
  --layouts contiguous --peers sdpa_cudnn \
  --configs "${SWEEP_CONFIGS:-BLOCK_N=128,num_stages=3,num_warps=8;BLOCK_N=64,num_stages=5,num_warps=8;BLOCK_N=128,num_stages=4}" \
  --max-seconds 22 --out "$R/sweep" > "$R/sweep.log" 2>&1
echo "rc=$?" >> "$R/sweep.log"; el sweep; sed -n '/short:begin/,/short:end/p' "$R/sweep/bench_decode.md" | cut -c1-400 | head -12
fi
python3 - "$R/tests_decode.log" "$R/rep1/bench_decode.json" "$R/rep2/bench_decode.json" <<'PY' 2>&1 | tee "$R/verdict.txt"
import json, math, os, re, sys
from flashattn_triton.kernels.decode import VARIANTS as decode_variants
log, paths = sys.argv[1], sys.argv[2:]
GAIN, FLOOR_B1, FLOOR_B8 = (float(os.environ.get(k, v)) for k, v in
                            (("GAIN", 1.05), ("FLOOR_B1", 0.98), ("FLOOR_B8", 0.97)))
GAIN_FROM, GAIN_TO = int(os.environ.get("GAIN_FROM", 4096)), int(os.environ.get("GAIN_TO", 1 << 30))
print(f"rule: B=1 rows with {GAIN_FROM} <= N" + (f" <= {GAIN_TO}" if GAIN_TO < 1 << 30 else "")
      + f" >= {GAIN}x the default, every B=1 row >= {FLOOR_B1}x, every B=8 row >= {FLOOR_B8}x")
# A failed test disqualifies the variants named in its id ("[deep,fill-page16]"), or every
# variant when it names none; a run that did not finish (rc other than 0 or 1) disqualifies all.
try:
    lines = open(log).read().strip().splitlines()
    rc = lines[-1]
except (OSError, IndexError):
    lines, rc = [], "rc=missing"
failed = [ln for ln in lines if ln.startswith(("FAILED", "ERROR"))]
def tests_ok_for(variant):
    if rc not in ("rc=0", "rc=1") or (rc == "rc=1" and not failed):
        return False
    parts = variant.split("+")
    for ln in failed:
        named = set(re.findall(r"[\w]+", ln.split("[", 1)[1].split("]")[0])) if "[" in ln else set()
        if not (named & set(decode_variants)) or named & set(parts):
            return False
    return True
reps = []
for path in paths:
    try:
        reps.append(json.load(open(path)))
    except (OSError, ValueError) as exc:
        sys.exit(f"no timing in {path}: {exc}; rule NOT met, defaults stay")
variants = reps[0]["settings"]["variants"]
def table(payload):  # (batch, seqlen, who) -> GB/s; who = variant name or peer
    t = {}
    for r in payload["rows"]:
        if "gbps" not in r:
            continue
        who = r.get("variant", "default") if r["provider"] == "flashattn_triton" else r["provider"]
        if r["provider"] != "flashattn_triton" or (r.get("config") is None and not r.get("sinks")):
            t[(r["batch"], r["seqlen"], who)] = r
    return t
tabs = [table(p) for p in reps]
shapes = sorted({(b, n) for t in tabs for (b, n, w) in t})
print(f"tests: {rc}, {len(failed)} failed" + "".join(f"\n  {ln[:200]}" for ln in failed))
print("ratio variant / default (rep1, rep2); splits in [] :")
print("B  N     " + " ".join(f"{v:>16s}" for v in variants if v != "default"))
results = {}
for v in variants:
    if v == "default":
        continue
    ok, gm = True, []
    for b, n in shapes:
        rs = []
        for t in tabs:
            a, d = t.get((b, n, v)), t.get((b, n, "default"))
            rs.append(a["gbps"] / d["gbps"] if a and d else None)
        if None in rs:
            ok = False
            continue
        if b == 1:
            ok &= all(x >= FLOOR_B1 for x in rs) and (not GAIN_FROM <= n <= GAIN_TO or all(x >= GAIN for x in rs))
            if n >= 4096:
                gm += rs
        elif b == 8:
            ok &= all(x >= FLOOR_B8 for x in rs)
        results.setdefault(v, {})[(b, n)] = rs
    results.setdefault(v, {})["ok"] = ok and tests_ok_for(v)
    results[v]["gm"] = math.exp(sum(map(math.log, gm)) / len(gm)) if gm else 0.0
for b, n in shapes:
    cells = []
    for v in variants:
        if v == "default":
            continue
        rs = results[v].get((b, n))
        sp = tabs[0].get((b, n, v), {}).get("num_splits", "?")
        cells.append(f"{rs[0]:.3f} {rs[1]:.3f} [{sp}]" if rs else "-")
    base = tabs[0].get((b, n, "default"))
    print(f"{b:<2d} {n / 1024:>4g}k " + " ".join(f"{c:>16s}" for c in cells)
          + (f"   default {base['gbps']:.0f} GB/s [{base.get('num_splits')}]" if base else ""))
for v in results:
    print(f"  {v}: geomean B=1 N>=4k {results[v]['gm']:.3f}, {'qualifies' if results[v]['ok'] else 'does not qualify'}")
winners = sorted((r["gm"], v) for v, r in results.items() if r["ok"])
best = winners[-1][1] if winners else None
print("RULE:", f"met: '{best}' becomes the default at small batch" if best else "NOT met: the defaults stay")
# The issue's bars, per repeat, for the default and the winner.
for who in ["default"] + ([best] if best else []):
    for i, t in enumerate(tabs, 1):
        low = [f"B={b} {n / 1024:g}k {t[(b, n, who)]['gbps']:.0f}" for b, n in shapes
               if n >= 8192 and (b, n, who) in t and t[(b, n, who)]["gbps"] < 0.85 * 4200]
        lost = [f"B={b} {n / 1024:g}k {p} {t[(b, n, p)]['gbps']:.0f} > {t[(b, n, who)]['gbps']:.0f}"
                for b, n in shapes for p in ("sdpa_flash", "sdpa_cudnn")
                if (b, n, p) in t and (b, n, who) in t and t[(b, n, p)]["gbps"] > t[(b, n, who)]["gbps"]]
        print(f"bars {who} rep{i}: below 3570 GB/s at N>=8k: {'; '.join(low) or 'none'}; "
              f"behind a peer: {'; '.join(lost) or 'none'}")
PY
# One file back (the device returns at most 8): everything under r/, the verdict also beside it.
cp "$R/verdict.txt" "$OUT/verdict.txt"
tar -C "$OUT" -czf "$OUT/results.tgz" r && rm -rf "$R"
