"""W8: ``segments()`` of W3's data through a torch ``DataLoader``, 0, 2 and 4 workers.

Each round starts a fresh loader iterator (so workers start again); the rate counts the
batches after the first over the time since the first arrived, and the first-batch
latency includes starting the workers. The data is read from the Zarr dataset, from an
npz directory and from memory; workers are forked (Linux's default; a forked Zarr
worker reads through episodata's helper process, since TensorStore aborts a fork child
of a process that used it) and spawned (not for memory: every spawned worker would be
sent the whole dataset). Worker RSS is the peak RSS of all child processes; it is
measured again on a Zarr dataset with a fraction of the episodes.

The ceiling is the DataLoader's own transport with the same workers, started the same
way: a dataset whose batches are fresh copies of one preset batch of the same shapes,
as torch tensors, so workers do no reading at all and each batch travels in a new
shared-memory segment, torch's way. episodata's batches travel in shared memory too
(see episodata_core.sampling.transport). A transport of NumPy arrays (pickled through a
pipe) is shown for 2 forked workers.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from benchmarks.ceilings import numpy_gather
from benchmarks.data import RowData
from benchmarks.harness import assert_rows_equal
from benchmarks.results import Figure, Role, Target, WorkloadResult, ratio_target
from benchmarks.workloads.disk import zarr_dataset
from benchmarks.workloads.memory import load_image

if TYPE_CHECKING:
    from pathlib import Path

    from benchmarks.harness import Context

__all__ = ["PresetBatches", "run_w8"]


class PresetBatches:
    """A map-style dataset whose every batch is a fresh copy of one preset batch."""

    def __init__(self, batch: dict[str, np.ndarray[Any, Any]], as_torch: bool, size: int) -> None:
        self.batch = batch
        self.as_torch = as_torch
        self.size = size

    def __len__(self) -> int:
        return self.size

    def __getitems__(self, indices: list[int]) -> dict[str, Any]:
        """A copy of the preset batch (as a reader must produce new arrays)."""
        del indices
        fresh = {key: value.copy() for key, value in self.batch.items()}
        if not self.as_torch:
            return fresh
        import torch

        return {key: torch.from_numpy(value) for key, value in fresh.items()}

    @staticmethod
    def collate(batch: dict[str, Any]) -> dict[str, Any]:
        """Pass the batch through."""
        return batch


WORKERS = (2, 4)
BACKENDS = ("zarr", "npz_directory", "memory")


def _transport(workers: int, start: str) -> str:
    """The ceiling of episodata's rows with ``workers`` started by ``start``."""
    return f"transport {workers} workers {start}, torch"


def _name(backend: str, workers: int, start: str | None) -> str:
    if not workers:
        return f"{backend} 0 workers"
    return f"{backend} {workers} workers {start}"


@dataclass(frozen=True)
class _Variant:
    name: str
    role: Role
    workers: int
    start: str | None
    source: str  # a backend, "numpy" or "torch"


def _starts(context: Context, backend: str | None) -> list[str]:
    spawn = context.sizes.loader_spawn and backend != "memory"
    return ["fork", "spawn"] if spawn else ["fork"]


def _variants(context: Context) -> list[_Variant]:
    variants = []
    for backend in BACKENDS:
        variants.append(_Variant(_name(backend, 0, None), "episodata", 0, None, backend))
        for start in _starts(context, backend):
            for workers in WORKERS:
                name = _name(backend, workers, start)
                variants.append(_Variant(name, "episodata", workers, start, backend))
    variants += [
        _Variant(_transport(workers, start), "ceiling", workers, start, "torch")
        for start in _starts(context, None)
        for workers in WORKERS
    ]
    variants.append(_Variant("transport 2 workers fork, numpy", "ceiling", 2, "fork", "numpy"))
    return variants


def _subset(data: RowData, episodes: int) -> RowData:
    stop = int(data.offsets[episodes - 1] + data.lengths[episodes - 1] + 1)
    rows = {key: array[:stop] for key, array in data.rows.items()}
    return RowData(rows, data.lengths[:episodes], data.offsets[:episodes], layout=data.layout)


def _loader(
    context: Context, variant: _Variant, sources: dict[str, Any], preset: dict[str, Any]
) -> Any:
    import torch
    from torch.utils.data import DataLoader

    from episodata import Dataset

    s = context.sizes
    dataset: Any
    if variant.source in BACKENDS:
        source = sources[variant.source]
        opened = source if isinstance(source, Dataset) else Dataset.open(source, read_only=True)
        dataset = opened.segments(sequence_length=s.image_length)
    else:
        # enough segments for a round (the sampler shuffles them: keep it small)
        size = s.image_batch * (s.loader_batches + 4)
        dataset = PresetBatches(preset, as_torch=variant.source == "torch", size=size)
    return DataLoader(
        dataset,
        batch_size=s.image_batch,
        shuffle=True,
        num_workers=variant.workers,
        collate_fn=dataset.collate,
        drop_last=True,
        multiprocessing_context=variant.start,
        generator=torch.Generator().manual_seed(s.seed),
    )


def _round(context: Context, loader: Any, figure: Figure) -> tuple[float, float, list[float]]:
    """One fresh iterator: ``(first-batch ms, batches/s, per-batch latencies in s)``."""
    with context.monitor.phase() as phase:
        began = time.perf_counter()
        iterator = iter(loader)
        next(iterator)
        first = last = time.perf_counter()
        latencies: list[float] = []
        for _ in range(context.sizes.loader_batches):
            try:
                next(iterator)
            except StopIteration:
                break
            now = time.perf_counter()
            latencies.append(now - last)
            last = now
        del iterator
    children = max(figure.extra.get("children_rss_mb", 0.0), phase.children_peak_mb)
    figure.extra["children_rss_mb"] = children
    figure.rss_peak_mb = max(figure.rss_peak_mb or 0.0, phase.peak_mb)
    rate = len(latencies) / (last - first) if last > first else float("nan")
    return (first - began) * 1e3, rate, latencies


def _measure(
    context: Context, variants: list[_Variant], sources: dict[str, Any], preset: dict[str, Any]
) -> list[Figure]:
    figures = {v.name: Figure(v.name, v.role, "batches/s") for v in variants}
    rates: dict[str, list[float]] = {v.name: [] for v in variants}
    latencies: dict[str, list[float]] = {v.name: [] for v in variants}
    for _ in range(context.sizes.loader_rounds):
        for variant in variants:
            figure = figures[variant.name]
            if figure.status != "ok":
                continue
            context.log(f"  W8: {variant.name}")
            try:
                loader = _loader(context, variant, sources, preset)
                first_ms, rate, lat = _round(context, loader, figure)
            except Exception as err:  # noqa: BLE001 (reported in the table)
                figure.status = f"error: {type(err).__name__}: {err}"
                continue
            figure.first_ms = min(figure.first_ms or first_ms, first_ms)
            rates[variant.name].append(rate)
            latencies[variant.name] += lat
    for name, figure in figures.items():
        if figure.status == "ok" and latencies[name]:
            figure.rate = float(np.median(rates[name]))
            figure.p50_ms = float(np.percentile(latencies[name], 50) * 1e3)
            figure.p99_ms = float(np.percentile(latencies[name], 99) * 1e3)
    return list(figures.values())


def run_w8(context: Context) -> WorkloadResult:
    """W8: DataLoader batches/s with 0, 2 and 4 workers over three backends, worker RSS."""
    from benchmarks.workloads.memory import memory_dataset

    s = context.sizes
    result = WorkloadResult(
        "W8",
        f"segments() of W3's data (Zarr, npz directory, memory) through a DataLoader, "
        f"L={s.image_length}, B={s.image_batch}, {s.loader_batches} batches per round",
    )
    data = load_image(context)
    path, _ = zarr_dataset(context, data)
    small_count = max(1, round(data.num_episodes * s.loader_small_fraction))
    small, _ = zarr_dataset(context, _subset(data, small_count), "image_small.zarr")
    sources: dict[str, Any] = {
        "zarr": path,
        "npz_directory": _npz_dataset(context, data),
        "memory": memory_dataset(data)[0],
    }
    preset = _check_loader(path, context, data)
    episodes = data.num_episodes
    # forked workers inherit (and count in their RSS) whatever the parent holds: drop
    # the source rows so the workers' RSS shows what reading costs them
    del data
    variants = {variant.name: variant for variant in _variants(context)}
    result.figures += _measure(context, list(variants.values()), sources, preset)
    for figure in result.figures:
        variant = variants[figure.system]
        if variant.role == "episodata" and variant.start is not None:
            # workers move every batch through the transport; without workers nothing does
            figure.extra["ceiling"] = _transport(variant.workers, variant.start)
    fork = _Variant(f"zarr 2 workers fork, {small_count} episodes", "episodata", 2, "fork", "zarr")
    result.figures += _measure(context, [fork], {"zarr": small}, preset)
    result.figures[-1].extra["ceiling"] = _transport(2, "fork")
    for backend in BACKENDS:
        for start in _starts(context, backend):
            for workers in WORKERS:
                name = _name(backend, workers, start)
                target = ratio_target(result, name, _transport(workers, start), 0.9)
                without = result.figure(_name(backend, 0, None))
                loaded = result.figure(name)
                if without is not None and loaded is not None and without.rate and loaded.rate:
                    target.note = f"{loaded.rate / without.rate:.2f}x of 0 workers"
                result.targets.append(target)
    fork_figure = result.figure("zarr 2 workers fork")
    big = fork_figure.extra.get("children_rss_mb") if fork_figure is not None else None
    little = result.figures[-1].extra.get("children_rss_mb")
    result.targets.append(
        Target(
            f"worker RSS {episodes} / {small_count} episodes",
            1.2,
            big / little if big and little else None,
            comparison="<=",
            note="peak RSS of all child processes (workers and their helpers)",
        )
    )
    return result


def _npz_dataset(context: Context, data: RowData) -> Path:
    """``data`` in an npz directory, written once per run."""
    from episodata import Dataset

    path = context.run_dir / "image.npz"
    if not (path / "manifest.json").exists():
        with Dataset.create(data.schema(), path, backend="npz_directory") as dataset:
            dataset.add_episodes(data.episodes())
    return path


def _check_loader(path: Path, context: Context, data: RowData) -> dict[str, Any]:
    """A batch read equals the NumPy gather of its windows; returns it as the preset."""
    from episodata import Dataset

    length = context.sizes.image_length
    segments = Dataset.open(path, read_only=True).segments(sequence_length=length)
    step = max(1, len(segments) // context.sizes.image_batch)
    indices = list(range(0, len(segments), step))[: context.sizes.image_batch]
    batch = segments.collate(segments.__getitems__(indices))
    episodes, starts = segments.index.locate(np.asarray(indices))
    want = numpy_gather(data.rows, data.offsets[episodes] + starts, length)
    assert_rows_equal("segments() + collate", batch.buffers, want)
    return {key: np.array(value) for key, value in batch.buffers.items()}
