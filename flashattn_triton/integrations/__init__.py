"""Hookups of flashattn_triton into other libraries.

* :mod:`flashattn_triton.integrations.transformers` -- an attention
  implementation for Hugging Face Transformers (``register()``).

Each submodule imports its library lazily: importing this package never needs
the library installed.
"""

__all__ = ["transformers"]
