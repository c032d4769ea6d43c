"""flash_attn_varlen_func with a paged K / V (block_table), as a spec.

With ``block_table`` a tensor, k (num_blocks, page_size, Hkv, d) and v
(num_blocks, page_size, Hkv, dv) are pools of pages (flash-attn 2's
semantics): sequence b has n_k_b = cu_seqlens_k[b+1] - cu_seqlens_k[b] keys,
and its logical key j lies at k[block_table[b, j // page_size], j % page_size]
(cu_seqlens_k's differences count the keys, its offsets index nothing).  q,
cu_seqlens_q, the output (total_q, Hq, dv) and the LSE (Hq, total_q) are
packed as in the plain call, and every option (causal and the window aligned
bottom-right per sequence, softcap, ALiBi, sinks, attention_chunk, GQA,
dv != d, sequences without queries or keys) means what it means there.
page_size is a positive multiple of 16.  Forward only: no gradients, no
dropout, no attention probabilities.

Every case builds the logical packed K / V first, stores it in shuffled pages
(to_pages: the sequences' pages interleaved in the pool, everything that
holds no key NaN, so a read of it shows), then checks the paged call
* against the plain call on the logical K / V: bit for bit in Triton's
  interpreter (the same kernel and the same tiles); on a GPU within twice the
  tolerance rule (the plain call may take another tier or config);
* against the float64 reference (testing.varlen_attention_ref) with the
  usual rule: at most 2x the error of PyTorch in the input dtype.
Page sizes 16, 32, 48 (not a power of two) and 64: smaller than, equal to and
larger than the kernels' key tiles on one target or another.  The library
fills every output buffer with NaN in the tests (conftest.poison_outputs), so
a row the kernels skip shows too.
"""

import math
import re

import pytest
import torch

import flashattn_triton as fat
from flashattn_triton.testing import (DTYPES, alibi_slopes, assert_close, max_abs_err, rand,
                                      random_cu_seqlens, tolerance, varlen_attention_ref)
from _utils import ON_GPU, cpu_covering


# ---------------------------------------------------------------------------
# Helpers: the paged layout and the checks
# ---------------------------------------------------------------------------

TAILS = ("zero", "nan-pages", "other-sequences")


def to_pages(k, v, cu_seqlens_k, page, *, tail="zero", extra_cols=0, spare=3):
    """The packed keys and values (total_k, Hkv, d / dv) stored in pools of
    ``page``-token pages, flash-attn's paged layout.  Returns (k_pages
    (num_blocks, page, Hkv, d), v_pages (num_blocks, page, Hkv, dv),
    block_table (B, max_blocks_per_seq) int32 on k's device), logical key j
    of sequence b at k_pages[block_table[b, j // page], j % page].

    The sequences' pages are a random permutation of the pool (pages of
    different sequences interleaved) and ``spare`` more pages belong to no
    sequence; everything that holds no key (the spare pages, the rest of each
    sequence's last page) is NaN.  The table has ``extra_cols`` more columns
    than the longest sequence needs (at least one column); its entries past a
    sequence's pages are ``tail``: "zero" (page 0), "nan-pages" (spare pages,
    all NaN) or "other-sequences" (pages of the other sequences)."""
    device = k.device
    lens = (cu_seqlens_k[1:] - cu_seqlens_k[:-1]).tolist()
    starts = cu_seqlens_k[:-1].tolist()
    need = [math.ceil(n / page) for n in lens]
    width = max(need + [1]) + extra_cols
    n_used = sum(need)
    n_blocks = n_used + spare
    perm = torch.randperm(n_blocks).tolist()
    used, spares = perm[:n_used], perm[n_used:]
    k_pages = torch.full((n_blocks, page) + tuple(k.shape[1:]), float("nan"), dtype=k.dtype, device=device)
    v_pages = torch.full((n_blocks, page) + tuple(v.shape[1:]), float("nan"), dtype=v.dtype, device=device)
    table = torch.zeros(len(lens), width, dtype=torch.int32)
    first = 0
    for b, (n, s) in enumerate(zip(lens, starts)):
        mine = used[first:first + need[b]]
        first += need[b]
        table[b, :len(mine)] = torch.tensor(mine, dtype=torch.int32)
        n_tail = width - len(mine)
        if tail != "zero" and n_tail:
            pool = spares if tail == "nan-pages" else [p for p in used if p not in mine]
            pool = pool or spares  # (a lone sequence: no other pages)
            table[b, len(mine):] = torch.tensor(pool, dtype=torch.int32)[torch.randint(len(pool), (n_tail,))]
        if n:
            j = torch.arange(n)
            phys = torch.tensor(mine)[j // page].to(device)
            k_pages[phys, (j % page).to(device)] = k[s:s + n]
            v_pages[phys, (j % page).to(device)] = v[s:s + n]
    return k_pages, v_pages, table.to(device)


def from_pages(pages, block_table, cu_seqlens_k):
    """The packed rows (total_k, ...) read back from a pool, one logical key
    at a time: key j of sequence b from pages[block_table[b, j // page], j % page]."""
    page = pages.shape[1]
    rows = []
    for b, n in enumerate((cu_seqlens_k[1:] - cu_seqlens_k[:-1]).tolist()):
        for j in range(n):
            rows.append(pages[int(block_table[b, j // page]), j % page])
    return torch.stack(rows) if rows else pages.new_zeros((0,) + tuple(pages.shape[2:]))


def assert_same(name, got, want, gpu_atol, labels=("paged", "contiguous")):
    """The paged call's ``got`` against ``want``, by default the plain call's
    on the same logical K / V: equal bit for bit in the interpreter; on a GPU
    within ``gpu_atol`` (the plain call may run another tier or config)."""
    a, b = labels
    assert got.shape == want.shape and got.dtype == want.dtype, \
        f"{name}: {a} {tuple(got.shape)} {got.dtype}, {b} {tuple(want.shape)} {want.dtype}"
    if ON_GPU:
        assert_close(f"{name} ({a} vs {b})", got, want.double(), atol=gpu_atol)
        return
    if torch.equal(got, want):
        return
    differ = got != want  # (NaN differs from everything)
    first = tuple(differ.nonzero()[0].tolist())
    raise AssertionError(
        f"{name}: the {a} call differs from the {b} call at {int(differ.sum())} of {got.numel()} elements, "
        f"first at {first} ({a} {got[first].item():.6g}, {b} {want[first].item():.6g}); "
        f"max |diff| {max_abs_err(got, want):.3g}")


def check_paged(lens_q, lens_k, h_q, h_kv, d, dtype, device, page, *, causal=False, d_v=None, tail="zero",
                extra_cols=0, **options):
    """The paged call (K / V in shuffled ``page``-token pages) against the
    plain call on the logical K / V and against the float64 reference (module
    doc); ``options``: keyword arguments of both calls.  Returns (out, lse)."""
    cu_q, cu_k = random_cu_seqlens(lens_q, device), random_cu_seqlens(lens_k, device)
    q = rand((sum(lens_q), h_q, d), dtype, device)
    k = rand((sum(lens_k), h_kv, d), dtype, device)
    v = rand((sum(lens_k), h_kv, d_v or d), dtype, device)
    k_pages, v_pages, table = to_pages(k, v, cu_k, page, tail=tail, extra_cols=extra_cols)
    max_q, max_k = max(max(lens_q), 1), max(max(lens_k), 1)
    kw = dict(causal=causal, return_lse=True, **options)
    out, lse = fat.flash_attn_varlen_func(q, k_pages, v_pages, cu_q, cu_k, max_q, max_k, block_table=table, **kw)
    want_out, want_lse = fat.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max_q, max_k, **kw)

    ref = varlen_attention_ref(q, k, v, cu_q, cu_k, causal, **options)
    base = varlen_attention_ref(q, k, v, cu_q, cu_k, causal, dtype=dtype, **options)
    tol_out = tolerance(max_abs_err(base[0], ref[0]), ref[0], dtype, 2.0)
    tol_lse = tolerance(max_abs_err(base[1], ref[1]), ref[1], torch.float32, 2.0)
    assert_same("out", out, want_out, 2 * tol_out)
    assert_same("lse", lse, want_lse, 2 * tol_lse)
    assert_close("out", out, ref[0], base[0], 2.0, dtype)
    assert_close("lse", lse, ref[1], base[1], 2.0, torch.float32)
    return out, lse


def _small_case(device, page=16):
    """q (39, 2, 16) of sequences [9, 30] and their keys in ``page``-token
    pages: the arguments of a paged call, by name."""
    lens = [9, 30]
    cu = random_cu_seqlens(lens, device)
    q = rand((39, 2, 16), torch.float16, device)
    k_pages, v_pages, table = to_pages(rand((39, 1, 16), torch.float16, device),
                                       rand((39, 1, 16), torch.float16, device), cu, page)
    return dict(q=q, k=k_pages, v=v_pages, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=30, max_seqlen_k=30,
                block_table=table)


def test_pages_hold_the_logical_keys(device):
    """The helper's layout (a check of the test itself): each logical key read
    back through the table, every other slot of the pool NaN."""
    lens = [37, 0, 16, 5]
    cu = random_cu_seqlens(lens, device)
    k, v = rand((sum(lens), 2, 8), torch.float16, device), rand((sum(lens), 2, 4), torch.float16, device)
    for tail in TAILS:
        k_pages, v_pages, table = to_pages(k, v, cu, 16, tail=tail, extra_cols=2)
        assert table.dtype == torch.int32 and table.shape == (4, 5) and table.device == k.device, tail
        assert int(table.min()) >= 0 and int(table.max()) < k_pages.shape[0], f"{tail}: table entry out of the pool"
        assert torch.equal(from_pages(k_pages, table, cu), k) and torch.equal(from_pages(v_pages, table, cu), v), tail
        filled = ~torch.isnan(k_pages).all(-1).all(-1)  # (num_blocks, page) slots that hold a key
        assert int(filled.sum()) == sum(lens), f"{tail}: {int(filled.sum())} slots hold keys, expected {sum(lens)}"


# ---------------------------------------------------------------------------
# Correctness: page sizes x dtypes x causal x head layouts
# ---------------------------------------------------------------------------

# (query lengths, key lengths): Nq < Nk, a sequence with queries and no keys,
# one with keys and no queries, Nq << Nk, Nq > Nk (causal: rows that see no key).
LENS_Q = [37, 40, 0, 5, 64]
LENS_K = [70, 0, 20, 90, 17]

PAGES = [16, 32, 48, 64]
DTYPE_NAMES = list(DTYPES)  # fp16, bf16, fp32
HEADS = {"mha": (2, 2), "gqa": (4, 2), "mqa": (3, 1)}


def _keep_on_cpu(page, dtype_name, causal, heads):
    """A pairwise covering of the grid in 12 cases: the head layout and causal
    flag follow (page index + dtype index) mod 3 and mod 2."""
    s = PAGES.index(page) + DTYPE_NAMES.index(dtype_name)
    return heads == list(HEADS)[s % 3] and causal == bool(s % 2)


# The whole grid on the GPU; on the CPU the 12 cases that meet every pair of
# values of two dimensions (_utils.cpu_covering checks it).
PAGED_CASES = cpu_covering(
    [pytest.param(page, dtype_name, causal, heads,
                  id=f"page{page}-{dtype_name}-{'causal' if causal else 'full'}-{heads}")
     for page in PAGES for dtype_name in DTYPE_NAMES for causal in (False, True) for heads in HEADS],
    _keep_on_cpu,
    dims={"page": lambda p, *_: p, "dtype": lambda _, t, *__: t, "causal": lambda _, __, c, ___: c,
          "heads": lambda *v: v[3]})


@pytest.mark.parametrize("page,dtype_name,causal,heads", PAGED_CASES)
def test_paged_matches_contiguous_and_reference(device, page, dtype_name, causal, heads):
    """Shuffled pages of every size, every dtype, causal or not, MHA / GQA /
    MQA, head dim 40: the plain call's result (bit for bit on CPU) and the
    reference's."""
    h_q, h_kv = HEADS[heads]
    check_paged(LENS_Q, LENS_K, h_q, h_kv, 40, DTYPES[dtype_name], device, page, causal=causal)


@pytest.mark.parametrize("d,d_v,page", [(40, 16, 16), (16, 32, 48)], ids=["d40-dv16-page16", "d16-dv32-page48"])
def test_paged_value_head_dim_differs(device, d, d_v, page):
    """dv != d: out is (total_q, Hq, dv), the default scale 1 / sqrt(d)."""
    out, _ = check_paged([23, 40], [31, 57], 2, 1, d, torch.float16, device, page, causal=True, d_v=d_v)
    assert out.shape == (63, 2, d_v)


# ---------------------------------------------------------------------------
# Options
# ---------------------------------------------------------------------------

# Each option as a function of (device, batch, Hq), the causal flag, the page
# size and the dtype.
OPTION_CASES = [
    pytest.param(lambda dev, b, h: dict(window_size=(8, 0)), True, 16, "fp16", id="window-8-0-causal"),
    pytest.param(lambda dev, b, h: dict(window_size=(5, 3)), False, 48, "bf16", id="window-5-3"),
    pytest.param(lambda dev, b, h: dict(softcap=5.0), True, 16, "fp16", id="softcap"),
    pytest.param(lambda dev, b, h: dict(alibi_slopes=alibi_slopes(h, dev)), True, 32, "fp16",
                 id="alibi-per-head"),
    pytest.param(lambda dev, b, h: dict(alibi_slopes=torch.rand(b, h, device=dev)), False, 16, "bf16",
                 id="alibi-per-sequence"),
    pytest.param(lambda dev, b, h: dict(sinks=torch.randn(h, device=dev)), True, 48, "fp16", id="sinks"),
    pytest.param(lambda dev, b, h: dict(attention_chunk=16), True, 16, "fp16", id="chunk16"),
    pytest.param(lambda dev, b, h: dict(attention_chunk=16), False, 64, "bf16", id="chunk16-full"),
    pytest.param(lambda dev, b, h: dict(softmax_scale=0.3), False, 64, "fp32", id="softmax-scale"),
]


@pytest.mark.parametrize("make_options,causal,page,dtype_name", OPTION_CASES)
def test_paged_options(device, make_options, causal, page, dtype_name):
    """Each option applies per sequence as in the plain call: its result (bit
    for bit on CPU) and the reference's."""
    lens_q, lens_k = [30, 0, 9, 40], [50, 20, 0, 33]
    options = make_options(device, len(lens_q), 2)
    check_paged(lens_q, lens_k, 2, 1, 32, DTYPES[dtype_name], device, page, causal=causal, **options)


# ---------------------------------------------------------------------------
# What the kernels must not read, and what they must write
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("tail", TAILS)
@pytest.mark.parametrize("page", [16, 32], ids=lambda p: f"page{p}")
def test_unused_pages_and_table_tail_are_not_read(device, tail, page):
    """Spare pages and the slots past each sequence's last key are NaN, and
    the table has two columns more than needed whose entries are page 0, NaN
    pages or other sequences' pages: none of it reaches the output (no NaN,
    the plain call's result)."""
    out, lse = check_paged([20, 33, 7], [33, 16, 1], 2, 2, 16, torch.float16, device, page, causal=True,
                           tail=tail, extra_cols=2)
    assert not torch.isnan(out).any() and not torch.isnan(lse).any()


@pytest.mark.parametrize("with_sinks", [False, True], ids=["plain", "sinks"])
def test_rows_without_keys_are_written(device, with_sinks):
    """Rows that see no key (a sequence with no keys; causal rows before the
    first key when Nq > Nk) output exactly 0 with LSE -inf, or the sink's
    logit with sinks; the output buffers start as NaN (conftest), so a row
    left unwritten would show."""
    from flashattn_triton.kernels import fastlaunch
    assert fastlaunch.POISON, "the tests' NaN poisoning of output buffers is off"
    lens_q, lens_k = [20, 30, 0, 7], [0, 10, 16, 40]
    sinks = torch.randn(2, device=device) if with_sinks else None
    out, lse = check_paged(lens_q, lens_k, 2, 1, 16, torch.bfloat16, device, 16, causal=True, sinks=sinks)
    blind = torch.zeros(sum(lens_q), dtype=torch.bool, device=device)
    blind[:20] = True  # sequence 0: no keys
    blind[20:40] = True  # sequence 1: rows 0..19 lie before its 10 keys
    assert torch.equal(out[blind], torch.zeros_like(out[blind])), "rows that see no key must output exactly 0"
    want = (sinks[:, None] if with_sinks else torch.full((2, 1), float("-inf"), device=device)).expand(2, 40)
    assert_close("lse of rows that see no key", lse[:, blind], want.double(), atol=1e-6)


def test_table_without_columns(device):
    """A batch in which no sequence has a key may pass a (B, 0) block table:
    every row outputs 0 with LSE -inf (the kernels read page numbers a tile
    ahead of their loops, never past a table's end)."""
    cu_q = random_cu_seqlens([5, 9], device)
    cu_k = random_cu_seqlens([0, 0], device)
    q = rand((14, 2, 16), torch.float16, device)
    pool = rand((3, 16, 1, 16), torch.float16, device)
    table = torch.zeros(2, 0, dtype=torch.int32, device=device)
    out, lse = fat.flash_attn_varlen_func(q, pool, pool, cu_q, cu_k, 9, 1, block_table=table, return_lse=True)
    assert torch.equal(out, torch.zeros_like(out)), "rows without keys must output exactly 0"
    assert torch.isneginf(lse).all(), "rows without keys must have LSE -inf"


def test_block_table_positional(device):
    """flash-attn's positional order, block_table 16th: the keyword call's result."""
    a = _small_case(device)
    want = fat.flash_attn_varlen_func(**a, causal=True)
    got = fat.flash_attn_varlen_func(a["q"], a["k"], a["v"], a["cu_seqlens_q"], a["cu_seqlens_k"], 30, 30, 0.0, None,
                                     True, (-1, -1), 0.0, None, False, False, a["block_table"])
    assert_same("out", got, want, 0.0, labels=("positional", "keyword"))


def test_pools_as_views_of_one_tensor(device):
    """k and v pools as the two halves of one (num_blocks, page, 2, Hkv, d)
    tensor (strided views, not contiguous): the contiguous pools' result."""
    lens_q, lens_k = [12, 30], [40, 30]
    cu_q, cu_k = random_cu_seqlens(lens_q, device), random_cu_seqlens(lens_k, device)
    q = rand((42, 2, 16), torch.float16, device)
    k_pages, v_pages, table = to_pages(rand((70, 1, 16), torch.float16, device),
                                       rand((70, 1, 16), torch.float16, device), cu_k, 32)
    kv = torch.stack([k_pages, v_pages], dim=2)
    assert not kv[:, :, 0].is_contiguous()
    want = fat.flash_attn_varlen_func(q, k_pages, v_pages, cu_q, cu_k, 30, 40, causal=True, block_table=table)
    got = fat.flash_attn_varlen_func(q, kv[:, :, 0], kv[:, :, 1], cu_q, cu_k, 30, 40, causal=True,
                                     block_table=table)
    assert_same("out", got, want, 0.0, labels=("views", "contiguous pools"))


# ---------------------------------------------------------------------------
# Forward only, and validation
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("which", ["q", "k", "v"])
def test_forward_only(device, which):
    """No backward: an input that requires grad, with grad enabled, raises
    NotImplementedError saying so; under torch.no_grad() the same call runs
    and gives the plain call's result."""
    args = _small_case(device)
    args[which] = args[which].clone().requires_grad_()
    with pytest.raises(NotImplementedError, match=rf"has no backward: {which} requires grad"):
        fat.flash_attn_varlen_func(**args, causal=True)
    with torch.no_grad():
        out = fat.flash_attn_varlen_func(**args, causal=True)
        k, v = (from_pages(args[n], args["block_table"], args["cu_seqlens_k"]) for n in ("k", "v"))
        want = fat.flash_attn_varlen_func(args["q"], k, v, args["cu_seqlens_q"], args["cu_seqlens_k"], 30, 30,
                                          causal=True)
    assert not out.requires_grad
    assert_same("out under no_grad", out, want, 1e-2)  # (GPU: fp16 rounding of unit-scale values)


def test_forward_only_learnable_sinks(device):
    """Learnable sinks (gpt-oss) that require grad are refused as q, k, v are:
    the op has no backward, so their gradient would be missing."""
    args = _small_case(device)
    sinks = torch.zeros(2, device=device, requires_grad=True)
    with pytest.raises(NotImplementedError, match=r"has no backward: sinks requires grad"):
        fat.flash_attn_varlen_func(**args, causal=True, sinks=sinks)
    with torch.no_grad():
        assert fat.flash_attn_varlen_func(**args, causal=True, sinks=sinks).shape == args["q"].shape


@pytest.mark.parametrize("kwargs,match", [
    pytest.param(dict(dropout_p=0.1), r"dropout", id="dropout"),
    pytest.param(dict(return_attn_probs=True), r"return_attn_probs", id="return_attn_probs"),
])
def test_not_implemented_with_block_table(device, kwargs, match):
    with pytest.raises(NotImplementedError, match=match):
        fat.flash_attn_varlen_func(**_small_case(device), **kwargs)


def _pool(args, page):
    """k / v pools of the same number of pages of another page size."""
    n = args["k"].shape[0]
    return (torch.zeros(n, page, *args["k"].shape[2:], dtype=torch.float16, device=args["k"].device),
            torch.zeros(n, page, *args["v"].shape[2:], dtype=torch.float16, device=args["k"].device))


# Each case: a change of the small case's arguments, the exception, and a
# pattern its message must match (naming the argument; {shape}: the bad
# block_table's shape as a tuple).
NAMES_K_AND_V = r"(\bk\b.*\bv\b|\bv\b.*\bk\b)"
VALIDATION_CASES = [
    pytest.param(lambda a: dict(block_table=a["block_table"].long()), TypeError, r"block_table", id="table-int64"),
    pytest.param(lambda a: dict(block_table=a["block_table"].float()), TypeError, r"block_table",
                 id="table-float"),
    pytest.param(lambda a: dict(block_table=a["block_table"].tolist()), TypeError, r"block_table", id="table-list"),
    pytest.param(lambda a: dict(block_table=a["block_table"][0]), ValueError, r"block_table.*{shape}",
                 id="table-1d"),
    pytest.param(lambda a: dict(block_table=a["block_table"][None]), ValueError, r"block_table.*{shape}",
                 id="table-3d"),
    pytest.param(lambda a: dict(block_table=torch.cat([a["block_table"], a["block_table"][:1]])), ValueError,
                 r"block_table.*{shape}", id="table-rows-ne-batch"),
    pytest.param(lambda a: dict(k=a["k"].flatten(0, 1)), ValueError, r"\bk\b", id="k-3d"),
    pytest.param(lambda a: dict(v=a["v"].flatten(0, 1)), ValueError, r"\bv\b", id="v-3d"),
    pytest.param(lambda a: dict(v=a["v"][:-1]), ValueError, NAMES_K_AND_V, id="num-blocks-differ"),
    pytest.param(lambda a: dict(v=_pool(a, 32)[1]), ValueError, NAMES_K_AND_V, id="page-sizes-differ"),
    pytest.param(lambda a: dict(zip("kv", _pool(a, 24))), ValueError, r"(?i)(page|block_table).*16",
                 id="page-24"),
    pytest.param(lambda a: dict(zip("kv", _pool(a, 8))), ValueError, r"(?i)(page|block_table).*16", id="page-8"),
    pytest.param(lambda a: dict(zip("kv", _pool(a, 0))), ValueError, r"(?i)(page|block_table).*16", id="page-0"),
]


@pytest.mark.parametrize("change,exc,match", VALIDATION_CASES)
def test_validation(device, change, exc, match):
    """Wrong arguments of a paged call raise before any launch, naming the
    argument (and, for block_table's shape, the shape seen)."""
    args = _small_case(device)
    args.update(change(args))
    table = args["block_table"]
    shape = re.escape(str(tuple(table.shape))) if isinstance(table, torch.Tensor) else ""
    with pytest.raises(exc, match=match.format(shape=shape)):
        fat.flash_attn_varlen_func(**args, causal=True)


# ---------------------------------------------------------------------------
# torch.compile and the custom op
# ---------------------------------------------------------------------------

def _paged_step(q, k, v, cu_q, cu_k, table, sinks):
    out, lse = fat.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 40, 50, causal=True, block_table=table,
                                          return_lse=True, sinks=sinks)
    return out * 2, lse


def _paged_inputs(device, lens_q, lens_k):
    """The arguments of _paged_step: sequences of lens_q queries and lens_k keys (sums 50 and 60), 16-token pages."""
    cu_q, cu_k = random_cu_seqlens(lens_q, device), random_cu_seqlens(lens_k, device)
    q = rand((sum(lens_q), 2, 16), torch.float16, device)
    k_pages, v_pages, table = to_pages(rand((sum(lens_k), 1, 16), torch.float16, device),
                                       rand((sum(lens_k), 1, 16), torch.float16, device), cu_k, 16)
    return q, k_pages, v_pages, cu_q, cu_k, table, torch.randn(2, device=device)


def test_compile_fullgraph(device):
    """torch.compile(fullgraph=True) of a function calling the paged form
    traces in one graph and gives eager's result; a second call with other
    lengths and another table (same shapes) is not given the first's."""
    from test_ops import _compile_backend
    torch._dynamo.reset()
    compiled = torch.compile(_paged_step, fullgraph=True, backend=_compile_backend())
    for lens_q, lens_k in (([10, 40], [10, 50]), ([40, 10], [50, 10])):
        inputs = _paged_inputs(device, lens_q, lens_k)
        want = _paged_step(*inputs)
        got = compiled(*inputs)
        for name, g, w in zip(("out", "lse"), got, want):
            assert_same(f"lengths {lens_q} / {lens_k}: {name}", g, w, 1e-6 * max(1.0, w.abs().max().item()),
                        labels=("compiled", "eager"))


def test_custom_op_registered(device):
    """The paged call is the custom op flashattn_triton::varlen_paged_fwd
    (one node of a traced graph), whose schema and fake implementation pass
    torch.library.opcheck on the arguments the public function gives it."""
    from torch.fx.experimental.proxy_tensor import make_fx
    assert hasattr(torch.ops.flashattn_triton, "varlen_paged_fwd"), "no op flashattn_triton::varlen_paged_fwd"
    op = torch.ops.flashattn_triton.varlen_paged_fwd.default
    inputs = _paged_inputs(device, [10, 40], [10, 50])
    graph = make_fx(_paged_step, tracing_mode="fake")(*inputs)
    calls = []

    class Record(torch.fx.Interpreter):
        def call_function(self, target, args, kwargs):
            if target is op:
                calls.append((args, kwargs))
            return super().call_function(target, args, kwargs)

    got = Record(graph).run(*inputs)
    assert len(calls) == 1, f"the traced call holds {len(calls)} varlen_paged_fwd nodes:\n{graph.graph}"
    want = _paged_step(*inputs)
    for name, g, w in zip(("out", "lse"), got, want):
        assert_same(name, g, w, 1e-6 * max(1.0, w.abs().max().item()), labels=("traced op", "eager"))
    # (forward only: no input requires grad, so no autograd registration test)
    torch.library.opcheck(op, calls[0][0], calls[0][1],
                          test_utils=("test_schema", "test_faketensor", "test_aot_dispatch_dynamic"))


# ---------------------------------------------------------------------------
# GPU, realistic sizes
# ---------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.bigmem  # the float64 reference's scores of a 3000-key sequence, 8 heads: ~0.6 GiB a copy
@pytest.mark.parametrize("page", [16, 256])
def test_gpu_realistic(device, page):
    """8 sequences of 500-3000 tokens (prefill and chunked prefill: Nq <= Nk),
    Hq=8, Hkv=2, d=128, bf16, causal, shuffled pages: the plain call's result
    within twice the tolerance rule, and the float64 reference's."""
    lens_k = [500, 3000, 1234, 2048, 777, 2999, 1600, 901]
    lens_q = [500, 1000, 1234, 2048, 1, 2999, 64, 901]
    check_paged(lens_q, lens_k, 8, 2, 128, torch.bfloat16, device, page, causal=True)
