"""The ongoing spill: rows of unfinished episodes, written whole by every flush.

``ongoing.bin`` is replaced atomically (temporary file and rename), so readers see the
previous flush or the next one, never a mix. Layout, all integers little-endian::

    b"EPDSPILL"  u64 header size  header (JSON)  payload  BLAKE2b-256 of all before it

The header lists each episode's id, row count and stored fields; the payload holds
their rows back to back in that order. Dtypes and shapes come from the schema, never
from the file, so a damaged or hostile spill cannot make a reader allocate or
interpret anything the schema does not describe.
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Any

import numpy as np
from episodata_core.errors import IntegrityError
from episodata_core.location import fsync_directory, write_atomic

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

    import numpy.typing as npt
    from episodata_core.schema import FieldSpec

__all__ = ["SPILL_NAME", "SpillFile", "decode_spill", "encode_spill"]

Spill = dict[int, dict[str, "npt.NDArray[Any]"]]

SPILL_NAME = "ongoing.bin"
_MAGIC = b"EPDSPILL"
_DIGEST_SIZE = 32


class SpillFile:
    """``ongoing.bin`` of one dataset folder: replaced whole, read again when it changed."""

    def __init__(self, root: Path, specs: Mapping[str, FieldSpec], *, durable: bool) -> None:
        self.path = root / SPILL_NAME
        self._specs = specs
        self._durable = durable
        self._seen: tuple[int, int, int] | None = None

    def exists(self) -> bool:
        """Whether there is a spill (none while no episode is ongoing)."""
        return self.path.exists()

    def read_if_changed(self) -> Spill | None:
        """Its episodes, or ``None`` when the file did not change since the last read."""
        try:
            stat = self.path.stat()
            data = self.path.read_bytes()
        except FileNotFoundError:
            changed = self._seen is not None
            self._seen = None
            return {} if changed else None
        seen = (stat.st_ino, stat.st_size, stat.st_mtime_ns)
        if seen == self._seen:
            return None
        episodes = decode_spill(data, self._specs, SPILL_NAME)
        self._seen = seen
        return episodes

    def forget(self) -> None:
        """Read the file at the next :meth:`read_if_changed`, whatever its timestamp."""
        self._seen = None

    def write(self, episodes: Mapping[int, Mapping[str, npt.NDArray[Any]]]) -> None:
        """Replace the spill atomically; no episodes removes it."""
        if episodes:
            write_atomic(self.path, encode_spill(episodes), durable=self._durable)
        elif self.path.exists():
            self.path.unlink()
            if self._durable:
                fsync_directory(self.path.parent)

    def problem(self) -> str | None:
        """What is wrong with the file on disk, if anything (for ``verify()``)."""
        try:
            decode_spill(self.path.read_bytes(), self._specs, SPILL_NAME)
        except FileNotFoundError:
            return None
        except IntegrityError as err:
            return str(err)
        return None


def _digest(data: bytes | memoryview) -> bytes:
    return hashlib.blake2b(data, digest_size=_DIGEST_SIZE).digest()


def encode_spill(episodes: Mapping[int, Mapping[str, npt.NDArray[Any]]]) -> bytes:
    """Serialize ``{episode: {field: [n, ...] rows}}``; fields keep their given order."""
    entries = []
    blocks: list[bytes] = []
    for episode, rows in sorted(episodes.items()):
        counts = {len(block) for block in rows.values()}
        entries.append({"episode": episode, "num_rows": counts.pop(), "fields": list(rows)})
        blocks.extend(np.ascontiguousarray(block).tobytes() for block in rows.values())
    header = json.dumps({"version": 1, "episodes": entries}).encode()
    body = b"".join([_MAGIC, len(header).to_bytes(8, "little"), header, *blocks])
    return body + _digest(body)


def decode_spill(
    data: bytes, specs: Mapping[str, FieldSpec], where: str
) -> dict[int, dict[str, npt.NDArray[Any]]]:
    """Check and parse a spill; arrays are read-only views of ``data``.

    Raises
    ------
    IntegrityError
        The digest does not match, or the header does not fit the schema.
    """
    view = memoryview(data)
    if len(data) < len(_MAGIC) + 8 + _DIGEST_SIZE or data[: len(_MAGIC)] != _MAGIC:
        raise IntegrityError(f"{where}: not an ongoing-episode spill (bad signature or size)")
    body = view[:-_DIGEST_SIZE]
    if _digest(body) != data[-_DIGEST_SIZE:]:
        raise IntegrityError(
            f"{where}: checksum mismatch, the file was damaged after it was written; the "
            "ongoing episodes it holds cannot be trusted"
        )
    size = int.from_bytes(data[len(_MAGIC) : len(_MAGIC) + 8], "little")
    start = len(_MAGIC) + 8
    try:
        header = json.loads(bytes(body[start : start + size]))
        entries = [
            (int(entry["episode"]), int(entry["num_rows"]), [str(k) for k in entry["fields"]])
            for entry in header["episodes"]
        ]
    except (ValueError, KeyError, TypeError) as err:
        raise IntegrityError(f"{where}: unreadable header ({err})") from err
    offset = start + size
    episodes: dict[int, dict[str, npt.NDArray[Any]]] = {}
    for episode, num_rows, fields in entries:
        if episode < 0 or num_rows < 1 or episode in episodes:
            raise IntegrityError(f"{where}: invalid entry for episode {episode}")
        rows: dict[str, npt.NDArray[Any]] = {}
        for key in fields:
            spec = specs.get(key)
            if spec is None:
                raise IntegrityError(f"{where}: episode {episode} names unknown field {key!r}")
            dtype = spec.np_dtype
            count = num_rows * int(np.prod(spec.shape, dtype=np.int64))
            nbytes = count * dtype.itemsize
            if offset + nbytes > len(body):
                raise IntegrityError(f"{where}: episode {episode} field {key!r} runs past the end")
            flat = np.frombuffer(body, dtype=dtype, count=count, offset=offset)
            rows[key] = flat.reshape(num_rows, *spec.shape)
            offset += nbytes
        episodes[episode] = rows
    if offset != len(body):
        raise IntegrityError(f"{where}: {len(body) - offset} unexpected bytes after the rows")
    return episodes
