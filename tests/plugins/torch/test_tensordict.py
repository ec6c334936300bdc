"""``Batch.map`` and ``batch_to_tensordict``: one storage for the observations after conversion.

``obs`` and ``next_obs`` are two views of one ``[B, L + 1, ...]`` buffer. A conversion
that goes through the views would copy each separately; the checks compare
``untyped_storage().data_ptr()``, which is equal only for views of one storage.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import warnings
from typing import Any

import numpy as np
import pytest

from episodata import Dataset, MissingDependencyError

torch = pytest.importorskip("torch")
tensordict = pytest.importorskip("tensordict")

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif("not torch.cuda.is_available()"))]


def storage(tensor: Any) -> int:
    return int(tensor.untyped_storage().data_ptr())


@pytest.fixture
def dataset() -> Dataset:
    rng = np.random.default_rng(0)

    def episode(length: int) -> dict[str, Any]:
        return {
            "initial_observation": {
                "camera": rng.integers(0, 255, (3, 4, 4)).astype(np.uint8),
                "state": rng.normal(size=5).astype(np.float32),
            },
            "observations": {
                "camera": rng.integers(0, 255, (length, 3, 4, 4)).astype(np.uint8),
                "state": rng.normal(size=(length, 5)).astype(np.float32),
            },
            "actions": {
                "move": rng.normal(size=(length, 2)).astype(np.float32),
                "keyboard": {"jump": rng.random(length) > 0.5},
            },
            "rewards": rng.normal(size=length).astype(np.float32),
            "terminated": True,
        }

    return Dataset.from_episodes([episode(n) for n in (3, 9, 12)])


@pytest.fixture
def bare() -> Dataset:
    episode = {
        "initial_observation": np.zeros(4, dtype=np.float32),
        "observations": np.arange(40, dtype=np.float32).reshape(10, 4),
        "actions": np.arange(10, dtype=np.int64),
        "rewards": np.ones(10, dtype=np.float32),
        "terminated": True,
    }
    return Dataset.from_episodes([episode])


def test_map_keeps_obs_and_next_obs_on_one_storage(bare: Dataset) -> None:
    batch = bare.segment_stream(sequence_length=4, batch_size=8, seed=0, prefetch=0).sample()
    tensors = batch.map(lambda x: torch.as_tensor(x))
    assert isinstance(tensors.obs, torch.Tensor)
    assert storage(tensors.obs) == storage(tensors.next_obs) == storage(tensors.all_obs)
    assert torch.equal(tensors.obs[:, 1:], tensors.next_obs[:, :-1])
    np.testing.assert_array_equal(tensors.next_obs.numpy(), batch.next_obs)
    np.testing.assert_array_equal(tensors.mask.numpy(), batch.mask)
    # a copy per buffer (what a device transfer does) keeps the sharing, unlike the source
    copied = batch.map(lambda x: torch.as_tensor(x).clone())
    assert storage(copied.obs) == storage(copied.next_obs)
    assert storage(copied.obs) != storage(tensors.obs)
    np.testing.assert_array_equal(copied.obs.numpy(), batch.obs)


@pytest.mark.parametrize("device", DEVICES)
def test_map_keeps_the_context_target_boundary_shared(bare: Dataset, device: str) -> None:
    stream = bare.segment_stream(
        context_length=2, target_length=3, batch_size=4, seed=0, prefetch=0
    )
    moved = stream.sample().map(lambda x: torch.as_tensor(x).to(device))
    target, context = moved.target, moved.context
    assert torch.equal(target.obs[:, 0], context.next_obs[:, -1])
    assert storage(target.obs) == storage(context.next_obs) == storage(moved.obs)
    assert target.obs.device.type == device


@pytest.mark.parametrize("device", DEVICES)
def test_batch_to_tensordict_nested_roles(dataset: Dataset, device: str) -> None:
    from episodata.utils import batch_to_tensordict

    batch = dataset.segment_stream(sequence_length=5, batch_size=6, seed=1, prefetch=0).sample()
    td = batch_to_tensordict(batch, device=device)
    assert isinstance(td, tensordict.TensorDict)
    assert td.batch_size == torch.Size([6, 5])
    assert td.device.type == device
    assert isinstance(td["observation"], tensordict.TensorDict)
    assert isinstance(td["action"], tensordict.TensorDict)
    assert isinstance(td["action", "keyboard"], tensordict.TensorDict)
    assert td["observation", "camera"].shape == (6, 5, 3, 4, 4)
    assert td["observation", "camera"].dtype == torch.uint8
    assert td["reward"].shape == (6, 5)
    for key in ("camera", "state"):
        assert storage(td["observation", key]) == storage(td["next_observation", key])
        np.testing.assert_array_equal(td["observation", key].cpu().numpy(), batch.obs[key])
        np.testing.assert_array_equal(
            td["next_observation", key].cpu().numpy(), batch.next_obs[key]
        )
    np.testing.assert_array_equal(
        td["action", "keyboard", "jump"].cpu().numpy(), batch.action.keyboard.jump
    )
    np.testing.assert_array_equal(td["action", "move"].cpu().numpy(), batch.action.move)
    np.testing.assert_array_equal(td["reward"].cpu().numpy(), batch.reward)
    for flag in ("mask", "terminated", "truncated"):
        assert td[flag].dtype == torch.bool
        np.testing.assert_array_equal(td[flag].cpu().numpy(), getattr(batch, flag))


def test_batch_to_tensordict_of_transitions(dataset: Dataset) -> None:
    from episodata.utils import batch_to_tensordict

    transitions = dataset.sample_transitions(batch_size=32, seed=2)
    td = batch_to_tensordict(transitions, device="cpu")
    assert td.batch_size == torch.Size([32])
    assert td["observation", "state"].shape == (32, 5)
    assert storage(td["observation", "state"]) == storage(td["next_observation", "state"])
    np.testing.assert_array_equal(
        td["next_observation", "state"].numpy(), transitions.next_obs.state
    )
    assert td["mask"].all()


def test_the_facade_name_is_the_plugin_function() -> None:
    import episodata_torch
    from episodata.utils import batch_to_tensordict

    assert batch_to_tensordict is episodata_torch.batch_to_tensordict


def test_missing_torch_is_a_clear_error() -> None:
    script = textwrap.dedent(
        """
        import sys
        sys.modules["torch"] = None  # as if torch were not installed
        import numpy as np
        from episodata import Dataset, MissingDependencyError
        from episodata.utils import batch_to_tensordict
        dataset = Dataset.from_episodes([{
            "initial_observation": np.zeros(2, dtype=np.float32),
            "observations": np.ones((3, 2), dtype=np.float32),
            "actions": np.zeros(3, dtype=np.int64),
            "rewards": np.zeros(3, dtype=np.float32),
        }])
        batch = dataset.segment_stream(sequence_length=2, batch_size=2, prefetch=0).sample()
        try:
            batch_to_tensordict(batch)
        except MissingDependencyError as err:
            print("ERROR:", err)
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=False, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert "ERROR: batch_to_tensordict needs torch and tensordict (torch is missing)" in (
        result.stdout
    )
    assert 'pip install "episodata[torch]"' in result.stdout
    assert issubclass(MissingDependencyError, ImportError)


# -- no tensor shares memory with the dataset ----------------------------------------------


def frames_episode(k: int, length: int) -> dict[str, Any]:
    """Distinct values per episode ``k`` (an independent oracle for later reads)."""
    obs = (np.arange((length + 1) * 6, dtype=np.float32).reshape(length + 1, 6) + 1000 * k) / 7
    return {
        "initial_observation": obs[0],
        "observations": obs[1:],
        "actions": np.arange(length, dtype=np.int64) + 100 * k,
        "rewards": np.full(length, k, dtype=np.float32),
        "terminated": True,
    }


@pytest.fixture(params=["memory", "npz_directory"])
def stored(request: Any, tmp_path: Any) -> tuple[Dataset, list[dict[str, Any]]]:
    """A memory or npz dataset of 3 finalized episodes and 1 ongoing one, with its oracle."""
    episodes = [frames_episode(k, n) for k, n in enumerate((6, 9, 4))]
    path = None if request.param == "memory" else tmp_path / "ds"
    dataset = Dataset.from_episodes(episodes, path=path, backend=request.param)
    ongoing = frames_episode(3, 3)
    writer = dataset.new_episode(ongoing["initial_observation"])
    for t in range(3):
        writer.add_step(
            {
                "observation": ongoing["observations"][t],
                "action": ongoing["actions"][t],
                "reward": ongoing["rewards"][t],
            }
        )
    ongoing["terminated"] = False
    return dataset, [*episodes, ongoing]


def assert_unchanged(dataset: Dataset, episodes: list[dict[str, Any]]) -> None:
    for index, want in enumerate(episodes):
        got = dataset.episode(index).read()
        np.testing.assert_array_equal(got.obs[0], want["initial_observation"])
        np.testing.assert_array_equal(got.next_obs, want["observations"])
        np.testing.assert_array_equal(got.action, want["actions"])
        np.testing.assert_array_equal(got.reward, want["rewards"])


def test_in_place_ops_on_a_tensordict_of_a_read_leave_the_dataset_alone(stored: Any) -> None:
    from episodata.utils import batch_to_tensordict

    dataset, episodes = stored
    reads = [
        dataset.episode(1).read(),  # a whole finalized episode: views of storage
        dataset.episode(0).segment(2, 5),
        dataset.episode(3).read(),  # the ongoing episode's own buffers
        dataset.episode(2).read(fields="observation"),
    ]
    for read in reads:
        assert not read.all_obs.flags.writeable  # a view of storage, so NumPy refuses writes
        with pytest.raises(ValueError, match="read-only"):
            read.obs += 1
        td = batch_to_tensordict(read)
        assert storage(td["observation"]) == storage(
            td["next_observation"]
        )  # still one L + 1 buffer
        for key in ("observation", "action", "reward"):
            tensor = td.get(key, None)  # a read of some fields lacks the others
            if tensor is not None:
                tensor.add_(1)
        assert torch.equal(td["observation"][1:], td["next_observation"][:-1])
    assert_unchanged(dataset, episodes)
    dataset.close()


def test_tensordict_of_a_sampled_batch_wraps_its_arrays_without_a_copy(stored: Any) -> None:
    from episodata.utils import batch_to_tensordict

    dataset, episodes = stored
    stream = dataset.segment_stream(sequence_length=3, batch_size=16, seed=0, prefetch=0)
    batch = stream.sample()
    td = batch_to_tensordict(batch)
    # a gathered batch is a private copy already: its tensors are its own arrays
    assert batch.buffers["observation/observation"].flags.writeable
    assert storage(td["observation"]) == batch.buffers["observation/observation"].ctypes.data
    assert storage(td["action"]) == batch.buffers["action/action"].ctypes.data
    td["observation"].add_(1)
    assert_unchanged(dataset, episodes)
    dataset.close()


def test_torch_as_tensor_of_a_storage_view_shares_it(stored: Any) -> None:
    # what a user calling torch directly gets (documented in getting_started.md): torch
    # cannot make a tensor read-only, so it shares a read-only array's memory (and warns
    # once per process: see the slow test below); torch.tensor copies
    dataset, _ = stored
    view = dataset.episode(1).read().obs
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "The given NumPy array is not writable")
        shared = torch.as_tensor(view)
    assert shared.data_ptr() == view.ctypes.data
    assert torch.tensor(view).data_ptr() != view.ctypes.data
    dataset.close()


@pytest.mark.slow  # a fresh interpreter importing torch: 5 s of CPU
def test_torch_as_tensor_of_a_storage_view_warns() -> None:
    # torch warns only once per process, hence the fresh interpreter
    script = textwrap.dedent(
        """
        import warnings
        import numpy as np
        import torch
        from episodata import Dataset
        dataset = Dataset.from_episodes([{
            "initial_observation": np.zeros(2, dtype=np.float32),
            "observations": np.ones((3, 2), dtype=np.float32),
            "actions": np.zeros(3, dtype=np.int64),
            "rewards": np.zeros(3, dtype=np.float32),
        }])
        view = dataset.episode(0).read().obs
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            shared = torch.as_tensor(view)
        print("WARNED:", [str(w.message).split(",")[0] for w in caught])
        print("SHARED:", shared.data_ptr() == view.ctypes.data)
        print("COPIED:", torch.tensor(view).data_ptr() != view.ctypes.data)
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=False, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert "WARNED: ['The given NumPy array is not writable']" in result.stdout
    assert "SHARED: True" in result.stdout
    assert "COPIED: True" in result.stdout
