"""CPU models of the Hopper backward (flashattn_triton/kernels/hopper/bwd.py),
in the style of tests/hopper_model.py (whose Barrier / Buffer / parity-wait
checks it uses).

emulate_backward: a float64 NumPy emulation of the kernel's schedule (the
grid of key blocks, each consumer's masked and unmasked query-tile loops
with its own m_full, TMA's zero fill past N, lse2 = +inf and delta = 0 for
rows past N_Q, the score keys and the dK / dV / dQ columns of each consumer
in either path, dQ chunks clipped at N_Q) against dense float64 gradients.
With a sliding window (window_lo: row i sees keys j >= i + window_lo) it
follows HAS_WINDOW: a key block's query tiles end at _query_end's m_hi,
each consumer's window edge [m_wide, m_hi) is masked, and its two passes
over one masked and one unmasked loop must visit the tiles in the
producer's order (check_window, window_cases; WINDOW_BROKEN: wrong forms
that the check must catch).

With GROUP_SPLIT = S (cfg) a KV head's group of G query heads is cut into
S slices: program (key block, batch, slice h of H_KV * S) reads K / V of KV
head h // S, walks query heads [h * G / S, + G / S) and writes float32
partials of slice h, which the group sum adds (in slice order) into dK /
dV; every partial row is written once (check_split, split_cases;
SPLIT_BROKEN: wrong forms that the check must catch).

With v narrower than q and k (d_v = v.shape[-1] < d; the kernel's split
Q K^T, d = 192 with dv = 128, on the SPLIT_D path only) Q and K are read as
two column chunks, [0, d_v) and [d_v, d): S = Q0 K0^T + Q1 K1^T; consumer c
owns V's (and Q's / K's first chunk's) columns [c d_v / 2, + d_v / 2) and
the second chunk's [d_v + c (d - d_v) / 2, + (d - d_v) / 2) of dV, dK and dQ,
dQ in DQ_CHUNK pieces from either chunk of K (check_qk1, qk1_cases;
QK1_BROKEN: wrong forms that the check must catch).

simulate: one CTA's mbarrier protocol.

Agents: the producer (K and V once, then per query tile the lse2 / delta rows
of a ring slot, a generic store, and Q and dO by TMA) and the consumer
warpgroups, each following its step function: the keys-as-M path
(_attn_bwd_step) or SPLIT_D (_attn_bwd_step_split) with one or two P^T / dS^T
buffers, the Q / dO slot released before or after dQ, dQ staged in one or
more chunks.  Asynchronous engines (TMA loads, wgmma groups that retire in
issue order, TMA reduce-adds) complete at random times, with per-run biases
so that any agent may run far ahead.  Every parity wait is checked against
the completion count it means, every buffer access against what the buffer
holds (and against copies or reads in flight), and every dQ chunk of every
tile and consumer must be reduced exactly once.

    python tests/hopper_bwd_model.py     # the full sweep
"""

from __future__ import annotations

import math
import os
import random
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hopper_model import (AsyncState, Barrier, Buffer, ProtocolError, _wait, run_agents,  # noqa: E402
                          snake_tile, work_count)


def cdiv(a, b):
    return -(-a // b)


def visible(n_q, n_k, shift, window_lo=None):
    """(n_q, n_k) bool: row i sees key j (j <= i + shift when shift is not
    None, j >= i + window_lo when window_lo is not None)."""
    i, j = np.arange(n_q)[:, None], np.arange(n_k)[None, :]
    vis = np.ones((n_q, n_k), bool)
    if shift is not None:
        vis &= j <= i + shift
    if window_lo is not None:
        vis &= j >= i + window_lo
    return vis


def reference_grads(q, k, v, do, scale, shift, window_lo=None):
    """Dense float64 dq, dk, dv; (B, H, N, d) arrays, GQA by head groups;
    shift None: no mask, else row i sees keys j <= i + shift; window_lo
    (None: none): row i sees only keys j >= i + window_lo; a row that sees
    no key has P = 0."""
    group = q.shape[1] // k.shape[1]
    kk, vv = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    s = q @ kk.swapaxes(-1, -2) * scale  # (matmul: einsum without optimize is ~10x slower here)
    n_q, n_k = q.shape[2], k.shape[2]
    vis = visible(n_q, n_k, shift, window_lo)
    s = np.where(vis, s, -np.inf)
    m = s.max(-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    e = np.exp(s - m)
    l_ = e.sum(-1, keepdims=True)
    p = np.where(l_ > 0, e / np.where(l_ > 0, l_, 1.0), 0.0)
    lse = np.where(l_[..., 0] > 0, m[..., 0] + np.log(np.where(l_[..., 0] > 0, l_[..., 0], 1.0)), -np.inf)
    o = p @ vv
    dp = do @ vv.swapaxes(-1, -2)
    delta = (do * o).sum(-1)
    ds = p * (dp - delta[..., None])
    dq = ds @ kk * scale
    dk = ds.swapaxes(-1, -2) @ q * scale
    dv = p.swapaxes(-1, -2) @ do
    b, h = q.shape[:2]
    dk = dk.reshape(b, k.shape[1], group, n_k, -1).sum(2)
    dv = dv.reshape(b, k.shape[1], group, n_k, -1).sum(2)
    return dq, dk, dv, lse / math.log(2), delta


def work_tile(i, pid, n_programs, n_kb, n_bh, heads_first):
    """_bwd_work_tile of the kernel: (key block, batch * KV head)."""
    t = snake_tile(i, pid, n_programs)
    return (t // n_bh, t % n_bh) if heads_first else (t % n_kb, t // n_kb)


def work_order(n_kb, n_bh, cfg):
    """Per program, its (key block, batch * KV head) work tiles in order: the
    persistent grid of min(NUM_SMS, tiles) programs when cfg has NUM_SMS,
    else one program per tile (the 2-D grid).  Every tile is dealt exactly
    once (checked)."""
    n_work = n_kb * n_bh
    if not cfg.get("NUM_SMS"):
        return [[(n, bh)] for bh in range(n_bh) for n in range(n_kb)]
    g = min(cfg["NUM_SMS"], n_work)
    order = [[work_tile(i, pid, g, n_kb, n_bh, cfg.get("HEADS_FIRST", False))
              for i in range(work_count(pid, g, n_work))] for pid in range(g)]
    dealt = sorted(t for prog in order for t in prog)
    if dealt != sorted((n, bh) for n in range(n_kb) for bh in range(n_bh)):
        raise AssertionError(f"work tiles dealt {dealt[:6]}... not each tile once")
    return order


def query_end(start_n, m_lo, n_mb, n_k, window_lo, bm, bn, broken=""):
    """bwd.py's _query_end: the end of key block start_n's query tiles, the
    tile after the last row that sees its last key (rows i <= j - window_lo
    see key j), at least m_lo; n_mb without a window."""
    if window_lo is None:
        return n_mb
    last = min(start_n + bn, n_k)            # one past the block's last key
    if broken == "hi_first_key":              # the block's first key instead of its last
        last = start_n + 1
    elif broken == "hi_off_by_one":           # the tile of the row before
        last -= 1
    return max(min(cdiv(max(last - window_lo, 0), bm), n_mb), m_lo)


def consumer_order(m_lo, m_full, m_wide, m_hi, broken=""):
    """[(query tile, masked)] of one head in a consumer's loop order: without a
    window (m_wide = m_hi = n_mb) the masked loop then the unmasked one; with
    one, bwd.py's two passes over one masked and one unmasked loop (the
    diagonal's masked tiles and the whole ones, then the window edge's masked
    ones)."""
    out = []
    passes = [(m_lo, m_full, m_full, m_wide), (m_wide, m_hi, m_full, m_full)]
    if broken == "pass_order":                # the edge's masked tiles before the whole ones
        passes = [(m_lo, m_full, m_full, m_full), (m_wide, m_hi, m_full, m_wide)]
    for masked_lo, masked_hi, whole_lo, whole_hi in passes:
        out += [(mb, True) for mb in range(masked_lo, masked_hi)]
        out += [(mb, False) for mb in range(whole_lo, whole_hi)]
    return out


def emulate_backward(q, k, v, do, scale, shift, cfg, window_lo=None, broken="", stats=None, ref=None):
    """The kernel's schedule in float64.  cfg: BLOCK_M, BLOCK_N, SPLIT_D,
    DQ_CHUNK (NUM_CONSUMERS = 2); persistent with NUM_SMS (and HEADS_FIRST):
    the work tiles in each program's order, a tile's state (dK / dV
    accumulators, masks) rebuilt from its own coordinates.  lse2 and delta
    come from the dense reference (as the forward and the preprocess give
    them).  window_lo: HAS_WINDOW (row i sees keys j >= i + window_lo; the
    launcher's clamped value); broken: one of WINDOW_BROKEN.  Each
    consumer's loop order must be the producer's (the ring), else
    AssertionError.  stats (a dict): adds the query tiles visited and those
    of them that hold a visible pair of the key block.  ref: reference_grads'
    result, if already computed.  cfg GROUP_SPLIT = S: the group split
    (module doc; broken: one of SPLIT_BROKEN).  v narrower than q (d_v <
    d): the split Q K^T (module doc; SPLIT_D only; broken: one of
    QK1_BROKEN).  cfg Q_HALVES (split Q K^T only): 128-row query tiles
    whose scores consumer c computes for its half of the rows over every key
    (_attn_bwd_step_qk1_halves; broken: one of Q_HALVES_BROKEN)."""
    bm, bn, split, chunk = cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["SPLIT_D"], cfg.get("DQ_CHUNK", 0)
    halves = cfg.get("Q_HALVES", False)
    nc = 2
    batch, h_q, n_q, d = q.shape
    d_v = v.shape[-1]
    qk1 = d - d_v  # the second column chunk of Q and K (0: none)
    assert qk1 >= 0 and (not qk1 or split), "split Q K^T: SPLIT_D only"
    h_kv, n_k = k.shape[1], k.shape[2]
    group = h_q // h_kv
    n_split = cfg.get("GROUP_SPLIT", 1)
    assert group % n_split == 0, (group, n_split)
    heads = group // n_split   # query heads per program
    h_part = h_kv * n_split     # the kernel's "KV heads": slices of groups
    sub_n, cols = bn // nc, d // nc
    chunk = chunk or cols
    _, _, _, lse2, delta = ref or reference_grads(q, k, v, do, scale, shift, window_lo)
    vis_all = visible(n_q, n_k, shift, window_lo)
    qk_scale = scale / math.log(2)
    causal = shift is not None
    dq = np.zeros_like(q)
    dk = np.full((batch, h_part, n_k, d), np.nan)  # partials of the slices (dK itself when S = 1)
    dv = np.full((batch, h_part, n_k, d_v), np.nan)
    n_mb = cdiv(n_q, bm)

    def rows_of(t, lo, n):  # a TMA box: zero past the tensor's N
        out = np.zeros((n, t.shape[-1]))
        hi = min(lo + n, t.shape[0])
        if hi > lo:
            out[:hi - lo] = t[lo:hi]
        return out

    written = np.zeros(dk.shape[:3], int)
    for prog in work_order(cdiv(n_k, bn), batch * h_part, cfg):
        for pid_n, pid_bh in prog:
            b, hp = pid_bh // h_part, pid_bh % h_part
            hkv = hp % h_kv if broken == "split_kv_head" else hp // n_split  # (K / V of) its KV head
            if broken == "split_head_base":     # every slice from the group's first query head
                hq_of = [hkv * group + g for g in range(heads)]
            elif broken == "split_missing_head":  # a slice without its last query head
                hq_of = [hp * heads + g for g in range(max(heads - 1, 0) if n_split > 1 else heads)]
            else:
                hq_of = [hp * heads + g for g in range(heads)]
            start_n = pid_n * bn
            m_lo = min(max(start_n - shift, 0) // bm, n_mb) if causal else 0
            m_hi = query_end(start_n, m_lo, n_mb, n_k, window_lo, bm, bn, broken)
            m_full, m_wide = [], []
            for c in range(nc):
                # consumer c's score keys: its sub_n, or with Q_HALVES the whole block
                key0, n_keys = (start_n, bn) if halves else (start_n + c * sub_n, sub_n)
                if key0 + n_keys > n_k:
                    m_full.append(n_mb)
                elif causal:
                    m_full.append(min(max(cdiv(key0 + n_keys - 1 - shift, bm), m_lo), n_mb))
                else:
                    m_full.append(m_lo)
                if window_lo is None:
                    m_wide.append(n_mb)
                else:
                    m_full[c] = min(m_full[c], m_hi)
                    edge_key = key0 + sub_n - 1 if broken == "wide_last_key" else key0
                    m_wide.append(min(max(max(edge_key - window_lo + 1, 0) // bm, m_full[c]), m_hi))
                    assert m_lo <= m_full[c] <= m_wide[c] <= m_hi, (m_lo, m_full[c], m_wide[c], m_hi)
            # The ring: both consumers take the producer's query tiles in its order.
            masked_at = []
            for c in range(nc):
                order = consumer_order(m_lo, m_full[c], m_wide[c], m_hi,
                                       broken if window_lo is not None else "")
                if [mb for mb, _ in order] != list(range(m_lo, m_hi)):
                    raise AssertionError(f"consumer {c} visits {order} but the producer loads "
                                         f"tiles {m_lo}..{m_hi - 1}")
                masked_at.append(dict(order))
            if stats is not None:
                keys_seen = vis_all[:, start_n:start_n + bn]
                for mb in range(m_lo, m_hi):
                    stats["visited"] = stats.get("visited", 0) + heads
                    stats["useful"] = stats.get("useful", 0) + heads * bool(keys_seen[mb * bm:(mb + 1) * bm].any())
                stats["needed"] = stats.get("needed", 0) + heads * sum(
                    bool(keys_seen[mb * bm:(mb + 1) * bm].any()) for mb in range(n_mb))
            kt, vt = rows_of(k[b, hkv], start_n, bn), rows_of(v[b, hkv], start_n, bn)
            dk_acc, dv_acc = np.zeros((bn, d)), np.zeros((bn, d_v))
            for hq in hq_of:
                for mb in range(m_lo, m_hi):
                    start_m = mb * bm
                    qt, dot = rows_of(q[b, hq], start_m, bm), rows_of(do[b, hq], start_m, bm)
                    rows = start_m + np.arange(bm)
                    l2 = np.full(bm, np.inf)
                    dl = np.zeros(bm)
                    ok = rows < n_q
                    l2[ok] = lse2[b, hq, rows[ok]]
                    l2 = np.where(l2 == -np.inf, np.inf, l2)
                    dl[ok] = delta[b, hq, rows[ok]] * scale
                    p = np.zeros((bm, bn))
                    ds = np.zeros((bm, bn))
                    if halves:
                        for c in range(nc):  # consumer c: its half of the rows, every key
                            hr = slice(c * (bm // 2), (c + 1) * (bm // 2))
                            keys = start_n + np.arange(bn)
                            s_c = qt[hr, :d_v] @ kt[:, :d_v].T + qt[hr, d_v:] @ kt[:, d_v:].T
                            p_c = np.exp2(s_c * qk_scale - l2[hr, None])
                            if masked_at[c][mb]:
                                vis = keys[None, :] < n_k
                                if causal:
                                    vis = vis & (keys[None, :] <= rows[hr, None] + shift)
                                p_c = np.where(vis, p_c, 0.0)
                            p[hr] = p_c
                            ds[hr] = p_c * ((dot[hr] @ vt.T) * scale - dl[hr, None])
                        for c in range(nc):
                            _qk1_halves_products(c, nc, p, ds, qt, dot, kt, dk_acc, dv_acc, dq[b, hq], start_m, bm,
                                                 n_q, d_v, qk1, chunk, broken)
                        continue
                    for c in range(nc):  # the score keys of consumer c
                        kc = slice(c * sub_n, (c + 1) * sub_n)
                        keys = start_n + np.arange(bn)[kc]
                        if qk1:  # two wgmmas into one S: columns [0, d_v) and [d_v, d)
                            s_c = qt[:, :d_v] @ kt[kc, :d_v].T
                            if broken != "qk1_no_second":
                                s_c = s_c + qt[:, d_v:] @ kt[kc, d_v:].T
                        else:
                            s_c = qt @ kt[kc].T
                        p_c = np.exp2(s_c * qk_scale - l2[:, None])
                        if masked_at[c][mb]:  # the masked loop
                            vis = keys[None, :] < n_k
                            if causal:
                                vis = vis & (keys[None, :] <= rows[:, None] + shift)
                            if window_lo is not None and broken != "no_window_mask":
                                vis = vis & (keys[None, :] >= rows[:, None] + window_lo)
                            p_c = np.where(vis, p_c, 0.0)
                        dp_c = dot @ vt[kc].T
                        p[:, kc] = p_c
                        ds[:, kc] = p_c * (dp_c * scale - dl[:, None])
                    for c in range(nc):
                        if qk1:
                            _qk1_products(c, nc, p, ds, qt, dot, kt, dk_acc, dv_acc, dq[b, hq], start_m, bm, n_q,
                                          d_v, qk1, chunk, broken)
                            continue
                        if split:  # consumer c: head-dim columns of every key
                            cc = slice(c * cols, (c + 1) * cols)
                            dv_acc[:, cc] += p.T @ dot[:, cc]
                            dk_acc[:, cc] += ds.T @ qt[:, cc]
                        else:      # consumer c: its keys, every column
                            kc = slice(c * sub_n, (c + 1) * sub_n)
                            dv_acc[kc] += p[:, kc].T @ dot
                            dk_acc[kc] += ds[:, kc].T @ qt
                        for j in range(cols // chunk):  # dQ reduce-adds, clipped at N_Q
                            c0 = c * cols + j * chunk
                            _add_dq(dq[b, hq], ds @ kt[:, c0:c0 + chunk], start_m, c0, n_q)
            n_ok = max(0, min(bn, n_k - start_n))
            written[b, hp, start_n:start_n + n_ok] += 1
            dk[b, hp, start_n:start_n + n_ok] = dk_acc[:n_ok]
            dv[b, hp, start_n:start_n + n_ok] = dv_acc[:n_ok]
    if not (written == 1).all():
        raise AssertionError("a key's dK / dV written other than once")
    if n_split > 1:
        dk, dv = group_sum(dk, h_kv, n_split, broken), group_sum(dv, h_kv, n_split, broken)
    return dq, dk, dv


def _add_dq(dq_head, part, r0, col, n_q):
    """A dQ piece (rows from r0, columns from col) into one head's dQ,
    clipped at N_Q as a TMA reduce-add is."""
    n_ok = max(0, min(part.shape[0], n_q - r0))
    dq_head[r0:r0 + n_ok, col:col + part.shape[1]] += part[:n_ok]


def _qk1_products(c, nc, p, ds, qt, dot, kt, dk_acc, dv_acc, dq_head, start_m, bm, n_q, d_v, qk1, chunk,
                  broken=""):
    """Consumer c's products of one query tile with a split Q K^T
    (_attn_bwd_step_qk1): its vc = d_v / nc columns of dV and of dK's first
    chunk, its k1c = qk1 / nc columns of dK's second chunk (at d_v + c k1c),
    and the same columns of dQ in chunk-wide pieces (first-chunk pieces,
    then second-chunk ones), each clipped at N_Q."""
    vc, k1c = d_v // nc, qk1 // nc
    cc = slice(c * vc, (c + 1) * vc)
    dv_cols = slice(c * k1c, c * k1c + vc) if broken == "qk1_dv_cols" else cc  # (a stride of the second chunk)
    dv_acc[:, dv_cols] += p.T @ dot[:, cc]
    dk_acc[:, cc] += ds.T @ qt[:, cc]
    c1 = d_v + c * k1c  # the second chunk's columns of this consumer
    dest1 = c * k1c if broken == "qk1_dk1_offset" else c1  # (without the chunk's base d_v)
    dk_acc[:, dest1:dest1 + k1c] += ds.T @ qt[:, c1:c1 + k1c]
    pieces = [c * vc + j * chunk for j in range(vc // chunk)] + [c1 + j * chunk for j in range(k1c // chunk)]
    for col in pieces:
        src = col - d_v if broken == "qk1_dq_source" and col >= d_v else col  # (K's first chunk read)
        _add_dq(dq_head, ds @ kt[:, src:src + chunk], start_m, col, n_q)


def _qk1_halves_products(c, nc, p, ds, qt, dot, kt, dk_acc, dv_acc, dq_head, start_m, bm, n_q, d_v, qk1, chunk,
                         broken=""):
    """Consumer c's products of one 128-row query tile with Q_HALVES
    (_attn_bwd_step_qk1_halves): its vc columns of dV and dK's first chunk
    and k1c of the second, each the sum of one product per half of the
    rows; dQ of its own half of the rows over every column, in pieces of
    chunk columns (dividing both of K's chunks: the first chunk's pieces,
    then the second's), clipped at N_Q."""
    vc, k1c, half = d_v // nc, qk1 // nc, bm // 2
    cc = slice(c * vc, (c + 1) * vc)
    c1 = slice(d_v + c * k1c, d_v + (c + 1) * k1c)
    for h in range(2):
        if broken == "qh_own_half" and h != c:  # (the other consumer's rows left out)
            continue
        hr = slice(h * half, (h + 1) * half)
        dv_acc[:, cc] += p[hr].T @ dot[hr, cc]
        dk_acc[:, cc] += ds[hr].T @ qt[hr, cc]
        dk_acc[:, c1] += ds[hr].T @ qt[hr, c1]
    r0 = start_m + (1 - c if broken == "qh_dq_rows" else c) * half  # (dQ into the other half's rows)
    mine = slice(c * half, (c + 1) * half)
    assert d_v % chunk == 0 and qk1 % chunk == 0, (d_v, qk1, chunk)
    for col in range(0, d_v + qk1, chunk):
        _add_dq(dq_head, ds[mine] @ kt[:, col:col + chunk], r0, col, n_q)


# Wrong forms of Q_HALVES; check_qk1 must reject each on some Q_HALVES cases.
Q_HALVES_BROKEN = ("qh_own_half", "qh_dq_rows")


def group_sum(part, h_kv, n_split, broken=""):
    """kernels/bwd.py's _bwd_group_sum: out[b, h] = the sum over s, in order,
    of part[b, h * n_split + s]."""
    out = np.zeros((part.shape[0], h_kv) + part.shape[2:])
    for h in range(h_kv):
        for s in range(n_split):
            # broken "split_sum_layout": slices taken as (split, KV head)-major
            out[:, h] += part[:, s * h_kv + h if broken == "split_sum_layout" else h * n_split + s]
    return out


def check_backward(batch, h_q, h_kv, n_q, n_k, shift, cfg, d=16, seed=0, window_lo=None, broken="", stats=None,
                   d_v=None):
    """Max error of the emulated dq, dk, dv against the dense reference, relative
    to max(1, max |ref|) (a gradient can be 0 up to rounding, e.g. with one key).
    d_v: v's and do's width (default d; less: the split Q K^T)."""
    rng = np.random.default_rng(seed)
    if d_v is None or d_v == d:  # (the draws of before)
        d_v = d
        q, do = rng.standard_normal((2, batch, h_q, n_q, d))
        k, v = rng.standard_normal((2, batch, h_kv, n_k, d))
    else:
        q = rng.standard_normal((batch, h_q, n_q, d))
        do = rng.standard_normal((batch, h_q, n_q, d_v))
        k = rng.standard_normal((batch, h_kv, n_k, d))
        v = rng.standard_normal((batch, h_kv, n_k, d_v))
    scale = 0.5
    full_ref = reference_grads(q, k, v, do, scale, shift, window_lo)
    got = emulate_backward(q, k, v, do, scale, shift, cfg, window_lo, broken, stats, full_ref)
    ref = full_ref[:3]
    if window_lo is not None:
        # Keys that no row sees get dK = dV = 0 exactly, rows that see no key dQ = 0.
        vis = visible(n_q, n_k, shift, window_lo)
        dq, dk, dv = got
        if dk[..., ~vis.any(0), :].any() or dv[..., ~vis.any(0), :].any() or dq[..., ~vis.any(1), :].any():
            return float("inf")
    return max(float(np.abs(g - r).max() / max(np.abs(r).max(), 1.0)) for g, r in zip(got, ref))


def variant_cfgs(full=True):
    """The tilings the variant sweeps (split, window) run: the keys-as-M path
    at both query-tile heights and SPLIT_D; with full, the persistent order
    of both paths too (NUM_SMS programs, HEADS_FIRST on one)."""
    cfgs = [dict(BLOCK_M=64, BLOCK_N=128, SPLIT_D=False),
            dict(BLOCK_M=128, BLOCK_N=128, SPLIT_D=False),
            dict(BLOCK_M=64, BLOCK_N=64, SPLIT_D=True, DQ_CHUNK=2)]
    if full:
        cfgs += [dict(BLOCK_M=64, BLOCK_N=64, SPLIT_D=True, DQ_CHUNK=2, NUM_SMS=3),
                 dict(BLOCK_M=64, BLOCK_N=128, SPLIT_D=False, NUM_SMS=2, HEADS_FIRST=True)]
    return cfgs


# Wrong forms of the group split; check_split must reject each on some cases.
SPLIT_BROKEN = ("split_kv_head", "split_head_base", "split_missing_head", "split_sum_layout")


def split_cases(full=True):
    """(batch, h_q, h_kv, n_q, n_k, shift, cfg, window_lo) with GROUP_SPLIT
    = S > 1: GQA groups of 2, 4, 8 and MQA, every S dividing the group,
    ragged lengths, Nq != Nk, causal both alignments and not, a window; the
    keys-as-M path at both query-tile heights, SPLIT_D, persistent."""
    cfgs = variant_cfgs(full)
    shapes = [(2, 8, 2, 150, 300), (1, 4, 1, 333, 211), (1, 8, 1, 77, 130)]
    if full:
        shapes += [(2, 6, 3, 200, 64), (1, 8, 4, 1, 97), (1, 16, 2, 130, 257)]
    cases = []
    for (b, hq, hkv, nq, nk), cfg in ((s, c) for s in shapes for c in cfgs):
        group = hq // hkv
        for n_split in (s for s in range(2, group + 1) if group % s == 0):
            for shift in (None, nk - nq, 0) if full else (None, nk - nq):
                cases.append((b, hq, hkv, nq, nk, shift, dict(cfg, GROUP_SPLIT=n_split), None))
            if full:
                cases.append((b, hq, hkv, nq, nk, nk - nq, dict(cfg, GROUP_SPLIT=n_split), nk - nq - 50))
    return cases


def check_split(case, broken=""):
    """check_backward of a split_cases entry (inf where the emulation raised:
    a partial row written other than once)."""
    *args, window_lo = case
    try:
        return check_backward(*args, window_lo=window_lo, broken=broken)
    except AssertionError:
        if not broken:
            raise
        return float("inf")


# Wrong forms of the split Q K^T; check_qk1 must reject each on some cases.
QK1_BROKEN = ("qk1_no_second", "qk1_dk1_offset", "qk1_dq_source", "qk1_dv_cols")


def qk1_cases(full=True):
    """(batch, h_q, h_kv, n_q, n_k, shift, cfg, d, d_v): the split Q K^T at
    d = 24, d_v = 16 (192 / 128 scaled by 1/8: per consumer 8 columns of the
    first chunk, 4 of the second, DQ_CHUNK = 4: two pieces and one, as 64,
    32 and 32 at full size), 64 keys per program, 64-row query tiles;
    ragged lengths, Nq != Nk, GQA and MQA, causal bottom-right, top-left,
    negative and not; persistent and GROUP_SPLIT forms; Q_HALVES (128-row
    tiles, dQ in pieces of the second chunk's 8 columns: 2 + 1, as 64 + 64
    and 64 at full size; or of 4: 4 + 2, as 32-column pieces)."""
    base = dict(BLOCK_M=64, BLOCK_N=64, SPLIT_D=True, DQ_CHUNK=4)
    halves = dict(BLOCK_M=128, BLOCK_N=64, SPLIT_D=True, DQ_CHUNK=8, Q_HALVES=True)
    cfgs = [base, dict(base, GROUP_SPLIT=2), halves, dict(halves, DQ_CHUNK=4)]
    if full:
        cfgs += [dict(base, NUM_SMS=3), dict(base, DQ_CHUNK=2), dict(base, NUM_SMS=2, GROUP_SPLIT=2),
                 dict(halves, NUM_SMS=3), dict(halves, GROUP_SPLIT=2)]
    shapes = [(1, 2, 1, 333, 211), (2, 2, 2, 77, 130), (1, 4, 2, 150, 300)]
    if full:
        shapes += [(1, 1, 1, 1, 97), (1, 8, 1, 130, 33), (1, 2, 1, 257, 129)]
    cases = []
    for (b, hq, hkv, nq, nk), cfg in ((s, c) for s in shapes for c in cfgs):
        if cfg.get("GROUP_SPLIT", 1) > 1 and (hq // hkv) % cfg["GROUP_SPLIT"]:
            continue
        for shift in (None, nk - nq, 0, -37) if full else (None, nk - nq, 0):
            cases.append((b, hq, hkv, nq, nk, shift, cfg, 24, 16))
    return cases


def check_qk1(case, broken=""):
    """check_backward of a qk1_cases entry (inf where the emulation raised)."""
    *args, d, d_v = case
    try:
        return check_backward(*args, d=d, d_v=d_v, broken=broken)
    except AssertionError:
        if not broken:
            raise
        return float("inf")


def lower_diagonal(left, shift, n_q, n_k):
    """fwd.py's lower_diagonal: window_lo = shift - left clamped to [-n_q, n_k]."""
    return min(max(shift - left, -n_q), n_k)


# Wrong forms of the window path; check_window must reject each on some cases.
WINDOW_BROKEN = ("hi_first_key", "hi_off_by_one", "wide_last_key", "no_window_mask", "pass_order")


def window_cases(full=True):
    """(batch, h_q, h_kv, n_q, n_k, shift, cfg, window_lo): windows of 0,
    narrower than a query tile, about a tile or a key block, and wider than
    N (clamped), causal bottom-right and top-left and a left bound only;
    Nq < Nk and Nq > Nk, ragged lengths, GQA; the keys-as-M path at both
    query-tile heights, SPLIT_D, persistent."""
    cfgs = variant_cfgs(full)
    shapes = [(1, 2, 1, 333, 211), (1, 1, 1, 300, 300), (1, 2, 2, 130, 517)]
    if full:
        shapes += [(2, 4, 2, 150, 300), (1, 1, 1, 257, 129), (1, 1, 1, 1, 97), (1, 2, 1, 700, 700)]
    # 1 and 129: the row that sees a key block's last key (127 - window_lo
    # at shift 0) is the first row of a query tile of 64 or 128 rows; 5000:
    # wider than N (window_lo clamped to -Nq).
    lefts = (0, 1, 5, 63, 129, 130, 5000) if full else (0, 37, 129, 5000)
    cases = []
    for (b, hq, hkv, nq, nk), cfg in ((s, c) for s in shapes for c in cfgs):
        for causal in ("br", "tl", None):
            wshift = 0 if causal == "tl" else nk - nq
            shift = None if causal is None else wshift
            for left in lefts:
                cases.append((b, hq, hkv, nq, nk, shift, cfg, lower_diagonal(left, wshift, nq, nk)))
    return cases


def check_window(case, broken="", stats=None):
    """check_backward of a window_cases entry (inf where the emulation raised:
    a consumer's loops out of the producer's order)."""
    *args, window_lo = case
    try:
        return check_backward(*args, window_lo=window_lo, broken=broken, stats=stats)
    except AssertionError:
        if not broken:
            raise
        return float("inf")


def backward_cases(full=True):
    """(batch, h_q, h_kv, n_q, n_k, shift, cfg): the d = 256 configuration's
    tiling (scaled to small d), its variants and the keys-as-M path, ragged
    lengths, GQA, causal shifts (bottom-right, top-left, negative, and 30 / 62,
    where a consumer's last diagonal row is the first row of a query tile).
    Masking the keys past N_K is not observable here (their zero-filled K
    and V rows give 0 in dQ, and their dK / dV rows are dropped), nor is
    lse2 = -inf read as +inf (such rows lie only in masked tiles)."""
    cfgs = [dict(BLOCK_M=64, BLOCK_N=64, SPLIT_D=True, DQ_CHUNK=2),
            dict(BLOCK_M=64, BLOCK_N=64, SPLIT_D=True, DQ_CHUNK=0),
            dict(BLOCK_M=64, BLOCK_N=128, SPLIT_D=True, DQ_CHUNK=4),
            dict(BLOCK_M=64, BLOCK_N=128, SPLIT_D=False),
            dict(BLOCK_M=128, BLOCK_N=128, SPLIT_D=False),
            # persistent: a few programs, several work tiles each
            dict(BLOCK_M=64, BLOCK_N=64, SPLIT_D=True, DQ_CHUNK=2, NUM_SMS=3),
            dict(BLOCK_M=64, BLOCK_N=128, SPLIT_D=False, NUM_SMS=2, HEADS_FIRST=True)]
    shapes = [(1, 2, 1, 333, 211), (2, 2, 2, 77, 130), (1, 1, 1, 1, 97), (1, 2, 1, 200, 64), (1, 1, 1, 130, 33)]
    if full:
        shapes += [(2, 4, 2, 150, 300), (1, 3, 1, 64, 64), (1, 1, 1, 257, 129)]
    cases = []
    for (b, hq, hkv, nq, nk), cfg in ((s, c) for s in shapes for c in cfgs):
        for shift in (None, nk - nq, 0, -37, 30, 62):
            cases.append((b, hq, hkv, nq, nk, shift, cfg))
    return cases


class BwdCTA(AsyncState):
    def __init__(self, nc, ns, ds_bufs, stage_bufs=1):
        super().__init__(nc + 1)  # (index nc: the producer's TMA reduce-adds, NAMED_BAR = 2)
        self.nc, self.ns, self.ds_bufs, self.stage_bufs = nc, ns, ds_bufs, stage_bufs
        self.kv_ready = Barrier("kv_ready", 1)
        self.kv_empty = Barrier("kv_empty", nc)  # persistent: both consumers are done with K / V
        self.q_ready = [Barrier(f"q_ready[{s}]", 1) for s in range(ns)]
        self.do_ready = [Barrier(f"do_ready[{s}]", 1) for s in range(ns)]
        self.qdo_empty = [Barrier(f"qdo_empty[{s}]", nc) for s in range(ns)]
        # ds_ready[b] per buffer; with one buffer, ds_ready[1] is its 'free' barrier.
        self.ds_ready = [Barrier(f"ds_ready[{b}]", nc) for b in range(2)]
        # NAMED_BAR: one hardware barrier of the consumers, completed once per tile;
        # with NAMED_BAR = 2 the dQ hand-off to the producer (nc + 1 parties each)
        self.consumers_bar = Barrier("consumers_bar", nc)
        self.dq_full = Barrier("dq_full", nc + 1)
        self.dq_empty = Barrier("dq_empty", nc + 1)
        self.k, self.v = Buffer("K"), Buffer("V")
        self.k1 = Buffer("K1")  # split Q K^T: K's and Q's second column chunks
        self.q1 = [Buffer(f"Q1[{s}]") for s in range(ns)]
        self.q = [Buffer(f"Q[{s}]") for s in range(ns)]
        self.do = [Buffer(f"dO[{s}]") for s in range(ns)]
        self.stat = [Buffer(f"stat[{s}]") for s in range(ns)]
        # each consumer writes its own rows of the P^T / dS^T tiles
        self.pt = [[Buffer(f"Pt[{b}][{c}]") for c in range(nc)] for b in range(ds_bufs)]
        self.ds = [[Buffer(f"dSt[{b}][{c}]") for c in range(nc)] for b in range(ds_bufs)]
        # dQ staging: stage_bufs buffers per consumer (DQ_STAGE_BUFS), stage[c] the first
        self.stages = [[Buffer(f"dQstage[{c}][{k}]") for k in range(stage_bufs)] for c in range(nc)]
        self.stage = [row[0] for row in self.stages]
        # NAMED_BAR = 2 on the 128-row step: per consumer and staging slot a dQ-full and a
        # dQ-empty hardware barrier of that consumer and the producer (2 parties)
        self.piece_full = [[Barrier(f"piece_full[{c}][{k}]", 2) for k in range(stage_bufs)] for c in range(nc)]
        self.piece_empty = [[Barrier(f"piece_empty[{c}][{k}]", 2) for k in range(stage_bufs)] for c in range(nc)]
        self.reduced = []  # tags of the completed dQ reduce-adds

    def write(self, buf, tag):
        """A generic (register -> shared) store."""
        if buf.readers or buf.writing:
            raise ProtocolError(f"{buf.name} written while {buf.readers} asynchronous read(s) / a load of it run")
        buf.content = tag

    reduce = AsyncState.tma_store  # the dQ TMA reduce-add: a store as far as the protocol goes

    def stored(self, tag):
        self.reduced.append(tag)


def _waiter(offset):
    waits = {}

    def wait(bar, parity):
        n = waits.get(bar.name, 0)
        waits[bar.name] = n + 1
        return _wait(bar, parity, n + offset)
    return wait


def producer(cta, tiles, persistent=False, broken="", qk1=False, named_bar=0, dq_chunks=1):
    """tiles: the query-tile count of each work tile (one work tile unless
    persistent).  Persistent: per work tile the first ns query tiles, then
    K / V once both consumers released the previous tile's (kv_empty), then
    the rest; the ring counter runs on across work tiles.  qk1 (split Q
    K^T): Q and K each as two TMA copies on their one barrier, the expected
    transaction counting both (broken "qk1_expect_short": one copy's).
    named_bar 2 (2-D grid only): the slot of step it is free once the
    producer has retired step it - ns (both consumers' dq_full arrival,
    which it waits for, then both dQ halves' reduce-adds); after the load it
    waits for their reads and arrives on dq_empty (not after the last step);
    the steps left are retired at the end."""
    ns, nc = cta.ns, cta.nc
    wait = _waiter(0)  # the n-th wait on an 'empty' barrier needs n releases
    wait_full = _waiter(1)
    it = 0

    def retire(t):
        cta.dq_full.arrive()
        yield wait_full(cta.dq_full, t & 1)
        for c in range(nc):
            if cta.stage[c].content != ("dQ", t, c, 0):
                raise ProtocolError(f"reduce-add of step {t} reads {cta.stage[c].content} from {cta.stage[c].name}")
            cta.reduce(nc, cta.stage[c], ("dQ", t, c, 0))
        yield ("step",)

    def release(t, total):
        yield ("store_wait",)
        if t + 1 < total:
            cta.dq_empty.arrive()

    def load_qdo(it):
        s = it % ns
        yield wait(cta.qdo_empty[s], ((it // ns) & 1) ^ 1)
        cta.write(cta.stat[s], ("stat", it))
        if qk1:
            cta.q_ready[s].expect(1 if broken == "qk1_expect_short" else 2)
            cta.tma_load(cta.q1[s], ("Q1", it), cta.q_ready[s])
            yield ("step",)
        else:
            cta.q_ready[s].expect(1)
        cta.tma_load(cta.q[s], ("Q", it), cta.q_ready[s])
        yield ("step",)
        cta.do_ready[s].expect(1)
        cta.tma_load(cta.do[s], ("dO", it), cta.do_ready[s])
        yield ("step",)

    def retire_pieces(t, chunks, total_pieces):
        for j in range(chunks):
            q = t * chunks + j
            k = q % cta.stage_bufs
            for c in range(nc):
                cta.piece_full[c][k].arrive()
                yield wait_full(cta.piece_full[c][k], (q // cta.stage_bufs) & 1)
                buf = cta.stages[c][k]
                if buf.content != ("dQ", t, c, j):
                    raise ProtocolError(f"reduce-add of piece {j} of step {t} reads {buf.content} from {buf.name}")
                cta.reduce(nc, buf, ("dQ", t, c, j))
            yield ("step",)
            if broken != "piece_free_early":
                yield ("store_wait",)
            if q + cta.stage_bufs < total_pieces:
                for c in range(nc):
                    cta.piece_empty[c][k].arrive()

    if named_bar == 2 and qk1:  # the 128-row step's dQ pieces (Q_HALVES)
        assert not persistent
        total, chunks = tiles[0], dq_chunks
        for k in range(cta.stage_bufs):
            if k < total * chunks:
                for c in range(nc):
                    cta.piece_empty[c][k].arrive()  # the slots start free
        cta.kv_ready.expect(3)
        cta.tma_load(cta.k1, ("K1", 0), cta.kv_ready)
        cta.tma_load(cta.k, ("K", 0), cta.kv_ready)
        cta.tma_load(cta.v, ("V", 0), cta.kv_ready)
        yield ("step",)
        for it in range(total):
            yield from load_qdo(it)
            if it > 0:
                yield from retire_pieces(it - 1, chunks, total * chunks)
        if total > 0:
            yield from retire_pieces(total - 1, chunks, total * chunks)
        return

    if named_bar == 2:
        assert not persistent and not qk1
        total = tiles[0]
        if total > 0:
            cta.dq_empty.arrive()  # the staging buffers start free
        cta.kv_ready.expect(2)
        cta.tma_load(cta.k, ("K", 0), cta.kv_ready)
        cta.tma_load(cta.v, ("V", 0), cta.kv_ready)
        yield ("step",)
        for it in range(total):
            if it >= ns:
                yield from retire(it - ns)
            s = it % ns
            cta.write(cta.stat[s], ("stat", it))
            cta.q_ready[s].expect(1)
            cta.tma_load(cta.q[s], ("Q", it), cta.q_ready[s])
            cta.do_ready[s].expect(1)
            cta.tma_load(cta.do[s], ("dO", it), cta.do_ready[s])
            yield ("step",)
            if it >= ns:
                yield from release(it - ns, total)
        for t in range(max(total - ns, 0), total):
            yield from retire(t)
            yield from release(t, total)
        return

    for i, total in enumerate(tiles):
        n_first = min(total, ns) if persistent else 0
        for j in range(n_first):
            yield from load_qdo(it + j)
        if persistent and broken != "no_kv_empty":
            yield wait(cta.kv_empty, (i & 1) ^ 1)
        if qk1:
            cta.kv_ready.expect(2 if broken == "qk1_expect_short" else 3)
            cta.tma_load(cta.k1, ("K1", i), cta.kv_ready)
            yield ("step",)
        else:
            cta.kv_ready.expect(2)
        cta.tma_load(cta.k, ("K", i), cta.kv_ready)
        cta.tma_load(cta.v, ("V", i), cta.kv_ready)
        yield ("step",)
        for j in range(n_first, total):
            yield from load_qdo(it + j)
        it += total


def consumer(cta, c, tiles, split, dq_chunks, persistent=False, broken="", qk1=False, named_bar=False,
             stage_bufs=1, q_halves=False, k1_pieces=1, late_free=False, own_first=False):
    """qk1 (split Q K^T, SPLIT_D only; _attn_bwd_step_qk1): S as two wgmma
    groups (Q K and Q1 K1), dK as two (Q and Q1), the dQ pieces from K then
    K1 (the last piece K1's); the Q / dO slot is released once every group
    but the first dQ piece is done (broken "qk1_dk1_late": dK1 issued after
    that piece, so it may still read Q1 when the slot is released).
    named_bar (keys-as-M path only; NAMED_BAR 1 or 2): the dS^T exchange
    through one barrier of the consumers completed every tile (bar.sync:
    arrive and wait for that completion) instead of ds_ready[b] (broken
    "named_one_buffer": with one dS^T buffer instead of two); 2: dQ staged
    after a sync on dq_empty, then an arrival (no wait) on dq_full, the
    producer issuing the reduce-adds (broken "dq_full_early": the arrival
    before the wait for the tile's products; "no_dq_empty": no sync before
    staging); on the 128-row split Q K^T step (q_halves) 2 hands each dQ
    piece to the producer through its slot's two barriers of this consumer
    and the producer: a sync on piece_empty, the staging store, an arrival
    on piece_full (broken "piece_no_empty": no sync; the producer's
    "piece_free_early": its empty arrival before its reduce-adds have read
    the slot).  stage_bufs (split Q K^T; DQ_STAGE_BUFS): the dQ pieces take
    the consumer's staging buffers in turn (piece it * dq_chunks + j), each
    after tma.store_wait(stage_bufs - 1) (broken "stage_wait_short": after
    store_wait(stage_bufs), so the buffer's last reduce may still read it).
    q_halves (split Q K^T; _attn_bwd_step_qk1_halves): the dQ pieces read
    K / K1 and dS from registers, so with one P^T / dS^T buffer its 'free'
    arrival comes once the column products are done (broken
    "qh_free_early": before they are), or with late_free (Q_HALVES = 2) once
    the first dQ piece's reduce-add is issued.  k1_pieces: how many of the
    last dQ pieces read K1 (Q_HALVES with pieces narrower than K1: 2).
    own_first (OWN_FIRST, through ds_ready): with
    q_halves the column products over this consumer's own half are issued
    right after its arrival on ds_ready[b], the wait for that barrier only
    before the other half's; on the keys-as-M path likewise dQ's product
    over this consumer's keys, then the other's (broken
    "own_first_no_wait": every half's products before the wait)."""
    ns, nc, nb = cta.ns, cta.nc, cta.ds_bufs
    wait_ready = _waiter(1)   # the n-th wait on a 'ready' barrier needs n + 1 completions
    wait_free = _waiter(0)
    it = 0
    for i, total in enumerate(tiles):
        kk, vv, kk1 = ("K", i), ("V", i), ("K1", i)
        yield wait_ready(cta.kv_ready, 0 if broken == "kv_phase_fixed" else i & 1)
        if broken == "reset_phases":
            it = 0
        released = False
        for t in range(total):
            last = t == total - 1
            s, ph = it % ns, (it // ns) & 1
            q, do, stat = cta.q[s], cta.do[s], cta.stat[s]
            yield wait_ready(cta.q_ready[s], ph)
            cta.wgmma_issue(c, [(q, ("Q", it)), (cta.k, kk)])              # S (or S^T)
            if qk1:
                cta.wgmma_issue(c, [(cta.q1[s], ("Q1", it)), (cta.k1, kk1)])  # S += Q1 K1^T
            yield wait_ready(cta.do_ready[s], ph)
            cta.wgmma_issue(c, [(do, ("dO", it)), (cta.v, vv)])            # dP (or dP^T)
            yield ("wgmma_wait", 1)
            cta.read(stat, ("stat", it))                                  # lse2
            yield ("step",)
            yield ("wgmma_wait", 0)
            cta.read(stat, ("stat", it))                                  # delta
            if split:
                b = it % nb
                if nb == 1:
                    yield wait_free(cta.ds_ready[1], (it & 1) ^ 1)
                cta.write(cta.pt[b][c], ("Pt", it, c))
                cta.write(cta.ds[b][c], ("dSt", it, c))
                all_pt = [(cta.pt[b][x], ("Pt", it, x)) for x in range(nc)]
                all_ds = [(cta.ds[b][x], ("dSt", it, x)) for x in range(nc)]

                def column_products(halves):  # dV, dK, dK1 over these halves' rows
                    cta.wgmma_issue(c, [all_pt[x] for x in halves] + [(do, ("dO", it))])
                    cta.wgmma_issue(c, [all_ds[x] for x in halves] + [(q, ("Q", it))])
                    if qk1 and broken != "qk1_dk1_late":
                        cta.wgmma_issue(c, [all_ds[x] for x in halves] + [(cta.q1[s], ("Q1", it))])
                if own_first:
                    assert q_halves and nc == 2  # (the split Q K^T's 128-row step)
                    cta.ds_ready[b].arrive()
                    early = [c, 1 - c] if broken == "own_first_no_wait" else [c]
                    for x in early:                                        # behind this consumer's arrival
                        column_products([x])
                    yield wait_ready(cta.ds_ready[b], (it // nb) & 1)
                    for x in {0, 1} - set(early):                          # the other half's
                        column_products([x])
                else:
                    cta.ds_ready[b].arrive()
                    yield wait_ready(cta.ds_ready[b], (it // nb) & 1)
                    column_products(range(nc))
                dk1 = all_ds + [(cta.q1[s], ("Q1", it))]                   # dK's second chunk (qk1_dk1_late)

                def piece(j):  # dQ piece j reads K, or with qk1 the last k1_pieces K1
                    src = [(cta.k1, kk1) if qk1 and j >= dq_chunks - k1_pieces else (cta.k, kk)]
                    return src if q_halves else all_ds + src
                # Q_HALVES, one buffer: the 'free' arrival on ds_ready[1]
                free = cta.ds_ready[1] if q_halves and nb == 1 else None
                if free is not None and broken == "qh_free_early":
                    free.arrive()
                cta.wgmma_issue(c, piece(0))                               # dQ chunk 0
                if qk1 and broken == "qk1_dk1_late":
                    cta.wgmma_issue(c, dk1)
                yield ("wgmma_wait", 1)
                cta.qdo_empty[s].arrive()
                if free is not None and broken != "qh_free_early" and not late_free:
                    free.arrive()                                          # the column products read them
                for j in range(dq_chunks):
                    if persistent and last and j == dq_chunks - 1 and broken == "early_kv_release":
                        cta.kv_empty.arrive()   # before the last dQ product has read K
                        released = True
                    yield ("wgmma_wait", 0)
                    if j + 1 < dq_chunks:
                        cta.wgmma_issue(c, piece(j + 1))
                    elif nb == 1 and not q_halves:
                        cta.ds_ready[1].arrive()
                    if named_bar == 2:  # the producer adds it (retire_pieces)
                        q = it * dq_chunks + j
                        k = q % stage_bufs
                        if broken != "piece_no_empty":
                            cta.piece_empty[c][k].arrive()
                            yield wait_ready(cta.piece_empty[c][k], (q // stage_bufs) & 1)
                        cta.write(cta.stages[c][k], ("dQ", it, c, j))
                        cta.piece_full[c][k].arrive()
                        if free is not None and late_free and j == 0 and broken != "qh_free_early":
                            free.arrive()
                        yield ("step",)
                        continue
                    if stage_bufs == 1:
                        yield ("store_wait",)
                        buf = cta.stage[c]
                    else:
                        yield ("store_wait", stage_bufs - (broken != "stage_wait_short"))
                        buf = cta.stages[c][(it * dq_chunks + j) % stage_bufs]
                    cta.write(buf, ("dQ", it, c, j))
                    cta.reduce(c, buf, ("dQ", it, c, j))
                    if free is not None and late_free and j == 0 and broken != "qh_free_early":
                        free.arrive()                                      # (Q_HALVES = 2 / 4)
                    yield ("step",)
            else:
                b = 0 if broken == "named_one_buffer" else it % 2
                cta.wgmma_issue(c, [(do, ("dO", it))])                     # dV (P^T in registers)
                cta.wgmma_issue(c, [(q, ("Q", it))])                       # dK
                cta.write(cta.ds[b][c], ("dSt", it, c))
                all_ds = [(cta.ds[b][x], ("dSt", it, x)) for x in range(nc)]
                if named_bar:
                    cta.consumers_bar.arrive()
                    yield wait_ready(cta.consumers_bar, it & 1)
                    cta.wgmma_issue(c, all_ds + [(cta.k, kk)])                 # dQ
                elif own_first:
                    assert nc == 2
                    cta.ds_ready[b].arrive()
                    early = [c, 1 - c] if broken == "own_first_no_wait" else [c]
                    for x in early:                                        # dQ over these keys
                        cta.wgmma_issue(c, [all_ds[x], (cta.k, kk)])
                    yield wait_ready(cta.ds_ready[b], (it // 2) & 1)
                    for x in {0, 1} - set(early):
                        cta.wgmma_issue(c, [all_ds[x], (cta.k, kk)])
                else:
                    cta.ds_ready[b].arrive()
                    yield wait_ready(cta.ds_ready[b], (it // 2) & 1)
                    cta.wgmma_issue(c, all_ds + [(cta.k, kk)])                 # dQ
                if persistent and last and broken == "early_kv_release":
                    cta.kv_empty.arrive()       # before the last dQ product has read K
                    released = True
                if named_bar == 2:
                    if broken == "dq_full_early":
                        cta.dq_full.arrive()
                    yield ("wgmma_wait", 0)
                    if broken != "no_dq_empty":
                        cta.dq_empty.arrive()
                        yield wait_ready(cta.dq_empty, it & 1)
                    cta.write(cta.stage[c], ("dQ", it, c, 0))
                    if broken != "dq_full_early":
                        cta.dq_full.arrive()
                    yield ("step",)
                    it += 1
                    continue
                yield ("wgmma_wait", 0)
                cta.qdo_empty[s].arrive()
                yield ("store_wait",)
                cta.write(cta.stage[c], ("dQ", it, c, 0))
                cta.reduce(c, cta.stage[c], ("dQ", it, c, 0))
                yield ("step",)
            it += 1
        if persistent and not released:
            cta.kv_empty.arrive()
        yield ("step",)                                                   # the dK / dV stores
        if not persistent:
            yield ("store_wait",)
    yield ("store_wait",)


BROKEN = ("no_kv_empty", "early_kv_release", "kv_phase_fixed", "reset_phases")
NAMED_BAR_BROKEN = ("named_one_buffer",)
NAMED_BAR2_BROKEN = ("dq_full_early", "no_dq_empty")
PIECES_BROKEN = ("piece_no_empty", "piece_free_early")
QK1_PROTOCOL_BROKEN = ("qk1_expect_short", "qk1_dk1_late")
STAGE_BUFS_BROKEN = ("stage_wait_short",)
Q_HALVES_PROTOCOL_BROKEN = ("qh_free_early",)
OWN_FIRST_BROKEN = ("own_first_no_wait",)


def simulate(n_tiles, ns, split, ds_bufs, dq_chunks, seed, nc=2, max_steps=10 ** 6, work=None, broken="",
             qk1=False, named_bar=0, stage_bufs=1, q_halves=False, k1_pieces=1, late_free=False,
             own_first=False):
    """One CTA over n_tiles query tiles, or when work (a list of query-tile
    counts, one per work tile; 0 allowed) is given the persistent loop over
    those work tiles; returns the scheduler steps, raises ProtocolError on a
    deadlock, a wrong phase or a buffer hazard.  broken: one of BROKEN, a
    deliberately wrong persistent protocol (or of QK1_PROTOCOL_BROKEN with
    qk1: the split Q K^T's two copies / groups; SPLIT_D only; or of
    NAMED_BAR_BROKEN / NAMED_BAR2_BROKEN with named_bar).  named_bar 1: the
    keys-as-M path's dS^T exchange through the consumers' hardware barrier;
    2: also dQ through the producer (consumer, producer).  stage_bufs: dQ
    staging buffers per consumer (split Q K^T only; broken
    STAGE_BUFS_BROKEN).  k1_pieces, late_free, own_first: see consumer."""
    assert stage_bufs == 1 or qk1, "DQ_STAGE_BUFS > 1: the split Q K^T step"
    assert not q_halves or qk1, "Q_HALVES: the split Q K^T step"
    assert not qk1 or (split and dq_chunks > k1_pieces >= 1), "split Q K^T: SPLIT_D, pieces from K and K1"
    rng = random.Random(seed)
    persistent = work is not None
    tiles = list(work) if persistent else [n_tiles]
    n_tiles = sum(tiles)
    assert not named_bar or not split or (named_bar == 2 and q_halves), \
        "NAMED_BAR: the keys-as-M path, or 2 on the 128-row split Q K^T step"
    assert named_bar < 2 or not persistent, "NAMED_BAR = 2: the 2-D grid"
    cta = BwdCTA(nc, ns, ds_bufs if split else 2, stage_bufs)
    agents = {"producer": producer(cta, tiles, persistent, broken, qk1, named_bar, dq_chunks)}
    for c in range(nc):
        agents[f"consumer{c}"] = consumer(cta, c, tiles, split, dq_chunks if split else 1, persistent, broken, qk1,
                                          named_bar, stage_bufs, q_halves, k1_pieces, late_free, own_first)
    weight = {name: rng.choice((0.05, 1.0, 1.0, 20.0)) for name in list(agents) + ["async"]}
    steps = run_agents(agents, [cta], lambda name: (cta, int(name[8:]) if name != "producer" else nc),
                       weight, weight["async"], rng, max_steps)
    chunks = dq_chunks if split else 1
    want = sorted(("dQ", it, c, j) for it in range(n_tiles) for c in range(nc) for j in range(chunks))
    if sorted(cta.reduced) != want:
        raise ProtocolError(f"dQ reduces {sorted(cta.reduced)[:8]}... != {want[:8]}...")
    return steps


def protocol_cases(full=True):
    """(n_tiles, stages, split, ds_bufs, dq_chunks, seed): the keys-as-M path
    and SPLIT_D with each buffer / chunk choice the kernel allows."""
    cases = []
    seeds = range(40 if full else 6)
    for seed in seeds:
        rng = random.Random(seed)
        for ns in (1, 2, 3):
            cases.append((rng.randint(1, 9), ns, False, 2, 1, seed))
            for ds_bufs in (1, 2):
                for chunks in (1, 2, 4):
                    cases.append((rng.randint(1, 9), ns, True, ds_bufs, chunks, seed))
    return cases


def persistent_protocol_cases(full=True):
    """(n_tiles, stages, split, ds_bufs, dq_chunks, seed, work): the
    persistent loop, 2-6 work tiles per program of 0-6 query tiles each."""
    cases = []
    for seed in range(30 if full else 5):
        rng = random.Random(1000 + seed)
        for ns in (1, 2, 3):
            for split, ds_bufs, chunks in ((False, 2, 1), (True, 1, 1), (True, 1, 2), (True, 2, 1), (True, 2, 4)):
                work = [rng.randint(0, 6) for _ in range(rng.randint(2, 6))]
                cases.append((0, ns, split, ds_bufs, chunks, seed, work))
    return cases


def qk1_protocol_cases(full=True):
    """(n_tiles, stages, split, ds_bufs, dq_chunks, seed, work) of the split
    Q K^T: one or two P^T / dS^T buffers, 2-3 dQ pieces (three as at
    d = 192), 1-3 stages, the 2-D grid (work None) and persistent."""
    cases = []
    for seed in range(20 if full else 4):
        rng = random.Random(2000 + seed)
        for ns in (1, 2, 3):
            for ds_bufs in (1, 2):
                chunks = rng.choice((2, 3))
                cases.append((rng.randint(1, 9), ns, True, ds_bufs, chunks, seed, None))
                work = [rng.randint(0, 5) for _ in range(rng.randint(2, 5))]
                cases.append((0, ns, True, ds_bufs, chunks, seed, work))
    return cases


def qk1_broken_caught(broken, seeds=40, stage_bufs=1, q_halves=False, dq_chunks=3, k1_pieces=1, own_first=False):
    """Seeds on which the simulation rejects a QK1_PROTOCOL_BROKEN form (or
    with stage_bufs > 1 a STAGE_BUFS_BROKEN one, with q_halves a
    Q_HALVES_PROTOCOL_BROKEN one)."""
    caught = 0
    for seed in range(seeds):
        rng = random.Random(seed)
        work = [rng.randint(1, 3) for _ in range(3)]
        try:
            simulate(0, rng.choice((1, 2)), True, 1 if q_halves else rng.choice((1, 2)), dq_chunks, seed, work=work,
                     broken=broken, qk1=True, stage_bufs=stage_bufs, q_halves=q_halves, k1_pieces=k1_pieces,
                     own_first=own_first)
        except ProtocolError:
            caught += 1
    return caught


def pieces_protocol_cases(full=True):
    """(n_tiles, stages, stage_bufs, dq_chunks, late_free, own_first, seed)
    of NAMED_BAR = 2 on the 128-row split Q K^T step: one or two staging
    slots, three pieces (two from K, one from K1, as at d = 192) or six
    (32-column pieces), 1-2 ring stages, 0-7 query tiles."""
    cases = []
    for seed in range(24 if full else 6):
        rng = random.Random(3000 + seed)
        for stage_bufs in (1, 2):
            cases.append((rng.randint(0, 7), rng.choice((1, 2)), stage_bufs, rng.choice((3, 3, 6)),
                          rng.random() < 0.3, rng.random() < 0.3, seed))
    return cases


def simulate_pieces(case, broken=""):
    n_tiles, ns, stage_bufs, chunks, late_free, own_first, seed = case
    return simulate(n_tiles, ns, True, 1, chunks, seed, broken=broken, qk1=True, named_bar=2,
                    stage_bufs=stage_bufs, q_halves=True, k1_pieces=chunks // 3, late_free=late_free,
                    own_first=own_first)


def pieces_broken_caught(broken, seeds=40):
    """Seeds on which the simulation rejects a PIECES_BROKEN form (2-6 query
    tiles, two slots, three pieces)."""
    caught = 0
    for seed in range(seeds):
        rng = random.Random(seed)
        try:
            simulate_pieces((rng.randint(2, 6), rng.choice((1, 2)), 2, 3, False, False, seed), broken)
        except ProtocolError:
            caught += 1
    return caught


def broken_caught(broken, split, ds_bufs=2, chunks=1, seeds=60, named_bar=0):
    """Seeds (of `seeds`) on which the simulation rejects the deliberately
    broken persistent protocol (work: 3 work tiles of 1-3 query tiles; with
    named_bar = 2, which has no persistent form, one CTA of 1-6 query tiles)."""
    caught = 0
    for seed in range(seeds):
        rng = random.Random(seed)
        work = [rng.randint(1, 3) for _ in range(3)]
        try:
            if named_bar == 2:
                simulate(rng.randint(1, 6), rng.choice((1, 2)), split, ds_bufs, chunks, seed, broken=broken,
                         named_bar=2)
            else:
                simulate(0, rng.choice((1, 2)), split, ds_bufs, chunks, seed, work=work, broken=broken,
                         named_bar=named_bar)
        except ProtocolError:
            caught += 1
    return caught


def _emulation_sweep(cases, check, what, broken_forms=(), broken_what="", note=lambda: ""):
    """check(case) over cases: an error above 1e-9 raises; prints the worst
    one (``what`` names the cases, note() adds to the line), then for each
    broken form in how many cases check(case, broken) caught it."""
    worst = 0.0
    for case in cases:
        err = check(case)
        worst = max(worst, err)
        if not err <= 1e-9:
            raise AssertionError(f"{case}: relative error {err:.3e}")
    print(f"{len(cases)} emulated {what}, worst relative error {worst:.1e}{note()}")
    for broken in broken_forms:
        caught = sum(not check(case, broken) <= 1e-9 for case in cases)
        print(f"{broken_what} broken '{broken}': caught in {caught}/{len(cases)} cases")


def main():
    _emulation_sweep(backward_cases(), lambda case: check_backward(*case), "backward cases")
    stats = {}

    def check_window_counted(case, broken=None):  # the clean runs also count the query tiles visited
        return check_window(case, broken) if broken else check_window(case, stats=stats)
    _emulation_sweep(window_cases(), check_window_counted, "window cases", WINDOW_BROKEN, "window",
                     note=lambda: (f"; query tiles visited {stats['visited']}, of them holding a visible pair "
                                   f"{stats['useful']} (all such: {stats['needed']})"))
    _emulation_sweep(split_cases(), check_split, "group-split cases", SPLIT_BROKEN, "split")
    _emulation_sweep(qk1_cases(), check_qk1, "split Q K^T cases (d = 24, d_v = 16)", QK1_BROKEN, "split Q K^T")
    runs = 0
    for case in protocol_cases():
        simulate(*case)
        runs += 1
    print(f"{runs} protocol runs, no failure")
    runs = 0
    for *case, work in persistent_protocol_cases():
        simulate(*case, work=work)
        runs += 1
    print(f"{runs} persistent protocol runs, no failure")
    runs = 0
    for *case, work in qk1_protocol_cases():
        simulate(*case, work=work, qk1=True)
        runs += 1
    print(f"{runs} split Q K^T protocol runs, no failure")
    for broken in QK1_PROTOCOL_BROKEN:
        print(f"split Q K^T protocol broken '{broken}': caught on {qk1_broken_caught(broken)}/40 seeds")
    runs = 0
    for stage_bufs in (2, 3):
        for *case, work in qk1_protocol_cases():
            simulate(*case, work=work, qk1=True, stage_bufs=stage_bufs)
            runs += 1
    print(f"{runs} split Q K^T protocol runs with 2 / 3 dQ staging buffers, no failure")
    for stage_bufs in (2, 3):
        for broken in STAGE_BUFS_BROKEN:
            n = qk1_broken_caught(broken, stage_bufs=stage_bufs)
            print(f"dQ staging broken '{broken}' ({stage_bufs} buffers): caught on {n}/40 seeds")
    for broken in BROKEN:
        for split, ds_bufs, chunks in ((False, 2, 1), (True, 1, 2), (True, 2, 1)):
            n = broken_caught(broken, split, ds_bufs, chunks)
            print(f"broken '{broken}' split={split} ds_bufs={ds_bufs} chunks={chunks}: caught on {n}/60 seeds")


if __name__ == "__main__":
    main()
