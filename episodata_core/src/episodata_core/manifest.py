"""The manifest: the one document that says what a dataset is and what wrote it."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from episodata_core.schema import DatasetSchema

__all__ = ["FORMAT_VERSION", "Manifest", "PluginVersion", "Provenance"]

FORMAT_VERSION = 1
"""The manifest format this version of episodata writes and reads."""


class PluginVersion(BaseModel):
    """One distribution that took part in writing a dataset."""

    model_config = ConfigDict(extra="forbid")

    distribution: str = Field(description="Distribution name, e.g. 'episodata-zarr'.")
    version: str = Field(description="Installed version of the distribution.")
    role: str = Field(default="", description="What it did, e.g. 'backend' or 'hook'.")


class Provenance(BaseModel):
    """Who wrote a dataset, with which plugins, and when."""

    model_config = ConfigDict(extra="forbid")

    created_at: str = Field(
        default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"),
        description="Creation time, ISO 8601 in UTC.",
    )
    episodata_version: str = Field(default="", description="Version of episodata-core.")
    plugins: list[PluginVersion] = Field(
        default_factory=list, description="Distributions involved in writing."
    )
    extra: dict[str, Any] = Field(
        default_factory=dict, description="Tool-specific records, e.g. a pipeline config."
    )


class Manifest(BaseModel):
    """``manifest.json``: format version, backend, schema, metadata and provenance."""

    model_config = ConfigDict(extra="forbid")

    format_version: int = Field(
        default=FORMAT_VERSION, description="Version of this document's layout."
    )
    backend: str = Field(description="Registered name of the backend that stores the data.")
    backend_options: dict[str, Any] = Field(
        default_factory=dict, description="The backend's options at creation (its Options)."
    )
    schema_: DatasetSchema = Field(alias="schema", description="The dataset schema.")
    metadata: dict[str, Any] = Field(
        default_factory=dict, description="Free-form, JSON-serializable dataset metadata."
    )
    provenance: Provenance = Field(default_factory=Provenance, description="What wrote it.")

    @property
    def schema(self) -> DatasetSchema:  # type: ignore[override]
        """The dataset schema."""
        return self.schema_

    def to_json(self) -> str:
        """The manifest as an indented JSON document."""
        return self.model_dump_json(indent=2, by_alias=True)

    @classmethod
    def from_json(cls, text: str | bytes) -> Manifest:
        """Parse and validate a manifest document."""
        return cls.model_validate_json(text)
