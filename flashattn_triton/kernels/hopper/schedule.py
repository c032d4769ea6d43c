"""Work-tile dealing of the persistent Hopper kernels (forward and backward),
shared by both: tiles t = 0 .. n_work - 1 are dealt to n_programs programs in
rounds, forwards in even rounds and backwards in odd ones (a snake), so the
program that got the longest tile of one round gets the shortest of the next.
What a tile number means (which block of which head) is each kernel's own."""

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
