"""benchmarks/rules.py's readers of the sinks switch rounds, on the committed logs of
session 23 (calls 1 and 6) and on logs made here; CPU only."""

import importlib.util
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
S23 = REPO / "benchmarks" / "results" / "h200" / "session23"


def _rules():
    sys.path.insert(0, str(REPO / "benchmarks"))
    spec = importlib.util.spec_from_file_location("bench_rules", REPO / "benchmarks" / "rules.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


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
