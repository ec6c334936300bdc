"""The dataset's Zarr arrays read straight from their chunk files, without TensorStore.

TensorStore aborts a ``fork()`` child of a process that used it, and a DataLoader forks
its workers. A worker used to read through a helper process that ran TensorStore for it
(every batch decoded there, written into a pipe, read back and copied); a worker now
reads the chunk files itself, with this module.

It reads what this backend writes and nothing else: a regular grid along the row axis
only, the default chunk key encoding, the ``bytes`` codec (little endian), at most one
compressor (``blosc`` or ``zstd``, decoded by numcodecs, single-threaded) and
``crc32c``, optionally inside ``sharding_indexed``. Anything else raises
:class:`UnsupportedLayout` when the array is opened, so that the caller can keep the
helper process. As with TensorStore (``fill_missing_data_reads=False`` and the
``crc32c`` codec), a missing chunk file or inner chunk and a checksum that does not
match raise; nothing damaged reads as zeros.

The handles mimic the few TensorStore calls the read path makes (``shape``, ``rank``,
``dtype.numpy_dtype``, ``chunk_layout``, ``handle[lo:hi].read().result()``,
``handle.oindex[rows].read().result()``), so the read path is the same code in both
processes. Decoded chunks are kept in a :class:`ChunkCache` of ``cache_pool_bytes``
(a worker's share of the pool), like TensorStore's cache pool.
"""

from __future__ import annotations

import json
import os
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from episodata_core.errors import EpisodataError, IntegrityError

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    import numpy.typing as npt

__all__ = ["ChunkCache", "Done", "FileArray", "UnsupportedLayout", "open_file_array"]

_Buffer = bytes | memoryview  # a chunk's bytes on their way through the codecs
_EMPTY = 2**64 - 1  # an inner chunk that a shard does not hold (offset and size)
_CRC_BYTES = 4


class UnsupportedLayout(EpisodataError, ValueError):
    """An array whose metadata this reader does not decode (not written by this backend)."""


class ChunkCache:
    """Decoded chunks of every array of one open dataset, least recently used dropped first.

    Thread-safe: a worker may read in a read-ahead thread.
    """

    def __init__(self, limit_bytes: int) -> None:
        self.limit_bytes = limit_bytes
        self._held = 0
        self._chunks: OrderedDict[tuple[str, int], npt.NDArray[Any]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple[str, int]) -> npt.NDArray[Any] | None:
        """The decoded chunk ``(array path, chunk number)``, or None."""
        with self._lock:
            chunk = self._chunks.get(key)
            if chunk is not None:
                self._chunks.move_to_end(key)
            return chunk

    def put(self, key: tuple[str, int], chunk: npt.NDArray[Any]) -> None:
        """Keep ``chunk`` if it fits; drop the least recently used ones to make room."""
        if chunk.nbytes > self.limit_bytes:
            return
        with self._lock:
            if key in self._chunks:
                return
            self._chunks[key] = chunk
            self._held += chunk.nbytes
            while self._held > self.limit_bytes:
                _, dropped = self._chunks.popitem(last=False)
                self._held -= dropped.nbytes


@dataclass(frozen=True)
class _Shape:
    shape: tuple[int, ...]


@dataclass(frozen=True)
class _ChunkLayout:
    """What the read path asks of TensorStore's ``chunk_layout``."""

    read_chunk: _Shape  # a decoded chunk (an inner chunk when sharded)
    write_chunk: _Shape  # a chunk file (a shard when sharded)


@dataclass(frozen=True)
class _DataType:
    numpy_dtype: np.dtype[Any]


class Done:
    """A finished read in the shape of a TensorStore future: ``result()`` returns or raises."""

    __slots__ = ("_error", "_value")

    def __init__(self, value: Any = None, error: BaseException | None = None) -> None:
        self._value, self._error = value, error

    def result(self) -> Any:
        if self._error is not None:
            raise self._error
        return self._value


class _Selection:
    """Rows of one array chosen by ``[lo:hi]`` or ``.oindex[rows]``; ``read()`` reads them."""

    __slots__ = ("_array", "_rows")

    def __init__(self, array: FileArray, rows: slice | npt.NDArray[np.int64]) -> None:
        self._array, self._rows = array, rows

    def read(self) -> Done:
        # the read happens here; its error is raised by result(), where the read path
        # waits on it and adds what it was reading
        try:
            rows = self._rows
            if isinstance(rows, slice):
                return Done(self._array.read_range(*rows.indices(self._array.shape[0])[:2]))
            return Done(self._array.read_rows(rows))
        except EpisodataError as err:
            return Done(error=err)


class _RowIndex:
    __slots__ = ("_array",)

    def __init__(self, array: FileArray) -> None:
        self._array = array

    def __getitem__(self, rows: npt.NDArray[np.int64]) -> _Selection:
        return _Selection(self._array, np.asarray(rows, dtype=np.int64))


class FileArray:
    """One Zarr v3 array of this backend's layout, read from its files (see the module)."""

    def __init__(self, folder: Path, document: dict[str, Any], cache: ChunkCache) -> None:
        self.folder = folder
        self.cache = cache
        where = f"{folder / 'zarr.json'}"
        try:
            self.shape = tuple(int(n) for n in document["shape"])
            self.dtype = _DataType(np.dtype(document["data_type"]).newbyteorder("<"))
            grid = document["chunk_grid"]
            encoding = document.get("chunk_key_encoding", {"name": "default"})
            codecs = list(document["codecs"])
        except (KeyError, TypeError, ValueError) as err:
            raise UnsupportedLayout(f"{where}: not Zarr v3 array metadata ({err})") from err
        if grid.get("name") != "regular" or encoding.get("name") != "default":
            raise UnsupportedLayout(f"{where}: only regular grids and default chunk keys")
        self.separator = str(encoding.get("configuration", {}).get("separator", "/"))
        file_chunk = tuple(int(n) for n in grid["configuration"]["chunk_shape"])
        self.inner: tuple[int, ...] | None = None  # the inner chunk of a shard
        self.index_decode: Callable[[_Buffer, str], _Buffer] | None = None
        self.index_at_end = True
        if len(codecs) == 1 and codecs[0].get("name") == "sharding_indexed":
            sharding = codecs[0].get("configuration", {})
            self.inner = tuple(int(n) for n in sharding["chunk_shape"])
            codecs = list(sharding["codecs"])
            self.index_decode = _chain(list(sharding["index_codecs"]), where)
            self.index_at_end = sharding.get("index_location", "end") == "end"
        self.decode = _chain(codecs, where)
        chunk = self.inner or file_chunk
        if len(file_chunk) != len(self.shape) or len(chunk) != len(self.shape):
            raise UnsupportedLayout(f"{where}: chunk shape and array shape differ in rank")
        if any(c < n for c, n in zip(chunk[1:], self.shape[1:], strict=True)):
            raise UnsupportedLayout(f"{where}: chunks split an axis other than the rows")
        if file_chunk[0] % chunk[0]:
            raise UnsupportedLayout(f"{where}: a shard does not hold whole inner chunks")
        self.rank = len(self.shape)
        self.chunk = chunk
        self.chunk_layout = _ChunkLayout(_Shape(chunk), _Shape(file_chunk))
        self.per_file = file_chunk[0] // chunk[0]  # decoded chunks per chunk file
        self.oindex = _RowIndex(self)
        self._key = str(folder)

    def __getitem__(self, rows: slice) -> _Selection:
        if rows.step not in (None, 1):
            raise TypeError("a FileArray takes a slice of rows with step 1")
        return _Selection(self, rows)

    @property
    def empty_rows(self) -> bool:
        """Whether a row holds no elements (a zero-size axis): nothing is ever read."""
        return 0 in self.shape[1:]

    def read_range(self, lo: int, hi: int) -> npt.NDArray[Any]:
        """Rows ``[lo, hi)``, ``[hi - lo, *shape[1:]]``."""
        out = np.empty((max(0, hi - lo), *self.shape[1:]), dtype=self.dtype.numpy_dtype)
        if hi <= lo or self.empty_rows:
            return out
        rows = self.chunk[0]
        for number in range(lo // rows, (hi - 1) // rows + 1):
            first = number * rows
            a, b = max(lo, first), min(hi, first + rows)
            out[a - lo : b - lo] = self.chunk_rows(number)[a - first : b - first]
        return out

    def read_rows(self, rows: npt.NDArray[np.int64]) -> npt.NDArray[Any]:
        """The ``[n]`` rows ``rows`` (sorted), ``[n, *shape[1:]]``."""
        out = np.empty((len(rows), *self.shape[1:]), dtype=self.dtype.numpy_dtype)
        if not len(rows) or self.empty_rows:
            return out
        size = self.chunk[0]
        numbers = rows // size
        bounds = np.flatnonzero(np.diff(numbers)) + 1
        for part in np.split(np.arange(len(rows)), bounds):
            number = int(numbers[part[0]])
            out[part] = self.chunk_rows(number)[rows[part] - number * size]
        return out

    def chunk_rows(self, number: int) -> npt.NDArray[Any]:
        """Decoded chunk ``number`` (along the rows), cut to the array's row shape."""
        key = (self._key, number)
        chunk = self.cache.get(key)
        if chunk is None:
            chunk = self._load(number)
            chunk.flags.writeable = False  # shared by every read through the cache
            self.cache.put(key, chunk)
        return chunk

    def _file(self, number: int) -> Path:
        parts = [str(number // self.per_file), *("0" * (self.rank - 1))]
        return self.folder / ("c" + self.separator + self.separator.join(parts))

    def _load(self, number: int) -> npt.NDArray[Any]:
        file = self._file(number)
        rows = self.chunk[0]
        what = f"rows {number * rows}-{number * rows + rows - 1} of {self.folder}"
        try:
            descriptor = os.open(file, os.O_RDONLY)
        except FileNotFoundError:
            raise EpisodataError(
                f"chunk {file} is missing: it holds {what}; the dataset is damaged "
                "(restore the file from a copy)"
            ) from None
        except OSError as err:
            raise EpisodataError(f"chunk {file} cannot be read ({err})") from err
        try:
            if self.inner is None:
                encoded = _read_all(descriptor)
            else:
                encoded = self._inner_bytes(descriptor, file, number % self.per_file, what)
        finally:
            os.close(descriptor)
        raw = self.decode(encoded, f"chunk {file} ({what})")
        expected = int(np.prod(self.chunk, dtype=np.int64)) * self.dtype.numpy_dtype.itemsize
        if len(raw) != expected:
            raise IntegrityError(
                f"chunk {file} is damaged: it decodes to {len(raw)} bytes, expected "
                f"{expected} ({what})"
            )
        chunk = np.frombuffer(raw, dtype=self.dtype.numpy_dtype).reshape(self.chunk)
        # chunks may be wider than a zero-size axis; never narrower (checked at open)
        return chunk[(slice(None), *(slice(0, n) for n in self.shape[1:]))]

    def _inner_bytes(self, descriptor: int, file: Path, inner: int, what: str) -> bytes:
        """The encoded inner chunk ``inner`` of the shard open as ``descriptor``."""
        assert self.index_decode is not None
        size = os.fstat(descriptor).st_size
        entries = self.per_file * 2 * 8
        length = entries + _CRC_BYTES
        if size < length:
            raise IntegrityError(
                f"chunk {file} is damaged: {size} bytes cannot hold its shard index ({what})"
            )
        start = size - length if self.index_at_end else 0
        index = self.index_decode(os.pread(descriptor, length, start), f"the index of {file}")
        table = np.frombuffer(index, dtype="<u8").reshape(-1, 2)
        offset, nbytes = (int(n) for n in table[inner])
        if offset == _EMPTY and nbytes == _EMPTY:
            raise EpisodataError(
                f"chunk {file} is missing inner chunk {inner}: it holds {what}; the dataset "
                "is damaged (restore the file from a copy)"
            )
        if offset + nbytes > size:
            raise IntegrityError(
                f"chunk {file} is damaged: inner chunk {inner} lies past its end ({what})"
            )
        return os.pread(descriptor, nbytes, offset)


def open_file_array(folder: Path, cache: ChunkCache) -> FileArray:
    """The array in ``folder`` (which holds its ``zarr.json``)."""
    file = folder / "zarr.json"
    try:
        document = json.loads(file.read_bytes())
    except OSError as err:
        raise EpisodataError(f"{file}: cannot be read as Zarr metadata ({err})") from err
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise EpisodataError(f"{file}: cannot be read as Zarr metadata ({err})") from err
    if not isinstance(document, dict) or document.get("node_type") != "array":
        raise EpisodataError(f"{file}: not the metadata of a Zarr array")
    return FileArray(folder, document, cache)


def _read_all(descriptor: int) -> bytes:
    size = os.fstat(descriptor).st_size
    data = os.pread(descriptor, size, 0)
    if len(data) == size:
        return data
    # a file that shrank while read: take what is there (the checksum judges it)
    parts = [data]
    while chunk := os.read(descriptor, 1 << 20):
        parts.append(chunk)
    return b"".join(parts)


def _chain(codecs: list[dict[str, Any]], where: str) -> Callable[[_Buffer, str], _Buffer]:
    """A decoder of one chunk's bytes: the bytes-to-bytes codecs undone, last first."""
    if not codecs or codecs[0].get("name") != "bytes":
        raise UnsupportedLayout(f"{where}: the first codec is not 'bytes'")
    endian = codecs[0].get("configuration", {}).get("endian", "little")
    if endian != "little":
        raise UnsupportedLayout(f"{where}: {endian}-endian chunks")
    steps = [_step(codec, where) for codec in codecs[1:]]
    steps.reverse()

    def decode(data: _Buffer, what: str) -> _Buffer:
        for step in steps:
            data = step(data, what)
        return data

    return decode


def _step(codec: dict[str, Any], where: str) -> Callable[[_Buffer, str], _Buffer]:
    name = codec.get("name")
    if name == "crc32c":
        return _check_crc32c
    if name == "blosc":
        return _blosc
    if name == "zstd":
        return _zstd
    raise UnsupportedLayout(f"{where}: codec {name!r}")


def _check_crc32c(data: _Buffer, what: str) -> _Buffer:
    import google_crc32c

    if len(data) < _CRC_BYTES:
        raise IntegrityError(f"{what} is damaged: {len(data)} bytes, too short for a checksum")
    view = memoryview(data)
    body = view[:-_CRC_BYTES]
    stored = int.from_bytes(view[-_CRC_BYTES:], "little")
    # the C extension takes read-only buffers such as this array, not memoryviews
    if google_crc32c.value(np.frombuffer(body, dtype=np.uint8)) != stored:
        raise IntegrityError(
            f"{what} is damaged: its CRC-32C checksum does not match its bytes; restore "
            "the file from a copy"
        )
    return body


def _blosc(data: _Buffer, what: str) -> _Buffer:
    from numcodecs import blosc  # type: ignore[import-untyped]

    # numcodecs uses Blosc's global thread pool from a main thread (a worker's is one),
    # and that pool does not survive fork(): decode with one thread, in a context of
    # its own; the workers themselves are the parallelism
    blosc.use_threads = False
    try:
        decoded: bytes = blosc.decompress(data)
    except RuntimeError as err:
        raise IntegrityError(f"{what} is damaged: Blosc cannot decode it ({err})") from err
    return decoded


def _zstd(data: _Buffer, what: str) -> _Buffer:
    from numcodecs import zstd

    try:
        decoded: bytes = zstd.decompress(data)
    except RuntimeError as err:
        raise IntegrityError(f"{what} is damaged: zstd cannot decode it ({err})") from err
    return decoded
