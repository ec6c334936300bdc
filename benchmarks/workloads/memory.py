"""W1, W2 (segments from a memory dataset) and W4 (single transitions)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from benchmarks.ceilings import IndexPool, numpy_gather
from benchmarks.data import ACTION, OBS, REWARD, RowData, image_data, load_or_make, state_data
from benchmarks.harness import Opened, Systems, assert_rows_equal
from benchmarks.measure import rss_bytes
from benchmarks.peers import check_slices, slice_buffer, transition_buffer
from benchmarks.results import Target, WorkloadResult, ratio_target

if TYPE_CHECKING:
    from collections.abc import Callable

    from benchmarks.harness import Context
    from episodata import Dataset

__all__ = ["load_image", "load_state", "memory_dataset", "run_w1", "run_w2", "run_w4"]


def load_state(context: Context) -> RowData:
    """W1's rows (shared by W4 and, in shape, W7)."""
    s = context.sizes
    return load_or_make(
        context.run_dir, "state", lambda: state_data(s.state_episodes, s.state_steps, s.seed)
    )


def load_image(context: Context) -> RowData:
    """W2's rows (shared by W3 and W8)."""
    s = context.sizes
    return load_or_make(
        context.run_dir, "image", lambda: image_data(s.image_episodes, s.image_steps, s.seed)
    )


def memory_dataset(data: RowData) -> tuple[Dataset, float]:
    """``Dataset.from_episodes`` of ``data`` in memory, and its RSS over the raw bytes."""
    from episodata import Dataset

    before = rss_bytes(children=False)
    dataset = Dataset.from_episodes(data.episodes(), data.schema())
    return dataset, (rss_bytes(children=False) - before) / data.nbytes


def check_segments(dataset: Dataset, data: RowData, length: int, seed: int) -> None:
    """Episodata's windows equal the NumPy gather of the same ``(episode, start)`` pairs."""
    segments = dataset.segments(sequence_length=length)
    rng = np.random.default_rng([seed, 7])
    picks = rng.integers(len(segments), size=32)
    picks[:2] = (0, len(segments) - 1)
    batch = segments.__getitems__(picks.tolist())
    episodes, starts = segments.index.locate(picks)
    want = numpy_gather(data.rows, data.offsets[episodes] + starts, length)
    assert_rows_equal("segments().__getitems__", batch.buffers, want)
    count = min(16, len(segments))
    ordered = dataset.segment_stream(
        sequence_length=length, batch_size=count, shuffle=False, prefetch=0
    )
    first = ordered.sample()
    episodes, starts = ordered.index.locate(np.arange(count))
    want = numpy_gather(data.rows, data.offsets[episodes] + starts, length)
    assert_rows_equal("segment_stream(shuffle=False)", first.buffers, want)
    if not np.shares_memory(first.obs, first.next_obs):
        raise AssertionError("obs and next_obs of a batch are not one buffer")


def _segment_workload(
    context: Context, result: WorkloadResult, data: RowData, length: int, batch: int
) -> None:
    seed = context.sizes.seed
    pool = IndexPool(data, length, batch, seed)
    systems = Systems(context, result, "batches/s")

    built: dict[str, Dataset] = {}

    def episodata() -> Opened:
        dataset, memory = memory_dataset(data)
        built["dataset"] = dataset
        streams: list[Any] = []

        def open_() -> Callable[[], Any]:
            stream = dataset.segment_stream(sequence_length=length, batch_size=batch, seed=seed)
            streams.append(stream)
            return stream.sample

        def check(_: Callable[[], Any]) -> None:
            check_segments(dataset, data, length, seed)

        return Opened(
            open_,
            check,
            pause=lambda: streams[-1].close(),
            note="segment_stream, default options (memory: no read-ahead thread)",
            extra={
                "memory_ratio": round(memory, 3),
                "raw_mb": data.nbytes / (1 << 20),
                "ceiling": "memcpy",
            },
        )

    def threaded() -> Opened:
        dataset = built["dataset"]
        streams: list[Any] = []

        def open_() -> Callable[[], Any]:
            stream = dataset.segment_stream(
                sequence_length=length, batch_size=batch, seed=seed, prefetch=2
            )
            streams.append(stream)
            return stream.sample

        return Opened(
            open_,
            pause=lambda: streams[-1].close(),
            note="the same dataset, prefetch=2: reads ahead in a thread",
            extra={"ceiling": "memcpy"},
        )

    def ceiling() -> Opened:
        return Opened(
            lambda: lambda: numpy_gather(data.rows, pool.take()[2], length),
            note="X[idx], idx = first[:, None] + arange(L + 1), every field",
        )

    def copy() -> Opened:
        return Opened(
            lambda: memcpy_batches(data, pool, length),
            note="np.copyto of the batch's bytes, one contiguous block per field, into a "
            "preallocated buffer: the bandwidth bound of any copy of the batch",
        )

    def torchrl() -> Opened:
        sample = slice_buffer(data, length, batch)
        return Opened(
            lambda: sample,
            lambda call: check_slices(call(), data),
            note="SliceSampler(slice_len=L+1, cache_values=True), LazyTensorStorage",
        )

    systems.add("episodata", "episodata", episodata)
    systems.add("episodata prefetch=2", "episodata", threaded)
    systems.add("numpy", "ceiling", ceiling)
    systems.add("memcpy", "ceiling", copy)
    systems.add("torchrl-lazy", "peer", torchrl, requires="torchrl")
    systems.run()
    result.targets += [
        ratio_target(result, "episodata", "memcpy", 0.7),
        ratio_target(result, "episodata", "numpy", 0.7),
        ratio_target(result, "episodata", "torchrl-lazy", 5.0),
    ]
    mine = result.figure("episodata")
    memory = mine.extra.get("memory_ratio") if mine is not None else None
    result.targets.append(
        Target("memory RSS / raw bytes", 1.2, memory, comparison="<=", note="from_episodes")
    )


def memcpy_batches(data: RowData, pool: IndexPool, length: int) -> Callable[[], Any]:
    """A call that copies one batch's bytes of every field, as contiguous blocks.

    Each call starts at the next pre-drawn window's first row, so the bytes come from
    where the batch's rows would (caches or DRAM), and copies ``B * (L + 1)`` rows of
    each field into buffers allocated once.
    """
    count = len(pool.rows[0]) * (length + 1)
    total = data.num_rows
    targets = {key: np.empty((count, *a.shape[1:]), a.dtype) for key, a in data.rows.items()}

    def call() -> dict[str, npt.NDArray[Any]]:
        first = int(pool.take()[2][0])
        lo = min(first, total - count)
        for key, array in data.rows.items():
            np.copyto(targets[key], array[lo : lo + count])
        return targets

    return call


def run_w1(context: Context) -> WorkloadResult:
    """W1: state segments (L=64, B=256) from a memory dataset."""
    s = context.sizes
    result = WorkloadResult(
        "W1",
        f"state segments, memory: {s.state_episodes} x {s.state_steps} steps, "
        f"L={s.state_length}, B={s.state_batch}",
    )
    _segment_workload(context, result, load_state(context), s.state_length, s.state_batch)
    return result


def run_w2(context: Context) -> WorkloadResult:
    """W2: image segments (L=32, B=64) from a memory dataset."""
    s = context.sizes
    result = WorkloadResult(
        "W2",
        f"image segments, memory: {s.image_episodes} x {s.image_steps} steps of 3x64x64 "
        f"uint8, L={s.image_length}, B={s.image_batch}",
    )
    _segment_workload(context, result, load_image(context), s.image_length, s.image_batch)
    return result


def check_transitions(batch: Any, data: RowData) -> None:
    """Every sampled transition is a real one: its rows follow each other in one episode."""
    obs = data.rows[OBS]
    order = np.argsort(obs[:, 0], kind="stable")
    column = obs[order, 0]
    last = np.zeros(data.num_rows, dtype=bool)
    last[data.offsets + data.lengths] = True
    got = {k: np.asarray(v) for k, v in batch.buffers.items()}
    for b in range(len(got[OBS])):
        hits = order[np.searchsorted(column, got[OBS][b, 0, 0]) :][:8]
        row = next((int(r) for r in hits if np.array_equal(obs[r], got[OBS][b, 0])), None)
        if row is None or last[row]:
            raise AssertionError(f"transition {b}: its obs is not the start of a transition")
        want = {key: data.rows[key][row : row + 2] for key in (OBS, ACTION, REWARD)}
        assert_rows_equal(f"sample_transitions, transition {b}", {k: got[k][b] for k in want}, want)


def run_w4(context: Context) -> WorkloadResult:
    """W4: ``sample_transitions(batch_size=256)`` over W1's data."""
    s = context.sizes
    batch = s.transition_batch
    result = WorkloadResult("W4", f"transitions, memory: W1's data, B={batch}")
    data = load_state(context)
    pool = IndexPool(data, 1, batch, s.seed)
    systems = Systems(context, result, "calls/s")

    def episodata() -> Opened:
        dataset, _ = memory_dataset(data)

        def open_() -> Callable[[], Any]:
            return lambda: dataset.sample_transitions(batch)

        return Opened(open_, lambda call: check_transitions(call(), data))

    def ceiling() -> Opened:
        return Opened(
            lambda: lambda: numpy_gather(data.rows, pool.take()[2], 1),
            note="X[idx] of 2 rows per transition, every field",
        )

    def torchrl() -> Opened:
        sample = transition_buffer(data, batch)
        return Opened(lambda: sample, note="ReplayBuffer(LazyTensorStorage), RandomSampler")

    systems.add("episodata", "episodata", episodata)
    systems.add("numpy", "ceiling", ceiling)
    systems.add("torchrl-plain", "peer", torchrl, requires="torchrl")
    systems.run()
    result.targets.append(ratio_target(result, "episodata", "torchrl-plain", 2.0))
    return result
