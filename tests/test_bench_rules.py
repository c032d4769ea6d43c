"""benchmarks/rules.py's readers of the sinks switch rounds, on the committed logs of
session 23 (calls 1 and 6) and on logs made here; CPU only."""

import importlib.util
import json
import shutil
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
S23 = REPO / "benchmarks" / "results" / "h200" / "session23"


def _bench_module(name):
    """benchmarks/<name>.py as a fresh module (benchmarks/ on the path for its imports)."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    spec = importlib.util.spec_from_file_location(f"bench_{name}", REPO / "benchmarks" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _rules():
    return _bench_module("rules")


@pytest.mark.committed_results
def test_sinks_verdicts_on_the_committed_rounds():
    """The two rules give what the runs printed: call 1's single switch fails
    (d = 64's forward 0.96x, a 1.30x backward round), both calls pass d = 128
    per head dim and not d = 64."""
    rules = _rules()
    for call in ("call1/r", "call6/sk/r"):
        assert rules.sinks_verdict(str(S23 / call), per_dim=False).endswith('"0" (stays)')
        assert rules.sinks_verdict(str(S23 / call), per_dim=True).endswith("frozenset({128})")
    done, ratios = rules.switch_rounds(str(S23 / "call1/r"), rows=2)
    assert done == 3 and abs(ratios[(2, 4096, 16, 4, 128, True)][0][1] - 1.303) < 1e-3


def _write_round(r, rnd, sw, fwd_ms, bwd_ms):
    rows = [{"variant": "sinks", "batch": 2, "seqlen": 4096, "heads_q": hq, "heads_kv": hkv, "head_dim": d,
             "causal": True, "ours_fwd_ms": f, "ours_bwd_ms": b}
            for (hq, hkv, d), f, b in zip(((16, 4, 128), (64, 8, 64)), fwd_ms, bwd_ms)]
    (r / f"bench_{rnd}_{sw}.log").write_text("".join(f"{row}\n" for row in rows) + "rc=0\n")


def test_sinks_verdicts_on_made_rounds(tmp_path):
    """A failed or missing test log fails both rules; a round with a row
    missing does not count; one slow forward round removes its head dim."""
    rules = _rules()
    r = tmp_path / "r"
    r.mkdir()
    (r / "tests_sinks.log").write_text("51 passed, 6 skipped in 37.90s\nrc=0\n")
    for rnd in (1, 2, 3):
        _write_round(r, rnd, 0, (1.0, 1.0), (2.0, 2.0))
        _write_round(r, rnd, 1, (0.7, 0.9 if rnd < 3 else 0.96), (2.0, 2.0))
    assert rules.sinks_verdict(str(r), per_dim=True).endswith("frozenset({128})")
    assert rules.sinks_verdict(str(r), per_dim=False).endswith('"0" (stays)')
    _write_round(r, 3, 1, (0.7, 0.9), (2.0, 2.0))
    assert rules.sinks_verdict(str(r), per_dim=True).endswith("frozenset({64, 128})")
    assert rules.sinks_verdict(str(r), per_dim=False).endswith('"1"')
    (r / "bench_3_1.log").write_text("rc=124\n")  # round 3 cut: 2 complete rounds still suffice
    assert rules.switch_rounds(str(r), rows=2)[0] == 2
    assert rules.sinks_verdict(str(r), per_dim=False).endswith('"1"')
    shutil.copy(r / "bench_3_1.log", r / "bench_2_1.log")  # one complete round: too few
    assert rules.sinks_verdict(str(r), per_dim=True).endswith("frozenset()")
    (r / "tests_sinks.log").write_text("1 failed, 50 passed\nrc=1\n")
    _write_round(r, 2, 1, (0.7, 0.9), (2.0, 2.0))
    assert rules.sinks_verdict(str(r), per_dim=False).endswith('"0" (stays)')
    assert rules.sinks_verdict(str(r), per_dim=True).endswith("frozenset()")


def _write_probe(path, gains):
    """An ab log of hopper_fwd_probe.py's bench stage: the 5 rows of
    causal64_gqa with default at 300 TFLOP/s and each candidate at 300 x gain."""
    import json
    keys = [(n, 32) for n in (1024, 2048, 4096, 8192)] + [(4096, 4)]
    lines = []
    for (n, hkv), (g1, g2) in zip(keys, gains):
        rec = {"kind": "bench", "d": 64, "n": n, "hkv": hkv, "causal": True, "hopper:default": 300.0,
               "hopper:nc2_causal_plans": 300.0 * g1, "hopper:nc2_sec16_plans": 300.0 * g2, "sdpa:cudnn": 380.0}
        lines.append("RESULT " + json.dumps(rec))
    path.write_text("\n".join(lines) + "\nrc=0\n")


def test_nc2_causal_verdict(tmp_path):
    """gpu_next_nc2_causal.sh's rule: both repeats, 5 rows, geomean >= 1.03,
    no row below 0.98, the correctness stage passed; the better candidate by
    the sum of its means wins."""
    import json
    rules = _rules()
    r = tmp_path
    ok = "RESULT " + json.dumps({"kind": "correct", "variant": "nc2_dynamic", "ok": True}) + "\nrc=0\n"
    (r / "correct.log").write_text(ok)
    good = [(1.05, 1.08)] * 5
    for rep in (1, 2):
        _write_probe(r / f"ab{rep}.log", good)
    assert rules.nc2_causal_verdict(str(r)).endswith("SECTION_MB_DEFAULT[64] = (0, 16) (nc2_sec16_plans)")
    _write_probe(r / "ab2.log", [(1.05, 1.08)] * 4 + [(1.05, 0.97)])  # a row of sec16 below 0.98
    assert rules.nc2_causal_verdict(str(r)).endswith("240} (nc2_causal_plans)")
    _write_probe(r / "ab2.log", [(1.02, 0.97)] * 5)  # geomean 1.02: neither
    assert rules.nc2_causal_verdict(str(r)) == "RULE: nothing changes"
    _write_probe(r / "ab2.log", good)
    (r / "ab2.log").write_text("\n".join((r / "ab2.log").read_text().splitlines()[:4]) + "\nrc=124\n")
    assert rules.nc2_causal_verdict(str(r)) == "RULE: nothing changes"  # a row missing in repeat 2
    _write_probe(r / "ab2.log", good)
    (r / "correct.log").write_text(ok.replace("true", "false"))
    assert rules.nc2_causal_verdict(str(r)) == "RULE: nothing changes"


def _write_short(path, gains):
    """An ab log of the "full64_short" rows (d = 64 not causal, N 512 / 1k /
    1.5k / 2k, Hkv 32, then Hkv 4 at 1k) with default at 300 TFLOP/s and
    nc2_short_plans at 300 x the row's gain."""
    import json
    keys = [(512, 32), (1024, 32), (1536, 32), (2048, 32), (1024, 4)]
    lines = ["RESULT " + json.dumps({"kind": "bench", "d": 64, "n": n, "hkv": hkv, "causal": False,
                                     "hopper:default": 300.0, "hopper:nc2_short_plans": 300.0 * g,
                                     "sdpa:cudnn": 380.0, "flex": 320.0})
             for (n, hkv), g in zip(keys, gains)]
    path.write_text("\n".join(lines) + "\nrc=0\n")


def test_short64_verdict(tmp_path):
    """gpu_next_short64.sh's rule: n_max is the largest N whose rows of length
    <= N (GQA at 1k included) all gain >= 1.02 in both repeats; the
    correctness stage passed and both repeats there, else nothing."""
    import json
    rules = _rules()
    r = tmp_path
    ok = "RESULT " + json.dumps({"kind": "correct", "variant": "nc2", "ok": True}) + "\nrc=0\n"
    (r / "correct.log").write_text(ok)
    for rep in (1, 2):
        _write_short(r / f"ab{rep}.log", [1.10, 1.08, 1.05, 1.03, 1.06])
    assert rules.short64_verdict(str(r)).startswith("RULE: SHORT_CONFIGS[(64, False)] = (2048, ")
    _write_short(r / "ab2.log", [1.10, 1.08, 1.01, 1.03, 1.06])  # 1.5k under 1.02 in one repeat
    assert rules.short64_verdict(str(r)).startswith("RULE: SHORT_CONFIGS[(64, False)] = (1024, ")
    _write_short(r / "ab2.log", [1.10, 1.08, 1.05, 1.03, 1.00])  # the GQA row at 1k fails
    assert rules.short64_verdict(str(r)).startswith("RULE: SHORT_CONFIGS[(64, False)] = (512, ")
    _write_short(r / "ab2.log", [0.99, 1.08, 1.05, 1.03, 1.06])  # the shortest row fails: nothing
    assert rules.short64_verdict(str(r)) == "RULE: nothing changes"
    _write_short(r / "ab2.log", [1.10] * 5)
    (r / "ab2.log").write_text("\n".join((r / "ab2.log").read_text().splitlines()[:1]) + "\nrc=124\n")
    assert rules.short64_verdict(str(r)) == "RULE: SHORT_CONFIGS[(64, False)] = (512, {'NUM_CONSUMERS': 2, " \
        "'CONSUMER_REGS': 240})"  # repeat 2 cut after its first row: only 512 has both
    (r / "ab2.log").unlink()
    assert rules.short64_verdict(str(r)) == "RULE: nothing changes"  # one repeat only
    _write_short(r / "ab2.log", [1.10] * 5)
    (r / "correct.log").write_text(ok.replace("true", "false"))
    assert rules.short64_verdict(str(r)) == "RULE: nothing changes"


def _write_rb(path, gains):
    """An ab log of the "causal" rows (d 64 / 128 / 256, N 1k-8k) with
    default at 300 TFLOP/s and row_bound_plans at 300 x gain (a gain per
    head dim)."""
    import json
    lines = []
    for d, g in zip((64, 128, 256), gains):
        for n in (1024, 2048, 4096, 8192):
            rec = {"kind": "bench", "d": d, "n": n, "hkv": 2048 // d, "causal": True, "hopper:default": 300.0,
                   "hopper:row_bound_plans": 300.0 * g, "sdpa:cudnn": 380.0}
            lines.append("RESULT " + json.dumps(rec))
    path.write_text("\n".join(lines) + "\nrc=0\n")


def test_row_bound_verdict(tmp_path):
    """gpu_next_row_bound.sh's rule, per head dim: both repeats, 4 rows, no
    row below 0.98, geomean >= 1.01, the correctness stage and the GPU tests
    passed."""
    import json
    rules = _rules()
    r = tmp_path
    ok = "RESULT " + json.dumps({"kind": "correct", "variant": "row_bound", "ok": True}) + "\nrc=0\n"
    (r / "correct.log").write_text(ok)
    (r / "tests_rb.log").write_text("16 passed\nrc=0\n")
    _write_rb(r / "ab1.log", (1.05, 1.02, 1.00))
    _write_rb(r / "ab2.log", (1.04, 1.015, 1.03))
    assert rules.row_bound_verdict(str(r)) == "RULE: ROW_BOUND_DIMS = frozenset({64, 128})"
    _write_rb(r / "ab2.log", (1.04, 0.975, 1.03))  # d = 128 below 0.98 in one repeat
    assert rules.row_bound_verdict(str(r)) == "RULE: ROW_BOUND_DIMS = frozenset({64})"
    (r / "tests_rb.log").write_text("1 failed\nrc=1\n")
    assert rules.row_bound_verdict(str(r)) == "RULE: nothing changes"
    (r / "tests_rb.log").write_text("16 passed\nrc=0\n")
    (r / "correct.log").write_text(ok.replace("true", "false"))
    assert rules.row_bound_verdict(str(r)) == "RULE: nothing changes"
    (r / "correct.log").write_text(ok)
    (r / "ab2.log").write_text("rc=124\n")  # repeat 2 cut: no rows
    assert rules.row_bound_verdict(str(r)) == "RULE: nothing changes"


def _write_bwd_rb(folder, gains):
    """hopper_bwd_probe.json of one repeat: 3 causal rows at d = 64 and 4 at
    d = 128, default at 300 TFLOP/s and ROW_BOUND=1 at 300 x gain[d]."""
    import json
    rows = []
    for d, n_rows in ((64, 3), (128, 4)):
        for i in range(n_rows):
            rows.append({"b": 2, "hq": 16, "hkv": 16, "n": 2048 << i, "d": d, "causal": True,
                         "tflops": {"default": 300.0, "ROW_BOUND=1": 300.0 * gains[d]},
                         "check": {"ROW_BOUND=1": "ok"}})
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "hopper_bwd_probe.json").write_text(json.dumps({"rows": rows}))


def test_row_bound_bwd_verdict(tmp_path):
    """gpu_next_row_bound.sh's backward rule, per head dim: best of two
    repeats, every row >= 0.99, geomean >= 1.01, the GPU tests passed."""
    rules = _rules()
    r = tmp_path
    (r / "tests_rb.log").write_text("20 passed\nrc=0\n")
    _write_bwd_rb(r / "rep1", {64: 1.03, 128: 1.005})
    _write_bwd_rb(r / "rep2", {64: 1.02, 128: 1.00})
    assert rules.row_bound_bwd_verdict(str(r)) == "RULE (backward): bwd.ROW_BOUND_DIMS = frozenset({64})"
    _write_bwd_rb(r / "rep2", {64: 1.02, 128: 1.04})
    assert rules.row_bound_bwd_verdict(str(r)) == "RULE (backward): bwd.ROW_BOUND_DIMS = frozenset({64, 128})"
    (r / "tests_rb.log").write_text("1 failed\nrc=1\n")
    assert rules.row_bound_bwd_verdict(str(r)) == "RULE (backward): nothing changes"
    (r / "tests_rb.log").write_text("20 passed\nrc=0\n")
    (r / "rep2" / "hopper_bwd_probe.json").unlink()  # a repeat cut before its file
    assert rules.row_bound_bwd_verdict(str(r)) == "RULE (backward): nothing changes"


def _split_reps(gains_per_rep, splits=(1, 2, 4, 8, 8)):
    """Probe repeats of rows with the given rule S (1: MHA, no rule_split):
    default at 300 TFLOP/s, the 16-bit partials at 300 x gain."""
    new = "mod:GROUP_PARTIALS_16BIT=True"
    reps = []
    for gains in gains_per_rep:
        rows = []
        for split, gain in zip(splits, gains):
            row = {"b": 2, "hq": 16, "hkv": 16 if split == 1 else 4, "n": 4096, "d": 128, "causal": True,
                   "tflops": {"default": 300.0, new: 300.0 * gain}, "check": {"default": "ref", new: "ok"}}
            if split > 1:
                row["rule_split"] = split
            rows.append(row)
        reps.append(rows)
    return reps


def test_split_switch_verdict():
    """gpu_next_partials16_alt.sh: each repeat on its own, the rows with
    S >= min_split all >= row_min and their geomean >= geo_min; the S = 1
    gauge is not in the rule."""
    rules = _rules()
    new = "mod:GROUP_PARTIALS_16BIT=True"
    reps = _split_reps([(0.95, 1.01, 1.02, 1.05, 1.04), (1.06, 1.0, 1.03, 1.04, 1.05)])
    assert rules.split_switch_verdict(reps, new, 2, 0.99, 1.02) == "met"
    assert rules.split_switch_verdict(reps, new, 8, 1.0, 1.05) == "NOT met"  # geomean 1.045 in repeat 1
    reps[1][1]["tflops"][new] = 300.0 * 0.985  # an S = 2 row below 0.99
    assert rules.split_switch_verdict(reps, new, 2, 0.99, 1.02) == "NOT met"
    assert rules.split_switch_verdict(reps, new, 8, 1.0, 1.02) == "met"
    del reps[1][0]  # repeat 2 cut before a row
    assert rules.split_switch_verdict(reps, new, 8, 1.0, 1.02) == "NOT met"
    reps = _split_reps([(1.0, 1.0, 1.0, 1.05, 1.05)] * 2)
    assert rules.split_switch_verdict(reps, new, 8, 1.0, 1.02) == "met"
    reps[0][4]["check"][new] = "FAIL 3.1e-01"
    assert rules.split_switch_verdict(reps, new, 8, 1.0, 1.02) == "NOT met"


def test_median_split_verdict():
    """gpu_next_partials16d.sh: per-row medians over the alternated runs; the
    gauges (S = 1) must sit within [0.98, 1.02], then True (every S > 1 row
    >= 0.99, geomean >= 1.015), else 8 (every S >= 8 row >= 1.0, geomean
    >= 1.02), else False; a missing row or failed check applies nothing."""
    rules = _rules()
    new = "mod:GROUP_PARTIALS_16BIT=True"
    good = [(1.0, 1.01, 1.02, 1.04, 1.03), (1.01, 1.0, 1.01, 1.05, 1.02), (0.99, 1.02, 1.0, 1.03, 1.04)]
    assert rules.median_split_verdict(_split_reps(good), new) == "met (1): GROUP_PARTIALS_16BIT = True"
    only_big = [(1.0, 0.97, 0.98, 1.04, 1.03)] * 3
    assert rules.median_split_verdict(_split_reps(only_big), new) == "met (2): GROUP_PARTIALS_16BIT = 8"
    noisy = [(1.05, 1.01, 1.02, 1.04, 1.03)] * 3  # the gauge (same launches) moved 5 %
    assert rules.median_split_verdict(_split_reps(noisy), new).startswith("the method cannot resolve")
    flat = [(1.0, 1.0, 0.99, 1.0, 1.01)] * 3
    assert rules.median_split_verdict(_split_reps(flat), new) == "NOT met: stays False"
    cut = _split_reps(good)
    del cut[2][-1]  # a run cut before its last row
    assert rules.median_split_verdict(cut, new).startswith("NOT applied")


def _decode_payload(gbps: dict, err=1e-3):
    """A bench_decode.json payload: gbps {(variant, layout, batch, n): GB/s}."""
    rows = [dict(provider="flashattn_triton", variant=v, layout=lay, batch=b, seqlen=n, gbps=g)
            for (v, lay, b, n), g in gbps.items()]
    return dict(rows=rows, checks=[dict(max_abs_err_vs_fp32=err)])


def test_decode_paged_verdict():
    """Per layout: a variant wins only with >= 1.05x from 16k and >= 0.98x at 4k in
    every process; the best geomean of the qualifying ones wins; a failed spot check
    or a missing row disqualifies."""
    rules = _rules()
    def payload(fast, slow4k=1.0, err=1e-3, drop=None):
        g = {}
        for lay in ("paged16", "paged256"):
            for b in (1, 4):
                for n in (4096, 16384, 65536):
                    g[("default", lay, b, n)] = 1000.0
                    g[("pair", lay, b, n)] = 1000.0 * (fast if lay == "paged16" and n >= 16384 else
                                                       slow4k if n == 4096 else 1.0)
                    g[("none", lay, b, n)] = 1000.0 * (1.055 if lay == "paged16" else 0.9)
        if drop:
            del g[drop]
        return _decode_payload(g, err)
    out = rules.decode_paged_verdict([payload(1.10), payload(1.08)])
    assert "paged16: pair" in out and "paged256: unchanged" in out, out
    assert "paged16: none" in rules.decode_paged_verdict([payload(1.10), payload(1.04)])
    assert "paged16: none" in rules.decode_paged_verdict([payload(1.10, slow4k=0.97), payload(1.10)])
    out = rules.decode_paged_verdict([payload(1.10, err=0.5), payload(1.10)])
    assert "paged16: unchanged" in out and "spot check" in out, out
    out = rules.decode_paged_verdict([payload(1.10, drop=("pair", "paged16", 4, 65536)), payload(1.10)])
    assert "paged16: none" in out, out


def test_decode_spread_verdict():
    """"spread" is adopted only with >= 1.03x on every row of the gain batches (64, 128 here) from 4k and
    >= 0.98x on every other row, in every process, with the spot checks run."""
    rules = _rules()
    def payload(fast=1.05, other=1.0, err=1e-3, drop=None):
        g = {}
        for b in (16, 64, 128):
            for n in (1024, 4096, 16384):
                g[("default", "contiguous", b, n)] = 1000.0
                g[("spread", "contiguous", b, n)] = 1000.0 * (fast if b >= 64 and n >= 4096 else other)
        if drop:
            del g[drop]
        return _decode_payload(g, err)
    assert "spread: adopt" in rules.decode_spread_verdict([payload(), payload(1.10)], gain_batches=(64, 128))
    assert "spread: unchanged" in rules.decode_spread_verdict([payload(), payload(1.10)], gain_batches=(16, 64))
    assert "spread: unchanged" in rules.decode_spread_verdict([payload(), payload(1.02)], gain_batches=(64, 128))
    assert "spread: unchanged" in rules.decode_spread_verdict([payload(), payload(other=0.97)])
    assert "spread: adopt" in rules.decode_spread_verdict([payload(other=0.985), payload()], gain_batches=(64, 128))
    rows = {(64, 4096), (64, 16384)}
    assert "spread: adopt" in rules.decode_spread_verdict([payload(), payload()], gain_rows=rows)
    assert "spread: unchanged" in rules.decode_spread_verdict([payload(), payload()], gain_rows=rows | {(16, 4096)})
    out = rules.decode_spread_verdict([payload(err=0.5), payload()])
    assert "spread: unchanged" in out and "spot check" in out, out
    out = rules.decode_spread_verdict([payload(drop=("spread", "contiguous", 128, 16384)), payload()])
    assert "spread: unchanged" in out and "missing" in out, out


def test_decode_spread_verdict_gauges():
    """With gauges (session 33's rule) rows of identical plans carry no bar but
    must lie within +-6 %; every row whose split count differs needs >= 1.03x."""
    rules = _rules()
    def payload(fast=1.08, gauge=0.96, changed_slow=None):
        rows = []
        for b in (48, 64):
            for n in (1024, 4096):
                changed = b == 64 and n == 4096
                for v in ("default", "spread"):
                    g = 1000.0 if v == "default" else 1000.0 * (fast if changed else gauge)
                    if changed_slow and v == "spread" and (b, n) == changed_slow:
                        g = 1000.0
                    rows.append(dict(provider="flashattn_triton", variant=v, layout="contiguous", batch=b,
                                     seqlen=n, gbps=g, num_splits=4 if changed and v == "spread" else 1,
                                     launch=dict(BLOCK_N=64)))
        return dict(rows=rows, checks=[dict(max_abs_err_vs_fp32=1e-3)])
    out = rules.decode_spread_verdict([payload(), payload()], gauges=True)
    assert "spread: adopt" in out and "gauge: same plan" in out, out
    assert "spread: unchanged" in rules.decode_spread_verdict([payload(), payload(gauge=0.93)], gauges=True)
    assert "spread: unchanged" in rules.decode_spread_verdict([payload(), payload(fast=1.02)], gauges=True)
    # the same payloads under the plain rule: the 0.96 gauges fail its 0.98 floor
    assert "spread: unchanged" in rules.decode_spread_verdict([payload(), payload()], gain_rows={(64, 4096)})


def test_decode_spread_verdict_layout():
    """The rule reads the rows of the layout it is given, and only those."""
    rules = _rules()
    rows = []
    for lay, fast in (("paged16", 1.10), ("paged256", 0.90)):
        for v in ("default", "x"):
            rows.append(dict(provider="flashattn_triton", variant=v, layout=lay, batch=1, seqlen=65536,
                             gbps=1000.0 * (fast if v == "x" else 1.0), num_splits=29 if v == "x" else 16,
                             launch=dict(BLOCK_N=64)))
    p = dict(rows=rows, checks=[dict(max_abs_err_vs_fp32=1e-3)])
    assert "x: adopt" in rules.decode_spread_verdict([p, p], variant="x", gauges=True, layout="paged16")
    assert "x: unchanged" in rules.decode_spread_verdict([p, p], variant="x", gauges=True, layout="paged256")
    assert "x: unchanged" in rules.decode_spread_verdict([p, p], variant="x", gauges=True)  # no contiguous rows


def test_bench_decode_refuses_an_outside_variant(monkeypatch):
    """bench_decode.py sets FLASHATTN_TRITON_DECODE_VARIANT for each timed
    variant, so a value set by the caller would be replaced without a word
    (session 33 call 1 timed the old defaults that way): without --variants
    it stops and names the variable and the --variants to pass."""
    import pytest

    bench = _bench_module("bench_decode")
    monkeypatch.setenv(bench.VARIANT_ENV, "default,spread")
    with pytest.raises(SystemExit, match="default\\+spread"):
        bench.run(bench.parse_args(["--smoke-cpu"]))


def test_bench_decode_refuses_an_outside_combine(monkeypatch):
    """--combine default (the default) times the library's own merge per
    batch; FLASHATTN_TRITON_DECODE_COMBINE set by the caller would replace
    it, so the run stops and names the --combine to pass instead."""
    import pytest

    bench = _bench_module("bench_decode")
    monkeypatch.delenv(bench.VARIANT_ENV, raising=False)
    monkeypatch.setenv(bench.COMBINE_ENV, "gathered")
    with pytest.raises(SystemExit, match="--combine gathered"):
        bench.run(bench.parse_args(["--smoke-cpu"]))


def test_bench_decode_checks_after_every_timing(monkeypatch, tmp_path):
    """The correctness spot checks run once every timing is taken (session 66:
    the graph timed right after one read 12-15 % slower), one per timed
    (batch, length, layout) and on the library's output."""
    bench = _bench_module("bench_decode")
    monkeypatch.delenv(bench.VARIANT_ENV, raising=False)
    monkeypatch.delenv(bench.COMBINE_ENV, raising=False)
    monkeypatch.setattr(bench, "DEVICE", "cpu")
    events, timed = [], set()
    real_check = bench.spot_check

    def time_graph(fns, reps):
        events.append("time")
        return 1.0

    def spot_check(q, cache, lens, n, sinks=None):
        events.append("check")
        return real_check(q, cache, lens, n, sinks)

    def record_shapes(batch, n, h_kv, d, dtype, layout, copies):
        timed.add((batch, n, layout))
        return make_caches(batch, n, h_kv, d, dtype, layout, copies)

    make_caches = bench.make_caches
    monkeypatch.setattr(bench, "time_graph", time_graph)
    monkeypatch.setattr(bench, "spot_check", spot_check)
    monkeypatch.setattr(bench, "make_caches", record_shapes)
    monkeypatch.setattr(bench, "copy_ceilings", lambda sizes, reps: dict(gbps=1.0, how="copy_", gb=0.0, sizes=[]))
    args = bench.parse_args(["--smoke-cpu", "--out", str(tmp_path), "--peers", ""])
    bench.smoke_shapes(args)
    bench.run(args)
    first_check = events.index("check")
    assert "time" in events and "time" not in events[first_check:], events
    payload = json.loads((tmp_path / "bench_decode.json").read_text())
    checked = {(c["batch"], c["seqlen"], c["layout"]) for c in payload["checks"]}
    assert checked == timed and len(payload["checks"]) == len(timed), (checked, timed)
    assert all(c["max_abs_err_vs_fp32"] < 2e-2 for c in payload["checks"]), payload["checks"]


def test_bench_decode_copy_gauge(tmp_path):
    """The copy_same_bytes gauge: per row an elementwise copy moving the bytes the
    step reads (its own column and fraction-of-copy line), never counted as a peer
    (the best-peer ratio and the behind-a-peer list ignore it)."""
    bench = _bench_module("bench_decode")
    rows = [dict(provider=bench.C.OURS, layout="contiguous", batch=1, seqlen=8192, gbps=100.0, frac_copy=0.5,
                 auto_splits=True, num_splits=16),
            dict(provider="sdpa_cudnn", layout="contiguous", batch=1, seqlen=8192, gbps=80.0, frac_copy=0.4),
            dict(provider=bench.COPY_GAUGE, layout="contiguous", batch=1, seqlen=8192, gbps=150.0, frac_copy=0.75)]
    payload = dict(rows=rows, copy=dict(gbps=200.0), checks=[], env={},
                   settings=dict(heads_q=32, heads_kv=8, head_dim=128, dtype="bf16"))
    bench.write_md(payload, tmp_path / "t.md")
    text = (tmp_path / "t.md").read_text()
    assert "| copy_same_bytes |" in text and "| 150 (75%) | 1.25x |" in text, text
    assert "- copy_same_bytes: min 75%, median 75% of copy over N >= 8k" in text, text
    assert "ahead or equal everywhere" in text, text
    # A peer ahead by less than the printed rounding: the ratio tells it (session 68: 2877 > 2877).
    rows[1]["gbps"] = 100.04
    bench.write_md(payload, tmp_path / "t.md")
    text = (tmp_path / "t.md").read_text()
    assert "behind at B=1 N=8k sdpa_cudnn 100 > ours 100 GB/s (ours 0.9996x)" in text, text


@pytest.mark.committed_results
def test_reps_rule_verdict_on_session34_call2(tmp_path, capsys):
    """reps_rule_verdict (the d = 192 staging scripts' rule) on the committed
    repeats of session 34 call 2: three staging buffers win (geomean 1.096 >
    1.078, both pass); a failed test log, a stricter floor or a row filter
    that leaves too few rows adopt nothing."""
    import tarfile
    rules = _rules()
    with tarfile.open(REPO / "benchmarks/results/h200/session34/call2_dq_stage.tgz") as tar:
        tar.extractall(tmp_path, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    r = str(tmp_path / "r")
    adopt = {"DQ_STAGE_BUFS=2": "two", "DQ_STAGE_BUFS=3": "three"}
    assert rules.reps_rule_verdict(r, adopt, 5, 0.99, 1.03, "tests.log") == "DQ_STAGE_BUFS=3"
    assert "RULE: three" in capsys.readouterr().out
    assert rules.reps_rule_verdict(r, adopt, 5, 0.99, 1.10) is None            # geomean 1.096 < 1.10
    assert rules.reps_rule_verdict(r, adopt, 5, 0.99, 1.03, select=lambda row: row["causal"]) is None  # 4 rows
    log = tmp_path / "r" / "tests.log"
    log.write_text(log.read_text().replace("rc=0", "rc=1"))
    assert rules.reps_rule_verdict(r, adopt, 5, 0.99, 1.03, "tests.log") is None
    assert "RULE: nothing changes" in capsys.readouterr().out


@pytest.mark.committed_results
def test_min_n_verdict_on_session35_call6(tmp_path, capsys):
    """min_n_verdict (gpu_next_gqa_unsplit_heads_first.sh's rule) on the
    committed repeats of session 35 call 6: its three unsplit d = 64 GQA
    rows (1.054-1.090x heads first) are too few for the 2048 tier (4) and
    leave two for the 4096 one (3): nothing; asking fewer rows takes 2048;
    a higher floor, a failed test run or the d = 192 rows (0.98-1.00x) take
    nothing."""
    import tarfile
    rules = _rules()
    with tarfile.open(REPO / "benchmarks/results/h200/session35/call6_heads_first192.tgz") as tar:
        tar.extractall(tmp_path, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    reps = [rules.json_rows(str(tmp_path / f"r/rep{i}/hopper_bwd_probe.json")) for i in (1, 2)]
    d64 = lambda r: r["d"] == 64 and r["hq"] != r["hkv"] and (r.get("rule_split") or 1) == 1  # noqa: E731
    assert rules.min_n_verdict(reps, "HEADS_FIRST=1", d64) is None
    assert rules.min_n_verdict(reps, "HEADS_FIRST=1", d64, tiers=((2048, 3), (4096, 2))) == 2048
    assert rules.min_n_verdict(reps, "HEADS_FIRST=1", d64, tiers=((4096, 2),)) == 4096
    assert rules.min_n_verdict(reps, "HEADS_FIRST=1", d64, tiers=((2048, 3),), geo_min=1.10) is None
    assert rules.min_n_verdict(reps, "HEADS_FIRST=1", d64, tiers=((2048, 3),), tests_ok=False) is None
    assert rules.min_n_verdict(reps, "HEADS_FIRST=1", lambda r: r["d"] == 192, tiers=((2048, 3),)) is None
    assert "rows with N >= 2048" in capsys.readouterr().out


@pytest.mark.committed_results
def test_probe_run_on_session36_call6(tmp_path, capsys):
    """probe_run on the committed run of session 36 call 6
    (gpu_next_tma_dkv2.sh): its tests passed, two repeats of seven rows;
    and the rule that run applied to them: the four rows up to 4096 keys
    pass (1.021-1.145x), a higher floor does not; a failed log reads as
    failed."""
    import tarfile
    rules = _rules()
    with tarfile.open(REPO / "benchmarks/results/h200/session36/call6_tma_dkv2.tgz") as tar:
        tar.extractall(tmp_path, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    r = tmp_path / "r"
    tests_ok, reps = rules.probe_run(str(r))
    assert tests_ok and [len(rep) for rep in reps] == [7, 7]
    short = [[x for x in rep if x["n"] <= 4096] for rep in reps]
    best, geos = rules.best_of_reps_rule(short, {"TMA_DKV=1": "TMA_DKV=1"}, 4, 0.99, 1.02)
    assert best == "TMA_DKV=1" and 1.08 < geos["TMA_DKV=1"] < 1.09, geos
    assert rules.best_of_reps_rule(short, {"TMA_DKV=1": "TMA_DKV=1"}, 4, 1.05, 1.02)[0] is None  # 1.021x row
    (r / "tests.log").write_text("1 failed\nrc=1\n")
    assert not rules.probe_run(str(r))[0]
    assert "tests: FAILED" in capsys.readouterr().out


@pytest.mark.committed_results
def test_dropout_probe_verdict_on_session39(tmp_path, capsys):
    """dropout_probe_verdict (gpu_next_dropout_rng.sh's and
    gpu_next_dropout_late.sh's rule) on the committed runs of session 39
    calls 2 and 7: the bits at 232 registers win at d = 64 (geomean 1.090)
    and the bits at 240 at d = 128 (1.034; the bytes and the bits at 232 at
    d = 128 fail); the late bits win at d = 64 (232 registers, 1.026 over
    1.025) and miss at d = 128 (1.019 < 1.02); a failed test log adopts
    nothing."""
    import tarfile
    rules = _rules()
    for call, name in ((2, "call2_dropout_rng.tgz"), (7, "call7_dropout_late.tgz")):
        with tarfile.open(REPO / "benchmarks/results/h200/session39" / name) as tar:
            tar.extractall(tmp_path / str(call), **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    rng = {"bytes": "DROPOUT_RNG_WARPS=1", "bits": "DROPOUT_RNG_WARPS=2",
           "bits232": "DROPOUT_RNG_WARPS=2+CONSUMER_REGS=232"}
    assert rules.dropout_probe_verdict(str(tmp_path / "2/r"), rng, {k: f" {k}" for k in rng}, "T") == {
        64: "bits232", 128: "bits"}
    assert "RULE: T[64] bits232" in capsys.readouterr().out
    late = {"late": "DROPOUT_RNG_WARPS=3", "late232": "DROPOUT_RNG_WARPS=3+CONSUMER_REGS=232"}
    r = tmp_path / "7/r"
    assert rules.dropout_probe_verdict(str(r), late, {k: k for k in late}, "T") == {64: "late232", 128: None}
    (r / "tests.log").write_text("1 failed\nrc=1\n")
    assert rules.dropout_probe_verdict(str(r), late, {k: k for k in late}, "T") == {64: None, 128: None}
    assert "RULE: nothing changes" in capsys.readouterr().out


def test_gemm_loop_report_counts_each_innermost_loop():
    """compile_check.gemm_loop_report: per innermost loop that issues HGMMA
    (a backward branch's span holding no other such loop; spans with an EXIT
    are not loops), its instructions and local loads / stores, in code order;
    a loop without HGMMA and the outer loop around two step loops are left out."""
    cc = _bench_module("compile_check")
    ops = [(0x00, "MOV", " R0, RZ"),
           (0x10, "HGMMA.64x64x16.F32.BF16", " R8, gdesc[UR4], RZ"),   # step loop 1: 0x10-0x30
           (0x20, "STL", " [R1], R2"),
           (0x30, "BRA", " 0x10"),
           (0x40, "HGMMA.64x64x16.F32.BF16", " R8, gdesc[UR4], RZ"),   # step loop 2: 0x40-0x70
           (0x50, "LDL", " R2, [R1]"),
           (0x60, "LDL", " R3, [R1+0x4]"),
           (0x70, "BRA", " 0x40"),
           (0x80, "BRA", " 0x10"),                                      # the loop around both
           (0x90, "IADD3", " R4, R4, 0x1, RZ"),                          # a loop without HGMMA
           (0xa0, "BRA", " 0x90"),
           (0xb0, "EXIT", ""),
           (0xc0, "BRA", " 0x40")]                                      # a retry block's branch back
    assert cc.gemm_loops(ops) == [(0x10, 0x30), (0x40, 0x70)]
    assert cc.gemm_loop_report(ops) == "gemm loops 3:1 4:2"
    assert cc.local_in_gemm_loops(ops) == 3


def test_decode_replan():
    """A decode variant's rule: rows whose plans differ need >= row_min in some repeat and a
    geomean >= geo_min; rows with the same plan are gauges without a bar; a missing row or a
    failed spot check fails it."""
    rules = _rules()
    def payload(fast=1.02, slow=None, gauge=0.9, err=1e-3, drop=None):
        rows = []
        for n in (16384, 32768, 65536):
            replanned = n >= 32768
            for v, g in (("default", 1000.0), ("new", 1000.0 * (gauge if not replanned else
                                                                  slow if slow and n == 32768 else fast))):
                if drop == (v, n):
                    continue
                rows.append(dict(provider="flashattn_triton", variant=v, layout="contiguous", batch=1, seqlen=n,
                                 gbps=g, num_splits=16, launch=dict(BLOCK_N=128 if v == "new" and replanned else 64)))
        return dict(rows=rows, checks=[dict(max_abs_err_vs_fp32=err)])
    verdict = lambda reps: rules.decode_replan(reps, "new", "default", 0.99, 1.01)[0].splitlines()[-1]
    assert "met (2 re-planned rows, geomean 1.020" in verdict([payload(), payload()])
    assert "NOT met" in verdict([payload(fast=1.005), payload(fast=1.005)])  # geomean
    assert "NOT met" in verdict([payload(slow=0.98), payload(slow=0.985)])  # a row under 0.99 in both
    assert " met" in verdict([payload(slow=0.98), payload(slow=1.0, fast=1.04)])  # under in one repeat only
    assert "NOT met" in verdict([payload(err=0.5), payload()])
    assert "NOT met" in verdict([payload(drop=("new", 65536)), payload()])
    assert "NOT met" in verdict([payload(fast=1.0, gauge=1.5), payload(fast=1.0, gauge=1.5)])  # gauges not counted
    assert rules.decode_replan([payload(), payload()], "new", "default", 0.99, 1.01)[1]  # (text, met)
    assert not rules.decode_replan([payload(slow=0.98), payload(slow=0.985)], "new", "default", 0.99, 1.01)[1]


def test_decode_replan_reps(tmp_path):
    """decode_replan_reps reads order_reps' two repeat folders; met needs the rule and,
    when a tests log is named, its rc=0 line; a missing repeat stops with its path."""
    import pytest

    rules = _rules()
    rows = [dict(provider="flashattn_triton", variant=v, layout="contiguous", batch=1, seqlen=65536, gbps=g,
                 num_splits=16, launch=dict(BLOCK_N=n)) for v, g, n in (("default", 100.0, 64), ("new", 103.0, 128))]
    for i in (1, 2):
        (tmp_path / f"x_rep{i}").mkdir()
        (tmp_path / f"x_rep{i}" / "bench_decode.json").write_text(
            json.dumps(dict(rows=rows, checks=[dict(max_abs_err_vs_fp32=1e-3)])))
    (tmp_path / "ok.log").write_text("1 passed\nrc=0\n")
    (tmp_path / "bad.log").write_text("1 failed\nrc=1\n")
    assert rules.decode_replan_reps(tmp_path, "x", "new", "default", 0.99, 1.01)[1]
    assert rules.decode_replan_reps(tmp_path, "x", "new", "default", 0.99, 1.01, tests_log=tmp_path / "ok.log")[1]
    text, met = rules.decode_replan_reps(tmp_path, "x", "new", "default", 0.99, 1.01, tests_log=tmp_path / "bad.log")
    assert not met and "tests FAILED" in text
    assert not rules.decode_replan_reps(tmp_path, "x", "new", "default", 0.99, 1.05)[1]
    with pytest.raises(SystemExit, match="y_rep1"):
        rules.decode_replan_reps(tmp_path, "y", "new", "default", 0.99, 1.01)

