"""Child processes that never outlive the process that started them."""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
from typing import Any

_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """Have the kernel send SIGTERM to this process when its parent exits (Linux); call it in the
    child (a ``preexec_fn`` or a pool initializer). Elsewhere it does nothing.

    SIGTERM is set to its default action first: an ignored SIGTERM is inherited across fork and exec
    (a parent started with it ignored passes that on), and the parent-death signal would then be lost
    and the child outlive its parent."""
    try:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    except ValueError:  # a preexec_fn forked from another thread may not set handlers; exec keeps SIG_IGN only
        pass
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except OSError:  # not Linux: process groups and explicit stops still apply
        pass


def stop_process_group(process: subprocess.Popen[Any], grace_s: float) -> None:
    """End ``process``'s whole process group (it was started with ``start_new_session``): SIGTERM,
    then SIGKILL when it has not exited after ``grace_s``; close its pipes either way.

    Args:
        process: the group leader.
        grace_s: seconds to wait after each signal.
    """
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=grace_s)
    except ProcessLookupError:
        pass
    finally:
        for stream in (process.stdout, process.stderr):
            if stream:
                stream.close()
