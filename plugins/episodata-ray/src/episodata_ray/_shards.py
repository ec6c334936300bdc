"""Shards: one file's episodes, imported by a worker task into an immutable dataset of its own.

A shard is an ``npz_directory`` dataset under the staging area, at a name derived from
its input (importer, file, options, the file's size and modification time), published
by renaming a finished temporary folder. A task that dies leaves only a temporary
folder, which its retry ignores; a task that finds its shard already published (a retry
after the rename, or a resumed pipeline) reuses it. So however often a task runs, its
file's episodes exist once.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from episodata_core import registry
from episodata_core.errors import PluginNotFoundError
from episodata_core.transfer import import_dataset

__all__ = ["ShardResult", "ShardTask", "import_shard", "shard_key", "staging_for"]

SHARD_BACKEND = "npz_directory"
_TEMPORARY = ".tmp-"


@dataclass(frozen=True)
class ShardTask:
    """One unit of distributed import work: ``file`` imported on its own into ``folder``.

    ``importer_cls`` travels with the task so that an importer registered at runtime in
    the coordinator (an allowed import path) is found in a worker too.
    """

    number: int
    importer: str
    importer_cls: Any
    file: str
    options: dict[str, Any]
    folder: str


@dataclass(frozen=True)
class ShardResult:
    """What a task reports back: where its shard is and what it cost."""

    number: int
    folder: str
    episodes: int
    source_bytes: int
    seconds: float
    reused: bool
    report: Any = None
    """The importer's report (None for a reused shard: its record holds a copy)."""


def staging_for(destination: str | None) -> str:
    """The staging area of a destination: a sibling folder, removed after the commit."""
    if destination is None:
        import tempfile

        return tempfile.mkdtemp(prefix="episodata-ray-staging-")
    return destination.rstrip("/") + ".episodata-staging"


def shard_key(importer: str, file: str, options: dict[str, Any]) -> str:
    """A name that changes whenever the shard's content could: the input and its version."""
    identity: dict[str, Any] = {"importer": importer, "file": file, "options": options}
    with contextlib.suppress(OSError):
        stat = os.stat(file)
        identity["size"], identity["mtime_ns"] = stat.st_size, stat.st_mtime_ns
    canonical = json.dumps(identity, sort_keys=True, default=str)
    stem = Path(file).name.replace(os.sep, "_")[:40]
    return f"{stem}-{hashlib.sha256(canonical.encode()).hexdigest()[:16]}"


def _ensure_importer(name: str, cls: Any) -> None:
    """Make ``name`` resolve to ``cls`` in this (worker) process."""
    try:
        found = registry.get_importer(name)
    except PluginNotFoundError:
        found = None
    if found is not cls:
        registry.register_importer(cls, name=name, replace=True)


def import_shard(task: ShardTask) -> ShardResult:
    """Import ``task.file`` into its shard, unless the shard is already published."""
    started = time.perf_counter()
    folder = Path(task.folder)
    size = _size(task.file)
    if (folder / "manifest.json").is_file():
        return ShardResult(task.number, task.folder, -1, size, 0.0, reused=True)
    _ensure_importer(task.importer, task.importer_cls)
    temporary = folder.with_name(f"{folder.name}{_TEMPORARY}{uuid.uuid4().hex[:8]}")
    try:
        dataset, report = import_dataset(
            task.importer, task.file, str(temporary), backend=SHARD_BACKEND, **task.options
        )
        episodes = dataset.num_episodes
        dataset.close()
        try:
            os.rename(temporary, folder)
        except OSError:
            # another attempt of this task published first: its shard is the same
            if not (folder / "manifest.json").is_file():
                raise
            shutil.rmtree(temporary, ignore_errors=True)
    except BaseException:
        shutil.rmtree(temporary, ignore_errors=True)
        raise
    return ShardResult(
        task.number,
        task.folder,
        episodes,
        size,
        time.perf_counter() - started,
        reused=False,
        report=report,
    )


def _size(file: str) -> int:
    try:
        return os.path.getsize(file)
    except OSError:
        return 0


def remove_staging(staging: str) -> None:
    """Remove the staging area once its shards are committed."""
    shutil.rmtree(staging, ignore_errors=True)
