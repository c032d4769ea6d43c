"""What counts as a build failure of a Gluon kernel (shared by fwd.py and bwd.py).

A configuration that fails to compile here (a Triton whose Gluon lowering
differs, ptxas, or more shared memory than the GPU has) is recorded and
declined, so the caller runs the portable kernel; an error at run time
propagates."""

import triton
from triton.runtime.errors import OutOfResources

LAUNCH_ERRORS = (triton.CompilationError, RuntimeError, OutOfResources)


def is_build_failure(exc: BaseException) -> bool:
    return (isinstance(exc, OutOfResources) or "compil" in type(exc).__name__.lower()
            or "PTXAS" in str(exc) or "MLIR" in str(exc))
