"""The commit record: the one small file that says which rows of the arrays count.

A fold writes the arrays first; then ``commit.json`` is replaced atomically (temporary
file, fsync, rename, folder fsync). Readers and recovery trust only what the record
covers: index rows ``[0, episodes)`` and data rows ``[0, rows)``; index entries marked
ongoing there, and every episode id from ``episodes`` on, live in the episode log.
Anything beyond is a torn write and is ignored, then overwritten. A CRC-32 of the
record's own canonical JSON catches damage to it.
"""

from __future__ import annotations

import json
import zlib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from episodata_core.errors import EpisodataError
from episodata_core.location import write_json_atomic
from episodata_zarr._layout import COMMIT_NAME, FORMAT, FORMAT_VERSION

__all__ = ["CommitRecord", "OngoingRecord", "parse_commit", "read_commit", "write_commit"]


class OngoingRecord(BaseModel):
    """An ongoing episode as of the last flush."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    rows: int = Field(ge=1, description="Rows flushed to its spill arrays (at least one).")
    crc32: dict[str, int] = Field(description="CRC-32 of those rows per present field.")


class CommitRecord(BaseModel):
    """What is durable: counts, ongoing episodes and the fixed metadata checksums."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    format: str = Field(description="Always 'episodata-zarr'.")
    format_version: int = Field(description="Layout version of the folder.")
    generation: int = Field(ge=0, description="Counts commits; readers refresh when it moves.")
    episodes: int = Field(ge=0, description="Committed rows of index/episodes (episode ids).")
    rows: int = Field(ge=0, description="Committed rows of every data array.")
    ongoing: dict[int, OngoingRecord] = Field(
        default_factory=dict,
        description="Layout version 1 only: ongoing episode id -> its rows in ongoing/.",
    )
    metadata: dict[str, int] = Field(
        description="Array path -> CRC-32 of its zarr.json without the shape (fixed at creation)."
    )
    root: int = Field(description="CRC-32 of the root zarr.json (fixed at creation).")

    @field_validator("format")
    @classmethod
    def _check_format(cls, value: str) -> str:
        if value != FORMAT:
            raise ValueError(f"expected {FORMAT!r}, got {value!r}")
        return value

    @field_validator("format_version")
    @classmethod
    def _check_version(cls, value: int) -> int:
        if value > FORMAT_VERSION:
            raise ValueError(
                f"layout version {value} is newer than the {FORMAT_VERSION} this episodata-zarr "
                "reads; upgrade episodata-zarr"
            )
        return value

    def document(self) -> dict[str, Any]:
        """The JSON document, with its own checksum."""
        # through JSON text, so the checksum sees the string keys a reader will see
        body = json.loads(self.model_dump_json())
        return {**body, "crc32": _crc(body)}


def _crc(body: dict[str, Any]) -> int:
    return zlib.crc32(json.dumps(body, sort_keys=True, separators=(",", ":")).encode())


def read_commit(folder: str | Path) -> CommitRecord:
    """Read and check ``commit.json``; every problem is an :class:`EpisodataError`."""
    path = Path(folder) / COMMIT_NAME
    where = f"{str(path)!r}"
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise EpisodataError(
            f"{where} is missing: the folder is not a Zarr episodata dataset, or its creation "
            "was interrupted"
        ) from None
    return parse_commit(data, where)


def parse_commit(data: bytes, where: str) -> CommitRecord:
    """Check and parse the bytes of a commit record (``where`` names it in errors)."""
    try:
        document = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise EpisodataError(
            f"the commit record {where} is damaged (not valid JSON: {err}); restore the "
            "dataset from a copy"
        ) from err
    if not isinstance(document, dict) or not isinstance(document.get("crc32"), int):
        raise EpisodataError(f"the commit record {where} is damaged: it has no 'crc32' member")
    stored = document.pop("crc32")
    if _crc(document) != stored:
        raise EpisodataError(
            f"the commit record {where} is damaged: its checksum does not match its contents"
        )
    try:
        record = CommitRecord.model_validate(document)
    except ValidationError as err:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'document'}: {e['msg']}" for e in err.errors()
        )
        raise EpisodataError(f"the commit record {where} is not valid: {problems}") from err
    bad = [episode for episode in record.ongoing if not 0 <= episode < record.episodes]
    if bad:
        raise EpisodataError(
            f"the commit record {where} is not valid: ongoing episodes {bad} are outside "
            f"[0, {record.episodes})"
        )
    return record


def write_commit(folder: str | Path, record: CommitRecord, *, durable: bool = True) -> None:
    """Replace ``commit.json`` atomically (and durably: fsynced, unless told otherwise)."""
    write_json_atomic(Path(folder) / COMMIT_NAME, record.document(), durable=durable)
