"""Bad input never gets in (reliability.md, "bad input"; data-model.md §6).

One table of rejected calls across the writers, bulk import, views and schema
declaration. Every case asserts the exception type, a message fragment that names the
field and the expected and actual values, and that the dataset is exactly as it was:
the oracle is a deep copy of every episode taken before the call, not the code under
test. A second test replays each rejected call and then a fixed sequence of good writes,
and compares the result with a twin dataset that only received the good writes, which
catches hidden state (half-written rows, a corrupted pending action) that a read alone
would not show. Positive controls at the dtype boundaries keep the validation honest.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from episodata import (
    ActionOutEpisodeWriter,
    Dataset,
    DatasetSchema,
    DatasetStateError,
    EpisodataError,
    EpisodeWriter,
    FieldNotFoundError,
    FieldSpec,
    SchemaError,
    VectorEpisodeWriter,
)

# -- the dataset every case starts from ----------------------------------------------------

# 'camera' is both an observation and an action (data-model.md §4): messages must say which
SCHEMA = DatasetSchema(
    [
        FieldSpec("camera", shape=(2, 2), dtype="uint8"),
        FieldSpec("state", shape=(3,), dtype="float32"),
        FieldSpec("count", shape=(), dtype="int32"),
        FieldSpec("extra", shape=(), dtype="float32", optional=True),
        FieldSpec("camera", shape=(2,), dtype="float32", role="action"),
        FieldSpec("keyboard/jump", shape=(), dtype="bool", role="action"),
        FieldSpec("button", shape=(), dtype="int16", role="action"),
        FieldSpec("reward", shape=(), dtype="float32", role="reward"),
        FieldSpec("success", shape=(), dtype="bool", role="info", optional=True),
    ]
)

NUM_ENVS = 3


def obs(t: int, *, extra: bool = False) -> dict[str, Any]:
    value: dict[str, Any] = {
        "camera": np.full((2, 2), t, dtype=np.uint8),
        "state": np.full(3, t + 0.5, dtype=np.float32),
        "count": np.int32(t),
    }
    if extra:
        value["extra"] = np.float32(-t)
    return value


def action(t: int) -> dict[str, Any]:
    return {
        "camera": np.full(2, -t, dtype=np.float32),
        "keyboard": {"jump": np.bool_(t % 2)},
        "button": np.int16(t),
    }


def step(t: int, *, extra: bool = False) -> dict[str, Any]:
    data = {"observations": obs(t, extra=extra), "actions": action(t), "rewards": np.float32(t)}
    if extra:
        data["infos"] = {"success": np.bool_(t % 3 == 0)}
    return data


def stacked(values: list[Any]) -> Any:
    """Stack a list of equally nested dicts leaf by leaf along a new leading axis."""
    if isinstance(values[0], Mapping):
        return {key: stacked([v[key] for v in values]) for key in values[0]}
    return np.stack([np.asarray(v) for v in values])


def steps(first: int, count: int) -> dict[str, Any]:
    return stacked([step(t) for t in range(first, first + count)])


def bulk_in(num_steps: int = 4) -> dict[str, Any]:
    """An action-in episode: the reset observation plus what each action produced."""
    return {
        "initial_observation": obs(0),
        **steps(1, num_steps),
        "terminated": True,
    }


def bulk_out(num_steps: int = 3) -> dict[str, Any]:
    """An action-out episode with a final observation, an optional field and infos."""
    return {
        "observations": stacked([obs(t, extra=True) for t in range(num_steps)]),
        "actions": stacked([action(t + 1) for t in range(num_steps)]),
        "rewards": np.arange(1, num_steps + 1, dtype=np.float32),
        "infos": {"success": np.zeros(num_steps, dtype=bool)},
        "final_observation": obs(num_steps, extra=True),
        "final_info": {"success": True},
        "truncated": True,
    }


def vector_step(t: int, num_envs: int = NUM_ENVS) -> dict[str, Any]:
    return {
        **stacked([step(t + i) for i in range(num_envs)]),
        "terminated": np.zeros(num_envs, dtype=bool),
        "truncated": np.zeros(num_envs, dtype=bool),
    }


def replaced(data: Mapping[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A deep copy of ``data`` with the leaf at ``a/b/c`` set to ``value``."""
    out = copy.deepcopy(dict(data))
    *parents, leaf = path.split("/")
    node = out
    for name in parents:
        node = node[name]
    node[leaf] = value
    return out


def removed(data: Mapping[str, Any], path: str) -> dict[str, Any]:
    """A deep copy of ``data`` without the leaf at ``a/b/c``."""
    out = copy.deepcopy(dict(data))
    *parents, leaf = path.split("/")
    node = out
    for name in parents:
        node = node[name]
    del node[leaf]
    return out


@dataclass
class Env:
    ds: Dataset
    closed_writer: EpisodeWriter  # episode 1, finalized by a truncated step
    writer: EpisodeWriter  # episode 3, ongoing, 2 steps, without the optional 'extra'
    writer_extra: EpisodeWriter  # episode 4, ongoing, 1 step, with 'extra' and infos
    vector: VectorEpisodeWriter  # episodes 5-7, one step each
    action_out: ActionOutEpisodeWriter  # episode 8, 1 step written, 1 action pending
    vector_same: VectorEpisodeWriter  # episodes 9-10, same-step autoreset


NUM_EPISODES = 11  # the id of the next episode


def build() -> Env:
    ds = Dataset.create(SCHEMA)
    ds.add_episode(bulk_in(4))  # 0
    closed = ds.new_episode(obs(0))  # 1
    closed.add_step(step(1))
    closed.add_step(step(2))
    closed.add_step({**step(3), "truncated": True})
    ds.add_episode(bulk_out(3))  # 2
    writer = ds.new_episode(obs(0))  # 3
    writer.add_steps(steps(1, 2))
    writer_extra = ds.new_episode(obs(0, extra=True), infos={"success": False})  # 4
    writer_extra.add_step(step(1, extra=True))
    vector = ds.new_vector_episodes(stacked([obs(i) for i in range(NUM_ENVS)]))  # 5, 6, 7
    vector.add_step(vector_step(1))
    action_out = ds.new_action_out_episode()  # 8
    action_out.add_step(step(0))
    action_out.add_step(step(1))
    vector_same = ds.new_vector_episodes(  # 9, 10
        stacked([obs(i) for i in range(2)]), autoreset_mode="same_step"
    )
    assert ds.num_episodes == NUM_EPISODES
    return Env(ds, closed, writer, writer_extra, vector, action_out, vector_same)


@pytest.fixture
def env() -> Env:
    return build()


# -- the oracle: a deep copy of everything a user can observe ------------------------------


@dataclass(frozen=True)
class EpisodeState:
    length: int
    terminated: bool
    truncated: bool
    ongoing: bool
    buffers: dict[str, np.ndarray]


@dataclass(frozen=True)
class Snapshot:
    num_episodes: int
    num_steps: int
    episodes: tuple[EpisodeState, ...]
    stored_bytes: int | None  # rows a backend holds, read or not: catches orphan rows


def snapshot(ds: Dataset) -> Snapshot:
    episodes = []
    for i in range(ds.num_episodes):
        episode = ds.episode(i)
        buffers = {key: np.array(value, copy=True) for key, value in episode.read().buffers.items()}
        episodes.append(
            EpisodeState(
                len(episode), episode.terminated, episode.truncated, episode.ongoing, buffers
            )
        )
    nbytes = getattr(ds.backend, "nbytes", None)
    return Snapshot(ds.num_episodes, ds.num_steps, tuple(episodes), nbytes)


def assert_same(before: Snapshot, after: Snapshot) -> None:
    assert after.num_episodes == before.num_episodes, "the number of episodes changed"
    for i, (old, new) in enumerate(zip(before.episodes, after.episodes, strict=True)):
        status_old = (old.length, old.terminated, old.truncated, old.ongoing)
        status_new = (new.length, new.terminated, new.truncated, new.ongoing)
        assert status_new == status_old, f"episode {i}: (len, terminated, truncated, ongoing)"
        assert new.buffers.keys() == old.buffers.keys(), f"episode {i}: fields changed"
        for key, expected in old.buffers.items():
            actual = new.buffers[key]
            assert actual.dtype == expected.dtype, f"episode {i}, {key}: dtype changed"
            assert actual.shape == expected.shape, f"episode {i}, {key}: shape changed"
            np.testing.assert_array_equal(actual, expected, err_msg=f"episode {i}, {key}")
    assert after.num_steps == before.num_steps, "the number of steps changed"
    assert after.stored_bytes == before.stored_bytes, "the backend holds a different amount"


def test_the_oracle_sees_a_change(env: Env) -> None:
    # without this the "nothing changed" half of every case could pass vacuously
    before = snapshot(env.ds)
    env.writer.add_step(step(3))
    with pytest.raises(AssertionError, match="episode 3"):
        assert_same(before, snapshot(env.ds))


def test_the_oracle_sees_a_flag_change(env: Env) -> None:
    before = snapshot(env.ds)
    env.writer.end(truncated=True)
    with pytest.raises(AssertionError, match=r"episode 3: \(len, terminated"):
        assert_same(before, snapshot(env.ds))


# -- the table -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    call: Callable[[Env], object]
    error: type[BaseException]
    match: str


def m(*fragments: str) -> str:
    """A regex matching the literal fragments in order (across lines)."""
    return "(?s)" + ".*".join(re.escape(fragment) for fragment in fragments)


def case(
    case_id: str, call: Callable[[Env], object], error: type[BaseException], match: str
) -> Any:
    return pytest.param(Case(call, error, match), id=case_id)


def bad_camera(value: float) -> np.ndarray:
    camera = np.zeros((2, 2), dtype=np.float64 if isinstance(value, float) else np.int64)
    camera[1, 0] = value
    return camera


W = "episode 3, step 2"  # where the ongoing writer's next step lands

ADD_STEP_CASES = [
    case(
        "add_step-obs-wrong-shape",
        lambda e: e.writer.add_step(
            replaced(step(3), "observations/camera", np.zeros((3, 2), np.uint8))
        ),
        SchemaError,
        m(W, "observation field 'camera': expected shape (2, 2), got (3, 2)"),
    ),
    case(
        "add_step-action-wrong-shape",
        lambda e: e.writer.add_step(replaced(step(3), "actions/camera", np.zeros(3, np.float32))),
        SchemaError,
        m(W, "action field 'camera': expected shape (2,), got (3,)"),
    ),
    case(
        "add_step-trailing-axis",
        lambda e: e.writer.add_step(
            replaced(step(3), "observations/state", np.zeros((3, 1), np.float32))
        ),
        SchemaError,
        m("field 'state': expected shape (3,), got (3, 1)", "drop the trailing axis"),
    ),
    case(
        "add_step-reward-wrong-shape",
        lambda e: e.writer.add_step(replaced(step(3), "rewards", np.ones(2, np.float32))),
        SchemaError,
        m("reward field 'reward': expected shape (), got (2,)"),
    ),
    case(
        "add_step-wrong-dtype-str",
        lambda e: e.writer.add_step(replaced(step(3), "observations/state", np.array(["a"] * 3))),
        SchemaError,
        m("observation field 'state': got <U1 values, which are not numbers", "float32"),
    ),
    case(
        "add_step-wrong-dtype-complex",
        lambda e: e.writer.add_step(replaced(step(3), "rewards", np.complex64(1 + 2j))),
        SchemaError,
        m("reward field 'reward': got complex64 values", "float32"),
    ),
    case(
        "add_step-uint8-300.7",
        lambda e: e.writer.add_step(replaced(step(3), "observations/camera", bad_camera(300.7))),
        SchemaError,
        m("observation field 'camera'", "300.7 at index (1, 0)", "dtype is uint8"),
    ),
    case(
        "add_step-uint8-minus1",
        lambda e: e.writer.add_step(replaced(step(3), "observations/camera", bad_camera(-1))),
        SchemaError,
        m("observation field 'camera': got -1 at index (1, 0), outside the range [0, 255]"),
    ),
    case(
        "add_step-uint8-256",
        lambda e: e.writer.add_step(replaced(step(3), "observations/camera", bad_camera(256))),
        SchemaError,
        m("observation field 'camera': got 256 at index (1, 0), outside the range [0, 255]"),
    ),
    case(
        "add_step-nan-into-int",
        lambda e: e.writer.add_step(replaced(step(3), "actions/button", np.nan)),
        SchemaError,
        m("action field 'button': got nan, which an integer cannot hold", "int16"),
    ),
    case(
        "add_step-fraction-into-int",
        lambda e: e.writer.add_step(replaced(step(3), "actions/button", 2.5)),
        SchemaError,
        m("action field 'button': got the fractional value 2.5", "int16"),
    ),
    case(
        "add_step-inf-into-int",
        lambda e: e.writer.add_step(replaced(step(3), "actions/button", -np.inf)),
        SchemaError,
        m("action field 'button': got -inf, which an integer cannot hold"),
    ),
    case(
        "add_step-int16-overflow",
        lambda e: e.writer.add_step(replaced(step(3), "actions/button", 40_000)),
        SchemaError,
        m("action field 'button': got 40000, outside the range [-32768, 32767]"),
    ),
    case(
        "add_step-float32-overflow",
        lambda e: e.writer.add_step(
            replaced(step(3), "observations/state", np.array([0.0, 1e40, 0.0]))
        ),
        SchemaError,
        m("observation field 'state': got 1e+40 at index (1,), too large for float32"),
    ),
    case(
        "add_step-2-into-bool",
        lambda e: e.writer.add_step(replaced(step(3), "actions/keyboard/jump", 2)),
        SchemaError,
        m("action field 'keyboard/jump': got 2, not 0/1 or a bool"),
    ),
    case(
        "add_step-missing-required-field",
        lambda e: e.writer.add_step(removed(step(3), "actions/button")),
        SchemaError,
        m(W, "required action field 'button' is missing"),
    ),
    case(
        "add_step-missing-role",
        lambda e: e.writer.add_step(removed(step(3), "actions")),
        SchemaError,
        m(W, "required action field 'camera' is missing"),
    ),
    case(
        "add_step-missing-observations",
        lambda e: e.writer.add_step(removed(step(3), "observations")),
        SchemaError,
        m(W, "'observations' is missing"),
    ),
    case(
        "add_step-unknown-top-level-key",
        lambda e: e.writer.add_step({**step(3), "next_obs": obs(3)}),
        FieldNotFoundError,
        m(W, "unknown key 'next_obs'"),
    ),
    case(
        "add_step-unknown-nested-key",
        lambda e: e.writer.add_step(replaced(step(3), "actions/keyboard/duck", True)),
        FieldNotFoundError,
        m(W, "unknown action field 'keyboard/duck'", "'keyboard/jump'"),
    ),
    case(
        "add_step-unknown-observation",
        lambda e: e.writer.add_step(replaced(step(3), "observations/velocity", 1.0)),
        FieldNotFoundError,
        m("unknown observation field 'velocity'"),
    ),
    case(
        "add_step-key-twice-via-alias",
        lambda e: e.writer.add_step({**step(3), "obs": obs(3)}),
        SchemaError,
        m("'observations' is given twice"),
    ),
    case(
        "add_step-optional-field-absent-at-reset",
        lambda e: e.writer.add_step(step(3, extra=True)),
        SchemaError,
        m(W, "optional observation field 'extra' is absent from this episode"),
    ),
    case(
        "add_step-optional-field-dropped",
        lambda e: e.writer_extra.add_step(removed(step(2, extra=True), "observations/extra")),
        SchemaError,
        m("episode 4, step 1", "optional observation field 'extra' is missing"),
    ),
    case(
        "add_step-optional-info-dropped",
        lambda e: e.writer_extra.add_step(removed(step(2, extra=True), "infos")),
        SchemaError,
        m("episode 4, step 1", "optional info field 'success' is missing"),
    ),
    case(
        "add_step-scalar-for-array",
        lambda e: e.writer.add_step(replaced(step(3), "observations/state", 1.0)),
        SchemaError,
        m("observation field 'state': expected shape (3,), got ()"),
    ),
    case(
        "add_step-bare-array-for-mapping-role",
        lambda e: e.writer.add_step({**step(3), "observations": np.zeros(3)}),
        FieldNotFoundError,
        m("unknown observation field 'observation'", "'camera', 'state', 'count', 'extra'"),
    ),
    case(
        "add_step-flag-not-bool",
        lambda e: e.writer.add_step({**step(3), "terminated": "yes"}),
        SchemaError,
        m(W, "'terminated' must be one bool, got array('yes'"),
    ),
    case(
        "add_step-flag-array",
        lambda e: e.writer.add_step({**step(3), "truncated": np.array([False, True])}),
        SchemaError,
        m(W, "'truncated' must be one bool, got array([False,  True])"),
    ),
    case(
        "add_step-not-a-dict",
        lambda e: e.writer.add_step([obs(3)]),
        SchemaError,
        m(W, "expected a dict, got list"),
    ),
]

ADD_STEPS_CASES = [
    case(
        "add_steps-terminated-before-last",
        lambda e: e.writer.add_steps({**steps(3, 3), "terminated": [True, False, False]}),
        SchemaError,
        m(W, "'terminated' is True at entry 0 before the last of 3 steps"),
    ),
    case(
        "add_steps-truncated-before-last",
        lambda e: e.writer.add_steps({**steps(3, 3), "truncated": [False, True, True]}),
        SchemaError,
        m(W, "'truncated' is True at entry 1 before the last of 3 steps"),
    ),
    case(
        "add_steps-flags-wrong-length",
        lambda e: e.writer.add_steps({**steps(3, 3), "terminated": [False, True]}),
        SchemaError,
        m(W, "'terminated' must be one bool or 3 flags, got shape (2,)"),
    ),
    case(
        "add_steps-ragged",
        lambda e: e.writer.add_steps({**steps(3, 3), "actions": steps(3, 2)["actions"]}),
        SchemaError,
        m(W, "action field 'camera': expected shape (3, 2), got (2, 2)"),
    ),
    case(
        "add_steps-bad-value-in-last-step",
        lambda e: e.writer.add_steps(
            replaced(
                steps(3, 3),
                "observations/camera",
                np.stack([bad_camera(0)] * 2 + [bad_camera(256)]),
            )
        ),
        SchemaError,
        m("observation field 'camera': got 256 at index (2, 1, 0)", "[0, 255]"),
    ),
    case(
        "add_steps-scalar-reward",
        lambda e: e.writer.add_steps(replaced(steps(3, 3), "rewards", 1.0)),
        SchemaError,
        m("reward field 'reward': expected shape (3,), got ()"),
    ),
    case(
        "add_steps-no-step-axis",
        lambda e: e.writer.add_steps(replaced(steps(3, 3), "observations/camera", np.uint8(1))),
        SchemaError,
        m(W, "'observations' needs a leading step axis [n, ...]"),
    ),
    case(
        "add_steps-unknown-nested-key",
        lambda e: e.writer.add_steps(replaced(steps(3, 3), "observations/velocity", np.zeros(3))),
        FieldNotFoundError,
        m(W, "unknown observation field 'velocity'"),
    ),
]

R = f"episode {NUM_EPISODES}, reset"

RESET_CASES = [
    case(
        "new_episode-wrong-shape",
        lambda e: e.ds.new_episode(replaced(obs(0), "state", np.zeros(4, np.float32))),
        SchemaError,
        m(R, "observation field 'state': expected shape (3,), got (4,)"),
    ),
    case(
        "new_episode-missing-required-field",
        lambda e: e.ds.new_episode(removed(obs(0), "count")),
        SchemaError,
        m(R, "required observation field 'count' is missing"),
    ),
    case(
        "new_episode-unknown-field",
        lambda e: e.ds.new_episode(replaced(obs(0), "velocity", 1.0)),
        FieldNotFoundError,
        m(R, "unknown observation field 'velocity'"),
    ),
    case(
        "new_episode-uint8-minus1",
        lambda e: e.ds.new_episode(replaced(obs(0), "camera", bad_camera(-1))),
        SchemaError,
        m(R, "observation field 'camera': got -1 at index (1, 0)", "[0, 255]"),
    ),
    case(
        "new_episode-nan-into-int",
        lambda e: e.ds.new_episode(replaced(obs(0), "count", np.float32("nan"))),
        SchemaError,
        m(R, "observation field 'count': got nan", "int32"),
    ),
    case(
        "new_episode-2-into-bool-info",
        lambda e: e.ds.new_episode(obs(0), infos={"success": 2}),
        SchemaError,
        m(R, "info field 'success': got 2, not 0/1 or a bool"),
    ),
    case(
        "new_episode-unknown-info",
        lambda e: e.ds.new_episode(obs(0), infos={"score": 1.0}),
        FieldNotFoundError,
        m(R, "unknown info field 'score'"),
    ),
    case(
        "new_episode-bare-array-for-mapping-role",
        lambda e: e.ds.new_episode(np.zeros(3, np.float32)),
        FieldNotFoundError,
        m(R, "unknown observation field 'observation'"),
    ),
]

B = f"episode {NUM_EPISODES}"  # where a bulk episode would land


def ragged_without_initial() -> dict[str, Any]:
    # the common slip: the reset frame left at the front of 'observations'
    return {**steps(1, 100), "observations": stacked([obs(t) for t in range(101)])}


BULK_IN_CASES = [
    case(
        "add_episode-obs-101-vs-actions-100",
        lambda e: e.ds.add_episode(ragged_without_initial()),
        SchemaError,
        m(
            B + ", field 'observations/camera': expected 100 entries",
            "as in 'actions/camera'), got 101",
            "'initial_observation'",
        ),
    ),
    case(
        "add_episode-obs-101-vs-actions-100-with-initial",
        lambda e: e.ds.add_episode({**ragged_without_initial(), "initial_observation": obs(0)}),
        SchemaError,
        m(B, "field 'observations/camera': expected 100 entries", "got 101"),
    ),
    case(
        "add_episode-ragged-rewards",
        lambda e: e.ds.add_episode({**bulk_in(4), "rewards": np.ones(3, np.float32)}),
        SchemaError,
        m(B, "field 'rewards': expected 4 entries", "got 3"),
    ),
    case(
        "add_episode-ragged-optional",
        lambda e: e.ds.add_episode(
            replaced(
                replaced(bulk_in(4), "initial_observation/extra", np.float32(0)),
                "observations/extra",
                np.zeros(3, np.float32),
            )
        ),
        SchemaError,
        m(B, "field 'observations/extra': expected 4 entries", "got 3"),
    ),
    case(
        "add_episode-terminated-before-last",
        lambda e: e.ds.add_episode({**bulk_in(4), "terminated": [False, True, False, False]}),
        SchemaError,
        m(B, "'terminated': True at step 1 before the last step 3"),
    ),
    case(
        "add_episode-flags-wrong-length",
        lambda e: e.ds.add_episode({**bulk_in(4), "truncated": [False, False, True]}),
        SchemaError,
        m(B, "'truncated': expected a scalar or 4 per-step flags, got shape (3,)"),
    ),
    case(
        "add_episode-flag-not-bool",
        lambda e: e.ds.add_episode({**bulk_in(4), "terminated": "yes"}),
        SchemaError,
        m(B, "'terminated': expected a bool, got <U3"),
    ),
    case(
        "add_episode-alignment-ambiguous",
        lambda e: e.ds.add_episode(steps(1, 4)),
        SchemaError,
        m(B, "cannot tell how observations and actions line up", "'initial_observation'"),
    ),
    case(
        "add_episode-infos-without-initial_info",
        lambda e: e.ds.add_episode({**bulk_in(4), "infos": {"success": np.zeros(4, bool)}}),
        SchemaError,
        m(B, "'infos' needs 'initial_info' too"),
    ),
    case(
        "add_episode-action-in-mixed-with-action-out",
        lambda e: e.ds.add_episode({**bulk_in(4), "final_observation": obs(5)}),
        SchemaError,
        m(B, "'final_observation' does not belong in an action-in episode"),
    ),
    case(
        "add_episode-unknown-top-level-key",
        lambda e: e.ds.add_episode(
            {**bulk_in(4), "next_observations": steps(1, 4)["observations"]}
        ),
        FieldNotFoundError,
        m(B, "unknown key 'next_observations'"),
    ),
    case(
        "add_episode-unknown-nested-key",
        lambda e: e.ds.add_episode(
            replaced(
                replaced(bulk_in(4), "initial_observation/velocity", np.float32(0)),
                "observations/velocity",
                np.zeros(4, np.float32),
            )
        ),
        FieldNotFoundError,
        m(B, "unknown observation field 'velocity'"),
    ),
    case(
        "add_episode-missing-required-field",
        lambda e: e.ds.add_episode(removed(bulk_in(4), "rewards")),
        SchemaError,
        m(B, "required reward field 'reward' is missing"),
    ),
    case(
        "add_episode-missing-nested-field",
        lambda e: e.ds.add_episode(removed(bulk_in(4), "actions/keyboard")),
        SchemaError,
        m(B, "required action field 'keyboard/jump' is missing"),
    ),
    case(
        "add_episode-key-twice-via-alias",
        lambda e: e.ds.add_episode({**bulk_in(4), "obs": steps(1, 4)["observations"]}),
        SchemaError,
        m(B, "'observations' is given twice"),
    ),
    case(
        "add_episode-per-step-shape-differs-from-initial",
        lambda e: e.ds.add_episode(
            replaced(bulk_in(4), "observations/state", np.zeros((4, 4), np.float32))
        ),
        SchemaError,
        m(B, "field 'state': the initial value has shape (3,)", "per-step values have shape (4,)"),
    ),
    case(
        "add_episode-wrong-per-step-shape",
        lambda e: e.ds.add_episode(
            replaced(
                replaced(bulk_in(4), "observations/state", np.zeros((4, 4), np.float32)),
                "initial_observation/state",
                np.zeros(4, np.float32),
            )
        ),
        SchemaError,
        m(B, "observation field 'state': expected per-step shape (3,), got (4,)"),
    ),
    case(
        "add_episode-optional-field-on-some-steps",
        lambda e: e.ds.add_episode(
            replaced(bulk_in(4), "observations/extra", np.zeros(4, np.float32))
        ),
        SchemaError,
        m(
            "the single observation has keys ['camera', 'count', 'state']",
            "per-step observations have ['camera', 'count', 'extra', 'state']",
        ),
    ),
    case(
        "add_episode-scalar-for-per-step-array",
        lambda e: e.ds.add_episode({**bulk_in(4), "rewards": 1.0}),
        SchemaError,
        m(B, "field 'rewards': expected one entry per step, got a scalar"),
    ),
    case(
        "add_episode-uint8-300.7",
        lambda e: e.ds.add_episode(
            replaced(bulk_in(4), "initial_observation/camera", bad_camera(300.7))
        ),
        SchemaError,
        m(B, "observation field 'camera': got the fractional value 300.7", "uint8"),
    ),
    case(
        "add_episode-float32-overflow",
        lambda e: e.ds.add_episode({**bulk_in(4), "rewards": np.array([0.0, 0.0, 1e40, 0.0])}),
        SchemaError,
        m(B, "reward field 'reward': got 1e+40 at index (2,), too large for float32"),
    ),
    case(
        "add_episode-nan-into-int",
        lambda e: e.ds.add_episode(
            replaced(bulk_in(4), "actions/button", np.array([1.0, np.nan, 3.0, 4.0]))
        ),
        SchemaError,
        m(B, "action field 'button': got nan at index (1,), which an integer cannot hold"),
    ),
    case(
        "add_episode-fraction-into-int",
        lambda e: e.ds.add_episode(
            replaced(bulk_in(4), "observations/count", np.array([1.0, 2.0, 2.5, 4.0]))
        ),
        SchemaError,
        m(B, "observation field 'count': got the fractional value 2.5 at index (3,)", "int32"),
    ),
    case(
        "add_episode-not-a-dict",
        lambda e: e.ds.add_episode([bulk_in(4)]),
        SchemaError,
        m(B, "expected a dict of arrays, got list"),
    ),
    case(
        "add_episode-unknown-alignment",
        lambda e: e.ds.add_episode(bulk_in(4), alignment="sideways"),
        SchemaError,
        m("alignment must be 'action-in' or 'action-out'", "got 'sideways'"),
    ),
    case(
        "add_episode-action-in-without-initial",
        lambda e: e.ds.add_episode(steps(1, 4), alignment="action-in"),
        SchemaError,
        m(B, "action-in episodes need 'initial_observation'"),
    ),
]

BULK_OUT_CASES = [
    case(
        "add_episode-out-ragged",
        lambda e: e.ds.add_episode(
            {**bulk_out(3), "observations": stacked([obs(t, extra=True) for t in range(4)])}
        ),
        SchemaError,
        m(B, "field 'observations/camera': expected 3 entries", "got 4"),
    ),
    case(
        "add_episode-out-with-initial_info",
        lambda e: e.ds.add_episode({**bulk_out(3), "initial_info": {"success": False}}),
        SchemaError,
        m(B, "'initial_info' does not belong in an action-out episode"),
    ),
    case(
        "add_episode-out-infos-without-final_info",
        lambda e: e.ds.add_episode(removed(bulk_out(3), "final_info")),
        SchemaError,
        m(B, "'infos' with 'final_observation' needs 'final_info' too"),
    ),
    case(
        "add_episode-out-final-observation-wrong-shape",
        lambda e: e.ds.add_episode(
            replaced(bulk_out(3), "final_observation/state", np.zeros(4, np.float32))
        ),
        SchemaError,
        m(B, "field 'state': the final value has shape (4,)", "per-step values have shape (3,)"),
    ),
    case(
        "add_episode-out-final_info-without-final-observation",
        lambda e: e.ds.add_episode(
            removed(bulk_out(3), "final_observation"), alignment="action-out"
        ),
        SchemaError,
        m(B, "'final_info' does not belong in an action-out without final_observation"),
    ),
    case(
        "add_episode-out-uint8-256",
        lambda e: e.ds.add_episode(
            replaced(bulk_out(3), "observations/camera", np.full((3, 2, 2), 256))
        ),
        SchemaError,
        m(B, "observation field 'camera': got 256 at index (0, 0, 0)", "[0, 255]"),
    ),
    case(
        "add_episode-out-truncated-before-last",
        lambda e: e.ds.add_episode({**bulk_out(3), "truncated": [True, False, False]}),
        SchemaError,
        m(B, "'truncated': True at step 0 before the last step 2"),
    ),
    case(
        "add_episode-out-2-into-bool-info",
        lambda e: e.ds.add_episode(replaced(bulk_out(3), "final_info/success", 2)),
        SchemaError,
        m(B, "info field 'success': got 2 at index (3,), not 0/1 or a bool"),
    ),
]


def object_episode() -> dict[str, Any]:
    state = np.empty((4, 3), dtype=object)
    state[...] = 0.5
    return replaced(
        replaced(bulk_in(4), "observations/state", state),
        "initial_observation/state",
        np.full(3, 0.5, dtype=object),
    )


FROM_EPISODES_CASES = [
    case(
        "from_episodes-bad-second-episode",
        lambda e: Dataset.from_episodes(
            [bulk_in(4), replaced(bulk_in(4), "actions/button", np.array([1, 2, 2.5, 4]))],
            schema=SCHEMA,
        ),
        SchemaError,
        m("episode 1, action field 'button': got the fractional value 2.5 at index (2,)"),
    ),
    case(
        "from_episodes-infer-object-dtype",
        lambda e: Dataset.from_episodes([object_episode()]),
        SchemaError,
        m("observation field 'state'", "dtype object cannot be stored"),
    ),
    case(
        "from_episodes-nothing-to-infer-from",
        lambda e: Dataset.from_episodes([]),
        SchemaError,
        m("from_episodes: no episodes to infer a schema from; pass schema="),
    ),
]

A = "episode 8, step 1"  # where the action-out writer's pending step lands
A0 = f"episode {NUM_EPISODES}, action-out step 0"

ACTION_OUT_CASES = [
    case(
        "action_out-flags-in-add_step",
        lambda e: e.action_out.add_step({**step(2), "terminated": True}),
        SchemaError,
        m("action-out step: pass terminated/truncated to end()"),
    ),
    case(
        "action_out-int16-overflow",
        lambda e: e.action_out.add_step(replaced(step(2), "actions/button", 40_000)),
        SchemaError,
        m(A, "action field 'button': got 40000, outside the range [-32768, 32767]"),
    ),
    case(
        "action_out-obs-wrong-shape",
        lambda e: e.action_out.add_step(
            replaced(step(2), "observations/state", np.zeros(2, np.float32))
        ),
        SchemaError,
        m(A, "observation field 'state': expected shape (3,), got (2,)"),
    ),
    case(
        "action_out-missing-action",
        lambda e: e.action_out.add_step(removed(step(2), "actions")),
        SchemaError,
        m(A, "required action field 'camera' is missing"),
    ),
    case(
        "action_out-unknown-key",
        lambda e: e.action_out.add_step({**step(2), "final_observation": obs(3)}),
        FieldNotFoundError,
        m("action-out step: unknown key 'final_observation'"),
    ),
    case(
        "action_out-first-step-bad-action",
        lambda e: e.ds.new_action_out_episode().add_step(replaced(step(0), "actions/button", 2.5)),
        SchemaError,
        m(A0 + ", action field 'button': got the fractional value 2.5"),
    ),
    case(
        "action_out-first-step-bad-observation",
        lambda e: e.ds.new_action_out_episode().add_step(
            replaced(step(0), "observations/camera", bad_camera(-1))
        ),
        SchemaError,
        m(A0 + ", observation field 'camera': got -1 at index (1, 0)"),
    ),
    case(
        "action_out-end-before-add_step",
        lambda e: e.ds.new_action_out_episode().end(obs(1)),
        DatasetStateError,
        m("action-out episode: end() before any add_step()"),
    ),
    case(
        "action_out-end-bad-final-observation",
        lambda e: e.action_out.end(replaced(obs(2), "camera", bad_camera(256)), terminated=True),
        SchemaError,
        m(A, "observation field 'camera': got 256 at index (1, 0)"),
    ),
]


def vector_bad(path: str, value: Any) -> dict[str, Any]:
    return replaced(vector_step(2), path, value)


V = "episode 7, step 1"  # sub-env 2's episode

VECTOR_CASES = [
    case(
        "vector-fraction-in-one-sub-env",
        lambda e: e.vector.add_step(vector_bad("actions/button", np.array([2.0, 3.0, 4.5]))),
        SchemaError,
        m(V, "action field 'button': got the fractional value 4.5"),
    ),
    case(
        "vector-other-sub-env-terminates",
        # sub-env 0 ends in the same step: its episode must stay ongoing all the same
        lambda e: e.vector.add_step(
            {
                **vector_bad("actions/button", np.array([2.0, 3.0, 4.5])),
                "terminated": np.array([True, False, False]),
            }
        ),
        SchemaError,
        m(V, "action field 'button': got the fractional value 4.5"),
    ),
    case(
        "vector-uint8-minus1-in-one-sub-env",
        lambda e: e.vector.add_step(
            vector_bad(
                "observations/camera", np.stack([bad_camera(0), bad_camera(-1), bad_camera(0)])
            )
        ),
        SchemaError,
        m("episode 6, step 1", "observation field 'camera': got -1 at index (1, 0)"),
    ),
    case(
        "vector-2-into-bool-in-last-sub-env",
        lambda e: e.vector.add_step(vector_bad("actions/keyboard/jump", np.array([0, 1, 2]))),
        SchemaError,
        m(V, "action field 'keyboard/jump': got 2, not 0/1 or a bool"),
    ),
    case(
        "vector-flags-wrong-shape",
        lambda e: e.vector.add_step({**vector_step(2), "terminated": np.array([False, True])}),
        SchemaError,
        m("vector step: 'terminated' must be 3 bools, got bool of shape (2,)"),
    ),
    case(
        "vector-wrong-number-of-sub-envs",
        lambda e: e.vector.add_step({**vector_step(2), "observations": stacked([obs(2), obs(3)])}),
        SchemaError,
        m("vector step", "'observations/camera'", "3 sub-envs", "got 2"),
    ),
    case(
        "vector-too-many-entries",
        # four buttons for three sub-envs: the fourth must not be dropped silently
        lambda e: e.vector.add_step(vector_bad("actions/button", np.arange(4))),
        SchemaError,
        m("vector step, 'actions/button': expected one entry per sub-env (3 sub-envs), got 4"),
    ),
    case(
        "vector-scalar-reward",
        lambda e: e.vector.add_step(vector_bad("rewards", 1.0)),
        SchemaError,
        m("vector step, 'rewards': expected one entry per sub-env (3 sub-envs), got a scalar"),
    ),
    case(
        "vector-unknown-field",
        lambda e: e.vector.add_step(vector_bad("observations/velocity", np.zeros(3))),
        FieldNotFoundError,
        m("episode 5, step 1", "unknown observation field 'velocity'"),
    ),
    case(
        "vector-missing-observations",
        lambda e: e.vector.add_step(removed(vector_step(2), "observations")),
        SchemaError,
        m("vector step: 'observations' is missing"),
    ),
    case(
        "vector-same-step-without-final-obs",
        lambda e: e.vector_same.add_step(
            {**vector_step(2, num_envs=2), "terminated": np.array([False, True])}
        ),
        SchemaError,
        m("vector step, sub-env 1: same-step autoreset needs infos['final_obs']"),
    ),
    case(
        "vector-reset-bad-value-in-one-sub-env",
        lambda e: e.ds.new_vector_episodes(
            stacked([obs(0), obs(1), replaced(obs(2), "camera", bad_camera(256))])
        ),
        SchemaError,
        m("vector sub-env 2, reset", "observation field 'camera': got 256"),
    ),
    case(
        "vector-reset-sub-envs-disagree",
        lambda e: e.ds.new_vector_episodes(
            replaced(stacked([obs(0), obs(1), obs(2)]), "state", np.zeros((2, 3), np.float32))
        ),
        SchemaError,
        m("vector reset, 'observations/state'", "(3 sub-envs), got 2"),
    ),
    case(
        "vector-unknown-autoreset-mode",
        lambda e: e.ds.new_vector_episodes(
            stacked([obs(0), obs(1)]),
            autoreset_mode="bogus",  # type: ignore[arg-type]
        ),
        SchemaError,
        m("autoreset_mode must be 'next_step' or 'same_step', got 'bogus'"),
    ),
]

STATE_CASES = [
    case(
        "closed-writer-add_step",
        lambda e: e.closed_writer.add_step(step(4)),
        DatasetStateError,
        m("the writer of episode 1 is closed: the episode was finalized"),
    ),
    case(
        "closed-writer-add_steps",
        lambda e: e.closed_writer.add_steps(steps(4, 2)),
        DatasetStateError,
        m("the writer of episode 1 is closed"),
    ),
    case(
        "closed-writer-end",
        lambda e: e.closed_writer.end(terminated=True),
        DatasetStateError,
        m("the writer of episode 1 is closed"),
    ),
    case(
        "resume-finalized-episode",
        lambda e: e.ds.resume_episode(0),
        DatasetStateError,
        m("episode 0 is finalized and cannot be resumed"),
    ),
    case(
        "resume-out-of-range",
        lambda e: e.ds.resume_episode(NUM_EPISODES),
        IndexError,
        m(f"episode {NUM_EPISODES} does not exist (the dataset has {NUM_EPISODES} episodes)"),
    ),
    case(
        "episode-index-out-of-range",
        lambda e: e.ds.episode(NUM_EPISODES),
        IndexError,
        m(f"episode {NUM_EPISODES} does not exist (the dataset has {NUM_EPISODES} episodes)"),
    ),
    case(
        "episode-negative-index-out-of-range",
        lambda e: e.ds.episode(-NUM_EPISODES - 1),
        IndexError,
        m(f"episode {-NUM_EPISODES - 1} does not exist"),
    ),
    case(
        "step-index-out-of-range",
        lambda e: e.ds.episode(0).step(4),
        IndexError,
        m("step 4 is out of range for episode 0 of length 4"),
    ),
    case(
        "fields-unknown-key",
        lambda e: e.ds.episode(0).read(fields=["state", "velocity"]),
        FieldNotFoundError,
        m("fields=: 'velocity' matches no field key, group or role/key", "'observation/state'"),
    ),
    case(
        "fields-unknown-qualified-key",
        lambda e: e.ds.episode(0).segment(0, 2, fields="action/keyboard/duck"),
        FieldNotFoundError,
        m("fields=: 'action/keyboard/duck' matches no field"),
    ),
    case(
        "role-missing-from-episode",
        lambda e: e.ds.episode(0).read().info["success"],
        FieldNotFoundError,
        m("this Segment holds no info field", "schema info fields: ['success']"),
    ),
    case(
        "role-not-selected",
        lambda e: e.ds.episode(0).read(fields=["observation"]).action.button,
        AttributeError,
        m("this Segment holds no action field", "select them with fields="),
    ),
    case(
        "nested-key-brackets",
        lambda e: e.ds.episode(0).read().obs["velocity"],
        FieldNotFoundError,
        m("obs has no field or group 'velocity'", "['camera', 'count', 'state']"),
    ),
    case(
        "nested-group-key-brackets",
        lambda e: e.ds.episode(0).read().action["keyboard"]["duck"],
        FieldNotFoundError,
        m("action/keyboard has no field or group 'duck'", "['jump']"),
    ),
    case(
        "nested-key-attribute",
        lambda e: e.ds.episode(0).read().action.keyboard.duck,
        AttributeError,
        m("action/keyboard has no field or group 'duck'", "['jump']"),
    ),
    case(
        "nested-key-attribute-next_obs",
        lambda e: e.ds.episode(2).step(0).next_obs.velocity,
        AttributeError,
        m("next_obs has no field or group 'velocity'"),
    ),
]


def field(key: str = "x", **options: Any) -> FieldSpec:
    return FieldSpec(key, **{"shape": (), "dtype": "float32", **options})


SCHEMA_CASES = [
    case(
        "schema-duplicate-key-in-role",
        lambda e: DatasetSchema([field("state"), field("state", shape=(2,))]),
        SchemaError,
        m("duplicate field key 'state' in role observation: keys must be unique within a role"),
    ),
    case(
        "schema-key-is-field-and-group",
        lambda e: DatasetSchema(
            [field("keyboard", role="action"), field("keyboard/jump", role="action")]
        ),
        SchemaError,
        m("action field 'keyboard' is also the group of 'keyboard/jump'"),
    ),
    case(
        "schema-object-dtype",
        lambda e: field(dtype=object),
        SchemaError,
        m("dtype object cannot be stored"),
    ),
    case(
        "schema-structured-dtype",
        lambda e: field(dtype=[("a", "f4"), ("b", "i4")]),
        SchemaError,
        m("cannot be stored: use a numeric, bool or fixed-width string dtype"),
    ),
    case(
        "schema-unknown-dtype",
        lambda e: field(dtype="float33"),
        SchemaError,
        m("'float33' is not a NumPy dtype"),
    ),
    case(
        "schema-negative-shape",
        lambda e: field(shape=(3, -1)),
        SchemaError,
        m("shape (3, -1) has a negative dimension"),
    ),
    case(
        "schema-layout-rank-mismatch",
        lambda e: field("camera", shape=(3, 64, 64), dtype="uint8", layout="HW"),
        SchemaError,
        m("field 'camera': layout 'HW' names 2 axes but shape (3, 64, 64) has 3"),
    ),
    case(
        "schema-layout-repeated-axis",
        lambda e: field("camera", shape=(3, 64, 64), dtype="uint8", layout="HHW"),
        SchemaError,
        m("layout 'HHW' must name each axis once"),
    ),
    case(
        "schema-empty-key",
        lambda e: field(""),
        SchemaError,
        m("key '' is not a valid field key"),
    ),
    case(
        "schema-empty-key-part",
        lambda e: field("a//b"),
        SchemaError,
        m("key 'a//b' is not a valid field key: use non-empty names joined by '/'"),
    ),
    case(
        "schema-trailing-slash",
        lambda e: field("a/"),
        SchemaError,
        m("key 'a/' is not a valid field key"),
    ),
    case(
        "schema-unknown-role",
        lambda e: field(role="observations"),
        SchemaError,
        m("role", "'observation', 'action', 'reward' or 'info'", "'observations'"),
    ),
    case(
        "schema-unknown-option",
        lambda e: field(units="m"),
        SchemaError,
        m("unknown argument 'units'", "valid arguments:", "dtype", "shape"),
    ),
    case(
        "create-without-schema",
        lambda e: Dataset.create([field()]),  # type: ignore[arg-type]
        SchemaError,
        m("schema: expected a DatasetSchema, got list"),
    ),
]

ALL_CASES = [
    *ADD_STEP_CASES,
    *ADD_STEPS_CASES,
    *RESET_CASES,
    *BULK_IN_CASES,
    *BULK_OUT_CASES,
    *FROM_EPISODES_CASES,
    *ACTION_OUT_CASES,
    *VECTOR_CASES,
    *STATE_CASES,
    *SCHEMA_CASES,
]


def test_the_table_is_large_and_ids_are_unique() -> None:
    ids = [param.id for param in ALL_CASES]
    assert len(ids) >= 40
    assert len(set(ids)) == len(ids)


@pytest.mark.parametrize("bad", ALL_CASES)
def test_bad_input_is_rejected_and_changes_nothing(env: Env, bad: Case) -> None:
    before = snapshot(env.ds)
    with pytest.raises(bad.error, match=bad.match) as info:
        bad.call(env)
    if bad.error is not IndexError and bad.error is not AttributeError:
        # the library's own classes, which also are the matching built-ins
        assert isinstance(info.value, EpisodataError)
    assert_same(before, snapshot(env.ds))


def keep_writing(env: Env) -> None:
    """The same good writes on every writer of the fixture and one bulk episode."""
    env.writer.add_step(step(3))
    env.writer.add_steps({**steps(4, 2), "terminated": [False, True]})
    env.writer_extra.add_step(step(2, extra=True))
    env.vector.add_step({**vector_step(2), "truncated": np.array([False, True, False])})
    env.vector.add_step(vector_step(3))
    env.action_out.add_step(step(2))
    env.action_out.end(obs(3), terminated=True)
    env.vector_same.add_step(vector_step(5, num_envs=2))
    env.ds.add_episode(bulk_in(2))
    env.ds.add_episode(bulk_out(2))


@pytest.mark.parametrize("bad", ALL_CASES)
def test_writers_work_on_after_a_rejected_call(env: Env, bad: Case) -> None:
    # a twin that never saw the bad call is the oracle for what the good writes produce
    twin = build()
    keep_writing(twin)
    with pytest.raises(bad.error, match=bad.match):
        bad.call(env)
    keep_writing(env)
    assert_same(snapshot(twin.ds), snapshot(env.ds))


# -- positive controls at the boundaries ---------------------------------------------------


@dataclass(frozen=True)
class Control:
    path: str  # where in a step dict the value goes
    value: Any
    field: str  # qualified key of the stored field
    expected: Any


def control(case_id: str, path: str, value: Any, field: str, expected: Any) -> Any:
    return pytest.param(Control(path, value, field, expected), id=case_id)


CONTROLS = [
    control("uint8-255", "observations/camera", bad_camera(255), "observation/camera", 255),
    control("uint8-0-from-float", "observations/camera", bad_camera(0.0), "observation/camera", 0),
    control("int16-2.0", "actions/button", 2.0, "action/button", 2),
    control("int16-min", "actions/button", -32768, "action/button", -32768),
    control("int16-from-int64-max", "actions/button", np.int64(32767), "action/button", 32767),
    control("bool-1", "actions/keyboard/jump", 1, "action/keyboard/jump", True),
    control("bool-0.0", "actions/keyboard/jump", 0.0, "action/keyboard/jump", False),
    control(
        "float64-to-float32",
        "observations/state",
        np.array([0.1, -2.5, 1e30]),
        "observation/state",
        np.array([0.1, -2.5, 1e30], dtype=np.float32),
    ),
    control("float32-max", "rewards", 3.4e38, "reward/reward", np.float32(3.4e38)),
    control("float32-inf", "rewards", -np.inf, "reward/reward", -np.inf),
    control("int32-from-bool", "observations/count", True, "observation/count", 1),
]


@pytest.mark.parametrize("good", CONTROLS)
def test_boundary_values_are_stored_exactly(env: Env, good: Control) -> None:
    before = env.ds.episode(3).read().buffers
    before = {key: np.array(value) for key, value in before.items()}
    env.writer.add_step(replaced(step(3), good.path, good.value))
    after = env.ds.episode(3).read().buffers
    assert len(env.ds.episode(3)) == 3
    stored = after[good.field][-1]
    assert stored.dtype == SCHEMA[good.field].np_dtype
    expected = np.broadcast_to(good.expected, stored.shape)
    if good.path.endswith("camera"):  # the value sits at (1, 0) of zeros
        expected = bad_camera(good.expected).astype(stored.dtype)
    np.testing.assert_array_equal(stored, expected)
    for key, rows in before.items():
        np.testing.assert_array_equal(after[key][:-1], rows, err_msg=key)


def test_bulk_boundary_values_are_stored_exactly(env: Env) -> None:
    episode = replaced(bulk_in(2), "initial_observation/camera", np.full((2, 2), 255.0))
    episode = replaced(episode, "actions/button", np.array([2.0, -32768.0]))
    episode = replaced(episode, "actions/keyboard/jump", np.array([1, 0]))
    index = env.ds.add_episode(episode)
    read = env.ds.episode(index).read()
    assert read.all_obs["camera"].dtype == np.uint8
    np.testing.assert_array_equal(read.all_obs["camera"][0], np.full((2, 2), 255))
    assert read.action["button"].dtype == np.int16
    np.testing.assert_array_equal(read.action["button"], [2, -32768])
    np.testing.assert_array_equal(read.action["keyboard"]["jump"], [True, False])


def test_library_errors_are_also_builtin_errors() -> None:
    assert issubclass(SchemaError, ValueError)
    assert issubclass(FieldNotFoundError, KeyError)
    assert issubclass(DatasetStateError, RuntimeError)


def test_a_missing_field_with_nothing_given_says_so_in_words():
    import numpy as np

    from episodata import Dataset, DatasetSchema, FieldSpec, SchemaError

    schema = DatasetSchema(
        [
            FieldSpec("state", shape=(2,), dtype="float32"),
            FieldSpec("a", shape=(), dtype="float32", role="action"),
        ]
    )
    dataset = Dataset.create(schema)
    bulk = {
        "initial_observation": {"state": np.zeros(2)},
        "observations": {"state": np.zeros((3, 2))},
        "actions": {},
        "terminated": True,
    }
    with pytest.raises(SchemaError, match="no action field was given") as bulk_error:
        dataset.add_episode(bulk)
    assert dataset.num_episodes == 0  # nothing written
    writer = dataset.new_episode({"state": np.zeros(2)})
    with pytest.raises(SchemaError, match="no action field was given") as step_error:
        writer.add_step({"observation": {"state": np.zeros(2)}, "action": {}})
    for error in (bulk_error, step_error):
        assert "given: []" not in str(error.value)
    assert len(dataset.episode(0)) == 0  # the refused step left the episode as it was
