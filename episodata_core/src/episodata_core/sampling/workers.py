"""Whether this process is a PyTorch DataLoader worker, asked without importing torch.

A DataLoader worker runs torch's worker loop, so it has imported ``torch.utils.data``
already; a process that has not imported it cannot be one. The question therefore costs
a dictionary lookup in programs that never use torch, and episodata never imports torch
to answer it.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

__all__ = ["WorkerInfo", "dataloader_worker"]


@dataclass(frozen=True)
class WorkerInfo:
    """Which of ``num_workers`` DataLoader workers this process is (``id`` from 0)."""

    id: int
    num_workers: int


def dataloader_worker() -> WorkerInfo | None:
    """Where this process stands among its DataLoader's workers; None outside a worker.

    Set once torch's worker loop runs: a dataset unpickled by a spawned worker before
    its loop starts does not see it yet.
    """
    data = sys.modules.get("torch.utils.data")
    if data is None:
        return None
    info = data.get_worker_info()
    if info is None:
        return None
    return WorkerInfo(id=int(info.id), num_workers=int(info.num_workers))
