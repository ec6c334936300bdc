"""What a LeRobot export writes: features from the schema, and per-episode provenance (§8.3).

Checked before the first file is written: the datasets share one schema, every field
maps to a feature LeRobot can hold, and fps and the tasks are known.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from episodata_core.errors import FormatError
from episodata_lerobot._import import TASK_KEY, VALID_KEY
from episodata_lerobot._source import BOOKKEEPING

if TYPE_CHECKING:
    from collections.abc import Mapping

    from episodata_core.dataset import Dataset
    from episodata_core.schema import FieldSpec
    from episodata_lerobot._options import LeRobotExportOptions

__all__ = ["Column", "Plan", "plan_export"]


@dataclass(frozen=True)
class Column:
    """One exported feature: the field it comes from and how it is stored."""

    name: str
    spec: FieldSpec
    kind: str
    """``array``, ``image`` (PNG in the parquet) or ``video`` (mp4)."""
    declared: tuple[int, ...]
    names: Any
    chw: bool = False
    """The field is laid out [C, H, W]; frames are transposed to [H, W, C]."""


@dataclass
class Plan:
    """Everything an export needs, resolved and checked."""

    columns: list[Column]
    episodes: list[tuple[str, Dataset, int]]
    """``(label, dataset, episode position)`` in export order."""
    tasks: list[list[str]]
    """Per exported episode, the task of each frame (one entry when constant)."""
    fps: int
    robot_type: str | None
    source_tasks: list[str]


def _lerobot_meta(spec: FieldSpec) -> dict[str, Any]:
    meta = spec.metadata.get("lerobot")
    return meta if isinstance(meta, dict) else {}


def _feature_name(spec: FieldSpec, image: bool) -> str:
    given = _lerobot_meta(spec).get("feature")
    if isinstance(given, str):
        return given
    dotted = spec.key.replace("/", ".")
    if spec.role == "observation":
        if spec.key == "observation":
            return "observation.image" if image else "observation.state"
        return f"observation.{dotted}"
    if spec.role == "action":
        return "action" if spec.key == "action" else f"action.{dotted}"
    if spec.role == "reward":
        return "next.reward" if spec.key == "reward" else f"next.{dotted}"
    return dotted


def _image_layout(spec: FieldSpec) -> tuple[bool, bool]:
    """``(is_image, is_chw)`` of a field."""
    if spec.np_dtype != np.uint8 or len(spec.shape) != 3:
        return False, False
    if spec.layout == "CHW" or (
        spec.layout is None and spec.shape[0] in (1, 3, 4) and spec.shape[2] not in (1, 3, 4)
    ):
        return spec.shape[0] in (1, 3, 4), True
    return spec.layout in (None, "HWC") and spec.shape[2] in (1, 3, 4), False


def _column(spec: FieldSpec, options: LeRobotExportOptions, where: str) -> Column:
    image, chw = _image_layout(spec)
    name = _feature_name(spec, image)
    meta = _lerobot_meta(spec)
    if image:
        shape = (spec.shape[1], spec.shape[2], spec.shape[0]) if chw else spec.shape
        stored = meta.get("dtype")
        kind = (
            options.images
            if options.images != "auto"
            else ("video" if stored == "video" else "image")
        )
        kind = "image" if kind == "png" else kind
        names = meta.get("names", ["height", "width", "channels"])
        return Column(name, spec, kind, tuple(shape), names, chw)
    if spec.np_dtype.kind not in "biuf":
        raise FormatError(
            f"{where}: field {spec.qualified_key!r} has dtype {spec.dtype}; LeRobot features "
            "are numbers, bools or uint8 images. Leave it out of the export (filter the schema)"
        )
    if len(spec.shape) > 1:
        raise FormatError(
            f"{where}: field {spec.qualified_key!r} has shape {list(spec.shape)}; the lerobot "
            "exporter writes vectors ([n]) and uint8 [H, W, C] images"
        )
    declared = tuple(spec.shape) or (1,)
    return Column(name, spec, "array", declared, meta.get("names"))


def _imports(dataset: Dataset) -> list[dict[str, Any]]:
    records = dataset.manifest.metadata.get("imports", [])
    return [r for r in records if isinstance(r, dict) and r.get("format") == "lerobot"]


def provenance(dataset: Dataset, episode: int, column: str) -> Any:
    """The import record's provenance ``column`` for ``episode``, or ``None``."""
    for record in _imports(dataset):
        first, count = int(record.get("first_episode_id", -1)), int(record.get("episode_count", 0))
        if first <= episode < first + count:
            values = record.get("episodes", {}).get(column)
            if isinstance(values, list) and len(values) == count:
                return values[episode - first]
    return None


def plan_export(datasets: Mapping[str, Dataset], options: LeRobotExportOptions) -> Plan:
    """Resolve features, episodes and tasks; raise before anything is written."""
    if not datasets:
        raise FormatError(
            "lerobot export: no datasets to export; pass a dataset or {label: dataset}"
        )
    labels = list(datasets)
    first = datasets[labels[0]]
    for label in labels[1:]:
        if datasets[label].schema != first.schema:
            raise FormatError(
                f"lerobot export: dataset {label!r} has another schema than {labels[0]!r}; a "
                "LeRobot dataset has one set of features. Export them separately"
            )
    where = f"lerobot export of {labels[0]!r}"
    skipped = {f"info/{VALID_KEY}", f"info/{TASK_KEY}"}
    columns = [
        _column(spec, options, where) for spec in first.schema if spec.qualified_key not in skipped
    ]
    names = [c.name for c in columns]
    clash = sorted(
        {n for n in names if names.count(n) > 1} | (set(names) & {*BOOKKEEPING, "next.done"})
    )
    if clash:
        raise FormatError(
            f"{where}: fields map to the same or a reserved LeRobot feature name: {clash}"
        )
    if not any(c.spec.role == "observation" for c in columns):
        raise FormatError(f"{where}: the schema has no observation field")
    records = [r for label in labels for r in _imports(datasets[label])]
    source = records[0]["source"] if records else {}
    fps = options.fps or source.get("fps")
    if not isinstance(fps, int) or fps < 1:
        raise FormatError(
            f"{where}: the frame rate is unknown (no LeRobot import record); pass fps=, e.g. fps=30"
        )
    source_tasks = list(source.get("tasks") or [])
    episodes: list[tuple[str, Dataset, int]] = []
    tasks: list[list[str]] = []
    for label in labels:
        dataset = datasets[label]
        chosen = range(dataset.num_episodes) if options.episodes is None else options.episodes
        outside = [p for p in chosen if not 0 <= p < dataset.num_episodes]
        if outside:
            raise FormatError(
                f"{where}: episodes={options.episodes} names position(s) {outside}, but dataset "
                f"{label!r} holds episodes 0..{dataset.num_episodes - 1}"
            )
        for position in chosen:
            episode = dataset.episode(position)
            if episode.ongoing or len(episode) == 0:
                continue
            episodes.append((label, dataset, position))
            listed = provenance(dataset, position, "tasks")
            default = options.task or (listed[0] if listed else label)
            tasks.append([str(default)])
    if not episodes:
        raise FormatError(f"{where}: no finalized episode with at least one transition to export")
    robot_type = options.robot_type or source.get("robot_type")
    return Plan(columns, episodes, tasks, int(fps), robot_type, source_tasks)
