"""Public attention functions.  Each one validates its arguments, builds the
parameter record and calls the op layer (ops.py); none has its own autograd."""

from __future__ import annotations

import math
from typing import Dict, Literal, Optional, Tuple, Union, overload

import torch

from . import ops
from ._dispatch import chunks_as_sequences
from ._params import AttnParams, draw_dropout_seed
from .kernels.launch import cuda_index, current_stream_handle, env_snapshot
from .reference import LN2
from ._validate import (autocast_active, autocast_inputs, check_alibi, check_attention_chunk, check_attn_mask,
                        check_cu_seqlens, check_dense, check_dropout, check_flag, check_offsets,
                        check_paged_kv, check_paged_values, check_qkv, check_scale, check_sinks, check_softcap,
                        check_window, sinks_for_kernels)

from ._kvcache import flash_attn_with_kvcache  # noqa: E402  (its validation and op live beside its kernels)

__all__ = ["flash_attn_func", "flash_attn_varlen_func", "flash_attn_with_kvcache", "flash_attn_qkvpacked_func",
           "flash_attn_kvpacked_func", "scaled_dot_product_attention"]

# What flash_attn_func and flash_attn_varlen_func return, by flag (the overloads
# below give type checkers the exact type of a call).
AttnOutput = Union[torch.Tensor, Tuple[torch.Tensor, torch.Tensor],
                   Tuple[torch.Tensor, torch.Tensor, Optional[torch.Tensor]]]

_FLASH_LAYOUT = "(batch, seqlen, nheads, headdim)"
_VARLEN_LAYOUT = "(total_tokens, nheads, headdim)"
_SDPA_LAYOUT = "(batch, nheads, seqlen, headdim)"


def _params(q, k, scale, window, *, softcap=0.0, alibi_slopes=None, sinks=None, dropout_p=0.0,
            batch, heads, varlen=None, attn_bias=None, bottom_right=True, deterministic=False,
            attention_chunk=0) -> AttnParams:
    """The parameter record of a call, every variant validated."""
    dropout_p = check_dropout(dropout_p)
    attention_chunk = check_attention_chunk(attention_chunk)
    cu_q, cu_k, max_q, max_k = varlen or (None, None, 0, 0)
    return AttnParams(scale, window[0], window[1], bottom_right, cu_q, cu_k, max_q, max_k,
                      check_softcap(softcap), check_alibi(alibi_slopes, q, batch, heads),
                      check_sinks(sinks, q, heads), attn_bias, dropout_p,
                      draw_dropout_seed(q.device) if dropout_p > 0 else None, deterministic, attention_chunk)


# ---------------------------------------------------------------------------
# Call plans: a call whose signature was seen before skips validation and dispatch
# ---------------------------------------------------------------------------
#
# The first call of a signature (the key below) runs the full path: every
# check, the parameter record, then the op layer's plan (ops.FwdPlan), which
# records the launches it makes.  Later calls with an equal key compute the
# key (one tuple), find the plan and run it: allocate the outputs, replay the
# launches.  The key holds everything the checks and the dispatch read:
# shapes, strides, dtypes, devices, requires_grad and 16-byte alignment of
# q, k, v, every option and flag (only when they are of the plain Python
# types, compared by value), and the environment switches of the forward.
# flash_attn_func's ALiBi slopes and sinks are keyed by their layout (as q,
# k, v) and passed to each planned call as its own tensors, and dropout by
# its probability: each planned call draws its own seed (as the full path
# does) and the recorded launches read it, the slopes and the sinks by
# address (roles of the replay, ops.FwdPlan.extras), so no value of one call
# is reused by another; the SDPA entry's dropout likewise.  flash_attn_varlen_func
# is planned the same way (_varlen_key): its cu_seqlens are keyed by layout
# and passed per call like the slopes (one role where cu_seqlens_q and
# cu_seqlens_k are one tensor), max_seqlen_q / _k by value.  Calls with a
# mask, a paged K / V (block_table) or check_inputs=True, dropout with
# return_attn_probs, arguments of other types, and calls under
# torch.compile, autocast, forward AD or functorch transforms take the full
# path every time.  A key
# is stored only after its call passed every check, so an invalid call can
# never find a plan; another call differing in anything the key holds
# misses and is validated.  FLASHATTN_TRITON_FAST_LAUNCH=0 (or
# ops.PLANS_ENABLED = False) turns the plans off.

MAX_PLANS = 1024
# Environment switches that choose the forward's kernels (read per call).
PLAN_ENV = ("FLASHATTN_TRITON_BACKEND", "FLASHATTN_TRITON_CONFIG_FWD", "FLASHATTN_TRITON_AUTOTUNE",
            "FLASHATTN_TRITON_HOPPER_WINDOW", "FLASHATTN_TRITON_HOPPER_SPLIT_QK", "FLASHATTN_TRITON_HOPPER_DROPOUT",
            "FLASHATTN_TRITON_HOPPER_SINKS", "FLASHATTN_TRITON_HOPPER_VARLEN",
            "FLASHATTN_TRITON_HOPPER_VARLEN_ISOLATE")
_NUMBER = (float, int)  # exact classes: bool, numpy scalars, ... take the full path
_PLANS: Dict[tuple, "_CallPlan"] = {}


def clear_plans() -> None:
    """Forget every call plan (tests, benchmarks)."""
    _PLANS.clear()


class _CallPlan:
    """What a planned call runs: the op layer's FwdPlan and the outputs to return."""

    __slots__ = ("op", "returns")

    def __init__(self, op: ops.FwdPlan, returns: int):
        self.op = op
        self.returns = returns  # 0: out, 1: (out, lse), 2: (out, lse, None)

    def flash(self, q, k, v, alibi_slopes=None, sinks=None, seed=None, cu_seqlens=(None, None)):
        """The call; alibi_slopes, sinks and a packed batch's cu_seqlens (q, k):
        this call's own (its key holds their layouts), converted as the full
        path's checks convert them; seed: the call's dropout seed if already
        drawn (the first call's, by its parameter record), else drawn here."""
        op = self.op
        extras = op.extras
        if extras:  # this call's tensors in the places of the options that vary per call
            per_call = {ops.OPT_CU_Q: cu_seqlens[0], ops.OPT_CU_K: cu_seqlens[1], ops.OPT_ALIBI: alibi_slopes,
                        ops.OPT_SINKS: None if sinks is None else sinks_for_kernels(sinks),
                        ops.OPT_SEED: (seed if seed is not None or ops.OPT_SEED not in extras
                                       else draw_dropout_seed(q.device))}
            out, lse2 = ops.attention_planned(op, q, k, v, tuple(per_call[i] for i in extras))
        else:
            out, lse2 = ops.attention_planned(op, q, k, v)
        if not self.returns:
            return out
        return (out, lse2 * LN2) if self.returns == 1 else (out, lse2 * LN2, None)

    def sdpa(self, query, key, value, seed=None):
        """The SDPA entry's call; seed: as flash's (its only per-call option)."""
        op = self.op
        extras = ()
        if op.extras:  # (dropout: the seed, the one tensor option an SDPA plan can have)
            extras = (draw_dropout_seed(query.device) if seed is None else seed,)
        if op.grad and torch.is_grad_enabled():
            out, _ = ops.attention_planned(op, query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2),
                                           extras)
        else:  # no graph: the plan takes the SDPA layout as it is
            out, _ = ops.plan_forward(op, query, key, value, bhnd=True, extras=extras)
        return out.transpose(1, 2)


def _plannable() -> bool:
    """Plans on, and no autocast, forward-AD level, functorch transform or
    torch.jit.trace active (the callers checked that no compile is)."""
    return (ops.PLANS_ENABLED and not autocast_active() and not ops.transforms_active()
            and not torch.jit.is_tracing())


def _qkv_key(q, k, v) -> Optional[tuple]:
    """What the checks and the dispatch read of q, k, v; None unless all are plain tensors."""
    if not ops.eager_tensors(q, k, v) or q.is_neg() or k.is_neg() or v.is_neg():
        return None  # (meta tensors: the op's fake implementation; a negation bit: the full path resolves it)
    try:
        return (q.shape, k.shape, v.shape, q.stride(), k.stride(), v.stride(), q.dtype, k.dtype, v.dtype,
                q.device, k.device, v.device, q.requires_grad, k.requires_grad, v.requires_grad,
                q.data_ptr() & 15, k.data_ptr() & 15, v.data_ptr() & 15)
    except Exception:  # noqa: BLE001 - sparse, nested, storage-less ...: the full path says what is wrong
        return None


def _flash_key(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, deterministic,
               return_attn_probs, return_lse, alibi_slopes=None, sinks=None, attention_chunk=0) -> Optional[tuple]:
    """flash_attn_func's plan key, None if the call cannot be planned."""
    if not (causal.__class__ is bool and deterministic.__class__ is bool and return_attn_probs.__class__ is bool
            and return_lse.__class__ is bool and window_size.__class__ is tuple and len(window_size) == 2
            and attention_chunk.__class__ is int
            and dropout_p.__class__ in _NUMBER and softcap.__class__ in _NUMBER
            and (softmax_scale is None or softmax_scale.__class__ in _NUMBER)):
        return None
    if dropout_p != 0 and return_attn_probs:  # (the dropout pattern is made from the call's parameters)
        return None
    left, right = window_size
    if left.__class__ is not int or right.__class__ is not int or not _plannable():
        return None
    tensors = _qkv_key(q, k, v)
    alibi, sink = ops.layout_key(alibi_slopes), ops.layout_key(sinks)
    if tensors is None or alibi is None or sink is None:
        return None
    return ("flash", causal, deterministic, return_attn_probs, return_lse, left, right, softmax_scale, softcap,
            dropout_p, tensors, alibi, sink, attention_chunk, env_snapshot(PLAN_ENV))


def _varlen_key(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p, softmax_scale,
                causal, window_size, softcap, alibi_slopes, deterministic, return_attn_probs, return_lse,
                check_inputs, sinks, attention_chunk) -> Optional[tuple]:
    """flash_attn_varlen_func's plan key (no block_table), None if the call
    cannot be planned: flash_attn_func's key of the packed q, k, v and
    options, the layouts of cu_seqlens_q / _k (contiguous: the full path
    would pass a contiguous copy), whether they are one tensor, and
    max_seqlen_q / _k by value.  Never with check_inputs (it reads the
    offsets' values, which a plan would not look at)."""
    if check_inputs is not False or max_seqlen_q.__class__ is not int or max_seqlen_k.__class__ is not int:
        return None
    cu_q, cu_k = ops.layout_key(cu_seqlens_q), ops.layout_key(cu_seqlens_k)
    if not cu_q or not cu_k or cu_q[1] != (1,) or cu_k[1] != (1,):  # (None, or not contiguous)
        return None
    flash = _flash_key(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, deterministic,
                       return_attn_probs, return_lse, alibi_slopes, sinks, attention_chunk)
    if flash is None:
        return None
    return ("varlen", flash, cu_q, cu_k, cu_seqlens_q.data_ptr() == cu_seqlens_k.data_ptr(), max_seqlen_q,
            max_seqlen_k)


def _new_plan(q, k, v, params: AttnParams, returns: int) -> Optional[_CallPlan]:
    """A plan for a validated call, None for masks.  Its ALiBi slopes, sinks,
    dropout seed and a packed batch's cu_seqlens vary per call
    (ops.FwdPlan.extras)."""
    if params.attn_bias is not None:
        return None
    return _CallPlan(ops.FwdPlan(q, k, v, params.op_args()), returns)


def _first_planned_call(key: tuple, q, k, v, params: AttnParams, return_lse, return_attn_probs):
    """The first call of a plannable signature, validated (params): make its
    plan, run the call through it and keep it under key; None where the call
    takes no plan (masks)."""
    check_flag(return_lse, "return_lse")
    check_flag(return_attn_probs, "return_attn_probs")
    plan = _new_plan(q, k, v, params, 2 if return_attn_probs else int(return_lse))
    if plan is None:
        return None
    result = plan.flash(q, k, v, params.alibi_slopes, params.sinks, params.rng_seed,
                        (params.cu_seqlens_q, params.cu_seqlens_k))
    _store(key, plan)
    return result


def _store(key: tuple, plan: _CallPlan) -> None:
    """Keep a plan whose first call returned (an error in it leaves no plan)."""
    if len(_PLANS) >= MAX_PLANS:
        _PLANS.clear()
    _PLANS[key] = plan


def _returns(q, k, v, params, out, lse2, return_lse: bool, return_attn_probs: bool):
    """The requested outputs; the base-2 LSE of the op is converted to natural
    log only when it is returned (saves a launch per call otherwise)."""
    check_flag(return_lse, "return_lse")
    check_flag(return_attn_probs, "return_attn_probs")
    if return_attn_probs:
        probs = ops.dropout_pattern(q, k, v, params) if params.dropout_p > 0 else None
        return out, lse2 * LN2, probs
    if return_lse:
        return out, lse2 * LN2
    return out


@overload
def flash_attn_func(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dropout_p: float = ...,
                    softmax_scale: Optional[float] = ..., causal: bool = ...,
                    window_size: Tuple[int, int] = ..., softcap: float = ...,
                    alibi_slopes: Optional[torch.Tensor] = ..., deterministic: bool = ...,
                    return_attn_probs: Literal[False] = ..., *, return_lse: Literal[False] = ...,
                    sinks: Optional[torch.Tensor] = ...,
                    attention_chunk: int = ...) -> torch.Tensor: ...
@overload
def flash_attn_func(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dropout_p: float = ...,
                    softmax_scale: Optional[float] = ..., causal: bool = ...,
                    window_size: Tuple[int, int] = ..., softcap: float = ...,
                    alibi_slopes: Optional[torch.Tensor] = ..., deterministic: bool = ...,
                    return_attn_probs: Literal[False] = ..., *, return_lse: Literal[True],
                    sinks: Optional[torch.Tensor] = ...,
                    attention_chunk: int = ...) -> Tuple[torch.Tensor, torch.Tensor]: ...
@overload
def flash_attn_func(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dropout_p: float = ...,
                    softmax_scale: Optional[float] = ..., causal: bool = ...,
                    window_size: Tuple[int, int] = ..., softcap: float = ...,
                    alibi_slopes: Optional[torch.Tensor] = ..., deterministic: bool = ...,
                    *, return_attn_probs: Literal[True], return_lse: bool = ...,
                    sinks: Optional[torch.Tensor] = ...,
                    attention_chunk: int = ...
                    ) -> Tuple[torch.Tensor, torch.Tensor, Optional[torch.Tensor]]: ...
@overload
def flash_attn_func(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dropout_p: float = ...,
                    softmax_scale: Optional[float] = ..., causal: bool = ...,
                    window_size: Tuple[int, int] = ..., softcap: float = ...,
                    alibi_slopes: Optional[torch.Tensor] = ..., deterministic: bool = ...,
                    return_attn_probs: bool = ..., *, return_lse: bool = ...,
                    sinks: Optional[torch.Tensor] = ...,
                    attention_chunk: int = ...) -> AttnOutput: ...
def flash_attn_func(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    dropout_p: float = 0.0,
    softmax_scale: Optional[float] = None,
    causal: bool = False,
    window_size: Tuple[int, int] = (-1, -1),
    softcap: float = 0.0,
    alibi_slopes: Optional[torch.Tensor] = None,
    deterministic: bool = False,
    return_attn_probs: bool = False,
    *,
    return_lse: bool = False,
    sinks: Optional[torch.Tensor] = None,
    attention_chunk: int = 0,
) -> AttnOutput:
    """Exact attention ``softmax(q k^T * softmax_scale) v``, call-compatible with
    ``flash_attn.flash_attn_func``.

    Arguments:
        q: (batch_size, seqlen_q, nheads, headdim)
        k: (batch_size, seqlen_k, nheads_k, headdim)
        v: (batch_size, seqlen_k, nheads_k, headdim_v)
            float16, bfloat16 or float32, all three the same dtype and device;
            any strides as long as the last dimension has stride 1 (slices of a
            packed qkv tensor work without a copy).  headdim, headdim_v: 1..512
            (headdim_v may differ from headdim, e.g. 192 / 128).
        dropout_p: float in [0, 1).  Each attention probability is kept iff
            a 16-bit random draw is >= t = round(dropout_p * 2^16) (capped
            at 65535), i.e. with probability 1 - t / 2^16, and kept values
            are scaled by 2^16 / (2^16 - t), the exact inverse of that keep
            rate (t / 2^16 is within 2^-17 of dropout_p; the LSE is
            unchanged).  The keep mask comes from a counter-based
            RNG (Philox, as Triton's tl.randint) keyed by a seed drawn per
            call from torch's default generator of q's device, so
            torch.manual_seed makes calls reproducible; the backward
            regenerates the same mask (none is stored).
        softmax_scale: scaling of q k^T before the softmax; default 1/sqrt(headdim).
        causal: apply a causal mask.  When seqlen_q != seqlen_k the mask is
            aligned to the bottom-right corner: query i attends key j iff
            j <= i + seqlen_k - seqlen_q.  For seqlen_q = 2, seqlen_k = 5
            (1 = attended)::

                1 1 1 1 0
                1 1 1 1 1

            and for seqlen_q = 5, seqlen_k = 2::

                0 0
                0 0
                0 0
                1 0
                1 1

            A query row that attends no key (the first three rows above)
            outputs zeros, and its LSE is -inf.  Its gradients are zero.
        window_size: (left, right), sliding-window (local) attention; -1 means
            unbounded on that side.  Query i attends keys j with
            i + seqlen_k - seqlen_q - left <= j <= i + seqlen_k - seqlen_q + right.
            With causal=True the right side is 0.  For seqlen_q = seqlen_k = 5,
            window_size = (2, 0)::

                1 0 0 0 0
                1 1 0 0 0
                1 1 1 0 0
                0 1 1 1 0
                0 0 1 1 1

            Only the key tiles inside the band are visited: the cost is
            O(seqlen * window), not O(seqlen^2).
        softcap: float >= 0; if > 0 the scaled scores s = softmax_scale * q.k
            become softcap * tanh(s / softcap) before ALiBi and the masks
            (Gemma 2's logit soft-capping); the backward multiplies by
            1 - tanh^2.  0 turns it off.
        alibi_slopes: None, or float32 of shape (nheads,) or
            (batch_size, nheads).  Adds -slope[b, h] * |i + seqlen_k - seqlen_q - j|
            to the score of query i and key j (after softcap).  The slopes
            are constants: no gradient flows to them (as in flash-attn).
        deterministic: as in flash-attn, False (the default) lets the
            backward use atomics: on Hopper (sm_90) the Gluon backward adds
            dQ in float32 in an order that varies run to run.  True (or
            torch.use_deterministic_algorithms) runs the portable
            three-kernel backward, which has no atomics: bit-identical
            gradients run to run.
        return_attn_probs: if True, return ``(out, softmax_lse, S_dmask)`` like
            flash-attn.  S_dmask is None unless dropout_p > 0; then it is
            (batch_size, nheads, seqlen_q, seqlen_k) float32: the attention
            probabilities before dropout, negated where the dropout dropped
            them (recomputed densely in PyTorch with the call's mask: a
            testing aid for small shapes).
        return_lse: if True, return ``(out, softmax_lse)``.  The LSE is
            differentiable: its gradient flows back into q and k (and sinks).
        sinks: keyword-only.  None, or a float tensor of shape (nheads,):
            learnable attention sinks (gpt-oss).  Head h's softmax gets one
            extra logit sinks[h] in its denominator that carries no value:
            P_ij = exp(s_ij) / (exp(sinks[h]) + sum_j' exp(s_ij')).  The LSE
            includes it; a row that sees no key outputs zeros and has
            LSE = sinks[h].  Computed in float32 and differentiable
            (d sinks[h] = -sum_i P_sink,i * (sum_d dO_id O_id - dlse_i)).
        attention_chunk: keyword-only int >= 0, chunked attention (Llama 4's
            local layers, FlashAttention-3's ``attention_chunk``); 0 (the
            default) turns it off.  With C > 0 the keys are cut into chunks
            [c * C, (c + 1) * C) and query i, at key position
            p = i + seqlen_k - seqlen_q, attends only keys j with
            j // C == p // C (floor division; a query with p < 0 attends
            nothing and outputs zeros).  It combines with causal and
            window_size by intersection: Llama 4 passes causal=True, each
            query then attends the keys from its chunk's start up to itself.
            Key tiles outside a query tile's chunks are skipped: O(seqlen * C).
            Runs on the portable kernels' chunk mask, except where the
            Hopper tier runs and seqlen_k >= seqlen_q >= 128 (C >= 128, no
            dropout): each chunk that holds queries is then a sequence of
            its own and the call runs without chunks, on the Hopper kernels:
            batch * seqlen_q / C sequences of C rows over the last seqlen_q
            keys when seqlen_q and seqlen_k - seqlen_q are multiples of C,
            else a packed batch of the chunks (each with its keys from the
            chunk's start); q, k, v are copied where their strides allow no
            such view.

    Every variant combines with the others, with causal / window masks, GQA
    and headdim_v != headdim, forward and backward; docs/variants.md has the
    details.

    GQA / MQA: nheads must be a multiple of nheads_k.  Query head h reads
    key/value head ``h // (nheads // nheads_k)``: with 6 query heads and 2 KV
    heads, query heads 0, 1, 2 use KV head 0 and heads 3, 4, 5 use KV head 1.
    K and V are never repeated in memory; dk, dv sum over the group.

    Under ``torch.autocast``, q, k, v are cast to the autocast dtype first.
    Works under ``torch.compile(fullgraph=True)`` and CUDA-graph capture.

    Returns:
        out: (batch_size, seqlen_q, nheads, headdim_v), the dtype of q.
        softmax_lse (with return_lse or return_attn_probs):
            (batch_size, nheads, seqlen_q) float32, natural-log log-sum-exp of
            each row of the modified scores (-inf for rows that see no key).
        S_dmask (with return_attn_probs): see return_attn_probs.
    """
    if chunks_as_sequences(q, k, v, attention_chunk, dropout_p, alibi_slopes):
        return _chunks_as_sequences(q, k, v, softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
                                    return_attn_probs, return_lse, sinks, attention_chunk)
    key = None
    if not torch.compiler.is_compiling():
        key = _flash_key(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, deterministic,
                         return_attn_probs, return_lse, alibi_slopes, sinks, attention_chunk)
        if key is not None:
            plan = _PLANS.get(key)
            if plan is not None:
                return plan.flash(q, k, v, alibi_slopes, sinks)
    q, k, v = autocast_inputs(q, k, v)
    check_qkv(("q", "k", "v"), (q, k, v), _FLASH_LAYOUT, 4, 2)
    causal = check_flag(causal, "causal")
    check_flag(deterministic, "deterministic")
    window = check_window(window_size, causal)
    params = _params(q, k, check_scale(softmax_scale, "softmax_scale", q.shape[-1]), window,
                     softcap=softcap, alibi_slopes=alibi_slopes, sinks=sinks, dropout_p=dropout_p,
                     batch=q.shape[0], heads=q.shape[2], deterministic=deterministic,
                     attention_chunk=attention_chunk)
    if key is not None:
        result = _first_planned_call(key, q, k, v, params, return_lse, return_attn_probs)
        if result is not None:
            return result
    out, lse2 = ops.attention_base2(q, k, v, params)
    return _returns(q, k, v, params, out, lse2, return_lse, return_attn_probs)


def _chunks_as_sequences(q, k, v, softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
                         return_attn_probs, return_lse, sinks, chunk: int) -> AttnOutput:
    """flash_attn_func with attention_chunk=chunk over n = seqlen_q queries as
    the call without chunks on one sequence per chunk (_dispatch.chunks_as_sequences
    says when): n and the cache before the queries whole chunks, batch * n /
    chunk sequences of chunk rows; otherwise a packed batch
    (_chunks_as_packed).  Keys before the last n (a cache whole chunks long)
    are in no query's chunk and are left out.  A (batch, Hq) ALiBi slope row
    repeats for its row's chunks; the LSE (batch * m, Hq, chunk) goes back to
    (batch, Hq, n)."""
    b, n, h = q.shape[0], q.shape[1], q.shape[2]
    if n % chunk or (k.shape[1] - n) % chunk:
        return _chunks_as_packed(q, k, v, softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
                                 return_attn_probs, return_lse, sinks, chunk)
    m = n // chunk
    if k.shape[1] > n:
        k, v = k[:, k.shape[1] - n:], v[:, v.shape[1] - n:]

    def split(t):  # (b, n, H, d) -> (b * m, chunk, H, d): a view where the strides allow it
        return t.reshape(b * m, chunk, *t.shape[2:])

    if alibi_slopes is not None and alibi_slopes.dim() == 2:
        alibi_slopes = alibi_slopes.repeat_interleave(m, dim=0)
    res = flash_attn_func(split(q), split(k), split(v), 0.0, softmax_scale, causal, window_size, softcap,
                          alibi_slopes, deterministic, return_attn_probs, return_lse=return_lse, sinks=sinks)
    if isinstance(res, torch.Tensor):
        return res.reshape(b, n, *res.shape[2:])
    out = res[0].reshape(b, n, *res[0].shape[2:])
    lse = res[1].reshape(b, m, h, chunk).transpose(1, 2).reshape(b, h, n)
    return (out, lse, None) if return_attn_probs else (out, lse)


def _chunks_as_packed(q, k, v, softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
                      return_attn_probs, return_lse, sinks, chunk: int) -> AttnOutput:
    """_chunks_as_sequences where the queries' chunks are not whole: n =
    seqlen_q not a multiple of chunk, or a cache before them (seqlen_k - n
    keys) that is not.  Per row, the keys from the start of the first
    query's chunk on (lk of them; the first query is key qo among them, qo <
    chunk) are cut into ceil(lk / chunk) chunks, and each chunk with its
    queries is one sequence of a packed batch: chunk keys (the last fewer),
    and chunk queries but the first (chunk - qo) and the last.  Within each,
    the queries are the last of its keys, so the bottom-right causal
    diagonal, the window and ALiBi read as in the call.  cu_seqlens come from
    _chunk_offsets (on the device, no sync).  The packed LSE (Hq, batch * n)
    goes back to (batch, Hq, n)."""
    b, n, h = q.shape[0], q.shape[1], q.shape[2]
    n_k = k.shape[1]
    first_key = (n_k - n) // chunk * chunk  # where the first query's chunk starts
    lk = n_k - first_key
    per_row = -(-lk // chunk)
    cu_seqlens_q, cu_seqlens_k = _chunk_offsets(b, n, lk, chunk, q.device)
    if alibi_slopes is not None and alibi_slopes.dim() == 2:
        alibi_slopes = alibi_slopes.repeat_interleave(per_row, dim=0)
    if first_key:
        k, v = k[:, first_key:], v[:, first_key:]

    def pack(t):  # (b, N, H, d) -> (b * N, H, d): a view where the strides allow it
        return t.reshape(-1, *t.shape[2:])

    res = flash_attn_varlen_func(pack(q), pack(k), pack(v), cu_seqlens_q, cu_seqlens_k,
                                 min(chunk, n), min(chunk, lk), 0.0, softmax_scale, causal, window_size, softcap,
                                 alibi_slopes, deterministic, return_attn_probs, return_lse=return_lse, sinks=sinks)
    if isinstance(res, torch.Tensor):
        return res.reshape(b, n, *res.shape[1:])
    out = res[0].reshape(b, n, *res[0].shape[1:])
    lse = res[1].reshape(h, b, n).transpose(0, 1).contiguous()
    return (out, lse, None) if return_attn_probs else (out, lse)


# _chunk_offsets' tensors by (batch, seqlen_q, keys from the first query's
# chunk on, chunk, device, stream), for eager calls: an eager call of the packed form
# then launches nothing before the attention (building them is six small
# launches, host time that the GPU waits on at short lengths).
_CHUNK_OFFSETS: dict = {}


def _chunk_offsets(b: int, n: int, lk: int, chunk: int, device: torch.device) -> Tuple[torch.Tensor, torch.Tensor]:
    """The packed form's cu_seqlens_q / _k (_chunks_as_packed): per row, the
    lk keys cut into ceil(lk / chunk) chunks from key 0; the n queries are
    the last n keys, so query chunk j starts at max(j * chunk - qo, 0) with
    qo = lk - n < chunk.  Made on the device from the shapes (no host copy:
    capturable, no sync); kept for later eager calls.  Not kept or reused
    while torch.compile traces (it makes them in its graph) or a CUDA graph
    is captured (the graph would hold tensors the cache may drop, or eager
    calls would read ones only the graph fills)."""
    reuse = not torch.compiler.is_compiling() and not (
        device.type == "cuda" and torch.cuda.is_current_stream_capturing())
    # per stream as well: a tensor the cache drops is freed to its own stream's pool, safe only
    # where every kernel that read it ran on that stream
    stream = current_stream_handle(cuda_index(device)) if reuse and device.type == "cuda" else None
    key = (b, n, lk, chunk, device, stream)
    if reuse and key in _CHUNK_OFFSETS:
        return _CHUNK_OFFSETS[key]
    qo = lk - n
    per_row = -(-lk // chunk)
    starts_k = torch.arange(0, per_row * chunk, chunk, dtype=torch.int32, device=device)     # (per_row,)
    # the first chunk's queries start at 0, every later one's qo before its keys; no clamp: torch 2.11's
    # inductor failed on the Max index it made of clamp_min over arange (CUDA; session 57)
    starts_q = torch.cat((starts_k[:1], starts_k[1:] - qo))

    def offsets(starts, rows):  # every row's sequence starts, rows laid end to end, then the total
        base = torch.arange(0, b * rows, rows, dtype=torch.int32, device=device)
        return torch.cat(((base[:, None] + starts[None, :]).reshape(-1),
                          torch.full((1,), b * rows, dtype=torch.int32, device=device)))

    res = offsets(starts_q, n), offsets(starts_k, lk)
    if reuse:
        if len(_CHUNK_OFFSETS) >= 64:
            _CHUNK_OFFSETS.clear()
        _CHUNK_OFFSETS[key] = res
    return res


@overload
def flash_attn_varlen_func(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: torch.Tensor,
                           cu_seqlens_k: torch.Tensor, max_seqlen_q: int, max_seqlen_k: int,
                           dropout_p: float = ..., softmax_scale: Optional[float] = ...,
                           causal: bool = ..., window_size: Tuple[int, int] = ..., softcap: float = ...,
                           alibi_slopes: Optional[torch.Tensor] = ..., deterministic: bool = ...,
                           return_attn_probs: Literal[False] = ...,
                           block_table: Optional[torch.Tensor] = ..., *, return_lse: Literal[False] = ...,
                           check_inputs: bool = ..., sinks: Optional[torch.Tensor] = ...,
                           attention_chunk: int = ...) -> torch.Tensor: ...
@overload
def flash_attn_varlen_func(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: torch.Tensor,
                           cu_seqlens_k: torch.Tensor, max_seqlen_q: int, max_seqlen_k: int,
                           dropout_p: float = ..., softmax_scale: Optional[float] = ...,
                           causal: bool = ..., window_size: Tuple[int, int] = ..., softcap: float = ...,
                           alibi_slopes: Optional[torch.Tensor] = ..., deterministic: bool = ...,
                           return_attn_probs: Literal[False] = ...,
                           block_table: Optional[torch.Tensor] = ..., *, return_lse: Literal[True],
                           check_inputs: bool = ..., sinks: Optional[torch.Tensor] = ...,
                           attention_chunk: int = ...) -> Tuple[torch.Tensor, torch.Tensor]: ...
@overload
def flash_attn_varlen_func(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: torch.Tensor,
                           cu_seqlens_k: torch.Tensor, max_seqlen_q: int, max_seqlen_k: int,
                           dropout_p: float = ..., softmax_scale: Optional[float] = ...,
                           causal: bool = ..., window_size: Tuple[int, int] = ..., softcap: float = ...,
                           alibi_slopes: Optional[torch.Tensor] = ..., deterministic: bool = ...,
                           *, return_attn_probs: Literal[True], block_table: Optional[torch.Tensor] = ..., return_lse: bool = ...,
                           check_inputs: bool = ..., sinks: Optional[torch.Tensor] = ...,
                           attention_chunk: int = ...) -> Tuple[torch.Tensor, torch.Tensor, Optional[torch.Tensor]]: ...
@overload
def flash_attn_varlen_func(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: torch.Tensor,
                           cu_seqlens_k: torch.Tensor, max_seqlen_q: int, max_seqlen_k: int,
                           dropout_p: float = ..., softmax_scale: Optional[float] = ...,
                           causal: bool = ..., window_size: Tuple[int, int] = ..., softcap: float = ...,
                           alibi_slopes: Optional[torch.Tensor] = ..., deterministic: bool = ...,
                           return_attn_probs: bool = ..., block_table: Optional[torch.Tensor] = ...,
                           *, return_lse: bool = ...,
                           check_inputs: bool = ..., sinks: Optional[torch.Tensor] = ...,
                           attention_chunk: int = ...) -> AttnOutput: ...
def flash_attn_varlen_func(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    cu_seqlens_k: torch.Tensor,
    max_seqlen_q: int,
    max_seqlen_k: int,
    dropout_p: float = 0.0,
    softmax_scale: Optional[float] = None,
    causal: bool = False,
    window_size: Tuple[int, int] = (-1, -1),
    softcap: float = 0.0,
    alibi_slopes: Optional[torch.Tensor] = None,
    deterministic: bool = False,
    return_attn_probs: bool = False,
    block_table: Optional[torch.Tensor] = None,
    *,
    return_lse: bool = False,
    check_inputs: bool = False,
    sinks: Optional[torch.Tensor] = None,
    attention_chunk: int = 0,
) -> AttnOutput:
    """Attention over a packed batch of variable-length sequences, call-compatible
    with ``flash_attn.flash_attn_varlen_func``.

    Arguments:
        q: (total_q, nheads, headdim), the query rows of every sequence, one after another.
        k: (total_k, nheads_k, headdim)
        v: (total_k, nheads_k, headdim_v)
        cu_seqlens_q: (batch_size + 1,) int32, on q's device: sequence b owns query
            rows cu_seqlens_q[b] .. cu_seqlens_q[b+1] - 1.  Starts at 0.
        cu_seqlens_k: (batch_size + 1,) int32, the same for key/value rows.
        max_seqlen_q, max_seqlen_k: ints, upper bounds of the sequence lengths,
            1 .. 2**31 - 1 (they size the launch grid; programs past a
            sequence's end exit at once).  Below a sequence's length (not
            checked, but by check_inputs) that sequence's query rows past
            max_seqlen_q are not written: undefined, as in flash-attn.
        dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
        deterministic, return_attn_probs, return_lse, sinks, attention_chunk: as in
            :func:`flash_attn_func`, applied per sequence: causal, the window,
            ALiBi distances and the chunks are aligned bottom-right within
            each sequence (query i of a sequence with n_q queries and n_k keys
            attends key j iff j <= i + n_k - n_q; the chunks count the keys
            from the sequence's first, j // C == (i + n_k - n_q) // C);
            alibi_slopes of shape (batch_size, nheads) give sequence b the
            slopes of row b.  With return_attn_probs and dropout, S_dmask is
            (batch_size, nheads, max_seqlen_q, max_seqlen_k), zero past each
            sequence's lengths.  Sequences of length 0
            are allowed; a sequence with queries and no keys outputs zeros.
        block_table: None, or (batch_size, max_blocks_per_seq) int32: a paged
            K / V, as flash-attn 2 takes it (chunked prefill against a paged
            KV cache).  k is then a page pool (num_blocks, page_block_size,
            nheads_k, headdim) and v (num_blocks, page_block_size, nheads_k,
            headdim_v), page_block_size a positive multiple of 16; sequence b
            has n_k_b = cu_seqlens_k[b + 1] - cu_seqlens_k[b] keys (only the
            differences of cu_seqlens_k are used) and its key j lies in page
            block_table[b, j // page_block_size], row j % page_block_size.
            Other pages and block-table entries past a sequence's keys are
            never read.  Forward only: NotImplementedError when q, k or v
            requires grad (outside torch.no_grad()), with dropout_p > 0 or
            with return_attn_probs.  Every other argument as without it.
            Entries are not checked against the pool (check_inputs=True
            checks them, with a device synchronisation).
        check_inputs: if True, also check the values of cu_seqlens (start at 0,
            non-decreasing, ending at total_q / total_k, lengths <= max_seqlen).
            This reads them on the host, a device synchronisation; by default
            only shapes, dtypes and devices are checked and the call makes no
            sync.  Unchecked, offsets past the packed rows read and write out
            of bounds (on CPU they can crash the process), and rows past
            cu_seqlens[-1] (q.shape[0] must equal it, as in flash-attn) are
            not written: their out, LSE and gradients are undefined.

    On Hopper GPUs the packed kernels load whole tiles by TMA, so a sequence's
    last tiles also read the next sequence's first rows of q, k, v (and dout);
    past the tensors' last row they read zeros.  Those rows get weight 0, but a
    NaN or infinity in one sequence's rows makes 0 * NaN and reaches the
    preceding sequence's out and gradients, unless
    FLASHATTN_TRITON_HOPPER_VARLEN_ISOLATE=1 (the kernels then zero those rows
    first; docs/api.md).  The portable kernels read each sequence's own rows
    only.

    Each sequence attends only within itself.  GQA as in :func:`flash_attn_func`.

    Returns:
        out: (total_q, nheads, headdim_v).
        softmax_lse (with return_lse / return_attn_probs): (nheads, total_q) float32,
            natural log, packed like q (flash-attn's varlen layout).
    """
    if block_table is not None:
        return _varlen_paged(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p,
                             softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
                             return_attn_probs, block_table, return_lse, check_inputs, sinks, attention_chunk)
    key = None
    if not torch.compiler.is_compiling():
        key = _varlen_key(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p, softmax_scale,
                          causal, window_size, softcap, alibi_slopes, deterministic, return_attn_probs, return_lse,
                          check_inputs, sinks, attention_chunk)
        if key is not None:
            plan = _PLANS.get(key)
            if plan is not None:
                return plan.flash(q, k, v, alibi_slopes, sinks, cu_seqlens=(cu_seqlens_q, cu_seqlens_k))
    q, k, v = autocast_inputs(q, k, v)
    check_qkv(("q", "k", "v"), (q, k, v), _VARLEN_LAYOUT, 3, 1)
    causal = check_flag(causal, "causal")
    check_flag(deterministic, "deterministic")
    check_flag(check_inputs, "check_inputs")
    check_cu_seqlens(cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, q, k, check_inputs)
    # The kernels read cu_seqlens[b] at CU + b (a strided view would be misread).
    cu_seqlens_q, cu_seqlens_k = cu_seqlens_q.contiguous(), cu_seqlens_k.contiguous()
    window = check_window(window_size, causal)
    params = _params(q, k, check_scale(softmax_scale, "softmax_scale", q.shape[-1]), window,
                     softcap=softcap, alibi_slopes=alibi_slopes, sinks=sinks, dropout_p=dropout_p,
                     batch=cu_seqlens_q.shape[0] - 1, heads=q.shape[1],
                     varlen=(cu_seqlens_q, cu_seqlens_k, int(max_seqlen_q), int(max_seqlen_k)),
                     deterministic=deterministic, attention_chunk=attention_chunk)
    if key is not None:
        result = _first_planned_call(key, q, k, v, params, return_lse, return_attn_probs)
        if result is not None:
            return result
    out, lse2 = ops.attention_base2(q, k, v, params)
    return _returns(q, k, v, params, out, lse2, return_lse, return_attn_probs)


def _varlen_paged(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p, softmax_scale,
                  causal, window_size, softcap, alibi_slopes, deterministic, return_attn_probs, block_table,
                  return_lse, check_inputs, sinks, attention_chunk):
    """flash_attn_varlen_func with a paged K / V (block_table): validated,
    then the forward-only op ops.varlen_paged_fwd."""
    check_offsets("cu_seqlens_q", cu_seqlens_q)
    batch = cu_seqlens_q.shape[0] - 1
    if not isinstance(q, torch.Tensor):
        raise TypeError(f"q must be a torch.Tensor, got {type(q).__name__}")
    check_paged_kv(k, v, block_table, q, batch)
    q, k, v = autocast_inputs(q, k, v)
    # dtypes, devices, heads and head dims, on one row of each page pool
    check_qkv(("q", "k", "v"), (q, k[:, 0], v[:, 0]), _VARLEN_LAYOUT, 3, 1)
    causal = check_flag(causal, "causal")
    check_flag(deterministic, "deterministic")
    check_flag(check_inputs, "check_inputs")
    check_flag(return_lse, "return_lse")
    check_flag(return_attn_probs, "return_attn_probs")
    if check_dropout(dropout_p) > 0:
        raise NotImplementedError(f"flash_attn_varlen_func: dropout_p={dropout_p} with block_table (a paged K / V) "
                                  "is not supported (the paged call is forward-only, for inference)")
    if return_attn_probs:
        raise NotImplementedError("flash_attn_varlen_func: return_attn_probs=True with block_table (a paged K / V) "
                                  "is not supported")
    wanted = [n for n, t in (("q", q), ("k", k), ("v", v), ("sinks", sinks), ("alibi_slopes", alibi_slopes))
              if isinstance(t, torch.Tensor) and t.requires_grad]
    if torch.is_grad_enabled() and wanted:
        raise NotImplementedError(f"flash_attn_varlen_func with block_table (a paged K / V) has no backward: "
                                  f"{', '.join(wanted)} require{'s' if len(wanted) == 1 else ''} grad; call it "
                                  "under torch.no_grad() / torch.inference_mode(), or pass contiguous packed "
                                  "K / V without block_table")
    check_cu_seqlens(cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, q, k, check_inputs, paged=True)
    cu_seqlens_q, cu_seqlens_k = cu_seqlens_q.contiguous(), cu_seqlens_k.contiguous()
    if check_inputs:
        check_paged_values(cu_seqlens_k, int(max_seqlen_k), block_table, k.shape[0], k.shape[1])
    window = check_window(window_size, causal)
    params = _params(q, k, check_scale(softmax_scale, "softmax_scale", q.shape[-1]), window,
                     softcap=softcap, alibi_slopes=alibi_slopes, sinks=sinks, batch=batch, heads=q.shape[1],
                     attention_chunk=attention_chunk)
    out, lse2 = ops.varlen_paged_fwd(q, k, v, cu_seqlens_q, cu_seqlens_k, int(max_seqlen_q), int(max_seqlen_k),
                                     block_table, params.softmax_scale, params.window_left, params.window_right,
                                     params.softcap, params.alibi_slopes, params.sinks, params.attention_chunk)
    return (out, lse2 * LN2) if return_lse else out


def _check_packed(t, name: str, layout: str) -> None:
    """A packed argument: a tensor (TypeError) of the layout (ValueError), whose
    one numeric dim (3 or 2) is the packed axis."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor {layout}, got {type(t).__name__}")
    dims = layout.strip("()").split(", ")
    axis = next(i for i, n in enumerate(dims) if n.isdigit())
    if t.dim() != len(dims) or t.shape[axis] != int(dims[axis]):
        raise ValueError(f"{name} must be a {len(dims)}-D tensor {layout}, got shape {tuple(t.shape)}")


@overload
def flash_attn_qkvpacked_func(qkv: torch.Tensor, dropout_p: float = ...,
                              softmax_scale: Optional[float] = ..., causal: bool = ...,
                              window_size: Tuple[int, int] = ..., softcap: float = ...,
                              alibi_slopes: Optional[torch.Tensor] = ..., deterministic: bool = ...,
                              return_attn_probs: Literal[False] = ..., *, return_lse: Literal[False] = ...,
                              sinks: Optional[torch.Tensor] = ...,
                              attention_chunk: int = ...) -> torch.Tensor: ...
@overload
def flash_attn_qkvpacked_func(qkv: torch.Tensor, dropout_p: float = ...,
                              softmax_scale: Optional[float] = ..., causal: bool = ...,
                              window_size: Tuple[int, int] = ..., softcap: float = ...,
                              alibi_slopes: Optional[torch.Tensor] = ..., deterministic: bool = ...,
                              return_attn_probs: Literal[False] = ..., *, return_lse: Literal[True],
                              sinks: Optional[torch.Tensor] = ...,
                              attention_chunk: int = ...) -> Tuple[torch.Tensor, torch.Tensor]: ...
@overload
def flash_attn_qkvpacked_func(qkv: torch.Tensor, dropout_p: float = ...,
                              softmax_scale: Optional[float] = ..., causal: bool = ...,
                              window_size: Tuple[int, int] = ..., softcap: float = ...,
                              alibi_slopes: Optional[torch.Tensor] = ..., deterministic: bool = ...,
                              *, return_attn_probs: Literal[True], return_lse: bool = ...,
                              sinks: Optional[torch.Tensor] = ...,
                              attention_chunk: int = ...) -> Tuple[torch.Tensor, torch.Tensor, Optional[torch.Tensor]]: ...
@overload
def flash_attn_qkvpacked_func(qkv: torch.Tensor, dropout_p: float = ...,
                              softmax_scale: Optional[float] = ..., causal: bool = ...,
                              window_size: Tuple[int, int] = ..., softcap: float = ...,
                              alibi_slopes: Optional[torch.Tensor] = ..., deterministic: bool = ...,
                              return_attn_probs: bool = ..., *, return_lse: bool = ...,
                              sinks: Optional[torch.Tensor] = ...,
                              attention_chunk: int = ...) -> AttnOutput: ...
def flash_attn_qkvpacked_func(qkv: torch.Tensor, dropout_p: float = 0.0,
                              softmax_scale: Optional[float] = None, causal: bool = False,
                              window_size: Tuple[int, int] = (-1, -1), softcap: float = 0.0,
                              alibi_slopes: Optional[torch.Tensor] = None,
                              deterministic: bool = False, return_attn_probs: bool = False, *,
                              return_lse: bool = False, sinks: Optional[torch.Tensor] = None,
                              attention_chunk: int = 0) -> AttnOutput:
    """qkv: (batch_size, seqlen, 3, nheads, headdim); the rest (``return_lse``,
    ``sinks`` and ``attention_chunk`` included) as :func:`flash_attn_func`.  The three slices are
    used in place (no copy)."""
    _check_packed(qkv, "qkv", "(batch, seqlen, 3, nheads, headdim)")
    q, k, v = qkv.unbind(2)
    return flash_attn_func(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap,
                           alibi_slopes, deterministic, return_attn_probs, return_lse=return_lse, sinks=sinks,
                           attention_chunk=attention_chunk)


@overload
def flash_attn_kvpacked_func(q: torch.Tensor, kv: torch.Tensor, dropout_p: float = ...,
                             softmax_scale: Optional[float] = ..., causal: bool = ...,
                             window_size: Tuple[int, int] = ..., softcap: float = ...,
                             alibi_slopes: Optional[torch.Tensor] = ..., deterministic: bool = ...,
                             return_attn_probs: Literal[False] = ..., *, return_lse: Literal[False] = ...,
                             sinks: Optional[torch.Tensor] = ...,
                             attention_chunk: int = ...) -> torch.Tensor: ...
@overload
def flash_attn_kvpacked_func(q: torch.Tensor, kv: torch.Tensor, dropout_p: float = ...,
                             softmax_scale: Optional[float] = ..., causal: bool = ...,
                             window_size: Tuple[int, int] = ..., softcap: float = ...,
                             alibi_slopes: Optional[torch.Tensor] = ..., deterministic: bool = ...,
                             return_attn_probs: Literal[False] = ..., *, return_lse: Literal[True],
                             sinks: Optional[torch.Tensor] = ...,
                             attention_chunk: int = ...) -> Tuple[torch.Tensor, torch.Tensor]: ...
@overload
def flash_attn_kvpacked_func(q: torch.Tensor, kv: torch.Tensor, dropout_p: float = ...,
                             softmax_scale: Optional[float] = ..., causal: bool = ...,
                             window_size: Tuple[int, int] = ..., softcap: float = ...,
                             alibi_slopes: Optional[torch.Tensor] = ..., deterministic: bool = ...,
                             *, return_attn_probs: Literal[True], return_lse: bool = ...,
                             sinks: Optional[torch.Tensor] = ...,
                             attention_chunk: int = ...) -> Tuple[torch.Tensor, torch.Tensor, Optional[torch.Tensor]]: ...
@overload
def flash_attn_kvpacked_func(q: torch.Tensor, kv: torch.Tensor, dropout_p: float = ...,
                             softmax_scale: Optional[float] = ..., causal: bool = ...,
                             window_size: Tuple[int, int] = ..., softcap: float = ...,
                             alibi_slopes: Optional[torch.Tensor] = ..., deterministic: bool = ...,
                             return_attn_probs: bool = ..., *, return_lse: bool = ...,
                             sinks: Optional[torch.Tensor] = ...,
                             attention_chunk: int = ...) -> AttnOutput: ...
def flash_attn_kvpacked_func(q: torch.Tensor, kv: torch.Tensor, dropout_p: float = 0.0,
                             softmax_scale: Optional[float] = None, causal: bool = False,
                             window_size: Tuple[int, int] = (-1, -1), softcap: float = 0.0,
                             alibi_slopes: Optional[torch.Tensor] = None,
                             deterministic: bool = False, return_attn_probs: bool = False, *,
                             return_lse: bool = False, sinks: Optional[torch.Tensor] = None,
                             attention_chunk: int = 0) -> AttnOutput:
    """kv: (batch_size, seqlen_k, 2, nheads_k, headdim); the rest (``return_lse``,
    ``sinks`` and ``attention_chunk`` included) as :func:`flash_attn_func`."""
    _check_packed(kv, "kv", "(batch, seqlen_k, 2, nheads_k, headdim)")
    k, v = kv.unbind(2)
    return flash_attn_func(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap,
                           alibi_slopes, deterministic, return_attn_probs, return_lse=return_lse, sinks=sinks,
                           attention_chunk=attention_chunk)


@overload
def flash_attn_varlen_qkvpacked_func(qkv: torch.Tensor, cu_seqlens: torch.Tensor, max_seqlen: int,
                                     dropout_p: float = ..., softmax_scale: Optional[float] = ..., causal: bool = ...,
                                     window_size: Tuple[int, int] = ..., softcap: float = ...,
                                     alibi_slopes: Optional[torch.Tensor] = ..., deterministic: bool = ...,
                                     return_attn_probs: Literal[False] = ..., *, return_lse: Literal[False] = ...,
                                     check_inputs: bool = ..., sinks: Optional[torch.Tensor] = ...,
                                     attention_chunk: int = ...) -> torch.Tensor: ...
@overload
def flash_attn_varlen_qkvpacked_func(qkv: torch.Tensor, cu_seqlens: torch.Tensor, max_seqlen: int,
                                     dropout_p: float = ..., softmax_scale: Optional[float] = ..., causal: bool = ...,
                                     window_size: Tuple[int, int] = ..., softcap: float = ...,
                                     alibi_slopes: Optional[torch.Tensor] = ..., deterministic: bool = ...,
                                     return_attn_probs: Literal[False] = ..., *, return_lse: Literal[True],
                                     check_inputs: bool = ..., sinks: Optional[torch.Tensor] = ...,
                                     attention_chunk: int = ...) -> Tuple[torch.Tensor, torch.Tensor]: ...
@overload
def flash_attn_varlen_qkvpacked_func(qkv: torch.Tensor, cu_seqlens: torch.Tensor, max_seqlen: int,
                                     dropout_p: float = ..., softmax_scale: Optional[float] = ..., causal: bool = ...,
                                     window_size: Tuple[int, int] = ..., softcap: float = ...,
                                     alibi_slopes: Optional[torch.Tensor] = ..., deterministic: bool = ...,
                                     *, return_attn_probs: Literal[True], return_lse: bool = ...,
                                     check_inputs: bool = ..., sinks: Optional[torch.Tensor] = ...,
                                     attention_chunk: int = ...) -> Tuple[torch.Tensor, torch.Tensor, Optional[torch.Tensor]]: ...
@overload
def flash_attn_varlen_qkvpacked_func(qkv: torch.Tensor, cu_seqlens: torch.Tensor, max_seqlen: int,
                                     dropout_p: float = ..., softmax_scale: Optional[float] = ..., causal: bool = ...,
                                     window_size: Tuple[int, int] = ..., softcap: float = ...,
                                     alibi_slopes: Optional[torch.Tensor] = ..., deterministic: bool = ...,
                                     return_attn_probs: bool = ..., *, return_lse: bool = ...,
                                     check_inputs: bool = ..., sinks: Optional[torch.Tensor] = ...,
                                     attention_chunk: int = ...) -> AttnOutput: ...
def flash_attn_varlen_qkvpacked_func(qkv: torch.Tensor, cu_seqlens: torch.Tensor, max_seqlen: int,
                                     dropout_p: float = 0.0, softmax_scale: Optional[float] = None, causal: bool = False,
                                     window_size: Tuple[int, int] = (-1, -1), softcap: float = 0.0,
                                     alibi_slopes: Optional[torch.Tensor] = None, deterministic: bool = False,
                                     return_attn_probs: bool = False, *, return_lse: bool = False,
                                     check_inputs: bool = False, sinks: Optional[torch.Tensor] = None,
                                     attention_chunk: int = 0) -> AttnOutput:
    """qkv: (total, 3, nheads, headdim), the packed rows of every sequence;
    cu_seqlens (batch_size + 1,) int32 and max_seqlen serve queries and keys
    alike; the rest as :func:`flash_attn_varlen_func`.  The three slices are
    used in place (no copy)."""
    _check_packed(qkv, "qkv", "(total, 3, nheads, headdim)")
    q, k, v = qkv.unbind(1)
    return flash_attn_varlen_func(q, k, v, cu_seqlens, cu_seqlens, max_seqlen, max_seqlen, dropout_p,
                                  softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
                                  return_attn_probs, return_lse=return_lse, check_inputs=check_inputs,
                                  sinks=sinks, attention_chunk=attention_chunk)


@overload
def flash_attn_varlen_kvpacked_func(q: torch.Tensor, kv: torch.Tensor, cu_seqlens_q: torch.Tensor,
                                    cu_seqlens_k: torch.Tensor, max_seqlen_q: int, max_seqlen_k: int,
                                    dropout_p: float = ..., softmax_scale: Optional[float] = ..., causal: bool = ...,
                                    window_size: Tuple[int, int] = ..., softcap: float = ...,
                                    alibi_slopes: Optional[torch.Tensor] = ..., deterministic: bool = ...,
                                    return_attn_probs: Literal[False] = ..., *, return_lse: Literal[False] = ...,
                                    check_inputs: bool = ..., sinks: Optional[torch.Tensor] = ...,
                                    attention_chunk: int = ...) -> torch.Tensor: ...
@overload
def flash_attn_varlen_kvpacked_func(q: torch.Tensor, kv: torch.Tensor, cu_seqlens_q: torch.Tensor,
                                    cu_seqlens_k: torch.Tensor, max_seqlen_q: int, max_seqlen_k: int,
                                    dropout_p: float = ..., softmax_scale: Optional[float] = ..., causal: bool = ...,
                                    window_size: Tuple[int, int] = ..., softcap: float = ...,
                                    alibi_slopes: Optional[torch.Tensor] = ..., deterministic: bool = ...,
                                    return_attn_probs: Literal[False] = ..., *, return_lse: Literal[True],
                                    check_inputs: bool = ..., sinks: Optional[torch.Tensor] = ...,
                                    attention_chunk: int = ...) -> Tuple[torch.Tensor, torch.Tensor]: ...
@overload
def flash_attn_varlen_kvpacked_func(q: torch.Tensor, kv: torch.Tensor, cu_seqlens_q: torch.Tensor,
                                    cu_seqlens_k: torch.Tensor, max_seqlen_q: int, max_seqlen_k: int,
                                    dropout_p: float = ..., softmax_scale: Optional[float] = ..., causal: bool = ...,
                                    window_size: Tuple[int, int] = ..., softcap: float = ...,
                                    alibi_slopes: Optional[torch.Tensor] = ..., deterministic: bool = ...,
                                    *, return_attn_probs: Literal[True], return_lse: bool = ...,
                                    check_inputs: bool = ..., sinks: Optional[torch.Tensor] = ...,
                                    attention_chunk: int = ...) -> Tuple[torch.Tensor, torch.Tensor, Optional[torch.Tensor]]: ...
@overload
def flash_attn_varlen_kvpacked_func(q: torch.Tensor, kv: torch.Tensor, cu_seqlens_q: torch.Tensor,
                                    cu_seqlens_k: torch.Tensor, max_seqlen_q: int, max_seqlen_k: int,
                                    dropout_p: float = ..., softmax_scale: Optional[float] = ..., causal: bool = ...,
                                    window_size: Tuple[int, int] = ..., softcap: float = ...,
                                    alibi_slopes: Optional[torch.Tensor] = ..., deterministic: bool = ...,
                                    return_attn_probs: bool = ..., *, return_lse: bool = ...,
                                    check_inputs: bool = ..., sinks: Optional[torch.Tensor] = ...,
                                    attention_chunk: int = ...) -> AttnOutput: ...
def flash_attn_varlen_kvpacked_func(q: torch.Tensor, kv: torch.Tensor, cu_seqlens_q: torch.Tensor,
                                    cu_seqlens_k: torch.Tensor, max_seqlen_q: int, max_seqlen_k: int,
                                    dropout_p: float = 0.0, softmax_scale: Optional[float] = None, causal: bool = False,
                                    window_size: Tuple[int, int] = (-1, -1), softcap: float = 0.0,
                                    alibi_slopes: Optional[torch.Tensor] = None, deterministic: bool = False,
                                    return_attn_probs: bool = False, *, return_lse: bool = False,
                                    check_inputs: bool = False, sinks: Optional[torch.Tensor] = None,
                                    attention_chunk: int = 0) -> AttnOutput:
    """kv: (total_k, 2, nheads_k, headdim); the rest as :func:`flash_attn_varlen_func`."""
    _check_packed(kv, "kv", "(total_k, 2, nheads_k, headdim)")
    k, v = kv.unbind(1)
    return flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p,
                                  softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
                                  return_attn_probs, return_lse=return_lse, check_inputs=check_inputs,
                                  sinks=sinks, attention_chunk=attention_chunk)


def scaled_dot_product_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: Optional[torch.Tensor] = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: Optional[float] = None,
    enable_gqa: bool = False,
) -> torch.Tensor:
    """Drop-in for ``torch.nn.functional.scaled_dot_product_attention``.

    Arguments:
        query: (..., nheads, seqlen_q, headdim), or (batch, seqlen_q, headdim)
        key:   (..., nheads_k, seqlen_k, headdim)
        value: (..., nheads_k, seqlen_k, headdim_v)
            Any number of leading batch dimensions, the same for all three
            (3-D inputs are (batch, seqlen, headdim) with one head).
            float16, bfloat16 or float32; last dimension with stride 1;
            headdim 1..512.
        attn_mask: None, or a mask broadcastable to (..., nheads, seqlen_q,
            seqlen_k) ((batch, seqlen_q, seqlen_k) for 3-D inputs): bool, True
            = attend (PyTorch's convention), or float16 / bfloat16 / float32,
            added to the scaled scores.  Read tile by tile with stride 0 along
            broadcast dims (never expanded in memory).  A float mask that
            requires grad receives its gradient, summed over its broadcast
            dims.  A row that the mask removes entirely (all False, or all
            -inf) outputs zeros with zero gradients, as PyTorch's SDPA does;
            a row of finite very negative values (-1e9, finfo.min) attends
            uniformly, also as PyTorch, with PyTorch's gradients (a float
            mask's calls carry the LSE's float32 rounding residual from the
            forward to the backward, which the row's normaliser needs beside
            scores that large).  Cannot be combined with is_causal
            (ValueError, as in PyTorch).
        dropout_p: float in [0, 1), as in :func:`flash_attn_func`; applied
            whenever > 0 (like PyTorch's function, which has no training flag).
        is_causal: causal mask aligned to the top-left corner, as in PyTorch:
            query i attends key j iff j <= i.  For seqlen_q = 2, seqlen_k = 4::

                1 0 0 0
                1 1 0 0

            and rows that attend no key (seqlen_q > seqlen_k never has any
            here) output zeros.  (flash_attn_func's causal aligns bottom-right.)
        scale: default 1/sqrt(headdim).
        enable_gqa: must be True when nheads != nheads_k; query head h then
            reads key/value head ``h // (nheads // nheads_k)``.

    Returns:
        (..., nheads, seqlen_q, headdim_v), the dtype of query.
    """
    plan_key = None
    if attn_mask is None and not torch.compiler.is_compiling():
        plan_key = _sdpa_key(query, key, value, dropout_p, is_causal, scale, enable_gqa)
        if plan_key is not None:
            plan = _PLANS.get(plan_key)
            if plan is not None:
                return plan.sdpa(query, key, value)
    return _sdpa(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, plan_key=plan_key)


def _sdpa(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, *, softcap=0.0, sinks=None,
          plan_key=None, causal_and_mask=False) -> torch.Tensor:
    """The SDPA entry's full path, and the same call with flash_attn_func's
    softcap and sinks (internal: the Transformers integration's masked calls
    of Gemma-2 / gpt-oss layers); plan_key: the public entry's plan key;
    causal_and_mask (internal: nn.MultiheadAttention's padding mask under its
    is_causal): the top-left causal mask and attn_mask together, which the
    public entry refuses as PyTorch does."""
    query, key, value = autocast_inputs(query, key, value)
    if (isinstance(query, torch.Tensor) and isinstance(key, torch.Tensor) and isinstance(value, torch.Tensor)
            and not (query.is_nested or key.is_nested or value.is_nested)
            and query.dim() == 4 and key.dim() == 4 and value.dim() == 4
            and query.shape[0] == key.shape[0] == value.shape[0]):
        # The common case, which every check of the general path below passes.
        is_causal = check_flag(is_causal, "is_causal")
        enable_gqa = check_flag(enable_gqa, "enable_gqa")
        q4, k4, v4, lead = query, key, value, ()
    else:
        q4, k4, v4, lead, is_causal, enable_gqa = _sdpa_inputs(query, key, value, is_causal, enable_gqa)
    check_qkv(("query", "key", "value"), (q4, k4, v4), _SDPA_LAYOUT, 4, 1)
    if q4.shape[1] != k4.shape[1] and not enable_gqa:
        raise ValueError(f"query has {q4.shape[1]} heads and key/value have {k4.shape[1]}: "
                         "pass enable_gqa=True for grouped-query attention")
    if attn_mask is not None and is_causal and not causal_and_mask:
        raise ValueError("attn_mask and is_causal=True cannot be combined (as in PyTorch): put the "
                         "causal mask into attn_mask")
    bias = None if attn_mask is None else check_attn_mask(
        attn_mask, query, tuple(query.shape[:-1]) + (key.shape[-2],), q4.shape[0], q4.shape[1])
    params = _params(q4, k4, check_scale(scale, "scale", q4.shape[-1]), (-1, 0 if is_causal else -1),
                     dropout_p=dropout_p, batch=q4.shape[0], heads=q4.shape[1], attn_bias=bias,
                     bottom_right=False, softcap=softcap, sinks=sinks)
    if plan_key is not None and query.dim() == 4 and sinks is None:  # (_CallPlan.sdpa passes no sinks)
        plan = _new_plan(q4.transpose(1, 2), k4.transpose(1, 2), v4.transpose(1, 2), params, 0)
        if plan is not None:
            result = plan.sdpa(query, key, value, params.rng_seed)
            _store(plan_key, plan)
            return result
    out, _ = ops.attention_base2(q4.transpose(1, 2), k4.transpose(1, 2), v4.transpose(1, 2), params)
    out = out.transpose(1, 2)
    if query.dim() == 3:
        return out.squeeze(1)
    return out.reshape(lead + tuple(out.shape[1:])) if query.dim() != 4 else out


def _sdpa_key(query, key, value, dropout_p, is_causal, scale, enable_gqa) -> Optional[tuple]:
    """The SDPA entry's plan key (as _flash_key), None if the call cannot be planned."""
    if not (is_causal.__class__ is bool and enable_gqa.__class__ is bool and dropout_p.__class__ in _NUMBER
            and (scale is None or scale.__class__ in _NUMBER) and _plannable()):
        return None
    tensors = _qkv_key(query, key, value)
    if tensors is None or len(tensors[0]) != 4:  # plans are made for 4-D inputs only
        return None
    return ("sdpa", is_causal, enable_gqa, scale, dropout_p, tensors, env_snapshot(PLAN_ENV))


def _sdpa_inputs(query, key, value, is_causal, enable_gqa):
    """The SDPA entry's inputs as 4-D (batch, heads, seqlen, headdim) tensors,
    with the leading dims they had, and the checked flags."""
    for name, t in (("query", query), ("key", key), ("value", value)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        check_dense(name, t)
        if t.dim() < 3:
            raise ValueError(f"{name} must have at least 3 dims (..., seqlen, headdim), got shape "
                             f"{tuple(t.shape)}")
    if not (query.dim() == key.dim() == value.dim()):
        raise ValueError(f"query, key, value must have the same number of dims, got "
                         f"{query.dim()}, {key.dim()}, {value.dim()}")
    is_causal = check_flag(is_causal, "is_causal")
    enable_gqa = check_flag(enable_gqa, "enable_gqa")
    lead = tuple(query.shape[:-3]) if query.dim() >= 4 else tuple(query.shape[:-2])
    if query.dim() == 3:  # (batch, seqlen, headdim): one head
        q4, k4, v4 = (t.unsqueeze(1) for t in (query, key, value))
    else:
        for name, t in (("key", key), ("value", value)):
            if tuple(t.shape[:-3]) != lead:
                raise ValueError(f"{name} must have the leading (batch) dims of query {lead}, got "
                                 f"{tuple(t.shape[:-3])}")
        batch = math.prod(lead)  # (not -1: a zero-size dim elsewhere leaves -1 ambiguous)
        q4, k4, v4 = (t.reshape((batch,) + tuple(t.shape[-3:])) if t.dim() != 4 else t
                      for t in (query, key, value))
    return q4, k4, v4, lead, is_causal, enable_gqa
