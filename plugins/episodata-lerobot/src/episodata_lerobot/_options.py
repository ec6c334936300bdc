"""Options of the LeRobot importer and exporter (formats.md §8)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = ["LeRobotExportOptions", "LeRobotImportOptions"]


class LeRobotImportOptions(BaseModel):
    """How to read a LeRobot v3 dataset folder (formats.md §8.2)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    episodes: list[int] | None = Field(
        default=None,
        description="episode_index values to import, in this order; None imports every episode.",
    )
    final_observation: Literal["drop", "missing"] = Field(
        default="drop",
        description=(
            "LeRobot stores no final observation. 'drop': T-1 exact transitions per episode "
            "(the last action and reward are dropped; the episode ends truncated). 'missing': "
            "all T actions; the last next-observation is filled (NaN, 0, False) and the info "
            "field 'observation_valid' is False on it."
        ),
    )
    done_means: Literal["terminated", "truncated"] = Field(
        default="terminated",
        description=(
            "With final_observation='missing': the episode flag that next.done=True on the "
            "last frame becomes (LeRobot does not tell the two apart)."
        ),
    )
    read_budget_bytes: int = Field(
        default=256 << 20,
        ge=1,
        description="Decoded bytes read at once; episodes are read in windows of this size.",
    )
    strict: bool = Field(default=False, description="Turn every warning into a FormatError.")

    @field_validator("episodes")
    @classmethod
    def _check_episodes(cls, value: list[int] | None) -> list[int] | None:
        if value is not None:
            if not value:
                raise ValueError("episodes=[] selects nothing; pass None to import every episode")
            if len(set(value)) != len(value):
                raise ValueError(f"episodes={value} names an episode twice")
            if min(value) < 0:
                raise ValueError(f"episodes={value}: episode_index values are >= 0")
        return value


class LeRobotExportOptions(BaseModel):
    """How to write episodes as a LeRobot v3 dataset (formats.md §8.3)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    fps: int | None = Field(
        default=None,
        ge=1,
        description="Frames per second; None takes it from the LeRobot import record.",
    )
    robot_type: str | None = Field(
        default=None, description="info.json robot_type; None takes it from the import record."
    )
    task: str | None = Field(
        default=None,
        description="Task of episodes without one in their import record; None uses the label.",
    )
    episodes: list[int] | None = Field(
        default=None,
        description="Positions of the episodes to export from each dataset; None exports all.",
    )
    images: Literal["auto", "png", "video"] = Field(
        default="auto",
        description=(
            "How uint8 [H, W, C] image fields are stored: 'png' in the parquet, 'video' as "
            "mp4, 'auto' as the field was imported (else png)."
        ),
    )
    video_codec: Literal["av1", "h264"] = Field(
        default="av1", description="Video codec (AV1 by SVT-AV1, or H.264 by x264), via PyAV."
    )
    crf: int = Field(default=30, ge=0, le=63, description="Constant rate factor of the encoder.")
    gop: int = Field(default=2, ge=1, description="Keyframe interval in frames (video.g).")
    preset: int = Field(
        default=12, ge=0, le=13, description="SVT-AV1 preset (speed); ignored for H.264."
    )
    done_feature: bool = Field(
        default=True,
        description="Write next.done (True on the last frame of a terminated or truncated episode).",
    )
    data_files_size_in_mb: float = Field(
        default=100,
        gt=0,
        description=(
            "Size in MiB at which a data parquet file ends and the next episode starts a new "
            "one (LeRobot's data_files_size_in_mb; a file holds whole episodes)."
        ),
    )
    video_files_size_in_mb: float = Field(
        default=200,
        gt=0,
        description="The same for each video feature's mp4 files (video_files_size_in_mb).",
    )
    chunks_size: int = Field(
        default=1000, ge=1, description="Files per chunk-NNN folder (LeRobot's chunks_size)."
    )
    overwrite: bool = Field(default=False, description="Replace an existing destination.")
