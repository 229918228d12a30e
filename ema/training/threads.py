"""How many CPU threads torch uses in this process: processes that share the machine's cores divide them."""

from __future__ import annotations

import os

import torch


def usable_cores() -> int:
    """The CPU cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def share_cores(processes: int) -> int:
    """Threads each of ``processes`` processes should use so that together they fill the usable cores, at least 1.

    >>> share_cores(10**6)
    1
    """
    return max(1, usable_cores() // processes)


def use_threads(threads: int) -> None:
    """Make torch's intra-op work in this process use ``threads`` threads."""
    torch.set_num_threads(threads)
