"""The README's "Sampling" snippets, run as written, with the shapes its comments state.

Deviations from the README text, each marked where it happens: ``dataset`` is built
here (CartPole-shaped episodes, some shorter than 32 steps, whose first two observation
columns are the episode id and step so results can be checked); ``.to("cuda")`` and
``device="cuda"`` become ``"cpu"`` when CUDA is not available; every snippet runs on
each backend that can be loaded (zarr and npz_directory with a temporary path).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from episodata import Dataset
from episodata_core.errors import PluginError
from episodata_core.registry import get_backend

torch = pytest.importorskip("torch")
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"

LENGTHS = [100, 20, 45, 5, 70, 33, 32, 10, 64, 1, 90, 40]
TERMINATED = [e % 3 != 1 for e in range(len(LENGTHS))]


def backend_param(name: str) -> Any:
    """``name`` as a parameter, skipped only while its backend cannot be loaded."""
    try:
        get_backend(name)
    except PluginError as err:
        reason = f"backend {name!r} is not available yet (written in parallel): {err}"
        return pytest.param(name, marks=pytest.mark.skip(reason=reason))
    return pytest.param(name)


@pytest.fixture(params=[backend_param(n) for n in ("memory", "zarr", "npz_directory")])
def dataset(request: pytest.FixtureRequest, tmp_path: Any) -> Dataset:
    rng = np.random.default_rng(0)
    episodes = []
    for e, length in enumerate(LENGTHS):
        obs = rng.normal(size=(length + 1, 4)).astype(np.float32)
        obs[:, 0], obs[:, 1] = e, np.arange(length + 1)
        episodes.append(
            {
                "initial_observation": obs[0],
                "observations": obs[1:],
                "actions": rng.integers(0, 2, size=length).astype(np.int64),
                "rewards": np.ones(length, dtype=np.float32),
                "terminated": TERMINATED[e],
                "truncated": not TERMINATED[e],
            }
        )
    backend = request.param
    path = None if backend == "memory" else str(tmp_path / "rollouts")
    return Dataset.from_episodes(episodes, path=path, backend=backend)


def windows(length: int, pad: bool = True) -> int:
    return sum(t - length + 1 if t >= length else int(pad) for t in LENGTHS)


def episodes_of(batch: Any) -> set[int]:
    return {int(e) for e in batch.obs[..., 0][batch.mask]}


def test_quick_start_fixed_length_batches(dataset: Dataset) -> None:
    stream = dataset.segment_stream(sequence_length=32, batch_size=64, seed=0)
    batch = stream.sample()

    assert batch.obs.shape == (64, 32, 4)  # [64, 32, 4]
    assert batch.next_obs.shape == (64, 32, 4)  # [64, 32, 4]
    assert batch.mask.shape == (64, 32)  # [64, 32], False where a short episode was padded
    stream.close()


# torch suggests at most os.cpu_count() workers; the README asks for 4 on any machine
@pytest.mark.filterwarnings("ignore:This DataLoader will create 4 worker processes")
def test_pytorch_dataloader(dataset: Dataset) -> None:
    import torch
    from torch.utils.data import DataLoader

    segments = dataset.segments(sequence_length=32)
    loader = DataLoader(
        segments,
        batch_size=64,
        shuffle=True,
        num_workers=4,
        collate_fn=segments.collate,
    )

    sizes = []
    for batch in loader:
        batch = batch.map(lambda x: torch.as_tensor(x).to(DEVICE))  # README: "cuda"
        # "preserving the shared storage between obs and next_obs after a device transfer"
        assert batch.obs.untyped_storage().data_ptr() == batch.next_obs.untyped_storage().data_ptr()
        assert batch.obs.device.type == DEVICE
        assert batch.obs.shape[1:] == (32, 4)
        assert torch.equal(batch.obs[:, 1:], batch.next_obs[:, :-1])
        sizes.append(batch.obs.shape[0])
    assert len(segments) == windows(32)
    assert sum(sizes) == len(segments)
    assert sizes[:-1] == [64] * (len(sizes) - 1)


def test_streaming_context_target_batches(dataset: Dataset) -> None:
    stream = dataset.segment_stream(
        context_length=8,
        target_length=24,
        batch_size=64,
        seed=0,
    )

    batch = stream.sample()
    context = batch.context  # [B, 8, ...]      README: a bare expression
    target = batch.target  # [B, 24, ...]

    assert len(context) == len(target) == 64
    assert context.obs.shape == (64, 8, 4)
    assert context.action.shape == (64, 8)
    assert context.mask.shape == (64, 8)
    assert target.obs.shape == (64, 24, 4)
    assert target.reward.shape == (64, 24)
    np.testing.assert_array_equal(target.obs[:, 0], context.next_obs[:, -1])
    stream.close()


def test_other_common_queries(dataset: Dataset) -> None:
    # One-shot transitions, with the time axis removed
    transitions = dataset.sample_transitions(batch_size=256)
    assert transitions.obs.shape == (256, 4)
    assert transitions.action.shape == (256,)
    assert transitions.mask.all()

    # One finite pass over all valid segments
    count = batches = 0
    for batch in dataset.segment_stream(sequence_length=32, batch_size=64, shuffle=False):
        count += len(batch)
        batches += 1
    assert count == windows(32)
    assert batches == math.ceil(windows(32) / 64)

    # Only episodes accepted by the predicate
    stream = dataset.segment_stream(
        sequence_length=32,
        filter=lambda episode: episode.terminated,
    )
    sampled = stream.sample()
    assert sampled.obs.shape == (64, 32, 4)  # batch_size defaults to 64
    assert episodes_of(sampled) <= {e for e, kept in enumerate(TERMINATED) if kept}
    stream.close()


def test_padding_sentence(dataset: Dataset) -> None:
    # "Short episodes produce one zero-padded segment by default."
    short = [e for e, t in enumerate(LENGTHS) if t < 32]
    suffix = dataset.segments(sequence_length=32)
    prefix = dataset.segments(sequence_length=32, pad="prefix")
    skipped = dataset.segments(sequence_length=32, pad=None)
    assert len(suffix) == len(prefix) == windows(32)
    assert len(skipped) == windows(32, pad=False) == len(suffix) - len(short)
    everything = suffix.__getitems__(list(range(len(suffix))))
    padded = ~everything.mask.all(axis=1)
    assert sorted(int(everything.obs[b, 0, 0]) for b in np.flatnonzero(padded)) == short
    # "batch.mask always marks real transitions": zeros after (suffix) or before (prefix)
    front = prefix.__getitems__(list(range(len(prefix))))
    for b in np.flatnonzero(padded):
        real = LENGTHS[int(everything.obs[b, 0, 0])]
        assert everything.mask[b].tolist() == [True] * real + [False] * (32 - real)
        assert front.mask[b].tolist() == [False] * (32 - real) + [True] * real
        assert not everything.all_obs[b, real + 1 :].any()
        assert not front.all_obs[b, : 32 - real].any()
    assert not set(episodes_of(skipped.__getitems__(list(range(len(skipped)))))) & set(short)


def test_custom_sampler(dataset: Dataset) -> None:
    import numpy as np

    class MySampler:
        def __init__(self, seed=None):
            self.rng = np.random.default_rng(seed)

        def sample(self, index, batch_size):
            return self.rng.integers(len(index), size=batch_size)

    stream = dataset.segment_stream(
        sequence_length=32,
        batch_size=64,
        sampler=MySampler(seed=0),
    )
    batch = stream.sample()
    assert batch.obs.shape == (64, 32, 4)
    again = dataset.segment_stream(sequence_length=32, batch_size=64, sampler=MySampler(seed=0))
    np.testing.assert_array_equal(again.sample().all_obs, batch.all_obs)
    stream.close()
    again.close()


def test_tensordict_interop(dataset: Dataset) -> None:
    pytest.importorskip("tensordict")
    batch = dataset.segment_stream(sequence_length=32, batch_size=64, seed=0).sample()

    from episodata.utils import batch_to_tensordict

    td = batch_to_tensordict(batch, device=DEVICE)  # README: device="cuda"

    assert td.batch_size == torch.Size([64, 32])
    assert td["observation"].shape == (64, 32, 4)
    assert td["observation"].device.type == DEVICE
    # "Passing the device to batch_to_tensordict preserves the shared observation storage"
    assert (
        td["observation"].untyped_storage().data_ptr()
        == td["next_observation"].untyped_storage().data_ptr()
    )
    np.testing.assert_array_equal(td["next_observation"].cpu().numpy(), batch.next_obs)
