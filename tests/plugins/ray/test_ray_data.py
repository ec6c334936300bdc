"""Ray Data: episodes and windows as datasources, episodes as a datasink, against brute force."""

from __future__ import annotations

import numpy as np
import pytest
from tests.fixtures.hdf5_sources import d4rl_tiny

import episodata_ray
from episodata import Dataset
from episodata_core.errors import DatasetStateError, FieldNotFoundError, SchemaError

pytestmark = pytest.mark.usefixtures("ray_session")


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """A zarr dataset of two D4RL files, and its episodes read the plain way."""
    import episodata

    folder = tmp_path_factory.mktemp("ray-data")
    first, _ = d4rl_tiny(folder, case="A")
    second, _ = d4rl_tiny(folder, case="A", timeout_at_3=True)
    dataset, _ = episodata.import_dataset("d4rl", first, folder / "ds")
    episodata.import_dataset("d4rl", second, dataset)
    dataset.close()
    dataset = Dataset.open(folder / "ds", read_only=True)
    reference = []
    for index in range(dataset.num_episodes):
        episode = dataset.episode(index)
        segment = episode.read()
        reference.append(
            {
                # one observation and one action field: plain arrays
                "all_obs": np.array(segment.all_observations),
                "action": np.array(segment.actions),
                "terminated": episode.terminated,
                "truncated": episode.truncated,
            }
        )
    schema = dataset.schema
    dataset.close()
    return folder / "ds", schema, reference


def _by_id(row):
    return (int(row["episode_id"]), int(row.get("start", 0)))


def _key(schema, role):
    return next(spec.qualified_key for spec in schema if spec.role == role)


@pytest.mark.slow
def test_read_episodes_rows_equal_each_episode(source):
    location, schema, reference = source
    # Ray Data does not keep the row order across read tasks unless asked to
    rows = sorted(episodata_ray.read_episodes(str(location)).take_all(), key=_by_id)
    assert [row["episode_id"] for row in rows] == list(range(len(reference)))
    obs, action = _key(schema, "observation"), _key(schema, "action")
    for row, want in zip(rows, reference, strict=True):
        assert bool(row["terminated"]) == want["terminated"]
        assert bool(row["truncated"]) == want["truncated"]
        np.testing.assert_array_equal(row[obs], want["all_obs"])
        np.testing.assert_array_equal(row[action], want["action"])
        assert row["length"] == len(row[action])


def brute_windows(episodes, length):
    """Every window of ``length`` transitions, by plain loops over whole episodes."""
    out = []
    for index, episode in enumerate(episodes):
        obs, act = episode["all_obs"], episode["action"]
        steps = len(act)
        for start in range(steps - length + 1):
            end = [start + t == steps - 1 for t in range(length)]
            out.append(
                {
                    "episode_id": index,
                    "start": start,
                    "obs": obs[start : start + length],
                    "next_obs": obs[start + 1 : start + length + 1],
                    "action": act[start : start + length],
                    "terminated": [e and episode["terminated"] for e in end],
                    "truncated": [e and episode["truncated"] for e in end],
                }
            )
    return out


def _check_windows(rows, expected, schema):
    obs, action = _key(schema, "observation"), _key(schema, "action")
    rows = sorted(rows, key=_by_id)
    assert [(r["episode_id"], r["start"]) for r in rows] == [
        (w["episode_id"], w["start"]) for w in expected
    ]
    for row, want in zip(rows, expected, strict=True):
        np.testing.assert_array_equal(row[obs], want["obs"])
        np.testing.assert_array_equal(row["next/" + obs], want["next_obs"])
        np.testing.assert_array_equal(row[action], want["action"])
        np.testing.assert_array_equal(row["terminated"], want["terminated"])
        np.testing.assert_array_equal(row["truncated"], want["truncated"])


def test_windows_round_trip_through_a_map_and_the_datasink(source, tmp_path):
    location, schema, reference = source
    obs = _key(schema, "observation")
    _check_windows(
        episodata_ray.read_windows(str(location), sequence_length=2).take_all(),
        brute_windows(reference, 2),
        schema,
    )

    def double(batch):
        # a ragged column arrives as a list of arrays; a stacked one as one array
        batch[obs] = [np.asarray(v) * 2 for v in batch[obs]]
        return batch

    mapped = episodata_ray.read_episodes(str(location), override_num_blocks=3).map_batches(
        double, batch_format="numpy"
    )
    written = episodata_ray.write_episodes(mapped, str(tmp_path / "doubled"), schema=schema)
    assert written.num_episodes == len(reference)
    written.close()
    doubled = [{**episode, "all_obs": episode["all_obs"] * 2} for episode in reference]
    _check_windows(
        episodata_ray.read_windows(str(tmp_path / "doubled"), sequence_length=3).take_all(),
        brute_windows(doubled, 3),
        schema,
    )
    assert not (tmp_path / "doubled.episodata-staging").exists()


@pytest.mark.slow
def test_write_episodes_refuses_a_wrong_dtype_and_leaves_nothing(source, tmp_path):
    location, schema, _ = source
    obs = _key(schema, "observation")

    def to_float64(batch):
        batch[obs] = [np.asarray(v, dtype=np.float64) for v in batch[obs]]
        return batch

    bad = episodata_ray.read_episodes(str(location)).map_batches(to_float64, batch_format="numpy")
    with pytest.raises(SchemaError, match=rf"field '{obs}': expected float32"):
        episodata_ray.write_episodes(bad, str(tmp_path / "bad"), schema=schema)
    assert not (tmp_path / "bad").exists()
    assert not (tmp_path / "bad.episodata-staging").exists()
    with pytest.raises(DatasetStateError):
        Dataset.open(tmp_path / "bad")


def test_an_unknown_field_is_refused(source):
    location, _, _ = source
    with pytest.raises(FieldNotFoundError, match="no field 'observation/nope'"):
        episodata_ray.read_episodes(str(location), fields=["observation/nope"])
