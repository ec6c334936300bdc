"""Lance datasets of stable-worldmodel (``World.collect``'s default format), read with pylance.

A Lance dataset is a folder (``_versions/``, ``data/*.lance``). swm writes one row per
frame, episode-contiguous, with an ``episode_idx`` and a ``step_idx`` int32 column;
every other numeric column is ``fixed_size_list<float32>[d]`` (scalars as ``d = 1``,
flags as 0.0/1.0, 64-bit ids too) and images are one JPEG per row in binary columns.
There is no ``ep_len``/``ep_offset``: an episode is a run of one ``episode_idx``.

:class:`LanceSource` shows the rest of the importer the same face as an h5py file:
``source[name]`` has ``dtype``, ``shape`` ``(R, *row)`` and ``[a:b]`` reads rows
``a..b-1`` (one pylance read of one column), already converted to what the HDF5 path
gives: size-1 lists squeezed, the integer columns of ``column_dtypes`` cast back after
an exactness check, JPEGs decoded (or kept as bytes). Only ``episode_idx`` is read
whole, in bounded windows, to find the episodes.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

import numpy as np

from episodata_core.errors import FormatError, PartialFileError
from episodata_lewm._images import decode_jpegs, image_shape, jpeg_bytes, verify_jpegs
from episodata_lewm._jpegcheck import binary_buffers, check_structure
from episodata_lewm._layout import Column, Layout, choose_columns

if TYPE_CHECKING:
    import numpy.typing as npt

    from episodata_lewm._options import LeWMOptions

__all__ = [
    "KEPT_WINDOW_BYTES",
    "WINDOW_BYTES",
    "LanceSource",
    "inspect_lance",
    "is_lance",
    "verify_rows",
]

_INDEX = "episode_idx"
_SCAN_ROWS = 1 << 20  # rows of episode_idx per read while finding the episodes (4 MiB)
#: the largest read window (bytes of rows as imported), below ``read_budget_bytes``: pylance
#: keeps memory in step with its largest read (116 MiB after reads of 30 MB of JPEGs, 51
#: after reads of 8 MB), and reads of 3-8 MB are the fastest per byte (measured)
WINDOW_BYTES = 32 << 20
#: the same with JPEGs kept as bytes, where the window is what pylance reads (decoded, a
#: 32 MiB window reads about 3 MB of JPEGs); measured at 50,000 rows: 100 MiB less peak
#: RSS than 32 MiB windows, at the same speed
KEPT_WINDOW_BYTES = 8 << 20
#: image columns whose every JPEG was checked, per version: the longest blob (bytes)
_CHECKED: dict[tuple[Any, ...], int] = {}
_BYTES_ROWS = 4096  # images="jpeg": rows per list of Python bytes (a few MiB)
_KEEP_SHAPE = ("action",)  # a one-dimensional action stays [1]; other size-1 lists are scalars


def is_lance(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is (meant as) a Lance dataset: a folder, or a name ending ``.lance``."""
    return os.path.isdir(path) or os.fspath(path).rstrip("/").endswith(".lance")


class LanceColumn:
    """One column of a :class:`LanceSource`, read in row slices."""

    chunks = (1,)  # any row range is one read; windows need no alignment

    def __init__(self, source: LanceSource, name: str, arrow_type: Any, rows: int) -> None:
        import pyarrow as pa

        self.source, self.name, self.arrow_type = source, name, arrow_type
        self.encoding: str | None = None
        self.target: np.dtype[Any] | None = None  # integer dtype of a float32 column
        self.width = 0  # the longest blob, for images="jpeg"
        self.image_shape: tuple[int, int, int] | None = None
        dims: list[int] = []
        kind = arrow_type
        while pa.types.is_fixed_size_list(kind):
            dims.append(int(kind.list_size))
            kind = kind.value_type
        self.list_dims = tuple(dims)
        if pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
            if dims:
                raise FormatError(f"{source.where(name)} is a list of binary values; not an image")
            self.encoding = "jpeg"
            self.dtype: np.dtype[Any] = np.dtype(np.uint8)
        elif pa.types.is_string(kind) or pa.types.is_large_string(kind):
            self.dtype = np.dtype(object)
        elif pa.types.is_boolean(kind) or pa.types.is_integer(kind) or pa.types.is_floating(kind):
            self.dtype = np.dtype(kind.to_pandas_dtype())
        else:
            raise FormatError(
                f"{source.where(name)} has Arrow type {arrow_type}, which a field cannot store; "
                f"pass exclude=[{name!r}]"
            )
        row = self.list_dims
        if row == (1,) and name not in _KEEP_SHAPE:
            row = ()  # swm's writer makes every scalar a list of one
        self.row_shape: tuple[int, ...] = row
        self.shape = (rows, *row)

    @property
    def ndim(self) -> int:
        """1 + the number of per-row axes."""
        return len(self.shape)

    def read_arrow(self, a: int, b: int) -> Any:
        """Rows ``[a, b)`` as one Arrow array; a null anywhere is a ``FormatError``."""
        array = self.source.read(self.name, a, b)
        flat = array
        for _ in self.list_dims:
            flat = flat.flatten()
        if array.null_count or flat.null_count:
            nulls = np.flatnonzero(np.asarray(array.is_null(), dtype=bool))
            shown = (a + nulls[:5]).tolist() if nulls.size else "inside a list"
            raise FormatError(
                f"{self.source.where(self.name)} holds null values (rows {shown}); swm writes a "
                f"value in every row. The dataset is damaged; or pass exclude=[{self.name!r}]"
            )
        return array

    def __getitem__(self, rows: slice) -> npt.NDArray[Any]:
        a, b, _ = rows.indices(self.shape[0])
        array = self.read_arrow(a, b)
        if self.encoding == "jpeg":
            return self.images(array, a)
        flat = array
        for _ in self.list_dims:
            flat = flat.flatten()
        values: npt.NDArray[Any] = flat.to_numpy(zero_copy_only=False)
        values = values.reshape(b - a, *self.row_shape)
        if self.target is not None:
            return _integral(values, self.target, self.source.where(self.name), a)
        return values

    def images(self, array: Any, a: int) -> npt.NDArray[Any]:
        """The JPEGs of ``array`` (rows from ``a``) decoded, or as ``S<width>`` bytes.

        Every JPEG of the column was checked when the schema was made
        (:func:`_check_images`), so each goes straight to the decoder.
        """
        where = self.source.where(self.name)
        if self.image_shape is not None:
            offsets, data = binary_buffers(array)
            return decode_jpegs(offsets, data, self.image_shape, where, a)
        out = np.empty(len(array), dtype=f"S{self.width}")
        # Python bytes of a few rows at a time: faster than any NumPy scatter of the bytes
        for lo in range(0, len(array), _BYTES_ROWS):
            part = array.slice(lo, _BYTES_ROWS).to_pylist()
            out[lo : lo + len(part)] = jpeg_bytes(part, self.width, where, a + lo)
        return out

    def asstr(self) -> _Strings:
        """Reads that give ``str`` objects (h5py's ``asstr()``)."""
        return _Strings(self)


class _Strings:
    def __init__(self, column: LanceColumn) -> None:
        self.column = column

    def __getitem__(self, rows: slice) -> npt.NDArray[Any]:
        a, b, _ = rows.indices(self.column.shape[0])
        return np.asarray(self.column.read_arrow(a, b).to_pylist(), dtype=object)


def _integral(
    values: npt.NDArray[Any], target: np.dtype[Any], where: str, a: int
) -> npt.NDArray[Any]:
    """``values`` cast to ``target``; a value that is not a whole number in range raises."""
    if target.kind == "b":
        ok = (values == 0) | (values == 1)
        expected = "0 or 1"
    else:
        info = np.iinfo(target)
        # float32 holds every whole number it can represent exactly; NaN fails both tests
        ok = (values == np.trunc(values)) & (values >= info.min) & (values <= info.max)
        expected = f"a whole number in the range of {target}"
    if not ok.all():
        rows = np.flatnonzero(~ok.reshape(values.shape[0], -1).all(axis=1))
        shown = ", ".join(
            f"row {a + r}: {values.reshape(values.shape[0], -1)[r].tolist()}" for r in rows[:5]
        )
        raise FormatError(
            f"{where} must hold {expected} ({target} in the env, float32 in the file), but "
            f"{rows.size} row(s) do not: {shown}. The dataset is damaged; or pass "
            "column_dtypes= without this column to import it as float32"
        )
    return values.astype(target)


class LanceSource:
    """An open Lance dataset, addressed like an h5py file (``source[name]``)."""

    def __init__(self, path: str, options: LeWMOptions) -> None:
        import lance

        self.path = path
        if not os.path.exists(path):
            raise FileNotFoundError(
                f"{path!r}: no such file or folder; pass an swm .h5 file or .lance folder"
            )
        if not os.path.isdir(os.path.join(path, "_versions")):
            raise FormatError(
                f"{path!r} is not a Lance dataset (no _versions/ folder); the lewm importer "
                "reads stable-worldmodel .h5 files and .lance dataset folders"
            )
        try:
            self.dataset = lance.dataset(path, version=options.lance_version)
        except (ValueError, OSError) as err:
            raise FormatError(f"{path!r}: pylance cannot open the dataset ({err})") from err
        self.versions = sorted(int(v["version"]) for v in self.dataset.versions())
        self.version = int(self.dataset.version)
        self.rows = int(self.dataset.count_rows())
        self.files = self._files()
        schema = self.dataset.schema
        self.columns = {
            field.name: LanceColumn(self, field.name, field.type, self.rows) for field in schema
        }

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        del self.dataset  # pylance holds no file open between reads

    def where(self, name: str) -> str:
        """How messages name a column: ``'<path>' (Lance version v), column 'x'``."""
        return f"{self.path!r} (Lance version {self.version}), column {name!r}"

    def __getitem__(self, name: str) -> LanceColumn:
        return self.columns[name]

    def __contains__(self, name: object) -> bool:
        return name in self.columns

    def read(self, name: str, a: int, b: int) -> Any:
        """Rows ``[a, b)`` of one column as one Arrow array."""
        try:
            table = self.dataset.to_table(columns=[name], offset=a, limit=b - a)
        except (ValueError, OSError) as err:  # pyarrow's errors subclass these
            raise FormatError(
                f"{self.where(name)}: pylance cannot read rows {a}..{b - 1} ({err}); the "
                "dataset is damaged"
            ) from err
        column = table.column(0)
        if len(column) != b - a:
            raise FormatError(f"{self.where(name)}: rows {a}..{b - 1} gave {len(column)} rows")
        return column.combine_chunks()

    def _files(self) -> list[tuple[str, int]]:
        """``(relative path, bytes)`` of the files of this version: manifest, data, deletions.

        A data file shorter than the manifest records is cut off: ``PartialFileError``.
        """
        root = Path(self.path)
        name = f"{(1 << 64) - 1 - self.version}.manifest"
        found = [f"_versions/{name}"] if (root / "_versions" / name).is_file() else []
        for fragment in self.dataset.get_fragments():
            meta = fragment.metadata
            for data in meta.files:
                relative = f"data/{data.path}"
                recorded = data.file_size_bytes
                size = (root / relative).stat().st_size if (root / relative).is_file() else -1
                if size < 0 or (recorded and size < recorded):
                    what = (
                        "missing" if size < 0 else f"{size} bytes, the manifest records {recorded}"
                    )
                    raise PartialFileError(
                        f"{self.path!r} (Lance version {self.version}): data file {relative!r} is "
                        f"{what}; the copy or download did not finish. Fetch the dataset again"
                    )
                found.append(relative)
            deletion = meta.deletion_file
            if deletion is not None:
                found.extend(
                    f"_deletions/{p.name}"
                    for p in (root / "_deletions").glob(f"{fragment.fragment_id}-*")
                )
        return [(relative, (root / relative).stat().st_size) for relative in sorted(set(found))]

    @property
    def nbytes(self) -> int:
        """Bytes of the files this version reads."""
        return sum(size for _, size in self.files)

    def sha256(self) -> str:
        """SHA-256 over this version's files: per file, its relative path, NUL, its bytes."""
        digest = hashlib.sha256()
        for relative, _ in self.files:
            digest.update(relative.encode() + b"\0")
            with open(Path(self.path) / relative, "rb") as handle:
                while block := handle.read(8 << 20):
                    digest.update(block)
        return digest.hexdigest()


def inspect_lance(source: LanceSource, options: LeWMOptions) -> Layout:
    """Episodes from the ``episode_idx`` runs, then columns, roles and dtypes."""
    path = source.path
    if _INDEX not in source:
        raise FormatError(
            f"{path!r} is a Lance dataset without an {_INDEX!r} column (columns: "
            f"{sorted(source.columns)}); the lewm importer reads stable-worldmodel recordings, "
            "whose rows carry episode_idx and step_idx"
        )
    ep_offset, ep_len = _episode_runs(source)
    layout = Layout(path, ep_len, ep_offset)
    excluded = set(options.exclude)
    available: dict[str, Column] = {}
    for name, column in source.columns.items():
        if name in excluded:
            continue
        available[name] = _column(source, column, options)
    unknown = sorted(set(options.column_dtypes) - set(source.columns))
    if unknown and "column_dtypes" in options.model_fields_set:
        raise FormatError(
            f"{path!r}: column_dtypes names {unknown}, which are not columns (columns: "
            f"{sorted(source.columns)})"
        )
    return choose_columns(layout, available, options)


def _column(source: LanceSource, column: LanceColumn, options: LeWMOptions) -> Column:
    name = column.name
    wanted = options.column_dtypes.get(name)
    if wanted is not None:
        if column.dtype.kind != "f" or column.encoding is not None:
            if "column_dtypes" in options.model_fields_set:
                raise FormatError(
                    f"{source.where(name)} has Arrow type {column.arrow_type}; column_dtypes "
                    "converts float columns that hold integers only"
                )
        else:
            column.target = column.dtype = np.dtype(wanted)
    if column.encoding == "jpeg":
        return _image_column(source, column, options)
    dtype = column.target if column.target is not None else column.dtype
    return Column(name, column.row_shape, dtype, vlen_string=column.dtype.kind == "O")


def _image_column(source: LanceSource, column: LanceColumn, options: LeWMOptions) -> Column:
    name = column.name
    if source.rows == 0:
        raise FormatError(f"{source.where(name)}: the dataset has no rows")
    first = column.read_arrow(0, 1).to_pylist()[0]
    try:
        shape = image_shape(first, f"{source.where(name)}, row 0")
    except FormatError as err:
        raise FormatError(
            f"{err}. Binary columns are read as one JPEG image per row (what swm writes); "
            f"pass exclude=[{name!r}] to leave this one out"
        ) from err
    keep = options.images == "jpeg"
    width = _check_images(source, column, shape, options.read_budget_bytes, sized=not keep)
    if keep:
        column.width = width
        column.shape, column.row_shape = (source.rows,), ()
        column.dtype = np.dtype(f"S{column.width}")
        return Column(name, (), column.dtype, encoding="jpeg")
    column.image_shape = shape
    column.row_shape = column.image_shape
    column.shape = (source.rows, *column.image_shape)
    return Column(name, column.image_shape, np.dtype(np.uint8), image=True, encoding="jpeg")


def _check_images(
    source: LanceSource,
    column: LanceColumn,
    shape: tuple[int, int, int],
    budget: int,
    *,
    sized: bool,
) -> int:
    """Check every JPEG of ``column`` (``sized``: all of row 0's ``shape``); the longest blob.

    The schema needs the longest blob (``images="jpeg"``) before the destination exists,
    so the column is read once here, in windows, and each window's JPEGs are checked for
    structure at once (:func:`~episodata_lewm._jpegcheck.check_structure`; what it does
    not cover is decoded). The write pass then only decodes or copies: nothing it reads
    can fail but a changed file. A version's files never change, so ``read_schema`` and
    the import share the pass (the data files' random names and sizes tell a dataset
    written again at the same path apart).

    Raises
    ------
    FormatError
        A damaged JPEG, or (``sized``) one of another size; the column and the row.
    """
    key = (os.path.realpath(source.path), source.version, column.name, sized, *source.files)
    if key in _CHECKED:
        return _CHECKED[key]
    where = source.where(column.name)
    size = shape if sized else None
    # a JPEG is smaller than its pixels, so these reads stay within the window
    step = max(1, min(budget, WINDOW_BYTES) // int(np.prod(shape)))
    longest = 1
    for a, b in _spans(source.rows, step):
        offsets, data = binary_buffers(column.read_arrow(a, b))
        uncovered = check_structure(offsets, data, where, a, size)
        if uncovered.any():  # rare: progressive or other JPEGs
            verify_jpegs(offsets, data, np.flatnonzero(uncovered), where, a, size)
        longest = max(longest, int(np.diff(offsets).max(initial=0)))
    if len(_CHECKED) >= 64:
        _CHECKED.clear()
    _CHECKED[key] = longest
    return longest


def _spans(rows: int, step: int) -> list[tuple[int, int]]:
    return [(a, min(a + step, rows)) for a in range(0, rows, step)]


def _episode_runs(source: LanceSource) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """``(ep_offset, ep_len)``: one episode per run of equal ``episode_idx`` values."""
    column = source[_INDEX]
    if column.dtype.kind not in "iu" or column.list_dims:
        raise FormatError(
            f"{source.where(_INDEX)} has Arrow type {column.arrow_type}; swm writes int32 "
            "episode numbers"
        )
    starts: list[npt.NDArray[np.int64]] = []
    values: list[npt.NDArray[Any]] = []
    previous = None
    for a, b in _spans(source.rows, _SCAN_ROWS):
        chunk = column[a:b]
        edges = np.flatnonzero(chunk[1:] != chunk[:-1]) + 1
        if previous is None or chunk[0] != previous:
            edges = np.concatenate([[0], edges])
        starts.append(a + edges.astype(np.int64))
        values.append(chunk[edges])
        previous = chunk[-1]
    if not starts:
        raise FormatError(f"{source.path!r} (Lance version {source.version}) has no rows")
    ep_offset = np.concatenate(starts)
    run_values = np.concatenate(values)
    unique, counts = np.unique(run_values, return_counts=True)
    repeated = unique[counts > 1]
    if repeated.size:
        rows = ep_offset[np.isin(run_values, repeated[:1])].tolist()[:5]
        raise FormatError(
            f"{source.where(_INDEX)}: episode {int(repeated[0])} is split into runs starting at "
            f"rows {rows} ({repeated.size} episode number(s) recur); swm writes each episode's "
            "rows together. The dataset is damaged or was appended to out of order"
        )
    ep_len = np.diff(np.append(ep_offset, source.rows)).astype(np.int64)
    return ep_offset, ep_len


def verify_rows(source: LanceSource, layout: Layout, windows: list[Any], *, full: bool) -> None:
    """The pre-pass over what the scan leaves out, so that a bad value fails before writing.

    ``full``: every non-image column the import reads, once per window (nulls, integral
    values); otherwise the integer columns only. Image columns were checked whole when
    the layout was made (:func:`_check_images`).
    """
    names = [n for n in layout.columns if full or source[n].target is not None]
    names = [n for n in names if source[n].encoding is None]
    for window in windows:
        for name in names:
            source[name][window.start : window.stop]
