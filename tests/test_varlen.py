"""Packed variable-length batches (flash_attn_varlen_func) and sliding windows
against per-sequence float64 references, forward and gradients."""

import pytest
import torch

import flashattn_triton as fat
from flashattn_triton import flash_attn_func, flash_attn_varlen_func
from flashattn_triton.testing import assert_close, flash_attention_ref, rand, random_cu_seqlens
from _utils import check_nan_isolation, check_varlen as _check_varlen, cpu_covering

# (query lengths, key lengths): length 0 and 1, lengths not multiple of any
# tile, Nq != Nk per sequence, a sequence with queries and no keys.
LENGTHS = [
    ([37, 1, 0, 70], [37, 1, 0, 70]),
    ([5, 64, 33], [90, 17, 33]),
    ([40, 12], [0, 50]),
]


LENGTH_IDS = ["mixed-with-empty", "nq-ne-nk", "no-keys"]
DTYPE_IDS = {torch.float16: "fp16", torch.bfloat16: "bf16"}
# The grid lengths x causal x dtype on the GPU; on the CPU the six cases that
# meet each lengths case with both causal flags and both dtypes, and each
# causal flag with both dtypes (_utils.cpu_covering checks it).
VARLEN_CASES = cpu_covering(
    [pytest.param(lens, causal, dtype, id=f"{name}-{'causal' if causal else 'full'}-{DTYPE_IDS[dtype]}")
     for name, lens in zip(LENGTH_IDS, LENGTHS) for causal in (False, True) for dtype in DTYPE_IDS],
    lambda lens, causal, dtype: causal == ((dtype == torch.bfloat16) == (LENGTHS.index(lens) != 1)),
    dims={"lens": lambda lens, *_: LENGTHS.index(lens), "causal": lambda _, causal, __: causal,
          "dtype": lambda *v: v[2]})


@pytest.mark.parametrize("lens,causal,dtype", VARLEN_CASES)
def test_varlen_matches_reference(device, lens, causal, dtype):
    _check_varlen(*lens, 4, 2, 32, causal, dtype, device)


def test_varlen_mqa_fp32_odd_head_dim(device):
    _check_varlen([19, 50], [31, 44], 3, 1, 40, True, torch.float32, device)


def test_varlen_window(device):
    _check_varlen([60, 9], [75, 20], 2, 2, 16, True, torch.float16, device, window=(13, -1))


@pytest.mark.parametrize("d,d_v", [(48, 16), (16, 64)])
def test_varlen_value_head_dim_differs_default_scale(device, d, d_v):
    """headdim_v != headdim with the default softmax_scale: 1 / sqrt(headdim),
    not of headdim_v."""
    _check_varlen([23, 40], [31, 17], 2, 1, d, False, torch.float16, device, d_v=d_v)


def test_varlen_equals_dense_calls(device):
    """Packed results equal one dense call per sequence: bit for bit in the
    interpreter (the same kernels and math); on a GPU the dense call may take
    another tier or config (summation order), so within fp16 rounding."""
    lens = [33, 70]
    cu = random_cu_seqlens(lens, device)
    q, k, v = (rand((sum(lens), 2, 32), torch.float16, device) for _ in range(3))
    out = flash_attn_varlen_func(q, k, v, cu, cu, 70, 70, causal=True)
    for b, (s, e) in enumerate(zip(cu[:-1].tolist(), cu[1:].tolist())):
        dense = flash_attn_func(q[None, s:e], k[None, s:e], v[None, s:e], causal=True)[0]
        assert_close(f"sequence {b}", out[s:e], dense.double(), atol=0.0 if device.type == "cpu" else 1e-3)


def test_nan_in_one_sequence_stays_in_it(device, monkeypatch):
    """The portable kernels read each sequence's own rows only: NaN in every
    row of the middle sequence's q, k, v and dout leaves the other sequences'
    out, LSE and gradients equal to the float64 reference (and free of NaN).
    The switches at 0 keep the portable kernels on a Hopper GPU too (the
    packed Hopper ones: test_hopper_varlen_nan_stays_in_its_sequence)."""
    monkeypatch.setenv("FLASHATTN_TRITON_HOPPER_VARLEN", "0")
    monkeypatch.setenv("FLASHATTN_TRITON_HOPPER_VARLEN_BWD", "0")
    # the first's last key / query tile reaches into the second; d = 128: a head dim the
    # Hopper packed path takes on an sm_90 GPU, were it on
    check_nan_isolation([45, 30, 20], [1], 2, 2, 128, torch.float16, device, causal=True)


def test_varlen_block_table_argument(device):
    """flash-attn's 16 positional arguments, the last its block_table: None
    gives the plain call's result; a tensor asks for page pools (packed K / V
    with a block table are refused, named; test_varlen_paged.py has the
    paged calls)."""
    lens = [9, 30]
    cu = random_cu_seqlens(lens, device)
    q, k, v = (rand((sum(lens), 2, 16), torch.float16, device) for _ in range(3))
    want = flash_attn_varlen_func(q, k, v, cu, cu, 30, 30, causal=True)
    got, lse, probs = flash_attn_varlen_func(q, k, v, cu, cu, 30, 30, 0.0, None, True, (-1, -1), 0.0, None,
                                             False, True, None)
    assert torch.equal(got, want) and lse.shape == (2, sum(lens)) and probs is None
    pages = torch.zeros(2, 2, dtype=torch.int32, device=device)
    with pytest.raises(ValueError, match=r"with block_table, k must be a 4-D page pool .*got shape \(39, 2, 16\)"):
        flash_attn_varlen_func(q, k, v, cu, cu, 30, 30, block_table=pages)


@pytest.mark.parametrize("form", ["qkvpacked", "kvpacked"])
def test_varlen_packed_forms(device, form):
    """flash_attn_varlen_qkvpacked_func / _kvpacked_func (flash-attn's names):
    the same output, LSE and gradients (through the packed tensor, and the
    sinks') as flash_attn_varlen_func on the slices, which the tests above
    check against float64 references."""
    lens_q, lens_k = [37, 0, 20], [37, 5, 44]
    cu_q, cu_k = random_cu_seqlens(lens_q, device), random_cu_seqlens(lens_k, device)
    torch.manual_seed(0)
    sinks = torch.randn(2, device=device)
    if form == "qkvpacked":
        packed0 = rand((sum(lens_q), 3, 2, 24), torch.float16, device)
        q0 = None
    else:
        packed0 = rand((sum(lens_k), 2, 1, 24), torch.float16, device)
        q0 = rand((sum(lens_q), 2, 24), torch.float16, device)
    outs = []
    for packed_call in (True, False):
        packed = packed0.clone().requires_grad_()
        s = sinks.clone().requires_grad_()
        kw = dict(causal=True, return_lse=True, sinks=s)
        if form == "qkvpacked":
            q, k, v = packed.unbind(1)
            out, lse = (fat.flash_attn_varlen_qkvpacked_func(packed, cu_q, 37, **kw) if packed_call else
                        flash_attn_varlen_func(q, k, v, cu_q, cu_q, 37, 37, **kw))
        else:
            k, v = packed.unbind(1)
            out, lse = (fat.flash_attn_varlen_kvpacked_func(q0, packed, cu_q, cu_k, 37, 44, **kw) if packed_call
                        else flash_attn_varlen_func(q0, k, v, cu_q, cu_k, 37, 44, **kw))
        (out.float().square().sum() + lse.sum()).backward()
        outs.append((out, lse, packed.grad, s.grad))
    for name, got, want in zip(("out", "lse", "dpacked", "dsinks"), *outs):
        assert got is not None and want is not None, name
        assert torch.equal(got, want), f"{form} {name}: max |diff| {(got.float() - want.float()).abs().max():.3g}"
    assert outs[0][2].abs().sum() > 0 and outs[0][3].abs().sum() > 0


def test_strided_cu_seqlens(device):
    """cu_seqlens given as strided views (a column of a table) give the same
    results as contiguous ones, forward and backward."""
    lens = [33, 0, 40]
    cu = random_cu_seqlens(lens, device)
    table = torch.stack([cu, cu + 7], 1)  # column 0 is cu, with stride 2
    q, k, v = (rand((sum(lens), 2, 16), torch.float32, device).requires_grad_() for _ in range(3))
    outs, grads = [], []
    for c in (cu, table[:, 0]):
        out = flash_attn_varlen_func(q, k, v, c, c, 40, 40, causal=True)
        outs.append(out)
        grads.append(torch.autograd.grad(out.sum(), (q, k, v)))
    assert torch.equal(outs[0], outs[1]), f"strided cu_seqlens changed the output by {(outs[0] - outs[1]).abs().max()}"
    assert all(torch.equal(a, b) for a, b in zip(*grads))


# ---------------------------------------------------------------------------
# Sliding window (dense)
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("n_q,n_k,window,causal", [
    (96, 96, (16, 0), False),
    (70, 130, (20, 5), False),
    (130, 70, (-1, 9), False),   # right edge only
    (90, 90, (30, -1), False),   # left edge only
    (77, 77, (10, -1), True),    # causal + window
    (50, 110, (0, 0), False),    # one key per row
])
def test_window(device, n_q, n_k, window, causal):
    """Two batch entries on the GPU; on the CPU one (windows with batches:
    test_backward.py's whole query tiles, test_variants.py's everything at
    once; with packed sequences: test_varlen_window)."""
    from test_attention import check_against_reference
    b = 2 if device.type == "cuda" else 1
    q, k, v = (rand((b, n, h, 32), torch.bfloat16, device) for n, h in ((n_q, 4), (n_k, 2), (n_k, 2)))
    check_against_reference(q, k, v, causal, window_size=window)


@pytest.mark.parametrize("d,d_v", [(48, 32), (32, 64), (24, 40)])
def test_value_head_dim_differs(device, d, d_v):
    """Two batch entries on the GPU, one on the CPU (d_v != d with batches:
    test_split_qk_forward, test_variants.py's everything at once)."""
    from test_attention import check_against_reference
    b = 2 if device.type == "cuda" else 1
    q = rand((b, 45, 4, d), torch.float16, device)
    k = rand((b, 60, 2, d), torch.float16, device)
    v = rand((b, 60, 2, d_v), torch.float16, device)
    check_against_reference(q, k, v, causal=True)
