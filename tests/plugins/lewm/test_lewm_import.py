"""LeWM importer against the fixtures of formats.md §5.2 and their oracles."""

from __future__ import annotations

import functools

import h5py
import numpy as np
import pytest
from tests.fixtures._oracle import import_expecting
from tests.fixtures.hdf5_sources import (
    check_dataset,
    swm_action_in,
    swm_preset,
    swm_pusht_style,
    swm_tiny,
    transitions_pairing,
    write_swm,
)

import episodata
from episodata_core.errors import EpisodataError, FormatError, SchemaError
from episodata_core.registry import get_backend

S, A, R = "observation/state", "action/action", "reward/reward"

FIXTURES = {
    "tiny": (swm_tiny, {}),
    "tiny-blosc": (swm_tiny, {"form": "blosc"}),
    "tiny-chunk1-no-ep_idx": (swm_tiny, {"form": "chunk1"}),
    "tiny-gzip": (swm_tiny, {"form": "gzip"}),
    "pusht-style": (swm_pusht_style, {}),
    "action-in": (swm_action_in, {}),
    "pusht-like": (swm_preset, {"env": "pusht"}),
    "tworoom-like": (swm_preset, {"env": "tworoom"}),
    "reacher-like": (swm_preset, {"env": "reacher"}),
    "cube-like": (swm_preset, {"env": "cube"}),
}


_import = functools.partial(import_expecting, "lewm")


@pytest.mark.parametrize("name", FIXTURES)
def test_fixture_matches_its_oracle(sources, name):
    builder, kwargs = FIXTURES[name]
    path, oracle = builder(sources, **kwargs)
    dataset, report = _import(path, **oracle.options)
    check_dataset(dataset, report, oracle)


@pytest.mark.slow
@pytest.mark.parametrize("env", ["pusht", "tworoom", "reacher", "cube"])
def test_presets_with_224_pixels(tmp_path, env):
    path, oracle = swm_preset(tmp_path, env, size=224)
    dataset, report = _import(path, read_budget_bytes=4 << 20)
    check_dataset(dataset, report, oracle)


def test_tiny_reads_the_spec_table(sources):
    path, _ = swm_tiny(sources)
    dataset, report = _import(path)
    episodes = [dataset.episode(i).read().buffers for i in range(3)]
    assert episodes[0][S][:, 0].tolist() == [0, 1, 2, 3]
    assert episodes[0][A][1:].tolist() == [[0, 0], [1, -1], [2, -2]]
    assert episodes[1][A][1:, 0].tolist() == [4, 5, 6, 7, 8]
    assert episodes[2][A][1:, 0].tolist() == [10, 11]
    assert [e[R][1:].tolist() for e in episodes] == [
        [100, 200, 300],
        [500, 600, 700, 800, 900],
        [1100, 1200],
    ]
    assert [(e.terminated, e.truncated) for e in dataset] == [
        (True, False),
        (False, True),
        (False, True),
    ]
    assert episodes[1]["observation/pixels"][:, 0, 0, 0].tolist() == [4, 5, 6, 7, 8, 9]
    assert report.transitions == 10
    record = dataset.manifest.metadata["imports"][0]
    assert record["episodes"]["source_episode_id"] == [7, 8, 9]
    assert record["episodes"]["end_reason"] == ["terminated", "truncated", "unflagged"]


def test_trap2_the_reward_is_not_shifted_with_the_action(sources):
    path, _ = swm_tiny(sources)
    dataset, _ = _import(path)
    segment = dataset.episode(0).read()
    # a shifted reward would read NaN, 100, 200; actions read as action-in put NaN in row 1
    assert segment.reward.tolist() == [100, 200, 300]
    assert np.isfinite(segment.action).all()


def test_transitions_pair_the_source_rows(sources):
    path, _ = swm_tiny(sources)
    dataset, _ = _import(path)
    with h5py.File(path) as handle:
        state, action, reward = (handle[k][()] for k in ("state", "action", "reward"))
    for episode, (g, n) in zip(dataset, [(0, 4), (4, 6), (10, 3)], strict=True):
        segment = episode.read()
        obs, act, next_obs = transitions_pairing(segment, S, A)
        np.testing.assert_array_equal(obs, state[g : g + n - 1])
        np.testing.assert_array_equal(act, action[g : g + n - 1])  # taken at obs
        np.testing.assert_array_equal(next_obs, state[g + 1 : g + n])
        np.testing.assert_array_equal(segment.reward, reward[g + 1 : g + n])  # of arriving


def test_action_in_files_are_detected(sources):
    path, _ = swm_action_in(sources)
    dataset, _ = _import(path)
    source = dataset.manifest.metadata["imports"][0]["source"]
    assert source["action_alignment"] == "in"
    assert not source["action_alignment_assumed"]
    assert dataset.episode(0).read().action[:, 0].tolist() == [1, 2, 3]
    tiny, _ = swm_tiny(sources)
    with pytest.raises(FormatError, match="NaN action at row 3 inside episode 0"):
        _import(tiny, action_alignment="in")


def test_pusht_style_files_count_dangling_actions(sources):
    path, _ = swm_pusht_style(sources)
    dataset, report = _import(path)
    assert report.dangling_actions == 3
    assert "dangling last-row actions dropped: 3" in report.summary()
    assert all(e.truncated and not e.terminated for e in dataset)
    source = dataset.manifest.metadata["imports"][0]["source"]
    assert (source["action_alignment"], source["action_alignment_assumed"]) == ("out", True)
    assert "reward/reward" not in dataset.schema
    unflagged, _ = _import(path, missing_flags="none")
    assert not any(e.truncated or e.terminated for e in unflagged)


def test_strings_become_fixed_width_fields(sources):
    path, _ = swm_tiny(sources)
    dataset, _ = _import(path)
    assert dataset.schema["info/env_name"].dtype == "<U3"
    assert dataset.episode(2).read().buffers["info/env_name"].tolist() == ["toy"] * 3


def test_strings_as_episode_metadata_or_dropped(sources, tmp_path):
    path, _ = swm_tiny(sources)
    dataset, _ = _import(path, strings="episode_metadata")
    assert "info/env_name" not in dataset.schema
    record = dataset.manifest.metadata["imports"][0]
    assert record["episodes"]["env_name"] == ["toy", "toy", "toy"]
    assert record["source"]["row_constant_columns"] == ["env_name"]
    dropped, _ = _import(path, strings="drop")
    assert "info/env_name" not in dropped.schema
    assert "env_name" not in dropped.manifest.metadata["imports"][0]["episodes"]
    varying = tmp_path / "varying.h5"
    with h5py.File(path) as src, h5py.File(varying, "w") as dst:
        for key in src:
            src.copy(key, dst)
        dst["env_name"][5] = "other"
    with pytest.raises(FormatError, match=r"'env_name' changes within an episode.*row 5"):
        _import(varying, strings="episode_metadata")


def test_episode_selection(sources):
    path, _ = swm_tiny(sources)
    for selection, positions in [(2, [0, 1]), (slice(1, None), [1, 2]), ([2, 0, 2], [0, 2])]:
        dataset, report = _import(path, episodes=selection)
        record = dataset.manifest.metadata["imports"][0]
        assert record["episodes"]["source_episode"] == positions
        assert report.episodes_skipped == {"not_selected": 3 - len(positions)}
    assert record["options"]["episodes"] == [2, 0, 2]
    with pytest.raises(FormatError, match=r"episodes=\[5\] are outside the file's 3"):
        _import(path, episodes=[0, 5])


def test_columns_and_exclude_project_fields(sources):
    path, _ = swm_tiny(sources)
    dataset, _ = _import(path, columns=["state"])
    assert [s.qualified_key for s in dataset.schema] == [S, A]
    assert dataset.episode(0).terminated  # flags are no fields: still read
    dataset, _ = _import(path, exclude=["pixels", "terminated", "truncated"])
    assert "observation/pixels" not in dataset.schema
    assert all(e.truncated and not e.terminated for e in dataset)  # flags now absent
    with pytest.raises(FormatError, match=r"columns=\['nope'\] are not in the file"):
        _import(path, columns=["nope"])


def test_roles_override_the_defaults(sources):
    path, _ = swm_tiny(sources)
    # NaN diagnostics are fine as info; as an observation they are reported
    dataset, _ = _import(path, roles={"success": "observation"}, expect_warnings=["non_finite"])
    assert "observation/success" in dataset.schema
    with pytest.raises(SchemaError, match="roles cannot override"):
        _import(path, roles={"action": "info"})


def test_index_column_options(sources):
    path, _ = swm_tiny(sources)
    dataset, _ = _import(path, index_column=None)
    assert dataset.manifest.metadata["imports"][0]["episodes"]["source_episode_id"] == [None] * 3
    with pytest.raises(FormatError, match="index_column='episode_idx' is not a column"):
        _import(path, index_column="episode_idx")


def test_validate_structure_skips_the_row_rules(tmp_path):
    path, _ = swm_tiny(tmp_path)
    with h5py.File(path, "a") as handle:
        handle["step_idx"][5] = 7
    with pytest.raises(FormatError, match="'step_idx' is not 0, 1"):
        _import(path)
    dataset, _ = _import(path, validate="structure")
    assert len(dataset) == 3


def test_reward_on_the_reset_row_warns(tmp_path):
    path, _ = swm_tiny(tmp_path)
    with h5py.File(path, "a") as handle:
        handle["reward"][4] = 1.0
    _, report = _import(path, expect_warnings=["reward_row0_not_nan"])
    assert report.warnings[0].count == 1
    with pytest.raises(FormatError, match="reward_row0_not_nan"):
        _import(path, strict=True)


def test_non_finite_observations_warn(tmp_path):
    path, _ = swm_tiny(tmp_path)
    with h5py.File(path, "a") as handle:
        handle["state"][2] = [np.inf, np.nan]
    _, report = _import(path, expect_warnings=["non_finite"])
    assert report.warnings[0].count == 2


def test_groups_and_scalars_are_ignored_with_a_warning(tmp_path):
    path, oracle = swm_tiny(tmp_path)
    with h5py.File(path, "a") as handle:
        handle.create_group("attrs_group")
        handle["version"] = 5
    oracle.warnings = frozenset({"ignored_key"})
    dataset, report = _import(path, expect_warnings=["ignored_key"])
    check_dataset(dataset, report, oracle)


def test_dtypes_are_kept_exactly(tmp_path):
    lengths = [3, 4]
    arrays = {
        "ep_len": np.array(lengths, dtype=np.int64),
        "ep_offset": np.array([0, 3], dtype=np.int32),
        "action": np.arange(7, dtype=np.int64).reshape(7, 1),  # integers: never NaN
        "reward": np.arange(7, dtype=np.float32).reshape(7, 1),
        "terminated": np.zeros((7, 1), dtype=np.uint8),
        "proprio": np.arange(14, dtype=np.float16).reshape(7, 2),
        "success": np.zeros(7, dtype=bool),
        "tag": np.array([b"ab"] * 7, dtype="S2"),
    }
    arrays["reward"][[0, 3]] = np.nan
    path = write_swm(tmp_path / "dtypes.h5", arrays)
    dataset, report = _import(path)
    assert {s.qualified_key: s.dtype for s in dataset.schema} == {
        "observation/proprio": "float16",
        A: "int64",
        R: "float32",
        "info/success": "bool",
        "info/tag": "|S2",
    }
    assert dataset.schema[R].shape == ()
    assert report.dangling_actions == 2  # integer last-row actions are finite


def test_metadata_record(sources):
    path, _ = swm_tiny(sources, form="blosc")
    dataset, report = _import(path)
    (record,) = dataset.manifest.metadata["imports"]
    assert record["format"] == "lewm"
    assert record["source"]["file"] == path.name
    assert record["source"]["sha256"] is None
    assert record["source"]["filters"]["pixels"] == ["blosc"]
    assert record["source"]["flags_present"] == ["terminated", "truncated"]
    assert record["source"]["reward_present"] is True
    assert record["alignment"] == {"source_convention": "action-out", "converted_at_import": True}
    assert record["options"]["validate"] == "full"
    assert record["report"] == report.model_dump(mode="json")
    assert record["episodes"]["source_id"] == [None] * 3
    assert report.fields["observation/pixels"].shape == (8, 8, 3)
    pixels = dataset.schema["observation/pixels"]
    assert (pixels.layout, pixels.low, pixels.high) == ("HWC", 0, 255)


def test_cube_like_records_ids(sources):
    path, _ = swm_preset(sources, "cube")
    dataset, _ = _import(path)
    episodes = dataset.manifest.metadata["imports"][0]["episodes"]
    assert episodes["source_id"] == [9_000_000_000, 9_000_000_007, 9_000_000_014]
    assert dataset.schema["info/env_name"].dtype == "<U11"


def test_one_row_episodes_are_skipped_as_empty(tmp_path):
    arrays = {
        "ep_len": np.array([2, 1, 3], dtype=np.int32),
        "ep_offset": np.array([0, 2, 3], dtype=np.int64),
        "action": np.array([[0], [np.nan], [np.nan], [3], [4], [np.nan]], dtype=np.float32),
    }
    dataset, report = _import(write_swm(tmp_path / "short.h5", arrays))
    assert report.episodes_skipped == {"empty": 1}
    assert [len(e) for e in dataset] == [1, 2]


def test_append_twice_records_two_imports(sources):
    path, oracle = swm_tiny(sources)
    dataset, _ = _import(path)
    _, report = _import(path, dataset)
    check_dataset(dataset, report, oracle, first=3)
    records = dataset.manifest.metadata["imports"]
    assert [(r["first_episode_id"], r["episode_count"]) for r in records] == [(0, 3), (3, 3)]


@pytest.mark.parametrize("backend", ["zarr", "npz_directory"])
def test_import_to_a_path_and_open_it_again(sources, tmp_path, backend):
    try:
        get_backend(backend)
    except EpisodataError as err:
        pytest.skip(f"backend {backend!r} is not usable here: {err}")
    path, oracle = swm_tiny(sources, form="blosc")
    dataset, report = episodata.import_dataset("lewm", path, tmp_path / "out", backend=backend)
    check_dataset(dataset, report, oracle)
    dataset.close()
    check_dataset(episodata.Dataset.open(tmp_path / "out"), report, oracle)
