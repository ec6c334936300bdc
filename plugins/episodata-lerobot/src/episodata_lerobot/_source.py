"""The LeRobot dataset folder and its ``meta/info.json``: features and the fields they become.

Nothing here opens parquet or mp4 files. formats.md §8.1 has the layout; §8.2 the
mapping of features to roles: ``observation.*`` observations (``.`` becomes ``/``),
``action`` and ``action.*`` actions, ``next.reward`` the reward, ``next.done`` the
episode flags, LeRobot's own bookkeeping columns nothing, anything else an info.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from episodata_core.errors import FormatError

__all__ = [
    "BOOKKEEPING",
    "LEGACY_VERSIONS",
    "SUPPORTED_VERSION",
    "Feature",
    "LeRobotSource",
    "feature_role_key",
    "read_source",
]

SUPPORTED_VERSION = "v3.0"
"""The version the exporter writes and the importer reads natively."""
LEGACY_VERSIONS = ("v2.0", "v2.1")
"""Versions laid out one file per episode with ``meta/*.jsonl`` (``_legacy``), also read."""
BOOKKEEPING = ("timestamp", "frame_index", "episode_index", "index", "task_index")
"""Columns LeRobot adds to every frame; checked, not imported as fields."""
DONE = "next.done"
REWARD = "next.reward"
IMAGE_NAMES = (["height", "width", "channels"], ["height", "width", "channel"])
_NUMERIC = {"bool", "float16", "float32", "float64", "int8", "int16", "int32", "int64",
            "uint8", "uint16", "uint32", "uint64"}  # fmt: skip

Kind = Literal["array", "image", "video", "done"]


@dataclass(frozen=True)
class Feature:
    """One feature of ``info.json`` and the field it becomes."""

    name: str
    kind: Kind
    role: str
    """observation, action, reward or info ("" for next.done)."""
    key: str
    shape: tuple[int, ...]
    """The field's per-step shape: info.json's shape, a reward's [1] squeezed to ()."""
    declared: tuple[int, ...]
    """The shape info.json gives."""
    dtype: np.dtype[Any]
    names: Any
    info: dict[str, Any] | None

    @property
    def qualified_key(self) -> str:
        """``role/key``."""
        return f"{self.role}/{self.key}"


@dataclass(frozen=True)
class LeRobotSource:
    """A resolved LeRobot v3 (or v2.0 / v2.1) folder and what its ``meta/info.json`` says."""

    given: str
    root: Path
    info: dict[str, Any]
    fps: float
    features: tuple[Feature, ...]
    """Features that become fields or flags, in info.json order."""
    skipped: tuple[tuple[str, str], ...]
    """``(feature, why)`` of features that are not imported."""

    @property
    def legacy(self) -> bool:
        """A v2.0 / v2.1 folder: one parquet and one mp4 per episode, ``meta/*.jsonl``."""
        return self.info.get("codebase_version") in LEGACY_VERSIONS

    @property
    def episodes_table(self) -> str:
        """How messages name the episodes table."""
        return "meta/episodes.jsonl" if self.legacy else "meta/episodes"

    @property
    def where(self) -> str:
        """How messages name the source."""
        return repr(self.given)

    def path_of(self, template_key: str, **values: Any) -> Path:
        """``data_path`` / ``video_path`` filled in, below the root."""
        template = self.info[template_key]
        try:
            relative = Path(str(template).format(**values))
        except (KeyError, IndexError, ValueError) as err:
            raise FormatError(
                f"{self.where}: info.json {template_key} {template!r} cannot be filled in "
                f"({type(err).__name__}: {err}); a LeRobot "
                f"{self.info.get('codebase_version')} path uses the fields {sorted(values)}"
            ) from err
        if relative.is_absolute() or ".." in relative.parts:
            raise FormatError(
                f"{self.where}: info.json {template_key} {template!r} leaves the dataset folder"
            )
        return self.root / relative

    @property
    def done(self) -> Feature | None:
        """The ``next.done`` feature, if there is one."""
        return next((f for f in self.features if f.kind == "done"), None)

    @property
    def fields(self) -> tuple[Feature, ...]:
        """The features that become fields."""
        return tuple(f for f in self.features if f.kind != "done")


def feature_role_key(name: str) -> tuple[str, str]:
    """``(role, key)`` of the field a feature named ``name`` becomes (formats.md §8.2)."""
    if name == REWARD:
        return "reward", "reward"
    for role in ("observation", "action"):
        if name == role:
            return role, role
        if name.startswith(role + "."):
            return role, name[len(role) + 1 :].replace(".", "/")
    return "info", name.replace(".", "/")


def read_source(source: str) -> LeRobotSource:
    """Find ``meta/info.json`` of ``source``, check its version and map its features."""
    root = Path(source)
    info_path = root / "meta" / "info.json"
    if not root.is_dir():
        what = "no such file or folder" if not root.exists() else "a file, not a folder"
        raise FormatError(
            f"{source!r} is {what}; the lerobot importer reads a LeRobot dataset folder "
            "(holding meta/info.json, data/ and, for video features, videos/)"
        )
    if not info_path.is_file():
        raise FormatError(
            f"{source!r} is not a LeRobot dataset folder: it has no meta/info.json. Pass the "
            "dataset root (the folder holding meta/, data/ and videos/)"
        )
    try:
        info = json.loads(info_path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise FormatError(f"{source!r}: meta/info.json is not valid JSON ({err})") from err
    if not isinstance(info, dict):
        raise FormatError(
            f"{source!r}: meta/info.json holds a {type(info).__name__}, not an object"
        )
    _check_version(source, info)
    needed = ["fps", "features", "data_path", "total_episodes", "total_frames"]
    if info["codebase_version"] in LEGACY_VERSIONS:
        needed.append("chunks_size")
    for key in needed:
        if key not in info:
            raise FormatError(
                f"{source!r}: meta/info.json lacks {key!r}; a LeRobot "
                f"{info['codebase_version']} info.json has {', '.join(needed)}"
            )
    fps = info["fps"]
    if isinstance(fps, bool) or not isinstance(fps, int | float) or fps <= 0:
        raise FormatError(f"{source!r}: meta/info.json fps is {fps!r}; expected a positive number")
    raw = info["features"]
    if not isinstance(raw, dict):
        raise FormatError(f"{source!r}: meta/info.json features is not an object")
    features: list[Feature] = []
    skipped: list[tuple[str, str]] = []
    for name, spec in raw.items():
        if name in BOOKKEEPING:
            continue
        feature = _feature(source, str(name), spec, skipped)
        if feature is not None:
            features.append(feature)
    if any(f.kind == "video" for f in features) and info.get("video_path") is None:
        raise FormatError(f"{source!r}: meta/info.json has video features but no video_path")
    return LeRobotSource(source, root, info, float(fps), tuple(features), tuple(skipped))


def _check_version(source: str, info: dict[str, Any]) -> None:
    version = info.get("codebase_version")
    if version == SUPPORTED_VERSION or version in LEGACY_VERSIONS:
        return
    readable = ", ".join(repr(v) for v in (*LEGACY_VERSIONS, SUPPORTED_VERSION))
    if isinstance(version, str) and version.startswith("v2"):
        raise FormatError(
            f"{source!r}: codebase_version {version!r} is a LeRobot v2 layout this importer "
            f"does not know; it reads {readable}. Convert it to v3.0 with LeRobot's own "
            "converter and import that"
        )
    raise FormatError(
        f"{source!r}: meta/info.json codebase_version is {version!r}; the lerobot importer "
        f"reads {readable} datasets. Convert older ones with LeRobot's own converters"
    )


def _feature(source: str, name: str, spec: Any, skipped: list[tuple[str, str]]) -> Feature | None:
    where = f"{source!r}: meta/info.json feature {name!r}"
    if not isinstance(spec, dict) or "dtype" not in spec or "shape" not in spec:
        raise FormatError(f"{where} needs 'dtype' and 'shape', got {spec!r}")
    dtype, shape = spec["dtype"], spec["shape"]
    if not isinstance(shape, list) or not all(
        isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape
    ):
        raise FormatError(f"{where}: shape {shape!r} is not a list of non-negative integers")
    declared = tuple(shape)
    names, info = spec.get("names"), spec.get("info")
    role, key = feature_role_key(name)
    if dtype in ("image", "video"):
        if len(declared) != 3 or declared[2] not in (1, 3, 4):
            raise FormatError(
                f"{where}: a {dtype} feature has shape [height, width, channels] with 1, 3 or 4 "
                f"channels; got {list(declared)}"
            )
        if names is not None and names not in IMAGE_NAMES:
            raise FormatError(
                f"{where}: names {names!r}; the lerobot importer reads images laid out "
                "[height, width, channels]"
            )
        kind: Kind = "image" if dtype == "image" else "video"
        return Feature(name, kind, role, key, declared, declared, np.dtype(np.uint8), names,
                       info if isinstance(info, dict) else None)  # fmt: skip
    if dtype not in _NUMERIC:
        skipped.append((name, f"dtype {dtype!r} cannot be a field"))
        return None
    if name == DONE:
        if dtype != "bool" or declared not in ((), (1,)):
            raise FormatError(f"{where}: expected bool of shape [1], got {dtype} {list(declared)}")
        return Feature(name, "done", "", "", (), declared, np.dtype(bool), names, None)
    field_shape = () if role == "reward" and declared == (1,) else declared
    return Feature(name, "array", role, key, field_shape, declared, np.dtype(dtype), names,
                   info if isinstance(info, dict) else None)  # fmt: skip
