"""One episode as one ``.npz`` archive: member names, encoding and checked decoding.

An archive holds one ``.npy`` member per stored field, named by the field's qualified
key (``observation/camera.npy``, ``action/keyboard/jump.npy``), plus five scalar members
under ``episode/`` (``id``, ``length``, ``terminated``, ``truncated``, ``ongoing``). Field
keys always start with a role, never with ``episode``, so the two cannot collide.
``numpy.load(path, allow_pickle=False)`` lists them without the ``.npy`` suffix.

Decoding never trusts the archive: member names that could leave a folder when
extracted are refused, and every array header is checked against the schema (dtype and
shape) before any memory is allocated for its data.
"""

from __future__ import annotations

import io
import zipfile
import zlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, BinaryIO
from urllib.parse import quote, unquote

import numpy as np

from episodata_core.errors import DatasetStateError, SchemaError

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path
    from types import TracebackType
    from typing import Self

    import numpy.typing as npt

    from episodata_core.schema import FieldSpec

__all__ = [
    "META_PREFIX",
    "EpisodeArchive",
    "EpisodeMeta",
    "check_member_name",
    "checked_meta",
    "encode_episode",
    "member_name",
]

META_PREFIX = "episode/"
_SUFFIX = ".npy"
_META_DTYPES: dict[str, np.dtype[Any]] = {
    "id": np.dtype(np.int64),
    "length": np.dtype(np.int64),
    "terminated": np.dtype(np.bool_),
    "truncated": np.dtype(np.bool_),
    "ongoing": np.dtype(np.bool_),
}
_CHUNK = 1 << 20  # decompress in 1 MiB pieces into the final array: no second full copy
# what zipfile, zlib and the .npy header parser raise for damaged or crafted bytes
# (RuntimeError: an encrypted member; NotImplementedError: an unknown compression method)
_DAMAGE = (
    zipfile.BadZipFile,
    zlib.error,
    EOFError,
    ValueError,
    OSError,
    KeyError,
    RuntimeError,
    NotImplementedError,
)


def member_name(qualified_key: str) -> str:
    """The archive member (without ``.npy``) that stores a field.

    Each ``/``-separated part is percent-encoded except for ``A-Z a-z 0-9 _ . - ~``, and
    a leading ``.`` becomes ``%2E``, so no part is ``.`` or ``..`` and ordinary keys map
    to themselves. ``urllib.parse.unquote`` of each part gives the key back.
    """
    parts = []
    for part in qualified_key.split("/"):
        encoded = quote(part, safe="")
        parts.append("%2E" + encoded[1:] if encoded.startswith(".") else encoded)
    return "/".join(parts)


@dataclass(frozen=True)
class EpisodeMeta:
    """The ``episode/*`` members: id, transitions and flags."""

    id: int
    length: int
    terminated: bool
    truncated: bool
    ongoing: bool

    def arrays(self) -> dict[str, npt.NDArray[Any]]:
        """The members as 0-d arrays, keyed by name without the ``episode/`` prefix."""
        return {
            name: np.array(getattr(self, name), dtype=_META_DTYPES[name]) for name in _META_DTYPES
        }


def encode_episode(
    rows: Mapping[str, npt.NDArray[Any]], meta: EpisodeMeta, *, compress: bool, level: int
) -> bytes:
    """The bytes of an archive holding ``rows`` (``[length + 1, ...]`` per field) and ``meta``."""
    for key, values in rows.items():
        if values.dtype.hasobject or len(values) != meta.length + 1:
            raise SchemaError(
                f"episode {meta.id}, field {key!r}: cannot store {values.dtype} rows of shape "
                f"{values.shape}; expected {meta.length + 1} rows of a non-object dtype"
            )
    buffer = io.BytesIO()
    method = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
    with zipfile.ZipFile(
        buffer, "w", compression=method, compresslevel=level if compress else None
    ) as archive:
        for name, value in meta.arrays().items():
            _write_member(archive, META_PREFIX + name, value)
        for key, values in rows.items():
            _write_member(archive, member_name(key), values)
    return buffer.getvalue()


def _write_member(archive: zipfile.ZipFile, name: str, array: npt.NDArray[Any]) -> None:
    with archive.open(name + _SUFFIX, "w", force_zip64=True) as handle:
        np.lib.format.write_array(handle, array, allow_pickle=False)


def check_member_name(name: str, where: str) -> None:
    """Refuse a member name that would leave the folder it is extracted to."""
    parts = name.split("/")
    if (
        name.startswith("/")
        or "\\" in name
        or "\x00" in name
        or ":" in parts[0]
        or any(part in ("", ".", "..") for part in parts)
    ):
        raise DatasetStateError(
            f"{where}: archive member {name!r} would escape the folder it is extracted to; "
            "the file may be malicious and is not read"
        )


class EpisodeArchive:
    """An open episode archive whose members are read with checked headers.

    ``where`` names the file in error messages (a path relative to the dataset folder).
    ``FileNotFoundError`` passes through unchanged so callers can tell a vanished file
    from a damaged one.
    """

    def __init__(self, source: Path | BinaryIO, where: str, specs: Mapping[str, FieldSpec]) -> None:
        self._where = where
        try:
            self._zip = zipfile.ZipFile(source)
        except FileNotFoundError:
            raise
        except _DAMAGE as err:
            raise self._damaged("cannot open it as a zip archive", err) from err
        try:
            names = set()
            for info in self._zip.infolist():
                check_member_name(info.filename, where)
                names.add(info.filename)
        except BaseException:
            self._zip.close()
            raise
        self._fields = {
            key: member_name(key) + _SUFFIX for key in specs if member_name(key) + _SUFFIX in names
        }
        self._names = names
        self._specs = specs

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._zip.close()

    @property
    def fields(self) -> frozenset[str]:
        """Qualified keys of the schema fields the archive stores."""
        return frozenset(self._fields)

    @property
    def foreign_members(self) -> list[str]:
        """Member names that are neither ``.npy`` arrays nor ``episode/*`` scalars."""
        return sorted(
            name
            for name in self._names
            if not name.endswith(_SUFFIX) and not name.startswith(META_PREFIX)
        )

    def meta(self) -> EpisodeMeta:
        """The ``episode/*`` members, validated."""
        values: dict[str, Any] = {}
        for name, dtype in _META_DTYPES.items():
            member = META_PREFIX + name + _SUFFIX
            if member not in self._names:
                raise self._damaged(f"the member {member!r} is missing", None)
            values[name] = self._read(member, dtype, ()).item()
        if values["length"] < 0:
            raise self._damaged(f"'episode/length' is {values['length']}", None)
        return EpisodeMeta(**values)

    def read(self, key: str, num_rows: int) -> npt.NDArray[Any]:
        """The ``[num_rows, *shape]`` rows of field ``key``."""
        member = self._fields.get(key)
        if member is None:
            raise self._damaged(f"it has no member for field {key!r}", None)
        spec = self._specs[key]
        return self._read(member, spec.np_dtype, (num_rows, *spec.shape))

    def headers(self) -> dict[str, tuple[np.dtype[Any], tuple[int, ...]]]:
        """Dtype and shape of every field member, by qualified key, without reading data.

        Keys are the percent-decoded member names without ``.npy``; members under
        ``episode/`` are left out, and so are names without ``.npy``, which
        :attr:`foreign_members` lists. Only the ``.npy`` headers are read (for a deflated
        member, its first block), so a header cannot make this allocate anything.
        """
        out = {}
        for name in sorted(self._names):
            if not name.endswith(_SUFFIX) or name.startswith(META_PREFIX):
                continue
            try:
                with self._zip.open(name) as handle:
                    _, found_dtype, found_shape = _header(handle)
            except _DAMAGE as err:
                raise self._damaged(f"cannot read the header of member {name!r}", err) from err
            key = "/".join(unquote(part) for part in name[: -len(_SUFFIX)].split("/"))
            out[key] = (found_dtype, found_shape)
        return out

    def _read(self, member: str, dtype: np.dtype[Any], shape: tuple[int, ...]) -> npt.NDArray[Any]:
        try:
            with self._zip.open(member) as handle:
                fortran, found_dtype, found_shape = _header(handle)
                # checked before allocating: a crafted header cannot request a huge array
                if found_dtype != dtype or found_shape != shape:
                    raise self._damaged(
                        f"member {member!r} holds {found_dtype} {found_shape}, expected "
                        f"{dtype} {shape}",
                        None,
                    )
                out = np.empty(shape, dtype=dtype, order="F" if fortran else "C")
                _fill(handle, out)
                if handle.read(1):  # also reaches the end, where zipfile checks the CRC-32
                    raise ValueError("trailing bytes after the array data")
        except DatasetStateError:
            raise
        except _DAMAGE as err:
            raise self._damaged(f"cannot read member {member!r}", err) from err
        return out

    def _damaged(self, what: str, err: BaseException | None) -> DatasetStateError:
        cause = f" ({type(err).__name__}: {err})" if err is not None else ""
        return DatasetStateError(
            f"{self._where}: {what}{cause}; the file is damaged. Run `episodata verify` on "
            "the dataset to list every damaged file"
        )


def _header(handle: Any) -> tuple[bool, np.dtype[Any], tuple[int, ...]]:
    """``(fortran_order, dtype, shape)`` of the ``.npy`` header at the start of ``handle``."""
    version = np.lib.format.read_magic(handle)
    if version == (1, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_1_0(handle)
    elif version == (2, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_2_0(handle)
    else:
        raise ValueError(f"unsupported .npy format version {version}")
    return bool(fortran), dtype, tuple(shape)


def _fill(handle: io.BufferedIOBase | Any, out: npt.NDArray[Any]) -> None:
    """Read exactly ``out.nbytes`` bytes from ``handle`` into ``out``."""
    total = out.nbytes
    if total == 0:
        return
    target = out.reshape(-1, order="A").view(np.uint8)  # a view: out is contiguous
    position = 0
    while position < total:
        chunk = handle.read(min(_CHUNK, total - position))
        if not chunk:
            raise ValueError(f"the array data ends after {position} of {total} bytes")
        target[position : position + len(chunk)] = np.frombuffer(chunk, dtype=np.uint8)
        position += len(chunk)


def checked_meta(
    archive: EpisodeArchive, where: str, episode: int, *, ongoing: bool, required: frozenset[str]
) -> tuple[EpisodeMeta, frozenset[str]]:
    """The archive's ``episode/*`` members and fields, which must match its name."""
    meta = archive.meta()
    fields = archive.fields
    if meta.id != episode or meta.ongoing != ongoing or not required <= fields:
        raise DatasetStateError(
            f"{where}: its members say episode {meta.id}, ongoing={meta.ongoing}, fields "
            f"{sorted(fields)}; expected episode {episode}, ongoing={ongoing} and every "
            "required field. The file is damaged or was renamed"
        )
    return meta, fields
