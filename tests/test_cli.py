"""The command line: ``flashattn-triton {check,info,bench}`` (flashattn_triton/cli.py)
and the benchmark harness behind ``bench`` (flashattn_triton/bench/)."""

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from flashattn_triton import cli
from flashattn_triton.bench import common
from flashattn_triton.kernels import launch
from flashattn_triton.kernels.bwd import _launch_dkdv, _launch_dq
from flashattn_triton.kernels.fwd import _launch_fwd

REPO = Path(__file__).resolve().parent.parent
ON_GPU = os.environ.get("FLASHATTN_TRITON_TEST_DEVICE", "cpu") == "cuda" and torch.cuda.is_available()


@pytest.fixture(autouse=True)
def _plain_launch_env(monkeypatch):
    for name in list(os.environ):
        if name.startswith(launch.ENV_CONFIG_PREFIX) or name in (launch.ENV_AUTOTUNE, "FLASHATTN_TRITON_BACKEND"):
            monkeypatch.delenv(name)


def test_help_lists_the_commands_and_the_environment(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for word in ("check", "info", "bench", "FLASHATTN_TRITON_BACKEND", "TRITON_INTERPRET"):
        assert word in out
    with pytest.raises(SystemExit):
        cli.main(["bench", "--help"])
    out = capsys.readouterr().out
    for option in ("--full", "--smoke", "--out", "--dtype", "--peers", "--dry-run"):
        assert option in out


def test_help_lists_the_readme_table_but_its_test_rows(capsys):
    """README: "`--help` prints the table above but its test-only rows" (those
    whose description starts with "tests:"), in the table's order; the
    CONFIG_<KERNEL> row names every kernel the README's row does."""
    import re
    readme = (REPO / "README.md").read_text()
    rows = re.findall(r"^\| `([A-Z_<>]+)` \| (.*) \|$", readme, re.M)
    assert len(rows) > 20 and any(text.startswith("tests:") for _, text in rows)
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    listed = re.findall(r"^  ((?:FLASHATTN_)?TRITON_[A-Z_<>]+)  ", capsys.readouterr().out, re.M)
    assert listed == [name for name, text in rows if not text.startswith("tests:")]
    config_row = dict(rows)["FLASHATTN_TRITON_CONFIG_<KERNEL>"]
    for kernel in ("FWD", "BWD_DKDV", "BWD_DQ", "BWD_ONE", "DECODE"):
        assert f"`{kernel}`" in config_row
        assert kernel in dict(cli.ENVIRONMENT)["FLASHATTN_TRITON_CONFIG_<KERNEL>"]


def test_info_without_a_shape(capsys):
    assert cli.main(["info"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("flashattn_triton ") and "torch" in out and "triton" in out
    assert "call:" not in out


@pytest.mark.skipif(ON_GPU, reason="describes the CPU path")
def test_info_shape_on_the_cpu(capsys):
    assert cli.main(["info", "--shape", "2,100,4,64", "--causal"]) == 0
    out = capsys.readouterr().out
    assert "call: q (2, 100, 4, 64), k, v (2, 100, 4, 64), bf16, causal" in out
    # conftest sets TRITON_INTERPRET=1: the kernels run in the interpreter with its fixed config
    assert "interpreter" in out and "--arch sm90" in out


@pytest.mark.skipif(ON_GPU or not launch.INTERPRET, reason="describes the interpreter")
def test_info_names_the_interpreters_configs(capsys, monkeypatch):
    """Under TRITON_INTERPRET=1, `info` names for each portable kernel the
    tiles its launcher uses in the interpreter: a FLASHATTN_TRITON_CONFIG_<KERNEL>
    config where one is forced, else the interpreter's fixed one."""
    monkeypatch.setenv("FLASHATTN_TRITON_CONFIG_FWD", "BLOCK_M=64,BLOCK_N=32,num_warps=4,num_stages=2")
    assert cli.main(["info", "--shape", "1,64,2,64"]) == 0
    lines = capsys.readouterr().out.splitlines()
    for launcher in (_launch_fwd, _launch_dkdv, _launch_dq):
        cfg = launcher.config(torch.device("cpu"), torch.bfloat16, 64, False, launch.seq_bucket(64))
        line = next(ln for ln in lines if ln.split()[:1] == [launcher.name])
        assert f"BLOCK_M={cfg.kwargs['BLOCK_M']} BLOCK_N={cfg.kwargs['BLOCK_N']}" in line, line
        assert ("forced by FLASHATTN_TRITON_CONFIG_FWD" in line) == (launcher.name == "FWD"), line
    assert "BLOCK_M=64 BLOCK_N=32" in next(ln for ln in lines if ln.split()[:1] == ["FWD"])


def _launcher_choice(launcher, monkeypatch, arch, dtype, d_pad, masked_right, bucket, tag):
    """What Launcher.choose picks on a GPU of `arch` (the GPU query patched out)."""
    monkeypatch.setattr(launch, "_arch", lambda index: arch)
    monkeypatch.setattr(launch, "smem_budget", lambda index: launch.arch_budget(arch))
    cfg = launcher.choose.__wrapped__(launcher, 0, dtype, d_pad, masked_right, bucket, tag)
    return cli._fmt_entry((cfg.kwargs["BLOCK_M"], cfg.kwargs["BLOCK_N"], cfg.num_warps, cfg.num_stages))


@pytest.mark.parametrize("arch", ["sm90", "sm80", "sm89"])
@pytest.mark.parametrize("dtype,d_pad,masked_right,n,variants,left", [
    (torch.bfloat16, 128, True, 4096, (), -1),
    (torch.float16, 64, False, 700, (), -1),
    (torch.float16, 64, True, 3000, ("softcap",), 256),
    (torch.float32, 128, False, 100, (), -1),
    (torch.float32, 512, True, 20000, ("dropout",), -1),
    (torch.bfloat16, 256, True, 16384, ("mask", "alibi"), -1),
])
def test_info_configs_are_the_launchers(monkeypatch, arch, dtype, d_pad, masked_right, n, variants, left):
    """info's description of a launch config is the config kernels/launch.py picks."""
    tag = cli.table_tag(variants, left)
    bucket = launch.seq_bucket(n)
    for launcher in (_launch_fwd, _launch_dkdv, _launch_dq):
        described, source = cli.portable_config(launcher, arch, dtype, d_pad, masked_right, bucket, tag)
        assert described == _launcher_choice(launcher, monkeypatch, arch, dtype, d_pad, masked_right, bucket, tag)
        if not launch.load_table(arch):
            kib = launch.arch_budget(arch) // 1024
            assert source == f"no tuned table for {arch}: first candidate that fits the model in {kib} KiB of shared memory"
        elif (dtype, d_pad, masked_right, n, tag) == (torch.bfloat16, 128, True, 4096, ""):
            assert source == f"tuned table {arch}.json, key {launcher.name}|bfloat16|d128|causal|n4096"


def test_info_shape_for_sm90(capsys, monkeypatch):
    assert cli.main(["info", "--shape", "4,4096,32,128", "--kv-heads", "8", "--dtype", "bf16", "--causal",
                     "--arch", "sm90"]) == 0
    out = capsys.readouterr().out
    assert "sm90" in out and "length bucket 4096" in out
    for kernel in ("FWD", "BWD_DKDV", "BWD_DQ"):
        assert kernel in out
    assert "GQA group of 4" in out
    from flashattn_triton.kernels import hopper
    if hopper.AVAILABLE:
        assert "forward : Hopper tier" in out
    else:
        assert "Hopper tier not used: not available here" in out
    # a forced config is reported as such
    monkeypatch.setenv("FLASHATTN_TRITON_CONFIG_BWD_DQ", "BLOCK_M=32,BLOCK_N=16,num_warps=2,num_stages=1")
    assert cli.main(["info", "--shape", "1,64,2,32", "--window", "16,0", "--arch", "sm90"]) == 0
    out = capsys.readouterr().out
    assert "BWD_DQ   BLOCK_M=32 BLOCK_N=16 num_warps=2 num_stages=1  [forced by FLASHATTN_TRITON_CONFIG_BWD_DQ]" in out
    assert "Hopper tier not used: " in out  # d = 32 (and, on CPU, no Hopper tier here)


def test_info_names_the_short_sequence_rule(capsys, monkeypatch):
    """On sm90 with the Hopper tier importable, a plain call at a length of
    _dispatch.HOPPER_FWD_SHORT reports the portable forward and why; a
    longer one the Hopper forward."""
    from flashattn_triton import _dispatch
    from flashattn_triton.kernels import hopper
    if not hopper.AVAILABLE:
        pytest.skip(f"Hopper tier unavailable: {hopper.REASON}")
    monkeypatch.setattr(_dispatch, "HOPPER_FWD_SHORT", {(64, True): 1024})
    monkeypatch.delenv("FLASHATTN_TRITON_BACKEND", raising=False)
    assert cli.main(["info", "--shape", "8,1024,32,64", "--causal", "--arch", "sm90"]) == 0
    out = capsys.readouterr().out
    assert "forward : portable kernel" in out and "N = 1024 is short enough" in out, out
    assert cli.main(["info", "--shape", "8,2048,32,64", "--causal", "--arch", "sm90"]) == 0
    assert "forward : Hopper tier" in capsys.readouterr().out


def test_info_window_takes_the_hopper_forward(capsys, monkeypatch):
    """A sliding window on sm90: the Hopper forward (where it is available)
    with its left window bound; with FLASHATTN_TRITON_HOPPER_WINDOW=0 the
    portable forward, naming the variable."""
    monkeypatch.delenv("FLASHATTN_TRITON_HOPPER_WINDOW", raising=False)
    argv = ["info", "--shape", "1,4096,8,128", "--window", "1024,0", "--arch", "sm90"]
    _assert_hopper_forward(capsys, argv, "left window bound")
    monkeypatch.setenv("FLASHATTN_TRITON_HOPPER_WINDOW", "0")
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert "Hopper tier not used: window_size (1024, 0)" in out and "FLASHATTN_TRITON_HOPPER_WINDOW=0" in out
    assert cli.main(["info", "--shape", "1,4096,8,128", "--window", "1024,5", "--arch", "sm90"]) == 0
    assert "full or causal attention only" in capsys.readouterr().out


def test_info_sinks_switch(capsys, monkeypatch):
    """Sinks on sm90: by default the portable forward at d = 64, naming the
    variants, and at d = 128 (HOPPER_SINKS_DIMS) the Hopper forward run
    without them and the fold after it (where the tier is available here);
    FLASHATTN_TRITON_HOPPER_SINKS=1 / 0 turns the fold on / off for both."""
    argv = ["info", "--shape", "1,4096,8,128", "--causal", "--variant", "sinks", "--arch", "sm90"]
    argv64 = ["info", "--shape", "1,4096,16,64", "--causal", "--variant", "sinks", "--arch", "sm90"]
    monkeypatch.delenv("FLASHATTN_TRITON_HOPPER_SINKS", raising=False)
    assert cli.main(argv64) == 0
    assert "sinks: variants run on the portable forward" in capsys.readouterr().out
    _assert_hopper_forward(capsys, argv, "folded into O and the LSE")
    monkeypatch.setenv("FLASHATTN_TRITON_HOPPER_SINKS", "0")
    assert cli.main(argv) == 0
    assert "sinks: variants run on the portable forward" in capsys.readouterr().out
    monkeypatch.setenv("FLASHATTN_TRITON_HOPPER_SINKS", "1")
    _assert_hopper_forward(capsys, argv64, "folded into O and the LSE")


def test_info_sinks_backward_is_the_plain_one(capsys, monkeypatch):
    """The backward reads sinks only through the LSE, so `info` names for
    sinks alone the backward a plain call gets (the Hopper tier where it is
    available here), whatever the forward's fold; with dropout too, the one
    dropout alone gets (ops._bwd_into chooses the tier without the sinks)."""
    from flashattn_triton.kernels import hopper
    monkeypatch.setenv("FLASHATTN_TRITON_HOPPER_SINKS", "0")
    base = ["info", "--shape", "2,4096,16,128", "--kv-heads", "4", "--causal", "--arch", "sm90"]
    assert cli.main(base) == 0
    plain = [l for l in capsys.readouterr().out.splitlines() if l.startswith("backward")]
    assert cli.main(base + ["--variant", "sinks"]) == 0
    sinks = [l for l in capsys.readouterr().out.splitlines() if l.startswith("backward")]
    assert sinks == plain, (sinks, plain)
    if hopper.AVAILABLE:
        assert "Hopper tier" in sinks[0], sinks
    for switch in ("1", "0"):
        monkeypatch.setenv("FLASHATTN_TRITON_HOPPER_DROPOUT", switch)
        assert cli.main(base + ["--variant", "dropout"]) == 0
        dropout = [l for l in capsys.readouterr().out.splitlines() if l.startswith("backward")]
        assert cli.main(base + ["--variant", "sinks", "--variant", "dropout"]) == 0
        both = [l for l in capsys.readouterr().out.splitlines() if l.startswith("backward")]
        assert both == dropout, (switch, both, dropout)
        if hopper.AVAILABLE:
            assert ("Hopper tier" in both[0]) == (switch == "1"), (switch, both)


def _assert_hopper_forward(capsys, argv, detail):
    """`info` of argv names the Hopper forward with ``detail`` where the tier
    is available here (Triton 3.6), else its unavailability."""
    from flashattn_triton.kernels import hopper
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    if hopper.AVAILABLE:
        assert "forward : Hopper tier" in out and detail in out, out
    else:
        assert "Hopper tier not used: not available here" in out, out


@pytest.mark.parametrize("argv,message", [
    (["info", "--shape", "1,2,3"], "expected 4 comma-separated integers"),
    (["info", "--shape", "1,0,2,64"], "must be >= 1"),
    (["info", "--shape", "1,8,2,64", "--arch", "hopper"], "expected smXY"),
    (["info", "--shape", "1,8,2,64", "--window=-2,0"], "-1 (unbounded) or >= 0"),
    (["info", "--shape", "1,64,4,64", "--kv-heads", "-2"], "argument --kv-heads: expected an integer >= 1"),
    (["info", "--shape", "1,64,4,64", "--kv-heads", "0"], "argument --kv-heads: expected an integer >= 1"),
    (["info", "--shape", "1,64,4,64", "--seqlen-k", "-5"], "argument --seqlen-k: expected an integer >= 1"),
    (["info", "--shape", "1,64,4,64", "--seqlen-k", "0"], "argument --seqlen-k: expected an integer >= 1"),
    (["info", "--shape", "1,64,4,64", "--head-dim-v", "-8"], "argument --head-dim-v: expected an integer >= 1"),
    (["info", "--shape", "1,64,4,64", "--head-dim-v", "x"], "argument --head-dim-v: expected an integer >= 1"),
])
def test_info_rejects_bad_options(capsys, argv, message):
    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("argv,message", [
    (["info", "--shape", "1,8,6,64", "--kv-heads", "4", "--arch", "sm90"], "--kv-heads 4 must divide H=6"),
    (["info", "--shape", "1,8,6,1024", "--arch", "sm90"], "at most 512"),
    (["info", "--causal"], "add --shape"),
    # every option that describes the call needs --shape, --dtype and --window too
    (["info", "--kv-heads", "2"], "--kv-heads describes a call: add --shape"),
    (["info", "--window", "4,0"], "--window describes a call: add --shape"),
    (["info", "--dtype", "fp16"], "--dtype describes a call: add --shape"),
    (["info", "--dtype", "bf16", "--seqlen-k", "8"], "--seqlen-k, --dtype describe a call: add --shape"),
])
def test_info_rejects_bad_calls(capsys, argv, message):
    assert cli.main(argv) == 2
    assert message in capsys.readouterr().err


def test_bench_dry_run_presets(capsys):
    assert cli.main(["bench", "--dry-run"]) == 0
    quick = capsys.readouterr().out
    assert quick.startswith("4 configs x providers [flashattn_triton, sdpa_flash, sdpa_cudnn, flex]")
    assert cli.main(["bench", "--dry-run", "--full", "--dtype", "bf16", "--peers", "sdpa_flash"]) == 0
    full = capsys.readouterr().out
    assert "x providers [flashattn_triton, sdpa_flash] x modes [fwd, bwd, fwd_bwd]" in full
    assert "fp16" not in full and "d=64" in full and "d=256" in full
    with pytest.raises(SystemExit, match="unknown peer: nope"):
        cli.main(["bench", "--dry-run", "--peers", "nope"])


@pytest.mark.parametrize("argv", [
    ["--head-dims", "abc"], ["--head-dims", "0"], ["--head-dims", "-64"], ["--head-dims", "64,x"],
    ["--seqlens", "0"], ["--seqlens", "-512"], ["--seqlens", ","],
])
def test_bench_lists_of_sizes_take_positive_integers(capsys, argv):
    """--head-dims and --seqlens: comma lists of integers >= 1, else a usage
    error (exit status 2) naming the option, from either entry point."""
    from flashattn_triton.bench import attention
    for run in (lambda: cli.main(["bench", "--dry-run"] + argv), lambda: attention.parse_args(argv)):
        with pytest.raises(SystemExit) as exc:
            run()
        assert exc.value.code == 2
        assert f"argument {argv[0]}: expected a comma list of integers >= 1" in capsys.readouterr().err


def test_bench_lists_of_sizes_parse_to_ints(capsys):
    from flashattn_triton.bench import attention
    args = attention.parse_args(["--head-dims", "64, 128", "--seqlens", "512"])
    assert (args.head_dims, args.seqlens) == ([64, 128], [512])
    assert cli.main(["bench", "--dry-run", "--head-dims", "64, 128", "--seqlens", "512"]) == 0
    out = capsys.readouterr().out
    assert "d=64" in out and "d=128" in out and "N=512" in out


# A committed results file (the device recipe copies the tree without benchmarks/results: the
# committed_results mark skips these there, tests/conftest.py)
RESULTS_JSON = REPO / "benchmarks" / "results" / "h200" / "bench_attention.json"
needs_results = pytest.mark.committed_results


def _bad_bench_inputs(tmp_path):
    (tmp_path / "afile").write_text("")
    (tmp_path / "bad.json").write_text("{not json")
    (tmp_path / "other.json").write_text('{"a": 1}')
    (tmp_path / "rows.json").write_text('{"rows": [{"provider": "naive"}]}')
    return [
        (["--smoke", "--out", "o2", "--compare", "nope.json"], "--compare nope.json: cannot read it"),
        (["--smoke", "--out", "o2", "--compare", "bad.json"], "--compare bad.json: not a JSON file"),
        (["--smoke", "--out", "o2", "--compare", "rows.json"], "--compare rows.json: not a bench_attention.json"),
        (["--smoke", "--out", "o2", "--compare", "."], "--compare .: cannot read it"),
        (["--smoke", "--out", "afile"], "--out afile: exists and is not a folder"),
        (["--smoke", "--out", os.path.join("afile", "sub")],
         f"--out {os.path.join('afile', 'sub')}: afile is not a folder"),
        (["--render", "nope.json", "--out", "o2"], "--render nope.json: cannot read it"),
        (["--render", "bad.json", "--out", "o2"], "--render bad.json: not a JSON file"),
        (["--render", "other.json", "--out", "o2"], "--render other.json: not a bench_attention.json"),
        (["--render", str(RESULTS_JSON), "--out", "afile"],
         "--out afile: exists and is not a folder"),
        (["--compare", "bad.json", "--against", "other.json"], "--compare bad.json: not a JSON file"),
        (["--against", "other.json"], "--against needs --compare"),
    ]


@needs_results
def test_bench_checks_files_and_folder_before_measuring(capsys, monkeypatch, tmp_path):
    """--compare / --against / --render must name readable results JSON and
    --out a folder (or a path where one can be made), else a usage error
    (exit status 2) before anything is measured or written."""
    from flashattn_triton.bench import attention

    def must_not_run(*args, **kwargs):
        raise AssertionError("measured or wrote despite a bad option")
    monkeypatch.setattr(attention, "run", must_not_run)
    monkeypatch.setattr(attention, "write_outputs", must_not_run)
    monkeypatch.chdir(tmp_path)
    for argv, message in _bad_bench_inputs(tmp_path):
        with pytest.raises(SystemExit) as exc:
            cli.main(["bench", "--no-progress"] + argv)
        assert exc.value.code == 2, argv
        err = capsys.readouterr().err
        assert "flashattn-triton bench: error: " + message in err, (argv, err)
        assert "Traceback" not in err
    assert not (tmp_path / "o2").exists()


@needs_results
def test_bench_reads_compare_before_running_and_renders(capsys, monkeypatch, tmp_path):
    """A good --compare file is read before the run, which gets its rows;
    --render of a committed results file rewrites its JSON and markdown."""
    from flashattn_triton.bench import attention
    results = RESULTS_JSON
    seen = {}

    def run(args, s, prog, prev_rows=None):
        seen["rows"] = prev_rows
        return 0
    monkeypatch.setattr(attention, "run", run)
    assert cli.main(["bench", "--smoke", "--compare", str(results), "--out", str(tmp_path / "new")]) == 0
    assert seen["rows"] == json.loads(results.read_text())["rows"]
    assert cli.main(["bench", "--render", str(results), "--out", str(tmp_path / "r"), "--no-plot"]) == 0
    assert json.loads((tmp_path / "r" / "bench_attention.json").read_text())["rows"]
    assert "Rows per provider" in (tmp_path / "r" / "bench_attention.md").read_text()


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is present")
def test_bench_refuses_without_a_gpu(capsys, tmp_path):
    assert cli.main(["bench", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "needs a CUDA GPU" in err and "--smoke" in err
    assert not any(tmp_path.iterdir())


def test_bench_smoke_writes_table_and_plot(tmp_path):
    """`python -m flashattn_triton bench --smoke`: the whole path on the CPU (inputs, each
    provider, timing, tables, JSON, plot), in a fresh process without TRITON_INTERPRET,
    as a user runs it (ours on the blockwise path)."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = str(REPO)
    res = subprocess.run([sys.executable, "-m", "flashattn_triton", "bench", "--smoke", "--seqlens", "64",
                          "--out", str(tmp_path)], capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    out = res.stdout
    assert "smoke run on the CPU" in out
    assert "flashattn_triton TFLOP/s (ratio to the fastest peer that ran)" in out
    assert "| fwd bf16 d=32 causal |" in out
    data = json.loads((tmp_path / "bench_attention.json").read_text())
    rows = data["rows"]
    assert len(rows) == 3 * 2 * 2  # providers x causal x modes
    assert {r["provider"] for r in rows} == {"flashattn_triton", "sdpa_math", "naive"}
    assert all(r["status"] == "ok" and r["ms"] > 0 and r["tflops"] > 0 for r in rows), rows
    assert data["run"]["settings"]["preset"] == "smoke"
    assert "Rows per provider" in (tmp_path / "bench_attention.md").read_text()
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert "matplotlib is not installed" in out
    else:
        png = (tmp_path / "bench_attention.png").read_bytes()
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000


def test_bench_rounds_take_turns_and_keep_the_median():
    """--rounds R: the providers of one config take turns R times (ours, peer,
    ours, peer, ...), and each (config, mode, provider) keeps the median of
    its rounds that ran; a row that never ran keeps its status."""
    from flashattn_triton.bench import attention as A
    cfg = common.AttnConfig(dtype="bf16", head_dim=64, causal=False, batch=1, heads_q=2, heads_kv=2,
                            seqlen_q=64, seqlen_k=64)
    other = common.AttnConfig(dtype="bf16", head_dim=64, causal=True, batch=1, heads_q=2, heads_kv=2,
                              seqlen_q=64, seqlen_k=64)
    plan = [A.Task(cfg, "flashattn_triton", ["fwd"]), A.Task(cfg, "sdpa_cudnn", ["fwd"]),
            A.Task(cfg, "sdpa_math", ["fwd"]), A.Task(other, "flashattn_triton", ["fwd"])]
    assert [[t.provider for t in g] for g in A.config_groups(plan)] == [
        ["flashattn_triton", "sdpa_cudnn"], ["sdpa_math"], ["flashattn_triton"]]  # a new tier: a new group
    rows = [A.make_row(cfg, "flashattn_triton", "fwd", "ok", ms) for ms in (3.0, 1.0, 2.0)]
    rows += [A.make_row(cfg, "sdpa_math", "fwd", "ok", ms) for ms in (4.0, 6.0)]
    rows += [A.make_row(other, "flashattn_triton", "fwd", "oom", error="out of memory")] * 2
    merged = {(r["provider"], r["causal"]): r for r in A.merge_rounds(rows)}
    assert len(merged) == 3
    ours = merged[("flashattn_triton", False)]
    assert ours["ms"] == 2.0 and ours["ms_rounds"] == [3.0, 1.0, 2.0]
    assert ours["tflops"] == common.tflops(ours["flops"], 2.0)
    assert merged[("sdpa_math", False)]["ms"] == 5.0
    assert merged[("flashattn_triton", True)]["status"] == "oom"
    with pytest.raises(SystemExit, match="rounds"):
        A.resolve_settings(A.parse_args(["--rounds", "0"]))


@pytest.mark.gpu
def test_bench_on_the_gpu(capsys, tmp_path):
    assert cli.main(["bench", "--seqlens", "1024", "--head-dims", "64", "--peers", "sdpa_flash",
                     "--out", str(tmp_path), "--no-progress", "--max-seconds", "60"]) == 0
    rows = json.loads((tmp_path / "bench_attention.json").read_text())["rows"]
    ours = [r for r in rows if r["provider"] == "flashattn_triton"]
    assert len(ours) == 4 and all(r["status"] == "ok" and r["tflops"] > 1 for r in ours), ours


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_progress_text_bar_without_tqdm(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "tqdm", None)  # import tqdm fails
    stream = _Terminal()
    bar = common.Progress(4, "demo", stream=stream)
    for i in range(4):
        bar.write(f"result {i}")
        bar.update(1, f"note {i}")
    bar.close()
    text = stream.getvalue()
    assert "demo [" + "." * common.Progress.WIDTH + "] 0/4" in text
    assert "demo [" + "#" * common.Progress.WIDTH + "] 4/4" in text and "note 3" in text
    assert capsys.readouterr().out.splitlines() == [f"result {i}" for i in range(4)]


def test_progress_in_a_log_counts_lines(capsys):
    bar = common.Progress(2, "demo", stream=io.StringIO())  # not a terminal
    bar.write("first")
    bar.update()
    bar.write("second")
    bar.close()
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "demo: 2 measurements"
    assert lines[1].startswith("[1/2") and lines[1].endswith("first")
    assert lines[2].startswith("[2/2") and lines[2].endswith("second")


def test_benchmark_scripts_use_the_package_harness():
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import common as scripts_common
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    assert scripts_common.attn_flops is common.attn_flops
    assert scripts_common.Progress is common.Progress
    assert scripts_common.DEFAULT_OUT == REPO / "benchmarks" / "results" / "h200"
    assert common.attn_flops(2, 4, 8, 8, 16, causal=True, mode="bwd") == 2.5 * 4 * 2 * 4 * 8 * 8 * 16 / 2


@pytest.mark.parametrize("n_q,n_k,causal,window", [
    (5, 13, True, (-1, -1)), (13, 5, True, (-1, -1)), (1, 9, True, (-1, -1)), (9, 9, False, (3, 0)),
    (7, 11, False, (2, 4)), (11, 7, True, (4, -1)), (6, 6, False, (-1, 2)), (8, 3, False, (0, 0)),
])
def test_attn_flops_counts_attended_pairs(n_q, n_k, causal, window):
    """The benchmarks' FLOP count is 2 * B * Hq * pairs * (d + dv), the pairs
    those of flash-attn's bottom-right mask (a halved Nq * Nk only for square
    causal calls, the papers' convention), checked against a brute-force mask."""
    i = torch.arange(n_q)[:, None] + n_k - n_q
    j = torch.arange(n_k)[None, :]
    left, right = window
    keep = torch.ones(n_q, n_k, dtype=torch.bool)
    if causal or right >= 0:
        keep &= j <= i + (0 if causal else right)
    if left >= 0:
        keep &= j >= i - left
    pairs = int(keep.sum())
    assert common.attended_pairs(n_q, n_k, causal, window) == pairs
    assert common.attn_flops(2, 3, n_q, n_k, 16, causal, window=window, head_dim_v=8) == 2.0 * 2 * 3 * pairs * 24
    assert common.attn_flops(2, 3, n_q, n_k, 16, causal, "bwd", window=window) == 2.5 * 4.0 * 2 * 3 * pairs * 16


def test_info_names_the_row_bound_switch(capsys, monkeypatch):
    """`info` names ROW_BOUND on the Hopper forward and backward lines of a
    causal call exactly when each module's ROW_BOUND_DIMS holds the head dim
    (never for a non-causal call)."""
    from flashattn_triton.kernels import hopper
    if not hopper.AVAILABLE:
        pytest.skip(f"Hopper tier unavailable: {hopper.REASON}")
    from flashattn_triton.kernels.hopper import bwd as hbwd, fwd as hfwd
    base = ["info", "--shape", "2,4096,16,128", "--arch", "sm90"]

    def lines(argv):
        assert cli.main(argv) == 0
        out = capsys.readouterr().out.splitlines()
        return [any("ROW_BOUND" in ln for ln in out if ln.startswith(kind)) for kind in ("forward", "backward")]
    assert lines(base + ["--causal"]) == [128 in hfwd.ROW_BOUND_DIMS, 128 in hbwd.ROW_BOUND_DIMS]
    monkeypatch.setattr(hfwd, "ROW_BOUND_DIMS", frozenset())
    monkeypatch.setattr(hbwd, "ROW_BOUND_DIMS", frozenset())
    assert lines(base + ["--causal"]) == [False, False]
    monkeypatch.setattr(hfwd, "ROW_BOUND_DIMS", frozenset({128}))
    assert lines(base + ["--causal"]) == [True, False]
    monkeypatch.setattr(hbwd, "ROW_BOUND_DIMS", frozenset({128}))
    assert lines(base + ["--causal"]) == [True, True]
    assert lines(base) == [False, False]


def test_info_names_the_no_licm_switch(capsys, monkeypatch):
    """`info` names NO_LICM on the Hopper backward line exactly when the call's
    build takes it: bwd.NO_LICM_DIMS holds the head dim, or the environment's
    switch (HOPPER_BWD_NO_LICM_DEFAULT) says so for every call."""
    from flashattn_triton.kernels import hopper
    if not hopper.AVAILABLE:
        pytest.skip(f"Hopper tier unavailable: {hopper.REASON}")
    from flashattn_triton.kernels.hopper import bwd as hbwd
    base = ["info", "--shape", "2,4096,16,128", "--arch", "sm90", "--causal"]

    def named():
        assert cli.main(base) == 0
        out = capsys.readouterr().out.splitlines()
        backward = [ln for ln in out if ln.startswith("backward: Hopper tier")]
        assert len(backward) == 1, out
        return "NO_LICM" in backward[0]
    monkeypatch.setattr(hbwd, "HOPPER_BWD_NO_LICM_DEFAULT", None)
    monkeypatch.setattr(hbwd, "NO_LICM_DIMS", frozenset())
    assert not named()
    monkeypatch.setattr(hbwd, "NO_LICM_DIMS", frozenset({128}))
    assert named()
    monkeypatch.setattr(hbwd, "HOPPER_BWD_NO_LICM_DEFAULT", False)
    assert not named()
    monkeypatch.setattr(hbwd, "NO_LICM_DIMS", frozenset())
    monkeypatch.setattr(hbwd, "HOPPER_BWD_NO_LICM_DEFAULT", True)
    assert named()
