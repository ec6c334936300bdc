"""What an swm / LeWM file holds: episode table, columns, roles and schema (§2.1, §2.5).

Rules 1-4 of formats.md §2.8 are checked here from headers and the two small episode
arrays; filters and chunks (rule 5) live in ``_storage``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from episodata_core.errors import FormatError, PartialFileError, SchemaError
from episodata_core.schema import DatasetSchema, FieldSpec

if TYPE_CHECKING:
    import numpy.typing as npt

    from episodata_lewm._options import LeWMOptions

__all__ = ["Column", "Layout", "choose_columns", "inspect_file", "open_file"]

EPISODE_KEYS = ("ep_len", "ep_offset")
FLAG_KEYS = ("terminated", "truncated")
INDEX_CANDIDATES = ("episode_idx", "ep_idx")
_OBSERVATION_NAMES = ("pixels", "observation", "state")
_STRING_ROW_BYTES = 64  # a decoded vlen string costs a Python object, whatever its width


@dataclass(frozen=True)
class Column:
    """One source column read during an import."""

    name: str
    shape: tuple[int, ...]
    """Per-row shape after squeezing ``(R, 1)`` rewards and flags."""
    dtype: np.dtype[Any]
    """Source dtype (``object`` for vlen strings)."""
    vlen_string: bool = False
    image: bool = False
    encoding: str | None = None
    """How the source stores the column's rows (``"jpeg"``), when it is not plain values."""

    @property
    def row_bytes(self) -> int:
        """Bytes of one row once read."""
        if self.vlen_string:
            return _STRING_ROW_BYTES
        return int(self.dtype.itemsize * np.prod(self.shape, dtype=np.int64))


@dataclass
class Layout:
    """The parts of an swm file an import uses, and the schema they give."""

    path: str
    ep_len: npt.NDArray[np.int64]
    ep_offset: npt.NDArray[np.int64]
    columns: dict[str, Column] = field(default_factory=dict)
    """Every column the import reads, fields and the rest."""
    roles: dict[str, str] = field(default_factory=dict)
    """Field columns -> role, in schema order."""
    flags: list[str] = field(default_factory=list)
    index_column: str | None = None
    id_column: str | None = None
    metadata_columns: list[str] = field(default_factory=list)
    """vlen strings stored once per episode (``strings="episode_metadata"``)."""
    string_widths: dict[str, int] = field(default_factory=dict)
    warnings: list[tuple[str, str, int]] = field(default_factory=list)
    schema: DatasetSchema = field(default_factory=lambda: DatasetSchema([]))

    @property
    def num_rows(self) -> int:
        """R, the rows of every column."""
        return int(self.ep_len.sum())


def open_file(path: str, rdcc_nbytes: int | None = None) -> Any:
    """Open ``path`` read-only; a cut-off file is a :class:`PartialFileError`."""
    import h5py

    if not os.path.isfile(path):
        raise FileNotFoundError(
            f"{path!r}: no such file or folder; pass an swm .h5 file or .lance folder"
        )
    if not h5py.is_hdf5(path):
        raise FormatError(
            f"{path!r} is not an HDF5 file; the lewm importer reads stable-worldmodel / "
            "LeWorldModel .h5 files (ep_len, ep_offset and per-row columns)"
        )
    try:
        if rdcc_nbytes is None:
            return h5py.File(path, "r")
        return h5py.File(path, "r", rdcc_nbytes=rdcc_nbytes)
    except OSError as err:
        if "truncated" in str(err).lower():
            raise PartialFileError(
                f"{path!r} is cut off ({err}); the download or extraction did not finish. "
                "Fetch the file again"
            ) from err
        raise FormatError(f"{path!r}: h5py cannot open the file ({err})") from err


def inspect_file(handle: Any, path: str, options: LeWMOptions) -> Layout:
    """Check rules 1-4 and choose columns, roles and dtypes (headers and ep_* only)."""
    ep_len, ep_offset = _episode_table(handle, path)
    layout = Layout(path, ep_len, ep_offset)
    return choose_columns(layout, _row_columns(handle, layout, options), options)


def choose_columns(layout: Layout, available: dict[str, Column], options: LeWMOptions) -> Layout:
    """Roles, flags, index and the columns to read, from the source's ``available`` columns."""
    path = layout.path
    fields = _select_fields(available, path, options)
    for name in fields:
        role = options.roles.get(name) or _default_role(name, available[name])
        layout.roles[name] = role
    layout.flags = [k for k in FLAG_KEYS if k in available and k not in options.exclude]
    layout.index_column = _index_column(available, path, options)
    layout.id_column = "id" if "id" in available else None
    if "action" not in layout.roles:
        raise FormatError(
            f"{path!r} has no 'action' column (columns: {sorted(available)}); every swm "
            "file records the action of each step"
        )
    if "reward" in layout.roles and layout.roles["reward"] == "reward":
        _check_flat(available["reward"], path)
    for name in layout.flags:
        _check_flat(available[name], path)
    extra = [layout.index_column, layout.id_column, *layout.flags]
    used = [*layout.roles, *(name for name in extra if name)]
    for name in list(layout.roles):
        column = available[name]
        if column.vlen_string and options.strings != "field":
            del layout.roles[name]
            if options.strings == "episode_metadata":
                layout.metadata_columns.append(name)
            else:
                used.remove(name)
    layout.columns = {name: available[name] for name in dict.fromkeys(used)}
    return layout


def _episode_table(handle: Any, path: str) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    import h5py

    arrays = []
    for key in EPISODE_KEYS:
        item = handle.get(key)
        if not isinstance(item, h5py.Dataset):
            raise FormatError(
                f"{path!r}: {key!r} is missing or not a dataset; an swm file needs ep_len "
                "and ep_offset (1-D integer arrays, one entry per episode)"
            )
        if item.ndim != 1 or item.dtype.kind not in "iu":
            raise FormatError(
                f"{path!r}: {key!r} must be a 1-D integer array, got shape {item.shape} "
                f"dtype {item.dtype}"
            )
        arrays.append(np.asarray(item[()], dtype=np.int64))
    ep_len, ep_offset = arrays
    if ep_len.shape != ep_offset.shape or ep_len.size == 0:
        raise FormatError(
            f"{path!r}: ep_len has {ep_len.size} entries and ep_offset {ep_offset.size}; "
            "both need one entry per episode, at least one"
        )
    bad = np.flatnonzero(ep_len < 1)
    if bad.size:
        raise FormatError(
            f"{path!r}: ep_len must be >= 1 (one row per reset at least); episodes "
            f"{bad[:5].tolist()} have {ep_len[bad[:5]].tolist()}"
        )
    expected = np.concatenate([[0], np.cumsum(ep_len)[:-1]])
    bad = np.flatnonzero(ep_offset != expected)
    if bad.size:
        shown = ", ".join(
            f"episode {e}: {int(ep_offset[e])} (expected {int(expected[e])})" for e in bad[:5]
        )
        raise FormatError(
            f"{path!r}: ep_offset is not the exclusive cumulative sum of ep_len ({shown}). "
            "The episode table is damaged; rebuild ep_offset from ep_len"
        )
    return ep_len, ep_offset


def _row_columns(handle: Any, layout: Layout, options: LeWMOptions) -> dict[str, Column]:
    import h5py

    columns: dict[str, Column] = {}
    excluded = set(options.exclude)
    for name, item in handle.items():
        if name in EPISODE_KEYS or name in excluded:
            continue
        if not isinstance(item, h5py.Dataset) or item.shape is None or item.ndim == 0:
            what = "a group" if isinstance(item, h5py.Group) else "not a per-row array"
            layout.warnings.append(("ignored_key", f"{name!r} is {what}; skipped", 1))
            continue
        vlen = h5py.check_string_dtype(item.dtype)
        is_vlen = vlen is not None and vlen.length is None
        if not is_vlen and (item.dtype.kind not in "biufcSU" or item.dtype.fields is not None):
            raise FormatError(
                f"{layout.path!r}: column {name!r} has dtype {item.dtype}, which a field "
                f"cannot store; pass exclude=[{name!r}]"
            )
        shape = tuple(int(n) for n in item.shape[1:])
        if name in (*FLAG_KEYS, "reward") and shape == (1,):
            shape = ()
        image = item.ndim == 4 and item.dtype == np.uint8 and item.shape[-1] in (1, 3)
        columns[name] = Column(name, shape, item.dtype, vlen_string=is_vlen, image=image)
    rows = layout.num_rows
    wrong = {n: int(handle[n].shape[0]) for n in columns if handle[n].shape[0] != rows}
    if wrong:
        listed = ", ".join(f"{name}: {count}" for name, count in wrong.items())
        raise FormatError(
            f"{layout.path!r}: every column needs R = sum(ep_len) = {rows} rows, but {listed}. "
            f"The file is damaged; or leave the column out with exclude={sorted(wrong)}"
        )
    return columns


def _select_fields(available: dict[str, Column], path: str, options: LeWMOptions) -> list[str]:
    names = [n for n in available if n not in FLAG_KEYS]
    if options.columns is not None:
        unknown = sorted(set(options.columns) - set(available))
        if unknown:
            raise FormatError(
                f"{path!r}: columns={unknown} are not in the file (columns: {sorted(available)})"
            )
        names = [n for n in names if n in options.columns or n == "action"]
    unknown = sorted(set(options.roles) - set(names))
    if unknown:
        raise FormatError(f"{path!r}: roles= names {unknown}, which are not imported columns")
    return names


def _default_role(name: str, column: Column) -> str:
    if name in ("action", "reward"):
        return name
    image = column.image or column.encoding is not None
    if name in _OBSERVATION_NAMES or name.startswith("proprio") or image:
        return "observation"
    return "info"


def _index_column(available: dict[str, Column], path: str, options: LeWMOptions) -> str | None:
    name = options.index_column
    if name == "auto":
        return next((n for n in INDEX_CANDIDATES if n in available), None)
    if name is not None and name not in available:
        raise FormatError(
            f"{path!r}: index_column={name!r} is not a column (columns: {sorted(available)}); "
            "pass index_column=None to go without"
        )
    return name


def _check_flat(column: Column, path: str) -> None:
    if column.shape != ():
        raise FormatError(
            f"{path!r}: {column.name!r} must have one value per row, shape (R,) or (R, 1); "
            f"got per-row shape {column.shape}"
        )


def build_schema(layout: Layout) -> DatasetSchema:
    """One field per imported column, keyed by the column name (formats.md §2.5)."""
    specs = []
    for role in ("observation", "action", "reward", "info"):
        for name, column_role in layout.roles.items():
            if column_role != role:
                continue
            column = layout.columns[name]
            dtype: Any = column.dtype
            if column.vlen_string:
                dtype = f"<U{layout.string_widths[name]}"
            extra: dict[str, Any] = {}
            if column.image:
                extra = {"layout": "HWC", "low": 0, "high": 255}
            if column.encoding is not None:
                # decoded pixels went through a lossy codec; encoded bytes are kept as they are
                kept = "encoded" if not column.image else "decoded"
                extra["metadata"] = {"source_encoding": column.encoding, "stored": kept}
            specs.append(FieldSpec(name, shape=column.shape, dtype=dtype, role=role, **extra))
    try:
        return DatasetSchema(specs)
    except SchemaError as err:
        raise FormatError(f"{layout.path!r}: the columns do not form a schema ({err})") from err
