"""Batches leave a DataLoader worker through shared memory and arrive as NumPy arrays.

A DataLoader worker hands each batch to the main process by pickling it into a queue.
NumPy arrays pickle by value: every byte is copied into a pipe and out again. Torch
tensors pickle as a handle to shared memory, after one copy into a *new* shared-memory
segment, and a new segment is expensive: the kernel faults in and zeroes every page of
it (for W8's 26 MB image batches about 20 ms of a worker's time, more than copying the
bytes, 3 ms). So :meth:`SegmentDataset.collate
<episodata_core.sampling.segments.SegmentDataset.collate>` returns a :class:`WorkerBatch`
when it runs in a worker, and the worker packs each batch's arrays into one *slot*: a
shared-memory buffer of its own that it reuses once the main process has let go of the
batch that last travelled in it. The first bytes of a slot say whether the main process
still holds it: the worker sets them before sending, and the main process clears them
when the last array of the batch is garbage collected. Reusing a slot costs one copy
into memory whose pages are already in place, and the handle of a segment torch already
shares.

The main process gets what it gets without workers: a plain :class:`~episodata_core.views.Batch`
of NumPy arrays, here views of the slot, and since only the row buffers travel, ``obs``
and ``next_obs`` are rebuilt on arrival as two views of one buffer.

Only a worker makes a WorkerBatch, and a worker has imported torch already: episodata
never imports torch itself.
"""

from __future__ import annotations

import os
import threading
import weakref
from typing import TYPE_CHECKING, Any, SupportsIndex

import numpy as np

from episodata_core.sampling.workers import dataloader_worker
from episodata_core.views import Batch, Flags

if TYPE_CHECKING:
    from collections.abc import Mapping

    from episodata_core.schema import DatasetSchema

__all__ = ["SHARE_MIN_BYTES", "WorkerBatch", "for_transport"]

SHARE_MIN_BYTES = 1 << 20
"""Batches smaller than this pickle by value: below it a shared-memory segment (a file
descriptor sent over a socket, an mmap on each side) costs more than copying the bytes.
Measured with 2 forked workers and one array per batch: at 256 KiB the pipe moved 2.7x
as many batches as shared memory, at 768 KiB 1.2x; at 1 MiB shared memory moved 1.7x
as many.
"""

_HEADER = 64
"""Bytes before a slot's arrays; byte 0 is 1 while the main process holds the slot."""

_ALIGN = 64  # every array starts on a cache line (and any dtype's alignment)

_ROUND = 1 << 20  # slots are sized in MiB, so batches of slightly different sizes share them


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
        flags = self._flags
        arrays = {
            **self._buffers,
            _FLAG_KEYS[0]: flags.terminated,
            _FLAG_KEYS[1]: flags.truncated,
            _FLAG_KEYS[2]: flags.mask,
        }
        packable = {key: value for key, value in arrays.items() if _packable(value)}
        size = sum(value.nbytes for value in packable.values())
        if size >= SHARE_MIN_BYTES and dataloader_worker() is not None:
            slot, layout = _POOL.pack(packable)
            rest = {key: value for key, value in arrays.items() if key not in packable}
            return (_arrive_slot, (self._schema, slot, layout, rest, self._split))
        # outside a worker (plain pickling) nothing would ever release a slot: every
        # large array travels as a tensor of its own, as torch pickles it
        buffers = {key: _outbound(value) for key, value in self._buffers.items()}
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


_FLAG_KEYS = ("\0terminated", "\0truncated", "\0mask")  # never a field key ("role/key")


def _packable(value: Any) -> bool:
    return isinstance(value, np.ndarray) and not value.dtype.hasobject


class _SlotPool:
    """A worker's shared-memory slots: uint8 torch tensors, reused once released."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # the queue's feeder thread pickles; be safe anyway
        self._pid = os.getpid()
        self._slots: list[tuple[Any, np.ndarray[Any, Any]]] = []  # (tensor, its bytes)

    def pack(
        self, arrays: Mapping[str, np.ndarray[Any, Any]]
    ) -> tuple[Any, list[tuple[str, int, str, tuple[int, ...]]]]:
        """Copy ``arrays`` into a free slot; returns the slot and where each array lies."""
        layout = []
        end = _HEADER
        for key, value in arrays.items():
            layout.append((key, end, value.dtype.str, value.shape))
            end += -(-value.nbytes // _ALIGN) * _ALIGN
        with self._lock:
            tensor, view = self._acquire(end)
            for (_, offset, _, shape), value in zip(layout, arrays.values(), strict=True):
                target = view[offset : offset + value.nbytes].view(value.dtype).reshape(shape)
                np.copyto(target, value, casting="no")
            view[0] = 1  # held by the main process until it lets go of the batch
        return tensor, layout

    def _acquire(self, size: int) -> tuple[Any, np.ndarray[Any, Any]]:
        if self._pid != os.getpid():
            # inherited through fork from a worker: those slots are the parent's
            self._slots, self._pid = [], os.getpid()
        free = [slot for slot in self._slots if slot[1][0] == 0 and len(slot[1]) >= size]
        if free:
            return min(free, key=lambda slot: len(slot[1]))
        import torch  # a DataLoader worker has imported it: this costs nothing

        # free slots too small for this batch would only grow in number: drop them
        self._slots = [slot for slot in self._slots if slot[1][0] != 0]
        tensor: Any = torch.empty(-(-size // _ROUND) * _ROUND, dtype=torch.uint8)
        tensor.share_memory_()  # its pages are faulted in once, here, then reused
        slot = (tensor, tensor.numpy())
        self._slots.append(slot)
        return slot


_POOL = _SlotPool()


def _release(storage: Any) -> None:
    storage[0] = 0  # the worker may fill this slot again


def _arrive_slot(
    schema: DatasetSchema,
    tensor: Any,
    layout: list[tuple[str, int, str, tuple[int, ...]]],
    rest: Mapping[str, Any],
    split: int | None,
) -> Batch:
    # every array below is a view of ``data`` and keeps it alive (NumPy's base of a view
    # is the first array up the chain that does not view another array); ``data`` is the
    # object to watch, not ``tensor``: its base is another tensor object of the same memory
    data = tensor.numpy()
    arrays = dict(rest)
    for key, offset, dtype, shape in layout:
        kind = np.dtype(dtype)
        size = int(np.prod(shape, dtype=np.int64)) * kind.itemsize
        arrays[key] = data[offset : offset + size].view(kind).reshape(shape)
    # once the last array dies, tell the worker (the storage object keeps the memory
    # mapped until then, and holds no array)
    weakref.finalize(data, _release, tensor.untyped_storage()).atexit = False
    flags = Flags(*(arrays.pop(key) for key in _FLAG_KEYS))
    return Batch(schema, arrays, flags, split=split)
