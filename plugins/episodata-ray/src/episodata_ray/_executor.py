"""The Ray side of :class:`~episodata_ray.RayExecutor`: tasks, retries, the ordered commit.

One Ray task per source file imports that file into a shard (:mod:`._shards`); the
coordinator (this process) waits for the tasks as they finish, showing progress, then
appends the shards to the destination in file order through
:class:`~episodata_core.pipeline.ImportTarget`. The destination is marked incomplete
from its creation to the last shard's commit.
"""

from __future__ import annotations

import sys
import time
import warnings
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import ray

from episodata_core.dataset import Dataset
from episodata_core.errors import EpisodataError, EpisodataImportWarning
from episodata_core.pipeline import ImportTarget
from episodata_ray._shards import (
    ShardResult,
    ShardTask,
    import_shard,
    remove_staging,
    shard_key,
    staging_for,
)

if TYPE_CHECKING:
    from episodata_core.pipeline import ImportRequest
    from episodata_core.transfer import ImportReport

__all__ = ["RunStats", "connect", "import_files"]

# a task whose worker process dies (killed, out of memory, node lost) runs again; an
# exception raised by the importer is the file's fault and is not retried
_MAX_RETRIES = 3


@dataclass
class RunStats:
    """What one distributed import did, for the progress line and the manifest."""

    tasks: int = 0
    tasks_done: int = 0
    shards_reused: int = 0
    episodes: int = 0
    source_bytes: int = 0
    task_seconds: float = 0.0
    wall_seconds: float = 0.0
    commit_seconds: float = 0.0
    cluster: dict[str, Any] = field(default_factory=dict)

    def line(self) -> str:
        """``tasks 3/16, 120 episodes, 45.2 MB/s``: what the progress bar shows."""
        rate = self.source_bytes / 1e6 / self.wall_seconds if self.wall_seconds else 0.0
        return f"tasks {self.tasks_done}/{self.tasks}, {self.episodes} episodes, {rate:.1f} MB/s"


def connect(address: str | None, num_cpus: int | None) -> dict[str, Any]:
    """Join (or start) Ray; returns the cluster's size: nodes and CPUs.

    An already initialized Ray (a test's, a notebook's) is used as it is.
    """
    if not ray.is_initialized():
        try:
            ray.init(
                address=address,
                num_cpus=num_cpus if address is None else None,
                include_dashboard=False,
                log_to_driver=False,
            )
        except ConnectionError as err:
            raise EpisodataError(
                f"executor.options.address: cannot reach a Ray cluster at {address!r}: {err}. "
                "Start one (`ray start --head`), pass its address ('ray://HOST:10001'), or "
                "leave the address out to start a local Ray"
            ) from err
    resources = ray.cluster_resources()  # type: ignore[no-untyped-call]
    nodes = [n for n in ray.nodes() if n.get("Alive")]  # type: ignore[no-untyped-call]
    return {"nodes": len(nodes), "cpus": int(resources.get("CPU", 0))}


_remote_import = ray.remote(max_retries=_MAX_RETRIES, retry_exceptions=False)(import_shard)


def import_files(
    request: ImportRequest, *, progress: bool, stats: RunStats
) -> tuple[Dataset, ImportReport]:
    """One task per file into shards, then the shards committed in file order."""
    started = time.perf_counter()
    files = request.files
    importer_cls = request.importer_class()
    # the first file's schema creates the destination; each shard is checked against it
    schema = request.read_schema(files[0])
    staging = staging_for(request.destination)
    tasks = [
        ShardTask(
            number,
            request.importer,
            importer_cls,
            file,
            dict(request.options),
            f"{staging}/{shard_key(request.importer, file, dict(request.options))}",
        )
        for number, file in enumerate(files)
    ]
    stats.tasks = len(tasks)
    try:
        dataset, report = _run(request, schema, tasks, progress, stats, started)
    except Exception:
        # a bad file or a failed commit: nothing is kept (an interrupt keeps the shards,
        # so that a rerun resumes from them)
        remove_staging(staging)
        raise
    remove_staging(staging)
    return dataset, report


def _run(
    request: ImportRequest,
    schema: Any,
    tasks: list[ShardTask],
    progress: bool,
    stats: RunStats,
    started: float,
) -> tuple[Dataset, ImportReport]:
    with ImportTarget(request, schema) as target:
        pending = {_remote_import.remote(task): task for task in tasks}
        results: dict[int, ShardResult] = {}
        bar = _Progress(stats, enabled=progress)
        try:
            while pending:
                # a bounded wait returns to Python now and then, so Ctrl-C gets through
                done, _ = ray.wait(list(pending), num_returns=1, timeout=0.5)
                for ref in done:
                    task = pending.pop(ref)
                    result = _result(ref, task)
                    results[task.number] = result
                    stats.tasks_done += 1
                    stats.shards_reused += result.reused
                    stats.source_bytes += result.source_bytes
                    stats.task_seconds += result.seconds
                    stats.episodes += max(result.episodes, 0)
                    stats.wall_seconds = time.perf_counter() - started
                    bar.update()
        except BaseException:
            for ref in pending:
                ray.cancel(ref, force=True)
            raise
        finally:
            bar.close()
        commit_started = time.perf_counter()
        for task in tasks:
            shard = Dataset.open(results[task.number].folder, read_only=True)
            try:
                report = target.append_shard(shard, task.file, results[task.number].report)
            finally:
                shard.close()
            # the importer warned in a worker, where nobody sees it: warn again here
            for warning in report.warnings:
                warnings.warn(
                    f"{task.file!r}: {warning.message} [{warning.code}]",
                    EpisodataImportWarning,
                    stacklevel=5,
                )
        dataset, merged = target.finish()
    stats.episodes = dataset.num_episodes
    stats.commit_seconds = time.perf_counter() - commit_started
    stats.wall_seconds = time.perf_counter() - started
    return dataset, merged


def _result(ref: Any, task: ShardTask) -> ShardResult:
    """The task's result; its importer's own error, not Ray's wrapper, on failure."""
    try:
        result: ShardResult = ray.get(ref)
    except ray.exceptions.RayTaskError as err:
        cause = err.cause if isinstance(err.cause, BaseException) else err
        cause.add_note(f"in the Ray task that imported {task.file!r}")
        raise cause from None
    except ray.exceptions.WorkerCrashedError as err:
        raise EpisodataError(
            f"the Ray task that imported {task.file!r} died {_MAX_RETRIES + 1} times "
            f"(its worker process crashed each time): {err}. The destination is left "
            "marked incomplete; run the pipeline again to resume from the shards made so far"
        ) from err
    return result


class _Progress:
    """A tqdm bar of tasks, with episodes and MB/s beside it (stderr; off when disabled)."""

    def __init__(self, stats: RunStats, *, enabled: bool) -> None:
        self.stats = stats
        self.bar: Any = None
        if enabled:
            try:
                from tqdm.auto import tqdm
            except ImportError:
                return
            self.bar = tqdm(total=stats.tasks, unit="task", desc="importing", file=sys.stderr)

    def update(self) -> None:
        if self.bar is not None:
            self.bar.n = self.stats.tasks_done
            self.bar.set_postfix_str(self.stats.line().split(", ", 1)[1])

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
