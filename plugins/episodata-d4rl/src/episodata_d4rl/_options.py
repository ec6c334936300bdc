"""Options of the D4RL importer: the options table of formats.md §1.2."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = ["D4RLOptions", "FieldNames"]


class FieldNames(BaseModel):
    """Internal keys of the observation, action and reward fields."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    observation: str = Field(default="observation", description="Key of the observation field.")
    action: str = Field(default="action", description="Key of the action field.")
    reward: str = Field(default="reward", description="Key of the reward field.")


class D4RLOptions(BaseModel):
    """How to read a D4RL HDF5 file (formats.md §1.2)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    observation_key: str = Field(
        default="observations",
        description=(
            "Top-level dataset holding the observations; its successor column is "
            "'next_' + this key."
        ),
    )
    use_next_observations: bool = Field(
        default=True, description="False treats next_observations as absent (Case B)."
    )
    infos: bool | list[str] = Field(
        default=True,
        description="Import all infos/* (True), none (False), or these names (without 'infos/').",
    )
    extra_keys: Literal["info", "ignore"] = Field(
        default="info",
        description="Unknown top-level arrays with N rows: import as info fields, or ignore.",
    )
    metadata_arrays: Literal["summary", "keep", "drop"] = Field(
        default="summary",
        description="metadata/* arrays over 64 elements: {shape, dtype, omitted}, lists, or drop.",
    )
    profile: Literal["generic", "maze2d", "antmaze"] = Field(
        default="generic", description="How terminals and timeouts are read (formats.md §1.6)."
    )
    max_episode_steps: int | None = Field(
        default=None, ge=1, description="Step-count boundary rule; used only without timeouts."
    )
    split_on_next_obs_mismatch: bool | Literal["auto"] = Field(
        default="auto",
        description="End episodes where next_observations[i] != observations[i+1]; "
        "'auto' is True iff timeouts is missing.",
    )
    next_obs_atol: float = Field(default=0.0, ge=0.0, description="Tolerance of that test.")
    keep_final_partial: bool = Field(
        default=True, description="Import the unflagged last episode (False skips it)."
    )
    min_transitions: int = Field(default=1, ge=0, description="Skip shorter episodes.")
    field_names: FieldNames = Field(
        default_factory=FieldNames, description="Internal keys of observation, action, reward."
    )
    strict: bool = Field(default=False, description="Turn every warning into a FormatError.")
    hash_source: bool = Field(
        default=False, description="Record the sha256 of the source file in the metadata."
    )

    @field_validator("infos")
    @classmethod
    def _check_infos(cls, value: bool | list[str]) -> bool | list[str]:
        if isinstance(value, list):
            cleaned = [name.removeprefix("infos/").strip("/") for name in value]
            if any(not name for name in cleaned):
                raise ValueError("infos names must be non-empty paths below infos/")
            return cleaned
        return value
