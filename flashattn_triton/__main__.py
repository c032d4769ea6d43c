"""``python -m flashattn_triton {check,info,bench}``: see :mod:`flashattn_triton.cli`."""

import sys

from .cli import main

sys.exit(main())
