"""The archive's ``manifest.json`` and ``manifest.jsonl`` documents (formats.md §3.5, §3.6).

The same models write the documents and validate untrusted ones on import, so the two
sides cannot drift apart. Serialization is canonical: sorted keys, ASCII only, no NaN,
and a final newline, which makes the bytes a function of the content.
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from episodata_core.errors import FormatError

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "LABEL_PATTERN",
    "ArchiveManifest",
    "EnvironmentEntry",
    "FieldEntry",
    "NpzEntry",
    "PoolEntry",
    "SamplingEntry",
    "ScalarEntry",
    "SegmentEntry",
    "SegmentRow",
    "dump_json",
    "dump_jsonl_row",
    "parse_manifest",
    "parse_rows",
]

FORMAT = "episodata.offset_segments"
FORMAT_VERSION = 1
LABEL_PATTERN = re.compile(r"[a-z0-9][a-z0-9_-]*")

MemberRole = Literal["observation", "action", "reward", "info", "flag"]
_STORABLE_KINDS = "biufcUS"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FieldEntry(_Strict):
    """One per-row member of every segment file of an environment."""

    dtype: str = Field(description="NumPy dtype.str, e.g. '<f4', '|u1', '<U11'.")
    shape: list[int] = Field(description="Per-row shape (without the row axis).")
    rows: int = Field(ge=1, description="K + 1, or K for action-role members.")
    role: MemberRole = Field(description="Internal role; 'flag' for terminated/truncated.")
    layout: str | None = Field(default=None, description="Image axis layout, e.g. 'HWC'.")

    @field_validator("dtype")
    @classmethod
    def _check_dtype(cls, value: str) -> str:
        return _storable_dtype(value)

    @field_validator("shape")
    @classmethod
    def _check_shape(cls, value: list[int]) -> list[int]:
        if any(n < 0 for n in value):
            raise ValueError(f"shape {value} has a negative dimension")
        return value


class ScalarEntry(_Strict):
    """One 0-d member of every segment file (``env``, ``start_step``, ...)."""

    dtype: str = Field(description="NumPy dtype.str of the 0-d array.")

    @field_validator("dtype")
    @classmethod
    def _check_dtype(cls, value: str) -> str:
        return _storable_dtype(value)


class SegmentEntry(_Strict):
    """A segment as listed in ``environments[label].segments``, in draw order."""

    segment_id: str
    source_episode: int = Field(ge=0)
    start_step: int = Field(ge=0)
    goal_step: int = Field(ge=0)
    path: str
    content_sha256: str = Field(pattern=r"^[0-9a-f]{64}$")


class PoolEntry(_Strict):
    """How many episodes an environment had, pooled and eligible."""

    episodes_total: int = Field(ge=0)
    pool_limit: int | None = None
    pool_size: int = Field(ge=0)
    eligible: int = Field(ge=0)
    excluded_nonfinite: int = Field(ge=0)
    ongoing_skipped: int = Field(default=0, ge=0)


class EnvironmentEntry(_Strict):
    """Everything about one label: source, pool, members and segments."""

    source: dict[str, Any]
    pool: PoolEntry
    fields: dict[str, FieldEntry]
    scalars: dict[str, ScalarEntry]
    reset_reward_fill: dict[str, float | int | str]
    nan_totals: dict[str, int]
    index_column: str | None = None
    row_constant_columns: list[str] = Field(default_factory=list)
    segments: list[SegmentEntry]


class SamplingEntry(_Strict):
    """The normative sampling algorithm, spelled out (formats.md §3.2)."""

    eligibility: Literal["T >= K"] = "T >= K"
    episode_draw: Literal["choice(len(eligible), n, replace=False)"] = (
        "choice(len(eligible), n, replace=False)"
    )
    start_draw: Literal["integers(0, T-K+1) per episode, draw order"] = (
        "integers(0, T-K+1) per episode, draw order"
    )
    order: Literal["episodes_then_starts"] = "episodes_then_starts"
    episode_index: Literal["position"] = "position"
    weighting: Literal["episode-uniform"] = "episode-uniform"


class NpzEntry(_Strict):
    """How the NPZ containers were written."""

    compression: Literal["deflate", "stored"]
    member_order: Literal["sorted"] = "sorted"
    zip_timestamp: Literal["1980-01-01T00:00:00"] = "1980-01-01T00:00:00"


class ArchiveManifest(_Strict):
    """``manifest.json`` of an offset-segment archive."""

    format: Literal["episodata.offset_segments"] = "episodata.offset_segments"
    format_version: Literal[1] = 1
    offset: int = Field(ge=1)
    n_observations: int = Field(ge=2)
    n_actions: int = Field(ge=1)
    episodes_per_env: int = Field(ge=1)
    segments_total: int = Field(ge=1)
    seed: int = Field(ge=0)
    rng: Literal["numpy.random.default_rng"] = "numpy.random.default_rng"
    rng_scope: Literal["per_env"] = "per_env"
    sampling: SamplingEntry = Field(default_factory=SamplingEntry)
    env_order: list[str]
    npz: NpzEntry
    finite_required: dict[str, list[str]]
    diagnostic_fields: dict[str, list[str]]
    options: dict[str, Any] = Field(default_factory=dict)
    environments: dict[str, EnvironmentEntry]


class SegmentRow(_Strict):
    """One line of ``manifest.jsonl``."""

    segment_id: str
    env: str
    index: int = Field(ge=0)
    path: str
    source_episode: int = Field(ge=0)
    source_episode_id: int | str | None
    source_transitions: int = Field(ge=1)
    start_step: int = Field(ge=0)
    goal_step: int = Field(ge=1)
    offset: int = Field(ge=1)
    source_row_start: int | None
    n_observations: int = Field(ge=2)
    n_actions: int = Field(ge=1)
    terminated_at_goal: bool
    truncated_at_goal: bool
    nan_counts: dict[str, int]
    content_sha256: str = Field(pattern=r"^[0-9a-f]{64}$")


def _storable_dtype(value: str) -> str:
    try:
        dtype = np.dtype(value)
    except TypeError as err:
        raise ValueError(f"{value!r} is not a NumPy dtype") from err
    if dtype.kind not in _STORABLE_KINDS or dtype.fields is not None or dtype.str != value:
        raise ValueError(
            f"dtype {value!r} is not a plain numeric, bool or fixed-width string dtype.str"
        )
    return value


def dump_json(document: Any) -> bytes:
    """Canonical ``manifest.json`` bytes: indent 2, sorted keys, ASCII, no NaN, final newline."""
    text = json.dumps(document, indent=2, sort_keys=True, ensure_ascii=True, allow_nan=False)
    return (text + "\n").encode("ascii")


def dump_jsonl_row(row: Any) -> str:
    """One canonical ``manifest.jsonl`` line, with its newline."""
    text = json.dumps(
        row, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False
    )
    return text + "\n"


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not allowed in an offset-segment manifest")


def _problems(err: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(p) for p in e['loc']) or 'document'}: {e['msg']}" for e in err.errors()[:5]
    )


def parse_manifest(data: bytes, where: str) -> ArchiveManifest:
    """Validate ``manifest.json`` bytes, with errors that say what is wrong."""
    try:
        document = json.loads(data.decode("utf-8"), parse_constant=_reject_constant)
    except (UnicodeDecodeError, ValueError) as err:
        raise FormatError(f"{where}: not valid JSON ({err}); the file is damaged") from err
    if isinstance(document, dict):
        if document.get("format") != FORMAT:
            raise FormatError(
                f"{where}: format is {document.get('format')!r}, not {FORMAT!r}; this is not "
                "an offset-segment archive"
            )
        if document.get("format_version") != FORMAT_VERSION:
            raise FormatError(
                f"{where}: format_version {document.get('format_version')!r} is not "
                f"{FORMAT_VERSION}, the version this importer reads; upgrade episodata"
            )
    try:
        return ArchiveManifest.model_validate(document)
    except ValidationError as err:
        raise FormatError(f"{where}: not a valid archive manifest: {_problems(err)}") from err


def parse_rows(data: bytes, where: str) -> list[SegmentRow]:
    """Validate ``manifest.jsonl`` bytes: one segment row per line."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise FormatError(f"{where}: not UTF-8 text ({err}); the file is damaged") from err
    rows: list[SegmentRow] = []
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    for number, line in enumerate(lines, start=1):
        try:
            document = json.loads(line, parse_constant=_reject_constant)
            rows.append(SegmentRow.model_validate(document))
        except ValidationError as err:
            raise FormatError(f"{where} line {number}: {_problems(err)}") from err
        except ValueError as err:
            raise FormatError(f"{where} line {number}: not valid JSON ({err})") from err
    return rows
