"""Deterministic NPZ bytes, the container-free content hash, and guarded member reads.

An archive's NPZ files are written as ZIPs directly (formats.md §3.7): one ``<name>.npy``
entry per member in sorted name order, every entry dated 1980-01-01 00:00:00, so equal
arrays give equal bytes wherever NumPy's ``.npy`` writer and zlib agree. Reads check each
member's ``.npy`` header against what the manifest promises before any data is read.
"""

from __future__ import annotations

import hashlib
import io
import math
import zipfile
import zlib
from typing import IO, TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from episodata_core.errors import FormatError, IntegrityError

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = [
    "ZIP_TIMESTAMP",
    "MemberHeader",
    "content_sha256",
    "npz_bytes",
    "read_npz",
    "read_npz_headers",
]

ZIP_TIMESTAMP = "1980-01-01T00:00:00"
_ZIP_DATE_TIME = (1980, 1, 1, 0, 0, 0)
_NPY_SUFFIX = ".npy"
# entries look as if written on a POSIX system with mode 0644, whatever the host is
_UNIX_SYSTEM = 3
_FILE_MODE = 0o100644 << 16

MemberHeader = tuple[tuple[int, ...], np.dtype[Any]]
"""A member's shape and dtype as its ``.npy`` header states them."""


def _c_order(array: npt.NDArray[Any]) -> npt.NDArray[Any]:
    # np.ascontiguousarray would turn a 0-d scalar member into shape (1,)
    return array if array.flags.c_contiguous else array.copy(order="C")


def _npy_bytes(array: npt.NDArray[Any]) -> bytes:
    buffer = io.BytesIO()
    np.lib.format.write_array(buffer, _c_order(array), allow_pickle=False)
    return buffer.getvalue()


def npz_bytes(members: Mapping[str, npt.NDArray[Any]], *, compress: bool) -> bytes:
    """The NPZ file holding ``members``, byte for byte reproducible.

    Entries are sorted by member name (code point order), fixed-dated, deflated (or stored
    when ``compress`` is False) and use zip64 where sizes need it.
    """
    method = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=method, allowZip64=True) as archive:
        for name in sorted(members):
            info = zipfile.ZipInfo(name + _NPY_SUFFIX, date_time=_ZIP_DATE_TIME)
            info.compress_type = method
            info.create_system = _UNIX_SYSTEM
            info.external_attr = _FILE_MODE
            archive.writestr(info, _npy_bytes(members[name]))
    return buffer.getvalue()


def content_sha256(members: Mapping[str, npt.NDArray[Any]]) -> str:
    """SHA-256 over the members in sorted order, independent of the container and zlib.

    Each member contributes its UTF-8 name, ``dtype.str`` and comma-joined shape, each
    followed by a NUL byte, then its C-order bytes.
    """
    digest = hashlib.sha256()
    for name in sorted(members):
        array = members[name]
        digest.update(name.encode() + b"\0")
        digest.update(array.dtype.str.encode() + b"\0")
        digest.update(",".join(str(n) for n in array.shape).encode() + b"\0")
        digest.update(array.tobytes(order="C"))
    return digest.hexdigest()


def _member_names(archive: zipfile.ZipFile, where: str) -> dict[str, zipfile.ZipInfo]:
    names: dict[str, zipfile.ZipInfo] = {}
    for info in archive.infolist():
        if not info.filename.endswith(_NPY_SUFFIX) or info.is_dir():
            raise FormatError(f"{where}: entry {info.filename!r} is not a '.npy' member")
        name = info.filename[: -len(_NPY_SUFFIX)]
        if name in names:
            raise FormatError(f"{where}: member {name!r} appears twice")
        names[name] = info
    return names


def _read_header(handle: IO[bytes], where: str) -> tuple[tuple[int, ...], bool, np.dtype[Any]]:
    fmt = np.lib.format
    try:
        version = fmt.read_magic(handle)
        if version == (1, 0):
            shape, fortran, dtype = fmt.read_array_header_1_0(handle)
        elif version == (2, 0):
            shape, fortran, dtype = fmt.read_array_header_2_0(handle)
        else:
            raise FormatError(f"{where}: unsupported .npy format version {version}")
    except ValueError as err:
        if isinstance(err, FormatError):
            raise
        raise FormatError(f"{where}: unreadable .npy header ({err})") from err
    return tuple(int(n) for n in shape), bool(fortran), np.dtype(dtype)


def _open(path: str, where: str) -> zipfile.ZipFile:
    try:
        return zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as err:
        raise FormatError(f"{where}: not a readable NPZ (ZIP) file ({err})") from err


def read_npz_headers(path: str, where: str) -> dict[str, MemberHeader]:
    """Each member's shape and dtype from its ``.npy`` header; no array data is read."""
    with _open(path, where) as archive:
        headers: dict[str, MemberHeader] = {}
        for name, info in _member_names(archive, where).items():
            with archive.open(info) as handle:
                shape, _, dtype = _read_header(handle, f"{where}, member {name!r}")
            headers[name] = (shape, dtype)
    return headers


def read_npz(
    path: str, expected: Mapping[str, MemberHeader], where: str
) -> dict[str, npt.NDArray[Any]]:
    """Load every member after checking its header equals ``expected`` exactly.

    The member set, each shape and each dtype must match before any array data is read,
    so a lying header cannot make the reader allocate more than the manifest promised.
    Object dtypes never load (nothing is unpickled).
    """
    arrays: dict[str, npt.NDArray[Any]] = {}
    with _open(path, where) as archive:
        infos = _member_names(archive, where)
        if set(infos) != set(expected):
            missing = sorted(set(expected) - set(infos))
            extra = sorted(set(infos) - set(expected))
            raise FormatError(
                f"{where}: members differ from the manifest (missing {missing}, unexpected "
                f"{extra}); the archive is damaged or was not written by this exporter"
            )
        for name in sorted(infos):
            member = f"{where}, member {name!r}"
            try:
                arrays[name] = _read_member(archive, infos[name], expected[name], member)
            except (zipfile.BadZipFile, zlib.error, EOFError) as err:
                raise IntegrityError(
                    f"{member}: the compressed data is damaged ({err}); re-download the archive"
                ) from err
    return arrays


def _read_member(
    archive: zipfile.ZipFile, info: zipfile.ZipInfo, expected: MemberHeader, member: str
) -> npt.NDArray[Any]:
    with archive.open(info) as handle:
        shape, fortran, dtype = _read_header(handle, member)
        want_shape, want_dtype = expected
        if (shape, dtype.str) != (tuple(want_shape), want_dtype.str) or dtype.hasobject:
            raise FormatError(
                f"{member}: the .npy header says {dtype.str}{list(shape)} but the "
                f"manifest says {want_dtype.str}{list(want_shape)}; refusing to load it"
            )
        count = math.prod(shape)
        nbytes = count * dtype.itemsize
        if nbytes > info.file_size:
            raise FormatError(
                f"{member}: its header needs {nbytes} data bytes but the entry declares only "
                f"{info.file_size}; refusing to load it"
            )
        data = handle.read(nbytes)
        # reading past the end makes zipfile check the entry's CRC
        trailing = handle.read(1)
    if len(data) != nbytes or trailing:
        raise FormatError(
            f"{member}: the entry does not hold exactly the {nbytes} data bytes its header needs"
        )
    if dtype.itemsize == 0:
        return np.zeros(shape, dtype=dtype)
    flat = np.frombuffer(data, dtype=dtype, count=count)
    return flat.reshape(shape, order="F" if fortran else "C")
