"""W3: W2's image segments from files on local disk, every reader opened fresh.

The Zarr dataset, the HDF5 file and TorchRL's memmap are written once per run (W8 reads
the same Zarr dataset). They were just written, so the page cache is warm for everyone;
what is compared is decoding and assembly, not the disk.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from benchmarks.ceilings import IndexPool, TensorStoreReader, numpy_gather
from benchmarks.harness import Opened, Systems, assert_rows_equal
from benchmarks.peers import H5_CACHE_BYTES, H5SegmentReader, check_slices, slice_buffer
from benchmarks.peers import write_h5_segments as _write_h5
from benchmarks.results import WorkloadResult, ratio_target
from benchmarks.workloads.memory import check_segments, load_image

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from benchmarks.data import RowData
    from benchmarks.harness import Context

__all__ = ["TS_CACHE_BYTES", "run_w3", "zarr_dataset"]

TS_CACHE_BYTES = 256 << 20  # episodata's default cache_pool_bytes, h5py's chunk cache


def zarr_dataset(
    context: Context, data: RowData, name: str = "image.zarr", **options: Any
) -> tuple[Path, float]:
    """Write ``data`` with the zarr backend unless this run already did.

    ``options`` are zarr backend options (default: none, the defaults). Returns the
    folder and the seconds the write took (0 when reused).
    """
    from episodata import Dataset

    path = context.run_dir / name
    if (path / "manifest.json").exists():
        return path, 0.0
    began = time.perf_counter()
    with Dataset.create(data.schema(), path, backend="zarr", **options) as dataset:
        for episode in data.episodes():
            dataset.add_episode(episode)
    return path, time.perf_counter() - began


def _check_reader(what: str, read: Any, data: RowData, pool: IndexPool, length: int) -> None:
    episodes, starts, first = pool.take()
    assert_rows_equal(what, read(episodes, starts, length), numpy_gather(data.rows, first, length))


def run_w3(context: Context) -> WorkloadResult:
    """W3: image segments (L=32, B=64) from disk: Zarr, TensorStore, h5py, TorchRL memmap."""
    from episodata import Dataset

    s = context.sizes
    length, batch, seed = s.image_length, s.image_batch, s.seed
    result = WorkloadResult(
        "W3",
        f"image segments, Zarr on local disk (W2's data), opened fresh, L={length}, B={batch}",
    )
    data = load_image(context)
    keys = list(data.rows)
    pool = IndexPool(data, length, batch, seed)
    systems = Systems(context, result, "batches/s", preload=("tensorstore", "hdf5plugin"))

    def stored_stream(path: Path, seconds: float, note: str, **extra: Any) -> Opened:
        """The default ``segment_stream`` of episodata over the Zarr dataset at ``path``."""
        streams: list[Any] = []

        def open_() -> Callable[[], Any]:
            dataset = Dataset.open(path, read_only=True)
            stream = dataset.segment_stream(sequence_length=length, batch_size=batch, seed=seed)
            streams.append(stream)
            return stream.sample

        def check(_: Callable[[], Any]) -> None:
            check_segments(Dataset.open(path, read_only=True), data, length, seed)

        return Opened(
            open_,
            check,
            pause=lambda: streams[-1].close(),
            disk=path,
            note=note,
            extra={"write_s": round(seconds, 2), **extra},
        )

    def episodata() -> Opened:
        path, seconds = zarr_dataset(context, data)
        return stored_stream(
            path, seconds, "zarr backend, default options; segment_stream (prefetch=2)"
        )

    def unthreaded() -> Opened:
        def open_() -> Callable[[], Any]:
            dataset = Dataset.open(zarr_dataset(context, data)[0], read_only=True)
            return dataset.segment_stream(
                sequence_length=length, batch_size=batch, seed=seed, prefetch=0
            ).sample

        return Opened(open_, note="the same, prefetch=0: one thread")

    def uncompressed() -> Opened:
        # the layout of performance.md's reference ceiling: no codec, 64 frames per chunk
        frame = int(data.rows[keys[0]][0].nbytes)
        path, seconds = zarr_dataset(
            context, data, "image_raw.zarr", codec="none", chunk_bytes=64 * frame
        )
        return stored_stream(
            path,
            seconds,
            "zarr backend, codec='none', 64-row chunks; segment_stream (prefetch=2)",
            ceiling="tensorstore",
        )

    def tensorstore() -> Opened:
        path, _ = zarr_dataset(context, data)

        def open_() -> Callable[[], Any]:
            reader = TensorStoreReader(path, keys, TS_CACHE_BYTES)
            return lambda: reader.read(*pool.take()[:2], length)

        def check(_: Callable[[], Any]) -> None:
            reader = TensorStoreReader(path, keys, 0)
            _check_reader("naive TensorStore reader", reader.read, data, pool, length)

        return Opened(
            open_,
            check,
            disk=path,
            note="the same Zarr arrays; one read per segment and field, 256 MiB cache",
        )

    def h5py() -> Opened:
        path = context.run_dir / "image.h5"
        if not path.exists():
            _write_h5(path, data)
        readers: list[H5SegmentReader] = []

        def open_() -> Callable[[], Any]:
            reader = H5SegmentReader(path, keys)
            readers.append(reader)
            return lambda: reader.read(*pool.take()[:2], length)

        def check(_: Callable[[], Any]) -> None:
            _check_reader("h5py reader", readers[-1].read, data, pool, length)

        return Opened(
            open_,
            check,
            disk=path,
            note=f"Blosc lz4, 100-row chunks, {H5_CACHE_BYTES >> 20} MiB chunk cache",
        )

    def torchrl() -> Opened:
        scratch = context.run_dir / "image_memmap"
        sample = slice_buffer(data, length, batch, scratch_dir=scratch)
        return Opened(
            lambda: sample,
            lambda call: check_slices(call(), data),
            disk=scratch,
            note="SliceSampler(cache_values=True), LazyMemmapStorage",
        )

    systems.add("episodata", "episodata", episodata)
    systems.add("episodata prefetch=0", "episodata", unthreaded)
    systems.add("episodata uncompressed", "episodata", uncompressed)
    systems.add("tensorstore", "ceiling", tensorstore)
    systems.add("h5py", "peer", h5py, requires="h5py")
    systems.add("torchrl-memmap", "peer", torchrl, requires="torchrl")
    systems.run()
    result.targets += [
        ratio_target(result, "episodata", ["tensorstore", "h5py"], 1.0),
        ratio_target(result, "episodata", "torchrl-memmap", 5.0),
    ]
    return result
