"""A reset that matches the previous episode's fields takes the step plan, and only then.

``new_episode`` builds row 0 with the plan of the previous episode when the reset gives
exactly that episode's observation and info fields; every other reset takes the generic
path, which alone validates and raises. The oracle is a fresh dataset, whose first reset
always takes the generic path: each reset must store the same row 0 and the same
present fields there, or fail there with the same error and leave the dataset alone.
A spy on ``coerce`` shows that the fast path really ran.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

from episodata import Dataset, DatasetSchema, FieldSpec
from episodata_core import writers

if TYPE_CHECKING:
    from collections.abc import Callable

SCHEMA = DatasetSchema(
    [
        FieldSpec("state", shape=(3,), dtype="float32"),
        FieldSpec("depth", shape=(2,), dtype="uint8", optional=True),
        FieldSpec("step", shape=(), dtype="int64"),
        FieldSpec("action", shape=(), dtype="int64", role="action"),
        FieldSpec("reward", shape=(), dtype="float32", role="reward"),
        FieldSpec("seed", shape=(), dtype="int64", role="info", optional=True),
    ]
)


def obs(t: int, *, depth: bool = False) -> dict[str, Any]:
    given: dict[str, Any] = {"state": np.full(3, t + 0.5, np.float32), "step": np.int64(t)}
    if depth:
        given["depth"] = np.full(2, t, np.uint8)
    return given


def first_row(dataset: Dataset, episode: int) -> tuple[dict[str, bytes], dict[str, bool]]:
    """Row 0 of every field the episode holds (as bytes), and its present flags."""
    table = dataset.backend.episode_table()
    present = {key: bool(flags[episode]) for key, flags in table.present.items()}
    keys = [k for k in dataset.schema.qualified_keys if present.get(k, True)]
    rows = dataset.backend.read_rows(episode, 0, 1, keys)
    return {k: np.asarray(v).tobytes() for k, v in rows.items()}, present


def outcome(call: Callable[[], object]) -> tuple[str, str] | None:
    """``None`` when ``call`` succeeds, else the exception's type and message."""
    try:
        call()
    except Exception as err:  # noqa: BLE001 - the outcome itself is under test
        return type(err).__name__, str(err)
    return None


@pytest.fixture
def coerce_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    calls: list[str] = []
    real = writers.coerce

    def spy(value: Any, spec: FieldSpec, **kwargs: Any) -> np.ndarray:
        calls.append(spec.qualified_key)
        return real(value, spec, **kwargs)

    monkeypatch.setattr(writers, "coerce", spy)
    return calls


RESETS: list[tuple[dict[str, Any], dict[str, Any] | None]] = [
    (obs(0), None),
    (obs(1), None),  # the same fields: the plan
    (obs(2, depth=True), None),  # an optional field more: generic, a plan of its own
    (obs(3, depth=True), None),
    (obs(4), {}),  # no field less than at episode 1: empty infos are no infos
    (obs(5), {"seed": np.int64(7)}),  # an optional info field
    (obs(6), {"seed": np.int64(8)}),
    (obs(7), None),
]


def test_every_reset_stores_what_a_fresh_dataset_stores(coerce_calls: list[str]) -> None:
    dataset = Dataset.create(SCHEMA)
    for episode, (observation, infos) in enumerate(RESETS):
        twin = Dataset.create(SCHEMA)
        twin.new_episode(observation, infos)
        coerce_calls.clear()
        assert dataset.new_episode(observation, infos).episode == episode
        assert first_row(dataset, episode) == first_row(twin, 0), episode
        fast = coerce_calls == []
        # only a reset with the previous episode's very fields may skip coerce
        same_fields = episode > 0 and _fields(RESETS[episode]) == _fields(RESETS[episode - 1])
        assert fast == same_fields, episode


def _fields(reset: tuple[dict[str, Any], dict[str, Any] | None]) -> set[str]:
    observation, infos = reset
    return set(observation) | {f"info/{k}" for k in infos or {}}


@pytest.mark.parametrize(
    "change",
    [
        lambda o: o.update(state=np.ones(4, np.float32)),  # a wrong shape
        lambda o: o.update(state=np.array(["a", "b", "c"])),  # no cast to float32
        lambda o: o.update(step=2**63),  # outside int64
        lambda o: o.pop("step"),  # a required field missing
        lambda o: o.update(extra=np.float32(1)),  # an unknown field
        lambda o: o.update(state={"x": np.ones(3, np.float32)}),  # a mapping for an array
    ],
)
def test_a_bad_reset_after_a_good_one_fails_as_on_a_fresh_dataset(
    change: Callable[[dict[str, Any]], object],
) -> None:
    bad = obs(1)
    change(bad)
    fresh = Dataset.create(SCHEMA)
    want = outcome(lambda: fresh.new_episode(bad))
    assert want is not None
    dataset = Dataset.create(SCHEMA)
    dataset.new_episode(obs(0)).end()
    got = outcome(lambda: dataset.new_episode(bad))
    # the same error; only the episode number in the location differs
    assert got == (want[0], want[1].replace("episode 0", "episode 1"))
    assert dataset.num_episodes == 1
    assert fresh.num_episodes == 0
