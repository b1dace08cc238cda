"""Drivers: programs the lab starts as a sample's command when the program under test needs a
partner (a server and its load generator).  Each applies $STRATA_LAB_PRELOAD to its target only,
and starts its partners with die_with_driver(), so that none outlives the sample."""

from __future__ import annotations

import ctypes
import os
import signal
from typing import Callable

PR_SET_PDEATHSIG = 1


def die_with_driver(sig: int = signal.SIGKILL,
                    then: Callable[[], None] | None = None) -> Callable[[], None]:
    """A preexec_fn for a partner process: the kernel sends it `sig` when the driver dies, even by
    SIGKILL (PR_SET_PDEATHSIG, as the lab's launcher spawn.c does for the driver itself).  The lab
    kills a sample's process group on a timeout or an interrupt, but `kill -9` of the lab reaches
    only the launcher and the driver: a server started without this stayed behind.  `then` runs
    after (pinning).  Call it from the thread that starts the partner: the signal follows the
    death of that thread."""
    libc = ctypes.CDLL(None, use_errno=True)  # looked up here, not between fork and exec
    driver = os.getpid()

    def preexec() -> None:
        libc.prctl(PR_SET_PDEATHSIG, ctypes.c_ulong(int(sig)), ctypes.c_ulong(0), ctypes.c_ulong(0),
                   ctypes.c_ulong(0))
        if os.getppid() != driver:  # the driver died before prctl: no signal would come
            os._exit(125)
        if then is not None:
            then()

    return preexec
