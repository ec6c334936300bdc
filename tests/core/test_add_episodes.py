"""Dataset.add_episodes: a batch equals a loop of add_episode, and bad input writes nothing.

Every backend runs the kit's batch tests too (ids, rows and flags against a loop, a
rejected batch, crashes); these cover what the core does around the backend.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from episodata_core import hooks
from episodata_core._batching import batched_by_bytes
from episodata_core.dataset import Dataset
from episodata_core.errors import FieldNotFoundError, SchemaError
from episodata_core.schema import DatasetSchema, FieldSpec

SCHEMA = DatasetSchema(
    [
        FieldSpec("observation", shape=(2,), dtype="float32"),
        FieldSpec("action", shape=(), dtype="int64", role="action"),
        FieldSpec("reward", shape=(), dtype="float32", role="reward"),
    ]
)


def _episode(steps: int, seed: int, **flags: Any) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    return {
        "initial_observation": rng.normal(size=2).astype(np.float32),
        "observations": rng.normal(size=(steps, 2)).astype(np.float32),
        "actions": rng.integers(0, 5, size=steps),
        "rewards": rng.normal(size=steps).astype(np.float32),
        **flags,
    }


def _action_out(steps: int, seed: int) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    return {
        "observations": rng.normal(size=(steps, 2)).astype(np.float32),
        "actions": rng.integers(0, 5, size=steps),
        "rewards": rng.normal(size=steps).astype(np.float32),
        "truncated": True,
    }


def _stored(dataset: Dataset) -> list[dict[str, Any]]:
    """Every episode's rows and flags, read back through the public API."""
    out = []
    for episode in dataset:
        segment = episode.read()
        out.append(
            {
                "obs": np.array(segment.all_obs),
                "action": np.array(segment.action),
                "reward": np.array(segment.reward),
                "terminated": episode.terminated,
                "truncated": episode.truncated,
            }
        )
    return out


def _assert_same(actual: Dataset, expected: Dataset) -> None:
    got, want = _stored(actual), _stored(expected)
    assert len(got) == len(want)
    for a, b in zip(got, want, strict=True):
        assert a.keys() == b.keys()
        for key in a:
            np.testing.assert_array_equal(a[key], b[key], err_msg=key)


def test_a_batch_equals_a_loop_of_add_episode() -> None:
    episodes = [
        _episode(4, 0, terminated=True),
        _episode(0, 1),
        _episode(7, 2, truncated=np.arange(7) == 6),
    ]
    batch, loop = Dataset.create(SCHEMA), Dataset.create(SCHEMA)
    assert batch.add_episodes(episodes) == [0, 1, 2]
    assert [loop.add_episode(e) for e in episodes] == [0, 1, 2]
    _assert_same(batch, loop)


def test_alignment_applies_to_every_episode_of_the_batch() -> None:
    episodes = [_action_out(5, 3), _action_out(2, 4)]
    batch, loop = Dataset.create(SCHEMA), Dataset.create(SCHEMA)
    batch.add_episodes(episodes, alignment="action-out")
    for episode in episodes:
        loop.add_episode(episode, alignment="action-out")
    _assert_same(batch, loop)
    assert len(batch.episode(0)) == 4  # the unpaired last step is dropped


def test_ids_continue_after_an_ongoing_episode() -> None:
    dataset = Dataset.create(SCHEMA)
    writer = dataset.new_episode(np.zeros(2, dtype=np.float32))
    assert dataset.add_episodes([_episode(2, 5), _episode(3, 6)]) == [1, 2]
    assert dataset.episode(0).ongoing
    writer.end(truncated=True)


def test_generator_input_is_read_once() -> None:
    dataset = Dataset.create(SCHEMA)
    assert dataset.add_episodes(_episode(n, n) for n in (1, 2, 3)) == [0, 1, 2]
    assert [len(e) for e in dataset] == [1, 2, 3]


@pytest.mark.parametrize("empty", [[], (), iter([])], ids=["list", "tuple", "iterator"])
def test_an_empty_batch_writes_nothing(empty: Any) -> None:
    dataset = Dataset.create(SCHEMA)
    dataset.add_episode(_episode(2, 0))
    assert dataset.add_episodes(empty) == []
    assert dataset.num_episodes == 1


@pytest.mark.parametrize(
    ("bad", "error", "match"),
    [
        (
            {"observations": np.zeros((3, 3), dtype=np.float32)},
            SchemaError,
            (
                r"episode 4 \(item 1 of add_episodes\), field 'observation': the initial value has "
                r"shape \(2,\) but the per-step values have shape \(3,\)"
            ),
        ),
        ({"actions": np.full(3, 0.5)}, SchemaError, r"item 1 .*fractional value 0\.5"),
        ({"rewards": np.zeros(4, np.float32)}, SchemaError, r"item 1 .*expected 3 entries"),
        ({"speed": np.zeros(3)}, FieldNotFoundError, r"item 1 .*unknown key 'speed'"),
    ],
    ids=["shape", "fractional-into-int", "ragged", "unknown-key"],
)
def test_bad_input_in_the_middle_leaves_the_dataset_unchanged(
    bad: dict[str, Any], error: type[Exception], match: str
) -> None:
    dataset = Dataset.create(SCHEMA)
    dataset.add_episodes([_episode(2, 0), _episode(2, 1)])
    dataset.new_episode(np.zeros(2, dtype=np.float32))  # an ongoing episode stays as it is
    broken = {**_episode(3, 9), **bad}
    with pytest.raises(error, match=match):
        dataset.add_episodes([_episode(1, 7), broken, _episode(4, 8)])
    assert dataset.num_episodes == 3
    assert dataset.num_steps == 4
    assert dataset.episode(2).ongoing


def test_an_iterable_that_fails_midway_writes_nothing() -> None:
    dataset = Dataset.create(SCHEMA)

    def episodes() -> Any:
        yield _episode(2, 0)
        raise RuntimeError("the source broke")

    with pytest.raises(RuntimeError, match="the source broke"):
        dataset.add_episodes(episodes())
    assert dataset.num_episodes == 0


def test_one_dict_instead_of_an_iterable_is_refused() -> None:
    dataset = Dataset.create(SCHEMA)
    with pytest.raises(SchemaError, match=r"got one dict .*pass \[episode\], or call add_episode"):
        dataset.add_episodes(_episode(2, 0))  # type: ignore[arg-type]
    assert dataset.num_episodes == 0


@pytest.mark.usefixtures("isolated_registry")
def test_the_written_hook_fires_once_per_episode_after_the_batch() -> None:
    seen: list[tuple[int, int]] = []

    class Recorder:
        @hooks.hookimpl
        def after_episode_written(self, dataset: Dataset, episode: int) -> None:
            seen.append((episode, dataset.num_episodes))

    recorder = hooks.register_hooks(Recorder())
    try:
        dataset = Dataset.create(SCHEMA)
        dataset.add_episodes([_episode(1, 0), _episode(2, 1)])
    finally:
        hooks.unregister_hooks(recorder)
    # every episode of the batch is written before the first hook call
    assert seen == [(0, 2), (1, 2)]


def test_from_episodes_writes_in_batches_with_the_same_result(tmp_path: Any) -> None:
    episodes = [_episode(3 + k % 4, seed=k, terminated=k % 3 == 0) for k in range(30)]
    path = tmp_path / "batched"
    batched = Dataset.from_episodes(iter(episodes), SCHEMA, str(path), backend="zarr")
    one_by_one = Dataset.create(SCHEMA)
    for episode in episodes:
        one_by_one.add_episode(episode)
    _assert_same(batched, one_by_one)
    batched.close()
    commits = json.loads((path / "commit.json").read_text())["generation"]
    assert commits <= 2, f"{commits} commits for 30 small episodes"


def test_batches_close_once_they_reach_the_byte_bound() -> None:
    sizes = [5, 1, 4, 10, 2, 2, 2]
    runs = list(batched_by_bytes(sizes, 6, lambda size: size))
    assert runs == [[5, 1], [4, 10], [2, 2, 2]]
    assert list(batched_by_bytes([], 6, lambda size: size)) == []
    assert list(batched_by_bytes([9], 6, lambda size: size)) == [[9]]
