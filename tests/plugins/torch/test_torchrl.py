"""``batch_to_tensordict`` options and TorchRL itself: replay buffers and a real collector.

Oracles: the batch's own NumPy arrays (the conversion must not change a value), TorchRL's
replay buffers and collectors (the layout must be what they take and give), and the
values the collector reported (an episode written from them must read back equal).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from episodata import Dataset
from episodata_core.errors import SchemaError

torch = pytest.importorskip("torch")
tensordict = pytest.importorskip("tensordict")


def storage(tensor: Any) -> int:
    return int(tensor.untyped_storage().data_ptr())


@pytest.fixture
def dataset() -> Dataset:
    rng = np.random.default_rng(0)

    def episode(length: int, terminated: bool) -> dict[str, Any]:
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
            "initial_info": {"level": np.int32(-1)},
            "infos": {"level": np.arange(length, dtype=np.int32)},
            "terminated": terminated,
            "truncated": not terminated,
        }

    return Dataset.from_episodes([episode(n, n % 2 == 0) for n in (3, 9, 12, 4)])


def _batch(dataset: Dataset) -> Any:
    return dataset.segment_stream(sequence_length=5, batch_size=6, seed=1, prefetch=0).sample()


def test_the_keys_are_the_02_names(dataset: Dataset) -> None:
    from episodata.utils import batch_to_tensordict

    td = batch_to_tensordict(_batch(dataset))
    assert set(td.keys()) == {
        "observation",
        "next_observation",
        "action",
        "reward",
        "info",
        "next_info",
        "terminated",
        "truncated",
        "mask",
    }
    assert "obs" not in td
    assert "next_obs" not in td


def test_include_all_observations(dataset: Dataset) -> None:
    from episodata.utils import batch_to_tensordict

    batch = _batch(dataset)
    td = batch_to_tensordict(batch, include_all_observations=True)
    assert td.batch_size == torch.Size([6])
    assert td["all_observations", "state"].shape == (6, 6, 5)
    np.testing.assert_array_equal(td["all_observations", "camera"].numpy(), batch.all_obs.camera)
    np.testing.assert_array_equal(td["all_infos", "level"].numpy(), batch.all_infos.level)
    assert storage(td["all_observations", "state"]) == storage(td["observation", "state"])
    np.testing.assert_array_equal(td["next_observation", "state"].numpy(), batch.next_obs.state)


@pytest.mark.parametrize("alignment", ["action_in", "action_out", "action-in", "action-out"])
def test_alignment_gives_l_plus_1_rows_with_one_placeholder(
    dataset: Dataset, alignment: str
) -> None:
    from episodata.utils import batch_to_tensordict

    batch = _batch(dataset)
    td = batch_to_tensordict(batch, alignment=alignment)
    assert td.batch_size == torch.Size([6, 6])
    assert "next_observation" not in td
    np.testing.assert_array_equal(td["observation", "state"].numpy(), batch.all_obs.state)
    np.testing.assert_array_equal(td["info", "level"].numpy(), batch.all_infos.level)
    real = slice(1, None) if alignment.replace("-", "_") == "action_in" else slice(None, -1)
    placeholder = 0 if alignment.replace("-", "_") == "action_in" else -1
    for name, want in (
        (("action", "move"), batch.action.move),
        (("action", "keyboard", "jump"), batch.action.keyboard.jump),
        (("reward",), batch.reward),
        (("terminated",), batch.terminated),
        (("truncated",), batch.truncated),
        (("mask",), batch.mask),
    ):
        got = td[name].numpy()
        np.testing.assert_array_equal(got[:, real], want, err_msg=str(name))
        assert not got[:, placeholder].any(), name


def test_bad_option_combinations_are_refused(dataset: Dataset) -> None:
    from episodata.utils import batch_to_tensordict

    batch = _batch(dataset)
    with pytest.raises(SchemaError, match="cannot be combined with include_all_observations"):
        batch_to_tensordict(batch, include_all_observations=True, alignment="action_in")
    with pytest.raises(SchemaError, match="alignment must be 'action_in' or 'action_out'"):
        batch_to_tensordict(batch, alignment="sideways")
    with pytest.raises(SchemaError, match="include_all_observations applies to layout='flat'"):
        batch_to_tensordict(batch, include_all_observations=True, layout="torchrl")
    with pytest.raises(SchemaError, match="layout must be 'flat' or 'torchrl'"):
        batch_to_tensordict(batch, layout="rllib")  # type: ignore[arg-type]
    transitions = dataset.sample_transitions(batch_size=4, seed=0)
    with pytest.raises(SchemaError, match="needs a time axis"):
        batch_to_tensordict(transitions, alignment="action_out")
    # transitions keep their [B]: all_observations holds the two rows each one touches
    td = batch_to_tensordict(transitions, include_all_observations=True)
    assert td.batch_size == torch.Size([4])
    np.testing.assert_array_equal(
        td["all_observations", "state"].numpy(), transitions.all_obs.state
    )
    assert td["all_observations", "state"].shape == (4, 2, 5)


def test_torchrl_layout_nests_under_next(dataset: Dataset) -> None:
    from episodata.utils import batch_to_tensordict

    batch = _batch(dataset)
    td = batch_to_tensordict(batch, layout="torchrl")
    assert td.batch_size == torch.Size([6, 5])
    np.testing.assert_array_equal(td["observation", "state"].numpy(), batch.obs.state)
    np.testing.assert_array_equal(td["next", "observation", "state"].numpy(), batch.next_obs.state)
    assert storage(td["observation", "camera"]) == storage(td["next", "observation", "camera"])
    np.testing.assert_array_equal(td["next", "reward"].numpy(), batch.reward[..., None])
    np.testing.assert_array_equal(td["next", "terminated"].numpy(), batch.terminated[..., None])
    np.testing.assert_array_equal(td["next", "truncated"].numpy(), batch.truncated[..., None])
    np.testing.assert_array_equal(
        td["next", "done"].numpy(), (batch.terminated | batch.truncated)[..., None]
    )
    assert td["next", "done"].any(), "the batch holds episode ends"
    assert not td["done"].any()
    np.testing.assert_array_equal(td["next", "info", "level"].numpy(), batch.next_info.level)


def test_a_torchrl_batch_goes_into_replay_buffers_as_is(dataset: Dataset) -> None:
    pytest.importorskip("torchrl")
    from torchrl.data import LazyTensorStorage, ReplayBuffer, TensorDictReplayBuffer

    from episodata.utils import batch_to_tensordict

    batch = _batch(dataset)
    td = batch_to_tensordict(batch, layout="torchrl")
    flat = td.reshape(-1)  # one transition per entry, as TorchRL stores them
    for buffer in (
        ReplayBuffer(storage=LazyTensorStorage(64)),
        TensorDictReplayBuffer(storage=LazyTensorStorage(64), batch_size=8),
    ):
        indices = buffer.extend(flat)
        assert len(buffer) == 30
        stored = buffer[indices]
        for key in (("next", "observation", "state"), ("action", "move"), ("next", "reward")):
            torch.testing.assert_close(stored[key], flat[key])
        sample = buffer.sample(8)
        assert sample.batch_size == torch.Size([8])
        # each sampled transition is one of the batch's, every field of it intact
        state = flat["observation", "state"]
        for row in range(8):
            match = torch.nonzero((state == sample["observation", "state"][row]).all(-1))
            assert match.numel() >= 1
            source = flat[int(match[0, 0])]
            for key in (("next", "observation", "camera"), ("action", "keyboard", "jump")):
                assert torch.equal(sample[key][row], source[key]), key
    # a whole [B, L] batch goes into a buffer of segments as it is, too
    segments = ReplayBuffer(storage=LazyTensorStorage(30, ndim=2))
    segments.extend(td)
    assert len(segments) == 30
    for key in (("next", "reward"), ("next", "observation", "camera"), ("next", "done")):
        torch.testing.assert_close(segments[:][key].reshape(td[key].shape), td[key])


# TorchRL 0.14's own collector warns about its own default weight updaters
@pytest.mark.filterwarnings("ignore:Creating .*WeightUpdater which inherits:DeprecationWarning")
@pytest.mark.parametrize("env_name", ["CartPole-v1", "Pendulum-v1"])
def test_collector_output_round_trips_through_a_dataset(env_name: str) -> None:
    pytest.importorskip("torchrl")
    pytest.importorskip("gymnasium")
    import torchrl.collectors
    from torchrl.envs import GymEnv

    from episodata.utils import batch_to_tensordict, tensordict_to_episodes

    env = GymEnv(env_name)
    env.set_seed(0)
    # TorchRL 0.14 names its single-process collector Collector (SyncDataCollector before)
    collector_cls = getattr(torchrl.collectors, "Collector", None) or (
        torchrl.collectors.SyncDataCollector
    )
    collector = collector_cls(
        env, policy=None, frames_per_batch=300, total_frames=300, max_frames_per_traj=60
    )
    try:
        td = next(iter(collector))
    finally:
        collector.shutdown()
    assert td.batch_size == torch.Size([300])
    episodes = tensordict_to_episodes(td)
    dataset = Dataset.from_episodes(episodes)
    # the oracle: the collector's own tensors, cut at its done flags
    done = td["next", "done"].reshape(-1).numpy()
    ends = [*np.flatnonzero(done).tolist()]
    if not ends or ends[-1] != 299:
        ends.append(299)
    assert dataset.num_episodes == len(ends)
    start = 0
    for index, end in enumerate(ends):
        read = dataset.episode(index).read()
        np.testing.assert_array_equal(read.obs, td["observation"][start : end + 1].numpy())
        np.testing.assert_array_equal(
            read.next_obs, td["next", "observation"][start : end + 1].numpy()
        )
        np.testing.assert_array_equal(read.action, td["action"][start : end + 1].numpy())
        np.testing.assert_array_equal(
            read.reward, td["next", "reward"][start : end + 1].reshape(-1).numpy()
        )
        episode = dataset.episode(index)
        assert episode.terminated == bool(td["next", "terminated"][end])
        assert episode.truncated == bool(td["next", "truncated"][end])
        start = end + 1
    # and back: a segment of the dataset in TorchRL's layout equals the collector's steps
    first = batch_to_tensordict(dataset.episode(0).read(), layout="torchrl")
    steps = ends[0] + 1
    for key in ("observation", "action", ("next", "observation"), ("next", "reward")):
        torch.testing.assert_close(first[key], td[key][:steps], msg=str(key))
    torch.testing.assert_close(first["next", "done"], td["next", "done"][:steps])


def test_an_episode_in_torchrl_layout_round_trips_with_nested_fields(dataset: Dataset) -> None:
    from episodata.utils import batch_to_tensordict, tensordict_to_episodes

    for index in range(dataset.num_episodes):
        want = dataset.episode(index).read()
        td = batch_to_tensordict(want, layout="torchrl")
        (episode,) = tensordict_to_episodes(td)
        assert sorted(episode["observations"]) == ["camera", "state"]
        assert sorted(episode["actions"]) == ["keyboard/jump", "move"]
        got = Dataset.from_episodes([episode]).episode(0).read()
        for key in ("camera", "state"):
            np.testing.assert_array_equal(got.all_obs[key], want.all_obs[key])
        np.testing.assert_array_equal(got.action.move, want.action.move)
        np.testing.assert_array_equal(got.action.keyboard.jump, want.action.keyboard.jump)
        np.testing.assert_array_equal(got.reward, want.reward)
        assert (got.terminated[-1], got.truncated[-1]) == (
            want.terminated[-1],
            want.truncated[-1],
        )


def test_episodes_of_several_environments_and_trajectory_ids() -> None:
    from episodata.utils import tensordict_to_episodes

    # [E=2, T=5] in TorchRL's layout; env 0 ends after step 2, env 1 runs on
    obs = torch.arange(10, dtype=torch.float32).reshape(2, 5, 1)
    done = torch.zeros(2, 5, 1, dtype=torch.bool)
    done[0, 2] = True
    td = tensordict.TensorDict(
        {
            "observation": obs,
            "action": torch.arange(10).reshape(2, 5),
            "next": tensordict.TensorDict(
                {
                    "observation": obs + 100,
                    "reward": torch.ones(2, 5, 1),
                    "done": done,
                    "terminated": done.clone(),
                    "truncated": torch.zeros_like(done),
                },
                batch_size=[2, 5],
            ),
        },
        batch_size=[2, 5],
    )
    episodes = tensordict_to_episodes(td)
    assert [len(e["actions"]) for e in episodes] == [3, 2, 5]
    assert [e["terminated"] for e in episodes] == [True, False, False]
    np.testing.assert_array_equal(episodes[1]["initial_observation"], [3.0])
    np.testing.assert_array_equal(episodes[2]["observations"][:, 0], np.arange(5, 10) + 100)
    assert [len(e["actions"]) for e in tensordict_to_episodes(td, drop_incomplete=True)] == [3]
    with pytest.raises(SchemaError, match="no 'next' entry"):
        tensordict_to_episodes(td.exclude("next"))
