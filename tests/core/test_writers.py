"""Step writers against real Gymnasium environments, with plain Python lists as the oracle.

Each test records what the environment returned (observations, actions, rewards,
flags) in lists of its own, then reads the dataset back and compares. The vector tests
rebuild every sub-environment's true episodes from the raw ``envs.step`` outputs,
following Gymnasium 1.x's documented autoreset rules, independently of the writer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

gym = pytest.importorskip("gymnasium")
from episodata.utils import schema_from_gym_spaces
from episodata_core import Dataset, DatasetSchema, FieldSpec
from episodata_core.errors import DatasetStateError, SchemaError

OBS = np.float32
STEPS = 300


@dataclass
class Recorded:
    """One episode as the environment produced it: T + 1 observations, T actions."""

    start: tuple[int, int]  # (vector step of the reset, sub-env), for ordering
    obs: list[np.ndarray]
    actions: list[int] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    infos: list[dict[str, Any]] = field(default_factory=list)
    terminated: bool = False
    truncated: bool = False
    ongoing: bool = True

    def end(self, terminated: Any, truncated: Any) -> None:
        self.terminated, self.truncated, self.ongoing = bool(terminated), bool(truncated), False


def assert_matches(dataset: Dataset, index: int, recorded: Recorded) -> None:
    """Episode ``index`` reads back exactly as recorded."""
    episode = dataset.episode(index)
    length = len(recorded.actions)
    assert len(episode) == length
    assert (episode.terminated, episode.truncated, episode.ongoing) == (
        recorded.terminated,
        recorded.truncated,
        recorded.ongoing,
    )
    all_obs = np.array(recorded.obs, dtype=OBS)
    segment = episode.read()
    if isinstance(segment.all_obs, np.ndarray):
        np.testing.assert_array_equal(segment.all_obs, all_obs, strict=True)
        np.testing.assert_array_equal(segment.obs, all_obs[:-1], strict=True)
        np.testing.assert_array_equal(segment.next_obs, all_obs[1:], strict=True)
    else:  # DictObs: the recorded observations are pos and vel side by side
        for name, columns in (("pos", slice(0, 2)), ("vel", slice(2, 4))):
            rows = all_obs[:, columns].reshape(-1, 2)
            np.testing.assert_array_equal(segment.all_obs[name], rows, strict=True)
            np.testing.assert_array_equal(segment.obs[name], rows[:-1], strict=True)
            np.testing.assert_array_equal(segment.next_obs[name], rows[1:], strict=True)
    np.testing.assert_array_equal(
        segment.action, np.array(recorded.actions, dtype=np.int64), strict=True
    )
    np.testing.assert_array_equal(
        segment.reward, np.array(recorded.rewards, dtype=np.float32), strict=True
    )
    last = [False] * max(length - 1, 0)
    expected_terminated = [*last, recorded.terminated] if length else []
    expected_truncated = [*last, recorded.truncated] if length else []
    np.testing.assert_array_equal(segment.terminated, np.array(expected_terminated, dtype=bool))
    np.testing.assert_array_equal(segment.truncated, np.array(expected_truncated, dtype=bool))
    assert segment.mask.all()


def cartpole_schema() -> DatasetSchema:
    env = gym.make("CartPole-v1")
    return schema_from_gym_spaces(env.observation_space, env.action_space)


def step_dict(obs: Any, action: Any, reward: Any, **flags: Any) -> dict[str, Any]:
    return {"observations": obs, "actions": action, "rewards": reward, **flags}


def made_up_obs(t: int) -> np.ndarray:
    return np.array([t, t + 0.5, -t, 100 + t], dtype=OBS)


# -- the single-episode writer ----------------------------------------------------------


def run_quick_start(env: Any, dataset: Dataset, seed: int | None) -> Recorded:
    """The README's collection loop, recording what the env returns on the side."""
    obs, _ = env.reset(seed=seed)
    recorded = Recorded(start=(0, 0), obs=[obs.copy()])
    writer = dataset.new_episode(obs)

    while True:
        action = env.action_space.sample()
        obs, reward, terminated, truncated, _ = env.step(action)
        recorded.obs.append(obs.copy())
        recorded.actions.append(int(action))
        recorded.rewards.append(float(reward))
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
            recorded.end(terminated, truncated)
            break
    assert writer.closed
    return recorded


def test_quick_start_loop_with_real_cartpole() -> None:
    env = gym.make("CartPole-v1")
    env.action_space.seed(0)
    dataset = Dataset.create(schema_from_gym_spaces(env.observation_space, env.action_space))
    recorded = run_quick_start(env, dataset, seed=0)

    segment = dataset.episode(0).read()
    length = len(recorded.actions)
    assert length > 1
    assert segment.obs.shape == (length, 4)
    assert segment.action.shape == (length,)
    assert segment.reward.shape == (length,)
    assert segment.next_obs.shape == (length, 4)
    assert segment.terminated.shape == (length,)
    np.testing.assert_array_equal(segment.obs[0], recorded.obs[0], strict=True)
    for t in range(length - 1):
        np.testing.assert_array_equal(segment.next_obs[t], segment.obs[t + 1], strict=True)
    # a random CartPole policy falls over long before the 500-step time limit
    assert recorded.terminated
    assert segment.terminated[-1]
    assert not segment.terminated[:-1].any()
    assert_matches(dataset, 0, recorded)


def test_quick_start_loop_over_several_episodes_including_a_truncation() -> None:
    env = gym.make("CartPole-v1", max_episode_steps=20)
    env.action_space.seed(3)
    dataset = Dataset.create(schema_from_gym_spaces(env.observation_space, env.action_space))
    recordings = [run_quick_start(env, dataset, seed=3 if i == 0 else None) for i in range(10)]
    assert {r.truncated for r in recordings} == {False, True}  # both kinds of ending happen
    assert {r.terminated for r in recordings} == {False, True}
    assert dataset.num_episodes == 10
    assert dataset.num_steps == sum(len(r.actions) for r in recordings)
    for index, recorded in enumerate(recordings):
        assert_matches(dataset, index, recorded)


def test_add_steps_writes_a_bulk_of_steps() -> None:
    dataset = Dataset.create(cartpole_schema())
    recorded = Recorded(start=(0, 0), obs=[made_up_obs(0)])
    writer = dataset.new_episode(made_up_obs(0))
    for lo, hi in ((0, 3), (3, 4), (4, 9)):
        count = hi - lo
        obs = np.array([made_up_obs(t + 1) for t in range(lo, hi)], dtype=OBS)
        actions = np.array([t % 2 for t in range(lo, hi)], dtype=np.int64)
        rewards = np.array([t * 0.5 for t in range(lo, hi)], dtype=np.float32)
        terminated = np.zeros(count, dtype=bool)
        terminated[-1] = hi == 9
        writer.add_steps(step_dict(obs, actions, rewards, terminated=terminated))
        recorded.obs.extend(obs)
        recorded.actions.extend(actions.tolist())
        recorded.rewards.extend(rewards.tolist())
        assert len(dataset.episode(0)) == hi
    recorded.end(terminated=True, truncated=False)
    assert writer.closed
    assert_matches(dataset, 0, recorded)


def test_add_steps_with_a_scalar_flag_and_an_early_flag_rejected() -> None:
    dataset = Dataset.create(cartpole_schema())
    writer = dataset.new_episode(made_up_obs(0))
    obs = np.array([made_up_obs(t) for t in (1, 2, 3)], dtype=OBS)
    with pytest.raises(SchemaError, match=r"'truncated' is True at entry 0 before the last of 3"):
        writer.add_steps(
            step_dict(obs, np.zeros(3, np.int64), np.ones(3), truncated=[True, False, False])
        )
    assert len(dataset.episode(0)) == 0  # the rejected call wrote nothing
    writer.add_steps(step_dict(obs, np.array([1, 0, 1]), np.ones(3), truncated=True))
    episode = dataset.episode(0)
    assert (len(episode), episode.truncated, episode.terminated) == (3, True, False)
    np.testing.assert_array_equal(episode.read().action, [1, 0, 1])


def test_context_manager_exit_ends_the_episode_without_flags() -> None:
    dataset = Dataset.create(cartpole_schema())
    recorded = Recorded(start=(0, 0), obs=[made_up_obs(0)])
    with dataset.new_episode(made_up_obs(0)) as writer:
        for t in range(3):
            writer.add_step(step_dict(made_up_obs(t + 1), t % 2, 1.0 + t))
            recorded.obs.append(made_up_obs(t + 1))
            recorded.actions.append(t % 2)
            recorded.rewards.append(1.0 + t)
        assert dataset.episode(0).ongoing
    recorded.end(terminated=False, truncated=False)
    assert writer.closed
    assert_matches(dataset, 0, recorded)
    with pytest.raises(DatasetStateError, match="closed"):
        writer.add_step(step_dict(made_up_obs(9), 0, 0.0))


def test_exception_leaves_the_episode_ongoing_and_resume_continues_it() -> None:
    dataset = Dataset.create(cartpole_schema())
    recorded = Recorded(start=(0, 0), obs=[made_up_obs(0)])

    def step(writer: Any, t: int, **flags: Any) -> None:
        writer.add_step(step_dict(made_up_obs(t + 1), (t + 1) % 2, 0.5 * t, **flags))
        recorded.obs.append(made_up_obs(t + 1))
        recorded.actions.append((t + 1) % 2)
        recorded.rewards.append(0.5 * t)

    writer = dataset.new_episode(made_up_obs(0))

    def crash() -> None:
        with writer:
            step(writer, 0)
            step(writer, 1)
            raise RuntimeError("controller crashed")

    with pytest.raises(RuntimeError, match="controller crashed"):
        crash()
    assert not writer.closed
    assert_matches(dataset, 0, recorded)  # ongoing, two steps, no flags

    resumed = dataset.resume_episode(0)
    assert resumed.episode == 0
    step(resumed, 2)
    step(resumed, 3, terminated=True)
    recorded.end(terminated=True, truncated=False)
    assert resumed.closed
    assert_matches(dataset, 0, recorded)
    with pytest.raises(DatasetStateError, match="finalized and cannot be resumed"):
        dataset.resume_episode(0)


def test_an_ongoing_episode_can_be_read_while_it_grows() -> None:
    dataset = Dataset.create(cartpole_schema())
    writer = dataset.new_episode(made_up_obs(0))
    episode = dataset.episode(0)
    assert len(episode) == 0
    assert episode.read().all_obs.shape == (1, 4)
    for t in range(40):  # past the memory backend's first buffer growth
        writer.add_step(step_dict(made_up_obs(t + 1), t % 2, float(t)))
        assert len(episode) == t + 1
        assert episode.ongoing
        segment = episode.read()
        expected = np.array([made_up_obs(s) for s in range(t + 2)], dtype=OBS)
        np.testing.assert_array_equal(segment.all_obs, expected, strict=True)
        np.testing.assert_array_equal(segment.action, [s % 2 for s in range(t + 1)])
        np.testing.assert_array_equal(segment.reward, np.arange(t + 1, dtype=np.float32))
        assert not segment.terminated.any()
        assert not segment.truncated.any()
        np.testing.assert_array_equal(episode.step(-1).next_obs, made_up_obs(t + 1), strict=True)


@pytest.mark.parametrize(
    "flag",
    [np.bool_(True), np.array(True), np.array([True]).reshape(()), np.int64(1), 1.0],
    ids=["np.bool_", "0-d array", "0-d view", "np.int64", "float"],
)
@pytest.mark.parametrize("name", ["terminated", "truncated"])
def test_truthy_numpy_flags_finalize(flag: Any, name: str) -> None:
    dataset = Dataset.create(cartpole_schema())
    writer = dataset.new_episode(made_up_obs(0))
    writer.add_step(step_dict(made_up_obs(1), 0, 1.0, **{name: np.bool_(False)}))
    assert not writer.closed
    writer.add_step(step_dict(made_up_obs(2), 1, 1.0, **{name: flag}))
    assert writer.closed
    episode = dataset.episode(0)
    assert not episode.ongoing
    assert getattr(episode, name) is True
    np.testing.assert_array_equal(getattr(episode.read(), name), [False, True])


def test_interleaved_episodes_finalized_out_of_order() -> None:
    dataset = Dataset.create(cartpole_schema())
    recordings = [Recorded(start=(0, i), obs=[made_up_obs(1000 * i)]) for i in range(3)]
    writers = [dataset.new_episode(made_up_obs(1000 * i)) for i in range(3)]
    assert [w.episode for w in writers] == [0, 1, 2]
    lengths = [7, 3, 5]  # episode 1 ends first, then 2 is left ongoing, then 0
    for t in range(max(lengths)):
        for i in (2, 0, 1):
            if t >= lengths[i] or writers[i].closed:
                continue
            obs = made_up_obs(1000 * i + t + 1)
            last = t == lengths[i] - 1
            flags = {0: {"truncated": last}, 1: {"terminated": last}, 2: {}}[i]
            writers[i].add_step(step_dict(obs, (i + t) % 2, 10.0 * i + t, **flags))
            recorded = recordings[i]
            recorded.obs.append(obs)
            recorded.actions.append((i + t) % 2)
            recorded.rewards.append(10.0 * i + t)
            if flags.get("terminated") or flags.get("truncated"):
                recorded.end(flags.get("terminated", False), flags.get("truncated", False))
        if t == 3:
            # mid-way: episode 1 is finalized, the others ongoing
            assert [dataset.episode(i).ongoing for i in range(3)] == [True, False, True]
            for i in range(3):
                assert_matches(dataset, i, recordings[i])
    assert [dataset.episode(i).ongoing for i in range(3)] == [False, False, True]
    for i in range(3):
        assert_matches(dataset, i, recordings[i])
    # an episode added in bulk afterwards does not disturb the others
    dataset.add_episode(
        {
            "initial_observation": made_up_obs(-1),
            "observations": np.array([made_up_obs(-2)]),
            "actions": np.array([1]),
            "rewards": np.array([7.0], dtype=np.float32),
        }
    )
    writers[2].end()
    recordings[2].end(False, False)
    for i in range(3):
        assert_matches(dataset, i, recordings[i])
    np.testing.assert_array_equal(
        dataset.episode(3).read().all_obs, [made_up_obs(-1), made_up_obs(-2)]
    )


def test_rejected_step_leaves_the_episode_unchanged() -> None:
    dataset = Dataset.create(cartpole_schema())
    writer = dataset.new_episode(made_up_obs(0))
    writer.add_step(step_dict(made_up_obs(1), 1, 1.0))
    with pytest.raises(SchemaError, match=r"expected shape \(4,\), got \(5,\)"):
        writer.add_step(step_dict(np.zeros(5, OBS), 0, 1.0, terminated=True))
    with pytest.raises(SchemaError, match=r"fractional value 0\.5"):
        writer.add_step(step_dict(made_up_obs(2), 0.5, 1.0, terminated=True))
    assert not writer.closed
    recorded = Recorded(start=(0, 0), obs=[made_up_obs(0), made_up_obs(1)], actions=[1])
    recorded.rewards.append(1.0)
    assert_matches(dataset, 0, recorded)


# -- the action-out writer --------------------------------------------------------------


def run_action_out(
    env: Any, dataset: Dataset, seed: int, *, keep_final: bool
) -> tuple[Recorded, int]:
    """Log CartPole the way action-out recorders do: the action taken *at* each observation."""
    obs, _ = env.reset(seed=seed)
    recorded = Recorded(start=(0, 0), obs=[obs.copy()])
    writer = dataset.new_action_out_episode()
    while True:
        action = env.action_space.sample()
        next_obs, reward, terminated, truncated, _ = env.step(action)
        writer.add_step({"observations": obs, "actions": action, "rewards": reward})
        recorded.obs.append(next_obs.copy())
        recorded.actions.append(int(action))
        recorded.rewards.append(float(reward))
        obs = next_obs
        if terminated or truncated:
            break
    if keep_final:
        dropped = writer.end(obs, terminated=terminated, truncated=truncated)
        recorded.end(terminated, truncated)
    else:
        dropped = writer.end(terminated=terminated, truncated=truncated)
        # the last action and reward had no successor observation in the log
        recorded.obs.pop()
        recorded.actions.pop()
        recorded.rewards.pop()
        recorded.end(terminated=False, truncated=True)
    return recorded, dropped


@pytest.mark.parametrize("keep_final", [True, False], ids=["final-obs", "no-final-obs"])
def test_action_out_writer_matches_the_oracle(keep_final: bool) -> None:
    env = gym.make("CartPole-v1")
    env.action_space.seed(5)
    dataset = Dataset.create(schema_from_gym_spaces(env.observation_space, env.action_space))
    recorded, dropped = run_action_out(env, dataset, seed=5, keep_final=keep_final)
    assert dropped == (0 if keep_final else 1)
    assert_matches(dataset, 0, recorded)
    assert dataset.episode(0).terminated is keep_final


def test_action_out_writer_agrees_with_bulk_action_out_import() -> None:
    env = gym.make("CartPole-v1")
    env.action_space.seed(8)
    schema = schema_from_gym_spaces(env.observation_space, env.action_space)
    streamed = Dataset.create(schema)
    recorded, _ = run_action_out(env, streamed, seed=8, keep_final=False)
    # the same log as one bulk action-out dict, with the step the writer dropped
    env.action_space.seed(8)
    logged, _ = run_action_out(env, Dataset.create(schema), seed=8, keep_final=True)
    bulk = Dataset.from_episodes(
        [
            {
                "observations": np.array(logged.obs[:-1]),
                "actions": np.array(logged.actions),
                "rewards": np.array(logged.rewards, dtype=np.float32),
                "terminated": True,
            }
        ],
        schema=schema,
        alignment="action-out",
    )
    assert_matches(bulk, 0, recorded)


def test_action_out_writer_rejects_flags_on_steps() -> None:
    dataset = Dataset.create(cartpole_schema())
    writer = dataset.new_action_out_episode()
    with pytest.raises(SchemaError, match="pass terminated/truncated to end"):
        writer.add_step(step_dict(made_up_obs(0), 0, 1.0, terminated=True))
    with pytest.raises(DatasetStateError, match="before any add_step"):
        writer.end()


# -- the vector writer ------------------------------------------------------------------


def make_cartpole() -> Any:
    # a short time limit, so that both truncated and terminated episodes occur
    return gym.make("CartPole-v1", max_episode_steps=15)


class DictObs(gym.ObservationWrapper):
    """CartPole with a ``Dict`` observation: its first two numbers and its last two."""

    def __init__(self, env: Any) -> None:
        super().__init__(env)
        box = env.observation_space
        self.observation_space = gym.spaces.Dict(
            {
                "pos": gym.spaces.Box(box.low[:2], box.high[:2], dtype=OBS),
                "vel": gym.spaces.Box(box.low[2:], box.high[2:], dtype=OBS),
            }
        )

    def observation(self, observation: np.ndarray) -> dict[str, np.ndarray]:
        return {"pos": observation[:2], "vel": observation[2:]}


def make_dict_cartpole() -> Any:
    return DictObs(make_cartpole())


def flat_obs(observation: Any, i: int | None = None) -> np.ndarray:
    """Sub-env ``i``'s observation (or a single one) as 4 numbers, copied."""
    if isinstance(observation, dict):
        parts = [observation[k] if i is None else observation[k][i] for k in ("pos", "vel")]
        return np.concatenate(parts)
    return np.array(observation if i is None else observation[i], copy=True)


def run_vector(
    mode: str, seed: int, num_envs: int = 3, *, dict_obs: bool = False
) -> tuple[Dataset, list[Recorded], list[np.ndarray]]:
    """Collect STEPS vector steps; returns the dataset, the oracle and every action batch."""
    autoreset = {
        "next_step": gym.vector.AutoresetMode.NEXT_STEP,
        "same_step": gym.vector.AutoresetMode.SAME_STEP,
    }[mode]
    make = make_dict_cartpole if dict_obs else make_cartpole
    envs = gym.vector.SyncVectorEnv([make] * num_envs, autoreset_mode=autoreset)
    envs.action_space.seed(seed)
    schema = schema_from_gym_spaces(envs.single_observation_space, envs.single_action_space)
    dataset = Dataset.create(schema)

    obs, infos = envs.reset(seed=seed)
    writer = dataset.new_vector_episodes(obs, infos, autoreset_mode=mode)
    current = [Recorded(start=(0, i), obs=[flat_obs(obs, i)]) for i in range(num_envs)]
    recordings = list(current)
    needs_reset = [False] * num_envs
    action_batches = []
    for step in range(1, STEPS + 1):
        actions = envs.action_space.sample()
        action_batches.append(actions.copy())
        obs, rewards, terminations, truncations, infos = envs.step(actions)
        writer.add_step(
            {
                "observations": obs,
                "actions": actions,
                "rewards": rewards,
                "terminated": terminations,
                "truncated": truncations,
                "infos": infos,
            }
        )
        for i in range(num_envs):
            if needs_reset[i]:
                # next-step autoreset: obs[i] is the reset observation, actions[i] ignored
                assert rewards[i] == 0.0
                assert not terminations[i]
                assert not truncations[i]
                current[i] = Recorded(start=(step, i), obs=[flat_obs(obs, i)])
                recordings.append(current[i])
                needs_reset[i] = False
                continue
            done = bool(terminations[i] or truncations[i])
            if mode == "same_step":
                assert bool(infos.get("_final_obs", np.zeros(num_envs, bool))[i]) is done
            if mode == "same_step" and done:
                # an object array with one entry per sub-env; None where none ended
                current[i].obs.append(flat_obs(infos["final_obs"][i]))
            else:
                current[i].obs.append(flat_obs(obs, i))
            current[i].actions.append(int(actions[i]))
            current[i].rewards.append(float(rewards[i]))
            if done:
                current[i].end(terminations[i], truncations[i])
                if mode == "same_step":
                    # same-step autoreset: obs[i] already is the next episode's reset
                    current[i] = Recorded(start=(step, i), obs=[flat_obs(obs, i)])
                    recordings.append(current[i])
                else:
                    needs_reset[i] = True
    writer.close()
    envs.close()
    recordings.sort(key=lambda r: r.start)
    return dataset, recordings, action_batches


@pytest.mark.parametrize("mode", ["next_step", "same_step"])
@pytest.mark.parametrize(
    ("seed", "dict_obs"), [(0, False), (11, False), (7, True)], ids=["box-0", "box-11", "dict-7"]
)
def test_vector_writer_matches_every_sub_env_episode(mode: str, seed: int, dict_obs: bool) -> None:
    dataset, recordings, _ = run_vector(mode, seed, dict_obs=dict_obs)
    assert isinstance(dataset.episode(0).read().obs, np.ndarray) is not dict_obs
    # the run covers every kind of ending, and episodes left unfinished
    assert any(r.terminated for r in recordings)
    assert any(r.truncated for r in recordings)
    assert any(r.ongoing for r in recordings)
    assert dataset.num_episodes == len(recordings)
    for index, recorded in enumerate(recordings):
        assert_matches(dataset, index, recorded)
    # next-step autoreset spends one step per reset; same-step spends none
    total = sum(len(r.actions) for r in recordings)
    resets = len(recordings) - 3
    assert total == 3 * STEPS - (resets if mode == "next_step" else 0)


def test_vector_writer_agrees_with_the_single_env_writer() -> None:
    # sub-env 0 of a vector env reset with seed s is a single env reset with seed s; its
    # later resets are unseeded in both. Replaying its effective actions in a single env
    # with the quick-start writer must give the same episodes.
    seed = 4
    vector, recordings, action_batches = run_vector("next_step", seed)
    env0 = [(index, r) for index, r in enumerate(recordings) if r.start[1] == 0]
    assert len(env0) > 3

    env = make_cartpole()
    single = Dataset.create(schema_from_gym_spaces(env.observation_space, env.action_space))
    obs, _ = env.reset(seed=seed)
    writer = single.new_episode(obs)
    needs_reset = False
    for actions in action_batches:
        if needs_reset:
            obs, _ = env.reset()
            writer = single.new_episode(obs)
            needs_reset = False
            continue
        obs, reward, terminated, truncated, _ = env.step(actions[0])
        writer.add_step(
            step_dict(obs, actions[0], reward, terminated=terminated, truncated=truncated)
        )
        needs_reset = bool(terminated or truncated)

    assert single.num_episodes == len(env0)
    for position, (index, _) in enumerate(env0):
        expected, actual = vector.episode(index), single.episode(position)
        assert (len(actual), actual.terminated, actual.truncated, actual.ongoing) == (
            len(expected),
            expected.terminated,
            expected.truncated,
            expected.ongoing,
        )
        a, b = actual.read(), expected.read()
        for name in ("all_obs", "action", "reward", "terminated", "truncated"):
            np.testing.assert_array_equal(getattr(a, name), getattr(b, name), strict=True)


# vector infos: Gymnasium batches each info key with a '_key' mask, nested dicts included


class CountingInfo(gym.Wrapper):
    """Adds ``count`` (steps since reset) and a nested ``stats/x`` (cart position) info."""

    def reset(self, **kwargs: Any) -> Any:
        obs, info = self.env.reset(**kwargs)
        self.count = 0
        return obs, {**info, "count": np.int64(0), "stats": {"x": np.float32(obs[0])}}

    def step(self, action: Any) -> Any:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.count += 1
        info = {**info, "count": np.int64(self.count), "stats": {"x": np.float32(obs[0])}}
        return obs, reward, terminated, truncated, info


@pytest.mark.parametrize("mode", ["next_step", "same_step"])
def test_vector_writer_stores_infos_aligned_with_observations(mode: str) -> None:
    num_envs = 2
    autoreset = {
        "next_step": gym.vector.AutoresetMode.NEXT_STEP,
        "same_step": gym.vector.AutoresetMode.SAME_STEP,
    }[mode]
    envs = gym.vector.SyncVectorEnv(
        [lambda: CountingInfo(make_cartpole())] * num_envs, autoreset_mode=autoreset
    )
    envs.action_space.seed(2)
    schema = schema_from_gym_spaces(envs.single_observation_space, envs.single_action_space)
    schema = DatasetSchema(
        [
            *schema,
            FieldSpec("count", shape=(), dtype="int64", role="info"),
            FieldSpec("stats/x", shape=(), dtype="float32", role="info"),
        ]
    )
    dataset = Dataset.create(schema)
    obs, infos = envs.reset(seed=2)
    writer = dataset.new_vector_episodes(obs, infos, autoreset_mode=mode)
    for _ in range(60):
        actions = envs.action_space.sample()
        obs, rewards, terminations, truncations, infos = envs.step(actions)
        writer.add_step(
            {
                "observations": obs,
                "actions": actions,
                "rewards": rewards,
                "terminated": terminations,
                "truncated": truncations,
                "infos": infos,
            }
        )
    writer.close()
    assert dataset.num_episodes > num_envs
    for episode in dataset:
        segment = episode.read()
        length = len(episode)
        # count is the step index of each observation; stats/x its cart position
        np.testing.assert_array_equal(segment.all_infos.count, np.arange(length + 1), strict=True)
        np.testing.assert_array_equal(segment.all_infos.stats.x, segment.all_obs[:, 0], strict=True)
        np.testing.assert_array_equal(
            segment.next_info.stats.x, segment.next_obs[:, 0], strict=True
        )


def test_vector_writer_validates_every_sub_env_before_writing() -> None:
    dataset = Dataset.create(cartpole_schema())
    obs = np.array([made_up_obs(0), made_up_obs(100)], dtype=OBS)
    writer = dataset.new_vector_episodes(obs)
    good = np.array([made_up_obs(1), made_up_obs(101)], dtype=OBS)
    with pytest.raises(SchemaError, match=r"fractional value 0\.5"):
        writer.add_step(
            step_dict(good, np.array([1, 0.5]), np.ones(2), terminated=np.array([True, False]))
        )
    assert [len(e) for e in dataset] == [0, 0]  # sub-env 0's valid step was not written
    same = dataset.new_vector_episodes(obs, autoreset_mode="same_step")
    ending = step_dict(good, np.array([1, 0]), np.ones(2), terminated=np.array([True, False]))
    with pytest.raises(SchemaError, match="same-step autoreset needs infos"):
        same.add_step(ending)
