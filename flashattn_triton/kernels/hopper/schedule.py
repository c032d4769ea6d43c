"""Work-tile dealing of the persistent Hopper kernels (forward and backward),
shared by both: tiles t = 0 .. n_work - 1 are dealt to n_programs programs in
rounds, forwards in even rounds and backwards in odd ones (a snake), so the
program that got the longest tile of one round gets the shortest of the next.
What a tile number means (which block of which head) is each kernel's own.
Also the per-sequence set-up of a packed batch (packed_sequence), the same
in both kernels."""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl


@gluon.jit
def snake_count(pid, n_programs, n_work):
    """Number of work tiles of program pid."""
    full = n_work // n_programs
    # The last, partial round deals tiles to programs [0, rem) when it runs
    # forwards (even round), to [G - rem, G) when it runs backwards.
    slot = pid + (full % 2) * (n_programs - 1 - 2 * pid)
    return full + (slot < n_work % n_programs).to(gl.int32)


@gluon.jit
def snake_tile(i, pid, n_programs):
    """Number of the i-th work tile of program pid."""
    return i * n_programs + pid + (i % 2) * (n_programs - 1 - 2 * pid)


@gluon.jit
def packed_sequence(CU_SEQLENS_Q, CU_SEQLENS_K, seq, window_lo):
    """Sequence seq of a packed batch (IS_VARLEN): (q_row0, n_q, k_row0, n_k,
    shift, window_lo): its first query and key rows and lengths, its
    bottom-right diagonal shift = n_k - n_q (flash-attn's varlen alignment)
    and its window bound: window_lo holds -left, at least -(longest n_q +
    n_k) so that the sum stays in int32, and is clamped to [-n_q, n_k] as
    fwd.lower_diagonal does (no row's keys change)."""
    q_row0 = gl.load(CU_SEQLENS_Q + seq)
    n_q = gl.load(CU_SEQLENS_Q + seq + 1) - q_row0
    k_row0 = gl.load(CU_SEQLENS_K + seq)
    n_k = gl.load(CU_SEQLENS_K + seq + 1) - k_row0
    shift = n_k - n_q
    return q_row0, n_q, k_row0, n_k, shift, gl.minimum(gl.maximum(window_lo + shift, -n_q), n_k)
