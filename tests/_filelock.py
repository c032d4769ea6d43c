"""An exclusive lock between processes on one machine, for the tests' harness
(conftest.py serializes the ``bigmem`` tests across pytest-xdist workers
with it).  Standard library only, so that a subprocess can import it
without torch."""

import contextlib
import os

try:
    import fcntl
except ImportError:  # not a POSIX system: no lock (the GPU runs are on Linux)
    fcntl = None

HAVE_LOCK = fcntl is not None


@contextlib.contextmanager
def file_lock(path):
    """Hold an exclusive flock on ``path`` (created if missing) for the block;
    waits while another process holds it.  The kernel drops the lock when
    the file is closed, so a process that dies mid-test never leaves it held."""
    if fcntl is None:
        yield
        return
    fd = os.open(os.fspath(path), os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock
