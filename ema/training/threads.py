"""The number of CPU threads torch uses in a process, which worker processes copy from their parent.

torch's results depend on it: the same training with one thread and with two gives models that
differ in the last digits (summation order), and after a few epochs the audits' p-values differ
too. A grid's workers therefore use their parent's count, so that they reproduce a serial run.
"""

from __future__ import annotations

import torch


def torch_threads() -> int:
    """Threads torch's intra-op work uses in this process (``OMP_NUM_THREADS``, else the number of cores)."""
    return torch.get_num_threads()


def use_threads(threads: int) -> None:
    """Make torch's intra-op work in this process use ``threads`` threads."""
    torch.set_num_threads(threads)
