"""Format generations: which episodata wrote a dataset folder, and who can read it.

``format_version`` counts changes of the manifest document within one layout. A
*generation* names the whole on-disk layout: manifest, index and data files. Two exist:

- ``"0.2"``: datasets written by episodata 0.2.0 (the earlier implementation of this
  product). Their manifests name no generation; they are recognized by their layout
  (a ``schema_version`` inside the schema and no provenance, plus ``data.zarr/index/``
  for zarr or ``storage.episodes`` for npz_directory). Backends read them through
  :class:`SupportsOlderGenerations`, read-only; ``episodata migrate`` converts them.
- ``"0.3"``: this layout. Manifests carry ``format_generation``; a manifest of this
  layout written before the key existed reads as ``"0.3"``.

A manifest that names a generation newer than :data:`FORMAT_GENERATION` is refused with
a message that says to upgrade episodata: its files may mean something this code cannot
know.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, runtime_checkable

from episodata_core._version import __version__
from episodata_core.errors import SchemaError

if TYPE_CHECKING:
    from collections.abc import Mapping

    from episodata_core.manifest import Manifest
    from episodata_core.protocols import StorageBackend

__all__ = [
    "FORMAT_GENERATION",
    "KNOWN_GENERATIONS",
    "OlderDataset",
    "SupportsOlderGenerations",
    "check_generation",
    "detect_generation",
    "open_older",
    "parse_generation",
]

FORMAT_GENERATION = "0.3"
"""The generation this episodata writes (``format_generation`` of every new manifest)."""

KNOWN_GENERATIONS = ("0.2", "0.3")
"""Every generation this episodata recognizes, oldest first."""


class OlderDataset(NamedTuple):
    """A dataset of an older generation, opened read-only by its backend plugin."""

    backend: StorageBackend
    manifest: Manifest


@runtime_checkable
class SupportsOlderGenerations(Protocol):
    """A backend class that reads datasets of older generations (read-only).

    ``older_generations`` lists the generations it reads. ``open_generation`` receives
    the folder, the generation and the parsed ``manifest.json`` document, checks the
    files against it, and returns a backend that answers every read of the
    :class:`~episodata_core.protocols.StorageBackend` contract (and refuses writes with
    a message that says to migrate) together with a manifest of today's model that
    describes it (``format_generation`` set to the generation read).
    """

    older_generations: tuple[str, ...]

    def open_generation(
        self, location: str, generation: str, document: Mapping[str, Any]
    ) -> OlderDataset:
        """Open the dataset at ``location`` of ``generation`` for reading."""
        ...


def parse_generation(value: object, where: str) -> tuple[int, ...]:
    """``"0.3"`` as ``(0, 3)``; anything else is a :class:`SchemaError` naming ``where``."""
    parts = value.split(".") if isinstance(value, str) else []
    if not parts or not all(part.isdigit() for part in parts):
        raise SchemaError(
            f"{where}: format_generation must be a string of dot-separated numbers such as "
            f"{FORMAT_GENERATION!r}, got {value!r}; the file is damaged"
        )
    return tuple(int(part) for part in parts)


def check_generation(document: Mapping[str, Any], where: str) -> None:
    """Refuse a manifest document whose ``format_generation`` is newer than this code's."""
    if "format_generation" not in document:
        return
    value = document["format_generation"]
    if parse_generation(value, where) > parse_generation(FORMAT_GENERATION, "this episodata"):
        raise SchemaError(
            f"{where} is format generation {value}, newer than the generations this "
            f"episodata ({__version__}) knows ({', '.join(KNOWN_GENERATIONS)}); upgrade "
            "episodata to open it (pip install --upgrade episodata)"
        )


def detect_generation(folder: str, document: Mapping[str, Any]) -> str:
    """The generation of the dataset at ``folder`` whose manifest is ``document``.

    The named ``format_generation`` if there is one (checked with
    :func:`check_generation`), ``"0.2"`` for the layout episodata 0.2.0 writes, else
    ``"0.3"`` (a manifest of this layout from before generations were named).
    """
    where = repr(str(Path(folder) / "manifest.json"))
    check_generation(document, where)
    named = document.get("format_generation")
    if named is not None:
        return str(named)
    return "0.2" if _looks_like_02(folder, document) else FORMAT_GENERATION


def _looks_like_02(folder: str, document: Mapping[str, Any]) -> bool:
    # what 0.2.0 writes and this layout never has: the schema carries its own
    # schema_version, the manifest has no provenance and no backend options, and the
    # backend's files sit where 0.2 put them
    schema = document.get("schema")
    if not isinstance(schema, dict) or "schema_version" not in schema:
        return False
    if "provenance" in document or "backend_options" in document:
        return False
    backend = document.get("backend")
    if backend == "zarr":
        return (Path(folder) / "data.zarr" / "index").is_dir()
    if backend == "npz_directory":
        storage = document.get("storage")
        return isinstance(storage, dict) and isinstance(storage.get("episodes"), list)
    return False


def open_older(folder: str) -> OlderDataset | None:
    """Open ``folder`` read-only if it is of an older generation; ``None`` if it is today's.

    The backend plugin named by the manifest reads it (:class:`SupportsOlderGenerations`);
    a plugin that does not read that generation is an error that says so.
    """
    from episodata_core import registry
    from episodata_core.manifest import read_manifest_document

    document = read_manifest_document(folder)
    generation = detect_generation(folder, document)
    if generation == FORMAT_GENERATION:
        return None
    name = document.get("backend")
    where = repr(str(Path(folder) / "manifest.json"))
    if not isinstance(name, str):
        raise SchemaError(f"{where}: 'backend' must be a backend name, got {name!r}")
    backend_cls = registry.get_backend(name)
    opener = getattr(backend_cls, "open_generation", None)
    if not callable(opener) or generation not in getattr(backend_cls, "older_generations", ()):
        raise SchemaError(
            f"{where} is a {name!r} dataset of format generation {generation}, which the "
            f"installed backend {name!r} does not read; install a version of its plugin "
            "that does, or convert the dataset with the episodata that wrote it"
        )
    opened = opener(folder, generation, document)
    if not isinstance(opened, OlderDataset):
        raise TypeError(f"backend {name!r}: open_generation must return an OlderDataset")
    return opened
