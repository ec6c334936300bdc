"""LeRobot v2.0 / v2.1 folders: ``meta/*.jsonl`` and one file per episode (formats.md §8.1).

A v2 dataset holds the same frames as a v3 one, laid out per episode: the parquet file
``data_path.format(episode_chunk=e // chunks_size, episode_index=e)`` holds episode
``e`` alone, and each video feature has its own mp4 per episode, starting at time 0.
``meta/episodes.jsonl`` has one ``{"episode_index", "tasks", "length"}`` line per
episode and ``meta/tasks.jsonl`` one ``{"task_index", "task"}`` line per task. So an
episode maps onto the v3 reader's :class:`~episodata_lerobot._tables.EpisodeEntry`:
its own file, its rows from 0 of it, its videos' whole span. v2.1 adds
``meta/episodes_stats.jsonl`` and v2.0 has ``meta/stats.json``; the import needs neither.
"""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any

from episodata_core.errors import FormatError

if TYPE_CHECKING:
    from pathlib import Path

    from episodata_lerobot._source import LeRobotSource

__all__ = ["EPISODES_JSONL", "TASKS_JSONL", "read_jsonl_episodes", "read_jsonl_tasks",
           "v2_locations"]  # fmt: skip

EPISODES_JSONL = "meta/episodes.jsonl"
TASKS_JSONL = "meta/tasks.jsonl"


def _lines(source: LeRobotSource, relative: str) -> list[tuple[int, dict[str, Any]]]:
    """``(line number, object)`` of every non-blank line of a JSON-lines file."""
    path = source.root / relative
    if not path.is_file():
        raise FormatError(
            f"{source.where}: {relative} does not exist; a LeRobot "
            f"{source.info.get('codebase_version')} dataset has meta/info.json, "
            f"{EPISODES_JSONL} and {TASKS_JSONL} (the folder is incomplete)"
        )
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise FormatError(f"{source.where}: {relative} is not UTF-8 text ({err})") from err
    out: list[tuple[int, dict[str, Any]]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as err:
            raise FormatError(
                f"{source.where}: {relative} line {number} is not valid JSON ({err})"
            ) from err
        if not isinstance(value, dict):
            raise FormatError(
                f"{source.where}: {relative} line {number} holds a {type(value).__name__}, "
                "not an object"
            )
        out.append((number, value))
    return out


def _integer(source: LeRobotSource, relative: str, number: int, row: dict[str, Any],
             key: str) -> int:  # fmt: skip
    value = row.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise FormatError(
            f"{source.where}: {relative} line {number}: {key!r} is {value!r}; expected a "
            "non-negative integer"
        )
    return value


def read_jsonl_tasks(source: LeRobotSource) -> list[str]:
    """Task strings by ``task_index``, from ``meta/tasks.jsonl``."""
    rows = _lines(source, TASKS_JSONL)
    by_index: dict[int, str] = {}
    for number, row in rows:
        index = _integer(source, TASKS_JSONL, number, row, "task_index")
        task = row.get("task")
        if not isinstance(task, str):
            raise FormatError(
                f"{source.where}: {TASKS_JSONL} line {number}: 'task' is {task!r}; expected a string"
            )
        by_index[index] = task
    if sorted(by_index) != list(range(len(rows))):
        raise FormatError(
            f"{source.where}: {TASKS_JSONL} task_index is not 0..{len(rows) - 1} "
            f"(found {sorted(by_index)[:10]})"
        )
    return [by_index[i] for i in range(len(rows))]


def read_jsonl_episodes(source: LeRobotSource) -> list[dict[str, Any]]:
    """The lines of ``meta/episodes.jsonl``, checked, by ``episode_index``.

    Each row has ``episode_index`` and ``length`` (ints) and ``tasks`` (a list of strings).
    """
    rows: list[dict[str, Any]] = []
    for number, row in _lines(source, EPISODES_JSONL):
        index = _integer(source, EPISODES_JSONL, number, row, "episode_index")
        length = _integer(source, EPISODES_JSONL, number, row, "length")
        tasks = row.get("tasks")
        if not isinstance(tasks, list) or not all(isinstance(t, str) for t in tasks):
            raise FormatError(
                f"{source.where}: {EPISODES_JSONL} line {number}: 'tasks' is {tasks!r}; "
                "expected a list of task strings"
            )
        rows.append({"episode_index": index, "length": length, "tasks": tasks})
    rows.sort(key=lambda row: int(row["episode_index"]))
    indexes = [int(row["episode_index"]) for row in rows]
    if indexes != list(range(len(indexes))):
        raise FormatError(
            f"{source.where}: {EPISODES_JSONL} episode_index is not 0..{len(indexes) - 1} "
            "(an episode is missing or repeated)"
        )
    return rows


def chunk_of(source: LeRobotSource, episode: int) -> int:
    """The ``episode_chunk`` of an episode: ``episode // chunks_size``."""
    size = source.info.get("chunks_size")
    if isinstance(size, bool) or not isinstance(size, int) or size <= 0:
        raise FormatError(
            f"{source.where}: meta/info.json chunks_size is {size!r}; a LeRobot v2 info.json "
            "gives the number of episodes per chunk folder (a positive integer)"
        )
    return episode // size


def v2_locations(
    source: LeRobotSource, episode: int
) -> tuple[Path, dict[str, tuple[Path, float, float]]]:
    """``(parquet, {video feature: (mp4, 0, inf)})`` of one episode of a v2 folder.

    A v2 mp4 holds one episode from time 0: all of its frames belong to the episode, so
    the span is open-ended and a video with frames to spare is caught by the frame count.
    """
    chunk = chunk_of(source, episode)
    data = source.path_of("data_path", episode_chunk=chunk, episode_index=episode)
    videos: dict[str, tuple[Path, float, float]] = {}
    for feature in source.fields:
        if feature.kind != "video":
            continue
        path = source.path_of(
            "video_path", episode_chunk=chunk, video_key=feature.name, episode_index=episode
        )
        if not path.is_file():
            raise FormatError(
                f"{source.where}: episode {episode}: video file "
                f"{str(path.relative_to(source.root))!r} of feature {feature.name!r} is missing; "
                "the dataset folder is incomplete (copy or download videos/ again)"
            )
        videos[feature.name] = (path, 0.0, math.inf)
    return data, videos
