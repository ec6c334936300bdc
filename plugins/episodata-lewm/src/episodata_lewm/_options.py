"""Options of the LeWM importer: the options table of formats.md §2.7."""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = ["LANCE_INTEGER_COLUMNS", "EpisodeSlice", "LeWMOptions", "select_episodes"]

Role = Literal["observation", "action", "reward", "info"]
IntegerDtype = Literal[
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"
]
#: float32 columns of swm's Lance writer that hold integers in the env (its HDF5 dtypes)
LANCE_INTEGER_COLUMNS: dict[str, IntegerDtype] = {"id": "int64", "n_contacts": "int64"}
_CONSUMED = ("action", "terminated", "truncated", "ep_len", "ep_offset")


class EpisodeSlice(BaseModel):
    """A ``slice`` of episode positions, kept JSON-serializable for the import record."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    start: int | None = None
    stop: int | None = None
    step: int | None = None


class LeWMOptions(BaseModel):
    """How to read a stable-worldmodel / LeWorldModel HDF5 file or Lance dataset (§2.7).

    The option ``validate`` is stored as ``validate_rows``, since pydantic models own a
    ``validate`` attribute; it is accepted and written back under its option name.
    """

    model_config = ConfigDict(
        extra="forbid", frozen=True, validate_by_name=True, serialize_by_alias=True
    )

    columns: list[str] | None = Field(
        default=None, description="Columns to import as fields (all when None); action always."
    )
    exclude: list[str] = Field(
        default_factory=list,
        description="Columns to leave out; an excluded flag column counts as absent.",
    )
    episodes: int | EpisodeSlice | list[int] | None = Field(
        default=None,
        description="All episodes, the first n, a slice, or positions (deduplicated, sorted).",
    )
    index_column: str | None = Field(
        default="auto",
        description="Episode index column: 'auto' (episode_idx, then ep_idx), a name, or None.",
    )
    action_alignment: Literal["auto", "out", "in"] = Field(
        default="auto",
        description="'out': action[t] is taken at row t (swm); 'in': it led to row t.",
    )
    roles: dict[str, Role] = Field(
        default_factory=dict, description="Role overrides by column name (formats.md §2.5)."
    )
    missing_flags: Literal["truncated", "none"] = Field(
        default="truncated", description="Flags of episodes in files without flag columns."
    )
    strings: Literal["field", "episode_metadata", "drop"] = Field(
        default="field", description="What vlen string columns become (formats.md §2.5)."
    )
    read_budget_bytes: int = Field(
        default=256 << 20, ge=1, description="Largest read of one column batch, in bytes."
    )
    check_chunks: bool = Field(
        default=True, description="Reject reads of unallocated chunks (partial files)."
    )
    populated_bytes: int | None = Field(
        default=None, ge=0, description="Chunks must also end before this file offset."
    )
    validate_rows: Literal["full", "structure"] = Field(
        default="full",
        alias="validate",
        description="'full' runs rules 1-11 of formats.md §2.8; 'structure' rules 1-5.",
    )
    swm_release: Literal["auto", "0.1.1", "fixed"] = Field(
        default="auto",
        description="'0.1.1': files without the reset row (stable-worldmodel 0.1.1, its bug "
        "#293); 'fixed': every episode starts at its reset; 'auto' tells them apart.",
    )
    images: Literal["decode", "jpeg"] = Field(
        default="decode",
        description="Lance only: JPEG image columns become uint8 [H, W, C] ('decode', lossy "
        "against the recorded frames) or keep their encoded bytes ('jpeg', dtype S<w>; "
        "checked for structure, not decoded).",
    )
    column_dtypes: dict[str, IntegerDtype] = Field(
        default_factory=lambda: dict(LANCE_INTEGER_COLUMNS),
        description="Lance only: float32 columns that hold integers, and the dtype they "
        "become; every value must be integral. Replaces the default {id, n_contacts: int64}.",
    )
    lance_version: int | None = Field(
        default=None, ge=1, description="Lance only: the dataset version to read (the latest)."
    )
    strict: bool = Field(default=False, description="Turn every warning into a FormatError.")
    hash_source: bool = Field(
        default=False, description="Hash the source (opt-in: a LeWM file can be 100 GB)."
    )

    @field_validator("episodes", mode="before")
    @classmethod
    def _slice(cls, value: Any) -> Any:
        if isinstance(value, slice):
            return EpisodeSlice(start=value.start, stop=value.stop, step=value.step)
        if isinstance(value, int) and not isinstance(value, bool) and value < 0:
            raise ValueError("episodes=n needs n >= 0")
        return value

    @field_validator("roles")
    @classmethod
    def _roles(cls, value: dict[str, Role]) -> dict[str, Role]:
        fixed = sorted(set(value) & set(_CONSUMED))
        if fixed:
            raise ValueError(f"roles cannot override {fixed}: their meaning is fixed")
        return value


def select_episodes(
    episodes: int | EpisodeSlice | list[int] | None, count: int, path: str
) -> npt.NDArray[np.int64]:
    """Positions of the selected episodes, ascending and unique."""
    from episodata_core.errors import FormatError

    everything = np.arange(count, dtype=np.int64)
    if episodes is None:
        return everything
    if isinstance(episodes, int):
        return everything[:episodes]
    if isinstance(episodes, EpisodeSlice):
        return np.unique(everything[slice(episodes.start, episodes.stop, episodes.step)])
    chosen = np.unique(np.asarray(episodes, dtype=np.int64))
    outside = chosen[(chosen < 0) | (chosen >= count)]
    if outside.size:
        raise FormatError(
            f"{path!r}: episodes={outside[:5].tolist()} are outside the file's {count} "
            f"episodes (positions 0..{count - 1})"
        )
    return chosen
