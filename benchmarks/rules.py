"""Reading the results a device script's decision rule is applied to."""

import json
import math
import re
import sys


def load_reps(paths, key="rows"):
    """The timing rows of each repeat's JSON file (``key`` of each; None: the
    whole file); exits with a message naming the file when one is missing or
    unreadable (a run cut short), so that no rule is applied to half the data."""
    reps = []
    for path in paths:
        try:
            data = json.load(open(path))
        except (OSError, ValueError) as exc:
            sys.exit(f"no timing in {path}: {exc}")
        reps.append(data if key is None else data[key])
    return reps


def json_rows(path, key="rows") -> list:
    """A benchmark JSON file's rows; none when it is missing or unreadable (a
    run cut before its first row): the verdict then counts them as missing."""
    try:
        return json.load(open(path))[key]
    except (OSError, ValueError, KeyError):
        return []


def tier_rows(folder_of):
    """{0: row, 1: row}: the first bench_variants.json row of each setting of an
    opt-in switch (folder_of(0) off, folder_of(1) on), printed with its times
    against the peer; a setting whose run left no result is printed and left out."""
    rows = {}
    for opt in (0, 1):
        try:
            rows[opt] = json.load(open(f"{folder_of(opt)}/bench_variants.json"))["variants"][0]
        except Exception as exc:  # noqa: BLE001 - any missing or partial result
            print(f"switch {opt}: no result ({type(exc).__name__}: {exc})")
    for opt, r in rows.items():
        errors = r.get("ours_error") or r.get("peer_error")
        print(f"{'hopper (opt-in)' if opt else 'portable'}: "
              f"fwd {r.get('ours_fwd_ms')} ms vs {r.get('peer_provider')} {r.get('peer_fwd_ms')} ms ({r.get('speedup_fwd')}x), "
              f"bwd {r.get('ours_bwd_ms')} ms vs {r.get('peer_bwd_ms')} ms ({r.get('speedup_bwd')}x)"
              + (f" errors {r.get('ours_error')} {r.get('peer_error')}" if errors else ""))
    return rows


def tier_speedup(rows, mode):
    """The switch's speedup over the portable kernels in ``mode`` ("fwd" or
    "bwd"), printed; None without both results."""
    a, b = (rows.get(opt, {}).get(f"ours_{mode}_ms") for opt in (0, 1))
    if not (a and b):
        return None
    print(f"{mode}: hopper / portable speedup {a / b:.2f}x")
    return a / b


def tests_passed(path) -> bool:
    """Whether a gpu_tests log (gpu_lib.sh) ends with its rc=0 line; a missing,
    empty or cut log is a failure."""
    try:
        lines = open(path).read().strip().splitlines()
    except OSError:
        return False
    return bool(lines) and lines[-1].startswith("rc=0")


def probe_run(r, tests_log="tests.log") -> tuple:
    """(tests_ok, reps) of a device script's run folder r: whether its gpu_tests
    log passed (printed as "tests: passed / FAILED") and the rows of the two
    probe_reps repeats (r/rep1, r/rep2 hopper_bwd_probe.json)."""
    tests_ok = tests_passed(f"{r}/{tests_log}")
    print("tests:", "passed" if tests_ok else "FAILED")
    return tests_ok, [json_rows(f"{r}/rep{i}/hopper_bwd_probe.json") for i in (1, 2)]


def tests_state(path, skipped: bool = False) -> tuple:
    """(ok, cut, label) of a gpu_tests log for a verdict: ok when it passed or
    skipped (a timing rerun, SKIP_TESTS: the first run's tests decide); cut
    when the time limit (rc=124) stopped it with no failure or error seen in
    its log or progress lines (a rerun with more time may pass)."""
    ok = skipped or tests_passed(path)
    try:
        log = open(path).read()
    except OSError:
        log = ""
    progress = [ln for ln in log.splitlines() if re.fullmatch(r"[.sxXFE]+( +\[ *\d+%\])?", ln.strip())]
    cut = (not ok and "rc=124" in log and " failed" not in log and " error" not in log
           and not any(c in ln.split("[")[0] for ln in progress for c in "FE"))
    label = ("skipped (SKIP_TESTS)" if skipped else "passed" if ok else "cut by the time limit" if cut
             else "FAILED or missing")
    return ok, cut, label


def switch_rule(rows, want: int, tests_ok: bool, tests_cut: bool, row_ok=lambda r: True, geo_min: float = 0.0,
                flags=(True, False)):
    """The per-causal-flag verdict of a module switch timed on and off by
    bench_dq_convert.py (rows with causal, convert_ran, ratio_wall = off / on
    of the median wall times, kernel_us_med).  A flag's entry is adopted when
    the tests passed, all ``want`` of its rows were measured, every row took
    the switch (convert_ran), kept ratio_wall >= 0.99 and passed row_ok, and
    the geometric mean of ratio_wall is >= geo_min; it is inconclusive when
    no row failed but the tests were cut or rows are missing.  Prints a line
    per row and per flag; returns ({flag: True} for the adopted ones, the
    inconclusive flags' notes)."""
    table, notes = {}, []
    for causal in flags:
        name = "causal" if causal else "not causal"
        mine = [r for r in rows if r["causal"] == causal]
        bad = []
        for r in mine:
            ok = r["convert_ran"] and r["ratio_wall"] >= 0.99 and row_ok(r)
            bad += [] if ok else [r]
            saved = r["kernel_us_med"]["off"] - r["kernel_us_med"]["on"]
            print(f"{name} d={r['d']} N={r['n']} B={r['b']} Hq={r['hq']} Hkv={r['hkv']}: kernel "
                  f"{r['kernel_us_med']['off']:.0f} -> {r['kernel_us_med']['on']:.0f} us (saved {saved:.0f}, off/on "
                  f"{r['ratio_kernel']:.3f}), wall off/on {r['ratio_wall']:.3f} (rounds "
                  + " ".join(f"{x:.3f}" for x in r["ratio_wall_rounds"])
                  + f"); switch taken {r['convert_ran']}, replayed {r['replayed']}" + ("" if ok else "  <- fails the rule"))
        geo = math.exp(sum(math.log(r["ratio_wall"]) for r in mine) / len(mine)) if mine else 0.0
        if tests_ok and len(mine) == want and not bad and geo >= geo_min:
            table[causal] = True
        elif not bad and (tests_cut or (tests_ok and len(mine) < want)):
            notes.append(f"{name} inconclusive ({len(mine)} of {want} rows)")
        print(f"{name}: {len(mine)} of {want} rows, {len(bad)} failing, wall geomean {geo:.3f}")
    return table, notes


def probe_checks_ok(reps) -> bool:
    """Whether every correctness check of hopper_bwd_probe.py's rows (load_reps)
    passed or was the reference itself."""
    return all(c in ("ok", "ref") for rows in reps for r in rows for c in r["check"].values() if c)


def fwd_probe_records(paths):
    """hopper_fwd_probe.py's timing records (its RESULT lines of kind bench) of
    each repeat's log, in order; a missing log gives none for that repeat."""
    import json
    reps = []
    for path in paths:
        try:
            lines = open(path).read().splitlines()
        except OSError:
            lines = []
        reps.append([json.loads(line[7:]) for line in lines if line.startswith("RESULT ") and '"bench"' in line])
    return reps


def variant_rows(path, key=None):
    """The rows bench_variants.py printed into a log (one dict a line), keyed
    by (batch, seqlen, heads_q, heads_kv, head_dim, causal), or by key(row):
    a run cut by its time limit keeps those it printed; an unreadable log
    gives none."""
    import ast
    rows = {}
    try:
        for line in open(path):
            if line.startswith("{'variant'"):
                r = ast.literal_eval(line)
                rows[key(r) if key else (r["batch"], r["seqlen"], r["heads_q"], r["heads_kv"], r["head_dim"],
                                         r["causal"])] = r
    except (OSError, ValueError, SyntaxError) as exc:
        print(f"{path}: {type(exc).__name__}: {exc}")
    return rows


def switch_rounds(r, rows: int, rounds=(1, 2, 3), fwd="ours_fwd_ms", bwd="ours_bwd_ms"):
    """The rounds of a script that ran bench_variants.py with a switch off
    and on (logs r/bench_ROUND_0.log and _1.log): prints each row's on / off
    time ratios and returns (complete rounds, {row key: [(fwd ratio, bwd
    ratio) per complete round]}); a round with fewer than `rows` rows either
    way is printed and left out, a missing time counts as 1e9 ms on."""
    import os
    done, ratios = 0, {}
    for rnd in rounds:
        if not os.path.exists(f"{r}/bench_{rnd}_0.log"):
            print(f"round {rnd}: not started (T_STOP)")
            continue
        off, on = (variant_rows(f"{r}/bench_{rnd}_{sw}.log") for sw in (0, 1))
        if len(off) != rows or len(on) != rows:
            print(f"round {rnd}: rows off {len(off)} / on {len(on)} of {rows}")
            continue
        done += 1
        for key in off:
            a, b = off[key], on.get(key, {})
            f = (b.get(fwd) or 1e9) / (a.get(fwd) or 1e-9)
            g = (b.get(bwd) or 1e9) / (a.get(bwd) or 1e-9)
            ratios.setdefault(key, []).append((f, g))
            print(f"round {rnd} {key}: fwd off {a.get(fwd)} on {b.get(fwd)} ms ({f:.3f}x time), "
                  f"bwd off {a.get(bwd)} on {b.get(bwd)} ms ({g:.3f}x time)")
    return done, ratios


def sinks_verdict(r, per_dim: bool) -> str:
    """The rule of gpu_next_sinks_fwd.sh (per_dim False: one switch, every
    row and complete round forward on/off <= 0.95 and backward <= 1.03) or
    of gpu_next_sinks_d128.sh (per_dim True: each head dim whose forward
    ratio is <= 0.95 in every complete round and whose median backward ratio
    is <= 1.03); both need the tests passed and 2 complete rounds. Prints
    the rounds and returns the RULE line."""
    import statistics
    tests_ok, tests_cut, _ = tests_state(f"{r}/tests_sinks.log")
    print(f"tests: {'passed' if tests_ok and not tests_cut else 'FAILED or cut'}")
    done, ratios = switch_rounds(r, rows=2)
    ok = tests_ok and not tests_cut and done >= 2 and all(len(p) == done for p in ratios.values())
    if not per_dim:
        ok = ok and all(f <= 0.95 and g <= 1.03 for pairs in ratios.values() for f, g in pairs)
        return f"{done} rounds complete; RULE: HOPPER_SINKS_DEFAULT = " + ('"1"' if ok else '"0" (stays)')
    dims = set()
    for key, pairs in sorted(ratios.items()):
        fw, bw = [f for f, _ in pairs], [g for _, g in pairs]
        print(f"d={key[4]}: fwd ratios {[round(x, 3) for x in fw]}, bwd median {statistics.median(bw):.3f}")
        if ok and max(fw) <= 0.95 and statistics.median(bw) <= 1.03:
            dims.add(key[4])
    listed = "{" + ", ".join(map(str, sorted(dims))) + "}" if dims else ""
    return f"{done} rounds complete; RULE: HOPPER_SINKS_DIMS = frozenset({listed})"


def probe_correct(path, variant: str) -> bool:
    """Whether hopper_fwd_probe.py's correctness stage log shows the variant
    passing (its RESULT of kind correct ok, and rc=0)."""
    import json
    try:
        lines = open(path).read().splitlines()
    except OSError:
        return False
    recs = [json.loads(ln[7:]) for ln in lines if ln.startswith("RESULT ")]
    return (bool(lines) and lines[-1].startswith("rc=0")
            and any(r.get("kind") == "correct" and r.get("variant") == variant and r.get("ok") for r in recs))


def probe_candidate(reps, cand: str, want: int, row_min: float, geo_min: float, keep=lambda key: True,
                    label=lambda key: f"N={key[1]} Hkv={key[2]}"):
    """One candidate of a hopper_fwd_probe.py A/B over repeats (reps: per
    repeat {(d, n, hkv): record}, rows chosen by keep): prints each row's
    TFLOP/s against default and returns (passes, geometric mean per repeat);
    it passes when every repeat has `want` rows with both figures, none below
    row_min and a geometric mean of at least geo_min."""
    import math
    ok, means = True, []
    for i, rep in enumerate(reps):
        ratios = []
        for key in sorted(k for k in rep if keep(k)):
            base, new = rep[key].get("hopper:default"), rep[key].get(f"hopper:{cand}")
            if isinstance(base, float) and isinstance(new, float) and base > 0:
                ratios.append(new / base)
                print(f"rep{i + 1} {label(key)}: default {base:.0f} {cand} {new:.0f} ({new / base:.3f}) "
                      f"cudnn {rep[key].get('sdpa:cudnn')}")
            else:
                print(f"rep{i + 1} {label(key)}: {cand} missing ({new!r}, default {base!r})")
        ok = ok and len(ratios) == want and min(ratios) >= row_min
        means.append(math.exp(sum(map(math.log, ratios)) / len(ratios)) if ratios else float("nan"))
        ok = ok and means[-1] >= geo_min
    return ok, means


def nc2_causal_verdict(r) -> str:
    """The rule of gpu_next_nc2_causal.sh (in its header): prints each row
    and returns the RULE line."""
    ok_correct = probe_correct(f"{r}/correct.log", "nc2_dynamic")
    print(f"correctness (nc2_dynamic): {'passed' if ok_correct else 'FAILED or missing'}")
    reps = [{(x["d"], x["n"], x["hkv"]): x for x in rep}
            for rep in fwd_probe_records([f"{r}/ab1.log", f"{r}/ab2.log"])]
    best = None
    for cand in ("nc2_causal_plans", "nc2_sec16_plans"):
        ok, means = probe_candidate(reps, cand, want=5, row_min=0.98, geo_min=1.03)
        ok = ok and ok_correct and len(reps) == 2
        print(f"{cand}: geomean per repeat {', '.join(f'{m:.3f}' for m in means)}" + (" qualifies" if ok else ""))
        if ok and (best is None or sum(means) > best[1]):
            best = (cand, sum(means))
    if best is None:
        return "RULE: nothing changes"
    return ("RULE: CAUSAL_CONFIGS[64] = {'NUM_CONSUMERS': 2, 'CONSUMER_REGS': 240}"
            + (", SECTION_MB_DEFAULT[64] = (0, 16)" if best[0] == "nc2_sec16_plans" else "") + f" ({best[0]})")


def short64_verdict(r) -> str:
    """The rule of gpu_next_short64.sh (in its header): prints each row and
    returns the RULE line."""
    ok_correct = probe_correct(f"{r}/correct.log", "nc2")
    print(f"correctness (nc2): {'passed' if ok_correct else 'FAILED or missing'}")
    reps = [{(x["d"], x["n"], x["hkv"]): x for x in rep}
            for rep in fwd_probe_records([f"{r}/ab1.log", f"{r}/ab2.log"])]
    cand = "nc2_short_plans"
    ratio = {}  # (n, hkv) -> the smaller of the repeats' ratios (None: a figure or a row missing)
    keys = sorted({key for rep in reps for key in rep})
    for i, rep in enumerate(reps):
        for d, n, hkv in keys:
            rec = rep.get((d, n, hkv), {})
            base, new = rec.get("hopper:default"), rec.get(f"hopper:{cand}")
            x = new / base if isinstance(base, float) and isinstance(new, float) and base > 0 else None
            print(f"rep{i + 1} N={n} Hkv={hkv}: default {base} {cand} {new} ratio "
                  + (f"{x:.3f}" if x else "-") + f" cudnn {rec.get('sdpa:cudnn')} flex {rec.get('flex')}")
            prev = ratio.get((n, hkv), float("inf"))
            ratio[(n, hkv)] = None if x is None or prev is None else min(prev, x)
    n_max = 0
    if ok_correct and len(reps) == 2:
        for n in sorted({n for n, _ in ratio}):
            rows = [x for (m, _), x in ratio.items() if m <= n]
            if all(x is not None and x >= 1.02 for x in rows):
                n_max = n
            else:
                break
    if not n_max:
        return "RULE: nothing changes"
    return f"RULE: SHORT_CONFIGS[(64, False)] = ({n_max}, {{'NUM_CONSUMERS': 2, 'CONSUMER_REGS': 240}})"


def row_bound_verdict(r) -> str:
    """The rule of gpu_next_row_bound.sh (in its header): per head dim of
    the "causal" rows (64, 128, 256 at N 1k-8k), row_bound_plans against
    default in both repeats, 4 rows each, none below 0.98, geometric mean
    >= 1.01, the correctness stage and the GPU tests passed; prints each row
    and returns the RULE line with the head dims adopted."""
    ok_correct = probe_correct(f"{r}/correct.log", "row_bound")
    tests = tests_passed(f"{r}/tests_rb.log")
    print(f"correctness (row_bound): {'passed' if ok_correct else 'FAILED or missing'}; "
          f"GPU tests: {'passed' if tests else 'FAILED or missing'}")
    reps = [{(x["d"], x["n"], x["hkv"]): x for x in rep}
            for rep in fwd_probe_records([f"{r}/ab1.log", f"{r}/ab2.log"])]
    dims = []
    for d in (64, 128, 256):
        ok, means = probe_candidate(reps, "row_bound_plans", want=4, row_min=0.98, geo_min=1.01,
                                    keep=lambda key, d=d: key[0] == d,
                                    label=lambda key: f"d={key[0]} N={key[1]}")
        ok = ok and ok_correct and tests and len(reps) == 2
        print(f"d = {d}: geomean per repeat {', '.join(f'{m:.3f}' for m in means)}" + (" qualifies" if ok else ""))
        if ok:
            dims.append(d)
    return "RULE: " + (f"ROW_BOUND_DIMS = frozenset({set(dims)})" if dims else "nothing changes")


def row_bound_bwd_verdict(r, rows_per_dim=None) -> str:
    """The backward half of gpu_next_row_bound.sh's rule (in its header): per
    head dim (64: 3 rows, 128: 4 rows; rows_per_dim overrides), ROW_BOUND=1
    against default in hopper_bwd_probe.py's two repeats (best of each, as
    best_of_reps_rule), every check ok, no row below 0.99, geometric mean >=
    1.01, and the GPU tests passed; returns the RULE line."""
    rows_per_dim = rows_per_dim or {64: 3, 128: 4}
    tests = tests_passed(f"{r}/tests_rb.log")
    reps = [json_rows(f"{r}/rep{i}/hopper_bwd_probe.json") for i in (1, 2)]
    dims = []
    for d, want in rows_per_dim.items():
        mine = [[x for x in rows if x.get("d") == d and x.get("causal")] for rows in reps]
        best, _ = best_of_reps_rule(mine, {"ROW_BOUND=1": "ROW_BOUND=1"}, want, 0.99, 1.01)
        if best and tests:
            dims.append(d)
    return "RULE (backward): " + (f"bwd.ROW_BOUND_DIMS = frozenset({set(dims)})" if dims else "nothing changes")


def best_of_reps_rule(reps, variants: dict, want_rows: int, row_min: float, geo_min: float, base="default"):
    """Module-switch rule over repeated hopper_bwd_probe.py runs: for each
    candidate (label -> variant spec) and row, the variant's faster repeat over
    the base's faster repeat (a stall only slows a run); a candidate passes
    when every repeat has want_rows rows, every check is "ok", every ratio is
    >= row_min and their geometric mean >= geo_min.  Prints a line per row
    and candidate; returns (the passing label with the highest geometric
    mean or None, {label: geomean})."""
    import math
    geos, passing = {}, {}
    complete = bool(reps) and all(len(rows) == want_rows for rows in reps)
    for label, spec in variants.items():
        ratios, ok = [], complete
        for rows in zip(*reps):
            r0 = rows[0]
            t0 = max((x["tflops"].get(base) or 0) for x in rows)
            t = max((x["tflops"].get(spec) or 0) for x in rows)
            checks = [x["check"].get(spec) for x in rows]
            q = t / t0 if t0 else 0.0
            ok &= all(c == "ok" for c in checks) and q >= row_min
            ratios.append(q)
            print(f"{label} B={r0['b']} Hq={r0['hq']} Hkv={r0['hkv']} N={r0['n']} d={r0['d']} "
                  f"causal={r0['causal']} (rule S: {r0.get('rule_split')}): {base} {t0:.0f} {label} {t:.0f} "
                  f"TFLOP/s ({q:.3f}x), checks {checks}")
        geo = math.exp(sum(map(math.log, ratios)) / len(ratios)) if ratios and min(ratios) > 0 else 0.0
        ok &= geo >= geo_min
        print(f"{label}: geomean {geo:.3f}, {'passes' if ok else 'fails'}")
        geos[label] = geo
        if ok:
            passing[label] = geo
    return (max(passing, key=passing.get) if passing else None), geos


def dropout_probe_verdict(r, cands: dict, adopt: dict, table: str, dims=(64, 128)) -> dict:
    """The per-head-dim verdict of a dropout_probe_reps run (gpu_lib.sh; r/tests.log,
    r/rep1, r/rep2): for each d of dims, best_of_reps_rule over its 6 rows (every
    row >= 0.99x the default, geometric mean >= 1.02) among cands (label ->
    variant spec); adopt maps a label to the change, printed as "RULE:
    {table}[d]{adopt[label]}" when the tests passed, else "RULE: nothing
    changes".  Returns {d: the winning label or None}."""
    tests_ok, reps = probe_run(r)
    won = {}
    for d in dims:
        print(f"== dropout d={d}")
        sel = [[x for x in rep if x["d"] == d] for rep in reps]
        best, _ = best_of_reps_rule(sel, cands, 6, 0.99, 1.02)
        won[d] = best if tests_ok else None
        print("RULE: " + (f"{table}[{d}]{adopt[best]}" if won[d] else "nothing changes"))
    return won


def reps_rule_verdict(r, adopt: dict, want_rows: int, row_min: float, geo_min: float, tests_log=None,
                      select=lambda row: True) -> str:
    """The verdict of a probe_reps run (hopper_bwd_probe.py JSON in r/rep1,
    r/rep2) by best_of_reps_rule over the rows select() keeps: adopt maps
    each candidate variant to the change it makes; with tests_log, a log
    that does not end with rc=0 (gpu_tests) adopts nothing.  Prints the
    rule's lines and "RULE: ..."; returns the winning label or None."""
    tests_ok = tests_log is None or tests_passed(f"{r}/{tests_log}")
    if tests_log is not None:
        print("tests:", "passed" if tests_ok else "FAILED")
    reps = [[row for row in json_rows(f"{r}/rep{i}/hopper_bwd_probe.json") if select(row)] for i in (1, 2)]
    best, _ = best_of_reps_rule(reps, {c: c for c in adopt}, want_rows, row_min, geo_min)
    best = best if tests_ok else None
    print("RULE: " + (adopt[best] if best else "nothing changes"))
    return best


def min_n_verdict(reps, cand: str, select, tiers=((2048, 4), (4096, 3)), row_min: float = 0.99,
                  geo_min: float = 1.03, tests_ok: bool = True):
    """A per-length table rule over repeated hopper_bwd_probe.py runs (reps:
    their rows): for each (min_n, need) of tiers in turn, the rows select()
    keeps with N >= min_n, at least need of them, must pass best_of_reps_rule
    for cand against the default (row_min, geo_min); returns the first
    min_n that passes (with tests_ok), else None.  Prints the rule's lines."""
    for min_n, need in tiers:
        sel = [[row for row in rep if select(row) and row["n"] >= min_n] for rep in reps]
        n = len(sel[0]) if sel else 0
        print(f"== {n} rows with N >= {min_n} (at least {need})")
        best, _ = best_of_reps_rule(sel, {cand: cand}, n, row_min, geo_min) if n else (None, {})
        if best and n >= need and tests_ok:
            return min_n
    return None


def split_ratio_rows(reps, new: str, base: str = "default") -> list:
    """hopper_bwd_probe.py repeats timing ``new`` against ``base`` (a GROUP_SPLIT
    switch, e.g. mod:GROUP_PARTIALS_16BIT=True): per row, a dict of the first
    repeat's row ("row"), the new / base TFLOP/s ratio of each repeat
    ("ratios", None where either is missing), the rule's S ("split": 1 for
    MHA, where both variants run the same launches) and whether every check
    of every repeat is "ok" / "ref" ("checks"); one line printed per row."""
    out = []
    for rows in zip(*reps):
        r0 = rows[0]
        ratios = [r["tflops"][new] / r["tflops"][base] if r["tflops"].get(new) and r["tflops"].get(base) else None
                  for r in rows]
        checks = all(c in ("ok", "ref") for r in rows for c in r["check"].values() if c)
        split = r0.get("rule_split", 1)
        out.append(dict(row=r0, ratios=ratios, split=split, checks=checks))
        print(f"B={r0['b']} Hq={r0['hq']} Hkv={r0['hkv']} N={r0['n']} d={r0['d']} S={split}: "
              + " ".join(f"{x:.3f}" if x else "-" for x in ratios) + ("" if checks else f"  checks {r0['check']}"))
    return out


def geomean(xs) -> float:
    """Geometric mean; 0 for an empty list or a non-positive value."""
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs and min(xs) > 0 else 0.0


def split_switch_verdict(reps, new: str, min_split: int, row_min: float, geo_min: float) -> str:
    """Each repeat on its own: the rows whose rule S >= min_split all at least
    row_min and their geometric mean at least geo_min, every check ok
    (gpu_next_partials16_alt.sh)."""
    rows = split_ratio_rows(reps, new)
    ok = len({len(rows_) for rows_ in reps}) == 1 and all(r["checks"] for r in rows)  # (a cut repeat: not met)
    picked = [r for r in rows if r["split"] >= min_split]
    for i in range(len(reps)):
        xs = [r["ratios"][i] for r in picked]
        ok &= bool(xs) and all(x is not None and x >= row_min for x in xs)
        mean = geomean([x for x in xs if x])
        ok &= mean >= geo_min
        print(f"repeat {i + 1}: S >= {min_split} rows {len(xs)}, geomean {mean:.3f}")
    return "met" if ok else "NOT met"


def median_split_verdict(reps, new: str) -> str:
    """gpu_next_partials16d.sh's rule on the per-row medians over its
    alternated processes: gauges (S = 1) within [0.98, 1.02], then True if
    every S > 1 row >= 0.99 with geomean >= 1.015, else 8 if every S >= 8 row
    >= 1.0 with geomean >= 1.02, else False."""
    import statistics
    rows = split_ratio_rows(reps, new)
    if (not rows or len({len(rows_) for rows_ in reps}) != 1
            or not all(r["checks"] and None not in r["ratios"] for r in rows)):
        return "NOT applied: a check failed or a run is missing a row"
    med = [(r["split"], statistics.median(r["ratios"])) for r in rows]
    gauges = [m for s, m in med if s == 1]
    split = [m for s, m in med if s > 1]
    big = [m for s, m in med if s >= 8]
    print("medians:", " ".join(f"S{s}:{m:.3f}" for s, m in med))
    print(f"S > 1: {len(split)} rows, geomean {geomean(split):.3f}; S >= 8: {len(big)} rows, "
          f"geomean {geomean(big):.3f}; gauges {' '.join(f'{m:.3f}' for m in gauges)}")
    if not all(0.98 <= m <= 1.02 for m in gauges):
        return "the method cannot resolve it (a gauge row outside [0.98, 1.02]): stays False"
    if split and min(split) >= 0.99 and geomean(split) >= 1.015:
        return "met (1): GROUP_PARTIALS_16BIT = True"
    if big and min(big) >= 1.0 and geomean(big) >= 1.02:
        return "met (2): GROUP_PARTIALS_16BIT = 8"
    return "NOT met: stays False"


def decode_checks_ok(reps) -> bool:
    """Every bench_decode.json payload of ``reps`` ran its spot checks, each
    with an error under 1e-2 against SDPA in float32."""
    return all(p.get("checks") and all(c.get("max_abs_err_vs_fp32", 1.0) < 1e-2 for c in p["checks"])
               for p in reps)


def decode_paged_verdict(reps, base: str = "default", gain: float = 1.05, floor: float = 0.98,
                         gain_from: int = 16384, ours: str = "flashattn_triton") -> str:
    """gpu_next_decode_paged.sh's rule over bench_decode.json payloads (one per
    process): per page layout, a variant qualifies if in every process its
    GB/s over the base's on the same (batch, N) row is >= gain from gain_from
    keys on and >= floor below, every row of both present and every spot check
    ran (an error under 1e-2); the best qualifying geomean wins.  One line per
    layout: "<layout>: <winner> (geomean g)" or "<layout>: unchanged"."""
    layouts = sorted({r["layout"] for p in reps for r in p["rows"] if r.get("provider") == ours})
    checks_ok = decode_checks_ok(reps)
    lines = []
    for layout in layouts:
        tables = []
        for p in reps:
            t = {}
            for r in p["rows"]:
                if r.get("provider") == ours and r["layout"] == layout and "gbps" in r:
                    t[(r["variant"], r["batch"], r["seqlen"])] = r["gbps"]
            tables.append(t)
        keys = sorted({(b, n) for t in tables for (v, b, n) in t if v == base})
        variants = sorted({v for t in tables for (v, b, n) in t if v != base})
        best, best_geo = None, 0.0
        for v in variants:
            ratios, ok = [], checks_ok and bool(keys)
            for t in tables:
                for b, n in keys:
                    new, old = t.get((v, b, n)), t.get((base, b, n))
                    if not new or not old:
                        ok = False
                        continue
                    x = new / old
                    ratios.append(x)
                    ok &= x >= (gain if n >= gain_from else floor)
            geo = geomean(ratios)
            lines.append(f"  {layout} {v}: " + " ".join(f"{x:.3f}" for x in ratios)
                         + f" geomean {geo:.3f} {'qualifies' if ok else 'no'}")
            if ok and geo > best_geo:
                best, best_geo = v, geo
        lines.append(f"{layout}: {best} (geomean {best_geo:.3f})" if best else f"{layout}: unchanged")
    if not checks_ok:
        lines.append("a spot check is missing or failed: nothing qualifies")
    return "\n".join(lines)


def decode_replan(reps, new: str, base: str, row_min: float, geo_min: float,
                  ours: str = "flashattn_triton") -> tuple:
    """A decode variant's rule over bench_decode.json payloads (the repeats of
    gpu_lib.sh's order_reps, one per timing order), ``new`` against ``base``
    (bench_decode.py --variants names): a row whose two plans differ (split
    count or launch config) is re-planned; one with the same plan is a gauge of
    the timing noise, reported without a bar.  Met when every spot check ran
    (an error under 1e-2), every re-planned row is present in every repeat, no
    re-planned row reads under ``row_min`` in every repeat, and the geomean of
    all re-planned ratios is >= ``geo_min``.  Returns (text, met): one line per
    re-planned row, the gauges' range and a last line "<new> over <base>: met
    (geomean g)" or "... NOT met ..."."""
    checks_ok = decode_checks_ok(reps)
    ratios: dict = {}
    gauges, lines, ok = [], [], checks_ok and bool(reps)
    for i, p in enumerate(reps, 1):
        rows = {(r.get("variant", "default"), r["layout"], r["batch"], r["seqlen"]): r for r in p["rows"]
                if r.get("provider") == ours and "gbps" in r}
        for (v, lay, b, n), old in sorted(rows.items()):
            if v != base:
                continue
            cand = rows.get((new, lay, b, n))
            if not cand or not cand["gbps"]:
                ok = False
                lines.append(f"  repeat {i} {lay} B={b} N={n}: {new} missing")
                continue
            x = cand["gbps"] / old["gbps"]
            if (cand.get("num_splits"), cand.get("launch")) == (old.get("num_splits"), old.get("launch")):
                gauges.append(x)
                continue
            ratios.setdefault((lay, b, n), []).append(x)
            lines.append(f"  repeat {i} {lay} B={b} N={n}: splits {old.get('num_splits')} -> "
                         f"{cand.get('num_splits')}, {x:.3f}")
    low = sorted(key for key, xs in ratios.items() if len(xs) == len(reps) and max(xs) < row_min)
    ok &= bool(ratios) and all(len(xs) == len(reps) for xs in ratios.values()) and not low
    geo = geomean([x for xs in ratios.values() for x in xs])
    ok &= geo >= geo_min
    if gauges:
        lines.append(f"  gauges (same plan): {min(gauges):.3f}-{max(gauges):.3f} over {len(gauges)} rows")
    if low:
        lines.append(f"  under {row_min} in every repeat: {low}")
    if not ratios:
        lines.append("  no re-planned rows")
    if not checks_ok:
        lines.append("a spot check is missing or failed")
    lines.append(f"{new} over {base}: {'met' if ok else 'NOT met'} ({len(ratios)} re-planned rows, "
                 f"geomean {geo:.3f}; the rule: each >= {row_min} in some repeat, geomean >= {geo_min})")
    return "\n".join(lines), ok


def decode_replan_reps(r, name: str, new: str, base: str, row_min: float, geo_min: float,
                       tests_log=None) -> tuple:
    """decode_replan over gpu_lib.sh's ``order_reps NAME`` repeats in ``r``
    ($R/NAME_rep1, $R/NAME_rep2); returns (its text, met), where met also asks
    that ``tests_log`` (a gpu_tests log, when given) passed.  Exits naming the
    file when a repeat is missing (load_reps)."""
    reps = load_reps([f"{r}/{name}_rep{i}/bench_decode.json" for i in (1, 2)], key=None)
    text, met = decode_replan(reps, new, base, row_min=row_min, geo_min=geo_min)
    if tests_log is not None:
        passed = tests_passed(tests_log)
        text += "\ntests passed" if passed else "\ntests FAILED or cut"
        met = met and passed
    return text, met


def decode_spread_verdict(reps, base: str = "default", variant: str = "spread", gain: float = 1.03,
                          floor: float = 0.98, gain_batches=(64,), gain_from: int = 4096,
                          ours: str = "flashattn_triton", gain_rows=None, gauges: bool = False,
                          gauge_band: float = 0.06, layout: str = "contiguous") -> str:
    """gpu_next_decode_spread.sh's (and gpu_next_decode_longpages.sh's) rule over
    bench_decode.json payloads (one per process, the rows of ``layout``):
    ``variant`` qualifies if every spot check ran
    (an error under 1e-2), every (batch, N) row of the base has the variant's
    row in every process, and in every process its GB/s over the base's is
    >= gain on the rows with a batch in gain_batches and N >= gain_from and >=
    floor on every other row (``gain_rows``, a set of (batch, N), names the
    rows that need the gain instead, when given).  With ``gauges`` (session 33's
    rule, fixed after session 32's call 5, where two rows with identical plans
    read 0.961 / 0.969) the plans decide instead: a row where both variants
    launched the same split count and config is a gauge of the timing noise,
    with no bar of its own, but every gauge must lie within 1 +- gauge_band
    (else no decision); every row whose plans differ needs >= gain.  Returns
    the per-row ratios and a last line "<variant>: adopt (geomean g)" or
    "<variant>: unchanged"."""
    checks_ok = decode_checks_ok(reps)
    ok, ratios, lines = checks_ok and bool(reps), [], []
    for i, p in enumerate(reps, 1):
        rows = {(r.get("variant", "default"), r["batch"], r["seqlen"]): r for r in p["rows"]
                if r.get("provider") == ours and r.get("layout") == layout and "gbps" in r}
        keys = sorted({(b, n) for (v, b, n) in rows if v == base})
        ok &= bool(keys)
        for b, n in keys:
            a, c = rows.get((variant, b, n)), rows[(base, b, n)]
            if not a or not a["gbps"]:
                ok = False
                lines.append(f"  process {i} B={b} N={n}: {variant} missing")
                continue
            x = a["gbps"] / c["gbps"]
            ratios.append(x)
            if gauges:
                if (a.get("num_splits"), a.get("launch")) == (c.get("num_splits"), c.get("launch")):
                    inside = abs(x - 1.0) <= gauge_band
                    ok &= inside
                    lines.append(f"  process {i} B={b} N={n}: {x:.3f} (gauge: same plan"
                                 f"{'' if inside else ', outside the band: no decision'})")
                    continue
                need = gain
            elif gain_rows is not None:
                need = gain if (b, n) in gain_rows else floor
            else:
                need = gain if b in gain_batches and n >= gain_from else floor
            ok &= x >= need
            lines.append(f"  process {i} B={b} N={n}: {x:.3f} (needs {need:.2f})")
    if not checks_ok:
        lines.append("a spot check is missing or failed: nothing qualifies")
    geo = geomean(ratios) if ratios else 0.0
    lines.append(f"{variant}: adopt (geomean {geo:.3f})" if ok else f"{variant}: unchanged (geomean {geo:.3f})")
    return "\n".join(lines)
