"""compat.md "Reads": Episode members, fetch, role mappings, alignment spellings."""

from __future__ import annotations

import numpy as np
import pytest

from episodata import Batch, Dataset, FieldGroup


def episode(n: int = 5) -> dict:
    return {
        "initial_observation": {"state": np.zeros(2, np.float32)},
        "observations": {"state": np.arange(1, n + 1, dtype=np.float32)[:, None].repeat(2, 1)},
        "actions": {
            "move": np.arange(n, dtype=np.float32),
            "keyboard": {"w": np.zeros(n, bool), "jump": np.ones(n, bool)},
        },
        "rewards": np.arange(n, dtype=np.float32),
        "terminated": True,
    }


@pytest.fixture(params=["memory", "npz_directory", "zarr"])
def dataset(request, tmp_path):
    path = None if request.param == "memory" else tmp_path / "ds"
    return Dataset.from_episodes([episode(5), episode(3)], path=path, backend=request.param)


def test_episode_id_and_length(dataset):
    ep = dataset.episode(1)
    assert ep.id == 1 == ep.index
    assert ep.length == 3 == len(ep)


def test_episode_segment_positional_fields(dataset):
    seg = dataset.episode(0).segment(1, 4, ["state"])
    assert seg.fields == ("observation/state",)
    np.testing.assert_array_equal(seg.obs.state[:, 0], [1, 2, 3])


def test_segment_dataset_fetch_is_one_batch(dataset):
    segments = dataset.segments(2)
    batch = segments.fetch([0, 3])
    assert isinstance(batch, Batch)
    assert batch.obs.state.shape == (2, 2, 2)
    np.testing.assert_array_equal(
        batch.obs.state[:, 0, 0], [segments[0].obs.state[0, 0], segments[3].obs.state[0, 0]]
    )


def test_role_without_fields_is_an_empty_mapping(dataset):
    seg = dataset.episode(0).read()
    assert isinstance(seg.info, FieldGroup)
    assert dict(seg.info) == {}
    assert len(seg.next_info) == 0


def test_top_level_role_iterates_full_keys_nested_its_children(dataset):
    seg = dataset.episode(0).read()
    assert list(seg.action) == ["move", "keyboard/w", "keyboard/jump"]
    assert list(seg.action.keyboard) == ["w", "jump"]
    np.testing.assert_array_equal(seg.action["keyboard/jump"], np.ones(5, bool))


@pytest.mark.parametrize("spelling", ["action_out", "action-out"])
def test_alignment_spellings(spelling):
    ep = {"observations": np.arange(4, dtype=np.float32)[:, None], "actions": np.arange(4),
          "final_observation": np.array([9], np.float32)}  # fmt: skip
    ds = Dataset.from_episodes([ep], alignment=spelling)
    np.testing.assert_array_equal(ds.episode(0).read().next_obs[:, 0], [1, 2, 3, 9])
