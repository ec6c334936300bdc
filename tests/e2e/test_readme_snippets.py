"""The README's snippets, run as written, with the shapes its comments state asserted.

Deviations from the README text, each marked where it happens: the memory backend
instead of ``path="cartpole"``, seeds for a deterministic run, and small real arrays
where the README names ``frame0``, ``frames`` and so on. The ``segment_stream`` parts
are not covered here.
"""

from __future__ import annotations

import numpy as np
import pytest


def test_quick_start() -> None:
    pytest.importorskip("gymnasium")

    import gymnasium as gym

    from episodata import Dataset
    from episodata.utils import schema_from_gym_spaces

    env = gym.make("CartPole-v1")
    schema = schema_from_gym_spaces(env.observation_space, env.action_space)
    dataset = Dataset.create(schema)  # README: path="cartpole"

    obs, _ = env.reset(seed=0)  # README: env.reset()
    env.action_space.seed(0)
    writer = dataset.new_episode(obs)

    while True:
        action = env.action_space.sample()
        obs, reward, terminated, truncated, _ = env.step(action)
        writer.add_step(
            {
                "observations": obs,
                "actions": action,
                "rewards": reward,
                "terminated": terminated,
                "truncated": truncated,
            }
        )
        if terminated or truncated:  # the writer is already finalized
            break

    segment = dataset.episode(0).read()

    T = len(dataset.episode(0))
    assert T > 0
    assert segment.obs.shape == (T, 4)  # observation where each action was taken: [T, 4]
    assert segment.action.shape == (T,)  # action taken: [T]
    assert segment.reward.shape == (T,)  # reward received: [T]
    assert segment.next_obs.shape == (T, 4)  # observation produced: [T, 4]
    assert segment.terminated.shape == (T,)  # terminal flag per transition: [T]
    assert writer.closed  # "the writer is already finalized"
    # the loop's last observation is the last next_obs; the flag sits on that transition
    np.testing.assert_array_equal(segment.next_obs[-1], obs, strict=True)
    assert segment.terminated[-1] == terminated
    assert segment.truncated[-1] == truncated
    assert not segment.terminated[:-1].any()


def test_the_data_model() -> None:
    from episodata import Dataset

    T = 6
    frame0 = np.full((3, 16, 16), 0, dtype=np.uint8)
    frames = np.stack([np.full((3, 16, 16), t + 1, dtype=np.uint8) for t in range(T)])
    state0 = np.array([0.0, 0.0], dtype=np.float32)
    states = np.array([[t + 1, -(t + 1)] for t in range(T)], dtype=np.float32)
    moves = np.array([[t, 2 * t] for t in range(T)], dtype=np.float32)
    camera_actions = np.array([[-t, t] for t in range(T)], dtype=np.int64)
    jumps = np.array([t % 3 == 0 for t in range(T)])
    rewards = np.arange(T, dtype=np.float32)

    episode = {
        "initial_observation": {"camera": frame0, "state": state0},
        "observations": {"camera": frames, "state": states},
        # README: {"move": moves, "camera": camera_actions}; its keyboard/jump example
        # needs a nested action too
        "actions": {"move": moves, "camera": camera_actions, "keyboard": {"jump": jumps}},
        "rewards": rewards,
    }
    dataset = Dataset.from_episodes([episode])
    segment = dataset.episode(0).read()

    assert segment.obs.camera.shape == (T, 3, 16, 16)
    assert segment.action.move.shape == (T, 2)
    assert segment.obs["camera"] is segment.obs.camera
    np.testing.assert_array_equal(segment.obs.camera[0], frame0, strict=True)
    np.testing.assert_array_equal(segment.action.camera, camera_actions, strict=True)

    # Nested dicts use stable /-separated keys; attribute access rebuilds the hierarchy
    assert "action/keyboard/jump" in dataset.schema
    np.testing.assert_array_equal(segment.action["keyboard/jump"], jumps, strict=True)
    np.testing.assert_array_equal(segment.action.keyboard.jump, jumps, strict=True)

    # A role created from one array unwraps to that array
    assert isinstance(segment.reward, np.ndarray)
    np.testing.assert_array_equal(segment.reward, rewards, strict=True)

    # the table: a segment of L transitions
    L = 4
    window = dataset.episode(0).segment(1, 1 + L)
    for name in ("observation", "obs", "next_observation", "next_obs"):
        assert getattr(window, name).state.shape == (L, 2)
    assert window.action.move.shape == (L, 2)
    assert window.reward.shape == (L,)
    for name in ("terminated", "truncated", "mask"):
        assert getattr(window, name).shape == (L,)
    assert window.all_observations.camera.shape == (L + 1, 3, 16, 16)
    assert window.all_obs.state.shape == (L + 1, 2)
    # observation and next_observation are overlapping views of one L + 1 row buffer
    assert np.shares_memory(window.observation.camera, window.next_observation.camera)
    np.testing.assert_array_equal(window.obs.state, states[:L], strict=True)
    np.testing.assert_array_equal(window.next_obs.state, states[1 : L + 1], strict=True)


def test_declare_a_schema_directly() -> None:
    from episodata import Dataset, DatasetSchema, FieldSpec

    schema = DatasetSchema(
        [
            FieldSpec("camera", shape=(3, 64, 64), dtype="uint8", layout="CHW"),
            FieldSpec("state", shape=(7,), dtype="float32"),
            FieldSpec("action", shape=(4,), dtype="float32", role="action"),
            FieldSpec("reward", shape=(), dtype="float32", role="reward"),
        ]
    )
    dataset = Dataset.create(schema)

    assert dataset.schema == schema
    assert len(dataset) == 0
    assert [(f.role, f.key, f.shape, f.dtype) for f in dataset.schema] == [
        ("observation", "camera", (3, 64, 64), "uint8"),
        ("observation", "state", (7,), "float32"),
        ("action", "action", (4,), "float32"),
        ("reward", "reward", (), "float32"),
    ]
    assert dataset.schema.field("observation", "camera").layout == "CHW"

    # collecting into it: the declared shapes come back with a time axis
    def observation(t: int) -> dict[str, np.ndarray]:
        return {
            "camera": np.full((3, 64, 64), t, dtype=np.uint8),
            "state": np.full(7, t, dtype=np.float32),
        }

    writer = dataset.new_episode(observation(0))
    for t in range(3):
        writer.add_step(
            {
                "observations": observation(t + 1),
                "actions": np.full(4, t, dtype=np.float32),
                "rewards": np.float32(t),
                "terminated": t == 2,
            }
        )
    segment = dataset.episode(0).read()
    assert segment.obs.camera.shape == (3, 3, 64, 64)
    assert segment.obs.state.shape == (3, 7)
    assert segment.action.shape == (3, 4)  # one array: the action role unwraps
    assert segment.reward.shape == (3,)
    np.testing.assert_array_equal(segment.next_obs.state[:, 0], [1, 2, 3], strict=False)
    # the schema is authoritative: a frame of another shape is refused
    with pytest.raises(ValueError, match=r"camera.*expected shape \(3, 64, 64\)"):
        dataset.new_episode(
            {"camera": np.zeros((64, 64, 3), dtype=np.uint8), "state": np.zeros(7, np.float32)}
        )


def test_import_existing_episodes() -> None:
    import numpy as np

    from episodata import Dataset

    episode = {
        "initial_observation": np.zeros(4, dtype=np.float32),
        "observations": np.zeros((100, 4), dtype=np.float32),
        "actions": np.zeros(100, dtype=np.int64),
        "rewards": np.zeros(100, dtype=np.float32),
        "terminated": True,
    }

    dataset = Dataset.from_episodes([episode])  # memory

    assert dataset.manifest.backend == "memory"
    # The schema is inferred from the first episode
    assert [(f.role, f.key, f.shape, f.dtype) for f in dataset.schema] == [
        ("observation", "observation", (4,), "float32"),
        ("action", "action", (), "int64"),
        ("reward", "reward", (), "float32"),
    ]
    stored = dataset.episode(0)
    assert len(stored) == 100  # one entry per environment step: 100 transitions
    assert (stored.terminated, stored.truncated, stored.ongoing) == (True, False, False)
    segment = stored.read()
    assert segment.obs.shape == (100, 4)
    assert segment.all_obs.shape == (101, 4)
    assert segment.action.shape == (100,)
    assert segment.terminated.sum() == 1
    assert segment.terminated[-1]

    # ... unless supplied explicitly
    explicit = Dataset.from_episodes([episode], schema=dataset.schema)
    assert explicit.schema == dataset.schema
    assert len(explicit.episode(0)) == 100
