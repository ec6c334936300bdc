"""The manifest: the one document that says what a dataset is and what wrote it.

Versioning: ``format_version`` goes up when a reader that ignores a new key would
misread the dataset. A key that only describes a passing state is written only while
that state holds, so that other manifests stay exactly what older readers accept:
``incomplete`` is such a key. Readers that do not know it refuse the manifest (every
model forbids unknown keys), which is the right answer for a dataset whose bulk write
never finished; later versions must keep reading it.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from episodata_core import location
from episodata_core._version import __version__
from episodata_core.errors import DatasetStateError, SchemaError
from episodata_core.generations import FORMAT_GENERATION, check_generation
from episodata_core.schema import DatasetSchema

__all__ = [
    "FORMAT_VERSION",
    "Incomplete",
    "Manifest",
    "PluginVersion",
    "Provenance",
    "read_manifest",
    "read_manifest_document",
    "write_manifest",
]

FORMAT_VERSION = 1
"""The manifest format this version of episodata writes and reads."""


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


class PluginVersion(BaseModel):
    """One distribution that took part in writing a dataset."""

    model_config = ConfigDict(extra="forbid")

    distribution: str = Field(description="Distribution name, e.g. 'episodata-zarr'.")
    version: str = Field(description="Installed version of the distribution.")
    role: str = Field(default="", description="What it did, e.g. 'backend' or 'hook'.")


class Provenance(BaseModel):
    """Who wrote a dataset, with which plugins, and when."""

    model_config = ConfigDict(extra="forbid")

    created_at: str = Field(default_factory=_now, description="Creation time, ISO 8601 in UTC.")
    episodata_version: str = Field(default="", description="Version of episodata-core.")
    plugins: list[PluginVersion] = Field(
        default_factory=list, description="Distributions involved in writing."
    )
    extra: dict[str, Any] = Field(
        default_factory=dict, description="Tool-specific records, e.g. a pipeline config."
    )


class Incomplete(BaseModel):
    """The mark of a bulk write (``from_episodes``, a copy, an import) that has not finished.

    Present in ``manifest.json`` from the creation until the last episode is written;
    a dataset that carries it holds only some of what it was meant to.
    """

    # a later version may record more here; it must still read as incomplete
    model_config = ConfigDict(extra="allow")

    operation: str = Field(description="What was writing: 'from_episodes', 'copy', 'import'.")
    started: str = Field(default_factory=_now, description="Start time, ISO 8601 in UTC.")
    episodes_done: int = Field(
        default=0, ge=0, description="Episodes known durable at the last progress record."
    )
    source: str | None = Field(default=None, description="What was copied or imported.")

    def describe(self, episodes: int | None = None) -> str:
        """``"<operation> was interrupted after N episodes"``; ``episodes`` counts on disk."""
        done = self.episodes_done if episodes is None else episodes
        source = f" from {self.source!r}" if self.source else ""
        return (
            f"{self.operation}{source} (started {self.started}) was interrupted after "
            f"{done} episode{'' if done == 1 else 's'}"
        )


class Manifest(BaseModel):
    """``manifest.json``: format version, backend, schema, metadata and provenance."""

    model_config = ConfigDict(extra="forbid")

    format_version: int = Field(
        default=FORMAT_VERSION, description="Version of this document's layout."
    )
    format_generation: str = Field(
        default=FORMAT_GENERATION,
        description="Generation of the whole on-disk layout ('0.3'; '0.2' for datasets "
        "written by episodata 0.2.0, which are read through their backend plugin).",
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
    incomplete: Incomplete | None = Field(
        default=None,
        description="Set while a bulk write has not finished; absent from complete datasets.",
    )

    @property
    def schema(self) -> DatasetSchema:  # type: ignore[override]
        """The dataset schema."""
        return self.schema_

    def to_json(self) -> str:
        """The manifest as an indented JSON document."""
        # a complete manifest carries no 'incomplete' key: older readers accept it as is
        exclude = {"incomplete"} if self.incomplete is None else None
        return self.model_dump_json(indent=2, by_alias=True, exclude=exclude)

    @classmethod
    def from_json(cls, text: str | bytes) -> Manifest:
        """Parse and validate a manifest document."""
        return cls.model_validate_json(text)


def read_manifest(folder: str) -> Manifest:
    """Read and validate ``manifest.json`` of a dataset folder, with errors that say why.

    An incomplete manifest is returned as it is; :meth:`Dataset.open` decides. A manifest
    of a newer format generation is refused with a message that says to upgrade.
    """
    where = _manifest_place(folder)
    document = read_manifest_document(folder)
    check_generation(document, repr(where))
    try:
        return Manifest.model_validate(document)
    except ValidationError as err:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'document'}: {e['msg']}" for e in err.errors()
        )
        raise SchemaError(f"{where!r} is not a valid manifest: {problems}") from err


def _manifest_place(folder: str) -> str:
    if location.is_remote(folder):
        return f"{folder}/{location.MANIFEST_NAME}"
    return str(Path(folder) / location.MANIFEST_NAME)


def read_manifest_document(folder: str) -> dict[str, Any]:
    """``manifest.json`` of a dataset folder (or object-storage prefix) as parsed JSON.

    Not yet validated. Missing or damaged files and a ``format_version`` newer than this
    code's raise.
    """
    if location.is_remote(folder):
        return _parse(_read_remote_manifest(folder), _manifest_place(folder))
    path = Path(folder) / location.MANIFEST_NAME
    if not path.is_file():
        state = location.creation_state(folder)
        if state == "unfinished":
            hint = (
                "it holds a creation that was interrupted before its manifest was written; "
                "Dataset.create (or rerunning from_episodes, copy or import) at this path "
                "takes it over, or delete the folder"
            )
        elif Path(folder).is_dir():
            hint = (
                "the folder exists but has no manifest: it is not an episodata dataset (or a "
                "creation by an older episodata was interrupted)"
            )
        else:
            hint = "there is no such folder"
        raise DatasetStateError(f"cannot open {folder!r}: {hint}")
    return _parse(path.read_bytes(), str(path))


def _read_remote_manifest(folder: str) -> bytes:
    """The bytes of ``manifest.json`` of a dataset on object storage."""
    text = location.read_bytes(folder, location.MANIFEST_NAME)
    if text is None:
        if location.creation_state(folder) == "unfinished":
            hint = (
                "it holds a creation that was interrupted before its manifest was written; "
                "creating a dataset (or rerunning from_episodes, copy or import) there "
                "takes it over"
            )
        else:
            hint = f"there is no {location.MANIFEST_NAME} under that prefix"
        raise DatasetStateError(f"cannot open {folder!r}: {hint}")
    return text


def _parse(text: bytes, where: str) -> dict[str, Any]:
    try:
        document = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise SchemaError(f"{where!r} is not valid JSON ({err}); the file is damaged") from err
    version = document.get("format_version") if isinstance(document, dict) else None
    if isinstance(version, int) and version > FORMAT_VERSION:
        raise SchemaError(
            f"{where!r} has format_version {version}, newer than the {FORMAT_VERSION} this "
            f"episodata ({__version__}) reads; upgrade episodata"
        )
    if not isinstance(document, dict):
        raise SchemaError(
            f"{where!r} is not a valid manifest: expected a JSON object, got "
            f"{type(document).__name__}; the file is damaged"
        )
    return document


def write_manifest(folder: str, manifest: Manifest, *, durable: bool = True) -> None:
    """Replace ``manifest.json`` of a dataset folder (or object-storage prefix) atomically.

    ``durable=False`` skips the fsyncs: the file survives a crash of this process, not a
    power loss (for records that only need the former).
    """
    location.write_bytes(
        folder, location.MANIFEST_NAME, manifest.to_json().encode(), durable=durable
    )
