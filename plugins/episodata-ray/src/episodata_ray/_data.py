"""Ray Data: a datasource of episodes or windows, and a datasink of episodes.

Rows are built from whole stored episodes (one backend read per episode, windows cut
from it by index arithmetic), so a window's ``KEY`` (obs) and ``next/KEY`` (next_obs)
come from the same rows shifted by one, as everywhere in episodata. The datasink writes
each task's rows as a shard under the staging area; the driver then commits the shards
in task order into a new dataset that is marked incomplete until the last one is in.
"""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import ray
import ray.data
from ray.data.block import BlockAccessor, BlockMetadata
from ray.data.datasource import Datasink, Datasource, ReadTask

from episodata_core.bulk import append_dataset, append_rows, start_bulk_write
from episodata_core.dataset import Dataset
from episodata_core.errors import FieldNotFoundError, SchemaError
from episodata_core.protocols import EpisodeRows
from episodata_ray._shards import SHARD_BACKEND, remove_staging, staging_for

if TYPE_CHECKING:
    from collections.abc import Iterable

    import numpy.typing as npt

    from episodata_core.schema import DatasetSchema

__all__ = ["read_episodes", "read_windows", "write_episodes"]

_STEP_ROLES = ("action", "reward")  # stored from row 1 on: row 0 is a hidden zero
NEXT = "next/"


class _EpisodeSource(Datasource):
    """Finalized episodes of one dataset, split into contiguous ranges per read task."""

    def __init__(
        self,
        location: str,
        fields: Iterable[str] | None,
        sequence_length: int | None,
        stride: int,
    ) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        if sequence_length is not None and sequence_length < 1:
            raise ValueError(f"sequence_length must be at least 1, got {sequence_length}")
        if stride < 1:
            raise ValueError(f"stride must be at least 1, got {stride}")
        dataset = Dataset.open(location, read_only=True)
        try:
            schema = dataset.schema
            table = dataset.backend.episode_table()
        finally:
            dataset.close()
        keys = schema.qualified_keys
        chosen = list(keys) if fields is None else list(fields)
        unknown = [key for key in chosen if key not in keys]
        if unknown:
            raise FieldNotFoundError(
                f"{location!r}: no field {unknown[0]!r}; the fields are {list(keys)}"
            )
        for key in chosen:
            absent = ~table.present[key] if key in table.present else np.zeros(0, dtype=bool)
            missing = np.flatnonzero(absent)
            if len(missing):
                raise FieldNotFoundError(
                    f"{location!r}: field {key!r} is optional and absent from episode "
                    f"{int(missing[0])}; leave it out of fields="
                )
        self.location = location
        self.roles = {spec.qualified_key: spec.role for spec in schema}
        self.fields = chosen
        self.sequence_length = sequence_length
        self.stride = stride
        done = ~table.ongoing
        if sequence_length is not None:
            done &= table.length >= sequence_length
        self.episodes = np.flatnonzero(done)
        self.table = table
        specs = {spec.qualified_key: spec for spec in schema}
        self.row_bytes = sum(
            int(np.prod(specs[k].shape, dtype=np.int64)) * np.dtype(specs[k].dtype).itemsize
            for k in chosen
        )

    def estimate_inmemory_data_size(self) -> int | None:
        rows = int((self.table.length[self.episodes] + 1).sum())
        factor = 2 if self.sequence_length is not None else 1  # obs and next_obs
        return rows * self.row_bytes * factor

    def get_read_tasks(
        self, parallelism: int, per_task_row_limit: int | None = None, data_context: Any = None
    ) -> list[ReadTask]:
        parts = [p for p in np.array_split(self.episodes, max(1, parallelism)) if len(p)]
        tasks = []
        for part in parts:
            count = self._count(part)
            size = int((self.table.length[part] + 1).sum()) * self.row_bytes
            metadata = BlockMetadata(num_rows=count, size_bytes=size, exec_stats=None)
            tasks.append(
                ReadTask(_reader(self, part), metadata, per_task_row_limit=per_task_row_limit)
            )
        return tasks

    def _count(self, episodes: npt.NDArray[np.int64]) -> int:
        if self.sequence_length is None:
            return len(episodes)
        spans = self.table.length[episodes] - self.sequence_length
        return int((spans // self.stride + 1).sum())

    def read_block(self, episodes: npt.NDArray[np.int64]) -> Any:
        """One block: the rows of ``episodes`` (a contiguous range of ids)."""
        dataset = Dataset.open(self.location, read_only=True)
        try:
            if self.sequence_length is None:
                batch = self._episode_rows(dataset, episodes)
            else:
                batch = self._window_rows(dataset, episodes, self.sequence_length)
        finally:
            dataset.close()
        return BlockAccessor.batch_to_block(batch)

    def _read(self, dataset: Dataset, index: int) -> dict[str, Any]:
        stop = int(self.table.length[index]) + 1
        return dict(dataset.backend.read_rows(index, 0, stop, self.fields))

    def _episode_rows(self, dataset: Dataset, episodes: npt.NDArray[np.int64]) -> dict[str, Any]:
        table = self.table
        columns: dict[str, list[Any]] = {key: [] for key in self.fields}
        for index in episodes.tolist():
            rows = self._read(dataset, index)
            for key in self.fields:
                value = rows[key]
                columns[key].append(value[1:] if self.roles[key] in _STEP_ROLES else value)
        batch: dict[str, Any] = {
            "episode_id": episodes.astype(np.int64),
            "length": table.length[episodes].astype(np.int64),
            "terminated": table.terminated[episodes].astype(bool),
            "truncated": table.truncated[episodes].astype(bool),
        }
        for key, values in columns.items():
            batch[key] = _column(values)
        return batch

    def _window_rows(
        self, dataset: Dataset, episodes: npt.NDArray[np.int64], length: int
    ) -> dict[str, Any]:
        table = self.table
        parts: dict[str, list[Any]] = {}
        offsets = np.arange(length)
        for index in episodes.tolist():
            transitions = int(table.length[index])
            starts = np.arange(0, transitions - length + 1, self.stride, dtype=np.int64)
            rows = self._read(dataset, index)
            # row t + 1 holds the action of transition t and next_obs t: one index array
            # [W, L] cuts every window of the episode from the one read
            here = starts[:, None] + offsets[None, :]
            last = here == transitions - 1
            columns: dict[str, Any] = {
                "episode_id": np.full(len(starts), index, dtype=np.int64),
                "start": starts,
                "terminated": last & bool(table.terminated[index]),
                "truncated": last & bool(table.truncated[index]),
            }
            for key in self.fields:
                if self.roles[key] in _STEP_ROLES:
                    columns[key] = rows[key][here + 1]
                else:
                    columns[key] = rows[key][here]
                    columns[NEXT + key] = rows[key][here + 1]
            for key, value in columns.items():
                parts.setdefault(key, []).append(value)
        return {key: np.concatenate(values) for key, values in parts.items()}


def _reader(source: _EpisodeSource, episodes: npt.NDArray[np.int64]) -> Any:
    def read() -> list[Any]:
        return [source.read_block(episodes)]

    return read


def _column(values: list[Any]) -> Any:
    """Per-episode arrays as one column: stacked when they share a shape, else ragged."""
    if len({value.shape for value in values}) == 1:
        return np.stack(values)
    column = np.empty(len(values), dtype=object)
    column[:] = values
    return column


def read_episodes(
    location: str, *, fields: Iterable[str] | None, override_num_blocks: int | None
) -> Any:
    """See :func:`episodata_ray.read_episodes`."""
    source = _EpisodeSource(os.fspath(location), fields, None, 1)
    return ray.data.read_datasource(source, override_num_blocks=override_num_blocks)


def read_windows(
    location: str,
    *,
    sequence_length: int,
    fields: Iterable[str] | None,
    stride: int,
    override_num_blocks: int | None,
) -> Any:
    """See :func:`episodata_ray.read_windows`."""
    source = _EpisodeSource(os.fspath(location), fields, sequence_length, stride)
    return ray.data.read_datasource(source, override_num_blocks=override_num_blocks)


class _EpisodeSink(Datasink[tuple[int, str]]):
    """Each write task writes a shard; the driver commits them in task order."""

    def __init__(self, location: str, schema: DatasetSchema, backend: str | None) -> None:
        self.location = location
        self.schema = schema
        self.backend = backend
        self.staging = staging_for(location)
        self.result: Dataset | None = None

    def on_write_start(self, schema: Any = None) -> None:
        Path(self.staging).mkdir(parents=True, exist_ok=True)

    def write(self, blocks: Iterable[Any], ctx: Any) -> tuple[int, str]:
        number = int(ctx.task_idx)
        folder = Path(self.staging) / f"part-{number:06d}"
        temporary = folder.with_name(f"{folder.name}.tmp-{uuid.uuid4().hex[:8]}")
        shard = Dataset.create(self.schema, str(temporary), backend=SHARD_BACKEND)
        try:
            for block in blocks:
                batch = BlockAccessor.for_block(block).to_numpy()
                assert isinstance(batch, dict), "a block of rows converts to named columns"
                episodes = _episode_rows(batch, self.schema, number)
                append_rows(shard, episodes)
            shard.flush()
            shard.close()
            if folder.exists():  # an earlier attempt of this task: replaced by this one
                shutil.rmtree(folder)
            os.rename(temporary, folder)
        except BaseException:
            shard.close()
            shutil.rmtree(temporary, ignore_errors=True)
            raise
        return number, str(folder)

    def on_write_complete(self, write_result: Any) -> None:
        shards = sorted(write_result.write_returns)
        bulk = start_bulk_write(
            self.schema,
            self.location,
            backend=self.backend,
            operation="write_episodes",
            source="a Ray Dataset",
        )
        dataset = bulk.dataset
        try:
            for _, folder in shards:
                shard = Dataset.open(folder, read_only=True)
                try:
                    append_dataset(shard, dataset)
                finally:
                    shard.close()
                bulk.progress(now=True)
            bulk.finish()
        except BaseException as err:
            bulk.fail(err)
            raise
        remove_staging(self.staging)
        self.result = dataset

    def on_write_failed(self, error: Exception) -> None:
        remove_staging(self.staging)


def _episode_rows(batch: dict[str, Any], schema: DatasetSchema, task: int) -> list[EpisodeRows]:
    """The rows of a batch as stored episodes, checked against ``schema`` first."""
    missing = [k for k in ("terminated", "truncated", *schema.qualified_keys) if k not in batch]
    specs = {spec.qualified_key: spec for spec in schema}
    optional = {k for k, spec in specs.items() if spec.optional}
    missing = [k for k in missing if k not in optional]
    if missing:
        raise SchemaError(
            f"write_episodes: the rows lack column {missing[0]!r} (write task {task}); "
            f"they need 'terminated', 'truncated' and every field: {list(specs)}"
        )
    count = len(batch["terminated"])
    episodes = []
    for row in range(count):
        rows: dict[str, Any] = {}
        length: int | None = None
        for key, spec in specs.items():
            if key not in batch:
                continue
            value = np.asarray(batch[key][row])
            step = spec.role in _STEP_ROLES
            where = f"write_episodes: row {row} of write task {task}, field {key!r}"
            if value.dtype != np.dtype(spec.dtype) or value.shape[1:] != tuple(spec.shape):
                raise SchemaError(
                    f"{where}: expected {spec.dtype}{['T', *spec.shape]}, got "
                    f"{value.dtype}{list(value.shape)}; cast it in the map before writing"
                )
            steps = len(value) if step else len(value) - 1
            if length is None:
                length = steps
            elif steps != length:
                raise SchemaError(
                    f"{where}: {steps} steps where the other fields have {length} "
                    "(observations and infos have T + 1 rows, actions and rewards T)"
                )
            if step:
                # the hidden row 0 of an action or reward is zero (data-model.md §2)
                value = np.concatenate([np.zeros((1, *value.shape[1:]), value.dtype), value])
            rows[key] = value
        episodes.append(
            EpisodeRows(
                rows,
                terminated=bool(batch["terminated"][row]),
                truncated=bool(batch["truncated"][row]),
            )
        )
    return episodes


def write_episodes(
    ray_dataset: Any, location: str, *, schema: DatasetSchema, backend: str | None
) -> Dataset:
    """See :func:`episodata_ray.write_episodes`."""
    context = ray.data.DataContext.get_current()
    kept = context.execution_options.preserve_order
    # the shards are committed in task order, which is the rows' order only when kept
    context.execution_options.preserve_order = True
    sink = _EpisodeSink(os.fspath(location), schema, backend)
    try:
        ray_dataset.write_datasink(sink)
    finally:
        context.execution_options.preserve_order = kept
    assert sink.result is not None
    return sink.result
