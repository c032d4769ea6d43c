#!/usr/bin/env bash
# The variant table at today's defaults: benchmarks/bench_variants.py --skip-sweep --rep 30, the
# command of session 15 call 5 (results/h200/session15/call5/bench_variants.md; gpu_variants.sh,
# the older script, also runs GPU tests and bench_overhead.py). bf16, B=2, N=4096, Hq=16, Hkv=4,
# d=128, causal unless a mask: plain, window 1024, softcap, ALiBi, dropout, sinks, bool mask,
# float bias + grad, d=192/dv=128, d=512 (N/2), each next to its peer (SDPA, Flex, eager),
# forward and backward (do_bench medians). One H200, about 1.5-3 minutes (T_BENCH 170 s);
# SWEEP=1 adds the sliding-window sweep (B=1, N=16k; longer: T_BENCH=300).
# No decision (a record): printed are the table, each row's times against session 15 call 5
# (ours now / then, so below 1 is faster now; the peer's too, the machine's drift), and
# "VERDICT: complete" when all 10 rows ran without an error, else "VERDICT: incomplete". In a
# checkout without benchmarks/results (the device recipe strips it) the now/then ratios read "-".
source "$(dirname "${BASH_SOURCE[0]}")/gpu_lib.sh"
mkdir -p "$R/bench"
SKIP=--skip-sweep; [ -n "${SWEEP:-}" ] && SKIP=""
timeout -k 5 ${T_BENCH:-170} python3 benchmarks/bench_variants.py $SKIP --rep ${REP:-30} --out "$R/bench" \
  > "$R/bench_variants.log" 2>&1
echo "rc=$?" >> "$R/bench_variants.log"; el bench_variants
sed -n '/^| variant/,/^$/p' "$R/bench/bench_variants.md" 2>/dev/null | head -14
python3 - "$R/bench_variants.log" benchmarks/results/h200/session15/call5/bench_variants.json <<'PY' | tee "$OUT/verdict.txt"
import json, sys
sys.path.insert(0, "benchmarks")
from rules import variant_rows
now = variant_rows(sys.argv[1], key=lambda r: r["variant"])
try:
    then = json.load(open(sys.argv[2]))["variants"]
except FileNotFoundError:  # a device checkout without benchmarks/results (the device recipe strips it)
    print(f"no {sys.argv[2]} in this checkout: now/then ratios shown as '-', 10 rows expected")
    then = [{"variant": f"row {i}"} for i in range(10)]
by_name = {r["variant"]: r for r in then}


def ratio(a, b):
    return f"{a / b:.2f}" if a and b else "-"


errors = []
for r in now.values():
    old = by_name.get(r["variant"], {})
    err = r.get("ours_error") or r.get("peer_error")
    if err:
        errors.append(r["variant"])
    print(f"{r['variant']:28} fwd ours {r.get('ours_fwd_ms') or 0:.3f} ms ({r.get('speedup_fwd') or 0:.2f}x peer; "
          f"now/then ours {ratio(r.get('ours_fwd_ms'), old.get('ours_fwd_ms'))}, peer "
          f"{ratio(r.get('peer_fwd_ms'), old.get('peer_fwd_ms'))}), bwd ours {r.get('ours_bwd_ms') or 0:.3f} ms "
          f"({r.get('speedup_bwd') or 0:.2f}x peer; now/then ours {ratio(r.get('ours_bwd_ms'), old.get('ours_bwd_ms'))}, "
          f"peer {ratio(r.get('peer_bwd_ms'), old.get('peer_bwd_ms'))})" + (f"  ERROR {str(err)[:120]}" if err else ""))
done = len(now) >= len(then) and not errors
print(f"{len(now)} of {len(then)} rows, {len(errors)} with an error; VERDICT: "
      + ("complete" if done else "incomplete" + (f" (errors: {', '.join(errors)})" if errors else " (rows missing)")))
PY
tar -C "$OUT" -czf "$OUT/results.tgz" r
