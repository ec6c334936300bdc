"""Reading zarr datasets written by episodata 0.2.0 (format generation ``"0.2"``), read-only.

The layout, as observed in files 0.2.0 wrote (``tests/data/episodata-0.2/README.md``)::

    manifest.json                     format_version 1, backend "zarr", a schema_version 2 schema
    data.zarr/fields/<key>            [R, *shape]: rows of every finalized episode, back to
                                      back in finalization order (no group zarr.json)
    data.zarr/index/start, length     int64 [N]: first row (-1 while ongoing), rows (T + 1)
    data.zarr/index/ongoing, terminated, truncated   bool [N]
    data.zarr/index/present           bool [N, n_fields], columns in schema order
    pending/ep_{id:06d}.npz           an ongoing episode's rows, one <key>.npy member each

Every array is plain Zarr v3 (``sharding_indexed``, crc32c on the shard index); each is
opened with TensorStore, which reads its own chunk grid from ``zarr.json``. The index and
the pending episodes are read at open; field rows are read on demand, a batch of windows
in one TensorStore read per field.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from episodata_core import location
from episodata_core.errors import DatasetStateError, SchemaError
from episodata_core.generations import OlderDataset
from episodata_core.older import ReadOnlyBackend, manifest_from_02, read_npz_members, unique_keys
from episodata_core.protocols import EpisodeTable

if TYPE_CHECKING:
    from collections.abc import Mapping

    import numpy.typing as npt
    from pydantic import BaseModel

    from episodata_core.protocols import GatherRequest, Rows
    from episodata_core.schema import DatasetSchema, FieldSpec

__all__ = ["Zarr02Backend", "open_02"]

_INDEX = ("start", "length", "ongoing", "terminated", "truncated", "present")
_INDEX_DTYPES = {
    "start": "int64",
    "length": "int64",
    "ongoing": "bool",
    "terminated": "bool",
    "truncated": "bool",
    "present": "bool",
}


def _open_array(path: Path) -> Any:
    import tensorstore as ts

    if not (path / "zarr.json").is_file():
        raise SchemaError(f"{str(path)!r}: the 0.2 dataset has no array here (no zarr.json)")
    spec = {"driver": "zarr3", "kvstore": {"driver": "file", "path": str(path)}}
    try:
        return ts.open(spec, read=True, open=True).result()
    except ValueError as err:
        raise SchemaError(f"{str(path)!r} is not a readable Zarr v3 array ({err})") from err


def _read_all(array: Any, path: Path) -> npt.NDArray[Any]:
    try:
        return np.asarray(array.read().result())
    except ValueError as err:  # a damaged shard index or chunk fails its crc32c
        raise SchemaError(f"{str(path)!r}: cannot read the array ({err}); it is damaged") from err


class Zarr02Backend(ReadOnlyBackend):
    """A zarr dataset written by episodata 0.2.0, opened read-only."""

    name: ClassVar[str] = "zarr"
    description: ClassVar[str] = "Zarr v3 datasets written by episodata 0.2.0 (read-only)"
    generation: ClassVar[str] = "0.2"

    def __init__(
        self,
        folder: str,
        schema: DatasetSchema,
        table: EpisodeTable,
        starts: npt.NDArray[np.int64],
        arrays: Mapping[str, Any],
        pending: Mapping[int, Mapping[str, npt.NDArray[Any]]],
    ) -> None:
        super().__init__(folder, schema, table)
        self._starts = starts
        self._arrays = dict(arrays)  # qualified key -> TensorStore handle
        self._pending = dict(pending)  # ongoing episode id -> qualified key -> rows
        self._pid = os.getpid()

    @classmethod
    def open(cls, location: str, options: BaseModel, *, writable: bool = False) -> Zarr02Backend:
        """Open read-only; ``writable=True`` is refused with the way to migrate."""
        opened = open_02(location, _manifest_document(location))
        backend = opened.backend
        assert isinstance(backend, Zarr02Backend)
        if writable:
            raise DatasetStateError(backend.read_only_reason)
        return backend

    def _read(self, episode: int, start: int, stop: int, spec: FieldSpec) -> npt.NDArray[Any]:
        key = spec.qualified_key
        if episode in self._pending:
            return self._pending[episode][key][start:stop].copy()
        self._check_process()
        first = int(self._starts[episode])
        return self._read_rows(key, np.arange(first + start, first + stop, dtype=np.int64))

    def gather_rows(self, request: GatherRequest) -> Rows:
        """A batch of windows: one TensorStore read per field for the finalized episodes."""
        self._check_open()
        counts = request.counts.astype(np.int64)
        stored = ~np.isin(request.episodes, np.fromiter(self._pending, np.int64))
        out: dict[str, npt.NDArray[Any]] = {}
        for key in request.fields:
            spec = self._schema[key]
            present = self._table.present.get(key)
            keep = stored & (counts > 0)
            if present is not None:
                keep &= present[request.episodes]
            array = np.zeros((len(request), request.num_rows, *spec.shape), spec.np_dtype)
            picked = np.flatnonzero(keep)
            if picked.size:
                self._check_process()
                # every stored row a window covers, and where it lands in the output
                lengths = counts[picked]
                within = np.arange(int(lengths.sum())) - np.repeat(
                    np.cumsum(lengths) - lengths, lengths
                )
                batch = np.repeat(picked, lengths)
                rows = np.repeat(
                    self._starts[request.episodes[picked]] + request.starts[picked], lengths
                )
                rows += within
                slots = np.repeat(request.offsets[picked], lengths) + within
                array[batch, slots] = self._read_rows(key, rows)
            for b in np.flatnonzero(~stored & (counts > 0)).tolist():
                episode = int(request.episodes[b])
                if present is None or present[episode]:
                    start, count, offset = (
                        int(request.starts[b]),
                        int(counts[b]),
                        int(request.offsets[b]),
                    )
                    array[b, offset : offset + count] = self._pending[episode][key][
                        start : start + count
                    ]
            out[key] = array
        return out

    def _read_rows(self, key: str, rows: npt.NDArray[np.int64]) -> npt.NDArray[Any]:
        array = self._arrays[key]
        if rows.size == 0:
            spec = self._schema[key]
            return np.zeros((0, *spec.shape), spec.np_dtype)
        try:
            return np.asarray(array[rows].read().result())
        except ValueError as err:
            raise SchemaError(
                f"{self._location!r}: field {key!r} of the 0.2 dataset cannot be read ({err}); "
                "a data file is damaged"
            ) from err

    def _check_process(self) -> None:
        if os.getpid() != self._pid:
            raise DatasetStateError(
                "cannot read a 0.2 zarr dataset in a fork() child of the process that opened it "
                "(TensorStore cannot run there); use 'spawn' workers, or migrate it first with "
                f"`episodata migrate {self._location} NEW`"
            )


def _manifest_document(folder: str) -> dict[str, Any]:
    from episodata_core.manifest import read_manifest_document

    return read_manifest_document(folder)


def open_02(folder: str, document: Mapping[str, Any]) -> OlderDataset:
    """Open the 0.2 zarr dataset at ``folder`` whose manifest is ``document``.

    Checks every index array and field array against the manifest before anything is
    read from the field arrays.
    """
    where = repr(str(Path(folder) / location.MANIFEST_NAME))
    manifest = manifest_from_02(document, where)
    schema = manifest.schema
    by_key = unique_keys(schema, where)
    root = Path(folder) / "data.zarr"
    index: dict[str, npt.NDArray[Any]] = {}
    for name in _INDEX:
        path = root / "index" / name
        handle = _open_array(path)
        if handle.dtype.numpy_dtype != np.dtype(_INDEX_DTYPES[name]):
            raise SchemaError(
                f"{str(path)!r}: expected {_INDEX_DTYPES[name]}, got {handle.dtype.numpy_dtype}"
            )
        index[name] = _read_all(handle, path)
    count = int(index["start"].shape[0])
    for name in _INDEX:
        expected = (count, len(schema)) if name == "present" else (count,)
        if index[name].shape != expected:
            raise SchemaError(
                f"{str(root / 'index' / name)!r}: shape {list(index[name].shape)}, expected "
                f"{list(expected)} (one entry per episode, as in index/start)"
            )
    starts, lengths, ongoing = index["start"], index["length"], index["ongoing"]
    arrays: dict[str, Any] = {}
    total: int | None = None
    for spec in schema:
        path = location.inside(root / "fields", spec.key)
        handle = _open_array(path)
        shape = tuple(int(n) for n in handle.shape)
        if shape[1:] != spec.shape or handle.dtype.numpy_dtype != spec.np_dtype:
            raise SchemaError(
                f"{str(path)!r}: holds {handle.dtype.numpy_dtype} {list(shape)}, expected "
                f"{spec.dtype} [rows, {', '.join(map(str, spec.shape))}] (the manifest's schema)"
            )
        if total is not None and shape[0] != total:
            raise SchemaError(f"{str(path)!r}: {shape[0]} rows, other fields have {total}")
        total = shape[0]
        arrays[spec.qualified_key] = handle
    rows = total or 0
    done = ~ongoing
    if np.any(lengths < 1) or np.any(done & ((starts < 0) | (starts + lengths > rows))):
        bad = int(
            np.flatnonzero((lengths < 1) | (done & ((starts < 0) | (starts + lengths > rows))))[0]
        )
        raise SchemaError(
            f"{str(root / 'index')!r}: episode {bad} has start {int(starts[bad])} and length "
            f"{int(lengths[bad])}, outside the {rows} stored rows; the index is damaged"
        )
    present = index["present"]
    pending: dict[int, dict[str, npt.NDArray[Any]]] = {}
    for episode in np.flatnonzero(ongoing).tolist():
        path = location.inside(folder, f"pending/ep_{episode:06d}.npz")
        if not path.is_file():
            raise SchemaError(
                f"{str(path)!r} is missing: episode {episode} is ongoing in the index and its "
                "rows live there"
            )
        members = read_npz_members(str(path), by_key, int(lengths[episode]))
        pending[episode] = {by_key[key].qualified_key: rows_ for key, rows_ in members.items()}
        for column, spec in enumerate(schema):
            if present[episode, column] and spec.key not in members:
                raise SchemaError(f"{str(path)!r}: field {spec.key!r} is missing")
    table = EpisodeTable(
        length=(lengths - 1).astype(np.int64),
        terminated=index["terminated"].astype(np.bool_),
        truncated=index["truncated"].astype(np.bool_),
        ongoing=ongoing.astype(np.bool_),
        present={
            spec.qualified_key: present[:, column].astype(np.bool_)
            for column, spec in enumerate(schema)
            if spec.optional
        },
    )
    for column, spec in enumerate(schema):
        if not spec.optional and not bool(present[:, column].all()):
            episode = int(np.flatnonzero(~present[:, column])[0])
            raise SchemaError(
                f"{str(root / 'index' / 'present')!r}: required field {spec.key!r} is marked "
                f"absent in episode {episode}; the index is damaged"
            )
    return OlderDataset(Zarr02Backend(folder, schema, table, starts, arrays, pending), manifest)
