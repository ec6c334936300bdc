"""The data-model identities (data-model.md §2-4), checked against hand-built oracles.

Every episode here has distinct values (``obs[t] = t * 10 + arange``, ``action[t] =
100 + t``, ...), so a value read from the wrong row can never pass by accident. Expected
arrays are written out by hand or built with plain Python loops, never with the code
under test.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from episodata_core import Dataset, DatasetSchema, FieldGroup, FieldSpec, Transition
from episodata_core.errors import FieldNotFoundError, SchemaError
from episodata_core.views import Batch, Flags, Segment

OBS_DIM = 3


# -- oracles ----------------------------------------------------------------------------


def obs_row(t: int) -> list[float]:
    """Observation t (t = 0 is the reset observation)."""
    return [t * 10.0 + j for j in range(OBS_DIM)]


def action_of(t: int) -> int:
    """Action of step t, the one that produced observation t + 1."""
    return 100 + t


def reward_of(t: int) -> float:
    return 0.25 * t + 1000.0


def action_in_episode(num_steps: int, **flags: Any) -> dict[str, Any]:
    return {
        "initial_observation": np.array(obs_row(0), dtype=np.float32),
        "observations": np.array(
            [obs_row(t + 1) for t in range(num_steps)], dtype=np.float32
        ).reshape(num_steps, OBS_DIM),
        "actions": np.array([action_of(t) for t in range(num_steps)], dtype=np.int64),
        "rewards": np.array([reward_of(t) for t in range(num_steps)], dtype=np.float32),
        **flags,
    }


def expected_transitions(num_steps: int) -> list[tuple[list[float], int, float, list[float]]]:
    """``(obs, action, reward, next_obs)`` of every transition, by brute force."""
    return [(obs_row(t), action_of(t), reward_of(t), obs_row(t + 1)) for t in range(num_steps)]


def assert_segment_equals(segment: Segment, transitions: list[Any]) -> None:
    length = len(transitions)
    obs = np.array([tr[0] for tr in transitions], dtype=np.float32).reshape(length, OBS_DIM)
    action = np.array([tr[1] for tr in transitions], dtype=np.int64)
    reward = np.array([tr[2] for tr in transitions], dtype=np.float32)
    next_obs = np.array([tr[3] for tr in transitions], dtype=np.float32).reshape(length, OBS_DIM)
    np.testing.assert_array_equal(segment.obs, obs, strict=True)
    np.testing.assert_array_equal(segment.action, action, strict=True)
    np.testing.assert_array_equal(segment.reward, reward, strict=True)
    np.testing.assert_array_equal(segment.next_obs, next_obs, strict=True)
    assert segment.all_obs.shape == (length + 1, OBS_DIM)
    assert len(segment) == length


def data_pointer(array: np.ndarray) -> int:
    return int(array.__array_interface__["data"][0])


def assert_views_of_one_buffer(obs: np.ndarray, next_obs: np.ndarray, all_obs: np.ndarray) -> None:
    """``obs`` starts at row 0 of ``all_obs`` and ``next_obs`` one row later: no copies."""
    assert np.shares_memory(obs, all_obs)
    assert np.shares_memory(next_obs, all_obs)
    row = all_obs.strides[0]
    assert data_pointer(obs) == data_pointer(all_obs)
    assert data_pointer(next_obs) == data_pointer(all_obs) + row


def nested_episode() -> dict[str, Any]:
    """Four steps; mapping roles with nested keys, and a ``camera`` in two roles."""
    num_steps = 4
    frames = np.arange((num_steps + 1) * 3 * 2 * 2, dtype=np.uint8).reshape(-1, 3, 2, 2)
    states = np.array([[t, -t] for t in range(num_steps + 1)], dtype=np.float32)
    return {
        "initial_observation": {"camera": frames[0], "state": states[0]},
        "observations": {"camera": frames[1:], "state": states[1:]},
        "actions": {
            "move": np.array([[t, t + 0.5] for t in range(num_steps)], dtype=np.float32),
            "camera": np.array([[-t, 2 * t] for t in range(num_steps)], dtype=np.int64),
            "keyboard": {
                "jump": np.array([t % 2 == 0 for t in range(num_steps)]),
                "crouch": np.array([t == 2 for t in range(num_steps)]),
            },
        },
        "rewards": np.array([10.0 + t for t in range(num_steps)], dtype=np.float32),
        "terminated": True,
    }


# -- round trips ------------------------------------------------------------------------


def test_bulk_action_in_round_trip() -> None:
    episode = action_in_episode(6, terminated=True)
    dataset = Dataset.from_episodes([episode])
    segment = dataset.episode(0).read()

    np.testing.assert_array_equal(segment.obs[0], episode["initial_observation"], strict=True)
    np.testing.assert_array_equal(segment.next_obs, episode["observations"], strict=True)
    np.testing.assert_array_equal(segment.obs[1:], episode["observations"][:-1], strict=True)
    np.testing.assert_array_equal(segment.action, episode["actions"], strict=True)
    np.testing.assert_array_equal(segment.reward, episode["rewards"], strict=True)
    all_obs = np.array([obs_row(t) for t in range(7)], dtype=np.float32)
    np.testing.assert_array_equal(segment.all_obs, all_obs, strict=True)
    assert_segment_equals(segment, expected_transitions(6))
    assert len(dataset.episode(0)) == 6
    assert dataset.num_steps == 6


def test_action_out_with_final_observation_keeps_every_step() -> None:
    # action-out: actions[t] is taken at observations[t]
    num_steps = 5
    episode = {
        "observations": np.array([obs_row(t) for t in range(num_steps)], dtype=np.float32),
        "actions": np.array([action_of(t) for t in range(num_steps)], dtype=np.int64),
        "rewards": np.array([reward_of(t) for t in range(num_steps)], dtype=np.float32),
        "final_observation": np.array(obs_row(num_steps), dtype=np.float32),
        "terminated": True,
    }
    dataset = Dataset.from_episodes([episode])
    stored = dataset.episode(0)
    assert len(stored) == num_steps
    assert (stored.terminated, stored.truncated, stored.ongoing) == (True, False, False)
    segment = stored.read()
    assert_segment_equals(segment, expected_transitions(num_steps))
    np.testing.assert_array_equal(segment.terminated, [False] * 4 + [True])


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        pytest.param({}, (False, False), id="no-flags"),
        # the terminal step is the dropped one: the kept episode stops short of its end
        pytest.param({"terminated": True}, (False, True), id="terminated-becomes-truncated"),
        pytest.param({"truncated": True}, (False, True), id="truncated-stays-truncated"),
        pytest.param(
            {"terminated": np.array([False, False, False, False, True])},
            (False, True),
            id="per-step-terminated",
        ),
    ],
)
def test_action_out_without_final_observation_drops_the_last_step(
    flags: dict[str, Any], expected: tuple[bool, bool]
) -> None:
    num_steps = 5
    episode = {
        "observations": np.array([obs_row(t) for t in range(num_steps)], dtype=np.float32),
        "actions": np.array([action_of(t) for t in range(num_steps)], dtype=np.int64),
        "rewards": np.array([reward_of(t) for t in range(num_steps)], dtype=np.float32),
        **flags,
    }
    dataset = Dataset.from_episodes([episode], alignment="action-out")
    stored = dataset.episode(0)
    assert len(stored) == num_steps - 1
    assert (stored.terminated, stored.truncated) == expected
    assert not stored.ongoing
    segment = stored.read()
    # the last action (104) and reward had no successor observation
    assert_segment_equals(segment, expected_transitions(num_steps - 1))
    np.testing.assert_array_equal(segment.terminated, [False, False, False, expected[0]])
    np.testing.assert_array_equal(segment.truncated, [False, False, False, expected[1]])


def test_action_out_without_final_observation_needs_an_explicit_alignment() -> None:
    episode = {
        "observations": np.zeros((3, OBS_DIM), dtype=np.float32),
        "actions": np.zeros(3, dtype=np.int64),
    }
    with pytest.raises(SchemaError, match="cannot tell how observations and actions line up"):
        Dataset.from_episodes([episode])


# -- views ------------------------------------------------------------------------------


def test_obs_and_next_obs_are_overlapping_views_of_all_obs() -> None:
    dataset = Dataset.from_episodes([action_in_episode(8)])
    segment = dataset.episode(0).read()
    obs, next_obs, all_obs = segment.obs, segment.next_obs, segment.all_obs
    assert np.shares_memory(obs, next_obs)
    assert_views_of_one_buffer(obs, next_obs, all_obs)
    assert obs.strides == next_obs.strides == all_obs.strides


ALIASES = [
    ("observation", "obs"),
    ("observations", "obs"),
    ("next_observation", "next_obs"),
    ("next_observations", "next_obs"),
    ("all_observations", "all_obs"),
    ("actions", "action"),
    ("rewards", "reward"),
    ("infos", "info"),
    ("next_infos", "next_info"),
]


def _with_infos(num_steps: int) -> dict[str, Any]:
    episode = action_in_episode(num_steps)
    episode["initial_info"] = {"energy": np.float32(-1.0)}
    episode["infos"] = {"energy": np.arange(num_steps, dtype=np.float32)}
    return episode


@pytest.mark.parametrize(("alias", "canonical"), ALIASES)
@pytest.mark.parametrize("reader", ["read", "step"])
def test_every_alias_returns_the_identical_object(alias: str, canonical: str, reader: str) -> None:
    dataset = Dataset.from_episodes([_with_infos(4)])
    episode = dataset.episode(0)
    view = episode.read() if reader == "read" else episode.step(1)
    first = getattr(view, alias)
    assert first is getattr(view, canonical)
    assert getattr(view, alias) is first  # and again: cached, not rebuilt


def test_bare_role_unwraps_to_an_array_and_a_dict_role_stays_a_mapping() -> None:
    episode = action_in_episode(3)
    episode["actions"] = {"steer": np.array([1.0, 2.0, 3.0], dtype=np.float32)}
    dataset = Dataset.from_episodes([episode])
    segment = dataset.episode(0).read()
    assert type(segment.obs) is np.ndarray
    assert type(segment.reward) is np.ndarray
    assert isinstance(segment.action, FieldGroup)
    np.testing.assert_array_equal(segment.action["steer"], [1.0, 2.0, 3.0], strict=False)
    assert segment.action.steer.dtype == np.float32
    assert [(s.role, s.key) for s in dataset.schema] == [
        ("observation", "observation"),
        ("action", "steer"),
        ("reward", "reward"),
    ]


def test_nested_access_by_key_path_attribute_and_chained_brackets() -> None:
    episode = nested_episode()
    segment = Dataset.from_episodes([episode]).episode(0).read()
    jump = episode["actions"]["keyboard"]["jump"]
    for value in (
        segment.action["keyboard/jump"],
        segment.action.keyboard.jump,
        segment.action["keyboard"]["jump"],
        segment.action["keyboard"].jump,
    ):
        np.testing.assert_array_equal(value, jump, strict=True)
    assert isinstance(segment.action.keyboard, FieldGroup)
    assert dict(segment.action.keyboard.flat()).keys() == {"jump", "crouch"}


def test_a_role_iterates_full_keys_and_a_nested_group_its_children() -> None:
    # compat.md: the flat keys are the stable names; attribute access rebuilds the tree
    dataset = Dataset.from_episodes([nested_episode()])
    segment = dataset.episode(0).read()
    assert list(segment.action) == ["move", "camera", "keyboard/jump", "keyboard/crouch"]
    assert len(segment.action) == 4
    assert "keyboard" in segment.action
    assert list(segment.action.keyboard) == ["jump", "crouch"]
    assert list(segment.obs) == ["camera", "state"]
    selected = dataset.episode(0).read(fields=["action/keyboard/jump", "observation/state"])
    assert list(selected.action) == ["keyboard/jump"]
    assert list(selected.action.keyboard) == ["jump"]
    assert list(selected.obs) == ["state"]


def test_unknown_names_raise_errors_that_name_what_is_missing() -> None:
    segment = Dataset.from_episodes([nested_episode()]).episode(0).read()
    with pytest.raises(KeyError, match=r"'sonar'.*camera.*state"):
        segment.obs["sonar"]
    with pytest.raises(AttributeError, match=r"'sonar'"):
        _ = segment.obs.sonar
    with pytest.raises(KeyError, match=r"^action has no field or group 'keyboard/run'"):
        segment.action["keyboard/run"]
    with pytest.raises(KeyError, match=r"action/keyboard has no .* 'run' .*'crouch', 'jump'"):
        segment.action["keyboard"]["run"]
    with pytest.raises(AttributeError, match=r"'run'"):
        _ = segment.action.keyboard.run
    # a role without fields is an empty mapping (compat.md); looking into it says why
    assert dict(segment.info) == {}
    with pytest.raises(AttributeError, match="no info field"):
        _ = segment.info.success


def test_camera_observation_and_camera_action_coexist() -> None:
    episode = nested_episode()
    dataset = Dataset.from_episodes([episode])
    assert "observation/camera" in dataset.schema
    assert "action/camera" in dataset.schema
    assert dataset.schema.field("observation", "camera").dtype == "uint8"
    assert dataset.schema.field("action", "camera").dtype == "int64"
    segment = dataset.episode(0).read()
    frames = np.concatenate(
        [episode["initial_observation"]["camera"][None], episode["observations"]["camera"]]
    )
    np.testing.assert_array_equal(segment.obs.camera, frames[:-1], strict=True)
    np.testing.assert_array_equal(segment.next_obs["camera"], frames[1:], strict=True)
    np.testing.assert_array_equal(segment.action.camera, episode["actions"]["camera"], strict=True)
    assert not np.shares_memory(segment.all_obs.camera, segment.action.camera)
    # fields= by bare key picks both; role/key picks one
    both = dataset.episode(0).read(fields="camera")
    assert set(both.fields) == {"observation/camera", "action/camera"}
    only_action = dataset.episode(0).read(fields="action/camera")
    assert only_action.fields == ("action/camera",)
    np.testing.assert_array_equal(only_action.action.camera, episode["actions"]["camera"])


def test_info_and_next_info_align_with_initial_info() -> None:
    num_steps = 4
    episode = action_in_episode(num_steps)
    episode["initial_info"] = {"energy": np.float32(-1.0), "phase": np.int64(50)}
    episode["infos"] = {
        "energy": np.array([1.5, 2.5, 3.5, 4.5], dtype=np.float32),
        "phase": np.array([51, 52, 53, 54], dtype=np.int64),
    }
    segment = Dataset.from_episodes([episode]).episode(0).read()
    # info t belongs to observation t: the reset info first
    np.testing.assert_array_equal(segment.info.energy, [-1.0, 1.5, 2.5, 3.5], strict=False)
    np.testing.assert_array_equal(segment.next_info.energy, [1.5, 2.5, 3.5, 4.5], strict=False)
    np.testing.assert_array_equal(segment.info["phase"], [50, 51, 52, 53], strict=False)
    np.testing.assert_array_equal(segment.next_info["phase"], [51, 52, 53, 54], strict=False)
    np.testing.assert_array_equal(segment.all_infos.phase, [50, 51, 52, 53, 54], strict=False)
    assert segment.info.energy.dtype == np.float32
    assert np.shares_memory(segment.info.phase, segment.next_info.phase)


def test_bare_info_role_unwraps() -> None:
    episode = action_in_episode(3)
    episode["initial_info"] = np.int64(7)
    episode["infos"] = np.array([8, 9, 10], dtype=np.int64)
    segment = Dataset.from_episodes([episode]).episode(0).read()
    np.testing.assert_array_equal(segment.info, np.array([7, 8, 9], dtype=np.int64), strict=True)
    np.testing.assert_array_equal(segment.next_info, np.array([8, 9, 10]), strict=True)


def test_infos_without_initial_info_are_rejected() -> None:
    episode = action_in_episode(3)
    episode["infos"] = np.array([8, 9, 10], dtype=np.int64)
    with pytest.raises(SchemaError, match="initial_info"):
        Dataset.from_episodes([episode])


# -- flags and mask ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "flags",
    [
        {"terminated": True},
        {"truncated": True},
        {"terminated": True, "truncated": True},
        {},
    ],
    ids=["terminated", "truncated", "both", "neither"],
)
def test_flags_are_true_only_on_the_last_transition(flags: dict[str, bool]) -> None:
    dataset = Dataset.from_episodes([action_in_episode(10, **flags)])
    episode = dataset.episode(0)
    terminated, truncated = flags.get("terminated", False), flags.get("truncated", False)
    assert (episode.terminated, episode.truncated, episode.ongoing) == (
        terminated,
        truncated,
        False,
    )
    segment = episode.read()
    expected_terminated = [False] * 9 + [terminated]
    expected_truncated = [False] * 9 + [truncated]
    assert segment.terminated.dtype == np.bool_
    np.testing.assert_array_equal(segment.terminated, expected_terminated)
    np.testing.assert_array_equal(segment.truncated, expected_truncated)
    np.testing.assert_array_equal(segment.mask, [True] * 10)


def test_flags_appear_only_when_the_window_contains_the_last_transition() -> None:
    episode = Dataset.from_episodes([action_in_episode(10, terminated=True)]).episode(0)
    np.testing.assert_array_equal(episode.segment(0, 5).terminated, [False] * 5)
    np.testing.assert_array_equal(episode.segment(0, 9).terminated, [False] * 9)
    np.testing.assert_array_equal(episode.segment(5, 10).terminated, [False] * 4 + [True])
    np.testing.assert_array_equal(episode.segment(-3).terminated, [False, False, True])
    np.testing.assert_array_equal(episode.segment(9, 10).terminated, [True])
    for t in range(10):
        assert bool(episode.step(t).terminated) is (t == 9)
        assert bool(episode.step(t).truncated) is False
    assert bool(episode.step(-1).terminated) is True


def test_ongoing_episodes_have_no_flags() -> None:
    dataset = Dataset.create(DatasetSchema.infer(action_in_episode(1)))
    writer = dataset.new_episode(np.array(obs_row(0), dtype=np.float32))
    for t in range(4):
        writer.add_step(
            {
                "observations": np.array(obs_row(t + 1), dtype=np.float32),
                "actions": action_of(t),
                "rewards": reward_of(t),
            }
        )
    episode = dataset.episode(0)
    assert episode.ongoing
    assert (episode.terminated, episode.truncated) == (False, False)
    segment = episode.read()
    np.testing.assert_array_equal(segment.terminated, [False] * 4)
    np.testing.assert_array_equal(segment.truncated, [False] * 4)
    np.testing.assert_array_equal(segment.mask, [True] * 4)
    assert bool(episode.step(-1).terminated) is False
    assert_segment_equals(segment, expected_transitions(4))


def test_mask_is_all_true_for_unpadded_reads() -> None:
    episode = Dataset.from_episodes([action_in_episode(7, truncated=True)]).episode(0)
    for segment in (episode.read(), episode.segment(2, 5), episode.segment(-4)):
        assert segment.mask.dtype == np.bool_
        assert segment.mask.shape == (len(segment),)
        assert segment.mask.all()
    assert bool(episode.step(3).mask) is True


# -- windows ----------------------------------------------------------------------------

SLICE_BOUNDS = [None, -12, -11, -10, -7, -3, -1, 0, 1, 3, 7, 9, 10, 11, 15]


@pytest.mark.parametrize("start", SLICE_BOUNDS)
@pytest.mark.parametrize("stop", SLICE_BOUNDS)
def test_segment_follows_python_slice_semantics(start: int | None, stop: int | None) -> None:
    num_steps = 10
    episode = Dataset.from_episodes([action_in_episode(num_steps, terminated=True)]).episode(0)
    brute_force = expected_transitions(num_steps)
    expected = brute_force[start:stop]
    segment = episode.segment(start, stop)
    assert_segment_equals(segment, expected)
    # the terminal flag shows exactly when the last transition is in the window
    contains_last = bool(expected) and expected[-1] == brute_force[-1]
    np.testing.assert_array_equal(
        segment.terminated,
        [False] * (len(expected) - 1) + [True] if contains_last else [False] * len(expected),
    )


@pytest.mark.parametrize("t", range(-6, 6))
def test_step_returns_one_transition_without_a_time_axis(t: int) -> None:
    num_steps = 6
    episode = Dataset.from_episodes([action_in_episode(num_steps)]).episode(0)
    obs, action, reward, next_obs = expected_transitions(num_steps)[t]
    transition = episode.step(t)
    assert isinstance(transition, Transition)
    assert transition.obs.shape == (OBS_DIM,)
    np.testing.assert_array_equal(transition.obs, np.array(obs, dtype=np.float32), strict=True)
    np.testing.assert_array_equal(
        transition.next_obs, np.array(next_obs, dtype=np.float32), strict=True
    )
    assert transition.action.shape == ()
    assert transition.action == action
    assert transition.reward == np.float32(reward)
    assert transition.all_obs.shape == (2, OBS_DIM)
    assert_views_of_one_buffer(transition.obs, transition.next_obs, transition.all_obs)
    # identical to the same transition of a full read
    segment = episode.read()
    np.testing.assert_array_equal(transition.obs, segment.obs[t], strict=True)
    np.testing.assert_array_equal(transition.next_obs, segment.next_obs[t], strict=True)
    np.testing.assert_array_equal(transition.next_obs, segment.all_obs[t % num_steps + 1])


@pytest.mark.parametrize("t", [-7, 6, 100])
def test_step_out_of_range_raises_index_error(t: int) -> None:
    episode = Dataset.from_episodes([action_in_episode(6)]).episode(0)
    with pytest.raises(IndexError, match=f"step {t} is out of range"):
        episode.step(t)


# -- map and select ---------------------------------------------------------------------


def test_map_calls_fn_once_per_buffer_and_keeps_obs_next_obs_shared() -> None:
    dataset = Dataset.from_episodes([nested_episode()])
    segment = dataset.episode(0).read()
    buffers = dict(segment.buffers)
    flag_arrays = [segment.terminated, segment.truncated, segment.mask]
    calls: list[int] = []

    def counting_copy(array: np.ndarray) -> np.ndarray:
        calls.append(id(array))
        return np.copy(array)

    mapped = segment.map(counting_copy)
    # once per field buffer plus once per flag array, never per view
    expected_ids = [id(b) for b in buffers.values()] + [id(a) for a in flag_arrays]
    assert sorted(calls) == sorted(expected_ids)
    assert len(calls) == len(buffers) + 3
    assert np.shares_memory(mapped.obs.camera, mapped.next_obs.camera)
    assert np.shares_memory(mapped.obs["state"], mapped.next_obs["state"])
    assert not np.shares_memory(mapped.obs.camera, segment.obs.camera)
    np.testing.assert_array_equal(mapped.obs.camera, segment.obs.camera, strict=True)
    np.testing.assert_array_equal(mapped.action.keyboard.jump, segment.action.keyboard.jump)
    np.testing.assert_array_equal(mapped.terminated, segment.terminated, strict=True)


def test_map_of_a_bare_segment_keeps_sharing() -> None:
    segment = Dataset.from_episodes([action_in_episode(5)]).episode(0).read()
    mapped = segment.map(np.copy)
    assert np.shares_memory(mapped.obs, mapped.next_obs)
    assert data_pointer(mapped.next_obs) == data_pointer(mapped.all_obs) + mapped.all_obs.strides[0]
    assert_segment_equals(mapped, expected_transitions(5))


def test_select_by_key_group_and_role_key() -> None:
    segment = Dataset.from_episodes([nested_episode()]).episode(0).read()
    assert segment.select("state").fields == ("observation/state",)
    assert set(segment.select("keyboard").fields) == {
        "action/keyboard/jump",
        "action/keyboard/crouch",
    }
    assert segment.select("action/camera").fields == ("action/camera",)
    assert set(segment.select("camera").fields) == {"observation/camera", "action/camera"}
    assert set(segment.select("observation").fields) == {
        "observation/camera",
        "observation/state",
    }
    chosen = segment.select(["keyboard/jump", "reward"])
    assert set(chosen.fields) == {"action/keyboard/jump", "reward/reward"}
    np.testing.assert_array_equal(chosen.reward, segment.reward, strict=True)
    assert np.shares_memory(chosen.reward, segment.reward)  # selection never copies
    assert dict(chosen.obs) == {}  # an unselected role reads as an empty mapping
    with pytest.raises(AttributeError, match="no observation field"):
        _ = chosen.obs.camera
    with pytest.raises(FieldNotFoundError, match="'sonar' matches no field"):
        segment.select("sonar")
    # only fields the view holds can be selected
    with pytest.raises(FieldNotFoundError, match="'state' matches no field"):
        chosen.select("state")


def test_fields_on_read_selects_the_same_fields_as_select() -> None:
    episode = Dataset.from_episodes([nested_episode()]).episode(0)
    for fields in ("keyboard", ["observation/camera", "move"], "reward"):
        read = episode.read(fields=fields)
        assert set(read.fields) == set(episode.read().select(fields).fields)
    segment = episode.segment(1, 3, fields="state")
    np.testing.assert_array_equal(segment.obs.state, [[1, -1], [2, -2]], strict=False)
    transition = episode.step(2, fields=["move"])
    np.testing.assert_array_equal(transition.action.move, [2.0, 2.5], strict=False)


# -- context and target -----------------------------------------------------------------


def test_batch_context_and_target_share_the_boundary_row() -> None:
    batch_size, context, target = 2, 3, 4
    num_rows = context + target + 1
    schema = DatasetSchema(
        [
            FieldSpec("observation", shape=(2,), dtype="float32"),
            FieldSpec("action", shape=(), dtype="int64", role="action"),
        ]
    )
    obs = np.array(
        [
            [[b * 1000 + r * 10, b * 1000 + r * 10 + 1] for r in range(num_rows)]
            for b in range(batch_size)
        ],
        dtype=np.float32,
    )
    actions = np.array([[b * 100 + r for r in range(num_rows)] for b in range(batch_size)])
    length = context + target
    terminated = np.zeros((batch_size, length), dtype=bool)
    terminated[1, -1] = True
    flags = Flags(terminated, np.zeros_like(terminated), np.ones_like(terminated))
    batch = Batch(
        schema,
        {"observation/observation": obs, "action/action": actions},
        flags,
        split=context,
    )
    assert len(batch) == batch_size
    assert batch.sequence_length == length
    assert batch.context.obs.shape == (batch_size, context, 2)
    assert batch.target.obs.shape == (batch_size, target, 2)
    assert batch.context.all_obs.shape == (batch_size, context + 1, 2)
    np.testing.assert_array_equal(batch.target.obs[:, 0], batch.context.next_obs[:, -1])
    np.testing.assert_array_equal(batch.target.obs[:, 0], obs[:, context])
    assert np.shares_memory(batch.target.obs, batch.context.next_obs)
    assert data_pointer(batch.target.obs[:, 0]) == data_pointer(batch.context.next_obs[:, -1])
    # actions: context holds rows 1..C, target rows C+1..C+K
    np.testing.assert_array_equal(batch.context.action, [[1, 2, 3], [101, 102, 103]])
    np.testing.assert_array_equal(batch.target.action, [[4, 5, 6, 7], [104, 105, 106, 107]])
    np.testing.assert_array_equal(batch.context.terminated, np.zeros((2, 3), dtype=bool))
    np.testing.assert_array_equal(batch.target.terminated, [[False] * 4, [False] * 3 + [True]])
    assert batch.target.mask.shape == (batch_size, target)


def test_context_without_a_split_raises() -> None:
    segment = Dataset.from_episodes([action_in_episode(3)]).episode(0).read()
    with pytest.raises(AttributeError, match="context_length="):
        _ = segment.context


# -- schema -----------------------------------------------------------------------------


def test_infer_gives_image_fields_a_layout_and_byte_bounds() -> None:
    num_steps = 2
    episode = {
        "initial_observation": {
            "chw": np.zeros((3, 8, 6), dtype=np.uint8),
            "hwc": np.zeros((8, 6, 4), dtype=np.uint8),
            "gray": np.zeros((1, 5, 5), dtype=np.uint8),
            "bytes": np.zeros((5,), dtype=np.uint8),
            "float_image": np.zeros((3, 8, 6), dtype=np.float32),
        },
        "observations": {
            "chw": np.zeros((num_steps, 3, 8, 6), dtype=np.uint8),
            "hwc": np.zeros((num_steps, 8, 6, 4), dtype=np.uint8),
            "gray": np.zeros((num_steps, 1, 5, 5), dtype=np.uint8),
            "bytes": np.zeros((num_steps, 5), dtype=np.uint8),
            "float_image": np.zeros((num_steps, 3, 8, 6), dtype=np.float32),
        },
        "actions": np.zeros(num_steps, dtype=np.int64),
        "rewards": np.zeros(num_steps, dtype=np.float64),
    }
    schema = DatasetSchema.infer(episode)
    assert list(schema) == [
        FieldSpec("chw", shape=(3, 8, 6), dtype="uint8", layout="CHW", low=0, high=255),
        FieldSpec("hwc", shape=(8, 6, 4), dtype="uint8", layout="HWC", low=0, high=255),
        FieldSpec("gray", shape=(1, 5, 5), dtype="uint8", layout="CHW", low=0, high=255),
        FieldSpec("bytes", shape=(5,), dtype="uint8"),
        FieldSpec("float_image", shape=(3, 8, 6), dtype="float32"),
        FieldSpec("action", shape=(), dtype="int64", role="action"),
        FieldSpec("reward", shape=(), dtype="float64", role="reward"),
    ]


def test_schema_json_round_trip() -> None:
    schema = DatasetSchema(
        [
            FieldSpec("camera", shape=(3, 64, 64), dtype="uint8", layout="CHW", low=0, high=255),
            FieldSpec("keyboard/jump", shape=(), dtype=bool, role="action"),
            FieldSpec("camera", shape=(2,), dtype="int64", role="action"),
            FieldSpec("reward", shape=(), dtype=np.float32, role="reward"),
            FieldSpec(
                "energy",
                shape=(),
                dtype="float64",
                role="info",
                optional=True,
                description="battery level",
                metadata={"unit": "J", "sensors": [1, 2]},
            ),
        ]
    )
    text = schema.to_json()
    restored = DatasetSchema.from_json(text)
    assert restored == schema
    assert restored.field("info", "energy").metadata == {"unit": "J", "sensors": [1, 2]}
    assert restored.field("action", "keyboard/jump").dtype == "bool"
    assert restored.qualified_keys == (
        "observation/camera",
        "action/keyboard/jump",
        "action/camera",
        "reward/reward",
        "info/energy",
    )


def test_schema_resolve_by_key_group_and_role_key() -> None:
    schema = DatasetSchema.infer(nested_episode())

    def keys(selectors: Any) -> list[str]:
        return [spec.qualified_key for spec in schema.resolve(selectors)]

    assert keys(None) == list(schema.qualified_keys)
    assert keys("keyboard") == ["action/keyboard/jump", "action/keyboard/crouch"]
    assert keys("action/keyboard") == ["action/keyboard/jump", "action/keyboard/crouch"]
    assert keys("keyboard/jump") == ["action/keyboard/jump"]
    assert keys("camera") == ["observation/camera", "action/camera"]
    assert keys("observation/camera") == ["observation/camera"]
    assert keys("action") == [
        "action/move",
        "action/camera",
        "action/keyboard/jump",
        "action/keyboard/crouch",
    ]
    # schema order is kept, whatever order the selectors come in
    assert keys(["reward", "state", "move"]) == [
        "observation/state",
        "action/move",
        "reward/reward",
    ]
    # a prefix that is not a whole group name selects nothing
    with pytest.raises(FieldNotFoundError, match="'key' matches no field"):
        schema.resolve("key")


# -- property: any small episode round-trips exactly ------------------------------------

DTYPES = [np.dtype(np.float32), np.dtype(np.int64), np.dtype(np.uint8)]


@st.composite
def role_layout(
    draw: st.DrawFn,
) -> list[tuple[str, tuple[int, ...], np.dtype[Any]]] | tuple[int, ...]:
    """Either one bare field (a shape) or up to three nested fields ``(key, shape, dtype)``."""
    shapes = st.lists(st.integers(1, 3), max_size=3).map(tuple)
    if draw(st.booleans()):
        return draw(shapes)
    paths = draw(
        st.lists(
            # no name is both a leaf and a group, which a schema forbids
            st.sampled_from(["a", "b", "g/a", "g/b", "g/h/c"]),
            min_size=1,
            max_size=3,
            unique=True,
        )
    )
    return [(path, draw(shapes), draw(st.sampled_from(DTYPES))) for path in paths]


def _values(draw: st.DrawFn, shape: tuple[int, ...], dtype: np.dtype[Any]) -> np.ndarray:
    size = int(np.prod(shape))
    if dtype == np.float32:
        elements = st.floats(-1e6, 1e6, width=32, allow_nan=False)
    elif dtype == np.int64:
        elements = st.integers(-(2**62), 2**62)
    else:
        elements = st.integers(0, 255)
    return np.array(draw(st.lists(elements, min_size=size, max_size=size)), dtype=dtype).reshape(
        shape
    )


def _nest(flat: dict[str, np.ndarray]) -> dict[str, Any]:
    nested: dict[str, Any] = {}
    for path, value in flat.items():
        *groups, leaf = path.split("/")
        node = nested
        for group in groups:
            node = node.setdefault(group, {})
        node[leaf] = value
    return nested


@st.composite
def random_episode(draw: st.DrawFn) -> tuple[dict[str, Any], dict[str, dict[str, np.ndarray]]]:
    """A bulk action-in episode and, per role, the expected ``[T + 1]`` / ``[T]`` arrays."""
    num_steps = draw(st.integers(0, 20))
    expected: dict[str, dict[str, np.ndarray]] = {}
    episode: dict[str, Any] = {}
    for role, rows in (("observation", num_steps + 1), ("action", num_steps)):
        layout = draw(role_layout())
        if isinstance(layout, tuple):
            dtype = draw(st.sampled_from(DTYPES))
            flat = {role: _values(draw, (rows, *layout), dtype)}
        else:
            flat = {key: _values(draw, (rows, *shape), dtype) for key, shape, dtype in layout}
        expected[role] = flat
        bare = set(flat) == {role}
        if role == "observation":
            initial = {k: v[0] for k, v in flat.items()}
            later = {k: v[1:] for k, v in flat.items()}
            episode["initial_observation"] = initial[role] if bare else _nest(initial)
            episode["observations"] = later[role] if bare else _nest(later)
        else:
            episode["actions"] = flat[role] if bare else _nest(flat)
    reward_dtype = draw(st.sampled_from([np.dtype(np.float32), np.dtype(np.int64)]))
    rewards = _values(draw, (num_steps,), reward_dtype)
    episode["rewards"] = rewards
    expected["reward"] = {"reward": rewards}
    episode["terminated"] = draw(st.booleans())
    episode["truncated"] = draw(st.booleans())
    return episode, expected


@settings(max_examples=60, deadline=None)
@given(random_episode())
def test_random_episodes_round_trip_exactly(
    case: tuple[dict[str, Any], dict[str, dict[str, np.ndarray]]],
) -> None:
    episode, expected = case
    dataset = Dataset.from_episodes([episode])
    stored = dataset.episode(0)
    num_steps = len(expected["reward"]["reward"])
    assert len(stored) == num_steps
    assert (stored.terminated, stored.truncated) == (episode["terminated"], episode["truncated"])
    segment = stored.read()

    def leaves(value: Any) -> dict[str, np.ndarray]:
        if isinstance(value, np.ndarray):
            return {"": value}
        return dict(value.flat())

    def by_key(role: str, value: Any) -> dict[str, np.ndarray]:
        found = leaves(value)
        return {role: found[""]} if "" in found else found

    all_obs = by_key("observation", segment.all_obs)
    obs = by_key("observation", segment.obs)
    next_obs = by_key("observation", segment.next_obs)
    assert all_obs.keys() == expected["observation"].keys()
    for key, rows in expected["observation"].items():
        np.testing.assert_array_equal(all_obs[key], rows, strict=True)
        np.testing.assert_array_equal(obs[key], rows[:-1], strict=True)
        np.testing.assert_array_equal(next_obs[key], rows[1:], strict=True)
        if num_steps >= 2:
            # L = 1 windows are adjacent rows, not overlapping ones
            assert np.shares_memory(obs[key], next_obs[key])
        if num_steps >= 1:
            assert_views_of_one_buffer(obs[key], next_obs[key], all_obs[key])
    action = by_key("action", segment.action)
    assert action.keys() == expected["action"].keys()
    for key, rows in expected["action"].items():
        np.testing.assert_array_equal(action[key], rows, strict=True)
    np.testing.assert_array_equal(segment.reward, expected["reward"]["reward"], strict=True)
    last = [False] * max(num_steps - 1, 0)
    if num_steps:
        np.testing.assert_array_equal(segment.terminated, [*last, episode["terminated"]])
        np.testing.assert_array_equal(segment.truncated, [*last, episode["truncated"]])
    else:
        assert segment.terminated.shape == segment.truncated.shape == (0,)
    assert segment.mask.all()
