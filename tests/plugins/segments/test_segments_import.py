"""The offset-segments importer: round trips, and untrusted (tampered) archives."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
from typing import TYPE_CHECKING

import numpy as np
import pytest
from segments_fixtures import (
    K_TINY,
    dataset_from_swm,
    pusht_case,
    swm_source,
    swm_tiny_case,
    two_label_case,
)

import episodata
import episodata_segments._archive as archive_module
from episodata_core import registry
from episodata_core.errors import (
    EpisodataImportWarning,
    FieldNotFoundError,
    FormatError,
    IntegrityError,
    PluginError,
)

if TYPE_CHECKING:
    from pathlib import Path


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    datasets, oracle = swm_tiny_case()
    out = tmp_path_factory.mktemp("exported") / "archive"
    episodata.export_datasets("offset-segments", datasets, out, **oracle.options)
    return out, datasets, oracle


@pytest.fixture
def archive(exported, tmp_path):
    """A private copy of the exported archive to tamper with."""
    copy = tmp_path / "archive"
    shutil.copytree(exported[0], copy)
    return copy


def _import(source, destination=None, **options):
    return episodata.import_dataset("offset-segments", source, destination, **options)


def _resum(root: Path) -> None:
    """Rewrite SHA256SUMS as a forger would, so later checks are reached."""
    lines = []
    for line in (root / "SHA256SUMS").read_text().splitlines():
        path = line[66:]
        digest = hashlib.sha256((root / path).read_bytes()).hexdigest()
        lines.append(f"{digest}  {path}\n")
    (root / "SHA256SUMS").write_text("".join(lines))


# -- round trips --------------------------------------------------------------------------------


def _flat(value) -> dict:
    return (
        value.flat()
        if hasattr(value, "flat") and not isinstance(value, np.ndarray)
        else {"": value}
    )


def _check_round_trip(dataset, source_datasets, oracle):
    assert dataset.num_episodes == len(oracle.segments)
    k = oracle.options["offset"]
    for position, (segment_id, expected) in enumerate(sorted(oracle.segments.items())):
        label = segment_id.split("/")[0]
        episode = dataset.episode(position)
        assert len(episode) == k
        read = episode.read()
        members = expected.members
        for key in read.buffers:
            role, name = key.split("/", 1)
            value = read.buffers[key]
            if role in ("observation", "info"):
                np.testing.assert_array_equal(value, members[name])
            elif role == "action":
                np.testing.assert_array_equal(value[1:], members[name])
            else:  # reward[0], the arrival at the start, is dropped
                np.testing.assert_array_equal(value[1:], members[name][1:])
        assert episode.terminated == expected.terminated_at_goal
        assert episode.truncated == (not expected.terminated_at_goal or expected.truncated_at_goal)
        # the imported episode reads like the source episode's window s..s+K
        window = (
            source_datasets[label]
            .episode(expected.episode)
            .segment(expected.start, expected.start + k)
        )
        roles = [r for r in ("all_obs", "action", "reward") if r != "reward" or "reward" in members]
        for role in roles:
            mine, theirs = _flat(getattr(read, role)), _flat(getattr(window, role))
            for name, value in theirs.items():
                np.testing.assert_array_equal(mine[name], value)


def test_round_trip_reproduces_each_segment(exported):
    out, datasets, oracle = exported
    dataset, report = _import(out)
    _check_round_trip(dataset, datasets, oracle)
    assert report.episodes_imported == 2
    assert report.transitions == 2 * K_TINY
    assert report.flag_counts.terminated == 1
    assert report.flag_counts.truncated == 1
    assert report.fields["info/segment_step_idx"].role == "info"
    record = dataset.manifest.metadata["imports"][-1]
    assert record["format"] == "offset-segments"
    assert record["episodes"]["segment_id"] == ["toy/000", "toy/001"]
    assert record["episodes"]["source_episode_id"] == [7, 8]
    assert record["episodes"]["goal_row"] == [K_TINY, K_TINY]
    assert record["episodes"]["start_step"] == [0, 1]


def test_round_trip_of_two_labels_and_pusht(tmp_path):
    for case in (two_label_case, pusht_case):
        datasets, oracle = case()
        out = tmp_path / case.__name__
        episodata.export_datasets("offset-segments", datasets, out, **oracle.options)
        dataset, _ = _import(out)
        _check_round_trip(dataset, datasets, oracle)


def test_round_trip_into_a_persistent_backend(exported, tmp_path):
    out, datasets, oracle = exported
    dataset, _ = _import(out, tmp_path / "stored", backend="npz_directory")
    dataset.close()
    reopened = episodata.Dataset.open(tmp_path / "stored", read_only=True)
    _check_round_trip(reopened, datasets, oracle)
    reopened.close()


def test_round_trip_into_zarr_if_available(exported, tmp_path):
    try:
        registry.get_backend("zarr")
    except PluginError as err:  # the zarr backend is written concurrently
        pytest.skip(f"zarr backend unavailable: {err}")
    out, datasets, oracle = exported
    dataset, _ = _import(out, tmp_path / "stored.zarr", backend="zarr")
    _check_round_trip(dataset, datasets, oracle)
    dataset.close()


def test_goal_as_field(exported):
    out, _, _oracle = exported
    dataset, _ = _import(out, goal_as_field=True)
    read = dataset.episode(1).read()
    goal = read.all_infos["goal"]["state"]
    np.testing.assert_array_equal(goal, np.repeat(read.all_obs["state"][-1:], K_TINY + 1, axis=0))
    assert read.all_obs["state"][-1].tolist() == [8, 8]


def test_env_and_field_selection(tmp_path):
    datasets, oracle = two_label_case()
    out = tmp_path / "out"
    episodata.export_datasets("offset-segments", datasets, out, **oracle.options)
    dataset, _ = _import(out, envs=["zlong"], fields=["state", "action"])
    assert dataset.num_episodes == 2
    assert set(dataset.schema.qualified_keys) == {"observation/state", "action/action"}
    with pytest.raises(FormatError, match=r"\['nope'\] are not in the archive"):
        _import(out, envs=["nope"])
    with pytest.raises(FieldNotFoundError, match=r"'nothing' matches no member"):
        _import(out, fields=["nothing"])


def test_environments_with_other_fields_share_a_schema(tmp_path):
    toy, toy_oracle = swm_tiny_case()
    pusht, _ = pusht_case()
    out = tmp_path / "out"
    episodata.export_datasets("offset-segments", {**toy, **pusht}, out, **toy_oracle.options)
    dataset, _ = _import(out)
    assert dataset.schema["reward/reward"].optional
    assert not dataset.schema["action/action"].optional
    assert dataset.num_episodes == 4
    assert dataset.episode(0).read().all_infos["env_name"].tolist() == ["pusht"] * 4
    assert dataset.episode(2).read().all_infos["env_name"].tolist() == ["toy"] * 4
    assert dataset.schema["info/env_name"].dtype == "<U5"  # widened, the only conversion


def test_incompatible_environments_need_envs(tmp_path):
    toy, toy_oracle = swm_tiny_case()
    small = swm_source(pixels=2)
    out = tmp_path / "out"
    datasets = {**toy, "small": dataset_from_swm(small)}
    episodata.export_datasets("offset-segments", datasets, out, **toy_oracle.options)
    with pytest.raises(FormatError, match=r"member 'pixels'.*import them separately with envs"):
        _import(out)
    dataset, _ = _import(out, envs=["toy"])
    assert dataset.num_episodes == 2


# -- untrusted archives ---------------------------------------------------------------------------


def test_flipped_byte_is_found_before_any_load(archive, monkeypatch):
    target = archive / "episodes/toy/episode_000.npz"
    data = bytearray(target.read_bytes())
    data[len(data) // 2] ^= 0x01
    target.write_bytes(bytes(data))
    loads = []
    monkeypatch.setattr(archive_module, "read_npz", lambda *a: loads.append(a))
    with pytest.raises(
        IntegrityError, match=r"'episodes/toy/episode_000.npz' does not match its SHA-256"
    ):
        _import(archive)
    assert loads == []


def test_missing_listed_file(archive):
    (archive / "episodes/toy/episode_001.npz").unlink()
    with pytest.raises(
        IntegrityError, match=r"'episodes/toy/episode_001.npz' is listed in SHA256SUMS but missing"
    ):
        _import(archive)


@pytest.mark.parametrize(
    ("path", "fragment"),
    [
        ("../outside.txt", "not a plain relative path"),
        ("/etc/passwd", "not a plain relative path"),
        ("episodes/../../x", "not a plain relative path"),
        ("episodes\\toy", "not a plain relative path"),
    ],
)
def test_escaping_paths_in_sha256sums_are_refused(archive, path, fragment):
    (archive.parent / "outside.txt").write_text("secret")
    with (archive / "SHA256SUMS").open("a") as handle:
        handle.write(f"{'0' * 64}  {path}\n")
    with pytest.raises(IntegrityError, match=fragment):
        _import(archive)


def test_symlinks_are_refused(archive):
    (archive.parent / "elsewhere.md").write_text("# hi\n")
    (archive / "README.md").unlink()
    os.symlink(archive.parent / "elsewhere.md", archive / "README.md")
    _resum(archive)
    with pytest.raises(IntegrityError, match=r"'README.md' is a symbolic link"):
        _import(archive)


def test_malformed_sha256sums_line(archive):
    (archive / "SHA256SUMS").write_text("not a checksum line\n")
    with pytest.raises(IntegrityError, match=r"SHA256SUMS line 1"):
        _import(archive)


def test_unlisted_file_warns_once(archive):
    (archive / "notes.txt").write_text("extra")
    (archive / "episodes/toy/stray.npz").write_bytes(b"x")
    with pytest.warns(
        EpisodataImportWarning, match=r"unlisted_file: .*'episodes/toy/stray.npz', 'notes.txt'"
    ) as caught:
        dataset, report = _import(archive)
    assert len(caught) == 1
    assert report.warnings[0].code == "unlisted_file"
    assert report.warnings[0].count == 2
    assert dataset.num_episodes == 2
    with pytest.raises(FormatError, match=r"unlisted_file.*strict=True"):
        _import(archive, strict=True)


def test_duplicate_segment_id(archive):
    lines = (archive / "manifest.jsonl").read_text().splitlines(keepends=True)
    lines[1] = lines[1].replace('"toy/001"', '"toy/000"')
    (archive / "manifest.jsonl").write_text("".join(lines))
    _resum(archive)
    with pytest.raises(FormatError, match=r"segment_id 'toy/000' appears twice"):
        _import(archive)


def test_jsonl_line_count_differs_from_segments_total(archive):
    lines = (archive / "manifest.jsonl").read_text().splitlines(keepends=True)
    (archive / "manifest.jsonl").write_text(lines[0])
    _resum(archive)
    with pytest.raises(FormatError, match=r"1 lines, but manifest.json says segments_total=2"):
        _import(archive)


def test_wrong_format_version(archive):
    manifest = json.loads((archive / "manifest.json").read_text())
    manifest["format_version"] = 2
    (archive / "manifest.json").write_text(json.dumps(manifest))
    _resum(archive)
    with pytest.raises(FormatError, match=r"format_version 2 is not 1"):
        _import(archive)


def _rewrite_member(path: Path, name: str, header: dict, payload: bytes) -> None:
    import zipfile

    with zipfile.ZipFile(path) as source:
        entries = {info.filename: source.read(info) for info in source.infolist()}
    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(buffer, header)
    entries[f"{name}.npy"] = buffer.getvalue() + payload
    with zipfile.ZipFile(path, "w") as target:
        for member, data in sorted(entries.items()):
            target.writestr(member, data)


def test_header_bigger_than_manifest_is_refused_before_allocation(archive):
    path = archive / "episodes/toy/episode_000.npz"
    header = {"descr": "|u1", "fortran_order": False, "shape": (10**12, 8, 8, 3)}
    _rewrite_member(path, "pixels", header, b"\0" * 64)
    _resum(archive)
    # allocating the declared 192 TB would raise MemoryError, not FormatError
    with pytest.raises(
        FormatError,
        match=r"header says \|u1\[1000000000000, 8, 8, 3\] but the manifest says \|u1\[4, 8, 8, 3\]",
    ):
        _import(archive)


def test_object_member_never_loads(archive):
    path = archive / "episodes/toy/episode_000.npz"
    header = {"descr": "|O", "fortran_order": False, "shape": (4,)}
    _rewrite_member(path, "env_name", header, b"\x80\x04N.")
    _resum(archive)
    with pytest.raises(FormatError, match=r"member 'env_name'"):
        _import(archive)


def test_content_hash_mismatch(archive):
    path = archive / "episodes/toy/episode_001.npz"
    with np.load(path, allow_pickle=False) as npz:
        arrays = {name: npz[name] for name in npz.files}
    arrays["state"] = arrays["state"] + 1
    np.savez(path, **arrays)
    _resum(archive)
    with pytest.raises(IntegrityError, match=r"content_sha256 does not match"):
        _import(archive)
    dataset, _ = _import(archive, verify="none")  # tests only: no hash checks
    assert dataset.num_episodes == 2
