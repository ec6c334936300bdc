"""`Dataset.stats`: streamed per-field statistics against a NumPy oracle, stored and reused."""

from __future__ import annotations

import itertools
import json
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from episodata import Dataset, DatasetSchema, FieldSpec, SchemaError
from episodata_core import registry, stats
from episodata_core.stats import FieldStats

if TYPE_CHECKING:
    from pathlib import Path

SCHEMA = DatasetSchema(
    [
        FieldSpec("state", shape=(3,), dtype="float32"),
        FieldSpec("camera", shape=(2, 3, 4), dtype="uint8", layout="CHW"),
        FieldSpec("count", shape=(), dtype="int32"),
        FieldSpec("extra", shape=(2,), dtype="float64", optional=True),
        FieldSpec("never", shape=(), dtype="float32", optional=True),
        FieldSpec("move", shape=(2,), dtype="float32", role="action"),
        FieldSpec("camera", shape=(2,), dtype="int16", role="action"),
        FieldSpec("reward", shape=(), dtype="float32", role="reward"),
        FieldSpec("energy", shape=(), dtype="float64", role="info"),
    ]
)
# 'never' is in no episode; everything else is in every row of the oracle
NUMERIC = tuple(k for k in SCHEMA.qualified_keys)
BACKENDS = {info.name for info in registry.list_plugins("backend")}


def make_episode(rng: np.random.Generator, steps: int, *, extra: bool) -> dict[str, Any]:
    def observation(n: int) -> dict[str, Any]:
        state = rng.normal(5.0, 3.0, size=(n, 3)).astype(np.float32)
        state[rng.random((n, 3)) < 0.2] = np.nan
        state[:, 2] = np.nan  # an element that never has a value
        value = {
            "state": state,
            "camera": rng.integers(0, 256, size=(n, 2, 3, 4), dtype=np.uint8),
            "count": rng.integers(-1000, 1000, size=n, dtype=np.int32),
        }
        if extra:
            value["extra"] = rng.normal(-2.0, 0.5, size=(n, 2))
        return value

    first, rest = observation(1), observation(steps)
    energy = rng.normal(100.0, 10.0, size=steps + 1)
    energy[rng.random(steps + 1) < 0.3] = np.nan
    return {
        "initial_observation": {key: value[0] for key, value in first.items()},
        "observations": rest,
        # every action and reward is far from the hidden zero of row 0
        "actions": {
            "move": rng.uniform(10.0, 20.0, size=(steps, 2)).astype(np.float32),
            "camera": rng.integers(50, 60, size=(steps, 2), dtype=np.int16),
        },
        "rewards": rng.uniform(1.0, 2.0, size=steps).astype(np.float32),
        "initial_info": {"energy": energy[0]},
        "infos": {"energy": energy[1:]},
        "terminated": bool(rng.random() < 0.5),
    }


def make_episodes(seed: int, lengths: list[int]) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    return [make_episode(rng, n, extra=i % 2 == 0) for i, n in enumerate(lengths)]


def oracle_values(episodes: list[dict[str, Any]], qualified_key: str) -> np.ndarray:
    """Every real value of one field, straight from the episodes that were written."""
    role, key = qualified_key.split("/", 1)
    spec = SCHEMA[qualified_key]
    parts = []
    for episode in episodes:
        if role == "observation" and key in episode["observations"]:
            parts += [episode["initial_observation"][key][None], episode["observations"][key]]
        elif role == "info":
            parts += [np.asarray(episode["initial_info"][key])[None], episode["infos"][key]]
        elif role == "action":
            parts.append(episode["actions"][key])
        elif role == "reward":
            parts.append(episode["rewards"])
    if not parts:
        return np.zeros((0, *spec.shape))
    return np.concatenate(parts).astype(np.float64)


def assert_matches_oracle(result: FieldStats, values: np.ndarray) -> None:
    nan = np.isnan(values)
    np.testing.assert_array_equal(result.count, (~nan).sum(axis=0))
    np.testing.assert_array_equal(result.nan_count, nan.sum(axis=0))
    np.testing.assert_array_equal(result.total, np.full(result.shape, values.shape[0]))
    seen = (~nan).any(axis=0)  # elements with at least one value; the rest are NaN
    for name in ("mean", "std", "min", "max"):
        assert np.isnan(getattr(result, name)[~seen]).all(), name
    if not seen.any():
        return
    real = values[:, seen]
    np.testing.assert_allclose(result.mean[seen], np.nanmean(real, axis=0), rtol=1e-10)
    np.testing.assert_allclose(result.std[seen], np.nanstd(real, axis=0), rtol=1e-9)
    np.testing.assert_array_equal(result.min[seen], np.nanmin(real, axis=0))
    np.testing.assert_array_equal(result.max[seen], np.nanmax(real, axis=0))


def check_all(result: dict[str, FieldStats], episodes: list[dict[str, Any]]) -> None:
    assert list(result) == list(NUMERIC)
    for key, value in result.items():
        assert value.key == key
        assert value.shape == SCHEMA[key].shape
        assert_matches_oracle(value, oracle_values(episodes, key))


class ReadSpy:
    """Records every ``read_rows`` call of a backend, passing it through."""

    def __init__(self, dataset: Dataset, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[tuple[int, int, int, tuple[str, ...]]] = []
        original = dataset.backend.read_rows

        def read_rows(episode, start, stop, fields):
            self.calls.append((episode, start, stop, tuple(fields)))
            return original(episode, start, stop, fields)

        monkeypatch.setattr(dataset.backend, "read_rows", read_rows)


@pytest.fixture
def episodes() -> list[dict[str, Any]]:
    return make_episodes(0, [5, 0, 12, 1, 30])


@pytest.fixture
def dataset(episodes) -> Dataset:
    return Dataset.from_episodes(episodes, SCHEMA)


# -- the numbers ---------------------------------------------------------------------------


def test_every_field_matches_the_numpy_oracle(dataset, episodes):
    result = dataset.stats()
    check_all(result, episodes)
    state = result["observation/state"]
    assert state.count[2] == 0
    assert state.nan_count[2] == dataset.num_steps + dataset.num_episodes
    assert np.isnan([state.mean[2], state.std[2], state.min[2], state.max[2]]).all()


def test_action_and_reward_rows_skip_the_hidden_reset_row(dataset, episodes):
    result = dataset.stats(["action", "reward"])
    steps = sum(len(e["rewards"]) for e in episodes)
    assert steps == dataset.num_steps == 48
    assert (result["action/move"].count == steps).all()
    assert (result["reward/reward"].count == steps).all()
    # row 0 holds zeros: had it been read, these minimums would be 0
    assert (result["action/move"].min >= 10).all()
    assert (result["action/camera"].min >= 50).all()
    assert result["reward/reward"].min >= 1
    # observations and infos count the reset row of every episode
    observations = steps + len(episodes)
    assert (dataset.stats("observation/count")["observation/count"].count == observations).all()
    assert dataset.stats("info")["info/energy"].total == observations


def test_optional_fields_count_only_episodes_that_have_them(dataset, episodes):
    result = dataset.stats(["extra", "never"])
    with_extra = [e for i, e in enumerate(episodes) if i % 2 == 0]
    expected = sum(len(e["rewards"]) + 1 for e in with_extra)
    assert (result["observation/extra"].count == expected).all()
    never = result["observation/never"]
    assert never.count == 0
    assert never.nan_count == 0
    assert np.isnan([never.mean, never.std, never.min, never.max]).all()


def test_integer_and_uint8_fields_are_exact(dataset, episodes):
    result = dataset.stats(["observation/camera", "observation/count"])
    camera = oracle_values(episodes, "observation/camera")
    np.testing.assert_array_equal(result["observation/camera"].min, camera.min(axis=0))
    assert result["observation/camera"].max.max() <= 255
    assert (result["observation/camera"].nan_count == 0).all()
    counts = oracle_values(episodes, "observation/count")
    assert result["observation/count"].mean == pytest.approx(counts.mean(), rel=1e-12)


def test_long_episodes_are_read_in_chunks(monkeypatch, dataset, episodes):
    monkeypatch.setattr(stats, "_CHUNK_BYTES", 64)
    spy = ReadSpy(dataset, monkeypatch)
    check_all(dataset.stats(refresh=True), episodes)
    assert max(stop - start for _, start, stop, _ in spy.calls) < 10


def test_reduce_gives_exact_per_channel_and_scalar_summaries(dataset, episodes):
    camera = dataset.stats("observation/camera")["observation/camera"]
    values = oracle_values(episodes, "observation/camera")
    per_channel = camera.reduce((1, 2))
    assert per_channel.shape == (2,)
    np.testing.assert_allclose(per_channel.mean, values.mean(axis=(0, 2, 3)), rtol=1e-12)
    np.testing.assert_allclose(per_channel.std, values.std(axis=(0, 2, 3)), rtol=1e-9)
    np.testing.assert_array_equal(per_channel.max, values.max(axis=(0, 2, 3)))
    state = dataset.stats("state")["observation/state"].reduce()
    flat = oracle_values(episodes, "observation/state").reshape(-1)
    assert state.shape == ()
    assert state.nan_count == np.isnan(flat).sum()
    assert float(state.mean) == pytest.approx(np.nanmean(flat), rel=1e-12)
    assert float(state.std) == pytest.approx(np.nanstd(flat), rel=1e-9)
    assert "observation/state" in repr(state)


@settings(max_examples=60, deadline=None)
@given(
    data=st.lists(st.one_of(st.floats(-1e6, 1e6), st.just(float("nan"))), min_size=0, max_size=40),
    cuts=st.lists(st.integers(0, 40), max_size=5),
)
def test_merging_chunks_equals_one_pass(data, cuts):
    values = np.asarray(data, dtype=np.float64).reshape(-1, 1)
    bounds = sorted({0, len(data), *(c for c in cuts if c <= len(data))})
    merged = FieldStats.empty("x", (1,))
    for start, stop in itertools.pairwise(bounds):
        merged = merged.merge(FieldStats.from_values("x", values[start:stop]))
    whole = FieldStats.from_values("x", values)
    np.testing.assert_array_equal(merged.count, whole.count)
    np.testing.assert_array_equal(merged.nan_count, whole.nan_count)
    np.testing.assert_allclose(merged.mean, whole.mean, rtol=1e-9, atol=1e-6)
    np.testing.assert_allclose(merged.std, whole.std, rtol=1e-7, atol=1e-3)
    np.testing.assert_array_equal(merged.min, whole.min)
    np.testing.assert_array_equal(merged.max, whole.max)


def test_merge_is_stable_far_from_zero():
    # the textbook sum-of-squares formula loses every digit here; Chan's merge does not
    rng = np.random.default_rng(1)
    values = 1e9 + rng.normal(size=(1000, 1))
    merged = FieldStats.empty("x", (1,))
    for chunk in np.array_split(values, 37):
        merged = merged.merge(FieldStats.from_values("x", chunk))
    np.testing.assert_allclose(merged.std, values.std(axis=0), rtol=1e-6)


def test_non_numeric_fields_are_refused_by_name():
    schema = DatasetSchema(
        [FieldSpec("x", shape=(), dtype="float32"), FieldSpec("tag", shape=(), dtype="S4")]
    )
    dataset = Dataset.create(schema)
    assert list(dataset.stats()) == ["observation/x"]
    with pytest.raises(SchemaError, match=r"observation/tag \(\|S4\).*leave them out"):
        dataset.stats(["x", "tag"])


# -- storage and reuse --------------------------------------------------------------------


def test_stats_are_stored_in_the_metadata_and_reused(monkeypatch, dataset, episodes):
    first = dataset.stats()
    record = dataset.manifest.metadata["stats"]
    assert record["version"] == 1
    assert record["episodes"] == len(episodes)
    assert record["steps"] == dataset.num_steps
    assert record["ongoing"] == {}
    assert list(record["fields"]) == list(NUMERIC)
    assert record["fields"]["observation/never"]["mean"] is None  # NaN is JSON null
    json.loads(dataset.manifest.to_json())  # plain JSON, no NaN tokens
    assert "NaN" not in dataset.manifest.to_json()
    spy = ReadSpy(dataset, monkeypatch)
    again = dataset.stats()
    assert spy.calls == []
    for key in NUMERIC:
        np.testing.assert_allclose(again[key].std, first[key].std, rtol=1e-12)


def test_new_episodes_are_merged_without_reading_old_ones(monkeypatch, dataset, episodes):
    dataset.stats()
    more = make_episodes(7, [3, 9])
    for episode in more:
        dataset.add_episode(episode)
    spy = ReadSpy(dataset, monkeypatch)
    check_all(dataset.stats(), episodes + more)
    assert {call[0] for call in spy.calls} == {5, 6}
    assert dataset.manifest.metadata["stats"]["episodes"] == 7


def test_ongoing_episodes_contribute_only_new_rows(monkeypatch, dataset, episodes):
    (extra,) = make_episodes(3, [6])
    writer = dataset.new_episode(extra["initial_observation"], extra["initial_info"])

    def add(t: int) -> None:
        writer.add_step(
            {
                "observation": {k: v[t] for k, v in extra["observations"].items()},
                "action": {k: v[t] for k, v in extra["actions"].items()},
                "reward": extra["rewards"][t],
                "info": {"energy": extra["infos"]["energy"][t]},
            }
        )

    for t in range(2):
        add(t)
    partial = {**extra, "observations": {k: v[:2] for k, v in extra["observations"].items()}}
    partial |= {
        "actions": {k: v[:2] for k, v in extra["actions"].items()},
        "rewards": extra["rewards"][:2],
        "infos": {"energy": extra["infos"]["energy"][:2]},
    }
    check_all(dataset.stats(), [*episodes, partial])
    assert dataset.manifest.metadata["stats"]["ongoing"] == {"5": 2}
    for t in range(2, 6):
        add(t)
    spy = ReadSpy(dataset, monkeypatch)
    check_all(dataset.stats(), [*episodes, extra])
    assert {(e, start) for e, start, _, _ in spy.calls} == {(5, 3)}


def test_refresh_recomputes_and_stale_records_are_ignored(dataset, episodes):
    dataset.stats("state")
    record = dataset.manifest.metadata["stats"]
    record["fields"]["observation/state"]["mean"] = 123.0
    assert dataset.stats("state")["observation/state"].mean[0] == 123.0  # reused as stored
    fresh = dataset.stats("state", refresh=True)["observation/state"]
    assert_matches_oracle(fresh, oracle_values(episodes, "observation/state"))
    # a record whose step count disagrees (copied from elsewhere) is recomputed
    dataset.manifest.metadata["stats"]["steps"] += 1
    dataset.manifest.metadata["stats"]["fields"]["observation/state"]["mean"] = 123.0
    check_all(dataset.stats(), episodes)
    dataset.manifest.metadata["stats"] = {"version": 1, "episodes": "garbage"}
    check_all(dataset.stats(), episodes)


def test_asking_for_more_fields_keeps_the_stored_ones(monkeypatch, dataset, episodes):
    dataset.stats("state")
    spy = ReadSpy(dataset, monkeypatch)
    dataset.stats("reward")
    assert {fields for *_, fields in spy.calls} == {("reward/reward",)}
    assert set(dataset.manifest.metadata["stats"]["fields"]) == {
        "observation/state",
        "reward/reward",
    }


@pytest.mark.skipif("npz_directory" not in BACKENDS, reason="the npz_directory backend is absent")
def test_stored_dataset_keeps_stats_in_its_manifest(tmp_path: Path, monkeypatch, episodes):
    path = tmp_path / "ds"
    Dataset.from_episodes(episodes, SCHEMA, str(path), backend="npz_directory").close()
    manifest = path / "manifest.json"
    before = manifest.read_bytes()
    with Dataset.open(path, read_only=True) as reader:
        check_all(reader.stats(), episodes)  # computed, not stored
    assert manifest.read_bytes() == before
    with Dataset.open(path) as writer:
        writer.stats()
    stored = json.loads(manifest.read_text())["metadata"]["stats"]
    assert (stored["episodes"], stored["steps"]) == (5, 48)
    with Dataset.open(path, read_only=True) as reader:
        spy = ReadSpy(reader, monkeypatch)
        check_all(reader.stats(), episodes)
        assert spy.calls == []
