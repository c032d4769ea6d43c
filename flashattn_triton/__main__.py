"""``python -m flashattn_triton check``: see :mod:`flashattn_triton.check`."""

import sys

from .check import main

sys.exit(main())
