"""``segments()`` in a real ``torch.utils.data.DataLoader`` with worker processes.

Every observation encodes where it comes from: row t of episode e is ``(e + 1, t + 1)``,
action t is ``1000 (e + 1) + t`` and reward t is ``e + t / 8``. So each batch a worker
returns can be checked from its data alone: the window it claims to be is identified,
and every value (padding included) is compared with a brute-force rebuild of that
window. Over one epoch a shuffled loader visits every index once, so the windows of an
epoch must be exactly the reference windows.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from episodata import Dataset, DatasetSchema, FieldSpec
from episodata_core.errors import PluginError
from episodata_core.registry import get_backend

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
