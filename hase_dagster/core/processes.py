"""Child processes that never outlive the process that started them."""

from __future__ import annotations

import ctypes
import signal

_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """Have the kernel send SIGTERM to this process when its parent exits (Linux); call it in the
    child (a ``preexec_fn`` or a pool initializer). Elsewhere it does nothing."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except OSError:  # not Linux: process groups and explicit stops still apply
        pass
