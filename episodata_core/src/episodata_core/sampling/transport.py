"""Batches leave a DataLoader worker through shared memory and arrive as NumPy arrays.

A DataLoader worker hands each batch to the main process by pickling it into a queue.
NumPy arrays pickle by value: every byte is copied into a pipe and out again. Torch
tensors pickle as a handle to shared memory, after one copy into it. For W8's 26 MB
image batches the DataLoader moves 18.7 batches/s of NumPy arrays and 68.8 of tensors
(docs/performance.md). So :meth:`SegmentDataset.collate
<episodata_core.sampling.segments.SegmentDataset.collate>` returns a :class:`WorkerBatch`
when it runs in a worker: it pickles its large arrays as tensors and unpickles as a plain
:class:`~episodata_core.views.Batch` whose NumPy arrays view that shared memory. The main
process gets what it gets without workers, and since only the row buffers travel,
``obs`` and ``next_obs`` are rebuilt on arrival as two views of one buffer.

Only a worker makes a WorkerBatch, and a worker has imported torch already: episodata
never imports torch itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, SupportsIndex

import numpy as np

from episodata_core.sampling.workers import dataloader_worker
from episodata_core.views import Batch, Flags

if TYPE_CHECKING:
    from collections.abc import Mapping

    from episodata_core.schema import DatasetSchema

__all__ = ["SHARE_MIN_BYTES", "WorkerBatch", "for_transport"]

SHARE_MIN_BYTES = 1 << 20
"""Arrays smaller than this pickle by value: below it a shared-memory segment (a file
descriptor sent over a socket, an mmap on each side) costs more than copying the bytes.
Measured with 2 forked workers and one array per batch: at 256 KiB the pipe moved 2.7x
as many batches as shared memory, at 768 KiB 1.2x; at 1 MiB shared memory moved 1.7x
as many.
"""


class WorkerBatch(Batch):
    """A Batch made in a DataLoader worker; it pickles its large arrays through shared memory.

    It unpickles as a plain :class:`~episodata_core.views.Batch`: arrays of at least
    :data:`SHARE_MIN_BYTES` arrive as NumPy arrays over shared memory, the rest as
    ordinary copies, and buffers a custom ``collate_fn`` already turned into something
    else (torch tensors, say) travel as that type pickles. Pickling one needs torch, and
    unpickling needs it wherever the batch is unpickled.
    """

    def __reduce__(self) -> tuple[Any, ...]:
        # only the row buffers and flags travel: views are rebuilt from them on arrival
        buffers = {key: _outbound(value) for key, value in self._buffers.items()}
        flags = self._flags
        outbound = (_outbound(flags.terminated), _outbound(flags.truncated), _outbound(flags.mask))
        return (_arrive, (self._schema, buffers, outbound, self._split))


def for_transport(batch: Batch) -> Batch:
    """``batch`` as a :class:`WorkerBatch` in a DataLoader worker; unchanged elsewhere."""
    if isinstance(batch, WorkerBatch) or dataloader_worker() is None:
        return batch
    return WorkerBatch(batch.schema, batch.buffers, batch._flags, split=batch._split)


class _SharedArray:
    """One NumPy array on its way out: pickled as a torch tensor, unpickled as NumPy."""

    __slots__ = ("array",)

    def __init__(self, array: np.ndarray[Any, Any]) -> None:
        self.array = array

    def __reduce_ex__(self, protocol: SupportsIndex) -> str | tuple[Any, ...]:
        import torch  # a DataLoader worker has imported it: this costs nothing

        array = self.array
        if not array.flags.writeable:
            # torch warns about tensors over read-only memory; it copies into shared
            # memory anyway, so this copy is the only extra cost, and a rare one
            array = array.copy()
        try:
            tensor = torch.from_numpy(array)
        except (TypeError, ValueError):
            # a dtype torch lacks (strings, byte-swapped) or negative strides
            return self.array.__reduce_ex__(protocol)
        return (_inbound, (tensor,))


def _outbound(value: Any) -> Any:
    if isinstance(value, np.ndarray) and value.nbytes >= SHARE_MIN_BYTES:
        return _SharedArray(value)
    return value


def _inbound(tensor: Any) -> np.ndarray[Any, Any]:
    # the array keeps the tensor, and so its shared memory, alive (it is the array's base)
    array: np.ndarray[Any, Any] = tensor.numpy()
    return array


def _arrive(
    schema: DatasetSchema,
    buffers: Mapping[str, Any],
    flags: tuple[Any, Any, Any],
    split: int | None,
) -> Batch:
    return Batch(schema, buffers, Flags(*flags), split=split)
