"""The offset-segments exporter against the §5.3 fixtures and their oracles."""

from __future__ import annotations

import json
import shutil
import subprocess
import zipfile
from typing import TYPE_CHECKING

import numpy as np
import pytest
from segments_fixtures import (
    GOLDEN_T,
    K_TINY,
    dataset_from_swm,
    golden_case,
    native_case,
    pusht_case,
    reference_plan,
    spec_content_sha256,
    swm_source,
    swm_tiny_case,
    two_label_case,
)

import episodata
from episodata_segments import ExportReport

if TYPE_CHECKING:
    from pathlib import Path


def _export(datasets, out: Path, **options) -> ExportReport:
    report = episodata.export_datasets("offset-segments", datasets, out, **options)
    assert isinstance(report, ExportReport)
    return report


def _rows(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "manifest.jsonl").read_text().splitlines()]


def _files(out: Path) -> dict[str, bytes]:
    return {
        p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()
    }


def _members(path: Path) -> dict[str, np.ndarray]:
    with np.load(path, allow_pickle=False) as npz:
        return {name: npz[name] for name in npz.files}


def _same(actual: np.ndarray, expected: np.ndarray) -> bool:
    if actual.dtype != expected.dtype or actual.shape != expected.shape:
        return False
    return bool(np.array_equal(actual, expected, equal_nan=actual.dtype.kind == "f"))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    datasets, oracle = swm_tiny_case()
    out = tmp_path_factory.mktemp("tiny") / "archive"
    report = _export(datasets, out, **oracle.options)
    return out, oracle, report


# -- the golden plans (trap 5: sorting or vectorising would change them) -----------------


def test_reference_plan_reproduces_the_golden_values():
    assert reference_plan([3, 5, 2], 3, 2, 42) == [(0, 0), (1, 1)]
    assert reference_plan(list(GOLDEN_T), 25, 3, 42) == [(9, 7), (0, 0), (6, 0)]


def test_golden_plan_is_written_in_draw_order(tmp_path):
    datasets, oracle = golden_case()
    _export(datasets, tmp_path / "out", **oracle.options)
    rows = _rows(tmp_path / "out")
    assert [(r["source_episode"], r["start_step"]) for r in rows] == [(9, 7), (0, 0), (6, 0)]
    # the fixture tells faulty variants apart from the normative algorithm
    golden = [(9, 7), (0, 0), (6, 0)]
    assert _faulty_plan("sorted") != golden
    assert _faulty_plan("interleaved") != golden
    assert _faulty_plan("no_shuffle") != golden
    assert _faulty_plan("bound_T_minus_K") != golden
    assert _faulty_plan("bound_rows") != golden


def _faulty_plan(variant: str) -> list[tuple[int, int]]:
    k, n = 25, 3
    eligible = [e for e, t in enumerate(GOLDEN_T) if t >= k]
    rng = np.random.default_rng(42)
    if variant == "interleaved":
        left, plan = list(eligible), []
        for _ in range(n):
            episode = left.pop(int(rng.choice(len(left))))
            plan.append((episode, int(rng.integers(0, GOLDEN_T[episode] - k + 1))))
        return plan
    picks = rng.choice(len(eligible), size=n, replace=False, shuffle=variant != "no_shuffle")
    chosen = [eligible[int(p)] for p in picks]
    if variant == "sorted":
        chosen.sort()
    extra = {"bound_T_minus_K": 0, "bound_rows": 2}.get(variant, 1)
    return [(e, int(rng.integers(0, max(GOLDEN_T[e] - k + extra, 1)))) for e in chosen]


def test_tiny_plan_and_scalars(tiny):
    out, _oracle, _ = tiny
    rows = _rows(out)
    assert [(r["source_episode"], r["start_step"], r["goal_step"]) for r in rows] == [
        (0, 0, 3),
        (1, 1, 4),
    ]
    assert [r["source_episode_id"] for r in rows] == [7, 8]
    assert [r["source_row_start"] for r in rows] == [0, 5]
    assert [r["source_transitions"] for r in rows] == [3, 5]
    assert [r["nan_counts"] for r in rows] == [
        {"reward": 1, "success": 4},
        {"reward": 0, "success": 4},
    ]
    assert [r["terminated_at_goal"] for r in rows] == [True, False]
    assert [r["truncated_at_goal"] for r in rows] == [False, False]


# -- segment contents against the source slices ------------------------------------------


@pytest.mark.parametrize("case", [swm_tiny_case, golden_case, pusht_case, two_label_case])
def test_every_member_equals_its_source_slice(tmp_path, case):
    datasets, oracle = case()
    out = tmp_path / "out"
    _export(datasets, out, **oracle.options)
    rows = {r["segment_id"]: r for r in _rows(out)}
    assert sorted(rows) == sorted(oracle.segments)
    for segment_id, expected in oracle.segments.items():
        members = _members(out / expected.path)
        assert sorted(members) == sorted(expected.members), segment_id
        for name, value in expected.members.items():
            assert _same(members[name], value), (segment_id, name, members[name], value)
        row = rows[segment_id]
        assert row["path"] == expected.path
        assert row["nan_counts"] == expected.nan_counts
        assert row["content_sha256"] == spec_content_sha256(expected.members)
        assert row["terminated_at_goal"] == expected.terminated_at_goal


def test_tiny_values_match_the_spec_table(tiny):
    out, _, _ = tiny
    first = _members(out / "episodes/toy/episode_000.npz")
    second = _members(out / "episodes/toy/episode_001.npz")
    assert first["state"][:, 0].tolist() == [0, 1, 2, 3]
    assert first["action"].tolist() == [[0, 0], [1, -1], [2, -2]]
    assert np.isnan(first["reward"][0])
    assert first["reward"][1:].tolist() == [100, 200, 300]
    assert first["terminated"].tolist() == [False, False, False, True]
    assert first["step_idx"].tolist() == [0, 1, 2, 3]
    assert first["ep_idx"].tolist() == [7] * 4
    assert second["state"][:, 0].tolist() == [5, 6, 7, 8]
    assert second["action"].tolist() == [[5, -5], [6, -6], [7, -7]]
    assert second["reward"].tolist() == [500, 600, 700, 800]
    assert second["terminated"].tolist() == [False] * 4
    assert second["step_idx"].tolist() == [1, 2, 3, 4]
    assert second["ep_idx"].tolist() == [8] * 4
    assert int(second["start_step"]) == 1
    assert int(second["goal_step"]) == 4


def test_counts_trap_4_k_plus_one_observations_k_actions(tiny):
    out, _, _ = tiny
    for path in sorted((out / "episodes/toy").glob("*.npz")):
        members = _members(path)
        assert len(members["action"]) == K_TINY
        for name in ("pixels", "state", "reward", "step_idx", "success", "segment_step_idx"):
            assert len(members[name]) == K_TINY + 1, name
        assert members["segment_step_idx"].tolist() == list(range(K_TINY + 1))


def test_files_load_without_pickle_and_hold_no_objects(tiny):
    out, _, _ = tiny
    for path in sorted(out.rglob("*.npz")):
        for name, value in _members(path).items():
            assert not value.dtype.hasobject, name
        assert _members(path)["env_name"].dtype == np.dtype("<U3")
        assert _members(path)["env"].shape == ()


def test_layout_and_names(tiny):
    out, _, report = tiny
    assert sorted(_files(out)) == [
        "README.md",
        "SHA256SUMS",
        "build_episodes.py",
        "episodes/toy/episode_000.npz",
        "episodes/toy/episode_001.npz",
        "manifest.json",
        "manifest.jsonl",
    ]
    assert report.files == sorted(_files(out))
    assert not out.with_name("archive.partial").exists()


def test_npz_entries_are_sorted_and_fixed_dated(tiny):
    out, _, _ = tiny
    with zipfile.ZipFile(out / "episodes/toy/episode_000.npz") as archive:
        infos = archive.infolist()
    names = [info.filename for info in infos]
    assert names == sorted(names)
    assert all(n.endswith(".npy") for n in names)
    assert {info.date_time for info in infos} == {(1980, 1, 1, 0, 0, 0)}
    assert {info.compress_type for info in infos} == {zipfile.ZIP_DEFLATED}


def test_manifest_is_canonical_and_has_no_paths_or_times(tiny):
    out, _, _ = tiny
    raw = (out / "manifest.json").read_bytes()
    document = json.loads(raw)
    canonical = json.dumps(document, indent=2, sort_keys=True, ensure_ascii=True, allow_nan=False)
    assert raw == (canonical + "\n").encode()
    assert str(out.parent) not in raw.decode()
    assert document["format"] == "episodata.offset_segments"
    assert document["format_version"] == 1
    assert (document["offset"], document["n_observations"], document["n_actions"]) == (3, 4, 3)
    assert (document["episodes_per_env"], document["segments_total"], document["seed"]) == (
        2,
        2,
        42,
    )
    assert (document["rng"], document["rng_scope"]) == ("numpy.random.default_rng", "per_env")
    assert document["sampling"]["start_draw"] == "integers(0, T-K+1) per episode, draw order"
    assert document["npz"] == {
        "compression": "deflate",
        "member_order": "sorted",
        "zip_timestamp": "1980-01-01T00:00:00",
    }
    assert document["finite_required"] == {"toy": ["action", "state"]}
    env = document["environments"]["toy"]
    assert env["pool"] == {
        "episodes_total": 3,
        "pool_limit": None,
        "pool_size": 3,
        "eligible": 2,
        "excluded_nonfinite": 0,
        "ongoing_skipped": 0,
    }
    assert env["fields"]["action"] == {
        "dtype": "<f4",
        "shape": [2],
        "rows": 3,
        "role": "action",
        "layout": None,
    }
    assert env["fields"]["pixels"]["layout"] == "HWC"
    assert env["fields"]["pixels"]["dtype"] == "|u1"
    assert env["fields"]["terminated"]["role"] == "flag"
    assert env["scalars"]["env"] == {"dtype": "<U3"}
    assert env["reset_reward_fill"] == {"reward": "nan"}
    assert env["nan_totals"] == {"reward": 1, "success": 8}
    assert env["source"]["file"] == "swm-tiny.h5"
    assert [s["segment_id"] for s in env["segments"]] == ["toy/000", "toy/001"]
    for line in (out / "manifest.jsonl").read_text().splitlines(keepends=True):
        row = json.loads(line)
        assert line == json.dumps(row, sort_keys=True, separators=(",", ":")) + "\n"


def test_sha256sums_format_and_coreutils(tiny):
    out, _, _ = tiny
    lines = (out / "SHA256SUMS").read_text().splitlines()
    paths = [line[66:] for line in lines]
    assert paths == sorted(paths, key=str.encode)
    assert "SHA256SUMS" not in paths
    assert len(paths) == len(_files(out)) - 1
    if shutil.which("sha256sum") is None:
        pytest.skip("sha256sum is not installed")
    subprocess.run(["sha256sum", "--quiet", "-c", "SHA256SUMS"], cwd=out, check=True)


def test_script_records_options_and_versions(tiny):
    out, _, _ = tiny
    script = (out / "build_episodes.py").read_text()
    assert "numpy " + np.__version__ in script.splitlines()[2]
    assert '"offset": 3' in script
    assert '"episodes_per_env": 2' in script
    compile(script, "build_episodes.py", "exec")


# -- determinism ----------------------------------------------------------------------------


def test_two_exports_are_byte_identical(tmp_path):
    datasets, oracle = two_label_case()
    _export(datasets, tmp_path / "a", **oracle.options)
    _export(datasets, tmp_path / "b", **oracle.options)
    assert _files(tmp_path / "a") == _files(tmp_path / "b")


def test_a_different_seed_gives_a_different_archive(tmp_path):
    datasets, oracle = golden_case()
    _export(datasets, tmp_path / "a", **oracle.options)
    _export(datasets, tmp_path / "b", **{**oracle.options, "seed": 7})
    plan = [(r["source_episode"], r["start_step"]) for r in _rows(tmp_path / "b")]
    assert plan == reference_plan(list(GOLDEN_T), 25, 3, 7)
    assert plan != [(9, 7), (0, 0), (6, 0)]
    assert (tmp_path / "a/manifest.json").read_bytes() != (
        tmp_path / "b/manifest.json"
    ).read_bytes()


def test_adding_a_label_leaves_the_first_plan_unchanged(tmp_path):
    both, oracle = two_label_case()
    _export({"toy": both["toy"]}, tmp_path / "one", **oracle.options)
    _export(both, tmp_path / "two", **oracle.options)
    one, two = _files(tmp_path / "one"), _files(tmp_path / "two")
    for name in ("episodes/toy/episode_000.npz", "episodes/toy/episode_001.npz"):
        assert one[name] == two[name]
    toy_rows = [r for r in _rows(tmp_path / "two") if r["env"] == "toy"]
    assert toy_rows == _rows(tmp_path / "one")
    assert [r["env"] for r in _rows(tmp_path / "two")] == ["toy", "toy", "zlong", "zlong"]


def test_persistent_source_gives_the_same_segments(tmp_path):
    datasets, oracle = swm_tiny_case()
    stored = datasets["toy"].copy_to(tmp_path / "stored", backend="npz_directory")
    _export(datasets, tmp_path / "memory", **oracle.options)
    _export({"toy": stored}, tmp_path / "disk", **oracle.options)
    stored.close()
    assert _rows(tmp_path / "memory") == _rows(tmp_path / "disk")


# -- options ---------------------------------------------------------------------------------


def test_pool_limit_restricts_the_pool(tmp_path):
    source = swm_source(tuple(t + 1 for t in GOLDEN_T), pixels=2)
    datasets = {"long": dataset_from_swm(source)}
    _export(datasets, tmp_path / "out", offset=25, episodes_per_env=2, pool_limit={"long": 5})
    plan = [(r["source_episode"], r["start_step"]) for r in _rows(tmp_path / "out")]
    assert plan == reference_plan(list(GOLDEN_T), 25, 2, 42, limit=5)
    pool = json.loads((tmp_path / "out/manifest.json").read_text())["environments"]["long"]["pool"]
    assert (pool["pool_limit"], pool["pool_size"], pool["eligible"]) == (5, 5, 4)


def test_pusht_gets_no_flags_and_expands_row_constants(tmp_path):
    datasets, oracle = pusht_case()
    report = _export(datasets, tmp_path / "out", **oracle.options)
    members = _members(tmp_path / "out/episodes/pusht/episode_000.npz")
    assert "terminated" not in members
    assert "truncated" not in members
    assert "reward" not in members
    assert members["env_name"].tolist() == ["pusht"] * 4
    assert members["env_name"].dtype == "<U5"
    assert report.environments["pusht"].flags_written is False
    assert all(not r["terminated_at_goal"] for r in _rows(tmp_path / "out"))


def test_native_dataset_without_import_record(tmp_path):
    datasets, plan = native_case()
    _export(datasets, tmp_path / "out", offset=2, episodes_per_env=3)
    rows = _rows(tmp_path / "out")
    assert [(r["source_episode"], r["start_step"]) for r in rows] == plan
    assert all(r["source_episode_id"] is None and r["source_row_start"] is None for r in rows)
    for row, (episode, start) in zip(rows, plan, strict=True):
        members = _members(tmp_path / "out" / row["path"])
        base = 100 * episode
        rows_ = start + np.arange(3)
        assert members["observation"][:, 0].tolist() == (base + rows_).tolist()
        assert members["action"].tolist() == (base + rows_[1:]).tolist()
        expected = (base + rows_ * 10).astype(np.float32)
        if start == 0:
            expected[0] = np.nan
        assert _same(members["reward"], expected)
        assert "terminated" in members


def test_stored_compression_and_no_script(tmp_path):
    datasets, oracle = swm_tiny_case()
    _export(
        datasets,
        tmp_path / "out",
        **oracle.options,
        compress=False,
        include_script=False,
        readme="hi\n",
    )
    assert not (tmp_path / "out/build_episodes.py").exists()
    assert (tmp_path / "out/README.md").read_text() == "hi\n"
    with zipfile.ZipFile(tmp_path / "out/episodes/toy/episode_000.npz") as archive:
        assert {i.compress_type for i in archive.infolist()} == {zipfile.ZIP_STORED}


def test_overwrite_replaces_an_existing_archive(tmp_path):
    datasets, oracle = swm_tiny_case()
    out = tmp_path / "out"
    out.mkdir()
    (out / "old.txt").write_text("old")
    _export(datasets, out, **oracle.options, overwrite=True)
    assert not (out / "old.txt").exists()
    assert (out / "SHA256SUMS").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_provenance_is_merged_into_the_source(tmp_path):
    datasets, oracle = swm_tiny_case()
    extra = {"toy": {"hf_repo": "someone/toy", "license": "MIT"}}
    _export(datasets, tmp_path / "out", **oracle.options, provenance=extra)
    source = json.loads((tmp_path / "out/manifest.json").read_text())["environments"]["toy"][
        "source"
    ]
    assert source["hf_repo"] == "someone/toy"
    assert source["file"] == "swm-tiny.h5"


def test_nested_keys_keep_their_slash_and_round_trip(tmp_path):
    episodes = []
    for e, t in enumerate([3, 4]):
        rows = np.arange(t + 1) + 10 * e
        episodes.append(
            {
                "initial_observation": {"cam": {"rgb": np.full((4, 4, 3), rows[0], np.uint8)}},
                "observations": {
                    "cam": {
                        "rgb": np.ones((t, 4, 4, 3), np.uint8)
                        * rows[1:, None, None, None].astype(np.uint8)
                    }
                },
                "actions": {"move": np.stack([rows[1:], -rows[1:]], 1).astype(np.float32)},
                "initial_info": {"privileged": {"block_pos": np.full(3, rows[0], np.float64)}},
                "infos": {
                    "privileged": {"block_pos": np.repeat(rows[1:, None], 3, 1).astype(np.float64)}
                },
                "terminated": True,
            }
        )
    dataset = episodata.Dataset.from_episodes(episodes)
    _export({"nested": dataset}, tmp_path / "out", offset=2, episodes_per_env=2)
    members = _members(tmp_path / "out/episodes/nested/episode_000.npz")
    assert {"cam/rgb", "move", "privileged/block_pos"} <= set(members)
    imported, _ = episodata.import_dataset("offset-segments", tmp_path / "out")
    for row, episode in zip(_rows(tmp_path / "out"), imported, strict=True):
        members = _members(tmp_path / "out" / row["path"])
        read = episode.read()
        np.testing.assert_array_equal(read.all_obs["cam"]["rgb"], members["cam/rgb"])
        np.testing.assert_array_equal(read.action["move"], members["move"])
        np.testing.assert_array_equal(
            read.all_infos["privileged/block_pos"], members["privileged/block_pos"]
        )
