"""The Minari dataset folder: where its files are, ``metadata.json`` and its spaces.

Nothing here opens HDF5. The dataset folder ``<name>-v<k>/`` holds ``data/``, which holds
``metadata.json`` and, for the hdf5 data format, ``main_data.hdf5`` (docs/minari.md). A
source is a path (``~`` is expanded) or, when no such path exists, a Minari dataset id
resolved below the root Minari itself uses: ``$MINARI_DATASETS_PATH``, else
``~/.minari/datasets``.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from episodata_core.errors import FormatError

__all__ = [
    "KNOWN_VERSIONS",
    "MinariSource",
    "SpaceLeaf",
    "datasets_root",
    "described",
    "resolve_source",
    "space_leaves",
    "version_is_known",
]

METADATA_FILE = "metadata.json"
MAIN_FILE = "main_data.hdf5"

KNOWN_VERSIONS = ((0, 4, 0), (0, 5, 4))
"""The minari releases whose HDF5 layout this importer was checked against (inclusive)."""

IMAGE_CHANNELS = (1, 3, 4)

ROOT_VARIABLE = "MINARI_DATASETS_PATH"
DEFAULT_ROOT = "~/.minari/datasets"
"""Where minari keeps its datasets when ``MINARI_DATASETS_PATH`` is not set."""

# a Minari dataset id: "[namespace/...]name-v<k>", e.g. "D4RL/pen/human-v2"
_DATASET_ID = re.compile(r"^(?:[\w.:-]+/)*[\w.:-]+-v\d+$")
_CLAUSE = re.compile(r"^\s*(===|==|~=|>=|<=|!=|>|<)?\s*v?(\d+)\.(\d+)(?:\.(\d+))?(?:\.\*)?\s*$")


@dataclass(frozen=True)
class SpaceLeaf:
    """One leaf of a serialized Gymnasium space: its type and, where known, shape and dtype."""

    kind: str
    shape: tuple[int, ...] | None = None
    dtype: str | None = None
    low: float | list[Any] | None = None
    """The lower bound of a Box (a scalar when uniform) or the ``start`` of a Discrete."""
    high: float | list[Any] | None = None
    """The upper bound of a Box or ``start + n - 1`` of a Discrete; ``None`` if unbounded."""


@dataclass(frozen=True)
class MinariSource:
    """A resolved Minari dataset folder and what its ``metadata.json`` says."""

    given: str
    """The source as the caller passed it: a path or a Minari dataset id."""
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


def datasets_root() -> Path:
    """The folder minari keeps its datasets in: ``$MINARI_DATASETS_PATH`` or ``~/.minari/datasets``.

    ``~`` is expanded in the variable too (minari itself would take it literally).
    """
    return Path(os.environ.get(ROOT_VARIABLE) or DEFAULT_ROOT).expanduser()


def resolve_source(source: str) -> MinariSource:
    """Find ``metadata.json`` and ``main_data.hdf5`` of ``source`` and read the metadata.

    ``source`` is the dataset folder, its ``data/`` folder, or ``data/main_data.hdf5``, with
    ``~`` expanded; or, when no such path exists, a Minari dataset id such as
    ``"D4RL/pen/human-v2"``, looked up in :func:`datasets_root` the way
    ``minari.load_dataset`` does.
    """
    path = _locate(source)
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


def _locate(source: str) -> Path:
    """The path of ``source``: itself with ``~`` expanded, else a dataset id in the root."""
    path = Path(source).expanduser()
    if path.exists():
        return path
    if not _DATASET_ID.fullmatch(source):
        raise FileNotFoundError(
            f"{source!r}: no such file or folder; pass a Minari dataset folder "
            f"(.../<name>-v<k>/ holding data/{METADATA_FILE}) or a dataset id such as "
            "'D4RL/pen/human-v2'"
        )
    root = datasets_root()
    candidate = root / source
    if (candidate / "data").is_dir():
        return candidate
    where = (
        f"${ROOT_VARIABLE} = {os.environ[ROOT_VARIABLE]!r}"
        if os.environ.get(ROOT_VARIABLE)
        else f"{DEFAULT_ROOT} (${ROOT_VARIABLE} is not set)"
    )
    others = (
        sorted(
            str(p.relative_to(root))
            for p in candidate.parent.glob(f"{candidate.name.rsplit('-v', 1)[0]}-v*")
            if (p / "data").is_dir()
        )
        if candidate.parent.is_dir()
        else []
    )
    raise FileNotFoundError(
        f"{source!r}: no such file or folder, and no Minari dataset with that id in {where}: "
        f"{str(candidate)!r} has no data/ folder"
        + (f". Local versions: {others}" if others else "")
        + f". Download it (minari download {source}), set ${ROOT_VARIABLE} to the folder "
        "holding it, or pass the dataset folder's path"
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
        floating = str(space["dtype"]).startswith("float")
        low, high = (_bound(space.get(side), floating) for side in ("low", "high"))
        leaves[prefix] = SpaceLeaf(kind, shape, str(space["dtype"]), low, high)
    elif kind == "Discrete":
        start = int(space.get("start", 0))
        high = start + int(space["n"]) - 1 if "n" in space else None
        leaves[prefix] = SpaceLeaf(kind, (), "int64", start, high)
    else:  # Text, and types minari cannot serialize today: no shape to check
        leaves[prefix] = SpaceLeaf(kind)


def _bound(values: Any, floating: bool) -> float | list[Any] | None:
    """A Box bound as episodata records it: a scalar when uniform, ``None`` when unbounded.

    gymnasium serializes ``low``/``high`` with ``tolist()``, so an unbounded side arrives as
    ``-Infinity``/``Infinity``; the gym plugin records no bound then, and neither do we.
    The bounds of a float Box are floats, as the gym plugin's are, however JSON wrote them.
    """
    if values is None:
        return None
    flat: list[Any] = []
    stack = [values]
    while stack:
        item = stack.pop()
        if isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, bool) or not isinstance(item, int | float):
            raise TypeError(f"a Box bound holds {item!r}, not a number")
        else:
            flat.append(item)
    if not flat or not all(math.isfinite(v) for v in flat):
        return None
    if all(v == flat[0] for v in flat):
        scalar: float = float(flat[0]) if floating else flat[0]
        return scalar
    nested: list[Any] = _as_float(values) if floating else values
    return nested


def _as_float(values: list[Any]) -> list[Any]:
    return [_as_float(v) if isinstance(v, list) else float(v) for v in values]


def described(space: SpaceLeaf | None, shape: tuple[int, ...]) -> dict[str, Any]:
    """``layout``, ``low`` and ``high`` of a field from its space, as the gym plugin sets them.

    A uint8 Box shaped like an image (``[H, W, C]`` or ``[C, H, W]`` with 1, 3 or 4
    channels) gets its axis layout; every Box its finite bounds, every Discrete
    ``start .. start + n - 1``.
    """
    if space is None or space.kind not in ("Box", "Discrete"):
        return {}
    layout = None
    if space.kind == "Box" and space.dtype == "uint8" and len(shape) == 3:
        # the rule of DatasetSchema.infer and the gym plugin, so the three agree
        if shape[0] in IMAGE_CHANNELS and shape[2] not in IMAGE_CHANNELS:
            layout = "CHW"
        elif shape[2] in IMAGE_CHANNELS:
            layout = "HWC"
    return {"layout": layout, "low": space.low, "high": space.high}


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
