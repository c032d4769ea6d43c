"""benchmarks/ncu_summary.py on the committed Nsight Compute pages of session 12 (text)
and on a details page in CSV made here; CPU only, no ncu."""

import importlib.util
import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
S12 = REPO / "benchmarks" / "results" / "h200" / "session12" / "call2"


def _load():
    spec = importlib.util.spec_from_file_location("ncu_summary", REPO / "benchmarks" / "ncu_summary.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


S = _load()


@pytest.mark.committed_results
def test_text_page_of_the_backward():
    (k,) = S.parse_file(S12 / "bwd_d128_2k_causal.txt")
    assert k.name == "_attn_bwd_hopper" and k.grid == (16, 128, 1) and k.block == (384, 1, 1)
    assert k.num(*S.DURATION) == pytest.approx(894.08)
    assert k.num(*S.SM_PCT) == pytest.approx(42.19)
    assert k.num(*S.IPC) == pytest.approx(0.70)
    assert k.num(*S.OCCUPANCY) == pytest.approx(18.74)
    assert k.num(*S.REGISTERS) == 168
    assert S.no_eligible(k) == pytest.approx(82.48)
    assert k.num(*S.L2_HIT) == pytest.approx(85.28)
    assert k.num(*S.DRAM_PCT) == pytest.approx(15.77)
    assert S.dram_bytes(k) == pytest.approx(758.66e9 * 894.08e-6)  # Gbyte/s x us
    assert S.tensor_pct(k) == (pytest.approx(42.2), "rule")
    total, top = S.stalls(k)  # from the rules' words: the stalls they name
    assert total == pytest.approx(17.11) and top == [("barrier", 5.8), ("long_scoreboard", 5.7)]
    assert S.stall_cell(k) == "17.1: barrier 34%, long_sb 33%"


@pytest.mark.committed_results
def test_units_and_pipe_bound():
    (full,) = S.parse_file(S12 / "bwd_d128_2k_full.txt")
    assert full.num(*S.DURATION) == pytest.approx(1440.0)  # "ms 1.44"
    (fwd,) = S.parse_file(S12 / "fwd_d128_2k_causal.txt")
    assert S.dram_bytes(fwd) == pytest.approx(3.65e12 * 309.09e-6)  # Tbyte/s
    assert S.tensor_pct(fwd) == (pytest.approx(51.5), "bound")  # "Shared is the highest-utilized"
    assert S.tensor_cell(fwd) == "<=51.5"


@pytest.mark.parametrize("name,count", [("bwd_d128_2k_full", 1), ("bwd_d128_2k_causal", 1),
                                        ("fwd_d64_2k_causal", 1), ("fwd_d128_2k_causal", 1),
                                        ("cudnn_bwd_d128_2k_causal", 4), ("cudnn_fwd_d64_2k_causal", 2)])
@pytest.mark.committed_results
def test_every_session12_page_parses(name, count):
    kernels = S.parse_file(S12 / f"{name}.txt")
    assert len(kernels) == count
    for k in kernels:
        assert all(v is not None for v in (k.num(*S.DURATION), k.num(*S.IPC), k.num(*S.L2_HIT),
                                           k.num(*S.REGISTERS), S.no_eligible(k), S.dram_bytes(k)))
    if name.startswith("cudnn_bwd"):
        assert [("bprop" in k.name) for k in kernels] == [False, True, False, True]
        assert S.short_name(kernels[1].name) == "sm90_flash_bprop_wgmma_f16_knob_26_64x64x128_1x4x1"


@pytest.mark.committed_results
def test_rows_pair_session12_files_by_name():
    rows = S.load_rows([str(S12)])
    assert set(rows) == {"bwd_d128_2k_full", "bwd_d128_2k_causal", "fwd_d64_2k_causal", "fwd_d128_2k_causal"}
    row = rows["bwd_d128_2k_causal"]
    assert [len(row.calls[p]) for p in ("ours", "cudnn")] == [1, 4]
    assert row.config == {"mode": "bwd", "dtype": "bf16", "head_dim": 128, "causal": True, "seqlen_q": 2048}
    text = S.render_row(row, None)
    assert "| ours | _attn_bwd_hopper | 16x128x1 | 894.1 | 100% |" in text
    assert text.startswith("### bwd bf16 d=128 causal N=2048: ours 894.1 us, cuDNN 1,923.9 us")
    assert "gap ours - cuDNN: -1,029.8 us" in text
    assert "gap: - (ours or cuDNN's call missing)" in S.render_row(rows["bwd_d128_2k_full"], None)


CSV_HEADER = ("ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream", "Block Size",
              "Grid Size", "Device", "CC", "Section Name", "Metric Name", "Metric Unit", "Metric Value")


def _csv_line(cells):
    return ",".join(f'"{c}"' for c in cells)


def _csv_row(kid, name, grid, section, metric, unit, value):
    return _csv_line([kid, "1", "python3.12", "host", name, "1", "7", "(384, 1, 1)", f"({grid}, 1, 1)", "0", "9.0",
                      section, metric, unit, value])


def _csv_page(calls):
    """A details page in CSV (base units) with a marker before each call: [(window, [(name, us)])]."""
    lines = ["==PROF== Connected to process 1", _csv_line(CSV_HEADER)]
    kid = 0
    for window, kernels in calls:
        lines.append(_csv_row(kid, "_ncu_window", window, "GPU Speed Of Light Throughput", "Duration", "nsecond", "1,984"))
        kid += 1
        for name, us in kernels:
            sol = "GPU Speed Of Light Throughput"
            lines += [_csv_row(kid, name, 132, sol, "Duration", "nsecond", f"{us * 1000:,.0f}"),
                      _csv_row(kid, name, 132, "Command line profiler metrics", "dram__bytes_read.sum", "byte", "2,000,000"),
                      _csv_row(kid, name, 132, "Command line profiler metrics", "dram__bytes_write.sum", "byte", "1,000,000"),
                      _csv_row(kid, name, 132, "Command line profiler metrics",
                               "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active", "%", "55.5"),
                      _csv_row(kid, name, 132, "SchedulerStats", "One or More Eligible", "%", "30")]  # by label alone
            for reason, cycles in (("barrier", 4.0), ("long_scoreboard", 3.0), ("wait", 2.0), ("selected", 1.0),
                                   ("mio_throttle", 0.5)):
                lines.append(_csv_row(kid, name, 132, "Command line profiler metrics",
                                      f"smsp__average_warps_issue_stalled_{reason}_per_issue_active.ratio", "", str(cycles)))
            kid += 1
    return "\n".join(lines) + "\n"


def test_csv_page_split_at_the_markers(tmp_path):
    stem = "bwd_bf16_d128_2k_causal"
    (tmp_path / f"{stem}.csv").write_text(_csv_page([(1, [("_bwd_preprocess", 20.0), ("_attn_bwd_hopper", 900.0),
                                                          ("copy", 80.0)]),
                                                     (2, [("cudnn_generated_fort_native_sdpa_sm90_flash_bprop_x_kernel0_0",
                                                           800.0)])]))
    (tmp_path / f"{stem}.txt").write_text("not read: the CSV is\n")
    row_cfg = {"dtype": "bf16", "head_dim": 128, "causal": True, "batch": 8, "heads_q": 16, "heads_kv": 16,
               "seqlen_q": 2048, "seqlen_k": 2048, "mode": "bwd"}
    (tmp_path / f"{stem}.windows.json").write_text(json.dumps(
        {"row": row_cfg, "windows": [{"window": 1, "provider": "ours"}, {"window": 2, "provider": "cudnn"}],
         "errors": {}}))
    rows = S.load_rows([str(tmp_path)])
    row = rows[stem]
    assert [k.name for k in row.calls["ours"]] == ["_bwd_preprocess", "_attn_bwd_hopper", "copy"]
    assert len(row.calls["cudnn"]) == 1 and row.files == [f"{stem}.csv"]
    k = row.calls["ours"][1]
    assert k.num(*S.DURATION) == pytest.approx(900.0) and S.dram_bytes(k) == 3e6
    assert S.tensor_pct(k) == (pytest.approx(55.5), "metric") and S.no_eligible(k) == pytest.approx(70.0)
    total, top = S.stalls(k)
    assert total == pytest.approx(10.5) and [r for r, _ in top] == ["barrier", "long_scoreboard", "wait", "mio_throttle"]
    assert S.stall_cell(k) == "10.5: barrier 38%, long_sb 29%, wait 19%"
    text = S.render_row(row, None)
    assert text.startswith("### bwd bf16 d=128 causal N=2048 (B=8, H=16): ours 1,000.0 us, cuDNN 800.0 us")
    assert "| ours | _attn_bwd_hopper | 132x1x1 | 900.0 | 90% | - | 55.5 |" in text
    assert ("gap ours - cuDNN: +200.0 us (+25%) = main kernels +100.0 us (_attn_bwd_hopper 900.0 vs "
            "sm90_flash_bprop_x 800.0) + other kernels +100.0 us (ours 2: 100.0, cuDNN 0: 0.0)") in text

    bench = [{"provider": "flashattn_triton", "mode": "bwd", "status": "ok", "ms": 1.0, **row_cfg},
             {"provider": "sdpa_cudnn", "mode": "bwd", "status": "ok", "ms": 0.5, **row_cfg}]
    lines = S.check(rows, [stem], bench)
    assert "ours 1.00, cuDNN 1.60: DOES NOT ADD UP" in lines[0] and lines[-1].startswith("VERDICT: incomplete")
    bench[1]["ms"] = 0.8
    assert S.check(rows, [stem], bench)[-1] == "VERDICT: complete (1/1 required rows profiled and adding up)"
    assert S.check(rows, [stem, "fwd_bf16_d64_2k_causal"], bench)[-1] == \
        "VERDICT: incomplete (1/2; not: fwd_bf16_d64_2k_causal)"


@pytest.mark.committed_results
def test_main_writes_markdown_and_fails_on_nothing(tmp_path, capsys):
    out = tmp_path / "summary.md"
    assert S.main([str(S12), "--require", "bwd_d128_2k_causal", "--out", str(out)]) == 0
    text = out.read_text()
    assert text.index("### bwd bf16 d=128 causal") < text.index("### bwd bf16 d=128 full")  # required first
    assert text.rstrip().endswith("VERDICT: complete (1/1 required rows profiled; no sweep JSON, sums not checked)")
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "x.txt").write_text("==ERROR== profiling failed\n")
    assert S.main([str(empty)]) == 1
    assert "no kernels found" in capsys.readouterr().out


@pytest.mark.committed_results
def test_raw_page_adds_the_chart_metrics(tmp_path):
    names = ["gpu__time_duration.sum", "smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio",
             "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio",
             "smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio",
             "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active"]
    raw = "\n".join(["==PROF== Disconnected", _csv_line(list(CSV_HEADER[:11]) + names),
                     _csv_line([""] * 11 + ["nsecond", "", "", "", "%"]),
                     _csv_line(["0", "1", "python3.12", "host", "_attn_bwd_hopper", "1", "7", "(384, 1, 1)",
                                "(16, 128, 1)", "0", "9.0", "894,080", "5.8", "5.7", "1.2", "47.5"])]) + "\n"
    (k,) = S.parse_raw_csv(raw)
    assert k.grid == (16, 128, 1) and k.num(*S.DURATION) == pytest.approx(894.08)
    (tmp_path / "bwd_bf16_d128_2k_causal.raw.csv").write_text(raw)
    (tmp_path / "bwd_bf16_d128_2k_causal.txt").write_text((S12 / "bwd_d128_2k_causal.txt").read_text())
    row = S.load_rows([str(tmp_path)])["bwd_bf16_d128_2k_causal"]
    assert row.files == ["bwd_bf16_d128_2k_causal.txt"]
    (k,) = row.calls["ours"]
    assert k.num(*S.L2_HIT) == pytest.approx(85.28)  # from the details page
    assert S.stall_cell(k) == "17.1: barrier 34%, long_sb 33%, short_sb 7%"  # from the raw page
    assert S.tensor_pct(k) == (pytest.approx(47.5), "metric")


def test_labels_without_their_section_titles():
    k = S.Kernel("k")
    S.put(k, "SpeedOfLight", "Memory Throughput", "%", "61.92")
    S.put(k, "SpeedOfLight", "Duration", "msecond", "1.5")
    S.put(k, "MemoryWorkloadAnalysis", "Memory Throughput", "byte/second", "758,660,000,000")
    assert k.num(*S.DURATION) == 1500.0
    assert S.dram_bytes(k) == pytest.approx(758.66e9 * 1.5e-3)  # the byte/s one, not the %


@pytest.mark.committed_results
def test_launch_table_of_the_text_page():
    (k,) = S.parse_file(S12 / "bwd_d128_2k_causal.txt")
    cells = S.launch_cells("ours", k)
    assert cells[:6] == ["ours", "_attn_bwd_hopper", "384", "2048", "15.52", "168"]
    assert cells[7] == "1, 1"  # blocks per SM that registers and shared memory allow
    assert float(cells[6]) == pytest.approx((198.08e3 + 0) / 1024, abs=0.05)  # Kbyte/block + byte/block
    text = S.render_row(S.load_rows([str(S12)])["bwd_d128_2k_causal"], None)
    assert "| ours | _attn_bwd_hopper | 384 | 2048 | 15.52 | 168 |" in text


def test_flex_as_the_peer_at_n512(tmp_path):
    """A row of N = 512 (stem "..._512_full") with Flex's call as the peer: gap, check
    and the launch table's shared memory from a base-unit CSV (byte/block)."""
    stem = "bwd_bf16_d128_512_full"
    page = _csv_page([(1, [("_bwd_preprocess", 36.0), ("_bwd_dkdv", 370.0), ("_bwd_dq", 250.0)]),
                      (2, [("triton_per_fused_flex_attention_backward_0", 37.0),
                           ("triton_tem_fused_flex_attention_backward_1", 530.0)])])
    page += _csv_row(6, "triton_tem_fused_flex_attention_backward_1", 132, "Launch Statistics",
                     "Dynamic Shared Memory Per Block", "byte/block", "147,456") + "\n"
    (tmp_path / f"{stem}.csv").write_text(page)
    (tmp_path / f"{stem}.windows.json").write_text(json.dumps(
        {"windows": [{"window": 1, "provider": "ours"}, {"window": 2, "provider": "flex"}], "errors": {}}))
    assert S.config_from_stem(stem)["seqlen_q"] == 512 and S.config_from_stem("bwd_d128_2k_full")["seqlen_q"] == 2048
    rows = S.load_rows([str(tmp_path)])
    row = rows[stem]
    assert row.config["seqlen_q"] == 512 and set(row.calls) == {"ours", "flex"}
    flex_main = row.calls["flex"][1]
    assert S.launch_cells("Flex", flex_main)[6] == "144.0"
    text = S.render_row(row, None, "flex")
    assert "gap ours - Flex: +89.0 us (+16%) = main kernels -160.0 us" in text
    bench = [{"provider": p, "mode": "bwd", "status": "ok", "ms": ms, "dtype": "bf16", "head_dim": 128,
              "causal": False, "seqlen_q": 512, "heads_q": 16, "heads_kv": 16}
             for p, ms in (("flashattn_triton", 0.665), ("flex", 0.572))]
    lines = S.check(rows, [stem], bench, "flex")
    assert "ncu sum / sweep ours 0.99, Flex 0.99: adds up" in lines[0], lines
    assert S.check(rows, [stem], bench)[0] == f"{stem}: NOT PROFILED (no kernels for cudnn)"


def test_variant_row_against_its_peer(tmp_path):
    """A row of ncu_cases.py --variant (benchmarks/gpu_ncu_variants.sh): its windows JSON
    names the providers ours and peer and carries the row, which titles it; the gap is
    taken against the peer; with no sweep the check says profiled, sums not checked."""
    stem = "bwd_variant_dropout_4k"
    (tmp_path / f"{stem}.csv").write_text(_csv_page([(1, [("_bwd_preprocess", 21.0), ("_attn_bwd_hopper", 1147.0)]),
                                                      (2, [("compute_dot_do_o", 34.0), ("sm90_flash_bprop", 866.0)])]))
    row = dict(variant="dropout", batch=2, seqlen_q=4096, seqlen_k=4096, heads_q=16, heads_kv=4, head_dim=128,
               head_dim_v=128, causal=True, dtype="bf16", peer="sdpa (default backend)", mode="bwd")
    (tmp_path / f"{stem}.windows.json").write_text(json.dumps(
        {"row": row, "windows": [{"window": 1, "provider": "ours"}, {"window": 2, "provider": "peer"}],
         "errors": {}}))
    rows = S.load_rows([str(tmp_path)])
    text = S.render_row(rows[stem], None, "peer")
    assert text.startswith("### bwd variant dropout d=128 N=4096 (B=2, Hq=16 / Hkv=4, peer sdpa (default backend))")
    assert "gap ours - peer: +268.0 us (+30%) = main kernels +281.0 us" in text, text
    assert S.check(rows, [stem], None, "peer")[0].startswith(f"{stem}: profiled (ours 2 kernels")
