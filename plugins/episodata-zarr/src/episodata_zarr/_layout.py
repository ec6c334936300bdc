"""Where every array lives in a dataset folder and what its Zarr v3 metadata says.

Pure data: paths, dtypes, chunk shapes and codec lists, no I/O. The folder holds::

    zarr.json                  root group; attributes.episodata has the schema
    commit.json                the commit record (see _commit.py)
    log.sqlite                 the episode log: episodes not yet folded (see _log.py)
    data/<role>/<key>          one array per field: [rows, *shape], all folded
                               episodes' rows back to back; chunks [C, *shape]
    index/episodes             int64 [episodes, columns]; one row per episode id
"""

from __future__ import annotations

import functools
import json
import zlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from episodata_core.errors import SchemaError

if TYPE_CHECKING:
    from collections.abc import Iterable

    import numpy.typing as npt

    from episodata_core.schema import DatasetSchema, FieldSpec
    from episodata_zarr._options import CodecName, ZarrOptions

__all__ = [
    "COMMIT_NAME",
    "FORMAT",
    "FORMAT_VERSION",
    "GROUP_DOCUMENT",
    "INDEX_PATH",
    "FieldLayout",
    "IndexLayout",
    "crc32",
    "field_layouts",
    "group_paths",
    "metadata_digest",
]

FORMAT = "episodata-zarr"
FORMAT_VERSION = 2
"""2: episodes not yet folded live in ``log.sqlite``; 1: in ``ongoing/`` spill arrays."""
COMMIT_NAME = "commit.json"
INDEX_PATH = "index/episodes"
INDEX_CHUNK_EPISODES = 1024
GROUP_DOCUMENT: dict[str, Any] = {"zarr_format": 3, "node_type": "group", "attributes": {}}

# dtypes the Zarr v3 core spec (and so TensorStore and zarr-python) can store natively;
# anything else (fixed-width strings, datetimes) is stored as its raw bytes
_NATIVE = {
    "bool",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float16",
    "float32",
    "float64",
    "complex64",
    "complex128",
}
_SAFE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-")
_DEFAULT_LEVEL = {"zstd": 1, "blosc-lz4": 5, "blosc-zstd": 3}


def _path_part(part: str) -> str:
    """A key part as a folder name: percent-encoded outside ``A-Z a-z 0-9 _ . -``.

    The encoding is injective and never yields ``.``, ``..``, a hidden name, Zarr's
    reserved ``__`` prefix or ``zarr.json``, so keys can never address another node.
    """
    encoded = "".join(c if c in _SAFE else "".join(f"%{b:02X}" for b in c.encode()) for c in part)
    if encoded.startswith(".") or encoded == "zarr.json":
        encoded = "%2E" + encoded[1:] if encoded.startswith(".") else "zarr%2Ejson"
    if encoded.startswith("__"):
        encoded = "%5F" + encoded[1:]
    return encoded


def _array_path(prefix: str, qualified_key: str) -> str:
    return "/".join([prefix, *(_path_part(part) for part in qualified_key.split("/"))])


@dataclass(frozen=True)
class FieldLayout:
    """How one field is stored: its array path, storage dtype and chunking."""

    key: str
    path: str
    shape: tuple[int, ...]
    dtype: np.dtype[Any]
    storage_dtype: np.dtype[Any]
    storage_shape: tuple[int, ...]
    chunk_rows: int
    codec: CodecName
    codec_level: int | None
    shard_chunks: int | None
    layout: str | None

    @property
    def raw_bytes(self) -> bool:
        """Whether the dtype is stored as raw bytes (a trailing ``byte`` axis of uint8)."""
        return self.storage_dtype != self.dtype

    @property
    def row_bytes(self) -> int:
        """Bytes of one row."""
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize

    def encode(self, rows: npt.NDArray[Any]) -> npt.NDArray[Any]:
        """Rows ``[n, *shape]`` in the storage dtype (a view where possible)."""
        if not self.raw_bytes:
            return np.ascontiguousarray(rows)
        block = np.ascontiguousarray(rows)
        return block.view(np.uint8).reshape(*block.shape, self.dtype.itemsize)

    def decode(self, stored: npt.NDArray[Any]) -> npt.NDArray[Any]:
        """Stored rows back in the field dtype, ``[n, *shape]``."""
        if not self.raw_bytes:
            return stored
        block = np.ascontiguousarray(stored)
        return block.view(self.dtype).reshape(block.shape[:-1])

    def metadata(self, rows: int) -> dict[str, Any]:
        """Zarr v3 array metadata for ``rows`` rows (TensorStore's ``metadata`` member)."""
        chunk = [self.chunk_rows, *(max(1, n) for n in self.storage_shape)]
        # every axis is named, and the per-field ones after the field: xarray.open_zarr
        # of a role group needs equal sizes for equal names, and array names are unique
        # within a group (datasets written before this have null names and open as well)
        name = self.key.rsplit("/", 1)[-1]
        names: list[str | None] = ["time"]
        if self.layout:
            names += [f"{name}_{axis}" for axis in self.layout]
        else:
            names += [f"{name}_dim_{axis}" for axis in range(len(self.shape))]
        if self.raw_bytes:
            names.append(f"{name}_byte")
        attributes = {"episodata": {"field": self.key, "dtype": self.dtype.str}}
        return _array_metadata(
            [rows, *self.storage_shape],
            str(self.storage_dtype),
            chunk,
            _codecs(self.codec, self.codec_level, self.storage_dtype),
            self.shard_chunks,
            names,
            attributes,
        )


@dataclass(frozen=True)
class IndexLayout:
    """The per-episode index: one int64 row per episode id, named columns.

    Columns: ``row_start`` (-1 while ongoing), ``length`` (transitions), ``terminated``,
    ``truncated``, ``ongoing``, ``present:<key>`` per optional field, ``crc32:<key>`` per
    field (zlib CRC-32 of the episode's rows as C-ordered bytes, 0 when absent or
    ongoing) and ``entry_hash`` (a checksum of the row's other columns).
    """

    optional: tuple[str, ...]
    fields: tuple[str, ...]

    @functools.cached_property
    def columns(self) -> tuple[str, ...]:
        """Column names, in order."""
        return (
            "row_start",
            "length",
            "terminated",
            "truncated",
            "ongoing",
            *(f"present:{key}" for key in self.optional),
            *(f"crc32:{key}" for key in self.fields),
            "entry_hash",
        )

    def metadata(self, episodes: int) -> dict[str, Any]:
        """Zarr v3 metadata of ``index/episodes``."""
        width = len(self.columns)
        attributes = {"episodata": {"columns": list(self.columns)}}
        return _array_metadata(
            [episodes, width],
            "int64",
            [INDEX_CHUNK_EPISODES, width],
            _codecs("zstd", 3, np.dtype(np.int64)),
            None,
            ["episode", "column"],
            attributes,
        )


def field_layouts(schema: DatasetSchema, options: ZarrOptions) -> dict[str, FieldLayout]:
    """The layout of every field, from the schema and the creation options."""
    keys = set(schema.qualified_keys)
    for what, chosen in (
        ("chunk_rows", options.chunk_rows),
        ("field_codecs", options.field_codecs),
    ):
        unknown = sorted(set(chosen) - keys)
        if unknown:
            raise SchemaError(
                f"zarr option {what} names {unknown}, which are not fields of the schema "
                f"(fields: {sorted(keys)}); use 'role/key' names"
            )
    for key, rows in options.chunk_rows.items():
        if rows < 1:
            raise SchemaError(f"zarr option chunk_rows[{key!r}] must be at least 1, got {rows}")
    return {spec.qualified_key: _field_layout(spec, options) for spec in schema}


def _field_layout(spec: FieldSpec, options: ZarrOptions) -> FieldLayout:
    dtype = spec.np_dtype
    if dtype.name in _NATIVE and dtype.isnative:
        storage_dtype, storage_shape = dtype, spec.shape
    else:
        storage_dtype, storage_shape = np.dtype(np.uint8), (*spec.shape, dtype.itemsize)
    row_bytes = max(1, int(np.prod(spec.shape, dtype=np.int64)) * dtype.itemsize)
    chunk_rows = options.chunk_rows.get(
        spec.qualified_key, max(1, options.chunk_bytes // row_bytes)
    )
    codec = options.field_codecs.get(spec.qualified_key, options.codec)
    return FieldLayout(
        key=spec.qualified_key,
        path=_array_path("data", spec.qualified_key),
        shape=spec.shape,
        dtype=dtype,
        storage_dtype=storage_dtype,
        storage_shape=storage_shape,
        chunk_rows=chunk_rows,
        codec=codec,
        codec_level=options.codec_level,
        shard_chunks=options.shard_chunks,
        layout=spec.layout,
    )


def _codecs(codec: CodecName, level: int | None, dtype: np.dtype[Any]) -> list[dict[str, Any]]:
    """Bytes-to-bytes codecs: the compressor, then a CRC-32C of every stored chunk."""
    chain: list[dict[str, Any]] = []
    if codec == "zstd":
        chosen = _DEFAULT_LEVEL["zstd"] if level is None else level
        chain.append({"name": "zstd", "configuration": {"level": chosen, "checksum": False}})
    elif codec in ("blosc-lz4", "blosc-zstd"):
        chosen = _DEFAULT_LEVEL[codec] if level is None else min(level, 9)
        configuration = {
            "cname": codec.removeprefix("blosc-"),
            "clevel": chosen,
            "shuffle": "shuffle" if dtype.itemsize > 1 else "noshuffle",
            "typesize": dtype.itemsize,
            "blocksize": 0,
        }
        chain.append({"name": "blosc", "configuration": configuration})
    # the checksum makes every read of a damaged chunk fail instead of returning garbage
    chain.append({"name": "crc32c"})
    return chain


def _array_metadata(
    shape: list[int],
    data_type: str,
    chunk: list[int],
    compressors: list[dict[str, Any]],
    shard_chunks: int | None,
    dimension_names: list[str | None],
    attributes: dict[str, Any],
) -> dict[str, Any]:
    to_bytes = {"name": "bytes", "configuration": {"endian": "little"}}
    codecs: list[dict[str, Any]] = [to_bytes, *compressors]
    grid = chunk
    if shard_chunks is not None:
        grid = [chunk[0] * shard_chunks, *chunk[1:]]
        sharding = {
            "chunk_shape": chunk,
            "codecs": codecs,
            "index_codecs": [to_bytes, {"name": "crc32c"}],
            "index_location": "end",
        }
        codecs = [{"name": "sharding_indexed", "configuration": sharding}]
    return {
        "zarr_format": 3,
        "node_type": "array",
        "shape": shape,
        "data_type": data_type,
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": grid}},
        "chunk_key_encoding": {"name": "default"},
        "fill_value": False if data_type == "bool" else 0,
        "codecs": codecs,
        "dimension_names": dimension_names,
        "attributes": attributes,
    }


def group_paths(array_paths: Iterable[str], within: str = "") -> list[str]:
    """Every group folder above the arrays (at or below ``within``), parents first."""
    groups: set[str] = set()
    for path in array_paths:
        parts = path.split("/")
        groups.update("/".join(parts[:depth]) for depth in range(1, len(parts)))
    if within:
        groups = {g for g in groups if g == within or g.startswith(within + "/")}
    return sorted(groups, key=lambda p: (p.count("/"), p))


def crc32(rows: npt.NDArray[Any], value: int = 0) -> int:
    """Zlib CRC-32 of an array's C-ordered bytes, continuing from ``value``."""
    return zlib.crc32(np.ascontiguousarray(rows).data, value)


def metadata_digest(document: dict[str, Any]) -> int:
    """CRC-32 of an array's metadata without its shape: fixed from creation on."""
    fixed = {key: value for key, value in document.items() if key != "shape"}
    return zlib.crc32(json.dumps(fixed, sort_keys=True, separators=(",", ":")).encode())
