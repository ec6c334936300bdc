"""The Minari dataset folder: where its files are, ``metadata.json`` and its spaces (§4).

Nothing here opens HDF5. The dataset folder ``<name>-v<k>/`` holds ``data/``, which holds
``metadata.json`` and, for the hdf5 data format, ``main_data.hdf5``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from episodata_core.errors import FormatError

__all__ = [
    "KNOWN_VERSIONS",
    "MinariSource",
    "SpaceLeaf",
    "resolve_source",
    "space_leaves",
    "version_is_known",
]

METADATA_FILE = "metadata.json"
MAIN_FILE = "main_data.hdf5"

KNOWN_VERSIONS = ((0, 4, 0), (0, 5, 4))
"""The minari releases whose HDF5 layout formats.md §4 was checked against (inclusive)."""

_CLAUSE = re.compile(r"^\s*(===|==|~=|>=|<=|!=|>|<)?\s*v?(\d+)\.(\d+)(?:\.(\d+))?(?:\.\*)?\s*$")


@dataclass(frozen=True)
class SpaceLeaf:
    """One leaf of a serialized Gymnasium space: its type and, where known, shape and dtype."""

    kind: str
    shape: tuple[int, ...] | None = None
    dtype: str | None = None


@dataclass(frozen=True)
class MinariSource:
    """A resolved Minari dataset folder and what its ``metadata.json`` says."""

    given: str
    """The source path as the caller passed it."""
    data_dir: Path
    hdf5_path: Path
    metadata: dict[str, Any]
    total_episodes: int
    total_steps: int
    observation_space: dict[str, SpaceLeaf] | None
    """Leaves of the observation space by path below ``observations`` ("" for a bare space)."""
    action_space: dict[str, SpaceLeaf] | None

    @property
    def dataset_id(self) -> str | None:
        """``dataset_id`` from ``metadata.json``, if it is a string."""
        value = self.metadata.get("dataset_id")
        return value if isinstance(value, str) else None

    @property
    def minari_version(self) -> str | None:
        """The ``minari_version`` specifier from ``metadata.json``, if it is a string."""
        value = self.metadata.get("minari_version")
        return value if isinstance(value, str) else None


def resolve_source(source: str) -> MinariSource:
    """Find ``metadata.json`` and ``main_data.hdf5`` of ``source`` and read the metadata.

    ``source`` is the dataset folder, its ``data/`` folder, or ``data/main_data.hdf5``.
    """
    path = Path(source)
    if not path.exists():
        raise FileNotFoundError(
            f"{source!r}: no such file or folder; pass a Minari dataset folder "
            f"(.../<name>-v<k>/ holding data/{METADATA_FILE})"
        )
    if path.is_file():
        if path.name != MAIN_FILE:
            raise FormatError(
                f"{source!r} is a file; the minari importer reads a dataset folder "
                f"(.../<name>-v<k>/ holding data/{METADATA_FILE} and data/{MAIN_FILE})"
            )
        data_dir = path.parent
    elif (path / "data" / METADATA_FILE).is_file():
        data_dir = path / "data"
    else:
        data_dir = path
    metadata_path = data_dir / METADATA_FILE
    if not metadata_path.is_file():
        raise FormatError(
            f"{source!r}: no {METADATA_FILE} in {str(path)!r} or in its data/ folder; pass a "
            f"Minari dataset folder (.../<name>-v<k>/ holding data/{METADATA_FILE})"
        )
    metadata = _read_metadata(source, metadata_path)
    _check_data_format(source, metadata)
    hdf5_path = data_dir / MAIN_FILE
    if not hdf5_path.is_file():
        raise FormatError(
            f"{source!r}: {METADATA_FILE} says data_format 'hdf5' but {str(hdf5_path)!r} does "
            "not exist; the dataset folder is incomplete (download it again)"
        )
    return MinariSource(
        given=source,
        data_dir=data_dir,
        hdf5_path=hdf5_path,
        metadata=metadata,
        total_episodes=_count(source, metadata, "total_episodes"),
        total_steps=_count(source, metadata, "total_steps"),
        observation_space=_space(source, metadata, "observation_space"),
        action_space=_space(source, metadata, "action_space"),
    )


def _read_metadata(source: str, path: Path) -> dict[str, Any]:
    try:
        metadata = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise FormatError(f"{source!r}: {METADATA_FILE} is not valid JSON ({err})") from err
    if not isinstance(metadata, dict):
        raise FormatError(
            f"{source!r}: {METADATA_FILE} holds a {type(metadata).__name__}; expected an object"
        )
    return metadata


def _check_data_format(source: str, metadata: dict[str, Any]) -> None:
    # minari 0.4 wrote no data_format: HDF5 was its only storage
    data_format = metadata.get("data_format", "hdf5")
    if data_format in ("arrow", "parquet"):
        raise FormatError(
            f"{source!r}: data_format {data_format!r} is not supported; the minari importer "
            "reads only the 'hdf5' data format for now. Convert the dataset with minari "
            "(minari.create_dataset_from_buffers(..., data_format='hdf5')) and import that"
        )
    if data_format != "hdf5":
        raise FormatError(
            f"{source!r}: {METADATA_FILE} names data_format {data_format!r}; the minari "
            "importer reads 'hdf5' datasets"
        )


def _count(source: str, metadata: dict[str, Any], key: str) -> int:
    value = metadata.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise FormatError(
            f"{source!r}: {METADATA_FILE} needs {key!r} as a non-negative integer, got "
            f"{value!r}; the dataset folder is damaged"
        )
    return value


def _space(source: str, metadata: dict[str, Any], key: str) -> dict[str, SpaceLeaf] | None:
    """The leaves of a serialized space, or ``None`` when ``metadata.json`` has none."""
    text = metadata.get(key)
    if text is None:
        return None
    try:
        space = json.loads(text) if isinstance(text, str) else text
        return space_leaves(space)
    except (json.JSONDecodeError, KeyError, TypeError, ValueError) as err:
        raise FormatError(
            f"{source!r}: {METADATA_FILE} {key!r} is not a serialized Gymnasium space ({err})"
        ) from err


def space_leaves(space: Any) -> dict[str, SpaceLeaf]:
    """``{path: leaf}`` of a serialized space, with paths as in ``main_data.hdf5``.

    A Dict contributes its keys and a Tuple ``_index_<k>``, joined by ``/``; a space that
    is neither has the path ``""``.
    """
    leaves: dict[str, SpaceLeaf] = {}
    _walk(space, "", leaves)
    return leaves


def _walk(space: Any, prefix: str, leaves: dict[str, SpaceLeaf]) -> None:
    if not isinstance(space, dict):
        raise TypeError(f"expected an object, got {type(space).__name__}")
    kind = str(space["type"])
    if kind == "Dict":
        for name, subspace in space["subspaces"].items():
            _walk(subspace, f"{prefix}/{name}" if prefix else str(name), leaves)
    elif kind == "Tuple":
        for position, subspace in enumerate(space["subspaces"]):
            name = f"_index_{position}"
            _walk(subspace, f"{prefix}/{name}" if prefix else name, leaves)
    elif kind == "Box":
        shape = tuple(int(n) for n in space["shape"])
        leaves[prefix] = SpaceLeaf(kind, shape, str(space["dtype"]))
    elif kind == "Discrete":
        leaves[prefix] = SpaceLeaf(kind, (), "int64")
    else:  # Text, and types minari cannot serialize today: no shape to check
        leaves[prefix] = SpaceLeaf(kind)


def version_is_known(text: str | None) -> bool:
    """Whether a ``minari_version`` specifier lies within :data:`KNOWN_VERSIONS`.

    ``"0.4.1"``, ``"==0.5.2"``, ``"~=0.4.1"`` and ``">=0.4.0,<0.6"`` are known: every
    lower or exact bound lies in the range (upper bounds and exclusions are ignored).
    """
    if text is None:
        return False
    low, high = KNOWN_VERSIONS
    bounds = []
    for clause in text.split(","):
        match = _CLAUSE.match(clause)
        if match is None:
            return False
        operator = match.group(1)
        if operator in ("<", "<=", "!="):
            continue
        bound = (int(match.group(2)), int(match.group(3)), int(match.group(4) or 0))
        if operator == ">" and bound >= high:
            return False
        bounds.append(bound)
    return bool(bounds) and all(low <= bound <= high for bound in bounds)
