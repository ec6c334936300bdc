"""The Ray Data entry points; each imports Ray (through :mod:`._data`) when called."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterable

    from episodata_core.dataset import Dataset
    from episodata_core.schema import DatasetSchema

__all__ = ["read_episodes", "read_windows", "write_episodes"]


def read_episodes(
    location: str, *, fields: Iterable[str] | None = None, override_num_blocks: int | None = None
) -> Any:
    """A Ray Dataset with one row per finalized episode of the dataset at ``location``.

    Columns: ``episode_id`` int64, ``length`` int64 (T), ``terminated`` and
    ``truncated`` bool, and one per field by qualified key (``observation/state``):
    observations and infos hold all ``[T + 1, ...]`` rows (the reset row first), actions
    and rewards their ``[T, ...]`` steps. ``fields`` picks fields by qualified key.
    Read tasks split the episodes into contiguous ranges (``override_num_blocks`` of
    them, by default one per CPU, at most one per episode).

    Examples
    --------
    >>> episodes = read_episodes("hopper.zarr", fields=["observation/state"])  # doctest: +SKIP
    """
    from episodata_ray import require_ray

    require_ray()
    from episodata_ray import _data

    return _data.read_episodes(location, fields=fields, override_num_blocks=override_num_blocks)


def read_windows(
    location: str,
    *,
    sequence_length: int,
    fields: Iterable[str] | None = None,
    stride: int = 1,
    override_num_blocks: int | None = None,
) -> Any:
    """A Ray Dataset of windows of ``sequence_length`` transitions (L) that stay in one episode.

    One row per window, in episode order then start order (windows start every
    ``stride`` transitions). Columns: ``episode_id``, ``start`` int64, ``terminated`` and
    ``truncated`` ``[L]`` bool (True only at the episode's final transition), and per
    field by qualified key: an observation or info field gives ``KEY`` ``[L, ...]`` (obs)
    and ``next/KEY`` ``[L, ...]`` (next_obs, the same rows shifted by one); an action or
    reward field gives ``KEY`` ``[L, ...]``.

    Examples
    --------
    >>> windows = read_windows("hopper.zarr", sequence_length=8)  # doctest: +SKIP
    >>> windows.map_batches(lambda b: b).take(1)  # doctest: +SKIP
    """
    from episodata_ray import require_ray

    require_ray()
    from episodata_ray import _data

    return _data.read_windows(
        location,
        sequence_length=sequence_length,
        fields=fields,
        stride=stride,
        override_num_blocks=override_num_blocks,
    )


def write_episodes(
    ray_dataset: Any,
    location: str,
    *,
    schema: DatasetSchema,
    backend: str | None = None,
) -> Dataset:
    """Write a Ray Dataset of episodes (rows as :func:`read_episodes` makes) as a new dataset.

    Each write task stores its rows as a shard; once all are written the shards are
    committed in block order into ``location``, which is marked incomplete until then:
    a failed or interrupted write never leaves a dataset that looks complete. Rows need
    ``terminated``, ``truncated`` and every required field of ``schema``; ``episode_id``
    and ``length`` are ignored (ids are given in row order). Returns the dataset, open.

    Examples
    --------
    >>> episodes = read_episodes("hopper.zarr")  # doctest: +SKIP
    >>> write_episodes(episodes, "copy.zarr", schema=Dataset.open("hopper.zarr").schema)  # doctest: +SKIP
    """
    from episodata_ray import require_ray

    require_ray()
    from episodata_ray import _data

    return _data.write_episodes(ray_dataset, location, schema=schema, backend=backend)
