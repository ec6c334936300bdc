"""W9, Minari row: importing a MuJoCo-shaped Minari dataset folder into Zarr.

The source is written with h5py in the layout of minari's HDF5 storage (one
``episode_<id>`` group per episode, observations with T + 1 rows, actions, rewards and
flags with T, chunked and uncompressed as minari writes them, ``data/metadata.json``
with the spaces): hopper's shapes, 11 float64 observations and 3 float32 actions, in
episodes of 500 to 1,000 steps. The ceiling reads every dataset of every episode group
once with h5py and discards it. Rates are megabytes of the stored arrays per second.
"""

from __future__ import annotations

import json
import time
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np

from benchmarks.results import Figure, ratio_target
from benchmarks.workloads._import_rows import ceiling, rss_target, timed_import

if TYPE_CHECKING:
    from pathlib import Path

    from benchmarks.harness import Context
    from benchmarks.results import WorkloadResult

__all__ = ["minari_rows", "read_minari", "write_minari"]

_OBS, _ACT = 11, 3


def _box(shape: tuple[int, ...], dtype: str) -> str:
    return json.dumps({
        "type": "Box",
        "dtype": dtype,
        "shape": list(shape),
        "low": np.full(shape, -np.inf).tolist(),
        "high": np.full(shape, np.inf).tolist(),
    })  # fmt: skip


def write_minari(folder: Path, steps: int, seed: int) -> None:
    """A hopper-shaped Minari dataset folder of about ``steps`` steps."""
    import h5py

    rng = np.random.default_rng([seed, 21])
    data = folder / "data"
    data.mkdir(parents=True)
    lengths: list[int] = []
    while sum(lengths) < steps:
        lengths.append(int(rng.integers(500, 1001)))
    lengths[-1] -= sum(lengths) - steps
    lengths = [n for n in lengths if n > 0]
    with h5py.File(data / "main_data.hdf5", "w", track_order=True) as handle:
        for episode, t in enumerate(lengths):
            group = handle.create_group(f"episode_{episode}")
            group.attrs["id"] = episode
            group.attrs["seed"] = seed + episode
            group.attrs["total_steps"] = t
            ended = np.zeros(t, dtype=bool)
            ended[-1] = True
            columns = {
                "observations": rng.standard_normal((t + 1, _OBS)),
                "actions": rng.standard_normal((t, _ACT), dtype=np.float32),
                "rewards": rng.standard_normal(t),
                "terminations": ended if t < 1000 else np.zeros(t, dtype=bool),
                "truncations": ended if t == 1000 else np.zeros(t, dtype=bool),
            }
            for name, values in columns.items():
                group.create_dataset(
                    name, data=values, chunks=True, maxshape=(None, *values.shape[1:])
                )
    metadata = {
        "dataset_id": "bench/hopper-v0",
        "total_episodes": len(lengths),
        "total_steps": steps,
        "data_format": "hdf5",
        "minari_version": "0.5.1",
        "jpeg_encoding": False,
        "observation_space": _box((_OBS,), "float64"),
        "action_space": _box((_ACT,), "float32"),
    }
    (data / "metadata.json").write_text(json.dumps(metadata), encoding="utf-8")


def read_minari(folder: Path) -> tuple[int, float]:
    """Read every dataset of every episode group once with h5py; ``(bytes, seconds)``."""
    import h5py

    began = time.perf_counter()
    total = 0
    with h5py.File(folder / "data" / "main_data.hdf5", "r") as handle:
        for name in handle:
            group = handle[name]
            for key in group:
                total += np.asarray(group[key][()]).nbytes
    return total, time.perf_counter() - began


def _imported(source: Path, target: Path) -> Any:
    from episodata import import_dataset

    dataset, _ = import_dataset("minari", source, target)
    return dataset


def _check(dataset: Any, source: Path) -> None:
    """Episode 0 of the import holds the source's first episode."""
    import h5py

    with h5py.File(source / "data" / "main_data.hdf5", "r") as handle:
        want = handle["episode_0/observations"][()]
    got = np.asarray(dataset.episode(0).read().all_obs)
    if not np.array_equal(got, want):
        raise AssertionError("minari: episode 0 does not hold the source's rows")


def minari_rows(context: Context, result: WorkloadResult) -> None:
    """Append the Minari figures and targets to W9's result."""
    from episodata_core import registry

    try:
        registry.get_importer("minari")
    except LookupError:
        result.figures.append(
            Figure("minari", "episodata", "MB/s", status="skipped: not installed")
        )
        return
    source = context.run_dir / "minari-hopper"
    if not source.exists():
        write_minari(source, context.sizes.minari_steps, context.sizes.seed)
    raw, read_s = read_minari(source)
    read = ceiling("minari h5py read", source, raw, read_s)
    target = context.run_dir / "minari-hopper.zarr"
    mine = timed_import(
        context,
        "minari import",
        read,
        target,
        partial(_imported, source, target),
        partial(_check, source=source),
    )
    result.figures += [read, mine]
    result.targets.append(ratio_target(result, "minari import", "minari h5py read", 0.5))
    result.targets.append(rss_target("minari", mine, read))
