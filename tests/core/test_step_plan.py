"""The step writers' fast path stores what the generic path stores, and rejects nothing new.

``add_step`` first tries a per-writer plan that only accepts values that already are
exactly right, and falls back to the generic validation otherwise. Three oracles keep
that honest: values built by hand with ``np.asarray(value, dtype=...)``; a twin dataset
written through the generic path alone (a step handed over as a read-only mapping proxy
is never a ``dict``, so the plan never sees it); and a spy on ``coerce`` that shows which
path a step took, so that the equivalence tests cannot pass by never taking the fast path.
"""

from __future__ import annotations

import math
import re
import warnings
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from episodata import Dataset, DatasetSchema, EpisodeWriter, FieldSpec
from episodata_core import writers

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping
    from pathlib import Path

SCALARS = {
    "f64": "float64",
    "f32": "float32",
    "f16": "float16",
    "i8": "int8",
    "i64": "int64",
    "u8": "uint8",
    "u64": "uint64",
    "flag": "bool",
}
SCHEMA = DatasetSchema(
    [
        FieldSpec("state", shape=(3,), dtype="float32"),
        *(FieldSpec(key, shape=(), dtype=dtype) for key, dtype in SCALARS.items()),
        FieldSpec("action", shape=(), dtype="int64", role="action"),
        FieldSpec("reward", shape=(), dtype="float32", role="reward"),
    ]
)
# CartPole's spaces, as the benchmark writes them: bare observation, action and reward
BARE = DatasetSchema(
    [
        FieldSpec("observation", shape=(4,), dtype="float32"),
        FieldSpec("action", shape=(), dtype="int64", role="action"),
        FieldSpec("reward", shape=(), dtype="float32", role="reward"),
    ]
)


def exact_obs(t: int) -> dict[str, Any]:
    """Observation values that already have each field's dtype and shape."""
    obs: dict[str, Any] = {"state": np.full(3, t + 0.25, dtype=np.float32)}
    for key, dtype in SCALARS.items():
        obs[key] = np.dtype(dtype).type(t % 2)
    return obs


def exact_step(t: int) -> dict[str, Any]:
    return {"observations": exact_obs(t), "actions": np.int64(t), "rewards": np.float32(t)}


def generic(step: Mapping[str, Any]) -> Mapping[str, Any]:
    """The same step, in a mapping the plan never accepts: the generic path alone."""
    return MappingProxyType(dict(step))


def stored(dataset: Dataset, episode: int = 0) -> dict[str, np.ndarray]:
    """Every stored row of an episode, row 0 (the reset) included."""
    length = int(dataset.backend.episode_table().length[episode])
    rows = dataset.backend.read_rows(episode, 0, length + 1, dataset.schema.qualified_keys)
    return {key: np.array(value) for key, value in rows.items()}


def assert_bit_identical(got: np.ndarray, want: np.ndarray) -> None:
    # bytes, not values: NaN payloads and signed zeros count too
    assert got.dtype == want.dtype
    assert got.shape == want.shape
    assert got.tobytes() == want.tobytes()


def assert_same_rows(a: Dataset, b: Dataset, episode: int = 0) -> None:
    rows_a, rows_b = stored(a, episode), stored(b, episode)
    assert rows_a.keys() == rows_b.keys()
    for key in rows_a:
        assert_bit_identical(rows_a[key], rows_b[key])


@pytest.fixture
def coerce_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Fields the generic path coerced since the fixture was set up."""
    calls: list[str] = []
    real = writers.coerce

    def spy(value: Any, spec: FieldSpec, **kwargs: Any) -> np.ndarray:
        calls.append(spec.qualified_key)
        return real(value, spec, **kwargs)

    monkeypatch.setattr(writers, "coerce", spy)
    return calls


@pytest.fixture(params=["memory", "zarr"])
def make_dataset(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[Callable[..., Dataset]]:
    made: list[Dataset] = []

    def make(schema: DatasetSchema = SCHEMA) -> Dataset:
        path = None if request.param == "memory" else tmp_path / f"d{len(made)}.zarr"
        dataset = Dataset.create(schema, path)
        made.append(dataset)
        return dataset

    yield make
    for dataset in made:
        dataset.close()


# -- which path a step takes ---------------------------------------------------------------


def test_exact_steps_never_reach_the_generic_path(coerce_calls: list[str]) -> None:
    dataset = Dataset.create(SCHEMA)
    writer = dataset.new_episode(exact_obs(0))
    coerce_calls.clear()  # the reset row always goes through coerce
    for t in range(1, 4):
        writer.add_step(exact_step(t))
    writer.add_step({**exact_step(4), "terminated": True})
    assert coerce_calls == []
    assert dataset.episode(0).terminated


def test_python_scalars_and_other_spellings_take_the_fast_path(coerce_calls: list[str]) -> None:
    dataset = Dataset.create(BARE)
    writer = dataset.new_episode(np.zeros(4, np.float32))
    coerce_calls.clear()
    writer.add_step({"obs": np.ones(4, np.float32), "action": 1, "reward": 1.0})
    writer.add_step(
        {"observation": {"observation": np.ones(4, np.float32)}, "actions": True, "rewards": 0}
    )
    assert coerce_calls == []


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("state", [1.0, 2.0, 3.0]),  # a list
        ("state", np.ones(3, np.float64)),  # another dtype, cast by coerce
        ("state", np.ones(3, np.float32).view(np.ma.MaskedArray)),  # an ndarray subclass
        ("f32", np.float64(0.5)),  # a NumPy scalar of another dtype
        ("f16", 4097),  # a Python int not exact in float16's mantissa
        ("i8", 3.0),  # a whole float into an integer field
        ("flag", 1.0),
    ],
)
def test_inexact_values_go_the_generic_way_and_are_still_accepted(
    coerce_calls: list[str], key: str, value: Any
) -> None:
    dataset = Dataset.create(SCHEMA)
    writer = dataset.new_episode(exact_obs(0))
    coerce_calls.clear()
    step = exact_step(1)
    step["observations"][key] = value
    writer.add_step(step)
    assert f"observation/{key}" in coerce_calls
    spec = SCHEMA[f"observation/{key}"]
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        want = np.asarray(value, dtype=spec.np_dtype)
    assert_bit_identical(stored(dataset)[spec.qualified_key][1], want)


# -- what gets stored ----------------------------------------------------------------------

# values of every kind a scalar field may get: exact, castable, and plainly wrong
FLOATS = st.floats(allow_nan=True, allow_infinity=True, allow_subnormal=True)
INTS = st.one_of(
    st.integers(-300, 300),
    st.integers(-(2**70), 2**70),
    st.sampled_from(
        [2**11, 2**11 + 1, 2**24, 2**24 + 1, 2**53, 2**53 + 1, 2**63 - 1, 2**63, 2**64 - 1, 2**64]
    ).flatmap(lambda n: st.sampled_from([n, -n])),
)
NUMPY_DTYPES = st.sampled_from(
    ["float64", "float32", "float16", "int8", "int16", "int64", "uint8", "uint64", "bool"]
)


@st.composite
def numpy_scalars(draw: st.DrawFn) -> Any:
    dtype = np.dtype(draw(NUMPY_DTYPES))
    if dtype.kind == "b":
        value: Any = draw(st.booleans())
    elif dtype.kind == "f":
        value = draw(st.floats(width=dtype.itemsize * 8))
    else:
        info = np.iinfo(dtype)
        value = draw(st.integers(int(info.min), int(info.max)))
    scalar = dtype.type(value)
    return draw(st.sampled_from([scalar, np.asarray(scalar), [value], "1"]))


SCALAR_VALUES = st.one_of(st.booleans(), INTS, FLOATS, numpy_scalars(), st.none())
FLAGS = st.one_of(
    st.booleans(),
    st.sampled_from([np.True_, np.False_, 0, 1, 0.0, 2.5, "yes", None, [True], np.zeros(2)]),
)


def outcome(call: Callable[[], object]) -> tuple[str, str] | None:
    """``None`` when ``call`` succeeds, else the exception's type and message."""
    try:
        call()
    except Exception as err:  # noqa: BLE001 - the outcome itself is under test
        return type(err).__name__, str(err)
    return None


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    values=st.dictionaries(st.sampled_from(sorted(SCALARS)), SCALAR_VALUES, max_size=3),
    terminated=FLAGS,
    truncated=FLAGS,
)
def test_every_step_is_stored_or_rejected_as_the_generic_path_does(
    values: dict[str, Any], terminated: Any, truncated: Any
) -> None:
    fast, slow = Dataset.create(SCHEMA), Dataset.create(SCHEMA)
    writers_ = {"fast": fast.new_episode(exact_obs(0)), "slow": slow.new_episode(exact_obs(0))}
    step = exact_step(1)
    step["observations"].update(values)
    step["terminated"], step["truncated"] = terminated, truncated
    with warnings.catch_warnings():
        # a cast that warns must warn (and, under the suite's "error" filter, raise) alike
        warnings.simplefilter("error")
        got = outcome(lambda: writers_["fast"].add_step(step))
        want = outcome(lambda: writers_["slow"].add_step(generic(step)))
    assert got == want
    assert_same_rows(fast, slow)
    assert fast.episode(0).ongoing == slow.episode(0).ongoing
    if got is not None:
        # a rejected step changed nothing: one exact step later both still agree
        for writer in writers_.values():
            writer.add_step(exact_step(2))
        assert_same_rows(fast, slow)
        return
    # the oracle independent of both paths: what coerce promises, built by hand (through
    # int64 as coerce does: a Python int beyond 2**53 may reach float32 through float64)
    rows = stored(fast)
    for key, value in values.items():
        spec = SCHEMA[f"observation/{key}"]
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            want_row = np.asarray(value).astype(spec.np_dtype)
        assert_bit_identical(rows[spec.qualified_key][1], want_row)


@pytest.mark.parametrize(
    ("dtype", "value"),
    [
        ("float32", 0.1),  # rounds: float64 -> float32
        ("float32", -0.0),
        ("float32", math.nan),
        ("float32", -math.inf),
        ("float32", 3.4028234663852886e38),  # float32's largest value: accepted
        ("float32", 1e-45),  # subnormal
        ("float32", 2**24 + 1),  # an int float32 cannot hold exactly: generic path
        ("float32", 2**24),
        ("float16", 65504.0),
        ("float16", 1e-7),
        ("float64", 2**53),
        ("int8", -128),
        ("int8", True),
        ("uint64", 2**64 - 1),
        ("uint64", 2**63),
        ("int64", -(2**63)),
        ("bool", 0),
        ("bool", False),
    ],
)
def test_python_scalars_store_what_numpy_makes_of_them(
    make_dataset: Callable[..., Dataset], dtype: str, value: Any
) -> None:
    schema = DatasetSchema(
        [
            FieldSpec("observation", shape=(), dtype=dtype),
            FieldSpec("action", shape=(), dtype=dtype, role="action"),
        ]
    )
    fast, slow = make_dataset(schema), make_dataset(schema)
    for dataset, wrap in ((fast, dict), (slow, generic)):
        writer = dataset.new_episode(value)
        writer.add_step(wrap({"observations": value, "actions": value}))
        writer.add_step(wrap({"observations": value, "actions": value, "truncated": True}))
    assert_same_rows(fast, slow)
    want = np.asarray(value, dtype=np.dtype(dtype))
    rows = stored(fast)
    for row in (*rows["observation/observation"], *rows["action/action"][1:]):
        assert_bit_identical(row, want)


def test_exact_steps_store_what_the_generic_path_stores_on_every_backend(
    make_dataset: Callable[..., Dataset],
) -> None:
    fast, slow = make_dataset(), make_dataset()
    for dataset, wrap in ((fast, dict), (slow, generic)):
        writer = dataset.new_episode(exact_obs(0))
        for t in range(1, 6):
            writer.add_step(wrap(exact_step(t)))
        writer.add_step(wrap({**exact_step(6), "terminated": np.True_}))
    assert_same_rows(fast, slow)
    rows = stored(fast)
    assert_bit_identical(
        rows["observation/state"], np.array([exact_obs(t)["state"] for t in range(7)])
    )
    assert_bit_identical(rows["action/action"], np.arange(7, dtype=np.int64) * (np.arange(7) > 0))
    assert fast.episode(0).terminated


def test_the_backend_keeps_no_reference_to_the_callers_arrays(
    make_dataset: Callable[..., Dataset],
) -> None:
    dataset = make_dataset(BARE)
    observation = np.arange(4, dtype=np.float32)
    reward = np.asarray(np.float32(2.0))  # a 0-d array, handed on as a view
    writer = dataset.new_episode(observation)
    writer.add_step({"observations": observation, "actions": 1, "rewards": reward})
    # an environment that reuses its buffers overwrites them in place
    observation[:] = -1
    reward[...] = -1
    writer.add_step({"observations": observation, "actions": 0, "rewards": reward})
    rows = stored(dataset)
    assert_bit_identical(
        rows["observation/observation"],
        np.array([[0, 1, 2, 3], [0, 1, 2, 3], [-1, -1, -1, -1]], dtype=np.float32),
    )
    assert_bit_identical(rows["reward/reward"], np.array([0, 2, -1], dtype=np.float32))


# -- errors ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "error", "message"),
    [
        (lambda s: s.pop("actions"), "SchemaError", "required action field 'action' is missing"),
        (lambda s: s.update(infos={"x": 1}), "FieldNotFoundError", "unknown info field 'x'"),
        (lambda s: s.update(obs=s["observations"]), "SchemaError", "is given twice"),
        (lambda s: s.update(rewards=1e39), "SchemaError", "too large for float32"),
        (lambda s: s.update(actions=2**63), "SchemaError", "outside the range"),
        (lambda s: s.update(actions=1.5), "SchemaError", "fractional value 1.5"),
        (lambda s: s.update(observations=None), "SchemaError", "'observations' is missing"),
        (lambda s: s.update(terminated="no"), "SchemaError", "'terminated' must be one bool"),
    ],
)
def test_errors_keep_their_type_message_and_step(
    change: Callable[[dict[str, Any]], object], error: str, message: str
) -> None:
    results = []
    for wrap in (dict, generic):
        dataset = Dataset.create(BARE)
        writer = dataset.new_episode(np.zeros(4, np.float32))
        writer.add_step({"observations": np.ones(4, np.float32), "actions": 1, "rewards": 1.0})
        step: dict[str, Any] = {
            "observations": np.ones(4, np.float32),
            "actions": 1,
            "rewards": 1.0,
        }
        change(step)
        given_step = wrap(step)
        results.append(outcome(lambda w=writer, s=given_step: w.add_step(s)))
        assert len(dataset.episode(0)) == 1
    assert results[0] == results[1]
    assert results[0] is not None
    assert results[0][0] == error
    assert re.search(rf"^episode 0, step 1\b.*{re.escape(message)}", results[0][1])


def test_a_finalized_writer_refuses_steps_on_both_paths() -> None:
    dataset = Dataset.create(BARE)
    writer: EpisodeWriter = dataset.new_episode(np.zeros(4, np.float32))
    writer.add_step({"observations": np.ones(4, np.float32), "actions": 1, "rewards": 1.0})
    writer.end(truncated=True)
    step = {"observations": np.ones(4, np.float32), "actions": 1, "rewards": 1.0}
    for given_step in (step, generic(step)):
        assert outcome(lambda s=given_step: writer.add_step(s)) == (
            "DatasetStateError",
            "the writer of episode 0 is closed: the episode was finalized",
        )


@pytest.mark.parametrize(
    ("change", "error", "message"),
    [
        (lambda o: o.pop("f32"), "SchemaError", "required observation field 'f32' is missing"),
        (lambda o: o.update(extra=np.float32(1)), "FieldNotFoundError", "field 'extra'"),
        (lambda o: o.update(i8={"deeper": np.int8(1)}), "FieldNotFoundError", "'i8/deeper'"),
    ],
)
def test_a_mapping_with_other_fields_than_the_episode_holds_is_rejected(
    change: Callable[[dict[str, Any]], object], error: str, message: str
) -> None:
    results = []
    for wrap in (dict, generic):
        dataset = Dataset.create(SCHEMA)
        writer = dataset.new_episode(exact_obs(0))
        step = exact_step(1)
        change(step["observations"])
        given_step = wrap(step)
        results.append(outcome(lambda w=writer, s=given_step: w.add_step(s)))
        assert len(dataset.episode(0)) == 0
    assert results[0] == results[1]
    assert results[0] is not None
    assert results[0][0] == error
    assert message in results[0][1]
