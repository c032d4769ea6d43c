"""The benchmark harness, installed with the package.

* :mod:`flashattn_triton.bench.common`: FLOP convention, providers (ours, SDPA
  backends, FlexAttention, naive), timing, environment capture, writers, progress.
* :mod:`flashattn_triton.bench.attention`: the attention throughput sweep
  (tables, plot, JSON), run by ``flashattn-triton bench``.

The repository's ``benchmarks/`` scripts import the same modules (its
``common.py`` re-exports :mod:`flashattn_triton.bench.common`). Nothing here is
imported by the library itself.
"""
