"""What the readers of older format generations share: a read-only backend and npz members.

Backend plugins read datasets of older generations (``generations.py``) into a
:class:`ReadOnlyBackend`: the episode table is read once at open, rows are read on
demand by the plugin's :meth:`ReadOnlyBackend._read`. Every write is refused with a
message that says how to migrate. :func:`read_npz_members` reads one episode archive
of ``<key>.npy`` members (0.2's npz_directory episodes and zarr pending episodes),
checking every header against the schema before it allocates the array.
"""

from __future__ import annotations

import zipfile
import zlib
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
from pydantic import BaseModel, ConfigDict

from episodata_core import selection
from episodata_core.errors import DatasetStateError, SchemaError
from episodata_core.manifest import Manifest, Provenance
from episodata_core.schema import DatasetSchema, FieldSpec

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    import numpy.typing as npt

    from episodata_core.protocols import EpisodeRows, EpisodeTable, GatherRequest, Rows

__all__ = ["NoOptions", "ReadOnlyBackend", "manifest_from_02", "read_npz_members"]


class NoOptions(BaseModel):
    """A read-only older dataset has no options; stored ones of its generation are ignored."""

    model_config = ConfigDict(extra="ignore")


class ReadOnlyBackend(selection.ReadsSelections):
    """A dataset of an older generation, answering reads; every write is refused.

    Subclasses set ``name``, ``description``, ``generation`` and implement :meth:`_read`
    (rows of one present field) and :meth:`open`; they may override :meth:`gather_rows`
    with a batched read.
    """

    name: ClassVar[str]
    description: ClassVar[str]
    generation: ClassVar[str]
    Options: ClassVar[type[BaseModel]] = NoOptions
    default_prefetch: ClassVar[int] = 0

    def __init__(self, location: str, schema: DatasetSchema, table: EpisodeTable) -> None:
        self._location = location
        self._schema = schema
        self._table = table
        self._closed = False

    # -- what the Dataset asks ------------------------------------------------------------

    @property
    def schema(self) -> DatasetSchema:
        """The schema, converted from the older manifest."""
        return self._schema

    @property
    def location(self) -> str:
        """The dataset folder."""
        return self._location

    @property
    def read_only_reason(self) -> str:
        """Why writes are refused, and what to do instead."""
        return (
            f"{self._location!r} is a dataset of format generation {self.generation} "
            f"(written by episodata {self.generation}); this episodata reads it but does not "
            f"write it: migrate it with `episodata migrate {self._location} NEW` (or "
            "Dataset.copy_to) and write to the copy"
        )

    def episode_table(self) -> EpisodeTable:
        """Lengths (transitions) and flags of every episode, read at open."""
        return self._table

    def refresh(self) -> None:
        """Nothing to refresh: this episodata never writes an older generation."""

    def read_rows(self, episode: int, start: int, stop: int, fields: Sequence[str]) -> Rows:
        """Rows ``[start, stop)`` of one episode; arrays are fresh copies."""
        self._check_open()
        rows = int(self._table.length[episode]) + 1
        if not 0 <= start <= stop <= rows:
            raise IndexError(
                f"rows [{start}, {stop}) are outside episode {episode}, which has {rows} rows"
            )
        out: dict[str, npt.NDArray[Any]] = {}
        for key in fields:
            present = self._table.present.get(key)
            if present is not None and not present[episode]:
                raise KeyError(f"optional field {key!r} is absent from episode {episode}")
            out[key] = self._read(episode, start, stop, self._schema[key])
        return out

    def gather_rows(self, request: GatherRequest) -> Rows:
        """A batch of windows, one :meth:`_read` per window and field (absent: zeros)."""
        self._check_open()
        out: dict[str, npt.NDArray[Any]] = {}
        for key in request.fields:
            spec = self._schema[key]
            present = self._table.present.get(key)
            array = np.zeros((len(request), request.num_rows, *spec.shape), spec.np_dtype)
            for b in range(len(request)):
                episode, count = int(request.episodes[b]), int(request.counts[b])
                if count == 0 or (present is not None and not present[episode]):
                    continue
                start, offset = int(request.starts[b]), int(request.offsets[b])
                array[b, offset : offset + count] = self._read(episode, start, start + count, spec)
            out[key] = array
        return out

    def close(self) -> None:
        """Release files; reads raise afterwards."""
        self._closed = True

    # -- refused writes -------------------------------------------------------------------

    @classmethod
    def create(cls, schema: DatasetSchema, location: str | None, options: BaseModel) -> Any:
        """Refused: datasets are created in today's generation."""
        raise DatasetStateError(
            f"datasets of format generation {cls.generation} cannot be created; create one of "
            "today's generation with Dataset.create"
        )

    def start_episode(self, rows: Rows) -> int:
        """Refused: see :attr:`read_only_reason`."""
        raise DatasetStateError(self.read_only_reason)

    def append_rows(self, episode: int, rows: Rows) -> None:
        """Refused: see :attr:`read_only_reason`."""
        raise DatasetStateError(self.read_only_reason)

    def finalize_episode(self, episode: int, *, terminated: bool, truncated: bool) -> None:
        """Refused: see :attr:`read_only_reason`."""
        raise DatasetStateError(self.read_only_reason)

    def add_episode(self, rows: Rows, *, terminated: bool, truncated: bool) -> int:
        """Refused: see :attr:`read_only_reason`."""
        raise DatasetStateError(self.read_only_reason)

    def add_episodes(self, episodes: Sequence[EpisodeRows]) -> list[int]:
        """Refused: see :attr:`read_only_reason`."""
        raise DatasetStateError(self.read_only_reason)

    # -- for subclasses -------------------------------------------------------------------

    def _read(self, episode: int, start: int, stop: int, spec: FieldSpec) -> npt.NDArray[Any]:
        """Rows ``[start, stop)`` of a field the episode stores: ``[stop - start, *shape]``."""
        raise NotImplementedError

    def _check_open(self) -> None:
        if self._closed:
            raise DatasetStateError(f"the dataset at {self._location!r} was closed")


def read_npz_members(
    path: str, by_key: Mapping[str, FieldSpec], rows: int
) -> dict[str, npt.NDArray[Any]]:
    """The ``<key>.npy`` members of one episode archive, by field key (not qualified).

    Every member must name a field of ``by_key`` and hold ``[rows, *shape]`` of its dtype;
    headers are checked before any array is allocated, and pickled objects are refused.
    Missing members are simply absent from the result (the caller decides).
    """
    out: dict[str, npt.NDArray[Any]] = {}
    try:
        with zipfile.ZipFile(path) as archive:
            for member in archive.namelist():
                key = member.removesuffix(".npy")
                spec = by_key.get(key)
                if not member.endswith(".npy") or spec is None:
                    raise SchemaError(
                        f"{path!r}: member {member!r} is not '<field key>.npy' of a field of the "
                        f"schema ({', '.join(sorted(by_key))}); the file is damaged or foreign"
                    )
                with archive.open(member) as stream:
                    version = np.lib.format.read_magic(stream)
                    if version == (1, 0):
                        shape, fortran, dtype = np.lib.format.read_array_header_1_0(stream)
                    else:
                        shape, fortran, dtype = np.lib.format.read_array_header_2_0(stream)
                    expected = (rows, *spec.shape)
                    if tuple(shape) != expected or dtype != spec.np_dtype or dtype.hasobject:
                        raise SchemaError(
                            f"{path!r}: member {member!r} holds {dtype} {list(shape)}, expected "
                            f"{spec.dtype} {list(expected)} (the manifest's length and schema); "
                            "the file is damaged"
                        )
                    data = stream.read(int(np.prod(expected, dtype=np.int64)) * dtype.itemsize)
                    # reading to the end is what makes zipfile check the member's CRC
                    if stream.read(1):
                        raise SchemaError(f"{path!r}: member {member!r} has trailing bytes")
                array = np.frombuffer(data, dtype=dtype)
                if array.size != int(np.prod(expected, dtype=np.int64)):
                    raise SchemaError(f"{path!r}: member {member!r} is truncated")
                shaped = array.reshape(expected, order="F") if fortran else array.reshape(expected)
                out[key] = shaped.copy(order="C")
    except (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError) as err:
        if isinstance(err, SchemaError):
            raise
        raise SchemaError(f"{path!r} is not a readable episode archive ({err})") from err
    return out


_FIELD_KEYS_02 = ("key", "shape", "dtype", "role", "low", "high", "layout", "optional")


def manifest_from_02(document: Mapping[str, Any], where: str) -> Manifest:
    """Today's :class:`Manifest` for a 0.2 ``manifest.json`` document (generation ``"0.2"``).

    The 0.2 schema (``schema_version`` 2, one entry per field with ``key``, ``shape``,
    ``dtype``, ``role``, ``low``, ``high``, ``layout``, ``optional``) keeps its order,
    which is the column order of 0.2's per-episode ``present`` table.
    """
    schema = document.get("schema")
    fields = schema.get("fields") if isinstance(schema, dict) else None
    if not isinstance(schema, dict) or schema.get("schema_version") != 2:
        raise SchemaError(f"{where}: expected a 0.2 schema with schema_version 2")
    if not isinstance(fields, list) or not fields:
        raise SchemaError(f"{where}: schema.fields must be a non-empty list")
    specs = []
    for number, entry in enumerate(fields):
        if not isinstance(entry, dict) or not {"key", "shape", "dtype", "role"} <= set(entry):
            raise SchemaError(
                f"{where}: schema.fields[{number}] must be an object with at least key, "
                f"shape, dtype and role, got {entry!r}"
            )
        try:
            specs.append(FieldSpec(**{k: entry[k] for k in _FIELD_KEYS_02 if k in entry}))
        except (SchemaError, ValueError, TypeError) as err:
            raise SchemaError(f"{where}: schema.fields[{number}]: {err}") from err
    metadata = document.get("metadata", {})
    if not isinstance(metadata, dict):
        raise SchemaError(f"{where}: metadata must be an object, got {metadata!r}")
    return Manifest(
        format_version=1,
        format_generation="0.2",
        backend=str(document.get("backend")),
        schema=DatasetSchema(specs),
        metadata=metadata,
        provenance=Provenance(created_at="", episodata_version="0.2"),
    )


def unique_keys(schema: DatasetSchema, where: str) -> dict[str, FieldSpec]:
    """Fields by bare key, as 0.2 names its files; a key in two roles is an error."""
    by_key: dict[str, FieldSpec] = {}
    for spec in schema:
        if spec.key in by_key:
            raise SchemaError(
                f"{where}: field key {spec.key!r} is in roles {by_key[spec.key].role!r} and "
                f"{spec.role!r}; a 0.2 dataset names its files by key, so it cannot be read"
            )
        by_key[spec.key] = spec
    return by_key
