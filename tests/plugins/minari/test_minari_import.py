"""Minari importer against hand-written fixtures (design notes §5.4) and their oracles."""

from __future__ import annotations

import hashlib
import io
import json

import h5py
import numpy as np
import pytest
from minari_fixtures import (
    TINY_ACTION_SPACE,
    TINY_OBS_SPACE,
    MinariEpisode,
    box,
    dict_case,
    dict_episodes,
    discrete,
    image_case,
    jpeg_bytes,
    oracle,
    tiny,
    tiny_episodes,
    tuple_case,
    tuple_space,
    write_minari,
)

import episodata
from episodata_core.errors import EpisodataImportWarning, FormatError
from episodata_core.testing import assert_dataset_matches, assert_report_matches
from episodata_core.views import FieldGroup
from episodata_minari._layout import field_key
from episodata_minari._source import version_is_known

O, A, R, X = "observation/observation", "action/action", "reward/reward", "info/x"


def _full(read, role: str, key: str) -> np.ndarray:
    """The T + 1 rows of an observation or info field from an episode read."""
    now, following = (
        (read.obs, read.next_obs) if role == "observation" else (read.info, read.next_info)
    )
    first = now[key] if isinstance(now, FieldGroup) else now
    rest = following[key] if isinstance(following, FieldGroup) else following
    return np.concatenate([first[:1], rest])


def test_tiny_rows_are_the_hand_computed_ones(sources):
    dataset, report = episodata.import_dataset("minari", tiny(sources / "hand-v0"))
    # obs x = global row g, action 10g and reward 100g of the step that led to row g
    expected = [
        (range(4), (True, False)),
        (range(4, 9), (False, True)),
        (range(9, 12), (True, True)),
    ]
    assert dataset.num_episodes == 3
    for index, (rows, (terminated, truncated)) in enumerate(expected):
        episode = dataset.episode(index)
        read = episode.read()
        g = np.asarray(rows)
        np.testing.assert_array_equal(read.obs[:, 0], g[:-1].astype(np.float32))
        np.testing.assert_array_equal(read.next_obs[:, 0], g[1:].astype(np.float32))
        np.testing.assert_array_equal(read.action[:, 0], 10 * g[1:].astype(np.float32))
        np.testing.assert_array_equal(read.reward, 100 * g[1:].astype(np.float64))
        np.testing.assert_array_equal(read.info["x"], -g[:-1])  # row 0 is the reset info
        np.testing.assert_array_equal(read.next_info["x"], -g[1:])
        assert (episode.terminated, episode.truncated) == (terminated, truncated)
        # transition pairing: the action and reward describe the step into next_obs
        np.testing.assert_array_equal(read.action[:, 0], 10 * read.next_obs[:, 0])
    assert report.transitions == 9
    assert report.rows_read == 12
    assert report.final_transitions_dropped == 0
    assert report.final_obs_source == {"observations": 3}
    assert report.flag_counts.model_dump() == {
        "terminated": 2,
        "truncated": 2,
        "both": 1,
        "unflagged_end": 0,
    }
    assert report.fields[O].source_key == "observations"
    assert report.fields[X].source_key == "infos/x"


def test_dtypes_are_kept_exactly(sources):
    dataset, _ = episodata.import_dataset("minari", tiny(sources / "dtypes-v0"))
    dtypes = {spec.qualified_key: spec.dtype for spec in dataset.schema}
    assert dtypes == {O: "float32", A: "float32", R: "float64", X: "int64"}
    dataset, _ = episodata.import_dataset("minari", dict_case(sources / "dict-dtypes-v0"))
    specs = {spec.qualified_key: (spec.dtype, spec.shape) for spec in dataset.schema}
    assert specs == {
        "observation/goal/xy": ("float64", (2,)),
        "observation/pos": ("float32", (2,)),
        "action/action": ("int64", ()),
        "reward/reward": ("float32", ()),
        "info/label": ("<U5", ()),  # "row-6"
        "info/state/qpos": ("float64", (3,)),
        "info/success": ("bool", ()),
    }


def test_dict_space_with_nested_infos_matches_the_oracle(sources):
    folder, expected = oracle(dict_episodes(), dict_case(sources / "dict-oracle-v0"))
    dataset, report = episodata.import_dataset("minari", folder)
    assert_dataset_matches(dataset, expected)
    assert_report_matches(report, expected)
    read = dataset.episode(1).read()
    np.testing.assert_array_equal(read.obs["goal"]["xy"][:, 0], np.arange(3, 6) + 0.5)
    np.testing.assert_array_equal(read.info["label"], ["row-3", "row-4", "row-5"])
    np.testing.assert_array_equal(read.next_info["label"], ["row-4", "row-5", "row-6"])
    np.testing.assert_array_equal(read.action, [40, 50, 60])


def test_tuple_members_are_keyed_by_position_in_index_order(tmp_path):
    steps = 2
    members = tuple(np.full(steps + 1, k, dtype=np.int64) for k in range(11))
    episode = MinariEpisode(
        observations=members,
        actions=np.zeros((steps, 1), np.float32),
        rewards=np.zeros(steps),
        terminations=np.asarray([False, True]),
        truncations=np.zeros(steps, bool),
    )
    folder = write_minari(
        tmp_path / "eleven-v0",
        [episode],
        observation_space=tuple_space(*[discrete(20)] * 11),
        action_space=box((1,), "float32"),
    )
    dataset, _ = episodata.import_dataset("minari", folder)
    keys = [spec.key for spec in dataset.schema.by_role("observation")]
    assert keys == [str(k) for k in range(11)]  # _index_10 after _index_9
    read = dataset.episode(0).read()
    for k in range(11):
        np.testing.assert_array_equal(read.next_obs[str(k)], [k, k])
    assert field_key("_index_1/a/_index_0") == "1/a/0"


def test_tuple_actions(sources):
    dataset, _ = episodata.import_dataset("minari", tuple_case(sources / "tuple-actions-v0"))
    read = dataset.episode(0).read()
    np.testing.assert_array_equal(read.action["0"][:, 0], [10, 20, 30])
    np.testing.assert_array_equal(read.action["1"], [10, 20, 30])
    np.testing.assert_array_equal(read.next_obs["1"], [1, 2, 3])
    assert dataset.episode(1).truncated


def test_infos_option_selects_info_fields(sources):
    folder = dict_case(sources / "infos-v0")
    dataset, _ = episodata.import_dataset("minari", folder, infos=False)
    assert not dataset.schema.by_role("info")
    dataset, _ = episodata.import_dataset("minari", folder, infos=["state"])
    assert [spec.key for spec in dataset.schema.by_role("info")] == ["state/qpos"]
    dataset, _ = episodata.import_dataset("minari", folder, infos=["infos/success"])
    assert [spec.key for spec in dataset.schema.by_role("info")] == ["success"]
    with pytest.raises(FormatError, match=r"infos=\['nope'\] names 'nope', which episode_0"):
        episodata.import_dataset("minari", folder, infos=["nope"])


def test_field_names_option(sources):
    folder = tiny(sources / "names-v0")
    names = {"observation": "state", "action": "torque", "reward": "r"}
    dataset, _ = episodata.import_dataset("minari", folder, field_names=names)
    assert dataset.schema.qualified_keys == (
        "observation/state",
        "action/torque",
        "reward/r",
        "info/x",
    )


def test_import_record(sources):
    folder = tiny(sources / "record-v0")
    dataset, report = episodata.import_dataset("minari", folder, hash_source=True)
    (record,) = dataset.manifest.metadata["imports"]
    main = folder / "data" / "main_data.hdf5"
    assert record["format"] == "minari"
    assert record["source"] == {
        "file": "record-v0",
        "bytes": main.stat().st_size,
        "sha256": hashlib.sha256(main.read_bytes()).hexdigest(),
        "dataset_id": "test/record-v0",
        "minari_version": "0.5.1",
        "data_format": "hdf5",
        "total_episodes": 3,
        "total_steps": 9,
        "jpeg_encoding": False,
        "decoded_images": [],
        "jpeg_bytes_kept": [],
    }
    assert record["alignment"] == {"source_convention": "action-out", "converted_at_import": True}
    assert record["episodes"] == {"id": [0, 1, 2], "seed": [11, 12, None]}
    assert record["report"] == report.model_dump(mode="json")


@pytest.mark.parametrize(
    ("version", "known"),
    [
        ("0.4.0", True),
        ("0.5.4", True),
        ("==0.4.3", True),
        ("~=0.4.1", True),
        (">=0.4.0,<0.6", True),
        ("0.3.1", False),
        ("0.5.5", False),
        ("1.0.0", False),
        (">0.5.4", False),
        ("not-a-version", False),
        (None, False),
    ],
)
def test_version_specifiers(version, known):
    assert version_is_known(version) is known


@pytest.mark.parametrize("version", ["0.9.0", None])
def test_unknown_or_missing_version_warns(sources, version):
    folder = tiny(sources / f"version-{version}-v0", minari_version=version)
    if version is None:
        path = folder / "data" / "metadata.json"
        metadata = json.loads(path.read_text())
        del metadata["minari_version"]
        path.write_text(json.dumps(metadata))
    with pytest.warns(EpisodataImportWarning, match=r"unknown_minari_version"):
        dataset, report = episodata.import_dataset("minari", folder)
    assert [w.code for w in report.warnings] == ["unknown_minari_version"]
    assert dataset.num_episodes == 3
    with pytest.raises(FormatError, match=r"strict=True rejects the dataset: unknown_minari"):
        episodata.import_dataset("minari", folder, strict=True)


def test_minari_04_metadata_without_data_format(sources):
    folder = tiny(sources / "v04-v0", minari_version="0.4.3")
    path = folder / "data" / "metadata.json"
    metadata = json.loads(path.read_text())
    del metadata["data_format"], metadata["jpeg_encoding"]
    path.write_text(json.dumps(metadata))
    dataset, _ = episodata.import_dataset("minari", folder)
    assert dataset.num_steps == 9


def test_datasets_without_spaces_use_the_stored_shapes(tmp_path):
    folder = write_minari(
        tmp_path / "nospace-v0", tiny_episodes(), observation_space=None, action_space=None
    )
    dataset, _ = episodata.import_dataset("minari", folder)
    assert dataset.schema[O].shape == (2,)
    assert dataset.num_steps == 9


def test_empty_episode_is_skipped_and_counted(tmp_path):
    episodes = tiny_episodes()
    empty = MinariEpisode(
        observations=np.zeros((1, 2), np.float32),
        actions=np.zeros((0, 1), np.float32),
        rewards=np.zeros(0),
        terminations=np.zeros(0, bool),
        truncations=np.zeros(0, bool),
        infos={"x": np.zeros(1, np.int64)},
        seed=5,
    )
    folder = write_minari(
        tmp_path / "empty-v0",
        [episodes[0], empty, episodes[1]],
        observation_space=TINY_OBS_SPACE,
        action_space=TINY_ACTION_SPACE,
    )
    dataset, report = episodata.import_dataset("minari", folder)
    assert dataset.num_episodes == 2
    assert report.episodes_found == 3
    assert report.episodes_skipped == {"empty": 1}
    assert dataset.manifest.metadata["imports"][0]["episodes"] == {"id": [0, 2], "seed": [11, 12]}
    np.testing.assert_array_equal(dataset.episode(1).read().obs[:, 0], [4, 5, 6, 7])


def test_int_flags_and_n1_rewards_are_squeezed_and_cast(tmp_path):
    episodes = tiny_episodes()
    for episode in episodes:
        episode.terminations = episode.terminations.astype(np.int8)
        episode.rewards = episode.rewards[:, None]
    folder = write_minari(
        tmp_path / "n1-v0",
        episodes,
        observation_space=TINY_OBS_SPACE,
        action_space=TINY_ACTION_SPACE,
    )
    dataset, _ = episodata.import_dataset("minari", folder)
    assert dataset.schema[R].shape == ()
    assert dataset.schema[R].dtype == "float64"
    assert [dataset.episode(i).terminated for i in range(3)] == [True, False, True]
    np.testing.assert_array_equal(dataset.episode(2).read().reward, [1000.0, 1100.0])


def test_sources_other_than_a_dataset_folder(sources, tmp_path):
    folder = tiny(sources / "forms-v0")
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(FormatError, match=r"is a file; the minari importer reads a dataset"):
        episodata.import_dataset("minari", tmp_path / "notes.txt")
    with pytest.raises(FileNotFoundError, match=r"no such file or folder"):
        episodata.import_dataset("minari", tmp_path / "absent")
    via_data, _ = episodata.import_dataset("minari", folder / "data")
    assert via_data.num_steps == 9


@pytest.mark.parametrize("storage", ["vlen", "padded"])
def test_jpeg_images_are_decoded(tmp_path, storage):
    from PIL import Image

    folder, originals = image_case(tmp_path / f"{storage}-v0", storage)
    dataset, _ = episodata.import_dataset("minari", folder, decode_images=True)
    assert dataset.schema[O].shape == (64, 64, 3)
    assert dataset.schema[O].dtype == "uint8"
    (record,) = dataset.manifest.metadata["imports"]
    assert record["source"]["decoded_images"] == ["observations"]
    for index, images in enumerate(originals):
        decoded = _full(dataset.episode(index).read(), "observation", "observation")
        # exactly what Pillow makes of the same bytes ...
        for row, image in enumerate(images):
            reference = np.asarray(Image.open(io.BytesIO(jpeg_bytes(image))))
            np.testing.assert_array_equal(decoded[row], reference)
        # ... and close to the images before encoding (JPEG is lossy)
        difference = np.abs(decoded.astype(np.int16) - images.astype(np.int16))
        assert difference.max() <= 8
        assert difference.mean() < 1.5


def test_raw_images_with_jpeg_encoding_true_are_not_decoded(tmp_path):
    # minari 0.5.4 assumes jpeg_encoding when it is missing; the stored shape decides here
    folder, originals = image_case(tmp_path / "raw-v0", "raw")
    for options in ({}, {"decode_images": True}):
        dataset, _ = episodata.import_dataset("minari", folder, **options)
        for index, images in enumerate(originals):
            full = _full(dataset.episode(index).read(), "observation", "observation")
            np.testing.assert_array_equal(full, images)


def test_string_infos_take_the_longest_width_of_all_episodes(tmp_path):
    episodes = tiny_episodes()
    for position, episode in enumerate(episodes):
        rows = len(episode.rewards) + 1
        episode.infos = {"name": ["a" * (position + 1)] * rows}
    folder = write_minari(
        tmp_path / "strings-v0",
        episodes,
        observation_space=TINY_OBS_SPACE,
        action_space=TINY_ACTION_SPACE,
    )
    dataset, _ = episodata.import_dataset("minari", folder)
    assert dataset.schema["info/name"].dtype == "<U3"
    np.testing.assert_array_equal(dataset.episode(1).read().info["name"], ["aa"] * 4)


def test_the_fixture_is_in_the_minari_layout(sources):
    folder = tiny(sources / "layout-v0")
    with h5py.File(folder / "data" / "main_data.hdf5", "r") as handle:
        assert list(handle) == ["episode_0", "episode_1", "episode_2"]
        group = handle["episode_1"]
        assert dict(group.attrs) == {"id": 1, "seed": 12, "total_steps": 4}
        assert {key: group[key].shape for key in group if key != "infos"} == {
            "observations": (5, 2),
            "actions": (4, 1),
            "rewards": (4,),
            "terminations": (4,),
            "truncations": (4,),
        }
        assert group["infos/x"].shape == (5,)
