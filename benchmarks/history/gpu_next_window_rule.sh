#!/usr/bin/env bash
# A size rule for the Hopper backward's window path (_dispatch.HOPPER_BWD_WINDOW_MIN_LEFT)
# on one H200, under 4 minutes.  Session 15 call 2 (results/h200/session15/call2/window_cfg):
# through the API the Hopper window backward was 0.75-0.92x the portable one at windows of
# 128 / 256 keys, 0.96-1.12x at 512 and 1.03-1.11x at 1024 (1.00-1.18x FlexAttention there);
# since then the causal GQA backward splits groups across programs by default
# (HOPPER_BWD_GROUP_SPLIT_DEFAULT), windowed causal calls included, and no GQA window row
# has been timed.
# Timing (hopper_bwd_probe.py --rows window --window-shapes, bf16, causal, window_size
# (left, 0) with left 512 / 1024 / 2048 / 4096, B*N = 16k tokens):
#   MHA (H = 2048/d) and GQA (Hq 32 / Hkv 8 at d = 64, Hq 16 / Hkv 4 at d = 128), d 64 and
#   128, N 4k and 16k: 32 rows; plus bench_variants' "window (1024, 0)" row (B=2, N=4k,
#   Hq 16, Hkv 4, d 128);
#   columns: api:window (flash_attn_func's backward with FLASHATTN_TRITON_HOPPER_WINDOW=1),
#   api:portable (the same with =0), hopper:kernel (the kernel alone); api:window's
#   gradients checked against api:portable's (max |diff| / max |ref| <= 2e-2);
#   first an untimed warm-up (one window per shape, --rep 1; d = 64 and d = 128 in two
#   processes at once) that compiles the kernels,
#   then rep1 and rep2 without FlexAttention (the rule's two repeats), then a pass with
#   FlexAttention's backward (a column for the write-up and a third sample; the pass may be
#   cut by its limit: the probe writes its JSON after every row).
# Rule, fixed before the run: HOPPER_BWD_WINDOW_MIN_LEFT becomes the smallest L in
# {511, 1023, 2047} such that, in both repeats, every row with left >= L is timed in both
# API arms and has api:window / api:portable >= 1.03; and only if both repeats hold all
# 33 rows and every api:window check is ok (on every row).  Otherwise it stays None (the
# backward's window path only with FLASHATTN_TRITON_HOPPER_WINDOW=1).  Adopting L is one
# line: `HOPPER_BWD_WINDOW_MIN_LEFT: Optional[int] = L` in flashattn_triton/_dispatch.py.
#
#     OUT=/tmp/out bash benchmarks/history/gpu_next_window_rule.sh
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
git log -1 --format='commit %h %s' >> "$R/env.txt" 2>/dev/null
S="4,32,32,4096,64;1,32,32,16384,64;4,16,16,4096,128;1,16,16,16384,128"   # MHA
S="$S;4,32,8,4096,64;1,32,8,16384,64;4,16,4,4096,128;1,16,4,16384,128"    # GQA
S="$S;2,16,4,4096,128,1024"                                               # bench_variants' window row
S=${WINDOW_SHAPES:-$S}  # (a dry run's tiny shapes; the rule expects the 33 rows above)
# Warm-up: two processes at once (the shapes of d = 64, those of d = 128), one window each.
pids=()
for part in 64 128; do
  mkdir -p "$R/warm$part"
  P=$(echo "$S" | tr ';' '\n' | awk -F, -v d=$part '$5 == d' | paste -sd';')
  timeout -k 5 ${T_WARM:-70} python3 benchmarks/hopper_bwd_probe.py --rows window --window-shapes "${P:-$S}" \
    --no-flex --rep 1 --windows 512 --out "$R/warm$part" > "$R/warm$part/log.txt" 2>&1 &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; done; el warm
W=512,1024,2048,4096
for pass in "rep1:--no-flex:${T_REP:-40}" "rep2:--no-flex:${T_REP:-40}" "flex::${T_FLEX:-75}"; do
  name=${pass%%:*}; rest=${pass#*:}; flags=${rest%:*}; limit=${rest##*:}
  mkdir -p "$R/$name"
  timeout -k 5 "$limit" python3 benchmarks/hopper_bwd_probe.py --rows window --window-shapes "$S" $flags \
    --rep 30 --windows $W --out "$R/$name" > "$R/$name/log.txt" 2>&1
  echo "rc=$?" >> "$R/$name/log.txt"; el "$name"; cut -c1-220 "$R/$name/log.txt" | tail -3
done
python3 - "$R" <<'PY'
import json, sys
R = sys.argv[1]
EXPECTED, LS, NEED = 33, (511, 1023, 2047), 1.03


def load(name):
    try:
        return json.load(open(f"{R}/{name}/hopper_bwd_window.json"))["rows"]
    except (OSError, ValueError) as exc:
        print(f"{name}: no timing ({exc})")
        return []


def key(r):
    return (r["b"], r["hq"], r["hkv"], r["n"], r["d"], r["window"])


def ratio(r):
    t = r["tflops"]
    return t["api:window"] / t["api:portable"] if t.get("api:window") and t.get("api:portable") else None


def label(k):
    b, hq, hkv, n, d, w = k
    return f"B={b} Hq={hq} Hkv={hkv} N={n} d={d} left={w}"


reps = [{key(r): r for r in load(name)} for name in ("rep1", "rep2")]
flex = {key(r): r for r in load("flex")}
complete = all(len(rep) == EXPECTED for rep in reps)
checks = all(r["check"].get("api:window") == "ok" for rep in reps for r in rep.values())
for k in sorted(set(reps[0]) | set(reps[1]), key=lambda k: (k[5], k[4], k[3], k[1] != k[2], k[0])):
    xs = [ratio(rep[k]) if k in rep else None for rep in reps]
    cells = " ".join(f"{x:.3f}" if x else "-" for x in xs)
    f = flex.get(k, {}).get("tflops", {})
    vs_flex = f"  win/flex {f['api:window'] / f['flex']:.2f}" if f.get("api:window") and f.get("flex") else ""
    bad = [rep[k]["check"].get("api:window") for rep in reps if k in rep and rep[k]["check"].get("api:window") != "ok"]
    print(f"{label(k)}: win/port {cells}{vs_flex}" + (f"  check {bad}" if bad else ""))
# bench_variants' window row as ms of the backward (its own harness had 0.662 portable, 0.632 Flex)
row = (2, 16, 4, 4096, 128, 1024)
flops = 2.5 * 4 * 2 * 16 * (4096 * 1025 - 1024 * 1025 // 2) * 128  # visible pairs at left 1024
for name, rep in (("rep1", reps[0]), ("rep2", reps[1]), ("flex", flex)):
    r = rep.get(row)
    if r:
        print(f"{name} window row (ms): "
              + "  ".join(f"{k} {flops / v * 1e-9:.3f}" for k, v in r["tflops"].items() if v))
chosen = None
if complete and checks:
    for L in LS:
        rows = [rep[k] for rep in reps for k in rep if k[5] >= L]
        if rows and all((ratio(r) or 0) >= NEED for r in rows):
            chosen = L
            break
        if rows:
            worst = min(rows, key=lambda r: ratio(r) or 0)
            print(f"L={L}: not met ({label(key(worst))}: {ratio(worst)})")
print(f"rows: rep1 {len(reps[0])}, rep2 {len(reps[1])} of {EXPECTED}; api:window checks "
      f"{'all ok' if checks else 'NOT all ok'}")
why = ("" if complete and checks else " (a repeat is incomplete)" if checks else " (a gradient check failed)")
print("verdict:", f"HOPPER_BWD_WINDOW_MIN_LEFT = {chosen}" if chosen is not None else
      f"HOPPER_BWD_WINDOW_MIN_LEFT stays None{why}: the window backward only with FLASHATTN_TRITON_HOPPER_WINDOW=1")
PY
tar -C "$OUT" -czf "$OUT/results.tgz" r
