"""Triton kernels: shared tile helpers, forward, backward, decode, launch configs."""
