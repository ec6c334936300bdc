"""``segments()`` in a real ``torch.utils.data.DataLoader`` with worker processes.

Every observation encodes where it comes from: row t of episode e is ``(e + 1, t + 1)``,
action t is ``1000 (e + 1) + t`` and reward t is ``e + t / 8``. So each batch a worker
returns can be checked from its data alone: the window it claims to be is identified,
and every value (padding included) is compared with a brute-force rebuild of that
window. Over one epoch a shuffled loader visits every index once, so the windows of an
epoch must be exactly the reference windows.

Batches of image frames are large enough to leave a worker through shared memory; they
must equal, batch by batch, what the same loader yields without workers.
"""

from __future__ import annotations

import importlib
import pickle
from typing import Any

import numpy as np
import pytest

from episodata import Dataset, DatasetSchema, FieldSpec
from episodata_core.errors import PluginError
from episodata_core.registry import get_backend
from episodata_core.sampling.transport import SHARE_MIN_BYTES, WorkerBatch
from episodata_core.sampling.workers import WorkerInfo
from episodata_core.views import Batch

torch = pytest.importorskip("torch")
DataLoader = torch.utils.data.DataLoader

L = 8
LENGTHS = [(3 * e) % 17 + 1 for e in range(40)]  # 1..17 steps: padded and long episodes

SCHEMA = DatasetSchema(
    [
        FieldSpec("observation", shape=(2,), dtype="float32"),
        FieldSpec("action", shape=(), dtype="int64", role="action"),
        FieldSpec("reward", shape=(), dtype="float32", role="reward"),
    ]
)


def backend_param(name: str) -> Any:
    """``name`` as a parameter, skipped only while its backend cannot be loaded."""
    try:
        get_backend(name)
    except PluginError as err:
        reason = f"backend {name!r} is not available yet (written in parallel): {err}"
        return pytest.param(name, marks=pytest.mark.skip(reason=reason))
    return pytest.param(name)


BACKENDS = [backend_param(name) for name in ("memory", "zarr", "npz_directory")]


def obs_row(e: int, t: int) -> list[float]:
    return [e + 1.0, t + 1.0]


def action_of(e: int, t: int) -> int:
    return 1000 * (e + 1) + t


def reward_of(e: int, t: int) -> float:
    return e + t / 8


def bulk(e: int, length: int) -> dict[str, Any]:
    return {
        "initial_observation": np.array(obs_row(e, 0), dtype=np.float32),
        "observations": np.array([obs_row(e, t + 1) for t in range(length)], dtype=np.float32),
        "actions": np.array([action_of(e, t) for t in range(length)], dtype=np.int64),
        "rewards": np.array([reward_of(e, t) for t in range(length)], dtype=np.float32),
        "terminated": e % 2 == 0,
        "truncated": e % 3 == 0,
    }


def reference_windows() -> list[tuple[int, int]]:
    windows = []
    for e, length in enumerate(LENGTHS):
        starts = range(length - L + 1) if length >= L else range(1)
        windows.extend((e, start) for start in starts)
    return windows


def assert_window(batch: Any, b: int) -> tuple[int, int]:
    """Identify row ``b`` of ``batch`` from its data and check all of it; suffix padding."""
    e, start = (int(v) - 1 for v in batch.obs[b, 0])
    length = LENGTHS[e]
    real = min(L, length - start)
    all_obs = np.zeros((L + 1, 2), dtype=np.float32)
    action = np.zeros(L, dtype=np.int64)
    reward = np.zeros(L, dtype=np.float32)
    mask = np.zeros(L, dtype=bool)
    terminated = np.zeros(L, dtype=bool)
    truncated = np.zeros(L, dtype=bool)
    for j in range(real + 1):
        all_obs[j] = obs_row(e, start + j)
    for j in range(real):
        action[j] = action_of(e, start + j)
        reward[j] = reward_of(e, start + j)
        mask[j] = True
    if start + real == length:
        terminated[real - 1] = e % 2 == 0
        truncated[real - 1] = e % 3 == 0
    expected = {
        "all_obs": all_obs,
        "action": action,
        "reward": reward,
        "mask": mask,
        "terminated": terminated,
        "truncated": truncated,
    }
    for name, value in expected.items():
        np.testing.assert_array_equal(
            getattr(batch, name)[b], value, err_msg=f"{name} of window {(e, start)}", strict=True
        )
    return e, start


@pytest.fixture
def make_dataset(tmp_path: Any) -> Any:
    def make(backend: str) -> Dataset:
        path = None if backend == "memory" else str(tmp_path / f"dataset-{backend}")
        dataset = Dataset.create(SCHEMA, path, backend=backend)
        for e, length in enumerate(LENGTHS):
            dataset.add_episode(bulk(e, length))
        return dataset

    return make


@pytest.mark.parametrize("context", ["fork", "spawn"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_dataloader_with_workers(make_dataset: Any, backend: str, context: str) -> None:
    dataset = make_dataset(backend)
    segments = dataset.segments(sequence_length=L)
    windows = reference_windows()
    assert len(segments) == len(windows)
    loader = DataLoader(
        segments,
        batch_size=64,
        shuffle=True,
        num_workers=2,
        collate_fn=segments.collate,
        persistent_workers=True,
        multiprocessing_context=context,
        generator=torch.Generator().manual_seed(0),
    )
    epochs = []
    for _ in range(2):
        seen = []
        sizes = []
        for batch in loader:
            sizes.append(len(batch))
            assert batch.obs.shape == (len(batch), L, 2)
            assert np.shares_memory(batch.obs, batch.next_obs)
            seen.extend(assert_window(batch, b) for b in range(len(batch)))
        assert sizes[:-1] == [64] * (len(sizes) - 1)
        assert sorted(seen) == windows, "an epoch visits every window exactly once"
        epochs.append(seen)
    assert epochs[0] != epochs[1], "each epoch is shuffled anew"


@pytest.mark.parametrize("backend", BACKENDS)
def test_dataloader_without_workers(make_dataset: Any, backend: str) -> None:
    segments = make_dataset(backend).segments(sequence_length=L)
    loader = DataLoader(segments, batch_size=16, shuffle=False, collate_fn=segments.collate)
    seen = [assert_window(batch, b) for batch in loader for b in range(len(batch))]
    assert seen == reference_windows()


# -- batches of frames: through shared memory, equal to the batches without workers ------

FRAMES = DatasetSchema(
    [
        FieldSpec("observation", shape=(3, 64, 64), dtype="uint8"),
        FieldSpec("action", shape=(2,), dtype="float32", role="action"),
    ]
)
FRAME_BATCH = 16  # 16 x (L + 1) frames of 12 KiB: 1.7 MiB, over SHARE_MIN_BYTES
FRAME_LENGTHS = [3, 30, 12, 7, 25, 9, 18, 1, 14]  # some shorter than L: padded windows
OBS_KEY = "observation/observation"


@pytest.fixture
def make_frames(tmp_path: Any) -> Any:
    def make(backend: str) -> Dataset:
        path = None if backend == "memory" else str(tmp_path / f"frames-{backend}")
        dataset = Dataset.create(FRAMES, path, backend=backend)
        rng = np.random.default_rng(3)
        for e, length in enumerate(FRAME_LENGTHS):
            frames = rng.integers(0, 256, (length + 1, 3, 64, 64), dtype=np.uint8)
            dataset.add_episode(
                {
                    "initial_observation": frames[0],
                    "observations": frames[1:],
                    "actions": rng.standard_normal((length, 2)).astype(np.float32),
                    "terminated": e % 2 == 0,
                    "truncated": e % 3 == 0,
                }
            )
        return dataset

    return make


def frame_loader(segments: Any, workers: int, context: str | None = None) -> Any:
    return DataLoader(
        segments,
        batch_size=FRAME_BATCH,
        shuffle=True,
        num_workers=workers,
        collate_fn=segments.collate,
        multiprocessing_context=context,
        generator=torch.Generator().manual_seed(7),  # the same order with or without workers
    )


def assert_same_batch(got: Any, want: Any, where: str) -> None:
    """Same type, fields, dtypes and values as the batch read without workers."""
    assert type(got) is Batch, where
    assert got.fields == want.fields, where
    for key, value in want.buffers.items():
        assert type(got.buffers[key]) is np.ndarray, f"{key} {where}"
        np.testing.assert_array_equal(
            got.buffers[key], value, err_msg=f"{key} {where}", strict=True
        )
    for name in ("terminated", "truncated", "mask"):
        assert type(getattr(got, name)) is np.ndarray, f"{name} {where}"
        np.testing.assert_array_equal(
            getattr(got, name), getattr(want, name), err_msg=f"{name} {where}", strict=True
        )


def assert_one_shared_buffer(batch: Any, where: str, *, shared: bool = True) -> None:
    """obs and next_obs are views of one [B, L + 1] buffer, in shared memory if large."""
    buffer = batch.buffers[OBS_KEY]
    obs, next_obs = batch.obs, batch.next_obs
    assert obs.base is buffer or obs.base is buffer.base, where
    assert np.shares_memory(obs, next_obs), where
    # next_obs is obs moved on by one row of the same memory, not an equal copy
    assert next_obs.ctypes.data == obs.ctypes.data + buffer.strides[1], where
    assert obs.ctypes.data == buffer.ctypes.data, where
    if buffer.nbytes >= SHARE_MIN_BYTES:
        # it arrived as a view of a tensor over shared memory, not as pickled bytes
        tensor = tensor_under(buffer)
        assert isinstance(tensor, torch.Tensor), f"{type(tensor).__name__} {where}"
        assert tensor.is_shared() == shared, where
        storage = tensor.untyped_storage()
        begin = storage.data_ptr()
        assert begin <= buffer.ctypes.data, where
        assert buffer.ctypes.data + buffer.nbytes <= begin + storage.nbytes(), where


def tensor_under(array: Any) -> Any:
    """The object at the end of ``array``'s chain of bases (a tensor if it views one)."""
    base = array
    while isinstance(base, np.ndarray) and base.base is not None:
        base = base.base
    return base


MEMORY_AND_ZARR = [backend_param(name) for name in ("memory", "zarr")]


@pytest.mark.parametrize("context", ["fork", "spawn"])
@pytest.mark.parametrize("backend", MEMORY_AND_ZARR)
def test_worker_batches_equal_batches_without_workers(
    make_frames: Any, backend: str, context: str
) -> None:
    segments = make_frames(backend).segments(sequence_length=L)
    expected = list(frame_loader(segments, 0))
    got = list(frame_loader(segments, 2, context))
    assert len(got) == len(expected) == -(-len(segments) // FRAME_BATCH)
    for i, (mine, want) in enumerate(zip(got, expected, strict=True)):
        where = f"in batch {i} ({context} workers, {backend})"
        assert_same_batch(mine, want, where)
        assert_one_shared_buffer(mine, where)
    # both ways out of a worker were taken: shared memory, and pickling (the last batch)
    assert got[0].buffers[OBS_KEY].nbytes >= SHARE_MIN_BYTES
    assert got[-1].buffers[OBS_KEY].nbytes < SHARE_MIN_BYTES


def test_worker_batch_pickles_as_a_plain_batch(make_frames: Any) -> None:
    segments = make_frames("memory").segments(sequence_length=L)
    batch = segments.__getitems__(list(range(FRAME_BATCH)))
    shipped = WorkerBatch(batch.schema, batch.buffers, batch._flags)
    assert np.shares_memory(shipped.obs, shipped.next_obs)  # cached views must stay behind
    arrived = pickle.loads(pickle.dumps(shipped))
    assert "obs" not in vars(arrived)
    assert_same_batch(arrived, batch, "after pickling")
    # plain pickle copies tensors by value; only a DataLoader's queue shares them
    assert_one_shared_buffer(arrived, "after pickling", shared=False)
    # small arrays travel by value, as NumPy arrays of their own
    assert arrived.mask.base is None or not isinstance(arrived.mask.base, torch.Tensor)


def test_collate_outside_a_worker_leaves_the_batch_alone(make_frames: Any) -> None:
    segments = make_frames("memory").segments(sequence_length=L)
    batch = segments.__getitems__([0, 1])
    assert segments.collate(batch) is batch
    assert type(segments.collate([segments[0], segments[1]])) is Batch


def collate_with_cache_pool(items: Any) -> tuple[Batch, int]:
    """The batch, and the cache pool of the backend that this worker reads through."""
    segments = torch.utils.data.get_worker_info().dataset
    # fork: what the worker's helper process was given; spawn: the worker's own pool
    options = segments.dataset.backend._store.options
    return segments.collate(items), options.cache_pool_bytes


@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_zarr_workers_share_one_cache_pool(make_frames: Any, context: str) -> None:
    from episodata_zarr import ZarrOptions

    segments = make_frames("zarr").segments(sequence_length=L)
    loader = DataLoader(
        segments,
        batch_size=FRAME_BATCH,
        num_workers=2,
        collate_fn=collate_with_cache_pool,
        multiprocessing_context=context,
    )
    pools = [pool for _, pool in loader]
    assert pools == [ZarrOptions().cache_pool_bytes // 2] * len(pools)
    assert (
        segments.dataset.backend._store.options.cache_pool_bytes == ZarrOptions().cache_pool_bytes
    )


def test_worker_share_splits_the_cache_pool(monkeypatch: Any) -> None:
    # the module, not the package's helper function of the same name
    zarr_options = importlib.import_module("episodata_zarr._options")
    options = zarr_options.ZarrOptions(cache_pool_bytes=300)
    assert zarr_options.worker_share(options) is options  # not a worker: the whole pool
    worker = WorkerInfo(id=1, num_workers=4)
    monkeypatch.setattr(zarr_options, "dataloader_worker", lambda: worker)
    assert zarr_options.worker_share(options).cache_pool_bytes == 75
    assert options.cache_pool_bytes == 300


# -- slots: a worker reuses a batch's shared memory once the main process let go ----------


def shm_inode(batch: Any) -> int:
    """The shared-memory file the batch's frames arrived in (its inode)."""
    import os

    storage = tensor_under(batch.buffers[OBS_KEY]).untyped_storage()
    fd, _ = storage._share_fd_cpu_()
    return os.fstat(fd).st_ino


def in_order(segments: Any, workers: int, context: str | None = None) -> Any:
    """Every epoch in the same order (no shuffling), persistent workers."""
    return DataLoader(
        segments,
        batch_size=FRAME_BATCH,
        num_workers=workers,
        collate_fn=segments.collate,
        multiprocessing_context=context,
        persistent_workers=workers > 0,
    )


@pytest.mark.parametrize("context", ["fork", pytest.param("spawn", marks=pytest.mark.slow)])
def test_a_worker_refills_a_slot_only_after_its_batch_is_dropped(
    make_frames: Any, context: str
) -> None:
    segments = make_frames("memory").segments(sequence_length=L)
    expected = list(in_order(segments, 0)) * 3  # three epochs
    loader = in_order(segments, 1, context)
    kept: list[tuple[int, Any]] = []
    inodes: set[int] = set()
    count = 0
    for epoch in range(3):
        for i, batch in enumerate(loader):
            want = expected[count]
            assert_same_batch(batch, want, f"batch {i} of epoch {epoch} on arrival")
            if batch.buffers[OBS_KEY].nbytes >= SHARE_MIN_BYTES:
                inodes.add(shm_inode(batch))
                if count % 3 == 0:
                    kept.append((count, batch))  # held: its slot must not be refilled
            count += 1
            del batch
    # what was held still holds its own batch, though slots were refilled meanwhile
    for position, batch in kept:
        assert_same_batch(batch, expected[position], f"held batch {position} at the end")
    shared = sum(b.buffers[OBS_KEY].nbytes >= SHARE_MIN_BYTES for b in expected)
    # without reuse every large batch would bring a new segment; with it, the held ones
    # plus the few in flight (the loader's prefetch_factor=2 for one worker)
    assert len(inodes) <= len(kept) + 4, (len(inodes), shared)
    assert shared > len(kept) + 4


def test_a_dropped_batch_releases_its_slot() -> None:
    transport = importlib.import_module("episodata_core.sampling.transport")
    storage = torch.empty(transport._HEADER + 64, dtype=torch.uint8).share_memory_()
    tensor = torch.empty(0, dtype=torch.uint8).set_(storage)
    storage[0] = 1
    layout = [("observation/observation", transport._HEADER, "|u1", (2, 1, 4))]
    rest = {key: np.zeros((2, 1), dtype=bool) for key in transport._FLAG_KEYS}
    batch = transport._arrive_slot(FRAMES, tensor, layout, rest, None)
    del tensor
    view = batch.buffers[OBS_KEY][1:]  # a view of a view still holds the slot
    del batch
    assert storage[0] == 1
    del view
    assert storage[0] == 0


def store_kind(items: Any) -> tuple[Batch, str]:
    """The batch, and what this worker's Zarr arrays are read with."""
    segments = torch.utils.data.get_worker_info().dataset
    store = segments.dataset.backend._store
    return segments.collate(items), type(store.arrays.index).__name__ + f"/{store.helper}"


def test_forked_zarr_workers_read_chunk_files_without_a_helper(make_frames: Any) -> None:
    segments = make_frames("zarr").segments(sequence_length=L)
    loader = DataLoader(
        segments,
        batch_size=FRAME_BATCH,
        num_workers=2,
        collate_fn=store_kind,
        multiprocessing_context="fork",
    )
    kinds = {kind for _, kind in loader}
    assert kinds == {"FileArray/None"}  # TensorStore untouched, no helper process


def test_a_damaged_chunk_raises_in_a_forked_worker(make_frames: Any, tmp_path: Any) -> None:
    dataset = make_frames("zarr")
    segments = dataset.segments(sequence_length=L)
    list(frame_loader(segments, 0))  # the parent reads through TensorStore first
    chunk = tmp_path / "frames-zarr" / "data" / "observation" / "observation" / "c" / "0"
    chunk = next(p for p in chunk.rglob("*") if p.is_file())
    data = bytearray(chunk.read_bytes())
    data[5] ^= 0x01
    chunk.write_bytes(bytes(data))
    loader = DataLoader(
        segments,
        batch_size=len(segments),  # one batch: every window, so the damaged chunk too
        num_workers=2,
        collate_fn=segments.collate,
        multiprocessing_context="fork",
    )
    with pytest.raises(Exception, match=rf"chunk {chunk} .*is damaged"):
        list(loader)
