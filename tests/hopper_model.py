"""CPU models of the Hopper (Gluon) forward, flashattn_triton/kernels/hopper/fwd.py,
which cannot run in Triton's interpreter.

* ``emulate_forward``: a NumPy transliteration of the kernel's schedule (the
  grid or the persistent loop with its snake order, the work-tile
  coordinates and, with a sliding window, each work tile's first key tile,
  each consumer warpgroup's first masked tile, unmasked and masked loops,
  the PAIRED grouping, the tiles a warpgroup releases unread, TMA's zero
  fill past N and clipping of stores) computing in float64; compared with a
  dense reference, it checks that every (batch, head, row) is written
  exactly once and sees exactly the keys it must, and that every consumer
  takes each ring use the producer loads once (reading the tile loaded
  there) and one ping-pong turn after another.
* ``simulate_protocol``: the mbarrier protocol of one CTA (producer, 1-3
  consumer warpgroups, the K/V ring, Q buffers reused to stage O, ping-pong
  turns) as cooperative agents under a random scheduler, with TMA copies,
  wgmma groups and TMA stores completing asynchronously at random times.
  Every wait uses the kernel's parity formula and is also checked against
  the barrier's true completion count (a parity wait cannot tell phase k
  from k + 2); every buffer access checks what the buffer holds and that no
  copy is writing it while an asynchronous read is in flight.  A state in
  which nothing can move is a deadlock.  Warpgroups may read only a random
  share of each work tile's key tiles and release the rest unread, before
  it (a window's head) and after it (past a causal diagonal), as
  _attn_fwd_skip does; ``SKIP_BROKEN`` / ``HEAD_BROKEN`` forms must fail.
* Split Q K^T (d != dv, kernels/hopper/fwd.py HEAD_DIM_V): ``split_scores``
  forms S from two column chunks as the kernel's two wgmmas do, the
  emulation takes V / O of another width (``split_forward_cases``,
  ``check_split``; ``SPLIT_BROKEN`` forms must fail), and the protocol
  simulation (``split=True``) loads Q and K as two copies on one barrier
  and issues S as two wgmma groups (``SPLIT_PROTOCOL_BROKEN`` must fail).
* Packed sequences with the isolation switch (IS_VARLEN = 2,
  ``varlen=True``): the last consumer zeroes the last V tile's rows past the
  sequence with threads' stores, and the consumers that reach that tile meet
  at a named barrier (``NamedBarrier``) before P V (``TAIL_BROKEN`` must
  fail).
* ``makespans``: the busiest SM's work under the persistent snake order, a
  plain round-robin, the hardware's dispatch of the non-persistent grid and
  the DYNAMIC scheduler (greedy claims from the counter, longest first).
* ``simulate_dynamic``: the DYNAMIC scheduler's protocol over several CTAs
  sharing one tile counter: each producer claims the next tile with one
  atomic and publishes it in a two-slot shared-memory ring guarded by
  tile_ready mbarriers; the consumers read it there.  Checks every tile is
  processed exactly once by every consumer, no deadlock, no slot read before
  it is written or after it is overwritten; ``broken=`` variants (one slot,
  consumers claiming on their own, no wait before the read, a counter not
  reset) must fail.

The helpers mirror the kernel's integer formulas (``work_count``,
``work_tile``, ``tile_coords``); when the kernel changes they must change
with it.  ``python tests/hopper_model.py`` runs the full sweeps;
tests/test_hopper.py runs a reduced one on CPU.
"""

from __future__ import annotations

import argparse
import collections
import heapq
import itertools
import math
import random
import time

import numpy as np

LOG2E = 1.4426950408889634


# --------------------------------------------------------------------------- schedule (kernel formulas)

def cdiv(a, b):
    return -(-a // b)


def work_count(pid, n_programs, n_work):
    """schedule.snake_count: work tiles of program pid."""
    full = n_work // n_programs
    slot = pid + (full % 2) * (n_programs - 1 - 2 * pid)
    return full + int(slot < n_work % n_programs)


def snake_tile(i, pid, n_programs):
    """schedule.snake_tile: the number of program pid's i-th work tile."""
    return i * n_programs + pid + (i % 2) * (n_programs - 1 - 2 * pid)


def dynamic_tile(t, n_m, n_bh, heads_first, m_band=0, head_section=0):
    """_dynamic_tile: (pid_m, pid_bh) of work tile number t."""
    if heads_first:
        if head_section > 0:
            section, r = divmod(t, head_section * n_m)
            base = section * head_section
            width = min(n_bh - base, head_section)
            return n_m - 1 - r // width, base + r % width
        if m_band > 1:
            band, r = divmod(t, m_band * n_bh)
            top = n_m - 1 - band * m_band
            width = min(top + 1, m_band)
            return top - r % width, r // width
        return n_m - 1 - t // n_bh, t % n_bh
    return t % n_m, t // n_m


def work_tile(i, pid, n_programs, n_m, n_bh, heads_first, m_band=0, head_section=0):
    """_work_tile: (pid_m, pid_bh) of program pid's i-th work tile."""
    return dynamic_tile(snake_tile(i, pid, n_programs), n_m, n_bh, heads_first, m_band, head_section)


def tile_coords(pid_m, pid_bh, h_q, group, n_q, n_k, shift, rows, block_n, window_lo=None):
    """_tile_coords and _key_start: (b, hq, hkv, start_m, n_tiles, lo_tile);
    shift None = not causal, window_lo None = no window (lo_tile 0)."""
    off_b, off_hq = pid_bh // h_q, pid_bh % h_q
    start_m = pid_m * rows
    if shift is not None:
        last_row = min(start_m + rows, n_q) - 1
        end_n = max(min(n_k, last_row + shift + 1), 0)
    else:
        end_n = n_k
    n_tiles = max(cdiv(end_n, block_n), 1)
    lo_tile = 0 if window_lo is None else min(max(start_m + window_lo, 0) // block_n, n_tiles - 1)
    return off_b, off_hq, off_hq // group, start_m, n_tiles, lo_tile


def lower_diagonal(cfg, n_q, n_k):
    """fwd.lower_diagonal: the kernel's window_lo for cfg["WINDOW"] = (left,
    shift) (row i sees keys j >= i + shift - left), None without a window."""
    window = cfg.get("WINDOW")
    if window is None:
        return None
    left, shift = window
    return min(max(shift - left, -n_q), n_k)


def tile_order(batch, h_q, h_kv, n_q, n_k, shift, cfg):
    """The work tiles t = 0, 1, ... as _work_tile numbers them (coordinates
    as tile_coords), and the number of m-blocks and of (batch, head)s."""
    rows = cfg["BLOCK_M"] * cfg["NUM_CONSUMERS"]
    n_m, n_bh = cdiv(n_q, rows), batch * h_q
    lo = lower_diagonal(cfg, n_q, n_k)
    tiles = []
    for t in range(n_m * n_bh):
        pid_m, pid_bh = dynamic_tile(t, n_m, n_bh, cfg["HEADS_FIRST"], cfg.get("M_BAND", 0),
                                     cfg.get("HEAD_SECTION", 0))
        tiles.append(tile_coords(pid_m, pid_bh, h_q, h_q // h_kv, n_q, n_k, shift, rows, cfg["BLOCK_N"], lo))
    return tiles, n_m, n_bh


def dynamic_assignment(costs, n_programs, rng=None, lead=0):
    """The DYNAMIC schedule: tile numbers t of each program, in its order.

    Program p starts with tile p (no claim); the others go out in order t =
    G, G + 1, ... to whichever program claims first.  A program claims its
    next tile when its producer has issued the last load of the current
    one, 'lead' key tiles (the ring depth) before the consumers finish it;
    a tile's duration is its cost, times a random factor in [0.5, 1.5) when
    rng is given (the kernel's completion times are not predictable)."""
    n_work = len(costs)
    g = min(n_programs, n_work)
    out = [[p] for p in range(g)]
    busy = [0.0] * g          # when each program's consumers finish their current tile
    events = []               # (claim time, program)
    for p in range(g):
        dur = costs[p] * (rng.uniform(0.5, 1.5) if rng else 1.0)
        busy[p] = dur
        heapq.heappush(events, (max(busy[p] - lead, 0.0), p))
    nxt = g
    while nxt < n_work:
        _, p = heapq.heappop(events)
        out[p].append(nxt)
        dur = costs[nxt] * (rng.uniform(0.5, 1.5) if rng else 1.0)
        busy[p] += dur
        heapq.heappush(events, (max(busy[p] - lead, 0.0), p))
        nxt += 1
    return out, max(busy)


def program_tiles(batch, h_q, h_kv, n_q, n_k, shift, cfg):
    """Each program's work tiles [(b, hq, hkv, start_m, n_tiles, lo_tile)],
    in the order the kernel runs them (non-persistent: one each, in launch
    order, which is the persistent numbering t)."""
    order, n_m, n_bh = tile_order(batch, h_q, h_kv, n_q, n_k, shift, cfg)
    rows = cfg["BLOCK_M"] * cfg["NUM_CONSUMERS"]
    lo = lower_diagonal(cfg, n_q, n_k)

    def coords(pm, pb):
        return tile_coords(pm, pb, h_q, h_q // h_kv, n_q, n_k, shift, rows, cfg["BLOCK_N"], lo)
    if cfg.get("DYNAMIC"):
        # The tile numbering is tile_order's (_dynamic_tile = _work_tile's
        # numbering); which program gets which tile depends on timing.
        rng = random.Random(cfg.get("SEED", 0))
        progs, _ = dynamic_assignment([tl[4] - tl[5] for tl in order], cfg.get("NUM_SMS", 132), rng,
                                      lead=rng.choice((0, 2, 3)))
        return [[order[t] for t in p] for p in progs]
    if cfg.get("PERSISTENT"):
        g = min(cfg.get("NUM_SMS", 132), n_m * n_bh)
        return [[coords(*work_tile(i, p, g, n_m, n_bh, cfg["HEADS_FIRST"], cfg.get("M_BAND", 0),
                                   cfg.get("HEAD_SECTION", 0)))
                 for i in range(work_count(p, g, n_m * n_bh))] for p in range(g)]
    return [[t] for t in order]


def loop_iterations(lo, hi, paired):
    """_attn_fwd_loop's j sequence, two steps per trip when PAIRED."""
    if not paired:
        return list(range(lo, hi))
    n = max(hi - lo, 0)
    out = []
    for j in range(lo, lo + n - 1, 2):
        out += [j, j + 1]
    if n % 2 == 1:
        out.append(lo + n - 1)
    return out


# --------------------------------------------------------------------------- float64 emulation

def reference(q, k, v, scale, shift, window=None):
    """Dense float64 attention, (B, H, N, d) arrays; LSE in base 2.  Row i
    sees keys j <= i + shift (shift not None) and, with window = (left,
    wshift), j >= i + wshift - left."""
    group = q.shape[1] // k.shape[1]
    kk, vv = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    s = np.einsum("bhid,bhjd->bhij", q, kk) * scale
    i = np.arange(q.shape[2])[:, None]
    j = np.arange(k.shape[2])[None, :]
    if shift is not None:
        s = np.where(j <= i + shift, s, -np.inf)
    if window is not None:
        s = np.where(j >= i + window[1] - window[0], s, -np.inf)
    m = s.max(-1, keepdims=True)
    m_safe = np.where(np.isfinite(m), m, 0.0)
    p = np.exp(s - m_safe)
    l = p.sum(-1, keepdims=True)
    o = np.einsum("bhij,bhjd->bhid", p, vv) / np.where(l == 0, 1.0, l)
    lse = np.where(l[..., 0] == 0, -np.inf, (m_safe[..., 0] + np.log(np.where(l == 0, 1.0, l))[..., 0]) / math.log(2))
    return o, lse


def _softmax_update(s, m_i, l_i, rows, start_n, n_k, c, shift, masked, window_lo=None):
    if masked:
        cols = np.arange(s.shape[1])[None, :]
        keep = cols < n_k - start_n
        if shift is not None:
            keep = keep & (cols <= rows[:, None] + (shift - start_n))
        if window_lo is not None:
            keep = keep & (cols >= rows[:, None] + (window_lo - start_n))
        s = np.where(keep, s, -np.inf)
    m_new = np.maximum(m_i, s.max(1))
    m_ref = np.where(m_new == -np.inf, 0.0, m_new) if masked else m_new
    p = np.exp2(s * c - (m_ref * c)[:, None])
    alpha = np.exp2(m_i * c - m_ref * c)
    return p, alpha, m_new, l_i * alpha + p.sum(1)


class ScheduleError(AssertionError):
    """The emulated schedule broke one of its own invariants."""


def _consumer_runs(row0, n_tiles, lo_tile, n_q, n_k, shift, lo, cfg):
    """_attn_fwd_tile's index formulas for the warpgroup of rows [row0,
    row0 + BLOCK_M): (first, runs, n_own) with runs the (lo, hi, masked)
    loops after the first tile, in the kernel's order (with a window, its
    two passes: left edge masked, whole, right edge masked, whole (empty)).
    The tiles [lo_tile, first) and [n_own, n_tiles) are released unread."""
    bm, bn = cfg["BLOCK_M"], cfg["BLOCK_N"]
    skip = cfg.get("SKIP_TILES")
    if shift is not None:
        n_full = min(max(row0 + shift + 1, 0), n_k) // bn
        n_own = n_tiles
        if skip:
            n_own = max(min(cdiv(min(max(row0 + bm + shift, 0), n_k), bn), n_tiles), lo_tile + 1)
    else:
        n_full = n_k // bn
        n_own = n_tiles
    n_full = min(n_full, n_own)
    if lo is None:
        return 0, [(1, n_full, False), (max(n_full, 1), n_own, True)], n_own
    first = min(max(max(row0 + lo, 0) // bn, lo_tile), n_own - 1) if skip else lo_tile
    full_lo = min(max(cdiv(max(row0 + bm - 1 + lo, 0), bn), first + 1), n_own)
    n_full = max(n_full, full_lo)
    runs = [(first + 1, full_lo, True), (full_lo, n_full, False), (n_full, n_own, True), (full_lo, full_lo, False)]
    return first, runs, n_own


# Deliberately broken forms of the split Q K^T (cfg SPLIT_QK = d0: Q and K
# held as columns [0, d0) and [d0, d), S the sum of the two products) that
# the float64 check must catch: the second chunk dropped, its wgmma not
# accumulating (use_acc=False: S = Q1 K1^T only), its TMA column offset
# wrong (the second chunk loaded from column d - d0 instead of d0).
SPLIT_BROKEN = ("split_no_second", "split_no_acc", "split_offset")


def split_scores(qt, kt, cfg):
    """S = Q K^T as the kernel forms it: one product, or with SPLIT_QK = d0
    two wgmmas over column chunks [0, d0) and [d0, d), the second
    accumulating into the first (cfg SPLIT_BROKEN: a broken form)."""
    d0 = cfg.get("SPLIT_QK")
    if not d0:
        return qt @ kt.T
    broken = cfg.get("SPLIT_BROKEN")
    d = qt.shape[1]
    lo = d - d0 if broken == "split_offset" else d0  # TMA column of the second chunk
    width = d - d0
    s = qt[:, :d0] @ kt[:, :d0].T                       # wgmma 1: use_acc=False
    q1 = qt[:, lo:lo + width]
    k1 = kt[:, lo:lo + width]
    if broken == "split_no_second":
        return s
    if broken == "split_no_acc":
        return q1 @ k1.T
    return s + q1 @ k1.T                                # wgmma 2: accumulates into S


def emulate_forward(q, k, v, scale, shift, cfg):
    """The kernel's schedule in float64: returns (O, LSE base 2, writes per row).
    v (and O) may have another head dim than q and k (dv != d: cfg SPLIT_QK
    gives Q K^T's column split, split_scores).

    Also follows the producer's loads and each consumer's ring uses and
    ping-pong turns: raises ScheduleError unless every consumer takes every
    use of a work tile once, in order, reading (or releasing) the key tile
    loaded there, and the turns t0, t0 + 1, ... of the tile once each."""
    b, h_q, n_q, d = q.shape
    h_kv, n_k = k.shape[1], k.shape[2]
    dv = v.shape[-1]
    bm, bn, nc = cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["NUM_CONSUMERS"]
    rows_cta = bm * nc
    lo = lower_diagonal(cfg, n_q, n_k)
    # TMA: reads past N are zero (Q rows, K and V rows), stores past N_Q are clipped.
    n_qp, n_kp = cdiv(n_q, rows_cta) * rows_cta, cdiv(max(n_k, 1), bn) * bn + bn
    qp = np.zeros((b, h_q, n_qp, d))
    qp[:, :, :n_q] = q
    kp = np.zeros((b, h_kv, n_kp, d))
    vp = np.zeros((b, h_kv, n_kp, dv))
    kp[:, :, :n_k], vp[:, :, :n_k] = k, v
    o = np.full(q.shape[:3] + (dv,), np.nan)
    lse = np.full(q.shape[:3], np.nan)
    writes = np.zeros(q.shape[:3], dtype=np.int64)
    c = scale * LOG2E
    paired = cfg["PAIRED"]
    with np.errstate(invalid="ignore", over="ignore"):
        for tiles in program_tiles(b, h_q, h_kv, n_q, n_k, shift, cfg):
            # The producer's K/V loads, ring use by ring use (_load_work_tile).
            loads = [(ob, ohkv, j) for ob, _, ohkv, _, n_tiles, lo_tile in tiles for j in range(lo_tile, n_tiles)]
            g = 0
            for i, (ob, ohq, ohkv, start_m, n_tiles, lo_tile) in enumerate(tiles):
                for cons in range(nc):
                    row0 = start_m + cons * bm
                    rows = row0 + np.arange(bm)
                    first, runs, n_own = _consumer_runs(row0, n_tiles, lo_tile, n_q, n_k, shift, lo, cfg)
                    # Ring uses and turns counted from lo_tile (g0 + j: tile j's use, t0 + j its turn).
                    g0, t0 = g - lo_tile, g + i - lo_tile
                    uses, turns = [], []
                    for j in range(lo_tile, first):  # released unread, turn passed first
                        turns.append(t0 + j)
                        uses.append((g0 + j, j))
                    qt = qp[ob, ohq, row0:row0 + bm]
                    kt = lambda j: kp[ob, ohkv, j * bn:(j + 1) * bn]  # noqa: E731
                    vt = lambda j: vp[ob, ohkv, j * bn:(j + 1) * bn]  # noqa: E731
                    m_i = np.full(bm, -np.inf)
                    l_i = np.zeros(bm)
                    turns.append(t0 + first)
                    uses.append((g0 + first, first))
                    p, _, m_i, l_i = _softmax_update(split_scores(qt, kt(first), cfg), m_i, l_i, rows, first * bn,
                                                     n_k, c, shift, True, lo)
                    acc = np.zeros((bm, dv))
                    seen = [first]
                    for run_lo, run_hi, masked in runs:
                        for j in loop_iterations(run_lo, run_hi, paired):
                            seen.append(j)
                            turns.append(t0 + j)
                            uses.append((g0 + j, j))
                            p_new, alpha, m_i, l_i = _softmax_update(split_scores(qt, kt(j), cfg), m_i, l_i, rows,
                                                                     j * bn, n_k, c, shift, masked, lo)
                            acc = (acc + p @ vt(j - 1)) * alpha[:, None]
                            p = p_new
                    if seen != list(range(first, n_own)):
                        raise ScheduleError(f"tiles visited {seen}, expected [{first}, {n_own})")
                    turns.append(t0 + n_own)
                    acc = acc + p @ vt(n_own - 1)
                    # Tiles [n_own, n_tiles) are released unread (_attn_fwd_skip).
                    for j in range(n_own, n_tiles):
                        turns.append(t0 + j + 1)
                        uses.append((g0 + j, j))
                    if [u for u, _ in uses] != list(range(g, g + n_tiles - lo_tile)):
                        raise ScheduleError(f"tile {i} consumer {cons}: ring uses {uses}, expected "
                                            f"[{g}, {g + n_tiles - lo_tile})")
                    if any(loads[u] != (ob, ohkv, j) for u, j in uses):
                        raise ScheduleError(f"tile {i} consumer {cons}: a use holds another key tile")
                    if turns != list(range(g + i, g + i + n_tiles - lo_tile + 1)):
                        raise ScheduleError(f"tile {i} consumer {cons}: turns {turns} from {g + i}")
                    empty = l_i == 0.0
                    l_safe = np.where(empty, 1.0, l_i)
                    keep = rows < n_q
                    r = rows[keep]
                    o[ob, ohq, r] = (acc / l_safe[:, None])[keep]
                    lse[ob, ohq, r] = np.where(empty, -np.inf, m_i * c + np.log2(l_safe))[keep]
                    writes[ob, ohq, r] += 1
                g += n_tiles - lo_tile
    return o, lse, writes


def check_forward(batch, h_q, h_kv, n_q, n_k, shift, cfg, d=8, seed=0, dv=None):
    """'' if the emulation matches the reference and writes each row once, else
    why not; dv: V's head dim (default d; cfg SPLIT_QK for Q K^T's split)."""
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((batch, h_q, n_q, d))
    k = rng.standard_normal((batch, h_kv, n_k, d))
    v = rng.standard_normal((batch, h_kv, n_k, d if dv is None else dv))
    scale = d ** -0.5
    try:
        o, lse, writes = emulate_forward(q, k, v, scale, shift, cfg)
    except ScheduleError as exc:
        return f"schedule: {exc}"
    o_ref, lse_ref = reference(q, k, v, scale, shift, cfg.get("WINDOW"))
    if (writes != 1).any():
        return f"rows written {writes.min()}..{writes.max()} times"
    if not np.array_equal(np.isinf(lse), np.isinf(lse_ref)):
        return "-inf LSE rows differ"
    fin = np.isfinite(lse_ref)
    if fin.any() and np.abs(lse[fin] - lse_ref[fin]).max() > 1e-9:
        return f"LSE error {np.abs(lse[fin] - lse_ref[fin]).max():.2e}"
    err = np.abs(o - o_ref).max()
    if not err <= 1e-9:
        return f"O error {err:.2e}"
    return ""


# --------------------------------------------------------------------------- mbarrier protocol simulation

class ProtocolError(AssertionError):
    pass


class Barrier:
    """An mbarrier: arrival count, transaction bytes, completed phases."""

    def __init__(self, name, count):
        self.name, self.count, self.pending, self.tx, self.done = name, count, count, 0, 0

    def _check(self):
        if self.pending < 0:
            raise ProtocolError(f"{self.name}: more arrivals than its count in phase {self.done}")
        if self.pending == 0 and self.tx == 0:
            self.done += 1
            self.pending = self.count

    def arrive(self):
        self.pending -= 1
        self._check()

    def expect(self, nbytes):  # mbarrier.arrive.expect_tx
        self.tx += nbytes
        self.arrive()

    def complete_tx(self, nbytes):
        self.tx -= nbytes
        self._check()


class Buffer:
    def __init__(self, name):
        self.name, self.content, self.writing, self.readers = name, ("fresh",), False, 0


class NamedBarrier:
    """A hardware named barrier (bar.sync id, count): a completion comes when
    `count` warpgroups have arrived, and releases every one of them; the
    arrivals of one completion must name the same count."""

    def __init__(self, name):
        self.name, self.done, self.arrived, self.count = name, 0, 0, None

    def arrive(self, count):
        """One warpgroup's arrival; returns the completion it waits for."""
        if self.count is not None and self.count != count:
            raise ProtocolError(f"{self.name}: an arrival for {count} warpgroups joins one for {self.count}")
        self.count, self.arrived = count, self.arrived + 1
        gen = self.done
        if self.arrived == count:
            self.done, self.arrived, self.count = self.done + 1, 0, None
        return gen


class _Store:
    """One TMA store (or reduce-add) of a consumer: done once it has read its buffer."""
    done = False


class AsyncState:
    """The asynchronous operations of one CTA that both kernels' simulations
    share: TMA loads into buffers, wgmma groups reading buffers (retiring in
    issue order), TMA stores (or reduce-adds) reading a buffer, and the
    events that complete them."""

    def __init__(self, nc):
        self.events = []          # asynchronous completions that may fire: (kind, ...)
        self.wgmma = [[] for _ in range(nc)]   # per consumer: outstanding groups (buffers read, contents)
        self.stores = [0] * nc    # per consumer: TMA stores in flight
        self.store_order = [[] for _ in range(nc)]  # per consumer: its _Store records, in issue order

    # TMA load: the buffer is undefined until the copy completes the barrier's transaction.
    def tma_load(self, buf, tag, bar):
        if buf.readers:
            raise ProtocolError(f"TMA load into {buf.name} while {buf.readers} asynchronous read(s) of it run")
        if buf.writing:
            raise ProtocolError(f"two TMA loads into {buf.name} at once")
        buf.writing, buf.content = True, ("in flight", tag)
        self.events.append(("load", buf, tag, bar))

    def generic_write(self, buf, tag):
        """Threads' stores into a buffer (the IS_VARLEN = 2 zeroing): nothing
        may load it or read it asynchronously meanwhile."""
        if buf.readers or buf.writing:
            raise ProtocolError(f"{buf.name} written by threads while {buf.readers} asynchronous read(s) "
                                f"of it run{' and a TMA load fills it' if buf.writing else ''}")
        buf.content = tag

    def read(self, buf, tag):
        if buf.writing or buf.content != tag:
            raise ProtocolError(f"{buf.name} holds {buf.content}, expected {tag}")

    def wgmma_issue(self, c, reads):
        for buf, tag in reads:
            self.read(buf, tag)
            buf.readers += 1
        self.wgmma[c].append(reads)
        self.events.append(("wgmma", c))

    def tma_store(self, c, buf, tag):
        self.read(buf, tag)
        buf.readers += 1
        self.stores[c] += 1
        record = _Store()
        self.store_order[c].append(record)
        self.events.append(("store", c, buf, tag, record))

    def stores_done_but(self, c, n):
        """tma.store_wait(n): every store of consumer c but its n latest has
        read its buffer (stores may complete out of order; the wait is for
        the older ones)."""
        order = self.store_order[c]
        return all(record.done for record in order[:max(len(order) - n, 0)])

    def stored(self, tag):
        """A store of ``tag`` completed (subclasses record it)."""

    def fire(self, ev):
        self.events.remove(ev)
        if ev[0] == "load":
            _, buf, tag, bar = ev
            buf.writing, buf.content = False, tag
            bar.complete_tx(1)
        elif ev[0] == "wgmma":  # groups retire in issue order
            for buf, tag in self.wgmma[ev[1]].pop(0):
                self.read(buf, tag)
                buf.readers -= 1
        else:
            _, c, buf, tag, record = ev
            record.done = True
            self.read(buf, tag)
            buf.readers -= 1
            self.stores[c] -= 1
            self.stored(tag)


class CTA(AsyncState):
    """Shared state of one forward CTA: barriers, buffers, asynchronous operations."""

    def __init__(self, nc, ns, slots=2, split=False):
        super().__init__(nc)
        self.nc, self.ns = nc, ns
        # Split Q K^T: Q's and K's second column chunk, loaded on Q's / K's
        # barrier (two TMA copies, one expect of both) and read by S's second wgmma.
        self.split = split
        self.q1_buf = [Buffer(f"Q1[{c}]") for c in range(nc)]
        self.k1_buf = [Buffer(f"K1[{s}]") for s in range(ns)]
        self.q_ready = [Barrier(f"q_ready[{c}]", 1) for c in range(nc)]
        self.q_empty = [Barrier(f"q_empty[{c}]", 1) for c in range(nc)]
        self.turn = [Barrier(f"turn[{c}]", 1) for c in range(nc)]
        self.k_ready = [Barrier(f"k_ready[{s}]", 1) for s in range(ns)]
        self.v_ready = [Barrier(f"v_ready[{s}]", 1) for s in range(ns)]
        self.k_empty = [Barrier(f"k_empty[{s}]", nc) for s in range(ns)]
        self.v_empty = [Barrier(f"v_empty[{s}]", nc) for s in range(ns)]
        self.q_buf = [Buffer(f"Q[{c}]") for c in range(nc)]
        self.k_buf = [Buffer(f"K[{s}]") for s in range(ns)]
        self.v_buf = [Buffer(f"V[{s}]") for s in range(ns)]
        self.tail_bar = NamedBarrier("VARLEN_TAIL_BAR")
        self.outputs = []         # (tile, consumer) of each O store issued
        # DYNAMIC: the next-tile ring (slots of one int32 each) and its barriers.
        self.slots = slots
        self.tile_ready = [Barrier(f"tile_ready[{s}]", 1) for s in range(self.slots)]
        self.next_tile = [Buffer(f"next_tile[{s}]") for s in range(self.slots)]


def _wait(bar, parity, expected):
    """A wait in the kernel's form; 'expected' is the completion count the
    waiter means (counted independently of the parity formula)."""
    return ("wait", bar, parity, expected)


def producer(cta, tiles, persistent, broken=None):
    """broken: 'split_expect_one' expects only one chunk's bytes per Q / K load."""
    ns, nc = cta.ns, cta.nc
    waits = {}
    chunks = 2 if cta.split else 1
    expect = 1 if broken == "split_expect_one" else chunks

    def wait(bar, parity):
        n = waits.get(bar.name, 0)
        waits[bar.name] = n + 1
        return _wait(bar, parity, n)  # the n-th wait on an 'empty' barrier needs n releases

    def load_kv(t, j, g):
        s = g % ns
        ph = ((g // ns) & 1) ^ 1
        yield wait(cta.k_empty[s], ph)
        cta.k_ready[s].expect(expect)
        cta.tma_load(cta.k_buf[s], ("K", t, j), cta.k_ready[s])
        if cta.split:
            cta.tma_load(cta.k1_buf[s], ("K1", t, j), cta.k_ready[s])
        yield ("step",)
        yield wait(cta.v_empty[s], ph)
        cta.v_ready[s].expect(1)
        cta.tma_load(cta.v_buf[s], ("V", t, j), cta.v_ready[s])
        yield ("step",)

    def load_q(t, q_phase, wait_empty):
        for c in range(nc):
            if wait_empty:
                yield wait(cta.q_empty[c], q_phase ^ 1)
            cta.q_ready[c].expect(expect)
            cta.tma_load(cta.q_buf[c], ("Q", t, c), cta.q_ready[c])
            if cta.split:
                cta.tma_load(cta.q1_buf[c], ("Q1", t, c), cta.q_ready[c])
            yield ("step",)

    if isinstance(tiles, Claims):
        # DYNAMIC: tile pid first, then the claimed ones; tags carry the
        # global tile number, so a consumer on another tile than its
        # producer reads a buffer holding the wrong tile.
        sched, g, i, t = tiles, 0, 0, cta.pid
        while t < len(sched.work):
            n_tiles = sched.work[t]
            n_first = min(n_tiles, ns)
            for j in range(n_first):
                yield from load_kv(t, j, g + j)
            yield from load_q(t, i & 1, True)
            for j in range(n_first, n_tiles):
                yield from load_kv(t, j, g + j)
            g += n_tiles
            t = sched.claim()            # one atomic on the global counter
            yield ("step",)
            slot = cta.next_tile[i % cta.slots]
            slot.content = ("next", cta.pid, i, t)   # a generic shared-memory write
            cta.tile_ready[i % cta.slots].arrive()
            yield ("step",)
            i += 1
    elif persistent:
        g = 0
        for i, n_tiles in enumerate(tiles):
            n_first = min(n_tiles, ns)   # the ring's worth of K/V before Q (the kernel's order)
            for j in range(n_first):
                yield from load_kv(i, j, g + j)
            yield from load_q(i, i & 1, True)
            for j in range(n_first, n_tiles):
                yield from load_kv(i, j, g + j)
            g += n_tiles
    else:
        assert len(tiles) == 1
        yield from load_q(0, 0, False)
        for j in range(tiles[0]):
            yield from load_kv(0, j, j)


# Deliberately broken forms of _attn_fwd_skip (the release of the K/V tiles
# past a warpgroup's diagonal) that the protocol simulation must catch.
SKIP_BROKEN = ("skip_no_ready_wait", "skip_no_turn")
# ... and of its HEAD form (with a window, the tiles before a warpgroup's
# first key): releasing before the load landed, passing no turn, or passing
# the turn after the loads as the tail does (with one stage, a load then
# waits for a release that waits for that turn).
HEAD_BROKEN = ("head_no_ready_wait", "head_no_turn", "head_turn_late")


def own_tiles(seed, tail=True, head=False):
    """A stand-in for the key tiles [first, n_own) that warpgroup c reads of
    work tile t's n (the rest it releases unread, as _attn_fwd_skip): with
    tail, n_own is a deterministic pseudo-random count in [1, n] (causal,
    the tiles past its diagonal), else n; with head, first is one in
    [0, n_own) (a window, the tiles before its first key), else 0.  The
    protocol must hold whatever each warpgroup's shares."""
    def own(t, c, n):
        rng = random.Random(hash((seed, t, c)))
        n_own = 1 + rng.randrange(n) if tail else n
        return (rng.randrange(n_own) if head else 0), n_own
    return own


def consumer(cta, c, tiles, persistent, pingpong, own=None, broken=None, past_end=None):
    """One consumer warpgroup; own(t, c, n_tiles) -> (first, n_own), the key
    tiles [first, n_own) it reads (the rest it releases unread, as
    _attn_fwd_skip), all of them when None.  past_end(t): whether work tile t's
    last key tile reaches past the sequence's keys (IS_VARLEN = 2): the last
    consumer zeroes that V slot's rows past n_k with threads' stores, and the
    consumers that reach the tile meet at the named barrier before P V
    (broken: TAIL_BROKEN)."""
    ns, nc = cta.ns, cta.nc
    waits = {}

    def wait(bar, parity):
        n = waits.get(bar.name, 0)
        waits[bar.name] = n + 1
        return _wait(bar, parity, n + 1)  # the n-th wait on a 'ready' barrier needs n + 1 completions

    def skip(lo, hi, g0, t0, head):
        """_attn_fwd_skip: release key tiles [lo, hi) unread.  HEAD (before
        the first S) passes tile j's turn t0 + j before waiting for its
        loads; the tail (after the last P V) passes turn t0 + j + 1 after.
        The broken forms SKIP_BROKEN / HEAD_BROKEN of either."""
        kind = "head" if head else "skip"
        no_ready_wait = broken == f"{kind}_no_ready_wait"
        no_turn = broken == f"{kind}_no_turn"
        turn_late = head and broken == "head_turn_late"
        turn = t0 + (0 if head else 1)
        for j in range(lo, hi):
            gk = g0 + j
            sk = gk % ns
            if pingpong and head and not (no_turn or turn_late):
                yield wait(cta.turn[c], (turn + j) & 1)
                cta.turn[(c + 1) % nc].arrive()
            if not no_ready_wait:
                yield wait(cta.k_ready[sk], (gk // ns) & 1)
            cta.k_empty[sk].arrive()
            if not no_ready_wait:
                yield wait(cta.v_ready[sk], (gk // ns) & 1)
            cta.v_empty[sk].arrive()
            if pingpong and not no_turn and (not head or turn_late):
                yield wait(cta.turn[c], (turn + j) & 1)
                cta.turn[(c + 1) % nc].arrive()
            yield ("step",)

    def issue_s(t, j, s, q, q1):
        """S_j: one wgmma group, or with the split two (Q K^T's column chunks)."""
        cta.wgmma_issue(c, [(q, ("Q", t, c)), (cta.k_buf[s], ("K", t, j))])
        if cta.split:
            cta.wgmma_issue(c, [(q1, ("Q1", t, c)), (cta.k1_buf[s], ("K1", t, j))])

    # wgmma_wait(1) after S (one or two groups) and P V: S complete.  The
    # broken 'split_wait_2' leaves S's second group running.
    s_wait = 2 if broken == "split_wait_2" else 1

    def tile(t, n_tiles, g0, t0, q_phase):
        first, n_own = own(t, c, n_tiles) if own else (0, n_tiles)
        q = cta.q_buf[c]
        q1 = cta.q1_buf[c]
        yield wait(cta.q_ready[c], q_phase)
        yield from skip(0, first, g0, t0, head=True)
        g_first = g0 + first
        s0 = g_first % ns
        yield wait(cta.k_ready[s0], (g_first // ns) & 1)
        if pingpong:
            yield wait(cta.turn[c], (t0 + first) & 1)
        issue_s(t, first, s0, q, q1)
        if pingpong:
            cta.turn[(c + 1) % nc].arrive()
        yield ("wgmma_wait", 0)
        cta.k_empty[s0].arrive()
        yield ("step",)
        for j in range(first + 1, n_own):   # the unmasked / masked runs and PAIRED do not change the order
            gk = g0 + j
            sk, sv = gk % ns, (gk - 1) % ns
            yield wait(cta.k_ready[sk], (gk // ns) & 1)
            yield wait(cta.v_ready[sv], ((gk - 1) // ns) & 1)
            if pingpong:
                yield wait(cta.turn[c], (t0 + j) & 1)
            issue_s(t, j, sk, q, q1)
            cta.wgmma_issue(c, [(cta.v_buf[sv], ("V", t, j - 1))])
            if pingpong:
                cta.turn[(c + 1) % nc].arrive()
            yield ("wgmma_wait", s_wait)
            if len(cta.wgmma[c]) > 1:  # only P V may still run: the softmax reads S
                raise ProtocolError(f"consumer {c}: S read with {len(cta.wgmma[c])} wgmma groups outstanding")
            cta.k_empty[sk].arrive()
            yield ("step",)           # the softmax runs here, under P V
            yield ("wgmma_wait", 0)
            cta.v_empty[sv].arrive()
            yield ("step",)
        sv = (g0 + n_own - 1) % ns
        yield wait(cta.v_ready[sv], ((g0 + n_own - 1) // ns) & 1)
        v_tag = ("V", t, n_own - 1)
        if past_end and past_end(t) and n_own == n_tiles:
            # The kernel's count: the consumers whose share ends at the tile.
            n_reach = sum(own(t, i, n_tiles)[1] == n_tiles for i in range(nc)) if own else nc
            v_tag = ("V zeroed past n_k", t, n_own - 1)
            if c == nc - 1 or broken == "tail_each_zeroes":
                cta.generic_write(cta.v_buf[sv], v_tag)
            count = nc if broken == "tail_count_all" else n_reach
            if count > 1 and broken not in ("tail_each_zeroes", "tail_no_barrier"):
                gen = cta.tail_bar.arrive(count)
                yield ("sync", cta.tail_bar, gen)
        if pingpong:
            yield wait(cta.turn[c], (t0 + n_own) & 1)
        cta.wgmma_issue(c, [(cta.v_buf[sv], v_tag)])
        if pingpong:
            cta.turn[(c + 1) % nc].arrive()
        yield ("wgmma_wait", 0)
        cta.v_empty[sv].arrive()
        yield ("step",)
        yield from skip(n_own, n_tiles, g0, t0, head=False)
        # Epilogue: O staged in Q's buffer (a generic write: nothing may be
        # reading or loading it), TMA store, store_wait.
        if q.readers or q.writing:
            raise ProtocolError(f"O written into {q.name} while it is read or loaded")
        q.content = ("O", t, c)
        cta.tma_store(c, q, ("O", t, c))
        cta.outputs.append((t, c))
        yield ("store_wait",)

    if isinstance(tiles, Claims):
        sched, g, i, t = tiles, 0, 0, cta.pid
        while t < len(sched.work):
            n_tiles = sched.work[t]
            yield from tile(t, n_tiles, g, g + i, i & 1)
            cta.q_empty[c].arrive()
            g += n_tiles
            if sched.broken == "consumer_claims":   # each warpgroup asks the counter itself
                t = sched.claim()
            else:
                if sched.broken != "no_wait":
                    yield wait(cta.tile_ready[i % cta.slots], (i // cta.slots) & 1)
                got = cta.next_tile[i % cta.slots].content
                if got[:3] != ("next", cta.pid, i):
                    raise ProtocolError(f"consumer {c} of CTA {cta.pid}: next-tile slot {i % cta.slots} holds "
                                        f"{got}, expected publication {i}")
                t = got[3]
            yield ("step",)
            i += 1
    elif persistent:
        g = 0
        for i, n_tiles in enumerate(tiles):
            yield from tile(i, n_tiles, g, g + i, i & 1)
            cta.q_empty[c].arrive()
            g += n_tiles
    else:
        yield from tile(0, tiles[0], 0, 0, 0)


def run_agents(agents, ctas, where, weight, w_async, rng, max_steps):
    """The random scheduler of the protocol simulations.  agents: generators
    by name, each yielding what it does next (("wait", barrier, parity,
    completion), ("wgmma_wait", n), ("store_wait",) (every store done),
    ("store_wait", n) (all but the consumer's n latest stores done) or ("step",));
    where(name) -> (cta, consumer index) for the waits; the CTAs'
    asynchronous events (TMA arrivals, wgmma completions, stores) are
    choices too.  Every step picks among what can proceed with the weights
    weight[name] / w_async (per-run biases, so that any agent or engine may
    get far ahead).  Returns the number of steps; raises ProtocolError on a
    deadlock, a parity wait that passed at another completion than the one
    it meant, or max_steps."""
    state = {name: ("step",) for name in agents}

    def ready(name):
        st = state[name]
        cta, c = where(name)
        if st[0] == "wait":
            return (st[1].done & 1) != st[2]
        if st[0] == "sync":  # bar.sync: released by the completion it arrived for
            return st[1].done > st[2]
        if st[0] == "wgmma_wait":
            return len(cta.wgmma[c]) <= st[1]
        if st[0] == "store_wait":
            return cta.stores[c] == 0 if len(st) == 1 else cta.stores_done_but(c, st[1])
        return True

    steps = 0
    while agents or any(cta.events for cta in ctas):
        steps += 1
        if steps > max_steps:
            raise ProtocolError("no progress bound reached")
        choices = [(n, weight[n]) for n in agents if ready(n)]
        choices += [((cta, ev), w_async) for cta in ctas for ev in cta.events]
        if not choices:
            blocked = {n: (s[0], getattr(s[1], "name", s[1]) if len(s) > 1 else "", s[2:3]) for n, s in state.items()
                       if n in agents}
            raise ProtocolError(f"deadlock: {blocked}")
        pick = rng.choices([x for x, _ in choices], weights=[w for _, w in choices])[0]
        if pick not in agents:
            pick[0].fire(pick[1])
            continue
        st = state[pick]
        if st[0] == "wait" and st[1].done != st[3]:
            raise ProtocolError(f"{pick}: parity wait on {st[1].name} passed at completion {st[1].done}, "
                                f"meant {st[3]}")
        try:
            state[pick] = next(agents[pick])
        except StopIteration:
            del agents[pick]
    return steps


# Deliberately broken forms of the split Q K^T's protocol: the producer
# expecting one chunk's bytes for two copies, the consumer waiting for all
# but two wgmma groups (S's second chunk may still read K1 when K is released).
SPLIT_PROTOCOL_BROKEN = ("split_expect_one", "split_wait_2")
# ... and of the IS_VARLEN = 2 zeroing of a sequence's last V tile: every
# reaching consumer zeroing the slot itself (the form before session 72,
# whose racing stores compute-sanitizer's racecheck reported), the last one
# zeroing with no barrier, and a barrier counting every consumer (a consumer
# whose share ends earlier never arrives).
TAIL_BROKEN = ("tail_each_zeroes", "tail_no_barrier", "tail_count_all")


def varlen_shares(own, nc):
    """own (or all tiles) made the kernel's way for a packed sequence's tail:
    a consumer's share ends no later than the next one's (n_own grows with
    its rows, _own_tiles), and the last one's at the work tile's end."""
    base = own or (lambda t, c, n: (0, n))

    def shares(t, c, n):
        pairs = [base(t, i, n) for i in range(nc)]
        owns = sorted(p[1] for p in pairs)[:-1] + [n]
        return min(pairs[c][0], owns[c] - 1), owns[c]
    return shares


def simulate_protocol(tiles, nc, ns, pingpong, persistent, seed, max_steps=10 ** 6, skip=False, broken=None,
                      head=False, split=False, varlen=False):
    """Run one CTA's protocol over work tiles with the given key-tile counts;
    skip: each warpgroup releases the tiles past its own_tiles(seed) share
    unread (causal), head: also the ones before it (a window); split: Q and
    K loaded and read as two column chunks each (split Q K^T); varlen: packed
    sequences (IS_VARLEN = 2, never persistent): most work tiles' last key
    tile reaches past the sequence and is zeroed before its P V, the shares
    as varlen_shares makes them; broken one of SKIP_BROKEN, HEAD_BROKEN,
    SPLIT_PROTOCOL_BROKEN or TAIL_BROKEN.  Returns the number of scheduler
    steps; raises ProtocolError on a deadlock, a wrong phase or a buffer
    hazard."""
    assert broken in (None,) + SKIP_BROKEN + HEAD_BROKEN + SPLIT_PROTOCOL_BROKEN + TAIL_BROKEN, broken
    assert not (varlen and persistent), "packed batches run on the grid of one program per block"
    own = own_tiles(seed, skip, head) if skip or head else None
    if varlen:
        own = varlen_shares(own, nc)
        reaches_past = lambda t: random.Random(seed * 7919 + t).random() < 0.8  # noqa: E731
    else:
        reaches_past = None
    rng = random.Random(seed)
    cta = CTA(nc, ns, split=split)
    if pingpong:
        cta.turn[0].arrive()
    agents = {"producer": producer(cta, tiles, persistent, broken)}
    for c in range(nc):
        agents[f"consumer{c}"] = consumer(cta, c, tiles, persistent, pingpong, own, broken, reaches_past)
    # Per run, a random bias: some agents (or the asynchronous engines) run
    # much more often than others, so that every one of them gets far ahead.
    weight = {name: rng.choice((0.05, 1.0, 1.0, 20.0)) for name in list(agents) + ["async"]}
    steps = run_agents(agents, [cta], lambda name: (cta, int(name[8:]) if name != "producer" else None),
                       weight, weight["async"], rng, max_steps)
    want = sorted((t, c) for t in range(len(tiles)) for c in range(nc))
    if sorted(cta.outputs) != want:
        raise ProtocolError(f"O stores {sorted(cta.outputs)} != {want}")
    return steps


class Claims:
    """DYNAMIC's global state: the tile counter (zero at launch unless
    broken='no_reset') and each tile's key-tile count."""

    def __init__(self, work, n_programs, broken=None):
        self.work, self.g, self.broken = work, n_programs, broken
        self.counter = 3 if broken == "no_reset" else 0   # left over from an earlier launch

    def claim(self):  # atomic_add(counter, 1) + G
        self.counter += 1
        return self.g + self.counter - 1


DYNAMIC_BROKEN = ("one_slot", "consumer_claims", "no_wait", "no_reset")


def simulate_dynamic(work, n_programs, nc, ns, pingpong, seed, broken=None, max_steps=10 ** 6, skip=False,
                     head=False):
    """The DYNAMIC protocol of min(n_programs, len(work)) CTAs sharing one
    counter, under one random scheduler; work: key-tile count per tile t.
    skip / head: the warpgroups' shares as simulate_protocol's.  Returns
    the number of scheduler steps; raises ProtocolError on a deadlock, a
    wrong phase, a buffer or next-tile slot hazard, or a tile not processed
    exactly once by every consumer."""
    assert broken in (None,) + DYNAMIC_BROKEN, broken
    rng = random.Random(seed)
    g = min(n_programs, len(work))
    sched = Claims(work, g, broken)
    ctas, agents = [], {}
    for p in range(g):
        cta = CTA(nc, ns, slots=1 if broken == "one_slot" else 2)
        cta.pid = p
        ctas.append(cta)
        if pingpong:
            cta.turn[0].arrive()
        agents[(p, "producer")] = producer(cta, sched, True)
        for c in range(nc):
            agents[(p, c)] = consumer(cta, c, sched, True, pingpong,
                                      own_tiles(seed, skip, head) if skip or head else None)
    weight = {name: rng.choice((0.05, 1.0, 1.0, 20.0)) for name in agents}
    w_async = rng.choice((0.05, 1.0, 20.0))
    steps = run_agents(agents, ctas, lambda name: (ctas[name[0]], name[1]), weight, w_async, rng, max_steps)
    outputs = sorted(o for cta in ctas for o in cta.outputs)
    want = sorted((t, c) for t in range(len(work)) for c in range(nc))
    if outputs != want:
        raise ProtocolError(f"O stores {outputs[:12]}... != every (tile, consumer) once ({len(outputs)} vs "
                            f"{len(want)})")
    return steps


def dynamic_cases(full=True):
    """(work, n_programs, nc, ns, pingpong, seed) for the DYNAMIC protocol sweep."""
    rng = random.Random(3)
    out = []
    for nc, ns, pingpong in itertools.product((1, 2, 3), (1, 2, 3), (False, True)):
        if nc == 1 and pingpong:
            continue
        for _ in range(6 if full else 1):
            n_work = rng.randint(1, 14)
            work = sorted((rng.randint(1, 6) for _ in range(n_work)), reverse=rng.random() < 0.7)
            out.append((work, rng.randint(1, 4), nc, ns, pingpong, rng.randrange(1 << 30)))
    return out


# --------------------------------------------------------------------------- load balance

def makespans(batch, h_q, n_q, n_k, shift, cfg, n_sms=132, tile_cost=1.0):
    """Busiest SM / ideal, in key-tile iterations plus tile_cost per work
    tile: the persistent snake, a plain round-robin (tile t to program t % G)
    and the hardware's dispatch of the non-persistent grid (each block to
    the SM that frees first, in launch order)."""
    cost = lambda tl: tl[4] - tl[5] + tile_cost  # noqa: E731
    order, n_m, n_bh = tile_order(batch, h_q, h_q, n_q, n_k, shift, cfg)
    persist = program_tiles(batch, h_q, h_q, n_q, n_k, shift, dict(cfg, PERSISTENT=True, NUM_SMS=n_sms))
    snake = max(sum(cost(t) for t in p) for p in persist)
    g = len(persist)
    rr = max(sum(cost(t) for t in order[p::g]) for p in range(g))
    # The hardware starts the grid's blocks in launch order, each on the SM
    # that frees first (one block per SM: the kernel takes all registers).
    free = [0.0] * n_sms
    for tl in order:
        heapq.heapreplace(free, free[0] + cost(tl))
    grid = order
    ideal = sum(cost(t) for t in grid) / n_sms
    # DYNAMIC: tiles in the same order (longest first when HEADS_FIRST),
    # each claimed when its program's producer has issued its current
    # tile's last load (NUM_STAGES key tiles before the end), and greedy
    # (claim at completion) for reference.
    costs = [cost(t) for t in order]
    _, dyn = dynamic_assignment(costs, n_sms, lead=cfg.get("NUM_STAGES", 2))
    _, greedy = dynamic_assignment(costs, n_sms, lead=0)
    return dict(ideal=ideal, snake=snake / ideal, round_robin=rr / ideal, hw_grid=max(free) / ideal,
                dynamic=dyn / ideal, greedy=greedy / ideal, tiles=n_m * n_bh)


def l2_hit_rate(batch, h_q, n_q, n_k, shift, cfg, n_sms=132, tile_cost=1.0, capacity_tiles=700):
    """A model of the K/V L2 hit rate of a schedule: each program reads its
    work tiles' key tiles one per time unit (a work tile costs its key tiles
    plus tile_cost), all programs' reads merged in time order through an LRU
    of capacity_tiles key tiles (K and V of one 128-key tile at d = 128 are
    64 KiB: 700 of them about 45 MB, most of the H200's 50 MB L2).  Q, O and
    the hardware's replacement policy are left out; it ranks orders (at
    d = 128 causal N = 2k, HEADS_FIRST: 0.11, against 13.7% measured)."""
    order, n_m, n_bh = tile_order(batch, h_q, h_q, n_q, n_k, shift, cfg)
    costs = [tl[4] - tl[5] + tile_cost for tl in order]
    if cfg.get("DYNAMIC"):
        progs, _ = dynamic_assignment(costs, n_sms, lead=cfg.get("NUM_STAGES", 2))
    else:
        g = min(n_sms, len(order))
        progs = [[snake_tile(i, p, g) for i in range(work_count(p, g, len(order)))] for p in range(g)]
    reads = []
    for p in progs:
        start = 0.0
        for t in p:
            ob, ohq = order[t][0], order[t][1]
            reads += [(start + 1 + j, ob, ohq, j) for j in range(order[t][5], order[t][4])]
            start += costs[t]
    reads.sort()
    lru, hits = collections.OrderedDict(), 0
    for _, ob, ohq, j in reads:
        key = (ob, ohq, j)
        if key in lru:
            hits += 1
            lru.move_to_end(key)
        else:
            lru[key] = True
            if len(lru) > capacity_tiles:
                lru.popitem(last=False)
    return hits / max(len(reads), 1)


# --------------------------------------------------------------------------- sweeps

def forward_cases(full=True):
    """(batch, h_q, h_kv, n_q, n_k, shift, cfg) for the emulation sweep."""
    lengths = [1, 63, 64, 65, 127, 128, 129, 200, 255, 256, 257, 383, 700]
    cfgs = []
    for bn, nc, paired, persistent, heads_first, n_sms, skip, m_band in itertools.product(
            (64, 128), (1, 2, 3), (False, True), (False, True), (False, True), (3, 5, 132), (False, True),
            (0, 2, 3)):
        if (persistent or n_sms == 132) and (persistent and heads_first or m_band == 0):
            cfgs.append(dict(BLOCK_M=64, BLOCK_N=bn, NUM_CONSUMERS=nc, PAIRED=paired, PERSISTENT=persistent,
                             HEADS_FIRST=heads_first, NUM_SMS=n_sms, SKIP_TILES=skip, M_BAND=m_band))
    rng = random.Random(1)
    out = []
    for n_q, n_k in itertools.product(lengths, lengths):
        for shift in (None, n_k - n_q, 0, -5, n_k // 3):
            for cfg in rng.sample(cfgs, 4 if full else 1):
                batch, h_kv, group = rng.choice(((1, 1, 1), (2, 2, 2), (3, 1, 4)))
                out.append((batch, h_kv * group, h_kv, n_q, n_k, shift, cfg))
    out = out if full else rng.sample(out, 80)
    return out + dynamic_forward_cases(full) + window_forward_cases(full)


def dynamic_forward_cases(full=True):
    """Emulation cases of the DYNAMIC schedule: random completion times
    (SEED) decide which program claims which tile."""
    lengths = [1, 63, 65, 128, 129, 255, 257, 383, 700]
    rng = random.Random(4)
    out = []
    for n_q, n_k in itertools.product(lengths, lengths):
        for shift in (None, n_k - n_q, 0, -5):
            batch, h_kv, group = rng.choice(((1, 1, 1), (2, 2, 2), (3, 1, 4)))
            cfg = dict(BLOCK_M=64, BLOCK_N=rng.choice((64, 128)), NUM_CONSUMERS=rng.choice((1, 2, 3)),
                       PAIRED=rng.random() < 0.5, PERSISTENT=True, DYNAMIC=True,
                       HEADS_FIRST=shift is not None, NUM_SMS=rng.choice((1, 3, 5, 132)),
                       SEED=rng.randrange(1 << 30), SKIP_TILES=rng.random() < 0.5,
                       M_BAND=rng.choice((0, 1, 2, 3, 4)), HEAD_SECTION=rng.choice((0, 0, 1, 2, 3)))
            out.append((batch, h_kv * group, h_kv, n_q, n_k, shift, cfg))
    return out if full else rng.sample(out, 40)


def window_forward_cases(full=True):
    """Emulation cases with a sliding window (cfg WINDOW = (left, wshift):
    row i sees keys j >= i + wshift - left): causal (wshift the causal
    shift, flash-attn's window (left, 0)) or not (left bound only), windows
    of 0, less than a tile, a tile's width and around it, wider than N;
    every schedule (grid, persistent, dynamic), SKIP_TILES on and off."""
    lengths = [1, 63, 65, 128, 129, 200, 255, 257, 383, 700]
    rng = random.Random(6)
    out = []
    for n_q, n_k in itertools.product(lengths, lengths):
        for causal in (True, False):
            for _ in range(3):
                shift = rng.choice((n_k - n_q, 0, -5, n_k // 3, 70))
                left = rng.choice((0, 1, 5, 63, 64, 65, 100, 127, 128, 129, 191, 300, 5000))
                batch, h_kv, group = rng.choice(((1, 1, 1), (2, 2, 2), (3, 1, 4)))
                sched = rng.choice(("grid", "persistent", "dynamic"))
                cfg = dict(BLOCK_M=64, BLOCK_N=rng.choice((64, 128)), NUM_CONSUMERS=rng.choice((1, 2, 3)),
                           PAIRED=rng.random() < 0.5, PERSISTENT=sched != "grid", DYNAMIC=sched == "dynamic",
                           HEADS_FIRST=rng.random() < 0.5, NUM_SMS=rng.choice((1, 3, 5, 132)),
                           SEED=rng.randrange(1 << 30), SKIP_TILES=rng.random() < 0.6,
                           M_BAND=rng.choice((0, 2, 3)), WINDOW=(left, shift))
                out.append((batch, h_kv * group, h_kv, n_q, n_k, shift if causal else None, cfg))
    return out if full else rng.sample(out, 60)


def split_forward_cases(full=True):
    """Emulation cases of the split Q K^T (d = 12 = 8 + 4 columns standing
    for 192 = 128 + 64, dv = 8 for 128): ragged lengths, causal both
    alignments and a negative shift, not causal, windows, GQA, every
    schedule; (case, d, dv)."""
    lengths = [1, 63, 65, 129, 200, 257, 383]
    rng = random.Random(8)
    out = []
    for n_q, n_k in itertools.product(lengths, lengths):
        for shift in (None, n_k - n_q, 0, -5):
            batch, h_kv, group = rng.choice(((1, 1, 1), (2, 2, 2), (3, 1, 4)))
            sched = rng.choice(("grid", "persistent", "dynamic"))
            cfg = dict(BLOCK_M=64, BLOCK_N=rng.choice((64, 128)), NUM_CONSUMERS=rng.choice((1, 2, 3)),
                       PAIRED=rng.random() < 0.3, PERSISTENT=sched != "grid", DYNAMIC=sched == "dynamic",
                       HEADS_FIRST=shift is not None, NUM_SMS=rng.choice((1, 3, 5, 132)),
                       SEED=rng.randrange(1 << 30), SKIP_TILES=rng.random() < 0.5, M_BAND=0, SPLIT_QK=8)
            if rng.random() < 0.25:
                cfg["WINDOW"] = (rng.choice((0, 37, 100, 300)), n_k - n_q if shift is None else shift)
            out.append(((batch, h_kv * group, h_kv, n_q, n_k, shift, cfg), 12, 8))
    return out if full else rng.sample(out, 30)


def check_split(full=True):
    """The split sweep and its broken forms: (failures of the kernel's form,
    {broken form: cases that caught it})."""
    fails = []
    caught = {}
    for case, d, dv in split_forward_cases(full):
        why = check_forward(*case, d=d, dv=dv)
        if why:
            fails.append((case, why))
    for broken in SPLIT_BROKEN:
        caught[broken] = sum(1 for case, d, dv in split_forward_cases(False)
                             if check_forward(*case[:-1], dict(case[-1], SPLIT_BROKEN=broken), d=d, dv=dv))
    return fails, caught


def protocol_cases(full=True):
    """(tiles, nc, ns, pingpong, persistent, seed) for the protocol sweep."""
    rng = random.Random(2)
    out = []
    runs = 8 if full else 1
    for nc, ns, pingpong, persistent in itertools.product((1, 2, 3), (1, 2, 3), (False, True), (False, True)):
        if nc == 1 and pingpong:
            continue  # the launcher turns ping-pong off with one consumer
        for r in range(runs):
            if persistent:
                tiles = [rng.randint(1, 7) for _ in range(rng.randint(1, 6))]
            else:
                tiles = [rng.randint(1, 13)]
            out.append((tiles, nc, ns, pingpong, persistent, rng.randrange(1 << 30)))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="the reduced sweeps of tests/test_hopper.py")
    ap.add_argument("--protocol-runs", type=int, default=1, help="repeat the protocol sweep with new seeds")
    args = ap.parse_args()
    t0 = time.time()
    fails = 0
    cases = forward_cases(not args.quick)
    for case in cases:
        why = check_forward(*case)
        if why:
            fails += 1
            if fails <= 10:
                print("FORWARD FAIL", case, why)
    n_persist = sum(1 for c in cases if c[-1]["PERSISTENT"])
    n_dyn = sum(1 for c in cases if c[-1].get("DYNAMIC"))
    print(f"forward emulation: {len(cases)} cases ({n_persist} persistent, {n_dyn} of them dynamic), {fails} failures, "
          f"{time.time() - t0:.0f}s", flush=True)
    t1 = time.time()
    pfails = 0
    runs = 0
    steps = 0
    for rep in range(args.protocol_runs):
        for tiles, nc, ns, pp, persistent, seed in protocol_cases(not args.quick):
            runs += 1
            try:
                steps += simulate_protocol(tiles, nc, ns, pp, persistent, seed + rep * 7919, skip=seed % 2 == 1,
                                           head=seed % 4 >= 2)
            except ProtocolError as exc:
                pfails += 1
                if pfails <= 10:
                    print("PROTOCOL FAIL", tiles, nc, ns, pp, persistent, seed, exc)
    skip_caught = {}
    for broken in SKIP_BROKEN + HEAD_BROKEN:
        skip_caught[broken] = 0
        for tiles, nc, ns, pp, persistent, seed in protocol_cases(False):
            try:
                simulate_protocol(tiles, nc, ns, pp, persistent, seed, skip=True, broken=broken,
                                  head=broken in HEAD_BROKEN)
            except ProtocolError:
                skip_caught[broken] += 1
    print(f"protocol simulation: {runs} runs (odd seeds: warpgroups skip their tiles past the diagonal; seeds 2, 3 "
          f"mod 4: also the ones before a window), {steps} scheduler steps, {pfails} failures, "
          f"{time.time() - t1:.0f}s; broken skips caught in runs of {len(protocol_cases(False))}: {skip_caught}",
          flush=True)
    if not all(skip_caught.values()):
        pfails += 1
    # Split Q K^T (d = 192 / dv = 128 as 12 / 8): the emulation in float64 and
    # the protocol with two chunks per Q / K load, and their broken forms.
    t3 = time.time()
    split_fails, split_caught = check_split(not args.quick)
    for case, why in split_fails[:10]:
        print("SPLIT FAIL", case, why)
    split_runs = 0
    for tiles, nc, ns, pp, persistent, seed in protocol_cases(not args.quick):
        split_runs += 1
        try:
            simulate_protocol(tiles, nc, ns, pp, persistent, seed, skip=seed % 2 == 1, head=seed % 4 >= 2, split=True)
        except ProtocolError as exc:
            split_fails.append(exc)
            print("SPLIT PROTOCOL FAIL", tiles, nc, ns, pp, persistent, seed, exc)
    for broken in SPLIT_PROTOCOL_BROKEN:
        split_caught[broken] = 0
        for tiles, nc, ns, pp, persistent, seed in protocol_cases(False):
            try:
                simulate_protocol(tiles, nc, ns, pp, persistent, seed, broken=broken, split=True)
            except ProtocolError:
                split_caught[broken] += 1
    print(f"split Q K^T: {len(split_forward_cases(not args.quick))} emulation cases and {split_runs} protocol runs, "
          f"{len(split_fails)} failures, {time.time() - t3:.0f}s; broken forms caught (of "
          f"{len(split_forward_cases(False))} emulation / {len(protocol_cases(False))} protocol runs): {split_caught}",
          flush=True)
    pfails += len(split_fails) + (not all(split_caught.values()))
    # Packed sequences with the isolation switch: the last V tile zeroed by the last consumer.
    t4, tail_runs, tail_fails = time.time(), 0, 0
    tail_caught = dict.fromkeys(TAIL_BROKEN, 0)
    for tiles, nc, ns, pp, persistent, seed in protocol_cases(not args.quick):
        if persistent:
            continue
        for skip, broken in itertools.product((False, True), (None,) + TAIL_BROKEN):
            tail_runs += broken is None
            try:
                simulate_protocol(tiles, nc, ns, pp, False, seed, skip=skip, head=skip and seed % 2 == 1,
                                  varlen=True, broken=broken)
            except ProtocolError as exc:
                if broken is None:
                    tail_fails += 1
                    print("VARLEN TAIL PROTOCOL FAIL", tiles, nc, ns, pp, seed, skip, exc)
                else:
                    tail_caught[broken] += 1
    print(f"varlen tail zeroing: {tail_runs} protocol runs, {tail_fails} failures, {time.time() - t4:.0f}s; "
          f"broken forms caught: {tail_caught}", flush=True)
    pfails += tail_fails + (not all(tail_caught.values()))
    t2 = time.time()
    runs = steps = 0
    for rep in range(args.protocol_runs):
        for work, g, nc, ns, pp, seed in dynamic_cases(not args.quick):
            runs += 1
            try:
                steps += simulate_dynamic(work, g, nc, ns, pp, seed + rep * 7919, skip=seed % 2 == 1,
                                          head=seed % 4 >= 2)
            except ProtocolError as exc:
                pfails += 1
                if pfails <= 10:
                    print("DYNAMIC PROTOCOL FAIL", work, g, nc, ns, pp, seed, exc)
    caught = {}
    for broken in DYNAMIC_BROKEN:
        caught[broken] = 0
        for work, g, nc, ns, pp, seed in dynamic_cases(False):
            try:
                simulate_dynamic(work, max(g, 2), nc, ns, pp, seed, broken=broken)
            except ProtocolError:
                caught[broken] += 1
    print(f"dynamic protocol simulation: {runs} runs, {steps} scheduler steps, {pfails} failures (all), "
          f"{time.time() - t2:.0f}s; broken variants caught in runs of {len(dynamic_cases(False))}: {caught}",
          flush=True)
    if not all(caught.values()):
        pfails += 1
    print("\nload balance (busiest SM / ideal; 132 SMs; cost = key tiles + 1 per work tile):")
    print("| d | N | causal | tiles | persistent snake | round-robin | non-persistent grid | dynamic | "
          "greedy (claim at completion) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for d, n, causal in itertools.product((64, 128, 256), (2048, 8192), (False, True)):
        cfg = dict(BLOCK_M=64, BLOCK_N=64 if d == 256 else 128, NUM_CONSUMERS=2, HEADS_FIRST=causal,
                   NUM_STAGES=2 if d == 256 else 3)
        r = makespans(16384 // n, 2048 // d, n, n, 0 if causal else None, cfg)
        print(f"| {d} | {n} | {causal} | {r['tiles']} | {r['snake']:.3f} | {r['round_robin']:.3f} | "
              f"{r['hw_grid']:.3f} | {r['dynamic']:.3f} | {r['greedy']:.3f} |")
        if d == 64:
            r = makespans(16384 // n, 2048 // d, n, n, 0 if causal else None, dict(cfg, NUM_CONSUMERS=3))
            print(f"| {d} nc3 | {n} | {causal} | {r['tiles']} | {r['snake']:.3f} | {r['round_robin']:.3f} | "
                  f"{r['hw_grid']:.3f} | {r['dynamic']:.3f} | {r['greedy']:.3f} |")
    print("\ncausal tile order (HEADS_FIRST) by bands of M_BAND m-blocks: balance (busiest SM / ideal) and "
          "K/V L2 hit rate (l2_hit_rate's LRU model), static snake and dynamic:")
    print("| d | N | M_BAND | snake balance | snake L2 | dynamic balance | dynamic L2 |")
    print("|---|---|---|---|---|---|---|")
    _order_rows((0, 2, 4), lambda d, n, band: (dict(M_BAND=band), band))
    print("\ncausal tile order by head sections (HEAD_SECTION from SECTION_MB, fwd.section_heads): balance "
          "and K/V L2 hit rate as above:")
    print("| d | N | SECTION_MB | heads per section | snake balance | snake L2 | dynamic balance | dynamic L2 |")
    print("|---|---|---|---|---|---|---|---|")

    def sections(d, n, mb):
        heads = section_heads(mb, n, d) if mb else 0
        heads = heads if heads < 16384 // n * (2048 // d) else 0
        return dict(HEAD_SECTION=heads), f"{mb} | {heads or 'all'}"
    _order_rows((0, 16, 32), sections)
    return int(bool(fails or pfails))


def _order_rows(values, order_of):
    """Table rows of causal tile orders at d 64 / 128, N 1k-8k (B*N = 16k,
    H = 2048 / d): for each value, order_of(d, n, value) gives the order's
    switches and the cells naming it; then the static snake's and the
    dynamic scheduler's balance and K/V L2 hit rate."""
    for d, n in itertools.product((64, 128), (1024, 2048, 4096, 8192)):
        for value in values:
            switches, cells = order_of(d, n, value)
            cfg = dict(BLOCK_M=64, BLOCK_N=128, NUM_CONSUMERS=3 if d == 64 else 2, HEADS_FIRST=True,
                       NUM_STAGES=3, **switches)
            shape = (16384 // n, 2048 // d, n, n, 0)
            r = makespans(*shape, cfg)
            print(f"| {d} | {n} | {cells} | {r['snake']:.3f} | {l2_hit_rate(*shape, cfg):.2f} | "
                  f"{r['dynamic']:.3f} | {l2_hit_rate(*shape, dict(cfg, DYNAMIC=True)):.2f} |", flush=True)


def section_heads(mb, n_k, d, dv=None, elem=2, group=1):
    """fwd.section_heads (kept apart: this model imports nothing of the package)."""
    heads = max(1, (mb << 20) // (n_k * (d + (d if dv is None else dv)) * elem)) * group
    return 1 << (heads.bit_length() - 1)


if __name__ == "__main__":
    raise SystemExit(main())
