r"""``SHA256SUMS``: writing it, and checking an untrusted archive against it first.

The file uses the coreutils format, ``<64 lowercase hex>␣␣<relative path>\n``, sorted by
the UTF-8 bytes of the path, so ``sha256sum -c SHA256SUMS`` passes from the archive root.
Every path read from it is checked before it is opened: relative, no ``..``, no symlink
on the way, and inside the root.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from episodata_core import location
from episodata_core.errors import EpisodataError, IntegrityError

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = [
    "SUMS_NAME",
    "ChecksumReport",
    "check_relative_path",
    "file_sha256",
    "sha256sums_text",
    "verify_sha256sums",
]

SUMS_NAME = "SHA256SUMS"
_LINE = re.compile(r"[0-9a-f]{64}  \S.*")
_CHUNK = 1 << 20


@dataclass
class ChecksumReport:
    """What :func:`verify_sha256sums` found: listed paths with hashes, and extra files."""

    listed: dict[str, str] = field(default_factory=dict)
    unlisted: list[str] = field(default_factory=list)
    total_bytes: int = 0


def file_sha256(path: str | os.PathLike[str]) -> str:
    """The lowercase hex SHA-256 of a file, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def sha256sums_text(root: str | os.PathLike[str], paths: Iterable[str]) -> str:
    """The ``SHA256SUMS`` text for ``paths`` (relative, ``/``-separated) under ``root``."""
    ordered = sorted(paths, key=lambda p: p.encode())
    return "".join(f"{file_sha256(Path(root, p))}  {p}\n" for p in ordered)


def check_relative_path(root: Path, relative: str, where: str) -> Path:
    """``root / relative`` after refusing absolute paths, ``..``, symlinks and escapes."""
    pure = PurePosixPath(relative)
    parts = relative.split("/")
    if (
        pure.is_absolute()
        or relative.startswith("\\")
        or (len(relative) > 1 and relative[1] == ":")
        or any(part in ("", ".", "..") for part in parts)
        or "\\" in relative
    ):
        raise IntegrityError(
            f"{where}: path {relative!r} is not a plain relative path inside the archive "
            "(absolute, '..', '.', empty or backslash components are refused); the archive "
            "may be malicious or damaged"
        )
    current = root
    for part in parts:
        current = current / part
        try:
            mode = os.lstat(current).st_mode
        except FileNotFoundError:
            break
        if stat.S_ISLNK(mode):
            raise IntegrityError(
                f"{where}: {str(current.relative_to(root))!r} is a symbolic link; links are "
                "refused in archives because they can point anywhere"
            )
    try:
        return location.inside(root, relative)
    except EpisodataError as err:
        raise IntegrityError(f"{where}: {err}") from err


def _parse(root: Path, text: str) -> dict[str, str]:
    listed: dict[str, str] = {}
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    for number, line in enumerate(lines, start=1):
        where = f"{SUMS_NAME} line {number}"
        if not _LINE.fullmatch(line):
            raise IntegrityError(
                f"{where}: {line[:120]!r} is not '<64 lowercase hex>  <path>'; the checksum "
                "file is damaged"
            )
        digest, relative = line[:64], line[66:]
        check_relative_path(root, relative, where)
        if relative == SUMS_NAME:
            raise IntegrityError(f"{where}: {SUMS_NAME} cannot list itself")
        if relative in listed:
            raise IntegrityError(f"{where}: {relative!r} is listed twice")
        listed[relative] = digest
    return listed


def _walk(root: Path) -> list[str]:
    found: list[str] = []
    for folder, dirs, files in os.walk(root, followlinks=False):
        base = Path(folder)
        # a symlinked folder is not descended into; it is reported as an entry of its own
        found += [(base / d).relative_to(root).as_posix() for d in dirs if (base / d).is_symlink()]
        found += [(base / f).relative_to(root).as_posix() for f in files]
    return found


def verify_sha256sums(root: str | os.PathLike[str]) -> ChecksumReport:
    """Check every file listed in ``root/SHA256SUMS`` and find the ones it leaves out.

    Raises
    ------
    IntegrityError
        ``SHA256SUMS`` is missing or malformed, a path escapes the root or passes a
        symlink, a listed file is missing, or a hash differs. The message names the file.
    """
    base = Path(root)
    sums = base / SUMS_NAME
    if sums.is_symlink() or not sums.is_file():
        raise IntegrityError(
            f"{str(base)!r} has no {SUMS_NAME} file; it is not a complete offset-segment "
            "archive (or its checksums were removed)"
        )
    try:
        text = sums.read_bytes().decode("utf-8")
    except UnicodeDecodeError as err:
        raise IntegrityError(f"{SUMS_NAME} is not UTF-8 text ({err}); it is damaged") from err
    report = ChecksumReport(listed=_parse(base, text))
    for relative, expected in report.listed.items():
        path = base / relative
        if not path.is_file():
            raise IntegrityError(
                f"{relative!r} is listed in {SUMS_NAME} but missing from the archive; "
                "re-download or re-export it"
            )
        actual = file_sha256(path)
        if actual != expected:
            raise IntegrityError(
                f"{relative!r} does not match its SHA-256 in {SUMS_NAME} (expected "
                f"{expected}, found {actual}); the file is damaged or was modified"
            )
        report.total_bytes += path.stat().st_size
    known = {*report.listed, SUMS_NAME}
    report.unlisted = sorted(p for p in _walk(base) if p not in known)
    return report
