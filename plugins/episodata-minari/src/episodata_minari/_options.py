"""Options of the Minari importer (docs/minari.md, "Options")."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = ["FieldNames", "MinariOptions"]


class FieldNames(BaseModel):
    """Keys of the fields of spaces that are not Dict or Tuple, and of the reward."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    observation: str = Field(
        default="observation", description="Key of the observation field of a Box/Discrete space."
    )
    action: str = Field(
        default="action", description="Key of the action field of a Box/Discrete space."
    )
    reward: str = Field(default="reward", description="Key of the reward field.")


class MinariOptions(BaseModel):
    """How to read a Minari dataset (docs/minari.md, "Options")."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    infos: bool | list[str] = Field(
        default=True,
        description="Import all infos/* (True), none (False), or these names (without 'infos/').",
    )
    decode_images: bool = Field(
        default=True,
        description=(
            "Decode JPEG-encoded image observations (minari >= 0.5.3) with Pillow into "
            "uint8 [H, W, C] fields. False keeps each image's JPEG bytes instead: a uint8 [L] "
            "field zero-padded to the longest image, with metadata encoding='jpeg' and "
            "image_shape."
        ),
    )
    field_names: FieldNames = Field(
        default_factory=FieldNames,
        description="Keys of non-Dict/Tuple observation and action fields, and of the reward.",
    )
    strict: bool = Field(default=False, description="Turn every warning into a FormatError.")
    hash_source: bool = Field(
        default=False, description="Record the sha256 of data/main_data.hdf5 in the metadata."
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
