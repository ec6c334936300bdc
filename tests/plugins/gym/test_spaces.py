"""schema_from_gym_spaces: hand-written expected fields, and space.sample() as the oracle."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from typing import Any

import numpy as np
import pytest

gym = pytest.importorskip("gymnasium")
from gymnasium import spaces

from episodata_core.errors import SchemaError
from episodata_core.schema import DatasetSchema, FieldSpec
from episodata_gym import schema_from_gym_spaces

INF = np.inf
F32 = np.float32
SUPPORTED = "Supported spaces: Box, Discrete, MultiDiscrete, MultiBinary, Dict, Tuple."
REWARD = FieldSpec("reward", shape=(), dtype="float32", role="reward")
DISCRETE_2_ACTION = FieldSpec("action", shape=(), dtype="int64", role="action", low=0, high=1)


def obs(
    key: str,
    shape: tuple[int, ...],
    dtype: str,
    *,
    low: Any = None,
    high: Any = None,
    layout: str | None = None,
) -> FieldSpec:
    return FieldSpec(
        key, shape=shape, dtype=dtype, role="observation", low=low, high=high, layout=layout
    )


def f32(*values: float) -> np.ndarray:
    # float32 bounds, so gymnasium does not warn about lowering their precision
    return np.array(values, dtype=F32)


# each observation space with its fields, written out by hand
OBSERVATION_CASES = [
    pytest.param(
        spaces.Box(-INF, INF, (3,), F32),
        [obs("observation", (3,), "float32")],
        id="box-unbounded",
    ),
    pytest.param(
        spaces.Box(-1.0, 1.0, (2, 3), F32),
        [obs("observation", (2, 3), "float32", low=-1.0, high=1.0)],
        id="box-uniform-bounds",
    ),
    pytest.param(
        spaces.Box(f32(0.0, -1.25), f32(1.0, 2.5), dtype=F32),
        [obs("observation", (2,), "float32", low=[0.0, -1.25], high=[1.0, 2.5])],
        id="box-per-element-bounds",
    ),
    pytest.param(
        spaces.Box(f32(0.0, -INF), f32(1.0, 1.0), dtype=F32),
        [obs("observation", (2,), "float32", low=None, high=1.0)],
        id="box-partly-infinite-low",
    ),
    pytest.param(
        spaces.Box(0.0, 1.0, (), F32),
        [obs("observation", (), "float32", low=0.0, high=1.0)],
        id="box-scalar",
    ),
    pytest.param(
        spaces.Box(0.0, 1.0, (2,), np.float64),
        [obs("observation", (2,), "float64", low=0.0, high=1.0)],
        id="box-float64-kept",
    ),
    pytest.param(
        spaces.Box(-INF, INF, (2,), np.int64),
        [obs("observation", (2,), "int64")],
        id="box-int-unbounded",
    ),
    pytest.param(
        spaces.Box(0, INF, (2,), np.int32),
        [obs("observation", (2,), "int32", low=0, high=None)],
        id="box-int-half-bounded",
    ),
    pytest.param(
        spaces.Box(0, 255, (64, 48, 3), np.uint8),
        [obs("observation", (64, 48, 3), "uint8", low=0, high=255, layout="HWC")],
        id="image-hwc",
    ),
    pytest.param(
        spaces.Box(0, 255, (3, 64, 48), np.uint8),
        [obs("observation", (3, 64, 48), "uint8", low=0, high=255, layout="CHW")],
        id="image-chw",
    ),
    pytest.param(
        spaces.Box(0, 255, (1, 84, 84), np.uint8),
        [obs("observation", (1, 84, 84), "uint8", low=0, high=255, layout="CHW")],
        id="image-gray-chw",
    ),
    pytest.param(
        spaces.Box(0, 255, (32, 32, 4), np.uint8),
        [obs("observation", (32, 32, 4), "uint8", low=0, high=255, layout="HWC")],
        id="image-rgba-hwc",
    ),
    pytest.param(
        spaces.Box(0, 255, (16, 16), np.uint8),
        [obs("observation", (16, 16), "uint8", low=0, high=255)],
        id="uint8-2d-no-layout",
    ),
    pytest.param(
        spaces.Box(0, 255, (5, 6, 7), np.uint8),
        [obs("observation", (5, 6, 7), "uint8", low=0, high=255)],
        id="uint8-3d-no-channel-axis",
    ),
    pytest.param(
        spaces.Box(0.0, 1.0, (3, 64, 64), F32),
        [obs("observation", (3, 64, 64), "float32", low=0.0, high=1.0)],
        id="float-image-shape-no-layout",
    ),
    pytest.param(
        spaces.Discrete(5),
        [obs("observation", (), "int64", low=0, high=4)],
        id="discrete",
    ),
    pytest.param(
        spaces.Discrete(3, start=-1),
        [obs("observation", (), "int64", low=-1, high=1)],
        id="discrete-start",
    ),
    pytest.param(
        spaces.MultiDiscrete([3, 5]),
        [obs("observation", (2,), "int64", low=0, high=[2, 4])],
        id="multidiscrete",
    ),
    pytest.param(
        spaces.MultiDiscrete([3, 3], start=[1, 1]),
        [obs("observation", (2,), "int64", low=1, high=3)],
        id="multidiscrete-start",
    ),
    pytest.param(
        spaces.MultiDiscrete([[2, 3], [4, 5]], start=[[0, -1], [0, 2]]),
        [obs("observation", (2, 2), "int64", low=[[0, -1], [0, 2]], high=[[1, 1], [3, 6]])],
        id="multidiscrete-2d",
    ),
    pytest.param(
        spaces.MultiDiscrete([4, 4], dtype=np.int32),
        [obs("observation", (2,), "int32", low=0, high=3)],
        id="multidiscrete-int32",
    ),
    pytest.param(
        spaces.MultiBinary(4),
        [obs("observation", (4,), "int8", low=0, high=1)],
        id="multibinary",
    ),
    pytest.param(
        spaces.MultiBinary([2, 3]),
        [obs("observation", (2, 3), "int8", low=0, high=1)],
        id="multibinary-shape",
    ),
    pytest.param(
        spaces.Dict(
            {
                "state": spaces.Box(-INF, INF, (7,), F32),
                "camera": spaces.Box(0, 255, (3, 64, 64), np.uint8),
            }
        ),
        # gymnasium sorts the keys of a plain dict
        [
            obs("camera", (3, 64, 64), "uint8", low=0, high=255, layout="CHW"),
            obs("state", (7,), "float32"),
        ],
        id="dict",
    ),
    pytest.param(
        spaces.Tuple((spaces.Discrete(2), spaces.Box(0.0, 1.0, (2,), F32))),
        [obs("0", (), "int64", low=0, high=1), obs("1", (2,), "float32", low=0.0, high=1.0)],
        id="tuple",
    ),
    pytest.param(
        spaces.Dict(
            {
                "pose": spaces.Box(-1.0, 1.0, (3,), F32),
                "sensors": spaces.Dict(
                    {
                        "lidar": spaces.Box(0.0, 10.0, (16,), F32),
                        "imu": spaces.Tuple(
                            (spaces.Box(-INF, INF, (6,), F32), spaces.MultiBinary(2))
                        ),
                    }
                ),
            }
        ),
        [
            obs("pose", (3,), "float32", low=-1.0, high=1.0),
            obs("sensors/imu/0", (6,), "float32"),
            obs("sensors/imu/1", (2,), "int8", low=0, high=1),
            obs("sensors/lidar", (16,), "float32", low=0.0, high=10.0),
        ],
        id="nested-dict-tuple",
    ),
    pytest.param(
        spaces.Tuple(
            (
                spaces.Dict({"a": spaces.Discrete(2), "b": spaces.Tuple((spaces.Discrete(4),))}),
                spaces.MultiBinary(2),
            )
        ),
        [
            obs("0/a", (), "int64", low=0, high=1),
            obs("0/b/0", (), "int64", low=0, high=3),
            obs("1", (2,), "int8", low=0, high=1),
        ],
        id="tuple-of-dict",
    ),
]


def leaf(sample: Any, spec: FieldSpec) -> np.ndarray:
    """The part of a space sample that ``spec`` describes, found by its key."""
    if spec.key == spec.role:
        return np.asarray(sample)
    value = sample
    for part in spec.key.split("/"):
        value = value[int(part)] if isinstance(value, tuple) else value[part]
    return np.asarray(value)


def samples_by_field(space: spaces.Space[Any], schema: DatasetSchema, role: str, n: int = 200):
    space.seed(0)
    draws = [space.sample() for _ in range(n)]
    return {spec.key: [leaf(d, spec) for d in draws] for spec in schema.by_role(role)}


# -- exact fields ------------------------------------------------------------------------


@pytest.mark.parametrize(("space", "expected"), OBSERVATION_CASES)
def test_observation_fields(space: spaces.Space[Any], expected: list[FieldSpec]) -> None:
    schema = schema_from_gym_spaces(space, spaces.Discrete(2))
    assert list(schema) == [*expected, DISCRETE_2_ACTION, REWARD]


@pytest.mark.parametrize(("space", "expected"), OBSERVATION_CASES)
def test_sample_matches_declared_shape_dtype_and_bounds(
    space: spaces.Space[Any], expected: list[FieldSpec]
) -> None:
    schema = schema_from_gym_spaces(space, spaces.Discrete(2))
    drawn = samples_by_field(space, schema, "observation")
    for spec in schema.by_role("observation"):
        for value in drawn[spec.key]:
            assert value.shape == spec.shape, spec.key
            assert value.dtype == spec.np_dtype, spec.key
        stacked = np.stack(drawn[spec.key])
        if spec.low is not None:
            assert np.all(stacked >= np.asarray(spec.low)), spec.key
        if spec.high is not None:
            assert np.all(stacked <= np.asarray(spec.high)), spec.key


@pytest.mark.parametrize(
    "space",
    [
        pytest.param(spaces.Discrete(3, start=-1), id="discrete"),
        pytest.param(spaces.MultiDiscrete([[2, 3], [4, 1]], start=[[0, -1], [5, 0]]), id="md"),
        pytest.param(spaces.MultiBinary([2, 2]), id="multibinary"),
    ],
)
def test_integer_bounds_are_inclusive(space: spaces.Space[Any]) -> None:
    # enough draws to hit every end of these small ranges: low and high are reached
    schema = schema_from_gym_spaces(space, spaces.Discrete(2))
    (spec,) = schema.by_role("observation")
    stacked = np.stack(samples_by_field(space, schema, "observation", n=500)[spec.key])
    np.testing.assert_array_equal(stacked.min(axis=0), np.broadcast_to(spec.low, spec.shape))
    np.testing.assert_array_equal(stacked.max(axis=0), np.broadcast_to(spec.high, spec.shape))


def test_cartpole() -> None:
    env = gym.make("CartPole-v1")
    try:
        schema = schema_from_gym_spaces(env.observation_space, env.action_space)
    finally:
        env.close()
    # CartPole's velocity bounds are infinite, so the observation has none
    assert list(schema) == [
        FieldSpec("observation", shape=(4,), dtype="float32", role="observation"),
        FieldSpec("action", shape=(), dtype="int64", role="action", low=0, high=1),
        REWARD,
    ]
    assert schema.is_bare("observation")
    assert schema.is_bare("action")


def test_composite_action_and_info_roles() -> None:
    # the README's case: 'camera' is both an observation and an action
    observation_space = spaces.Dict(
        {"camera": spaces.Box(0, 255, (64, 64, 3), np.uint8), "state": spaces.Box(-1.0, 1.0, (2,))}
    )
    action_space = spaces.Dict(
        {
            "camera": spaces.Box(-1.0, 1.0, (2,), F32),
            "keyboard": spaces.Dict({"jump": spaces.Discrete(2), "keys": spaces.MultiBinary(3)}),
        }
    )
    info_space = spaces.Dict(
        {"score": spaces.Box(-INF, INF, (), F32), "lives": spaces.Discrete(4, start=1)}
    )
    schema = schema_from_gym_spaces(
        observation_space, action_space, reward_dtype="float64", info_space=info_space
    )
    assert list(schema) == [
        obs("camera", (64, 64, 3), "uint8", low=0, high=255, layout="HWC"),
        obs("state", (2,), "float32", low=-1.0, high=1.0),
        FieldSpec("camera", shape=(2,), dtype="float32", role="action", low=-1.0, high=1.0),
        FieldSpec("keyboard/jump", shape=(), dtype="int64", role="action", low=0, high=1),
        FieldSpec("keyboard/keys", shape=(3,), dtype="int8", role="action", low=0, high=1),
        FieldSpec("reward", shape=(), dtype="float64", role="reward"),
        FieldSpec("lives", shape=(), dtype="int64", role="info", low=1, high=4),
        FieldSpec("score", shape=(), dtype="float32", role="info"),
    ]
    assert not schema.is_bare("observation")
    assert not schema.is_bare("action")
    for role, space in [("action", action_space), ("info", info_space)]:
        drawn = samples_by_field(space, schema, role, n=5)
        for spec in schema.by_role(role):
            assert {(v.shape, v.dtype) for v in drawn[spec.key]} == {(spec.shape, spec.np_dtype)}


def test_empty_info_dict_adds_no_fields() -> None:
    schema = schema_from_gym_spaces(
        spaces.Discrete(3), spaces.Discrete(2), info_space=spaces.Dict({})
    )
    assert schema.by_role("info") == ()


def test_schema_round_trips_through_json() -> None:
    space = spaces.Dict(
        {
            "grid": spaces.MultiDiscrete([[2, 3], [4, 5]]),
            "box": spaces.Box(f32(0.0, -1.25), f32(1.0, 2.5), dtype=F32),
        }
    )
    schema = schema_from_gym_spaces(space, spaces.Discrete(2))
    document = json.loads(schema.to_json())
    assert document["fields"][0]["low"] == [0.0, -1.25]
    assert document["fields"][1]["high"] == [[1, 2], [3, 4]]
    assert DatasetSchema.from_json(schema.to_json()) == schema


@pytest.mark.parametrize(
    ("reward_dtype", "expected"),
    [("float32", "float32"), (np.float64, "float64"), (np.dtype("int32"), "int32")],
)
def test_reward_dtype(reward_dtype: Any, expected: str) -> None:
    schema = schema_from_gym_spaces(
        spaces.Discrete(3), spaces.Discrete(2), reward_dtype=reward_dtype
    )
    assert schema.field("reward", "reward") == FieldSpec(
        "reward", shape=(), dtype=expected, role="reward"
    )


@pytest.mark.parametrize(
    ("reward_dtype", "match"),
    [
        (None, "reward_dtype must be a numeric dtype"),
        ("not-a-dtype", "reward_dtype 'not-a-dtype' is not a NumPy dtype"),
        ("U8", "reward_dtype 'U8' is not a numeric dtype"),
    ],
)
def test_bad_reward_dtype(reward_dtype: Any, match: str) -> None:
    with pytest.raises(SchemaError, match=match):
        schema_from_gym_spaces(spaces.Discrete(3), spaces.Discrete(2), reward_dtype=reward_dtype)


# -- errors ------------------------------------------------------------------------------


class CustomSpace(spaces.Space[Any]):
    """A third-party space that episodata knows nothing about."""


UNSUPPORTED_CASES = [
    pytest.param(
        "observation",
        spaces.Text(8),
        "observation space is a Text, which has no fixed per-step shape and dtype: "
        "its values are strings of varying length.",
        id="text-top-level",
    ),
    pytest.param(
        "observation",
        spaces.Dict({"sensors": spaces.Dict({"lidar": spaces.Sequence(spaces.Box(0, 1))})}),
        "observation space 'sensors/lidar' is a Sequence, which has no fixed per-step shape "
        "and dtype: its values have a varying number of elements.",
        id="sequence-nested",
    ),
    pytest.param(
        "observation",
        spaces.Tuple((spaces.Discrete(2), spaces.Graph(spaces.Box(0, 1, (2,)), None))),
        "observation space '1' is a Graph, which has no fixed per-step shape and dtype: "
        "its values have a varying number of nodes and edges.",
        id="graph-in-tuple",
    ),
    pytest.param(
        "action",
        spaces.Dict({"mode": spaces.OneOf((spaces.Discrete(2), spaces.Box(0, 1)))}),
        "action space 'mode' is a OneOf, which has no fixed per-step shape and dtype: "
        "its values come from a different sub-space on each step.",
        id="oneof-action",
    ),
    pytest.param(
        "info",
        spaces.Dict({"log": spaces.Tuple((spaces.Text(4),))}),
        "info space 'log/0' is a Text",
        id="text-in-info",
    ),
    pytest.param(
        "observation",
        CustomSpace((2,), F32),
        "observation space is a CustomSpace, which has no fixed per-step shape and dtype: "
        "episodata does not know its per-step shape.",
        id="custom-space",
    ),
    pytest.param(
        "action",
        (spaces.Discrete(2), spaces.Discrete(3)),
        "action space is a tuple, which has no fixed per-step shape and dtype: "
        "it is not a gymnasium space.",
        id="not-a-space",
    ),
]


@pytest.mark.parametrize(("role", "space", "message"), UNSUPPORTED_CASES)
def test_unsupported_space(role: str, space: Any, message: str) -> None:
    arguments = {"observation": spaces.Discrete(2), "action": spaces.Discrete(2), "info": None}
    key = {"observation": "observation_space", "action": "action_space", "info": "info_space"}
    arguments[role] = space
    with pytest.raises(SchemaError, match=re.escape(message)) as info:
        schema_from_gym_spaces(**{key[r]: value for r, value in arguments.items()})
    assert SUPPORTED in str(info.value)


@pytest.mark.parametrize(
    ("space", "match"),
    [
        pytest.param(
            spaces.Dict({"a/b": spaces.Discrete(2)}),
            "observation space: Dict key 'a/b' cannot be a field key",
            id="slash-in-key",
        ),
        pytest.param(
            spaces.Dict({"arm": spaces.Dict({3: spaces.Discrete(2)})}),
            "observation space 'arm': Dict key 3 cannot be a field key",
            id="int-key",
        ),
        pytest.param(
            spaces.Dict({"a": spaces.Discrete(2), "empty": spaces.Tuple(())}),
            "observation space 'empty' is an empty Tuple, which holds no data",
            id="nested-empty",
        ),
        pytest.param(
            spaces.Dict({}),
            "observation space is an empty Dict: a dataset needs at least one observation field",
            id="top-level-empty",
        ),
    ],
)
def test_unstorable_composite(space: spaces.Space[Any], match: str) -> None:
    with pytest.raises(SchemaError, match=re.escape(match)):
        schema_from_gym_spaces(space, spaces.Discrete(2))


def test_info_space_must_be_a_dict() -> None:
    with pytest.raises(SchemaError, match=r"info_space must be a Dict space, .*got Box"):
        schema_from_gym_spaces(
            spaces.Discrete(2), spaces.Discrete(2), info_space=spaces.Box(0.0, 1.0, (2,))
        )


# -- optional dependency -----------------------------------------------------------------


def run_python(code: str) -> dict[str, Any]:
    result = subprocess.run(
        [sys.executable, "-W", "error", "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


CALL_WITHOUT = """
import json, sys
sys.modules[{blocked!r}] = None  # makes `import {blocked}` fail as if it were absent
from episodata_core.errors import MissingDependencyError
from episodata_gym import schema_from_gym_spaces
try:
    schema_from_gym_spaces(object(), object())
except MissingDependencyError as err:
    print(json.dumps({{
        "message": str(err),
        "is_import_error": isinstance(err, ImportError),
        "cause": type(err.__cause__).__name__,
        "cause_name": getattr(err.__cause__, "name", None),
    }}))
"""


def test_missing_gymnasium_raises_with_install_command() -> None:
    report = run_python(CALL_WITHOUT.format(blocked="gymnasium"))
    assert report == {
        "message": 'schema_from_gym_spaces needs gymnasium: pip install "episodata[gym]"',
        "is_import_error": True,
        "cause": "ModuleNotFoundError",
        "cause_name": "gymnasium",
    }


def test_broken_gymnasium_names_the_cause() -> None:
    report = run_python(CALL_WITHOUT.format(blocked="gymnasium.spaces"))
    assert report["message"].startswith(
        "schema_from_gym_spaces needs gymnasium, which is installed but failed to import ("
    )
    assert "gymnasium.spaces" in report["message"]
    assert report["message"].endswith('reinstall it: pip install "episodata[gym]"')
    assert report["cause_name"] == "gymnasium.spaces"


def test_import_does_not_load_gymnasium() -> None:
    loaded = run_python(
        """
        import json, sys
        import episodata_gym
        print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] == "gymnasium")))
        """
    )
    assert loaded == []
