"""D4RL importer against the fixtures of formats.md §5.1 and their oracles."""

from __future__ import annotations

import functools
import hashlib

import h5py
import numpy as np
import pytest
from tests.fixtures._oracle import import_expecting
from tests.fixtures.hdf5_sources import (
    TINY_METADATA,
    antmaze_like,
    check_dataset,
    d4rl_tiny,
    d4rl_v0,
    maze2d_like,
    transitions_pairing,
    write_h5,
)

import episodata
from episodata_core.errors import EpisodataError, FormatError
from episodata_core.registry import get_backend

O, A, R = "observation/observation", "action/action", "reward/reward"

FIXTURES = {
    "tiny-A": (d4rl_tiny, {}),
    "tiny-B": (d4rl_tiny, {"case": "B"}),
    "tiny-A-timeout-at-3": (d4rl_tiny, {"timeout_at_3": True}),
    "tiny-B-timeout-at-3": (d4rl_tiny, {"case": "B", "timeout_at_3": True}),
    "v0-step-limit-4": (d4rl_v0, {}),
    "v0-no-step-limit": (d4rl_v0, {"max_episode_steps": None}),
    "maze2d-like": (maze2d_like, {}),
    "maze2d-like-generic": (maze2d_like, {"profile": "generic"}),
    "antmaze-like": (antmaze_like, {}),
    "antmaze-like-generic": (antmaze_like, {"profile": "generic"}),
}


_import = functools.partial(import_expecting, "d4rl")


@pytest.mark.parametrize("name", FIXTURES)
def test_fixture_matches_its_oracle(sources, name):
    builder, kwargs = FIXTURES[name]
    path, oracle = builder(sources, **kwargs)
    dataset, report = _import(path, **oracle.options, expect_warnings=sorted(oracle.warnings))
    check_dataset(dataset, report, oracle)


def test_tiny_case_a_reads_the_spec_table(sources):
    path, _ = d4rl_tiny(sources)
    dataset, report = _import(path)
    first = dataset.episode(0).read().buffers
    assert first[O][:, 0].tolist() == [0, 1, 2, 3, 1003]
    assert first[A][1:, 0].tolist() == [0, 10, 20, 30]
    assert first[R][1:].tolist() == [0, 100, 200, 300]
    assert np.array_equal(first["info/qpos"][:, 0], [0, 1, 2, 3, np.nan], equal_nan=True)
    assert first["info/info_valid"].tolist() == [True, True, True, True, False]
    assert dataset.episode(1).read().buffers[O][:, 0].tolist() == [4, 5, 6, 7, 8, 1008]
    assert dataset.episode(2).read().buffers[O][:, 0].tolist() == [9, 10, 11, 1011]
    flags = [(e.terminated, e.truncated) for e in dataset]
    assert flags == [(True, False), (False, True), (False, True)]
    assert report.transitions == 12
    assert report.final_transitions_dropped == 0
    record = dataset.manifest.metadata["imports"][0]
    assert record["episodes"]["end_reason"] == ["terminal", "timeout", "file_end"]


def test_tiny_case_b_reads_the_spec_table(sources):
    path, _ = d4rl_tiny(sources, case="B")
    dataset, report = _import(path)
    buffers = [dataset.episode(i).read().buffers for i in range(3)]
    assert [b[O][:, 0].tolist() for b in buffers] == [[0, 1, 2, 3], [4, 5, 6, 7, 8], [9, 10, 11]]
    assert [b[A][1:, 0].tolist() for b in buffers] == [[0, 10, 20], [40, 50, 60, 70], [90, 100]]
    assert "info/info_valid" not in buffers[0]
    assert (report.transitions, report.final_transitions_dropped) == (9, 3)
    assert report.final_obs_source == {"dropped": 3}
    record = dataset.manifest.metadata["imports"][0]
    assert record["episodes"]["source_terminated"] == [True, False, False]


def test_trap1_the_next_episodes_reset_is_never_a_final_observation(sources):
    # formats.md §6 trap 1: without next_observations, observations[e + 1] is the next
    # episode's reset row; a D4RL-style qlearning conversion would use it
    path, _ = d4rl_tiny(sources, case="B")
    dataset, _ = _import(path)
    for episode, (s, e) in zip(dataset, [(0, 3), (4, 8), (9, 11)], strict=True):
        segment = episode.read()
        assert segment.buffers[O][:, 0].tolist() == list(range(s, e + 1))
        assert segment.next_obs[-1, 0] == e  # not e + 1


def test_use_next_observations_false_gives_case_b(sources):
    path_a, _ = d4rl_tiny(sources)
    _, oracle_b = d4rl_tiny(sources, case="B")
    dataset, report = _import(path_a, use_next_observations=False)
    oracle_b.source = {}
    check_dataset(dataset, report, oracle_b)


def test_trap3_an_episode_that_lost_its_last_step_is_not_terminated(sources):
    path, _ = d4rl_tiny(sources, case="B")
    dataset, report = _import(path)
    first = dataset.episode(0)
    # terminals[3] is True in the source, but o_3 is not the terminal observation
    assert (first.terminated, first.truncated) == (False, True)
    assert report.flag_counts.terminated == 0


def test_transitions_pair_the_source_rows(sources):
    path, _ = d4rl_tiny(sources)
    dataset, _ = _import(path)
    with h5py.File(path) as handle:
        source = {k: handle[k][()] for k in ("observations", "actions", "next_observations")}
    for episode, (s, e) in zip(dataset, [(0, 3), (4, 8), (9, 11)], strict=True):
        obs, action, next_obs = transitions_pairing(episode.read(), O, A)
        np.testing.assert_array_equal(obs, source["observations"][s : e + 1])
        np.testing.assert_array_equal(action, source["actions"][s : e + 1])
        np.testing.assert_array_equal(next_obs, source["next_observations"][s : e + 1])


def test_terminal_and_timeout_on_one_row_keep_both_flags(sources):
    path, _ = d4rl_tiny(sources, timeout_at_3=True)
    dataset, report = _import(path)
    assert (dataset.episode(0).terminated, dataset.episode(0).truncated) == (True, True)
    assert report.flag_counts.both == 1


def test_v0_squeezes_n1_columns_and_casts_float_flags(sources):
    path, _ = d4rl_v0(sources)
    dataset, _ = _import(path, max_episode_steps=4)
    assert dataset.schema["reward/reward"].shape == ()
    assert dataset.episode(0).read().buffers[R].shape == (4,)
    source = dataset.manifest.metadata["imports"][0]["source"]
    assert source["squeezed"] == {"rewards": [10, 1], "terminals": [10, 1]}
    assert source["timeouts"] is False
    assert source["next_observations"] is None


def test_dtypes_are_kept_exactly(tmp_path):
    n = 6
    terminals = np.zeros(n, dtype=np.uint8)
    terminals[2] = 1
    path = write_h5(
        tmp_path / "dtypes.hdf5",
        {
            "observations": np.arange(2 * n, dtype=np.float64).reshape(n, 2),
            "actions": np.arange(n, dtype=np.int16).reshape(n, 1),
            "rewards": np.arange(n, dtype=np.float16),
            "terminals": terminals,
            "next_observations": np.arange(2, 2 * n + 2, dtype=np.float64).reshape(n, 2),
            "timeouts": np.zeros(n, dtype=bool),
            "infos/count": np.arange(n, dtype=np.uint8),
            "infos/flag": np.arange(n) % 2 == 0,
            "infos/name": np.array([b"ab", b"c", b"", b"d", b"e", b"f"], dtype="S2"),
        },
    )
    with h5py.File(path, "a") as handle:
        handle.create_dataset(
            "infos/label",
            data=["x", "yyy", "z", "", "w", "v"],
            dtype=h5py.string_dtype(),
        )
    dataset, _ = _import(path)
    dtypes = {spec.qualified_key: spec.dtype for spec in dataset.schema}
    assert dtypes == {
        O: "float64",
        A: "int16",
        R: "float16",
        "info/count": "uint8",
        "info/flag": "bool",
        "info/label": "<U3",
        "info/name": "|S2",
        "info/info_valid": "bool",
    }
    first = dataset.episode(0).read().buffers
    assert first["info/label"].tolist() == ["x", "yyy", "z", ""]  # the unknown row is ""
    assert first["info/count"].tolist() == [0, 1, 2, 0]  # ... and 0 for integers
    assert first["info/flag"].tolist() == [True, False, True, False]


def test_metadata_record(sources):
    path, _ = d4rl_tiny(sources)
    dataset, report = _import(path)
    (record,) = dataset.manifest.metadata["imports"]
    assert record["format"] == "d4rl"
    assert record["source"]["file"] == path.name
    assert record["source"]["bytes"] == path.stat().st_size
    assert record["source"]["sha256"] is None
    assert record["source"]["metadata"] == TINY_METADATA  # 64 elements: not over the limit
    assert record["source"]["known_issues"] == []
    assert record["alignment"] == {"source_convention": "action-out", "converted_at_import": True}
    assert record["options"]["profile"] == "generic"
    assert record["report"] == report.model_dump(mode="json")
    assert record["report"]["end_reasons"] == {"file_end": 1, "terminal": 1, "timeout": 1}
    assert (record["first_episode_id"], record["episode_count"]) == (0, 3)
    assert record["episodes"] == {
        "source_episode": [0, 1, 2],
        "source_row_start": [0, 4, 9],
        "source_rows": [4, 5, 3],
        "end_reason": ["terminal", "timeout", "file_end"],
        "final_obs_source": ["next_observations"] * 3,
        "source_terminated": [True, False, False],
        "source_truncated": [False, True, True],
    }
    assert report.fields["info/qpos"].source_key == "infos/qpos"
    assert "end reasons: file_end 1, terminal 1, timeout 1" in report.summary()


def test_hash_source_records_the_sha256(sources):
    path, _ = d4rl_tiny(sources)
    dataset, _ = _import(path, hash_source=True)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    assert dataset.manifest.metadata["imports"][0]["source"]["sha256"] == digest


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("summary", {"shape": [9, 9], "dtype": "float32", "omitted": True}),
        ("keep", np.ones((9, 9)).tolist()),
        ("drop", None),
    ],
)
def test_metadata_arrays_over_64_elements(tmp_path, mode, expected):
    path, _ = d4rl_tiny(tmp_path)
    with h5py.File(path, "a") as handle:
        handle["metadata/policy/fc1/weight"] = np.ones((9, 9), dtype=np.float32)
        handle["metadata/nan"] = np.float64("nan")
    dataset, _ = _import(path, metadata_arrays=mode)
    metadata = dataset.manifest.metadata["imports"][0]["source"]["metadata"]
    assert metadata.get("policy/fc1/weight") == expected
    assert metadata["nan"] == "nan"
    assert metadata["algorithm"] == "SAC"


def test_infos_option_selects_info_fields(sources):
    path, _ = d4rl_tiny(sources)
    none, _ = _import(path, infos=False)
    assert none.schema.by_role("info") == ()  # no info fields, so no info_valid either
    some, _ = _import(path, infos=["infos/qpos"])
    assert [s.key for s in some.schema.by_role("info")] == ["qpos", "info_valid"]
    with pytest.raises(FormatError, match=r"names 'goal', which is not below infos/"):
        _import(path, infos=["goal"])


def test_extra_keys_become_info_fields_or_are_ignored(tmp_path):
    path, _ = d4rl_tiny(tmp_path)
    with h5py.File(path, "a") as handle:
        handle["success"] = np.arange(12) % 3 == 0
        handle["scalar_note"] = 5
    dataset, _ = _import(path, expect_warnings=["extra_key", "ignored_key"])
    assert dataset.schema["info/success"].dtype == "bool"
    assert dataset.episode(1).read().buffers["info/success"][:5].tolist() == [
        False,
        False,
        True,
        False,
        False,
    ]
    ignored, _ = _import(path, extra_keys="ignore", expect_warnings=["ignored_key"])
    assert "info/success" not in ignored.schema


def test_keep_final_partial_false_skips_the_unflagged_last_episode(sources):
    path, _ = d4rl_tiny(sources)
    dataset, report = _import(path, keep_final_partial=False)
    assert len(dataset) == 2
    assert report.episodes_skipped == {"final_partial": 1}
    assert (report.episodes_found, report.episodes_imported, report.transitions) == (3, 2, 9)


def test_min_transitions_skips_short_episodes(sources):
    path, _ = d4rl_tiny(sources, case="B")
    dataset, report = _import(path, min_transitions=3)
    assert [len(e) for e in dataset] == [3, 4]
    assert report.episodes_skipped == {"too_short": 1}
    assert dataset.manifest.metadata["imports"][0]["episodes"]["source_episode"] == [0, 1]


def test_a_one_row_episode_without_next_observations_is_skipped_as_empty(tmp_path):
    n = 5
    terminals = np.array([False, True, True, False, False])  # rows 2..2 form one-row episode
    path = write_h5(
        tmp_path / "short.hdf5",
        {
            "observations": np.arange(n, dtype=np.float32).reshape(n, 1),
            "actions": np.zeros((n, 1), np.float32),
            "rewards": np.zeros(n, np.float32),
            "terminals": terminals,
            "timeouts": np.zeros(n, bool),
        },
    )
    dataset, report = _import(path)
    assert report.episodes_skipped == {"empty": 1}
    assert [len(e) for e in dataset] == [1, 1]


def test_field_names(sources):
    path, _ = d4rl_tiny(sources)
    dataset, _ = _import(path, field_names={"observation": "state", "action": "torque"})
    keys = [spec.qualified_key for spec in dataset.schema][:3]
    assert keys == ["observation/state", "action/torque", "reward/reward"]


def _no_timeouts_file(tmp_path, jump_at=(2,)):
    n = 8
    obs = np.array([[i] for i in range(n)], dtype=np.float32)
    successor = np.array([[i + 1] for i in range(n)], dtype=np.float32)
    for row in jump_at:
        successor[row] = [100 + row]
    return write_h5(
        tmp_path / "replay.hdf5",
        {
            "observations": obs,
            "actions": np.zeros((n, 1), np.float32),
            "rewards": np.zeros(n, np.float32),
            "terminals": np.zeros(n, bool),
            "next_observations": successor,
        },
    )


def test_next_obs_mismatch_splits_files_without_timeouts(tmp_path):
    path = _no_timeouts_file(tmp_path)
    dataset, _ = _import(path)
    assert [len(e) for e in dataset] == [3, 5]
    reasons = dataset.manifest.metadata["imports"][0]["episodes"]["end_reason"]
    assert reasons == ["next_obs_mismatch", "file_end"]
    assert dataset.episode(0).truncated
    assert dataset.episode(0).read().next_obs[-1, 0] == 102


def test_next_obs_mismatch_disabled_warns_about_discontinuities(tmp_path):
    path = _no_timeouts_file(tmp_path)
    dataset, report = _import(
        path,
        split_on_next_obs_mismatch=False,
        expect_warnings=["unflagged_discontinuity", "no_timeouts"],
    )
    assert [len(e) for e in dataset] == [8]
    assert report.warnings[0].count == 1


def test_next_obs_atol_tolerates_small_differences(tmp_path):
    path = _no_timeouts_file(tmp_path, jump_at=())
    with h5py.File(path, "a") as handle:
        handle["next_observations"][4] = [5.001]
    assert len(_import(path)[0]) == 2
    assert len(_import(path, next_obs_atol=0.01)[0]) == 1


def test_strict_turns_warnings_into_errors_before_writing(sources):
    path, _ = maze2d_like(sources, profile="generic")
    target = episodata.Dataset.create(_import(path, profile="maze2d")[0].schema)
    with pytest.raises(FormatError, match="maze_like_file"):
        _import(path, target, profile="generic", strict=True)
    assert len(target) == 0


def test_maze2d_ignores_terminals_with_a_warning(tmp_path):
    path, _ = maze2d_like(tmp_path)
    with h5py.File(path, "a") as handle:
        handle["terminals"][5] = True
    dataset, _ = _import(path, profile="maze2d", expect_warnings=["maze2d_terminals"])
    assert [len(e) for e in dataset] == [4, 3, 2]
    assert not any(e.terminated for e in dataset)
    record = dataset.manifest.metadata["imports"][0]
    assert "issue #194" in record["source"]["known_issues"][0]


def test_antmaze_keeps_terminals_as_info(sources):
    path, _ = antmaze_like(sources)
    dataset, _ = _import(path, profile="antmaze")
    raw = [False, False, True, False, False, False, False, True, False, False]
    stored = [dataset.episode(i).read().buffers["info/terminals"] for i in range(3)]
    assert np.concatenate(stored).tolist() == raw
    assert "issue #77" in dataset.manifest.metadata["imports"][0]["source"]["known_issues"][0]


def test_small_read_budget_gives_the_same_episodes(sources, monkeypatch):
    from episodata_d4rl import _impl

    path, oracle = d4rl_tiny(sources)
    monkeypatch.setattr(_impl, "READ_BUDGET_BYTES", 40)  # a few rows per read
    dataset, report = _import(path)
    check_dataset(dataset, report, oracle)


def test_observation_key(tmp_path):
    path, _ = d4rl_tiny(tmp_path, case="B")
    with h5py.File(path, "a") as handle:
        handle["state"] = handle["observations"][()] * 2
    dataset, _ = _import(path, observation_key="state", expect_warnings=["extra_key"])
    assert dataset.episode(0).read().buffers[O][:, 0].tolist() == [0, 2, 4, 6]
    assert dataset.schema["info/observations"].shape == (2,)


def test_append_twice_records_two_imports(sources):
    path, oracle = d4rl_tiny(sources)
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
    path, oracle = d4rl_tiny(sources)
    dataset, report = episodata.import_dataset("d4rl", path, tmp_path / "out", backend=backend)
    check_dataset(dataset, report, oracle)
    dataset.close()
    check_dataset(episodata.Dataset.open(tmp_path / "out"), report, oracle)
