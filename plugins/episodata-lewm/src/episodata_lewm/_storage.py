"""HDF5 storage checks of rule 5 (formats.md §2.2): filters available, chunks allocated.

Both run before the first data read: Blosc is an optional filter, so a file whose first
chunks happen to be stored raw would otherwise fail halfway through an import, and an
unallocated chunk silently reads as zeros.
"""

from __future__ import annotations

import contextlib
import math
from typing import TYPE_CHECKING, Any

import numpy as np

from episodata_core.errors import MissingFilterError, PartialFileError

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = ["check_chunks", "check_filters", "largest_chunk_bytes"]

_FILTER_NAMES = {
    1: "deflate (gzip)",
    2: "shuffle",
    3: "fletcher32",
    4: "szip",
    5: "nbit",
    6: "scaleoffset",
    307: "bzip2",
    32000: "lzf",
    32001: "blosc",
    32004: "lz4",
    32008: "bitshuffle",
    32013: "zfp",
    32015: "zstd",
    32026: "blosc2",
}
_plugin_import_tried = False


def _try_hdf5plugin() -> None:
    global _plugin_import_tried
    if _plugin_import_tried:
        return
    _plugin_import_tried = True
    with contextlib.suppress(ImportError):  # then the filter check below reports it
        import hdf5plugin  # noqa: F401  (registers Blosc, LZ4, Zstd, ... with HDF5)


def filters_of(dataset: Any) -> list[tuple[int, str]]:
    """``(filter id, name)`` of every filter in a dataset's pipeline."""
    plist = dataset.id.get_create_plist()
    found = []
    for i in range(plist.get_nfilters()):
        code, _flags, _values, name = plist.get_filter(i)
        label = name.decode(errors="replace") if isinstance(name, bytes) else str(name)
        found.append((int(code), label or _FILTER_NAMES.get(int(code), "unknown")))
    return found


def check_filters(handle: Any, path: str, names: Iterable[str]) -> dict[str, list[str]]:
    """Raise :class:`MissingFilterError` for an unavailable filter; ``{column: names}``."""
    import h5py

    pipelines: dict[str, list[str]] = {}
    for name in names:
        pipeline = filters_of(handle[name])
        pipelines[name] = [label for _, label in pipeline]
        for code, label in pipeline:
            if h5py.h5z.filter_avail(code):
                continue
            _try_hdf5plugin()
            if h5py.h5z.filter_avail(code):
                continue
            raise MissingFilterError(
                f"{path!r}: column {name!r} is compressed with HDF5 filter {code} "
                f"({_FILTER_NAMES.get(code, label)}), which is not available. Install the "
                f'filter plugins: pip install "episodata[lewm]" (hdf5plugin); episodata '
                "imports hdf5plugin before reading"
            )
    return pipelines


def largest_chunk_bytes(handle: Any, names: Iterable[str]) -> int:
    """Bytes of the largest chunk among the columns (0 when none is chunked)."""
    largest = 0
    for name in names:
        dataset = handle[name]
        if dataset.chunks is not None:
            size = dataset.dtype.itemsize * math.prod(dataset.chunks)
            largest = max(largest, size)
    return largest


def check_chunks(
    handle: Any,
    path: str,
    names: Iterable[str],
    runs: list[tuple[int, int]],
    populated_bytes: int | None,
) -> None:
    """Every chunk overlapping the row ``runs`` is allocated (and before populated_bytes)."""
    import h5py

    for name in names:
        dataset = handle[name]
        layout = dataset.id.get_create_plist().get_layout()
        if layout == h5py.h5d.COMPACT or dataset.size == 0 or not runs:
            continue
        if layout == h5py.h5d.CONTIGUOUS:
            offset = dataset.id.get_offset()
            end = None if offset is None else offset + dataset.id.get_storage_size()
            if end is None or (populated_bytes is not None and end > populated_bytes):
                _partial(path, name, [(0, dataset.shape[0])], populated_bytes)
            continue
        _check_chunked(dataset, path, name, runs, populated_bytes)


def _check_chunked(
    dataset: Any,
    path: str,
    name: str,
    runs: list[tuple[int, int]],
    populated_bytes: int | None,
) -> None:
    chunks, shape = dataset.chunks, dataset.shape
    per_row_block = math.prod(math.ceil(s / c) for s, c in zip(shape[1:], chunks[1:], strict=True))
    blocks = math.ceil(shape[0] / chunks[0])
    if populated_bytes is None and dataset.id.get_num_chunks() == blocks * per_row_block:
        return  # every chunk of the dataset exists
    allocated = np.zeros(blocks, dtype=np.int64)

    def count(info: Any) -> None:
        fits = populated_bytes is None or info.byte_offset + info.size <= populated_bytes
        if info.byte_offset is not None and fits:
            allocated[info.chunk_offset[0] // chunks[0]] += 1

    dataset.id.chunk_iter(count)
    needed = np.zeros(blocks, dtype=bool)
    for r0, r1 in runs:
        needed[r0 // chunks[0] : math.ceil(r1 / chunks[0])] = True
    missing = np.flatnonzero(needed & (allocated < per_row_block))
    if missing.size:
        spans = [(int(b) * chunks[0], min((int(b) + 1) * chunks[0], shape[0])) for b in missing]
        _partial(path, name, spans, populated_bytes)


def _partial(
    path: str, name: str, spans: list[tuple[int, int]], populated_bytes: int | None
) -> None:
    shown = ", ".join(f"rows {a}..{b - 1}" for a, b in spans[:5])
    if populated_bytes is None:
        where, effect = "unallocated", "they would read as zeros"
    else:
        where, effect = f"not within {populated_bytes} bytes", "they lie past the populated part"
    raise PartialFileError(
        f"{path!r}: column {name!r} has {len(spans)} chunk(s) {where} ({shown}); {effect}. "
        "The file is incomplete (a partial download or extraction): fetch it again, or "
        "import only populated episodes with episodes=..."
    )
