"""Call plans (api.py, ops.FwdPlan): a repeated call with the signature of an
earlier valid call skips validation and dispatch.  It must give what the
full path gives, never reuse a plan for a call that differs in anything the
checks or the dispatch read, and bad input must raise exactly the errors it
raises without plans, also right after a good call of the same shapes.
Also: deterministic=True keeps the backward off the fused (atomic) dQ form."""

import math

import pytest
import torch

import flashattn_triton as fat
from flashattn_triton import _dispatch, api, ops
from flashattn_triton.testing import make_qkv, random_cu_seqlens

from _utils import call_spy, fake_launch, hopper_module


@pytest.fixture(autouse=True)
def plans_on(monkeypatch):
    monkeypatch.setattr(ops, "PLANS_ENABLED", True)
    api.clear_plans()
    yield
    api.clear_plans()


@pytest.fixture
def checks(monkeypatch):
    """Counts the calls of the first check of the full path."""
    return call_spy(monkeypatch, api, "check_qkv")


def _qkv(device, dtype=torch.float16, b=1, n=8, h=2, h_kv=2, d=16, requires_grad=False):
    return make_qkv(b, n, n, h, h_kv, d, dtype, device, requires_grad=requires_grad)


def _unplanned(monkeypatch, fn):
    """fn() with the plans off (the full path)."""
    monkeypatch.setattr(ops, "PLANS_ENABLED", False)
    try:
        return fn()
    finally:
        monkeypatch.setattr(ops, "PLANS_ENABLED", True)


def _equal(a, b):
    if isinstance(a, tuple):
        assert isinstance(b, tuple) and len(a) == len(b)
        for x, y in zip(a, b):
            _equal(x, y)
    elif a is None:
        assert b is None
    else:
        assert a.dtype == b.dtype and a.shape == b.shape and a.stride() == b.stride()
        assert torch.equal(a, b)


def test_repeat_call_skips_validation(device, checks, monkeypatch):
    q, k, v = _qkv(device)
    first = fat.flash_attn_func(q, k, v, causal=True)
    assert len(checks) == 1 and len(api._PLANS) == 1
    again = fat.flash_attn_func(q, k, v, causal=True)
    assert len(checks) == 1, "a repeated signature must take its plan"
    q2, k2, v2 = (torch.randn_like(t) for t in (q, k, v))  # other tensors, same signature
    other = fat.flash_attn_func(q2, k2, v2, causal=True)
    assert len(checks) == 1
    assert len(api._PLANS) == 1
    _equal(first, again)
    _equal(first, _unplanned(monkeypatch, lambda: fat.flash_attn_func(q, k, v, causal=True)))
    _equal(other, _unplanned(monkeypatch, lambda: fat.flash_attn_func(q2, k2, v2, causal=True)))


def _contiguous_other_strides(t):
    """t's values and shape in a (b, h, n, d) memory order: other strides."""
    return t.transpose(1, 2).contiguous().transpose(1, 2)


def _misaligned(t):
    """t's values at an address 2 bytes past a 16-byte boundary."""
    buf = torch.empty(t.numel() + 1, dtype=t.dtype, device=t.device)[1:]
    return buf.view(t.shape).copy_(t)


SECOND_CALLS = {
    "strides": lambda q, k, v: ((_contiguous_other_strides(q), k, v), {}),
    "misaligned": lambda q, k, v: ((q, _misaligned(k), v), {}),
    "bfloat16": lambda q, k, v: ((q.bfloat16(), k.bfloat16(), v.bfloat16()), {}),
    "float32": lambda q, k, v: ((q.float(), k.float(), v.float()), {}),
    "requires_grad": lambda q, k, v: ((q.detach().requires_grad_(), k, v), {}),
    "not causal": lambda q, k, v: ((q, k, v), dict(causal=False)),
    "window": lambda q, k, v: ((q, k, v), dict(window_size=(2, 0))),
    "scale": lambda q, k, v: ((q, k, v), dict(softmax_scale=0.3)),
    "dropout": lambda q, k, v: ((q, k, v), dict(dropout_p=0.2)),
    "int scale": lambda q, k, v: ((q, k, v), dict(softmax_scale=1)),
    "softcap": lambda q, k, v: ((q, k, v), dict(softcap=5.0)),
    "return_lse": lambda q, k, v: ((q, k, v), dict(return_lse=True)),
    "return_attn_probs": lambda q, k, v: ((q, k, v), dict(return_attn_probs=True)),
    "deterministic": lambda q, k, v: ((q, k, v), dict(deterministic=True)),
    "GQA": lambda q, k, v: ((q, k[:, :, :1], v[:, :, :1]), {}),
    "value head dim": lambda q, k, v: ((q, k, torch.cat([v, v], -1)), {}),
}


@pytest.mark.parametrize("change", list(SECOND_CALLS))
def test_no_plan_reused_for_another_signature(device, checks, monkeypatch, change):
    """After a planned call, a call that differs in one property gets its own
    validation and plan, and the full path's result."""
    q, k, v = _qkv(device)
    base = dict(causal=True)
    fat.flash_attn_func(q, k, v, **base)
    fat.flash_attn_func(q, k, v, **base)
    assert len(checks) == 1
    args, kwargs = SECOND_CALLS[change](q, k, v)
    kwargs = dict(base, **kwargs)

    def call():  # one seed for every call, so dropout draws the same mask each time
        torch.manual_seed(0)
        return fat.flash_attn_func(*args, **kwargs)
    got = call()
    assert len(checks) == 2, "another signature must be validated"
    assert len(api._PLANS) == 2
    _equal(got, _unplanned(monkeypatch, call))
    n = len(checks)
    _equal(call(), got)  # and its own plan gives it again
    assert len(checks) == n


def _outcome(fn):
    try:
        return ("ok", fn())
    except Exception as exc:  # noqa: BLE001 - compared below
        return (type(exc), str(exc))


def _bad_calls(q, k, v):
    """Invalid calls with the shapes (where possible) of the good call (q, k, v, causal=True)."""
    last_stride = k.transpose(-1, -2).contiguous().transpose(-1, -2)  # same shape, last stride != 1
    return {
        "causal=1": lambda: fat.flash_attn_func(q, k, v, causal=1),
        "causal='False'": lambda: fat.flash_attn_func(q, k, v, causal="False"),
        "causal=tensor": lambda: fat.flash_attn_func(q, k, v, causal=torch.tensor(True)),
        "deterministic=1": lambda: fat.flash_attn_func(q, k, v, causal=True, deterministic=1),
        "return_lse=1": lambda: fat.flash_attn_func(q, k, v, causal=True, return_lse=1),
        "return_attn_probs='no'": lambda: fat.flash_attn_func(q, k, v, causal=True, return_attn_probs="no"),
        "window (True, 0)": lambda: fat.flash_attn_func(q, k, v, causal=True, window_size=(True, 0)),
        "window (1.0, 0)": lambda: fat.flash_attn_func(q, k, v, causal=True, window_size=(1.0, 0)),
        "window (-2, 0)": lambda: fat.flash_attn_func(q, k, v, causal=True, window_size=(-2, 0)),
        "window None": lambda: fat.flash_attn_func(q, k, v, causal=True, window_size=None),
        "window of 3": lambda: fat.flash_attn_func(q, k, v, causal=True, window_size=(-1, -1, 0)),
        "scale True": lambda: fat.flash_attn_func(q, k, v, causal=True, softmax_scale=True),
        "scale nan": lambda: fat.flash_attn_func(q, k, v, causal=True, softmax_scale=math.nan),
        "scale inf": lambda: fat.flash_attn_func(q, k, v, causal=True, softmax_scale=math.inf),
        "scale str": lambda: fat.flash_attn_func(q, k, v, causal=True, softmax_scale="0.1"),
        "softcap True": lambda: fat.flash_attn_func(q, k, v, causal=True, softcap=True),
        "softcap -1": lambda: fat.flash_attn_func(q, k, v, causal=True, softcap=-1.0),
        "softcap inf": lambda: fat.flash_attn_func(q, k, v, causal=True, softcap=math.inf),
        "softcap nan": lambda: fat.flash_attn_func(q, k, v, causal=True, softcap=math.nan),
        "dropout False": lambda: fat.flash_attn_func(q, k, v, causal=True, dropout_p=False),
        "dropout -0.1": lambda: fat.flash_attn_func(q, k, v, causal=True, dropout_p=-0.1),
        "dropout 1": lambda: fat.flash_attn_func(q, k, v, causal=True, dropout_p=1.0),
        "q float64": lambda: fat.flash_attn_func(q.double(), k, v, causal=True),
        "k int32": lambda: fat.flash_attn_func(q, k.int(), v, causal=True),
        "v on meta": lambda: fat.flash_attn_func(q, k, v.to("meta"), causal=True),
        "q a list": lambda: fat.flash_attn_func(q.tolist(), k, v, causal=True),
        "k last stride": lambda: fat.flash_attn_func(q, last_stride, v, causal=True),
        "q subclass": lambda: fat.flash_attn_func(torch.nn.Parameter(q.double()), k, v, causal=True),
        "q sparse": lambda: fat.flash_attn_func(q.to_sparse(), k, v, causal=True),
    }


def test_bad_input_after_a_good_call_raises_the_same(device, monkeypatch):
    q, k, v = _qkv(device)
    fat.flash_attn_func(q, k, v, causal=True)
    fat.flash_attn_func(q, k, v, causal=True)
    n_plans = len(api._PLANS)
    for name, call in _bad_calls(q, k, v).items():
        planned = _outcome(call)
        assert planned[0] != "ok", f"{name} must raise"
        assert planned == _unplanned(monkeypatch, lambda: _outcome(call)), name
        assert planned == _outcome(call), f"{name}: the second bad call must raise the same"
    assert len(api._PLANS) == n_plans, "an invalid call must never leave a plan"


def test_valid_spellings_give_the_full_path_result(device, monkeypatch):
    """Arguments of other types that are valid (a list window, numpy-like
    floats, ints for floats) give what the full path gives."""
    q, k, v = _qkv(device)
    fat.flash_attn_func(q, k, v, causal=True)
    for kwargs in (dict(window_size=[-1, -1]), dict(softcap=0), dict(dropout_p=0), dict(softmax_scale=0.25),
                   dict(softmax_scale=torch.tensor(0.25).item())):
        got = fat.flash_attn_func(q, k, v, causal=True, **kwargs)
        _equal(got, _unplanned(monkeypatch, lambda: fat.flash_attn_func(q, k, v, causal=True, **kwargs)))


def test_sdpa_entry_plans(device, checks, monkeypatch):
    q, k, v = (t.transpose(1, 2) for t in _qkv(device, h=4, h_kv=2))
    first = fat.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    again = fat.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    assert len(checks) == 1
    _equal(first, again)
    _equal(first, _unplanned(monkeypatch, lambda: fat.scaled_dot_product_attention(
        q, k, v, is_causal=True, enable_gqa=True)))
    bad = {
        "no enable_gqa": lambda: fat.scaled_dot_product_attention(q, k, v, is_causal=True),
        "is_causal=1": lambda: fat.scaled_dot_product_attention(q, k, v, is_causal=1, enable_gqa=True),
        "enable_gqa='yes'": lambda: fat.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa="yes"),
        "scale True": lambda: fat.scaled_dot_product_attention(q, k, v, is_causal=True, scale=True,
                                                               enable_gqa=True),
        "dropout 1": lambda: fat.scaled_dot_product_attention(q, k, v, dropout_p=1.0, enable_gqa=True),
    }
    for name, call in bad.items():
        planned = _outcome(call)
        assert planned[0] != "ok", name
        assert planned == _unplanned(monkeypatch, lambda: _outcome(call)), name
    # another scale, then 3-D inputs (never planned): the full path's results
    for call in (lambda: fat.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.5, enable_gqa=True),
                 lambda: fat.scaled_dot_product_attention(q[0, :2], k[0], v[0])):
        _equal(call(), _unplanned(monkeypatch, call))


def test_gradients_through_a_plan(device, monkeypatch):
    q, k, v = _qkv(device, requires_grad=True)
    do = torch.randn_like(q)
    grads = []
    for plans in (False, True, True):
        monkeypatch.setattr(ops, "PLANS_ENABLED", plans)
        out, lse = fat.flash_attn_func(q, k, v, causal=True, return_lse=True)
        q.grad = k.grad = v.grad = None
        torch.autograd.backward((out, lse), (do, torch.randn_like(lse).mul_(0) + 0.5))
        grads.append((out.detach(), lse.detach(), q.grad, k.grad, v.grad))
    for g in grads[1:]:
        for a, b in zip(grads[0], g):
            assert torch.equal(a, b)
    with torch.no_grad():
        assert fat.flash_attn_func(q, k, v, causal=True).grad_fn is None
    with torch.inference_mode():
        assert fat.flash_attn_func(q, k, v, causal=True).grad_fn is None


def test_slopes_that_require_grad_get_none_on_both_paths(device, monkeypatch):
    """ALiBi slopes are constants: with only the slopes requiring grad, the
    planned call (first and repeated) gives what the full path gives, an
    output that requires grad and a backward that leaves the slopes' grad
    None (before: the planned call's output did not require grad in the
    kernels, and the blockwise CPU code gave the slopes a gradient)."""
    q, k, v = _qkv(device, dtype=torch.float32)
    slopes = torch.rand(q.shape[2], device=device).requires_grad_()
    results = []
    for plans in (False, True, True):
        monkeypatch.setattr(ops, "PLANS_ENABLED", plans)
        out = fat.flash_attn_func(q, k, v, alibi_slopes=slopes, window_size=(-1, -1))
        assert out.requires_grad, f"plans={plans}: output does not require grad"
        out.sum().backward()
        assert slopes.grad is None, f"plans={plans}: slopes got a gradient {slopes.grad}"
        results.append(out.detach())
    for r in results[1:]:
        assert torch.equal(results[0], r)


PER_CALL_OPTIONS = {
    "sinks": lambda b, h, dev: dict(sinks=torch.randn(h, device=dev).requires_grad_()),
    "sinks bfloat16, no grad": lambda b, h, dev: dict(sinks=torch.randn(h, device=dev).bfloat16()),
    "alibi": lambda b, h, dev: dict(alibi_slopes=torch.rand(h, device=dev)),
    "dropout": lambda b, h, dev: dict(dropout_p=0.3),
    "sinks, alibi per batch entry, dropout": lambda b, h, dev: dict(
        sinks=torch.randn(h, device=dev).requires_grad_(), alibi_slopes=torch.rand(b, h, device=dev), dropout_p=0.2),
}


@pytest.mark.parametrize("case", list(PER_CALL_OPTIONS))
def test_tensor_options_and_dropout_are_planned(device, checks, monkeypatch, case):
    """Sinks, ALiBi slopes and dropout no longer keep a call off its plan: the
    first call is validated, the next ones take the plan with their own
    sinks / slopes (new values each call) and their own dropout seed, and
    give exactly what the full path gives on the same inputs and torch seed:
    output, LSE and every gradient, dsinks included."""
    b, h = 2, 4
    q, k, v = _qkv(device, b=b, n=9, h=h, h_kv=2, requires_grad=True)
    do = torch.randn_like(q)

    def run(kw, plans, seed):
        monkeypatch.setattr(ops, "PLANS_ENABLED", plans)
        torch.manual_seed(seed)
        out, lse = fat.flash_attn_func(q, k, v, causal=True, return_lse=True, **kw)
        leaves = [q, k, v] + [t for t in kw.values() if isinstance(t, torch.Tensor) and t.requires_grad]
        for t in leaves:
            t.grad = None
        out.backward(do)
        return [out.detach(), lse.detach()] + [t.grad for t in leaves]

    for i in range(2):  # the first call validated, the second planned (new option values: a stale one would show)
        kw = PER_CALL_OPTIONS[case](b, h, device)
        planned = run(kw, True, 100 + i)
        same = {n: t.detach().clone().requires_grad_(t.requires_grad) if isinstance(t, torch.Tensor) else t
                for n, t in kw.items()}
        full = run(same, False, 100 + i)
        for j, (a, ref) in enumerate(zip(planned, full)):
            assert torch.equal(a, ref), (case, i, j, (a - ref).abs().max().item())
    assert len(api._PLANS) == 1
    assert len(checks) == 1 + 2, "the second planned call must take the plan"


@pytest.mark.gpu
@pytest.mark.parametrize("case", ["sinks", "dropout", "sinks, dropout", "alibi"])
def test_tensor_option_plans_replay_on_the_gpu(device, monkeypatch, case):
    """GPU sizes (d = 128: the Hopper forward's sinks fold, the Hopper
    backward with dropout): after the recording calls the plan's forward and
    backward replay, and each planned call gives what the full path gives on
    the same inputs and torch seed (dQ to float32 summation order: the
    Hopper backward adds it with atomics)."""
    b, n, h, h_kv, d = 2, 512, 8, 2, 128
    q, k, v = make_qkv(b, n, n, h, h_kv, d, torch.bfloat16, device, requires_grad=True)
    do = torch.randn_like(q)

    def options():
        kw = {}
        if "sinks" in case:
            kw["sinks"] = torch.randn(h, device=device).requires_grad_()
        if "dropout" in case:
            kw["dropout_p"] = 0.15
        if case == "alibi":
            kw["alibi_slopes"] = torch.rand(h, device=device)
        return kw

    def run(kw, plans, seed):
        monkeypatch.setattr(ops, "PLANS_ENABLED", plans)
        torch.manual_seed(seed)
        out = fat.flash_attn_func(q, k, v, causal=True, **kw)
        leaves = [q, k, v] + [t for t in kw.values() if isinstance(t, torch.Tensor) and t.requires_grad]
        for t in leaves:
            t.grad = None
        out.backward(do)
        return [out.detach()] + [t.grad for t in leaves]

    for i in range(5):
        kw = options()
        planned = run(kw, True, i)
        same = {key: t.detach().clone().requires_grad_(t.requires_grad) if isinstance(t, torch.Tensor) else t
                for key, t in kw.items()}
        full = run(same, False, i)
        for j, (a, ref) in enumerate(zip(planned, full)):
            if j == 1:  # dq
                err = (a.float() - ref.float()).abs().max().item()
                assert err <= 1e-2 * ref.float().abs().max().item(), (case, i, err)
            else:
                assert torch.equal(a, ref), (case, i, j, (a.float() - ref.float()).abs().max().item())
    op = next(iter(api._PLANS.values())).op
    assert op.replay is not None and op.backward.replay is not None, "the plan must replay both ways"


def test_dropout_plans_draw_a_seed_per_call(device, monkeypatch):
    """Two planned dropout calls with the same inputs drop different
    probabilities (each draws its seed from torch's generator), and
    torch.manual_seed makes a planned call repeat."""
    q, k, v = _qkv(device, n=16)
    outs = []
    for seed in (None, None, 7, 7):
        if seed is not None:
            torch.manual_seed(seed)
        outs.append(fat.flash_attn_func(q, k, v, dropout_p=0.5))
    assert len(api._PLANS) == 1
    assert not torch.equal(outs[0], outs[1])
    assert torch.equal(outs[2], outs[3])


def test_sdpa_entry_dropout_is_planned(device, checks, monkeypatch):
    """The SDPA entry with dropout_p > 0 takes its plan from the second call,
    each call with a seed of its own, and gives what the full path gives on
    the same inputs and torch seed, gradients included."""
    q, k, v = (t.transpose(1, 2).detach().requires_grad_() for t in _qkv(device, n=12, h=4, h_kv=2))
    do = torch.randn_like(q)

    def run(plans, seed):
        monkeypatch.setattr(ops, "PLANS_ENABLED", plans)
        torch.manual_seed(seed)
        out = fat.scaled_dot_product_attention(q, k, v, dropout_p=0.4, is_causal=True, enable_gqa=True)
        q.grad = k.grad = v.grad = None
        out.backward(do)
        return out.detach(), q.grad, k.grad, v.grad

    results = [(run(True, i), run(False, i)) for i in range(3)]
    for i, (planned, full) in enumerate(results):
        for j, (a, ref) in enumerate(zip(planned, full)):
            assert torch.equal(a, ref), (i, j)
    assert not torch.equal(results[0][0][0], results[1][0][0]), "each call draws its own seed"
    assert len(api._PLANS) == 1 and len(checks) == 1 + 3


def test_tensor_option_layout_is_part_of_the_key(device, checks):
    """Sinks of another dtype, length or requires_grad, and slopes of another
    shape, miss the plan and are validated (a bad one raises as without
    plans)."""
    q, k, v = _qkv(device, h=4, h_kv=2)
    sinks = torch.randn(4, device=device)
    fat.flash_attn_func(q, k, v, sinks=sinks)
    fat.flash_attn_func(q, k, v, sinks=sinks.double())
    fat.flash_attn_func(q, k, v, sinks=sinks.clone().requires_grad_())
    fat.flash_attn_func(q, k, v, alibi_slopes=torch.rand(4, device=device))
    fat.flash_attn_func(q, k, v, alibi_slopes=torch.rand(1, 4, device=device))
    assert len(checks) == 5 and len(api._PLANS) == 5
    with pytest.raises(ValueError, match="sinks"):
        fat.flash_attn_func(q, k, v, sinks=torch.randn(3, device=device))
    with pytest.raises(ValueError, match="alibi_slopes"):
        fat.flash_attn_func(q, k, v, alibi_slopes=torch.rand(3, device=device))


# ---------------------------------------------------------------------------
# Packed batches (flash_attn_varlen_func)
# ---------------------------------------------------------------------------

# Per call: query lengths and key lengths (totals 17 and 18 every call), max_seqlen 17 / 18.
VARLEN_LENGTHS = [([5, 9, 3], [6, 6, 6]), ([7, 2, 8], [1, 10, 7]), ([0, 17, 0], [18, 0, 0])]
VARLEN_OPTIONS = {
    "causal": lambda h, dev: dict(causal=True),
    "window, softcap, GQA": lambda h, dev: dict(window_size=(3, 1), softcap=4.0),
    "sinks, alibi per sequence, dropout": lambda h, dev: dict(
        causal=True, sinks=torch.randn(h, device=dev).requires_grad_(), alibi_slopes=torch.rand(3, h, device=dev),
        dropout_p=0.2),
}


def _packed(device, n_q, n_k, h=4, h_kv=2, d=16, dtype=torch.float16, requires_grad=True):
    return [torch.randn(n, hh, d, dtype=dtype, device=device).requires_grad_(requires_grad)
            for n, hh in ((n_q, h), (n_k, h_kv), (n_k, h_kv))]


def _offsets(device, shared, i):
    lengths_q, lengths_k = VARLEN_LENGTHS[i]
    cu_q = random_cu_seqlens(lengths_q, device)
    return (cu_q, cu_q) if shared else (cu_q, random_cu_seqlens(lengths_k, device))


@pytest.mark.parametrize("shared", [True, False], ids=["one cu_seqlens", "cu_seqlens_q and _k"])
@pytest.mark.parametrize("case", list(VARLEN_OPTIONS))
def test_varlen_calls_are_planned(device, checks, monkeypatch, shared, case):
    """flash_attn_varlen_func has call plans: the first call is validated,
    the next ones take its plan with their own cu_seqlens (other lengths,
    empty sequences among them), q, k, v and tensor options and their own
    dropout seed, and give exactly what the full path gives: output, LSE
    and every gradient.  With one tensor as cu_seqlens_q and cu_seqlens_k
    (self-attention) the plan takes it as one role."""
    h = 4
    n_k = 17 if shared else 18
    q, k, v = _packed(device, 17, n_k, h=h)
    do = torch.randn_like(q)

    def run(cu, kw, plans, seed):
        monkeypatch.setattr(ops, "PLANS_ENABLED", plans)
        torch.manual_seed(seed)
        out, lse = fat.flash_attn_varlen_func(q, k, v, cu[0], cu[1], 17, n_k, return_lse=True, **kw)
        leaves = [q, k, v] + [t for t in kw.values() if isinstance(t, torch.Tensor) and t.requires_grad]
        for t in leaves:
            t.grad = None
        out.backward(do)
        return [out.detach(), lse.detach()] + [t.grad for t in leaves]

    for i in range(3):  # the first call validated, then planned ones with new offsets and option values
        cu = _offsets(device, shared, i)
        kw = VARLEN_OPTIONS[case](h, device)
        planned = run(cu, kw, True, 100 + i)
        same = {n: t.detach().clone().requires_grad_(t.requires_grad) if isinstance(t, torch.Tensor) else t
                for n, t in kw.items()}
        full = run(tuple(t.clone() for t in cu), same, False, 100 + i)
        for j, (a, ref) in enumerate(zip(planned, full)):
            assert torch.equal(a, ref), (case, shared, i, j, (a.float() - ref.float()).abs().max().item())
    assert len(api._PLANS) == 1
    assert next(iter(api._PLANS.values())).op.shared_cu == shared
    assert len(checks) == 1 + 3, "the planned calls must take the plan"


def test_varlen_plan_keys(device, checks, monkeypatch):
    """What keeps a packed call off another call's plan: max_seqlen_q / _k
    (by value), the number of sequences, one cu_seqlens tensor for both or
    two, and int64 offsets (which raise as without plans); non-contiguous
    offsets, check_inputs=True and a paged K / V are never planned; every
    such call gives the full path's result."""
    q, k, v = _packed(device, 17, 17, requires_grad=False)
    cu = random_cu_seqlens([5, 9, 3], device)
    cu_k = cu.clone()
    call = lambda *a, **kw: fat.flash_attn_varlen_func(q, k, v, *a, causal=True, **kw)
    call(cu, cu_k, 9, 9)
    call(cu, cu_k, 9, 9)
    assert len(checks) == 1 and len(api._PLANS) == 1
    spaced = torch.zeros(8, dtype=torch.int32, device=device)[::2]  # stride 2
    spaced.copy_(cu)
    for name, args, kw, planned in (
            ("max_seqlen_q", (cu, cu_k, 10, 9), {}, True),
            ("max_seqlen_k", (cu, cu_k, 9, 17), {}, True),
            ("batch", (random_cu_seqlens([5, 9, 0, 3], device),) * 2 + (9, 9), {}, True),
            ("one tensor", (cu, cu, 9, 9), {}, True),
            ("strided cu_seqlens_q", (spaced, cu_k, 9, 9), {}, False),
            ("check_inputs", (cu, cu_k, 9, 9), dict(check_inputs=True), False)):
        n_checks, n_plans = len(checks), len(api._PLANS)
        for _ in range(2):
            got = call(*args, **kw)
            _equal(got, _unplanned(monkeypatch, lambda: call(*args, **kw)))
        assert len(checks) == n_checks + (3 if planned else 4), name
        assert len(api._PLANS) == n_plans + planned, name
    for bad in (cu.long(), cu.float(), cu[None]):
        planned = _outcome(lambda: call(bad, cu_k, 9, 9))
        assert planned[0] != "ok", planned
        assert planned == _unplanned(monkeypatch, lambda: _outcome(lambda: call(bad, cu_k, 9, 9)))
    with pytest.raises(ValueError, match="max_seqlen_q"):
        call(cu, cu_k, 0, 9)


@pytest.mark.gpu
@pytest.mark.parametrize("shared", [True, False], ids=["one cu_seqlens", "cu_seqlens_q and _k"])
@pytest.mark.parametrize("d", [64, 128])
def test_varlen_plans_replay_on_the_gpu(device, monkeypatch, shared, d):
    """GPU sizes (the Hopper packed forward and backward on sm_90): after the
    recording calls a packed call's forward and backward replay, and each
    planned call, with its own offsets (lengths 0 to 700 keys), gives what
    the full path gives on the same inputs (dQ to float32 summation order:
    the backward adds it with atomics)."""
    h, h_kv, n_q = 8, 2, 1536
    lengths = [[700, 300, 0, 536], [1, 1000, 500, 35], [512, 512, 512, 0], [0, 0, 1000, 536], [384] * 4]
    n_k = n_q if shared else n_q + 64
    q, k, v = _packed(device, n_q, n_k, h=h, h_kv=h_kv, d=d, dtype=torch.bfloat16)
    do = torch.randn_like(q)

    def run(cu, plans):
        monkeypatch.setattr(ops, "PLANS_ENABLED", plans)
        out, lse = fat.flash_attn_varlen_func(q, k, v, cu[0], cu[1], 1000, 1064, causal=True, return_lse=True)
        for t in (q, k, v):
            t.grad = None
        out.backward(do)
        return [out.detach(), lse.detach(), q.grad, k.grad, v.grad]

    for i, lengths_q in enumerate(lengths):
        cu_q = random_cu_seqlens(lengths_q, device)
        cu = (cu_q, cu_q) if shared else (cu_q, random_cu_seqlens(lengths_q[:-1] + [lengths_q[-1] + 64], device))
        planned = run(cu, True)
        full = run(tuple(t.clone() for t in cu), False)
        for j, (a, ref) in enumerate(zip(planned, full)):
            if j == 2:  # dq
                err = (a.float() - ref.float()).abs().max().item()
                assert err <= 1e-2 * ref.float().abs().max().item(), (shared, d, i, err)
            else:
                assert torch.equal(a, ref), (shared, d, i, j, (a.float() - ref.float()).abs().max().item())
    op = next(iter(api._PLANS.values())).op
    assert op.replay is not None and op.backward.replay is not None, "the plan must replay both ways"


def test_autocast_after_a_plan(device, monkeypatch):
    q, k, v = _qkv(device, dtype=torch.float32)
    fat.flash_attn_func(q, k, v, causal=True)
    fat.flash_attn_func(q, k, v, causal=True)
    with torch.autocast(device.type, dtype=torch.bfloat16):
        got = fat.flash_attn_func(q, k, v, causal=True)
        want = _unplanned(monkeypatch, lambda: fat.flash_attn_func(q, k, v, causal=True))
    assert got.dtype == torch.bfloat16
    _equal(got, want)


def test_vmap_after_a_plan(device, monkeypatch):
    """Functorch transforms take the full path (the same outcome, whatever it is)."""
    q, k, v = _qkv(device)
    fat.flash_attn_func(q, k, v, causal=True)
    call = lambda: torch.func.vmap(lambda x: fat.flash_attn_func(x, k[0], v[0], causal=True))(q[:, None])  # noqa: E731
    planned = _outcome(call)
    full = _unplanned(monkeypatch, lambda: _outcome(call))
    assert planned[0] == full[0]
    if planned[0] == "ok":
        _equal(planned[1], full[1])


def test_plans_follow_the_op_layer(device, monkeypatch):
    """A plan runs the op layer's current functions: a replaced forward or a
    switch of the CPU path applies to planned calls too."""
    q, k, v = _qkv(device)
    fat.flash_attn_func(q, k, v, causal=True)
    seen = call_spy(monkeypatch, ops, "_attention_fwd_impl")
    fat.flash_attn_func(q, k, v, causal=True)
    assert len(seen) == 1
    if device.type != "cpu":
        return
    blockwise = []
    real_blockwise = ops._blockwise_fwd
    monkeypatch.setattr(ops, "_blockwise_fwd", lambda *a: blockwise.append(1) or real_blockwise(*a))
    monkeypatch.setattr(_dispatch, "INTERPRET", False)
    fat.flash_attn_func(q, k, v, causal=True)
    assert blockwise == [1], "the CPU path switch must apply to a planned call"


def test_environment_switch_is_part_of_the_key(device, monkeypatch, checks):
    q, k, v = _qkv(device)
    fat.flash_attn_func(q, k, v, causal=True)
    monkeypatch.setenv("FLASHATTN_TRITON_BACKEND", "portable")
    fat.flash_attn_func(q, k, v, causal=True)
    assert len(checks) == 2
    monkeypatch.setenv("FLASHATTN_TRITON_BACKEND", "nonsense")  # whatever the full path does with it
    call = lambda: fat.flash_attn_func(q, k, v, causal=True)  # noqa: E731
    planned = _outcome(call)
    full = _unplanned(monkeypatch, lambda: _outcome(call))
    assert planned[0] == full[0] and (planned[0] == "ok" or planned == full)


@pytest.mark.parametrize("name,fwd,bwd", [
    ("FLASHATTN_TRITON_HOPPER_DROPOUT", True, True), ("FLASHATTN_TRITON_HOPPER_SINKS", True, False),
    ("FLASHATTN_TRITON_HOPPER_WINDOW", True, True), ("FLASHATTN_TRITON_BACKEND", True, True),
    # (packed batches, planned since session 59; keyed since session 63)
    ("FLASHATTN_TRITON_HOPPER_VARLEN", True, False), ("FLASHATTN_TRITON_HOPPER_VARLEN_BWD", False, True),
    # (session 69: the packed kernels' rows past each sequence zeroed, IS_VARLEN 2)
    ("FLASHATTN_TRITON_HOPPER_VARLEN_ISOLATE", True, True)])
def test_dispatch_switches_key_the_plans(monkeypatch, name, fwd, bwd):
    """Every environment switch that can move a planned call to another tier
    (dropout and sinks calls are planned since session 29, packed batches
    since session 59) is part of the forward key (api.PLAN_ENV) where it
    concerns the forward, and of the backward's world (ops.BWD_PLAN_ENV)
    where it concerns the backward: a changed switch finds no plan."""
    q, k, v = _qkv("cpu")
    key = lambda: api._flash_key(q, k, v, 0.1, None, True, (-1, -1), 0.0, False, False, False)  # noqa: E731
    bwd_world = ops._bwd_world()
    before = key()
    monkeypatch.setenv(name, "0")
    assert (key() != before) == fwd
    assert (ops._bwd_world() != bwd_world) == bwd


@pytest.mark.parametrize("table,value", [("HOPPER_SINKS_DIMS", frozenset()), ("HOPPER_DROPOUT_FWD_MIN_N", None),
                                         ("HOPPER_DROPOUT_DEFAULT", "1"), ("HOPPER_FWD_SHORT", {}),
                                         ("HOPPER_VARLEN_DEFAULT", "0"), ("HOPPER_VARLEN_SHORT", {})])
def test_dispatch_tables_are_part_of_the_forward_world(monkeypatch, table, value):
    """A forward replay is taken only in the dispatch world it was recorded in
    (ops._world): replacing a _dispatch table that chooses the forward's tier
    for dropout, sinks, short calls or packed batches changes it."""
    before = ops._world()
    monkeypatch.setattr(_dispatch, table, value)
    assert ops._world() != before


@pytest.mark.parametrize("name,value", [("HOPPER_VARLEN_BWD_DEFAULT", "0"),
                                        ("use_hopper_varlen_backward", lambda *a: False)])
def test_varlen_dispatch_is_part_of_the_backward_world(monkeypatch, name, value):
    """The packed batches' backward tier (its default switch and the rule as
    ops holds it) is part of the backward's world: a replay must not outlive a
    change."""
    before = ops._bwd_world()
    monkeypatch.setattr(_dispatch if name.isupper() else ops, name, value)
    assert ops._bwd_world() != before


def test_group_partials_switch_is_part_of_the_backward_world(monkeypatch):
    """The Hopper backward's GROUP_PARTIALS_16BIT changes the scratch buffers
    of its recorded launches: a backward replay must not outlive a change."""
    hbwd = hopper_module("bwd")
    if ops._kernels.forward is None:  # (the world reads the kernel modules once loaded, as a replay has them)
        ops._kernels.load()
    before = ops._bwd_world()
    monkeypatch.setattr(hbwd, "GROUP_PARTIALS_16BIT", not hbwd.GROUP_PARTIALS_16BIT)
    assert ops._bwd_world() != before


def test_failed_first_call_leaves_no_plan(device, monkeypatch):
    q, k, v = _qkv(device)
    real = ops._attention_fwd_impl

    def failing(*args):
        raise RuntimeError("launch failed")

    monkeypatch.setattr(ops, "_attention_fwd_impl", failing)
    with pytest.raises(RuntimeError, match="launch failed"):
        fat.flash_attn_func(q, k, v, causal=True)
    assert not api._PLANS
    monkeypatch.setattr(ops, "_attention_fwd_impl", real)
    fat.flash_attn_func(q, k, v, causal=True)
    assert len(api._PLANS) == 1


def test_plans_off_switch(device, checks, monkeypatch):
    q, k, v = _qkv(device)
    monkeypatch.setattr(ops, "PLANS_ENABLED", False)
    fat.flash_attn_func(q, k, v, causal=True)
    fat.flash_attn_func(q, k, v, causal=True)
    assert len(checks) == 2 and not api._PLANS


# ---------------------------------------------------------------------------
# deterministic=True reaches the backward (which then never takes the Hopper
# backward, whose dQ adds by atomics arrive in a varying order)
# ---------------------------------------------------------------------------

@pytest.fixture
def deterministic_requests(monkeypatch):
    """The deterministic argument of each backward (ops._bwd_into)."""
    import inspect
    from flashattn_triton import _prefetch
    monkeypatch.setenv(_prefetch.ENV_PREFETCH, "0")  # its compile-only backward would call the spy too
    monkeypatch.setattr(ops, "BWD_PLANS", False)  # a replayed backward would not (tests/fake test below)
    signature = inspect.signature(ops._bwd_into)

    def deterministic(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        return bound.arguments["deterministic"]
    return call_spy(monkeypatch, ops, "_bwd_into", deterministic)


@pytest.mark.parametrize("entry", ["flash", "varlen"])
def test_deterministic_reaches_the_backward(device, monkeypatch, deterministic_requests, entry):
    if not ops.use_triton(torch.empty(0, device=device)):
        pytest.skip("the kernels' backward (interpreter or GPU) only")
    q, k, v = make_qkv(2, 24, 24, 2, 1, 16, torch.float16, device)
    if entry == "varlen":
        cu = random_cu_seqlens([24, 24], device)
        q, k, v = (t.detach().flatten(0, 1).requires_grad_() for t in (q, k, v))

        def call(det):
            return fat.flash_attn_varlen_func(q, k, v, cu, cu, 24, 24, causal=True, deterministic=det)
    else:
        def call(det):
            return fat.flash_attn_func(q, k, v, causal=True, deterministic=det)
    do = torch.randn_like(q)
    results = {}
    for det in (False, True, True):  # the second deterministic call is planned (flash)
        deterministic_requests.clear()
        q.grad = k.grad = v.grad = None
        call(det).backward(do)
        assert deterministic_requests and all(r is det for r in deterministic_requests)
        results.setdefault(det, []).append(tuple(t.grad.clone() for t in (q, k, v)))
    # deterministic: the portable backward, bit for bit that of a default call here (no Hopper backward at d = 16)
    q.grad = k.grad = v.grad = None
    call(False).backward(do)
    for got in results[True]:
        for a, b in zip(got, (q.grad, k.grad, v.grad)):
            assert torch.equal(a, b)


def test_deterministic_through_the_custom_ops(device, deterministic_requests):
    """The op schema carries deterministic from the forward to the backward
    (torch.compile's path), and opcheck accepts it."""
    if not ops.use_triton(torch.empty(0, device=device)):
        pytest.skip("the kernels' backward (interpreter or GPU) only")
    q, k, v = make_qkv(1, 9, 13, 2, 1, 16, torch.float16, device)
    args = (q, k, v, None, None, 0, 0, 0.25, -1, 0, True, 0.0, None, None, None, 0.0, None, True)
    torch.library.opcheck(ops.attention_fwd, args)
    out, lse = ops.attention_fwd(*args)
    deterministic_requests.clear()
    torch.autograd.grad(out, (q, k, v), torch.randn_like(out))
    assert deterministic_requests == [True]
    plain = tuple(t.detach() if isinstance(t, torch.Tensor) else t for t in args)
    bwd_args = ((torch.randn_like(out), *plain[:3], out.detach(), lse.detach(), None) + plain[3:17]
                + (False, True))
    torch.library.opcheck(ops.attention_bwd, bwd_args)


# ---------------------------------------------------------------------------
# Backward plans (ops.BwdPlan): the backward of planned calls replays its launches
# ---------------------------------------------------------------------------

BWD_CASES = {
    "causal": (dict(h=2, h_kv=2, d=16), dict(causal=True)),
    "full, Nq rows odd": (dict(h=2, h_kv=2, d=24, n=19), {}),
    "GQA": (dict(h=4, h_kv=2, d=16), dict(causal=True)),
    "window + softcap": (dict(h=2, h_kv=2, d=16, n=30), dict(window_size=(5, 0), softcap=4.0)),
    "deterministic": (dict(h=2, h_kv=1, d=16), dict(causal=True, deterministic=True)),
}


@pytest.mark.parametrize("case", list(BWD_CASES))
def test_backward_plan_gradients_match_the_reference(device, monkeypatch, case):
    """Repeated planned calls with fresh inputs (the first records the
    backward where launches can be recorded, the later ones replay it): the
    gradients, into NaN-poisoned buffers, match the float64 reference, and
    bit for bit the backward without plans on the same inputs."""
    from flashattn_triton.kernels import fastlaunch
    shape, kw = BWD_CASES[case]
    bp, replayed = _repeated_backward(device, monkeypatch, case, dict(b=2, **shape), kw, torch.float16, True)
    if not fastlaunch.ENABLED:  # the interpreter (and CPU): nothing is recorded, today's backward
        assert bp.replay is None and not replayed
    else:
        assert bp.replay is not None and replayed, case


def test_hopper_backward_plan_replays(device, monkeypatch):
    """GPU (sm_90): with DQ_CONVERT_KERNEL the Hopper backward's recording
    is clean (the dQ buffer and GQA's partials are scratch buffers, the
    conversion a Triton kernel), so the backward of planned calls replays
    it: gradients against float64 over repeated calls with fresh inputs
    (its dQ adds arrive in a varying order: not compared bit for bit)."""
    from flashattn_triton.kernels import bwd, hopper
    if device.type != "cuda" or not hopper.AVAILABLE or torch.cuda.get_device_capability(device) != (9, 0):
        pytest.skip("the Hopper backward: an sm_90 GPU")
    monkeypatch.setattr(bwd, "DQ_CONVERT_KERNEL", True)
    monkeypatch.setenv("FLASHATTN_TRITON_BACKEND", "hopper")
    seen = call_spy(monkeypatch, hopper, "hopper_attention_backward", lambda *a, **kw: 1)
    bp, replayed = _repeated_backward(device, monkeypatch, "hopper", dict(b=2, n=300, h=4, h_kv=2, d=64),
                                      dict(causal=True), torch.bfloat16, False)
    assert seen, "the Hopper backward was not called"
    assert bp.replay is not None and replayed


def _repeated_backward(device, monkeypatch, case, shape, kw, dtype, bitwise):
    """Four planned forward + backward calls with fresh inputs, each checked
    against float64 (and, bitwise, against the backward without plans);
    returns (the plan's BwdPlan, whether a call replayed it).  Where nothing
    is recorded (fastlaunch off: the interpreter) two calls, the first
    validated and the second planned: the later ones would repeat the second."""
    from flashattn_triton.kernels import fastlaunch
    from flashattn_triton.reference import flash_attention_ref
    from _utils import assert_close
    monkeypatch.setattr(ops, "BWD_PLANS", True)  # (the default; a test may have switched it)
    replays = call_spy(monkeypatch, fastlaunch.Replay, "__call__",
                       lambda self, roles: self is next(iter(api._PLANS.values())).op.backward.replay)
    for _ in range(4 if fastlaunch.ENABLED else 2):
        q, k, v = _qkv(device, dtype, requires_grad=True, **shape)
        do = torch.randn_like(q)
        out, lse = fat.flash_attn_func(q, k, v, return_lse=True, **kw)
        dlse = torch.randn_like(lse)
        got = torch.autograd.grad((out, lse), (q, k, v), (do, dlse))
        inputs = [t.detach().double().requires_grad_() for t in (q, k, v)]
        ref = torch.autograd.grad(flash_attention_ref(*inputs, kw.get("causal", False), **_ref_kw(kw)),
                                  inputs, (do.double(), dlse.double()))
        inputs = [t.detach().clone().requires_grad_() for t in (q, k, v)]
        base = torch.autograd.grad(flash_attention_ref(*inputs, kw.get("causal", False), dtype=dtype,
                                                       **_ref_kw(kw)), inputs, (do, dlse.to(dtype)))
        for name, g, r, b in zip(("dq", "dk", "dv"), got, ref, base):
            assert_close(f"{case} {name}", g, r, b, 3.0, dtype)
        if bitwise:
            monkeypatch.setattr(ops, "BWD_PLANS", False)
            out, lse = fat.flash_attn_func(q, k, v, return_lse=True, **kw)
            unplanned = torch.autograd.grad((out, lse), (q, k, v), (do, dlse))
            monkeypatch.setattr(ops, "BWD_PLANS", True)
            for a, b in zip(got, unplanned):
                assert torch.equal(a, b), case
    return next(iter(api._PLANS.values())).op.backward, any(replays)


def _ref_kw(kw):
    return {name: kw[name] for name in ("window_size", "softcap") if name in kw}


_FAKE_BWD_PLANS = r"""
import os, sys, torch
sys.path.insert(0, sys.argv[1])
from fake_cuda import fake_cuda, LAUNCHES, count_replays, describe
import flashattn_triton as fat
from flashattn_triton import api, ops
from flashattn_triton.kernels import bwd, fastlaunch, launch

fastlaunch.ENABLED = True
ops.PLANS_ENABLED = True
bwd.ONE_LAUNCH = False  # two launches (the default at most shapes), whatever the environment or the d = 128 default; set below where tested
ops.use_triton = lambda t: True  # CPU tensors through the CUDA path, launches recorded
launch._arch = lambda index: "sm90"
launch.Launcher.config = lambda self, device, *key: launch.config_from_env(self.name) or self.choose(0, *key)
REPLAYS = count_replays()


UNPACKED = []


def other_strides(t):  # a saved-tensor hook's unpacked tensor: the values in another memory order
    UNPACKED.append(t)
    return t.transpose(-2, -3).contiguous().transpose(-2, -3) if t.dim() == 4 else t


def step(make, call, dout_of, plans=True, det_algos=False, hook=False):
    # one forward + backward: (the backward's launches, described; whether the backward replayed)
    ops.BWD_PLANS = plans
    q, k, v = make()
    with torch.autograd.graph.saved_tensors_hooks(lambda t: t, other_strides if hook else lambda t: t):
        out = call(q, k, v)
    dout = dout_of(out)
    saved = () if hook else out.grad_fn.saved_tensors  # (with the hook: new tensors at each unpack)
    names = {t.data_ptr(): r for t, r in zip(saved + (dout,), ("q", "k", "v", "out", "lse", "dout")[-len(saved) - 1:])}
    LAUNCHES.clear()
    del REPLAYS[:], UNPACKED[:]
    torch.use_deterministic_algorithms(det_algos)
    try:
        out.backward(dout)
    finally:
        torch.use_deterministic_algorithms(False)
        ops.BWD_PLANS = True
    assert len(UNPACKED) == (5 if hook else 0), "the saved tensors must be unpacked once"
    got = [(id(l), g, describe(a, getattr(l, "kinds", None), names)) for l, g, a in LAUNCHES]
    bp = next(iter(api._PLANS.values())).op.backward
    return got, any(ok and r is bp.replay for r, ok in REPLAYS)


def qkv(b=2, n=128, h=4, h_kv=4, d=64, dtype=torch.float16):
    return lambda: [torch.randn(b, n, hh, d, dtype=dtype).requires_grad_() for hh in (h, h_kv, h_kv)]


def same_dout(out):
    return torch.randn_like(out)


def check(name, make, call, dout_of=same_dout, replays=True, env=None, det_algos=False, record_env=None,
          hook=False):
    # three planned calls (the first compiles; record_env set), then one without
    # and one with the backward plans (env, det_algos set): the same launches
    api.clear_plans()
    old = {key: os.environ.get(key) for key in {**(env or {}), **(record_env or {})}}
    os.environ.update(record_env or {})
    try:
        for _ in range(3):
            step(make, call, same_dout if record_env is None else dout_of)
        os.environ.update(env or {})
        want, _ = step(make, call, dout_of, plans=False, det_algos=det_algos, hook=hook)
        got, replayed = step(make, call, dout_of, det_algos=det_algos, hook=hook)
    finally:
        for key, value in old.items():
            if value is None:
                os.environ.pop(key)
            else:
                os.environ[key] = value
    assert want and got == want, (name, got, want)
    assert replayed == replays, (name, replayed)
    bp = next(iter(api._PLANS.values())).op.backward
    print(name, len(got), replayed, bp.replay is not None, flush=True)


causal = lambda q, k, v: fat.flash_attn_func(q, k, v, causal=True)
with fake_cuda():
    check("causal", qkv(), causal)
    check("window softcap d96", qkv(d=96, n=77), lambda q, k, v: fat.flash_attn_func(
        q, k, v, window_size=(20, 0), softcap=5.0))
    check("return_lse", qkv(), lambda q, k, v: fat.flash_attn_func(q, k, v, causal=True, return_lse=True)[0])
    check("deterministic", qkv(), lambda q, k, v: fat.flash_attn_func(q, k, v, deterministic=True))
    check("dout strides", qkv(), causal, replays=False,
          dout_of=lambda out: torch.randn(out.shape[0], out.shape[2], out.shape[1], out.shape[3],
                                          dtype=out.dtype).transpose(1, 2))
    check("env HOPPER_BWD", qkv(), causal, replays=False, env={"FLASHATTN_TRITON_HOPPER_BWD": "0"})
    check("env CONFIG_BWD_DQ", qkv(), causal, replays=False,
          env={"FLASHATTN_TRITON_CONFIG_BWD_DQ": "BLOCK_M=32,BLOCK_N=32"})
    check("deterministic algorithms", qkv(), causal, replays=False, det_algos=True)
    check("saved tensors unpacked in another layout", qkv(), causal, replays=False, hook=True)
    check("GQA", qkv(h=4, h_kv=2), causal)  # its float32 partials: scratch buffers of the replay
    check("dout stride 0", qkv(), causal, replays=False, record_env={},
          dout_of=lambda out: torch.ones((), dtype=out.dtype).expand(out.shape))
    bwd.ONE_LAUNCH = True  # dK/dV and dQ programs in one launch (_bwd_dkdv_dq)
    check("one launch", qkv(), causal)
    check("one launch GQA not causal", qkv(h=4, h_kv=2), lambda q, k, v: fat.flash_attn_func(q, k, v))
    check("one launch, env CONFIG_BWD_ONE", qkv(), causal, replays=False,
          env={"FLASHATTN_TRITON_CONFIG_BWD_ONE": "num_warps=4,num_stages=2"})
"""


_FAKE_PLAN_PRELUDE = _FAKE_BWD_PLANS.split("\ncausal = lambda")[0]

_FAKE_EXTRAS = _FAKE_PLAN_PRELUDE + r"""
SEEDS = []
real_seed = api.draw_dropout_seed


def seed_of_call(device):
    SEEDS.append(real_seed(device))
    return SEEDS[-1]


api.draw_dropout_seed = seed_of_call


def one_call(kw_of, plans, b=2, n=128, h=4, h_kv=2, d=64):
    # a forward + backward with fresh q, k, v, dout and tensor options: every launch,
    # its pointers named by role (the call's own sinks, slopes and seed by name)
    ops.PLANS_ENABLED = plans
    try:
        q, k, v = [torch.randn(b, n, hh, d, dtype=torch.float16).requires_grad_() for hh in (h, h_kv, h_kv)]
        kw = kw_of(h)
        del SEEDS[:]
        LAUNCHES.clear(); del REPLAYS[:]
        out = fat.flash_attn_func(q, k, v, causal=True, **kw)
        dout = torch.randn_like(out)
        names = {t.data_ptr(): r for r, t in (("q", q), ("k", k), ("v", v), ("dout", dout))}
        for name in ("sinks", "alibi_slopes"):
            if name in kw:
                names[kw[name].data_ptr()] = name
        if SEEDS:
            names[SEEDS[-1].data_ptr()] = "seed"
        out.backward(dout)
        got = [(id(l), g, describe(a, getattr(l, "kinds", None), names)) for l, g, a in LAUNCHES]
        used = {name for _, _, args in got for kind, name in args if kind == "ptr"}
        return got, used, sum(ok for _, ok in REPLAYS), len(SEEDS)
    finally:
        ops.PLANS_ENABLED = True


def check(name, kw_of, want_roles, **shape):
    # three planned calls record the forward and the backward, a fourth replays both:
    # the launches of the call without plans, reading this call's tensors
    api.clear_plans()
    for _ in range(3):
        one_call(kw_of, True, **shape)
    want, want_used, _, want_seeds = one_call(kw_of, False, **shape)
    got, used, replays, seeds = one_call(kw_of, True, **shape)
    assert want and got == want, (name, got, want)
    assert want_roles <= used, (name, want_roles, used)
    assert seeds == want_seeds == ("seed" in want_roles), (name, seeds)
    plan = next(iter(api._PLANS.values())).op
    print(name, len(got), replays, plan.replay is not None, plan.backward.replay is not None, flush=True)


with fake_cuda():
    sinks = lambda h: dict(sinks=torch.randn(h, dtype=torch.float32).requires_grad_())
    check("sinks", sinks, {"sinks"})
    check("sinks, no grad", lambda h: dict(sinks=torch.randn(h, dtype=torch.float32)), {"sinks"})
    check("alibi", lambda h: dict(alibi_slopes=torch.rand(h, dtype=torch.float32)), {"alibi_slopes"})
    check("dropout", lambda h: dict(dropout_p=0.25), {"seed"})
    check("sinks, dropout, alibi", lambda h: dict(sinks=torch.randn(h).requires_grad_(), dropout_p=0.1,
                                                   alibi_slopes=torch.rand(2, h)),
          {"sinks", "seed", "alibi_slopes"})
    check("sinks d128", sinks, {"sinks"}, d=128)
    check("dropout d128", lambda h: dict(dropout_p=0.1), {"seed"}, d=128)
    # The fold of sinks after a Hopper forward (ops._fold_sinks, d = 128): a
    # stand-in for the Hopper kernel (the portable one without sinks, which the
    # fake driver records) and the merge kernel after it, both replayed.
    FOLDS = []
    real_hopper, real_use = ops._kernels.hopper_forward, ops.use_hopper_forward

    def hopper_stand_in(q, k, v, out, lse, scale, diagonal, window, *rest, **kw):
        if rest or kw or window is not None:
            return False
        FOLDS.append(1)
        offset = None if diagonal is None else diagonal - (k.shape[1] - q.shape[1])
        ops._kernels.forward(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), out.transpose(1, 2), lse,
                             scale, offset, (None, None if diagonal is None else 0))
        return True

    ops._kernels.hopper_forward, ops.use_hopper_forward = hopper_stand_in, lambda *a, **kw: True
    try:
        check("sinks d128 folded", sinks, {"sinks"}, d=128)
    finally:
        ops._kernels.hopper_forward, ops.use_hopper_forward = real_hopper, real_use
    assert len(FOLDS) >= 2, FOLDS  # the unplanned call and a recording took the fold
"""


def test_plans_take_each_calls_tensor_options_on_a_fake_driver():
    """No GPU (tests/fake_cuda.py): calls with sinks, ALiBi slopes or dropout
    are planned; after three recording calls, a fourth replays its forward
    and its backward, and launches exactly what the same call launches
    without plans: the same kernels, scalars and grids, with this call's
    q, k, v, dout, sinks, slopes and freshly drawn dropout seed (named by
    role, so the first call's tensors, which the plan's template holds,
    would show) and its own new buffers in the same places.
    Lines: case, launches, replays, forward recorded, backward recorded."""
    from flashattn_triton.kernels import fastlaunch
    if not fastlaunch.TESTED_TRITON or fastlaunch._VERSION not in fastlaunch.TESTED_TRITON:
        pytest.skip("the launch fast path does not mirror this Triton version")
    lines = fake_launch(_FAKE_EXTRAS, timeout=900).strip().split("\n")
    assert [line.split(" ", 1)[0] for line in lines] == ["sinks", "sinks,", "alibi", "dropout", "sinks,", "sinks",
                                                         "dropout", "sinks"], lines
    for line in lines:
        *_, replays, fwd, bwd = line.split()
        assert (replays, fwd, bwd) == ("2", "True", "True"), line


def test_backward_plans_on_a_fake_driver():
    """No GPU (tests/fake_cuda.py: compiled for sm_90, launches recorded): a
    replayed backward launches the kernels, scalar arguments and grids of
    the backward without plans, with the call's tensors and its own new
    buffers (named by first use) in the same places; it declines for another
    dout layout, a changed environment switch, deterministic algorithms or
    saved tensors that a saved-tensor hook unpacks in another layout,
    and recordings that saw a PyTorch operation (a dout made contiguous) are
    never replayed.  GQA's float32 partials are scratch buffers, made anew by
    each replay.
    With ONE_LAUNCH the dK/dV and dQ programs are one recorded launch.
    Lines: case, backward launches, replayed, recorded."""
    from flashattn_triton.kernels import fastlaunch
    if not fastlaunch.TESTED_TRITON or fastlaunch._VERSION not in fastlaunch.TESTED_TRITON:
        pytest.skip("the launch fast path does not mirror this Triton version")
    lines = fake_launch(_FAKE_BWD_PLANS, timeout=900).strip().split("\n")
    assert lines == [
        "causal 3 True True", "window softcap d96 3 True True", "return_lse 3 True True",
        "deterministic 3 True True", "dout strides 3 False True", "env HOPPER_BWD 3 False True",
        "env CONFIG_BWD_DQ 3 False True", "deterministic algorithms 3 False True",
        "saved tensors unpacked in another layout 3 False True", "GQA 5 True True",
        "dout stride 0 3 False False",
        "one launch 2 True True", "one launch GQA not causal 4 True True",
        "one launch, env CONFIG_BWD_ONE 2 False True",
    ], lines


_FAKE_VARLEN = _FAKE_PLAN_PRELUDE + r"""
# Per call: query lengths (total 128) and key lengths (total 160), among them empty sequences.
LENGTHS = [([100, 28, 0], [60, 60, 40]), ([3, 64, 61], [1, 100, 59]), ([0, 0, 128], [0, 0, 160])]


def offsets(lengths):
    return torch.tensor([0] + list(itertools.accumulate(lengths)), dtype=torch.int32)


def one_call(i, plans, shared, h=4, h_kv=2, d=64, causal=True):
    # a packed forward + backward with fresh q, k, v, dout and offsets: every launch,
    # its pointers named by role (the call's own cu_seqlens by name)
    ops.PLANS_ENABLED = plans
    try:
        lengths_q, lengths_k = LENGTHS[i % 3]
        cu_q = offsets(lengths_q)
        cu_k = cu_q if shared else offsets(lengths_k)
        n_k = 128 if shared else 160
        q = torch.randn(128, h, d, dtype=torch.float16).requires_grad_()
        k, v = [torch.randn(n_k, h_kv, d, dtype=torch.float16).requires_grad_() for _ in range(2)]
        LAUNCHES.clear(); del REPLAYS[:]
        out = fat.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 128, n_k, causal=causal)
        dout = torch.randn_like(out)
        names = {t.data_ptr(): r for r, t in (("q", q), ("k", k), ("v", v), ("dout", dout), ("cu_k", cu_k),
                                               ("cu_q", cu_q))}
        out.backward(dout)
        got = [(id(l), g, describe(a, getattr(l, "kinds", None), names)) for l, g, a in LAUNCHES]
        used = {name for _, _, args in got for kind, name in args if kind == "ptr"}
        return got, used, sum(ok for _, ok in REPLAYS)
    finally:
        ops.PLANS_ENABLED = True


def check(name, shared, **kw):
    # three planned calls record the forward and the backward, a fourth (other offsets) replays
    # both: the launches of the same call without plans, reading this call's tensors
    api.clear_plans()
    for i in range(3):
        one_call(i, True, shared, **kw)
    want, want_used, _ = one_call(4, False, shared, **kw)
    got, used, replays = one_call(4, True, shared, **kw)
    assert want and got == want, (name, got, want)
    assert {"cu_q"} | ({"cu_k"} if not shared else set()) <= used, (name, used)
    plan = next(iter(api._PLANS.values())).op
    print(name, len(got), replays, plan.replay is not None, plan.backward.replay is not None, flush=True)


import itertools
with fake_cuda():
    check("one cu_seqlens", True)
    check("cu_seqlens_q and _k", False)
    check("not causal d128 MHA", False, h_kv=4, d=128, causal=False)
"""


def test_varlen_plans_on_a_fake_driver():
    """No GPU (tests/fake_cuda.py): packed calls are planned; after three
    recording calls, a fourth with other offsets replays its forward and
    its backward, and launches exactly what the same call launches without
    plans: the same kernels, scalars and grids, with this call's q, k, v,
    dout and cu_seqlens (named by role: the first call's offsets, which the
    plan's template holds, would show) and its own new buffers in the same
    places; one tensor as both offsets is one role.
    Lines: case, launches, replays, forward recorded, backward recorded."""
    from flashattn_triton.kernels import fastlaunch
    if not fastlaunch.TESTED_TRITON or fastlaunch._VERSION not in fastlaunch.TESTED_TRITON:
        pytest.skip("the launch fast path does not mirror this Triton version")
    lines = fake_launch(_FAKE_VARLEN, timeout=900).strip().split("\n")
    print(lines)
    assert [line.split()[-3:] for line in lines] == [["2", "True", "True"]] * 3, lines
